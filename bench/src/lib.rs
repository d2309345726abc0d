//! Skald's benchmarks: the bench binaries (`src/bin/bench*.rs`, run by
//! `scripts/bench.sh` and quoted in `BENCHMARKS.md`), the tooling they share
//! (this library, so that each piece exists once), and `model_stub`
//! (`src/bin/model_stub.rs`), the stand-in model server for local runs of the
//! LLM stages.
//!
//! Fixtures the tests also use (the account and route constants, the moto
//! S3 server, the scriptable model server) stay in `skald-tests`, which this
//! crate depends on; nothing in `tests/` depends on this crate.
//!
//! - Running: [`fail`] (abort with the bench's name), [`Flags`] (the command
//!   line), [`block_on`] (the multi-threaded tokio runtime of `main`),
//!   [`load_average`], [`now`].
//! - Statistics: [`percentile`] (nearest rank), [`sorted`], [`median`],
//!   [`median_range`], [`diff_ms`] and [`paired_ms`], [`Summary`] (p50 /
//!   p95 / max), [`ms`] and [`fmt_ms`] (milliseconds to about three
//!   significant digits), and [`Table`] (a header and rows that share one
//!   column layout).
//! - The demo app: [`embedder`] (USE-m3 or hashed), [`TempStore`] (a
//!   `LocalStore` in a temporary directory), [`ingest_demo`]
//!   (`samplconfigs/demo`), [`dev_app`] (dev identity), [`identity`],
//!   [`retrieval_queries`], and requests through the library handlers:
//!   [`event`], [`search`], [`sessions_call`].
//! - S3: [`moto_demo`] (a bucket on the local S3 server of
//!   [`skald_tests::moto`], with the demo ingested), [`s3_at`], the latency
//!   proxy [`start_proxy`] with its [`CallLog`], and [`start_s3_over`], an
//!   in-process S3-protocol server over any store (GET, HEAD, one-page
//!   LIST, conditional PUT); both are hyper servers.
//! - Synthetic data: [`Rng`] (SplitMix64).
//! - The evaluations: [`eval`] (the BM25 baseline, text normalisation).
//!
//! Everything here aborts the bench through [`fail`] on an error: a bench
//! has nothing to recover.

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_http::Body;
use serde_json::Value;
use skald::app::App;
use skald::config::{Config, IdentityConfig, IdentityMode};
use skald::embed::Embedder;
use skald::embed::hashed::HashedEmbedder;
use skald::embed::use_m3::UseM3Embedder;
use skald::identity::{AccountId, Identity, UserId};
use skald::ingest::{IngestOptions, ingest_dir};
use skald::store::SharedStore;
use skald::store::local::LocalStore;
use skald_tests::fixture::ACCOUNT;
use skald_tests::moto;

pub mod eval;
mod proxy;
mod s3_server;

pub use proxy::{Call, CallLog, start_proxy};
pub use s3_server::start_s3_over;

/// The user every bench request is made as (the dev-mode default).
pub const USER: &str = "default";

// ---------------------------------------------------------------------------
// Running.

/// The running bench's name: the file name of `argv[0]` (`bench_context`
/// for `target/release/bench_context`).
#[must_use]
pub fn program() -> String {
    std::env::args_os()
        .next()
        .as_deref()
        .map(Path::new)
        .and_then(Path::file_name)
        .map_or_else(|| "bench".to_owned(), |name| name.to_string_lossy().into_owned())
}

/// Prints `{program}: {what}: {e}` on stderr and exits with status 1.
/// Nothing is cleaned up (a temporary store stays behind).
pub fn fail(what: &str, e: impl Display) -> ! {
    eprintln!("{}: {what}: {e}", program());
    std::process::exit(1)
}

/// Runs `future` to completion on a new multi-threaded tokio runtime (all
/// drivers enabled): a bench's `main`.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| fail("tokio runtime", e));
    runtime.block_on(future)
}

