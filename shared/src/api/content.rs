//! The routes agents' plugins probe and read, shapes as the reference:
//!
//! - `GET /health` — liveness: no identity, no store call, no envelope
//! - `GET /api/v1/system/status` — `{initialized, user}` for the caller
//! - `GET /api/v1/content/read?uri=&offset=&limit=&raw=` — a file's text
//! - `GET /api/v1/content/abstract?uri=`, `…/overview?uri=` — L0 / L1
//! - `GET /api/v1/fs/ls?uri=&recursive=&output=agent|original&abs_limit=&node_limit=&limit=&show_all_hidden=&simple=`
//! - `GET /api/v1/fs/stat?uri=`
//! - `GET /api/v1/fs/tree?uri=&output=original|agent&abs_limit=&node_limit=&level_limit=&show_all_hidden=`
//!
//! Every URI goes through the tenancy of `find` ([`crate::content`]); a
//! listing that was cut says so with a top-level `"truncated": true` beside
//! `result`, a read with a closing `[truncated: …]` line.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::error::ApiError;
use super::fields::Query;
use super::payload::{Budget, encoded_len, fit_text, largest_fitting, text_len};
use super::{Admitted, admit_method, error_response, json_response, ok, within_deadline};
use crate::app::App;
use crate::content::{Content, Entry, Lines, ListOptions, MAX_NODE_LIMIT, MAX_READ_BYTES, MAX_TREE_DEPTH, slice_lines};
use crate::uri::VikingUri;

/// The version `GET /health` reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Default characters of an abstract in an `fs/ls` agent entry.
pub const DEFAULT_ABS_LIMIT: i64 = 256;
/// Default entries of an `fs/ls` listing.
pub const DEFAULT_NODE_LIMIT: i64 = 1000;
/// Default characters of an abstract in an `fs/tree` agent entry.
pub const DEFAULT_TREE_ABS_LIMIT: i64 = 128;
/// Default levels of an `fs/tree` listing.
pub const DEFAULT_LEVEL_LIMIT: i64 = 3;

/// The routes this module serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Health,
    Status,
    Read,
    Abstract,
    Overview,
    Ls,
    Stat,
    Tree,
}

fn route(path: &str) -> Option<Route> {
    Some(match path.trim_end_matches('/') {
        "/health" => Route::Health,
        "/api/v1/system/status" => Route::Status,
        "/api/v1/content/read" => Route::Read,
        "/api/v1/content/abstract" => Route::Abstract,
        "/api/v1/content/overview" => Route::Overview,
        "/api/v1/fs/ls" => Route::Ls,
        "/api/v1/fs/stat" => Route::Stat,
        "/api/v1/fs/tree" => Route::Tree,
        _ => return None,
    })
}

/// Handles every route of the `content` function; never panics on input
/// and always answers JSON.
pub async fn handle(app: &App, request: Request<Bytes>) -> Response<String> {
    let path = request.uri().path();
    if let Some(write) = super::write::route(path) {
        return super::write::handle(app, write, &request).await;
    }
    if let Some(explore) = super::explore::route(path) {
        return super::explore::handle(app, explore, &request).await;
    }
    #[cfg(feature = "documents")]
    if let Some(resources) = super::resources::route(path) {
        return super::resources::handle(app, resources, &request).await;
    }
    let Some(route) = route(path) else {
        return error_response(&ApiError::NotFound(format!("no route {} {path}", request.method())));
    };
    if route == Route::Health {
        return health(app, request.method());
    }
    let admitted = match admit_method(app, &request, &Method::GET).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    let query = Query::parse(request.uri().query());
    match within_deadline(&admitted.deadline, run(app, &admitted, route, query)).await {
        // `{"status":"ok","result":…,"truncated":true}`: clients that read
        // `result` are unaffected.
        Ok((result, true)) => {
            json_response(StatusCode::OK, &json!({ "status": "ok", "result": result, "truncated": true }))
        }
        Ok((result, false)) => ok(result, None),
        Err(e) => error_response(&e),
    }
}

