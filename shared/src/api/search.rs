//! `POST /api/v1/search/search`: the reference's `SearchRequest` with
//! `mode` = `list` (default; exactly `find` without a session) or `context`
//! (the assembly line). Strict parsing, the validation matrix of CONTRACT
//! §6–7, defaults applied in one place ([`parse`]).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use serde_json::{Map, Value, json};

use super::error::{ApiError, FieldError};
use super::fields::Body;
use super::find::{Common, FIND_FIELDS, authorize, check_query, fit_hits, parse_common};
use super::payload::respond;
use super::{Admitted, admit, error_response, telemetry, within_deadline};
use crate::app::App;
use crate::assemble::params::{
    AssembleParams, DEFAULT_SCORE_THRESHOLD, DETAIL_KEYS, Detail, MAX_EXCLUDE_URIS, MAX_MAX_TOKENS, MIN_MAX_TOKENS,
    PeerScope, QUOTA_KEYS, Tier, default_penalties, purpose_names, purpose_profile,
};
use crate::assemble::{Assembled, assemble, assemble_over};
use crate::config::{PurposeProfileConfig, RetrievalConfig};
use crate::deadline::Deadline;
use crate::find::{authorize_targets, checked_snapshot, find, find_over};
use crate::identity::Identity;
use crate::index::{Category, Exclusion};
use crate::ledger::{DedupStatus, Ledger};
use crate::llm::expansion::{self, Expansion, ExpansionStatus, RECENT_MESSAGES, SessionContext};
use crate::llm::rewrite::{self, RewriteStatus, Rewritten};
use crate::sessions::{SessionId, Sessions};
use crate::uri::VikingUri;

/// Fields only context mode accepts.
pub const CONTEXT_ONLY_FIELDS: &[&str] = &[
    "query_expansion",
    "max_tokens",
    "quotas",
    "purpose",
    "detail",
    "dedup_turns",
    "exclude_uris",
    "peer_scope",
    "other_peer_penalty",
    "rewrite",
    "rewrite_max_bullets",
];

/// Fields bootstrap mode accepts (`query` is accepted and unused).
pub const BOOTSTRAP_FIELDS: &[&str] = &["mode", "query", "max_tokens", "session_id", "since", "telemetry"];

/// `working_state`'s default window: 7 days.
pub const BOOTSTRAP_DEFAULT_WINDOW_S: i64 = 7 * 86_400;

/// Fields `search` adds to `find`'s.
pub const SEARCH_FIELDS: &[&str] = &["session_id", "mode", "search_type"];

/// The search mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `find`'s result (plus `query_plan` with a session, once expansion runs).
    List,
    /// The assembled block.
    Context,
    /// The session-start block from the slot manifest.
    Bootstrap,
}

/// `rewrite`: off, on, or on when a query-planner model is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rewrite {
    /// No digest (default).
    #[default]
    Off,
    /// Always digest.
    On,
    /// Digest when a dedicated query-planner model is configured.
    Auto,
}

/// A parsed and validated search request.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// The mode.
    pub mode: Mode,
    /// The fields shared with `find`.
    pub common: Common,
    /// The session, when given.
    pub session_id: Option<String>,
    /// Context mode: the assembly parameters (defaults applied).
    pub assemble: AssembleParams,
    /// `query_expansion` is `auto` (the default) rather than `off`.
    pub query_expansion: bool,
    /// `dedup_turns` (0..=100, default 0).
    pub dedup_turns: u32,
    /// `rewrite`.
    pub rewrite: Rewrite,
    /// `rewrite_max_bullets` (1..=20, default 6).
    pub rewrite_max_bullets: usize,
    /// Accepted fields that context mode ignores (`level`; `limit` with quotas).
    pub ignored: Vec<&'static str>,
}

fn all_fields() -> Vec<&'static str> {
    FIND_FIELDS.iter().chain(SEARCH_FIELDS).chain(CONTEXT_ONLY_FIELDS).copied().collect()
}

