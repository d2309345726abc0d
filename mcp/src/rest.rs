//! Tools call the REST handlers in-process: the request they build carries
//! the MCP request's headers and extensions (identity headers,
//! `Authorization`, `X-API-Key`, `X-Client-Timeout-Ms`, authorizer claims,
//! the invocation deadline), so admission, validation, tenancy and the
//! deadline are exactly REST's. The answer is the envelope's `result`, or
//! the caller-facing message of its error.

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Uri};
use serde_json::{Map, Value};
use skald::app::App;

/// A REST route a tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `POST /api/v1/search/find`.
    Find,
    /// `POST /api/v1/search/search`.
    Search,
    /// `POST /api/v1/search/recall`.
    Recall,
    /// `POST /api/v1/search/bootstrap`.
    Bootstrap,
    /// `GET /api/v1/content/read?uri=…`.
    Read,
    /// `GET /api/v1/fs/ls?uri=…`.
    List,
    /// `GET /api/v1/fs/tree?uri=…`.
    Tree,
    /// `GET /health`.
    Health,
    /// `POST /api/v1/sessions/…` (the path given with the call:
    /// [`call_at`]).
    Sessions,
    /// `POST /api/v1/content/write`.
    Write,
    /// `POST /api/v1/content/edit`.
    Edit,
    /// `DELETE /api/v1/fs?uri=…`.
    Remove,
    /// `POST /api/v1/search/grep`.
    Grep,
    /// `POST /api/v1/search/glob`.
    Glob,
    /// `POST /api/v1/resources`.
    AddResource,
    /// `GET /api/v1/watches`.
    Watches,
    /// `DELETE /api/v1/watches?to_uri=…`.
    CancelWatch,
}

impl Route {
    fn path(self) -> &'static str {
        match self {
            Self::Find => "/api/v1/search/find",
            Self::Search => "/api/v1/search/search",
            Self::Recall => "/api/v1/search/recall",
            Self::Bootstrap => "/api/v1/search/bootstrap",
            Self::Read => "/api/v1/content/read",
            Self::List => "/api/v1/fs/ls",
            Self::Tree => "/api/v1/fs/tree",
            Self::Health => "/health",
            Self::Sessions => "/api/v1/sessions",
            Self::Write => "/api/v1/content/write",
            Self::Edit => "/api/v1/content/edit",
            Self::Remove => "/api/v1/fs",
            Self::Grep => "/api/v1/search/grep",
            Self::Glob => "/api/v1/search/glob",
            Self::AddResource => "/api/v1/resources",
            Self::Watches | Self::CancelWatch => "/api/v1/watches",
        }
    }

    /// The route's method: `DELETE` for [`Route::Remove`] and
    /// [`Route::CancelWatch`], else `POST` with a body and `GET` without.
    fn method(self, has_body: bool) -> Method {
        match self {
            Self::Remove | Self::CancelWatch => Method::DELETE,
            _ if has_body => Method::POST,
            _ => Method::GET,
        }
    }
}

/// A successful REST answer.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    /// The envelope's `result` (the whole body for `/health`).
    pub(crate) result: Value,
    /// The envelope's top-level `truncated` flag (`fs/ls`).
    pub(crate) truncated: bool,
}

/// Renames from REST's field names back to the tool's argument names, for
/// validation locations (`score_threshold` → `min_score`, …).
pub(crate) type Renames<'a> = &'a [(&'a str, &'a str)];

/// Calls `route` as the MCP request in `parts` would: with `body` (POST
/// routes) or `query` (GET routes, `(name, value)` pairs).
///
/// # Errors
/// The caller-facing message of REST's error envelope, validation
/// locations named by the tool's arguments.
pub(crate) async fn call(
    app: &App,
    parts: &http::request::Parts,
    route: Route,
    body: Option<&Map<String, Value>>,
    query: &[(&str, &str)],
    renames: Renames<'_>,
) -> Result<Answer, String> {
    call_at(app, parts, route, route.path(), body, query, renames).await
}

/// [`call`] at `path`, a path of `route`'s function (a session's
/// `…/messages/batch` or `…/commit` for [`Route::Sessions`]).
///
/// # Errors
/// As [`call`].
pub(crate) async fn call_at(
    app: &App,
    parts: &http::request::Parts,
    route: Route,
    path: &str,
    body: Option<&Map<String, Value>>,
    query: &[(&str, &str)],
    renames: Renames<'_>,
) -> Result<Answer, String> {
    let request = build(parts, route.method(body.is_some()), path, body, query)?;
    let response = match route {
        Route::Find => skald::api::find::handle(app, request).await,
        Route::Search => skald::api::search::handle(app, request).await,
        Route::Recall => skald::api::recall::handle(app, request).await,
        Route::Bootstrap => skald::api::bootstrap::handle(app, request).await,
        Route::Read
        | Route::List
        | Route::Tree
        | Route::Health
        | Route::Write
        | Route::Edit
        | Route::Remove
        | Route::Grep
        | Route::Glob
        | Route::AddResource
        | Route::Watches
        | Route::CancelWatch => skald::api::content::handle(app, request).await,
        Route::Sessions => skald::api::sessions::handle(app, request).await,
    };
    let status = response.status();
    let text = response.into_body();
    let Ok(json) = serde_json::from_str::<Value>(&text) else {
        return Err(format!(
            "INTERNAL: the {} route answered HTTP {status} with a body that is not JSON",
            route.path()
        ));
    };
    if route == Route::Health && status.is_success() {
        return Ok(Answer { result: json, truncated: false });
    }
    if status.is_success() && json["status"] == "ok" {
        let truncated = json["truncated"].as_bool().unwrap_or(false);
        let mut json = json;
        return Ok(Answer { result: json["result"].take(), truncated });
    }
    Err(error_text(&json, status.as_u16(), renames))
}

