//! Context-mode benchmark: `POST /api/v1/search/search` with
//! `mode = "context"`, end to end through `skald::api::search::handle`, over
//! the demo corpus; where the time goes (revalidation HEAD, query embedding,
//! search, plan, reads, render); the store calls a request makes when every
//! call costs a round trip; and the planner alone on 1,000 candidates.
//!
//! ```text
//! scripts/setup-model.sh        # once (the USE-m3 model), unless --hashed
//! cargo run --release -p skald-tests --bin bench_context -- [--rounds 5] [--latency-ms 20]
//!     [--hashed] [--no-moto] [--plan-runs 300] [--seed 1]
//! ```
//!
//! 1. Local store: the demo (`samplconfigs/demo`) is ingested into a
//!    `LocalStore` in a temporary directory with the embedded USE-m3
//!    embedder (`--hashed`: `HashedEmbedder::new(256)`), and 20 queries of
//!    `samplconfigs/retrieval-queries.json` (the first 10 `en` and 10 `zh`)
//!    are sent with `max_tokens` 1600, `max_tokens` 4000 and
//!    `detail = "abstract"`: one checked warm-up pass, then R timed rounds,
//!    then R rounds of the same line run piece by piece for the phases.
//!    Three more shapes are only checked, not timed: `max_tokens` 300 and
//!    `detail = "full"` (both drop entries) and `limit` 40 with `max_tokens`
//!    8000 (about 20 reads, more than one window of 8).
//! 2. The S3 client (`S3Store`) over the same local store through a small
//!    in-process S3-protocol server (GET and HEAD only), first directly,
//!    then through a loopback TCP proxy that waits `--latency-ms` before
//!    forwarding each HTTP request (one store call = one request, so every
//!    HEAD and GET pays one simulated round trip) and logs its method, key
//!    and arrival time.
//! 3. The same against S3 on a local moto server (`SKALD_TEST_S3_ENDPOINT`,
//!    else a moto child started here as `skald_tests::moto` does; skipped
//!    with `--no-moto`): direct, then through the proxy.
//! 4. The planner (`skald::assemble::plan::plan`) on synthetic candidates.
//!
//! The proxy stands in for a latency-injecting `Store` wrapper: implementing
//! `skald::store::Store` needs `bytes::Bytes` in `put`'s signature, and this
//! crate does not depend on `bytes`. Every request of the warm-up pass is
//! checked: `stats.bytes_read` must equal the sizes of the objects behind
//! the entries returned at `overview` or `full` (so nothing was read for a
//! dropped entry), and through the proxy the calls must be exactly one HEAD
//! of the manifest plus one GET of each of those objects.
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeSet, HashMap};
use std::hint::black_box;
use std::io::Read as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_http::Body;
use serde_json::{Value, json};
use skald::app::App;
use skald::assemble::candidate::{Candidate, Origin};
use skald::assemble::params::{Detail, Tier};
use skald::assemble::plan::{self, PlanRequest};
use skald::assemble::render::{self, EntryView};
use skald::assemble::{gather, read};
use skald::config::{Config, IdentityConfig, IdentityMode};
use skald::embed::Embedder;
use skald::embed::hashed::HashedEmbedder;
use skald::embed::use_m3::UseM3Embedder;
use skald::identity::{AccountId, Identity, UserId};
use skald::index::record::LEVEL_FILE;
use skald::index::{Category, Exclusion};
use skald::ingest::{IngestOptions, OVERVIEW_SIDECAR, ingest_dir};
use skald::store::SharedStore;
use skald::store::local::LocalStore;
use skald::store::s3::S3Store;
use skald::store::s3::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use skald::store::s3::aws_sdk_s3::{Client, Config as S3Config};
use skald::uri::{VikingUri, tree_key};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

const ACCOUNT: &str = "default";
const USER: &str = "default";
const PATH: &str = "/api/v1/search/search";
/// Reads in flight at once (`skald::assemble::read::READ_CONCURRENCY`).
const READ_CONCURRENCY: usize = read::READ_CONCURRENCY;
/// The key prefix inside the bench bucket.
const S3_PREFIX: &str = "root";

struct Args {
    rounds: usize,
    latency: Duration,
    hashed: bool,
    moto: bool,
    plan_runs: usize,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args =
        Args { rounds: 5, latency: Duration::from_millis(20), hashed: false, moto: true, plan_runs: 300, seed: 1 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--hashed" => args.hashed = true,
            "--no-moto" => args.moto = false,
            _ => {
                let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
                let number = || value.replace('_', "").parse::<u64>().map_err(|e| format!("{flag} {value}: {e}"));
                match flag.as_str() {
                    "--rounds" => args.rounds = number()?.max(1) as usize,
                    "--latency-ms" => args.latency = Duration::from_millis(number()?),
                    "--plan-runs" => args.plan_runs = number()?.max(1) as usize,
                    "--seed" => args.seed = number()?,
                    other => {
                        return Err(format!(
                            "unknown argument {other}; usage: bench_context [--rounds R] [--latency-ms L] \
                             [--hashed] [--no-moto] [--plan-runs N] [--seed X]"
                        ));
                    }
                }
            }
        }
    }
    Ok(args)
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_context: {what}: {e}");
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