fn value_error(field: &str, message: impl std::fmt::Display) -> FieldError {
    FieldError::new(field, "value_error", format!("Value error, {message}"))
}

/// Parses a search body (`now` resolves relative times; `purpose` names a
/// built-in preset or one of `profiles`, `retrieval.purpose_profiles`) and
/// validates the combination of fields.
///
/// # Errors
/// 400 naming every invalid field.
pub fn parse(
    bytes: &[u8],
    now: i64,
    profiles: &BTreeMap<String, PurposeProfileConfig>,
) -> Result<SearchRequest, ApiError> {
    let mut body = Body::parse(bytes, &all_fields())?;
    let common = parse_common(&mut body, now);
    let mode = match body.literal("mode", &["list", "context", "bootstrap"]).as_deref() {
        Some("context") => Mode::Context,
        Some("bootstrap") => Mode::Bootstrap,
        _ => Mode::List,
    };
    if body.literal("search_type", &["semantic", "keywords"]).as_deref() == Some("keywords") {
        body.error(value_error(
            "search_type",
            "search_type 'keywords' is not supported yet by this server; use 'semantic'",
        ));
    }
    let session_id = body.string("session_id").filter(|s| !s.is_empty());
    if let Some(Err(e)) = session_id.as_deref().map(SessionId::new) {
        body.error(value_error("session_id", e));
    }
    let mut request = SearchRequest {
        mode,
        common,
        session_id,
        assemble: AssembleParams::default(),
        query_expansion: true,
        dedup_turns: 0,
        rewrite: Rewrite::Off,
        rewrite_max_bullets: 6,
        ignored: Vec::new(),
    };
    match mode {
        Mode::List => {
            let sent: Vec<&str> = CONTEXT_ONLY_FIELDS.iter().copied().filter(|f| body.sent(f)).collect();
            for field in sent {
                body.error(value_error(
                    field,
                    format!("{field} require mode='context'; set mode='context' or drop these fields"),
                ));
            }
        }
        Mode::Context => parse_context(&mut body, &mut request, profiles),
        Mode::Bootstrap => {
            let sent: Vec<&str> =
                all_fields().into_iter().filter(|f| body.sent(f) && !BOOTSTRAP_FIELDS.contains(f)).collect();
            for field in sent {
                body.error(value_error(field, format!("{field} is not supported in mode='bootstrap'")));
            }
            if let Some(n) = body.int("max_tokens", Some(MIN_MAX_TOKENS as i64), Some(MAX_MAX_TOKENS as i64)) {
                request.assemble.max_tokens = usize::try_from(n).unwrap_or(MIN_MAX_TOKENS);
            }
        }
    }
    body.finish()?;
    Ok(request)
}

