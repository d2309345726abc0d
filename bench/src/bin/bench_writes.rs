//! The write surface's benchmark: a write until it is searchable, grep and
//! glob over a large tree, and a large resource upload end to end, on a
//! local store and on S3 (moto), with and without a simulated per-call
//! round trip.
//!
//! ```text
//! cargo run --release -p skald-bench --bin bench_writes -- [--hashed] [--writes 50] [--tree-files 10000]
//!     [--tree-runs 20] [--moto-tree-runs 20] [--uploads 10] [--upload-kb 1024] [--latency-ms 20] [--no-moto]
//!     [--writes-only | --tree-only | --uploads-only]
//! ```
//!
//! Stores: `local` (a `LocalStore` in a temporary directory, which sends no
//! change notifications, so the write routes index inline); `moto` (the S3
//! client, `S3Store`, on a local moto server: `skald_tests::moto`,
//! `SKALD_TEST_S3_ENDPOINT` or a `python3` child) and `moto+L ms` (the same
//! bucket through `skald_bench`'s loopback proxy, which waits
//! `--latency-ms` before forwarding each request and counts them). On S3
//! the app is configured as deployed: the write routes answer `queued` and
//! the `indexer` function, triggered by the store's notifications, indexes
//! the change; here the bench runs the indexer's `skald::indexer::apply`
//! over the changed key, as `bench_sessions` does for commits (the queue's
//! batching window, up to 5 s deployed, is not counted). Both stores start
//! with the demo (`samplconfigs/demo`) ingested, embedder USE-m3 (or
//! `HashedEmbedder::new(256)` with `--hashed`). Every request goes through
//! the library handler its function serves (`skald::api::content::handle`,
//! `skald::api::find::handle`) as an `http::Request<Bytes>` in dev identity
//! mode (user `default`, admin); each time is taken around the handler
//! call only.
//!
//! 1. Write -> searchable: `--writes` times `POST /api/v1/content/write` of
//!    a memory (`viking://user/default/memories/entities/…`) holding a
//!    distinctive sentence; its `result.status` must be `indexed` locally
//!    and `queued` on S3, where the indexer's `apply` over the written key
//!    follows; a keyword `find` for the sentence's distinctive words must
//!    then return the memory. Write -> searchable is the write plus, on S3,
//!    the indexer (the find is timed on its own).
//! 2. Grep and glob: `--tree-files` small Markdown files written straight
//!    to the store (`viking://resources/bulk/dNN/fNNNN.md`, 100 a
//!    directory, at most 10,000; not indexed: grep and glob read the tree), one in 100
//!    holding the word `heliotrope`; then `--tree-runs` times `POST
//!    /api/v1/search/grep` for it and `POST /api/v1/search/glob` for
//!    `**/f00*.md` (100 files), `node_limit` 256. Every answer is checked
//!    against what `skald::explore`'s bounds (files read, names listed)
//!    say it must hold, `truncated` included.
//! 3. Upload: a `--upload-kb` Markdown document sent as
//!    `multipart/form-data` to `POST /api/v1/resources/temp_upload`, then
//!    `POST /api/v1/resources` with its `temp_file_id` and `parent`
//!    `viking://resources/big` (which indexes inline locally; on S3 the
//!    indexer's `apply` over the new file follows). The document holds two
//!    distinctive sentences, one after its first 4 KiB and one in its
//!    middle; their marker words' last letter changes from run to run (so
//!    each upload is a new one; at most 26 runs), and each run has a new
//!    file name. A keyword `find` for the first sentence must return the
//!    answer's `root_uri`; whether one for the middle sentence does is
//!    reported (the keyword index tokenizes a record's first
//!    `LEXICAL_MAX_BYTES`, 64 KiB).
//!
//! A failed check does not stop the bench: the request and the response are
//! printed and the row says so.
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use skald::app::App;
use skald::explore::{MAX_GREP_BYTES, MAX_GREP_FILES, MAX_SCAN_KEYS};
use skald::store::{PutMode, SharedStore};
use skald::uri::{VikingUri, tree_key};
use skald_bench::{
    Call, CallLog, Flags, Rng, Summary, Table, TempStore, block_on, dev_app, embedder, fail, identity, ingest_demo,
    load_average, median, moto_demo, ms, now, parse_body, s3_at, start_proxy,
};
use skald_tests::fixture::FIND_PATH;

/// `POST /api/v1/content/write`.
const WRITE_PATH: &str = "/api/v1/content/write";
/// `POST /api/v1/search/grep`.
const GREP_PATH: &str = "/api/v1/search/grep";
/// `POST /api/v1/search/glob`.
const GLOB_PATH: &str = "/api/v1/search/glob";
/// `POST /api/v1/resources/temp_upload`.
const UPLOAD_PATH: &str = "/api/v1/resources/temp_upload";
/// `POST /api/v1/resources`.
const RESOURCES_PATH: &str = "/api/v1/resources";

