//! `POST /api/v1/search/find`: strict parsing of the reference's
//! `FindRequest` (0.5.2 shape) into [`FindParams`], then [`crate::find::find`].

use bytes::Bytes;
use http::{Request, Response};
use serde_json::Value;

use super::error::{ApiError, FieldError};
use super::fields::Body;
use super::payload::{Budget, largest_fitting, respond};
use super::{Admitted, admit, error_response, result_json, telemetry, within_deadline};
use crate::app::App;
use crate::find::{FindParams, find};
use crate::identity::Identity;
use crate::index::Level;
use crate::index::extract::is_valid_tag;
use crate::index::filter::{FilterExpr, MAX_FILTER_DEPTH, MAX_FILTER_NODES, TimeField, TimeRange, filter_size};
use crate::index::{ContextType, SearchKind};
use crate::retrieval::authorize_targets;
use crate::timeparse::{DateEnd, parse_duration, parse_time};
use crate::uri::VikingUri;

/// The fields `find` accepts; anything else is `extra_forbidden`.
pub const FIND_FIELDS: &[&str] = &[
    "query",
    "image_url",
    "target_uri",
    "context_type",
    "limit",
    "node_limit",
    "score_threshold",
    "filter",
    "include_provenance",
    "tags",
    "since",
    "until",
    "time_field",
    "level",
    "telemetry",
    "read_content",
    "events_time_decay_protection",
    "search_type",
];

/// `POST /api/v1/skills/find` (the SDK's `find_skills`): `find` over
/// skills only.
pub const SKILLS_FIND_PATH: &str = "/api/v1/skills/find";
/// The fields `skills/find` accepts.
pub const SKILLS_FIND_FIELDS: &[&str] = &["query", "limit", "score_threshold", "level", "telemetry", "target_uri"];

/// The message for an empty query without an image (as the reference).
pub const EMPTY_QUERY: &str = "Search query or image_url must not be empty.";

/// The most hits `limit` and `node_limit` may ask for (more is a 400 at
/// the field): 1000. OpenViking's plugins ask for 8 to 40 (twice or four
/// times their recall limit of 10) and its MCP tools for 10, so this
/// leaves a configured recall limit 25 times the default; each hit costs
/// its share of the scan's heap, about 0.5 KB of response and, with
/// `read_content`, one read. The reference sets no bound.
pub const MAX_LIMIT: i64 = 1000;

/// The most entries `target_uri` may hold (more is a 400 at the field):
/// 64. Clients send one URI (the plugins: one per search); every record
/// the search scans is tested against each target.
pub const MAX_TARGET_URIS: usize = 64;

/// The most entries `tags` may hold (more is a 400 at the field): 32.
/// No OpenViking client sends tags; every record the search scans is
/// tested for each.
pub const MAX_TAGS: usize = 32;

/// The characters of `query` that are searched: 4096. A longer query is
/// cut here (at a character boundary, after leading whitespace), not
/// refused: OpenViking's Claude Code plugin sends the user's whole prompt
/// as the query, and a pasted log or file must not lose the turn's recall
/// to a 400. What is cut could not be searched anyway: the embedded
/// USE-m3 model reads the first 256 tokens (about 1,200 characters), and
/// an OpenAI-compatible embedder refuses input over about 8,000 tokens,
/// which 4096 characters stay under even in CJK text. Everything after
/// parsing — the embedding, `provenance`, the LLM stages (which cut
/// further: `llm::PROMPT_QUERY_CHARS`) — sees the cut query. The
/// request body's own limit (`limits.max_body_bytes`) bounds what is sent.
pub const MAX_QUERY_CHARS: usize = 4096;

