//! LLM-stage overhead benchmark: what context mode adds around its two
//! model calls (query expansion and the digest rewrite) when the model
//! answers in 0 ms, and where that time goes.
//!
//! ```text
//! scripts/setup-model.sh        # once (the USE-m3 model), unless --embedder hashed
//! cargo run --release -p skald-bench --bin bench_llm -- [--rounds 200] [--warmup 20]
//!     [--embedder use-m3|hashed]
//! cargo run --release -p skald-bench --bin bench_llm -- --s3 [--latency-ms 20] [--no-moto]
//!     [--rounds 100] [--warmup 5] [--embedder use-m3|hashed]
//! ```
//!
//! Setup: the demo (`samplconfigs/demo`) is ingested into a `LocalStore` in
//! a temporary directory (USE-m3 from `.skald/models/use-m3`, or
//! `$SKALD_USE_M3_DIR`; `--embedder hashed`: `HashedEmbedder::new(256)`).
//! A [`ModelServer`] runs in process on the same tokio runtime and answers
//! at once: a query-expansion prompt ([`EXPAND_MARKER`]) with a fixed plan of
//! two queries, a rewrite prompt with [`Reply::Echo`]'s cited bullets (one
//! per `<memory>` element). The app is built as production builds it, from
//! the configuration: dev identity, `llm = openai` at the server's base URL
//! (`query_planner` unset: the main model serves both stages). A session of
//! five messages (three user, two assistant) is written through
//! `skald::api::sessions::handle`.
//!
//! Timed: one vague, session-dependent query sent to
//! `skald::api::search::handle` as `{"mode":"context","max_tokens":1600}`
//! in four variants, (a) no session and no stages, (b) session + expansion,
//! (c) session + rewrite, (d) session + both, and two diagnostic copies of
//! (d) on apps over the same store whose model is wrapped to time each
//! call: (d·http) the same OpenAI client to the same server, (d·mem) an
//! in-process model giving the same answers without HTTP. Each round runs
//! every variant once, the order rotated per round; the request is built
//! before the clock starts and the response parsed after it stops. Every
//! response is checked (status 200, `stats.query_expansion` `used`/`off`,
//! `stats.planned_queries` the two scripted queries, `stats.rewrite`
//! `ok`/`off`, a digest when rewritten, entries), and the server must have
//! received exactly the calls each variant implies; the bench aborts
//! otherwise.
//!
//! Then the pieces of the difference (d) − (a), each alone (p50 of the same
//! number of rounds): the session read as `load_session` does it (the meta
//! then the last 5 messages, alongside the archive listing), the query
//! embedding for 1 and for 3 queries, `skald::assemble::assemble` for 1 and
//! for 3 queries, the two stages (`expansion::expand`, `rewrite::rewrite`)
//! over the in-process model minus the model's own time, and the server's
//! own work on a recorded request (JSON parse, rule match, echo).
//!
//! `--s3` runs the variants over the S3 client (`S3Store`) instead, as
//! `bench_context` and `bench_sessions` do: the client talks to a loopback
//! proxy that logs every HTTP request (one per store call) and waits
//! `--latency-ms` (default 20) before forwarding it, so every store call
//! pays one simulated round trip. Behind the proxy: the in-process
//! S3-protocol server over the local store (`start_s3_over`), then moto
//! (unless `--no-moto`); each once without delay and once with it. The
//! variants are (a)–(d) and (d·http) as above (no (d·mem): it only removes
//! the model's HTTP), plus (e) = (d·http) with `dedup_turns` 5 (the
//! ledger's read and write; the ledger, ten unrelated URIs, is rewritten
//! before each request, untimed and not through the proxy) and (f) =
//! (d·http) on a second session that also has an archive overview (the
//! archive chain's LIST → GET). Every request's store calls must be exactly
//! those its variant implies (one manifest HEAD, the session meta, the
//! history LIST, the 5 messages, the archive overview, the ledger GET and
//! PUT, as they apply), plus the content reads; the bench aborts otherwise.
//! Reported per variant: p50/p90, the store calls per request by kind, the
//! sequential round trips (the proxy's arrival times grouped into waves:
//! a call arriving at least half a latency after the first of its wave
//! starts a new one), the most common wave pattern, and for the timed
//! variants when the expansion and rewrite calls started. Then the session
//! read alone (as `load_session` does it), over the same store.
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skald::app::App;
use skald::assemble::assemble;
use skald::config::{Config, ModelConfig};
use skald::embed::Embedder;
use skald::identity::Identity;
use skald::index::Exclusion;
use skald::ledger::{LEDGER_VERSION, LedgerData, Served};
use skald::llm::expansion::{self, ExpansionStatus, RECENT_MESSAGES, SessionContext};
use skald::llm::openai::{ApiKey, OpenAiChat};
use skald::llm::rewrite::{self, RewriteStatus};
use skald::llm::{ChatModel, ChatRequest, Completion, LlmError, Models, Usage};
use skald::sessions::{SessionId, Sessions};
use skald::store::{PutMode, SharedStore};
use skald::uri::tree_key;
use skald_bench::{
    Call, CallLog, Flags, Table, TempStore, block_on, dev_config, diff_ms, embedder, fail, identity, ingest_demo,
    load_average, median, moto_demo, now, paired_ms, percentile, s3_at, search, sessions_call, sorted, start_proxy,
    start_s3_over,
};
use skald_tests::fixture::SESSIONS_PATH;
use skald_tests::model_server::{EXPAND_MARKER, ModelServer, Reply, echo};

/// The session every session variant names.
const SESSION: &str = "bench-llm-s3-retries";
/// The session of variant (f) (`--s3` only): the same messages plus an
/// archive overview.
const ARCHIVED: &str = "bench-llm-s3-retries-archived";
/// The archive overview of [`ARCHIVED`] (`history/archive_001/.overview.md`).
const ARCHIVE_OVERVIEW: &str = "Archived part of this session: the team reviewed the index manifest's \
     compare-and-swap and agreed that a losing writer re-reads the manifest before it retries.";
/// `dedup_turns` of variant (e).
const DEDUP_TURNS: u64 = 5;
/// The environment variable the model config names for its key (left unset:
/// the test server wants none).
const NO_KEY: &str = "SKALD_BENCH_NO_KEY";
/// `max_tokens` of every request (as `bench_context`'s main shape).
const MAX_TOKENS: u64 = 1600;

/// The query: vague on purpose, it only makes sense with the session.
const QUERY: &str = "what did we settle on for retrying those conflicts?";
/// The two queries the scripted planner answers with.
const PLANNED: [&str; 2] = [
    "S3 conditional write 412 PreconditionFailed retry on manifest commit",
    "manifest compare-and-swap conflict: re-read and retry policy",
];
/// The original query alone, and with the planned ones (as expansion
/// hands them to the assembly line).
const ONE: [&str; 1] = [QUERY];
const THREE: [&str; 3] = [QUERY, PLANNED[0], PLANNED[1]];
/// The session's messages, oldest first: `(role, content)`.
const MESSAGES: [(&str, &str); 5] = [
    (
        "user",
        "Two indexers committed at the same moment and one of them got 412 Precondition Failed from S3 on \
         index/manifest.json.",
    ),
    (
        "assistant",
        "That is the If-Match compare-and-swap on the manifest doing its job: the loser must re-read the \
         manifest, merge its segment in and try again.",
    ),
    (
        "user",
        "The segment objects themselves are written with If-None-Match, so they never overwrite each other, right?",
    ),
    (
        "assistant",
        "Right: segments are immutable and only the manifest changes, always by compare-and-swap. Only the \
         manifest PUT can conflict.",
    ),
    ("user", "Last week we also wrote down how many times to retry and how long to back off between attempts."),
];

