//! `POST /api/v1/search/search`: the reference's `SearchRequest` with
//! `mode` = `list` (default; exactly `find` without a session), `context`
//! (the assembly line) or `bootstrap` (the session-start block). This
//! module parses and validates the body (defaults applied in one place,
//! [`parse`]; which fields each mode takes is documented in
//! `infra/openapi.json`, `x-skald-modes`) and serialises the results; the
//! pipeline itself is [`crate::pipeline`].

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{Request, Response};
use serde_json::Value;

use super::error::{ApiError, FieldError};
use super::fields::Body;
use super::find::{Common, FIND_FIELDS, check_query, fit_hits, parse_common};
use super::payload::respond;
use super::{Admitted, admit, error_response, result_json, telemetry, within_deadline};
use crate::app::App;
use crate::assemble::bootstrap::{BootstrapParams, Manifest};
use crate::assemble::params::{
    AssembleParams, DEFAULT_REWRITE_MAX_BULLETS, DEFAULT_SCORE_THRESHOLD, DETAIL_KEYS, Detail, MAX_EXCLUDE_URIS,
    MAX_MAX_TOKENS, MIN_MAX_TOKENS, PeerScope, QUOTA_KEYS, Tier, default_penalties, purpose_names, purpose_profile,
};
use crate::config::PurposeProfileConfig;
use crate::index::Category;
pub use crate::pipeline::Rewrite;
use crate::pipeline::{self, ContextParams, ListParams};
use crate::sessions::SessionId;
use crate::uri::VikingUri;

/// Fields only context mode accepts.
pub const CONTEXT_ONLY_FIELDS: &[&str] = &[
    "query_expansion",
    "max_tokens",
    "quotas",
    "purpose",
    "detail",
    "dedup_turns",
    "exclude_uris",
    "peer_scope",
    "other_peer_penalty",
    "rewrite",
    "rewrite_max_bullets",
];

/// Fields bootstrap mode accepts (`query` is accepted and unused).
pub const BOOTSTRAP_FIELDS: &[&str] = &["mode", "query", "max_tokens", "session_id", "since", "telemetry"];

/// `working_state`'s default window: 7 days.
pub const BOOTSTRAP_DEFAULT_WINDOW_S: i64 = 7 * 86_400;

/// Fields `search` adds to `find`'s.
pub const SEARCH_FIELDS: &[&str] = &["session_id", "mode"];

/// The search mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `find`'s result (plus `query_plan` with a session, once expansion runs).
    List,
    /// The assembled block.
    Context,
    /// The session-start block from the slot manifest.
    Bootstrap,
}

/// A parsed and validated search request.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// The mode.
    pub mode: Mode,
    /// The fields shared with `find`.
    pub common: Common,
    /// The session, when given (validated).
    pub session_id: Option<SessionId>,
    /// Context mode: the assembly parameters (defaults applied).
    pub assemble: AssembleParams,
    /// `query_expansion` is `auto` (the default) rather than `off`.
    pub query_expansion: bool,
    /// `dedup_turns` (0..=100, default 0).
    pub dedup_turns: u32,
    /// `rewrite`.
    pub rewrite: Rewrite,
    /// `rewrite_max_bullets` (1..=20, default 6).
    pub rewrite_max_bullets: usize,
    /// Accepted fields that context mode ignores (`level`; `limit` with quotas).
    pub ignored: Vec<&'static str>,
}

/// Every field `search` accepts in some mode.
#[must_use]
pub fn all_fields() -> Vec<&'static str> {
    FIND_FIELDS.iter().chain(SEARCH_FIELDS).chain(CONTEXT_ONLY_FIELDS).copied().collect()
}

fn value_error(field: &str, message: impl std::fmt::Display) -> FieldError {
    FieldError::new(field, "value_error", format!("Value error, {message}"))
}

impl SearchRequest {
    /// List mode's parameters (the sent targets, not yet authorised).
    #[must_use]
    pub fn into_list(self) -> ListParams {
        let mut find = self.common.params;
        find.targets = self.common.targets;
        ListParams { find, session_id: self.session_id }
    }

    /// Context mode's parameters.
    #[must_use]
    pub fn into_context(self) -> ContextParams {
        ContextParams {
            query: self.common.params.query,
            assemble: self.assemble,
            session_id: self.session_id,
            query_expansion: self.query_expansion,
            dedup_turns: self.dedup_turns,
            rewrite: self.rewrite,
            rewrite_max_bullets: self.rewrite_max_bullets,
            ignored: self.ignored,
        }
    }

