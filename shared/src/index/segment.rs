//! The immutable segment format: a header, the records as JSON, then the
//! vectors as little-endian `f32`, one row per record.
//!
//! ```text
//! "SKSEG1\n" | dim: u32 | count: u32 | json_len: u32 | json | count × dim × f32
//! ```
//! The JSON is `{"records": [Record…], "tombstones": [{"uri", "level"}…]}`.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use std::sync::OnceLock;

use super::IndexError;
use super::lexical::Postings;
use super::record::{Level, Record};
use crate::uri::VikingUri;

const MAGIC: &[u8; 7] = b"SKSEG1\n";
const HEADER: usize = MAGIC.len() + 12;

/// A (uri, level) pair that a later segment removes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tombstone {
    /// The node.
    pub uri: VikingUri,
    /// Its level.
    pub level: Level,
    /// The version of the store's state that removed it
    /// ([`Record::source_version`]); `None` from `ingest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_version: Option<String>,
    /// When a compaction first kept it, in milliseconds since the epoch
    /// (`None` until then): compactions prune it
    /// [`super::TOMBSTONE_KEEP`] later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_since: Option<i64>,
}

/// One decoded segment.
#[derive(Debug, Clone, Default)]
pub struct Segment {
    /// The vector dimension.
    pub dim: usize,
    /// Records, in row order.
    pub records: Vec<Record>,
    /// Row-major vectors, `records.len() × dim`.
    pub vectors: Vec<f32>,
    /// Nodes this segment deletes from earlier segments.
    pub tombstones: Vec<Tombstone>,
    /// The keyword postings of `records`, built from their term counts on
    /// the first keyword search ([`Segment::postings`]); not encoded.
    pub lexical: OnceLock<Postings>,
}

#[derive(Serialize, Deserialize)]
struct Body {
    records: Vec<Record>,
    #[serde(default)]
    tombstones: Vec<Tombstone>,
}

