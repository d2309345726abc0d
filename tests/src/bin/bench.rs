//! Index benchmark: builds synthetic records, commits them as segments into a
//! store, then measures cold index loads and exact search.
//!
//! ```text
//! cargo run --release -p skald-tests --bin bench -- --records 100000 [--s3 | --s3-only]
//!     [--repeat 5] [--queries 200] [--segment 5000] [--dim 512] [--seed 1]
//! ```
//!
//! Records are random unit vectors (a SplitMix64 PRNG, Box–Muller normals)
//! with URIs spread over `viking://user/bench/{memories,resources,skills}`
//! and `viking://resources/…`, and ~200-byte abstracts. Everything runs
//! against a `LocalStore` in a temporary directory; `--s3` repeats it on a
//! fresh bucket of a local moto server, `--s3-only` runs only that.
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use skald::find::default_targets;
use skald::identity::{AccountId, Identity, UserId};
use skald::index::record::{LEVEL_FILE, classify};
use skald::index::{self, EmbedderInfo, Filter, IndexSnapshot, Record, SearchParams, Segment, manifest_key};
use skald::store::SharedStore;
use skald::store::local::LocalStore;
use skald::uri::VikingUri;

const USER: &str = "bench";
const ACCOUNT: &str = "bench";
/// The narrow filter's subtree: ~1/200 of the shared resources (~0.2 % of all records).
const NARROW: &str = "viking://resources/proj-3/sec-7";

struct Args {
    records: usize,
    repeat: usize,
    queries: usize,
    segment: usize,
    dim: usize,
    seed: u64,
    local: bool,
    s3: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args =
        Args { records: 10_000, repeat: 5, queries: 200, segment: 5_000, dim: 512, seed: 1, local: true, s3: false };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--s3" || flag == "--s3-only" {
            args.s3 = true;
            args.local = flag == "--s3";
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.replace('_', "").parse::<usize>().map_err(|e| format!("{flag} {value}: {e}"));
        match flag.as_str() {
            "--records" => args.records = number()?.max(1),
            "--repeat" => args.repeat = number()?.max(1),
            "--queries" => args.queries = number()?.max(1),
            "--segment" => args.segment = number()?.max(1),
            "--dim" => args.dim = number()?.max(1),
            "--seed" => args.seed = number()? as u64,
            other => {
                return Err(format!(
                    "unknown argument {other}; usage: bench [--records N] [--repeat R] [--queries Q] \
                     [--segment S] [--dim D] [--seed X] [--s3 | --s3-only]"
                ));
            }
        }
    }
    Ok(args)
}

/// SplitMix64: small, deterministic, good enough for synthetic data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `(0, 1]`.
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Appends a random unit vector (uniform on the sphere) of `dim` values.
    fn unit_vector(&mut self, dim: usize, out: &mut Vec<f32>) {
        let start = out.len();
        out.extend((0..dim).map(|_| self.normal() as f32));
        skald::embed::l2_normalise(&mut out[start..]);
    }
}

const WORDS: [&str; 40] = [
    "bucket",
    "segment",
    "manifest",
    "conditional",
    "write",
    "etag",
    "compaction",
    "lambda",
    "cold",
    "start",
    "vector",
    "cosine",
    "index",
    "record",
    "memory",
    "preference",
    "entity",
    "event",
    "resource",
    "skill",
    "tenant",
    "account",
    "latency",
    "throughput",
    "retry",
    "backoff",
    "snapshot",
    "cache",
    "revalidate",
    "object",
    "prefix",
    "filter",
    "target",
    "abstract",
    "overview",
    "embedding",
    "dimension",
    "token",
    "budget",
    "context",
];

/// A ~200-byte abstract.
fn abstract_text(rng: &mut Rng) -> String {
    let mut text = String::with_capacity(220);
    while text.len() < 200 {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(WORDS[rng.below(WORDS.len())]);
    }
    text.push('.');
    text
}

fn uri(text: &str) -> VikingUri {
    VikingUri::parse(text).unwrap_or_else(|e| panic!("bench uri {text}: {e}"))
}

