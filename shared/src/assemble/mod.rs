//! Context assembly: candidates → exclusion → plan → reads →
//! render → budget. Providers produce [`candidate::Candidate`]s (search hits
//! in [`gather`]); the planner ([`plan`]) is pure; [`read`] fetches only
//! what the plan places at `overview` or `full`; [`render`] writes the
//! block. [`assemble`] runs the line for one request.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};

use crate::app::App;
use crate::embed::EmbedError;
use crate::identity::Identity;
use crate::index::{AccountIndex, Category, Exclusion};
use crate::retrieval::RetrievalError;
use crate::tokens::estimate_tokens;

pub mod bootstrap;
pub mod candidate;
pub mod gather;
pub mod neighbours;
pub mod params;
pub mod plan;
pub mod read;
pub mod relevance;
pub mod render;
pub mod rerank;

use candidate::Candidate;
use params::{AssembleParams, Detail, PeerScope, Quotas, Tier};
use render::EntryView;

/// One served entry. Serialises as the response's `entries[]` item
/// (`Entry` in `infra/openapi.json`): `uri`, `lines` (a passage's first
/// and last line, only for passages), `category`, `score` (0 when not
/// finite), `detail` (the tier), `text`, `origin`, and `truncated: true`
/// only when the text was cut to fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The candidate it shows.
    pub candidate: Candidate,
    /// The tier it is shown at.
    pub tier: Tier,
    /// The text shown (empty for `uri`).
    pub text: String,
    /// Whether `text` is cut short of its tier's whole text (a prefix of
    /// it) to fit the budget.
    pub truncated: bool,
}

impl Entry {
    fn view(&self) -> EntryView<'_> {
        EntryView {
            uri: self.candidate.uri.as_str(),
            lines: self.candidate.lines(),
            category: self.candidate.category.as_str(),
            score: self.candidate.score,
            tier: self.tier,
            text: &self.text,
            truncated: self.truncated,
        }
    }
}

/// The wire form of an [`Entry`].
#[derive(Serialize)]
struct EntryItem<'a> {
    uri: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    lines: Option<[u32; 2]>,
    category: &'static str,
    score: f64,
    detail: &'static str,
    text: &'a str,
    origin: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
}

impl Serialize for Entry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        EntryItem {
            uri: self.candidate.uri.as_str(),
            lines: self.candidate.lines().map(|(first, last)| [first, last]),
            category: self.candidate.category.as_str(),
            score: finite(self.candidate.score),
            detail: self.tier.as_str(),
            text: &self.text,
            origin: self.candidate.origin.as_str(),
            truncated: self.truncated,
        }
        .serialize(serializer)
    }
}

fn finite(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// Counts (or other values) under names, serialised as an object whose
/// keys keep this order (`stats.searched`, `stats.slots`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Named<T>(pub Vec<(&'static str, T)>);

impl<T: Serialize> Serialize for Named<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(name, value)| (*name, value)))
    }
}

/// A map by category, serialised with the categories' wire names as keys
/// (in the categories' order).
fn by_category<S: Serializer, T: Serialize>(map: &BTreeMap<Category, T>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(map.iter().map(|(c, v)| (c.as_str(), v)))
}

