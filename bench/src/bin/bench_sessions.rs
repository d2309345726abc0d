//! Sessions and dedup-ledger benchmark: what the per-session dedup ledger
//! adds to a context-mode request, what a message append costs, and how
//! concurrent appends on one session behave (throughput, compare-and-swap
//! retries, exact counts), on a local store and on S3 (moto), with and
//! without a simulated per-call round trip.
//!
//! ```text
//! cargo run --release -p skald-bench --bin bench_sessions -- [--hashed] [--rounds 5] [--appends 600]
//!     [--slow-appends 100] [--concurrent 32,128] [--latency-ms 20] [--no-moto] [--commits-only]
//! ```
//!
//! Stores: `local` (a `LocalStore` in a temporary directory); `moto` (the S3
//! client, `S3Store`, on a local moto server: `skald_tests::moto`,
//! `SKALD_TEST_S3_ENDPOINT` or a `python3` child); `moto+count`
//! (the same bucket through a loopback proxy that only logs each HTTP
//! request, used in part 3 only: store calls are counted, e.g.
//! compare-and-swap attempts); and `moto+L ms` (through the proxy, which
//! waits `--latency-ms` before forwarding each request, so every store call
//! pays one round trip; 0 skips it). The proxy is `bench_context`'s, from
//! `skald_bench`, so calls on the local store are timed, not
//! counted.
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
//! 4. Commit -> searchable: 10 sessions of 10 exchanges each (one
//!    `messages/batch`), each committed (`POST …/commit`: the archive and
//!    its episodes; on the local store the episodes are indexed inside the
//!    commit), and on S3 the indexer's `skald::indexer::apply` over the
//!    episodes the archive lists, as the `indexer` function runs it on the
//!    store's notifications (the queue's batching window, up to 5 s
//!    deployed, is not counted); a keyword `find` for each session's
//!    distinctive line must then return its episode.
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skald::app::App;
use skald::identity::Identity;
use skald::ledger::{LEDGER_VERSION, Ledger, LedgerData, MAX_RECORDS, Served};
use skald::sessions::{SessionId, SessionMeta, Sessions};
use skald::store::{PutMode, SharedStore};
use skald::uri::tree_key;
use skald_bench::{
    Call, CallLog, Flags, Summary, Table, TempStore, block_on, dev_app, diff_ms, embedder, event, fail, fmt_ms,
    identity, ingest_demo, load_average, median, median_range, moto_demo, ms, paired_ms, parse_body, parse_number,
    percentile, retrieval_queries, s3_at, search, sessions_call, start_proxy,
};
use skald_tests::fixture::SESSIONS_PATH;

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
    /// Part 4 only (`--commits-only`).
    commits_only: bool,
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
        commits_only: false,
    };
    let mut flags = Flags::from_env(
        "usage: bench_sessions [--hashed] [--rounds R] [--appends N] [--slow-appends N] [--concurrent 32,128] \
         [--latency-ms L] [--no-moto] [--commits-only]",
    );
    while let Some(flag) = flags.next() {
        match flag.as_str() {
            "--hashed" => args.hashed = true,
            "--no-moto" => args.moto = false,
            "--commits-only" => args.commits_only = true,
            "--rounds" => args.rounds = flags.at_least(&flag, 1)?,
            "--appends" => args.appends = flags.at_least(&flag, 2)?,
            "--slow-appends" => args.slow_appends = flags.at_least(&flag, 2)?,
            "--latency-ms" => args.latency = flags.millis(&flag)?,
            "--concurrent" => {
                args.concurrent = flags
                    .value(&flag)?
                    .split(',')
                    .map(|n| parse_number(&flag, n).map(|n| n.max(1) as usize))
                    .collect::<Result<_, _>>()?;
            }
            _ => return Err(flags.unknown(&flag)),
        }
    }
    Ok(args)
}