/// Record `i`: 40 % shared resources, 35 % memories, 15 % user resources,
/// 10 % skills; one in ten is a directory's abstract or overview.
fn make_record(i: usize, rng: &mut Rng, now: i64) -> Record {
    let dir_level = match rng.below(20) {
        0 => Some(0),
        1 => Some(1),
        _ => None,
    };
    let (parent, leaf, tags) = match i % 20 {
        0..8 => {
            let (p, s) = (rng.below(20), rng.below(10));
            (format!("viking://resources/proj-{p}/sec-{s}"), format!("doc-{i}.md"), vec![format!("project=proj-{p}")])
        }
        8..15 => {
            let cat = ["events", "entities", "preferences", "experiences", "cases"][rng.below(5)];
            let t = rng.below(50);
            (format!("viking://user/{USER}/memories/{cat}/topic-{t}"), format!("mem-{i}.md"), vec![])
        }
        15..18 => (format!("viking://user/{USER}/resources/notes-{}", rng.below(30)), format!("note-{i}.md"), vec![]),
        _ => (format!("viking://user/{USER}/skills/skill-{i}"), "SKILL.md".to_owned(), vec!["kind=skill".to_owned()]),
    };
    let (uri, level) = match dir_level {
        Some(level) => (uri(&format!("{parent}/dir-{i}")), level),
        None => (uri(&format!("{parent}/{leaf}")), LEVEL_FILE),
    };
    let (context_type, category) = classify(&uri).unwrap_or_else(|| panic!("bench uri {uri} is never indexed"));
    let abstract_text = abstract_text(rng);
    let created_at = now - rng.below(365 * 86_400) as i64;
    let updated_at = created_at + rng.below(30 * 86_400) as i64;
    Record {
        owner_user_id: uri.as_str().starts_with("viking://user/").then(|| USER.to_owned()),
        uri,
        level,
        context_type,
        category,
        abstract_tokens: (abstract_text.len() / 4) as u32,
        overview_tokens: Some(120),
        full_tokens: Some(400),
        source_hash: skald::ingest::source_hash(abstract_text.as_bytes()),
        abstract_text,
        size: 200 + rng.below(20_000) as u64,
        created_at,
        updated_at,
        tags,
    }
}

/// How many rows are live (newest segment first, later rows first; a
/// segment's tombstones hide older segments), with one hash set: the same
/// rule as the index's own liveness pass, for comparing its cost.
fn liveness_with_hash_set(segments: &[Segment]) -> usize {
    let mut seen: HashSet<(&VikingUri, u8)> = HashSet::new();
    let mut count = 0;
    for segment in segments.iter().rev() {
        let mut live = vec![false; segment.records.len()];
        for (i, record) in segment.records.iter().enumerate().rev() {
            if seen.insert((&record.uri, record.level)) {
                live[i] = true;
                count += 1;
            }
        }
        black_box(live);
        seen.extend(segment.tombstones.iter().map(|t| (&t.uri, t.level)));
    }
    count
}

/// Min, median, max.
fn spread(samples: &[Duration]) -> (Duration, Duration, Duration) {
    let mut s = samples.to_vec();
    s.sort();
    (s[0], s[s.len() / 2], s[s.len() - 1])
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
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

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// `VmRSS` and `VmHWM` of this process, as printed by the kernel.
fn memory_status() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench: {what}: {e}");
    std::process::exit(1)
}

