//! The vector index: immutable segments plus a manifest
//! updated by compare-and-swap, so concurrent writers lose nothing; exact
//! cosine search over a loaded [`IndexSnapshot`]; and an [`IndexCache`] that
//! keeps snapshots warm and revalidates the manifest's etag cheaply.
//!
//! Store layout: `accounts/{account}/index/manifest.json` and
//! `accounts/{account}/index/segments/{hash}.seg`. A later segment's record
//! for the same `(uri, level)` replaces an earlier one; a tombstone removes it.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use serde::{Deserialize, Serialize};

use crate::embed::dot;
use crate::identity::AccountId;
use crate::store::{PutMode, SharedStore, StoreError, content_etag};
use crate::uri::VikingUri;

pub mod account;
pub mod extract;
pub mod filter;
pub mod lexical;
pub mod passage;
pub mod record;
pub mod remote;
#[cfg(feature = "s3")]
pub mod s3vectors;
pub mod segment;

pub use account::{AccountIndex, Backend, Searched, Target, VectorsRef};

pub use filter::Filter;
pub use record::{Category, ContextType, Level, Record};
pub use segment::{Segment, Tombstone};

/// Segments at which a commit also compacts the index into one segment.
pub const COMPACT_AT: usize = 16;
/// Segment reads (and a compaction's deletes) in flight at once: a cold
/// load of a many-segment index on S3 costs a few round trips, not one per
/// segment.
pub const SEGMENT_CONCURRENCY: usize = 8;
/// How long a compaction keeps a tombstone after first keeping it: 7
/// days. A tombstone guards a removed node against a commit computed from
/// an older read of the store ([`commit_ordered`]); an indexer's read and
/// its commit are one invocation apart (at most Lambda's 15 minutes), so
/// a week leaves a wide margin, and the index sheds removed nodes.
pub const TOMBSTONE_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// Compare-and-swap attempts before a commit gives up.
const CAS_ATTEMPTS: u32 = 64;

/// What the index failed to do.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The index was built by another embedder (or dimension).
    #[error(
        "index of account {account} was built with embedder {index} but the configured embedder is {configured}; re-ingest to switch"
    )]
    EmbedderMismatch {
        /// The account.
        account: String,
        /// The index's embedder id and dimension.
        index: String,
        /// The configured one.
        configured: String,
    },
    /// A manifest or segment could not be decoded.
    #[error("index data is corrupt: {0}")]
    Corrupt(String),
    /// A segment the manifest lists is missing from the store, on every
    /// reload of the manifest.
    #[error("segment {key} of account {account}'s index is missing")]
    SegmentMissing {
        /// The account.
        account: String,
        /// The segment's store key.
        key: String,
    },
    /// Too many concurrent writers: the manifest kept changing.
    #[error("index manifest of account {0} kept changing; commit abandoned after retries")]
    Contention(String),
    /// An Amazon S3 Vectors call failed (after the SDK's retries).
    #[error("s3 vectors {operation} failed: {message}")]
    Vectors {
        /// The operation, e.g. `QueryVectors`.
        operation: &'static str,
        /// The service's error code, when it answered with one.
        code: Option<String>,
        /// What it said.
        message: String,
    },
    /// The account's index is in S3 Vectors but this process cannot reach
    /// it (a build without the feature `s3`).
    #[error("index of account {0} is in s3 vectors, which this build cannot reach")]
    VectorsUnavailable(String),
    /// The account's index moved to the other backend while a write was
    /// under way (internal: the write is tried again on the new backend).
    #[error("index of account {0} moved to another backend during the write")]
    Moved(String),
    /// A manifest write was not acknowledged and the manifest no longer
    /// records who wrote the generations since (more than
    /// [`WRITERS_KEPT`] writes went by, or a writer that keeps no record):
    /// the write may have landed. Retrying the operation is safe.
    #[error("a write to the index manifest of account {0} may have landed; its outcome is unknown")]
    OutcomeUnknown(String),
}

/// The embedder an index was built with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbedderInfo {
    /// [`crate::embed::Embedder::id`].
    pub id: String,
    /// [`crate::embed::Embedder::dimension`].
    pub dimension: usize,
}

impl std::fmt::Display for EmbedderInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (dimension {})", self.id, self.dimension)
    }
}

/// A segment as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentRef {
    /// Store key of the segment object.
    pub key: String,
    /// Records in it.
    pub records: usize,
    /// Tombstones in it.
    pub tombstones: usize,
    /// Its size in bytes.
    pub bytes: u64,
}

/// The index manifest: which segments make up the index, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version (1).
    pub version: u32,
    /// The embedder every segment was built with.
    pub embedder: EmbedderInfo,
    /// Segments, oldest first; later ones win.
    pub segments: Vec<SegmentRef>,
    /// Incremented by every commit.
    pub generation: u64,
    /// Where the records live when not in `segments`: the account's Amazon
    /// S3 Vectors index (`None`: in the segments). Set and cleared only by
    /// a migration ([`account::migrate`]), by compare-and-swap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vectors: Option<VectorsRef>,
    /// Who wrote each of the latest generations, oldest first (at most
    /// [`WRITERS_KEPT`]; the last is `generation`'s): how a writer whose
    /// manifest write went unacknowledged learns whether it landed, even
    /// once a compaction has taken its segment out of `segments`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writers: Vec<Written>,
}

/// One generation of a manifest and the write that made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    /// The generation the write made.
    pub generation: u64,
    /// The writer's token: unique to one manifest change (a commit, a
    /// compaction, a migration step), the same over its retries.
    pub by: String,
}

/// Generations whose writer a manifest records ([`Manifest::writers`]):
/// a write left unacknowledged is decided by a read-back within this many
/// other writes (one backoff, tens of milliseconds); past it the outcome
/// is reported unknown ([`IndexError::OutcomeUnknown`]).
pub const WRITERS_KEPT: usize = 32;

impl Manifest {
    /// Whether a write by `token` based on generation `base` (made
    /// `base + 1` if it landed) is in this manifest: `Some(true)` it
    /// landed, `Some(false)` it did not (this generation is `base`, or
    /// every generation since is recorded and none is `token`'s), `None`
    /// unknown (the record does not reach back to `base + 1`).
    fn written_by(&self, token: &str, base: u64) -> Option<bool> {
        if self.writers.iter().any(|w| w.by == token) {
            return Some(true);
        }
        if self.generation <= base {
            return Some(false);
        }
        // The record is whole from its first generation to this one.
        let whole = self.writers.last().is_some_and(|w| w.generation == self.generation)
            && self.writers.windows(2).all(|w| w[0].generation + 1 == w[1].generation);
        let reaches = self.writers.first().is_some_and(|w| w.generation <= base + 1);
        (whole && reaches).then_some(false)
    }
}

/// Store key of `account`'s manifest.
#[must_use]
pub fn manifest_key(account: &AccountId) -> String {
    format!("accounts/{account}/index/manifest.json")
}

/// A process-unique number: the clock's nanoseconds, the process id and a
/// counter. Used for object names and backoff jitter.
#[must_use]
pub fn unique() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, AtomicOrdering::Relaxed);
    nanos ^ (u64::from(std::process::id()) << 40) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A segment's key: its content hash plus a unique suffix, so no two writes
/// ever share a key and deleting a replaced segment can never delete
/// another writer's (identical) segment.
fn segment_key(account: &AccountId, body: &[u8]) -> String {
    format!("accounts/{account}/index/segments/{}-{:016x}.seg", content_etag(body), unique())
}

