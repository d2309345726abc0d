//! The Lambda edge every Skald function shares — the only crate besides the
//! function binaries that knows Lambda. It turns API Gateway (HTTP API
//! payload 2.0 / Function URL) events into library requests, attaches the
//! authorizer's claims and the invocation deadline, logs one line per
//! request, and runs the runtime.

#[cfg(feature = "extractor")]
pub mod extractor;
#[cfg(feature = "s3-events")]
pub mod s3_events;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt as _;
use lambda_http::request::RequestContext;
use lambda_http::{Body, Error, RequestExt as _, service_fn};
use serde_json::{Map, Value};
use skald::api::auth::AuthorizerClaims;
use skald::app::App;
use skald::config::Config;
use skald::deadline::InvocationDeadline;

/// Logs to stdout for CloudWatch: no colours, no timestamps (CloudWatch
/// adds its own), level from `RUST_LOG` (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).without_time().with_target(false).try_init();
}

/// The authorizer claims of an API Gateway request: JWT claims, or a Lambda
/// authorizer's context.
#[must_use]
pub fn authorizer_claims(event: &lambda_http::Request) -> Option<AuthorizerClaims> {
    let RequestContext::ApiGatewayV2(context) = event.request_context_ref()? else { return None };
    let authorizer = context.authorizer.as_ref()?;
    let mut claims = Map::new();
    if let Some(jwt) = &authorizer.jwt {
        claims.extend(jwt.claims.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))));
    }
    claims.extend(authorizer.fields.iter().map(|(k, v)| (k.clone(), v.clone())));
    (!claims.is_empty()).then_some(AuthorizerClaims(claims))
}

/// The invocation's deadline as an instant, from the runtime context's
/// `deadline` (milliseconds since the epoch); `None` outside Lambda, and
/// for a deadline already past on arrival, which real Lambda never sends
/// (`cargo lambda watch` sends a fixed `600000`, ten minutes after 1970):
/// the gateway limit and the client's header still bound the request.
#[must_use]
pub fn invocation_deadline(event: &lambda_http::Request) -> Option<Instant> {
    let now_ms = u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    deadline_from_epoch_ms(event.lambda_context_ref()?.deadline, now_ms, Instant::now())
}

/// `deadline_ms` (since the epoch) as an instant, given the wall clock
/// `now_ms` read at `now`; `None` when it is not in the future.
pub(crate) fn deadline_from_epoch_ms(deadline_ms: u64, now_ms: u64, now: Instant) -> Option<Instant> {
    (deadline_ms > now_ms).then(|| now + Duration::from_millis(deadline_ms - now_ms))
}

/// A Lambda event as a library request: method, URI, headers and body,
/// with the authorizer's claims and the invocation deadline as extensions.
#[must_use]
pub fn to_library_request(event: lambda_http::Request) -> http::Request<bytes::Bytes> {
    let claims = authorizer_claims(&event);
    let deadline = invocation_deadline(&event);
    let (parts, body) = event.into_parts();
    let bytes = match body {
        Body::Empty => bytes::Bytes::new(),
        Body::Text(text) => bytes::Bytes::from(text),
        Body::Binary(data) => bytes::Bytes::from(data),
        _ => bytes::Bytes::new(),
    };
    let mut request = http::Request::from_parts(parts, bytes);
    if let Some(claims) = claims {
        request.extensions_mut().insert(claims);
    }
    if let Some(at) = deadline {
        request.extensions_mut().insert(InvocationDeadline(at));
    }
    request
}

/// A library response as a Lambda response.
#[must_use]
pub fn to_lambda_response(response: http::Response<String>) -> lambda_http::Response<Body> {
    response.map(Body::Text)
}