/// The bulk tree's root.
const BULK_URI: &str = "viking://resources/bulk";
/// Files per directory of the bulk tree.
const BULK_PER_DIR: usize = 100;
/// The word one file in [`BULK_WORD_EVERY`] of the bulk tree holds.
const BULK_WORD: &str = "heliotrope";
/// One file in this many holds [`BULK_WORD`] (1 %).
const BULK_WORD_EVERY: usize = 100;
/// The glob of part 2: the files `f0000.md` to `f0099.md`.
const GLOB_PATTERN: &str = "**/f00*.md";
/// `node_limit` of grep and glob.
const NODE_LIMIT: usize = 256;
/// Where part 3's resources go.
const BIG_PARENT: &str = "viking://resources/big";

struct Args {
    writes: usize,
    tree_files: usize,
    tree_runs: usize,
    moto_tree_runs: usize,
    uploads: usize,
    upload_kb: usize,
    latency: Duration,
    hashed: bool,
    moto: bool,
    part_writes: bool,
    part_tree: bool,
    part_uploads: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        writes: 50,
        tree_files: 10_000,
        tree_runs: 20,
        moto_tree_runs: 20,
        uploads: 10,
        upload_kb: 1024,
        latency: Duration::from_millis(20),
        hashed: false,
        moto: true,
        part_writes: true,
        part_tree: true,
        part_uploads: true,
    };
    let mut flags = Flags::from_env(
        "usage: bench_writes [--hashed] [--writes N] [--tree-files N] [--tree-runs N] [--moto-tree-runs N] \
         [--uploads N] [--upload-kb K] [--latency-ms L] [--no-moto] [--writes-only | --tree-only | --uploads-only]",
    );
    let mut only = None;
    while let Some(flag) = flags.next() {
        match flag.as_str() {
            "--hashed" => args.hashed = true,
            "--no-moto" => args.moto = false,
            "--writes-only" | "--tree-only" | "--uploads-only" => only = Some(flag),
            "--writes" => args.writes = flags.at_least(&flag, 1)?,
            "--tree-files" => args.tree_files = flags.at_least(&flag, 1)?.min(10_000),
            "--tree-runs" => args.tree_runs = flags.at_least(&flag, 1)?,
            "--moto-tree-runs" => args.moto_tree_runs = flags.at_least(&flag, 0)?,
            "--uploads" => args.uploads = flags.at_least(&flag, 1)?.min(26),
            "--upload-kb" => args.upload_kb = flags.at_least(&flag, 1)?,
            "--latency-ms" => args.latency = flags.millis(&flag)?,
            _ => return Err(flags.unknown(&flag)),
        }
    }
    if let Some(only) = only {
        args.part_writes = only == "--writes-only";
        args.part_tree = only == "--tree-only";
        args.part_uploads = only == "--uploads-only";
    }
    Ok(args)
}

/// `p50 / p95` of durations, in ms; `-` when there are none.
fn p50_p95(times: &[Duration]) -> String {
    if times.is_empty() {
        return "-".to_owned();
    }
    let s = Summary::of(times);
    format!("{} / {}", ms(s.p50), ms(s.p95))
}

/// A short process-unique suffix.
fn fresh() -> String {
    format!("{:x}", skald::index::unique() & 0xf_ffff)
}

fn uri(text: &str) -> VikingUri {
    VikingUri::parse(text).unwrap_or_else(|e| fail("uri", format!("{text}: {e}")))
}

// ---------------------------------------------------------------------------
// Requests.

/// An `http::Request<Bytes>` as the Lambda edge hands the library one
/// (no authorizer claims: dev identity mode).
fn request(method: &str, path: &str, content_type: &str, body: Bytes) -> http::Request<Bytes> {
    http::Request::builder()
        .method(method)
        .uri(format!("https://api.example.com{path}"))
        .header("content-type", content_type)
        .body(body)
        .unwrap_or_else(|e| fail("request", e))
}

fn json_request(path: &str, body: &Value) -> http::Request<Bytes> {
    request("POST", path, "application/json", Bytes::from(body.to_string()))
}

/// One answer: how long the handler took, its status and body.
struct Answer {
    time: Duration,
    status: u16,
    json: Value,
}

impl Answer {
    /// `what`, the request's body (cut) and this answer, for a report.
    fn describe(&self, what: &str, body: &str) -> String {
        let body: String = body.chars().take(300).collect();
        let answer: String = self.json.to_string().chars().take(600).collect();
        format!("{what}: request {body} -> {} {answer}", self.status)
    }
}

/// A route of the `content` function, timed around
/// `skald::api::content::handle`.
async fn content_call(app: &App, request: http::Request<Bytes>) -> Answer {
    let started = Instant::now();
    let response = Box::pin(skald::api::content::handle(app, request)).await;
    let time = started.elapsed();
    Answer { time, status: response.status().as_u16(), json: parse_body(response.body()) }
}

