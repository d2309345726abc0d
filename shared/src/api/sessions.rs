//! The `sessions` routes, shapes as the reference:
//!
//! - `POST /api/v1/sessions` — create (an id may be given; else one is made)
//! - `GET /api/v1/sessions` — the caller's sessions
//! - `DELETE /api/v1/sessions/{id}` — the session, its archives and their
//!   event memories
//! - `GET /api/v1/sessions/{id}/archives/{archive_id}` — one archive:
//!   abstract, overview and messages
//! - `POST /api/v1/sessions/{id}/messages` — append one (creates the session)
//! - `POST /api/v1/sessions/{id}/messages/batch` — append up to 100, in order
//! - `GET /api/v1/sessions/{id}` — the session's counters
//! - `POST /api/v1/sessions/{id}/commit` — archive the messages since the
//!   last archive (`{}` or `{"keep_recent_count": n}`) and keep them as
//!   event memories ([`crate::memory`]), reporting a task
//! - `GET /api/v1/sessions/{id}/context?token_budget=N` — the latest
//!   archive overview, earlier abstracts and the newest messages
//! - `GET /api/v1/tasks/{id}`, `GET /api/v1/tasks` — the caller's tasks
//!
//! A session lives under its user's tree, so another user's id is simply
//! not found (404), never its content.

use bytes::Bytes;
use http::{Method, Request, Response};
use serde_json::{Value, json};

use super::error::{ApiError, FieldError};
use super::fields::Body;
use super::fields::{Query, decode_segment};
use super::payload::{Budget, largest_fitting, respond};
use super::{Admitted, admit_method, error_response, within_deadline};
use crate::app::App;
use crate::sessions::{SessionContext, SessionError, SessionId, SessionMeta, Sessions, StoredMessage};

/// Fields of a commit body: the reference's `CommitRequest` fields Skald
/// honours (`keep_recent_count`) or accepts and ignores (`telemetry`;
/// `extraction_metadata`, which only a model extraction would read). The
/// turn-budget retention fields are refused by name.
pub const COMMIT_FIELDS: &[&str] = &[
    "keep_recent_count",
    "retention_mode",
    "keep_recent_turn_count",
    "retained_message_token_budget",
    "min_raw_tail_steps",
    "telemetry",
    "extraction_metadata",
];

/// The reference's commit fields that Skald refuses by name (none: the
/// turn-budget retention fields are served since).
pub const UNSUPPORTED_COMMIT_FIELDS: &[&str] = &[];

/// The turn-budget fields, which need `retention_mode: "turn_budget"`.
const TURN_FIELDS: [&str; 3] = ["keep_recent_turn_count", "retained_message_token_budget", "min_raw_tail_steps"];

/// The most sessions `GET /api/v1/sessions` lists (more: `"truncated": true`).
pub const MAX_LISTED_SESSIONS: usize = 1000;

/// The default `token_budget` of a session context, as the reference.
pub const DEFAULT_CONTEXT_BUDGET: i64 = 128_000;
/// The largest `token_budget` accepted.
pub const MAX_CONTEXT_BUDGET: i64 = 1_000_000;

/// Messages a batch may hold.
pub const MAX_BATCH: usize = 100;

/// Time a batch keeps for each further append: with less left before the
/// deadline, the batch stops and answers with what it applied
/// (`"truncated": true`).
pub const BATCH_APPEND_RESERVE: std::time::Duration = std::time::Duration::from_millis(250);

/// How long one append keeps trying against concurrent appends to the
/// same session: then, with nothing applied, it is answered 429 with
/// `Retry-After` (within a batch, the batch stops and answers what it
/// applied), so a crowd is told to come back rather than held to its
/// deadline.
pub const APPEND_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// When an append admitted under `deadline` gives up: [`APPEND_PATIENCE`]
/// from now, or the deadline's soft stop when that is sooner.
fn give_up_at(deadline: &crate::deadline::Deadline) -> std::time::Instant {
    deadline.soft_stop().min(std::time::Instant::now() + APPEND_PATIENCE)
}

/// Fields of one message (the reference's `AddMessageRequest`, plus `id`
/// for idempotent retries).
pub const MESSAGE_FIELDS: &[&str] = &[
    "role",
    "content",
    "parts",
    "created_at",
    "turn_id",
    "message_kind",
    "source_message_ids",
    "peer_id",
    "telemetry",
    "id",
];

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Store(s) => s.into(),
            SessionError::NotFound(id) => Self::NotFound(format!("session {id} not found")),
            SessionError::Corrupt(_) => Self::dependency("the session's stored data is unreadable", e),
            SessionError::Contention(_) => Self::Conflict(e.to_string()),
            SessionError::Busy { retry_after_s, .. } => Self::Busy { message: e.to_string(), retry_after_s },
        }
    }
}

