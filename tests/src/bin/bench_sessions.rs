//! Sessions and dedup-ledger benchmark: what the per-session dedup ledger
//! adds to a context-mode request, what a message append costs, and how
//! concurrent appends on one session behave (throughput, compare-and-swap
//! retries, exact counts), on a local store and on S3 (moto), with and
//! without a simulated per-call round trip.
//!
//! ```text
//! cargo run --release -p skald-tests --bin bench_sessions -- [--hashed] [--rounds 5] [--appends 600]
//!     [--slow-appends 100] [--concurrent 32,128] [--latency-ms 20] [--no-moto]
//! ```
//!
//! Stores: `local` (a `LocalStore` in a temporary directory); `moto` (the S3
//! client, `S3Store`, on a local moto server: `SKALD_TEST_S3_ENDPOINT`, else
//! a `python3` child started here as `skald_tests::moto` does); `moto+count`
//! (the same bucket through a loopback proxy that only logs each HTTP
//! request, used in part 3 only: store calls are counted, e.g.
//! compare-and-swap attempts); and `moto+L ms` (through the proxy, which
//! waits `--latency-ms` before forwarding each request, so every store call
//! pays one round trip; 0 skips it). The proxy is the one of
//! `bench_context`, for the same reason: a counting or latency-injecting
//! `impl Store` would have to name `bytes::Bytes`, which this crate does not
//! depend on. So calls on the local store are timed, not counted.
//!
//! 1. Ledger: the demo (`samplconfigs/demo`) is ingested (embedder USE-m3,
//!    or `HashedEmbedder::new(256)` with `--hashed`); 20 queries of
//!    `samplconfigs/retrieval-queries.json` are sent through
//!    `skald::api::search::handle` as `{"mode":"context","max_tokens":1600}`
//!    in five variants, interleaved per query (order rotated): `off` (no
//!    session), `sid` (a `session_id`, dedup off), `new` (`dedup_turns` 5 on a
//!    session that does not exist yet), `L10` (`dedup_turns` 5 on a session
//!    whose ledger holds this query's 10 served URIs, served 5 turns ago:
//!    nothing is cooled, so the work is the same as `off`) and `L500` (the
//!    same, padded to 500 records, the ledger's cap). The session's meta and
//!    ledger are written before each request (not timed). Every response is
//!    checked: dedup status, nothing cooled, the same entries as `off`. Then
//!    the ledger's store calls alone (`Sessions::meta`, `Ledger::load`,
//!    `Ledger::record`), and a 20-turn conversation with dedup on (the turn
//!    advances by one per request, so URIs served in the last 5 turns are
//!    cooled).
//! 2. Appends: `POST /api/v1/sessions/{id}/messages` through
//!    `skald::api::sessions::handle`, one after another on one session
//!    (created first, not timed): `--appends` on the fast stores,
//!    `--slow-appends` with latency. The session's counts are checked.
//! 3. Concurrency: `--concurrent` appends (each a tokio task with its own
//!    message id) started at once on one fresh session; total time,
//!    appends/s, per-append latency, failures; through the proxy, the
//!    compare-and-swap attempts (PUTs of `meta.json`) and the sequence
//!    claims that collided (PUTs under `messages/`). Afterwards the
//!    session's `total_message_count` must equal the appends that succeeded,
//!    every message object must be counted and every id remembered once.
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, VecDeque};
use std::io::Read as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lambda_http::Body;
use serde_json::{Value, json};
use skald::app::App;
use skald::config::{Config, IdentityConfig, IdentityMode};
use skald::embed::Embedder;
use skald::embed::hashed::HashedEmbedder;
use skald::embed::use_m3::UseM3Embedder;
use skald::identity::{AccountId, Identity, UserId};
use skald::ingest::{IngestOptions, ingest_dir};
use skald::ledger::{LEDGER_VERSION, Ledger, LedgerData, MAX_RECORDS, Served};
use skald::sessions::{SessionId, SessionMeta, Sessions};
use skald::store::local::LocalStore;
use skald::store::s3::S3Store;
use skald::store::s3::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use skald::store::s3::aws_sdk_s3::{Client, Config as S3Config};
use skald::store::{PutMode, SharedStore};
use skald::uri::tree_key;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

const ACCOUNT: &str = "default";
const USER: &str = "default";
const SEARCH_PATH: &str = "/api/v1/search/search";
const SESSIONS_PATH: &str = "/api/v1/sessions";
/// The key prefix inside the bench bucket.
const S3_PREFIX: &str = "root";
/// `dedup_turns` of the dedup variants (recall's default with a session).
const DEDUP_TURNS: u64 = 5;
/// `max_tokens` of every context request.
const MAX_TOKENS: u64 = 1600;

struct Args {
    rounds: usize,
    appends: usize,
    slow_appends: usize,
    concurrent: Vec<usize>,
    latency: Duration,
    hashed: bool,
    moto: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        rounds: 5,
        appends: 600,
        slow_appends: 100,
        concurrent: vec![32, 128],
        latency: Duration::from_millis(20),
        hashed: false,
        moto: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--hashed" => args.hashed = true,
            "--no-moto" => args.moto = false,
            _ => {
                let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
                let number =
                    |text: &str| text.replace('_', "").parse::<u64>().map_err(|e| format!("{flag} {text}: {e}"));
                match flag.as_str() {
                    "--rounds" => args.rounds = number(&value)?.max(1) as usize,
                    "--appends" => args.appends = number(&value)?.max(2) as usize,
                    "--slow-appends" => args.slow_appends = number(&value)?.max(2) as usize,
                    "--latency-ms" => args.latency = Duration::from_millis(number(&value)?),
                    "--concurrent" => {
                        args.concurrent =
                            value.split(',').map(|n| number(n).map(|n| n.max(1) as usize)).collect::<Result<_, _>>()?;
                    }
                    other => {
                        return Err(format!(
                            "unknown argument {other}; usage: bench_sessions [--hashed] [--rounds R] [--appends N] \
                             [--slow-appends N] [--concurrent 32,128] [--latency-ms L] [--no-moto]"
                        ));
                    }
                }
            }
        }
    }
    Ok(args)
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_sessions: {what}: {e}");
    std::process::exit(1)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Nearest-rank percentile of sorted samples.
fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted<T: Copy + PartialOrd>(values: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = values.into_iter().collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v
}

fn ms(d: Duration) -> String {
    fmt_ms(d.as_secs_f64() * 1e3)
}

fn fmt_ms(ms: f64) -> String {
    if ms.abs() >= 100.0 {
        format!("{ms:.0}")
    } else if ms.abs() >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

/// `p50 / p95 / max` of durations, in ms.
fn spread(times: &[Duration]) -> String {
    if times.is_empty() {
        return "-".to_owned();
    }
    let t = sorted(times.iter().copied());
    format!("{} / {} / {}", ms(percentile(&t, 50.0)), ms(percentile(&t, 95.0)), ms(t[t.len() - 1]))
}

fn identity() -> Identity {
    Identity {
        account: AccountId::new(ACCOUNT).unwrap_or_else(|e| fail("account", e)),
        user: UserId::new(USER).unwrap_or_else(|e| fail("user", e)),
        actor_peer: None,
    }
}

fn session_id(text: &str) -> SessionId {
    SessionId::new(text).unwrap_or_else(|e| fail("session id", e))
}

/// A short process-unique suffix for session ids.
fn fresh() -> String {
    format!("{:x}", skald::index::unique() & 0xff_ffff_ffff)
}

/// The first 10 `en` and the first 10 `zh` queries of the retrieval set
/// (as `bench_context`).
fn queries() -> Vec<String> {
    let path = repo().join("samplconfigs/retrieval-queries.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(&path.display().to_string(), e));
    let list: Vec<Value> = serde_json::from_str(&text).unwrap_or_else(|e| fail("retrieval-queries.json", e));
    let pick = |lang: &str| {
        list.iter()
            .filter(|q| q["lang"] == lang)
            .filter_map(|q| q["query"].as_str().map(str::to_owned))
            .take(10)
            .collect::<Vec<_>>()
    };
    let mut out = pick("en");
    out.extend(pick("zh"));
    out
}

// ---------------------------------------------------------------------------
// Requests.

/// A Lambda event as the default dev-mode caller.
fn event(method: &str, path: &str, body: Option<&Value>) -> lambda_http::Request {
    lambda_http::http::Request::builder()
        .method(method)
        .uri(format!("https://api.example.com{path}"))
        .header("content-type", "application/json")
        .body(body.map_or(Body::Empty, |b| Body::Text(b.to_string())))
        .unwrap_or_else(|e| fail("request", e))
}

fn parse_body(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| fail("response json", format!("{e}: {text}")))
}

/// `POST /api/v1/search/search`, timed around `skald::api::search::handle`
/// only (the library request is built before the clock starts).
async fn search(app: &App, body: &Value) -> (Duration, Value) {
    let request = skald_lambda::to_library_request(event("POST", SEARCH_PATH, Some(body)));
    let started = Instant::now();
    let response = Box::pin(skald::api::search::handle(app, request)).await;
    let time = started.elapsed();
    if response.status() != 200 {
        fail("search", format!("status {}: {}", response.status(), response.body()));
    }
    (time, parse_body(response.body()))
}

/// A sessions route, timed around `skald::api::sessions::handle`.
async fn sessions_call(app: &App, method: &str, path: &str, body: Option<&Value>) -> (Duration, u16, Value) {
    let request = skald_lambda::to_library_request(event(method, path, body));
    let started = Instant::now();
    let response = Box::pin(skald::api::sessions::handle(app, request)).await;
    let time = started.elapsed();
    (time, response.status().as_u16(), parse_body(response.body()))
}

/// Creates session `id` (untimed).
async fn create_session(app: &App, id: &str) {
    let (_, status, json) = sessions_call(app, "POST", SESSIONS_PATH, Some(&json!({ "session_id": id }))).await;
    if status != 200 {
        fail("create session", json);
    }
}

/// The session's `total_message_count` and `user_turn_count` (GET route).
async fn session_counts(app: &App, id: &str) -> (u64, u64) {
    let (_, status, json) = sessions_call(app, "GET", &format!("{SESSIONS_PATH}/{id}"), None).await;
    if status != 200 {
        fail("get session", json);
    }
    let count = |k: &str| json["result"][k].as_u64().unwrap_or_else(|| fail("session counts", &json));
    (count("total_message_count"), count("user_turn_count"))
}

fn message(i: usize, id: &str) -> Value {
    let role = if i.is_multiple_of(2) { "user" } else { "assistant" };
    let content = format!(
        "message {i}: we moved the session store to S3 conditional writes; the ledger keeps what was served \
         on which turn, and the next recall skips what the model has already seen."
    );
    json!({ "role": role, "content": content, "id": id })
}

// ---------------------------------------------------------------------------
// Stores and apps.

fn app(store: SharedStore, embedder: Arc<dyn Embedder>) -> Arc<App> {
    let config = Config {
        identity: IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() },
        ..Config::default()
    };
    Arc::new(App::with_parts(config, store, embedder))
}

async fn ingest_demo(store: &SharedStore, embedder: &dyn Embedder) -> Duration {
    let account = AccountId::new(ACCOUNT).unwrap_or_else(|e| fail("account", e));
    let started = Instant::now();
    let options = IngestOptions { abstract_max_bytes: 400, ..IngestOptions::default() };
    ingest_dir(&repo().join("samplconfigs/demo"), store, &account, embedder, &options, &mut |_| {})
        .await
        .unwrap_or_else(|e| fail("ingest samplconfigs/demo", e));
    started.elapsed()
}

