//! `find`: the retrieval primitive — one embedding, one exact vector search,
//! no LLM, and no content read unless the caller asks (`read_content`).
//! The result ([`FindResult`]) serialises to the reference's list-mode
//! shape (`FindResult` in `infra/openapi.json`). What it shares with the
//! other retrieval routes lives in [`crate::retrieval`].

use futures_util::{StreamExt as _, stream};
use serde::Serialize;

use crate::app::App;
use crate::content::{Lines, MAX_READ_BYTES, slice_lines};
use crate::identity::Identity;
use crate::index::account::IndexStats;
use crate::index::filter::{FilterExpr, TimeField, TimeRange};
use crate::index::record::LEVEL_FILE;
use crate::index::{
    AccountIndex, ContextType, EventDecay, Exclusion, Filter, Hit, Level, SearchKind, SearchParams, lexical,
};
use crate::retrieval::{RetrievalError, checked_index, default_targets, embed_queries, vectors_for};
use crate::store::StoreError;
use crate::uri::{VikingUri, tree_key};

/// Bodies read at once for `read_content`.
pub const READ_CONTENT_CONCURRENCY: usize = 10;

/// A find result: hits by context type, best first within each list, as
/// the reference's list mode (`FindResult` in `infra/openapi.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FindResult {
    /// Memory hits.
    pub memories: Vec<FindItem>,
    /// Resource hits.
    pub resources: Vec<FindItem>,
    /// Skill hits.
    pub skills: Vec<FindItem>,
    /// The hits in all three lists.
    pub total: usize,
    /// With `include_provenance`: one entry per query searched (absent
    /// without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Vec<Provenance>>,
    /// How the searches went on an S3 Vectors index (absent on segments).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexStats>,
}

/// One hit, as the reference's list-mode item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindItem {
    /// `memory`, `resource` or `skill`.
    pub context_type: &'static str,
    /// The node (a directory's carries its level suffix).
    pub uri: String,
    /// 0 (abstract), 1 (overview) or 2 (file, or a passage of one).
    pub level: Level,
    /// When the best match in the file was one of its passages: the
    /// passage's first and last line (1-based; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<[u32; 2]>,
    /// The score (after the event decay, when applied).
    pub score: f64,
    /// The record's abstract.
    #[serde(rename = "abstract")]
    pub abstract_text: String,
    /// The record's tags.
    pub tags: Vec<String>,
    /// The score before the event decay (only when it applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin_score: Option<f64>,
    /// The decay multiplier (only with `origin_score`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_score: Option<f64>,
    /// The body (only with `read_content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

impl FindItem {
    /// The item of `hit` (no `content`).
    #[must_use]
    pub fn from_hit(hit: &Hit<'_>) -> Self {
        let r = &hit.record;
        let (origin_score, time_score) = match (hit.origin_score, hit.time_score) {
            (Some(origin), Some(time)) => (Some(origin), Some(time)),
            _ => (None, None),
        };
        Self {
            context_type: r.context_type.as_str(),
            uri: r.display_uri(),
            level: r.level.min(LEVEL_FILE),
            lines: r.span.map(|s| [s.first_line, s.last_line]),
            score: hit.score,
            abstract_text: r.abstract_text.clone(),
            tags: r.tags.clone(),
            origin_score,
            time_score,
            content: None,
        }
    }
}

/// One query's search (the reference's `QueryResult` as
/// `FindResult.to_dict(include_provenance=True)` shows it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Provenance {
    /// The query.
    pub query: String,
    /// The target URIs it searched under.
    pub searched_directories: Vec<String>,
    /// Its own top `limit`, before queries merge.
    pub matched_contexts: Vec<MatchedContext>,
}

/// One match of a [`Provenance`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatchedContext {
    /// The node.
    pub uri: String,
    /// `L0`, `L1` or `L2`.
    pub tier: String,
    /// `memory`, `resource` or `skill`.
    pub context_type: &'static str,
    /// The query's score.
    pub score: f64,
    /// Always empty, as the reference.
    pub match_reason: &'static str,
}

/// A validated find request.
#[derive(Debug, Clone, PartialEq)]
pub struct FindParams {
    /// The query text (non-empty after trimming).
    pub query: String,
    /// Explicit targets (already authorised); empty: the defaults for
    /// `context_types`.
    pub targets: Vec<VikingUri>,
    /// Context types to keep (empty: all).
    pub context_types: Vec<ContextType>,
    /// Hits to return (`node_limit` wins over `limit`; default 10).
    pub limit: usize,
    /// Keep hits scoring strictly above this.
    pub score_threshold: Option<f64>,
    /// The request's filter expression.
    pub expr: Option<FilterExpr>,
    /// Tags that must all be present.
    pub tags: Vec<String>,
    /// `since` / `until` on `time_field`.
    pub time: Option<TimeRange>,
    /// Levels to keep (empty: all).
    pub levels: Vec<Level>,
    /// Attach each hit's body as `content` (cut as a `content/read` is).
    pub read_content: bool,
    /// `events_time_decay_protection` in seconds.
    pub decay_window_s: Option<i64>,
    /// The time field decay and ranges use.
    pub time_field: TimeField,
    /// Add `provenance`: per query, where it searched and what it matched
    /// (`include_provenance`, default off).
    pub include_provenance: bool,
    /// How records are matched (`search_type`; default semantic).
    pub search_kind: SearchKind,
}