impl Segment {
    /// An estimate of the memory the decoded segment holds: its vectors,
    /// its records (each record's own size plus its strings) and its
    /// tombstones. Cost: one pass over the records.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        let record = |r: &Record| {
            std::mem::size_of::<Record>()
                + r.uri.as_str().len()
                + r.abstract_text.len()
                + r.source_hash.len()
                + r.terms.len()
                + r.owner_user_id.as_ref().map_or(0, String::len)
                + r.tags.iter().map(|t| t.len() + std::mem::size_of::<String>()).sum::<usize>()
        };
        let tombstones: usize =
            self.tombstones.iter().map(|t| std::mem::size_of::<Tombstone>() + t.uri.as_str().len()).sum();
        std::mem::size_of::<Self>()
            + self.vectors.len() * std::mem::size_of::<f32>()
            + self.records.iter().map(record).sum::<usize>()
            + tombstones
    }

    /// Drops every versioned record and tombstone for which `current` (the
    /// index as it stands) already holds the node at the same or a newer
    /// version ([`super::record::supersedes`]); unversioned entries stay.
    /// Returns how many were dropped. Cost: one lookup per entry.
    pub fn drop_superseded(&mut self, current: &super::IndexSnapshot) -> usize {
        // A passage is judged by its file, whose version it shares: it
        // goes with a file record the index holds newer (or removed), so
        // no passage outlives its file.
        let stale = |uri: &VikingUri, level: Level, version: Option<&String>| {
            let level = level.min(super::record::LEVEL_FILE);
            version.is_some_and(|ours| {
                current.version_of(uri, level).is_some_and(|theirs| !super::record::supersedes(Some(ours), theirs))
            })
        };
        let before = self.records.len() + self.tombstones.len();
        let dim = self.dim;
        let (records, vectors): (Vec<Record>, Vec<Vec<f32>>) = std::mem::take(&mut self.records)
            .into_iter()
            .enumerate()
            .filter(|(_, r)| !stale(&r.uri, r.level, r.source_version.as_ref()))
            .map(|(i, r)| (r, self.vectors[i * dim..(i + 1) * dim].to_vec()))
            .unzip();
        self.records = records;
        self.vectors = vectors.concat();
        self.tombstones.retain(|t| !stale(&t.uri, t.level, t.source_version.as_ref()));
        self.lexical = OnceLock::new();
        before - self.records.len() - self.tombstones.len()
    }

    /// The keyword postings of the records, built on the first call.
    /// Cost of that call: one pass over every record's term counts.
    pub fn postings(&self) -> &Postings {
        self.lexical.get_or_init(|| Postings::build(&self.records))
    }

    /// The vector of row `i`.
    #[must_use]
    pub fn vector(&self, i: usize) -> &[f32] {
        &self.vectors[i * self.dim..(i + 1) * self.dim]
    }

    /// Encodes the segment.
    ///
    /// # Errors
    /// [`IndexError::Corrupt`] when the vectors do not match the records.
    pub fn encode(&self) -> Result<Bytes, IndexError> {
        if self.vectors.len() != self.records.len() * self.dim {
            return Err(IndexError::Corrupt(format!(
                "segment has {} values for {} records of dimension {}",
                self.vectors.len(),
                self.records.len(),
                self.dim
            )));
        }
        let json = serde_json::to_vec(&BodyRef { records: &self.records, tombstones: &self.tombstones })
            .map_err(|e| IndexError::Corrupt(e.to_string()))?;
        let mut out = Vec::with_capacity(HEADER + json.len() + self.vectors.len() * 4);
        out.extend_from_slice(&header(self.dim, self.records.len(), json.len())?);
        out.extend_from_slice(&json);
        for v in &self.vectors {
            out.extend_from_slice(&v.to_le_bytes());
        }
        Ok(Bytes::from(out))
    }

    /// Decodes a segment.
    ///
    /// # Errors
    /// [`IndexError::Corrupt`] naming what does not fit.
    pub fn decode(bytes: &[u8]) -> Result<Self, IndexError> {
        let corrupt = |what: &str| IndexError::Corrupt(format!("segment: {what}"));
        if bytes.len() < HEADER || &bytes[..MAGIC.len()] != MAGIC {
            return Err(corrupt("bad magic"));
        }
        let word = |i: usize| {
            let at = MAGIC.len() + 4 * i;
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[at..at + 4]);
            u32::from_le_bytes(b) as usize
        };
        let (dim, count, json_len) = (word(0), word(1), word(2));
        let json_end = HEADER.checked_add(json_len).ok_or_else(|| corrupt("length overflow"))?;
        let values = count.checked_mul(dim).ok_or_else(|| corrupt("length overflow"))?;
        if bytes.len() != json_end + values * 4 {
            return Err(corrupt("length does not match its header"));
        }
        let body: Body = serde_json::from_slice(&bytes[HEADER..json_end]).map_err(|e| corrupt(&e.to_string()))?;
        if body.records.len() != count {
            return Err(corrupt("record count does not match its header"));
        }
        let vectors = bytes[json_end..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok(Self { dim, records: body.records, vectors, tombstones: body.tombstones, lexical: OnceLock::new() })
    }
}

#[derive(Serialize)]
struct BodyRef<'a> {
    records: &'a [Record],
    tombstones: &'a [Tombstone],
}

/// The header of a segment of `count` records of `dim` values whose JSON
/// is `json_len` bytes.
fn header(dim: usize, count: usize, json_len: usize) -> Result<[u8; HEADER], IndexError> {
    let mut out = [0u8; HEADER];
    out[..MAGIC.len()].copy_from_slice(MAGIC);
    for (i, n) in [dim, count, json_len].into_iter().enumerate() {
        let n = u32::try_from(n).map_err(|_| IndexError::Corrupt("segment too large".into()))?;
        out[MAGIC.len() + 4 * i..MAGIC.len() + 4 * (i + 1)].copy_from_slice(&n.to_le_bytes());
    }
    Ok(out)
}