/// `account`'s manifest and its etag (`None`: no index yet). A body that
/// does not decode is read once more before it counts as corrupt (a
/// response cut in transit decodes on the second read).
///
/// Cost: one GET (two when the first body does not decode).
///
/// # Errors
/// Store errors; [`IndexError::Corrupt`] when it does not decode twice.
pub async fn read_manifest(store: &SharedStore, account: &AccountId) -> Result<Option<(Manifest, String)>, IndexError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let object = match store.get(&manifest_key(account)).await {
            Ok(object) => object,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        match serde_json::from_slice::<Manifest>(&object.body) {
            Ok(manifest) => return Ok(Some((manifest, object.meta.etag))),
            Err(e) if attempt >= 2 => {
                return Err(IndexError::Corrupt(format!("manifest of account {account}: {e}")));
            }
            Err(e) => tracing::warn!(account = %account, error = %e, "manifest does not decode; reading it again"),
        }
    }
}

fn check_embedder(account: &AccountId, manifest: &Manifest, embedder: &EmbedderInfo) -> Result<(), IndexError> {
    if &manifest.embedder == embedder {
        Ok(())
    } else {
        Err(IndexError::EmbedderMismatch {
            account: account.to_string(),
            index: manifest.embedder.to_string(),
            configured: embedder.to_string(),
        })
    }
}

/// Backoff before CAS retry `attempt` (1-based): grows to ~50 ms, plus a
/// random 0-9 ms so racing writers spread out.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(u64::from(attempt.min(10)) * 5 + unique() % 10)
}

/// Writes `segment` and appends it to `account`'s manifest by
/// compare-and-swap, retrying on conflicts; compacts when the manifest lists
/// [`COMPACT_AT`] segments or more. An empty segment writes nothing.
///
/// Cost: a manifest get, one segment put and a conditional manifest put;
/// each conflict adds a manifest get and put. A manifest put whose outcome
/// is unknown (a timeout, a 5xx, or a 412 that may answer the SDK's retry
/// of our own landed write) costs one manifest get, which decides by the
/// manifest's record of its writers: it landed (done) or not (try again).
/// A segment once listed is never listed again, so a compaction that
/// merged and deleted it meanwhile leaves no reference to a missing object.
///
/// Unknown outcomes: the segment's key is unique to this commit, so a
/// segment put that may have landed is harmless (an unreferenced object if
/// the commit then fails); a commit that returns an error may still have
/// landed, and a retry of it adds the same records again, which is
/// harmless too (a later record for the same node replaces an earlier one).
///
/// # Errors
/// [`IndexError::EmbedderMismatch`] when the index was built by another
/// embedder; store errors; [`IndexError::Contention`] after many conflicts;
/// [`IndexError::OutcomeUnknown`] when a read-back cannot decide.
pub async fn commit(
    store: &SharedStore,
    account: &AccountId,
    embedder: &EmbedderInfo,
    segment: &Segment,
) -> Result<Manifest, IndexError> {
    if segment.dim != embedder.dimension {
        return Err(IndexError::Corrupt(format!(
            "segment dimension {} does not match embedder {embedder}",
            segment.dim
        )));
    }
    let current = read_manifest(store, account).await?;
    if let Some((manifest, _)) = &current {
        check_embedder(account, manifest, embedder)?;
    }
    if current.as_ref().is_some_and(|(m, _)| m.vectors.is_some()) {
        return Err(IndexError::Moved(account.to_string()));
    }
    if segment.records.is_empty() && segment.tombstones.is_empty() {
        return Ok(current.map_or_else(|| empty_manifest(embedder), |(m, _)| m));
    }
    let seg_ref = write_segment(store, account, segment).await?;
    // The first attempt swaps against the manifest read above.
    let (manifest, edit) = swap_manifest(store, account, embedder, Some(current), |m| {
        if m.vectors.is_some() {
            return Edit::Abandoned;
        }
        m.segments.push(seg_ref.clone());
        Edit::Write
    })
    .await?;
    if edit == Edit::Abandoned {
        // A migration moved the index to S3 Vectors first.
        if let Err(e) = store.delete(&seg_ref.key).await {
            tracing::debug!(key = seg_ref.key, error = %e, "an unreferenced segment was not deleted");
        }
        return Err(IndexError::Moved(account.to_string()));
    }
    if manifest.segments.len() >= COMPACT_AT
        && let Err(e) = compact(store, account, embedder, None, now_ms()).await
    {
        tracing::warn!(account = %account, error = %e, "index compaction failed; will retry on a later commit");
    }
    Ok(manifest)
}

/// Commits `segment`, computed against `basis` (the index as the caller
/// read it), so that no node goes back to an older version: when the
/// manifest has moved on since `basis`, the index as it now stands is
/// loaded (reusing `basis`'s segments) and every versioned entry of
/// `segment` whose node it holds at the same or a newer version
/// ([`Record::source_version`]) is dropped before the commit is tried
/// again. Returns the manifest and how many entries were dropped.
/// Unversioned entries (from `ingest`) are committed as [`commit`] does.
///
/// Cost: as [`commit`] when nothing moved; each time the manifest moved,
/// a load of its new segments, and a segment put when entries were
/// dropped. Unknown outcomes are decided as in [`commit`]; a segment put
/// for an attempt that a manifest read then showed superseded is deleted.
///
/// # Errors
/// As [`commit`].
pub async fn commit_ordered(
    store: &SharedStore,
    account: &AccountId,
    embedder: &EmbedderInfo,
    mut segment: Segment,
    basis: &IndexSnapshot,
) -> Result<(Manifest, usize), IndexError> {
    let mut newer: Option<IndexSnapshot> = None;
    let mut dropped = segment.drop_superseded(basis);
    for _ in 0..CAS_ATTEMPTS {
        let current = newer.as_ref().unwrap_or(basis);
        if let Some(manifest) = &current.manifest {
            check_embedder(account, manifest, embedder)?;
        }
        if segment.records.is_empty() && segment.tombstones.is_empty() {
            let manifest = current.manifest.clone().unwrap_or_else(|| empty_manifest(embedder));
            return Ok((manifest, dropped));
        }
        let expected: Vec<String> =
            current.manifest.iter().flat_map(|m| m.segments.iter().map(|s| s.key.clone())).collect();
        let seg_ref = write_segment(store, account, &segment).await?;
        let mut moved = false;
        let (manifest, edit) = swap_manifest(store, account, embedder, None, |m| {
            moved = m.vectors.is_some();
            if moved || !m.segments.iter().map(|s| &s.key).eq(expected.iter()) {
                // Another writer committed since `current`: judge again.
                Edit::Abandoned
            } else {
                m.segments.push(seg_ref.clone());
                Edit::Write
            }
        })
        .await?;
        if edit != Edit::Abandoned {
            if manifest.segments.len() >= COMPACT_AT
                && let Err(e) = compact(store, account, embedder, Some(current), now_ms()).await
            {
                tracing::warn!(account = %account, error = %e, "index compaction failed; will retry on a later commit");
            }
            return Ok((manifest, dropped));
        }
        // A manifest read showed it moved on without our segment, and no
        // write of ours against an older manifest can land any more.
        if let Err(e) = store.delete(&seg_ref.key).await {
            tracing::debug!(key = seg_ref.key, error = %e, "an unreferenced segment was not deleted");
        }
        if moved {
            // A migration moved the index to S3 Vectors first.
            return Err(IndexError::Moved(account.to_string()));
        }
        let loaded = IndexSnapshot::load(store, account, Some(current)).await?;
        dropped += segment.drop_superseded(&loaded);
        newer = Some(loaded);
    }
    Err(IndexError::Contention(account.to_string()))
}

/// The clock, in milliseconds since the epoch: read at the edge, where a
/// commit hands it to [`compact`].
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn empty_manifest(embedder: &EmbedderInfo) -> Manifest {
    Manifest {
        version: 1,
        embedder: embedder.clone(),
        segments: Vec::new(),
        generation: 0,
        vectors: None,
        writers: Vec::new(),
    }
}

/// Encodes `segment` and writes it under a key of its own
/// ([`put_segment`]); returns how a manifest lists it.
pub(crate) async fn write_segment(
    store: &SharedStore,
    account: &AccountId,
    segment: &Segment,
) -> Result<SegmentRef, IndexError> {
    let body = segment.encode()?;
    let key = segment_key(account, &body);
    let seg_ref = SegmentRef {
        key: key.clone(),
        records: segment.records.len(),
        tombstones: segment.tombstones.len(),
        bytes: body.len() as u64,
    };
    put_segment(store, &key, body).await?;
    Ok(seg_ref)
}