/// `p50 / p95 / max` of durations, in ms.
fn spread(times: &[Duration]) -> String {
    if times.is_empty() {
        return "-".to_owned();
    }
    let s = Summary::of(times);
    format!("{} / {} / {}", ms(s.p50), ms(s.p95), ms(s.max))
}

fn session_id(text: &str) -> SessionId {
    SessionId::new(text).unwrap_or_else(|e| fail("session id", e))
}

/// A short process-unique suffix for session ids.
fn fresh() -> String {
    format!("{:x}", skald::index::unique() & 0xff_ffff_ffff)
}

// ---------------------------------------------------------------------------
// Requests.

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
// Store calls.

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

    /// The median of each kind over `calls`, [`Calls::short`]; `-` when
    /// there are none (no proxy in the way).
    fn median_of(calls: impl IntoIterator<Item = Self>) -> String {
        let calls: Vec<Self> = calls.into_iter().collect();
        if calls.is_empty() {
            return "-".to_owned();
        }
        let med = |f: fn(&Self) -> usize| median(calls.iter().map(f));
        Self {
            get: med(|c| c.get),
            put: med(|c| c.put),
            head: med(|c| c.head),
            list: med(|c| c.list),
            delete: med(|c| c.delete),
            ..Self::default()
        }
        .short()
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

    /// A context request to this target's app, with the store calls the
    /// proxy saw (when it is in the way).
    async fn search(&self, body: &Value) -> (Duration, Value, Option<Calls>) {
        self.clear_log();
        let (time, json) = search(&self.app, body).await;
        (time, json, self.take_calls())
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
        ..SessionMeta::default()
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

/// [`context_body`] on session `id` with `dedup_turns` [`DEDUP_TURNS`].
fn dedup_body(query: &str, id: &str) -> Value {
    json!({ "mode": "context", "max_tokens": MAX_TOKENS, "query": query, "session_id": id, "dedup_turns": DEDUP_TURNS })
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
                let body = match variant {
                    Variant::Off => context_body(q),
                    Variant::SessionOnly => {
                        let mut body = context_body(q);
                        body["session_id"] = json!(format!("bs-{}-{qi}", target.tag));
                        body
                    }
                    Variant::New => dedup_body(q, &format!("bn-{}-{qi}-{}", target.tag, fresh())),
                    Variant::Ledger10 | Variant::LedgerFull => {
                        let (name, total) = if variant == Variant::Ledger10 {
                            ("bl10", reference[qi].len())
                        } else {
                            ("bl500", MAX_RECORDS)
                        };
                        let id = session_id(&format!("{name}-{}-{qi}", target.tag));
                        let ledger = ledger_bytes(&reference[qi], total, turn - DEDUP_TURNS);
                        prepare(&target.plain, &identity, &id, turn, &ledger).await;
                        dedup_body(q, id.as_str())
                    }
                };
                let (time, json, calls) = target.search(&body).await;
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
            let (time, json, calls) = target.search(&dedup_body(q, id.as_str())).await;
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
    let table = Table::new("<17 >22 | >8 >17 | >14 >7 >8");
    println!(
        "{}",
        table.header(&[
            "variant",
            "p50 / p95 / max ms",
            "Δp50",
            "paired Δ p50/p95",
            "calls (median)",
            "cooled",
            "returned"
        ])
    );
    let off: Vec<Duration> = r.samples[0].iter().map(|s| s.time).collect();
    for (variant, samples) in VARIANTS.iter().zip(&r.samples) {
        let times: Vec<Duration> = samples.iter().map(|s| s.time).collect();
        let (delta, paired) = if *variant == Variant::Off {
            ("-".to_owned(), "-".to_owned())
        } else {
            let diffs = paired_ms(&times, &off);
            let delta = diff_ms(median(times.iter().copied()), median(off.iter().copied()));
            (fmt_ms(delta), format!("{} / {}", fmt_ms(percentile(&diffs, 50.0)), fmt_ms(percentile(&diffs, 95.0))))
        };
        println!(
            "{}",
            table.line(&[
                &variant.label(),
                &spread(&times),
                &delta,
                &paired,
                &Calls::median_of(samples.iter().filter_map(|s| s.calls)),
                &median(samples.iter().map(|s| s.cooled)),
                &median(samples.iter().map(|s| s.returned)),
            ])
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
    println!(
        "  20-turn conversations with dedup 5 (turn +1 per request, {} conversations): {} ms; cooled median {}, \
         returned median {}; ledger at the end {} records, {} B (median)",
        r.conversation_ledger.len(),
        spread(&times),
        median_range(r.conversation.iter().map(|s| s.cooled)),
        median_range(r.conversation.iter().map(|s| s.returned)),
        median(r.conversation_ledger.iter().map(|c| c.0)),
        median(r.conversation_ledger.iter().map(|c| c.1))
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
    let s = Summary::of(times);
    format!("{} / {}", ms(s.p50), ms(s.p95))
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
    let table = Table::new("<12 >7 >22 >22 >16 >10 >6");
    println!(
        "{}",
        table.header(&[
            "store",
            "appends",
            "first 100 p50/p95/max",
            "last 100 p50/p95/max",
            "calls (median)",
            "meta.json",
            "check"
        ])
    );
    for r in results {
        let first = &r.times[..r.times.len().min(100)];
        let last = &r.times[r.times.len().saturating_sub(100)..];
        println!(
            "{}",
            table.line(&[
                &r.label,
                &r.times.len(),
                &spread(first),
                &if r.times.len() > 100 { spread(last) } else { "-".to_owned() },
                &Calls::median_of(r.calls.iter().copied()),
                &format!("{} B", r.meta_bytes),
                &if r.ok { "ok" } else { "WRONG" },
            ])
        );
    }
    println!("  (check: total_message_count = appends and user_turn_count = user messages, from GET the session)");
}

fn report_concurrent(results: &[ConcurrentResult]) {
    println!("\n== concurrent appends on ONE session (tokio tasks started at once)");
    let table = Table::new("<12 >4 >9 >9 >22 >9 >7 >9 >11 >9 >9");
    println!(
        "{}",
        table.header(&[
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
        ])
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
            "{}",
            table.line(&[
                &r.label,
                &r.n,
                &ms(r.total),
                &format!("{:.0}", r.added as f64 / r.total.as_secs_f64()),
                &spread(&r.times),
                &format!("{}/{}", r.added, r.failed.len()),
                &format!("{}{}", r.count, if count_ok { "" } else { "!" }),
                &r.objects,
                &tries,
                &lost,
                &seq,
            ])
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

// ---------------------------------------------------------------------------
// 4. Commit -> searchable.

/// Sessions committed per store in part 4.
const COMMITS: usize = 10;
/// Exchanges (a user message and its answer) in each committed session.
const EXCHANGES: usize = 10;

struct CommitResult {
    label: String,
    /// The commit request (archive, episodes; inline indexing locally).
    commits: Vec<Duration>,
    /// The indexer's run over the episodes (S3 only: locally the commit
    /// indexed them).
    indexing: Vec<Duration>,
    /// Whether every committed session's first line was found afterwards.
    found: bool,
}

/// Commits [`COMMITS`] sessions of [`EXCHANGES`] exchanges each and times
/// the commit, then (on S3, where the store's notifications bring the
/// episodes to the `indexer` function) the indexer's `apply` over the
/// episodes the archive lists; a `find` for each session's distinctive
/// line must then return its episode.
async fn measure_commits(target: &Target) -> CommitResult {
    let identity = identity();
    let (mut commits, mut indexing, mut found) = (Vec::new(), Vec::new(), true);
    let inline = target.app.config.memory_index_inline();
    for c in 0..COMMITS {
        let id = format!("cm-{}-{}", target.tag, fresh());
        let marker = format!("zephyr{c}{}", target.tag);
        let messages: Vec<Value> = (0..EXCHANGES)
            .flat_map(|e| {
                let said = if e == 0 {
                    format!("My {marker} bicycle is parked by the north gate.")
                } else {
                    format!("Exchange {e}: planning the week's errands.")
                };
                [
                    json!({"id": format!("u{e}"), "role": "user", "content": said, "created_at": "2026-12-01T09:00:00Z"}),
                    json!({"id": format!("a{e}"), "role": "assistant", "content": "Noted.", "created_at": "2026-12-01T09:00:05Z"}),
                ]
            })
            .collect();
        let batch = json!({ "messages": messages });
        let (_, status, json) =
            sessions_call(&target.app, "POST", &format!("{SESSIONS_PATH}/{id}/messages/batch"), Some(&batch)).await;
        if status != 200 {
            fail("messages/batch", json);
        }
        let (time, status, json) =
            sessions_call(&target.app, "POST", &format!("{SESSIONS_PATH}/{id}/commit"), Some(&json!({}))).await;
        if status != 200 || json["result"]["archived"] != true {
            fail("commit", json);
        }
        commits.push(time);
        if !inline {
            let sessions = Sessions::new(&target.plain, &identity);
            let list = tree_key(&identity.account, &sessions.archive_uri(&session_id(&id), 1));
            let listed =
                target.plain.get(&format!("{list}/.episodes.json")).await.unwrap_or_else(|e| fail("episodes", e));
            let uris: Vec<String> = serde_json::from_slice(&listed.body).unwrap_or_else(|e| fail("episodes", e));
            let changes: Vec<skald::indexer::Change> = uris
                .iter()
                .filter_map(|u| skald::uri::VikingUri::parse(u).ok())
                .map(|u| skald::indexer::Change {
                    key: tree_key(&identity.account, &u),
                    at: 1_800_000_000,
                    version: None,
                })
                .collect();
            let started = Instant::now();
            skald::indexer::apply(&target.app, &changes).await.unwrap_or_else(|e| fail("index the episodes", e));
            indexing.push(started.elapsed());
        }
        let body = json!({"query": format!("{marker} bicycle"), "search_type": "keywords", "limit": 3});
        let (_, json) = search(&target.app, &body).await;
        found &= json.to_string().contains(&format!("{id}-001-01.md"));
    }
    CommitResult { label: target.label.clone(), commits, indexing, found }
}

fn report_commits(results: &[CommitResult]) {
    println!(
        "\n== commit -> searchable: {COMMITS} sessions of {EXCHANGES} exchanges each (commit, then the indexer on S3), ms"
    );
    let table = Table::new("<12 >15 >15 >15 >7");
    println!("{}", table.header(&["store", "commit p50/p95", "index p50/p95", "total p50/p95", "found"]));
    for r in results {
        let total: Vec<Duration> =
            r.commits.iter().enumerate().map(|(i, c)| *c + r.indexing.get(i).copied().unwrap_or_default()).collect();
        let index = if r.indexing.is_empty() { "inline".to_owned() } else { p50_p95(&r.indexing) };
        println!(
            "{}",
            table.line(&[
                &r.label,
                &p50_p95(&r.commits),
                &index,
                &p50_p95(&total),
                &if r.found { "yes" } else { "NO" }
            ])
        );
    }
}

/// `app` as deployed on S3: a commit's memories are indexed by the
/// `indexer` function from the store's notifications, not inline.
fn on_s3(mut app: App) -> App {
    app.config.memory.index_inline = Some(false);
    app
}

async fn run(args: &Args) {
    let embedder = embedder(args.hashed, "--hashed");
    let queries = retrieval_queries();
    println!(
        "embedder {}; {} queries; {} rounds; latency {} ms; load average {}",
        embedder.id(),
        queries.len(),
        args.rounds,
        args.latency.as_millis(),
        load_average()
    );

    let local = TempStore::open(&format!("skald-bench-sessions-{}", std::process::id()));
    let took = ingest_demo(local.store(), embedder.as_ref()).await;
    println!("ingest samplconfigs/demo into a LocalStore: {} ms", ms(took));
    let mut targets = vec![Target {
        label: "local".to_owned(),
        tag: "local",
        app: Arc::new(dev_app(Arc::clone(local.store()), Arc::clone(&embedder))),
        plain: Arc::clone(local.store()),
        log: None,
        latency: Duration::ZERO,
    }];

    if args.moto {
        let bucket = format!("bench-sessions-{}", std::process::id());
        let moto = moto_demo(&bucket, embedder.as_ref()).await;
        println!("ingest samplconfigs/demo into S3 on moto ({}): {} ms", moto.endpoint, ms(moto.ingest));
        targets.push(Target {
            label: "moto".to_owned(),
            tag: "moto",
            app: Arc::new(on_s3(dev_app(Arc::clone(&moto.store), Arc::clone(&embedder)))),
            plain: Arc::clone(&moto.store),
            log: None,
            latency: Duration::ZERO,
        });
        for latency in [Duration::ZERO, args.latency] {
            if latency.is_zero() && targets.iter().any(|t| t.tag == "motocount") {
                continue;
            }
            let log = Arc::new(CallLog::default());
            let proxy = start_proxy(moto.address, latency, Arc::clone(&log)).await;
            let (label, tag) = if latency.is_zero() {
                ("moto+count".to_owned(), "motocount")
            } else {
                (format!("moto+{}ms", latency.as_millis()), "motoslow")
            };
            targets.push(Target {
                label,
                tag,
                app: Arc::new(on_s3(dev_app(s3_at(proxy, &bucket), Arc::clone(&embedder)))),
                plain: Arc::clone(&moto.store),
                log: Some(log),
                latency,
            });
        }
    }

    let (mut ledgers, mut appends, mut concurrent, mut commits) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for target in &targets {
        // The counting proxy only serves the concurrency part (the others
        // count their calls with latency).
        if args.commits_only {
            if target.tag != "motocount" {
                commits.push(measure_commits(target).await);
            }
            continue;
        }
        if target.tag != "motocount" {
            let r = measure_ledger(target, &queries, args).await;
            report_ledger(&r, args.rounds, queries.len());
            ledgers.push(r);
            let n = if target.latency.is_zero() { args.appends } else { args.slow_appends };
            appends.push(measure_appends(target, n).await);
            commits.push(measure_commits(target).await);
        }
        for &n in &args.concurrent {
            concurrent.push(measure_concurrent(target, n).await);
        }
    }
    report_commits(&commits);
    if args.commits_only {
        return;
    }
    report_appends(&appends);
    report_concurrent(&concurrent);

    println!("\n== summary: what the ledger adds to a context call (dedup_turns 5 vs no session), ms");
    let table = Table::new("<12 >9 >9 >9 >9 >9 >9");
    println!("{}", table.header(&["store", "off p50", "L10 p50", "Δp50", "paired Δ", "off p95", "L10 p95"]));
    for r in &ledgers {
        let times = |v: usize| r.samples[v].iter().map(|s| s.time).collect::<Vec<_>>();
        let (off, l10) = (times(0), times(3));
        let (o, l) = (Summary::of(&off), Summary::of(&l10));
        println!(
            "{}",
            table.line(&[
                &r.label,
                &ms(o.p50),
                &ms(l.p50),
                &fmt_ms(diff_ms(l.p50, o.p50)),
                &fmt_ms(percentile(&paired_ms(&l10, &off), 50.0)),
                &ms(o.p95),
                &ms(l.p95),
            ])
        );
    }

    drop(targets);
    // Removes the local store's directory.
    drop(local);
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    block_on(run(&args));
}