struct Args {
    rounds: usize,
    warmup: usize,
    hashed: bool,
    /// Run the variants over the S3 client (through the latency proxy)
    /// instead of the local store.
    s3: bool,
    /// `--s3`: simulated latency per store call.
    latency: Duration,
    /// `--s3`: also behind moto (not only the in-process S3 server).
    moto: bool,
}

fn parse_args() -> Result<Args, String> {
    let (mut rounds, mut warmup) = (None, None);
    let mut args =
        Args { rounds: 0, warmup: 0, hashed: false, s3: false, latency: Duration::from_millis(20), moto: true };
    let mut flags = Flags::from_env(
        "usage: bench_llm [--rounds N] [--warmup N] [--embedder use-m3|hashed] [--s3 [--latency-ms L] [--no-moto]]",
    );
    while let Some(flag) = flags.next() {
        match flag.as_str() {
            "--rounds" => rounds = Some(flags.at_least(&flag, 1)?),
            "--warmup" => warmup = Some(flags.at_least(&flag, 1)?),
            "--embedder" => match flags.value(&flag)?.as_str() {
                "use-m3" => args.hashed = false,
                "hashed" => args.hashed = true,
                other => return Err(format!("--embedder {other}: want use-m3 or hashed")),
            },
            "--s3" => args.s3 = true,
            "--latency-ms" => args.latency = flags.millis(&flag)?,
            "--no-moto" => args.moto = false,
            _ => return Err(flags.unknown(&flag)),
        }
    }
    // Over S3 every request takes tens of milliseconds: fewer rounds.
    let (default_rounds, default_warmup) = if args.s3 { (100, 5) } else { (200, 20) };
    args.rounds = rounds.unwrap_or(default_rounds);
    args.warmup = warmup.unwrap_or(default_warmup);
    Ok(args)
}

// ---------------------------------------------------------------------------
// Statistics.

fn p50(values: &[Duration]) -> Duration {
    median(values.iter().copied())
}

/// Milliseconds with three decimals.
fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

/// Signed milliseconds with three decimals.
fn ms_signed(ms: f64) -> String {
    format!("{ms:+.3}")
}

/// Milliseconds (signed) of a duration.
fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------
// Models: a timing wrapper and an in-process stand-in for the server.

/// Which stage a chat request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Expand,
    Rewrite,
}

fn stage_of(request: &ChatRequest<'_>) -> Stage {
    if request.system == expansion::SYSTEM { Stage::Expand } else { Stage::Rewrite }
}

/// The calls a [`Timed`] model made, in order: stage, start, duration.
#[derive(Debug, Default)]
struct CallTimes(Mutex<Vec<(Stage, Instant, Duration)>>);

impl CallTimes {
    fn take(&self) -> Vec<(Stage, Instant, Duration)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn push(&self, stage: Stage, started: Instant, took: Duration) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push((stage, started, took));
    }

    /// The durations of the calls in `taken`, after the first `skip`.
    fn durations(taken: &[(Stage, Instant, Duration)], skip: usize) -> Vec<Duration> {
        taken.iter().skip(skip).map(|(_, _, d)| *d).collect()
    }
}

/// The model a [`Timed`] asks.
#[derive(Debug)]
enum Inner {
    /// A client (the OpenAI one, to the test server).
    Client(Arc<dyn ChatModel>),
    /// Answers as the scripted server does, without HTTP: the fixed `plan`
    /// for an expansion prompt, [`echo`] of the request for anything else.
    InProcess { plan: String },
}

/// Times every call of the model it wraps.
#[derive(Debug)]
struct Timed {
    inner: Inner,
    times: Arc<CallTimes>,
}

impl Timed {
    /// The OpenAI client to `base_url`, timed into `times`.
    fn http(base_url: &str, times: &Arc<CallTimes>) -> Self {
        let client = OpenAiChat::new(base_url, "stub", ApiKey::Env(NO_KEY.to_owned()));
        Self { inner: Inner::Client(Arc::new(client)), times: Arc::clone(times) }
    }

    /// The in-process model, timed into `times`.
    fn in_process(times: &Arc<CallTimes>) -> Self {
        Self { inner: Inner::InProcess { plan: plan_answer() }, times: Arc::clone(times) }
    }
}

type CompletionFuture<'a> = Pin<Box<dyn Future<Output = Result<Completion, LlmError>> + Send + 'a>>;

// `ChatModel` is an `#[async_trait]` trait; this crate does not depend on
// `async-trait`, so the method is written in the form the macro expands to.
impl ChatModel for Timed {
    fn id(&self) -> &str {
        match &self.inner {
            Inner::Client(model) => model.id(),
            Inner::InProcess { .. } => "in-process:stub",
        }
    }

    fn complete<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        request: &'life1 ChatRequest<'life2>,
    ) -> CompletionFuture<'async_trait>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let started = Instant::now();
            let answer = match &self.inner {
                Inner::Client(model) => model.complete(request).await,
                Inner::InProcess { plan } => {
                    let text = match stage_of(request) {
                        Stage::Expand => plan.clone(),
                        Stage::Rewrite => echo(&json!({"messages": [
                            {"role": "system", "content": request.system},
                            {"role": "user", "content": request.user},
                        ]})),
                    };
                    Ok(Completion { text, usage: Some(Usage { prompt_tokens: 321, completion_tokens: 54 }) })
                }
            };
            self.times.push(stage_of(request), started, started.elapsed());
            answer
        })
    }
}

/// The scripted planner's answer.
fn plan_answer() -> String {
    json!({
        "reasoning": "the user asks about the retry policy for the manifest conflicts discussed earlier",
        "queries": [
            {"query": PLANNED[0], "context_type": "memory", "intent": "the incident and the decision", "priority": 1},
            {"query": PLANNED[1], "context_type": "resource", "intent": "the documented policy", "priority": 2},
        ],
    })
    .to_string()
}

// ---------------------------------------------------------------------------
// Apps, corpus, session.

/// The app as production builds it: dev identity, `llm` an OpenAI-compatible
/// model at `base_url`, models built from the configuration on first use.
fn app(store: SharedStore, embedder: Arc<dyn Embedder>, base_url: &str) -> App {
    let config = Config {
        llm: Some(ModelConfig::Openai {
            base_url: base_url.to_owned(),
            model: "stub".to_owned(),
            api_key_env: NO_KEY.to_owned(),
            api_key_secret: None,
            api_key: None,
        }),
        ..dev_config()
    };
    App::with_parts(config, store, embedder)
}

