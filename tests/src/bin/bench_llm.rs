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
use skald::llm::expansion::{self, ExpansionStatus, RECENT_MESSAGES, SessionContext};
use skald::llm::openai::{ApiKey, OpenAiChat};
use skald::llm::rewrite::{self, RewriteStatus};
use skald::llm::{ChatModel, ChatRequest, Completion, LlmError, Models, Usage};
use skald::sessions::{SessionId, Sessions};
use skald::store::SharedStore;
use skald_tests::bench_util::{
    Flags, Table, TempStore, block_on, dev_config, diff_ms, embedder, fail, identity, ingest_demo, load_average,
    median, now, paired_ms, percentile, search, sessions_call, sorted,
};
use skald_tests::fixture::SESSIONS_PATH;
use skald_tests::model_server::{EXPAND_MARKER, ModelServer, Reply, echo};

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
    let mut flags = Flags::from_env("usage: bench_llm [--rounds N] [--warmup N] [--embedder use-m3|hashed]");
    while let Some(flag) = flags.next() {
        match flag.as_str() {
            "--rounds" => args.rounds = flags.at_least(&flag, 1)?,
            "--warmup" => args.warmup = flags.at_least(&flag, 1)?,
            "--embedder" => match flags.value(&flag)?.as_str() {
                "use-m3" => args.hashed = false,
                "hashed" => args.hashed = true,
                other => return Err(format!("--embedder {other}: want use-m3 or hashed")),
            },
            _ => return Err(flags.unknown(&flag)),
        }
    }
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
            self.times.push(stage_of(request), started.elapsed());
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

/// Creates the session and appends [`MESSAGES`] through the sessions route.
async fn write_session(app: &App) {
    let call = |method: &'static str, path: String, body: Value| async move {
        let (_, status, json) = sessions_call(app, method, &path, Some(&body)).await;
        if status != 200 {
            fail(&format!("{method} {path}"), json);
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
    let model = Timed::in_process(&times);
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
        ("session read (meta + archive list, then 5 message GETs)", millis(pieces.session_read)),
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
    println!(
        "embedder {}; rounds {} (warm-up {}); load average {}",
        embedder.id(),
        args.rounds,
        args.warmup,
        load_average()
    );

    let server = ModelServer::start().await;
    server.on(EXPAND_MARKER, Reply::Text(plan_answer()));
    server.set_default(Reply::Echo);
    let base_url = server.base_url();

    let local = TempStore::open(&format!("skald-bench-llm-{}", std::process::id()));
    let store = local.store();
    let took = ingest_demo(store, embedder.as_ref()).await;
    println!("ingest samplconfigs/demo into a LocalStore ({}): {} ms", local.dir().display(), ms(took));

    let main = app(Arc::clone(store), Arc::clone(&embedder), &base_url);
    write_session(&main).await;
    let http_times = Arc::new(CallTimes::default());
    let http_model = Timed::http(&base_url, &http_times);
    let http_app = app_with_model(Arc::clone(store), Arc::clone(&embedder), &base_url, Arc::new(http_model));
    let mem_times = Arc::new(CallTimes::default());
    let mem_model = Timed::in_process(&mem_times);
    let mem_app = app_with_model(Arc::clone(store), Arc::clone(&embedder), &base_url, Arc::new(mem_model));
    println!("model server {base_url}; session {SESSION} ({} messages); query {QUERY:?}", MESSAGES.len());

    // label, what, app, stages (session, expansion, rewrite), model calls
    // through the server per request, the app's timed model.
    type Row<'a> = (&'static str, &'static str, &'a App, (bool, bool, bool), usize, Option<&'a CallTimes>);
    let rows: [Row<'_>; 6] = [
        ("(a)", "no session, no stages", &main, (false, false, false), 0, None),
        ("(b)", "session, expansion", &main, (true, true, false), 1, None),
        ("(c)", "session, rewrite", &main, (true, false, true), 1, None),
        ("(d)", "session, expansion + rewrite", &main, (true, true, true), 2, None),
        ("(d·http)", "(d), timed client", &http_app, (true, true, true), 2, Some(&http_times)),
        ("(d·mem)", "(d), in-process model, no HTTP", &mem_app, (true, true, true), 0, Some(&mem_times)),
    ];
    let variants = rows.map(|(label, what, app, (session, expand, rewrite), server_calls, times)| Variant {
        label,
        what,
        app,
        body: body(session, expand, rewrite),
        expect: Expect {
            expansion: if expand { ExpansionStatus::Used } else { ExpansionStatus::Off },
            rewrite: if rewrite { RewriteStatus::Ok } else { RewriteStatus::Off },
        },
        server_calls,
        times,
    });
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
    drop((main, http_app, mem_app));
    // Removes the local store's directory.
    drop(local);
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail("arguments", e));
    block_on(run(&args));
}