fn median<T: Copy + Ord>(values: &[T]) -> T {
    let mut v = values.to_vec();
    v.sort();
    percentile(&v, 50.0)
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

// ---------------------------------------------------------------------------
// Queries, settings, requests.

/// The first 10 `en` and the first 10 `zh` queries of the retrieval set.
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

/// One request shape: a label and the body fields besides `query`.
struct Setting {
    label: &'static str,
    fields: Value,
    /// Timed; otherwise only the checked pass runs (shapes that drop entries).
    timed: bool,
}

fn settings() -> Vec<Setting> {
    let setting = |label, fields, timed| Setting { label, fields, timed };
    vec![
        setting("max_tokens 1600", json!({"mode": "context", "max_tokens": 1600}), true),
        setting("max_tokens 4000", json!({"mode": "context", "max_tokens": 4000}), true),
        setting("detail abstract", json!({"mode": "context", "detail": "abstract"}), true),
        setting("max_tokens 300", json!({"mode": "context", "max_tokens": 300}), false),
        setting("detail full", json!({"mode": "context", "detail": "full"}), false),
        setting("limit 40, 8000", json!({"mode": "context", "limit": 40, "max_tokens": 8000}), false),
    ]
}

fn body(setting: &Setting, query: &str) -> String {
    let mut body = setting.fields.clone();
    body["query"] = json!(query);
    body.to_string()
}

/// A Lambda event POSTing `body` as the default dev-mode caller.
fn event(body: String) -> lambda_http::Request {
    lambda_http::http::Request::builder()
        .method("POST")
        .uri(format!("https://api.example.com{PATH}"))
        .header("content-type", "application/json")
        .body(Body::Text(body))
        .unwrap_or_else(|e| fail("request", e))
}

fn identity() -> Identity {
    Identity {
        account: AccountId::new(ACCOUNT).unwrap_or_else(|e| fail("account", e)),
        user: UserId::new(USER).unwrap_or_else(|e| fail("user", e)),
        actor_peer: None,
    }
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

// ---------------------------------------------------------------------------
// Apps.

fn app(store: SharedStore, embedder: Arc<dyn Embedder>) -> App {
    let config = Config {
        identity: IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() },
        ..Config::default()
    };
    App::with_parts(config, store, embedder)
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

/// Which indexed URIs are directories (their overview lives in a sidecar).
async fn directories(app: &App) -> HashMap<String, bool> {
    let account = AccountId::new(ACCOUNT).unwrap_or_else(|e| fail("account", e));
    let snapshot = app.index.snapshot(&account).await.unwrap_or_else(|e| fail("index", e));
    let mut out: HashMap<String, bool> = HashMap::new();
    for (record, _) in snapshot.records() {
        *out.entry(record.uri.as_str().to_owned()).or_default() |= record.level != LEVEL_FILE;
    }
    out
}

// ---------------------------------------------------------------------------
// The latency proxy.

/// One HTTP request the proxy forwarded.
#[derive(Debug, Clone)]
struct Call {
    /// When its head arrived at the proxy.
    at: Instant,
    method: String,
    /// The request target without its query string, percent-decoded.
    path: String,
}

/// What the proxy forwarded, in arrival order.
#[derive(Debug, Default)]
struct CallLog(Mutex<Vec<Call>>);

impl CallLog {
    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn push(&self, call: Call) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(call);
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

/// Starts a loopback TCP proxy to `upstream` that waits `latency` before
/// forwarding each HTTP/1.1 request (head and `content-length` body) and
/// logs it. Responses flow back unchanged. A chunked request body is passed
/// through without further parsing (the S3 reads measured here have none).
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
    /// The target without its query string, percent-decoded.
    path: String,
    /// Bytes of the head in the buffer.
    len: usize,
    /// `content-length` (0 when absent).
    body_len: usize,
    /// `transfer-encoding: chunked`.
    chunked: bool,
}

/// Reads from `from` into `buf` until `buf` starts with a whole request
/// head, and parses it; `None` at end of stream.
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
        log.push(Call { at: Instant::now(), method: head.method, path: head.path });
        tokio::time::sleep(latency).await;
        if head.chunked {
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
// An S3-protocol server over a local store.

/// Serves `GET` and `HEAD` of objects (path style, `/{bucket}/root/{key}`)
/// from `store` on a loopback port, with keep-alive: enough of S3 for
/// `S3Store::get` and `S3Store::head`, so that the S3 client can run over
/// the local store without moto. Other requests get 501.
async fn start_s3_over(store: SharedStore, bucket: String) -> SocketAddr {
    let listener =
        tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap_or_else(|e| fail("s3 server bind", e));
    let address = listener.local_addr().unwrap_or_else(|e| fail("s3 server address", e));
    let prefix = format!("/{bucket}/{S3_PREFIX}/");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (store, prefix) = (Arc::clone(&store), prefix.clone());
            tokio::spawn(async move {
                let _ = socket.set_nodelay(true);
                let (mut reader, mut writer) = socket.into_split();
                let _ = serve_s3(&mut reader, &mut writer, &store, &prefix).await;
            });
        }
    });
    address
}

