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

use super::context_fields;
use super::error::{ApiError, FieldError};
use super::fields::Body;
use super::find::{Common, FIND_FIELDS, check_query, fit_hits, parse_common};
use super::payload::respond;
use super::{Admitted, admit, error_response, result_json, telemetry, within_deadline};
use crate::app::App;
use crate::assemble::bootstrap::{BootstrapParams, Manifest};
use crate::assemble::params::{AssembleParams, DEFAULT_REWRITE_MAX_BULLETS, MAX_MAX_TOKENS, MIN_MAX_TOKENS};
use crate::config::PurposeProfileConfig;
pub use crate::pipeline::Rewrite;
use crate::pipeline::{self, ContextParams, ListParams};
use crate::sessions::SessionId;

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

pub(super) fn value_error(field: &str, message: impl std::fmt::Display) -> FieldError {
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
        Mode::Context => context_fields::parse(body, &mut request, profiles),
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
            fit_hits(result_json(&found)?, super::payload::Budget::of(&app.config.limits))
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
