//! Indexer benchmark: what one S3 notification costs the `indexer`
//! function — a new file, the same file again (unchanged), a changed file,
//! a removed file — on a local store and on S3 (moto), with and without a
//! simulated per-call round trip, over the demo index.
//!
//! ```text
//! cargo run --release -p skald-bench --bin bench_indexer -- [--hashed] [--rounds 40] [--latency-ms 20] [--no-moto]
//! ```
//!
//! Each round writes a new memory file (untimed), then times
//! `skald::indexer::apply` for: `new` (its creation), `same` (the same
//! notification again), `changed` (after the file is rewritten, untimed)
//! and `removed` (after it is deleted, untimed). Every report is checked
//! (1 indexed, 1 unchanged, 1 indexed, 1 removed). Through the proxy the
//! store calls of each step are counted by kind. The index grows by
//! segments and tombstones as rounds go, and compacts when the manifest
//! lists enough segments, as in production; the maximum shows that.
//! Finally, a cold load of the index (`IndexSnapshot::load`, what a cold
//! search function does first) after `--segments` one-file commits, so
//! the manifest lists that many segments (below the compaction threshold).
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use skald::app::App;
use skald::indexer::{Change, IndexerReport, apply};
use skald::store::{PutMode, SharedStore};
use skald_bench::{
    CallLog, Flags, Summary, Table, TempStore, block_on, dev_app, embedder, fail, ingest_demo, load_average, moto_demo,
    ms, s3_at, start_proxy,
};

const USAGE: &str = "bench_indexer [--hashed] [--rounds R] [--latency-ms L] [--segments S] [--no-moto]";
const STEPS: [&str; 4] = ["new", "same", "changed", "removed"];

/// One step's timings and store calls (by kind), per round.
type StepResults = (Vec<Duration>, Vec<BTreeMap<String, usize>>);

struct Args {
    hashed: bool,
    rounds: usize,
    latency: Duration,
    segments: usize,
    moto: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { hashed: false, rounds: 40, latency: Duration::from_millis(20), segments: 12, moto: true };
    let mut flags = Flags::from_env(USAGE);
    while let Some(flag) = flags.next() {
        match flag.as_str() {
            "--hashed" => args.hashed = true,
            "--rounds" => args.rounds = flags.at_least("--rounds", 1)?,
            "--latency-ms" => args.latency = flags.millis("--latency-ms")?,
            "--segments" => args.segments = flags.at_least("--segments", 1)?,
            "--no-moto" => args.moto = false,
            other => return Err(flags.unknown(other)),
        }
    }
    Ok(args)
}

/// Where the indexer runs: its app, the same store without the proxy (for
/// the untimed writes), and the proxy's log.
struct Target {
    label: String,
    app: App,
    plain: SharedStore,
    log: Option<Arc<CallLog>>,
}

fn key(round: usize) -> String {
    format!("accounts/default/tree/user/default/memories/entities/bench/topic-{round:04}.md")
}

fn text(round: usize, version: u32) -> Bytes {
    Bytes::from(format!(
        "# Summary\nBench topic {round}, version {version}: the on-call rotation for the ingest pipeline changes weekly.\n"
    ))
}

/// Times `apply` on `key`'s notification, checks the report, and counts
/// the store calls the proxy saw.
async fn step(target: &Target, key: &str, want: &IndexerReport) -> (Duration, BTreeMap<String, usize>) {
    if let Some(log) = &target.log {
        log.take();
    }
    let change = Change { key: key.to_owned(), at: 1_800_000_000, version: None };
    let started = Instant::now();
    let report = apply(&target.app, &[change]).await.unwrap_or_else(|e| fail("apply", e));
    let took = started.elapsed();
    if &report != want {
        fail(&format!("{} {key}", target.label), format!("report {report:?}, want {want:?}"));
    }
    let mut calls = BTreeMap::new();
    for call in target.log.as_ref().map(|l| l.take()).unwrap_or_default() {
        let kind = if call.path.ends_with("manifest.json") {
            format!("{} manifest", call.method)
        } else if call.path.contains("/index/") {
            format!("{} segment", call.method)
        } else {
            format!("{} file", call.method)
        };
        *calls.entry(kind).or_default() += 1;
    }
    (took, calls)
}

async fn measure(target: &Target, rounds: usize) -> Vec<StepResults> {
    let mut out: Vec<StepResults> = vec![(Vec::new(), Vec::new()); STEPS.len()];
    let put = |key: String, body: Bytes| async move {
        target.plain.put(&key, body, PutMode::Overwrite).await.unwrap_or_else(|e| fail("put", e));
    };
    let indexed = IndexerReport { indexed: 1, ..IndexerReport::default() };
    let unchanged = IndexerReport { unchanged: 1, ..IndexerReport::default() };
    let removed = IndexerReport { removed: 1, ..IndexerReport::default() };
    for round in 0..rounds {
        let key = key(round);
        put(key.clone(), text(round, 1)).await;
        let results = [
            step(target, &key, &indexed).await,
            step(target, &key, &unchanged).await,
            {
                put(key.clone(), text(round, 2)).await;
                step(target, &key, &indexed).await
            },
            {
                target.plain.delete(&key).await.unwrap_or_else(|e| fail("delete", e));
                step(target, &key, &removed).await
            },
        ];
        for (slot, (took, calls)) in out.iter_mut().zip(results) {
            slot.0.push(took);
            slot.1.push(calls);
        }
    }
    out
}