async fn serve_s3(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    store: &SharedStore,
    prefix: &str,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while let Some(head) = read_head(from, &mut buf, &mut chunk).await? {
        // Skip a body (none expected).
        let end = head.len + head.body_len;
        while buf.len() < end {
            let n = from.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        buf.drain(..end);
        let key = head.path.strip_prefix(prefix).unwrap_or_default().to_owned();
        let meta_head = |status: &str, etag: &str, size: u64| {
            format!(
                "HTTP/1.1 {status}\r\nContent-Length: {size}\r\nETag: \"{etag}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
        };
        let not_found = |method: &str| {
            let body = if method == "HEAD" {
                String::new()
            } else {
                format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code><Key>{key}</Key></Error>"
                )
            };
            format!(
                "HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        let response: Vec<u8> = match head.method.as_str() {
            _ if key.is_empty() || head.chunked => {
                b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
            }
            "GET" => match store.get(&key).await {
                Ok(object) => {
                    let mut out = meta_head("200 OK", &object.meta.etag, object.meta.size).into_bytes();
                    out.extend_from_slice(&object.body);
                    out
                }
                Err(_) => not_found("GET").into_bytes(),
            },
            "HEAD" => match store.head(&key).await {
                Ok(meta) => meta_head("200 OK", &meta.etag, meta.size).into_bytes(),
                Err(_) => not_found("HEAD").into_bytes(),
            },
            _ => b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
        };
        to.write_all(&response).await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Moto.

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
    let log = std::env::temp_dir().join(format!("skald-bench-context-moto-{}.log", std::process::id()));
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
// Measuring one store.

/// One response's figures.
#[derive(Debug, Clone, Default)]
struct Sample {
    time: Duration,
    reads: usize,
    bytes_read: u64,
    candidates: usize,
    returned: usize,
    dropped: usize,
    used_tokens: usize,
    /// Store calls seen by the proxy: HEAD, GET, other.
    calls: Option<(usize, usize, usize)>,
    /// From the first GET's arrival at the proxy to the last one's.
    get_spread: Option<Duration>,
    /// Read rounds with `read_planned`'s ordered window (see [`window_rounds`]).
    window_rounds: usize,
}

impl Sample {
    /// Read rounds if any 8 reads could be in flight at once.
    fn rounds(&self) -> usize {
        self.reads.div_ceil(READ_CONCURRENCY)
    }
}

/// Read rounds of `read_planned`, whose `buffered(READ_CONCURRENCY)` runs
/// over every plan entry in rank order, reads or not, and frees a slot only
/// when the oldest entry is yielded: entry k + 8 starts once entries 0..=k
/// are done. With each read taking one round and other entries none, the
/// rounds the last entry finishes in. `reads[i]`: entry i is read.
fn window_rounds(reads: &[bool]) -> usize {
    let mut yielded: Vec<usize> = Vec::with_capacity(reads.len());
    for (k, read) in reads.iter().enumerate() {
        let start = if k < READ_CONCURRENCY { 0 } else { yielded[k - READ_CONCURRENCY] };
        let finish = start + usize::from(*read);
        yielded.push(finish.max(yielded.last().copied().unwrap_or(0)));
    }
    yielded.last().copied().unwrap_or(0)
}

/// Which response entries were read (shown at overview or full), in order.
fn read_entries(json: &Value) -> Vec<bool> {
    json["result"]["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| matches!(e["detail"].as_str(), Some("overview" | "full")))
        .collect()
}

/// Median time per phase of the assembly line, run piece by piece.
#[derive(Debug, Clone, Default)]
struct Phases {
    head: Vec<Duration>,
    embed: Vec<Duration>,
    search: Vec<Duration>,
    plan: Vec<Duration>,
    reads: Vec<Duration>,
    render: Vec<Duration>,
}

/// What one store's run gives per setting.
struct SettingResult {
    label: &'static str,
    /// Samples are timed rounds (else the checked pass only).
    timed: bool,
    samples: Vec<Sample>,
    phases: Phases,
    verified: usize,
    checked: usize,
}

/// Everything the caller needs to know about one store under test.
struct Target<'a> {
    app: &'a App,
    /// The same objects without latency, for sizes.
    sizes: &'a SharedStore,
    /// The proxy's log, when the app's store goes through it.
    log: Option<&'a CallLog>,
    directories: &'a HashMap<String, bool>,
}

async fn handle(app: &App, body: String) -> (Duration, Value) {
    // The library request, as the Lambda edge builds it (before the clock starts).
    let request = skald_lambda::to_library_request(event(body));
    let started = Instant::now();
    let response = Box::pin(skald::api::search::handle(app, request)).await;
    let time = started.elapsed();
    if response.status() != 200 {
        fail("search", format!("status {}: {}", response.status(), response.body()));
    }
    let json: Value = serde_json::from_str(response.body()).unwrap_or_else(|e| fail("response json", e));
    (time, json)
}

fn stat(json: &Value, key: &str) -> usize {
    json["result"]["stats"][key].as_u64().unwrap_or(0) as usize
}

fn sample(time: Duration, json: &Value, calls: Option<&[Call]>) -> Sample {
    let count = |c: &[Call], m: &str| c.iter().filter(|c| c.method == m).count();
    Sample {
        time,
        reads: stat(json, "reads"),
        bytes_read: json["result"]["stats"]["bytes_read"].as_u64().unwrap_or(0),
        candidates: stat(json, "candidates"),
        returned: stat(json, "returned"),
        dropped: stat(json, "dropped"),
        used_tokens: stat(json, "used_tokens"),
        calls: calls.map(|c| (count(c, "HEAD"), count(c, "GET"), c.len() - count(c, "HEAD") - count(c, "GET"))),
        get_spread: calls.and_then(|c| {
            let gets: Vec<Instant> = c.iter().filter(|c| c.method == "GET").map(|c| c.at).collect();
            Some(gets.iter().max()?.duration_since(*gets.iter().min()?))
        }),
        window_rounds: window_rounds(&read_entries(json)),
    }
}

/// Checks one response: `bytes_read` is the size of the objects behind the
/// entries at overview/full, and (through the proxy) the GETs are exactly
/// those objects. Returns a problem, if any.
async fn verify(target: &Target<'_>, json: &Value, calls: Option<&[Call]>) -> Option<String> {
    let account = AccountId::new(ACCOUNT).unwrap_or_else(|e| fail("account", e));
    let mut expected = BTreeSet::new();
    for entry in json["result"]["entries"].as_array().into_iter().flatten() {
        if !matches!(entry["detail"].as_str(), Some("overview" | "full")) {
            continue;
        }
        let text = entry["uri"].as_str().unwrap_or_default();
        let uri = VikingUri::parse(text).unwrap_or_else(|e| fail("entry uri", e));
        let is_directory = target.directories.get(text).copied().unwrap_or(false);
        let node = if is_directory { uri.join(OVERVIEW_SIDECAR).unwrap_or_else(|e| fail("sidecar", e)) } else { uri };
        expected.insert(tree_key(&account, &node));
    }
    let mut size = 0;
    for key in &expected {
        size += target.sizes.head(key).await.unwrap_or_else(|e| fail("head", e)).size;
    }
    let bytes_read = json["result"]["stats"]["bytes_read"].as_u64().unwrap_or(0);
    let reads = stat(json, "reads");
    if bytes_read != size || reads != expected.len() {
        return Some(format!(
            "stats say {reads} reads / {bytes_read} B; the {} overview/full entries' objects are {size} B",
            expected.len()
        ));
    }
    if let Some(calls) = calls {
        let strip = |path: &str| {
            path.trim_start_matches('/').split_once('/').map(|(_bucket, key)| key.to_owned()).unwrap_or_default()
        };
        let got: Vec<String> = calls
            .iter()
            .filter(|c| c.method == "GET")
            .map(|c| strip(&c.path).strip_prefix(&format!("{S3_PREFIX}/")).unwrap_or_default().to_owned())
            .collect();
        let got_set: BTreeSet<String> = got.iter().cloned().collect();
        if got_set != expected || got.len() != expected.len() {
            return Some(format!("GETs {got:?}, overview/full entries' objects {expected:?}"));
        }
        let manifest = format!("{S3_PREFIX}/{}", skald::index::manifest_key(&account));
        let heads: Vec<String> = calls.iter().filter(|c| c.method == "HEAD").map(|c| strip(&c.path)).collect();
        if heads != [manifest] || calls.len() != heads.len() + got.len() {
            return Some(format!("HEADs {heads:?} (want the manifest once), {} calls in all", calls.len()));
        }
    }
    None
}

/// The assembly line piece by piece (the library's own functions, in the
/// order `skald::assemble::assemble` calls them).
async fn phases(app: &App, identity: &Identity, body: &str, out: &mut Phases) {
    let request = skald::api::search::parse(body.as_bytes(), now()).unwrap_or_else(|e| fail("parse", e));
    let params = &request.assemble;
    let exclusion = Exclusion { subtrees: params.exclude.clone(), ..Exclusion::default() };

    let started = Instant::now();
    let snapshot = skald::find::checked_snapshot(app, identity).await.unwrap_or_else(|e| fail("snapshot", e));
    out.head.push(started.elapsed());

    let started = Instant::now();
    let texts: Vec<&str> = params.queries.iter().map(String::as_str).collect();
    let vectors = app.embedder.embed(&texts).await.unwrap_or_else(|e| fail("embed", e));
    out.embed.push(started.elapsed());

    let started = Instant::now();
    let gathered = gather::gather(&snapshot, identity, params, &vectors, &exclusion);
    out.search.push(started.elapsed());

    let started = Instant::now();
    let candidates = &gathered.candidates;
    let request = PlanRequest {
        max_tokens: params.max_tokens,
        detail: &params.detail,
        events_budget_share: params.events_budget_share,
    };
    let planned = plan::plan(candidates, &request);
    out.plan.push(started.elapsed());

    let started = Instant::now();
    let reads = read::read_planned(&app.store, &identity.account, candidates, &planned).await;
    out.reads.push(started.elapsed());

    let started = Instant::now();
    let views: Vec<EntryView<'_>> = planned
        .entries
        .iter()
        .zip(&reads.texts)
        .map(|(p, (tier, text))| {
            let c = &candidates[p.candidate];
            EntryView { uri: c.uri.as_str(), category: c.category.as_str(), score: c.score, tier: *tier, text }
        })
        .collect();
    let rendered = render::render(&views);
    black_box(skald::tokens::estimate_tokens(&rendered));
    out.render.push(started.elapsed());
}

async fn measure(target: &Target<'_>, queries: &[String], args: &Args) -> Vec<SettingResult> {
    let identity = identity();
    // The first request loads the index (manifest and segments): not measured.
    let _ = handle(target.app, body(&settings()[0], &queries[0])).await;
    if let Some(log) = target.log {
        log.take();
    }
    let mut results = Vec::new();
    for setting in settings() {
        // Warm-up pass, checked.
        let (mut verified, mut checked) = (0, 0);
        let mut samples = Vec::new();
        for q in queries {
            if let Some(log) = target.log {
                log.take();
            }
            let (time, json) = handle(target.app, body(&setting, q)).await;
            let calls = target.log.map(CallLog::take);
            checked += 1;
            match verify(target, &json, calls.as_deref()).await {
                None => verified += 1,
                Some(problem) => println!("  ! {} / {q}: {problem}", setting.label),
            }
            if !setting.timed {
                samples.push(sample(time, &json, calls.as_deref()));
            }
        }
        if !setting.timed {
            results.push(SettingResult {
                label: setting.label,
                timed: false,
                samples,
                phases: Phases::default(),
                verified,
                checked,
            });
            continue;
        }
        for _ in 0..args.rounds {
            for q in queries {
                if let Some(log) = target.log {
                    log.take();
                }
                let (time, json) = handle(target.app, body(&setting, q)).await;
                let calls = target.log.map(CallLog::take);
                samples.push(sample(time, &json, calls.as_deref()));
            }
        }
        let mut phase_times = Phases::default();
        for _ in 0..args.rounds {
            for q in queries {
                phases(target.app, &identity, &body(&setting, q), &mut phase_times).await;
            }
        }
        results.push(SettingResult {
            label: setting.label,
            timed: true,
            samples,
            phases: phase_times,
            verified,
            checked,
        });
    }
    results
}

fn report(name: &str, results: &[SettingResult], queries: usize, rounds: usize) {
    println!("== {name}: {queries} queries × {rounds} rounds per setting (after one checked warm-up pass)");
    println!(
        "  {:<16} {:>7} {:>7} {:>7} | {:>5} {:>3} {:>3} {:>8} {:>5} {:>5} {:>5} {:>5} | checked",
        "setting", "p50", "p95", "max", "reads", "rnd", "win", "bytes", "cand", "ret", "drop", "used"
    );
    for r in results.iter().filter(|r| r.timed) {
        let mut times: Vec<Duration> = r.samples.iter().map(|s| s.time).collect();
        times.sort();
        let med = |f: fn(&Sample) -> usize| median(&r.samples.iter().map(f).collect::<Vec<_>>());
        let bytes = median(&r.samples.iter().map(|s| s.bytes_read).collect::<Vec<_>>());
        println!(
            "  {:<16} {:>7} {:>7} {:>7} | {:>5} {:>3} {:>3} {:>8} {:>5} {:>5} {:>5} {:>5} | {}/{} ok",
            r.label,
            ms(percentile(&times, 50.0)),
            ms(percentile(&times, 95.0)),
            ms(times[times.len() - 1]),
            med(|s| s.reads),
            med(Sample::rounds),
            med(|s| s.window_rounds),
            bytes,
            med(|s| s.candidates),
            med(|s| s.returned),
            med(|s| s.dropped),
            med(|s| s.used_tokens),
            r.verified,
            r.checked
        );
    }
    println!(
        "  (medians of stats; rnd = ceil(reads / 8); win = read rounds under read_planned's ordered window; \
         checked = warm-up requests whose reads were exactly the overview/full entries)"
    );
    println!("  checked only (shapes that drop entries; the warm-up pass, untimed), median [min–max]:");
    for r in results.iter().filter(|r| !r.timed) {
        let range = |f: fn(&Sample) -> usize| {
            let v: Vec<usize> = r.samples.iter().map(f).collect();
            let (lo, hi) = (v.iter().min().copied().unwrap_or(0), v.iter().max().copied().unwrap_or(0));
            format!("{} [{lo}–{hi}]", median(&v))
        };
        println!(
            "  {:<16} candidates {}, returned {}, dropped {}, reads {} | {}/{} ok",
            r.label,
            range(|s| s.candidates),
            range(|s| s.returned),
            range(|s| s.dropped),
            range(|s| s.reads),
            r.verified,
            r.checked
        );
    }
    println!("  phases, median ms: head = index revalidation (HEAD), search = gather, reads = read_planned");
    println!(
        "  {:<16} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7}",
        "setting", "head", "embed", "search", "plan", "reads", "render", "sum", "e2e p50", "other"
    );
    for r in results.iter().filter(|r| r.timed) {
        let p = &r.phases;
        let parts = [&p.head, &p.embed, &p.search, &p.plan, &p.reads, &p.render].map(|v| median(v));
        let sum: Duration = parts.iter().sum();
        let e2e = median(&r.samples.iter().map(|s| s.time).collect::<Vec<_>>());
        println!(
            "  {:<16} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7}",
            r.label,
            ms(parts[0]),
            ms(parts[1]),
            ms(parts[2]),
            ms(parts[3]),
            ms(parts[4]),
            ms(parts[5]),
            ms(sum),
            ms(e2e),
            if e2e >= sum { ms(e2e - sum) } else { format!("-{}", ms(sum - e2e)) }
        );
    }
}

/// Store calls per request through the proxy, and the measured time against
/// the latency floor `(1 HEAD + read rounds) × latency`.
fn report_latency(results: &[SettingResult], baseline: &[SettingResult], latency: Duration) {
    println!(
        "  per request: store calls seen by the proxy, median [min–max]; read rounds ideal = ceil(reads / 8), \
         window = read_planned's ordered window"
    );
    println!(
        "  {:<16} {:>7} {:>9} {:>5} {:>9} {:>7} | {:>7} {:>8} {:>8} {:>7} {:>7} {:>10}",
        "setting",
        "HEAD",
        "GET",
        "ideal",
        "window",
        "spread",
        "p50",
        "floor id",
        "floor wd",
        "excess",
        "no-lat",
        "sequential"
    );
    let results: Vec<&SettingResult> = results.iter().filter(|r| r.timed).collect();
    let baseline: Vec<&SettingResult> = baseline.iter().filter(|r| r.timed).collect();
    for (r, base) in results.iter().zip(&baseline) {
        let calls: Vec<(usize, usize, usize)> = r.samples.iter().filter_map(|s| s.calls).collect();
        let range = |v: Vec<usize>| {
            let (lo, hi) = (v.iter().min().copied().unwrap_or(0), v.iter().max().copied().unwrap_or(0));
            format!("{} [{lo}–{hi}]", median(&v))
        };
        let times = |f: &dyn Fn(&Sample) -> Duration| median(&r.samples.iter().map(f).collect::<Vec<_>>());
        let spreads: Vec<Duration> = r.samples.iter().filter_map(|s| s.get_spread).collect();
        let others: usize = calls.iter().map(|c| c.2).sum();
        println!(
            "  {:<16} {:>7} {:>9} {:>5} {:>9} {:>7} | {:>7} {:>8} {:>8} {:>7} {:>7} {:>10}",
            r.label,
            range(calls.iter().map(|c| c.0).collect()),
            range(calls.iter().map(|c| c.1).collect()),
            median(&r.samples.iter().map(Sample::rounds).collect::<Vec<_>>()),
            range(r.samples.iter().map(|s| s.window_rounds).collect()),
            if spreads.is_empty() { "-".to_owned() } else { ms(median(&spreads)) },
            ms(times(&|s| s.time)),
            ms(times(&|s| latency * (1 + s.rounds()) as u32)),
            ms(times(&|s| latency * (1 + s.window_rounds) as u32)),
            ms(times(&|s| s.time.saturating_sub(latency * (1 + s.window_rounds) as u32))),
            ms(median(&base.samples.iter().map(|s| s.time).collect::<Vec<_>>())),
            ms(times(&|s| latency * (1 + s.reads) as u32)),
        );
        if others > 0 {
            println!("    ({others} calls other than HEAD and GET)");
        }
    }
    println!("  by read rounds (window): requests, p50, p95, median GET spread at the proxy");
    for r in &results {
        let most = r.samples.iter().map(|s| s.window_rounds).max().unwrap_or(0);
        for rounds in 0..=most {
            let group: Vec<&Sample> = r.samples.iter().filter(|s| s.window_rounds == rounds).collect();
            if group.is_empty() {
                continue;
            }
            let mut times: Vec<Duration> = group.iter().map(|s| s.time).collect();
            times.sort();
            let spreads: Vec<Duration> = group.iter().filter_map(|s| s.get_spread).collect();
            println!(
                "  {:<16} {rounds} round(s): {:>3} requests, p50 {:>6}, p95 {:>6}, spread {:>6} ms",
                r.label,
                group.len(),
                ms(percentile(&times, 50.0)),
                ms(percentile(&times, 95.0)),
                if spreads.is_empty() { "-".to_owned() } else { ms(median(&spreads)) }
            );
        }
    }
    println!(
        "  (spread = first to last GET of a request arriving at the proxy; floor = (1 + rounds) × latency; \
         excess = time − floor wd, per request; sequential = (1 + reads) × latency)"
    );
}

/// Polls every future in the calling task until all are done (as
/// `read_planned`'s `buffered` does), in order.
async fn join_in_task<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *slot = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// `n` concurrent `Store::get`s outside the assembly line, either one task
/// each or all polled in one task: median wall time of 15 batches after 3
/// warm-up batches, and the median spread of their arrivals at the proxy.
async fn concurrent_gets(
    store: &SharedStore,
    keys: &[String],
    n: usize,
    spawned: bool,
    log: Option<&CallLog>,
) -> (Duration, Option<Duration>) {
    let (mut times, mut spreads) = (Vec::new(), Vec::new());
    for round in 0..18 {
        if let Some(log) = log {
            log.take();
        }
        let batch: Vec<String> = keys.iter().cycle().skip(round).take(n).cloned().collect();
        let started = Instant::now();
        if spawned {
            let mut tasks = tokio::task::JoinSet::new();
            for key in batch {
                let store = Arc::clone(store);
                tasks.spawn(async move { store.get(&key).await.map(|o| o.meta.size) });
            }
            while let Some(done) = tasks.join_next().await {
                done.unwrap_or_else(|e| fail("get task", e)).unwrap_or_else(|e| fail("get", e));
            }
        } else {
            let gets = batch.iter().map(|key| store.get(key)).collect();
            for done in join_in_task(gets).await {
                done.unwrap_or_else(|e| fail("get", e));
            }
        }
        let elapsed = started.elapsed();
        let arrivals: Vec<Instant> = log.map(CallLog::take).unwrap_or_default().iter().map(|c| c.at).collect();
        if round >= 3 {
            times.push(elapsed);
            if let (Some(first), Some(last)) = (arrivals.iter().min(), arrivals.iter().max()) {
                spreads.push(last.duration_since(*first));
            }
        }
    }
    (median(&times), (!spreads.is_empty()).then(|| median(&spreads)))
}

/// The S3 client and moto alone: n GETs at once, direct and with latency,
/// one task per GET and all in one task.
async fn report_concurrent_gets(
    listing: &SharedStore,
    direct: &SharedStore,
    slow: &SharedStore,
    log: &CallLog,
    latency: Duration,
) {
    let keys: Vec<String> = listing
        .list(&format!("accounts/{ACCOUNT}/tree/"))
        .await
        .unwrap_or_else(|e| fail("list", e))
        .into_iter()
        .filter(|m| m.key.ends_with(".md"))
        .map(|m| m.key)
        .take(16)
        .collect();
    println!(
        "  n concurrent S3Store::get of demo objects, outside the assembly line: median of 15 batches, ms \
         (spread: first to last arrival at the proxy)"
    );
    println!(
        "  {:<4} {:>10} {:>10} {:>8} | {:>10} {:>10} {:>8} | {:>10}",
        "n", "direct", "+latency", "spread", "1 task", "1 task +l", "spread", "floor"
    );
    for n in [1, 2, 4, 6, 8] {
        let (fast, _) = concurrent_gets(direct, &keys, n, true, None).await;
        let (lagged, spread) = concurrent_gets(slow, &keys, n, true, Some(log)).await;
        let (fast_one, _) = concurrent_gets(direct, &keys, n, false, None).await;
        let (lagged_one, spread_one) = concurrent_gets(slow, &keys, n, false, Some(log)).await;
        let show = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), ms);
        println!(
            "  {n:<4} {:>10} {:>10} {:>8} | {:>10} {:>10} {:>8} | {:>10}",
            ms(fast),
            ms(lagged),
            show(spread),
            ms(fast_one),
            ms(lagged_one),
            show(spread_one),
            ms(latency + fast)
        );
    }
}

// ---------------------------------------------------------------------------
// The planner on synthetic candidates.

/// SplitMix64 (as the index bench).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next_u64() % u64::from(hi - lo)) as u32
    }
}