/// Calls `handler` for one event and logs method, path, status and time.
pub async fn serve<F, Fut>(app: &Arc<App>, handler: &F, event: lambda_http::Request) -> lambda_http::Response<Body>
where
    F: Fn(Arc<App>, http::Request<bytes::Bytes>) -> Fut,
    Fut: Future<Output = http::Response<String>>,
{
    let started = Instant::now();
    // Lambda's request id; a local stand-in of the runtime may send none.
    let request_id = event
        .lambda_context_ref()
        .map(|c| c.request_id.clone())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| format!("local-{:016x}", skald::index::unique()));
    let request = to_library_request(event);
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    // Boxed: the handler's future is large, and the runtime moves this one.
    let handled = Box::pin(skald::api::with_request_id(request_id.clone(), handler(Arc::clone(app), request)));
    // A panic answers this request with a 500 and leaves the warm process
    // (its caches, its connections) serving the next one.
    let response = match AssertUnwindSafe(handled).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(%method, path, request_id, panic = message, "the handler panicked; answered 500");
            skald::api::panic_response(request_id.clone())
        }
    };
    let cache = app.index.usage();
    tracing::info!(
        %method,
        path,
        status = response.status().as_u16(),
        ms = started.elapsed().as_secs_f64() * 1000.0,
        request_id,
        index_cache_bytes = cache.bytes,
        index_cache_max_bytes = cache.max_bytes,
        "request"
    );
    to_lambda_response(response)
}

/// Builds the [`App`] from the environment (`SKALD_CONFIG`, `SKALD_STORE`,
/// …) and serves `handler` until the runtime stops.
///
/// # Errors
/// An init error (bad configuration, unreachable store) or a runtime error.
pub async fn run<F, Fut>(handler: F) -> Result<(), Error>
where
    F: Fn(Arc<App>, http::Request<bytes::Bytes>) -> Fut + Send + Sync,
    Fut: Future<Output = http::Response<String>> + Send,
{
    init_tracing();
    let config = Config::from_env()?;
    let app = Arc::new(App::new(config).await?);
    let handler = &handler;
    let app = &app;
    lambda_http::run(service_fn(move |event| async move { Ok::<_, Error>(serve(app, handler, event).await) })).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_answers_500_and_the_next_request_is_served() {
        let dir = std::env::temp_dir().join(format!("skald-lambda-panic-{}", std::process::id()));
        let store = Arc::new(skald::store::local::LocalStore::open(&dir).expect("a local store"));
        let embedder = Arc::new(skald::embed::hashed::HashedEmbedder::new(8));
        let app = Arc::new(App::with_parts(Config::default(), store, embedder));
        let handler = |_app: Arc<App>, request: http::Request<bytes::Bytes>| async move {
            assert!(request.uri().path() != "/panic", "a bug on this path");
            http::Response::new("{\"status\":\"ok\"}".to_owned())
        };
        let event = |path: &str| http::Request::builder().uri(path).body(Body::Empty).expect("a request");
        let crashed = serve(&app, &handler, event("/panic")).await;
        assert_eq!(crashed.status(), 500);
        let Body::Text(text) = crashed.body() else { panic!("a text body") };
        let body: Value = serde_json::from_str(text).expect("the envelope");
        assert_eq!(body["error"]["code"], "INTERNAL");
        assert!(body["error"]["request_id"].as_str().is_some_and(|id| !id.is_empty()), "{body}");
        assert!(!text.contains("a bug on this path"), "the panic message stays in the log: {text}");
        assert_eq!(serve(&app, &handler, event("/fine")).await.status(), 200);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_future_deadline_is_kept_and_a_past_one_ignored() {
        let now = Instant::now();
        let now_ms = 1_780_000_000_000;
        assert_eq!(deadline_from_epoch_ms(now_ms + 29_000, now_ms, now), Some(now + Duration::from_secs(29)));
        // cargo lambda watch's fixed value, and any deadline already past.
        assert_eq!(deadline_from_epoch_ms(600_000, now_ms, now), None);
        assert_eq!(deadline_from_epoch_ms(now_ms, now_ms, now), None);
    }
}
