//! Index benchmark: builds synthetic records, commits them as segments into a
//! store, then measures cold index loads and exact search.
//!
//! ```text
//! cargo run --release -p skald-bench --bin bench -- --records 100000 [--s3 | --s3-only]
//!     [--repeat 5] [--queries 200] [--segment 5000] [--dim 512] [--seed 1] [--no-terms]
//! ```
//!
//! Records are random unit vectors (a SplitMix64 PRNG, Box–Muller normals)
//! with URIs spread over `viking://user/bench/{memories,resources,skills}`
//! and `viking://resources/…`, and ~200-byte abstracts: half their words
//! from a 40-word technical list, half from a 20,000-word synthetic
//! vocabulary drawn log-uniformly (a few words common, most rare, as in
//! text). Each record stores the keyword terms of its abstract
//! (`--no-terms`: none, to see what they cost a load). Keyword queries are
//! one listed word and two vocabulary words. Everything runs
//! against a `LocalStore` in a temporary directory; `--s3` repeats it on a
//! fresh bucket of a local moto server, `--s3-only` runs only that.
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use skald::identity::{AccountId, Identity, UserId};
use skald::index::record::{LEVEL_FILE, classify};
use skald::index::{
    self, EmbedderInfo, Filter, IndexSnapshot, Record, SearchKind, SearchParams, Segment, manifest_key,
};
use skald::retrieval::default_targets;
use skald::store::SharedStore;
use skald::uri::VikingUri;
use skald_bench::{Flags, Rng, Summary, TempStore, block_on, fail, ms, now, proc_status};

/// The heap this process holds, counted at every allocation, and its peak
/// since the last [`Heap::reset_peak`]: what a phase allocates, even where
/// the allocator reuses memory already resident (which RSS cannot see).
struct Heap;

static HEAP_NOW: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static HEAP_PEAK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Heap {
    fn grew(by: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = HEAP_NOW.fetch_add(by, Relaxed) + by;
        HEAP_PEAK.fetch_max(now, Relaxed);
    }

    fn shrank(by: usize) {
        HEAP_NOW.fetch_sub(by, std::sync::atomic::Ordering::Relaxed);
    }

    /// The heap now; the peak starts again from it.
    fn reset_peak() -> usize {
        let now = HEAP_NOW.load(std::sync::atomic::Ordering::Relaxed);
        HEAP_PEAK.store(now, std::sync::atomic::Ordering::Relaxed);
        now
    }

    fn peak() -> usize {
        HEAP_PEAK.load(std::sync::atomic::Ordering::Relaxed)
    }
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counters only observe sizes. The one unsafe code of the workspace: a
// global allocator cannot be written without it, and this one only
// measures, in a benchmark binary.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::grew(layout.size());
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        Self::shrank(layout.size());
        // SAFETY: as above.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        Self::grew(new_size);
        Self::shrank(layout.size());
        // SAFETY: as above.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Heap = Heap;

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
    terms: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        records: 10_000,
        repeat: 5,
        queries: 200,
        segment: 5_000,
        dim: 512,
        seed: 1,
        local: true,
        s3: false,
        terms: true,
    };
    let mut flags = Flags::from_env(
        "usage: bench [--records N] [--repeat R] [--queries Q] [--segment S] [--dim D] [--seed X] [--s3 | --s3-only] [--no-terms]",
    );
    while let Some(flag) = flags.next() {
        match flag.as_str() {
            "--s3" | "--s3-only" => {
                args.s3 = true;
                args.local = flag == "--s3";
            }
            "--records" => args.records = flags.at_least(&flag, 1)?,
            "--repeat" => args.repeat = flags.at_least(&flag, 1)?,
            "--queries" => args.queries = flags.at_least(&flag, 1)?,
            "--segment" => args.segment = flags.at_least(&flag, 1)?,
            "--dim" => args.dim = flags.at_least(&flag, 1)?,
            "--seed" => args.seed = flags.number(&flag)?,
            "--no-terms" => args.terms = false,
            _ => return Err(flags.unknown(&flag)),
        }
    }
    Ok(args)
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