const WORDS: [&str; 16] = [
    "bucket", "manifest", "segment", "lambda", "latency", "memory", "token", "budget", "planner", "retry", "index",
    "vector", "deploy", "incident", "kyoto", "检索",
];

fn words(rng: &mut Rng, tokens: u32) -> String {
    let mut text = String::new();
    while (text.len() as u32) < tokens * 4 {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(WORDS[rng.range(0, WORDS.len() as u32) as usize]);
    }
    text
}

/// `n` candidates in rank order: 40 % memory files, 8 % memory directories,
/// 10 % other peers' memory files, 25 % resource files, 7 % resource
/// directories, 10 % skills; abstracts 20–100 tokens; overviews 80–400
/// (every directory, 70 % of files); full bodies 100–1,000 tokens for
/// memories, 400–4,000 for resources, 200–1,500 for skills; 2 % repeat the
/// previous candidate's content.
fn synthetic_candidates(n: usize, seed: u64) -> Vec<Candidate> {
    let mut rng = Rng(seed);
    let memory =
        [Category::Events, Category::Entities, Category::Preferences, Category::Experiences, Category::Memories];
    (0..n)
        .map(|i| {
            let cat = memory[rng.range(0, 5) as usize];
            let name = match cat {
                Category::Memories => "cases",
                other => other.as_str(),
            };
            let topic = rng.range(0, 40);
            let (path, category, is_directory, origin, full) = match rng.range(0, 100) {
                0..40 => (format!("user/bench/memories/{name}/t{topic}/m{i}.md"), cat, false, Origin::Own, (100, 1000)),
                40..48 => (format!("user/bench/memories/{name}/t{i}"), cat, true, Origin::Own, (0, 0)),
                48..58 => {
                    let p = format!("user/bench/peers/p{}/memories/{name}/m{i}.md", topic % 3);
                    (p, cat, false, Origin::OtherPeer, (100, 1000))
                }
                58..83 => {
                    (format!("resources/proj{topic}/doc{i}.md"), Category::Resources, false, Origin::Own, (400, 4000))
                }
                83..90 => (format!("resources/proj{i}"), Category::Resources, true, Origin::Own, (0, 0)),
                _ => (format!("agent/skills/s{i}/SKILL.md"), Category::Skills, false, Origin::Own, (200, 1500)),
            };
            let abstract_tokens = rng.range(20, 100);
            let overview_tokens = (is_directory || rng.range(0, 10) < 7).then(|| rng.range(80, 400));
            let full_tokens = (!is_directory).then(|| rng.range(full.0, full.1));
            let score = 0.9 - i as f64 * 0.0004;
            let penalty = if origin == Origin::OtherPeer { 0.1 } else { 0.0 };
            let dedup_key = if i > 0 && rng.range(0, 50) == 0 { format!("k{}", i - 1) } else { format!("k{i}") };
            Candidate {
                uri: VikingUri::from_path(&path).unwrap_or_else(|e| fail("synthetic uri", e)),
                category,
                is_directory,
                is_memory: path.contains("/memories/"),
                score,
                rank_score: score - penalty,
                origin,
                abstract_text: words(&mut rng, abstract_tokens),
                abstract_tokens,
                overview_tokens,
                full_tokens,
                dedup_key,
            }
        })
        .collect()
}