/// What a sessions route does: one handler each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Create,
    List,
    Get,
    Delete,
    Archive,
    Append,
    Batch,
    Commit,
    Context,
    ToolResults,
    ToolResult,
    ToolResultSearch,
}

/// The sessions function's route table (the tasks routes are
/// [`super::tasks`]'s): each route's method and its path's segments after
/// `/api/v1/sessions`, where `{…}` is one segment handed to the handler,
/// in order (`{tool_result_id}` percent-decoded).
const ROUTES: &[(Method, &[&str], Kind)] = &[
    (Method::POST, &[], Kind::Create),
    (Method::GET, &[], Kind::List),
    (Method::GET, &["{id}"], Kind::Get),
    (Method::DELETE, &["{id}"], Kind::Delete),
    (Method::GET, &["{id}", "archives", "{archive_id}"], Kind::Archive),
    (Method::POST, &["{id}", "messages"], Kind::Append),
    (Method::POST, &["{id}", "messages", "batch"], Kind::Batch),
    (Method::POST, &["{id}", "commit"], Kind::Commit),
    (Method::GET, &["{id}", "context"], Kind::Context),
    (Method::GET, &["{id}", "tool-results"], Kind::ToolResults),
    (Method::GET, &["{id}", "tool-results", "{tool_result_id}"], Kind::ToolResult),
    (Method::GET, &["{id}", "tool-results", "{tool_result_id}", "search"], Kind::ToolResultSearch),
];

/// A request's route: what it does, its method, and the path's segments
/// the table's `{…}` took.
#[derive(Debug, PartialEq, Eq)]
struct Route {
    kind: Kind,
    method: Method,
    params: Vec<String>,
}

/// The route of `method` and `path` in [`ROUTES`].
///
/// # Errors
/// 404 for a path no route has; 405, naming the methods it takes, for a
/// path with routes of other methods only.
fn route(method: &Method, path: &str) -> Result<Route, ApiError> {
    let not_found = || ApiError::NotFound(format!("no route {method} {path}"));
    let rest = path.trim_end_matches('/').strip_prefix("/api/v1/sessions").ok_or_else(not_found)?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return Err(not_found());
    }
    let segments: Vec<&str> = rest.split('/').skip(1).collect();
    let shaped: Vec<&(Method, &[&str], Kind)> = ROUTES
        .iter()
        .filter(|(_, pattern, _)| {
            pattern.len() == segments.len() && pattern.iter().zip(&segments).all(|(p, s)| p.starts_with('{') || p == s)
        })
        .collect();
    let Some((_, pattern, kind)) = shaped.iter().find(|(m, _, _)| m == method) else {
        if shaped.is_empty() {
            return Err(not_found());
        }
        let allowed: Vec<&str> = shaped.iter().map(|(m, _, _)| m.as_str()).collect();
        return Err(ApiError::MethodNotAllowed(method.to_string(), allowed.join(", ")));
    };
    let params = pattern
        .iter()
        .zip(&segments)
        .filter(|(p, _)| p.starts_with('{'))
        .map(|(p, s)| if *p == "{tool_result_id}" { decode_segment(s) } else { (*s).to_owned() })
        .collect();
    Ok(Route { kind: *kind, method: method.clone(), params })
}

fn session_id(text: &str, field: Option<&str>) -> Result<SessionId, ApiError> {
    SessionId::new(text).map_err(|e| match field {
        Some(f) => ApiError::field(f, "value_error", format!("Value error, {e}")),
        None => ApiError::InvalidArgument(e),
    })
}

/// Tool results listed (and search matches returned) by default.
pub const DEFAULT_TOOL_RESULTS: i64 = 50;
/// The most tool results listed, or matches returned, at once.
pub const MAX_TOOL_RESULTS: i64 = 1000;
/// Search matches returned by default.
pub const DEFAULT_TOOL_RESULT_MATCHES: i64 = 10;
/// Code points a tool result read returns by default.
pub const DEFAULT_TOOL_RESULT_PAGE: i64 = 20_000;
/// The most code points one tool result read returns (a response's bound).
pub const MAX_TOOL_RESULT_PAGE: i64 = 200_000;
/// The most code points of context around a search match.
pub const MAX_TOOL_RESULT_CONTEXT: i64 = 2_000;
/// The newest archives whose messages a tool-results route reads (with
/// the live messages).
const TOOL_RESULT_ARCHIVES: u64 = 20;

/// The URI OpenClaw's plugin names a tool result by.
fn tool_result_uri(id: &SessionId, tool_result_id: &str) -> String {
    let encode = |s: &str| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string();
    format!("viking://session/{}/tool-results/{}", encode(id.as_str()), encode(tool_result_id))
}