fn parse_context(body: &mut Body, request: &mut SearchRequest, profiles: &BTreeMap<String, PurposeProfileConfig>) {
    let common = &request.common;
    if !common.targets.is_empty() {
        body.error(value_error("target_uri", "target_uri is not supported in mode='context'"));
    }
    if common.params.read_content {
        body.error(value_error("read_content", "read_content is only supported in mode='list'"));
    }
    let p = &mut request.assemble;
    p.queries = vec![common.params.query.clone()];
    p.limit = common.params.limit;
    p.score_threshold = common.params.score_threshold.unwrap_or(DEFAULT_SCORE_THRESHOLD);
    p.expr = common.params.expr.clone();
    p.tags = common.params.tags.clone();
    p.time = common.params.time;
    request.query_expansion = body.literal("query_expansion", &["off", "auto"]).as_deref() != Some("off");
    if let Some(n) = body.int("max_tokens", Some(MIN_MAX_TOKENS as i64), Some(MAX_MAX_TOKENS as i64)) {
        p.max_tokens = usize::try_from(n).unwrap_or(MIN_MAX_TOKENS);
    }
    let quotas = parse_quotas(body);
    if let Some(name) = body.literal("purpose", &purpose_names(profiles)) {
        if let Some(profile) = purpose_profile(&name, profiles) {
            p.events_budget_share = profile.events_budget_share;
            p.quotas = Some(profile.quotas);
        }
        p.purpose = Some(name);
    }
    if quotas.is_some() {
        p.quotas = quotas;
    }
    p.detail = parse_detail(body);
    if let Some(n) = body.int("dedup_turns", Some(0), Some(100)) {
        request.dedup_turns = u32::try_from(n).unwrap_or(0);
    }
    if let Some(list) = body.string_list("exclude_uris") {
        if list.len() > MAX_EXCLUDE_URIS {
            body.error(FieldError::new(
                "exclude_uris",
                "too_long",
                format!("List should have at most {MAX_EXCLUDE_URIS} items after validation, not {}", list.len()),
            ));
        } else {
            for (i, text) in list.iter().enumerate() {
                match VikingUri::parse(text.trim()) {
                    Ok(uri) => p.exclude.push(uri),
                    Err(e) => body.error(value_error("exclude_uris", e).at(i)),
                }
            }
        }
    }
    if body.literal("peer_scope", &["actor", "all"]).as_deref() == Some("actor") {
        p.peer_scope = PeerScope::Actor;
    }
    p.penalties = parse_penalties(body);
    request.rewrite = match body.raw("rewrite") {
        None | Some(Value::Bool(false)) => Rewrite::Off,
        Some(Value::Bool(true)) => Rewrite::On,
        Some(Value::String(s)) if s == "auto" => Rewrite::Auto,
        Some(_) => {
            body.error(FieldError::new("rewrite", "literal_error", "Input should be a valid boolean or 'auto'"));
            Rewrite::Off
        }
    };
    if let Some(n) = body.int("rewrite_max_bullets", Some(1), Some(20)) {
        request.rewrite_max_bullets = usize::try_from(n).unwrap_or(6);
    }
    for field in ["level", "context_type", "events_time_decay_protection"] {
        if body.sent(field) {
            request.ignored.push(field);
        }
    }
    if request.common.params.include_provenance {
        request.ignored.push("include_provenance");
    }
    if p.quotas.is_some() && request.common.limit_sent {
        request.ignored.push("limit");
    }
}

fn parse_quotas(body: &mut Body) -> Option<BTreeMap<Category, usize>> {
    let map = body.object("quotas")?;
    let unknown: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| Category::parse(k).is_none_or(|c| !QUOTA_KEYS.contains(&c)))
        .collect();
    if !unknown.is_empty() {
        let allowed: Vec<&str> = QUOTA_KEYS.iter().map(|c| c.as_str()).collect();
        body.error(value_error(
            "quotas",
            format!("unknown quota keys: {}; allowed: {}", unknown.join(", "), allowed.join(", ")),
        ));
        return None;
    }
    let mut quotas = BTreeMap::new();
    for (key, value) in &map {
        match value.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) => {
                quotas.insert(Category::parse(key)?, n.min(1000));
            }
            None => body.error(
                FieldError::new("quotas", "int_type", "Input should be a valid non-negative integer").at(key.as_str()),
            ),
        }
    }
    Some(quotas)
}

