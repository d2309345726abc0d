//! An account's index on either backend: the loaded segments
//! ([`IndexSnapshot`]) or the account's Amazon S3 Vectors index, behind
//! one surface — searches, record lookups, the newest records, the basis a
//! writer compares against — and the commits and migrations that move
//! records between them.
//!
//! **Where an account's index lives** is its manifest's to say
//! ([`Manifest::vectors`]): every request reads the manifest anyway (the
//! warm cache's revalidation), so a migration switches an account with one
//! compare-and-swap of it, and every writer's commit ends with a
//! compare-and-swap of it too — so a write that races a migration is seen
//! by one of the two and lands on the backend the account ends up on. The
//! deployment's `index.backend` only decides where a *new* account starts.
//!
//! **Searches on S3 Vectors.** Each search is one `QueryVectors` (two for
//! hybrid: by meaning, and by meaning among records holding a query term)
//! whose metadata filter is implied by the search's filter
//! ([`remote::pushdown`]). The records that come back (their metadata
//! carries the whole record) are searched again exactly as the segment
//! backend searches (filter, exclusions, threshold, decay, keyword
//! scores), so a result never holds a record the filter rejects. What the
//! service cannot do is rank past `topK` (100): when a query comes back
//! full and the local pass could have wanted more (fewer hits than asked
//! for, or a ranking other than the service's), the result is marked
//! incomplete ([`Searched::incomplete`]). Keyword statistics (IDF,
//! average length) are those of the records that came back.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::filter::{Filter, TimeField, TimeRange};
use super::record::{Level, Record};
use super::{EmbedderInfo, Exclusion, Hit, IndexError, IndexSnapshot, Manifest, SearchKind, SearchParams};
use crate::identity::AccountId;
use crate::store::SharedStore;
use crate::uri::VikingUri;

#[cfg(feature = "s3")]
pub use super::s3vectors::VectorBucket;

/// Without the feature `s3` no vector bucket can be reached.
#[cfg(not(feature = "s3"))]
#[derive(Debug, Clone)]
pub enum VectorBucket {}

/// Which backend holds an account's index (`index.backend` names the one
/// a new account starts on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Segment objects in the store, loaded whole and searched exactly
    /// (the default).
    #[default]
    Segments,
    /// One Amazon S3 Vectors index per account.
    S3vectors,
}

impl Backend {
    /// The configuration and wire name: `segments` or `s3vectors`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Segments => "segments",
            Self::S3vectors => "s3vectors",
        }
    }

    /// Parses a name; `None` for anything else.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Segments, Self::S3vectors].into_iter().find(|b| b.as_str() == text)
    }
}

/// An account's S3 Vectors index, as its manifest names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VectorsRef {
    /// The vector bucket.
    pub bucket: String,
    /// The index in it.
    pub index: String,
}

/// Where commits go: the store (manifests, segments), the vector bucket
/// when one is configured, and the backend a new account starts on.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The store.
    pub store: &'a SharedStore,
    /// The configured vector bucket (its client reaches the bucket a
    /// manifest names too); `None` when none is configured.
    pub vectors: Option<&'a VectorBucket>,
    /// The backend an account without an index starts on.
    pub new_accounts: Backend,
    /// Vectors a second one S3 Vectors index is written at, at most.
    pub write_rate: f64,
}

impl<'a> Target<'a> {
    /// Segments only (no vector bucket): tests and tools.
    #[must_use]
    pub fn segments(store: &'a SharedStore) -> Self {
        Self { store, vectors: None, new_accounts: Backend::Segments, write_rate: 0.0 }
    }
}

/// One search's result.
#[derive(Debug, Clone)]
pub struct Searched<'a> {
    /// The hits, best first.
    pub hits: Vec<Hit<'a>>,
    /// Hits left out by the exclusion (on S3 Vectors, among the records
    /// the queries returned).
    pub excluded: usize,
    /// Whether records the service did not return (past `topK`) might
    /// have made the result; always false on segments.
    pub incomplete: bool,
}

/// How one request's searches went on an S3 Vectors index, as `stats`
/// and find results report it (absent on segments, where every search is
/// exact and complete).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IndexStats {
    /// `s3vectors`.
    pub backend: &'static str,
    /// Searches run (each one or two `QueryVectors`).
    pub searches: usize,
    /// Whether any search may have missed records past the service's
    /// `topK` of 100 (see [`Searched::incomplete`]).
    pub incomplete: bool,
}

impl IndexStats {
    /// Empty stats for `index` (`None` on segments).
    #[must_use]
    pub fn of(index: &AccountIndex) -> Option<Self> {
        match index {
            AccountIndex::Segments(_) => None,
            AccountIndex::Vectors { .. } => Some(Self { backend: Backend::S3vectors.as_str(), ..Self::default() }),
        }
    }

    /// Counts one search.
    pub fn add(&mut self, searched: &Searched<'_>) {
        self.searches += 1;
        self.incomplete |= searched.incomplete;
    }
}