/// The tool results of session `id`: its newest archives' messages and its
/// live ones, oldest first.
///
/// Cost: the session's meta, then its live messages and up to
/// [`TOOL_RESULT_ARCHIVES`] archives' messages, read at once.
async fn session_tool_results(
    sessions: &Sessions<'_>,
    id: &SessionId,
) -> Result<Vec<crate::tool_results::ToolResult>, ApiError> {
    let (meta, _) =
        sessions.meta(id).await?.ok_or_else(|| ApiError::NotFound(format!("session {} not found", id.as_str())))?;
    let first = meta.commit_count.saturating_sub(TOOL_RESULT_ARCHIVES) + 1;
    let archived =
        futures_util::future::join_all((first..=meta.commit_count).map(|n| sessions.archived_messages(id, n)));
    let (archived, live) = tokio::join!(archived, sessions.live_messages(id, None));
    let mut messages = Vec::new();
    for found in archived {
        messages.extend(found?.unwrap_or_default());
    }
    messages.extend(live?);
    Ok(crate::tool_results::tool_results(&messages))
}

/// Tool result `tid` of session `id`.
///
/// # Errors
/// 404 when the session or the result is not there.
async fn find_tool_result(
    sessions: &Sessions<'_>,
    id: &SessionId,
    tid: &str,
) -> Result<crate::tool_results::ToolResult, ApiError> {
    session_tool_results(sessions, id)
        .await?
        .into_iter()
        .rev()
        .find(|r| r.id == tid)
        .ok_or_else(|| ApiError::NotFound(format!("tool result {tid} of session {} not found", id.as_str())))
}

fn now_text() -> String {
    time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// Handles every sessions route, and the tasks routes ([`super::tasks`]),
/// which the same function serves.
pub async fn handle(app: &App, request: Request<Bytes>) -> Response<String> {
    if request.uri().path().starts_with(super::tasks::PREFIX) {
        return super::tasks::handle(app, request).await;
    }
    let route = match route(request.method(), request.uri().path()) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let admitted = match admit_method(app, &request, &route.method).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    let query = Query::parse(request.uri().query());
    match within_deadline(&admitted.deadline, run(app, &admitted, route, query)).await {
        Ok((result, truncated)) => respond(result, None, truncated),
        Err(e) => error_response(&e),
    }
}

/// A session context in the reference's shape.
fn context_json(context: &SessionContext) -> Value {
    json!({
        "latest_archive_overview": context.latest_archive_overview,
        "pre_archive_abstracts": context.pre_archive_abstracts,
        "messages": context.messages.iter().map(message_json).collect::<Vec<_>>(),
        "estimatedTokens": context.estimated_tokens,
        "stats": {
            "totalArchives": context.total_archives,
            "includedArchives": context.included_archives,
            "droppedArchives": context.dropped_archives,
            "failedArchives": context.failed_archives,
            "activeTokens": context.active_tokens,
            "archiveTokens": context.archive_tokens,
        },
    })
}

/// Cuts `context` until it fits a response (`budget`): the oldest messages
/// go first, then the oldest abstracts, and the counters follow (a dropped
/// abstract counts as a dropped archive). Whether anything was dropped.
/// Up to 200 messages within a million-token budget — tool outputs among
/// their parts, which the token estimate may not count in full — can take
/// a context past Lambda's limit.
fn fit_context(context: &mut SessionContext, budget: Budget) -> bool {
    if budget.fits(&context_json(context)) {
        return false;
    }
    let messages = std::mem::take(&mut context.messages);
    let n = messages.len();
    let keep_newest = |context: &mut SessionContext, k: usize| {
        context.messages = messages[n - k..].to_vec();
        context.active_tokens = context.messages.iter().map(StoredMessage::token_estimate).sum();
        context.estimated_tokens = context.active_tokens + context.archive_tokens;
    };
    let k = largest_fitting(n, |k| {
        let mut trial = context.clone();
        keep_newest(&mut trial, k);
        budget.fits(&context_json(&trial))
    });
    keep_newest(context, k);
    if k == 0 && !budget.fits(&context_json(context)) {
        let abstracts = std::mem::take(&mut context.pre_archive_abstracts);
        let tokens = |texts: &[String]| texts.iter().map(|t| crate::tokens::estimate_tokens(t) as u64).sum::<u64>();
        let keep_newest = |context: &mut SessionContext, k: usize| {
            let dropped = &abstracts[k..];
            let mut trial = context.clone();
            trial.pre_archive_abstracts = abstracts[..k].to_vec();
            trial.archive_tokens = context.archive_tokens.saturating_sub(tokens(dropped));
            trial.included_archives = context.included_archives.saturating_sub(dropped.len() as u64);
            trial.dropped_archives = context.dropped_archives + dropped.len() as u64;
            trial.estimated_tokens = trial.active_tokens + trial.archive_tokens;
            trial
        };
        let k = largest_fitting(abstracts.len(), |k| budget.fits(&context_json(&keep_newest(context, k))));
        *context = keep_newest(context, k);
    }
    true
}

/// The route's result and whether it was cut to fit a response (only a
/// session's context can be: [`fit_context`]).
/// What a sessions handler works with.
struct Cx<'a> {
    app: &'a App,
    admitted: &'a Admitted<'a>,
    sessions: Sessions<'a>,
    /// "Now" as RFC 3339 text: a new message's and a commit's time.
    now: String,
}

