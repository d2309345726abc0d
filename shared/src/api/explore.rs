//! `POST /api/v1/search/grep` and `POST /api/v1/search/glob`, served by
//! the `content` function ([`crate::explore`] does the work; shapes as the
//! reference):
//!
//! - grep: `uri`, `pattern` (a regular expression, or a list of them),
//!   `case_insensitive`, `node_limit` (256), `level_limit` (10),
//!   `exclude_uri` → `{matches: [{uri, line, content}], count,
//!   match_count, files_scanned}`
//! - glob: `pattern` (`**/*.md`), `uri` (`viking://`), `node_limit` (256)
//!   → `{matches: [uri], count}`
//!
//! A result that stopped at a bound says so with a top-level
//! `"truncated": true` beside `result`.

use http::{Request, Response, StatusCode};
use serde_json::{Value, json};

use super::error::{ApiError, FieldError};
use super::fields::Body;
use super::{Admitted, admit, error_response, json_response, ok, result_json, within_deadline};
use crate::app::App;
use crate::content::{Content, MAX_NODE_LIMIT};
use crate::explore::{ExploreError, GrepOptions, glob, grep};
use crate::uri::VikingUri;

/// The routes this module serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /api/v1/search/grep`.
    Grep,
    /// `POST /api/v1/search/glob`.
    Glob,
}

/// The explore route at `path`, if any.
#[must_use]
pub fn route(path: &str) -> Option<Route> {
    Some(match path.trim_end_matches('/') {
        "/api/v1/search/grep" => Route::Grep,
        "/api/v1/search/glob" => Route::Glob,
        _ => return None,
    })
}

/// The fields `search/grep` accepts.
pub const GREP_FIELDS: &[&str] =
    &["uri", "pattern", "case_insensitive", "node_limit", "level_limit", "exclude_uri", "telemetry"];
/// The fields `search/glob` accepts.
pub const GLOB_FIELDS: &[&str] = &["pattern", "uri", "node_limit", "telemetry"];
/// Default matches returned (`node_limit`).
pub const DEFAULT_NODE_LIMIT: i64 = 256;
/// Default levels searched below the URI (`level_limit`).
pub const DEFAULT_LEVEL_LIMIT: i64 = 10;
/// The deepest `level_limit`.
pub const MAX_LEVEL_LIMIT: i64 = 100;

impl From<ExploreError> for ApiError {
    fn from(e: ExploreError) -> Self {
        match e {
            ExploreError::Pattern(_) => Self::Validation(vec![FieldError::new(
                "pattern",
                "value_error",
                format!("Value error, {}", e.to_string().trim_start_matches("pattern: ")),
            )]),
            ExploreError::Content(c) => c.into(),
        }
    }
}

/// Handles one explore route; never panics on input and always answers
/// JSON.
pub async fn handle(app: &App, route: Route, request: &Request<bytes::Bytes>) -> Response<String> {
    let admitted = match admit(app, request).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    match within_deadline(&admitted.deadline, run(app, &admitted, route)).await {
        Ok((result, true)) => {
            json_response(StatusCode::OK, &json!({ "status": "ok", "result": result, "truncated": true }))
        }
        Ok((result, false)) => ok(result, None),
        Err(e) => error_response(&e),
    }
}

/// `node_limit`: 1 to [`MAX_NODE_LIMIT`], default [`DEFAULT_NODE_LIMIT`].
fn node_limit(body: &mut Body) -> usize {
    let max = i64::try_from(MAX_NODE_LIMIT).unwrap_or(i64::MAX);
    let limit = body.int("node_limit", Some(1), Some(max)).unwrap_or(DEFAULT_NODE_LIMIT);
    usize::try_from(limit).unwrap_or(usize::MAX)
}

async fn run(app: &App, admitted: &Admitted<'_>, route: Route) -> Result<(Value, bool), ApiError> {
    let content = Content::new(&app.store, &admitted.identity);
    match route {
        Route::Grep => {
            let mut body = Body::parse(admitted.body, GREP_FIELDS)?;
            body.require("uri");
            body.require("pattern");
            let uri = body.uri("uri");
            let patterns = body.string_or_list("pattern").unwrap_or_default();
            let case_insensitive = body.boolean("case_insensitive").unwrap_or(false);
            let node_limit = node_limit(&mut body);
            let level_limit = body.int("level_limit", Some(1), Some(MAX_LEVEL_LIMIT)).unwrap_or(DEFAULT_LEVEL_LIMIT);
            let exclude = body.uri("exclude_uri");
            body.finish()?;
            let uri = uri.ok_or_else(|| ApiError::InvalidArgument("uri is required".into()))?;
            let options = GrepOptions {
                patterns,
                case_insensitive,
                node_limit,
                level_limit: usize::try_from(level_limit).unwrap_or(usize::MAX),
                exclude,
            };
            let found = grep(&content, &uri, &options).await?;
            let truncated = found.truncated;
            let mut result = result_json(&found)?;
            if let Some(map) = result.as_object_mut() {
                map.remove("truncated");
            }
            Ok((result, truncated))
        }
        Route::Glob => {
            let mut body = Body::parse(admitted.body, GLOB_FIELDS)?;
            body.require("pattern");
            let pattern = body.string("pattern").unwrap_or_default();
            let uri = body.uri("uri");
            let node_limit = node_limit(&mut body);
            body.finish()?;
            let root = VikingUri::parse("viking://").map_err(|e| ApiError::Internal(e.to_string()))?;
            let found = glob(&content, uri.as_ref().unwrap_or(&root), &pattern, node_limit).await?;
            let truncated = found.truncated;
            let mut result = result_json(&found)?;
            if let Some(map) = result.as_object_mut() {
                map.remove("truncated");
            }
            Ok((result, truncated))
        }
    }
}