/// `GET /health`: `{"status":"ok","healthy":true,"version":…,"auth_mode":…}`
/// with no envelope, no identity and no store call.
fn health(app: &App, method: &Method) -> Response<String> {
    if method != Method::GET && method != Method::HEAD {
        return error_response(&ApiError::MethodNotAllowed(method.to_string(), "GET".into()));
    }
    let auth_mode = app.config.identity.mode.as_str();
    let body = json!({ "status": "ok", "healthy": true, "version": VERSION, "auth_mode": auth_mode });
    let mut response = json_response(StatusCode::OK, &body);
    if method == Method::HEAD {
        response.body_mut().clear();
    }
    response
}

/// The required `uri` parameter, validated (`None` with the problem
/// recorded in `query`).
fn uri_param(query: &mut Query) -> Option<VikingUri> {
    let text = query.required("uri")?;
    VikingUri::parse(text.trim()).map_err(|e| query.value_error("uri", &e.to_string())).ok()
}

/// Ends validation and hands back the URI it checked.
fn finish(query: Query, uri: Option<VikingUri>) -> Result<VikingUri, ApiError> {
    query.finish()?;
    uri.ok_or_else(|| ApiError::InvalidArgument("uri is required".into()))
}

/// The route's result and whether it was cut (by its own bound or to fit
/// a response: [`super::payload`]).
async fn run(app: &App, admitted: &Admitted<'_>, route: Route, mut query: Query) -> Result<(Value, bool), ApiError> {
    let content = Content::new(&app.store, &admitted.identity);
    let budget = Budget::of(&app.config.limits);
    match route {
        Route::Health | Route::Status => {
            query.finish()?;
            Ok((json!({ "initialized": true, "user": admitted.identity.user.as_str() }), false))
        }
        Route::Read => {
            let uri = uri_param(&mut query);
            let offset = query.int("offset", None, None).unwrap_or(0);
            let limit = query.int("limit", None, None).unwrap_or(-1);
            let raw = query.boolean("raw").unwrap_or(false);
            let uri = finish(query, uri)?;
            let lines = Lines { offset, limit: u64::try_from(limit).ok() };
            let text = content.read_text(&uri, raw).await?;
            let read = fit_read(&text, lines, budget);
            Ok((Value::String(read.text), read.next_offset.is_some()))
        }
        Route::Abstract | Route::Overview => {
            let uri = uri_param(&mut query);
            let uri = finish(query, uri)?;
            let text = if route == Route::Abstract {
                content.abstract_of(&uri, app.config.index.abstract_max_bytes).await?
            } else {
                content.overview_of(&uri).await?
            };
            let (text, cut) = fit_summary(text, budget);
            Ok((Value::String(text), cut))
        }
        Route::Stat => {
            let uri = uri_param(&mut query);
            let stat = content.stat(&finish(query, uri)?).await?;
            let stat = json!({
                "name": stat.name,
                "size": stat.size,
                "mode": if stat.is_dir { 493 } else { 420 },
                "isDir": stat.is_dir,
                "isLocked": false,
                "uri": stat.uri.as_str(),
            });
            Ok((stat, false))
        }
        Route::Ls => {
            let uri = uri_param(&mut query);
            let max = i64::try_from(MAX_NODE_LIMIT).unwrap_or(i64::MAX);
            let recursive = query.boolean("recursive").unwrap_or(false);
            let simple = query.boolean("simple").unwrap_or(false);
            let show_hidden = query.boolean("show_all_hidden").unwrap_or(false);
            let agent = query.literal("output", &["agent", "original"]).is_none_or(|o| o == "agent");
            let abs_limit = query.int("abs_limit", Some(1), Some(100_000)).unwrap_or(DEFAULT_ABS_LIMIT);
            let node_limit = query.int("node_limit", None, Some(max));
            let limit = query.int("limit", None, Some(max));
            let uri = finish(query, uri)?;
            // As the reference: `limit` wins over `node_limit`; 0 or less lists nothing.
            let node_limit = limit.or(node_limit).unwrap_or(DEFAULT_NODE_LIMIT);
            let options = ListOptions {
                recursive,
                show_hidden,
                node_limit: usize::try_from(node_limit).unwrap_or(0),
                abs_limit: usize::try_from(abs_limit).unwrap_or(0),
                ..ListOptions::default()
            };
            if options.node_limit == 0 {
                // Nothing to list, but a missing directory or a file is still an error.
                let stat = content.stat(&uri).await?;
                return if stat.is_dir {
                    Ok((json!([]), false))
                } else {
                    Err(crate::content::ContentError::NotDirectory(stat.uri).into())
                };
            }
            // Abstracts come from the index; other shapes need none.
            let index = if agent && !simple {
                Some(crate::retrieval::checked_index(app, &admitted.identity).await?)
            } else {
                None
            };
            let listing = content.list(&uri, &options, index.as_ref()).await?;
            let mut entries: Vec<Value> = listing
                .entries
                .iter()
                .map(|e| if simple { json!(e.uri.as_str()) } else { entry_json(e, agent, recursive) })
                .collect();
            let cut = fit_entries(&mut entries, budget);
            Ok((Value::Array(entries), listing.truncated || cut))
        }
        Route::Tree => {
            let uri = uri_param(&mut query);
            let max = i64::try_from(MAX_NODE_LIMIT).unwrap_or(i64::MAX);
            let deepest = i64::try_from(MAX_TREE_DEPTH).unwrap_or(i64::MAX);
            let show_hidden = query.boolean("show_all_hidden").unwrap_or(false);
            let agent = query.literal("output", &["agent", "original"]).is_some_and(|o| o == "agent");
            let abs_limit = query.int("abs_limit", Some(1), Some(100_000)).unwrap_or(DEFAULT_TREE_ABS_LIMIT);
            let node_limit = query.int("node_limit", Some(1), Some(max)).unwrap_or(DEFAULT_NODE_LIMIT);
            let level_limit = query.int("level_limit", Some(1), Some(deepest)).unwrap_or(DEFAULT_LEVEL_LIMIT);
            let uri = finish(query, uri)?;
            let options = ListOptions {
                recursive: true,
                show_hidden,
                node_limit: usize::try_from(node_limit).unwrap_or(1),
                abs_limit: usize::try_from(abs_limit).unwrap_or(1),
                max_depth: usize::try_from(level_limit).unwrap_or(1),
            };
            tree(app, admitted, &content, &uri, &options, agent).await
        }
    }
}