/// Writes a new segment object. Keys are unique to this write, so a
/// conflict can only be our own earlier attempt (the SDK's retry of a
/// landed put).
async fn put_segment(store: &SharedStore, key: &str, body: Bytes) -> Result<(), IndexError> {
    match store.put(key, body, PutMode::CreateNew).await {
        Ok(_) | Err(StoreError::Conflict(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// What a manifest change found in the manifest it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    /// The change was applied: write the manifest.
    Write,
    /// The manifest already holds the change: an earlier attempt whose
    /// outcome was unknown landed (the manifest's record of its writers
    /// says so), or the state the change wants is there already. Nothing
    /// to write.
    Landed,
    /// The change no longer applies (another writer superseded it). Nothing
    /// to write.
    Abandoned,
}

/// Manifest puts in a row whose outcome may be unknown before a swap gives
/// up (each is followed by a read that decides).
const UNKNOWN_ATTEMPTS: u32 = 3;

/// Applies `change` to the current manifest and writes it back by
/// compare-and-swap, retrying on conflict. The first attempt works on
/// `first` when the caller has just read the manifest (`Some(None)`: there
/// was none); every retry reads it again. Returns the manifest as it now
/// stands and what was done.
///
/// Each write records a token of this swap with the generation it makes
/// ([`Manifest::writers`]). A put that is not acknowledged — a conflict,
/// which may answer the SDK's retry of our own landed write, or a timeout
/// or 5xx — may have landed: the next read decides by that record, not by
/// what the manifest lists (a compaction may have merged a landed segment
/// away), and reports [`Edit::Landed`] without calling `change` again.
/// After [`UNKNOWN_ATTEMPTS`] timeouts or 5xx in a row the error is
/// returned and the outcome stays unknown; so it does when the record no
/// longer reaches back to the write ([`IndexError::OutcomeUnknown`]).
async fn swap_manifest(
    store: &SharedStore,
    account: &AccountId,
    embedder: &EmbedderInfo,
    mut first: Option<Option<(Manifest, String)>>,
    mut change: impl FnMut(&mut Manifest) -> Edit,
) -> Result<(Manifest, Edit), IndexError> {
    let token = format!("{:016x}", unique());
    // The oldest generation an unacknowledged write of ours was based on.
    let mut pending: Option<u64> = None;
    let mut unknown = 0;
    for attempt in 1..=CAS_ATTEMPTS {
        let current = match first.take() {
            Some(read) => read,
            None => read_manifest(store, account).await?,
        };
        let (mut manifest, mode) = match current {
            Some((m, etag)) => {
                check_embedder(account, &m, embedder)?;
                (m, PutMode::IfMatch(etag))
            }
            None => (empty_manifest(embedder), PutMode::CreateNew),
        };
        if let Some(base) = pending {
            match manifest.written_by(&token, base) {
                Some(true) => return Ok((manifest, Edit::Landed)),
                Some(false) => {}
                None => return Err(IndexError::OutcomeUnknown(account.to_string())),
            }
        }
        let edit = change(&mut manifest);
        if edit != Edit::Write {
            return Ok((manifest, edit));
        }
        let base = manifest.generation;
        manifest.generation += 1;
        manifest.writers.push(Written { generation: manifest.generation, by: token.clone() });
        let over = manifest.writers.len().saturating_sub(WRITERS_KEPT);
        manifest.writers.drain(..over);
        let body = serde_json::to_vec_pretty(&manifest).map_err(|e| IndexError::Corrupt(e.to_string()))?;
        match store.put(&manifest_key(account), Bytes::from(body), mode).await {
            Ok(_) => return Ok((manifest, Edit::Write)),
            Err(StoreError::Conflict(_)) => {}
            Err(e @ StoreError::Backend { .. }) => {
                unknown += 1;
                if unknown >= UNKNOWN_ATTEMPTS {
                    return Err(e.into());
                }
                tracing::warn!(account = %account, error = %e, "manifest write outcome unknown; reading it back");
            }
            Err(e) => return Err(e.into()),
        }
        pending = Some(pending.map_or(base, |p| p.min(base)));
        tokio::time::sleep(backoff(attempt)).await;
    }
    Err(IndexError::Contention(account.to_string()))
}

/// Merges every segment of `account`'s index into one, swapping it in by
/// compare-and-swap; segments committed meanwhile stay after it. Old
/// segment objects are deleted once the new manifest is in place. The
/// merged segment keeps the versioned tombstones of removed nodes, each
/// for [`TOMBSTONE_KEEP`] after the first compaction that kept it
/// (`now_ms`, milliseconds since the epoch, is that compaction's time).
///
/// Memory: the segments of `basis` (the index as the caller holds it,
/// e.g. the warm cache's snapshot) are reused, not read again, and the
/// merged segment is written in parts ([`crate::store::Store::put_parts`])
/// straight from the loaded segments, so beyond `basis` a compaction holds
/// the segments committed since, the records' JSON and one part
/// ([`crate::store::PART_BYTES`]); without `basis` it loads the index
/// first.
///
/// Cost: a manifest get, a get per segment not in `basis`, the merged
/// segment's put (a multipart upload on S3 past one part), the swap and a
/// delete per replaced segment.
///
/// Unknown outcomes: a manifest put that may have landed is read back
/// before anything is deleted — the replaced segments are deleted only
/// once a manifest read shows the swap landed (its record of writers), and
/// the merged segment only once a read shows that the manifest moved on
/// without it. When the read-back itself fails or cannot decide, nothing
/// is deleted (at worst an unreferenced segment object stays).
///
/// # Errors
/// Store, decoding or contention errors; the index stays valid on failure.
pub async fn compact(
    store: &SharedStore,
    account: &AccountId,
    embedder: &EmbedderInfo,
    basis: Option<&IndexSnapshot>,
    now_ms: i64,
) -> Result<(), IndexError> {
    let Some((manifest, etag)) = read_manifest(store, account).await? else { return Ok(()) };
    check_embedder(account, &manifest, embedder)?;
    if manifest.segments.len() < 2 {
        return Ok(());
    }
    let snapshot = IndexSnapshot::load_manifest(store, account, manifest.clone(), String::new(), basis).await?;
    let tombstones = kept_tombstones(&snapshot.deleted, now_ms, TOMBSTONE_KEEP);
    let records: Vec<&Record> = snapshot.records().map(|(r, _)| r).collect();
    let rows = snapshot.records().map(|(_, v)| v);
    let mut parts = segment::Parts::new(embedder.dimension, &records, rows, &tombstones, crate::store::PART_BYTES)?;
    let bytes = parts.len() as u64;
    // Named by the generation it merges and a unique suffix: never reused.
    let key = format!("accounts/{account}/index/segments/merged-{}-{:016x}.seg", manifest.generation, unique());
    match store.put_parts(&key, &mut parts, PutMode::CreateNew).await {
        Ok(meta) if meta.size != bytes => {
            // Never listed: a segment that would not decode.
            if let Err(e) = store.delete(&key).await {
                tracing::debug!(key, error = %e, "an unreferenced segment was not deleted");
            }
            return Err(IndexError::Corrupt(format!("merged segment {key} came out {} bytes, not {bytes}", meta.size)));
        }
        // A conflict can only answer the SDK's retry of our own landed put.
        Ok(_) | Err(StoreError::Conflict(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let merged_ref = SegmentRef { key: key.clone(), records: records.len(), tombstones: tombstones.len(), bytes };
    drop(parts);
    drop(records);
    drop(snapshot);
    let replaced: Vec<SegmentRef> = manifest.segments.clone();
    // The first attempt swaps against the manifest read above.
    let (_, edit) = swap_manifest(store, account, embedder, Some(Some((manifest, etag))), |m| {
        if m.segments.starts_with(&replaced) {
            m.segments.splice(..replaced.len(), [merged_ref.clone()]);
            Edit::Write
        } else {
            Edit::Abandoned
        }
    })
    .await?;
    // Keys are never reused: once the swap landed (Write, or Landed by the
    // manifest's record of its writers), no manifest references the
    // replaced keys again; once a read shows another writer's change and
    // no write of ours (Abandoned), none references the merged key.
    let garbage: Vec<&str> = match edit {
        Edit::Abandoned => vec![key.as_str()],
        Edit::Write | Edit::Landed => replaced.iter().map(|r| r.key.as_str()).collect(),
    };
    stream::iter(garbage)
        .for_each_concurrent(SEGMENT_CONCURRENCY, |old| async move {
            if let Err(e) = store.delete(old).await {
                tracing::debug!(key = old, error = %e, "an unreferenced segment was not deleted");
            }
        })
        .await;
    Ok(())
}

/// One search hit: its record borrowed from the loaded snapshot, or owned
/// (read back from S3 Vectors).
#[derive(Debug, Clone)]
pub struct Hit<'a> {
    /// The record.
    pub record: std::borrow::Cow<'a, Record>,
    /// `(1 + cosine) / 2`, after any time decay.
    pub score: f64,
    /// The score before time decay, when decay applied.
    pub origin_score: Option<f64>,
    /// The decay multiplier, when decay applied.
    pub time_score: Option<f64>,
}

/// Event time decay (`events_time_decay_protection`): event hits older than
/// `window_s` are multiplied by `0.5 ^ ((age − window) / 7 days)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventDecay {
    /// "Now", Unix seconds.
    pub now: i64,
    /// The protection window in seconds.
    pub window_s: i64,
    /// Which time the age is measured from.
    pub field: filter::TimeField,
}

impl EventDecay {
    fn multiplier(&self, record: &Record) -> Option<f64> {
        if record.category != Category::Events {
            return None;
        }
        let t = match self.field {
            filter::TimeField::UpdatedAt => record.updated_at,
            filter::TimeField::CreatedAt => record.created_at,
        };
        let over = (self.now - t) - self.window_s;
        (over > 0).then(|| 0.5f64.powf(over as f64 / (7.0 * 86_400.0)))
    }
}

/// How records are matched (`search_type` on the wire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SearchKind {
    /// By meaning: the cosine of the query's and the record's vectors.
    #[default]
    Semantic,
    /// By words: BM25 over the records' terms ([`lexical`]), in `[0, 1]`.
    Keywords,
    /// Both: the semantic score `s` lifted by the keyword score `k`
    /// to `s + (1 − s) × HYBRID_KEYWORD_WEIGHT × k`, so a record never
    /// scores below its semantic score and thresholds keep their meaning.
    Hybrid,
}

impl SearchKind {
    /// The wire name: `semantic`, `keywords` or `hybrid`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Semantic => "semantic",
            Self::Keywords => "keywords",
            Self::Hybrid => "hybrid",
        }
    }

    /// Parses a wire name; `None` for anything else.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Semantic, Self::Keywords, Self::Hybrid].into_iter().find(|k| k.as_str() == text)
    }

    /// Whether the query needs an embedding (everything but keywords).
    #[must_use]
    pub fn needs_vector(self) -> bool {
        self != Self::Keywords
    }
}