    /// Bootstrap mode's parameters: `since` defaults to
    /// [`BOOTSTRAP_DEFAULT_WINDOW_S`] before `now` (Unix seconds).
    #[must_use]
    pub fn into_bootstrap(self, now: i64) -> BootstrapParams {
        let since = self.common.params.time.and_then(|t| t.since).unwrap_or(now - BOOTSTRAP_DEFAULT_WINDOW_S);
        BootstrapParams {
            max_tokens: self.assemble.max_tokens,
            since,
            now,
            session_id: self.session_id,
            manifest: Manifest::default(),
        }
    }
}

/// Parses a search body (`now` resolves relative times; `purpose` names a
/// built-in preset or one of `profiles`, `retrieval.purpose_profiles`) and
/// validates the combination of fields.
///
/// # Errors
/// 400 naming every invalid field.
pub fn parse(
    bytes: &[u8],
    now: i64,
    profiles: &BTreeMap<String, PurposeProfileConfig>,
) -> Result<SearchRequest, ApiError> {
    let mut body = Body::parse(bytes, &all_fields())?;
    let request = parse_fields(&mut body, None, now, profiles);
    body.finish()?;
    Ok(request)
}

/// [`parse`] over a body already read (the presets read theirs with their
/// own field lists), recording every problem in `body`; `mode` fixes the
/// mode (a preset's) instead of reading the `mode` field. The caller ends
/// validation with [`Body::finish`].
pub fn parse_fields(
    body: &mut Body,
    mode: Option<Mode>,
    now: i64,
    profiles: &BTreeMap<String, PurposeProfileConfig>,
) -> SearchRequest {
    let common = parse_common(body, now);
    let mode = mode.unwrap_or_else(|| match body.literal("mode", &["list", "context", "bootstrap"]).as_deref() {
        Some("context") => Mode::Context,
        Some("bootstrap") => Mode::Bootstrap,
        _ => Mode::List,
    });
    let session_id = match body.string("session_id").filter(|s| !s.is_empty()).map(|s| SessionId::new(&s)) {
        Some(Ok(id)) => Some(id),
        Some(Err(e)) => {
            body.error(value_error("session_id", e));
            None
        }
        None => None,
    };
    let mut request = SearchRequest {
        mode,
        common,
        session_id,
        assemble: AssembleParams::default(),
        query_expansion: true,
        dedup_turns: 0,
        rewrite: Rewrite::Off,
        rewrite_max_bullets: DEFAULT_REWRITE_MAX_BULLETS,
        ignored: Vec::new(),
    };
    match mode {
        Mode::List => {
            let sent: Vec<&str> = CONTEXT_ONLY_FIELDS.iter().copied().filter(|f| body.sent(f)).collect();
            for field in sent {
                body.error(value_error(
                    field,
                    format!("{field} require mode='context'; set mode='context' or drop these fields"),
                ));
            }
        }
        Mode::Context => parse_context(body, &mut request, profiles),
        Mode::Bootstrap => {
            let sent: Vec<&str> =
                all_fields().into_iter().filter(|f| body.sent(f) && !BOOTSTRAP_FIELDS.contains(f)).collect();
            for field in sent {
                body.error(value_error(field, format!("{field} is not supported in mode='bootstrap'")));
            }
            if let Some(n) = body.int("max_tokens", Some(MIN_MAX_TOKENS as i64), Some(MAX_MAX_TOKENS as i64)) {
                request.assemble.max_tokens = usize::try_from(n).unwrap_or(MIN_MAX_TOKENS);
            }
        }
    }
    request
}

