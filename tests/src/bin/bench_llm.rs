//! LLM-stage overhead benchmark: what context mode adds around its two
//! model calls (query expansion and the digest rewrite) when the model
//! answers in 0 ms, and where that time goes.
//!
//! ```text
//! scripts/setup-model.sh        # once (the USE-m3 model), unless --embedder hashed
//! cargo run --release -p skald-tests --bin bench_llm -- [--rounds 200] [--warmup 20]
//!     [--embedder use-m3|hashed]
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
//! number of rounds): the session read as `load_session` does it (meta and
//! archive overview together, then the last 5 messages), the query
//! embedding for 1 and for 3 queries, `skald::assemble::assemble` for 1 and
//! for 3 queries, the two stages (`expansion::expand`, `rewrite::rewrite`)
//! over the in-process model minus the model's own time, and the server's
//! own work on a recorded request (JSON parse, rule match, echo).
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::HashSet;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_http::Body;
use serde_json::{Value, json};
use skald::app::App;
use skald::assemble::assemble;
use skald::config::{Config, IdentityConfig, IdentityMode, ModelConfig};
use skald::embed::Embedder;
use skald::embed::hashed::HashedEmbedder;
use skald::embed::use_m3::UseM3Embedder;
use skald::identity::{AccountId, Identity, UserId};
use skald::index::Exclusion;
use skald::ingest::{IngestOptions, ingest_dir};
use skald::llm::expansion::{self, ExpansionStatus, RECENT_MESSAGES, SessionContext};
use skald::llm::openai::{ApiKey, OpenAiChat};
use skald::llm::rewrite::{self, RewriteStatus};
use skald::llm::{ChatModel, ChatRequest, Completion, LlmError, Models, Usage};
use skald::sessions::{SessionId, Sessions};
use skald::store::SharedStore;
use skald::store::local::LocalStore;
use skald_tests::model_server::{EXPAND_MARKER, ModelServer, Reply, echo};

const ACCOUNT: &str = "default";
const USER: &str = "default";
const SEARCH_PATH: &str = "/api/v1/search/search";
const SESSIONS_PATH: &str = "/api/v1/sessions";
/// The session every session variant names.
const SESSION: &str = "bench-llm-s3-retries";
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
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { rounds: 200, warmup: 20, hashed: false };
    let usage = "usage: bench_llm [--rounds N] [--warmup N] [--embedder use-m3|hashed]";
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value; {usage}"))?;
        let number = || value.replace('_', "").parse::<usize>().map_err(|e| format!("{flag} {value}: {e}"));
        match flag.as_str() {
            "--rounds" => args.rounds = number()?.max(1),
            "--warmup" => args.warmup = number()?.max(1),
            "--embedder" => match value.as_str() {
                "use-m3" => args.hashed = false,
                "hashed" => args.hashed = true,
                other => return Err(format!("--embedder {other}: want use-m3 or hashed")),
            },
            other => return Err(format!("unknown argument {other}; {usage}")),
        }
    }
    Ok(args)
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_llm: {what}: {e}");
    std::process::exit(1)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn identity() -> Identity {
    Identity {
        account: AccountId::new(ACCOUNT).unwrap_or_else(|e| fail("account", e)),
        user: UserId::new(USER).unwrap_or_else(|e| fail("user", e)),
        actor_peer: None,
    }
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

// ---------------------------------------------------------------------------
// Statistics.

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied().unwrap_or_default()
}

fn sorted(values: &[Duration]) -> Vec<Duration> {
    let mut v = values.to_vec();
    v.sort();
    v
}

fn p50(values: &[Duration]) -> Duration {
    percentile(&sorted(values), 50.0)
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

/// Signed milliseconds.
fn ms_signed(seconds: f64) -> String {
    format!("{:+.3}", seconds * 1e3)
}

/// The median of `a[i] − b[i]`, in seconds (signed).
fn median_paired(a: &[Duration], b: &[Duration]) -> f64 {
    let mut d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x.as_secs_f64() - y.as_secs_f64()).collect();
    d.sort_by(f64::total_cmp);
    d.get(d.len().saturating_sub(1) / 2).copied().unwrap_or(0.0)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
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

/// The durations of the calls a [`Timed`] model made, in order.
#[derive(Debug, Default)]
struct CallTimes(Mutex<Vec<(Stage, Duration)>>);

impl CallTimes {
    fn take(&self) -> Vec<(Stage, Duration)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn push(&self, stage: Stage, took: Duration) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push((stage, took));
    }
}