/// How far a full keyword match lifts a hybrid score towards 1.
pub const HYBRID_KEYWORD_WEIGHT: f64 = 0.5;

/// What to search for.
#[derive(Debug, Clone)]
pub struct SearchParams<'a> {
    /// How records are matched.
    pub kind: SearchKind,
    /// The query vector (L2-normalised, the index's dimension); unused by
    /// [`SearchKind::Keywords`].
    pub vector: &'a [f32],
    /// The query's terms ([`lexical::query_terms`]); unused by
    /// [`SearchKind::Semantic`].
    pub terms: &'a [String],
    /// Which records qualify.
    pub filter: &'a Filter,
    /// At most this many hits.
    pub limit: usize,
    /// Keep hits whose score is strictly greater than this.
    pub score_threshold: Option<f64>,
    /// Optional event time decay.
    pub decay: Option<EventDecay>,
}

/// A loaded index: every live record and its vector, in memory.
#[derive(Debug, Default)]
pub struct IndexSnapshot {
    /// The manifest etag this snapshot was loaded from (`None`: no index yet).
    pub etag: Option<String>,
    /// The manifest (`None`: no index yet).
    pub manifest: Option<Manifest>,
    segments: Vec<(String, Arc<Segment>)>,
    live: Vec<Vec<bool>>,
    live_count: usize,
    /// Where each live record is, by `(uri, level)`.
    rows: Rows,
    deleted: Deleted,
    memory_bytes: usize,
    /// The live records' average length in keyword terms, counted on the
    /// first keyword or hybrid search (BM25's length normalisation).
    average_terms: std::sync::OnceLock<f64>,
}

#[derive(PartialEq)]
struct Ranked(f64, usize, usize);
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        // Higher score first; ties broken by position so results are stable.
        self.0.total_cmp(&other.0).then_with(|| (other.1, other.2).cmp(&(self.1, self.2)))
    }
}

impl IndexSnapshot {
    /// A snapshot of `records` (all live, in one segment) with their
    /// row-major `vectors` of `dimension`: the records a query read back
    /// from S3 Vectors, searched exactly. Cost: none beyond the move.
    #[must_use]
    pub fn from_records(manifest: Option<Manifest>, dimension: usize, records: Vec<Record>, vectors: Vec<f32>) -> Self {
        let segments =
            vec![(String::new(), Arc::new(Segment { dim: dimension, records, vectors, ..Segment::default() }))];
        let (live, live_count, rows, deleted) = liveness(&segments);
        Self {
            etag: None,
            manifest,
            segments,
            live,
            live_count,
            rows,
            deleted,
            memory_bytes: 0,
            average_terms: std::sync::OnceLock::new(),
        }
    }

    /// Loads `account`'s index from the store, reusing unchanged segments of
    /// `previous`. An account with no index loads as an empty snapshot.
    ///
    /// Cost: a manifest get plus a get per segment not in `previous`.
    ///
    /// # Errors
    /// Store or decoding errors.
    pub async fn load(store: &SharedStore, account: &AccountId, previous: Option<&Self>) -> Result<Self, IndexError> {
        // A compaction may delete a segment between our manifest read and
        // segment read: re-read the manifest and try again.
        let mut missing = String::new();
        for _ in 0..3 {
            let Some((manifest, etag)) = read_manifest(store, account).await? else {
                return Ok(Self::default());
            };
            match Self::load_manifest(store, account, manifest, etag, previous).await {
                Ok(snapshot) => return Ok(snapshot),
                Err(IndexError::Store(StoreError::NotFound(key))) => missing = key,
                Err(e) => return Err(e),
            }
        }
        Err(IndexError::SegmentMissing { account: account.to_string(), key: missing })
    }