impl Default for FindParams {
    fn default() -> Self {
        Self {
            query: String::new(),
            targets: Vec::new(),
            context_types: Vec::new(),
            limit: 10,
            score_threshold: None,
            expr: None,
            tags: Vec::new(),
            time: None,
            levels: Vec::new(),
            read_content: false,
            decay_window_s: None,
            time_field: TimeField::UpdatedAt,
            include_provenance: false,
            search_kind: SearchKind::Semantic,
        }
    }
}

/// The filter `find` searches with.
#[must_use]
pub fn build_filter(identity: &Identity, params: &FindParams) -> Filter {
    let targets = if params.targets.is_empty() {
        match params.context_types.as_slice() {
            [] => default_targets(identity, None),
            types => {
                let mut all: Vec<VikingUri> = types.iter().flat_map(|t| default_targets(identity, Some(*t))).collect();
                all.sort();
                all.dedup();
                all
            }
        }
    } else {
        params.targets.clone()
    };
    Filter {
        targets,
        not_under: Vec::new(),
        context_types: params.context_types.clone(),
        levels: params.levels.clone(),
        tags: params.tags.clone(),
        time: params.time,
        expr: params.expr.clone(),
    }
}

/// Runs a find for `identity`, with "now" given (Unix seconds).
///
/// Cost: one query embedding (none for keyword search on segments); one
/// manifest HEAD (plus new segments when the index changed); one search —
/// a scan of the loaded segments, or one `QueryVectors` (two for hybrid)
/// on S3 Vectors; with `read_content`, one read per hit,
/// [`READ_CONTENT_CONCURRENCY`] at a time.
///
/// # Errors
/// When the embedder, store or S3 Vectors fails or the index was built by
/// another embedder.
pub async fn find(app: &App, identity: &Identity, params: &FindParams, now: i64) -> Result<FindResult, RetrievalError> {
    find_queries(app, identity, params, &[params.query.as_str()], now).await
}

/// [`find`] over several queries (an expanded query plan): every query
/// searches with `params`, hits are merged by node (best score), sorted by
/// score and cut to `limit`. With one query this is exactly [`find`].
///
/// With `include_provenance` the result adds `provenance`, one entry per
/// query in order ([`Provenance`]), each match as that query alone scored
/// it (before the merge and the cut). The
/// reference's `thinking_trace` is absent: one flat scan has no trace.
///
/// Cost: one embedding call for all queries, one manifest HEAD, one search
/// per query (as [`find`]'s).
///
/// # Errors
/// As [`find`].
pub async fn find_queries(
    app: &App,
    identity: &Identity,
    params: &FindParams,
    queries: &[&str],
    now: i64,
) -> Result<FindResult, RetrievalError> {
    // The index revalidation (a store round trip) and the query embedding
    // (CPU) overlap.
    let (index, vectors) = tokio::join!(checked_index(app, identity), embed_queries(app, params.search_kind, queries));
    let index = index?;
    let vectors = vectors_for(app, &index, queries, vectors?).await?;
    find_over(app, identity, params, queries, &index, &vectors, now).await
}

