//! The search pipeline: list, context and bootstrap mode over typed
//! parameters, returning typed results. The HTTP layer (`api::search`,
//! `api::recall`, `api::bootstrap`) parses a body into these parameters and
//! serialises the results; the CLI or a test can call the same functions
//! without HTTP.
//!
//! - [`list`]: `find`, plus query expansion when a session with context is
//!   given and a model is configured ([`ListResult`]).
//! - [`context`]: the session read (ledger and context), query expansion,
//!   the assembly line (gather → plan → reads → render), the digest
//!   rewrite and the ledger write ([`ContextResult`]).
//! - [`bootstrap`]: the session-start block ([`BootstrapResult`]).
//!
//! Every result serialises (serde) to the wire shape documented in
//! `infra/openapi.json` (`FindResult`, `ContextResult`, `BootstrapResult`).
//! Errors are [`RetrievalError`]s; an LLM stage or the ledger never fails a
//! request (their outcome is a status in the stats).

mod context;
mod list;
mod session;

use serde::Serialize;

pub use self::context::context;
pub use self::list::list;
use crate::app::App;
use crate::assemble::bootstrap::{BootstrapParams, BootstrapStats};
use crate::assemble::params::AssembleParams;
use crate::assemble::{AssemblyStats, Entry};
use crate::find::{FindParams, FindResult};
use crate::identity::Identity;
use crate::index::SearchKind;
use crate::ledger::DedupStatus;
use crate::llm::Usage;
use crate::llm::expansion::{ExpansionStatus, QueryPlan};
use crate::llm::rewrite::RewriteStatus;
pub use crate::retrieval::RetrievalError;
use crate::retrieval::embed_queries;
use crate::sessions::SessionId;

/// `rewrite`: off, on, or on when a query planner model is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rewrite {
    /// No digest (default).
    #[default]
    Off,
    /// Always digest.
    On,
    /// Digest when a query planner model (`query_planner`) is configured.
    Auto,
}

/// List mode's parameters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListParams {
    /// The find parameters; `targets` as sent (authorised by [`list`]).
    pub find: FindParams,
    /// The session whose context may expand the query.
    pub session_id: Option<SessionId>,
}

/// List mode's result: `find`'s, plus the query plan when expansion was
/// used (after `total` and `provenance`, as the reference orders it).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ListResult {
    /// The hits.
    #[serde(flatten)]
    pub found: FindResult,
    /// The plan, when expansion was used (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_plan: Option<QueryPlan>,
}

/// Context mode's parameters, validated, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextParams {
    /// The query (cut as the parser cuts it).
    pub query: String,
    /// The assembly parameters (`queries` is replaced by the query and,
    /// once expanded, the planned ones).
    pub assemble: AssembleParams,
    /// The session: its ledger and its context for the LLM stages.
    pub session_id: Option<SessionId>,
    /// Query expansion may run (`query_expansion: auto`, the default).
    pub query_expansion: bool,
    /// Turns a served URI stays out (0..=100; 0, the default: no ledger).
    pub dedup_turns: u32,
    /// The digest rewrite.
    pub rewrite: Rewrite,
    /// Bullets the digest may have (1..=20; default 6).
    pub rewrite_max_bullets: usize,
    /// Accepted fields context mode ignores, reported in `stats.ignored`.
    pub ignored: Vec<&'static str>,
}

impl Default for ContextParams {
    fn default() -> Self {
        Self {
            query: String::new(),
            assemble: AssembleParams::default(),
            session_id: None,
            query_expansion: true,
            dedup_turns: 0,
            rewrite: Rewrite::Off,
            rewrite_max_bullets: crate::assemble::params::DEFAULT_REWRITE_MAX_BULLETS,
            ignored: Vec::new(),
        }
    }
}