/// An account's index as one request reads it.
#[derive(Debug, Clone)]
pub enum AccountIndex {
    /// Loaded segments.
    Segments(Arc<IndexSnapshot>),
    /// The account's S3 Vectors index.
    Vectors {
        /// The bucket's client.
        bucket: VectorBucket,
        /// The index.
        index: String,
        /// The manifest naming it (its embedder).
        manifest: Manifest,
    },
}

impl AccountIndex {
    /// The index `snapshot`'s manifest says `account` has: the snapshot
    /// itself, or a handle on its S3 Vectors index reached with `vectors`'s
    /// client. Cost: none.
    ///
    /// # Errors
    /// [`IndexError::VectorsUnavailable`] when the index is in S3 Vectors
    /// and no client was given.
    pub fn open(
        account: &AccountId,
        snapshot: Arc<IndexSnapshot>,
        vectors: Option<&VectorBucket>,
    ) -> Result<Self, IndexError> {
        let Some((manifest, location)) =
            snapshot.manifest.as_ref().and_then(|m| m.vectors.clone().map(|location| (m.clone(), location)))
        else {
            return Ok(Self::Segments(snapshot));
        };
        let Some(vectors) = vectors else { return Err(IndexError::VectorsUnavailable(account.to_string())) };
        Ok(Self::Vectors { bucket: in_bucket(vectors, &location.bucket), index: location.index, manifest })
    }

    /// The backend holding it.
    #[must_use]
    pub fn backend(&self) -> Backend {
        match self {
            Self::Segments(_) => Backend::Segments,
            Self::Vectors { .. } => Backend::S3vectors,
        }
    }