/// [`find_queries`] over an index the caller already opened with
/// [`checked_index`] and the queries' embeddings (one per query, in
/// order) it already computed, so both could overlap other work.
///
/// Cost: one search per query (a scan on segments, a `QueryVectors` or
/// two on S3 Vectors); with `read_content`, one read per hit (a
/// body that cannot be read is empty; each is cut at [`MAX_READ_BYTES`]
/// with a closing `[truncated: …]` line, and once the bodies read add up
/// to more than a response may carry, `limits.max_response_bytes`, no
/// more are read and the hits after them are left out).
///
/// # Errors
/// [`RetrievalError::Index`] when an S3 Vectors query fails.
pub async fn find_over(
    app: &App,
    identity: &Identity,
    params: &FindParams,
    queries: &[&str],
    index: &AccountIndex,
    vectors: &[Vec<f32>],
    now: i64,
) -> Result<FindResult, RetrievalError> {
    let filter = build_filter(identity, params);
    let mut hits: Vec<Hit<'_>> = Vec::new();
    let mut provenance: Vec<Provenance> = Vec::new();
    let mut stats = IndexStats::of(index);
    if !index.is_empty() {
        let terms: Vec<Vec<String>> = queries
            .iter()
            .map(|q| if params.search_kind == SearchKind::Semantic { Vec::new() } else { lexical::query_terms(q) })
            .collect();
        let decay = params.decay_window_s.map(|window_s| EventDecay { now, window_s, field: params.time_field });
        let requests: Vec<SearchParams<'_>> = vectors
            .iter()
            .zip(&terms)
            .map(|(vector, terms)| SearchParams {
                kind: params.search_kind,
                vector,
                terms,
                filter: &filter,
                // Passages of one file collapse into one hit below.
                limit: params.limit.saturating_mul(PASSAGE_OVERFETCH),
                score_threshold: params.score_threshold,
                decay,
            })
            .collect();
        let searched = Box::pin(index.search(&requests, &Exclusion::default())).await?;
        for (query, found) in queries.iter().zip(searched) {
            if let Some(stats) = &mut stats {
                stats.add(&found);
            }
            let mut own = Vec::new();
            collapse(&mut own, found.hits);
            own.truncate(params.limit);
            if params.include_provenance {
                provenance.push(provenance_of(query, &filter.targets, &own));
            }
            collapse(&mut hits, own);
        }
        hits.truncate(params.limit);
    }
    let contents = if params.read_content {
        let budget = app.config.limits.result_bytes();
        let contents = read_contents(app, identity, &hits, budget).await;
        // Hits past the bytes a response may carry were not read: they
        // could not be served (the route cuts the rest: `api::find`).
        hits.truncate(contents.len());
        contents
    } else {
        Vec::new()
    };
    let mut buckets: [Vec<FindItem>; 3] = Default::default();
    let mut contents = contents.into_iter();
    for hit in &hits {
        let mut item = FindItem::from_hit(hit);
        item.content = contents.next();
        let slot = match hit.record.context_type {
            ContextType::Memory => 0,
            ContextType::Resource => 1,
            ContextType::Skill => 2,
        };
        buckets[slot].push(item);
    }
    let total = hits.len();
    let [memories, resources, skills] = buckets;
    let provenance = params.include_provenance.then(|| {
        if index.is_empty() {
            queries.iter().map(|q| provenance_of(q, &filter.targets, &[])).collect()
        } else {
            provenance
        }
    });
    Ok(FindResult { memories, resources, skills, total, provenance, index: stats })
}

/// Hits a search over-fetches so that, once a file's passages collapse
/// into one hit, `limit` files remain.
const PASSAGE_OVERFETCH: usize = 3;

/// Adds `found` to `hits` one node at a time — a file and its passages
/// are one node, shown as the best of them — and leaves `hits` best first.
fn collapse<'a>(hits: &mut Vec<Hit<'a>>, found: Vec<Hit<'a>>) {
    let node = |h: &Hit<'_>| (h.record.uri.clone(), h.record.level.min(LEVEL_FILE));
    let mut at: std::collections::HashMap<(VikingUri, Level), usize> =
        hits.iter().enumerate().map(|(i, h)| (node(h), i)).collect();
    for hit in found {
        match at.get(&node(&hit)) {
            Some(&i) if hit.score > hits[i].score => hits[i] = hit,
            Some(_) => {}
            None => {
                at.insert(node(&hit), hits.len());
                hits.push(hit);
            }
        }
    }
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
}

/// One query's provenance entry.
fn provenance_of(query: &str, targets: &[VikingUri], found: &[Hit<'_>]) -> Provenance {
    let matched_contexts = found
        .iter()
        .map(|hit| MatchedContext {
            uri: hit.record.display_uri(),
            tier: format!("L{}", hit.record.level.min(LEVEL_FILE)),
            context_type: hit.record.context_type.as_str(),
            score: hit.score,
            match_reason: "",
        })
        .collect();
    Provenance {
        query: query.to_owned(),
        searched_directories: targets.iter().map(ToString::to_string).collect(),
        matched_contexts,
    }
}

/// The bodies of `hits`, in order, each cut like a `content/read` (at
/// [`MAX_READ_BYTES`], on a line boundary, with the closing
/// `[truncated: …]` line); reading stops after the body that takes the
/// total past `budget` bytes, so fewer bodies than hits may come back.
async fn read_contents(app: &App, identity: &Identity, hits: &[Hit<'_>], budget: usize) -> Vec<String> {
    let keys: Vec<Option<String>> = hits
        .iter()
        .map(|h| {
            let target = if h.record.level == LEVEL_FILE {
                Some(h.record.uri.clone())
            } else {
                VikingUri::parse(&h.record.display_uri()).ok()
            };
            target.map(|u| tree_key(&identity.account, &u))
        })
        .collect();
    let mut bodies = stream::iter(keys)
        .map(|key| async move {
            let Some(key) = key else { return String::new() };
            match app.store.get(&key).await {
                Ok(object) => {
                    slice_lines(&String::from_utf8_lossy(&object.body), Lines::default(), MAX_READ_BYTES).text
                }
                Err(StoreError::NotFound(_)) => String::new(),
                Err(e) => {
                    tracing::warn!(error = %e, "read_content failed");
                    String::new()
                }
            }
        })
        .buffered(READ_CONTENT_CONCURRENCY);
    let (mut out, mut total) = (Vec::with_capacity(hits.len()), 0usize);
    while total <= budget
        && let Some(body) = bodies.next().await
    {
        total = total.saturating_add(body.len());
        out.push(body);
    }
    out
}
