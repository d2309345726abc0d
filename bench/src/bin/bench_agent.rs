//! Agent-surface benchmark: the `content` and `mcp` functions.
//!
//! ```text
//! scripts/setup-model.sh        # once (the USE-m3 model), unless --hashed
//! cargo build --release -p content -p mcp -p find
//! cargo run --release -p skald-bench --bin bench_agent -- [init] [mcp]
//!     [--spawns 100] [--spawn-warmup 3] [--bin-dir target/release] [--config PATH]
//!     [--calls 500] [--call-warmup 20] [--max-tokens 1600] [--hashed]
//! ```
//!
//! Both parts run when neither is named.
//!
//! 1. `init`: cold starts of the release binaries `content`, `mcp` and
//!    `find` (the reference point) against a small fake Lambda Runtime API
//!    on a fresh loopback port per spawn. Each binary is copied from
//!    `--bin-dir` into a temporary directory first, so a concurrent rebuild
//!    cannot swap it mid-run. A spawn gets a cleared environment with what
//!    Lambda sets (`AWS_LAMBDA_RUNTIME_API`, `AWS_LAMBDA_FUNCTION_NAME`,
//!    `AWS_LAMBDA_FUNCTION_MEMORY_SIZE` 1024, `AWS_LAMBDA_FUNCTION_VERSION`,
//!    `AWS_LAMBDA_LOG_STREAM_NAME`, `AWS_LAMBDA_LOG_GROUP_NAME`,
//!    `AWS_REGION`, `TZ`, `LANG`, `PATH`) and `SKALD_CONFIG`: `--config`,
//!    else a temporary config over a temporary local store with the demo
//!    (`samplconfigs/demo`) ingested, dev identity, the USE-m3 model of
//!    `skald_bench::use_m3_dir` (`--hashed`: the hashed
//!    embedder). Measured per spawn:
//!    - **init**: from just before `spawn` to the moment the first
//!      `GET /2018-06-01/runtime/invocation/next` head has been read;
//!    - VmHWM and VmRSS of the child at that moment (the runtime is blocked
//!      waiting for the answer);
//!    - **first invocation**: the fake runtime then hands out one API
//!      Gateway (HTTP API 2.0) event and times until the function's
//!      `POST …/invocation/{id}/response` has arrived (its `statusCode`
//!      must be 200); VmHWM again. The events: `content` `GET /health`,
//!      `mcp` `tools/call health` (JSON-RPC, protocol 2025-11-25: the same
//!      REST route plus the MCP layer, whose rmcp service is built on the
//!      first request), `find` a query (`S3 conditional writes`, limit 5:
//!      the model is mapped, the index loaded and the query embedded).
//!
//!    The binaries take turns (content, mcp, find, a floor, content, …) so
//!    that all see the same machine state; `--spawn-warmup` rounds are not
//!    counted. The **floor** is this bench's own binary re-executed in a
//!    mode that only opens a `std::net::TcpStream` to the runtime API and
//!    sends the poll: process creation, exec, the dynamic loader and Rust's
//!    start-up without tokio, tracing, the configuration or the app.
//! 2. `mcp`: warm, in-process, over the demo corpus in a temporary local
//!    store (USE-m3, or `--hashed`): `skald_mcp::handle` with a JSON-RPC
//!    `tools/call` of `search` (`mode` `context`, `max_tokens`) next to
//!    `skald::api::search::handle` with the equivalent REST body
//!    (`{"mode": "context", "query", "max_tokens"}`: what the tool sends),
//!    and `tools/call health` next to `GET /health` (the MCP layer's fixed
//!    cost without the search). Queries: the 20 of
//!    `skald_bench::retrieval_queries`, in turn. Each call is timed around
//!    the handler only (the request is built before the clock starts); the
//!    two sides alternate which goes first. Every MCP answer is checked:
//!    status 200, a JSON-RPC result without `isError`, one text block equal
//!    to the REST answer's `rendered` block for the same query.
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{Value, json};
use skald::app::App;
use skald::embed::hashed::HashedEmbedder;
use skald::embed::use_m3::UseM3Embedder;
use skald_bench::{
    Flags, Summary, Table, TempStore, block_on, dev_app, embedder, event, fail, fmt_ms, ingest_demo, load_average,
    median, ms, paired_ms, parse_body, percentile, repo, retrieval_queries, search, sorted, use_m3_dir,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// The MCP protocol revision of the bench's requests.
const PROTOCOL: &str = "2025-11-25";
/// What an MCP client accepts (rmcp answers 406 without both).
const ACCEPT: &str = "application/json, text/event-stream";
/// Set (to the runtime API's address) in the floor mode of this binary.
const FLOOR_ENV: &str = "BENCH_AGENT_FLOOR";
/// The runtime API's poll.
const NEXT: &str = "/2018-06-01/runtime/invocation/next";
/// How long a spawn may take to poll, or to answer its invocation.
const SPAWN_TIMEOUT: Duration = Duration::from_secs(30);

struct Args {
    init: bool,
    mcp: bool,
    spawns: usize,
    spawn_warmup: usize,
    bin_dir: PathBuf,
    config: Option<PathBuf>,
    calls: usize,
    call_warmup: usize,
    max_tokens: u64,
    hashed: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        init: false,
        mcp: false,
        spawns: 100,
        spawn_warmup: 3,
        bin_dir: repo().join("target/release"),
        config: None,
        calls: 500,
        call_warmup: 20,
        max_tokens: 1600,
        hashed: false,
    };
    let mut flags = Flags::from_env(
        "usage: bench_agent [init] [mcp] [--spawns N] [--spawn-warmup N] [--bin-dir DIR] [--config PATH] \
         [--calls N] [--call-warmup N] [--max-tokens N] [--hashed]",
    );
    while let Some(flag) = flags.next() {
        match flag.as_str() {
            "init" => args.init = true,
            "mcp" => args.mcp = true,
            "--spawns" => args.spawns = flags.at_least(&flag, 1)?,
            "--spawn-warmup" => args.spawn_warmup = flags.number(&flag)? as usize,
            "--bin-dir" => args.bin_dir = PathBuf::from(flags.value(&flag)?),
            "--config" => args.config = Some(PathBuf::from(flags.value(&flag)?)),
            "--calls" => args.calls = flags.at_least(&flag, 1)?,
            "--call-warmup" => args.call_warmup = flags.number(&flag)? as usize,
            "--max-tokens" => args.max_tokens = flags.number(&flag)?,
            "--hashed" => args.hashed = true,
            _ => return Err(flags.unknown(&flag)),
        }
    }
    if !args.init && !args.mcp {
        (args.init, args.mcp) = (true, true);
    }
    Ok(args)
}

