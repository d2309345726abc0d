//! `POST /api/v1/search/recall`: a thin preset over context mode (CONTRACT
//! §11). It has no parameter of its own and no business branch: it fills
//! the recall defaults, folds the v1 aliases (`max_chars`, `min_score`,
//! `render`, v1 `quotas`), and calls exactly the context-mode function the
//! search route calls. When an alias is used the response says so
//! (`Deprecation: true`, a `Link` to the successor, `stats.deprecated`) and
//! a warning is logged.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response};
use serde_json::{Map, Value, json};

use super::error::ApiError;
use super::fields::Body;
use super::search::{CONTEXT_ONLY_FIELDS, parse};
use super::{Admitted, admit, error_response, ok, telemetry, within_deadline};
use crate::app::App;
use crate::assemble::params::Tier;

/// Recall's default `score_threshold`.
pub const RECALL_SCORE_THRESHOLD: f64 = 0.35;
/// Recall's default `dedup_turns` when a session is given.
pub const RECALL_DEDUP_TURNS: u64 = 5;
/// Recall's default purpose.
pub const RECALL_PURPOSE: &str = "coding";
/// The v1 quotas that sent `quotas` are merged over.
pub const V1_QUOTAS: [(&str, u64); 4] = [("events", 10), ("entities", 10), ("preferences", 3), ("experiences", 0)];
/// Characters per token of the `max_chars` alias.
pub const CHARS_PER_TOKEN: f64 = 4.0;

/// The fields `/recall` accepts: the context-mode fields plus the v1
/// aliases.
pub const RECALL_FIELDS: &[&str] = &[
    "query",
    "quotas",
    "max_chars",
    "min_score",
    "peer_scope",
    "other_peer_penalty",
    "render",
    "telemetry",
    "session_id",
    "query_expansion",
    "max_tokens",
    "purpose",
    "detail",
    "score_threshold",
    "dedup_turns",
    "exclude_uris",
    "rewrite",
    "rewrite_max_bullets",
];

/// A folded recall request: the equivalent context-mode body, the aliases
/// used, and whether to render.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    /// The context-mode body (`"mode": "context"` plus the filled defaults).
    pub body: Map<String, Value>,
    /// v1 aliases the request used.
    pub aliases_used: Vec<&'static str>,
    /// `render: false` asks for entries only.
    pub render: bool,
}

/// Folds a recall body into the equivalent context-mode body.
///
/// # Errors
/// 400 naming unknown fields or invalid alias values.
pub fn fold(bytes: &[u8]) -> Result<Folded, ApiError> {
    let mut body = Body::parse(bytes, RECALL_FIELDS)?;
    let max_chars = body.int("max_chars", Some(1), None);
    let min_score = body.number("min_score");
    let render = match body.raw("render").cloned() {
        None | Some(Value::Bool(true)) => Some("full"),
        Some(Value::Bool(false)) => Some("off"),
        Some(Value::String(s)) if s == "full" => Some("full"),
        Some(Value::String(s)) if s == "compact" => Some("compact"),
        Some(_) => {
            body.error(super::error::FieldError::new(
                "render",
                "literal_error",
                "Input should be a valid boolean, 'full' or 'compact'",
            ));
            None
        }
    };
    if !body.sent("query") {
        body.error(super::error::FieldError::new("query", "missing", "Field required"));
    }
    let sent_quotas = body.raw("quotas").cloned();
    let sent: Map<String, Value> =
        RECALL_FIELDS.iter().filter_map(|f| body.raw(f).map(|v| ((*f).to_owned(), v.clone()))).collect();
    body.finish()?;

    let mut aliases_used = Vec::new();
    let mut out = Map::new();
    out.insert("mode".into(), json!("context"));
    for (key, value) in &sent {
        if CONTEXT_ONLY_FIELDS.contains(&key.as_str())
            || ["query", "session_id", "score_threshold", "telemetry"].contains(&key.as_str())
        {
            out.insert(key.clone(), value.clone());
        }
    }
    if let Some(chars) = max_chars {
        aliases_used.push("max_chars");
        // An explicit max_tokens wins.
        if !sent.contains_key("max_tokens") {
            // Python's round() (ties to even), as the reference.
            let tokens = ((chars as f64) / CHARS_PER_TOKEN).round_ties_even().clamp(64.0, 32_000.0);
            out.insert("max_tokens".into(), json!(tokens as i64));
        }
    }
    if min_score.is_some() {
        aliases_used.push("min_score");
    }
    if !sent.contains_key("score_threshold") {
        out.insert("score_threshold".into(), json!(min_score.unwrap_or(RECALL_SCORE_THRESHOLD)));
    }
    if sent.contains_key("render") {
        aliases_used.push("render");
    }
    if render == Some("compact") && !sent.contains_key("detail") {
        out.insert("detail".into(), json!(Tier::Abstract.as_str()));
    }
    match sent_quotas {
        // v1 quotas: merged over the v1 defaults.
        Some(Value::Object(q)) => {
            let mut merged: Map<String, Value> = V1_QUOTAS.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
            merged.extend(q);
            out.insert("quotas".into(), Value::Object(merged));
        }
        Some(other) => {
            out.insert("quotas".into(), other);
        }
        None => {}
    }
    if !sent.contains_key("purpose") && !out.contains_key("quotas") {
        out.insert("purpose".into(), json!(RECALL_PURPOSE));
    }
    if !sent.contains_key("dedup_turns") && sent.contains_key("session_id") {
        out.insert("dedup_turns".into(), json!(RECALL_DEDUP_TURNS));
    }
    if !sent.contains_key("query_expansion") {
        out.insert("query_expansion".into(), json!("auto"));
    }
    Ok(Folded { body: out, aliases_used, render: render != Some("off") })
}

/// Handles one recall request.
pub async fn handle(app: &App, request: Request<Bytes>) -> Response<String> {
    let admitted = match admit(app, &request).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    match within_deadline(&admitted.deadline, run(app, &admitted)).await {
        Ok((result, aliases, wants_telemetry)) => {
            let mut response = ok(result, telemetry(wants_telemetry, "search.recall", admitted.started));
            if !aliases.is_empty() {
                tracing::warn!(aliases = ?aliases, "deprecated /recall aliases used; send the successor's fields");
                let headers = response.headers_mut();
                headers.insert(HeaderName::from_static("deprecation"), HeaderValue::from_static("true"));
                headers.insert(
                    http::header::LINK,
                    HeaderValue::from_static("</api/v1/search/search>; rel=\"successor-version\""),
                );
            }
            response
        }
        Err(e) => error_response(&e),
    }
}

async fn run(app: &App, admitted: &Admitted<'_>) -> Result<(Value, Vec<&'static str>, bool), ApiError> {
    let folded = fold(admitted.body)?;
    let bytes = serde_json::to_vec(&Value::Object(folded.body)).map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut request = parse(&bytes, admitted.now, &app.config.retrieval.purpose_profiles)?;
    request.assemble.render = folded.render;
    super::find::check_query(app, &request.common.params.query, request.common.has_image)?;
    let mut result = super::search::context(app, &admitted.identity, &request, &admitted.deadline).await?;
    if !folded.aliases_used.is_empty() {
        result["stats"]["deprecated"] = json!({
            "endpoint": "/api/v1/search/recall",
            "successor": "/api/v1/search/search",
            "successor_body": { "mode": "context" },
            "aliases_used": folded.aliases_used,
        });
    }
    Ok((result, folded.aliases_used, request.common.telemetry))
}
