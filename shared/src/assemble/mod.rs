//! Context assembly (CONTRACT §7): candidates → exclusion → plan → reads →
//! render → budget. Providers produce [`candidate::Candidate`]s (search hits
//! in [`gather`]); the planner ([`plan`]) is pure; [`read`] fetches only
//! what the plan places at `overview` or `full`; [`render`] writes the
//! block. [`assemble`] runs the line for one request.

use serde_json::{Map, Value, json};

use crate::api::error::ApiError;
use crate::app::App;
use crate::embed::EmbedError;
use crate::identity::Identity;
use crate::index::{Exclusion, IndexSnapshot};
use crate::tokens::estimate_tokens;

pub mod bootstrap;
pub mod candidate;
pub mod gather;
pub mod params;
pub mod plan;
pub mod read;
pub mod render;

use candidate::Candidate;
use params::{AssembleParams, Tier};
use render::EntryView;

/// One served entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The candidate it shows.
    pub candidate: Candidate,
    /// The tier it is shown at.
    pub tier: Tier,
    /// The text shown (empty for `uri`).
    pub text: String,
}

impl Entry {
    fn view(&self) -> EntryView<'_> {
        EntryView {
            uri: self.candidate.uri.as_str(),
            category: self.candidate.category.as_str(),
            score: self.candidate.score,
            tier: self.tier,
            text: &self.text,
        }
    }

    /// As the response's `entries[]` item.
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({
            "uri": self.candidate.uri.as_str(),
            "category": self.candidate.category.as_str(),
            "score": finite(self.candidate.score),
            "detail": self.tier.as_str(),
            "text": self.text,
            "origin": self.candidate.origin.as_str(),
        })
    }
}

fn finite(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// The assembled block and its accounting.
#[derive(Debug, Clone, Default)]
pub struct Assembled {
    /// Entries, best first.
    pub entries: Vec<Entry>,
    /// The rendered block (empty when rendering was not asked for).
    pub rendered: String,
    /// The statistics the assembly line reports (see [`assemble`]).
    pub stats: Map<String, Value>,
}

/// Entries per tier, as `stats.tier_counts` (tiers with none left out).
pub(crate) fn tier_counts(entries: &[Entry]) -> Value {
    let mut counts = Map::new();
    for tier in [Tier::Full, Tier::Overview, Tier::Abstract, Tier::Uri] {
        let n = entries.iter().filter(|e| e.tier == tier).count();
        if n > 0 {
            counts.insert(tier.as_str().into(), json!(n));
        }
    }
    Value::Object(counts)
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
        } else {
            entries.pop();
        }
    }
}

/// Runs the assembly line for `identity` over `params.queries`, leaving out
/// `exclusion` (the request's `exclude_uris` and the ledger's cooled URIs).
///
/// Stats keys: `searched`, `candidates`, `excluded`, `origins`,
/// `peer_scope`, `quotas`, `max_tokens`, `used_tokens`, `per_entry_cap`,
/// `returned`, `dropped`, `deduped`, `detail`, `tier_counts`, `fill`,
/// `purpose`, `score_threshold`, `other_peer_penalties`, `bytes_read`,
/// `reads`, and `retrieval_errors` when a read failed. `used_tokens ≤
/// max_tokens` always.
///
/// Cost: one embedding call for all queries, one search per scope and
/// query, one read per entry at `overview` or `full` (8 at a time).
///
/// # Errors
/// 503 when the embedder or store fails, or the index was built by another
/// embedder.
pub async fn assemble(
    app: &App,
    identity: &Identity,
    params: &AssembleParams,
    exclusion: &Exclusion,
) -> Result<Assembled, ApiError> {
    // The index revalidation (a store round trip) and the query embedding
    // (CPU) overlap.
    let texts: Vec<&str> = params.queries.iter().map(String::as_str).collect();
    let (snapshot, vectors) = tokio::join!(crate::find::checked_snapshot(app, identity), app.embedder.embed(&texts));
    let snapshot = snapshot?;
    assemble_with(app, identity, params, exclusion, &snapshot, vectors).await
}

/// [`assemble`] over a snapshot the caller already took with
/// [`crate::find::checked_snapshot`] and the queries' embeddings (one per
/// `params.queries`, in order) it already computed — so that both could
/// overlap other work (context mode sends them with the session read).
///
/// Cost: as [`assemble`] without the revalidation and the embedding.
///
/// # Errors
/// 503 when the store fails.
pub async fn assemble_over(
    app: &App,
    identity: &Identity,
    params: &AssembleParams,
    exclusion: &Exclusion,
    snapshot: &IndexSnapshot,
    vectors: Vec<Vec<f32>>,
) -> Result<Assembled, ApiError> {
    assemble_with(app, identity, params, exclusion, snapshot, Ok(vectors)).await
}

async fn assemble_with(
    app: &App,
    identity: &Identity,
    params: &AssembleParams,
    exclusion: &Exclusion,
    snapshot: &IndexSnapshot,
    vectors: Result<Vec<Vec<f32>>, EmbedError>,
) -> Result<Assembled, ApiError> {
    let gathered = if snapshot.is_empty() || params.queries.is_empty() {
        gather::Gathered::default()
    } else {
        gather::gather(snapshot, identity, params, &vectors?, exclusion)
    };
    let candidates = &gathered.candidates;
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
        .map(|(p, (tier, text))| Entry { candidate: candidates[p.candidate].clone(), tier, text })
        .collect();
    let (rendered, used) = render_within(&mut entries, params.max_tokens);
    let (rendered, used) = if params.render { (rendered, used) } else { (String::new(), 0) };

    let mut stats = Map::new();
    let mut put = |k: &str, v: Value| {
        stats.insert(k.to_owned(), v);
    };
    put("searched", Value::Object(gathered.searched.clone()));
    put("candidates", json!(candidates.len()));
    put("excluded", json!(gathered.excluded));
    put("origins", gathered.origins());
    put("peer_scope", json!(params.peer_scope.as_str()));
    put(
        "quotas",
        params
            .quotas
            .as_ref()
            .map_or(Value::Null, |q| Value::Object(q.iter().map(|(c, n)| (c.as_str().to_owned(), json!(n))).collect())),
    );
    put("max_tokens", json!(params.max_tokens));
    put("used_tokens", json!(used));
    put("per_entry_cap", json!(planned.per_entry_cap));
    put("returned", json!(entries.len()));
    put("dropped", json!(planned.dropped + planned.entries.len() - entries.len()));
    put("deduped", json!(planned.deduped));
    put("detail", params.detail.to_json());
    put("tier_counts", tier_counts(&entries));
    put(
        "fill",
        json!({
            "floor_tokens": planned.fill.floor_tokens,
            "overview_upgrades": planned.fill.overview_upgrades,
            "full_upgrades": planned.fill.full_upgrades,
            "spare_upgrades": planned.fill.spare_upgrades,
        }),
    );
    put("purpose", params.purpose.as_ref().map_or(Value::Null, |p| json!(p)));
    put("score_threshold", json!(params.score_threshold));
    put(
        "other_peer_penalties",
        Value::Object(params.penalties.iter().map(|(c, p)| (c.as_str().to_owned(), json!(p))).collect()),
    );
    put("bytes_read", json!(reads.bytes_read));
    put("reads", json!(reads.reads));
    if !reads.errors.is_empty() {
        put("retrieval_errors", json!(reads.errors));
    }
    Ok(Assembled { entries, rendered, stats })
}