fn main() {
    if let Ok(address) = std::env::var(FLOOR_ENV) {
        floor(&address);
    }
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    println!("bench_agent: load average {} (1/5/15 min)", load_average());
    block_on(async {
        if args.init {
            init_part(&args).await;
        }
        if args.mcp {
            mcp_part(&args).await;
        }
    });
    println!("\nload average at the end: {}", load_average());
}

/// The floor mode: poll the runtime API at `address` once with the standard
/// library alone, then wait until the bench kills the process.
fn floor(address: &str) -> ! {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).unwrap_or_else(|e| fail("floor connect", e));
    let poll = format!("GET {NEXT} HTTP/1.1\r\nhost: {address}\r\n\r\n");
    stream.write_all(poll.as_bytes()).unwrap_or_else(|e| fail("floor poll", e));
    let mut buf = [0u8; 1024];
    while stream.read(&mut buf).is_ok_and(|n| n > 0) {}
    std::process::exit(0)
}

// ---------------------------------------------------------------------------
// Part 1: init against a fake Lambda Runtime API.

/// A binary to spawn and the event of its first invocation.
struct Target {
    name: &'static str,
    path: PathBuf,
    /// `None`: the floor (no invocation).
    first: Option<(&'static str, Value)>,
}

/// An API Gateway HTTP API (payload 2.0) event.
fn apigw_event(method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Value {
    let mut map = serde_json::Map::new();
    map.insert("host".into(), json!("127.0.0.1"));
    for (name, value) in headers {
        map.insert((*name).into(), json!(value));
    }
    let mut event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": map,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "bench",
            "domainName": "127.0.0.1",
            "domainPrefix": "bench",
            "http": { "method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "bench_agent" },
            "requestId": "bench-request",
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Dec/2026:00:00:00 +0000",
            "timeEpoch": epoch_ms(),
        },
        "isBase64Encoded": false,
    });
    if let Some(body) = body {
        event["body"] = json!(body.to_string());
    }
    event
}

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn targets(dir: &Path) -> Vec<Target> {
    let mcp_call =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "health", "arguments": {}}});
    let mcp_headers = [("accept", ACCEPT), ("content-type", "application/json"), ("mcp-protocol-version", PROTOCOL)];
    let find_body = json!({"query": "S3 conditional writes", "limit": 5});
    vec![
        Target {
            name: "content",
            path: dir.join("content"),
            first: Some(("GET /health", apigw_event("GET", "/health", &[], None))),
        },
        Target {
            name: "mcp",
            path: dir.join("mcp"),
            first: Some(("tools/call health", apigw_event("POST", "/mcp", &mcp_headers, Some(&mcp_call)))),
        },
        Target {
            name: "find",
            path: dir.join("find"),
            first: Some((
                "find query",
                apigw_event("POST", "/api/v1/search/find", &[("content-type", "application/json")], Some(&find_body)),
            )),
        },
        Target { name: "floor", path: std::env::current_exe().unwrap_or_else(|e| fail("current exe", e)), first: None },
    ]
}