/// The command line after the program name, read flag by flag:
///
/// ```text
/// let mut flags = Flags::from_env("usage: bench_x [--rounds N] [--hashed]");
/// while let Some(flag) = flags.next() {
///     match flag.as_str() {
///         "--hashed" => args.hashed = true,
///         "--rounds" => args.rounds = flags.at_least(&flag, 1)?,
///         _ => return Err(flags.unknown(&flag)),
///     }
/// }
/// ```
///
/// Numbers may use `_` as a separator (`100_000`).
#[derive(Debug)]
pub struct Flags {
    args: std::vec::IntoIter<String>,
    usage: &'static str,
}

impl Flags {
    /// The process's arguments; `usage` ends the error of a missing value or
    /// an unknown flag.
    #[must_use]
    pub fn from_env(usage: &'static str) -> Self {
        Self::new(std::env::args().skip(1), usage)
    }

    /// `args` (without the program name), for tests.
    pub fn new(args: impl IntoIterator<Item = String>, usage: &'static str) -> Self {
        Self { args: args.into_iter().collect::<Vec<_>>().into_iter(), usage }
    }

    /// The value after `flag`; an error naming `flag` when none follows.
    ///
    /// # Errors
    /// When the command line ends after `flag`.
    pub fn value(&mut self, flag: &str) -> Result<String, String> {
        self.args.next().ok_or_else(|| format!("{flag} needs a value; {}", self.usage))
    }

    /// The whole number after `flag` (see [`parse_number`]).
    ///
    /// # Errors
    /// When no value follows or it is not a whole number.
    pub fn number(&mut self, flag: &str) -> Result<u64, String> {
        parse_number(flag, &self.value(flag)?)
    }

    /// The whole number after `flag`, at least `min`.
    ///
    /// # Errors
    /// As [`Flags::number`].
    pub fn at_least(&mut self, flag: &str, min: usize) -> Result<usize, String> {
        Ok((self.number(flag)? as usize).max(min))
    }

    /// The milliseconds after `flag`.
    ///
    /// # Errors
    /// As [`Flags::number`].
    pub fn millis(&mut self, flag: &str) -> Result<Duration, String> {
        Ok(Duration::from_millis(self.number(flag)?))
    }

    /// The error for an unknown `flag`.
    #[must_use]
    pub fn unknown(&self, flag: &str) -> String {
        format!("unknown argument {flag}; {}", self.usage)
    }
}

impl Iterator for Flags {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        self.args.next()
    }
}

/// The value of `flag`, a number from 0 to 1 (a relevance bar); aborts the
/// bench with the flag's name otherwise.
pub fn fraction(flags: &mut Flags, flag: &str) -> f64 {
    let text = flags.value(flag).unwrap_or_else(|e| fail(flag, e));
    match text.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => x,
        _ => fail(flag, format!("{text:?} is not a number from 0 to 1")),
    }
}

/// `text`, the value of `flag`, as a whole number; `_` may separate digits.
///
/// # Errors
/// `"{flag} {text}: {reason}"` when it is not one.
pub fn parse_number(flag: &str, text: &str) -> Result<u64, String> {
    text.replace('_', "").parse::<u64>().map_err(|e| format!("{flag} {text}: {e}"))
}

/// The first three fields of `/proc/loadavg` (1, 5 and 15 minutes), empty
/// where there is none.
#[must_use]
pub fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// The median and 90th percentile of `runs` timings of `f`, in
/// milliseconds (the embedder benches' measure).
pub fn time_ms<T>(runs: usize, mut f: impl FnMut() -> T) -> (f64, f64) {
    let t = sorted((0..runs.max(1)).map(|_| {
        let start = std::time::Instant::now();
        std::hint::black_box(f());
        start.elapsed().as_secs_f64() * 1e3
    }));
    (t[t.len() / 2], t[(t.len() * 9 / 10).min(t.len() - 1)])
}

/// `key`'s value in `/proc/self/status` (e.g. `VmHWM:`), or `?`.
#[must_use]
pub fn status(key: &str) -> String {
    proc_status(key).unwrap_or_else(|| "?".to_owned())
}

/// The line `key` (e.g. `VmHWM:`) of `/proc/self/status` without its key,
/// trimmed (`"15300 kB"`).
#[must_use]
pub fn proc_status(key: &str) -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|line| line.strip_prefix(key)).map(|value| value.trim().to_owned())
}