fn embedder(hashed: bool) -> Arc<dyn Embedder> {
    if hashed {
        return Arc::new(HashedEmbedder::new(256));
    }
    let dir = std::env::var_os("SKALD_USE_M3_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| repo().join(".skald/models/use-m3"), PathBuf::from);
    match UseM3Embedder::open(&dir) {
        Ok(model) => Arc::new(model),
        Err(e) => {
            eprintln!("{e}\nrun scripts/setup-model.sh first (or set SKALD_USE_M3_DIR, or pass --hashed)");
            std::process::exit(2)
        }
    }
}

/// Starts moto's server on the port in `argv[1]` and keeps it up until stdin
/// reaches end of file (as `skald_tests::moto`).
const MOTO_SCRIPT: &str = r#"
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]))
server.start()
sys.stdin.read()
server.stop()
"#;

/// An S3 endpoint: `SKALD_TEST_S3_ENDPOINT`, or a moto child of this
/// process (it exits when this process closes its stdin, i.e. exits).
struct Moto {
    endpoint: String,
    _child: Option<Child>,
}

fn moto() -> Moto {
    if let Ok(endpoint) = std::env::var(skald_tests::moto::ENDPOINT_VAR)
        && !endpoint.is_empty()
    {
        return Moto { endpoint, _child: None };
    }
    let port = StdListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| fail("free port", e));
    let log = std::env::temp_dir().join(format!("skald-bench-sessions-moto-{}.log", std::process::id()));
    let log_file = std::fs::File::create(&log).unwrap_or_else(|e| fail("moto log", e));
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(MOTO_SCRIPT)
        .arg(port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .unwrap_or_else(|e| fail("python3 for moto", e));
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let started = Instant::now();
    loop {
        if StdStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            let _ = std::fs::remove_file(&log);
            return Moto { endpoint: format!("http://{address}"), _child: Some(child) };
        }
        if child.try_wait().ok().flatten().is_some() || started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let mut output = String::new();
            let _ = std::fs::File::open(&log).and_then(|mut f| f.read_to_string(&mut output));
            fail("moto did not start (pip install 'moto[server]', or set SKALD_TEST_S3_ENDPOINT)", output);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A store on `bucket` at `endpoint` (configured as `skald_tests::moto`).
fn s3_store(endpoint: &str, bucket: &str) -> S3Store {
    let config = S3Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .credentials_provider(Credentials::new("test", "test", None, None, "static"))
        .region(Region::from_static("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .build();
    S3Store::from_client(Client::from_conf(config), bucket, S3_PREFIX)
}

// ---------------------------------------------------------------------------
// The logging / latency proxy (as `bench_context`).

/// One HTTP request the proxy forwarded.
#[derive(Debug, Clone)]
struct Call {
    method: String,
    /// The request target without its query string, percent-decoded.
    path: String,
}

/// What the proxy forwarded, in arrival order.
#[derive(Debug, Default)]
struct CallLog {
    calls: Mutex<Vec<Call>>,
    /// Requests with a chunked body: after one, the rest of that connection
    /// is passed through unlogged and undelayed.
    chunked: AtomicUsize,
}

impl CallLog {
    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn push(&self, call: Call) {
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(call);
    }
}

/// Store calls by kind.
#[derive(Debug, Clone, Copy, Default)]
struct Calls {
    get: usize,
    put: usize,
    head: usize,
    list: usize,
    delete: usize,
    /// PUTs of a `meta.json` (compare-and-swap attempts and creations).
    meta_put: usize,
    /// GETs of a `meta.json`.
    meta_get: usize,
    /// PUTs under a session's `messages/` (sequence claims).
    message_put: usize,
}

impl Calls {
    fn of(calls: &[Call]) -> Self {
        let mut out = Self::default();
        for c in calls {
            // Path style: `/{bucket}` alone (plus a query) is a bucket operation: LIST.
            let is_bucket = c.path.trim_matches('/').split('/').count() <= 1;
            match c.method.as_str() {
                "GET" if is_bucket => out.list += 1,
                "GET" => {
                    out.get += 1;
                    out.meta_get += usize::from(c.path.ends_with("/meta.json"));
                }
                "PUT" => {
                    out.put += 1;
                    out.meta_put += usize::from(c.path.ends_with("/meta.json"));
                    out.message_put += usize::from(c.path.contains("/messages/"));
                }
                "HEAD" => out.head += 1,
                "DELETE" => out.delete += 1,
                _ => {}
            }
        }
        out
    }

    fn short(&self) -> String {
        let mut s = format!("{}G {}P {}H", self.get, self.put, self.head);
        if self.list > 0 {
            s.push_str(&format!(" {}L", self.list));
        }
        if self.delete > 0 {
            s.push_str(&format!(" {}D", self.delete));
        }
        s
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Starts a loopback TCP proxy to `upstream` that waits `latency` (if any)
/// before forwarding each HTTP/1.1 request (head and `content-length` body)
/// and logs it. Responses flow back unchanged.
async fn start_proxy(upstream: SocketAddr, latency: Duration, log: Arc<CallLog>) -> SocketAddr {
    let listener =
        tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap_or_else(|e| fail("proxy bind", e));
    let address = listener.local_addr().unwrap_or_else(|e| fail("proxy address", e));
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else { return };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let back = tokio::spawn(async move { tokio::io::copy(&mut server_read, &mut client_write).await });
                let _ = forward_requests(&mut client_read, &mut server_write, latency, &log).await;
                let _ = server_write.shutdown().await;
                let _ = back.await;
            });
        }
    });
    address
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// An HTTP/1.1 request head read off a connection.
struct RequestHead {
    method: String,
    path: String,
    /// Bytes of the head in the buffer.
    len: usize,
    /// `content-length` (0 when absent).
    body_len: usize,
    chunked: bool,
}

async fn read_head(
    from: &mut OwnedReadHalf,
    buf: &mut Vec<u8>,
    chunk: &mut [u8],
) -> std::io::Result<Option<RequestHead>> {
    let len = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = from.read(chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..len]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let target = request_line.next().unwrap_or_default();
    let path = percent_decode(target.split('?').next().unwrap_or_default());
    let (mut body_len, mut chunked) = (0usize, false);
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                body_len = value.trim().parse().unwrap_or(0);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            }
        }
    }
    Ok(Some(RequestHead { method, path, len, body_len, chunked }))
}