    /// Whether there is certainly nothing to find (no segment record; an
    /// S3 Vectors index is never known to be empty without a call).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        match self {
            Self::Segments(snapshot) => snapshot.is_empty(),
            Self::Vectors { .. } => false,
        }
    }

    /// The embedder the index was built with (`None`: no index yet).
    #[must_use]
    pub fn embedder(&self) -> Option<&EmbedderInfo> {
        match self {
            Self::Segments(snapshot) => snapshot.embedder(),
            Self::Vectors { manifest, .. } => Some(&manifest.embedder),
        }
    }

    /// The loaded segments (`None` on S3 Vectors).
    #[must_use]
    pub fn snapshot(&self) -> Option<&Arc<IndexSnapshot>> {
        match self {
            Self::Segments(snapshot) => Some(snapshot),
            Self::Vectors { .. } => None,
        }
    }

    /// Runs every search of `requests`, leaving out `exclude`d nodes, in
    /// order.
    ///
    /// Cost: segments, one exact search each ([`IndexSnapshot::search`]);
    /// S3 Vectors, one `QueryVectors` each (two for hybrid),
    /// [`super::s3vectors::READ_CONCURRENCY`] at once.
    ///
    /// # Errors
    /// [`IndexError::Vectors`] when a query fails.
    pub async fn search(
        &self,
        requests: &[SearchParams<'_>],
        exclude: &Exclusion,
    ) -> Result<Vec<Searched<'_>>, IndexError> {
        match self {
            Self::Segments(snapshot) => Ok(requests
                .iter()
                .map(|params| {
                    let (hits, excluded) = snapshot.search_excluding(params, exclude);
                    Searched { hits, excluded, incomplete: false }
                })
                .collect()),
            #[cfg(feature = "s3")]
            Self::Vectors { bucket, index, manifest } => {
                use futures_util::{StreamExt as _, TryStreamExt as _, stream};
                let dimension = manifest.embedder.dimension;
                // Indexes, not references, as items: a future borrowing a
                // stream's item is not `Send` for every lifetime.
                stream::iter(0..requests.len())
                    .map(|i| Box::pin(remote_search(bucket, index, dimension, &requests[i], exclude)))
                    .buffered(super::s3vectors::READ_CONCURRENCY)
                    .try_collect()
                    .await
            }
            #[cfg(not(feature = "s3"))]
            Self::Vectors { bucket, .. } => match *bucket {},
        }
    }

    /// The live records of `nodes` that the index holds (any order).
    ///
    /// Cost: segments, a hash lookup per node; S3 Vectors, one
    /// `GetVectors` per 100 nodes.
    ///
    /// # Errors
    /// [`IndexError::Vectors`].
    pub async fn lookup(&self, nodes: &[(VikingUri, Level)]) -> Result<Vec<Record>, IndexError> {
        match self {
            Self::Segments(snapshot) => {
                let wanted: HashSet<(&VikingUri, Level)> = nodes.iter().map(|(u, l)| (u, *l)).collect();
                Ok(wanted.into_iter().filter_map(|(uri, level)| snapshot.get(uri, level)).cloned().collect())
            }
            #[cfg(feature = "s3")]
            Self::Vectors { bucket, index, .. } => {
                let keys: Vec<String> = nodes.iter().map(|(u, l)| super::remote::vector_key(u, *l)).collect();
                Ok(bucket.get(index, &keys, false).await?.into_iter().map(|(r, _)| r).collect())
            }
            #[cfg(not(feature = "s3"))]
            Self::Vectors { bucket, .. } => match *bucket {},
        }
    }

    /// The records of `nodes` with their vectors, as an index snapshot a
    /// writer computes against (what it holds of each node: its time, its
    /// vector when unchanged, its version).
    ///
    /// Cost: segments, none (the loaded snapshot); S3 Vectors, one
    /// `GetVectors` per 100 nodes.
    ///
    /// # Errors
    /// [`IndexError::Vectors`].
    pub async fn basis(&self, nodes: &[(VikingUri, Level)]) -> Result<Arc<IndexSnapshot>, IndexError> {
        match self {
            Self::Segments(snapshot) => Ok(Arc::clone(snapshot)),
            #[cfg(feature = "s3")]
            Self::Vectors { bucket, index, manifest } => {
                let keys: Vec<String> = nodes.iter().map(|(u, l)| super::remote::vector_key(u, *l)).collect();
                let stored = bucket.get(index, &keys, true).await?;
                Ok(Arc::new(stored_snapshot(manifest.clone(), stored)))
            }
            #[cfg(not(feature = "s3"))]
            Self::Vectors { bucket, .. } => match *bucket {},
        }
    }

    /// Every live record (for `ingest`'s comparison with a local tree).
    ///
    /// Cost: segments, a copy of every record; S3 Vectors, one
    /// `ListVectors` per 500 records.
    ///
    /// # Errors
    /// [`IndexError::Vectors`].
    pub async fn all_records(&self) -> Result<Vec<Record>, IndexError> {
        match self {
            Self::Segments(snapshot) => Ok(snapshot.records().map(|(r, _)| r.clone()).collect()),
            #[cfg(feature = "s3")]
            Self::Vectors { bucket, index, .. } => {
                Ok(bucket.list(index, false).await?.into_iter().map(|(r, _)| r).collect())
            }
            #[cfg(not(feature = "s3"))]
            Self::Vectors { bucket, .. } => match *bucket {},
        }
    }

    /// The newest `max` records passing `filter` by `field`, at or after
    /// `since`, newest first (ties by URI); and whether the list may miss
    /// some (S3 Vectors only: more than 100 records shared one second).
    ///
    /// Cost: segments, one scan. S3 Vectors: one filtered `QueryVectors`
    /// when at most 100 records match; past that, queries over time
    /// windows ending at `now` — 1 hour, then 8× wider each time — until
    /// one holds `max` records and fewer than 100, and a window that comes
    /// back full is halved until it does not: about a dozen in all.
    ///
    /// # Errors
    /// [`IndexError::Vectors`].
    pub async fn newest(
        &self,
        filter: &Filter,
        field: TimeField,
        since: i64,
        max: usize,
        now: i64,
    ) -> Result<(Vec<Record>, bool), IndexError> {
        let time = |r: &Record| match field {
            TimeField::CreatedAt => r.created_at,
            TimeField::UpdatedAt => r.updated_at,
        };
        let order = |found: &mut Vec<Record>| {
            found.sort_by(|a, b| time(b).cmp(&time(a)).then_with(|| a.uri.cmp(&b.uri)));
            found.truncate(max);
        };
        match self {
            Self::Segments(snapshot) => {
                // Sorted by reference; only the newest `max` are copied.
                let mut found: Vec<&Record> =
                    snapshot.records().map(|(r, _)| r).filter(|r| time(r) >= since && filter.matches(r)).collect();
                found.sort_by(|a, b| time(b).cmp(&time(a)).then_with(|| a.uri.cmp(&b.uri)));
                Ok((found.into_iter().take(max).cloned().collect(), false))
            }
            #[cfg(feature = "s3")]
            Self::Vectors { bucket, index, manifest } => {
                if max == 0 {
                    return Ok((Vec::new(), false));
                }
                let probe = ProbeQuery { bucket, index, dimension: manifest.embedder.dimension, filter, field, now };
                // Boxed: the probes' state would weigh on every caller's future.
                let (mut found, incomplete) = Box::pin(probe.newest(since, max)).await?;
                order(&mut found);
                Ok((found, incomplete))
            }
            #[cfg(not(feature = "s3"))]
            Self::Vectors { bucket, .. } => match *bucket {},
        }
    }
}

#[cfg(feature = "s3")]
fn in_bucket(vectors: &VectorBucket, bucket: &str) -> VectorBucket {
    vectors.in_bucket(bucket)
}

#[cfg(not(feature = "s3"))]
fn in_bucket(vectors: &VectorBucket, _: &str) -> VectorBucket {
    match *vectors {}
}

/// A snapshot of records read back from S3 Vectors with their vectors
/// (records without one are left out).
#[cfg(feature = "s3")]
fn stored_snapshot(manifest: Manifest, stored: Vec<super::s3vectors::Stored>) -> IndexSnapshot {
    let dimension = manifest.embedder.dimension;
    let (records, vectors): (Vec<Record>, Vec<Vec<f32>>) =
        stored.into_iter().filter_map(|(r, v)| v.filter(|v| v.len() == dimension).map(|v| (r, v))).unzip();
    IndexSnapshot::from_records(Some(manifest), dimension, records, vectors.concat())
}