/// Counts the bytes written to it.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A segment's encoding ([`Segment::encode`], byte for byte) cut into
/// parts of a given size (the last shorter), each made when it is taken:
/// a record's JSON and a row's bytes exist only while their part is being
/// filled. How a compaction writes an index-sized segment
/// ([`crate::store::Store::put_parts`]) while holding one part of it.
///
/// Cost: the records are serialised twice (once up front to learn the
/// JSON's length for the header, once as their parts are taken).
pub struct Parts<'a> {
    pieces: Box<dyn Iterator<Item = Vec<u8>> + Send + 'a>,
    /// The rest of a piece that did not fit in the last part.
    carry: Vec<u8>,
    carry_at: usize,
    remaining: usize,
    part_bytes: usize,
}

impl std::fmt::Debug for Parts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts").field("remaining", &self.remaining).finish_non_exhaustive()
    }
}

impl<'a> Parts<'a> {
    /// The encoding of a segment of `records`, whose vectors (each of
    /// `dim` values) `rows` yields in the same order, and of `tombstones`,
    /// in parts of `part_bytes`. The caller gives one row per record.
    ///
    /// # Errors
    /// [`IndexError::Corrupt`] when the segment is too large for its
    /// header's 32-bit counts, or a record does not serialise.
    pub fn new<R: Serialize + Sync>(
        dim: usize,
        records: &'a [R],
        rows: impl Iterator<Item = &'a [f32]> + Send + 'a,
        tombstones: &[Tombstone],
        part_bytes: usize,
    ) -> Result<Self, IndexError> {
        let corrupt = |e: serde_json::Error| IndexError::Corrupt(e.to_string());
        // The JSON is `{"records":[r,r,…],"tombstones":[…]}`, as serde
        // writes `BodyRef`.
        let open = b"{\"records\":[".to_vec();
        let mut close = b"],\"tombstones\":".to_vec();
        serde_json::to_writer(&mut close, tombstones).map_err(corrupt)?;
        close.push(b'}');
        let mut counter = Counter(open.len() + close.len() + records.len().saturating_sub(1));
        for record in records {
            serde_json::to_writer(&mut counter, record).map_err(corrupt)?;
        }
        let head = header(dim, records.len(), counter.0)?.to_vec();
        let remaining = HEADER + counter.0 + records.len() * dim * 4;
        let json = records.iter().enumerate().map(|(i, record)| {
            let mut piece = if i == 0 { Vec::new() } else { vec![b','] };
            // It serialised above: it does again (a short body is refused
            // by the writer's size check all the same).
            let _ = serde_json::to_writer(&mut piece, record);
            piece
        });
        let rows = rows.map(|row| row.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        let pieces = [head, open].into_iter().chain(json).chain(std::iter::once(close)).chain(rows);
        Ok(Self { pieces: Box::new(pieces), carry: Vec::new(), carry_at: 0, remaining, part_bytes: part_bytes.max(1) })
    }

    /// The encoding's size in bytes (what the parts not yet taken hold).
    #[must_use]
    pub fn len(&self) -> usize {
        self.remaining
    }

    /// Whether every part was taken.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }
}

impl Iterator for Parts<'_> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let mut out = Vec::with_capacity(self.part_bytes.min(self.remaining));
        loop {
            let room = self.part_bytes - out.len();
            if self.carry_at < self.carry.len() {
                let end = self.carry_at + room.min(self.carry.len() - self.carry_at);
                out.extend_from_slice(&self.carry[self.carry_at..end]);
                self.carry_at = end;
            }
            if out.len() == self.part_bytes {
                break;
            }
            match self.pieces.next() {
                Some(piece) => (self.carry, self.carry_at) = (piece, 0),
                None => break,
            }
        }
        self.remaining = self.remaining.saturating_sub(out.len());
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    /// Exact: the parts not yet taken.
    fn size_hint(&self) -> (usize, Option<usize>) {
        let parts = self.remaining.div_ceil(self.part_bytes);
        (parts, Some(parts))
    }
}