fn report(target: &Target, results: &[StepResults]) {
    let table = Table::new("<12 <8 >9 >9 >9 <40");
    for ((name, (times, calls)), first) in STEPS.iter().zip(results).zip([true, false, false, false]) {
        let s = Summary::of(times);
        // The most common call pattern of this step.
        let mut patterns: BTreeMap<String, usize> = BTreeMap::new();
        for c in calls {
            let text: Vec<String> = c.iter().map(|(k, n)| format!("{n} {k}")).collect();
            *patterns.entry(if text.is_empty() { "-".into() } else { text.join(" + ") }).or_default() += 1;
        }
        let common = patterns.iter().max_by_key(|(_, n)| **n).map(|(p, n)| format!("{p} ({n}/{})", calls.len()));
        let label = if first { target.label.as_str() } else { "" };
        println!("{}", table.line(&[&label, name, &ms(s.p50), &ms(s.p95), &ms(s.max), &common.unwrap_or_default()]));
    }
}

async fn run(args: &Args) {
    let embedder = embedder(args.hashed, "--hashed");
    println!(
        "embedder {}; rounds {}; latency {} ms; load average {}",
        embedder.id(),
        args.rounds,
        args.latency.as_millis(),
        load_average()
    );
    let local = TempStore::open("bench-indexer");
    let took = ingest_demo(local.store(), embedder.as_ref()).await;
    println!("ingest samplconfigs/demo into a LocalStore: {} ms", ms(took));
    let mut targets = vec![Target {
        label: "local".into(),
        app: dev_app(Arc::clone(local.store()), Arc::clone(&embedder)),
        plain: Arc::clone(local.store()),
        log: None,
    }];
    if args.moto {
        let bucket = format!("bench-indexer-{}", std::process::id());
        let moto = moto_demo(&bucket, embedder.as_ref()).await;
        println!("ingest samplconfigs/demo into S3 on moto ({}): {} ms", moto.endpoint, ms(moto.ingest));
        for latency in [Duration::ZERO, args.latency] {
            let log = Arc::new(CallLog::default());
            let proxy = start_proxy(moto.address, latency, Arc::clone(&log)).await;
            targets.push(Target {
                label: format!("moto+{}ms", latency.as_millis()),
                app: dev_app(s3_at(proxy, &bucket), Arc::clone(&embedder)),
                plain: Arc::clone(&moto.store),
                log: Some(log),
            });
        }
    }
    println!("\n== skald::indexer::apply for one notification (ms; calls: store calls through the proxy, most common)");
    let table = Table::new("<12 <8 >9 >9 >9 <40");
    println!("{}", table.header(&["store", "step", "p50", "p95", "max", "calls"]));
    for target in &targets {
        let results = measure(target, args.rounds).await;
        report(target, &results);
    }
    println!("\n== a cold load of the index (IndexSnapshot::load, 10 times) after {} one-file commits", args.segments);
    let table = Table::new("<12 >9 >9 >9 >9 <30");
    println!("{}", table.header(&["store", "segments", "p50", "p95", "max", "calls (first load)"]));
    for target in &targets {
        cold_load(target, args.segments).await;
    }
    drop(targets);
    drop(local);
}

/// Commits `segments` one-file segments (after a compaction, so the
/// manifest then lists about that many), then times cold loads.
async fn cold_load(target: &Target, segments: usize) {
    let account = skald_bench::account();
    let info = target.app.embedder_info();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    skald::index::compact(&target.plain, &account, &info, None, now).await.unwrap_or_else(|e| fail("compact", e));
    for i in 0..segments {
        let tag: String = target.label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let key = format!("accounts/default/tree/resources/bench/cold-{tag}-{i:04}.md");
        target.plain.put(&key, text(i, 1), PutMode::Overwrite).await.unwrap_or_else(|e| fail("put", e));
        apply(&target.app, &[Change { key, at: 1_800_000_000, version: None }])
            .await
            .unwrap_or_else(|e| fail("apply", e));
    }
    let store = &target.app.store;
    let listed = skald::index::IndexSnapshot::load(&target.plain, &account, None)
        .await
        .unwrap_or_else(|e| fail("load", e))
        .segment_count();
    let mut times = Vec::new();
    let mut first_calls = String::new();
    for round in 0..10 {
        if let Some(log) = &target.log {
            log.take();
        }
        let started = Instant::now();
        let snapshot =
            skald::index::IndexSnapshot::load(store, &account, None).await.unwrap_or_else(|e| fail("load", e));
        times.push(started.elapsed());
        if snapshot.segment_count() != listed {
            fail("load", format!("{} segments, want {listed}", snapshot.segment_count()));
        }
        if round == 0
            && let Some(log) = &target.log
        {
            let calls = log.take();
            first_calls = format!("{} calls", calls.len());
        }
    }
    let s = Summary::of(&times);
    let table = Table::new("<12 >9 >9 >9 >9 <30");
    println!("{}", table.line(&[&target.label, &listed, &ms(s.p50), &ms(s.p95), &ms(s.max), &first_calls]));
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    block_on(run(&args));
}