/// The REST request: the MCP request's headers (the content type set to
/// JSON, no stale length) and extensions, with `method`, the path, query
/// and body.
fn build(
    parts: &http::request::Parts,
    method: Method,
    path: &str,
    body: Option<&Map<String, Value>>,
    query: &[(&str, &str)],
) -> Result<Request<Bytes>, String> {
    let mut target = path.to_owned();
    for (i, (name, value)) in query.iter().enumerate() {
        target.push(if i == 0 { '?' } else { '&' });
        target.push_str(&encode(name));
        target.push('=');
        target.push_str(&encode(value));
    }
    let uri: Uri = target.parse().map_err(|e| format!("INTERNAL: request target {target:?}: {e}"))?;
    let bytes = match body {
        Some(map) => Bytes::from(serde_json::to_vec(map).map_err(|e| format!("INTERNAL: {e}"))?),
        None => Bytes::new(),
    };
    let mut request = Request::new(bytes);
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = parts.headers.clone();
    request.headers_mut().remove(CONTENT_LENGTH);
    request.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    *request.extensions_mut() = parts.extensions.clone();
    Ok(request)
}

/// Percent-encodes a query component (everything but RFC 3986's unreserved
/// characters).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// REST's error envelope as one line for the caller: `CODE: message`, a
/// validation error as `CODE: Invalid arguments: <loc>: <message>; …` with
/// each location named by the tool's arguments (`min_score`, `uris.1`, …).
pub(crate) fn error_text(body: &Value, status: u16, renames: Renames<'_>) -> String {
    let error = &body["error"];
    let code = error["code"].as_str().unwrap_or("ERROR");
    let validation = error["details"]["validation_errors"].as_array().filter(|list| !list.is_empty());
    match validation {
        Some(list) => {
            let details: Vec<String> = list
                .iter()
                .map(|e| format!("{}: {}", argument_loc(&e["loc"], renames), e["message"].as_str().unwrap_or_default()))
                .collect();
            format!("{code}: Invalid arguments: {}", details.join("; "))
        }
        None => match error["message"].as_str() {
            Some(message) => format!("{code}: {message}"),
            None => format!("ERROR: HTTP {status}: {body}"),
        },
    }
}

/// A REST `loc` (`["body", "score_threshold"]`, `["query", "uri"]`) as the
/// tool's dotted argument path.
fn argument_loc(loc: &Value, renames: Renames<'_>) -> String {
    let items = loc.as_array().map(Vec::as_slice).unwrap_or_default();
    let items = match items.first().and_then(Value::as_str) {
        Some("body" | "query" | "header") => &items[1..],
        _ => items,
    };
    let mut parts: Vec<String> = items
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    if let Some(first) = parts.first_mut()
        && let Some((_, argument)) = renames.iter().find(|(field, _)| field == first)
    {
        *first = (*argument).to_owned();
    }
    if parts.is_empty() { "arguments".to_owned() } else { parts.join(".") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn query_components_are_percent_encoded() {
        assert_eq!(encode("viking://user/a b/x&y=é"), "viking%3A%2F%2Fuser%2Fa%20b%2Fx%26y%3D%C3%A9");
        assert_eq!(encode("Az09-._~"), "Az09-._~");
    }

    #[test]
    fn validation_locations_name_the_arguments() {
        let body = json!({"status": "error", "error": {"code": "INVALID_ARGUMENT", "message": "…", "details": {
        "validation_errors": [
            {"loc": ["body", "score_threshold"], "message": "Input should be a valid number", "type": "float_type"},
            {"loc": ["body", "target_uri", 1], "message": "Value error, bad", "type": "value_error"},
        ]}}});
        assert_eq!(
            error_text(&body, 400, &[("score_threshold", "min_score")]),
            "INVALID_ARGUMENT: Invalid arguments: min_score: Input should be a valid number; target_uri.1: Value error, bad"
        );
        let body = json!({"status": "error", "error": {"code": "NOT_FOUND", "message": "not found: x"}});
        assert_eq!(error_text(&body, 404, &[]), "NOT_FOUND: not found: x");
        assert_eq!(error_text(&json!({}), 502, &[]), "ERROR: HTTP 502: {}");
    }
}