/// What the fake runtime saw on one connection.
enum Seen {
    /// A poll, with the channel for its answer (an event, or `None`: hold).
    Next { at: Instant, answer: oneshot::Sender<Option<Value>> },
    /// `POST …/response` or `…/error`, with its body.
    Posted { at: Instant, path: String, body: String },
}

/// One request read off a connection: method, path and body (bodies by
/// `content-length` or chunked).
async fn read_request(
    stream: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<(String, String, String)>> {
    let mut chunk = vec![0u8; 16 * 1024];
    let head_len = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_len]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let (mut length, mut chunked) = (0usize, false);
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            }
        }
    }
    buf.drain(..head_len);
    let body = if chunked {
        // Chunk sizes, data, until the 0-length chunk and its empty trailer.
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(None);
                }
                buf.extend_from_slice(&chunk[..n]);
            };
            let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("0").trim(), 16).unwrap_or(0);
            while buf.len() < line_end + 2 + size + 2 {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(None);
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            body.extend_from_slice(&buf[line_end + 2..line_end + 2 + size]);
            buf.drain(..line_end + 2 + size + 2);
            if size == 0 {
                break body;
            }
        }
    } else {
        while buf.len() < length {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        buf.drain(..length).collect()
    };
    Ok(Some((method, path, String::from_utf8_lossy(&body).into_owned())))
}

/// Serves one runtime-API connection: polls are reported with a channel
/// for their answer, posts are reported and answered 202.
async fn serve_runtime(mut stream: tokio::net::TcpStream, seen: mpsc::UnboundedSender<Seen>) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    while let Some((method, path, body)) = read_request(&mut stream, &mut buf).await? {
        let at = Instant::now();
        if method == "GET" && path == NEXT {
            let (answer, event) = oneshot::channel();
            if seen.send(Seen::Next { at, answer }).is_err() {
                return Ok(());
            }
            let Ok(Some(event)) = event.await else {
                // Hold the poll until the process is killed.
                let mut rest = [0u8; 1024];
                while stream.read(&mut rest).await? > 0 {}
                return Ok(());
            };
            let body = event.to_string();
            let deadline = epoch_ms() + 30_000;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 lambda-runtime-aws-request-id: bench-1\r\nlambda-runtime-deadline-ms: {deadline}\r\n\
                 lambda-runtime-invoked-function-arn: arn:aws:lambda:us-east-1:123456789012:function:bench\r\n\
                 lambda-runtime-trace-id: Root=1-00000000-000000000000000000000000;Sampled=0\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
        } else {
            let _ = seen.send(Seen::Posted { at, path, body });
            stream
                .write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}")
                .await?;
        }
    }
    Ok(())
}