/// Seconds since the Unix epoch.
#[must_use]
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

// ---------------------------------------------------------------------------
// Statistics.

/// Nearest-rank percentile `p` (0–100) of `sorted` (ascending); the default
/// value when there are no samples.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied().unwrap_or_default()
}

/// `values` in ascending order (values that do not compare, NaN, stay where
/// they are relative to their neighbours).
pub fn sorted<T: PartialOrd>(values: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = values.into_iter().collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v
}

/// The nearest-rank median (the lower one of an even count).
pub fn median<T: Copy + PartialOrd + Default>(values: impl IntoIterator<Item = T>) -> T {
    percentile(&sorted(values), 50.0)
}

/// `"{median} [{min}–{max}]"`.
pub fn median_range<T: Copy + PartialOrd + Default + Display>(values: impl IntoIterator<Item = T>) -> String {
    let v = sorted(values);
    let (lo, hi) = (v.first().copied().unwrap_or_default(), v.last().copied().unwrap_or_default());
    format!("{} [{lo}–{hi}]", percentile(&v, 50.0))
}

/// `a − b` in milliseconds (signed).
#[must_use]
pub fn diff_ms(a: Duration, b: Duration) -> f64 {
    (a.as_secs_f64() - b.as_secs_f64()) * 1e3
}

/// The paired differences `a[i] − b[i]` in milliseconds (the same query or
/// round measured two ways), sorted.
#[must_use]
pub fn paired_ms(a: &[Duration], b: &[Duration]) -> Vec<f64> {
    sorted(a.iter().zip(b).map(|(a, b)| diff_ms(*a, *b)))
}

/// The usual summary of timings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Nearest-rank median.
    pub p50: Duration,
    /// Nearest-rank 95th percentile.
    pub p95: Duration,
    /// The slowest.
    pub max: Duration,
}

impl Summary {
    /// The summary of `times` (zeros when there are none).
    #[must_use]
    pub fn of(times: &[Duration]) -> Self {
        let t = sorted(times.iter().copied());
        Self { p50: percentile(&t, 50.0), p95: percentile(&t, 95.0), max: t.last().copied().unwrap_or_default() }
    }
}

/// Milliseconds to about three significant digits: `123`, `12.3`, `1.23`.
#[must_use]
pub fn ms(d: Duration) -> String {
    fmt_ms(d.as_secs_f64() * 1e3)
}