/// `query` cut to [`MAX_QUERY_CHARS`] characters (unchanged when it has no
/// more; else its first ones after leading whitespace).
#[must_use]
pub fn cut_query(query: String) -> String {
    if query.chars().nth(MAX_QUERY_CHARS).is_none() {
        return query;
    }
    let text = query.trim_start();
    match text.char_indices().nth(MAX_QUERY_CHARS) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

/// The error for a list field with `n` items, more than `max`, as
/// pydantic words it.
#[must_use]
pub fn too_long(field: &str, max: usize, n: usize) -> FieldError {
    FieldError::new(field, "too_long", format!("List should have at most {max} items after validation, not {n}"))
}

/// Handles one find request; never panics on input and always answers in
/// the envelope.
pub async fn handle(app: &App, request: Request<Bytes>) -> Response<String> {
    let admitted = match admit(app, &request).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    let skills_only = request.uri().path().trim_end_matches('/') == SKILLS_FIND_PATH;
    match within_deadline(&admitted.deadline, run(app, &admitted, skills_only)).await {
        Ok((result, wants_telemetry)) => {
            let (result, truncated) = fit_hits(result, Budget::of(&app.config.limits));
            respond(result, telemetry(wants_telemetry, "search.find", admitted.started), truncated)
        }
        Err(e) => error_response(&e),
    }
}

async fn run(app: &App, admitted: &Admitted<'_>, skills_only: bool) -> Result<(Value, bool), ApiError> {
    let mut body = Body::parse(admitted.body, if skills_only { SKILLS_FIND_FIELDS } else { FIND_FIELDS })?;
    let common = parse_common(&mut body, admitted.now);
    body.finish()?;
    let mut params = common.params;
    if skills_only {
        params.context_types = vec![crate::index::ContextType::Skill];
    }
    check_query(app, &params.query, common.has_image)?;
    params.targets = authorize(&admitted.identity, &common.targets)?;
    let result = find(app, &admitted.identity, &params, admitted.now).await?;
    Ok((result_json(&result)?, common.telemetry))
}

/// The lists of a find result, in the order hits are kept when it is cut.
const HIT_LISTS: [&str; 3] = ["memories", "resources", "skills"];

/// A find (or list-mode) `result` cut to what a response may carry
/// ([`Budget`]): unchanged and `false` when it fits; else its
/// best-scoring hits that fit, across the three lists (ties keep the
/// earlier list), with `total` counting them, and `true` (the response
/// then says `"truncated": true`). Only a result with `read_content`
/// bodies can get there: a thousand hits of abstracts take about 0.5 MB.
#[must_use]
pub fn fit_hits(result: Value, budget: Budget) -> (Value, bool) {
    if budget.fits(&result) {
        return (result, false);
    }
    let mut order: Vec<(f64, usize, usize)> = Vec::new();
    for (list, name) in HIT_LISTS.iter().enumerate() {
        for (i, item) in result[*name].as_array().map(Vec::as_slice).unwrap_or_default().iter().enumerate() {
            order.push((item["score"].as_f64().unwrap_or(f64::NEG_INFINITY), list, i));
        }
    }
    order.sort_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let keep = |k: usize| -> Value {
        let kept: std::collections::HashSet<(usize, usize)> = order[..k].iter().map(|(_, l, i)| (*l, *i)).collect();
        let mut out = result.clone();
        for (list, name) in HIT_LISTS.iter().enumerate() {
            if let Some(items) = out[*name].as_array_mut() {
                let mut i = 0;
                items.retain(|_| {
                    i += 1;
                    kept.contains(&(list, i - 1))
                });
            }
        }
        out["total"] = Value::from(k);
        out
    };
    let k = largest_fitting(order.len(), |k| budget.fits(&keep(k)));
    (keep(k), true)
}

/// What the fields shared by `find` and `search` parse into.
#[derive(Debug, Clone, Default)]
pub struct Common {
    /// The find parameters (targets not yet authorised).
    pub params: FindParams,
    /// `target_uri` as sent ("" and [] are absent).
    pub targets: Vec<VikingUri>,
    /// Whether a non-empty `image_url` was sent.
    pub has_image: bool,
    /// Whether `telemetry` asked for a summary.
    pub telemetry: bool,
    /// Whether `limit` or `node_limit` was sent.
    pub limit_sent: bool,
}

/// Parses the fields `find` and `search` share, recording every problem in
/// `body`. `now` resolves relative times.
pub fn parse_common(body: &mut Body, now: i64) -> Common {
    let mut c = Common::default();
    let p = &mut c.params;
    p.query = cut_query(body.string("query").unwrap_or_default());
    // `str | list[str]`: "" and [] are no image; each list element must be a string.
    let image_is_list = body.raw("image_url").is_some_and(Value::is_array);
    c.has_image = body
        .string_or_list("image_url")
        .is_some_and(|images| image_is_list && !images.is_empty() || images.iter().any(|s| !s.is_empty()));
    let target_is_list = body.raw("target_uri").is_some_and(Value::is_array);
    let mut targets = body.string_or_list("target_uri").unwrap_or_default();
    if targets.len() > MAX_TARGET_URIS {
        body.error(too_long("target_uri", MAX_TARGET_URIS, targets.len()));
        targets.clear();
    }
    for (i, text) in targets.into_iter().enumerate() {
        if text.is_empty() {
            continue;
        }
        match VikingUri::parse(text.trim()) {
            Ok(uri) => c.targets.push(uri),
            Err(e) => {
                let error = FieldError::new("target_uri", "value_error", format!("Value error, {e}"));
                body.error(if target_is_list { error.at(i) } else { error });
            }
        }
    }
    for name in body.string_or_list("context_type").unwrap_or_default() {
        for part in name.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match ContextType::parse(part) {
                Some(t) if !p.context_types.contains(&t) => p.context_types.push(t),
                Some(_) => {}
                None => body.error(FieldError::new(
                    "context_type",
                    "value_error",
                    format!("Value error, invalid context_type {part:?}; allowed: memory, resource, skill"),
                )),
            }
        }
    }
    c.limit_sent = body.sent("limit") || body.sent("node_limit");
    let limit = body.int("limit", Some(1), Some(MAX_LIMIT));
    let node_limit = body.int("node_limit", Some(1), Some(MAX_LIMIT));
    p.limit = node_limit.or(limit).map_or(10, |n| usize::try_from(n).unwrap_or(10));
    p.score_threshold = body.number("score_threshold");
    p.include_provenance = body.boolean("include_provenance").unwrap_or(false);
    if let Some(kind) = body.literal("search_type", &["semantic", "keywords", "hybrid"]) {
        p.search_kind = SearchKind::parse(&kind).unwrap_or_default();
        if p.search_kind == SearchKind::Keywords && c.has_image {
            body.error(FieldError::new(
                "search_type",
                "value_error",
                "Value error, search_type 'keywords' searches a text query; image_url is not allowed with it",
            ));
        }
    }
    let time_field = match body.literal("time_field", &["updated_at", "created_at"]).as_deref() {
        Some("created_at") => TimeField::CreatedAt,
        _ => TimeField::UpdatedAt,
    };
    p.time_field = time_field;
    if let Some(filter) = body.object("filter") {
        let filter = Value::Object(filter);
        let parse = |t: &str| parse_time(t, now, DateEnd::Start);
        match check_filter_size(&filter).and_then(|()| FilterExpr::parse(&filter, &parse)) {
            Ok(expr) => p.expr = Some(expr),
            Err(e) => body.error(FieldError::new("filter", "value_error", format!("Value error, {e}"))),
        }
    }
    let mut tags = body.string_list("tags").unwrap_or_default();
    if tags.len() > MAX_TAGS {
        body.error(too_long("tags", MAX_TAGS, tags.len()));
        tags.clear();
    }
    for (i, tag) in tags.into_iter().enumerate() {
        if is_valid_tag(&tag) {
            p.tags.push(tag);
        } else {
            body.error(
                FieldError::new("tags", "value_error", format!("Value error, tag {tag:?} must be in k=v form")).at(i),
            );
        }
    }
    let mut bound = |name: &str, end| {
        let text = body.string(name)?;
        match parse_time(&text, now, end) {
            Ok(t) => Some(t),
            Err(e) => {
                body.error(FieldError::new(name, "value_error", format!("Value error, {name}: {e}")));
                None
            }
        }
    };
    let since = bound("since", DateEnd::Start);
    let until = bound("until", DateEnd::End);
    if since.is_some() || until.is_some() {
        p.time = Some(TimeRange { field: time_field, since, until });
    }
    p.levels = parse_levels(body);
    c.telemetry = match body.raw("telemetry") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Object(m)) if m.keys().all(|k| k == "summary") && m.values().all(Value::is_boolean) => {
            m.get("summary").and_then(Value::as_bool).unwrap_or(false)
        }
        Some(_) => {
            body.error(FieldError::new(
                "telemetry",
                "value_error",
                "Value error, telemetry must be a boolean or {\"summary\": bool}",
            ));
            false
        }
    };
    p.read_content = body.boolean("read_content").unwrap_or(false);
    if let Some(text) = body.string("events_time_decay_protection") {
        match parse_decay_window(&text) {
            Some(seconds) => p.decay_window_s = Some(seconds),
            None => body.error(FieldError::new(
                "events_time_decay_protection",
                "value_error",
                format!(
                    "Value error, events_time_decay_protection {text:?} must be \"0\" or a number followed by m, h or d"
                ),
            )),
        }
    }
    c
}