    async fn load_manifest(
        store: &SharedStore,
        account: &AccountId,
        manifest: Manifest,
        etag: String,
        previous: Option<&Self>,
    ) -> Result<Self, IndexError> {
        let reusable: HashMap<&str, &Arc<Segment>> =
            previous.map(|p| p.segments.iter().map(|(k, s)| (k.as_str(), s)).collect()).unwrap_or_default();
        let dimension = manifest.embedder.dimension;
        // Owned items: a future that borrowed from the stream's items would
        // not be `Send` for every lifetime, as the Lambda runtime needs.
        let wanted: Vec<(SegmentRef, Option<Arc<Segment>>)> = manifest
            .segments
            .iter()
            .map(|seg_ref| (seg_ref.clone(), reusable.get(seg_ref.key.as_str()).map(|seg| Arc::clone(seg))))
            .collect();
        let segments: Vec<(String, Arc<Segment>)> = stream::iter(wanted)
            .map(|(seg_ref, reused)| async move {
                let segment = match reused {
                    Some(seg) => seg,
                    None => {
                        let object = store.get(&seg_ref.key).await?;
                        // A body cut in transit decodes on a second read.
                        let seg = match Segment::decode(&object.body) {
                            Ok(seg) => seg,
                            Err(_) => Segment::decode(&store.get(&seg_ref.key).await?.body)?,
                        };
                        if seg.dim != dimension {
                            return Err(IndexError::Corrupt(format!(
                                "segment {} of account {account} has dimension {} but the manifest says {dimension}",
                                seg_ref.key, seg.dim
                            )));
                        }
                        Arc::new(seg)
                    }
                };
                Ok::<_, IndexError>((seg_ref.key.clone(), segment))
            })
            .buffered(SEGMENT_CONCURRENCY)
            .try_collect()
            .await?;
        let (live, live_count, rows, deleted) = liveness(&segments);
        let memory_bytes = segments.iter().map(|(key, seg)| key.len() + seg.memory_bytes()).sum::<usize>()
            + live.iter().map(Vec::len).sum::<usize>()
            + rows.memory_bytes();
        Ok(Self {
            etag: Some(etag),
            manifest: Some(manifest),
            segments,
            live,
            live_count,
            rows,
            deleted,
            memory_bytes,
            average_terms: std::sync::OnceLock::new(),
        })
    }

    /// The version of the newest entry the index holds for `(uri, level)`:
    /// `Some(version)` for a live record or a tombstone that removed the
    /// node (`version` is `None` for unversioned entries), `None` when the
    /// index never held the node. Cost: two hash lookups.
    #[must_use]
    pub fn version_of(&self, uri: &VikingUri, level: Level) -> Option<Option<&str>> {
        match self.get(uri, level) {
            Some(record) => Some(record.source_version.as_deref()),
            None => self.deleted.get(&(uri.clone(), level)).map(|removed| removed.version.as_deref()),
        }
    }

    /// An estimate of the memory the snapshot holds (its segments' vectors
    /// and records; [`Segment::memory_bytes`]), as loaded: keyword postings
    /// built since are [`IndexSnapshot::lexical_memory_bytes`]. Cost: none.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }

    /// An estimate of the memory the keyword postings built so far hold
    /// (none until the first keyword or hybrid search). Cost: one look per
    /// segment.
    #[must_use]
    pub fn lexical_memory_bytes(&self) -> usize {
        self.segments.iter().filter_map(|(_, seg)| seg.lexical.get()).map(lexical::Postings::memory_bytes).sum()
    }

    /// [`IndexSnapshot::memory_bytes`] plus the postings built since the
    /// load: what the warm cache counts against its bound.
    #[must_use]
    pub fn resident_bytes(&self) -> usize {
        self.memory_bytes + self.lexical_memory_bytes()
    }

    /// Checks that this index was built by `configured` (an empty index was
    /// built by none, and any embedder may start it).
    ///
    /// # Errors
    /// [`IndexError::EmbedderMismatch`] naming both embedders.
    pub fn ensure_embedder(&self, account: &AccountId, configured: &EmbedderInfo) -> Result<(), IndexError> {
        self.manifest.as_ref().map_or(Ok(()), |m| check_embedder(account, m, configured))
    }

    /// The segments the manifest lists (each loaded).
    #[must_use]
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Live records.
    #[must_use]
    pub fn len(&self) -> usize {
        self.live_count
    }

    /// Whether there are no live records.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.live_count == 0
    }

    /// The embedder the index was built with (`None`: no index yet).
    #[must_use]
    pub fn embedder(&self) -> Option<&EmbedderInfo> {
        self.manifest.as_ref().map(|m| &m.embedder)
    }

    /// Every live record with its vector.
    pub fn records(&self) -> impl Iterator<Item = (&Record, &[f32])> {
        self.segments.iter().zip(&self.live).flat_map(|((_, seg), live)| {
            seg.records.iter().enumerate().filter(|(i, _)| live[*i]).map(|(i, r)| (r, seg.vector(i)))
        })
    }

    /// The live record for `(uri, level)`. Cost: a hash lookup.
    #[must_use]
    pub fn get(&self, uri: &VikingUri, level: Level) -> Option<&Record> {
        self.get_with_vector(uri, level).map(|(r, _)| r)
    }

    /// The live record for `(uri, level)` with its vector. Cost: a hash
    /// lookup.
    #[must_use]
    pub fn get_with_vector(&self, uri: &VikingUri, level: Level) -> Option<(&Record, &[f32])> {
        self.rows.find(uri, level, |s, i| {
            let seg = &self.segments[s].1;
            let record = &seg.records[i];
            (&record.uri == uri && record.level == level).then(|| (record, seg.vector(i)))
        })
    }

    /// Exact search: every live record passing the filter is scored —
    /// `(1 + cos) / 2` ([`SearchKind::Semantic`]), its keyword score
    /// ([`SearchKind::Keywords`]; records matching no term are not hits), or
    /// both fused ([`SearchKind::Hybrid`]) — decayed if asked, kept if
    /// strictly above the threshold; the best `limit` come back, best first
    /// (ties by index order).
    ///
    /// Cost: one dot product per record passing the filter (none for
    /// keywords); for keywords, one walk of each query term's postings (a
    /// segment's postings are built on the first keyword search it serves);
    /// a heap of `limit` entries.
    #[must_use]
    pub fn search(&self, params: &SearchParams<'_>) -> Vec<Hit<'_>> {
        self.search_excluding(params, &Exclusion::default()).0
    }

    /// [`IndexSnapshot::search`] leaving out `exclude`d nodes; also returns
    /// how many hits were left out (records that passed the filter and the
    /// threshold). Excluded records never take a place in the result, so a
    /// search still returns `limit` hits when that many others exist.
    #[must_use]
    pub fn search_excluding(&self, params: &SearchParams<'_>, exclude: &Exclusion) -> (Vec<Hit<'_>>, usize) {
        if params.limit == 0 {
            return (Vec::new(), 0);
        }
        let keywords = match params.kind {
            SearchKind::Semantic => None,
            SearchKind::Keywords | SearchKind::Hybrid => Some(self.keyword_scores(params.terms)),
        };
        let mut top = TopHits::new(params, exclude, self.live_count);
        for (s, ((_, seg), live)) in self.segments.iter().zip(&self.live).enumerate() {
            let lexical = keywords.as_ref().map(|k| k[s].as_slice());
            match params.kind {
                SearchKind::Keywords => {
                    let Some(scores) = lexical else { continue };
                    for (i, &k) in scores.iter().enumerate() {
                        if k > 0.0 && params.filter.matches(&seg.records[i]) {
                            top.offer(s, i, &seg.records[i], sanitize(k));
                        }
                    }
                }
                SearchKind::Semantic | SearchKind::Hybrid => {
                    if seg.dim != params.vector.len() {
                        continue;
                    }
                    for (i, record) in seg.records.iter().enumerate() {
                        if !live[i] || !params.filter.matches(record) {
                            continue;
                        }
                        // Rounding can push the dot of two unit vectors past ±1.
                        let cosine = f64::from(dot(params.vector, seg.vector(i))).clamp(-1.0, 1.0);
                        let mut score = sanitize((1.0 + cosine) / 2.0);
                        if let Some(k) = lexical.and_then(|l| l.get(i)) {
                            score += (1.0 - score).max(0.0) * HYBRID_KEYWORD_WEIGHT * k;
                        }
                        top.offer(s, i, record, score);
                    }
                }
            }
        }
        let TopHits { heap, decays, excluded, .. } = top;
        let mut ranked: Vec<Ranked> = heap.into_iter().map(|Reverse(r)| r).collect();
        ranked.sort_by(|a, b| b.cmp(a));
        let hits = ranked
            .into_iter()
            .map(|Ranked(score, s, i)| {
                let decay = decays.get(&(s, i));
                Hit {
                    record: std::borrow::Cow::Borrowed(&self.segments[s].1.records[i]),
                    score,
                    origin_score: decay.map(|d| d.0),
                    time_score: decay.map(|d| d.1),
                }
            })
            .collect();
        (hits, excluded)
    }

    /// Every live record's keyword score for `terms`, per segment and row
    /// (0 for dead records and records matching no term): BM25 divided by
    /// the query's upper bound ([`lexical`]).
    ///
    /// Cost: one walk of each term's postings per segment, one pass over
    /// the live records' lengths, and one score per record allocated.
    fn keyword_scores(&self, terms: &[String]) -> Vec<Vec<f64>> {
        let mut scores: Vec<Vec<f64>> = self.segments.iter().map(|(_, seg)| vec![0.0; seg.records.len()]).collect();
        if terms.is_empty() || self.live_count == 0 {
            return scores;
        }
        let postings: Vec<&lexical::Postings> = self.segments.iter().map(|(_, seg)| seg.postings()).collect();
        let average = *self.average_terms.get_or_init(|| {
            let total: f64 = postings
                .iter()
                .zip(&self.live)
                .map(|(p, live)| {
                    live.iter().enumerate().filter(|(_, l)| **l).map(|(row, _)| f64::from(p.length(row))).sum::<f64>()
                })
                .sum();
            total / self.live_count as f64
        });
        // A long query (agents send whole prompts) keeps its rarest matching
        // terms, which carry BM25's weight, so the work stays bounded;
        // terms no record holds cost nothing and all count in the bound.
        let (mut matching, unheld): (Vec<_>, Vec<_>) = terms
            .iter()
            .map(|t| (postings.iter().map(|p| p.rows(t).len()).sum::<usize>(), t))
            .partition(|(n, _)| *n > 0);
        matching.sort_by_key(|(n, _)| *n);
        let kept = matching.into_iter().take(lexical::MAX_QUERY_TERMS);
        let mut bound = 0.0;
        for (_, term) in unheld.into_iter().chain(kept) {
            let df: usize = postings
                .iter()
                .zip(&self.live)
                .map(|(p, live)| p.rows(term).iter().filter(|(row, _)| live[*row as usize]).count())
                .sum();
            let idf = lexical::idf(self.live_count, df);
            bound += idf * (lexical::K1 + 1.0);
            for (s, (p, live)) in postings.iter().zip(&self.live).enumerate() {
                for &(row, count) in p.rows(term) {
                    let row = row as usize;
                    if live[row] {
                        scores[s][row] += lexical::weight(idf, count, p.length(row), average);
                    }
                }
            }
        }
        if bound > 0.0 {
            for row in scores.iter_mut().flatten() {
                *row = (*row / bound).clamp(0.0, 1.0);
            }
        }
        scores
    }
}