fn bench_planner(args: &Args) {
    println!("== planner: skald::assemble::plan::plan, detail auto, median of {} runs", args.plan_runs);
    println!(
        "  {:<11} {:>10} {:>8} {:>8} {:>8} | {:>6} {:>5} {:>5} {:>5} {:>5} {:>7} {:>7} {:>6}",
        "candidates",
        "max_tokens",
        "median",
        "p95",
        "min",
        "placed",
        "full",
        "ovw",
        "abs",
        "uri",
        "dropped",
        "deduped",
        "tokens"
    );
    for n in [10, 1000] {
        let candidates = synthetic_candidates(n, args.seed);
        for max_tokens in [1600, 32_000] {
            let request = PlanRequest { max_tokens, detail: &Detail::Auto, events_budget_share: None };
            for _ in 0..5 {
                black_box(plan::plan(&candidates, &request));
            }
            let mut times: Vec<Duration> = (0..args.plan_runs)
                .map(|_| {
                    let started = Instant::now();
                    black_box(plan::plan(black_box(&candidates), &request));
                    started.elapsed()
                })
                .collect();
            times.sort();
            let p = plan::plan(&candidates, &request);
            let tier = |t: Tier| p.entries.iter().filter(|e| e.tier == t).count();
            println!(
                "  {:<11} {:>10} {:>6}µs {:>6}µs {:>6}µs | {:>6} {:>5} {:>5} {:>5} {:>5} {:>7} {:>7} {:>6}",
                n,
                max_tokens,
                us(percentile(&times, 50.0)),
                us(percentile(&times, 95.0)),
                us(times[0]),
                p.entries.len(),
                tier(Tier::Full),
                tier(Tier::Overview),
                tier(Tier::Abstract),
                tier(Tier::Uri),
                p.dropped,
                p.deduped,
                p.tokens
            );
        }
    }
}