/// One search on S3 Vectors: the queries, then the exact pass over what
/// came back (see the module's documentation).
#[cfg(feature = "s3")]
async fn remote_search(
    bucket: &VectorBucket,
    index: &str,
    dimension: usize,
    params: &SearchParams<'_>,
    exclude: &Exclusion,
) -> Result<Searched<'static>, IndexError> {
    use super::remote::{MAX_TOP_K, pushdown};

    if params.limit == 0 {
        return Ok(Searched { hits: Vec::new(), excluded: 0, incomplete: false });
    }
    let semantic = pushdown(params.filter, None);
    let reranked = params.decay.is_some() || params.kind != SearchKind::Semantic;
    // Exactly what is asked for when the service applies everything;
    // otherwise room for what the local pass may drop.
    let plain = semantic.exact && !reranked && exclude.is_empty() && params.score_threshold.is_none();
    let top_k = if plain { params.limit } else { params.limit * 3 + exclude.exact.len() }.clamp(1, MAX_TOP_K);
    // A keyword search without an embedding still needs a query vector:
    // any unit vector (the term filter picks the records).
    let unit: Vec<f32>;
    let vector = if params.vector.len() == dimension {
        params.vector
    } else {
        unit = (0..dimension).map(|i| if i == 0 { 1.0 } else { 0.0 }).collect();
        &unit
    };
    let by_terms = || pushdown(params.filter, Some(params.terms));
    let (first, second) = match params.kind {
        SearchKind::Semantic => (bucket.query(index, vector, top_k, semantic.filter.as_ref()).await?, Vec::new()),
        SearchKind::Keywords => {
            if params.terms.is_empty() {
                return Ok(Searched { hits: Vec::new(), excluded: 0, incomplete: false });
            }
            (bucket.query(index, vector, top_k, by_terms().filter.as_ref()).await?, Vec::new())
        }
        SearchKind::Hybrid => {
            let terms = by_terms();
            let (a, b) = tokio::join!(bucket.query(index, vector, top_k, semantic.filter.as_ref()), async {
                if params.terms.is_empty() {
                    Ok(Vec::new())
                } else {
                    bucket.query(index, vector, top_k, terms.filter.as_ref()).await
                }
            });
            (a?, b?)
        }
    };
    let full = first.len() >= top_k || second.len() >= top_k;
    let mut seen: HashSet<(VikingUri, Level)> = HashSet::new();
    let mut records = Vec::new();
    let mut vectors = Vec::new();
    for (record, cosine) in first.into_iter().chain(second) {
        if seen.insert((record.uri.clone(), record.level)) {
            // A vector whose dot with the query is the cosine the service
            // measured, so the exact pass scores as the service ranked.
            vectors.extend(vector.iter().map(|x| x * cosine as f32));
            records.push(record);
        }
    }
    let candidates = IndexSnapshot::from_records(None, dimension, records, vectors);
    let local = SearchParams { vector, ..params.clone() };
    let (hits, excluded) = candidates.search_excluding(&local, exclude);
    let incomplete = full && (hits.len() < params.limit || reranked);
    let hits = hits
        .into_iter()
        .map(|h| Hit {
            record: std::borrow::Cow::Owned(h.record.into_owned()),
            score: h.score,
            origin_score: h.origin_score,
            time_score: h.time_score,
        })
        .collect();
    Ok(Searched { hits, excluded, incomplete })
}

/// The widest time window before the last one (which starts at `since`,
/// however far back): about 200 years.
#[cfg(feature = "s3")]
const MAX_WINDOW_S: i64 = 200 * 365 * 86_400;

/// The newest records through filtered time-window queries.
#[cfg(feature = "s3")]
struct ProbeQuery<'a> {
    bucket: &'a VectorBucket,
    index: &'a str,
    dimension: usize,
    filter: &'a Filter,
    field: TimeField,
    now: i64,
}

