//! Context-mode benchmark: `POST /api/v1/search/search` with
//! `mode = "context"`, end to end through `skald::api::search::handle`, over
//! the demo corpus; where the time goes (revalidation HEAD, query embedding,
//! search, plan, reads, render); the store calls a request makes when every
//! call costs a round trip; and the planner alone on 1,000 candidates.
//!
//! ```text
//! scripts/setup-model.sh        # once (the USE-m3 model), unless --hashed
//! cargo run --release -p skald-bench --bin bench_context -- [--rounds 5] [--latency-ms 20]
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
//! 3. The same against S3 on a local moto server (`skald_tests::moto`:
//!    `SKALD_TEST_S3_ENDPOINT`, else a moto child; skipped with `--no-moto`):
//!    direct, then through the proxy.
//! 4. The planner (`skald::assemble::plan::plan`) on synthetic candidates.
//!
//! The proxy and the in-process S3 server are `skald_bench`'s
//! (`start_proxy`, `start_s3_over`). Every request of the warm-up pass is
//! checked: `stats.bytes_read` must equal the sizes of the objects behind
//! the entries returned at `overview` or `full` (so nothing was read for a
//! dropped entry), and through the proxy the calls must be exactly one HEAD
//! of the manifest plus one GET of each of those objects.
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeSet, HashMap};
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skald::app::App;
use skald::assemble::candidate::{Candidate, Origin};
use skald::assemble::params::{Detail, Tier};
use skald::assemble::plan::{self, PlanRequest};
use skald::assemble::render::{self, EntryView};
use skald::assemble::{gather, read};
use skald::embed::Embedder;
use skald::identity::Identity;
use skald::index::record::LEVEL_FILE;
use skald::index::{Category, Exclusion};
use skald::ingest::OVERVIEW_SIDECAR;
use skald::store::SharedStore;
use skald::uri::{VikingUri, tree_key};
use skald_bench::{
    Call, CallLog, Flags, Rng, Summary, Table, TempStore, account, block_on, dev_app, embedder, fail, identity,
    ingest_demo, load_average, median, median_range, moto_demo, ms, now, percentile, retrieval_queries, s3_at, search,
    start_proxy, start_s3_over,
};
use skald_tests::moto::STORE_PREFIX;

/// Reads in flight at once (`skald::assemble::read::READ_CONCURRENCY`).
const READ_CONCURRENCY: usize = read::READ_CONCURRENCY;

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
    let mut flags = Flags::from_env(
        "usage: bench_context [--rounds R] [--latency-ms L] [--hashed] [--no-moto] [--plan-runs N] [--seed X]",
    );
    while let Some(flag) = flags.next() {
        match flag.as_str() {
            "--hashed" => args.hashed = true,
            "--no-moto" => args.moto = false,
            "--rounds" => args.rounds = flags.at_least(&flag, 1)?,
            "--latency-ms" => args.latency = flags.millis(&flag)?,
            "--plan-runs" => args.plan_runs = flags.at_least(&flag, 1)?,
            "--seed" => args.seed = flags.number(&flag)?,
            _ => return Err(flags.unknown(&flag)),
        }
    }
    Ok(args)
}

// ---------------------------------------------------------------------------
// Settings and requests.

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

fn body(setting: &Setting, query: &str) -> Value {
    let mut body = setting.fields.clone();
    body["query"] = json!(query);
    body
}

/// Which indexed URIs are directories (their overview lives in a sidecar).
async fn directories(app: &App) -> HashMap<String, bool> {
    let snapshot = app.index.snapshot(&account()).await.unwrap_or_else(|e| fail("index", e));
    let mut out: HashMap<String, bool> = HashMap::new();
    for (record, _) in snapshot.records() {
        *out.entry(record.uri.as_str().to_owned()).or_default() |= record.level < LEVEL_FILE;
    }
    out
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
    let account = account();
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
            .map(|c| strip(&c.path).strip_prefix(&format!("{STORE_PREFIX}/")).unwrap_or_default().to_owned())
            .collect();
        let got_set: BTreeSet<String> = got.iter().cloned().collect();
        if got_set != expected || got.len() != expected.len() {
            return Some(format!("GETs {got:?}, overview/full entries' objects {expected:?}"));
        }
        let manifest = format!("{STORE_PREFIX}/{}", skald::index::manifest_key(&account));
        let heads: Vec<String> = calls.iter().filter(|c| c.method == "HEAD").map(|c| strip(&c.path)).collect();
        if heads != [manifest] || calls.len() != heads.len() + got.len() {
            return Some(format!("HEADs {heads:?} (want the manifest once), {} calls in all", calls.len()));
        }
    }
    None
}