/// A keyword `find` for `query` (limit 5), timed around
/// `skald::api::find::handle`; the body sent and the answer.
async fn keyword_find(app: &App, query: &str) -> (Value, Answer) {
    let body = json!({ "query": query, "search_type": "keywords", "limit": 5 });
    let request = json_request(FIND_PATH, &body);
    let started = Instant::now();
    let response = Box::pin(skald::api::find::handle(app, request)).await;
    let time = started.elapsed();
    (body, Answer { time, status: response.status().as_u16(), json: parse_body(response.body()) })
}

/// Store calls by kind: `"2 GET, 1 PUT"` (a GET of the bucket alone is a
/// LIST).
fn kinds(calls: &[Call]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for c in calls {
        // Path style: `/{bucket}` alone (plus a query) is a bucket operation.
        let bucket_only = c.path.trim_matches('/').split('/').count() <= 1;
        let kind = if c.method == "GET" && bucket_only { "LIST".to_owned() } else { c.method.clone() };
        *counts.entry(kind).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    if parts.is_empty() { "none".to_owned() } else { parts.join(", ") }
}

/// Whether a find answer's hits include `uri`.
fn hits_include(json: &Value, uri: &str) -> bool {
    ["memories", "resources", "skills"]
        .iter()
        .filter_map(|k| json["result"][k].as_array())
        .flatten()
        .any(|hit| hit["uri"] == uri)
}

// ---------------------------------------------------------------------------
// A store under test.

struct Target {
    /// Row label.
    label: String,
    /// For URIs and markers: `[a-z]`.
    tag: &'static str,
    app: Arc<App>,
    /// The same objects without the proxy: set-up writes.
    plain: SharedStore,
    /// The proxy's log, when the app's store goes through it.
    log: Option<Arc<CallLog>>,
}

impl Target {
    /// Whether the write routes index inline (a local store) or leave it
    /// to the indexer (S3).
    fn inline(&self) -> bool {
        self.app.config.memory_index_inline()
    }

    /// Store calls the proxy saw since the last call (`None`: no proxy).
    fn calls(&self) -> Option<Vec<Call>> {
        self.log.as_ref().map(|log| log.take())
    }

    /// The indexer's `apply` over `uri`'s key, as the `indexer` function
    /// runs it on the store's notification; timed.
    async fn index(&self, uri: &str) -> Result<Duration, String> {
        let change = skald::indexer::Change {
            key: tree_key(&identity().account, &self.uri_checked(uri)?),
            at: now(),
            version: None,
        };
        let started = Instant::now();
        let report = skald::indexer::apply(&self.app, &[change]).await.map_err(|e| e.to_string())?;
        let time = started.elapsed();
        if report.indexed == 0 {
            return Err(format!("the indexer indexed nothing for {uri}: {report:?}"));
        }
        Ok(time)
    }

    fn uri_checked(&self, text: &str) -> Result<VikingUri, String> {
        VikingUri::parse(text).map_err(|e| format!("{}: {text}: {e}", self.label))
    }
}

/// `app` as deployed on S3: writes are indexed by the `indexer` function
/// from the store's notifications, not inline.
fn on_s3(mut app: App) -> App {
    app.config.memory.index_inline = Some(false);
    app
}

// ---------------------------------------------------------------------------
// 1. Write -> searchable.

#[derive(Default)]
struct WriteResult {
    label: String,
    writes: Vec<Duration>,
    /// The indexer (S3 only).
    indexing: Vec<Duration>,
    finds: Vec<Duration>,
    /// Write (+ indexer).
    searchable: Vec<Duration>,
    found: usize,
    /// Store calls per write, indexer run and find (through the proxy).
    calls: Vec<(usize, usize, usize)>,
    /// The first write's, indexer run's and find's calls by kind.
    first_calls: String,
    problems: Vec<String>,
}

async fn measure_writes(target: &Target, n: usize) -> WriteResult {
    let mut r = WriteResult { label: target.label.clone(), ..WriteResult::default() };
    let expected = if target.inline() { "indexed" } else { "queued" };
    let run = fresh();
    for i in 0..n {
        let marker = format!("marigold{i}{}{run}", target.tag);
        let uri = format!("viking://user/default/memories/entities/bench-{}-{run}-{i:03}.md", target.tag);
        let content = format!(
            "My {marker} kayak is stored behind the old boathouse on the north shore.\n\n\
             It needs a new paddle before the spring regatta; the club lends one until then."
        );
        let body = json!({ "uri": uri, "content": content });
        target.calls();
        let write = content_call(&target.app, json_request(WRITE_PATH, &body)).await;
        let write_calls = target.calls();
        let record = r.first_calls.is_empty();
        if write.status != 200 || write.json["result"]["status"] != expected {
            r.problems.push(write.describe(&format!("write {i} (expected status {expected})"), &body.to_string()));
            continue;
        }
        let written = write.json["result"]["uri"].as_str().unwrap_or(&uri).to_owned();
        r.writes.push(write.time);
        let mut total = write.time;
        let mut index_calls = Vec::new();
        if !target.inline() {
            match target.index(&written).await {
                Ok(time) => {
                    r.indexing.push(time);
                    total += time;
                }
                Err(e) => {
                    r.problems.push(format!("index write {i}: {e}"));
                    continue;
                }
            }
            index_calls = target.calls().unwrap_or_default();
        }
        r.searchable.push(total);
        let (find_body, find) = keyword_find(&target.app, &format!("{marker} kayak")).await;
        r.finds.push(find.time);
        if find.status == 200 && hits_include(&find.json, &written) {
            r.found += 1;
        } else {
            r.problems.push(find.describe(&format!("find after write {i} (want {written})"), &find_body.to_string()));
        }
        if let (Some(w), Some(f)) = (write_calls, target.calls()) {
            if record {
                r.first_calls = format!("write: {}; indexer: {}; find: {}", kinds(&w), kinds(&index_calls), kinds(&f));
            }
            r.calls.push((w.len(), index_calls.len(), f.len()));
        }
    }
    r
}

/// `"a / b / c"`: the medians of store calls per write, indexer run and
/// find; `-` without a proxy.
fn median_calls(calls: &[(usize, usize, usize)]) -> String {
    if calls.is_empty() {
        return "-".to_owned();
    }
    format!(
        "{} / {} / {}",
        median(calls.iter().map(|c| c.0)),
        median(calls.iter().map(|c| c.1)),
        median(calls.iter().map(|c| c.2))
    )
}

fn report_writes(results: &[WriteResult]) {
    println!("\n== write -> searchable: POST {WRITE_PATH} of a memory, the indexer on S3, then a keyword find, ms");
    let table = Table::new("<12 >6 >15 >15 >17 >15 >7 >12");
    println!(
        "{}",
        table.header(&[
            "store",
            "writes",
            "write p50/p95",
            "index p50/p95",
            "searchable p50/p95",
            "find p50/p95",
            "found",
            "calls w/i/f"
        ])
    );
    for r in results {
        let index = if r.indexing.is_empty() { "inline".to_owned() } else { p50_p95(&r.indexing) };
        println!(
            "{}",
            table.line(&[
                &r.label,
                &r.writes.len(),
                &p50_p95(&r.writes),
                &index,
                &p50_p95(&r.searchable),
                &p50_p95(&r.finds),
                &format!("{}/{}", r.found, r.writes.len()),
                &median_calls(&r.calls),
            ])
        );
    }
    println!(
        "  (searchable = the write plus, on S3, the indexer's apply; calls = median store calls through the proxy)"
    );
    for r in results.iter().filter(|r| !r.first_calls.is_empty()) {
        println!("  {} store calls, the first write: {}", r.label, r.first_calls);
    }
}

// ---------------------------------------------------------------------------
// 2. Grep and glob over a large tree.

/// The bulk tree's file `i`.
fn bulk_uri(i: usize) -> String {
    format!("{BULK_URI}/d{:02}/f{i:04}.md", i / BULK_PER_DIR)
}

fn bulk_text(i: usize) -> String {
    let mut text = format!(
        "# Note {i}\n\nBulk file {i} of the grep and glob benchmark: the week's errands, the weather and a \
         shopping list.\n\n- bread\n- apples\n- batteries\n"
    );
    if i % BULK_WORD_EVERY == BULK_WORD_EVERY / 2 {
        text.push_str(&format!("\nThe {BULK_WORD} seeds for bed {i} arrived today.\n"));
    }
    text
}

/// Writes the bulk tree's `n` files straight to `store`, 16 at a time;
/// how long it took.
async fn fill_tree(store: &SharedStore, n: usize) -> Duration {
    let account = identity().account;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        if tasks.len() >= 16
            && let Some(done) = tasks.join_next().await
        {
            done.unwrap_or_else(|e| fail("fill task", e));
        }
        let store = Arc::clone(store);
        let key = tree_key(&account, &uri(&bulk_uri(i)));
        tasks.spawn(async move {
            store
                .put(&key, Bytes::from(bulk_text(i)), PutMode::Overwrite)
                .await
                .unwrap_or_else(|e| fail("fill the tree", e));
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap_or_else(|e| fail("fill task", e));
    }
    started.elapsed()
}

/// What grep and glob must answer over the bulk tree of `n` files, from
/// `skald::explore`'s bounds: (grep's files read, its matches, its
/// `truncated`; glob's matches, its `truncated`).
fn tree_expected(n: usize) -> (usize, usize, bool, usize, bool) {
    let listed = n.min(MAX_SCAN_KEYS);
    // Names sort as numbers (zero-padded; `--tree-files` is at most 10,000),
    // so files are read 0, 1, 2, …
    let mut read = 0;
    let mut bytes = 0;
    for i in 0..listed {
        let size = bulk_text(i).len();
        if read >= MAX_GREP_FILES || bytes + size > MAX_GREP_BYTES {
            break;
        }
        read += 1;
        bytes += size;
    }
    let matches = (0..read).filter(|i| i % BULK_WORD_EVERY == BULK_WORD_EVERY / 2).count();
    let grep_cut = read < n || matches > NODE_LIMIT;
    let globbed = (0..listed).filter(|i| *i < 100).count();
    let glob_cut = listed < n || globbed > NODE_LIMIT;
    (read, matches.min(NODE_LIMIT), grep_cut, globbed.min(NODE_LIMIT), glob_cut)
}

#[derive(Default)]
struct TreeResult {
    label: String,
    fill: Duration,
    grep: Vec<Duration>,
    glob: Vec<Duration>,
    /// The last answers' (count, files_scanned, truncated).
    grep_seen: (u64, u64, bool),
    glob_seen: (u64, bool),
    calls: Option<(usize, usize)>,
    problems: Vec<String>,
}

async fn measure_tree(target: &Target, files: usize, runs: usize) -> TreeResult {
    let mut r = TreeResult { label: target.label.clone(), ..TreeResult::default() };
    let (read, matches, grep_cut, globbed, glob_cut) = tree_expected(files);
    let grep_body = json!({ "uri": BULK_URI, "pattern": BULK_WORD, "node_limit": NODE_LIMIT });
    let glob_body = json!({ "pattern": GLOB_PATTERN, "uri": BULK_URI, "node_limit": NODE_LIMIT });
    let (mut grep_calls, mut glob_calls) = (Vec::new(), Vec::new());
    for run in 0..runs {
        target.calls();
        let grep = content_call(&target.app, json_request(GREP_PATH, &grep_body)).await;
        grep_calls.extend(target.calls().map(|c| c.len()));
        let result = &grep.json["result"];
        let seen = (
            result["count"].as_u64().unwrap_or(u64::MAX),
            result["files_scanned"].as_u64().unwrap_or(u64::MAX),
            grep.json["truncated"] == true,
        );
        let all_hold = result["matches"]
            .as_array()
            .is_some_and(|m| m.iter().all(|h| h["content"].as_str().is_some_and(|c| c.contains(BULK_WORD))));
        if grep.status == 200 && seen == (matches as u64, read as u64, grep_cut) && all_hold {
            r.grep.push(grep.time);
        } else {
            let want = format!("want count {matches}, files_scanned {read}, truncated {grep_cut}");
            r.problems.push(grep.describe(&format!("grep run {run} ({want})"), &grep_body.to_string()));
        }
        r.grep_seen = seen;
        let glob = content_call(&target.app, json_request(GLOB_PATH, &glob_body)).await;
        glob_calls.extend(target.calls().map(|c| c.len()));
        let seen = (glob.json["result"]["count"].as_u64().unwrap_or(u64::MAX), glob.json["truncated"] == true);
        let named = glob.json["result"]["matches"]
            .as_array()
            .is_some_and(|m| m.iter().enumerate().all(|(i, u)| u.as_str() == Some(bulk_uri(i).as_str())));
        if glob.status == 200 && seen == (globbed as u64, glob_cut) && named {
            r.glob.push(glob.time);
        } else {
            let want = format!("want count {globbed}, truncated {glob_cut}");
            r.problems.push(glob.describe(&format!("glob run {run} ({want})"), &glob_body.to_string()));
        }
        r.glob_seen = seen;
    }
    if !grep_calls.is_empty() {
        r.calls = Some((median(grep_calls), median(glob_calls)));
    }
    r
}

fn report_tree(results: &[TreeResult], files: usize) {
    println!(
        "\n== grep and glob over {files} files below {BULK_URI} (grep {BULK_WORD:?}, glob {GLOB_PATTERN:?}, \
         node_limit {NODE_LIMIT}), ms"
    );
    let table = Table::new("<12 >9 >5 >15 >22 >15 >13 >11");
    println!(
        "{}",
        table.header(&[
            "store",
            "fill ms",
            "runs",
            "grep p50/p95",
            "grep count/read/trunc",
            "glob p50/p95",
            "glob count/trunc",
            "calls g/g"
        ])
    );
    for r in results {
        let calls = r.calls.map_or_else(|| "-".to_owned(), |(g, h)| format!("{g} / {h}"));
        println!(
            "{}",
            table.line(&[
                &r.label,
                &ms(r.fill),
                &r.grep.len().max(r.glob.len()),
                &p50_p95(&r.grep),
                &format!("{} / {} / {}", r.grep_seen.0, r.grep_seen.1, r.grep_seen.2),
                &p50_p95(&r.glob),
                &format!("{} / {}", r.glob_seen.0, r.glob_seen.1),
                &calls,
            ])
        );
    }
    println!(
        "  (count = matches returned, read = files_scanned, trunc = the answer's top-level truncated; grep reads at \
         most {MAX_GREP_FILES} files, names listed at most {MAX_SCAN_KEYS})"
    );
}

// ---------------------------------------------------------------------------
// 3. A large resource upload.

/// A Markdown document of about `bytes` bytes: sections of sentences from
/// a small vocabulary (`rng`), with `early` as a paragraph of its own after
/// the first 4 KiB (within what the keyword index tokenizes,
/// `skald::index::lexical::LEXICAL_MAX_BYTES`) and `deep` in the middle.
fn big_document(bytes: usize, early: &str, deep: &str, rng: &mut Rng) -> String {
    const WORDS: &[&str] = &[
        "harbour",
        "ledger",
        "signal",
        "valve",
        "orchard",
        "copper",
        "lantern",
        "meadow",
        "engine",
        "tide",
        "gravel",
        "pulley",
        "archive",
        "window",
        "kettle",
        "ridge",
        "bridge",
        "cable",
        "quarry",
        "timber",
        "sail",
        "anchor",
        "furnace",
        "pigeon",
        "compass",
        "river",
        "mortar",
        "spindle",
        "barrel",
        "glacier",
        "thistle",
        "cartwheel",
    ];
    let mut out = String::with_capacity(bytes + 4096);
    out.push_str("# The harbour works handbook\n\nProcedures, logs and notes of the harbour works.\n");
    let mut section = 0;
    let mut pending = vec![(bytes / 2, deep), (4096, early)];
    while out.len() < bytes {
        section += 1;
        out.push_str(&format!("\n## Section {section}\n\n"));
        for _ in 0..4 {
            for _ in 0..6 {
                let n = rng.range(6, 14) as usize;
                let words: Vec<&str> = (0..n).map(|_| WORDS[rng.below(WORDS.len())]).collect();
                let mut s = words.join(" ");
                s[..1].make_ascii_uppercase();
                out.push_str(&s);
                out.push_str(". ");
            }
            out.push_str("\n\n");
        }
        if let Some((_, sentence)) = pending.pop_if(|(at, _)| out.len() >= *at) {
            out.push_str(sentence);
            out.push_str("\n\n");
        }
    }
    out
}

/// A `multipart/form-data` body with one `file` part: (content type, body).
fn multipart(name: &str, file: &[u8]) -> (String, Bytes) {
    let boundary = format!("skald-bench-{}", fresh());
    let mut body = Vec::with_capacity(file.len() + 256);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
             Content-Type: text/markdown\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), Bytes::from(body))
}