/// [`ms`] of a (signed) number of milliseconds.
#[must_use]
pub fn fmt_ms(ms: f64) -> String {
    if ms.abs() >= 100.0 {
        format!("{ms:.0}")
    } else if ms.abs() >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

/// A text table whose header and rows share one column layout, given once
/// as space-separated columns: `<N` is a cell left-aligned in N characters,
/// `>N` one right-aligned (a longer cell overflows), anything else literal
/// text such as a `|` separator. A line is two spaces of indent, then the
/// columns separated by one space:
///
/// ```
/// # use skald_bench::Table;
/// let table = Table::new("<5 >4 | >3");
/// assert_eq!(table.header(&["name", "p50", "n"]), "  name   p50 |   n");
/// assert_eq!(table.line(&[&"a", &1.5, &12]), "  a      1.5 |  12");
/// ```
#[derive(Debug, Clone)]
pub struct Table(Vec<Column>);

#[derive(Debug, Clone, Copy)]
enum Column {
    Left(usize),
    Right(usize),
    Text(&'static str),
}

impl Table {
    /// A table of `layout` (see [`Table`]).
    ///
    /// # Panics
    /// When a width in `layout` is not a number.
    #[must_use]
    pub fn new(layout: &'static str) -> Self {
        let width = |w: &str| w.parse().unwrap_or_else(|e| panic!("table layout {layout:?}: width {w:?}: {e}"));
        Self(
            layout
                .split(' ')
                .map(|column| {
                    if let Some(w) = column.strip_prefix('<') {
                        Column::Left(width(w))
                    } else if let Some(w) = column.strip_prefix('>') {
                        Column::Right(width(w))
                    } else {
                        Column::Text(column)
                    }
                })
                .collect(),
        )
    }

    /// The header line: `names` in the cells.
    #[must_use]
    pub fn header(&self, names: &[&str]) -> String {
        let cells: Vec<&dyn Display> = names.iter().map(|n| n as &dyn Display).collect();
        self.line(&cells)
    }

    /// A line of `cells`, in order, one per `<N` or `>N` column; missing
    /// cells are blank, extra ones ignored.
    #[must_use]
    pub fn line(&self, cells: &[&dyn Display]) -> String {
        let mut cells = cells.iter();
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|column| match column {
                Column::Left(w) => format!("{:<w$}", cells.next().map_or_else(String::new, ToString::to_string)),
                Column::Right(w) => format!("{:>w$}", cells.next().map_or_else(String::new, ToString::to_string)),
                Column::Text(text) => (*text).to_owned(),
            })
            .collect();
        format!("  {}", parts.join(" "))
    }
}

// ---------------------------------------------------------------------------
// The demo app.

/// The repository's root.
#[must_use]
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The USE-m3 model directory: `SKALD_USE_M3_DIR`, else
/// `.skald/models/use-m3` of the repository (`scripts/setup-model.sh`).
#[must_use]
pub fn use_m3_dir() -> PathBuf {
    std::env::var_os("SKALD_USE_M3_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| repo().join(".skald/models/use-m3"), PathBuf::from)
}

/// The multilingual-e5-small model directory: `SKALD_E5_DIR` or
/// `<repo>/.skald/models/e5`.
#[must_use]
pub fn e5_dir() -> PathBuf {
    std::env::var_os("SKALD_E5_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| repo().join(".skald/models/e5"), PathBuf::from)
}

/// `HashedEmbedder::new(256)` when `hashed`, else the USE-m3 model of
/// [`use_m3_dir`]. Without the model the bench exits with status 2, naming
/// `hashed_flag` (the bench's way to ask for the hashed embedder).
#[must_use]
pub fn embedder(hashed: bool, hashed_flag: &str) -> Arc<dyn Embedder> {
    if hashed {
        return Arc::new(HashedEmbedder::new(256));
    }
    Arc::new(use_m3(hashed_flag))
}

/// USE-m3 beside the embedded multilingual-e5-small of [`e5_dir`], fused
/// by script (`skald::embed::ensemble`, the `use-m3+e5` embedder); exits
/// with status 2 without either model.
#[must_use]
pub fn fused_embedder() -> Arc<dyn Embedder> {
    let e5 = skald::embed::e5::E5Embedder::open(e5_dir()).unwrap_or_else(|e| {
        eprintln!(
            "{}: {e}
run scripts/setup-model.sh first (or set SKALD_E5_DIR)",
            program()
        );
        std::process::exit(2)
    });
    Arc::new(skald::embed::ensemble::Ensemble::new(Arc::new(use_m3("--hashed")), Arc::new(e5)))
}

/// The benches' reranker flags: `--rerank-e5` (the local stand-in,
/// [`e5_reranker`]), or `--rerank BASE_URL` with `--rerank-model NAME` (a
/// real service's `/rerank`, its key in `SKALD_RERANK_API_KEY`), and
/// `--rerank-threshold X` (`retrieval.rerank_threshold`).
#[derive(Debug, Default)]
pub struct RerankFlags {
    e5: bool,
    url: Option<String>,
    model: Option<String>,
}

impl RerankFlags {
    /// Takes `flag` (and its value) if it is one of these; false otherwise.
    pub fn take(&mut self, flags: &mut Flags, flag: &str, retrieval: &mut skald::config::RetrievalConfig) -> bool {
        let value = |flags: &mut Flags| flags.value(flag).unwrap_or_else(|e| fail(flag, e));
        match flag {
            "--rerank-e5" => self.e5 = true,
            "--rerank" => self.url = Some(value(flags)),
            "--rerank-model" => self.model = Some(value(flags)),
            "--rerank-threshold" => {
                let text = value(flags);
                retrieval.rerank_threshold =
                    text.parse().ok().filter(|x: &f64| x.is_finite()).unwrap_or_else(|| fail(flag, "not a number"));
            }
            _ => return false,
        }
        true
    }

    /// The `rerank` setting these flags ask for, and the local server
    /// behind `--rerank-e5` (keep it alive while the app runs).
    pub async fn config(&self) -> (Option<skald::config::ModelConfig>, Option<skald_tests::model_server::ModelServer>) {
        if self.e5 {
            let server = e5_reranker().await;
            return (Some(server.openai_model("e5-cosine")), Some(server));
        }
        let Some(url) = &self.url else { return (None, None) };
        let model = self.model.clone().unwrap_or_else(|| fail("--rerank", "needs --rerank-model"));
        let config = skald::config::ModelConfig::Openai {
            base_url: url.clone(),
            model,
            api_key_env: "SKALD_RERANK_API_KEY".into(),
            api_key_secret: None,
            api_key: None,
        };
        (Some(config), None)
    }
}

/// A local reranker for the benches' `--rerank-e5`: a
/// [`skald_tests::model_server::ModelServer`] answering `POST /v1/rerank`
/// with multilingual-e5-small's cosine of the query (`query:` side) and
/// each document (`passage:` side), its embeddings cached by text. A
/// second-stage model that runs here (no cross-encoder can be fetched on
/// this machine): what the rerank stage and its threshold do with a
/// bi-encoder's scores, not what a cross-encoder would score. Exits with
/// status 2 when the e5 model is missing.
pub async fn e5_reranker() -> skald_tests::model_server::ModelServer {
    use skald::embed::e5::{E5Embedder, Side};
    use std::collections::HashMap;
    use std::sync::Mutex;
    let e5 = E5Embedder::open(e5_dir()).unwrap_or_else(|e| {
        eprintln!("{}: {e}\nrun scripts/setup-model.sh first (or set SKALD_E5_DIR)", program());
        std::process::exit(2)
    });
    let cache: Mutex<HashMap<(bool, String), Vec<f32>>> = Mutex::new(HashMap::new());
    let vector = move |text: &str, query: bool| -> Vec<f32> {
        let key = (query, text.to_owned());
        if let Some(v) = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key) {
            return v.clone();
        }
        let side = if query { Side::Query } else { Side::Passage };
        let v = e5.embed_blocking(&[text], side).pop().unwrap_or_default();
        cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, v.clone());
        v
    };
    let server = skald_tests::model_server::ModelServer::start().await;
    server.set_default(skald_tests::model_server::Reply::compute(move |query_and_document| {
        let (query, document) = query_and_document.split_once('\n').unwrap_or((query_and_document, ""));
        let (q, d) = (vector(query, true), vector(document, false));
        let cosine: f32 = q.iter().zip(&d).map(|(a, b)| a * b).sum();
        format!("{cosine}")
    }));
    server
}

/// The USE-m3 model of [`use_m3_dir`], or exit with status 2.
fn use_m3(hashed_flag: &str) -> UseM3Embedder {
    match UseM3Embedder::open(use_m3_dir()) {
        Ok(model) => model,
        Err(e) => {
            eprintln!(
                "{}: {e}\nrun scripts/setup-model.sh first (or set SKALD_USE_M3_DIR, or pass {hashed_flag})",
                program()
            );
            std::process::exit(2)
        }
    }
}

/// A `LocalStore` in a directory of the system's temporary directory,
/// emptied when opened and removed when dropped (not when the bench exits
/// through [`fail`]).
#[derive(Debug)]
pub struct TempStore {
    store: SharedStore,
    dir: PathBuf,
}

impl TempStore {
    /// The store in `std::env::temp_dir()/{name}`.
    #[must_use]
    pub fn open(name: &str) -> Self {
        let dir = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let store: SharedStore = Arc::new(LocalStore::open(&dir).unwrap_or_else(|e| fail("local store", e)));
        Self { store, dir }
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// Its directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("{}: cannot remove {}: {e}", program(), self.dir.display());
        }
    }
}