#[cfg(feature = "s3")]
impl ProbeQuery<'_> {
    /// The records passing the filter at or after `from` (up to 100) and
    /// whether the service had more.
    async fn window(&self, from: i64) -> Result<(Vec<Record>, bool), IndexError> {
        use super::remote::{MAX_TOP_K, pushdown};
        let mut filter = self.filter.clone();
        let range = TimeRange { field: self.field, since: Some(from), until: None };
        filter.expr = Some(match filter.expr.take() {
            Some(expr) => super::filter::FilterExpr::And(vec![expr, range_expr(range)]),
            None => range_expr(range),
        });
        let pushed = pushdown(&filter, None);
        let unit: Vec<f32> = (0..self.dimension).map(|i| if i == 0 { 1.0 } else { 0.0 }).collect();
        let found = self.bucket.query(self.index, &unit, MAX_TOP_K, pushed.filter.as_ref()).await?;
        let full = found.len() >= MAX_TOP_K;
        Ok((found.into_iter().map(|(r, _)| r).filter(|r| filter.matches(r)).collect(), full))
    }

    async fn newest(&self, since: i64, max: usize) -> Result<(Vec<Record>, bool), IndexError> {
        // Everything since `since`: complete unless the service had more.
        let (all, full) = self.window(since).await?;
        if !full {
            return Ok((all, false));
        }
        // More than 100 match: the narrowest window ending now that holds
        // `max` of them without coming back full.
        let mut width: i64 = 3600;
        // The widest window known to come back not full, and its records.
        let mut settled: Vec<Record> = Vec::new();
        let mut narrow_from = self.now;
        loop {
            let reaches = width > MAX_WINDOW_S || i128::from(self.now) - i128::from(width) <= i128::from(since);
            let (from, found, full) = if reaches {
                (since, all.clone(), true)
            } else {
                let from = self.now - width;
                let (found, full) = self.window(from).await?;
                (from, found, full)
            };
            if !full && found.len() >= max {
                return Ok((found, false));
            }
            if full {
                // Between `narrow_from` (not full) and `from` (full): halve.
                let (mut lo, mut hi) = (from, narrow_from);
                let mut best = found;
                while i128::from(hi) - i128::from(lo) > 1 {
                    let mid = i64::try_from((i128::from(lo) + i128::from(hi)) / 2).unwrap_or(lo);
                    let (found, full) = self.window(mid).await?;
                    if full {
                        lo = mid;
                        best = found;
                    } else if found.len() >= max {
                        return Ok((found, false));
                    } else {
                        hi = mid;
                        settled = found;
                    }
                }
                // More than 100 records within one second: what came back.
                let mut all = settled;
                all.extend(best);
                let mut seen = HashSet::new();
                all.retain(|r| seen.insert((r.uri.clone(), r.level)));
                return Ok((all, true));
            }
            settled = found;
            narrow_from = from;
            width = width.saturating_mul(8);
        }
    }
}

#[cfg(feature = "s3")]
fn range_expr(range: TimeRange) -> super::filter::FilterExpr {
    let field = match range.field {
        TimeField::CreatedAt => super::filter::Field::CreatedAt,
        TimeField::UpdatedAt => super::filter::Field::UpdatedAt,
    };
    super::filter::FilterExpr::Range { field, lower: range.since.map(|s| (s as f64, true)), upper: None }
}

/// What a commit did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// Versioned entries dropped because the index held their node at the
    /// same or a newer version.
    pub dropped: usize,
    /// The backend the entries went to.
    pub backend: Backend,
}

/// Commits `segment` to `account`'s index wherever it lives — segments
/// ([`super::commit`], or [`super::commit_ordered`] against `basis`) or
/// its S3 Vectors index — starting a new account on
/// `target.new_accounts`.
///
/// On S3 Vectors: versioned entries the index holds at the same or a newer
/// version are dropped first (one `GetVectors` per 100 entries), removals
/// are deleted and records upserted in batches of 500 at
/// `target.write_rate`, then the manifest's generation is moved by
/// compare-and-swap, which is where a migration that switched the account
/// meanwhile is seen: the same entries are then committed again to where
/// the account now is. A new account on S3 Vectors costs a `CreateIndex`
/// and the manifest's creation first.
///
/// Unknown outcomes: as [`super::commit`] on segments. On S3 Vectors every
/// write is an upsert or delete by key: an error leaves some batches
/// written and the caller's retry of the commit writes them again, which
/// neither duplicates nor loses a record. Ordering on S3 Vectors is
/// checked against what the index holds just before the writes, without a
/// lock: two writers of the same node in that window can leave the older
/// version until the node's next change (the indexer reads each node's
/// current object, so it takes two notifications of one node handled at
/// once, each reading a different version).
///
/// # Errors
/// As [`super::commit`]; [`IndexError::Vectors`];
/// [`IndexError::VectorsUnavailable`] when the account is in S3 Vectors
/// and no bucket is configured.
pub async fn commit(
    target: &Target<'_>,
    account: &AccountId,
    embedder: &EmbedderInfo,
    segment: super::Segment,
    basis: Option<&IndexSnapshot>,
) -> Result<Committed, IndexError> {
    for attempt in 0..4 {
        // Where the account is: the basis's manifest says (a writer just
        // read it); without one, a segment commit reads the manifest
        // itself (and says when the account has moved); after a move, or
        // to start a new account elsewhere, it is read here.
        let manifest = match (attempt, basis) {
            (0, Some(basis)) => Some(basis.manifest.clone()),
            (0, None) if target.new_accounts == Backend::Segments => Some(None),
            _ => None,
        };
        let manifest = match manifest {
            Some(known) => known,
            None => super::read_manifest(target.store, account).await?.map(|(m, _)| m),
        };
        let starts_remote = manifest.is_none() && target.new_accounts == Backend::S3vectors;
        let location = manifest.as_ref().and_then(|m| m.vectors.clone());
        // Boxed: the two backends' futures nest deeply.
        let result = match (location, starts_remote) {
            (None, false) => match basis {
                Some(basis) => Box::pin(super::commit_ordered(target.store, account, embedder, segment.clone(), basis))
                    .await
                    .map(|(_, dropped)| Committed { dropped, backend: Backend::Segments }),
                None => Box::pin(super::commit(target.store, account, embedder, &segment))
                    .await
                    .map(|_| Committed { dropped: 0, backend: Backend::Segments }),
            },
            (location, _) => {
                let Some(vectors) = target.vectors else {
                    return Err(IndexError::VectorsUnavailable(account.to_string()));
                };
                Box::pin(remote_commit(target, vectors, account, embedder, segment.clone(), location)).await
            }
        };
        match result {
            Err(IndexError::Moved(_)) => {
                tracing::info!(account = %account, "index moved during a commit; committing again")
            }
            other => return other,
        }
    }
    Err(IndexError::Contention(account.to_string()))
}