/// Words of the synthetic vocabulary.
const VOCABULARY: usize = 20_000;

/// A vocabulary word, drawn log-uniformly: word `k` about as often as
/// `1 / k` (Zipf's law, roughly).
fn vocabulary_word(rng: &mut Rng) -> String {
    let k = (VOCABULARY as f64).powf(rng.below(1_000_000) as f64 / 1_000_000.0) as usize;
    format!("w{k}x")
}

/// A ~200-byte abstract: listed words and vocabulary words in turn.
fn abstract_text(rng: &mut Rng) -> String {
    let mut text = String::with_capacity(220);
    while text.len() < 200 {
        if !text.is_empty() {
            text.push(' ');
        }
        if text.len().is_multiple_of(2) {
            text.push_str(WORDS[rng.below(WORDS.len())]);
        } else {
            text.push_str(&vocabulary_word(rng));
        }
    }
    text.push('.');
    text
}

/// A keyword query: one listed word and two vocabulary words.
fn keyword_query(rng: &mut Rng) -> String {
    format!("{} {} {}", WORDS[rng.below(WORDS.len())], vocabulary_word(rng), vocabulary_word(rng))
}

fn uri(text: &str) -> VikingUri {
    VikingUri::parse(text).unwrap_or_else(|e| panic!("bench uri {text}: {e}"))
}