/// The best `limit` hits offered so far, with the exclusion and threshold
/// applied and the decays remembered.
struct TopHits<'p> {
    params: &'p SearchParams<'p>,
    exclude: &'p Exclusion,
    heap: BinaryHeap<Reverse<Ranked>>,
    decays: HashMap<(usize, usize), (f64, f64)>,
    excluded: usize,
}

impl<'p> TopHits<'p> {
    fn new(params: &'p SearchParams<'p>, exclude: &'p Exclusion, live: usize) -> Self {
        let heap = BinaryHeap::with_capacity(params.limit.min(live) + 1);
        Self { params, exclude, heap, decays: HashMap::new(), excluded: 0 }
    }

    /// Offers row `i` of segment `s` (which passed the filter) at `score`.
    fn offer(&mut self, s: usize, i: usize, record: &Record, mut score: f64) {
        if let Some(m) = self.params.decay.as_ref().and_then(|d| d.multiplier(record)) {
            self.decays.insert((s, i), (score, m));
            score *= m;
        }
        if self.params.score_threshold.is_some_and(|t| score <= t) {
            return;
        }
        if self.exclude.excludes(&record.uri) {
            self.excluded += 1;
            return;
        }
        self.heap.push(Reverse(Ranked(score, s, i)));
        if self.heap.len() > self.params.limit {
            self.heap.pop();
        }
    }
}

/// Nodes a search leaves out: whole subtrees (`exclude_uris`) and exact
/// nodes (URIs the dedup ledger cooled).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exclusion {
    /// Each excludes itself and everything under it.
    pub subtrees: Vec<VikingUri>,
    /// Each excludes exactly that node.
    pub exact: HashSet<VikingUri>,
}

impl Exclusion {
    /// Whether `uri` is left out.
    #[must_use]
    pub fn excludes(&self, uri: &VikingUri) -> bool {
        self.exact.contains(uri) || self.subtrees.iter().any(|t| uri.is_under(t))
    }

    /// Whether nothing is excluded.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.subtrees.is_empty() && self.exact.is_empty()
    }
}

/// Non-finite scores become 0.0 (as the reference).
fn sanitize(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// Which rows are live: newest segment first, a `(uri, level)` is live in
/// the newest segment that has it unless a newer tombstone removed it.
/// The nodes a tombstone removed (no newer record), with the tombstone's
/// version.
/// The nodes the index removed, by `(uri, level)`: the newest tombstone
/// of each node no later record brought back.
type Deleted = HashMap<(VikingUri, Level), Removed>;

/// What the index knows of a removed node.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Removed {
    /// [`Tombstone::source_version`].
    version: Option<String>,
    /// [`Tombstone::kept_since`].
    kept_since: Option<i64>,
}

/// The tombstones a compaction at `now_ms` keeps of `deleted`, sorted by
/// node: the versioned ones (an unversioned tombstone has nothing left to
/// remove once merged into the oldest segment, and guards no order), each
/// stamped with when a compaction first kept it, except those kept for
/// longer than `keep` already.
fn kept_tombstones(deleted: &Deleted, now_ms: i64, keep: Duration) -> Vec<Tombstone> {
    let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
    let mut kept: Vec<Tombstone> = deleted
        .iter()
        .filter(|(_, removed)| removed.version.is_some())
        .map(|((uri, level), removed)| Tombstone {
            uri: uri.clone(),
            level: *level,
            source_version: removed.version.clone(),
            kept_since: Some(removed.kept_since.unwrap_or(now_ms)),
        })
        .filter(|t| t.kept_since.is_some_and(|since| now_ms.saturating_sub(since) <= keep_ms))
        .collect();
    kept.sort_by(|a, b| (a.uri.as_str(), a.level).cmp(&(b.uri.as_str(), b.level)));
    kept
}

/// The live records by `(uri, level)`: each key's hash to its segment and
/// row. Two keys whose hashes collide (never seen, but possible) keep the
/// second in `collided`, searched when the first does not match. Cost per
/// record: one entry (about 24 bytes), no copy of its URI.
#[derive(Debug, Default)]
struct Rows {
    by_hash: HashMap<u64, (u32, u32)>,
    collided: Vec<(u64, u32, u32)>,
}

impl Rows {
    fn key(uri: &VikingUri, level: Level) -> u64 {
        use std::hash::Hasher as _;
        let mut hasher = std::hash::DefaultHasher::new();
        hasher.write(uri.as_str().as_bytes());
        hasher.write_u16(level);
        hasher.finish()
    }

    fn insert(&mut self, uri: &VikingUri, level: Level, s: usize, i: usize) {
        let (s, i) = (s as u32, i as u32);
        let hash = Self::key(uri, level);
        match self.by_hash.entry(hash) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert((s, i));
            }
            std::collections::hash_map::Entry::Occupied(_) => self.collided.push((hash, s, i)),
        }
    }

    /// The first row `check` accepts among those hashed like `(uri, level)`.
    fn find<T>(&self, uri: &VikingUri, level: Level, check: impl Fn(usize, usize) -> Option<T>) -> Option<T> {
        let hash = Self::key(uri, level);
        let (s, i) = *self.by_hash.get(&hash)?;
        check(s as usize, i as usize).or_else(|| {
            self.collided.iter().filter(|(h, ..)| *h == hash).find_map(|&(_, s, i)| check(s as usize, i as usize))
        })
    }

    fn memory_bytes(&self) -> usize {
        self.by_hash.capacity() * 24 + self.collided.capacity() * 16
    }
}