/// Runs the handler `route` names: the result, and whether it was cut to
/// fit a response.
async fn run(app: &App, admitted: &Admitted<'_>, route: Route, query: Query) -> Result<(Value, bool), ApiError> {
    let cx = Cx { app, admitted, sessions: Sessions::new(&app.store, &admitted.identity), now: now_text() };
    let cx = &cx;
    let param = |i: usize| route.params.get(i).map_or("", String::as_str);
    match route.kind {
        Kind::Create => create(cx).await,
        Kind::List => list(cx, query).await,
        Kind::Get => get(cx, param(0)).await,
        Kind::Delete => delete(cx, param(0)).await,
        Kind::Archive => archive(cx, param(0), param(1)).await,
        Kind::Append => append(cx, param(0)).await,
        Kind::Batch => batch(cx, param(0)).await,
        Kind::Commit => commit(cx, param(0)).await,
        Kind::Context => context(cx, param(0), query).await,
        Kind::ToolResults => tool_results(cx, param(0), query).await,
        Kind::ToolResult => tool_result(cx, param(0), param(1), query).await,
        Kind::ToolResultSearch => tool_result_search(cx, param(0), param(1), query).await,
    }
}

/// `POST /api/v1/sessions`: creates the session `session_id` names (one is made when absent or empty).
async fn create(cx: &Cx<'_>) -> Result<(Value, bool), ApiError> {
    let Cx { admitted, sessions, now, .. } = cx;
    // As the reference, the create body is lenient: only `session_id` is read.
    let body = Body::parse(admitted.body, &[])?;
    let id = match body.raw("session_id") {
        None => SessionId::generate(),
        Some(Value::String(s)) if s.is_empty() => SessionId::generate(),
        Some(Value::String(s)) => session_id(s, Some("session_id"))?,
        Some(_) => return Err(ApiError::field("session_id", "string_type", "Input should be a valid string")),
    };
    let (meta, _) = sessions.create(&id, now).await?;
    Ok((
        json!({
            "session_id": id.as_str(),
            "uri": sessions.uri(&id).as_str(),
            "user": { "account_id": admitted.identity.account.as_str(), "user_id": admitted.identity.user.as_str() },
            "created_at": meta.created_at,
        }),
        false,
    ))
}

/// `GET /api/v1/sessions`: the caller's sessions, at most [`MAX_LISTED_SESSIONS`].
async fn list(cx: &Cx<'_>, query: Query) -> Result<(Value, bool), ApiError> {
    let Cx { sessions, .. } = cx;
    query.finish()?;
    let (ids, more) = sessions.list(MAX_LISTED_SESSIONS).await?;
    let cut = more;
    let listed: Vec<Value> =
        ids.iter().map(|id| json!({ "session_id": id.as_str(), "uri": sessions.uri(id).as_str() })).collect();
    Ok((Value::Array(listed), cut))
}

/// `DELETE /api/v1/sessions/{id}`: the session, its archives and their event memories.
async fn delete(cx: &Cx<'_>, id: &str) -> Result<(Value, bool), ApiError> {
    let Cx { app, admitted, sessions, .. } = cx;
    let id = session_id(id, None)?;
    let removed =
        sessions.delete(&id).await?.ok_or_else(|| ApiError::NotFound(format!("session {} not found", id.as_str())))?;
    let indexed = if removed.is_empty() || !app.config.memory_index_inline() {
        true
    } else {
        crate::memory::index_now(app, &admitted.identity, &removed, admitted.now)
            .await
            .map_err(
                |e| tracing::warn!(error = %e, "a deleted session's episodes stay in the index until the indexer runs"),
            )
            .is_ok()
    };
    Ok((json!({ "session_id": id.as_str(), "deleted_memories": removed.len(), "index_updated": indexed }), false))
}