async fn run(store: &SharedStore, store_name: &str, local: bool, args: &Args) {
    let account = AccountId::new(ACCOUNT).unwrap_or_else(|e| fail("account", e));
    let embedder = EmbedderInfo { id: format!("bench-random-v1/{}", args.dim), dimension: args.dim };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let mut rng = Rng(args.seed);

    // Ingest: one commit per segment; the one reaching 16 segments compacts.
    println!(
        "== store={store_name} records={} dim={} segment={} repeat={} queries={}",
        args.records, args.dim, args.segment, args.repeat, args.queries
    );
    let mut commits = Vec::new();
    let mut generate = Duration::ZERO;
    let mut next = 0;
    while next < args.records {
        let end = (next + args.segment).min(args.records);
        let started = Instant::now();
        let mut segment = Segment { dim: args.dim, ..Segment::default() };
        segment.vectors.reserve((end - next) * args.dim);
        for i in next..end {
            segment.records.push(make_record(i, &mut rng, now));
            rng.unit_vector(args.dim, &mut segment.vectors);
        }
        generate += started.elapsed();
        let started = Instant::now();
        index::commit(store, &account, &embedder, &segment).await.unwrap_or_else(|e| fail("commit", e));
        commits.push(started.elapsed());
        next = end;
    }
    let total: Duration = commits.iter().sum();
    let (slowest_at, slowest) =
        commits.iter().enumerate().max_by_key(|(_, d)| **d).map_or((0, Duration::ZERO), |(i, d)| (i + 1, *d));
    let (c_min, c_med, _) = spread(&commits);
    println!(
        "ingest: generate {} ms; {} commits in {} ms (min {} / median {} ms; slowest #{slowest_at}: {} ms)",
        ms(generate),
        commits.len(),
        ms(total),
        ms(c_min),
        ms(c_med),
        ms(slowest)
    );

    // The manifest as it ends up (after any compaction).
    let manifest_obj = store.get(&manifest_key(&account)).await.unwrap_or_else(|e| fail("manifest", e));
    let manifest: index::Manifest =
        serde_json::from_slice(&manifest_obj.body).unwrap_or_else(|e| fail("manifest json", e));
    let seg_bytes: u64 = manifest.segments.iter().map(|s| s.bytes).sum();
    let layout: Vec<String> = manifest.segments.iter().map(|s| s.records.to_string()).collect();
    println!(
        "manifest: {} segments [{}], {} in segments, generation {}",
        manifest.segments.len(),
        layout.join(" + "),
        mib(seg_bytes),
        manifest.generation
    );

    // Loads, cold (no previous snapshot), and the parts of one.
    let mut full = Vec::new();
    let mut fetch = Vec::new();
    let mut decode = Vec::new();
    let mut json = Vec::new();
    let mut floats = Vec::new();
    let mut reuse = Vec::new();
    let mut hashing = Vec::new();
    let mut snapshot = IndexSnapshot::default();
    let mut first_load_memory = String::new();
    let after_ingest = memory_status();
    // Resets VmHWM to the current RSS, so the next reading is the load's peak.
    let hwm_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let mut hashed_liveness = Vec::new();
    for _ in 0..args.repeat {
        drop(std::mem::take(&mut snapshot));
        let started = Instant::now();
        snapshot = IndexSnapshot::load(store, &account, None).await.unwrap_or_else(|e| fail("load", e));
        full.push(started.elapsed());
        if first_load_memory.is_empty() {
            first_load_memory = memory_status();
        }

        let started = Instant::now();
        let reloaded =
            IndexSnapshot::load(store, &account, Some(&snapshot)).await.unwrap_or_else(|e| fail("reload", e));
        reuse.push(started.elapsed());
        drop(reloaded);

        let started = Instant::now();
        let _ = store.get(&manifest_key(&account)).await.unwrap_or_else(|e| fail("manifest", e));
        let mut bodies = Vec::new();
        for seg_ref in &manifest.segments {
            bodies.push(store.get(&seg_ref.key).await.unwrap_or_else(|e| fail("segment get", e)).body);
        }
        fetch.push(started.elapsed());

        // LocalStore::get hashes every body it reads for its etag.
        let started = Instant::now();
        for body in &bodies {
            black_box(skald::store::content_etag(body));
        }
        hashing.push(started.elapsed());

        let started = Instant::now();
        let mut decoded = Vec::new();
        for body in &bodies {
            decoded.push(Segment::decode(body).unwrap_or_else(|e| fail("decode", e)));
        }
        decode.push(started.elapsed());

        // The liveness pass again, with one hash set instead of a Vec scan.
        let started = Instant::now();
        let live = liveness_with_hash_set(&decoded);
        hashed_liveness.push(started.elapsed());
        if live != snapshot.len() {
            fail("liveness check", format!("{live} live records, the snapshot has {}", snapshot.len()));
        }
        drop(decoded);

        // The two halves of decode: the records' JSON, and the f32 rows.
        let (mut j, mut f) = (Duration::ZERO, Duration::ZERO);
        for body in &bodies {
            let word = |i: usize| {
                let at = 7 + 4 * i;
                u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]) as usize
            };
            let json_end = 19 + word(2);
            let started = Instant::now();
            let parsed: HashMap<String, Vec<Record>> =
                serde_json::from_slice(&body[19..json_end]).unwrap_or_else(|e| fail("segment json", e));
            j += started.elapsed();
            black_box(parsed);
            let started = Instant::now();
            let values: Vec<f32> =
                body[json_end..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            f += started.elapsed();
            black_box(values);
        }
        json.push(j);
        floats.push(f);
    }
    println!(
        "memory: after ingest {after_ingest}; after the first cold load{} {first_load_memory}",
        if hwm_reset { " (VmHWM reset before it)" } else { " (VmHWM not reset: includes ingest)" }
    );
    println!("load (R={}), ms                           min     median  max", args.repeat);
    let row = |name: &str, samples: &[Duration]| {
        let (lo, mid, hi) = spread(samples);
        println!("  {name:<38} {:>7} {:>7} {:>7}", ms(lo), ms(mid), ms(hi));
    };
    row("IndexSnapshot::load, cold", &full);
    row("  fetch: store.get manifest+segments", &fetch);
    if local {
        row("    SHA-256 of the bodies (local etag)", &hashing);
    }
    row("  Segment::decode, all segments", &decode);
    row("    of which records JSON (serde)", &json);
    row("    of which f32 rows", &floats);
    row("load, all segments reused (liveness)", &reuse);
    row("  liveness with a HashSet (bench-local)", &hashed_liveness);

    // Search.
    let identity = Identity {
        account: account.clone(),
        user: UserId::new(USER).unwrap_or_else(|e| fail("user", e)),
        actor_peer: None,
    };
    let filters = [
        ("no filter", Filter::default()),
        ("default targets (2 roots)", Filter { targets: default_targets(&identity, None), ..Filter::default() }),
        ("narrow subtree", Filter { targets: vec![uri(NARROW)], ..Filter::default() }),
    ];
    let queries: Vec<Vec<f32>> = (0..args.queries)
        .map(|_| {
            let mut v = Vec::with_capacity(args.dim);
            rng.unit_vector(args.dim, &mut v);
            v
        })
        .collect();
    println!(
        "search (live records {}, Q={}, limit 10), ms   matched   p50     p95     max     q/s  filter-only",
        snapshot.len(),
        args.queries
    );
    for (name, filter) in &filters {
        // The filter alone over every live record (no dot products), best of 5.
        let mut matched = 0;
        let mut filter_only = Duration::MAX;
        for _ in 0..5 {
            let started = Instant::now();
            matched = black_box(snapshot.records().filter(|(r, _)| filter.matches(r)).count());
            filter_only = filter_only.min(started.elapsed());
        }
        let targets: Vec<&str> = filter.targets.iter().map(VikingUri::as_str).collect();
        // One untimed pass warms caches.
        for q in queries.iter().take(3) {
            let params = SearchParams { vector: q, filter, limit: 10, score_threshold: None, decay: None };
            black_box(snapshot.search(&params));
        }
        let mut times = Vec::with_capacity(queries.len());
        let started = Instant::now();
        for q in &queries {
            let params = SearchParams { vector: q, filter, limit: 10, score_threshold: None, decay: None };
            let t = Instant::now();
            let hits = snapshot.search(&params);
            times.push(t.elapsed());
            black_box(hits);
        }
        let elapsed = started.elapsed();
        times.sort();
        println!(
            "  {:<38} {matched:>7} {:>7} {:>7} {:>7} {:>7.0} {:>8}   {}",
            name,
            ms(percentile(&times, 50.0)),
            ms(percentile(&times, 95.0)),
            ms(times[times.len() - 1]),
            queries.len() as f64 / elapsed.as_secs_f64(),
            ms(filter_only),
            if targets.is_empty() { "(any)".to_owned() } else { targets.join(", ") }
        );
    }
    println!();
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| fail("tokio runtime", e));
    runtime.block_on(async {
        if args.local {
            // A failed run exits early and leaves this directory behind.
            let dir = std::env::temp_dir().join(format!("skald-bench-{}-{}", std::process::id(), args.records));
            let _ = std::fs::remove_dir_all(&dir);
            let local: SharedStore = Arc::new(LocalStore::open(&dir).unwrap_or_else(|e| fail("local store", e)));
            run(&local, &format!("local ({})", dir.display()), true, &args).await;
            drop(local);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                eprintln!("bench: cannot remove {}: {e}", dir.display());
            }
        }
        if args.s3 {
            let s3: SharedStore = Arc::new(skald_tests::moto::s3_store("bench").await);
            run(&s3, "s3 (moto)", false, &args).await;
        }
    });
}