fn parse_context(body: &mut Body, request: &mut SearchRequest, profiles: &BTreeMap<String, PurposeProfileConfig>) {
    let common = &request.common;
    if !common.targets.is_empty() {
        body.error(value_error("target_uri", "target_uri is not supported in mode='context'"));
    }
    if common.params.read_content {
        body.error(value_error("read_content", "read_content is only supported in mode='list'"));
    }
    let p = &mut request.assemble;
    p.queries = vec![common.params.query.clone()];
    // Context mode searches hybrid unless the request names a type.
    if body.sent("search_type") {
        p.search_kind = common.params.search_kind;
    }
    p.limit = common.params.limit;
    p.score_threshold = common.params.score_threshold.unwrap_or(DEFAULT_SCORE_THRESHOLD);
    p.expr = common.params.expr.clone();
    p.tags = common.params.tags.clone();
    p.time = common.params.time;
    request.query_expansion = body.literal("query_expansion", &["off", "auto"]).as_deref() != Some("off");
    if let Some(n) = body.int("max_tokens", Some(MIN_MAX_TOKENS as i64), Some(MAX_MAX_TOKENS as i64)) {
        p.max_tokens = usize::try_from(n).unwrap_or(MIN_MAX_TOKENS);
    }
    // Without a `limit`, the budget sizes the block.
    if !common.limit_sent {
        p.limit = crate::assemble::params::context_depth(p.max_tokens);
    }
    let quotas = parse_quotas(body);
    if let Some(name) = body.literal("purpose", &purpose_names(profiles)) {
        apply_purpose(p, name, profiles);
    }
    if quotas.is_some() {
        p.quotas = quotas;
    }
    p.detail = parse_detail(body);
    if let Some(n) = body.int("dedup_turns", Some(0), Some(100)) {
        request.dedup_turns = u32::try_from(n).unwrap_or(0);
    }
    if let Some(list) = body.string_list("exclude_uris") {
        if list.len() > MAX_EXCLUDE_URIS {
            body.error(FieldError::new(
                "exclude_uris",
                "too_long",
                format!("List should have at most {MAX_EXCLUDE_URIS} items after validation, not {}", list.len()),
            ));
        } else {
            for (i, text) in list.iter().enumerate() {
                match VikingUri::parse(text.trim()) {
                    Ok(uri) => p.exclude.push(uri),
                    Err(e) => body.error(value_error("exclude_uris", e).at(i)),
                }
            }
        }
    }
    if body.literal("peer_scope", &["actor", "all"]).as_deref() == Some("actor") {
        p.peer_scope = PeerScope::Actor;
    }
    p.penalties = parse_penalties(body);
    request.rewrite = match body.raw("rewrite") {
        None | Some(Value::Bool(false)) => Rewrite::Off,
        Some(Value::Bool(true)) => Rewrite::On,
        Some(Value::String(s)) if s == "auto" => Rewrite::Auto,
        Some(_) => {
            body.error(FieldError::new("rewrite", "literal_error", "Input should be a valid boolean or 'auto'"));
            Rewrite::Off
        }
    };
    if let Some(n) = body.int("rewrite_max_bullets", Some(1), Some(20)) {
        request.rewrite_max_bullets = usize::try_from(n).unwrap_or(DEFAULT_REWRITE_MAX_BULLETS);
    }
    for field in ["level", "context_type", "events_time_decay_protection"] {
        if body.sent(field) {
            request.ignored.push(field);
        }
    }
    if request.common.params.include_provenance {
        request.ignored.push("include_provenance");
    }
    if p.quotas.is_some() && request.common.limit_sent {
        request.ignored.push("limit");
    }
}

/// Sets `p`'s purpose to `name`, with its preset's quotas and events
/// share (a configured preset in `profiles`, else the built-in one).
pub fn apply_purpose(p: &mut AssembleParams, name: String, profiles: &BTreeMap<String, PurposeProfileConfig>) {
    if let Some(profile) = purpose_profile(&name, profiles) {
        p.events_budget_share = profile.events_budget_share;
        p.quotas = Some(profile.quotas);
    }
    p.purpose = Some(name);
}

fn parse_quotas(body: &mut Body) -> Option<BTreeMap<Category, usize>> {
    let map = body.object("quotas")?;
    let unknown: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| Category::parse(k).is_none_or(|c| !QUOTA_KEYS.contains(&c)))
        .collect();
    if !unknown.is_empty() {
        let allowed: Vec<&str> = QUOTA_KEYS.iter().map(|c| c.as_str()).collect();
        body.error(value_error(
            "quotas",
            format!("unknown quota keys: {}; allowed: {}", unknown.join(", "), allowed.join(", ")),
        ));
        return None;
    }
    let mut quotas = BTreeMap::new();
    for (key, value) in &map {
        match value.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) => {
                quotas.insert(Category::parse(key)?, n.min(1000));
            }
            None => body.error(
                FieldError::new("quotas", "int_type", "Input should be a valid non-negative integer").at(key.as_str()),
            ),
        }
    }
    Some(quotas)
}