/// `fs/tree`: a recursive listing `level_limit` levels deep, in the
/// shape `fs/ls` gives (`output=original` by default, as the reference's
/// SDK asks).
async fn tree(
    app: &App,
    admitted: &Admitted<'_>,
    content: &Content<'_>,
    uri: &VikingUri,
    options: &ListOptions,
    agent: bool,
) -> Result<(Value, bool), ApiError> {
    let index = if agent { Some(crate::retrieval::checked_index(app, &admitted.identity).await?) } else { None };
    let listing = content.list(uri, options, index.as_ref()).await?;
    let mut entries: Vec<Value> = listing.entries.iter().map(|e| entry_json(e, agent, true)).collect();
    let cut = fit_entries(&mut entries, Budget::of(&app.config.limits));
    Ok((Value::Array(entries), listing.truncated || cut))
}

/// `lines` of `text` as a read serves them: cut at [`MAX_READ_BYTES`], and
/// further (a smaller cap, in the same `[truncated: …]` form, so a client
/// reads on from the offset it names) while the read would not fit a
/// response (`budget`; only with `limits.max_response_bytes` lowered far
/// below Lambda's limit, which a 256 KiB read cannot reach).
fn fit_read(text: &str, lines: Lines, budget: Budget) -> crate::content::ReadText {
    let mut max_bytes = MAX_READ_BYTES;
    loop {
        let read = slice_lines(text, lines, max_bytes);
        let size = text_len(&read.text);
        if size <= budget.bytes() || max_bytes == 0 {
            return read;
        }
        // Shrink in proportion to the excess, by at least an eighth.
        let scaled = u128::from(max_bytes as u64) * u128::from(budget.bytes() as u64) / u128::from(size as u64);
        max_bytes = usize::try_from(scaled).unwrap_or(0).min(max_bytes - max_bytes.div_ceil(8));
    }
}

