//! The write routes, served by the `content` function beside the reads
//! ([`crate::write`] does the work; shapes as the reference):
//!
//! - `POST /api/v1/content/write` — `uri`, `content`, `mode`
//!   (`replace` default, `append`, `create`), `wait`, `timeout`
//! - `POST /api/v1/content/batch-write` — `root_uri`, `operations`
//!   (`uri`, `content` or `content_base64`, `mode`), `wait`, `timeout`
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
    /// `POST /api/v1/content/batch-write`.
    BatchWrite,
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
        "/api/v1/content/batch-write" => Route::BatchWrite,
        "/api/v1/content/edit" => Route::Edit,
        "/api/v1/fs/mkdir" => Route::Mkdir,
        "/api/v1/fs/mv" => Route::Mv,
        "/api/v1/fs" => Route::Remove,
        _ => return None,
    })
}

/// The fields `content/write` accepts.
pub const WRITE_FIELDS: &[&str] = &["uri", "content", "mode", "wait", "timeout", "telemetry"];
/// The fields `content/batch-write` accepts.
pub const BATCH_WRITE_FIELDS: &[&str] = &["root_uri", "operations", "wait", "timeout", "telemetry"];
/// The fields of one `content/batch-write` operation.
pub const BATCH_OPERATION_FIELDS: &[&str] = &["uri", "content", "content_base64", "mode"];
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
            WriteError::TooLarge { .. } => Self::TooLarge(e.to_string()),
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
    match within_deadline(&admitted.deadline, run_and_index(app, &admitted, route, query)).await {
        Ok(result) => ok(result, None),
        Err(e) => error_response(&e),
    }
}

/// The required `uri` query parameter, validated (`None` with the problem
/// recorded in `query`).
fn uri_param(query: &mut Query) -> Option<VikingUri> {
    let text = query.required("uri")?;
    VikingUri::parse(text.trim()).map_err(|e| query.value_error("uri", &e.to_string())).ok()
}

/// A required URI field of `body` (`missing` or `value_error` recorded).
fn uri_field(body: &mut Body, name: &str) -> Option<VikingUri> {
    if body.require(name) { body.uri(name) } else { None }
}

/// A required string field of `body`.
fn text_field(body: &mut Body, name: &str) -> Option<String> {
    if body.require(name) { body.string(name) } else { None }
}

/// Runs `route` as the caller, logs what changed and indexes it (also
/// when the route failed part way), and adds the indexing's `status`.
async fn run_and_index(app: &App, admitted: &Admitted<'_>, route: Route, query: Query) -> Result<Value, ApiError> {
    let shared_writer = matches!(admitted.role, Role::Admin | Role::Root);
    let writes = Writes::new(&app.store, &admitted.identity, shared_writer, admitted.now);
    // The files whose index records change, kept even when the route
    // fails part way: what changed is indexed either way.
    let mut changed: Vec<VikingUri> = Vec::new();
    let outcome = run(&writes, admitted, route, query, &mut changed).await;
    if !changed.is_empty() || outcome.is_ok() {
        // The record of who changed what, beside the memories' fields blocks.
        let identity = &admitted.identity;
        let peer = identity.actor_peer.as_ref().map(ToString::to_string);
        tracing::info!(account = %identity.account, user = %identity.user, peer, ?route, files = changed.len(), "tree changed");
    }
    let status = index(app, admitted, &changed).await;
    let mut result = outcome?;
    result["status"] = json!(status);
    Ok(result)
}