fn parse_detail(body: &mut Body) -> Detail {
    let Some(raw) = body.raw("detail").cloned() else { return Detail::Auto };
    let tiers = "Input should be 'abstract', 'overview' or 'full'";
    match raw {
        Value::String(s) if s == "auto" => Detail::Auto,
        Value::String(s) => Tier::parse_pinnable(&s).map_or_else(
            || {
                body.error(FieldError::new(
                    "detail",
                    "literal_error",
                    "Input should be 'auto', 'abstract', 'overview' or 'full'",
                ));
                Detail::Auto
            },
            Detail::Pin,
        ),
        Value::Object(map) => {
            let unknown: Vec<&str> = map
                .keys()
                .map(String::as_str)
                .filter(|k| Category::parse(k).is_none_or(|c| !DETAIL_KEYS.contains(&c)))
                .collect();
            if !unknown.is_empty() {
                let allowed: Vec<&str> = DETAIL_KEYS.iter().map(|c| c.as_str()).collect();
                body.error(value_error(
                    "detail",
                    format!("unknown detail keys: {}; allowed: {}", unknown.join(", "), allowed.join(", ")),
                ));
                return Detail::Auto;
            }
            let mut pins = BTreeMap::new();
            for (key, value) in &map {
                match (Category::parse(key), value.as_str().and_then(Tier::parse_pinnable)) {
                    (Some(c), Some(t)) => {
                        pins.insert(c, t);
                    }
                    _ => body.error(FieldError::new("detail", "literal_error", tiers).at(key.as_str())),
                }
            }
            Detail::PerCategory(pins)
        }
        _ => {
            body.error(FieldError::new("detail", "literal_error", "Input should be a tier name or an object of tiers"));
            Detail::Auto
        }
    }
}

/// A number (every category) or an object of numbers merged over the
/// defaults; unknown keys are ignored and values clamped to [0, 1], as the
/// reference.
fn parse_penalties(body: &mut Body) -> BTreeMap<Category, f64> {
    let mut penalties = default_penalties();
    match body.raw("other_peer_penalty").cloned() {
        None => {}
        Some(Value::Number(n)) => {
            let v = n.as_f64().filter(|f| f.is_finite()).unwrap_or(0.0).clamp(0.0, 1.0);
            penalties.values_mut().for_each(|p| *p = v);
        }
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let (Some(c), Some(v)) = (Category::parse(&key), value.as_f64()) else {
                    if !value.is_number() {
                        body.error(
                            FieldError::new("other_peer_penalty", "float_type", "Input should be a valid number")
                                .at(key.as_str()),
                        );
                    }
                    continue;
                };
                if DETAIL_KEYS.contains(&c) && v.is_finite() {
                    penalties.insert(c, v.clamp(0.0, 1.0));
                }
            }
        }
        Some(_) => body.error(FieldError::new(
            "other_peer_penalty",
            "float_type",
            "Input should be a valid number or an object of numbers",
        )),
    }
    penalties
}

/// Handles one search request (list or context mode).
pub async fn handle(app: &App, request: Request<Bytes>) -> Response<String> {
    let admitted = match admit(app, &request).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    match within_deadline(&admitted.deadline, run(app, &admitted)).await {
        Ok((result, wants_telemetry, truncated)) => {
            respond(result, telemetry(wants_telemetry, "search.search", admitted.started), truncated)
        }
        Err(e) => error_response(&e),
    }
}

/// The result, whether telemetry was asked for, and whether the result
/// was cut to fit a response (list mode only: context and bootstrap
/// results are bounded by `max_tokens`).
async fn run(app: &App, admitted: &Admitted<'_>) -> Result<(Value, bool, bool), ApiError> {
    let request = parse(admitted.body, admitted.now, &app.config.retrieval.purpose_profiles)?;
    if request.mode != Mode::Bootstrap {
        check_query(app, &request.common.params.query, request.common.has_image)?;
    }
    let wants_telemetry = request.common.telemetry;
    let (result, truncated) = match request.mode {
        Mode::List => fit_hits(list(app, admitted, &request).await?, app.config.limits.response_budget()),
        Mode::Context => (context(app, &admitted.identity, &request, &admitted.deadline).await?, false),
        Mode::Bootstrap => (bootstrap(app, &admitted.identity, &request, admitted.now).await?, false),
    };
    Ok((result, wants_telemetry, truncated))
}