/// The assembly line piece by piece (the library's own functions, in the
/// order `skald::assemble::assemble` calls them).
async fn phases(app: &App, identity: &Identity, body: &Value, out: &mut Phases) {
    let profiles = &app.config.retrieval.purpose_profiles;
    let request =
        skald::api::search::parse(body.to_string().as_bytes(), now(), profiles).unwrap_or_else(|e| fail("parse", e));
    let params = &request.assemble;
    let exclusion = Exclusion { subtrees: params.exclude.clone(), ..Exclusion::default() };

    let started = Instant::now();
    let index = skald::retrieval::checked_index(app, identity).await.unwrap_or_else(|e| fail("index", e));
    out.head.push(started.elapsed());

    let started = Instant::now();
    let texts: Vec<&str> = params.queries.iter().map(String::as_str).collect();
    let vectors = app.embedder.embed(&texts).await.unwrap_or_else(|e| fail("embed", e));
    out.embed.push(started.elapsed());

    let started = Instant::now();
    let gathered =
        gather::gather(&index, identity, params, &vectors, &exclusion).await.unwrap_or_else(|e| fail("gather", e));
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
        .map(|(p, shown)| {
            let c = &candidates[p.candidate];
            EntryView {
                uri: c.uri.as_str(),
                lines: c.lines(),
                category: c.category.as_str(),
                score: c.score,
                tier: shown.tier,
                text: &shown.text,
                truncated: shown.truncated,
            }
        })
        .collect();
    let rendered = render::render(&views);
    black_box(skald::tokens::estimate_tokens(&rendered));
    out.render.push(started.elapsed());
}

/// One request to `target`'s app, with the store calls the proxy saw when
/// it is in the way.
async fn request(target: &Target<'_>, body: &Value) -> (Duration, Value, Option<Vec<Call>>) {
    if let Some(log) = target.log {
        log.take();
    }
    let (time, json) = search(target.app, body).await;
    (time, json, target.log.map(CallLog::take))
}