#[cfg(not(feature = "s3"))]
async fn remote_commit(
    _: &Target<'_>,
    vectors: &VectorBucket,
    _: &AccountId,
    _: &EmbedderInfo,
    _: super::Segment,
    _: Option<VectorsRef>,
) -> Result<Committed, IndexError> {
    match *vectors {}
}

#[cfg(feature = "s3")]
async fn remote_commit(
    target: &Target<'_>,
    vectors: &VectorBucket,
    account: &AccountId,
    embedder: &EmbedderInfo,
    mut segment: super::Segment,
    location: Option<VectorsRef>,
) -> Result<Committed, IndexError> {
    use super::remote::vector_key;

    if segment.dim != embedder.dimension {
        return Err(IndexError::Corrupt(format!(
            "segment dimension {} does not match embedder {embedder}",
            segment.dim
        )));
    }
    let location = match location {
        Some(location) => location,
        None => start_remote(target, vectors, account, embedder).await?,
    };
    let bucket = vectors.in_bucket(&location.bucket);
    let moved = |e: IndexError| match e {
        // A migration back deleted the index after switching the account.
        IndexError::Vectors { code: Some(code), .. } if code == "NotFoundException" => {
            IndexError::Moved(account.to_string())
        }
        e => e,
    };
    // A passage is judged by its file's version (`drop_superseded`).
    let versioned: Vec<(VikingUri, Level)> = segment
        .records
        .iter()
        .filter(|r| r.source_version.is_some())
        .map(|r| (r.uri.clone(), r.level.min(super::record::LEVEL_FILE)))
        .chain(
            segment
                .tombstones
                .iter()
                .filter(|t| t.source_version.is_some())
                .map(|t| (t.uri.clone(), t.level.min(super::record::LEVEL_FILE))),
        )
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut dropped = 0;
    if !versioned.is_empty() {
        let keys: Vec<String> = versioned.iter().map(|(u, l)| vector_key(u, *l)).collect();
        let held = bucket.get(&location.index, &keys, false).await.map_err(moved)?;
        let manifest = Manifest { vectors: Some(location.clone()), ..super::empty_manifest(embedder) };
        let dim = embedder.dimension;
        let vectors = vec![0.0; held.len() * dim];
        let current =
            IndexSnapshot::from_records(Some(manifest), dim, held.into_iter().map(|(r, _)| r).collect(), vectors);
        dropped = segment.drop_superseded(&current);
    }
    let kept: HashSet<(&VikingUri, Level)> = segment.records.iter().map(|r| (&r.uri, r.level)).collect();
    let removals: Vec<String> = segment
        .tombstones
        .iter()
        .filter(|t| !kept.contains(&(&t.uri, t.level)))
        .map(|t| vector_key(&t.uri, t.level))
        .collect();
    if !removals.is_empty() {
        bucket.delete(&location.index, &removals).await.map_err(moved)?;
    }
    // Within a segment the last record of a node wins.
    let mut last: HashMap<(&VikingUri, Level), usize> = HashMap::new();
    for (i, r) in segment.records.iter().enumerate() {
        last.insert((&r.uri, r.level), i);
    }
    let mut rows: Vec<usize> = last.into_values().collect();
    rows.sort_unstable();
    let puts: Vec<(&Record, &[f32])> = rows.iter().map(|&i| (&segment.records[i], segment.vector(i))).collect();
    if !puts.is_empty() {
        bucket.put(&location.index, &puts, target.write_rate).await.map_err(moved)?;
    }
    // The commit point: the manifest still names this index.
    let (_, edit) = super::swap_manifest(target.store, account, embedder, None, |m| {
        if m.vectors.as_ref() == Some(&location) { super::Edit::Write } else { super::Edit::Abandoned }
    })
    .await?;
    if edit == super::Edit::Abandoned {
        return Err(IndexError::Moved(account.to_string()));
    }
    Ok(Committed { dropped, backend: Backend::S3vectors })
}

