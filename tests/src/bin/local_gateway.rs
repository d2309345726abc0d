//! `local_gateway`: every Skald function under one base URL on loopback, for
//! the conformance runs of real clients (OpenViking's plugins, MCP's
//! conformance suite, the Python MCP client) in CI.
//!
//! It routes as `cargo lambda watch` does — by the
//! `[workspace.metadata.lambda.watch.router]` table of the root
//! `Cargo.toml`, read at start — and hands each request to its function's
//! handler through the Lambda edge (`skald_lambda::serve`, with
//! `lambda_http` types), so only the Lambda runtime API is left out. The
//! configuration comes from the environment as in the functions
//! (`SKALD_CONFIG`, `SKALD_STORE`, …).
//!
//! With `--upstream URL` it serves the same routes by forwarding each
//! request, unchanged, to a running `cargo lambda watch` at `URL` (the
//! functions' own binaries under the Lambda runtime emulator, as
//! `scripts/run-local.sh` runs them), and answers every other path itself
//! with OpenViking's 404 envelope: the watch would otherwise route
//! `/lambda-url/NAME/` to any binary of the workspace (benchmarks, tools),
//! compiling it inside the request.
//!
//! ```text
//! local_gateway [--port N] [--upstream URL]   # port 0 (default): any free port
//! ```
//!
//! Prints `listening on http://127.0.0.1:PORT` once bound, then serves
//! until killed.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use skald::app::App;
use skald::config::Config;
use tokio::net::TcpListener;

const USAGE: &str = "usage: local_gateway [--port N] [--upstream URL]   (port 0, the default: any free port)";

/// Prints `local_gateway: {what}: {e}` on stderr and exits with status 1.
fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("local_gateway: {what}: {e}");
    std::process::exit(1)
}

/// The gateway's arguments.
#[derive(Debug, Default)]
struct Args {
    /// `--port N` (or `--port=N`); 0 when absent: any free port.
    port: u16,
    /// `--upstream URL`: `http://HOST:PORT` of a `cargo lambda watch` to
    /// forward to; absent: every request is handled in-process.
    upstream: Option<String>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args::default();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
            None => (arg.clone(), None),
        };
        match name.as_str() {
            "-h" | "--help" => {
                eprintln!("{USAGE}");
                std::process::exit(0)
            }
            "--port" | "--upstream" => {
                let value = match inline {
                    Some(value) => value,
                    None => args.next().ok_or_else(|| format!("{name} needs a value; {USAGE}"))?,
                };
                if name == "--port" {
                    parsed.port = value.parse().map_err(|e| format!("--port {value}: {e}"))?;
                } else {
                    let authority = value
                        .strip_prefix("http://")
                        .map(|a| a.trim_end_matches('/'))
                        .filter(|a| !a.is_empty() && !a.contains('/'))
                        .ok_or_else(|| format!("--upstream {value}: not http://HOST:PORT"))?;
                    parsed.upstream = Some(authority.to_owned());
                }
            }
            other => return Err(format!("unknown argument {other}; {USAGE}")),
        }
    }
    Ok(parsed)
}

/// `(path pattern, function)` pairs of the watch router.
type Router = Vec<(String, String)>;

fn router() -> Router {
    let manifest = include_str!("../../../Cargo.toml");
    let section = manifest.lines().map(str::trim).skip_while(|l| *l != "[workspace.metadata.lambda.watch.router]");
    section
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(p, f)| (p.trim().trim_matches('"').to_owned(), f.trim().trim_matches('"').to_owned()))
        .collect()
}

/// Whether router `pattern` (`{name}` one segment, `{*name}` the rest)
/// matches `path`.
fn matches(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.trim_matches('/').split('/').collect();
    let path: Vec<&str> = path.trim_matches('/').split('/').collect();
    for (i, segment) in pattern.iter().enumerate() {
        if segment.starts_with("{*") {
            return path.len() > i;
        }
        match path.get(i) {
            Some(actual) if segment == actual || (segment.starts_with('{') && segment.ends_with('}')) => {}
            _ => return false,
        }
    }
    pattern.len() == path.len()
}