/// Record `i`: 40 % shared resources, 35 % memories, 15 % user resources,
/// 10 % skills; one in ten is a directory's abstract or overview.
fn make_record(i: usize, rng: &mut Rng, now: i64, terms: bool) -> Record {
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
        source_version: None,
        terms: if terms { skald::index::lexical::encode_counts(&[&abstract_text]) } else { String::new() },
        passages: 0,
        span: None,
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
    let mut seen: HashSet<(&VikingUri, skald::index::Level)> = HashSet::new();
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

/// Min, median (the upper one of an even count), max.
fn spread(samples: &[Duration]) -> (Duration, Duration, Duration) {
    let mut s = samples.to_vec();
    s.sort();
    (s[0], s[s.len() / 2], s[s.len() - 1])
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// `VmHWM` and `VmRSS` of this process, as printed by the kernel.
fn memory_status() -> String {
    let line = |key: &str| proc_status(key).map(|value| format!("{key} {value}"));
    ["VmHWM:", "VmRSS:"].into_iter().filter_map(line).collect::<Vec<_>>().join(", ")
}

async fn run(store: &SharedStore, store_name: &str, local: bool, args: &Args) {
    let account = AccountId::new(ACCOUNT).unwrap_or_else(|e| fail("account", e));
    let embedder = EmbedderInfo { id: format!("bench-random-v1/{}", args.dim), dimension: args.dim };
    let now = now();
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
            segment.records.push(make_record(i, &mut rng, now, args.terms));
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
    let queries: Vec<(Vec<f32>, Vec<String>)> = (0..args.queries)
        .map(|_| {
            let mut v = Vec::with_capacity(args.dim);
            rng.unit_vector(args.dim, &mut v);
            (v, skald::index::lexical::query_terms(&keyword_query(&mut rng)))
        })
        .collect();

    // Keyword search's first query builds every segment's postings.
    let stored_terms: usize = snapshot.records().map(|(r, _)| r.terms.len()).sum();
    let cold = IndexSnapshot::load(store, &account, None).await.unwrap_or_else(|e| fail("load", e));
    let keyword = |snapshot: &IndexSnapshot, terms: &[String]| {
        let none = Filter::default();
        let params = SearchParams {
            kind: SearchKind::Keywords,
            terms,
            vector: &[],
            filter: &none,
            limit: 10,
            score_threshold: None,
            decay: None,
        };
        let started = Instant::now();
        black_box(snapshot.search(&params));
        started.elapsed()
    };
    let first = keyword(&cold, &queries[0].1);
    let second = keyword(&cold, &queries[0].1);
    println!(
        "lexical: terms stored in the records {}; postings in memory {}; first keyword search (builds the postings) {} ms, the same again {} ms",
        mib(stored_terms as u64),
        mib(cold.lexical_memory_bytes() as u64),
        ms(first),
        ms(second)
    );
    drop(cold);

    println!(
        "search (live records {}, Q={}, limit 10), ms   matched   p50     p95     max     q/s  filter-only",
        snapshot.len(),
        args.queries
    );
    for kind in [SearchKind::Semantic, SearchKind::Keywords, SearchKind::Hybrid] {
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
            fn params<'q>(
                kind: SearchKind,
                filter: &'q Filter,
                (vector, terms): &'q (Vec<f32>, Vec<String>),
            ) -> SearchParams<'q> {
                SearchParams { kind, terms, vector, filter, limit: 10, score_threshold: None, decay: None }
            }
            // One untimed pass warms caches (and builds the postings).
            for q in queries.iter().take(3) {
                black_box(snapshot.search(&params(kind, filter, q)));
            }
            let mut times = Vec::with_capacity(queries.len());
            let started = Instant::now();
            for q in &queries {
                let params = params(kind, filter, q);
                let t = Instant::now();
                let hits = snapshot.search(&params);
                times.push(t.elapsed());
                black_box(hits);
            }
            let elapsed = started.elapsed();
            let summary = Summary::of(&times);
            println!(
                "  {:<38} {matched:>7} {:>7} {:>7} {:>7} {:>7.0} {:>8}   {}",
                format!("{} {name}", kind.as_str()),
                ms(summary.p50),
                ms(summary.p95),
                ms(summary.max),
                queries.len() as f64 / elapsed.as_secs_f64(),
                ms(filter_only),
                if targets.is_empty() { "(any)".to_owned() } else { targets.join(", ") }
            );
        }
    }

    // A compaction beside the index the process holds (as the warm cache
    // does): given that index, and loading its own copy. One small commit
    // first, so there are segments to merge.
    let held = snapshot.resident_bytes() as f64 / 1e6;
    println!("compaction beside the held index ({held:.0} MB by its own estimate)");
    let basis = std::mem::take(&mut snapshot);
    for (name, given) in [("given the held index", true), ("loading its own copy", false)] {
        let mut small = Segment { dim: args.dim, ..Segment::default() };
        small.records.push(make_record(args.records + usize::from(given), &mut rng, now, args.terms));
        rng.unit_vector(args.dim, &mut small.vectors);
        index::commit(store, &account, &embedder, &small).await.unwrap_or_else(|e| fail("commit", e));
        let before = Heap::reset_peak();
        let started = Instant::now();
        let now_ms = now * 1000;
        index::compact(store, &account, &embedder, given.then_some(&basis), now_ms)
            .await
            .unwrap_or_else(|e| fail("compact", e));
        let elapsed = started.elapsed();
        let extra = Heap::peak().saturating_sub(before) as f64 / 1e6;
        println!(
            "  {name:<22} {:>7} ms; heap peak +{extra:.0} MB over the held index ({:.2}x it)",
            ms(elapsed),
            (held + extra) / held
        );
    }
    drop(basis);
    println!();
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    block_on(async {
        if args.local {
            // A failed run exits early and leaves this directory behind.
            let local = TempStore::open(&format!("skald-bench-{}-{}", std::process::id(), args.records));
            run(local.store(), &format!("local ({})", local.dir().display()), true, &args).await;
        }
        if args.s3 {
            let s3: SharedStore = Arc::new(skald_tests::moto::s3_store("bench").await);
            run(&s3, "s3 (moto)", false, &args).await;
        }
    });
}
