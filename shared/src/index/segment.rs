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
        let stale = |uri: &VikingUri, level: Level, version: Option<&String>| {
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
        out.extend_from_slice(MAGIC);
        for n in [self.dim, self.records.len(), json.len()] {
            let n = u32::try_from(n).map_err(|_| IndexError::Corrupt("segment too large".into()))?;
            out.extend_from_slice(&n.to_le_bytes());
        }
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