/// Runs `route`'s change, pushing every file it writes or removes to
/// `changed` as it goes; the route's result.
async fn run(
    writes: &Writes<'_>,
    admitted: &Admitted<'_>,
    route: Route,
    mut query: Query,
    changed: &mut Vec<VikingUri>,
) -> Result<Value, ApiError> {
    Ok(match route {
        Route::Write => {
            let mut body = Body::parse(admitted.body, WRITE_FIELDS)?;
            let uri = uri_field(&mut body, "uri");
            let content = text_field(&mut body, "content");
            let mode = body.literal("mode", &["replace", "append", "create"]);
            body.boolean("wait");
            body.number("timeout");
            body.finish()?;
            let (Some(uri), Some(content)) = (uri, content) else { return Err(missing()) };
            let mode = mode.and_then(|m| WriteMode::parse(&m)).unwrap_or(WriteMode::Replace);
            let written = writes.write(&uri, &content, mode).await?;
            let result = json!({
                "uri": written.uri, "mode": mode.as_str(), "created": written.created, "size": written.size,
            });
            changed.push(written.uri);
            result
        }
        Route::BatchWrite => {
            let mut body = Body::parse(admitted.body, BATCH_WRITE_FIELDS)?;
            let identity = &admitted.identity;
            let root = uri_field(&mut body, "root_uri").map(|r| identity.resolve_home(&r));
            body.boolean("wait");
            body.number("timeout");
            let operations = batch_operations(&mut body, root.as_ref(), |u| identity.resolve_home(u));
            body.finish()?;
            let Some(root) = root else { return Err(missing()) };
            // Every operation is authorised, and every `create` found free,
            // before anything is written.
            for (i, (uri, _, mode)) in operations.iter().enumerate() {
                let uri = writes.authorize(uri).map_err(|e| at_operation(i, e))?;
                if *mode == WriteMode::Create && writes.exists(&uri).await? {
                    let error = WriteError::Conflict(format!("{uri} already exists; use mode replace or append"));
                    return Err(at_operation(i, error));
                }
            }
            let mut results = Vec::with_capacity(operations.len());
            for (i, (uri, bytes, mode)) in operations.into_iter().enumerate() {
                let written = writes.write_bytes(&uri, bytes, mode).await.map_err(|e| at_operation(i, e))?;
                results.push(json!({
                    "uri": written.uri, "mode": mode.as_str(), "created": written.created, "size": written.size,
                }));
                changed.push(written.uri);
            }
            json!({ "root_uri": root, "written": results.len(), "results": results })
        }
        Route::Edit => {
            let mut body = Body::parse(admitted.body, EDIT_FIELDS)?;
            let uri = uri_field(&mut body, "uri");
            let old = text_field(&mut body, "old_string");
            let new = text_field(&mut body, "new_string");
            let replace_all = body.boolean("replace_all").unwrap_or(false);
            body.boolean("wait");
            body.number("timeout");
            body.finish()?;
            let (Some(uri), Some(old), Some(new)) = (uri, old, new) else { return Err(missing()) };
            let written = writes.edit(&uri, &old, &new, replace_all).await?;
            changed.push(written.uri.clone());
            json!({ "uri": written.uri, "size": written.size })
        }
        Route::Mkdir => {
            let mut body = Body::parse(admitted.body, MKDIR_FIELDS)?;
            let uri = uri_field(&mut body, "uri");
            let description = body.string("description");
            body.finish()?;
            let Some(uri) = uri else { return Err(missing()) };
            let (uri, created) = writes.mkdir(&uri, description.as_deref()).await?;
            if description.is_some_and(|d| !d.trim().is_empty()) {
                changed.extend(uri.join(crate::ingest::ABSTRACT_SIDECAR).ok());
            }
            json!({ "uri": uri, "created": created })
        }
        Route::Mv => {
            let mut body = Body::parse(admitted.body, MV_FIELDS)?;
            let from = uri_field(&mut body, "from_uri");
            let to = uri_field(&mut body, "to_uri");
            body.boolean("wait");
            body.number("timeout");
            body.finish()?;
            let (Some(from), Some(to)) = (from, to) else { return Err(missing()) };
            let moved = writes.mv(&from, &to, changed).await?;
            json!({ "from_uri": writes.authorize(&from)?, "to_uri": writes.authorize(&to)?, "moved": moved })
        }
        Route::Remove => {
            let uri = uri_param(&mut query);
            let recursive = query.boolean("recursive").unwrap_or(false);
            query.boolean("wait");
            query.finish()?;
            let Some(uri) = uri else { return Err(missing()) };
            writes.remove(&uri, recursive, changed).await?;
            json!({ "uri": writes.authorize(&uri)?, "deleted": changed.len() })
        }
    })
}

/// `e`, naming operation `i` of a batch (what went before it was
/// written; nothing after it).
fn at_operation(i: usize, e: WriteError) -> ApiError {
    match e {
        WriteError::Store(s) => s.into(),
        WriteError::TooLarge { .. } => ApiError::TooLarge(format!("operations.{i}: {e}")),
        WriteError::Forbidden(m) => ApiError::PermissionDenied(format!("operations.{i}: permission denied: {m}")),
        WriteError::NotFound(uri) => ApiError::NotFound(format!("operations.{i}: not found: {uri}")),
        WriteError::Invalid(m) => ApiError::InvalidArgument(format!("operations.{i}: {m}")),
        WriteError::Conflict(m) => ApiError::Conflict(format!("operations.{i}: {m}")),
    }
}

