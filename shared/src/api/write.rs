//! The write routes, served by the `content` function beside the reads
//! ([`crate::write`] does the work; shapes as the reference):
//!
//! - `POST /api/v1/content/write` — `uri`, `content`, `mode`
//!   (`replace` default, `append`, `create`), `wait`, `timeout`
//! - `POST /api/v1/content/edit` — `uri`, `old_string`, `new_string`,
//!   `replace_all`, `wait`, `timeout` (what MCP's `edit` calls)
//! - `POST /api/v1/fs/mkdir` — `uri`, `description`
//! - `POST /api/v1/fs/mv` — `from_uri`, `to_uri`, `wait`, `timeout`
//! - `DELETE /api/v1/fs?uri=&recursive=false&wait=false`
//!
//! What changed reaches the index through the indexer's own apply: inline
//! when the store sends no notifications (a local directory), else from
//! the store's notifications, as for files an operator writes (`wait` is
//! accepted; the content function holds no embedder). `status` says
//! which: `indexed` or `queued`. A write
//! whose indexing failed stays written and answers `status`
//! `index_failed` with the reason; the next change of the file, or the
//! notification, indexes it.

use http::Method;
use serde_json::{Value, json};

use super::error::{ApiError, FieldError};
use super::fields::{Body, Query};
use super::{Admitted, admit_method, error_response, ok, within_deadline};
use crate::app::App;
use crate::keys::Role;
use crate::uri::VikingUri;
use crate::write::{WriteError, WriteMode, Writes};

/// The routes this module serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /api/v1/content/write`.
    Write,
    /// `POST /api/v1/content/edit`.
    Edit,
    /// `POST /api/v1/fs/mkdir`.
    Mkdir,
    /// `POST /api/v1/fs/mv`.
    Mv,
    /// `DELETE /api/v1/fs`.
    Remove,
}

impl Route {
    fn method(self) -> Method {
        if self == Self::Remove { Method::DELETE } else { Method::POST }
    }
}

/// The write route at `path`, if any.
#[must_use]
pub fn route(path: &str) -> Option<Route> {
    Some(match path.trim_end_matches('/') {
        "/api/v1/content/write" => Route::Write,
        "/api/v1/content/edit" => Route::Edit,
        "/api/v1/fs/mkdir" => Route::Mkdir,
        "/api/v1/fs/mv" => Route::Mv,
        "/api/v1/fs" => Route::Remove,
        _ => return None,
    })
}

/// The fields `content/write` accepts.
pub const WRITE_FIELDS: &[&str] = &["uri", "content", "mode", "wait", "timeout", "telemetry"];
/// The fields `content/edit` accepts.
pub const EDIT_FIELDS: &[&str] = &["uri", "old_string", "new_string", "replace_all", "wait", "timeout", "telemetry"];
/// The fields `fs/mkdir` accepts.
pub const MKDIR_FIELDS: &[&str] = &["uri", "description", "telemetry"];
/// The fields `fs/mv` accepts.
pub const MV_FIELDS: &[&str] = &["from_uri", "to_uri", "wait", "timeout", "telemetry"];

impl From<WriteError> for ApiError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Forbidden(_) => Self::PermissionDenied(e.to_string()),
            WriteError::Invalid(_) => Self::InvalidArgument(e.to_string()),
            WriteError::NotFound(_) => Self::NotFound(e.to_string()),
            WriteError::Conflict(_) => Self::Conflict(e.to_string()),
            WriteError::TooLarge { size, limit, .. } => Self::PayloadTooLarge { size, limit },
            WriteError::Store(s) => s.into(),
        }
    }
}

/// Handles one write route; never panics on input and always answers JSON.
pub async fn handle(app: &App, route: Route, request: &http::Request<bytes::Bytes>) -> http::Response<String> {
    let admitted = match admit_method(app, request, &route.method()).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    let query = Query::parse(request.uri().query());
    match within_deadline(&admitted.deadline, run(app, &admitted, route, query)).await {
        Ok(result) => ok(result, None),
        Err(e) => error_response(&e),
    }
}

/// A required URI field of `body`.
fn uri_field(body: &mut Body, name: &str) -> Option<VikingUri> {
    if !body.sent(name) {
        body.error(FieldError::new(name, "missing", "Field required"));
        return None;
    }
    let text = body.string(name)?;
    match VikingUri::parse(text.trim()) {
        Ok(uri) => Some(uri),
        Err(e) => {
            body.error(FieldError::new(name, "value_error", format!("Value error, {e}")));
            None
        }
    }
}

/// The required `uri` query parameter, validated (`None` with the problem
/// recorded in `query`).
fn uri_param(query: &mut Query) -> Option<VikingUri> {
    let text = query.required("uri")?;
    VikingUri::parse(text.trim()).map_err(|e| query.value_error("uri", &e.to_string())).ok()
}