/// The bench account ([`ACCOUNT`], `default`).
#[must_use]
pub fn account() -> AccountId {
    AccountId::new(ACCOUNT).unwrap_or_else(|e| fail("account", e))
}

/// The caller of every bench request: [`ACCOUNT`] and [`USER`].
#[must_use]
pub fn identity() -> Identity {
    Identity { account: account(), user: UserId::new(USER).unwrap_or_else(|e| fail("user", e)), actor_peer: None }
}

/// Ingests the demo (`samplconfigs/demo`, abstracts up to 400 bytes) into
/// `store` for [`ACCOUNT`] with `embedder`; returns how long it took.
pub async fn ingest_demo(store: &SharedStore, embedder: &dyn Embedder) -> Duration {
    let account = account();
    let started = Instant::now();
    let options = IngestOptions { abstract_max_bytes: 400, ..IngestOptions::default() };
    ingest_dir(
        &repo().join("samplconfigs/demo"),
        &skald::index::Target::segments(store),
        &account,
        embedder,
        &options,
        &mut |_| {},
    )
    .await
    .unwrap_or_else(|e| fail("ingest samplconfigs/demo", e));
    started.elapsed()
}

/// The default configuration in dev identity mode (the caller is
/// [`ACCOUNT`] / [`USER`] unless headers say otherwise).
#[must_use]
pub fn dev_config() -> Config {
    Config { identity: IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() }, ..Config::default() }
}