fn parse_detail(body: &mut Body) -> Detail {
    let Some(raw) = body.raw("detail").cloned() else { return Detail::Auto };
    let tiers = "Input should be 'abstract', 'overview' or 'full'";
    match raw {
        Value::String(s) if s == "auto" => Detail::Auto,
        Value::String(s) => Tier::parse_pinnable(&s).map_or_else(
            || {
                body.error(FieldError::new(
                    "detail",
                    "literal_error",
                    "Input should be 'auto', 'abstract', 'overview' or 'full'",
                ));
                Detail::Auto
            },
            Detail::Pin,
        ),
        Value::Object(map) => {
            let unknown: Vec<&str> = map
                .keys()
                .map(String::as_str)
                .filter(|k| Category::parse(k).is_none_or(|c| !DETAIL_KEYS.contains(&c)))
                .collect();
            if !unknown.is_empty() {
                let allowed: Vec<&str> = DETAIL_KEYS.iter().map(|c| c.as_str()).collect();
                body.error(value_error(
                    "detail",
                    format!("unknown detail keys: {}; allowed: {}", unknown.join(", "), allowed.join(", ")),
                ));
                return Detail::Auto;
            }
            let mut pins = BTreeMap::new();
            for (key, value) in &map {
                match (Category::parse(key), value.as_str().and_then(Tier::parse_pinnable)) {
                    (Some(c), Some(t)) => {
                        pins.insert(c, t);
                    }
                    _ => body.error(FieldError::new("detail", "literal_error", tiers).at(key.as_str())),
                }
            }
            Detail::PerCategory(pins)
        }
        _ => {
            body.error(FieldError::new("detail", "literal_error", "Input should be a tier name or an object of tiers"));
            Detail::Auto
        }
    }
}

/// A number (every category) or an object of numbers merged over the
/// defaults; unknown keys are ignored and values clamped to [0, 1], as the
/// reference.
fn parse_penalties(body: &mut Body) -> BTreeMap<Category, f64> {
    let mut penalties = default_penalties();
    match body.raw("other_peer_penalty").cloned() {
        None => {}
        Some(Value::Number(n)) => {
            let v = n.as_f64().filter(|f| f.is_finite()).unwrap_or(0.0).clamp(0.0, 1.0);
            penalties.values_mut().for_each(|p| *p = v);
        }
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let (Some(c), Some(v)) = (Category::parse(&key), value.as_f64()) else {
                    if !value.is_number() {
                        body.error(
                            FieldError::new("other_peer_penalty", "float_type", "Input should be a valid number")
                                .at(key.as_str()),
                        );
                    }
                    continue;
                };
                if DETAIL_KEYS.contains(&c) && v.is_finite() {
                    penalties.insert(c, v.clamp(0.0, 1.0));
                }
            }
        }
        Some(_) => body.error(FieldError::new(
            "other_peer_penalty",
            "float_type",
            "Input should be a valid number or an object of numbers",
        )),
    }
    penalties
}

/// Handles one search request (list, context or bootstrap mode).
pub async fn handle(app: &App, request: Request<Bytes>) -> Response<String> {
    let admitted = match admit(app, &request).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    match within_deadline(&admitted.deadline, run(app, &admitted)).await {
        Ok((result, wants_telemetry, truncated)) => {
            respond(result, telemetry(wants_telemetry, "search.search", admitted.started), truncated)
        }
        Err(e) => error_response(&e),
    }
}

/// The result, whether telemetry was asked for, and whether the result
/// was cut to fit a response (list mode only: context and bootstrap
/// results are bounded by `max_tokens`).
async fn run(app: &App, admitted: &Admitted<'_>) -> Result<(Value, bool, bool), ApiError> {
    let request = parse(admitted.body, admitted.now, &app.config.retrieval.purpose_profiles)?;
    if request.mode != Mode::Bootstrap {
        check_query(app, &request.common.params.query, request.common.has_image)?;
    }
    let wants_telemetry = request.common.telemetry;
    let identity = &admitted.identity;
    let (result, truncated) = match request.mode {
        Mode::List => {
            let found = pipeline::list(app, identity, &request.into_list(), admitted.now, &admitted.deadline).await?;
            fit_hits(result_json(&found)?, app.config.limits.response_budget())
        }
        Mode::Context => {
            let result = pipeline::context(app, identity, &request.into_context(), &admitted.deadline).await?;
            (result_json(&result)?, false)
        }
        Mode::Bootstrap => {
            let result = pipeline::bootstrap(app, identity, &request.into_bootstrap(admitted.now)).await?;
            (result_json(&result)?, false)
        }
    };
    Ok((result, wants_telemetry, truncated))
}