/// `key` of `/proc/{pid}/status` in kB.
fn status_kb(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    line.split_whitespace().next()?.parse().ok()
}

/// One spawn's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Spawn {
    init: Duration,
    hwm_kb: u64,
    rss_kb: u64,
    first: Option<Duration>,
    hwm_after_kb: u64,
}

/// Kills `child` and aborts the bench with `what` and the child's stderr.
async fn abort(mut child: tokio::process::Child, name: &str, what: String) -> ! {
    let _ = child.start_kill();
    let stderr = match child.wait_with_output().await {
        Ok(output) => String::from_utf8_lossy(&output.stderr).into_owned(),
        Err(e) => e.to_string(),
    };
    fail(name, format!("{what}\n{stderr}"))
}

async fn spawn_once(target: &Target, env: &[(String, String)]) -> Spawn {
    let listener =
        TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await.unwrap_or_else(|e| fail("runtime bind", e));
    let address = listener.local_addr().unwrap_or_else(|e| fail("runtime address", e)).to_string();
    let (tx, mut seen) = mpsc::unbounded_channel();
    let server = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            connections.spawn(serve_runtime(stream, tx.clone()));
        }
    });
    let mut command = tokio::process::Command::new(&target.path);
    command.env_clear().envs(env.iter().map(|(k, v)| (k, v))).env("AWS_LAMBDA_RUNTIME_API", &address);
    command
        .env("AWS_LAMBDA_FUNCTION_NAME", target.name)
        .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{}", target.name));
    if target.first.is_none() {
        command.env(FLOOR_ENV, &address);
    }
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true);
    let started = Instant::now();
    let mut child = command.spawn().unwrap_or_else(|e| fail(&format!("spawn {}", target.path.display()), e));
    let pid = child.id().unwrap_or_else(|| fail("spawn", "no pid"));
    let first = tokio::select! {
        seen = seen.recv() => Ok(seen),
        status = child.wait() => Err(format!("exited before polling: {status:?}")),
        () = tokio::time::sleep(SPAWN_TIMEOUT) => Err(format!("did not poll in {SPAWN_TIMEOUT:?}")),
    };
    let (mut spawn, answer) = match first {
        Ok(Some(Seen::Next { at, answer })) => {
            let spawn = Spawn {
                init: at - started,
                hwm_kb: status_kb(pid, "VmHWM:").unwrap_or_default(),
                rss_kb: status_kb(pid, "VmRSS:").unwrap_or_default(),
                ..Spawn::default()
            };
            (spawn, answer)
        }
        Ok(Some(Seen::Posted { path, body, .. })) => {
            abort(child, target.name, format!("posted before polling: {path}: {body}")).await
        }
        Ok(None) => abort(child, target.name, "the runtime API closed".to_owned()).await,
        Err(what) => abort(child, target.name, what).await,
    };
    if let Some((label, event)) = &target.first {
        let sent = Instant::now();
        let _ = answer.send(Some(event.clone()));
        let next = tokio::select! {
            seen = seen.recv() => seen,
            () = tokio::time::sleep(SPAWN_TIMEOUT) => None,
        };
        match next {
            Some(Seen::Posted { at, path, body }) if path.ends_with("/response") => {
                let response: Value = serde_json::from_str(&body).unwrap_or_else(|e| fail("response json", e));
                let text = response["body"].as_str().unwrap_or_default();
                if response["statusCode"] != 200 || text.contains("\"isError\":true") {
                    abort(child, target.name, format!("{label}: {body}")).await;
                }
                spawn.first = Some(at - sent);
                spawn.hwm_after_kb = status_kb(pid, "VmHWM:").unwrap_or_default();
            }
            Some(Seen::Posted { path, body, .. }) => {
                abort(child, target.name, format!("{label}: {path}: {body}")).await;
            }
            Some(Seen::Next { .. }) => abort(child, target.name, format!("{label}: polled again, no answer")).await,
            None => abort(child, target.name, format!("{label}: no answer in {SPAWN_TIMEOUT:?}")).await,
        }
    } else {
        drop(answer);
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    server.abort();
    spawn
}