/// An app of [`dev_config`] over `store` with `embedder`.
#[must_use]
pub fn dev_app(store: SharedStore, embedder: Arc<dyn Embedder>) -> App {
    App::with_parts(dev_config(), store, embedder)
}

/// The first 10 `en` and the first 10 `zh` queries of
/// `samplconfigs/retrieval-queries.json`.
#[must_use]
pub fn retrieval_queries() -> Vec<String> {
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

/// A Lambda event for `method path` with a JSON `body` (none: empty), as the
/// default dev-mode caller.
#[must_use]
pub fn event(method: &str, path: &str, body: Option<&Value>) -> lambda_http::Request {
    lambda_http::http::Request::builder()
        .method(method)
        .uri(format!("https://api.example.com{path}"))
        .header("content-type", "application/json")
        .body(body.map_or(Body::Empty, |b| Body::Text(b.to_string())))
        .unwrap_or_else(|e| fail("request", e))
}

/// A response body as JSON.
#[must_use]
pub fn parse_body(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| fail("response json", format!("{e}: {text}")))
}

/// `POST /api/v1/search/search` with `body`, timed around
/// `skald::api::search::handle` only (the library request is built before
/// the clock starts, the response parsed after it stops). Anything but
/// status 200 aborts the bench.
pub async fn search(app: &App, body: &Value) -> (Duration, Value) {
    let request = skald_lambda::to_library_request(event("POST", skald_tests::fixture::SEARCH_PATH, Some(body)));
    let started = Instant::now();
    let response = Box::pin(skald::api::search::handle(app, request)).await;
    let time = started.elapsed();
    if response.status() != 200 {
        fail("search", format!("status {}: {}", response.status(), response.body()));
    }
    (time, parse_body(response.body()))
}

/// A sessions route, timed around `skald::api::sessions::handle`: (time,
/// status, response).
pub async fn sessions_call(app: &App, method: &str, path: &str, body: Option<&Value>) -> (Duration, u16, Value) {
    let request = skald_lambda::to_library_request(event(method, path, body));
    let started = Instant::now();
    let response = Box::pin(skald::api::sessions::handle(app, request)).await;
    let time = started.elapsed();
    (time, response.status().as_u16(), parse_body(response.body()))
}

// ---------------------------------------------------------------------------
// S3.

/// A bucket on the local S3 server ([`moto::endpoint`]) with the demo
/// ingested.
#[derive(Debug)]
pub struct MotoDemo {
    /// The server's endpoint, `http://ip:port`.
    pub endpoint: String,
    /// The server's address (upstream of a [`start_proxy`]).
    pub address: SocketAddr,
    /// The store on the bucket.
    pub store: SharedStore,
    /// How long [`ingest_demo`] took.
    pub ingest: Duration,
}

/// Creates `bucket` on the local S3 server (when missing) and ingests the
/// demo into it with `embedder`.
pub async fn moto_demo(bucket: &str, embedder: &dyn Embedder) -> MotoDemo {
    let endpoint = moto::endpoint();
    let address: SocketAddr = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap_or_else(|e| fail("moto endpoint (want http://ip:port)", e));
    let s3 = moto::store_at(&endpoint, bucket);
    s3.ensure_bucket().await.unwrap_or_else(|e| fail("bucket", e));
    let store: SharedStore = Arc::new(s3);
    let ingest = ingest_demo(&store, embedder).await;
    MotoDemo { endpoint, address, store, ingest }
}