/// The same app with its model replaced by `model` (the main model, as the
/// configuration gives it).
fn app_with_model(store: SharedStore, embedder: Arc<dyn Embedder>, base_url: &str, model: Arc<dyn ChatModel>) -> App {
    let mut app = app(store, embedder, base_url);
    app.models = Models::with_client(model, false);
    app
}

/// Creates session `id` and appends [`MESSAGES`] through the sessions route.
async fn write_session(app: &App, id: &str) {
    let call = |method: &'static str, path: String, body: Value| async move {
        let (_, status, json) = sessions_call(app, method, &path, Some(&body)).await;
        if status != 200 {
            fail(&format!("{method} {path}"), json);
        }
    };
    call("POST", SESSIONS_PATH.to_owned(), json!({ "session_id": id })).await;
    for (i, (role, content)) in MESSAGES.iter().enumerate() {
        let body = json!({ "role": role, "content": content, "id": format!("m{i}") });
        call("POST", format!("{SESSIONS_PATH}/{id}/messages"), body).await;
    }
}

/// The sessions of the `--s3` run, written into `store` (not through the
/// proxy): [`SESSION`], and [`ARCHIVED`] with the same messages plus an
/// archive overview (checked to read back as `load_session` reads it).
async fn write_s3_sessions(store: &SharedStore, embedder: &Arc<dyn Embedder>, base_url: &str) {
    let writer = app(Arc::clone(store), Arc::clone(embedder), base_url);
    write_session(&writer, SESSION).await;
    write_session(&writer, ARCHIVED).await;
    let identity = identity();
    let sessions = Sessions::new(store, &identity);
    let id = SessionId::new(ARCHIVED).unwrap_or_else(|e| fail("session id", e));
    let key = format!("{}/history/archive_001/.overview.md", tree_key(&identity.account, &sessions.uri(&id)));
    let text = format!("# Archive 001\n\n{ARCHIVE_OVERVIEW}\n");
    store.put(&key, text.into_bytes().into(), PutMode::Overwrite).await.unwrap_or_else(|e| fail("write archive", e));
    match sessions.latest_archive_overview(&id).await {
        Ok(Some((_, overview))) if overview.contains(ARCHIVE_OVERVIEW) => {}
        other => fail("archive overview read back", format!("{other:?}")),
    }
}

/// The ledger of variant (e), rewritten into the plain store before each
/// of its requests: ten URIs that are not in the index, recorded at the
/// session's turn (so they are cooled, and nothing the query finds is).
struct LedgerReset {
    store: SharedStore,
    key: String,
    bytes: Vec<u8>,
}

impl LedgerReset {
    fn new(store: &SharedStore) -> Self {
        let identity = identity();
        let id = SessionId::new(SESSION).unwrap_or_else(|e| fail("session id", e));
        let key = Sessions::new(store, &identity).ledger_key(&id);
        let turn = MESSAGES.iter().filter(|(role, _)| *role == "user").count() as u64;
        let entries: BTreeMap<String, Served> = (0..10)
            .map(|i| {
                let uri = format!("viking://user/default/memories/events/bench-llm/elsewhere-{i:02}.md");
                (uri, Served { turn, detail: "abstract".to_owned() })
            })
            .collect();
        let data = LedgerData { version: LEDGER_VERSION, updated_turn: turn, entries };
        let bytes = serde_json::to_vec(&data).unwrap_or_else(|e| fail("ledger json", e));
        Self { store: Arc::clone(store), key, bytes }
    }

    async fn apply(&self) {
        let body = self.bytes.clone().into();
        self.store.put(&self.key, body, PutMode::Overwrite).await.unwrap_or_else(|e| fail("reset the ledger", e));
    }
}

// ---------------------------------------------------------------------------
// Variants.

/// What a variant's response must say.
#[derive(Debug, Clone, Copy)]
struct Expect {
    expansion: ExpansionStatus,
    rewrite: RewriteStatus,
    /// `stats.dedup.status`.
    dedup: &'static str,
}

/// One request shape, on one app.
struct Variant<'a> {
    label: &'static str,
    what: &'static str,
    app: &'a App,
    body: Value,
    expect: Expect,
    /// Model calls through the test server per request.
    server_calls: usize,
    /// The timed model of `app`, when it has one.
    times: Option<&'a CallTimes>,
    /// Store calls per request by kind ([`call_kind`]), when the store goes
    /// through the proxy; content reads (`read`) are not fixed.
    store_calls: Vec<(&'static str, usize)>,
    /// Rewrites the ledger before each request (variant (e)).
    reset: Option<&'a LedgerReset>,
}

/// What a variant asks for.
#[derive(Debug, Clone, Copy)]
struct Spec {
    label: &'static str,
    what: &'static str,
    /// The session named, if any.
    session: Option<&'static str>,
    expand: bool,
    rewrite: bool,
    /// `dedup_turns` [`DEDUP_TURNS`] (else 0).
    dedup: bool,
    /// Model calls through the test server per request.
    server_calls: usize,
}

impl Spec {
    fn new(label: &'static str, what: &'static str, session: bool, expand: bool, rewrite: bool) -> Self {
        let session = if session { Some(SESSION) } else { None };
        let server_calls = usize::from(expand) + usize::from(rewrite);
        Self { label, what, session, expand, rewrite, dedup: false, server_calls }
    }

    /// The model answers in process: no call reaches the server.
    fn in_process(self) -> Self {
        Self { server_calls: 0, ..self }
    }

    /// With `dedup_turns` [`DEDUP_TURNS`].
    fn with_dedup(self) -> Self {
        Self { dedup: true, ..self }
    }

    /// On session [`ARCHIVED`] instead.
    fn archived(self) -> Self {
        Self { session: Some(ARCHIVED), ..self }
    }

    /// The variant of this spec on `app`.
    fn on<'a>(self, app: &'a App, times: Option<&'a CallTimes>, reset: Option<&'a LedgerReset>) -> Variant<'a> {
        let context = self.session.is_some() && (self.expand || self.rewrite);
        let mut store_calls = vec![("HEAD", 1)];
        if self.session.is_some() && (context || self.dedup) {
            store_calls.push(("GET meta", 1));
        }
        if context {
            store_calls.extend([("LIST", 1), ("GET msg", MESSAGES.len())]);
        }
        if context && self.session == Some(ARCHIVED) {
            store_calls.push(("GET archive", 1));
        }
        if self.dedup {
            store_calls.extend([("GET ledger", 1), ("PUT ledger", 1)]);
        }
        Variant {
            label: self.label,
            what: self.what,
            app,
            body: body(self.session, self.expand, self.rewrite, self.dedup),
            expect: Expect {
                expansion: if self.expand { ExpansionStatus::Used } else { ExpansionStatus::Off },
                rewrite: if self.rewrite { RewriteStatus::Ok } else { RewriteStatus::Off },
                dedup: if self.dedup { "ok" } else { "off" },
            },
            server_calls: self.server_calls,
            times,
            store_calls,
            reset: if self.dedup { reset } else { None },
        }
    }
}