fn liveness(segments: &[(String, Arc<Segment>)]) -> (Vec<Vec<bool>>, usize, Rows, Deleted) {
    let mut seen: HashSet<(&VikingUri, Level)> = HashSet::new();
    let mut live: Vec<Vec<bool>> = segments.iter().map(|(_, s)| vec![false; s.records.len()]).collect();
    let mut rows = Rows::default();
    let mut deleted = Deleted::new();
    let mut count = 0;
    for (s, (_, seg)) in segments.iter().enumerate().rev() {
        // Within a segment the last record for a key wins; tombstones only
        // act on older segments, so they join `seen` after the records.
        for (i, r) in seg.records.iter().enumerate().rev() {
            if seen.insert((&r.uri, r.level)) {
                live[s][i] = true;
                rows.insert(&r.uri, r.level, s, i);
                count += 1;
            }
        }
        for t in &seg.tombstones {
            if seen.insert((&t.uri, t.level)) {
                let removed = Removed { version: t.source_version.clone(), kept_since: t.kept_since };
                deleted.insert((t.uri.clone(), t.level), removed);
            }
        }
    }
    (live, count, rows, deleted)
}

/// Keeps accounts' loaded indexes warm between requests, revalidates each
/// by the manifest's etag (one HEAD), reloading only new segments, and
/// keeps their memory within a bound: when the snapshots it holds add up
/// to more than `max_bytes` ([`IndexSnapshot::resident_bytes`], keyword
/// postings included once built; counted at each load), the least
/// recently used accounts' snapshots are dropped (the one just served is
/// always kept, even alone over the bound). Accounts are checked and
/// loaded independently: requests for one account share its load, and a
/// slow load of one account holds up no other.
#[derive(Debug)]
pub struct IndexCache {
    store: SharedStore,
    revalidate_after: Duration,
    max_bytes: usize,
    /// Held only between awaits, never across one.
    entries: std::sync::Mutex<CacheEntries>,
    /// One lock per account, held while its snapshot is checked or loaded.
    loading: std::sync::Mutex<HashMap<AccountId, Arc<tokio::sync::Mutex<()>>>>,
    resident: std::sync::atomic::AtomicUsize,
}

fn locked<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct CacheEntries {
    by_account: HashMap<AccountId, CacheEntry>,
    /// Incremented at every use: an entry's `used` orders eviction.
    clock: u64,
}

#[derive(Debug)]
struct CacheEntry {
    snapshot: Arc<IndexSnapshot>,
    checked: Instant,
    used: u64,
}

/// What the warm cache holds, for the per-request log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheUsage {
    /// Estimated bytes of the snapshots held.
    pub bytes: usize,
    /// The bound.
    pub max_bytes: usize,
}