/// Refuses a filter expression with more than [`MAX_FILTER_NODES`] nodes
/// or nested deeper than [`MAX_FILTER_DEPTH`], before it is parsed.
fn check_filter_size(filter: &Value) -> Result<(), String> {
    let size = filter_size(filter);
    if size.nodes > MAX_FILTER_NODES {
        return Err(format!("filter has {} nodes; at most {MAX_FILTER_NODES} are allowed", size.nodes));
    }
    if size.depth > MAX_FILTER_DEPTH {
        return Err(format!("filter is nested {} levels deep; at most {MAX_FILTER_DEPTH} are allowed", size.depth));
    }
    Ok(())
}

/// `"0"` or `N` + `m|h|d`, in seconds.
fn parse_decay_window(text: &str) -> Option<i64> {
    if text == "0" {
        return Some(0);
    }
    text.ends_with(['m', 'h', 'd']).then(|| parse_duration(text)).flatten()
}

/// `level`: an int, a list of ints (or numeric strings), or `"0,1"`; each
/// in 0..=2.
fn parse_levels(body: &mut Body) -> Vec<Level> {
    let Some(raw) = body.raw("level").cloned() else { return Vec::new() };
    let items: Vec<Value> = match raw {
        Value::Array(items) => items,
        Value::String(s) => {
            s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| Value::String(s.into())).collect()
        }
        other => vec![other],
    };
    let mut levels = Vec::new();
    for item in items {
        let level = match &item {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse::<u64>().ok(),
            _ => None,
        };
        match level.and_then(|l| Level::try_from(l).ok()).filter(|l| *l <= 2) {
            Some(l) if !levels.contains(&l) => levels.push(l),
            Some(_) => {}
            None => {
                body.error(FieldError::new(
                    "level",
                    "value_error",
                    format!("Value error, level {item} must be 0, 1 or 2 (an int, a list, or a string like \"0,1\")"),
                ));
                return Vec::new();
            }
        }
    }
    levels
}

/// The reference's empty-query rule and the image rule.
///
/// # Errors
/// 400 for an empty query without an image, or an image the embedder
/// cannot take.
pub fn check_query(app: &App, query: &str, has_image: bool) -> Result<(), ApiError> {
    if has_image && !app.embedder.supports_images() {
        return Err(ApiError::InvalidArgument("image search is not supported by the configured embedder".into()));
    }
    if query.trim().is_empty() && !has_image {
        return Err(ApiError::InvalidArgument(EMPTY_QUERY.into()));
    }
    Ok(())
}

/// Authorises the sent targets (none: none).
///
/// # Errors
/// 403 naming a target outside the caller's tree.
pub fn authorize(identity: &Identity, targets: &[VikingUri]) -> Result<Vec<VikingUri>, ApiError> {
    if targets.is_empty() { Ok(Vec::new()) } else { Ok(authorize_targets(identity, targets)?) }
}