async fn forward_requests(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    latency: Duration,
    log: &CallLog,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let Some(head) = read_head(from, &mut buf, &mut chunk).await? else {
            return to.write_all(&buf).await;
        };
        log.push(Call { method: head.method, path: head.path });
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if head.chunked {
            log.chunked.fetch_add(1, Ordering::Relaxed);
            to.write_all(&buf).await?;
            tokio::io::copy(from, to).await?;
            return Ok(());
        }
        let take = (head.len + head.body_len).min(buf.len());
        to.write_all(&buf[..take]).await?;
        let mut left = head.len + head.body_len - take;
        buf.drain(..take);
        while left > 0 {
            let n = from.read(&mut chunk[..left.min(64 * 1024)]).await?;
            if n == 0 {
                return Ok(());
            }
            to.write_all(&chunk[..n]).await?;
            left -= n;
        }
    }
}

// ---------------------------------------------------------------------------
// A store under test.

struct Target {
    /// Row label.
    label: String,
    /// For session ids: `[a-z0-9]`.
    tag: &'static str,
    app: Arc<App>,
    /// The same objects without the proxy: set-up writes and sizes.
    plain: SharedStore,
    /// The proxy's log, when the app's store goes through it.
    log: Option<Arc<CallLog>>,
    /// Simulated latency per call (0: none).
    latency: Duration,
}

impl Target {
    fn take_calls(&self) -> Option<Calls> {
        self.log.as_ref().map(|log| Calls::of(&log.take()))
    }

    fn clear_log(&self) {
        if let Some(log) = &self.log {
            log.take();
        }
    }
}

/// The store key of session `id`'s `meta.json`.
fn meta_key(identity: &Identity, sessions: &Sessions<'_>, id: &SessionId) -> String {
    format!("{}/meta.json", tree_key(&identity.account, &sessions.uri(id)))
}

/// Writes session `id`'s meta with turn clock `turn` (replacing it).
async fn write_meta(store: &SharedStore, identity: &Identity, id: &SessionId, turn: u64) {
    let sessions = Sessions::new(store, identity);
    let now = "2026-11-30T00:00:00Z".to_owned();
    let meta = SessionMeta {
        session_id: id.as_str().to_owned(),
        created_at: now.clone(),
        updated_at: now,
        total_message_count: turn,
        next_seq: turn,
        user_turn_count: turn,
        recent_message_ids: VecDeque::new(),
    };
    let bytes = serde_json::to_vec(&meta).unwrap_or_else(|e| fail("meta json", e));
    store
        .put(&meta_key(identity, &sessions, id), bytes.into(), PutMode::Overwrite)
        .await
        .unwrap_or_else(|e| fail("write meta", e));
}

/// A ledger holding `served` at `turn`, padded with other URIs at `turn`
/// up to `total` records.
fn ledger_bytes(served: &[(String, String)], total: usize, turn: u64) -> Vec<u8> {
    let mut entries = BTreeMap::new();
    for (uri, detail) in served {
        entries.insert(uri.clone(), Served { turn, detail: detail.clone() });
    }
    let mut i = 0;
    while entries.len() < total {
        entries.insert(
            format!("viking://user/default/memories/events/bench/padding-{i:04}.md"),
            Served { turn, detail: "abstract".to_owned() },
        );
        i += 1;
    }
    let data = LedgerData { version: LEDGER_VERSION, updated_turn: turn, entries };
    serde_json::to_vec(&data).unwrap_or_else(|e| fail("ledger json", e))
}

/// Session `id` at turn `turn` with a ledger of `served` (padded to `total`)
/// recorded `DEDUP_TURNS` turns ago: nothing is cooled, nothing is old
/// enough to be pruned.
async fn prepare(store: &SharedStore, identity: &Identity, id: &SessionId, turn: u64, ledger: &[u8]) {
    write_meta(store, identity, id, turn).await;
    let key = Sessions::new(store, identity).ledger_key(id);
    store.put(&key, ledger.to_vec().into(), PutMode::Overwrite).await.unwrap_or_else(|e| fail("write ledger", e));
}

// ---------------------------------------------------------------------------
// 1. The ledger on a context call.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Off,
    SessionOnly,
    New,
    Ledger10,
    LedgerFull,
}

const VARIANTS: [Variant; 5] =
    [Variant::Off, Variant::SessionOnly, Variant::New, Variant::Ledger10, Variant::LedgerFull];

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Self::Off => "off (no session)",
            Self::SessionOnly => "sid, dedup 0",
            Self::New => "dedup 5, new",
            Self::Ledger10 => "dedup 5, L10",
            Self::LedgerFull => "dedup 5, L500",
        }
    }

    fn expected_status(self) -> &'static str {
        match self {
            Self::Off | Self::SessionOnly => "off",
            Self::New => "new",
            Self::Ledger10 | Self::LedgerFull => "ok",
        }
    }
}

/// One context response's figures.
#[derive(Debug, Clone)]
struct Sample {
    time: Duration,
    calls: Option<Calls>,
    cooled: usize,
    returned: usize,
}

fn context_body(query: &str) -> Value {
    json!({ "mode": "context", "max_tokens": MAX_TOKENS, "query": query })
}