fn body(session: Option<&str>, expansion: bool, rewrite: bool, dedup: bool) -> Value {
    let mut body = json!({
        "query": QUERY,
        "mode": "context",
        "max_tokens": MAX_TOKENS,
        "query_expansion": if expansion { "auto" } else { "off" },
        "rewrite": rewrite,
    });
    if let Some(id) = session {
        body["session_id"] = json!(id);
    }
    if dedup {
        body["dedup_turns"] = json!(DEDUP_TURNS);
    }
    body
}

/// Aborts unless `json` is what `variant` must answer.
fn check(variant: &Variant<'_>, json: &Value) {
    let result = &json["result"];
    let stats = &result["stats"];
    let mut problems = Vec::new();
    // A stage's status in `stats.{key}`, its error (if any) in `stats.{key}_error`.
    let status = |key: &str, want: &str| {
        let got = stats[key].as_str().unwrap_or("<missing>");
        (got != want)
            .then(|| format!("stats.{key} = {got:?}, want {want:?} (error: {})", stats[format!("{key}_error")]))
    };
    problems.extend(status("query_expansion", variant.expect.expansion.as_str()));
    let planned: Vec<&str> =
        stats["planned_queries"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let want_planned: &[&str] = if variant.expect.expansion == ExpansionStatus::Used { &PLANNED } else { &[] };
    if planned != want_planned {
        problems.push(format!("stats.planned_queries = {planned:?}, want {want_planned:?}"));
    }
    problems.extend(status("rewrite", variant.expect.rewrite.as_str()));
    let dedup = stats["dedup"]["status"].as_str().unwrap_or("<missing>");
    if dedup != variant.expect.dedup {
        problems.push(format!("stats.dedup.status = {dedup:?}, want {:?}", variant.expect.dedup));
    }
    let digest = result["digest"].as_str().unwrap_or_default();
    let wants_digest = variant.expect.rewrite == RewriteStatus::Ok;
    if wants_digest != digest.starts_with(rewrite::DIGEST_HEADER) {
        problems.push(format!("digest {digest:?} (want one: {wants_digest})"));
    }
    if result["entries"].as_array().is_none_or(Vec::is_empty) || result["rendered"].as_str().is_none_or(str::is_empty) {
        problems.push("no entries or an empty rendered block".to_owned());
    }
    if !problems.is_empty() {
        fail(&format!("variant {} ({})", variant.label, variant.what), problems.join("; "));
    }
}

/// Per-variant samples.
#[derive(Default)]
struct Samples {
    times: Vec<Duration>,
    expand_calls: Vec<Duration>,
    rewrite_calls: Vec<Duration>,
    /// The end-to-end time minus the model calls.
    without_calls: Vec<Duration>,
    /// Through the proxy: each request's store calls and model-call starts.
    traces: Vec<Trace>,
    entries: usize,
    digest_bullets: usize,
}

/// One request seen from outside the handler; times are from just before
/// the request was built.
#[derive(Debug, Default, Clone)]
struct Trace {
    /// The store calls ([`call_kind`], arrival at the proxy), in arrival order.
    calls: Vec<(&'static str, Duration)>,
    /// When the expansion call started (timed models only).
    expand_at: Option<Duration>,
    /// When the rewrite call started (timed models only).
    rewrite_at: Option<Duration>,
    /// When the response was back.
    end: Duration,
}

/// The kinds of store call, in report order.
const KINDS: [&str; 10] =
    ["HEAD", "GET meta", "GET ledger", "LIST", "GET msg", "GET archive", "GET read", "PUT ledger", "PUT", "other"];

/// The kind of a store call the proxy saw (path style: `/{bucket}/{prefix}/{key}`;
/// a bucket-level GET is a LIST).
fn call_kind(call: &Call) -> &'static str {
    let path = call.path.as_str();
    let bucket_level = path.trim_matches('/').split('/').count() <= 1;
    match call.method.as_str() {
        "HEAD" => "HEAD",
        "GET" if bucket_level => "LIST",
        "GET" if path.ends_with("/meta.json") => "GET meta",
        "GET" if path.contains("/messages/") => "GET msg",
        "GET" if path.ends_with("/.recall_log.json") => "GET ledger",
        "GET" if path.contains("/history/") => "GET archive",
        "GET" => "GET read",
        "PUT" if path.ends_with("/.recall_log.json") => "PUT ledger",
        "PUT" => "PUT",
        _ => "other",
    }
}

/// How many calls of `kind` `trace` made.
fn count(trace: &Trace, kind: &str) -> usize {
    trace.calls.iter().filter(|(k, _)| *k == kind).count()
}

/// Aborts unless the store calls of `trace` are exactly those `variant`
/// implies, plus any number of content reads.
fn check_calls(variant: &Variant<'_>, trace: &Trace) {
    for kind in KINDS.iter().filter(|k| **k != "GET read") {
        let want = variant.store_calls.iter().find(|(k, _)| k == kind).map_or(0, |(_, n)| *n);
        let got = count(trace, kind);
        if got != want {
            let calls: Vec<&str> = trace.calls.iter().map(|(k, _)| *k).collect();
            fail(
                &format!("variant {} ({})", variant.label, variant.what),
                format!("{got} store calls {kind:?}, want {want}; calls: {calls:?}"),
            );
        }
    }
}

/// Runs every variant once per round, order rotated; checks every response
/// and the server's call count (and, with `log`, the store calls through
/// the proxy). `timed` false: warm-up (checked, not kept).
async fn run_rounds(
    variants: &[Variant<'_>],
    server: &ModelServer,
    log: Option<&CallLog>,
    rounds: usize,
    samples: &mut [Samples],
    timed: bool,
) {
    for round in 0..rounds {
        for k in 0..variants.len() {
            let i = (k + round) % variants.len();
            let variant = &variants[i];
            if let Some(times) = variant.times {
                times.take();
            }
            if let Some(reset) = variant.reset {
                reset.apply().await;
            }
            if let Some(log) = log {
                log.take();
            }
            let before = server.requests().len();
            let t0 = Instant::now();
            let (took, json) = search(variant.app, &variant.body).await;
            let end = t0.elapsed();
            let calls = server.requests().len() - before;
            check(variant, &json);
            if calls != variant.server_calls {
                fail(
                    &format!("variant {} ({})", variant.label, variant.what),
                    format!("the model server got {calls} calls, want {}", variant.server_calls),
                );
            }
            let model_calls = variant.times.map(CallTimes::take).unwrap_or_default();
            let mut trace = Trace { end, ..Trace::default() };
            if let Some(log) = log {
                let since = |at: Instant| at.saturating_duration_since(t0);
                trace.calls = log.take().iter().map(|c| (call_kind(c), since(c.at))).collect();
                check_calls(variant, &trace);
                for (stage, started, _) in &model_calls {
                    match stage {
                        Stage::Expand => trace.expand_at = Some(since(*started)),
                        Stage::Rewrite => trace.rewrite_at = Some(since(*started)),
                    }
                }
            }
            if !timed {
                continue;
            }
            let s = &mut samples[i];
            s.times.push(took);
            if log.is_some() {
                s.traces.push(trace);
            }
            let mut in_calls = Duration::ZERO;
            for (stage, _, d) in model_calls {
                in_calls += d;
                match stage {
                    Stage::Expand => s.expand_calls.push(d),
                    Stage::Rewrite => s.rewrite_calls.push(d),
                }
            }
            s.without_calls.push(took.saturating_sub(in_calls));
            s.entries = json["result"]["entries"].as_array().map_or(0, Vec::len);
            s.digest_bullets = json["result"]["digest"].as_str().map_or(0, |d| d.lines().skip(1).count());
        }
    }
}

// ---------------------------------------------------------------------------
// The pieces, alone.

/// Times `f` `rounds` times after `warmup` calls.
async fn time_each<F, Fut, T>(rounds: usize, warmup: usize, mut f: F) -> Vec<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    for _ in 0..warmup {
        std::hint::black_box(f().await);
    }
    let mut out = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        std::hint::black_box(f().await);
        out.push(started.elapsed());
    }
    out
}