/// A batch's operations, validated: each one's URI (absolute and under
/// `root`, or relative to it; `resolve` expands the home alias), its bytes (`content`, or `content_base64`
/// decoded: exactly one) and its mode (`upsert` is `replace`). Problems
/// are recorded in `body` at `["body", "operations", i, field]`.
fn batch_operations(
    body: &mut Body,
    root: Option<&VikingUri>,
    resolve: impl Fn(&VikingUri) -> VikingUri,
) -> Vec<(VikingUri, bytes::Bytes, WriteMode)> {
    use base64::Engine as _;
    let items = match body.raw("operations") {
        None => {
            body.error(FieldError::new("operations", "missing", "Field required"));
            return Vec::new();
        }
        Some(Value::Array(items)) => items.clone(),
        Some(_) => {
            body.error(FieldError::new("operations", "list_type", "Input should be a valid list"));
            return Vec::new();
        }
    };
    if items.len() > crate::write::MAX_BATCH_WRITES {
        body.error(super::find::too_long("operations", crate::write::MAX_BATCH_WRITES, items.len()));
        return Vec::new();
    }
    if items.is_empty() {
        body.error(FieldError::new(
            "operations",
            "too_short",
            "List should have at least 1 item after validation, not 0",
        ));
        return Vec::new();
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let error =
            |field: &str, kind: &str, message: String| FieldError::new("operations", kind, message).at(i).at(field);
        let Some(op) = item.as_object() else {
            body.error(
                FieldError::new("operations", "model_attributes_type", "Input should be a valid dictionary").at(i),
            );
            continue;
        };
        let mut ok = true;
        for key in op.keys().filter(|k| !BATCH_OPERATION_FIELDS.contains(&k.as_str())) {
            body.error(error(key, "extra_forbidden", "Extra inputs are not permitted".into()));
            ok = false;
        }
        let uri = match op.get("uri").and_then(Value::as_str) {
            None => {
                body.error(error("uri", "missing", "Field required".into()));
                None
            }
            Some(text) => {
                let text = text.trim();
                let parsed = if text.starts_with(crate::uri::SCHEME) {
                    VikingUri::parse(text)
                } else {
                    root.map_or_else(|| VikingUri::parse(text), |r| r.join(text.trim_start_matches('/')))
                };
                match parsed.map(|uri| resolve(&uri)) {
                    Ok(uri) if root.is_none_or(|r| uri.is_under(r) && uri != *r) => Some(uri),
                    Ok(uri) => {
                        body.error(error("uri", "value_error", format!("Value error, {uri} is not below root_uri")));
                        None
                    }
                    Err(e) => {
                        body.error(error("uri", "value_error", format!("Value error, {e}")));
                        None
                    }
                }
            }
        };
        let content =
            match (op.get("content").filter(|v| !v.is_null()), op.get("content_base64").filter(|v| !v.is_null())) {
                (Some(Value::String(text)), None) => Some(bytes::Bytes::from(text.clone())),
                (None, Some(Value::String(encoded))) => match base64::engine::general_purpose::STANDARD.decode(encoded)
                {
                    Ok(decoded) => Some(bytes::Bytes::from(decoded)),
                    Err(e) => {
                        body.error(error("content_base64", "value_error", format!("Value error, not base64: {e}")));
                        None
                    }
                },
                (Some(_), Some(_)) | (None, None) => {
                    let message = "Value error, give exactly one of content and content_base64".to_owned();
                    body.error(error("content", "value_error", message));
                    None
                }
                (Some(_), None) => {
                    body.error(error("content", "string_type", "Input should be a valid string".into()));
                    None
                }
                (None, Some(_)) => {
                    body.error(error("content_base64", "string_type", "Input should be a valid string".into()));
                    None
                }
            };
        let mode = match op.get("mode").filter(|v| !v.is_null()) {
            None => Some(WriteMode::Replace),
            Some(Value::String(m)) if m == "upsert" => Some(WriteMode::Replace),
            Some(Value::String(m)) if WriteMode::parse(m).is_some() => WriteMode::parse(m),
            Some(_) => {
                let message = "Input should be 'replace', 'append', 'create' or 'upsert'".to_owned();
                body.error(error("mode", "literal_error", message));
                None
            }
        };
        if let (true, Some(uri), Some(content), Some(mode)) = (ok, uri, content, mode) {
            out.push((uri, content, mode));
        }
    }
    out
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
pub(super) async fn index(app: &App, admitted: &Admitted<'_>, changed: &[VikingUri]) -> String {
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