// ---------------------------------------------------------------------------

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

/// What every S3 run shares.
struct Env<'a> {
    embedder: &'a Arc<dyn Embedder>,
    queries: &'a [String],
    directories: &'a HashMap<String, bool>,
    args: &'a Args,
}

/// Measures `fast` (an S3 store at `upstream`), then the same objects
/// through the latency proxy, and reports calls and rounds. `sizes` holds
/// the same objects, for checking `bytes_read`.
async fn s3_runs(
    name: &str,
    fast: &SharedStore,
    sizes: &SharedStore,
    upstream: SocketAddr,
    bucket: &str,
    env: &Env<'_>,
) {
    let fast_app = app(Arc::clone(fast), Arc::clone(env.embedder));
    let target = Target { app: &fast_app, sizes, log: None, directories: env.directories };
    let fast_results = measure(&target, env.queries, env.args).await;
    println!();
    report(&format!("store={name}"), &fast_results, env.queries.len(), env.args.rounds);

    let log = Arc::new(CallLog::default());
    let proxy = start_proxy(upstream, env.args.latency, Arc::clone(&log)).await;
    let slow: SharedStore = Arc::new(s3_store(&format!("http://{proxy}"), bucket));
    let slow_app = app(Arc::clone(&slow), Arc::clone(env.embedder));
    let target = Target { app: &slow_app, sizes, log: Some(&log), directories: env.directories };
    let slow_results = measure(&target, env.queries, env.args).await;
    println!();
    let latency = env.args.latency;
    report(
        &format!("store={name} + {} ms per call (proxy {proxy})", latency.as_millis()),
        &slow_results,
        env.queries.len(),
        env.args.rounds,
    );
    report_latency(&slow_results, &fast_results, latency);
    report_concurrent_gets(sizes, fast, &slow, &log, latency).await;
}