/// Context mode's stats (`ContextStats` in `infra/openapi.json`): the
/// assembly line's, then the stages'. Optional keys are left out unless
/// set; `rewrite_usage` and `dedup.turn` are `null` when unknown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextStats {
    /// What the assembly line did.
    #[serde(flatten)]
    pub assembly: AssemblyStats,
    /// The expansion stage's status.
    pub query_expansion: ExpansionStatus,
    /// The extra queries expansion planned.
    pub planned_queries: Vec<String>,
    /// Why expansion failed or timed out (only then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_expansion_error: Option<String>,
    /// The rewrite stage's status.
    pub rewrite: RewriteStatus,
    /// The rewrite's token usage, when the model reported it.
    pub rewrite_usage: Option<Usage>,
    /// Why the rewrite failed or timed out (only then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite_error: Option<String>,
    /// What happened to the dedup ledger.
    pub dedup: DedupStatus,
    /// Accepted fields context mode ignored (only when there are some).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<&'static str>,
    /// `/recall` only, when a v1 alias was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecation>,
}

/// `stats.deprecated`: the v1 aliases a `/recall` request used and where
/// their successor lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Deprecation {
    /// The route called: `/api/v1/search/recall`.
    pub endpoint: &'static str,
    /// The route to call instead: `/api/v1/search/search`.
    pub successor: &'static str,
    /// What the successor's body adds.
    pub successor_body: SuccessorBody,
    /// The aliases used (`max_chars`, `min_score`, `render`).
    pub aliases_used: Vec<&'static str>,
}

/// [`Deprecation::successor_body`]: `{"mode": "context"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuccessorBody {
    /// `context`.
    pub mode: &'static str,
}

/// Context mode's result (`ContextResult` in `infra/openapi.json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextResult {
    /// Entries, in the order rendered.
    pub entries: Vec<Entry>,
    /// The block (empty when not rendered, or when the rewrite found
    /// nothing relevant).
    pub rendered: String,
    /// The rewrite's bullets (empty without a digest).
    pub digest: String,
    /// What the pipeline did.
    pub stats: ContextStats,
}

/// Bootstrap mode's result (`BootstrapResult` in `infra/openapi.json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BootstrapResult {
    /// Entries, slot by slot, in the order rendered.
    pub entries: Vec<Entry>,
    /// The block.
    pub rendered: String,
    /// Always empty: bootstrap has no digest.
    pub digest: String,
    /// What bootstrap did.
    pub stats: BootstrapStats,
}

/// Runs bootstrap mode: the slot manifest, planned and rendered within
/// `max_tokens`. No model, no semantic search.
///
/// Cost: as [`crate::assemble::bootstrap::bootstrap`].
///
/// # Errors
/// When the store fails or the index was built by another embedder.
pub async fn bootstrap(
    app: &App,
    identity: &Identity,
    params: &BootstrapParams,
) -> Result<BootstrapResult, RetrievalError> {
    let block = crate::assemble::bootstrap::bootstrap(app, identity, params).await?;
    Ok(BootstrapResult { entries: block.entries, rendered: block.rendered, digest: String::new(), stats: block.stats })
}

/// Whether query expansion may run: asked for, enabled in the
/// configuration, and a model configured.
fn expansion_enabled(app: &App, requested: bool) -> bool {
    requested && app.config.retrieval.enable_intent && app.models.any()
}

/// The embeddings of `queries` — the original query first, then the
/// planned ones — given the original's (`embedded`, of `original`),
/// computed while the session was read: one embedding call for the
/// planned queries, none without them.
///
/// # Errors
/// When the embedder fails.
async fn with_planned_embeddings(
    app: &App,
    kind: SearchKind,
    (original, embedded): (&str, Vec<Vec<f32>>),
    queries: &[&str],
) -> Result<Vec<Vec<f32>>, RetrievalError> {
    let Some((_, planned)) = queries.split_first().filter(|(first, _)| **first == original) else {
        return Ok(embed_queries(app, kind, queries).await?);
    };
    let mut vectors = embedded;
    if !planned.is_empty() {
        vectors.extend(embed_queries(app, kind, planned).await?);
    }
    Ok(vectors)
}