/// [`by_category`] or `null`.
fn by_category_or_null<S: Serializer>(map: &Option<Quotas>, serializer: S) -> Result<S::Ok, S::Error> {
    match map {
        Some(map) => by_category(map, serializer),
        None => serializer.serialize_none(),
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Entries per tier, as `stats.tier_counts` (tiers with none left out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TierCounts {
    /// Entries at `full`.
    #[serde(skip_serializing_if = "is_zero")]
    pub full: usize,
    /// Entries at `overview`.
    #[serde(skip_serializing_if = "is_zero")]
    pub overview: usize,
    /// Entries at `abstract`.
    #[serde(rename = "abstract", skip_serializing_if = "is_zero")]
    pub abstract_: usize,
    /// Bare URIs.
    #[serde(skip_serializing_if = "is_zero")]
    pub uri: usize,
}

impl TierCounts {
    /// The counts of `entries`.
    #[must_use]
    pub fn of(entries: &[Entry]) -> Self {
        let count = |tier: Tier| entries.iter().filter(|e| e.tier == tier).count();
        Self {
            full: count(Tier::Full),
            overview: count(Tier::Overview),
            abstract_: count(Tier::Abstract),
            uri: count(Tier::Uri),
        }
    }
}

/// Candidates per origin, as `stats.origins`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Origins {
    /// The acting peer's.
    pub actor_peer: usize,
    /// The caller's own (and the shared roots').
    #[serde(rename = "self")]
    pub own: usize,
    /// Other peers'.
    pub other_peer: usize,
}

/// What the assembly line reports: the first part of `stats` in context
/// mode (`ContextStats` in `infra/openapi.json`), in the wire's key order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AssemblyStats {
    /// Hits per search (`all` in flat retrieval, else per bucket), before
    /// quotas or limit.
    pub searched: Named<usize>,
    /// Candidates kept for the planner (after the relevance cut).
    pub candidates: usize,
    /// What the relevance cut left out, and why a block is empty.
    pub relevance: relevance::CutStats,
    /// What the reranker did (only when one is configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank: Option<rerank::RerankStats>,
    /// Hits left out by `exclude_uris` or the ledger.
    pub excluded: usize,
    /// Candidates per origin.
    pub origins: Origins,
    /// Whose memories took part.
    pub peer_scope: PeerScope,
    /// The quotas of bucketed retrieval (`null`: flat).
    #[serde(serialize_with = "by_category_or_null")]
    pub quotas: Option<Quotas>,
    /// The budget.
    pub max_tokens: usize,
    /// Tokens of the rendered block (0 when not rendered); at most
    /// `max_tokens`.
    pub used_tokens: usize,
    /// The planner's per-entry cap.
    pub per_entry_cap: usize,
    /// Entries served.
    pub returned: usize,
    /// Candidates that fit at no tier (or fell out at the budget guard).
    pub dropped: usize,
    /// Candidates whose content repeated an earlier one.
    pub deduped: usize,
    /// The tier selection (`null` for `auto`).
    pub detail: Detail,
    /// Entries per tier.
    pub tier_counts: TierCounts,
    /// The planner's upgrade counts.
    pub fill: plan::Fill,
    /// The purpose preset, if one was used (`null` otherwise).
    pub purpose: Option<String>,
    /// The score threshold searched with.
    pub score_threshold: f64,
    /// Penalties of other peers' hits, per category.
    #[serde(serialize_with = "by_category")]
    pub other_peer_penalties: BTreeMap<Category, f64>,
    /// Bytes of the bodies read.
    pub bytes_read: u64,
    /// Reads made.
    pub reads: usize,
    /// Reads that failed (at most 5; absent when none did).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retrieval_errors: Vec<String>,
    /// How the searches went on an S3 Vectors index (absent on segments).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<crate::index::account::IndexStats>,
}

/// The assembled block and its accounting.
#[derive(Debug, Clone, Default)]
pub struct Assembled {
    /// Entries, best first.
    pub entries: Vec<Entry>,
    /// The rendered block (empty when rendering was not asked for).
    pub rendered: String,
    /// What the assembly line did (see [`assemble`]).
    pub stats: AssemblyStats,
}

/// Renders `entries` and drops depth until the block fits: while the
/// estimate exceeds `max_tokens`, the lowest-ranked entry above `uri` falls
/// to `uri`, then the lowest-ranked entry goes. (The plan's estimates are
/// upper bounds, so this only acts if a body changed since it was indexed.)
pub(crate) fn render_within(entries: &mut Vec<Entry>, max_tokens: usize) -> (String, usize) {
    loop {
        let views: Vec<EntryView<'_>> = entries.iter().map(Entry::view).collect();
        let rendered = render::render(&views);
        let used = estimate_tokens(&rendered);
        if used <= max_tokens || entries.is_empty() {
            return (rendered, used);
        }
        if let Some(last) = entries.iter_mut().rev().find(|e| e.tier != Tier::Uri) {
            last.tier = Tier::Uri;
            last.text.clear();
            last.truncated = false;
        } else {
            entries.pop();
        }
    }
}

/// Runs the assembly line for `identity` over `params.queries`, leaving out
/// `exclusion` (the request's `exclude_uris` and the ledger's cooled URIs).
///
/// Its stats are [`AssemblyStats`]; `used_tokens ≤ max_tokens` always.
///
/// Cost: one embedding call for all queries, one search per scope and
/// query, one read per object an entry at `overview` or `full` shows (a
/// file once for all its passages), 16 at a time.
///
/// # Errors
/// When the embedder or store fails, or the index was built by another
/// embedder.
pub async fn assemble(
    app: &App,
    identity: &Identity,
    params: &AssembleParams,
    exclusion: &Exclusion,
) -> Result<Assembled, RetrievalError> {
    // The index revalidation (a store round trip) and the query embedding
    // (CPU) overlap.
    let texts: Vec<&str> = params.queries.iter().map(String::as_str).collect();
    let (index, vectors) = tokio::join!(
        crate::retrieval::checked_index(app, identity),
        crate::retrieval::embed_queries(app, params.search_kind, &texts)
    );
    let index = index?;
    assemble_with(app, identity, params, exclusion, &index, vectors).await
}

/// [`assemble`] over an index the caller already opened with
/// [`crate::retrieval::checked_index`] and the queries' embeddings (one per
/// `params.queries`, in order) it already computed — so that both could
/// overlap other work (context mode sends them with the session read).
///
/// Cost: as [`assemble`] without the revalidation and the embedding.
///
/// # Errors
/// When an S3 Vectors query or the embedding a keyword search there needs
/// fails (reads that fail are reported in `retrieval_errors`).
pub async fn assemble_over(
    app: &App,
    identity: &Identity,
    params: &AssembleParams,
    exclusion: &Exclusion,
    index: &AccountIndex,
    vectors: Vec<Vec<f32>>,
) -> Result<Assembled, RetrievalError> {
    assemble_with(app, identity, params, exclusion, index, Ok(vectors)).await
}

async fn assemble_with(
    app: &App,
    identity: &Identity,
    params: &AssembleParams,
    exclusion: &Exclusion,
    index: &AccountIndex,
    vectors: Result<Vec<Vec<f32>>, EmbedError>,
) -> Result<Assembled, RetrievalError> {
    let mut gathered = if index.is_empty() || params.queries.is_empty() {
        gather::Gathered::default()
    } else {
        let texts: Vec<&str> = params.queries.iter().map(String::as_str).collect();
        let vectors = crate::retrieval::vectors_for(app, index, &texts, vectors?).await?;
        gather::gather(index, identity, params, &vectors, exclusion).await?
    };
    let retrieval = &app.config.retrieval;
    let reranked = match (&app.reranker, params.queries.first()) {
        (Some(reranker), Some(query)) => Some(
            rerank::rerank(reranker, query, &mut gathered.candidates, params.rerank_within, retrieval.rerank_threshold)
                .await,
        ),
        _ => None,
    };
    // Quotas ask for breadth across buckets: the gap, relative to the best
    // of all, does not thin them; the floor's gate still applies.
    let gap = retrieval.relevance_gap;
    let cut = relevance::RelevanceCut::for_kind(
        params.search_kind,
        (gap < 1.0 && params.quotas.is_none()).then_some(gap),
        app.config
            .retrieval
            .relevance_floor
            .or_else(|| relevance::default_floor(app.embedder.id()))
            .filter(|floor| *floor > 0.0),
    );
    let cut = match &reranked {
        Some(stats) if stats.applied() => relevance::RelevanceCut::reranked(retrieval.rerank_threshold),
        _ => cut,
    };
    let (candidates, cut_stats) = relevance::apply(std::mem::take(&mut gathered.candidates), &cut);
    let candidates = &candidates;
    let planned = plan::plan(
        candidates,
        &plan::PlanRequest {
            max_tokens: params.max_tokens,
            detail: &params.detail,
            events_budget_share: params.events_budget_share,
        },
    );
    let reads = read::read_planned(&app.store, &identity.account, candidates, &planned).await;
    let mut entries: Vec<Entry> = planned
        .entries
        .iter()
        .zip(reads.texts)
        .map(|(p, shown)| Entry {
            candidate: candidates[p.candidate].clone(),
            tier: shown.tier,
            text: shown.text,
            truncated: shown.truncated,
        })
        .collect();
    let (rendered, used) = render_within(&mut entries, params.max_tokens);
    let (rendered, used) = if params.render { (rendered, used) } else { (String::new(), 0) };

    let stats = AssemblyStats {
        searched: gathered.searched.clone(),
        candidates: candidates.len(),
        relevance: cut_stats,
        rerank: reranked,
        excluded: gathered.excluded,
        origins: gather::origins_of(candidates),
        peer_scope: params.peer_scope,
        quotas: params.quotas.clone(),
        max_tokens: params.max_tokens,
        used_tokens: used,
        per_entry_cap: planned.per_entry_cap,
        returned: entries.len(),
        dropped: planned.dropped + planned.entries.len() - entries.len(),
        deduped: planned.deduped,
        detail: params.detail.clone(),
        tier_counts: TierCounts::of(&entries),
        fill: planned.fill,
        purpose: params.purpose.clone(),
        score_threshold: params.score_threshold,
        other_peer_penalties: params.penalties.clone(),
        bytes_read: reads.bytes_read,
        reads: reads.reads,
        retrieval_errors: reads.errors,
        index: gathered.index.clone(),
    };
    Ok(Assembled { entries, rendered, stats })
}