/// Runs list mode: exactly `find`, unless a session with context is given
/// and a model is configured; then the query is expanded (the same bounded
/// stage as context mode), every planned query searches too, hits merge by
/// node, and the result adds the reference's `query_plan`. A failed or late
/// expansion falls back to plain `find`.
///
/// # Errors
/// 403 for a target outside the caller's tree; 503 when a dependency fails.
async fn list(app: &App, admitted: &Admitted<'_>, request: &SearchRequest) -> Result<Value, ApiError> {
    let identity = &admitted.identity;
    let mut params = request.common.params.clone();
    params.targets = authorize(identity, &request.common.targets)?;
    let session = match request.session_id.as_deref().map(parse_session_id).transpose()? {
        Some(id) if expansion_enabled(app, true) => id,
        _ => return find(app, identity, &params, admitted.now).await,
    };
    // The session read, the index revalidation and the original query's
    // embedding go out together.
    let original = [params.query.as_str()];
    let (loaded, snapshot, original) = tokio::join!(
        load_session(app, identity, &session, 0, true),
        checked_snapshot(app, identity),
        app.embedder.embed(&original),
    );
    let (loaded, snapshot, original) = (loaded?, snapshot?, original?);
    let expansion = expand_query(app, &loaded, &params.query, &admitted.deadline).await;
    let plan = expansion.plan.as_ref().filter(|_| expansion.status == ExpansionStatus::Used);
    if plan.is_none()
        && let Some(error) = &expansion.error
    {
        tracing::warn!(status = expansion.status.as_str(), error, "list-mode query expansion fell back to find");
    }
    // A failed or late expansion searches the original query alone: `find`.
    let queries: Vec<&str> = match plan {
        Some(_) => expansion.queries.iter().map(String::as_str).collect(),
        None => vec![params.query.as_str()],
    };
    let vectors = with_planned_embeddings(app, (&params.query, original), &queries).await?;
    let mut result = find_over(app, identity, &params, &queries, &snapshot, &vectors, admitted.now).await;
    if let Some(plan) = plan {
        // After `total`, as the reference's `FindResult.to_dict` orders it.
        result["query_plan"] = plan.to_json();
    }
    Ok(result)
}

/// The embeddings of `queries` — the original query first, then the
/// planned ones — given the original's (`embedded`, of `original`),
/// computed while the session was read: one embedding call for the
/// planned queries, none without them.
///
/// # Errors
/// 503 when the embedder fails.
async fn with_planned_embeddings(
    app: &App,
    (original, embedded): (&str, Vec<Vec<f32>>),
    queries: &[&str],
) -> Result<Vec<Vec<f32>>, ApiError> {
    let Some((_, planned)) = queries.split_first().filter(|(first, _)| **first == original) else {
        return Ok(app.embedder.embed(queries).await?);
    };
    let mut vectors = embedded;
    if !planned.is_empty() {
        vectors.extend(app.embedder.embed(planned).await?);
    }
    Ok(vectors)
}

fn parse_session_id(id: &str) -> Result<SessionId, ApiError> {
    SessionId::new(id).map_err(|e| ApiError::field("session_id", "value_error", format!("Value error, {e}")))
}

/// Whether query expansion may run: asked for, enabled in the
/// configuration, and a model configured.
fn expansion_enabled(app: &App, requested: bool) -> bool {
    requested && app.config.retrieval.enable_intent && app.models.any()
}

/// What context and list mode read of a session before retrieval.
struct LoadedSession<'a> {
    /// The dedup ledger (only with `dedup_turns > 0`, and only when the
    /// session's turn clock could be read).
    ledger: Option<Ledger<'a>>,
    /// The ledger was asked for but the session's meta could not be read:
    /// the request goes on without dedup (`stats.dedup.status =
    /// write_failed`).
    ledger_failed: bool,
    /// The context for the LLM stages (empty unless asked for).
    context: SessionContext,
    /// Why the context could not be read (the stages then fail softly).
    context_error: Option<String>,
}