/// A store on `bucket` of the S3-protocol server at `address` (a proxy, an
/// in-process server or moto), configured as [`moto::store_at`].
#[must_use]
pub fn s3_at(address: SocketAddr, bucket: &str) -> SharedStore {
    Arc::new(moto::store_at(&format!("http://{address}"), bucket))
}

// ---------------------------------------------------------------------------
// Synthetic data.

/// SplitMix64: small, deterministic, good enough for synthetic data.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next_u64() % u64::from(hi - lo)) as u32
    }

    /// Uniform in `(0, 1]`.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Appends a random unit vector (uniform on the sphere) of `dim` values.
    pub fn unit_vector(&mut self, dim: usize, out: &mut Vec<f32>) {
        let start = out.len();
        out.extend((0..dim).map(|_| self.normal() as f32));
        skald::embed::l2_normalise(&mut out[start..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u32> = (1..=10).collect();
        assert_eq!(percentile(&v, 50.0), 5);
        assert_eq!(percentile(&v, 95.0), 10);
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile::<u32>(&[], 50.0), 0);
        assert_eq!(median([4, 1, 3, 2]), 2);
        assert_eq!(median_range([7usize, 3, 5]), "5 [3–7]");
        let s = Summary::of(&[Duration::from_millis(3), Duration::from_millis(1), Duration::from_millis(2)]);
        assert_eq!(
            (s.p50, s.p95, s.max),
            (Duration::from_millis(2), Duration::from_millis(3), Duration::from_millis(3))
        );
    }

    #[test]
    fn milliseconds_keep_about_three_digits() {
        assert_eq!(ms(Duration::from_micros(1234)), "1.23");
        assert_eq!(ms(Duration::from_micros(12_345)), "12.3");
        assert_eq!(ms(Duration::from_micros(123_456)), "123");
        assert_eq!(fmt_ms(-12.34), "-12.3");
    }

    #[test]
    fn table_lines_match_format_strings() {
        let t = Table::new("<16 >7 >7 | >5 | <0");
        assert_eq!(t.header(&["setting", "p50", "p95", "reads", "checked"]), {
            format!("  {:<16} {:>7} {:>7} | {:>5} | checked", "setting", "p50", "p95", "reads")
        });
        let cells: [&dyn Display; 5] = [&"max_tokens 1600", &"0.58", &12, &3usize, &"20/20 ok"];
        assert_eq!(
            t.line(&cells),
            format!("  {:<16} {:>7} {:>7} | {:>5} | {}", "max_tokens 1600", "0.58", 12, 3, "20/20 ok")
        );
        // A unit glued to a cell is the same as the unit after a narrower column.
        let t = Table::new("<4 >8");
        assert_eq!(t.line(&[&10, &format!("{}µs", 35)]), format!("  {:<4} {:>6}µs", 10, 35));
    }

    #[test]
    fn flags_read_values_and_numbers() {
        let args = ["--rounds", "1_000", "--hashed", "--latency-ms", "5", "--x"].map(str::to_owned);
        let mut flags = Flags::new(args, "usage: b");
        assert_eq!(flags.next().as_deref(), Some("--rounds"));
        assert_eq!(flags.at_least("--rounds", 1), Ok(1000));
        assert_eq!(flags.next().as_deref(), Some("--hashed"));
        assert_eq!(flags.next().as_deref(), Some("--latency-ms"));
        assert_eq!(flags.millis("--latency-ms"), Ok(Duration::from_millis(5)));
        assert_eq!(flags.next().as_deref(), Some("--x"));
        assert_eq!(flags.value("--x"), Err("--x needs a value; usage: b".to_owned()));
        assert_eq!(flags.unknown("--x"), "unknown argument --x; usage: b");
        assert_eq!(parse_number("--n", "x"), Err("--n x: invalid digit found in string".to_owned()));
    }
}