async fn measure(target: &Target<'_>, queries: &[String], args: &Args) -> Vec<SettingResult> {
    let identity = identity();
    // The first request loads the index (manifest and segments): not measured.
    let _ = request(target, &body(&settings()[0], &queries[0])).await;
    let mut results = Vec::new();
    for setting in settings() {
        // Warm-up pass, checked.
        let (mut verified, mut checked) = (0, 0);
        let mut samples = Vec::new();
        for q in queries {
            let (time, json, calls) = request(target, &body(&setting, q)).await;
            checked += 1;
            match verify(target, &json, calls.as_deref()).await {
                None => verified += 1,
                Some(problem) => println!("  ! {} / {q}: {problem}", setting.label),
            }
            if !setting.timed {
                samples.push(sample(time, &json, calls.as_deref()));
            }
        }
        let mut phase_times = Phases::default();
        if setting.timed {
            for _ in 0..args.rounds {
                for q in queries {
                    let (time, json, calls) = request(target, &body(&setting, q)).await;
                    samples.push(sample(time, &json, calls.as_deref()));
                }
            }
            for _ in 0..args.rounds {
                for q in queries {
                    phases(target.app, &identity, &body(&setting, q), &mut phase_times).await;
                }
            }
        }
        results.push(SettingResult {
            label: setting.label,
            timed: setting.timed,
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
    let table = Table::new("<16 >7 >7 >7 | >5 >3 >3 >8 >5 >5 >5 >5 | <0");
    println!(
        "{}",
        table.header(&[
            "setting", "p50", "p95", "max", "reads", "rnd", "win", "bytes", "cand", "ret", "drop", "used", "checked"
        ])
    );
    for r in results.iter().filter(|r| r.timed) {
        let times = Summary::of(&r.samples.iter().map(|s| s.time).collect::<Vec<_>>());
        let med = |f: fn(&Sample) -> usize| median(r.samples.iter().map(f));
        println!(
            "{}",
            table.line(&[
                &r.label,
                &ms(times.p50),
                &ms(times.p95),
                &ms(times.max),
                &med(|s| s.reads),
                &med(Sample::rounds),
                &med(|s| s.window_rounds),
                &median(r.samples.iter().map(|s| s.bytes_read)),
                &med(|s| s.candidates),
                &med(|s| s.returned),
                &med(|s| s.dropped),
                &med(|s| s.used_tokens),
                &format!("{}/{} ok", r.verified, r.checked),
            ])
        );
    }
    println!(
        "  (medians of stats; rnd = ceil(reads / READ_CONCURRENCY); win = read rounds under read_planned's ordered window; \
         checked = warm-up requests whose reads were exactly the overview/full entries)"
    );
    println!("  checked only (shapes that drop entries; the warm-up pass, untimed), median [min–max]:");
    for r in results.iter().filter(|r| !r.timed) {
        let range = |f: fn(&Sample) -> usize| median_range(r.samples.iter().map(f));
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
    let table = Table::new("<16 >7 >7 >7 >7 >7 >7 | >7 >7 >7");
    println!(
        "{}",
        table.header(&["setting", "head", "embed", "search", "plan", "reads", "render", "sum", "e2e p50", "other"])
    );
    for r in results.iter().filter(|r| r.timed) {
        let p = &r.phases;
        let parts = [&p.head, &p.embed, &p.search, &p.plan, &p.reads, &p.render].map(|v| median(v.iter().copied()));
        let sum: Duration = parts.iter().sum();
        let e2e = median(r.samples.iter().map(|s| s.time));
        let other = if e2e >= sum { ms(e2e - sum) } else { format!("-{}", ms(sum - e2e)) };
        let [head, embed, search, plan, reads, render] = parts.map(ms);
        println!(
            "{}",
            table.line(&[&r.label, &head, &embed, &search, &plan, &reads, &render, &ms(sum), &ms(e2e), &other])
        );
    }
}

/// Store calls per request through the proxy, and the measured time against
/// the latency floor `(1 HEAD + read rounds) × latency`.
fn report_latency(results: &[SettingResult], baseline: &[SettingResult], latency: Duration) {
    println!(
        "  per request: store calls seen by the proxy, median [min–max]; read rounds ideal = ceil(reads / READ_CONCURRENCY), \
         window = read_planned's ordered window"
    );
    let table = Table::new("<16 >7 >9 >5 >9 >7 | >7 >8 >8 >7 >7 >10");
    println!(
        "{}",
        table.header(&[
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
        ])
    );
    let results: Vec<&SettingResult> = results.iter().filter(|r| r.timed).collect();
    let baseline: Vec<&SettingResult> = baseline.iter().filter(|r| r.timed).collect();
    // The median GET spread of `samples`, `-` when none had two GETs or more.
    let spread = |samples: &[&Sample]| {
        let spreads: Vec<Duration> = samples.iter().filter_map(|s| s.get_spread).collect();
        if spreads.is_empty() { "-".to_owned() } else { ms(median(spreads)) }
    };
    for (r, base) in results.iter().zip(&baseline) {
        let calls: Vec<(usize, usize, usize)> = r.samples.iter().filter_map(|s| s.calls).collect();
        let times = |f: &dyn Fn(&Sample) -> Duration| ms(median(r.samples.iter().map(f)));
        let others: usize = calls.iter().map(|c| c.2).sum();
        println!(
            "{}",
            table.line(&[
                &r.label,
                &median_range(calls.iter().map(|c| c.0)),
                &median_range(calls.iter().map(|c| c.1)),
                &median(r.samples.iter().map(Sample::rounds)),
                &median_range(r.samples.iter().map(|s| s.window_rounds)),
                &spread(&r.samples.iter().collect::<Vec<_>>()),
                &times(&|s| s.time),
                &times(&|s| latency * (1 + s.rounds()) as u32),
                &times(&|s| latency * (1 + s.window_rounds) as u32),
                &times(&|s| s.time.saturating_sub(latency * (1 + s.window_rounds) as u32)),
                &ms(median(base.samples.iter().map(|s| s.time))),
                &times(&|s| latency * (1 + s.reads) as u32),
            ])
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
            let times = Summary::of(&group.iter().map(|s| s.time).collect::<Vec<_>>());
            println!(
                "  {:<16} {rounds} round(s): {:>3} requests, p50 {:>6}, p95 {:>6}, spread {:>6} ms",
                r.label,
                group.len(),
                ms(times.p50),
                ms(times.p95),
                spread(&group)
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
    let spread = (!spreads.is_empty()).then(|| median(spreads));
    (median(times), spread)
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
        .list(&format!("accounts/{}/tree/", skald_tests::fixture::ACCOUNT))
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
    let table = Table::new("<4 >10 >10 >8 | >10 >10 >8 | >10");
    println!("{}", table.header(&["n", "direct", "+latency", "spread", "1 task", "1 task +l", "spread", "floor"]));
    for n in [1, 2, 4, 6, 8] {
        let (fast, _) = concurrent_gets(direct, &keys, n, true, None).await;
        let (lagged, spread) = concurrent_gets(slow, &keys, n, true, Some(log)).await;
        let (fast_one, _) = concurrent_gets(direct, &keys, n, false, None).await;
        let (lagged_one, spread_one) = concurrent_gets(slow, &keys, n, false, Some(log)).await;
        let show = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), ms);
        println!(
            "{}",
            table.line(&[
                &n,
                &ms(fast),
                &ms(lagged),
                &show(spread),
                &ms(fast_one),
                &ms(lagged_one),
                &show(spread_one),
                &ms(latency + fast)
            ])
        );
    }
}

// ---------------------------------------------------------------------------
// The planner on synthetic candidates.

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
                span: None,
                level: skald::index::record::LEVEL_FILE,
            }
        })
        .collect()
}

fn bench_planner(args: &Args) {
    println!("== planner: skald::assemble::plan::plan, detail auto, median of {} runs", args.plan_runs);
    let table = Table::new("<11 >10 >8 >8 >8 | >6 >5 >5 >5 >5 >7 >7 >6");
    println!(
        "{}",
        table.header(&[
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
        ])
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
            let us = |d: Duration| format!("{:.0}µs", d.as_secs_f64() * 1e6);
            println!(
                "{}",
                table.line(&[
                    &n,
                    &max_tokens,
                    &us(percentile(&times, 50.0)),
                    &us(percentile(&times, 95.0)),
                    &us(times[0]),
                    &p.entries.len(),
                    &tier(Tier::Full),
                    &tier(Tier::Overview),
                    &tier(Tier::Abstract),
                    &tier(Tier::Uri),
                    &p.dropped,
                    &p.deduped,
                    &p.tokens
                ])
            );
        }
    }
}