/// Reads what a request needs of its session: three chains at once — the
/// meta then the last messages, the ledger, the archive listing then its
/// overview — so at most two store round trips in a row.
///
/// Never fails: a meta that cannot be read (unreachable, corrupt) leaves
/// the request without dedup ([`LoadedSession::ledger_failed`]), and a
/// context that cannot be read is reported in
/// [`LoadedSession::context_error`].
async fn load_session<'a>(
    app: &'a App,
    identity: &Identity,
    id: &SessionId,
    dedup_turns: u32,
    want_context: bool,
) -> Result<LoadedSession<'a>, ApiError> {
    let sessions = Sessions::new(&app.store, identity);
    let ledger_key = sessions.ledger_key(id);
    let want_ledger = dedup_turns > 0;
    let meta_then_messages = async {
        let meta = sessions.meta(id).await?.map(|(meta, _)| meta);
        let messages = match &meta {
            Some(meta) if want_context => Some(sessions.recent_messages(id, meta, RECENT_MESSAGES).await),
            _ => None,
        };
        Ok::<_, crate::sessions::SessionError>((meta, messages))
    };
    let (first, ledger_read, archive) = tokio::join!(
        meta_then_messages,
        async { if want_ledger { Some(app.store.get(&ledger_key).await) } else { None } },
        async { if want_context { Some(sessions.latest_archive_overview(id).await) } else { None } },
    );
    let mut context_error = None;
    let mut meta_failed = false;
    let mut context = SessionContext::default();
    let meta = match first {
        Ok((meta, messages)) => {
            match messages {
                Some(Ok(messages)) => {
                    context.messages = messages.iter().map(|m| (m.role.clone(), m.text())).collect();
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "session messages unreadable");
                    context_error = Some("the session's messages could not be read".to_owned());
                }
                None => {}
            }
            meta
        }
        Err(e) => {
            tracing::warn!(error = %e, "session meta unreadable; serving without its turn clock");
            context_error = Some("the session's meta could not be read".to_owned());
            meta_failed = true;
            None
        }
    };
    let ledger_failed = want_ledger && meta_failed;
    match archive {
        Some(Ok(found)) => context.overview = found.map(|(_, text)| text),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "session archive unreadable");
            context_error = Some("the session's archive could not be read".to_owned());
        }
        None => {}
    }
    let ledger = ledger_read.filter(|_| !ledger_failed).map(|read| {
        let turn = meta.as_ref().map_or(0, |m| m.user_turn_count);
        Ledger::from_read(&app.store, ledger_key, read, turn, u64::from(dedup_turns))
    });
    Ok(LoadedSession { ledger, ledger_failed, context, context_error })
}

/// The expansion stage for `query`, bounded by the deadline: `off` without
/// session context, `failed` when the context could not be read.
async fn expand_query(app: &App, loaded: &LoadedSession<'_>, query: &str, deadline: &Deadline) -> Expansion {
    if let Some(error) = &loaded.context_error {
        return Expansion::original(query, ExpansionStatus::Failed, Some(format!("session context: {error}")));
    }
    let Some(model) = app.models.planner().filter(|_| !loaded.context.is_empty()) else {
        return Expansion::original(query, ExpansionStatus::Off, None);
    };
    let retrieval = &app.config.retrieval;
    let cap = RetrievalConfig::seconds(retrieval.recall_intent_timeout_s);
    // Retrieval and the answer still follow expansion: keep two reserves.
    let reserve = Duration::from_millis(retrieval.stage_reserve_ms.saturating_mul(2));
    let budget = deadline.stage_budget(Instant::now(), cap, reserve);
    expansion::expand(model.as_ref(), &loaded.context, query, budget).await
}

/// The rewrite stage over the assembled block, bounded by the deadline.
async fn rewrite_block(
    app: &App,
    request: &SearchRequest,
    assembled: &Assembled,
    context: &SessionContext,
    deadline: &Deadline,
) -> Rewritten {
    let Some(model) = app.models.planner() else {
        return Rewritten::without_digest(RewriteStatus::Failed, Some("no model is configured for the rewrite".into()));
    };
    let uris: Vec<String> = assembled.entries.iter().map(|e| e.candidate.uri.to_string()).collect();
    let served: HashSet<&str> = uris.iter().map(String::as_str).collect();
    let slice = rewrite::session_slice(context, &served);
    let cap = RetrievalConfig::seconds(app.config.retrieval.recall_rewrite_timeout_s);
    let reserve = Duration::from_millis(app.config.retrieval.stage_reserve_ms);
    let budget = deadline.stage_budget(Instant::now(), cap, reserve);
    let query = request.common.params.query.as_str();
    rewrite::rewrite(model.as_ref(), query, &assembled.rendered, &slice, request.rewrite_max_bullets, &served, budget)
        .await
}

