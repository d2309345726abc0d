//! Context mode's own fields of `POST /api/v1/search/search` (and of the
//! presets that assemble): the budget, the detail tiers, quotas,
//! penalties, purpose, dedup, the LLM stages' switches — parsed into
//! [`AssembleParams`] with every problem named. The modes and the fields
//! they share are [`super::search`]'s.

use std::collections::BTreeMap;

use serde_json::Value;

use super::error::FieldError;
use super::fields::Body;
use super::search::{SearchRequest, value_error};
use crate::assemble::params::{
    AssembleParams, DEFAULT_REWRITE_MAX_BULLETS, DEFAULT_SCORE_THRESHOLD, DETAIL_KEYS, Detail, MAX_EXCLUDE_URIS,
    MAX_MAX_TOKENS, MIN_MAX_TOKENS, PeerScope, QUOTA_KEYS, Tier, default_penalties, purpose_names, purpose_profile,
};
use crate::config::PurposeProfileConfig;
use crate::index::Category;
use crate::pipeline::Rewrite;
use crate::uri::VikingUri;

/// Reads context mode's fields into `request.assemble` (after the fields
/// shared with `find`, already in `request.common`), recording every
/// problem in `body`.
pub(super) fn parse(body: &mut Body, request: &mut SearchRequest, profiles: &BTreeMap<String, PurposeProfileConfig>) {
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
pub(super) fn apply_purpose(p: &mut AssembleParams, name: String, profiles: &BTreeMap<String, PurposeProfileConfig>) {
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