/// `GET /api/v1/sessions/{id}/archives/{archive_id}`: one archive, its oldest messages that fit a response.
async fn archive(cx: &Cx<'_>, id: &str, archive_id: &str) -> Result<(Value, bool), ApiError> {
    let Cx { app, sessions, .. } = cx;
    let id = session_id(id, None)?;
    let not_found = || ApiError::NotFound(format!("archive {archive_id} of session {} not found", id.as_str()));
    let index = crate::sessions::archive_number(archive_id)
        .filter(|n| crate::sessions::archive_name(*n) == archive_id)
        .ok_or_else(not_found)?;
    let archive = sessions.archive(&id, index).await?.ok_or_else(not_found)?;
    let messages: Vec<Value> = archive.messages.iter().map(message_json).collect();
    let shown = |k: usize| {
        json!({
            "archive_id": archive_id,
            "abstract": archive.abstract_text,
            "overview": archive.overview,
            "messages": &messages[..k],
        })
    };
    // Up to 2,000 messages: the oldest that fit a response.
    let budget = Budget::of(&app.config.limits);
    let k = largest_fitting(messages.len(), |k| budget.fits(&shown(k)));
    let cut = k < messages.len();
    Ok((shown(k), cut))
}

/// `GET /api/v1/sessions/{id}`: the session's counters.
async fn get(cx: &Cx<'_>, id: &str) -> Result<(Value, bool), ApiError> {
    let Cx { sessions, .. } = cx;
    let id = session_id(id, None)?;
    let (meta, _) =
        sessions.meta(&id).await?.ok_or_else(|| ApiError::NotFound(format!("session {} not found", id.as_str())))?;
    Ok((info(sessions, &id, &meta), false))
}

/// `POST /api/v1/sessions/{id}/commit`: the body parsed, then [`crate::memory::commit`].
async fn commit(cx: &Cx<'_>, id: &str) -> Result<(Value, bool), ApiError> {
    let Cx { app, admitted, now, .. } = cx;
    let id = session_id(id, None)?;
    let mut body = Body::parse(admitted.body, COMMIT_FIELDS)?;
    let keep = body.int("keep_recent_count", Some(0), Some(10_000)).unwrap_or(0);
    let turn_mode = body.literal("retention_mode", &["turn_budget", ""]).is_some_and(|m| m == "turn_budget");
    let defaults = crate::retention::TurnBudget::default();
    let as_u64 = |n: i64| u64::try_from(n).unwrap_or(0);
    let policy = crate::retention::TurnBudget {
        turns: body.int("keep_recent_turn_count", Some(0), Some(10_000)).map_or(defaults.turns, as_u64),
        token_budget: body.int("retained_message_token_budget", Some(1), None).map_or(defaults.token_budget, as_u64),
        min_tail: body.int("min_raw_tail_steps", Some(0), Some(10_000)).map_or(defaults.min_tail, as_u64),
    };
    if !turn_mode {
        let sent: Vec<&str> = TURN_FIELDS.into_iter().filter(|f| body.sent(f)).collect();
        for field in sent {
            body.error(FieldError::new(
                field,
                "value_error",
                "Value error, the turn-budget fields need retention_mode \"turn_budget\"",
            ));
        }
    }
    body.finish()?;
    let (identity, deadline) = (&admitted.identity, &admitted.deadline);
    let committed = if turn_mode {
        crate::memory::commit::commit_turn_budget(app, identity, deadline, &id, policy, now).await?
    } else {
        crate::memory::commit::commit(app, identity, deadline, &id, as_u64(keep), now).await?
    };
    Ok((serde_json::to_value(&committed).map_err(|e| ApiError::Internal(e.to_string()))?, false))
}

/// `GET /api/v1/sessions/{id}/context?token_budget=N`.
async fn context(cx: &Cx<'_>, id: &str, mut query: Query) -> Result<(Value, bool), ApiError> {
    let Cx { app, sessions, .. } = cx;
    let id = session_id(id, None)?;
    let budget = query.int("token_budget", Some(1), Some(MAX_CONTEXT_BUDGET)).unwrap_or(DEFAULT_CONTEXT_BUDGET);
    query.finish()?;
    let mut context = sessions.context(&id, u64::try_from(budget).unwrap_or(0)).await?;
    let cut = fit_context(&mut context, Budget::of(&app.config.limits));
    Ok((context_json(&context), cut))
}

/// `GET /api/v1/sessions/{id}/tool-results`: the newest first.
async fn tool_results(cx: &Cx<'_>, id: &str, mut query: Query) -> Result<(Value, bool), ApiError> {
    let Cx { sessions, .. } = cx;
    let id = session_id(id, None)?;
    let tool_name = query.raw("tool_name").map(str::to_owned);
    let limit = query.int("limit", Some(1), Some(MAX_TOOL_RESULTS)).unwrap_or(DEFAULT_TOOL_RESULTS);
    query.finish()?;
    let mut results = session_tool_results(sessions, &id).await?;
    results.retain(|r| tool_name.as_ref().is_none_or(|name| r.tool_name == *name));
    // The newest first.
    let listed: Vec<Value> = results
        .iter()
        .rev()
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .map(|r| {
            json!({
                "tool_result_id": r.id,
                "tool_name": r.tool_name,
                "status": r.status,
                "storage_uri": tool_result_uri(&id, &r.id),
                "original_chars": r.chars(),
                "created_at": r.created_at,
            })
        })
        .collect();
    Ok((json!({ "tool_results": listed }), false))
}