/// Runs bootstrap mode: the slot manifest, planned and rendered within
/// `max_tokens`. No model, no semantic search.
///
/// # Errors
/// 400 for a malformed session id; 503 when a dependency fails.
pub async fn bootstrap(app: &App, identity: &Identity, request: &SearchRequest, now: i64) -> Result<Value, ApiError> {
    let session_id = request.session_id.as_deref().map(parse_session_id).transpose()?;
    let since = request.common.params.time.and_then(|t| t.since).unwrap_or(now - BOOTSTRAP_DEFAULT_WINDOW_S);
    let params = crate::assemble::bootstrap::BootstrapParams {
        max_tokens: request.assemble.max_tokens,
        since,
        session_id,
        manifest: crate::assemble::bootstrap::Manifest::default(),
    };
    let assembled = crate::assemble::bootstrap::bootstrap(app, identity, &params).await?;
    let Assembled { entries, rendered, stats } = assembled;
    let entries: Vec<Value> = entries.iter().map(crate::assemble::Entry::to_json).collect();
    Ok(json!({ "entries": entries, "rendered": rendered, "digest": "", "stats": stats }))
}

/// Runs context mode: authorises `exclude_uris`, reads the session (ledger
/// and context) when one is given, expands the query, assembles, rewrites,
/// records the ledger, and adds the pipeline's stats. The LLM stages and
/// the ledger write never fail the request and never run past `deadline`.
///
/// # Errors
/// 403 for an `exclude_uris` entry outside the caller's tree; 400 for a
/// malformed session id; 503 when a dependency fails.
pub async fn context(
    app: &App,
    identity: &Identity,
    request: &SearchRequest,
    deadline: &Deadline,
) -> Result<Value, ApiError> {
    authorize_targets(identity, &request.assemble.exclude)
        .map_err(|_| ApiError::PermissionDenied("exclude_uris names a URI outside the caller's tree".into()))?;
    let subtrees = request.assemble.exclude.iter().map(|uri| identity.resolve_home(uri)).collect();
    let mut exclusion = Exclusion { subtrees, ..Exclusion::default() };
    let query = request.common.params.query.as_str();
    let wants_expansion = expansion_enabled(app, request.query_expansion);
    let wants_rewrite = match request.rewrite {
        Rewrite::Off => false,
        Rewrite::On => true,
        Rewrite::Auto => app.models.has_dedicated_planner(),
    };
    let session = request.session_id.as_deref().map(parse_session_id).transpose()?;
    let (loaded, prepared) = match &session {
        Some(id) if request.dedup_turns > 0 || wants_expansion || wants_rewrite => {
            // The index revalidation and the original query's embedding
            // need neither the session nor the plan: they go out with the
            // session read.
            let original = [query];
            let (loaded, snapshot, original) = tokio::join!(
                load_session(app, identity, id, request.dedup_turns, wants_expansion || wants_rewrite),
                checked_snapshot(app, identity),
                app.embedder.embed(&original),
            );
            (Some(loaded?), Some((snapshot?, original?)))
        }
        _ => (None, None),
    };
    let expansion = match &loaded {
        Some(loaded) if wants_expansion => expand_query(app, loaded, query, deadline).await,
        _ => Expansion::original(query, ExpansionStatus::Off, None),
    };
    let ledger = loaded.as_ref().and_then(|l| l.ledger.as_ref());
    if let Some(ledger) = ledger {
        exclusion.exact = ledger.cooled_uris();
    }
    let mut params = request.assemble.clone();
    params.queries.clone_from(&expansion.queries);
    let mut assembled = match prepared {
        Some((snapshot, original)) => {
            let queries: Vec<&str> = params.queries.iter().map(String::as_str).collect();
            let vectors = with_planned_embeddings(app, (query, original), &queries).await?;
            assemble_over(app, identity, &params, &exclusion, &snapshot, vectors).await?
        }
        None => assemble(app, identity, &params, &exclusion).await?,
    };
    let empty = SessionContext::default();
    let session_context = loaded.as_ref().map_or(&empty, |l| &l.context);
    let rewritten = if wants_rewrite {
        rewrite_block(app, request, &assembled, session_context, deadline).await
    } else {
        Rewritten::without_digest(RewriteStatus::Off, None)
    };
    if rewritten.status == RewriteStatus::NoRelevant {
        assembled.rendered.clear();
    }
    for (stage, status, error) in [
        ("query expansion", expansion.status.as_str(), &expansion.error),
        ("rewrite", rewritten.status.as_str(), &rewritten.error),
    ] {
        if let Some(error) = error {
            tracing::warn!(stage, status, error, "llm stage degraded; the block is served without it");
        }
    }
    let ledger_failed = loaded.as_ref().is_some_and(|l| l.ledger_failed);
    let dedup = match ledger {
        None if ledger_failed => {
            DedupStatus { status: "write_failed", ..DedupStatus::off(u64::from(request.dedup_turns)) }
        }
        None => DedupStatus::off(u64::from(request.dedup_turns)),
        Some(ledger) => {
            let status = if rewritten.status == RewriteStatus::NoRelevant {
                // Nothing was injected: nothing is recorded.
                ledger.status
            } else {
                let served: Vec<(String, String)> = assembled
                    .entries
                    .iter()
                    .map(|e| (e.candidate.uri.to_string(), e.tier.as_str().to_owned()))
                    .collect();
                let until = tokio::time::Instant::from_std(deadline.soft_stop());
                tokio::time::timeout_at(until, ledger.record(&served)).await.unwrap_or("write_failed")
            };
            DedupStatus {
                turns: u64::from(request.dedup_turns),
                status,
                cooled: ledger.cooled.len(),
                turn: Some(ledger.turn()),
            }
        }
    };
    Ok(context_result(assembled, request, &dedup, &expansion, &rewritten))
}