// ---------------------------------------------------------------------------

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
    let fast_app = dev_app(Arc::clone(fast), Arc::clone(env.embedder));
    let target = Target { app: &fast_app, sizes, log: None, directories: env.directories };
    let fast_results = measure(&target, env.queries, env.args).await;
    println!();
    report(&format!("store={name}"), &fast_results, env.queries.len(), env.args.rounds);

    let log = Arc::new(CallLog::default());
    let proxy = start_proxy(upstream, env.args.latency, Arc::clone(&log)).await;
    let slow = s3_at(proxy, bucket);
    let slow_app = dev_app(Arc::clone(&slow), Arc::clone(env.embedder));
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
    let embedder = embedder(args.hashed, "--hashed");
    let queries = retrieval_queries();
    println!(
        "embedder {}; {} queries; latency {} ms; load average {}",
        embedder.id(),
        queries.len(),
        args.latency.as_millis(),
        load_average()
    );

    // 1. Local store.
    let local = TempStore::open(&format!("skald-bench-context-{}", std::process::id()));
    let took = ingest_demo(local.store(), embedder.as_ref()).await;
    println!("ingest samplconfigs/demo into a LocalStore: {} ms", ms(took));
    let local_app = dev_app(Arc::clone(local.store()), Arc::clone(&embedder));
    let dirs = directories(&local_app).await;
    let target = Target { app: &local_app, sizes: local.store(), log: None, directories: &dirs };
    let local_results = measure(&target, &queries, args).await;
    report(&format!("store=local ({})", local.dir().display()), &local_results, queries.len(), args.rounds);

    // 2. The S3 client over the same local store (an in-process S3-protocol
    // server), direct and with latency: the S3 client's and the latency's
    // share without moto's.
    let bucket = format!("bench-context-{}", std::process::id());
    let server = start_s3_over(Arc::clone(local.store()), &bucket).await;
    let fast = s3_at(server, &bucket);
    let name = format!("S3Store → in-process S3 server over the LocalStore ({server})");
    let env = Env { embedder: &embedder, queries: &queries, directories: &dirs, args };
    s3_runs(&name, &fast, local.store(), server, &bucket, &env).await;

    // 3. S3 on moto, direct and with latency.
    if args.moto {
        let moto = moto_demo(&bucket, embedder.as_ref()).await;
        println!("\ningest samplconfigs/demo into S3 on moto ({}): {} ms", moto.endpoint, ms(moto.ingest));
        let name = format!("S3Store → moto ({})", moto.endpoint);
        s3_runs(&name, &moto.store, &moto.store, moto.address, &bucket, &env).await;
    }
    drop(local_app);
    // Removes the local store's directory.
    drop(local);
    println!();
    bench_planner(args);
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    block_on(run(&args));
}