/// `(uri, detail)` of every entry, in order.
fn served(json: &Value) -> Vec<(String, String)> {
    json["result"]["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (e["uri"].as_str().unwrap_or_default().to_owned(), e["detail"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

fn dedup_stats(json: &Value) -> (String, usize) {
    let d = &json["result"]["stats"]["dedup"];
    (d["status"].as_str().unwrap_or("?").to_owned(), d["cooled"].as_u64().unwrap_or(0) as usize)
}

/// The ledger's store calls alone, per request.
#[derive(Debug, Default)]
struct Pieces {
    label: &'static str,
    meta: Vec<Duration>,
    load: Vec<Duration>,
    record: Vec<Duration>,
    total: Vec<Duration>,
    ledger_bytes: u64,
}

struct LedgerResult {
    label: String,
    /// Per variant, per (round, query).
    samples: Vec<Vec<Sample>>,
    pieces: Vec<Pieces>,
    /// The 20-turn conversations.
    conversation: Vec<Sample>,
    /// Ledger records and bytes at the end of each conversation.
    conversation_ledger: Vec<(usize, u64)>,
    problems: Vec<String>,
}

async fn measure_ledger(target: &Target, queries: &[String], args: &Args) -> LedgerResult {
    let identity = identity();
    let app = &target.app;
    // Warm-up (loads the index) and each query's entries with dedup off.
    let _ = search(app, &context_body(&queries[0])).await;
    let mut reference = Vec::new();
    for q in queries {
        let (_, json) = search(app, &context_body(q)).await;
        reference.push(served(&json));
    }
    let mut problems = Vec::new();
    let mut samples: Vec<Vec<Sample>> = VARIANTS.iter().map(|_| Vec::new()).collect();
    for round in 0..=args.rounds {
        for (qi, q) in queries.iter().enumerate() {
            for k in 0..VARIANTS.len() {
                let variant = VARIANTS[(round + qi + k) % VARIANTS.len()];
                let turn = 1000 + (round * queries.len() + qi) as u64 * 10;
                let mut body = context_body(q);
                match variant {
                    Variant::Off => {}
                    Variant::SessionOnly => body["session_id"] = json!(format!("bs-{}-{qi}", target.tag)),
                    Variant::New => {
                        body["session_id"] = json!(format!("bn-{}-{qi}-{}", target.tag, fresh()));
                        body["dedup_turns"] = json!(DEDUP_TURNS);
                    }
                    Variant::Ledger10 | Variant::LedgerFull => {
                        let (name, total) = if variant == Variant::Ledger10 {
                            ("bl10", reference[qi].len())
                        } else {
                            ("bl500", MAX_RECORDS)
                        };
                        let id = session_id(&format!("{name}-{}-{qi}", target.tag));
                        let ledger = ledger_bytes(&reference[qi], total, turn - DEDUP_TURNS);
                        prepare(&target.plain, &identity, &id, turn, &ledger).await;
                        body["session_id"] = json!(id.as_str());
                        body["dedup_turns"] = json!(DEDUP_TURNS);
                    }
                }
                target.clear_log();
                let (time, json) = search(app, &body).await;
                let calls = target.take_calls();
                let (status, cooled) = dedup_stats(&json);
                let got = served(&json);
                if status != variant.expected_status() || cooled != 0 || got != reference[qi] {
                    problems.push(format!(
                        "{} / query {qi}: dedup status {status} (want {}), cooled {cooled}, same entries {}",
                        variant.label(),
                        variant.expected_status(),
                        got == reference[qi]
                    ));
                }
                // Round 0 is the warm-up pass of every variant (checked, not kept).
                if round > 0 {
                    let idx = VARIANTS.iter().position(|v| *v == variant).unwrap_or(0);
                    samples[idx].push(Sample { time, calls, cooled, returned: got.len() });
                }
            }
        }
    }

    // The ledger's store calls alone: the session's meta (the turn clock),
    // the ledger's load and its record (GET + conditional PUT).
    let mut pieces = Vec::new();
    for (label, total) in [("L10", reference[0].len()), ("L500", MAX_RECORDS)] {
        let id = session_id(&format!("bp{total}-{}", target.tag));
        let sessions = Sessions::new(&app.store, &identity);
        let key = sessions.ledger_key(&id);
        let mut p = Pieces { label, ..Pieces::default() };
        for i in 0..(args.rounds * queries.len()) {
            let turn = 1000 + i as u64 * 10;
            prepare(&target.plain, &identity, &id, turn, &ledger_bytes(&reference[0], total, turn - DEDUP_TURNS)).await;
            let started = Instant::now();
            let meta = sessions.meta(&id).await.unwrap_or_else(|e| fail("meta", e));
            let after_meta = Instant::now();
            let clock = meta.map_or(0, |(m, _)| m.user_turn_count);
            let ledger = Ledger::load(&app.store, key.clone(), clock, DEDUP_TURNS).await;
            let after_load = Instant::now();
            let status = ledger.record(&reference[0]).await;
            let done = Instant::now();
            if status != "ok" || !ledger.cooled.is_empty() {
                problems.push(format!("pieces {label}: record status {status}, cooled {}", ledger.cooled.len()));
            }
            p.meta.push(after_meta - started);
            p.load.push(after_load - after_meta);
            p.record.push(done - after_load);
            p.total.push(done - started);
        }
        p.ledger_bytes = target.plain.head(&key).await.map_or(0, |m| m.size);
        pieces.push(p);
    }

    // Conversations: the turn advances by one per request; what was served
    // in the last DEDUP_TURNS turns is cooled (excluded).
    let mut conversation = Vec::new();
    let mut conversation_ledger = Vec::new();
    for round in 0..args.rounds {
        let id = session_id(&format!("bc-{}-{round}-{}", target.tag, fresh()));
        for (qi, q) in queries.iter().enumerate() {
            write_meta(&target.plain, &identity, &id, qi as u64 + 1).await;
            let mut body = context_body(q);
            body["session_id"] = json!(id.as_str());
            body["dedup_turns"] = json!(DEDUP_TURNS);
            target.clear_log();
            let (time, json) = search(app, &body).await;
            let calls = target.take_calls();
            let (status, cooled) = dedup_stats(&json);
            let want = if qi == 0 { "new" } else { "ok" };
            if status != want {
                problems.push(format!("conversation {round} turn {}: dedup status {status}", qi + 1));
            }
            conversation.push(Sample { time, calls, cooled, returned: served(&json).len() });
        }
        let key = Sessions::new(&target.plain, &identity).ledger_key(&id);
        let object = target.plain.get(&key).await.unwrap_or_else(|e| fail("ledger", e));
        let data: LedgerData = serde_json::from_slice(&object.body).unwrap_or_else(|e| fail("ledger json", e));
        conversation_ledger.push((data.entries.len(), object.meta.size));
    }
    LedgerResult { label: target.label.clone(), samples, pieces, conversation, conversation_ledger, problems }
}

fn report_ledger(r: &LedgerResult, rounds: usize, queries: usize) {
    println!(
        "\n== {}: ledger on a context call (max_tokens {MAX_TOKENS}), {queries} queries × {rounds} rounds per \
         variant, interleaved",
        r.label
    );
    println!(
        "  {:<17} {:>22} | {:>8} {:>17} | {:>14} {:>7} {:>8}",
        "variant", "p50 / p95 / max ms", "Δp50", "paired Δ p50/p95", "calls (median)", "cooled", "returned"
    );
    let off: Vec<Duration> = r.samples[0].iter().map(|s| s.time).collect();
    let off_p50 = percentile(&sorted(off.iter().copied()), 50.0);
    for (variant, samples) in VARIANTS.iter().zip(&r.samples) {
        let times: Vec<Duration> = samples.iter().map(|s| s.time).collect();
        let p50 = percentile(&sorted(times.iter().copied()), 50.0);
        let diffs = sorted(times.iter().zip(&off).map(|(t, o)| (t.as_secs_f64() - o.as_secs_f64()) * 1e3));
        let calls: Vec<Calls> = samples.iter().filter_map(|s| s.calls).collect();
        let calls = if calls.is_empty() {
            "-".to_owned()
        } else {
            let med = |f: fn(&Calls) -> usize| percentile(&sorted(calls.iter().map(f)), 50.0);
            Calls {
                get: med(|c| c.get),
                put: med(|c| c.put),
                head: med(|c| c.head),
                list: med(|c| c.list),
                delete: med(|c| c.delete),
                ..Calls::default()
            }
            .short()
        };
        println!(
            "  {:<17} {:>22} | {:>8} {:>17} | {:>14} {:>7} {:>8}",
            variant.label(),
            spread(&times),
            if *variant == Variant::Off {
                "-".to_owned()
            } else {
                fmt_ms((p50.as_secs_f64() - off_p50.as_secs_f64()) * 1e3)
            },
            if *variant == Variant::Off {
                "-".to_owned()
            } else {
                format!("{} / {}", fmt_ms(percentile(&diffs, 50.0)), fmt_ms(percentile(&diffs, 95.0)))
            },
            calls,
            percentile(&sorted(samples.iter().map(|s| s.cooled)), 50.0),
            percentile(&sorted(samples.iter().map(|s| s.returned)), 50.0),
        );
    }
    println!(
        "  (Δp50 = p50 − p50 of off; paired Δ = per request, minus off on the same query in the same round; \
         calls = store calls seen by the proxy: G GET, P PUT, H HEAD)"
    );
    println!("  the ledger's store calls alone, p50 / p95 ms (Sessions::meta, Ledger::load, Ledger::record):");
    for p in &r.pieces {
        println!(
            "  {:<5} meta {:>16} | load {:>16} | record {:>16} | sum {:>16} | ledger object {} B",
            p.label,
            p50_p95(&p.meta),
            p50_p95(&p.load),
            p50_p95(&p.record),
            p50_p95(&p.total),
            p.ledger_bytes
        );
    }
    let times: Vec<Duration> = r.conversation.iter().map(|s| s.time).collect();
    let cooled = sorted(r.conversation.iter().map(|s| s.cooled));
    let returned = sorted(r.conversation.iter().map(|s| s.returned));
    let records = sorted(r.conversation_ledger.iter().map(|c| c.0));
    let bytes = sorted(r.conversation_ledger.iter().map(|c| c.1));
    println!(
        "  20-turn conversations with dedup 5 (turn +1 per request, {} conversations): {} ms; cooled median {} \
         [{}–{}], returned median {} [{}–{}]; ledger at the end {} records, {} B (median)",
        r.conversation_ledger.len(),
        spread(&times),
        percentile(&cooled, 50.0),
        cooled[0],
        cooled[cooled.len() - 1],
        percentile(&returned, 50.0),
        returned[0],
        returned[returned.len() - 1],
        percentile(&records, 50.0),
        percentile(&bytes, 50.0)
    );
    if r.problems.is_empty() {
        println!("  checks: every response had the expected dedup status, nothing cooled, the same entries as off");
    } else {
        println!("  ! {} problems, first ones:", r.problems.len());
        for p in r.problems.iter().take(8) {
            println!("    {p}");
        }
    }
}

fn p50_p95(times: &[Duration]) -> String {
    let t = sorted(times.iter().copied());
    format!("{} / {}", ms(percentile(&t, 50.0)), ms(percentile(&t, 95.0)))
}

// ---------------------------------------------------------------------------
// 2. Sequential appends.

struct AppendResult {
    label: String,
    times: Vec<Duration>,
    calls: Vec<Calls>,
    ok: bool,
    meta_bytes: u64,
}

async fn measure_appends(target: &Target, n: usize) -> AppendResult {
    let identity = identity();
    let id = format!("ap-{}-{}", target.tag, fresh());
    create_session(&target.app, &id).await;
    let path = format!("{SESSIONS_PATH}/{id}/messages");
    let (mut times, mut calls) = (Vec::new(), Vec::new());
    for i in 0..n {
        let body = message(i, &format!("m{i}"));
        target.clear_log();
        let (time, status, json) = sessions_call(&target.app, "POST", &path, Some(&body)).await;
        calls.extend(target.take_calls());
        if status != 200 || json["result"]["added"] != true {
            fail("append", json);
        }
        times.push(time);
    }
    let (total, user_turns) = session_counts(&target.app, &id).await;
    let sid = session_id(&id);
    let sessions = Sessions::new(&target.plain, &identity);
    let meta_bytes = target.plain.head(&meta_key(&identity, &sessions, &sid)).await.map_or(0, |m| m.size);
    AppendResult {
        label: target.label.clone(),
        times,
        calls,
        ok: total == n as u64 && user_turns == n.div_ceil(2) as u64,
        meta_bytes,
    }
}

// ---------------------------------------------------------------------------
// 3. Concurrent appends on one session.

struct ConcurrentResult {
    label: String,
    n: usize,
    total: Duration,
    times: Vec<Duration>,
    added: usize,
    failed: Vec<String>,
    count: u64,
    objects: usize,
    remembered: usize,
    calls: Option<Calls>,
}

async fn measure_concurrent(target: &Target, n: usize) -> ConcurrentResult {
    let identity = identity();
    let id = format!("cc{n}-{}-{}", target.tag, fresh());
    create_session(&target.app, &id).await;
    let path = format!("{SESSIONS_PATH}/{id}/messages");
    let requests: Vec<_> = (0..n)
        .map(|i| skald_lambda::to_library_request(event("POST", &path, Some(&message(i, &format!("c{i}"))))))
        .collect();
    target.clear_log();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for request in requests {
        let app = Arc::clone(&target.app);
        tasks.spawn(async move {
            let started = Instant::now();
            let response = Box::pin(skald::api::sessions::handle(&app, request)).await;
            (started.elapsed(), response.status().as_u16(), response.into_body())
        });
    }
    let mut times = Vec::new();
    let (mut added, mut failed) = (0, Vec::new());
    while let Some(done) = tasks.join_next().await {
        let (time, status, body) = done.unwrap_or_else(|e| fail("append task", e));
        times.push(time);
        let json = parse_body(&body);
        if status == 200 && json["result"]["added"] == true {
            added += 1;
        } else {
            failed.push(format!("{status} {}", json["error"]["code"].as_str().unwrap_or(&body)));
        }
    }
    let total = started.elapsed();
    let calls = target.take_calls();
    let (count, _) = session_counts(&target.app, &id).await;
    let sid = session_id(&id);
    let sessions = Sessions::new(&target.plain, &identity);
    let prefix = format!("{}/messages/", tree_key(&identity.account, &sessions.uri(&sid)));
    let objects = target.plain.list(&prefix).await.unwrap_or_else(|e| fail("list messages", e)).len();
    let (meta, _) = sessions.meta(&sid).await.unwrap_or_else(|e| fail("meta", e)).unwrap_or_else(|| fail("meta", id));
    let remembered =
        (0..n).filter(|i| meta.recent_message_ids.iter().filter(|m| **m == format!("c{i}")).count() == 1).count();
    ConcurrentResult { label: target.label.clone(), n, total, times, added, failed, count, objects, remembered, calls }
}

// ---------------------------------------------------------------------------

fn report_appends(results: &[AppendResult]) {
    println!("\n== message append: POST {SESSIONS_PATH}/{{id}}/messages, one after another on one session");
    println!(
        "  {:<12} {:>7} {:>22} {:>22} {:>16} {:>10} {:>6}",
        "store", "appends", "first 100 p50/p95/max", "last 100 p50/p95/max", "calls (median)", "meta.json", "check"
    );
    for r in results {
        let first: Vec<Duration> = r.times.iter().take(100).copied().collect();
        let last: Vec<Duration> = r.times.iter().skip(r.times.len().saturating_sub(100)).copied().collect();
        let calls = if r.calls.is_empty() {
            "-".to_owned()
        } else {
            let med = |f: fn(&Calls) -> usize| percentile(&sorted(r.calls.iter().map(f)), 50.0);
            Calls { get: med(|c| c.get), put: med(|c| c.put), head: med(|c| c.head), ..Calls::default() }.short()
        };
        println!(
            "  {:<12} {:>7} {:>22} {:>22} {:>16} {:>8} B {:>6}",
            r.label,
            r.times.len(),
            spread(&first),
            if r.times.len() > 100 { spread(&last) } else { "-".to_owned() },
            calls,
            r.meta_bytes,
            if r.ok { "ok" } else { "WRONG" }
        );
    }
    println!("  (check: total_message_count = appends and user_turn_count = user messages, from GET the session)");
}

fn report_concurrent(results: &[ConcurrentResult]) {
    println!("\n== concurrent appends on ONE session (tokio tasks started at once)");
    println!(
        "  {:<12} {:>4} {:>9} {:>9} {:>22} {:>9} {:>7} {:>9} {:>11} {:>9} {:>9}",
        "store",
        "n",
        "total ms",
        "appends/s",
        "per append p50/p95/max",
        "ok/failed",
        "count",
        "objects",
        "CAS tries",
        "CAS lost",
        "seq lost"
    );
    for r in results {
        let (tries, lost, seq) = match r.calls {
            Some(c) => (
                c.meta_put.to_string(),
                c.meta_put.saturating_sub(r.added).to_string(),
                c.message_put.saturating_sub(r.n).to_string(),
            ),
            None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
        };
        let count_ok = r.count == r.added as u64 && r.remembered == r.added;
        println!(
            "  {:<12} {:>4} {:>9} {:>9.0} {:>22} {:>9} {:>7} {:>9} {:>11} {:>9} {:>9}",
            r.label,
            r.n,
            ms(r.total),
            r.added as f64 / r.total.as_secs_f64(),
            spread(&r.times),
            format!("{}/{}", r.added, r.failed.len()),
            format!("{}{}", r.count, if count_ok { "" } else { "!" }),
            r.objects,
            tries,
            lost,
            seq
        );
        if !r.failed.is_empty() {
            let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
            for f in &r.failed {
                *kinds.entry(f.as_str()).or_default() += 1;
            }
            println!("    failures: {kinds:?}");
        }
        if r.objects != r.added {
            println!(
                "    {} message objects for {} counted appends: {} not counted (claimed by an append that failed)",
                r.objects,
                r.added,
                r.objects.saturating_sub(r.added)
            );
        }
        if let Some(c) = r.calls {
            println!(
                "    store calls: {} meta GETs, {} meta PUTs, {} message PUTs, {} DELETEs, {} other",
                c.meta_get,
                c.meta_put,
                c.message_put,
                c.delete,
                c.get + c.put + c.head + c.list + c.delete - c.meta_get - c.meta_put - c.message_put - c.delete
            );
        }
    }
    println!(
        "  (count = total_message_count afterwards, ! unless it equals ok and every ok id is remembered once; \
         objects = message objects in the store; CAS tries = PUTs of meta.json; CAS lost = tries − ok; \
         seq lost = sequence claims that found their slot taken)"
    );
}

async fn run(args: &Args) {
    let embedder = embedder(args.hashed);
    let queries = queries();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "embedder {}; {} queries; {} rounds; latency {} ms; load average {}",
        embedder.id(),
        queries.len(),
        args.rounds,
        args.latency.as_millis(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );

    let dir = std::env::temp_dir().join(format!("skald-bench-sessions-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let local: SharedStore = Arc::new(LocalStore::open(&dir).unwrap_or_else(|e| fail("local store", e)));
    let took = ingest_demo(&local, embedder.as_ref()).await;
    println!("ingest samplconfigs/demo into a LocalStore: {} ms", ms(took));
    let mut targets = vec![Target {
        label: "local".to_owned(),
        tag: "local",
        app: app(Arc::clone(&local), Arc::clone(&embedder)),
        plain: Arc::clone(&local),
        log: None,
        latency: Duration::ZERO,
    }];

    let moto = args.moto.then(moto);
    if let Some(moto) = &moto {
        let bucket = format!("bench-sessions-{}", std::process::id());
        let direct_s3 = s3_store(&moto.endpoint, &bucket);
        direct_s3.ensure_bucket().await.unwrap_or_else(|e| fail("bucket", e));
        let direct: SharedStore = Arc::new(direct_s3);
        let took = ingest_demo(&direct, embedder.as_ref()).await;
        println!("ingest samplconfigs/demo into S3 on moto ({}): {} ms", moto.endpoint, ms(took));
        let upstream: SocketAddr = moto
            .endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|e| fail("moto endpoint (want http://ip:port)", e));
        targets.push(Target {
            label: "moto".to_owned(),
            tag: "moto",
            app: app(Arc::clone(&direct), Arc::clone(&embedder)),
            plain: Arc::clone(&direct),
            log: None,
            latency: Duration::ZERO,
        });
        for latency in [Duration::ZERO, args.latency] {
            if latency.is_zero() && targets.iter().any(|t| t.tag == "motocount") {
                continue;
            }
            let log = Arc::new(CallLog::default());
            let proxy = start_proxy(upstream, latency, Arc::clone(&log)).await;
            let store: SharedStore = Arc::new(s3_store(&format!("http://{proxy}"), &bucket));
            let (label, tag) = if latency.is_zero() {
                ("moto+count".to_owned(), "motocount")
            } else {
                (format!("moto+{}ms", latency.as_millis()), "motoslow")
            };
            targets.push(Target {
                label,
                tag,
                app: app(store, Arc::clone(&embedder)),
                plain: Arc::clone(&direct),
                log: Some(log),
                latency,
            });
        }
    }

    let (mut ledgers, mut appends, mut concurrent) = (Vec::new(), Vec::new(), Vec::new());
    for target in &targets {
        // The counting proxy only serves the concurrency part (the others
        // count their calls with latency).
        if target.tag != "motocount" {
            let r = measure_ledger(target, &queries, args).await;
            report_ledger(&r, args.rounds, queries.len());
            ledgers.push(r);
            let n = if target.latency.is_zero() { args.appends } else { args.slow_appends };
            appends.push(measure_appends(target, n).await);
        }
        for &n in &args.concurrent {
            concurrent.push(measure_concurrent(target, n).await);
        }
        if let Some(log) = &target.log
            && log.chunked.load(Ordering::Relaxed) > 0
        {
            println!(
                "  ! {} chunked requests passed the proxy (calls after them were not counted)",
                log.chunked.load(Ordering::Relaxed)
            );
        }
    }
    report_appends(&appends);
    report_concurrent(&concurrent);

    println!("\n== summary: what the ledger adds to a context call (dedup_turns 5 vs no session), ms");
    println!(
        "  {:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "store", "off p50", "L10 p50", "Δp50", "paired Δ", "off p95", "L10 p95"
    );
    for r in &ledgers {
        let p = |v: usize, q: f64| percentile(&sorted(r.samples[v].iter().map(|s| s.time)), q);
        let diffs = sorted(
            r.samples[3].iter().zip(&r.samples[0]).map(|(a, b)| (a.time.as_secs_f64() - b.time.as_secs_f64()) * 1e3),
        );
        println!(
            "  {:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            r.label,
            ms(p(0, 50.0)),
            ms(p(3, 50.0)),
            fmt_ms((p(3, 50.0).as_secs_f64() - p(0, 50.0).as_secs_f64()) * 1e3),
            fmt_ms(percentile(&diffs, 50.0)),
            ms(p(0, 95.0)),
            ms(p(3, 95.0))
        );
    }

    drop(targets);
    drop(local);
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        eprintln!("bench_sessions: cannot remove {}: {e}", dir.display());
    }
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| fail("tokio runtime", e));
    runtime.block_on(run(&args));
}