impl IndexCache {
    /// A cache over `store`. `revalidate_after` is how long a checked
    /// snapshot is trusted without another HEAD (`Duration::ZERO`, the
    /// default configuration, checks on every call); `max_bytes` bounds
    /// the snapshots' estimated memory (configuration
    /// `index.cache_max_bytes`).
    #[must_use]
    pub fn new(store: SharedStore, revalidate_after: Duration, max_bytes: usize) -> Self {
        Self {
            store,
            revalidate_after,
            max_bytes,
            entries: std::sync::Mutex::new(CacheEntries::default()),
            loading: std::sync::Mutex::new(HashMap::new()),
            resident: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The estimated bytes held and the bound. Cost: an atomic load.
    #[must_use]
    pub fn usage(&self) -> CacheUsage {
        CacheUsage { bytes: self.resident.load(AtomicOrdering::Relaxed), max_bytes: self.max_bytes }
    }

    /// The current snapshot of `account`'s index.
    ///
    /// Cost: nothing within `revalidate_after` of the last check; else one
    /// HEAD of the manifest, plus a load of new segments when it changed
    /// (of every segment when the account was evicted or never loaded).
    ///
    /// # Errors
    /// Store or decoding errors.
    pub async fn snapshot(&self, account: &AccountId) -> Result<Arc<IndexSnapshot>, IndexError> {
        self.checked(account, self.revalidate_after).await
    }

    /// The current snapshot of `account`'s index, revalidated now whatever
    /// `revalidate_after` says: for a writer, which must not compare
    /// against an index older than its own last commit.
    ///
    /// Cost: one HEAD of the manifest, plus a load of new segments when it
    /// changed.
    ///
    /// # Errors
    /// Store or decoding errors.
    pub async fn fresh_snapshot(&self, account: &AccountId) -> Result<Arc<IndexSnapshot>, IndexError> {
        self.checked(account, Duration::ZERO).await
    }

    async fn checked(&self, account: &AccountId, trust: Duration) -> Result<Arc<IndexSnapshot>, IndexError> {
        let gate = Arc::clone(locked(&self.loading).entry(account.clone()).or_default());
        let _loading = gate.lock().await;
        let cached = {
            let mut entries = locked(&self.entries);
            entries.clock += 1;
            let now = entries.clock;
            entries.by_account.get_mut(account).map(|entry| {
                entry.used = now;
                (Arc::clone(&entry.snapshot), entry.checked)
            })
        };
        if let Some((snapshot, checked)) = &cached {
            if checked.elapsed() < trust {
                return Ok(Arc::clone(snapshot));
            }
            let current = match self.store.head(&manifest_key(account)).await {
                Ok(meta) => Some(meta.etag),
                Err(StoreError::NotFound(_)) => None,
                Err(e) => return Err(e.into()),
            };
            if current == snapshot.etag {
                if let Some(entry) = locked(&self.entries).by_account.get_mut(account) {
                    entry.checked = Instant::now();
                }
                return Ok(Arc::clone(snapshot));
            }
        }
        let previous = cached.map(|(snapshot, _)| snapshot);
        let loaded = Arc::new(IndexSnapshot::load(&self.store, account, previous.as_deref()).await?);
        drop(previous);
        let mut entries = locked(&self.entries);
        entries.clock += 1;
        let entry = CacheEntry { snapshot: Arc::clone(&loaded), checked: Instant::now(), used: entries.clock };
        entries.by_account.insert(account.clone(), entry);
        self.evict(&mut entries, account);
        Ok(loaded)
    }

    /// Drops the least recently used snapshots other than `keep`'s until
    /// the rest fit the bound; updates the resident count.
    fn evict(&self, entries: &mut CacheEntries, keep: &AccountId) {
        let mut total: usize = entries.by_account.values().map(|e| e.snapshot.resident_bytes()).sum();
        while total > self.max_bytes {
            let oldest = entries
                .by_account
                .iter()
                .filter(|(account, _)| *account != keep)
                .min_by_key(|(_, e)| e.used)
                .map(|(account, _)| account.clone());
            let Some(oldest) = oldest else {
                tracing::warn!(account = %keep, bytes = total, max_bytes = self.max_bytes, "one account's index is over the cache bound");
                break;
            };
            if let Some(evicted) = entries.by_account.remove(&oldest) {
                // Its lock goes too, unless a request is at it.
                let mut loading = locked(&self.loading);
                if loading.get(&oldest).is_some_and(|gate| Arc::strong_count(gate) == 1) {
                    loading.remove(&oldest);
                }
                drop(loading);
                let bytes = evicted.snapshot.resident_bytes();
                total -= bytes;
                tracing::info!(account = %oldest, bytes, "index evicted from the warm cache");
            }
        }
        self.resident.store(total, AtomicOrdering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest at `generation` whose record names `writers` (oldest
    /// first) as the writers of the generations up to it.
    fn manifest(generation: u64, writers: &[&str]) -> Manifest {
        let first = generation + 1 - writers.len() as u64;
        let writers =
            writers.iter().zip(first..).map(|(by, generation)| Written { generation, by: (*by).to_owned() }).collect();
        let embedder = EmbedderInfo { id: "e".into(), dimension: 2 };
        Manifest { generation, writers, ..empty_manifest(&embedder) }
    }

    #[test]
    fn a_read_back_decides_by_the_record_of_writers() {
        // (manifest, the write's base generation, what the read decides)
        let rows: &[(Manifest, u64, Option<bool>)] = &[
            // Ours made generation 5, whatever the segments list now.
            (manifest(5, &["a", "ours"]), 4, Some(true)),
            (manifest(7, &["ours", "b", "c"]), 4, Some(true)),
            // Unchanged since the base: nothing landed.
            (manifest(4, &["a"]), 4, Some(false)),
            (manifest(0, &[]), 0, Some(false)),
            // Others made every generation since the base.
            (manifest(6, &["b", "c"]), 4, Some(false)),
            (manifest(6, &["a", "b", "c"]), 4, Some(false)),
            // The record no longer reaches back to generation 5.
            (manifest(6, &["c"]), 4, None),
            // A manifest written by a writer that keeps no record.
            (manifest(6, &[]), 4, None),
        ];
        for (m, base, decided) in rows {
            assert_eq!(m.written_by("ours", *base), *decided, "{:?} base {base}", m.writers);
        }
        // A record with a hole (a writer that kept none) decides nothing.
        let mut holed = manifest(6, &["a", "b", "c"]);
        holed.writers.remove(1);
        assert_eq!(holed.written_by("ours", 3), None);
        let mut behind = manifest(6, &["b", "c"]);
        behind.generation = 7;
        assert_eq!(behind.written_by("ours", 4), None);
    }

    #[test]
    fn compactions_keep_versioned_tombstones_for_a_week_after_first_keeping_them() {
        const DAY: i64 = 24 * 3600 * 1000;
        let now = 100 * DAY;
        let removed = |version: Option<&str>, kept_since: Option<i64>| Removed {
            version: version.map(str::to_owned),
            kept_since,
        };
        // (what the index holds, kept since after this compaction or gone)
        let rows: &[(Removed, Option<i64>)] = &[
            // First kept now: stamped with this compaction's time.
            (removed(Some("v1"), None), Some(now)),
            (removed(Some("v1"), Some(now - DAY)), Some(now - DAY)),
            (removed(Some("v1"), Some(now - 7 * DAY)), Some(now - 7 * DAY)),
            // Past the week: pruned.
            (removed(Some("v1"), Some(now - 7 * DAY - 1)), None),
            (removed(Some("v1"), Some(0)), None),
            // Unversioned tombstones guard no order; merged, they go.
            (removed(None, None), None),
            (removed(None, Some(now)), None),
            // A stamp from a clock ahead of ours stays.
            (removed(Some("v1"), Some(now + DAY)), Some(now + DAY)),
        ];
        for (i, (held, kept)) in rows.iter().enumerate() {
            let uri = VikingUri::parse(&format!("viking://resources/r{i}.md")).expect("uri");
            let deleted = Deleted::from([((uri, 2), held.clone())]);
            let out = kept_tombstones(&deleted, now, TOMBSTONE_KEEP);
            assert_eq!(out.iter().map(|t| t.kept_since).next(), kept.map(Some), "row {i}: {held:?}");
            assert!(out.iter().all(|t| t.source_version == held.version));
        }
    }

    proptest::proptest! {
        /// However a segment is cut into parts, the parts joined are its
        /// encoding, which decodes to the same records and vectors.
        #[test]
        fn parts_join_into_the_encoding(count in 0usize..40, dim in 1usize..9, part in 1usize..700) {
            let records: Vec<Record> = (0..count)
                .map(|i| {
                    serde_json::from_value(serde_json::json!({
                        "uri": format!("viking://resources/r{i}.md"), "level": 2, "context_type": "resource",
                        "category": "resources", "abstract": "x".repeat(i), "abstract_tokens": 0, "size": 0,
                        "source_hash": "h", "created_at": 0, "updated_at": 0
                    }))
                    .expect("a record")
                })
                .collect();
            let vectors: Vec<f32> = (0..count * dim).map(|v| v as f32 * 0.25).collect();
            let tombstones = vec![Tombstone {
                uri: VikingUri::parse("viking://resources/gone.md").expect("uri"),
                level: 2,
                source_version: Some("v".into()),
                kept_since: Some(1),
            }];
            let segment = Segment { dim, records: records.clone(), vectors: vectors.clone(), tombstones: tombstones.clone(), ..Segment::default() };
            let whole = segment.encode().expect("encodes");
            let mut parts = segment::Parts::new(dim, &records, vectors.chunks_exact(dim), &tombstones, part).expect("parts");
            proptest::prop_assert_eq!(parts.len(), whole.len());
            let hint = parts.size_hint();
            let cut: Vec<Bytes> = parts.by_ref().collect();
            proptest::prop_assert_eq!(hint, (cut.len(), Some(cut.len())), "the hint counts the parts");
            drop(parts);
            proptest::prop_assert!(cut.iter().rev().skip(1).all(|p| p.len() >= part), "only the last part is short");
            proptest::prop_assert_eq!(cut.concat(), whole.to_vec());
            let decoded = Segment::decode(&whole).expect("decodes");
            proptest::prop_assert_eq!(decoded.records, records);
            proptest::prop_assert_eq!(decoded.vectors, vectors);
            proptest::prop_assert_eq!(decoded.tombstones, tombstones);
        }
    }

    #[test]
    fn a_lookup_finds_the_live_row_past_a_hash_collision() {
        let mut rows = Rows::default();
        // Two keys that hash alike (forced): the second is found by its check.
        rows.by_hash.insert(7, (0, 0));
        rows.collided.push((7, 0, 1));
        let uri = VikingUri::parse("viking://resources/a.md").expect("uri");
        let hash = Rows::key(&uri, 2);
        rows.by_hash.insert(hash, (0, 0));
        rows.collided.push((hash, 0, 1));
        assert_eq!(rows.find(&uri, 2, |s, i| (i == 1).then_some((s, i))), Some((0, 1)));
        assert_eq!(rows.find(&uri, 2, |_, _| None::<()>), None);
        assert_eq!(rows.find(&uri, 1, |s, i| Some((s, i))), None, "another level is another key");
    }

    #[test]
    fn lookups_agree_with_a_scan_of_the_live_records() {
        let record = |uri: &str, level: Level, hash: &str| {
            serde_json::from_value::<Record>(serde_json::json!({
                "uri": uri, "level": level, "context_type": "resource", "category": "resources",
                "abstract": "", "abstract_tokens": 0, "size": 0, "source_hash": hash, "created_at": 0, "updated_at": 0
            }))
            .expect("a record")
        };
        // The later record of a key wins within a segment.
        let records = vec![
            record("viking://resources/a.md", 2, "old"),
            record("viking://resources/b.md", 2, "b"),
            record("viking://resources/a.md", 2, "new"),
            record("viking://resources/dir", 0, "d0"),
            record("viking://resources/dir", 1, "d1"),
        ];
        let snapshot = IndexSnapshot::from_records(None, 1, records, vec![0.5; 5]);
        assert_eq!(snapshot.len(), 4);
        for (r, _) in snapshot.records() {
            assert_eq!(snapshot.get(&r.uri, r.level).map(|g| &g.source_hash), Some(&r.source_hash));
        }
        let a = VikingUri::parse("viking://resources/a.md").expect("uri");
        assert_eq!(snapshot.get(&a, 2).map(|r| r.source_hash.as_str()), Some("new"));
        assert!(snapshot.get(&a, 0).is_none());
        assert_eq!(snapshot.version_of(&a, 2), Some(None));
    }
}
