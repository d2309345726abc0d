//! The HTTP surface, independent of Lambda: handlers take an
//! `http::Request<Bytes>` (with [`auth::AuthorizerClaims`] as an extension
//! when an authorizer ran) and always return an `http::Response<String>` in
//! the reference's envelope. Errors become responses in one place
//! ([`error::ApiError`]).

use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::app::App;
use crate::deadline::{CLIENT_TIMEOUT_HEADER, Deadline, InvocationDeadline, parse_client_timeout};
use crate::identity::Identity;

pub mod auth;
#[cfg(feature = "assemble")]
pub mod bootstrap;
pub mod content;
#[cfg(feature = "assemble")]
mod context_fields;
pub mod error;
pub mod explore;
pub mod fields;
pub mod find;
pub mod payload;
#[cfg(feature = "assemble")]
pub mod recall;
#[cfg(feature = "documents")]
pub mod resources;
#[cfg(feature = "assemble")]
pub mod search;
pub mod sessions;
pub mod tasks;
pub mod write;

use error::ApiError;

/// What every route handler receives once the request is admitted.
#[derive(Debug)]
pub struct Admitted<'a> {
    /// Who is asking.
    pub identity: Identity,
    /// With which role ([`auth::Caller`]).
    pub role: crate::keys::Role,
    /// The raw body (within the size limit).
    pub body: &'a [u8],
    /// The request headers.
    pub headers: &'a http::HeaderMap,
    /// "Now", Unix seconds, read once at the edge.
    pub now: i64,
    /// When handling started (for telemetry).
    pub started: Instant,
    /// The request's effective deadline ([`Deadline::effective`]).
    pub deadline: Deadline,
}

/// Checks method and size and resolves the identity: the steps every POST
/// route shares.
///
/// # Errors
/// 405 for a method other than POST, 413 over the body limit, 401/403/400
/// for identity problems (503 when the key table cannot be read), 400 for
/// a malformed `X-Client-Timeout-Ms`.
pub async fn admit<'a>(app: &App, request: &'a Request<Bytes>) -> Result<Admitted<'a>, ApiError> {
    admit_method(app, request, &Method::POST).await
}

/// [`admit`] for a route served with `method`.
///
/// # Errors
/// As [`admit`].
pub async fn admit_method<'a>(
    app: &App,
    request: &'a Request<Bytes>,
    method: &Method,
) -> Result<Admitted<'a>, ApiError> {
    admit_sized(app, request, method, app.config.limits.max_body_bytes).await
}

/// [`admit_method`] with a body limit of `limit` bytes rather than the
/// configured one (the upload route's).
///
/// # Errors
/// As [`admit`], 413 past `limit`.
pub async fn admit_sized<'a>(
    app: &App,
    request: &'a Request<Bytes>,
    method: &Method,
    limit: usize,
) -> Result<Admitted<'a>, ApiError> {
    let started = Instant::now();
    if request.method() != method {
        return Err(ApiError::MethodNotAllowed(request.method().to_string(), method.to_string()));
    }
    let body = request.body().as_ref();
    if body.len() > limit {
        return Err(ApiError::PayloadTooLarge { size: body.len(), limit });
    }
    let deadline = request_deadline(app, request, started)?;
    let claims = request.extensions().get::<auth::AuthorizerClaims>();
    let auth::Caller { identity, role } = within_deadline(
        &deadline,
        auth::resolve_caller(&app.config.identity, &app.keys, request.headers(), claims, started),
    )
    .await?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    Ok(Admitted { identity, role, body, headers: request.headers(), now, started, deadline })
}

