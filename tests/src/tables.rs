//! The request tables of `find` and `search`
//! (`fixtures/find/bad_requests.json`, `fixtures/search/bad_requests.json`
//! and `fixtures/search/accepted_requests.json`): the request a row
//! describes, and the check of a refused row's answer.
//!
//! A row is a JSON object: `name`; the request (`method`, default `POST`;
//! `headers`; one body of `raw_body` (sent as is), `query_bytes` (a
//! `{"query": "aaa…"}` body of exactly that many bytes) or `body` (sent as
//! JSON, with `exclude_uris_count` distinct `exclude_uris` added when set),
//! else none); and for a refusal the expected `status`, `code`, `message`
//! (exact) or `message_contains` (substrings), and the `locs` and `types`
//! of `details.validation_errors`, listed in the same order.

use std::collections::BTreeSet;

use lambda_http::Body;
use serde_json::{Value, json};

use crate::fixture::{Answer, request_to};

/// The prefix of a message that lists its validation errors.
const LISTING_PREFIX: &str = "Invalid request parameters: ";

/// `count` distinct `exclude_uris` in the caller's tree.
#[must_use]
pub fn many_exclude_uris(count: u64) -> Value {
    Value::Array((0..count).map(|i| json!(format!("viking://resources/excluded/n{i}"))).collect())
}

/// The Lambda request to `path` (e.g. [`crate::fixture::FIND_PATH`]) that
/// `row` describes.
///
/// # Panics
/// When the row is malformed (a header value that is not a string, a
/// `query_bytes` too small for the body around the query).
#[must_use]
pub fn row_request(path: &str, row: &Value) -> lambda_http::Request {
    let method = row["method"].as_str().unwrap_or("POST");
    let headers: Vec<(&str, &str)> = row["headers"]
        .as_object()
        .map(|h| h.iter().map(|(k, v)| (k.as_str(), v.as_str().expect("header value is a string"))).collect())
        .unwrap_or_default();
    let body = if let Some(raw) = row["raw_body"].as_str() {
        Body::Text(raw.to_owned())
    } else if let Some(size) = row["query_bytes"].as_u64() {
        let size = usize::try_from(size).expect("size fits");
        let text = format!("{{\"query\":\"{}\"}}", "a".repeat(size - r#"{"query":""}"#.len()));
        assert_eq!(text.len(), size);
        Body::Text(text)
    } else if let Some(body) = row.get("body") {
        let mut body = body.clone();
        if let Some(n) = row["exclude_uris_count"].as_u64() {
            body["exclude_uris"] = many_exclude_uris(n);
        }
        Body::Text(body.to_string())
    } else {
        Body::Empty
    };
    request_to(path, method, &headers, body)
}

/// Sends each row of a table of refusals to `path` through `call` and
/// checks its answer: never a 5xx, JSON (`application/json`), and as the row
/// says ([`check_row`]). Returns the failures, each naming its row (empty:
/// every row as expected).
///
/// # Panics
/// When a row has no `name` or is malformed (see [`row_request`]).
pub async fn refused_row_failures(
    rows: &[Value],
    path: &str,
    call: impl AsyncFn(lambda_http::Request) -> Answer,
) -> Vec<String> {
    let mut failures = Vec::new();
    for row in rows {
        let name = row["name"].as_str().expect("every row has a name");
        let answer = call(row_request(path, row)).await;
        if answer.status >= 500 {
            failures.push(format!("{name}: a {} for bad input: {}", answer.status, answer.text));
            continue;
        }
        if answer.content_type.as_deref() != Some("application/json") {
            failures.push(format!("{name}: content-type {:?}", answer.content_type));
        }
        for problem in check_row(row, answer.status, &answer.json) {
            failures.push(format!("{name}: {problem} (answer {})", answer.text));
        }
    }
    failures
}

/// Checks the answer (`status` and the envelope `json`) to a refused row;
/// returns the problems found (empty: as the row says).
///
/// The answer must be an error envelope with the row's status and code, the
/// row's message (exact, or containing each of `message_contains`), and:
/// without `locs` and `types`, no `details`; with them, exactly the row's
/// validation error locations and types, paired in the row's order, each
/// error with a message, and a message that starts with
/// `Invalid request parameters: ` and lists every error as
/// `dotted.loc: message`.
#[must_use]
pub fn check_row(row: &Value, status: u16, json: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut expect = |what: &str, got: &Value, want: &Value| {
        if got != want {
            problems.push(format!("{what}: got {got}, want {want}"));
        }
    };
    expect("status", &json!(status), &row["status"]);
    expect("envelope status", &json["status"], &json!("error"));
    expect("code", &json["error"]["code"], &row["code"]);
    let message = json["error"]["message"].as_str().unwrap_or_default();
    if let Some(want) = row.get("message") {
        expect("message", &json!(message), want);
    }
    for part in row["message_contains"].as_array().into_iter().flatten() {
        let part = part.as_str().expect("message_contains holds strings");
        if !message.contains(part) {
            problems.push(format!("message {message:?} does not contain {part:?}"));
        }
    }
    let details = &json["error"]["details"];
    if row.get("locs").is_none() && row.get("types").is_none() {
        if !details.is_null() {
            problems.push(format!("unexpected details {details}"));
        }
        return problems;
    }
    let errors = details["validation_errors"].as_array().cloned().unwrap_or_default();
    if let Some(want) = row["locs"].as_array() {
        let got: BTreeSet<String> = errors.iter().map(|e| e["loc"].to_string()).collect();
        let want: BTreeSet<String> = want.iter().map(Value::to_string).collect();
        if got != want {
            problems.push(format!("locs: got {got:?}, want {want:?}"));
        }
    }
    if let Some(want) = row["types"].as_array() {
        let mut got: Vec<String> = errors.iter().map(|e| e["type"].to_string()).collect();
        let mut want: Vec<String> = want.iter().map(Value::to_string).collect();
        got.sort();
        want.sort();
        if got != want {
            problems.push(format!("types: got {got:?}, want {want:?}"));
        }
    }
    if let (Some(locs), Some(types)) = (row["locs"].as_array(), row["types"].as_array()) {
        // The row lists locs and types in the same order: pair them.
        let want: BTreeSet<String> = locs.iter().zip(types).map(|(l, t)| format!("{l}={t}")).collect();
        let got: BTreeSet<String> = errors.iter().map(|e| format!("{}={}", e["loc"], e["type"])).collect();
        if got != want {
            problems.push(format!("loc=type pairs: got {got:?}, want {want:?}"));
        }
    }
    for error in &errors {
        if error["message"].as_str().is_none_or(str::is_empty) {
            problems.push(format!("validation error without a message: {error}"));
        }
        let dotted: Vec<String> = error["loc"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_owned))
            .collect();
        let fragment = format!("{}: {}", dotted.join("."), error["message"].as_str().unwrap_or_default());
        if !message.contains(&fragment) {
            problems.push(format!("message {message:?} does not contain {fragment:?}"));
        }
    }
    if !message.starts_with(LISTING_PREFIX) {
        problems.push(format!("a validation error's message does not list the fields: {message:?}"));
    }
    problems
}