/// The context-mode result: entries, rendered block, digest and stats.
/// `query_expansion_error` and `rewrite_error` say why a stage failed or
/// timed out (present only then).
#[must_use]
pub fn context_result(
    assembled: Assembled,
    request: &SearchRequest,
    dedup: &DedupStatus,
    expansion: &Expansion,
    rewritten: &Rewritten,
) -> Value {
    let Assembled { entries, rendered, mut stats } = assembled;
    let mut put = |k: &str, v: Value| {
        stats.insert(k.to_owned(), v);
    };
    put("query_expansion", json!(expansion.status.as_str()));
    put("planned_queries", json!(expansion.planned()));
    if let Some(error) = &expansion.error {
        put("query_expansion_error", json!(error));
    }
    put("rewrite", json!(rewritten.status.as_str()));
    put("rewrite_usage", rewritten.usage.map_or(Value::Null, |u| json!(u)));
    if let Some(error) = &rewritten.error {
        put("rewrite_error", json!(error));
    }
    put("dedup", dedup.to_json());
    if !request.ignored.is_empty() {
        put("ignored", json!(request.ignored));
    }
    let entries: Vec<Value> = entries.iter().map(crate::assemble::Entry::to_json).collect();
    let mut out = Map::new();
    out.insert("entries".into(), Value::Array(entries));
    out.insert("rendered".into(), Value::String(rendered));
    out.insert("digest".into(), Value::String(rewritten.digest.clone()));
    out.insert("stats".into(), Value::Object(stats));
    Value::Object(out)
}