/// `GET /api/v1/sessions/{id}/tool-results/{tool_result_id}`: a page of its output.
async fn tool_result(cx: &Cx<'_>, id: &str, tid: &str, mut query: Query) -> Result<(Value, bool), ApiError> {
    let Cx { sessions, .. } = cx;
    let id = session_id(id, None)?;
    let offset = query.int("offset", Some(0), None).unwrap_or(0);
    let limit = query.int("limit", Some(1), Some(MAX_TOOL_RESULT_PAGE)).unwrap_or(DEFAULT_TOOL_RESULT_PAGE);
    let metadata = query.boolean("include_metadata").unwrap_or(false);
    query.finish()?;
    let result = find_tool_result(sessions, &id, tid).await?;
    let (offset, limit) = (usize::try_from(offset).unwrap_or(usize::MAX), usize::try_from(limit).unwrap_or(0));
    let (content, has_more) = crate::tool_results::page(&result.output, offset, limit);
    let mut answer = json!({
        "tool_result_id": result.id,
        "content": content,
        "offset": offset,
        "limit": limit,
        "offset_unit": "unicode_code_point",
        "total_chars": result.chars(),
        "has_more": has_more,
    });
    if metadata {
        answer["metadata"] = json!({
            "tool_name": result.tool_name, "status": result.status, "created_at": result.created_at,
            "storage_uri": tool_result_uri(&id, &result.id),
        });
    }
    Ok((answer, false))
}

/// `GET /api/v1/sessions/{id}/tool-results/{tool_result_id}/search?q=…`.
async fn tool_result_search(cx: &Cx<'_>, id: &str, tid: &str, mut query: Query) -> Result<(Value, bool), ApiError> {
    let Cx { sessions, .. } = cx;
    let id = session_id(id, None)?;
    let q = query.required("q");
    let limit = query.int("limit", Some(1), Some(MAX_TOOL_RESULTS)).unwrap_or(DEFAULT_TOOL_RESULT_MATCHES);
    let context = query.int("context_chars", Some(0), Some(MAX_TOOL_RESULT_CONTEXT)).unwrap_or(80);
    query.finish()?;
    let q = q.unwrap_or_default();
    let result = find_tool_result(sessions, &id, tid).await?;
    let as_usize = |n: i64| usize::try_from(n).unwrap_or(0);
    let matches: Vec<Value> = crate::tool_results::search(&result.output, &q, as_usize(limit), as_usize(context))
        .into_iter()
        .map(|(offset, snippet)| json!({ "offset": offset, "offset_unit": "unicode_code_point", "snippet": snippet }))
        .collect();
    Ok((json!({ "tool_result_id": result.id, "matches": matches }), false))
}

/// `POST /api/v1/sessions/{id}/messages`: appends one message (creating the session).
async fn append(cx: &Cx<'_>, id: &str) -> Result<(Value, bool), ApiError> {
    let Cx { admitted, sessions, now, .. } = cx;
    let id = session_id(id, None)?;
    let mut body = Body::parse(admitted.body, MESSAGE_FIELDS)?;
    let message = parse_message(&mut body, now);
    body.finish()?;
    let message = message.ok_or_else(|| ApiError::InvalidArgument("invalid message".into()))?;
    let appended = sessions.append(&id, message, now, give_up_at(&admitted.deadline)).await?;
    Ok((
        json!({
            "session_id": id.as_str(),
            "message_count": appended.meta.live_message_count(),
            "user_turn_count": appended.meta.user_turn_count,
            "added": appended.added,
            "pending_tokens": appended.meta.pending_tokens,
        }),
        false,
    ))
}

