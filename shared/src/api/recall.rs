//! `POST /api/v1/search/recall`: a thin preset over context mode. It has
//! no parameter of its own and no business branch: it reads the fields with
//! the search route's own parser, fills the recall defaults, folds the v1
//! aliases (`max_chars`, `min_score`, `render`, v1 `quotas`), and calls
//! exactly the context-mode function the search route calls
//! ([`crate::pipeline::context`]). When an alias is used the response says
//! so (`Deprecation: true`, a `Link` to the successor, `stats.deprecated`)
//! and a warning is logged.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response};
use serde_json::Value;

use super::context_fields::apply_purpose;
use super::error::{ApiError, FieldError};
use super::fields::Body;
use super::search::{Mode, SearchRequest, parse_fields};
use super::{Admitted, admit, error_response, ok, result_json, telemetry, within_deadline};
use crate::app::App;
use crate::assemble::params::{Detail, Tier};
use crate::config::PurposeProfileConfig;
use crate::index::Category;
use crate::pipeline::{Deprecation, SuccessorBody};

/// Recall's default `score_threshold`.
pub const RECALL_SCORE_THRESHOLD: f64 = 0.35;
/// Recall's default `dedup_turns` when a session is given.
pub const RECALL_DEDUP_TURNS: u32 = 5;
/// Recall's default purpose.
pub const RECALL_PURPOSE: &str = "coding";
/// The v1 quotas that sent `quotas` are merged over.
pub const V1_QUOTAS: [(Category, usize); 4] =
    [(Category::Events, 10), (Category::Entities, 10), (Category::Preferences, 3), (Category::Experiences, 0)];
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

/// A folded recall request: the equivalent context-mode request and the
/// aliases it used.
#[derive(Debug, Clone)]
pub struct Folded {
    /// The context-mode request, recall's defaults filled and the aliases
    /// folded in (`render: false` is `assemble.render = false`).
    pub request: SearchRequest,
    /// v1 aliases the request used.
    pub aliases_used: Vec<&'static str>,
}

/// Reads a recall body into the equivalent context-mode request: the
/// aliases first (their errors alone), then every other field with the
/// search route's own parser, then recall's defaults for what was not
/// sent. `now` and `profiles` as [`super::search::parse`].
///
/// # Errors
/// 400 naming unknown fields, invalid alias values, or invalid fields.
pub fn fold(bytes: &[u8], now: i64, profiles: &BTreeMap<String, PurposeProfileConfig>) -> Result<Folded, ApiError> {
    let mut body = Body::parse(bytes, RECALL_FIELDS)?;
    let max_chars = body.int("max_chars", Some(1), None);
    let min_score = body.number("min_score");
    let render = match body.raw("render").cloned() {
        None | Some(Value::Bool(true)) => Some("full"),
        Some(Value::Bool(false)) => Some("off"),
        Some(Value::String(s)) if s == "full" => Some("full"),
        Some(Value::String(s)) if s == "compact" => Some("compact"),
        Some(_) => {
            body.error(FieldError::new(
                "render",
                "literal_error",
                "Input should be a valid boolean, 'full' or 'compact'",
            ));
            None
        }
    };
    if !body.sent("query") {
        body.error(FieldError::new("query", "missing", "Field required"));
    }
    body.check()?;
    let sent = |field: &str| body.sent(field);
    let (sent_max_tokens, sent_score_threshold, sent_render, sent_detail) =
        (sent("max_tokens"), sent("score_threshold"), sent("render"), sent("detail"));
    let (sent_quotas, sent_purpose, sent_dedup_turns, sent_session) =
        (sent("quotas"), sent("purpose"), sent("dedup_turns"), sent("session_id"));
    let mut request = parse_fields(&mut body, Some(Mode::Context), now, profiles);
    body.finish()?;

    let mut aliases_used = Vec::new();
    let p = &mut request.assemble;
    if let Some(chars) = max_chars {
        aliases_used.push("max_chars");
        // An explicit max_tokens wins.
        if !sent_max_tokens {
            // Python's round() (ties to even), as the reference.
            let tokens = ((chars as f64) / CHARS_PER_TOKEN).round_ties_even().clamp(64.0, 32_000.0);
            p.max_tokens = tokens as usize;
        }
    }
    if min_score.is_some() {
        aliases_used.push("min_score");
    }
    if !sent_score_threshold {
        p.score_threshold = min_score.unwrap_or(RECALL_SCORE_THRESHOLD);
    }
    if sent_render {
        aliases_used.push("render");
    }
    if render == Some("compact") && !sent_detail {
        p.detail = Detail::Pin(Tier::Abstract);
    }
    if sent_quotas {
        // v1 quotas: the sent ones merged over the v1 defaults.
        let mut merged: BTreeMap<Category, usize> = V1_QUOTAS.into_iter().collect();
        merged.extend(p.quotas.take().unwrap_or_default());
        p.quotas = Some(merged);
    } else if !sent_purpose {
        apply_purpose(p, RECALL_PURPOSE.to_owned(), profiles);
    }
    if !sent_dedup_turns && sent_session {
        request.dedup_turns = RECALL_DEDUP_TURNS;
    }
    request.assemble.render = render != Some("off");
    Ok(Folded { request, aliases_used })
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
    let Folded { request, aliases_used } = fold(admitted.body, admitted.now, &app.config.retrieval.purpose_profiles)?;
    super::find::check_query(app, &request.common.params.query, request.common.has_image)?;
    let telemetry = request.common.telemetry;
    let mut result =
        crate::pipeline::context(app, &admitted.identity, &request.into_context(), &admitted.deadline).await?;
    if !aliases_used.is_empty() {
        result.stats.deprecated = Some(Deprecation {
            endpoint: "/api/v1/search/recall",
            successor: "/api/v1/search/search",
            successor_body: SuccessorBody { mode: "context" },
            aliases_used: aliases_used.clone(),
        });
    }
    Ok((result_json(&result)?, aliases_used, telemetry))
}