/// Starts `account` on S3 Vectors: its index, then a manifest naming it
/// (created only if none exists; an account someone else started wins).
#[cfg(feature = "s3")]
async fn start_remote(
    target: &Target<'_>,
    vectors: &VectorBucket,
    account: &AccountId,
    embedder: &EmbedderInfo,
) -> Result<VectorsRef, IndexError> {
    let location = VectorsRef { bucket: vectors.bucket().to_owned(), index: vectors.index_name(account) };
    vectors.ensure_index(&location.index, embedder.dimension).await?;
    let (manifest, _) = super::swap_manifest(target.store, account, embedder, Some(None), |m| {
        if m.vectors.as_ref() == Some(&location) {
            super::Edit::Landed
        } else if m.vectors.is_none() && m.segments.is_empty() && m.generation == 0 {
            m.vectors = Some(location.clone());
            super::Edit::Write
        } else {
            super::Edit::Abandoned
        }
    })
    .await?;
    match manifest.vectors {
        Some(ours) if ours == location => Ok(ours),
        _ => Err(IndexError::Moved(account.to_string())),
    }
}

/// What a migration did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migrated {
    /// Records the account's index holds on the new backend.
    pub records: usize,
    /// Copy passes (more than one when writers committed during the copy).
    pub passes: usize,
    /// Whether the account was already there (nothing copied).
    pub already: bool,
}

/// How long a migration waits after the switch before deleting the old
/// backend's data, so that a request that read the manifest just before
/// the switch still finds it: longer than any request's deadline (29 s).
pub const DEFAULT_DELETE_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// Moves `account`'s index to `to`, copying its records and vectors (no
/// re-embedding), and switches the account only when the copy is
/// complete: the switch is a compare-and-swap of the manifest that fails
/// if any writer committed since the copy began, in which case what
/// changed is copied and the switch tried again. Searches keep using the
/// old backend until the switch and the new one after it; the old data
/// (segment objects, or the S3 Vectors index) is deleted `grace` after the
/// switch. `progress` is called with the records copied so far.
///
/// Cost, to S3 Vectors: a load of the segments, a `CreateIndex`, one
/// `PutVectors` per 500 records at `target.write_rate` (2,500 a second by
/// default: 400 s per million records), one manifest swap, a delete per
/// old segment. Back to segments: one `ListVectors` per 500 records (the
/// whole index, vectors included, in this process's memory, as the segment
/// backend will hold it), one segment put, one manifest swap, a
/// `DeleteIndex`.
///
/// Unknown outcomes: the copy is idempotent (upserts by key; a segment
/// under a key of its own) and the switch is decided by reading the
/// manifest back, so running the command again after any failure
/// finishes the move; data left behind by a failed run is overwritten or
/// unreferenced, never read.
///
/// # Errors
/// [`IndexError::VectorsUnavailable`] without a vector bucket;
/// [`IndexError::Contention`] when writers kept committing through 16
/// copy passes; store and S3 Vectors errors.
pub async fn migrate(
    target: &Target<'_>,
    account: &AccountId,
    to: Backend,
    grace: std::time::Duration,
    progress: &mut (dyn FnMut(usize) + Send),
) -> Result<Migrated, IndexError> {
    let Some(vectors) = target.vectors else { return Err(IndexError::VectorsUnavailable(account.to_string())) };
    migrate_with(target, vectors, account, to, grace, progress).await
}

#[cfg(not(feature = "s3"))]
async fn migrate_with(
    _: &Target<'_>,
    vectors: &VectorBucket,
    _: &AccountId,
    _: Backend,
    _: std::time::Duration,
    _: &mut (dyn FnMut(usize) + Send),
) -> Result<Migrated, IndexError> {
    match *vectors {}
}

#[cfg(feature = "s3")]
async fn migrate_with(
    target: &Target<'_>,
    vectors: &VectorBucket,
    account: &AccountId,
    to: Backend,
    grace: std::time::Duration,
    progress: &mut (dyn FnMut(usize) + Send),
) -> Result<Migrated, IndexError> {
    match to {
        Backend::S3vectors => to_vectors(target, vectors, account, grace, progress).await,
        Backend::Segments => to_segments(target, vectors, account, grace, progress).await,
    }
}

/// Copy passes before a migration gives up on a busy account.
#[cfg(feature = "s3")]
const MIGRATE_PASSES: usize = 16;