/// `POST /api/v1/sessions/{id}/messages/batch`: appends up to [`MAX_BATCH`] messages in order, within the deadline.
async fn batch(cx: &Cx<'_>, id: &str) -> Result<(Value, bool), ApiError> {
    let Cx { admitted, sessions, now, .. } = cx;
    let id = session_id(id, None)?;
    let mut body = Body::parse(admitted.body, &["messages", "telemetry"])?;
    let items = match body.raw("messages") {
        Some(Value::Array(items)) => items.clone(),
        Some(_) => {
            body.error(FieldError::new("messages", "list_type", "Input should be a valid list"));
            Vec::new()
        }
        None => {
            body.error(FieldError::new("messages", "missing", "Field required"));
            Vec::new()
        }
    };
    if items.len() > MAX_BATCH {
        body.error(FieldError::new(
            "messages",
            "too_long",
            format!("List should have at most {MAX_BATCH} items after validation, not {}", items.len()),
        ));
    }
    let mut messages = Vec::new();
    if items.len() <= MAX_BATCH {
        for (i, item) in items.iter().enumerate() {
            let bytes = serde_json::to_vec(item).unwrap_or_default();
            match Body::parse(&bytes, MESSAGE_FIELDS) {
                Ok(mut inner) => {
                    let message = parse_message(&mut inner, now);
                    match inner.finish() {
                        Ok(_) => messages.extend(message),
                        Err(ApiError::Validation(errors)) => {
                            for mut e in errors {
                                let mut loc = vec![json!("body"), json!("messages"), json!(i)];
                                loc.extend(e.loc.drain(1..));
                                e.loc = loc;
                                body.error(e);
                            }
                        }
                        Err(other) => return Err(other),
                    }
                }
                Err(_) => body.error(
                    FieldError::new("messages", "model_attributes_type", "Input should be a valid dictionary").at(i),
                ),
            }
        }
    }
    body.finish()?;
    let total = messages.len();
    let (mut added, mut applied) = (0, 0);
    let mut meta = None;
    let mut stopped = None;
    // Each append ends before the soft stop or is not counted (a cut
    // append's outcome is unknown; a retry with its id applies it
    // once), so the answer always leaves in time. An append that
    // fails stops the batch: what went before is answered as
    // applied, and the failure only when nothing was.
    let stop = tokio::time::Instant::from_std(admitted.deadline.soft_stop());
    for message in messages {
        if admitted.deadline.remaining(std::time::Instant::now()) < BATCH_APPEND_RESERVE {
            break;
        }
        let appending = sessions.append(&id, message, now, give_up_at(&admitted.deadline));
        let Ok(appended) = tokio::time::timeout_at(stop, appending).await else {
            break;
        };
        match appended {
            Ok(appended) => {
                added += usize::from(appended.added);
                applied += 1;
                meta = Some(appended.meta);
            }
            Err(e) => {
                stopped = Some(e);
                break;
            }
        }
    }
    let meta = match (meta, stopped) {
        (Some(m), stopped) => {
            if let Some(e) = stopped {
                tracing::warn!(session = id.as_str(), applied, total, error = %e, "a batch append stopped early");
            }
            m
        }
        (None, Some(e)) => return Err(e.into()),
        (None, None) if total == 0 => sessions.create(&id, now).await?.0,
        (None, None) => {
            return Err(ApiError::Unavailable(
                "the request reached its deadline before any message was applied; retry".into(),
            ));
        }
    };
    Ok((
        json!({
            "session_id": id.as_str(),
            "message_count": meta.live_message_count(),
            "user_turn_count": meta.user_turn_count,
            "added": added,
            "applied": applied,
            "truncated": applied < total,
            "pending_tokens": meta.pending_tokens,
        }),
        false,
    ))
}

fn info(sessions: &Sessions<'_>, id: &SessionId, meta: &SessionMeta) -> Value {
    json!({
        "session_id": id.as_str(),
        "uri": sessions.uri(id).as_str(),
        "created_at": meta.created_at,
        "updated_at": meta.updated_at,
        "message_count": meta.live_message_count(),
        "total_message_count": meta.total_message_count,
        "user_turn_count": meta.user_turn_count,
        "commit_count": meta.commit_count,
        "pending_tokens": meta.pending_tokens,
        "last_commit_at": meta.last_commit_at,
        "memories_extracted": memories_extracted(meta),
    })
}

/// The session's `memories_extracted`: per category, with `total` (0
/// before any commit made one).
fn memories_extracted(meta: &SessionMeta) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("total".to_owned(), json!(0));
    for (category, count) in &meta.memories_extracted {
        out.insert(category.clone(), json!(count));
    }
    Value::Object(out)
}

/// Commits session `id`: plans, summarises (with the configured model
/// under the request deadline, else extractively) and writes the archive;
/// plans again when a concurrent commit took the archive number.
/// A commit in turn-budget mode: what stays live is decided over the live
/// messages (a read of each: [`crate::retention::turn_budget`]), then
/// committed as a keep count; the result adds `estimated_active_tokens`
/// and `budget_exceeded`.
/// A stored message as the reference's `Message.to_dict`: `parts` always
/// (simple content becomes one text part), optional fields when set.
fn message_json(m: &StoredMessage) -> Value {
    let parts = match (&m.parts, &m.content) {
        (Some(parts), _) => Value::Array(parts.clone()),
        (None, Some(text)) => json!([{ "type": "text", "text": text }]),
        (None, None) => json!([]),
    };
    let mut value = json!({ "id": m.id, "role": m.role, "parts": parts, "created_at": m.created_at });
    for (key, field) in [("turn_id", &m.turn_id), ("message_kind", &m.message_kind), ("peer_id", &m.peer_id)] {
        if let Some(v) = field {
            value[key] = Value::String(v.clone());
        }
    }
    value
}