/// The effective deadline of `request`, which started at `started`: the
/// Lambda deadline (when the edge attached one), the configured gateway
/// limit and the client's `X-Client-Timeout-Ms`.
///
/// # Errors
/// 400 naming the header when `X-Client-Timeout-Ms` is not a positive
/// whole number.
pub fn request_deadline(app: &App, request: &Request<Bytes>, started: Instant) -> Result<Deadline, ApiError> {
    let client = request
        .headers()
        .get(CLIENT_TIMEOUT_HEADER)
        .map(|v| parse_client_timeout(v.as_bytes()))
        .transpose()
        .map_err(ApiError::InvalidArgument)?;
    let lambda = request.extensions().get::<InvocationDeadline>().map(|d| d.0);
    let gateway = crate::config::RetrievalConfig::seconds(app.config.retrieval.gateway_timeout_s);
    Ok(Deadline::effective(started, lambda, gateway, client))
}

/// Runs `work` until the request's hard stop (just before its deadline):
/// every store, embedder and model call inside it is bounded by the
/// deadline.
///
/// # Errors
/// `work`'s error, or 503 when the deadline came first.
pub async fn within_deadline<T>(
    deadline: &Deadline,
    work: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    match tokio::time::timeout_at(deadline.hard_stop().into(), work).await {
        Ok(result) => result,
        Err(_) => Err(ApiError::Unavailable(format!(
            "the request reached its deadline (set by the {} limit) before a result was ready",
            deadline.source.as_str()
        ))),
    }
}

/// A library result (a typed, `Serialize` value) as the JSON a response
/// carries, keys in the type's field order.
///
/// # Errors
/// 500 when the value cannot be represented as JSON (a map with keys that
/// are not strings: no result type has one).
pub fn result_json<T: serde::Serialize>(result: &T) -> Result<Value, ApiError> {
    serde_json::to_value(result).map_err(|e| ApiError::Internal(format!("the result could not be serialised: {e}")))
}

/// `{"status":"ok","result":…}` (plus `telemetry` when given) as a 200.
#[must_use]
#[allow(clippy::needless_pass_by_value)] // consumed by value at every call site
pub fn ok(result: Value, telemetry: Option<Value>) -> Response<String> {
    let mut body = json!({ "status": "ok", "result": result });
    if let Some(t) = telemetry {
        body["telemetry"] = t;
    }
    json_response(StatusCode::OK, &body)
}

tokio::task_local! {
    static REQUEST_ID: String;
}

/// Runs `work` (a request's handling) with `id` as its request id: error
/// envelopes built inside it carry the id (`error.request_id`), so a client
/// can quote it and an operator find the request's log lines.
pub async fn with_request_id<F: std::future::Future>(id: String, work: F) -> F::Output {
    REQUEST_ID.scope(id, work).await
}

/// The id of the request being handled, when the edge gave it one
/// ([`with_request_id`]).
#[must_use]
pub fn request_id() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// The answer to request `request_id` whose handler panicked: a 500
/// envelope that says no more than that (the edge logs the panic).
#[must_use]
pub fn panic_response(request_id: String) -> Response<String> {
    REQUEST_ID
        .sync_scope(request_id, || error_response(&ApiError::Internal("the request failed unexpectedly; retry".into())))
}

/// The error envelope with the error's status. A 5xx is logged with what
/// the client is not told ([`ApiError::detail`]).
#[must_use]
pub fn error_response(error: &ApiError) -> Response<String> {
    if error.status() >= 500 {
        tracing::error!(code = error.code(), message = %error, detail = error.detail().unwrap_or(""), "request failed");
    }
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(status, &error.body());
    if let ApiError::Busy { retry_after_s, .. } = error {
        response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(*retry_after_s));
    }
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response<String> {
    let mut response = Response::new(body.to_string());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response
}

/// The reference's telemetry summary, when the request asked for it.
#[must_use]
pub fn telemetry(requested: bool, operation: &str, started: Instant) -> Option<Value> {
    requested.then(|| {
        let nanos = time::OffsetDateTime::now_utc().unix_timestamp_nanos();
        json!({
            "id": format!("tm_{:016x}", (nanos as u64) ^ u64::from(std::process::id())),
            "summary": {
                "operation": operation,
                "status": "ok",
                "duration_ms": started.elapsed().as_secs_f64() * 1000.0,
            }
        })
    })
}
