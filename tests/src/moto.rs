//! A local S3 server for tests: moto, started once per test process.
//!
//! [`s3_store`] gives each test a store on its own fresh bucket; [`endpoint`]
//! and [`store_at`] give the server itself and a store on a bucket of one's
//! choosing (the benches of `skald-bench` use them). The server is
//! `SKALD_TEST_S3_ENDPOINT` when that is set (for example
//! `http://127.0.0.1:5005` from `python3 tests/s3_server.py 5005`);
//! otherwise this module starts `tests/s3_server.py` (moto, serving one
//! request at a time, so that conditional writes are atomic as on S3) in a
//! `python3` child on a free loopback port. The child reads its stdin, a pipe this process
//! holds and never closes, and exits at end of file — so it dies with the
//! test process, however that ends.

use std::io::Read as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use skald::store::s3::S3Store;
use skald::store::s3::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use skald::store::s3::aws_sdk_s3::{Client, Config};

/// The environment variable naming an already running S3 endpoint.
pub const ENDPOINT_VAR: &str = "SKALD_TEST_S3_ENDPOINT";

/// How long to wait for a started moto server to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// The key prefix every test store uses inside its bucket, so that the
/// backend's prefix handling is exercised too.
pub const STORE_PREFIX: &str = "root";

/// The server script: moto with requests served one at a time (its
/// threaded server checks a precondition and writes without a lock between,
/// so concurrent conditional writes could both succeed, unlike S3's).
const SERVER_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/s3_server.py");

/// The moto child of this process: kept (with its stdin pipe) for the whole
/// process lifetime.
struct MotoServer {
    endpoint: String,
    _child: Child,
}

static SERVER: OnceLock<MotoServer> = OnceLock::new();

/// A store on a fresh, empty bucket of the local S3 server, under the key
/// prefix `root`. The bucket name is derived from `test_name` (lowercased,
/// other characters than `a-z0-9` turned into `-`) plus the process id and a
/// counter, so every call gets its own bucket.
///
/// The client uses static credentials (`test`/`test`), region `us-east-1`
/// and path-style addressing, and never consults the environment, profiles
/// or the EC2 metadata service.
///
/// # Panics
/// When no server is configured and moto cannot be started (it needs the pip
/// package `moto[server]`), or when the bucket cannot be created.
pub async fn s3_store(test_name: &str) -> S3Store {
    let store = store_at(&endpoint(), &bucket_name(test_name));
    if let Err(e) = store.ensure_bucket().await {
        panic!("cannot create test bucket {:?}: {e}", store.bucket());
    }
    store
}

/// The local S3 server's endpoint (`http://ip:port`): `SKALD_TEST_S3_ENDPOINT`
/// when it is set and not empty, else a moto server started on the first
/// call and kept for the rest of the process.
///
/// # Panics
/// When no server is configured and moto cannot be started.
#[must_use]
pub fn endpoint() -> String {
    match std::env::var(ENDPOINT_VAR) {
        Ok(endpoint) if !endpoint.is_empty() => endpoint,
        _ => SERVER.get_or_init(start_moto).endpoint.clone(),
    }
}

/// A store on `bucket` of the S3-protocol server at `endpoint`, under
/// [`STORE_PREFIX`], with the client configuration of [`s3_store`]. The
/// bucket is not created ([`S3Store::ensure_bucket`] does).
#[must_use]
pub fn store_at(endpoint: &str, bucket: &str) -> S3Store {
    let config = Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .credentials_provider(Credentials::new("test", "test", None, None, "static"))
        .region(Region::from_static("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .build();
    S3Store::from_client(Client::from_conf(config), bucket, STORE_PREFIX)
}

/// A valid, unique bucket name (3–63 characters of `a-z0-9-`, starting and
/// ending with a letter or digit) for `test_name`.
fn bucket_name(test_name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let suffix = format!("-{}-{n}", std::process::id());
    let mut stem: String =
        test_name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    stem.truncate(63 - "t-".len() - suffix.len());
    let stem = stem.trim_matches('-');
    format!("t-{stem}{suffix}")
}

/// Starts moto on a free loopback port and waits until it accepts
/// connections.
fn start_moto() -> MotoServer {
    let port = free_port();
    let log_path = std::env::temp_dir().join(format!("skald-moto-{}-{port}.log", std::process::id()));
    let log = std::fs::File::create(&log_path)
        .unwrap_or_else(|e| panic!("cannot create moto log {}: {e}", log_path.display()));
    let mut child = Command::new("python3")
        .arg(SERVER_SCRIPT)
        .arg(port.to_string())
        .arg("--until-eof")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start python3 for the moto S3 server: {e}; {}", help()));
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let started = Instant::now();
    loop {
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            // The child keeps its (now unlinked) log open; nothing to clean up.
            let _ = std::fs::remove_file(&log_path);
            return MotoServer { endpoint: format!("http://{address}"), _child: child };
        }
        let exited = child.try_wait().ok().flatten();
        if exited.is_some() || started.elapsed() > STARTUP_TIMEOUT {
            let _ = child.kill();
            let mut output = String::new();
            let _ = std::fs::File::open(&log_path).and_then(|mut f| f.read_to_string(&mut output));
            let _ = std::fs::remove_file(&log_path);
            let what = exited.map_or_else(
                || format!("did not accept connections on {address} within {STARTUP_TIMEOUT:?}"),
                |status| format!("exited with {status}"),
            );
            panic!("the moto S3 server {what}; {}\nits output:\n{output}", help());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What to do when moto is not available.
fn help() -> String {
    format!(
        "the S3 tests need moto (`pip install 'moto[server]'`) importable by python3, \
         or {ENDPOINT_VAR} set to a running S3-protocol server"
    )
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .unwrap_or_else(|e| panic!("cannot find a free loopback port: {e}"))
}