#[derive(Default)]
struct UploadResult {
    label: String,
    size: usize,
    uploads: Vec<Duration>,
    adds: Vec<Duration>,
    indexing: Vec<Duration>,
    totals: Vec<Duration>,
    finds: Vec<Duration>,
    /// Finds of the early sentence that returned the resource.
    found: usize,
    /// Where the middle sentence starts (bytes).
    deep_at: usize,
    /// Finds of the middle sentence that returned the resource.
    deep_found: usize,
    /// The first find of the middle sentence that did not.
    deep_missed: Option<String>,
    /// Store calls per upload, add, indexer run, find (through the proxy).
    calls: Vec<(usize, usize, usize, usize)>,
    /// The first run's calls by kind.
    first_calls: String,
    problems: Vec<String>,
}

/// The sentence within the tokenized opening of part 3's document (`Q`:
/// the letter that changes from run to run).
const EARLY: &str = "The brambleworthQ lighthouse keeper logs every passing ship.";
/// The sentence in its middle.
const DEEP: &str = "The quillonfeldQ weathervane was repainted before the autumn storms.";

async fn measure_uploads(target: &Target, runs: usize, kb: usize) -> UploadResult {
    let mut r = UploadResult { label: target.label.clone(), ..UploadResult::default() };
    let expected = if target.inline() { "indexed" } else { "queued" };
    let run_id = fresh();
    let base = big_document(kb * 1024, EARLY, DEEP, &mut Rng(7));
    let marks: Vec<usize> = ["brambleworthQ", "quillonfeldQ"]
        .iter()
        .map(|m| base.find(m).unwrap_or_else(|| fail("document", m)) + m.len() - 1)
        .collect();
    r.deep_at = marks[1];
    for run in 0..runs {
        // The markers' last letter changes from run to run.
        let letter = char::from(b'a' + u8::try_from(run % 26).unwrap_or(0));
        let mut document = base.clone();
        for &at in &marks {
            document.replace_range(at..=at, &letter.to_string());
        }
        r.size = document.len();
        let name = format!("handbook-{}-{run_id}-{run:02}.md", target.tag);
        let (content_type, body) = multipart(&name, document.as_bytes());
        target.calls();
        let upload = content_call(&target.app, request("POST", UPLOAD_PATH, &content_type, body)).await;
        let upload_calls = target.calls();
        let Some(id) = upload.json["result"]["temp_file_id"].as_str().filter(|_| upload.status == 200) else {
            r.problems.push(upload.describe(&format!("upload {run}"), &format!("multipart {name}")));
            continue;
        };
        let add_body = json!({ "temp_file_id": id, "parent": BIG_PARENT });
        let add = content_call(&target.app, json_request(RESOURCES_PATH, &add_body)).await;
        let add_calls = target.calls();
        let result = &add.json["result"];
        let Some(root) = result["root_uri"].as_str().map(str::to_owned).filter(|_| {
            add.status == 200
                && result["status"] == "success"
                && result["files"] == 1
                && result["queue_status"] == expected
        }) else {
            let what = format!("add resource {run} (expected success, 1 file, queue_status {expected})");
            r.problems.push(add.describe(&what, &add_body.to_string()));
            continue;
        };
        r.uploads.push(upload.time);
        r.adds.push(add.time);
        let mut total = upload.time + add.time;
        let mut index_calls = Vec::new();
        if !target.inline() {
            match target.index(&root).await {
                Ok(time) => {
                    r.indexing.push(time);
                    total += time;
                }
                Err(e) => {
                    r.problems.push(format!("index resource {run}: {e}"));
                    continue;
                }
            }
            index_calls = target.calls().unwrap_or_default();
        }
        r.totals.push(total);
        let (find_body, find) =
            keyword_find(&target.app, &format!("brambleworth{letter} lighthouse keeper passing ship")).await;
        r.finds.push(find.time);
        if find.status == 200 && hits_include(&find.json, &root) {
            r.found += 1;
        } else {
            r.problems.push(find.describe(&format!("find after upload {run} (want {root})"), &find_body.to_string()));
        }
        let find_calls = target.calls();
        // Past the tokenized opening: reported, not required.
        let (deep_body, deep) =
            keyword_find(&target.app, &format!("quillonfeld{letter} weathervane repainted autumn storms")).await;
        if deep.status == 200 && hits_include(&deep.json, &root) {
            r.deep_found += 1;
        } else if r.deep_missed.is_none() {
            r.deep_missed =
                Some(deep.describe(&format!("find for the middle sentence (want {root})"), &deep_body.to_string()));
        }
        target.calls();
        if let (Some(u), Some(a), Some(f)) = (upload_calls, add_calls, find_calls) {
            if r.first_calls.is_empty() {
                r.first_calls = format!(
                    "upload: {}; add: {}; indexer: {}; find: {}",
                    kinds(&u),
                    kinds(&a),
                    kinds(&index_calls),
                    kinds(&f)
                );
            }
            r.calls.push((u.len(), a.len(), index_calls.len(), f.len()));
        }
    }
    r
}