/// What search.rs's `load_session` does for the stages (no ledger): two
/// chains at once, the meta then the last messages, and the archive
/// listing then its overview.
async fn read_session(app: &App, identity: &Identity, id: &SessionId) -> SessionContext {
    let sessions = Sessions::new(&app.store, identity);
    let meta_then_messages = async {
        let meta = sessions.meta(id).await.unwrap_or_else(|e| fail("session meta", e)).map(|(m, _)| m);
        match &meta {
            Some(meta) => {
                sessions.recent_messages(id, meta, RECENT_MESSAGES).await.unwrap_or_else(|e| fail("recent messages", e))
            }
            None => Vec::new(),
        }
    };
    let (messages, archive) = tokio::join!(meta_then_messages, sessions.latest_archive_overview(id));
    SessionContext {
        overview: archive.unwrap_or_else(|e| fail("archive overview", e)).map(|(_, text)| text),
        messages: messages.iter().map(|m| (m.role.clone(), m.text())).collect(),
    }
}

/// The p50s of the pieces.
struct Pieces {
    session_read: Duration,
    embed_1: Duration,
    embed_3: Duration,
    assemble_1: Duration,
    assemble_3: Duration,
    expand_stage: Duration,
    expand_model: Duration,
    rewrite_stage: Duration,
    rewrite_model: Duration,
    server_expand: Duration,
    server_rewrite: Duration,
    prompt_bytes: (usize, usize),
}

async fn measure_pieces(app: &App, server: &ModelServer, args: &Args) -> Pieces {
    let (rounds, warmup) = (args.rounds, args.warmup);
    let identity = identity();
    let id = SessionId::new(SESSION).unwrap_or_else(|e| fail("session id", e));
    let context = read_session(app, &identity, &id).await;
    if context.messages.len() != MESSAGES.len() {
        fail("session read", format!("{} messages, want {}", context.messages.len(), MESSAGES.len()));
    }
    let session_read = p50(&time_each(rounds, warmup, || read_session(app, &identity, &id)).await);

    let embed = |texts: &'static [&'static str]| {
        let embedder = Arc::clone(&app.embedder);
        move || {
            let embedder = Arc::clone(&embedder);
            async move { embedder.embed(texts).await.unwrap_or_else(|e| fail("embed", e)) }
        }
    };
    let embed_1 = p50(&time_each(rounds, warmup, embed(&ONE)).await);
    let embed_3 = p50(&time_each(rounds, warmup, embed(&THREE)).await);

    let profiles = std::collections::BTreeMap::new();
    let request = skald::api::search::parse(body(None, false, false, false).to_string().as_bytes(), now(), &profiles)
        .unwrap_or_else(|e| fail("parse the request", format!("{e:?}")));
    let mut params_1 = request.assemble.clone();
    params_1.queries = ONE.iter().map(|q| (*q).to_owned()).collect();
    let mut params_3 = request.assemble;
    params_3.queries = THREE.iter().map(|q| (*q).to_owned()).collect();
    let exclusion = Exclusion::default();
    let run = |params| {
        let (identity, exclusion) = (&identity, &exclusion);
        move || async move {
            Box::pin(assemble(app, identity, params, exclusion))
                .await
                .unwrap_or_else(|e| fail("assemble", format!("{e:?}")))
        }
    };
    let assemble_1 = p50(&time_each(rounds, warmup, run(&params_1)).await);
    let assemble_3 = p50(&time_each(rounds, warmup, run(&params_3)).await);

    // The stages over the in-process model, which times itself.
    let times = Arc::new(CallTimes::default());
    let model = Timed::in_process(&times);
    let budget = Some(Duration::from_secs(10));
    let expand_runs = time_each(rounds, warmup, || expansion::expand(&model, &context, QUERY, budget)).await;
    let expand_model = p50(&CallTimes::durations(&times.take(), warmup));
    let expanded = expansion::expand(&model, &context, QUERY, budget).await;
    if expanded.status != ExpansionStatus::Used || expanded.planned() != PLANNED {
        fail("expand over the in-process model", format!("{:?}", expanded));
    }
    let assembled = Box::pin(assemble(app, &identity, &params_3, &exclusion))
        .await
        .unwrap_or_else(|e| fail("assemble", format!("{e:?}")));
    let uris: Vec<String> = assembled.entries.iter().map(|e| e.candidate.uri.to_string()).collect();
    let served: HashSet<&str> = uris.iter().map(String::as_str).collect();
    let rewrite_once = || {
        let slice = rewrite::session_slice(&context, &served);
        let (model, rendered, served) = (&model, &assembled.rendered, &served);
        async move { rewrite::rewrite(model, QUERY, rendered, &slice, 6, served, budget).await }
    };
    times.take();
    let rewrite_runs = time_each(rounds, warmup, rewrite_once).await;
    let rewrite_model = p50(&CallTimes::durations(&times.take(), warmup));
    let rewritten = rewrite_once().await;
    if rewritten.status != RewriteStatus::Ok {
        fail("rewrite over the in-process model", format!("{:?}", rewritten));
    }

    // The server's own work on the last recorded requests of each kind:
    // parse the body, match the rules, answer (echo for the rewrite).
    let recorded = server.requests();
    let last = |expand: bool| {
        recorded
            .iter()
            .rev()
            .find(|r| r.raw.contains(EXPAND_MARKER) == expand)
            .map(|r| r.raw.clone())
            .unwrap_or_else(|| fail("recorded requests", "none of this kind"))
    };
    let (raw_expand, raw_rewrite) = (last(true), last(false));
    let plan = plan_answer();
    let server_work = |raw: &str, expand: bool| {
        let body: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
        let matched = raw.contains(EXPAND_MARKER);
        let text = if expand && matched { plan.clone() } else { echo(&body) };
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}).to_string()
    };
    let server_expand = p50(&time_each(rounds, warmup, || std::future::ready(server_work(&raw_expand, true))).await);
    let server_rewrite = p50(&time_each(rounds, warmup, || std::future::ready(server_work(&raw_rewrite, false))).await);

    Pieces {
        session_read,
        embed_1,
        embed_3,
        assemble_1,
        assemble_3,
        expand_stage: p50(&expand_runs),
        expand_model,
        rewrite_stage: p50(&rewrite_runs),
        rewrite_model,
        server_expand,
        server_rewrite,
        prompt_bytes: (raw_expand.len(), raw_rewrite.len()),
    }
}