/// An abstract or overview as served: whole when it fits a response
/// (`budget`), else cut at a character boundary with a closing
/// `[truncated: …]` line, and `true`. A file's overview is its heading
/// outline or first paragraph, which a large file can make many
/// megabytes long.
fn fit_summary(text: String, budget: Budget) -> (String, bool) {
    if text_len(&text) <= budget.bytes() {
        return (text, false);
    }
    let marker =
        |shown: usize| format!("\n[truncated: {shown} of {} bytes shown, as much as one response carries]", text.len());
    // The marker's own size, with room for the digits of any count.
    let room = budget.bytes().saturating_sub(text_len(&marker(usize::MAX)));
    let kept = fit_text(&text, room);
    let out = format!("{kept}{}", marker(kept.len()));
    (out, true)
}

/// Drops the last of `entries` until the listing fits a response
/// (`budget`); whether any was dropped. A listing's entries add up to at
/// most [`crate::content::MAX_LIST_BYTES`] of URIs, paths and abstracts,
/// which their JSON and its escaping can take past Lambda's limit.
fn fit_entries(entries: &mut Vec<Value>, budget: Budget) -> bool {
    let all = Value::Array(std::mem::take(entries));
    if budget.fits(&all) {
        *entries = match all {
            Value::Array(items) => items,
            _ => Vec::new(),
        };
        return false;
    }
    let Value::Array(mut items) = all else { return false };
    // The array's brackets and commas: 2 + one per entry past the first.
    let sizes: Vec<usize> = items.iter().map(encoded_len).collect();
    let fits = |k: usize| 2 + k.saturating_sub(1) + sizes[..k].iter().sum::<usize>() <= budget.bytes();
    let k = largest_fitting(items.len(), fits);
    items.truncate(k);
    *entries = items;
    true
}

/// One `fs/ls` entry in the reference's shapes: agent mode
/// `{uri, size, isDir, modTime?, abstract}` plus `name` and `rel_path`;
/// original mode `{name, size, mode, isDir, uri}` plus `rel_path` when
/// recursive. `modTime` is the index's update time, when it has one (only
/// agent listings load the index, so original entries carry none).
fn entry_json(entry: &Entry, agent: bool, recursive: bool) -> Value {
    let mut value = json!({
        "uri": entry.uri.as_str(),
        "name": entry.name,
        "size": entry.size,
        "isDir": entry.is_dir,
    });
    if let Some(time) = entry.updated_at.and_then(format_mod_time) {
        value["modTime"] = Value::String(time);
    }
    if agent {
        value["rel_path"] = Value::String(entry.rel_path.clone());
        value["abstract"] = Value::String(entry.abstract_text.clone());
    } else {
        value["mode"] = json!(if entry.is_dir { 493 } else { 420 });
        if recursive {
            value["rel_path"] = Value::String(entry.rel_path.clone());
        }
    }
    value
}

/// Unix seconds as `yyyy-MM-ddTHH:mm:ss.SSSZ` (UTC), as the reference
/// normalises `modTime`.
fn format_mod_time(seconds: i64) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp(seconds).ok()?;
    let format = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].000Z");
    at.format(&format).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_to_their_handlers() {
        assert_eq!(route("/health"), Some(Route::Health));
        assert_eq!(route("/api/v1/fs/ls/"), Some(Route::Ls));
        assert_eq!(route("/api/v1/content/read"), Some(Route::Read));
        assert_eq!(route("/api/v1/content/write"), None);
        assert_eq!(route("/api/v1/fs"), None);
    }

    #[test]
    fn mod_times_are_utc_milliseconds() {
        assert_eq!(format_mod_time(1_790_000_000).as_deref(), Some("2026-09-21T14:13:20.000Z"));
    }
}