fn report_uploads(results: &[UploadResult]) {
    let size = results.first().map_or(0, |r| r.size);
    println!(
        "\n== resource upload: {size} B of Markdown, POST {UPLOAD_PATH} (multipart), POST {RESOURCES_PATH}, the \
         indexer on S3, then a keyword find, ms"
    );
    let table = Table::new("<12 >4 >15 >15 >15 >15 >15 >6 >6 >14");
    println!(
        "{}",
        table.header(&[
            "store",
            "runs",
            "upload p50/p95",
            "add p50/p95",
            "index p50/p95",
            "total p50/p95",
            "find p50/p95",
            "found",
            "deep",
            "calls u/a/i/f"
        ])
    );
    for r in results {
        let index = if r.indexing.is_empty() { "inline".to_owned() } else { p50_p95(&r.indexing) };
        let calls = if r.calls.is_empty() {
            "-".to_owned()
        } else {
            format!(
                "{} / {} / {} / {}",
                median(r.calls.iter().map(|c| c.0)),
                median(r.calls.iter().map(|c| c.1)),
                median(r.calls.iter().map(|c| c.2)),
                median(r.calls.iter().map(|c| c.3))
            )
        };
        println!(
            "{}",
            table.line(&[
                &r.label,
                &r.totals.len(),
                &p50_p95(&r.uploads),
                &p50_p95(&r.adds),
                &index,
                &p50_p95(&r.totals),
                &p50_p95(&r.finds),
                &format!("{}/{}", r.found, r.totals.len()),
                &format!("{}/{}", r.deep_found, r.totals.len()),
                &calls,
            ])
        );
    }
    let deep_at = results.first().map_or(0, |r| r.deep_at);
    println!(
        "  (total = upload + add (inline indexing locally) + the indexer's apply on S3; the finds are not in it; \
         found: the sentence at ~4 KiB; deep: the one at byte {deep_at}, past the {} bytes the keyword index \
         tokenizes)",
        skald::index::lexical::LEXICAL_MAX_BYTES
    );
    for r in results.iter().filter(|r| !r.first_calls.is_empty()) {
        println!("  {} store calls, the first run: {}", r.label, r.first_calls);
    }
    for r in results {
        if let Some(missed) = &r.deep_missed {
            println!("  {}: {missed}", r.label);
        }
    }
}