// ---------------------------------------------------------------------------
// Report.

fn report_variants(variants: &[Variant<'_>], samples: &[Samples]) {
    let table = Table::new("<8 <31 >8 >8 >8 | >8 >8 >9 | >7 >7");
    println!(
        "{}",
        table.header(&["variant", "what", "p50", "p90", "p99", "expand", "rewrite", "w/o calls", "entries", "bullets"])
    );
    for (v, s) in variants.iter().zip(samples) {
        let t = sorted(s.times.iter().copied());
        let opt = |d: &[Duration]| if d.is_empty() { "-".to_owned() } else { ms(p50(d)) };
        let without = if v.times.is_some() { ms(p50(&s.without_calls)) } else { "-".to_owned() };
        println!(
            "{}",
            table.line(&[
                &v.label,
                &v.what,
                &ms(percentile(&t, 50.0)),
                &ms(percentile(&t, 90.0)),
                &ms(percentile(&t, 99.0)),
                &opt(&s.expand_calls),
                &opt(&s.rewrite_calls),
                &without,
                &s.entries,
                &s.digest_bullets
            ])
        );
    }
    println!(
        "  (ms; expand / rewrite: p50 of the model call as the wrapped client saw it; w/o calls: p50 of the \
         request time minus its model calls)"
    );
}

fn report_split(samples: &[Samples], pieces: &Pieces) {
    let [a, b, c, d, d_http, d_mem] = samples else { return };
    let over = |x: &Samples| (diff_ms(p50(&x.times), p50(&a.times)), percentile(&paired_ms(&x.times, &a.times), 50.0));
    println!("\n  overhead over (a), ms: p50 difference / median of paired per-round differences");
    for (label, x) in [("(b)", b), ("(c)", c), ("(d)", d), ("(d·http)", d_http), ("(d·mem)", d_mem)] {
        let (diff, paired) = over(x);
        println!("  {label:<9} {:>8} / {:>8}", ms_signed(diff), ms_signed(paired));
    }
    let (d_over, _) = over(d);
    let (expand_http, rewrite_http) = (p50(&d_http.expand_calls), p50(&d_http.rewrite_calls));
    let rows = [
        ("session read (meta then 5 message GETs ‖ archive list)", millis(pieces.session_read)),
        ("extra retrieval for 2 planned queries (assemble 3q − 1q)", diff_ms(pieces.assemble_3, pieces.assemble_1)),
        ("  of which embedding (embed 3 − embed 1)", diff_ms(pieces.embed_3, pieces.embed_1)),
        ("expansion call, HTTP to the 0 ms server (d·http)", millis(expand_http)),
        ("rewrite call, HTTP to the 0 ms server (d·http)", millis(rewrite_http)),
        (
            "expansion stage's own work (prompt, parse; in-process model)",
            diff_ms(pieces.expand_stage, pieces.expand_model),
        ),
        ("rewrite stage's own work (slice, prompt, normalise)", diff_ms(pieces.rewrite_stage, pieces.rewrite_model)),
    ];
    println!("\n  split of (d) − (a) = {} ms (p50 difference), pieces timed alone, p50:", ms_signed(d_over));
    // The embedding (row 2) is part of the extra retrieval.
    let sum: f64 = rows.iter().enumerate().filter(|(i, _)| *i != 2).map(|(_, (_, value))| value).sum();
    let totals = [("sum of the pieces", sum), ("rest (response size, stats, variance)", d_over - sum)];
    let table = Table::new("<62 >8");
    for (label, value) in rows.iter().chain(&totals) {
        println!("{}", table.line(&[label, &ms_signed(*value)]));
    }
    println!(
        "\n  model calls: (d·http) {} ms for the two HTTP round trips (p50 sum); (d·mem) {} + {} ms for the \
         in-process model; (d·http) − (d·mem) p50 = {} ms",
        ms_signed(millis(expand_http) + millis(rewrite_http)),
        ms(p50(&d_mem.expand_calls)),
        ms(p50(&d_mem.rewrite_calls)),
        ms_signed(diff_ms(p50(&d_http.times), p50(&d_mem.times)))
    );
    println!(
        "  (d·http) without its model calls: {} ms p50, (a) {} ms: Skald's overhead without the calls {} ms",
        ms(p50(&d_http.without_calls)),
        ms(p50(&a.times)),
        ms_signed(diff_ms(p50(&d_http.without_calls), p50(&a.times)))
    );
    println!(
        "  the server's own work per call, alone (parse, match, answer): expansion {} ms, rewrite {} ms; \
         request bodies {} / {} B",
        ms(pieces.server_expand),
        ms(pieces.server_rewrite),
        pieces.prompt_bytes.0,
        pieces.prompt_bytes.1
    );
    println!(
        "  pieces: session read {} | embed 1 / 3 queries {} / {} | assemble 1 / 3 queries {} / {} | expand stage {} \
         (model {}) | rewrite stage {} (model {})",
        ms(pieces.session_read),
        ms(pieces.embed_1),
        ms(pieces.embed_3),
        ms(pieces.assemble_1),
        ms(pieces.assemble_3),
        ms(pieces.expand_stage),
        ms(pieces.expand_model),
        ms(pieces.rewrite_stage),
        ms(pieces.rewrite_model)
    );
}

// ---------------------------------------------------------------------------

async fn run(args: &Args) {
    let embedder = embedder(args.hashed, "--embedder hashed");
    let store_note = if args.s3 {
        format!("S3 client through the proxy, {} ms per store call", args.latency.as_millis())
    } else {
        "local store".to_owned()
    };
    println!(
        "embedder {}; {store_note}; rounds {} (warm-up {}); load average {}",
        embedder.id(),
        args.rounds,
        args.warmup,
        load_average()
    );

    let server = ModelServer::start().await;
    server.on(EXPAND_MARKER, Reply::Text(plan_answer()));
    server.set_default(Reply::Echo);
    if args.s3 {
        run_s3(args, &embedder, &server).await;
    } else {
        Box::pin(run_local(args, &embedder, &server)).await;
    }
}

/// Variants (a)–(d) and (d·http) (timed client, on the app with the timed
/// model).
fn base_specs() -> [Spec; 5] {
    [
        Spec::new("(a)", "no session, no stages", false, false, false),
        Spec::new("(b)", "session, expansion", true, true, false),
        Spec::new("(c)", "session, rewrite", true, false, true),
        Spec::new("(d)", "session, expansion + rewrite", true, true, true),
        Spec::new("(d·http)", "(d), timed client", true, true, true),
    ]
}

/// The variants on the local store, then the pieces of (d) − (a).
async fn run_local(args: &Args, embedder: &Arc<dyn Embedder>, server: &ModelServer) {
    let base_url = server.base_url();
    let local = TempStore::open(&format!("skald-bench-llm-{}", std::process::id()));
    let store = local.store();
    let took = ingest_demo(store, embedder.as_ref()).await;
    println!("ingest samplconfigs/demo into a LocalStore ({}): {} ms", local.dir().display(), ms(took));

    let main = app(Arc::clone(store), Arc::clone(embedder), &base_url);
    write_session(&main, SESSION).await;
    let http_times = Arc::new(CallTimes::default());
    let http_model = Timed::http(&base_url, &http_times);
    let http_app = app_with_model(Arc::clone(store), Arc::clone(embedder), &base_url, Arc::new(http_model));
    let mem_times = Arc::new(CallTimes::default());
    let mem_model = Timed::in_process(&mem_times);
    let mem_app = app_with_model(Arc::clone(store), Arc::clone(embedder), &base_url, Arc::new(mem_model));
    println!("model server {base_url}; session {SESSION} ({} messages); query {QUERY:?}", MESSAGES.len());

    let [a, b, c, d, d_http] = base_specs();
    let d_mem = Spec::new("(d·mem)", "(d), in-process model, no HTTP", true, true, true).in_process();
    let variants = [
        a.on(&main, None, None),
        b.on(&main, None, None),
        c.on(&main, None, None),
        d.on(&main, None, None),
        d_http.on(&http_app, Some(&http_times), None),
        d_mem.on(&mem_app, Some(&mem_times), None),
    ];
    let mut samples: Vec<Samples> = variants.iter().map(|_| Samples::default()).collect();
    run_rounds(&variants, server, None, args.warmup, &mut samples, false).await;
    run_rounds(&variants, server, None, args.rounds, &mut samples, true).await;
    println!(
        "\ncontext mode, {{\"mode\":\"context\",\"max_tokens\":{MAX_TOKENS}}} through skald::api::search::handle, \
         {} rounds, all {} responses checked",
        args.rounds,
        (args.rounds + args.warmup) * variants.len()
    );
    report_variants(&variants, &samples);
    let pieces = measure_pieces(&main, server, args).await;
    report_split(&samples, &pieces);

    drop(variants);
    drop((main, http_app, mem_app));
    // Removes the local store's directory.
    drop(local);
}

// ---------------------------------------------------------------------------
// `--s3`: the variants over the S3 client, through the latency proxy.

/// A store behind the proxy.
struct Upstream {
    name: String,
    address: SocketAddr,
    bucket: String,
    /// The same objects, not through the proxy (the ledger resets).
    plain: SharedStore,
}

/// The session read alone over one setting's store: p50, p90 and the waves
/// of its store calls.
struct SessionRead {
    label: &'static str,
    times: Vec<Duration>,
    pattern: String,
}

async fn run_s3(args: &Args, embedder: &Arc<dyn Embedder>, server: &ModelServer) {
    let base_url = server.base_url();
    let bucket = format!("bench-llm-{}", std::process::id());
    let local = TempStore::open(&format!("skald-bench-llm-{}", std::process::id()));
    let took = ingest_demo(local.store(), embedder.as_ref()).await;
    println!("ingest samplconfigs/demo into a LocalStore ({}): {} ms", local.dir().display(), ms(took));
    write_s3_sessions(local.store(), embedder, &base_url).await;
    let s3_server = start_s3_over(Arc::clone(local.store()), &bucket).await;
    let mut upstreams = vec![Upstream {
        name: format!("in-process S3 server over the LocalStore ({s3_server})"),
        address: s3_server,
        bucket: bucket.clone(),
        plain: Arc::clone(local.store()),
    }];
    if args.moto {
        let moto = moto_demo(&bucket, embedder.as_ref()).await;
        println!("ingest samplconfigs/demo into S3 on moto ({}): {} ms", moto.endpoint, ms(moto.ingest));
        write_s3_sessions(&moto.store, embedder, &base_url).await;
        upstreams.push(Upstream {
            name: format!("moto ({})", moto.endpoint),
            address: moto.address,
            bucket: bucket.clone(),
            plain: Arc::clone(&moto.store),
        });
    }
    println!(
        "model server {base_url}; sessions {SESSION} and {ARCHIVED} ({} messages each; the second with an archive \
         overview); query {QUERY:?}",
        MESSAGES.len()
    );
    let mut latencies = vec![Duration::ZERO];
    if !args.latency.is_zero() {
        latencies.push(args.latency);
    }
    for upstream in &upstreams {
        let mut baseline: Vec<Duration> = Vec::new();
        for &latency in &latencies {
            let p50s = s3_setting(upstream, latency, &baseline, embedder, server, args).await;
            if latency.is_zero() {
                baseline = p50s;
            }
        }
    }
    // Removes the local store's directory.
    drop(local);
}

/// Runs the variants over `upstream` through a proxy adding `latency` per
/// call, and reports them (`baseline`: the p50s without latency, when
/// known). Returns the p50s.
async fn s3_setting(
    upstream: &Upstream,
    latency: Duration,
    baseline: &[Duration],
    embedder: &Arc<dyn Embedder>,
    server: &ModelServer,
    args: &Args,
) -> Vec<Duration> {
    let base_url = server.base_url();
    let log = Arc::new(CallLog::default());
    let proxy = start_proxy(upstream.address, latency, Arc::clone(&log)).await;
    let store = s3_at(proxy, &upstream.bucket);
    let main = app(Arc::clone(&store), Arc::clone(embedder), &base_url);
    let http_times = Arc::new(CallTimes::default());
    let http_model = Timed::http(&base_url, &http_times);
    let http_app = app_with_model(Arc::clone(&store), Arc::clone(embedder), &base_url, Arc::new(http_model));
    let reset = LedgerReset::new(&upstream.plain);

    let [a, b, c, d, d_http] = base_specs();
    let e = Spec::new("(e)", "(d·http) + dedup_turns 5", true, true, true).with_dedup();
    let f = Spec::new("(f)", "(d·http), session with an archive", true, true, true).archived();
    let timed = Some(http_times.as_ref());
    let variants = [
        a.on(&main, None, None),
        b.on(&main, None, None),
        c.on(&main, None, None),
        d.on(&main, None, None),
        d_http.on(&http_app, timed, None),
        e.on(&http_app, timed, Some(&reset)),
        f.on(&http_app, timed, None),
    ];
    // The first request of an app loads the index (manifest and segment
    // GETs): once each, before the checked rounds.
    for app in [&main, &http_app] {
        search(app, &body(None, false, false, false)).await;
    }
    log.take();
    let mut samples: Vec<Samples> = variants.iter().map(|_| Samples::default()).collect();
    run_rounds(&variants, server, Some(&log), args.warmup, &mut samples, false).await;
    run_rounds(&variants, server, Some(&log), args.rounds, &mut samples, true).await;

    let identity = identity();
    let mut reads = Vec::new();
    for (label, session) in [("session read", SESSION), ("session read, with an archive", ARCHIVED)] {
        let id = SessionId::new(session).unwrap_or_else(|e| fail("session id", e));
        log.take();
        let t0 = Instant::now();
        let context = read_session(&main, &identity, &id).await;
        let trace = Trace {
            calls: log.take().iter().map(|c| (call_kind(c), c.at.saturating_duration_since(t0))).collect(),
            ..Trace::default()
        };
        let archived = session == ARCHIVED;
        if context.messages.len() != MESSAGES.len() || context.overview.is_some() != archived {
            fail(label, format!("{} messages, overview {:?}", context.messages.len(), context.overview));
        }
        let times = time_each(args.rounds, args.warmup, || read_session(&main, &identity, &id)).await;
        reads.push(SessionRead { label, times, pattern: pattern(&waves(&trace, latency)) });
    }
    log.take();

    let title = if latency.is_zero() {
        format!("S3Store → proxy (no delay) → {}", upstream.name)
    } else {
        format!("S3Store → proxy (+{} ms per call) → {}", latency.as_millis(), upstream.name)
    };
    println!(
        "\n== {title}: {} rounds, all {} responses and their store calls checked",
        args.rounds,
        (args.rounds + args.warmup) * variants.len()
    );
    report_s3(&variants, &samples, baseline, latency, &reads);
    samples.iter().map(|s| p50(&s.times)).collect()
}

/// The store calls of `trace` in waves: a call arriving at least half a
/// latency after the first call of the current wave starts a new one (a
/// call that waited for another's answer arrives a whole latency later).
/// Each wave: its first arrival and its calls' kinds. Without latency, one
/// wave.
fn waves(trace: &Trace, latency: Duration) -> Vec<(Duration, Vec<&'static str>)> {
    let mut out: Vec<(Duration, Vec<&'static str>)> = Vec::new();
    for &(kind, at) in &trace.calls {
        match out.last_mut() {
            Some((start, kinds)) if latency.is_zero() || at < *start + latency / 2 => kinds.push(kind),
            _ => out.push((at, vec![kind])),
        }
    }
    out
}

/// `kinds` counted, in [`KINDS`] order: `HEAD + 3 GET read`.
fn tally(kinds: &[&str]) -> String {
    KINDS
        .iter()
        .filter_map(|kind| match kinds.iter().filter(|k| *k == kind).count() {
            0 => None,
            1 => Some((*kind).to_owned()),
            n => Some(format!("{n} {kind}")),
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The waves as `GET meta + LIST → 5 GET msg → …`.
fn pattern(waves: &[(Duration, Vec<&'static str>)]) -> String {
    waves.iter().map(|(_, kinds)| tally(kinds)).collect::<Vec<_>>().join(" → ")
}

/// The median count of each kind of call over `traces`, as [`tally`] does.
fn median_calls(traces: &[Trace]) -> String {
    let parts: Vec<String> = KINDS
        .iter()
        .filter_map(|kind| match median(traces.iter().map(|t| count(t, kind))) {
            0 => None,
            n => Some(format!("{n} {kind}")),
        })
        .collect();
    let total = median(traces.iter().map(|t| t.calls.len()));
    format!("{total}: {}", parts.join(" + "))
}

fn report_s3(
    variants: &[Variant<'_>],
    samples: &[Samples],
    baseline: &[Duration],
    latency: Duration,
    reads: &[SessionRead],
) {
    let slow = !latency.is_zero();
    let table = Table::new("<8 <33 >8 >8 >9 >9 >8 | >5 | <0");
    println!(
        "{}",
        table.header(&["variant", "what", "p50", "p90", "Δp50 (a)", "paired Δ", "no-delay", "trips", "store calls"])
    );
    let a_times = samples.first().map(|s| s.times.clone()).unwrap_or_default();
    for (i, (v, s)) in variants.iter().zip(samples).enumerate() {
        let t = sorted(s.times.iter().copied());
        let over = if i == 0 {
            ("–".to_owned(), "–".to_owned())
        } else {
            (
                ms_signed(diff_ms(p50(&s.times), p50(&a_times))),
                ms_signed(percentile(&paired_ms(&s.times, &a_times), 50.0)),
            )
        };
        let no_delay = baseline.get(i).map_or_else(|| "-".to_owned(), |d| ms(*d));
        let trips =
            if slow { median(s.traces.iter().map(|t| waves(t, latency).len())).to_string() } else { "-".to_owned() };
        println!(
            "{}",
            table.line(&[
                &v.label,
                &v.what,
                &ms(percentile(&t, 50.0)),
                &ms(percentile(&t, 90.0)),
                &over.0,
                &over.1,
                &no_delay,
                &trips,
                &median_calls(&s.traces)
            ])
        );
    }
    println!(
        "  (ms; Δp50 (a): p50 difference to (a); paired Δ: median of the per-round differences; no-delay: p50 \
         through the proxy without delay; trips: median sequential round trips (waves); store calls: median per \
         request, total: by kind)"
    );
    if !slow {
        return;
    }
    println!("\n  round trips in a row, the most common pattern (share), and p50 of each wave's first arrival:");
    for (v, s) in variants.iter().zip(samples) {
        let patterns: Vec<String> = s.traces.iter().map(|t| pattern(&waves(t, latency))).collect();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &patterns {
            *counts.entry(p.as_str()).or_default() += 1;
        }
        let (top, n) = counts.iter().max_by_key(|(_, n)| **n).map_or(("-", 0), |(p, n)| (*p, *n));
        let depth = top.split(" → ").count();
        let starts: Vec<String> = (0..depth)
            .map(|w| {
                let at: Vec<Duration> =
                    s.traces.iter().filter_map(|t| waves(t, latency).get(w).map(|(start, _)| *start)).collect();
                ms(p50(&at))
            })
            .collect();
        println!("  {:<8} {top}  ({n} of {}; at {} ms)", v.label, patterns.len(), starts.join(" / "));
    }
    let timed: Vec<(&Variant<'_>, &Samples)> =
        variants.iter().zip(samples).filter(|(v, _)| v.times.is_some()).collect();
    if !timed.is_empty() {
        println!("\n  the timed model's calls: p50 of when each started, and of the response, ms after the request:");
        for (v, s) in timed {
            let at = |f: fn(&Trace) -> Option<Duration>| {
                let v: Vec<Duration> = s.traces.iter().filter_map(f).collect();
                if v.is_empty() { "-".to_owned() } else { ms(p50(&v)) }
            };
            let end: Vec<Duration> = s.traces.iter().map(|t| t.end).collect();
            println!(
                "  {:<8} expansion call at {}, rewrite call at {}, response at {}",
                v.label,
                at(|t| t.expand_at),
                at(|t| t.rewrite_at),
                ms(p50(&end))
            );
        }
    }
    println!("\n  the session read alone, as load_session reads it for the stages (no ledger), over this store:");
    for r in reads {
        let t = sorted(r.times.iter().copied());
        println!(
            "  {:<30} p50 {} ms, p90 {} ms; waves: {}",
            r.label,
            ms(percentile(&t, 50.0)),
            ms(percentile(&t, 90.0)),
            r.pattern
        );
    }
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    block_on(run(&args));
}