/// A required string field of `body`.
fn text_field(body: &mut Body, name: &str) -> Option<String> {
    if !body.sent(name) {
        body.error(FieldError::new(name, "missing", "Field required"));
        return None;
    }
    body.string(name)
}

async fn run(app: &App, admitted: &Admitted<'_>, route: Route, mut query: Query) -> Result<Value, ApiError> {
    let shared_writer = matches!(admitted.role, Role::Admin | Role::Root);
    let writes = Writes::new(&app.store, &admitted.identity, shared_writer);
    // (the result, the files whose index records changed, whether to wait)
    let (mut result, changed, wait) = match route {
        Route::Write => {
            let mut body = Body::parse(admitted.body, WRITE_FIELDS)?;
            let uri = uri_field(&mut body, "uri");
            let content = text_field(&mut body, "content");
            let mode = body.literal("mode", &["replace", "append", "create"]);
            let wait = body.boolean("wait").unwrap_or(false);
            body.number("timeout");
            body.finish()?;
            let (Some(uri), Some(content)) = (uri, content) else { return Err(missing()) };
            let mode = mode.and_then(|m| WriteMode::parse(&m)).unwrap_or(WriteMode::Replace);
            let written = writes.write(&uri, &content, mode).await?;
            let result = json!({
                "uri": written.uri, "mode": mode.as_str(), "created": written.created, "size": written.size,
            });
            (result, vec![written.uri], wait)
        }
        Route::Edit => {
            let mut body = Body::parse(admitted.body, EDIT_FIELDS)?;
            let uri = uri_field(&mut body, "uri");
            let old = text_field(&mut body, "old_string");
            let new = text_field(&mut body, "new_string");
            let replace_all = body.boolean("replace_all").unwrap_or(false);
            let wait = body.boolean("wait").unwrap_or(false);
            body.number("timeout");
            body.finish()?;
            let (Some(uri), Some(old), Some(new)) = (uri, old, new) else { return Err(missing()) };
            let written = writes.edit(&uri, &old, &new, replace_all).await?;
            (json!({ "uri": written.uri, "size": written.size }), vec![written.uri], wait)
        }
        Route::Mkdir => {
            let mut body = Body::parse(admitted.body, MKDIR_FIELDS)?;
            let uri = uri_field(&mut body, "uri");
            let description = body.string("description");
            body.finish()?;
            let Some(uri) = uri else { return Err(missing()) };
            let (uri, created) = writes.mkdir(&uri, description.as_deref()).await?;
            let summary = description.is_some().then(|| uri.join(crate::ingest::ABSTRACT_SIDECAR).ok()).flatten();
            (json!({ "uri": uri, "created": created }), summary.into_iter().collect(), false)
        }
        Route::Mv => {
            let mut body = Body::parse(admitted.body, MV_FIELDS)?;
            let from = uri_field(&mut body, "from_uri");
            let to = uri_field(&mut body, "to_uri");
            let wait = body.boolean("wait").unwrap_or(false);
            body.number("timeout");
            body.finish()?;
            let (Some(from), Some(to)) = (from, to) else { return Err(missing()) };
            let (written, removed) = writes.mv(&from, &to).await?;
            let result = json!({
                "from_uri": writes.authorize(&from)?, "to_uri": writes.authorize(&to)?, "moved": written.len(),
            });
            (result, written.into_iter().chain(removed).collect(), wait)
        }
        Route::Remove => {
            let uri = uri_param(&mut query);
            let recursive = query.boolean("recursive").unwrap_or(false);
            let wait = query.boolean("wait").unwrap_or(false);
            query.finish()?;
            let Some(uri) = uri else { return Err(missing()) };
            let removed = writes.remove(&uri, recursive).await?;
            let result = json!({ "uri": writes.authorize(&uri)?, "deleted": removed.len() });
            (result, removed, wait)
        }
    };
    result["status"] = json!(index(app, admitted, &changed, wait).await);
    Ok(result)
}

/// A required field was missing: its error is already recorded, so this is
/// never what a caller sees.
fn missing() -> ApiError {
    ApiError::InvalidArgument("a required field is missing".into())
}

/// Indexes `changed` inline when the store sends no notifications (a
/// local directory, or `memory.index_inline`); says what happened
/// (`indexed`, `queued`, or `index_failed: …`). `wait` is accepted as the
/// reference's: inline indexing always finishes before the answer, and
/// notifications are not waited for.
async fn index(app: &App, admitted: &Admitted<'_>, changed: &[VikingUri], _wait: bool) -> String {
    if changed.is_empty() {
        return "indexed".into();
    }
    // Deployed, the store's notifications reach the indexer within
    // seconds; the content function holds no embedder.
    if !app.config.memory_index_inline() {
        return "queued".into();
    }
    match crate::memory::index_now(app, &admitted.identity, changed, admitted.now).await {
        Ok(()) => "indexed".into(),
        Err(e) => {
            tracing::warn!(error = %e, "a write's inline indexing failed; the notification or next change indexes it");
            format!("index_failed: {e}")
        }
    }
}