#[cfg(feature = "s3")]
async fn to_vectors(
    target: &Target<'_>,
    vectors: &VectorBucket,
    account: &AccountId,
    grace: std::time::Duration,
    progress: &mut (dyn FnMut(usize) + Send),
) -> Result<Migrated, IndexError> {
    use super::remote::vector_key;

    let mut previous: Option<IndexSnapshot> = None;
    // What the S3 Vectors index holds from earlier passes: key → source hash.
    let mut copied: HashMap<String, (String, Option<String>)> = HashMap::new();
    let mut location: Option<VectorsRef> = None;
    for pass in 1..=MIGRATE_PASSES {
        let Some((manifest, _)) = super::read_manifest(target.store, account).await? else {
            return Ok(Migrated { records: 0, passes: pass - 1, already: true });
        };
        if manifest.vectors.is_some() {
            return Ok(Migrated { records: 0, passes: pass - 1, already: pass == 1 });
        }
        let snapshot = IndexSnapshot::load(target.store, account, previous.as_ref()).await?;
        let Some(manifest) = snapshot.manifest.clone() else {
            return Ok(Migrated { records: 0, passes: pass - 1, already: true });
        };
        let dimension = manifest.embedder.dimension;
        let location = match &location {
            Some(l) => l.clone(),
            None => {
                let l = VectorsRef { bucket: vectors.bucket().to_owned(), index: vectors.index_name(account) };
                vectors.ensure_index(&l.index, dimension).await?;
                location = Some(l.clone());
                l
            }
        };
        let bucket = vectors.in_bucket(&location.bucket);
        let live: HashMap<String, (&Record, &[f32])> =
            snapshot.records().map(|(r, v)| (vector_key(&r.uri, r.level), (r, v))).collect();
        let stale: Vec<String> = copied.keys().filter(|k| !live.contains_key(*k)).cloned().collect();
        let puts: Vec<(&Record, &[f32])> = live
            .iter()
            .filter(|(k, (r, _))| copied.get(*k) != Some(&(r.source_hash.clone(), r.source_version.clone())))
            .map(|(_, rv)| *rv)
            .collect();
        if !stale.is_empty() {
            bucket.delete(&location.index, &stale).await?;
            for k in &stale {
                copied.remove(k);
            }
        }
        for chunk in puts.chunks(super::remote::MAX_WRITE_BATCH) {
            bucket.put(&location.index, chunk, target.write_rate).await?;
            for (r, _) in chunk {
                copied.insert(vector_key(&r.uri, r.level), (r.source_hash.clone(), r.source_version.clone()));
            }
            progress(copied.len());
        }
        let expected = manifest.segments.clone();
        let (_, edit) = super::swap_manifest(target.store, account, &manifest.embedder, None, |m| {
            if m.vectors.as_ref() == Some(&location) {
                super::Edit::Landed
            } else if m.vectors.is_none() && m.segments == expected {
                m.vectors = Some(location.clone());
                m.segments.clear();
                super::Edit::Write
            } else {
                super::Edit::Abandoned
            }
        })
        .await?;
        if edit != super::Edit::Abandoned {
            let records = live.len();
            drop(live);
            tokio::time::sleep(grace).await;
            for seg in &expected {
                if let Err(e) = target.store.delete(&seg.key).await {
                    tracing::debug!(key = seg.key, error = %e, "an old segment was not deleted");
                }
            }
            return Ok(Migrated { records, passes: pass, already: false });
        }
        drop(live);
        previous = Some(snapshot);
    }
    Err(IndexError::Contention(account.to_string()))
}

#[cfg(feature = "s3")]
async fn to_segments(
    target: &Target<'_>,
    vectors: &VectorBucket,
    account: &AccountId,
    grace: std::time::Duration,
    progress: &mut (dyn FnMut(usize) + Send),
) -> Result<Migrated, IndexError> {
    for pass in 1..=MIGRATE_PASSES {
        let Some((manifest, _)) = super::read_manifest(target.store, account).await? else {
            return Ok(Migrated { records: 0, passes: 0, already: true });
        };
        let Some(location) = manifest.vectors.clone() else {
            return Ok(Migrated { records: 0, passes: pass - 1, already: pass == 1 });
        };
        let bucket = vectors.in_bucket(&location.bucket);
        let dimension = manifest.embedder.dimension;
        let stored = bucket.list(&location.index, true).await?;
        let mut segment = super::Segment { dim: dimension, ..super::Segment::default() };
        for (record, vector) in stored {
            if let Some(vector) = vector.filter(|v| v.len() == dimension) {
                segment.records.push(record);
                segment.vectors.extend_from_slice(&vector);
            }
        }
        let records = segment.records.len();
        progress(records);
        let seg_ref =
            if records == 0 { None } else { Some(super::write_segment(target.store, account, &segment).await?) };
        drop(segment);
        let (_, edit) = super::swap_manifest(target.store, account, &manifest.embedder, None, |m| {
            if m.vectors.is_none() && seg_ref.as_ref().is_none_or(|s| m.segments.contains(s)) {
                super::Edit::Landed
            } else if m.vectors.as_ref() == Some(&location) && m.generation == manifest.generation {
                m.vectors = None;
                m.segments = seg_ref.iter().cloned().collect();
                super::Edit::Write
            } else {
                super::Edit::Abandoned
            }
        })
        .await?;
        if edit != super::Edit::Abandoned {
            tokio::time::sleep(grace).await;
            bucket.delete_index(&location.index).await?;
            return Ok(Migrated { records, passes: pass, already: false });
        }
        if let Some(seg_ref) = seg_ref
            && let Err(e) = target.store.delete(&seg_ref.key).await
        {
            tracing::debug!(key = seg_ref.key, error = %e, "an unreferenced segment was not deleted");
        }
    }
    Err(IndexError::Contention(account.to_string()))
}