/// Times every call of the model it wraps.
#[derive(Debug)]
struct Timed {
    inner: Arc<dyn ChatModel>,
    times: Arc<CallTimes>,
}

type CompletionFuture<'a> = Pin<Box<dyn Future<Output = Result<Completion, LlmError>> + Send + 'a>>;

// `ChatModel` is an `#[async_trait]` trait; this crate does not depend on
// `async-trait`, so the method is written in the form the macro expands to.
impl ChatModel for Timed {
    fn id(&self) -> &str {
        self.inner.id()
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
            let answer = self.inner.complete(request).await;
            self.times.push(stage_of(request), started.elapsed());
            answer
        })
    }
}

/// Answers as the scripted server does, without HTTP: the fixed plan for an
/// expansion prompt, [`echo`] of the request for anything else.
#[derive(Debug)]
struct InProcess {
    plan: String,
}

impl ChatModel for InProcess {
    fn id(&self) -> &str {
        "in-process:stub"
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
            let text = match stage_of(request) {
                Stage::Expand => self.plan.clone(),
                Stage::Rewrite => echo(&json!({"messages": [
                    {"role": "system", "content": request.system},
                    {"role": "user", "content": request.user},
                ]})),
            };
            Ok(Completion { text, usage: Some(Usage { prompt_tokens: 321, completion_tokens: 54 }) })
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

fn embedder(hashed: bool) -> Arc<dyn Embedder> {
    if hashed {
        return Arc::new(HashedEmbedder::new(256));
    }
    let dir = std::env::var_os("SKALD_USE_M3_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| repo().join(".skald/models/use-m3"), PathBuf::from);
    match UseM3Embedder::open(&dir) {
        Ok(model) => Arc::new(model),
        Err(e) => {
            eprintln!(
                "bench_llm: {e}\nrun scripts/setup-model.sh first (or set SKALD_USE_M3_DIR, or pass --embedder hashed)"
            );
            std::process::exit(2)
        }
    }
}

/// The app as production builds it: dev identity, `llm` an OpenAI-compatible
/// model at `base_url`, models built from the configuration on first use.
fn app(store: SharedStore, embedder: Arc<dyn Embedder>, base_url: &str) -> App {
    let config = Config {
        identity: IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() },
        llm: Some(ModelConfig::Openai {
            base_url: base_url.to_owned(),
            model: "stub".to_owned(),
            api_key_env: NO_KEY.to_owned(),
        }),
        ..Config::default()
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

async fn ingest_demo(store: &SharedStore, embedder: &dyn Embedder) -> Duration {
    let account = AccountId::new(ACCOUNT).unwrap_or_else(|e| fail("account", e));
    let started = Instant::now();
    let options = IngestOptions { abstract_max_bytes: 400, ..IngestOptions::default() };
    ingest_dir(&repo().join("samplconfigs/demo"), store, &account, embedder, &options, &mut |_| {})
        .await
        .unwrap_or_else(|e| fail("ingest samplconfigs/demo", e));
    started.elapsed()
}

/// A Lambda event for `method path` with a JSON body, as the default
/// dev-mode caller.
fn event(method: &str, path: &str, body: Option<&Value>) -> lambda_http::Request {
    lambda_http::http::Request::builder()
        .method(method)
        .uri(format!("https://api.example.com{path}"))
        .header("content-type", "application/json")
        .body(body.map_or(Body::Empty, |b| Body::Text(b.to_string())))
        .unwrap_or_else(|e| fail("request", e))
}

/// Creates the session and appends [`MESSAGES`] through the sessions route.
async fn write_session(app: &App) {
    let call = |method: &'static str, path: String, body: Value| async move {
        let request = skald_lambda::to_library_request(event(method, &path, Some(&body)));
        let response = Box::pin(skald::api::sessions::handle(app, request)).await;
        if response.status() != 200 {
            fail(&format!("{method} {path}"), response.body());
        }
    };
    call("POST", SESSIONS_PATH.to_owned(), json!({ "session_id": SESSION })).await;
    for (i, (role, content)) in MESSAGES.iter().enumerate() {
        let body = json!({ "role": role, "content": content, "id": format!("m{i}") });
        call("POST", format!("{SESSIONS_PATH}/{SESSION}/messages"), body).await;
    }
}

// ---------------------------------------------------------------------------
// Variants.

/// What a variant's response must say.
#[derive(Debug, Clone, Copy)]
struct Expect {
    expansion: ExpansionStatus,
    rewrite: RewriteStatus,
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
}

fn body(session: bool, expansion: bool, rewrite: bool) -> Value {
    let mut body = json!({
        "query": QUERY,
        "mode": "context",
        "max_tokens": MAX_TOKENS,
        "query_expansion": if expansion { "auto" } else { "off" },
        "rewrite": rewrite,
    });
    if session {
        body["session_id"] = json!(SESSION);
    }
    body
}

/// One timed request: (time, response).
async fn search(app: &App, body: &Value) -> (Duration, Value) {
    let request = skald_lambda::to_library_request(event("POST", SEARCH_PATH, Some(body)));
    let started = Instant::now();
    let response = Box::pin(skald::api::search::handle(app, request)).await;
    let took = started.elapsed();
    if response.status() != 200 {
        fail("search", format!("status {}: {}", response.status(), response.body()));
    }
    let json: Value = serde_json::from_str(response.body()).unwrap_or_else(|e| fail("response json", e));
    (took, json)
}

/// Aborts unless `json` is what `variant` must answer.
fn check(variant: &Variant<'_>, json: &Value) {
    let result = &json["result"];
    let stats = &result["stats"];
    let mut problems = Vec::new();
    let expansion = stats["query_expansion"].as_str().unwrap_or("<missing>");
    if expansion != variant.expect.expansion.as_str() {
        problems.push(format!(
            "stats.query_expansion = {expansion:?}, want {:?} (error: {})",
            variant.expect.expansion.as_str(),
            stats["query_expansion_error"]
        ));
    }
    let planned: Vec<&str> =
        stats["planned_queries"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let want_planned: &[&str] = if variant.expect.expansion == ExpansionStatus::Used { &PLANNED } else { &[] };
    if planned != want_planned {
        problems.push(format!("stats.planned_queries = {planned:?}, want {want_planned:?}"));
    }
    let rewrite = stats["rewrite"].as_str().unwrap_or("<missing>");
    if rewrite != variant.expect.rewrite.as_str() {
        problems.push(format!(
            "stats.rewrite = {rewrite:?}, want {:?} (error: {})",
            variant.expect.rewrite.as_str(),
            stats["rewrite_error"]
        ));
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
    entries: usize,
    digest_bullets: usize,
}

/// Runs every variant once per round, order rotated; checks every response
/// and the server's call count. `timed` false: warm-up (checked, not kept).
async fn run_rounds(
    variants: &[Variant<'_>],
    server: &ModelServer,
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
            let before = server.requests().len();
            let (took, json) = search(variant.app, &variant.body).await;
            let calls = server.requests().len() - before;
            check(variant, &json);
            if calls != variant.server_calls {
                fail(
                    &format!("variant {} ({})", variant.label, variant.what),
                    format!("the model server got {calls} calls, want {}", variant.server_calls),
                );
            }
            let model_calls = variant.times.map(CallTimes::take).unwrap_or_default();
            if !timed {
                continue;
            }
            let s = &mut samples[i];
            s.times.push(took);
            let mut in_calls = Duration::ZERO;
            for (stage, d) in model_calls {
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

/// What search.rs's `load_session` does for the stages (no ledger): the
/// meta and the archive overview together, then the last messages.
async fn read_session(app: &App, identity: &Identity, id: &SessionId) -> SessionContext {
    let sessions = Sessions::new(&app.store, identity);
    let (meta, archive) = tokio::join!(sessions.meta(id), sessions.latest_archive_overview(id));
    let meta = meta.unwrap_or_else(|e| fail("session meta", e)).map(|(m, _)| m);
    let mut context = SessionContext {
        overview: archive.unwrap_or_else(|e| fail("archive overview", e)).map(|(_, text)| text),
        messages: Vec::new(),
    };
    if let Some(meta) = &meta {
        let messages =
            sessions.recent_messages(id, meta, RECENT_MESSAGES).await.unwrap_or_else(|e| fail("recent messages", e));
        context.messages = messages.iter().map(|m| (m.role.clone(), m.text())).collect();
    }
    context
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

    let request = skald::api::search::parse(body(false, false, false).to_string().as_bytes(), now())
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
    let model = Timed { inner: Arc::new(InProcess { plan: plan_answer() }), times: Arc::clone(&times) };
    let budget = Some(Duration::from_secs(10));
    let expand_runs = time_each(rounds, warmup, || expansion::expand(&model, &context, QUERY, budget)).await;
    let expand_model = p50(&times.take().iter().skip(warmup).map(|(_, d)| *d).collect::<Vec<_>>());
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
    let rewrite_model = p50(&times.take().iter().skip(warmup).map(|(_, d)| *d).collect::<Vec<_>>());
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
    println!(
        "  {:<8} {:<31} {:>8} {:>8} {:>8} | {:>8} {:>8} {:>9} | {:>7} {:>7}",
        "variant", "what", "p50", "p90", "p99", "expand", "rewrite", "w/o calls", "entries", "bullets"
    );
    for (v, s) in variants.iter().zip(samples) {
        let t = sorted(&s.times);
        let opt = |d: &[Duration]| if d.is_empty() { "-".to_owned() } else { ms(p50(d)) };
        let without = if v.times.is_some() { ms(p50(&s.without_calls)) } else { "-".to_owned() };
        println!(
            "  {:<8} {:<31} {:>8} {:>8} {:>8} | {:>8} {:>8} {:>9} | {:>7} {:>7}",
            v.label,
            v.what,
            ms(percentile(&t, 50.0)),
            ms(percentile(&t, 90.0)),
            ms(percentile(&t, 99.0)),
            opt(&s.expand_calls),
            opt(&s.rewrite_calls),
            without,
            s.entries,
            s.digest_bullets
        );
    }
    println!(
        "  (ms; expand / rewrite: p50 of the model call as the wrapped client saw it; w/o calls: p50 of the \
         request time minus its model calls)"
    );
}

fn report_split(samples: &[Samples], pieces: &Pieces) {
    let [a, b, c, d, d_http, d_mem] = samples else { return };
    let over = |x: &Samples| (secs(p50(&x.times)) - secs(p50(&a.times)), median_paired(&x.times, &a.times));
    println!("\n  overhead over (a), ms: p50 difference / median of paired per-round differences");
    for (label, x) in [("(b)", b), ("(c)", c), ("(d)", d), ("(d·http)", d_http), ("(d·mem)", d_mem)] {
        let (diff, paired) = over(x);
        println!("  {label:<9} {:>8} / {:>8}", ms_signed(diff), ms_signed(paired));
    }
    let (d_over, _) = over(d);
    let embed_extra = secs(pieces.embed_3) - secs(pieces.embed_1);
    let retrieval_extra = secs(pieces.assemble_3) - secs(pieces.assemble_1);
    let expand_own = secs(pieces.expand_stage) - secs(pieces.expand_model);
    let rewrite_own = secs(pieces.rewrite_stage) - secs(pieces.rewrite_model);
    let http = secs(p50(&d_http.expand_calls)) + secs(p50(&d_http.rewrite_calls));
    let rows = [
        ("session read (meta + archive list, then 5 message GETs)", secs(pieces.session_read)),
        ("extra retrieval for 2 planned queries (assemble 3q − 1q)", retrieval_extra),
        ("  of which embedding (embed 3 − embed 1)", embed_extra),
        ("expansion call, HTTP to the 0 ms server (d·http)", secs(p50(&d_http.expand_calls))),
        ("rewrite call, HTTP to the 0 ms server (d·http)", secs(p50(&d_http.rewrite_calls))),
        ("expansion stage's own work (prompt, parse; in-process model)", expand_own),
        ("rewrite stage's own work (slice, prompt, normalise)", rewrite_own),
    ];
    println!("\n  split of (d) − (a) = {} ms (p50 difference), pieces timed alone, p50:", ms_signed(d_over));
    let mut sum = 0.0;
    for (i, (label, value)) in rows.iter().enumerate() {
        if i != 2 {
            sum += value;
        }
        println!("  {label:<62} {:>8}", ms_signed(*value));
    }
    println!("  {:<62} {:>8}", "sum of the pieces", ms_signed(sum));
    println!("  {:<62} {:>8}", "rest (response size, stats, variance)", ms_signed(d_over - sum));
    println!(
        "\n  model calls: (d·http) {} ms for the two HTTP round trips (p50 sum); (d·mem) {} + {} ms for the \
         in-process model; (d·http) − (d·mem) p50 = {} ms",
        ms_signed(http),
        ms(p50(&d_mem.expand_calls)),
        ms(p50(&d_mem.rewrite_calls)),
        ms_signed(secs(p50(&d_http.times)) - secs(p50(&d_mem.times)))
    );
    println!(
        "  (d·http) without its model calls: {} ms p50, (a) {} ms: Skald's overhead without the calls {} ms",
        ms(p50(&d_http.without_calls)),
        ms(p50(&a.times)),
        ms_signed(secs(p50(&d_http.without_calls)) - secs(p50(&a.times)))
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
    let embedder = embedder(args.hashed);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "embedder {}; rounds {} (warm-up {}); load average {}",
        embedder.id(),
        args.rounds,
        args.warmup,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );

    let server = ModelServer::start().await;
    server.on(EXPAND_MARKER, Reply::Text(plan_answer()));
    server.set_default(Reply::Echo);
    let base_url = server.base_url();

    let dir = std::env::temp_dir().join(format!("skald-bench-llm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store: SharedStore = Arc::new(LocalStore::open(&dir).unwrap_or_else(|e| fail("local store", e)));
    let took = ingest_demo(&store, embedder.as_ref()).await;
    println!("ingest samplconfigs/demo into a LocalStore ({}): {} ms", dir.display(), ms(took));

    let main = app(Arc::clone(&store), Arc::clone(&embedder), &base_url);
    write_session(&main).await;
    let http_times = Arc::new(CallTimes::default());
    let http_model = Timed {
        inner: Arc::new(OpenAiChat::new(&base_url, "stub", ApiKey::Env(NO_KEY.to_owned()))),
        times: Arc::clone(&http_times),
    };
    let http_app = app_with_model(Arc::clone(&store), Arc::clone(&embedder), &base_url, Arc::new(http_model));
    let mem_times = Arc::new(CallTimes::default());
    let mem_model = Timed { inner: Arc::new(InProcess { plan: plan_answer() }), times: Arc::clone(&mem_times) };
    let mem_app = app_with_model(Arc::clone(&store), Arc::clone(&embedder), &base_url, Arc::new(mem_model));
    println!("model server {base_url}; session {SESSION} ({} messages); query {QUERY:?}", MESSAGES.len());

    let (used, off, ok) = (ExpansionStatus::Used, ExpansionStatus::Off, RewriteStatus::Ok);
    let no = RewriteStatus::Off;
    let variant = |label, what, app, body, expect, server_calls, times| Variant {
        label,
        what,
        app,
        body,
        expect,
        server_calls,
        times,
    };
    let variants = [
        variant(
            "(a)",
            "no session, no stages",
            &main,
            body(false, false, false),
            Expect { expansion: off, rewrite: no },
            0,
            None,
        ),
        variant(
            "(b)",
            "session, expansion",
            &main,
            body(true, true, false),
            Expect { expansion: used, rewrite: no },
            1,
            None,
        ),
        variant(
            "(c)",
            "session, rewrite",
            &main,
            body(true, false, true),
            Expect { expansion: off, rewrite: ok },
            1,
            None,
        ),
        variant(
            "(d)",
            "session, expansion + rewrite",
            &main,
            body(true, true, true),
            Expect { expansion: used, rewrite: ok },
            2,
            None,
        ),
        variant(
            "(d·http)",
            "(d), timed client",
            &http_app,
            body(true, true, true),
            Expect { expansion: used, rewrite: ok },
            2,
            Some(http_times.as_ref()),
        ),
        variant(
            "(d·mem)",
            "(d), in-process model, no HTTP",
            &mem_app,
            body(true, true, true),
            Expect { expansion: used, rewrite: ok },
            0,
            Some(mem_times.as_ref()),
        ),
    ];
    let mut samples: Vec<Samples> = variants.iter().map(|_| Samples::default()).collect();
    run_rounds(&variants, &server, args.warmup, &mut samples, false).await;
    run_rounds(&variants, &server, args.rounds, &mut samples, true).await;
    println!(
        "\ncontext mode, {{\"mode\":\"context\",\"max_tokens\":{MAX_TOKENS}}} through skald::api::search::handle, \
         {} rounds, all {} responses checked",
        args.rounds,
        (args.rounds + args.warmup) * variants.len()
    );
    report_variants(&variants, &samples);
    let pieces = measure_pieces(&main, &server, args).await;
    report_split(&samples, &pieces);

    drop(variants);
    drop((main, http_app, mem_app, store));
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        eprintln!("bench_llm: cannot remove {}: {e}", dir.display());
    }
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| fail("tokio runtime", e));
    runtime.block_on(run(&args));
}