async fn run(args: &Args) {
    let embedder = embedder(args.hashed);
    let queries = queries();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "embedder {}; {} queries; latency {} ms; load average {}",
        embedder.id(),
        queries.len(),
        args.latency.as_millis(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );

    // 1. Local store.
    let dir = std::env::temp_dir().join(format!("skald-bench-context-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let local: SharedStore = Arc::new(LocalStore::open(&dir).unwrap_or_else(|e| fail("local store", e)));
    let took = ingest_demo(&local, embedder.as_ref()).await;
    println!("ingest samplconfigs/demo into a LocalStore: {} ms", ms(took));
    let local_app = app(Arc::clone(&local), Arc::clone(&embedder));
    let dirs = directories(&local_app).await;
    let target = Target { app: &local_app, sizes: &local, log: None, directories: &dirs };
    let local_results = measure(&target, &queries, args).await;
    report(&format!("store=local ({})", dir.display()), &local_results, queries.len(), args.rounds);

    // 2. The S3 client over the same local store (an in-process S3-protocol
    // server), direct and with latency: the S3 client's and the latency's
    // share without moto's.
    let bucket = format!("bench-context-{}", std::process::id());
    let server = start_s3_over(Arc::clone(&local), bucket.clone()).await;
    let fast: SharedStore = Arc::new(s3_store(&format!("http://{server}"), &bucket));
    let name = format!("S3Store → in-process S3 server over the LocalStore ({server})");
    let env = Env { embedder: &embedder, queries: &queries, directories: &dirs, args };
    s3_runs(&name, &fast, &local, server, &bucket, &env).await;

    // 3. S3 on moto, direct and with latency.
    if args.moto {
        let moto = moto();
        let direct_s3 = s3_store(&moto.endpoint, &bucket);
        direct_s3.ensure_bucket().await.unwrap_or_else(|e| fail("bucket", e));
        let direct: SharedStore = Arc::new(direct_s3);
        let took = ingest_demo(&direct, embedder.as_ref()).await;
        println!("\ningest samplconfigs/demo into S3 on moto ({}): {} ms", moto.endpoint, ms(took));
        let upstream: SocketAddr = moto
            .endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|e| fail("moto endpoint (want http://ip:port)", e));
        s3_runs(&format!("S3Store → moto ({})", moto.endpoint), &direct, &direct, upstream, &bucket, &env).await;
    }
    drop(local_app);
    drop(local);
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        eprintln!("bench_context: cannot remove {}: {e}", dir.display());
    }
    println!();
    bench_planner(args);
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| fail("tokio runtime", e));
    runtime.block_on(run(&args));
}