// ---------------------------------------------------------------------------

fn report_problems(part: &str, problems: &[(String, Vec<String>)]) {
    for (label, list) in problems {
        if list.is_empty() {
            continue;
        }
        println!("  CHECK FAILED ({part}, {label}): {} of them; the first ones:", list.len());
        for p in list.iter().take(3) {
            println!("    {p}");
        }
    }
}

async fn run(args: &Args) {
    let embedder = embedder(args.hashed, "--hashed");
    println!(
        "embedder {}; writes {}; tree {} files, {} runs ({} on moto); uploads {} of {} KiB; latency {} ms; load \
         average {}",
        embedder.id(),
        args.writes,
        args.tree_files,
        args.tree_runs,
        args.moto_tree_runs,
        args.uploads,
        args.upload_kb,
        args.latency.as_millis(),
        load_average()
    );
    let local = TempStore::open(&format!("skald-bench-writes-{}", std::process::id()));
    let took = ingest_demo(local.store(), embedder.as_ref()).await;
    println!("ingest samplconfigs/demo into a LocalStore: {} ms", ms(took));
    let mut targets = vec![Target {
        label: "local".to_owned(),
        tag: "local",
        app: Arc::new(dev_app(Arc::clone(local.store()), Arc::clone(&embedder))),
        plain: Arc::clone(local.store()),
        log: None,
    }];
    if args.moto {
        let bucket = format!("bench-writes-{}", std::process::id());
        let moto = moto_demo(&bucket, embedder.as_ref()).await;
        println!("ingest samplconfigs/demo into S3 on moto ({}): {} ms", moto.endpoint, ms(moto.ingest));
        targets.push(Target {
            label: "moto".to_owned(),
            tag: "moto",
            app: Arc::new(on_s3(dev_app(Arc::clone(&moto.store), Arc::clone(&embedder)))),
            plain: Arc::clone(&moto.store),
            log: None,
        });
        if !args.latency.is_zero() {
            let log = Arc::new(CallLog::default());
            let proxy = start_proxy(moto.address, args.latency, Arc::clone(&log)).await;
            targets.push(Target {
                label: format!("moto+{}ms", args.latency.as_millis()),
                tag: "slow",
                app: Arc::new(on_s3(dev_app(s3_at(proxy, &bucket), Arc::clone(&embedder)))),
                plain: Arc::clone(&moto.store),
                log: Some(log),
            });
        }
    }

    if args.part_writes {
        let mut results = Vec::new();
        for target in &targets {
            let started = Instant::now();
            results.push(measure_writes(target, args.writes).await);
            println!("  writes on {}: {} s", target.label, started.elapsed().as_secs());
        }
        report_writes(&results);
        report_problems("writes", &results.iter().map(|r| (r.label.clone(), r.problems.clone())).collect::<Vec<_>>());
    }

    if args.part_tree {
        let mut results = Vec::new();
        // The latency row would read the same objects as `moto`, each
        // call 20 ms later: grep's thousands of GETs make it minutes.
        for target in targets.iter().filter(|t| t.log.is_none()) {
            let runs = if target.tag == "local" { args.tree_runs } else { args.moto_tree_runs };
            if runs == 0 {
                continue;
            }
            let started = Instant::now();
            let fill = fill_tree(&target.plain, args.tree_files).await;
            let mut r = measure_tree(target, args.tree_files, runs).await;
            r.fill = fill;
            println!("  tree on {}: {} s", target.label, started.elapsed().as_secs());
            results.push(r);
        }
        report_tree(&results, args.tree_files);
        report_problems("tree", &results.iter().map(|r| (r.label.clone(), r.problems.clone())).collect::<Vec<_>>());
    }

    if args.part_uploads {
        let mut results = Vec::new();
        for target in &targets {
            let started = Instant::now();
            results.push(measure_uploads(target, args.uploads, args.upload_kb).await);
            println!("  uploads on {}: {} s", target.label, started.elapsed().as_secs());
        }
        report_uploads(&results);
        report_problems("uploads", &results.iter().map(|r| (r.label.clone(), r.problems.clone())).collect::<Vec<_>>());
    }

    drop(targets);
    // Removes the local store's directory.
    drop(local);
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    block_on(run(&args));
}