/// The temporary configuration of the init part: a local store with the
/// demo ingested, dev identity, the bench's embedder.
async fn temp_config(hashed: bool, store: &TempStore) -> PathBuf {
    let embedding = if hashed {
        ingest_demo(store.store(), &HashedEmbedder::new(256)).await;
        json!({"provider": "hashed", "dimension": 256})
    } else {
        let model = UseM3Embedder::open(use_m3_dir()).unwrap_or_else(|e| {
            fail("USE-m3 model", format!("{e}; run scripts/setup-model.sh first (or pass --hashed)"))
        });
        ingest_demo(store.store(), &model).await;
        json!({"provider": "use-m3", "model_dir": use_m3_dir().display().to_string()})
    };
    let config = json!({
        "store": store.dir().display().to_string(),
        "identity": {"mode": "dev", "default_account": "default", "default_user": "default"},
        "embedding": embedding,
        "index": {"abstract_max_bytes": 400},
    });
    let path = store.dir().with_extension("json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap_or_default())
        .unwrap_or_else(|e| fail("write config", e));
    path
}

fn kb_range(values: impl IntoIterator<Item = u64>) -> String {
    let v = sorted(values);
    let mb = |kb: u64| format!("{:.1}", kb as f64 / 1000.0);
    format!(
        "{} [{}–{}]",
        mb(percentile(&v, 50.0)),
        mb(v.first().copied().unwrap_or_default()),
        mb(v.last().copied().unwrap_or_default())
    )
}

fn ms_range(values: &[Duration]) -> String {
    let v = sorted(values.iter().copied());
    format!(
        "{} [{}–{}]",
        ms(percentile(&v, 50.0)),
        ms(v.first().copied().unwrap_or_default()),
        ms(v.last().copied().unwrap_or_default())
    )
}

async fn init_part(args: &Args) {
    println!(
        "\n## init: first runtime-API poll of the binaries in {} ({} spawns each after {} warm-up rounds)",
        args.bin_dir.display(),
        args.spawns,
        args.spawn_warmup
    );
    let bins = tempdir("skald-bench-agent-bin");
    for name in ["content", "mcp", "find"] {
        let from = args.bin_dir.join(name);
        let meta = std::fs::metadata(&from).unwrap_or_else(|e| {
            fail(&format!("{} (cargo build --release -p content -p mcp -p find)", from.display()), e)
        });
        let age = meta.modified().ok().and_then(|m| m.elapsed().ok()).map_or(0, |d| d.as_secs());
        println!("  {name:<8} {} B, built {age} s ago ({})", meta.len(), from.display());
        std::fs::copy(&from, bins.join(name)).unwrap_or_else(|e| fail("copy binary", e));
    }
    let store = TempStore::open("skald-bench-agent-store");
    let config = match &args.config {
        Some(path) => path.clone(),
        None => temp_config(args.hashed, &store).await,
    };
    println!("  SKALD_CONFIG={}", config.display());
    let env: Vec<(String, String)> = [
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "2026/12/01/[$LATEST]bench"),
        ("AWS_REGION", "us-east-1"),
        ("TZ", ":UTC"),
        ("LANG", "en_US.UTF-8"),
        ("PATH", "/usr/local/bin:/usr/bin/:/bin"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .chain([("SKALD_CONFIG".to_owned(), config.display().to_string())])
    .collect();
    let targets = targets(&bins);
    let mut results: Vec<Vec<Spawn>> = vec![Vec::new(); targets.len()];
    for round in 0..args.spawn_warmup + args.spawns {
        for (i, target) in targets.iter().enumerate() {
            let spawn = spawn_once(target, &env).await;
            if round >= args.spawn_warmup {
                results[i].push(spawn);
            }
        }
    }
    let table = Table::new("<8 >22 >20 >20 | <18 >22 >20");
    println!(
        "{}",
        table.header(&[
            "binary",
            "init ms p50 [range]",
            "VmHWM MB at poll",
            "VmRSS MB at poll",
            "first invocation",
            "its time ms p50 [range]",
            "VmHWM MB after"
        ])
    );
    let floor = median(results[targets.len() - 1].iter().map(|s| s.init));
    for (target, spawns) in targets.iter().zip(&results) {
        let inits: Vec<Duration> = spawns.iter().map(|s| s.init).collect();
        let firsts: Vec<Duration> = spawns.iter().filter_map(|s| s.first).collect();
        let (label, first, after) = match &target.first {
            Some((label, _)) => (*label, ms_range(&firsts), kb_range(spawns.iter().map(|s| s.hwm_after_kb))),
            None => ("–", "–".to_owned(), "–".to_owned()),
        };
        println!(
            "{}",
            table.line(&[
                &target.name,
                &ms_range(&inits),
                &kb_range(spawns.iter().map(|s| s.hwm_kb)),
                &kb_range(spawns.iter().map(|s| s.rss_kb)),
                &label,
                &first,
                &after,
            ])
        );
    }
    println!("  init above the floor (p50 − floor p50):");
    for (target, spawns) in targets.iter().zip(&results).take(targets.len() - 1) {
        let p50 = median(spawns.iter().map(|s| s.init));
        println!("    {:<8} {} ms", target.name, fmt_ms((p50.as_secs_f64() - floor.as_secs_f64()) * 1e3));
    }
    if args.config.is_none() {
        let _ = std::fs::remove_file(&config);
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&bins);
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail("temp dir", e));
    dir
}

// ---------------------------------------------------------------------------
// Part 2: a warm MCP call next to its REST call.

/// A JSON-RPC `tools/call` of `name` to `/mcp`, as an agent host sends it.
fn mcp_request(id: usize, name: &str, arguments: &Value) -> http::Request<Bytes> {
    let body =
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    http::Request::builder()
        .method("POST")
        .uri(skald_mcp::PATH)
        .header("accept", ACCEPT)
        .header("content-type", "application/json")
        .header("host", "127.0.0.1")
        .header("mcp-protocol-version", PROTOCOL)
        .body(Bytes::from(body.to_string()))
        .unwrap_or_else(|e| fail("mcp request", e))
}

/// Calls `name` through `skald_mcp::handle`, timed around the handler; the
/// text of its one content block. Anything but a successful result aborts.
async fn mcp_call(app: &Arc<App>, id: usize, name: &str, arguments: &Value) -> (Duration, String) {
    let request = mcp_request(id, name, arguments);
    let started = Instant::now();
    let response = Box::pin(skald_mcp::handle(app, request)).await;
    let time = started.elapsed();
    if response.status() != 200 {
        fail("mcp", format!("{name}: status {}: {}", response.status(), response.body()));
    }
    let json = parse_body(response.body());
    let result = &json["result"];
    let content = result["content"].as_array().map(Vec::as_slice).unwrap_or_default();
    if result["isError"] == true || content.len() != 1 {
        fail("mcp", format!("{name}: {}", response.body()));
    }
    (time, content[0]["text"].as_str().unwrap_or_default().to_owned())
}

/// `GET /health` through `skald::api::content::handle`, timed around the
/// handler.
async fn rest_health(app: &App) -> Duration {
    let request = skald_lambda::to_library_request(event("GET", "/health", None));
    let started = Instant::now();
    let response = Box::pin(skald::api::content::handle(app, request)).await;
    let time = started.elapsed();
    if response.status() != 200 {
        fail("health", response.body());
    }
    time
}

async fn mcp_part(args: &Args) {
    let embedder = embedder(args.hashed, "--hashed");
    let store = TempStore::open("skald-bench-agent-mcp");
    let ingest = ingest_demo(store.store(), embedder.as_ref()).await;
    let app = Arc::new(dev_app(Arc::clone(store.store()), Arc::clone(&embedder)));
    let queries = retrieval_queries();
    println!(
        "\n## mcp: warm `search` (mode context, max_tokens {}) via MCP vs REST, in-process ({} embedder, demo ingested in {} ms)",
        args.max_tokens,
        embedder.id(),
        ms(ingest)
    );
    println!(
        "  {} timed pairs after {} warm-up pairs; {} queries in turn",
        args.calls,
        args.call_warmup,
        queries.len()
    );
    let (mut mcp_times, mut rest_times) = (Vec::new(), Vec::new());
    let (mut mcp_health, mut rest_health_times) = (Vec::new(), Vec::new());
    let (mut mismatches, mut text_bytes, mut json_bytes) = (0usize, 0usize, 0usize);
    for i in 0..args.call_warmup + args.calls {
        let query = &queries[i % queries.len()];
        let arguments = json!({"query": query, "mode": "context", "max_tokens": args.max_tokens});
        let body = json!({"mode": "context", "query": query, "max_tokens": args.max_tokens});
        let ((mcp, text), (rest, json)) = if i % 2 == 0 {
            let m = mcp_call(&app, i, "search", &arguments).await;
            (m, search(&app, &body).await)
        } else {
            let r = search(&app, &body).await;
            (mcp_call(&app, i, "search", &arguments).await, r)
        };
        let (mcp_h, rest_h) = if i % 2 == 0 {
            let m = mcp_call(&app, i, "health", &json!({})).await.0;
            (m, rest_health(&app).await)
        } else {
            let r = rest_health(&app).await;
            (mcp_call(&app, i, "health", &json!({})).await.0, r)
        };
        if json["result"]["rendered"].as_str() != Some(text.as_str()) {
            mismatches += 1;
        }
        if i >= args.call_warmup {
            mcp_times.push(mcp);
            rest_times.push(rest);
            mcp_health.push(mcp_h);
            rest_health_times.push(rest_h);
            text_bytes += text.len();
            json_bytes += json.to_string().len();
        }
    }
    let table = Table::new("<36 >7 >7 >7");
    println!("{}", table.header(&["", "p50", "p95", "max"]));
    // Milliseconds to about three digits, or microseconds (`µs` columns).
    let unit = |value_ms: f64, micros: bool| if micros { format!("{:.1}", value_ms * 1e3) } else { fmt_ms(value_ms) };
    let row = |label: &str, times: &[Duration], micros: bool| {
        let s = Summary::of(times);
        let f = |d: Duration| unit(d.as_secs_f64() * 1e3, micros);
        table.line(&[&label, &f(s.p50), &f(s.p95), &f(s.max)])
    };
    let diff_row = |label: &str, diffs: &[f64], micros: bool| {
        let f = |v: f64| unit(v, micros);
        table.line(&[
            &label,
            &f(percentile(diffs, 50.0)),
            &f(percentile(diffs, 95.0)),
            &f(diffs.last().copied().unwrap_or_default()),
        ])
    };
    println!("{}", row("MCP tools/call search (ms)", &mcp_times, false));
    println!("{}", row("REST POST /api/v1/search/search (ms)", &rest_times, false));
    println!("{}", diff_row("MCP − REST, paired (ms)", &paired_ms(&mcp_times, &rest_times), false));
    println!("{}", row("MCP tools/call health (µs)", &mcp_health, true));
    println!("{}", row("REST GET /health (µs)", &rest_health_times, true));
    println!("{}", diff_row("MCP − REST, paired (µs)", &paired_ms(&mcp_health, &rest_health_times), true));
    let n = mcp_times.len().max(1);
    println!(
        "  mean sizes: MCP text {} B, REST JSON body {} B; MCP text ≠ REST `rendered`: {mismatches} of {}",
        text_bytes / n,
        json_bytes / n,
        args.call_warmup + args.calls
    );
    if mismatches > 0 {
        fail("mcp", format!("{mismatches} MCP answers differ from REST's rendered block"));
    }
}