/// OpenViking's 404 envelope for a path no function serves.
fn not_found(parts: &http::request::Parts) -> hyper::Response<Full<Bytes>> {
    let error = skald::api::error::ApiError::NotFound(format!("no route {} {}", parts.method, parts.uri.path()));
    let (head, body) = skald::api::error_response(&error).into_parts();
    hyper::Response::from_parts(head, Full::new(Bytes::from(body)))
}

/// Sends the request on to the `cargo lambda watch` at `upstream` (one
/// connection per request: loopback) and relays its answer; 503 in
/// OpenViking's envelope when the watch cannot be reached.
async fn forward(upstream: &str, mut parts: http::request::Parts, body: Bytes) -> hyper::Response<Full<Bytes>> {
    let relayed = async {
        let stream = tokio::net::TcpStream::connect(upstream).await.map_err(|e| e.to_string())?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        parts.headers.insert(http::header::HOST, http::HeaderValue::from_str(upstream).map_err(|e| e.to_string())?);
        let response =
            sender.send_request(hyper::Request::from_parts(parts, Full::new(body))).await.map_err(|e| e.to_string())?;
        let (head, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok::<_, String>(hyper::Response::from_parts(head, Full::new(body)))
    };
    match relayed.await {
        Ok(response) => response,
        Err(e) => {
            let error = skald::api::error::ApiError::Unavailable(format!("the functions at {upstream}: {e}"));
            let (head, body) = skald::api::error_response(&error).into_parts();
            hyper::Response::from_parts(head, Full::new(Bytes::from(body)))
        }
    }
}

async fn handle(
    app: Arc<App>,
    router: Arc<Router>,
    upstream: Option<Arc<str>>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let route = router.iter().find(|(p, _)| matches(p, parts.uri.path()));
    let Some((pattern, function)) = route.map(|(p, f)| (p.clone(), f.clone())) else {
        return Ok(not_found(&parts));
    };
    if let Some(upstream) = upstream {
        // The router's catch-all is answered here: forwarded, the watch
        // would route `/lambda-url/NAME/…` to any binary of the workspace.
        if pattern.starts_with("/{*") {
            return Ok(not_found(&parts));
        }
        return Ok(forward(&upstream, parts, body).await);
    }
    let body = match String::from_utf8(body.to_vec()) {
        Ok(text) if text.is_empty() => lambda_http::Body::Empty,
        Ok(text) => lambda_http::Body::Text(text),
        Err(e) => lambda_http::Body::Binary(e.into_bytes()),
    };
    let event = lambda_http::Request::from_parts(parts, body);
    let handler = |app: Arc<App>, request: http::Request<Bytes>| {
        let function = function.clone();
        async move {
            skald_tests::gateway::dispatch(&function, app, request).await.unwrap_or_else(|| {
                let error = skald::api::error::ApiError::NotFound(format!("no function {function} in this gateway"));
                skald::api::error_response(&error)
            })
        }
    };
    let response = skald_lambda::serve(&app, &handler, event).await;
    let (parts, body) = response.into_parts();
    let bytes = match body {
        lambda_http::Body::Text(text) => Bytes::from(text),
        lambda_http::Body::Binary(data) => Bytes::from(data),
        _ => Bytes::new(),
    };
    Ok(hyper::Response::from_parts(parts, Full::new(bytes)))
}

#[tokio::main]
async fn main() {
    skald_lambda::init_tracing();
    let args = parse_args(std::env::args().skip(1)).unwrap_or_else(|e| fail("arguments", e));
    let upstream: Option<Arc<str>> = args.upstream.map(Arc::from);
    let config = Config::from_env().unwrap_or_else(|e| fail("configuration", e));
    let app = Arc::new(App::new(config).await.unwrap_or_else(|e| fail("init", e)));
    let router = Arc::new(router());
    let listener =
        TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port))).await.unwrap_or_else(|e| fail("bind", e));
    let addr = listener.local_addr().unwrap_or_else(|e| fail("bind", e));
    #[allow(clippy::print_stdout)] // the one line scripts wait for
    {
        println!("listening on http://{addr}");
    }
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let (app, router, upstream) = (Arc::clone(&app), Arc::clone(&router), upstream.clone());
        tokio::spawn(async move {
            let service =
                service_fn(move |request| handle(Arc::clone(&app), Arc::clone(&router), upstream.clone(), request));
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}