/// One message from `body`, or `None` with the problems recorded in `body`
/// (batch callers prefix their locations with the message's index).
fn parse_message(body: &mut Body, now: &str) -> Option<StoredMessage> {
    let role = match body.raw("role") {
        None => {
            body.error(FieldError::new("role", "missing", "Field required"));
            None
        }
        Some(_) => body.literal("role", &["user", "assistant"]),
    };
    let content = body.string("content");
    let parts = match body.raw("parts") {
        None => None,
        Some(Value::Array(items)) if items.iter().all(Value::is_object) => Some(items.clone()),
        Some(_) => {
            body.error(FieldError::new("parts", "list_type", "Input should be a valid list of objects"));
            None
        }
    };
    let has_text =
        content.as_deref().is_some_and(|c| !c.trim().is_empty()) || parts.as_ref().is_some_and(|p| !p.is_empty());
    if !has_text && !body.has_error("content") && !body.has_error("parts") {
        body.error(FieldError::new(
            "content",
            "value_error",
            "Value error, a message needs non-empty content or parts",
        ));
    }
    let created_at = body.string("created_at");
    let turn_id = body.string("turn_id");
    let message_kind = body.literal("message_kind", &["user_query", "assistant_step", "tool_transport", "checkpoint"]);
    let source_message_ids = body.string_list("source_message_ids");
    let peer_id = body.string("peer_id");
    let id = body.string("id").filter(|s| !s.is_empty());
    if id.as_ref().is_some_and(|s| s.len() > 256) {
        body.error(FieldError::new("id", "string_too_long", "String should have at most 256 characters"));
    }
    Some(StoredMessage {
        id: id.unwrap_or_else(|| format!("m-{:016x}", crate::index::unique())),
        role: role?,
        // Parts win over content, as the reference.
        content: if parts.is_some() { None } else { content },
        parts,
        created_at: created_at.unwrap_or_else(|| now.to_owned()),
        turn_id,
        message_kind,
        peer_id,
        source_message_ids,
        seq: 0,
        claim: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_by_method() {
        let kind = |method: &Method, path: &str| route(method, path).map(|r| (r.kind, r.params));
        let (get, post) = (Method::GET, Method::POST);
        let s1 = || vec!["s1".to_owned()];
        assert_eq!(kind(&post, "/api/v1/sessions").ok(), Some((Kind::Create, vec![])));
        assert_eq!(kind(&post, "/api/v1/sessions/").ok(), Some((Kind::Create, vec![])));
        assert_eq!(kind(&get, "/api/v1/sessions").ok(), Some((Kind::List, vec![])));
        assert_eq!(kind(&get, "/api/v1/sessions/s1").ok(), Some((Kind::Get, s1())));
        assert_eq!(kind(&Method::DELETE, "/api/v1/sessions/s1").ok(), Some((Kind::Delete, s1())));
        assert_eq!(kind(&post, "/api/v1/sessions/s1/messages").ok(), Some((Kind::Append, s1())));
        assert_eq!(kind(&post, "/api/v1/sessions/s1/messages/batch").ok(), Some((Kind::Batch, s1())));
        assert_eq!(
            kind(&get, "/api/v1/sessions/s1/archives/archive_002").ok(),
            Some((Kind::Archive, vec!["s1".to_owned(), "archive_002".to_owned()]))
        );
        assert_eq!(
            kind(&get, "/api/v1/sessions/s1/tool-results/a%2Fb/search").ok(),
            Some((Kind::ToolResultSearch, vec!["s1".to_owned(), "a/b".to_owned()]))
        );
        let refused = |method: &Method, path: &str| route(method, path).map_err(|e| (e.status(), e.to_string())).err();
        assert_eq!(refused(&post, "/api/v1/sessions/s1").map(|(s, _)| s), Some(405));
        assert!(refused(&post, "/api/v1/sessions/s1").is_some_and(|(_, m)| m.contains("GET, DELETE")));
        assert_eq!(refused(&get, "/api/v1/sessions/s1/commit").map(|(s, _)| s), Some(405));
        assert_eq!(refused(&post, "/api/v1/sessions/s1/other").map(|(s, _)| s), Some(404));
        assert_eq!(refused(&post, "/api/v1/sessionsx").map(|(s, _)| s), Some(404));
        assert_eq!(refused(&get, "/api/v1/other").map(|(s, _)| s), Some(404));
    }

    #[test]
    fn every_route_of_the_table_is_reachable_and_distinct() {
        for (i, (method, pattern, kind)) in ROUTES.iter().enumerate() {
            let path = format!(
                "/api/v1/sessions/{}",
                pattern.iter().map(|p| if p.starts_with('{') { "x" } else { p }).collect::<Vec<_>>().join("/")
            );
            let routed = route(method, &path).map(|r| r.kind).ok();
            assert_eq!(routed, Some(*kind), "{method} {path} (entry {i})");
        }
    }
}
