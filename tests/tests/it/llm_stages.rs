//! The two LLM stages — query expansion and the digest rewrite — and the
//! request deadline, end to end through the Lambda edge:
//! Skald's real OpenAI-compatible client (and, once, its Bedrock Converse
//! client) talks over real HTTP to a [`ModelServer`] started inside each
//! test, scripted per stage by the marker phrase of its system prompt.
//!
//! - Faults: a model that hangs, answers too late, fails (500, 429) or
//!   answers garbage never fails the request: the answer is a 200 with the
//!   block, the stage's status says what happened, and it arrives before
//!   the client's deadline (`X-Client-Timeout-Ms`) — after waiting out the
//!   stage's budget when the model did not answer.
//! - Deadlines: the client header beats a longer gateway limit, the gateway
//!   limit binds without it, and a nearly spent deadline skips both stages
//!   without a call; a malformed header is a 400 naming it.
//! - What the stages do: expansion reads the session (recent messages, the
//!   archive overview) and its planned queries bring in hits the original
//!   query alone does not (context and list mode); the digest keeps only
//!   cited, served, capped bullets; the rewrite prompt names only served
//!   URIs; `rewrite: "auto"` needs a dedicated planner; usage is reported;
//!   `NO_RELEVANT_MEMORY` empties the block and records nothing.
//! - What does not call a model: `find`, list mode without a session,
//!   context mode with both stages off, bootstrap — not even a connection.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skald::app::App;
use skald::embed::{EmbedError, Embedder};
use skald::llm::Models;
use skald::llm::bedrock::BedrockChat;
use skald::llm::bedrock::aws_sdk_bedrockruntime;
use skald::store::PutMode;
use skald_tests::fixture::{
    BOOTSTRAP_PATH, CONTEXT_CORPUS, FIND_PATH, Handler, RECALL_PATH, Reply, SEARCH_PATH, SESSIONS_PATH, TempDirs,
    app_with_config, call, call_handler, ok, request_to, search_reply, session_key, sessions_post, store_json,
};
use skald_tests::model_server::{
    EXPAND_MARKER, ModelServer, REWRITE_MARKER, Recorded, Reply as ModelReply, USAGE_COMPLETION, USAGE_PROMPT,
};

const QUERY: &str = "kubernetes cluster upgrade";

/// The client deadline most tests send, in milliseconds.
const DEADLINE_MS: u64 = 2500;

/// The deadline header, as a client spells it.
const TIMEOUT_HEADER: &str = "x-client-timeout-ms";

/// A hanging expansion under a 2500 ms deadline gets about 500 ms (the
/// deadline less two 1000 ms reserves, less what admission and the session
/// read took); a stage that returned at once would take far less.
const EXPANSION_WAITED: Duration = Duration::from_millis(250);

/// A hanging rewrite without expansion under a 2500 ms deadline gets about
/// 1400 ms (the deadline less one reserve, less retrieval).
const REWRITE_WAITED: Duration = Duration::from_millis(900);

/// A memory the original query does not reach at a small `limit`.
const DINNER: &str = "viking://user/default/memories/events/2024/11/03/dinner.md";

/// A URI no entry is served under.
const UNSERVED: &str = "viking://user/default/memories/secret/unserved-plan.md";

// ---------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------

/// An app over [`CONTEXT_CORPUS`] whose main model is `server`.
async fn app_with_model(server: &ModelServer) -> (Arc<App>, TempDirs) {
    app_with_config(CONTEXT_CORPUS, |config| config.llm = Some(server.openai_model("stub"))).await
}

/// A context-mode body for [`QUERY`] with `extra` fields.
fn ctx_body(extra: &Value) -> Value {
    let mut body = json!({"query": QUERY, "mode": "context"});
    for (k, v) in extra.as_object().expect("extra fields are an object") {
        body[k] = v.clone();
    }
    body
}

/// Calls `handler` on `path` with `headers` and `body`, and measures the
/// wall time of the whole call.
async fn timed(
    app: &Arc<App>,
    handler: Handler,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (Reply, Duration) {
    let started = Instant::now();
    let reply = call(app, handler, "POST", path, headers, Some(body)).await;
    (reply, started.elapsed())
}

/// POSTs `body` to `/search` with `X-Client-Timeout-Ms: {DEADLINE_MS}`.
async fn search_by_deadline(app: &Arc<App>, body: &Value) -> (Reply, Duration) {
    let deadline = DEADLINE_MS.to_string();
    timed(app, Handler::Search, SEARCH_PATH, &[(TIMEOUT_HEADER, deadline.as_str())], body).await
}

/// Asserts the answer came back before the client's deadline.
fn before_deadline(elapsed: Duration, what: &str) {
    assert!(elapsed < Duration::from_millis(DEADLINE_MS), "{what}: answered after {elapsed:?}");
}

/// Sends `body` to `search` under the test deadline and returns `result`
/// after asserting a 200 before the deadline and, when `fault` makes the
/// stage wait, a request that took at least `waited`.
async fn answered_in_time(app: &Arc<App>, body: &Value, fault: &Fault, waited: Duration) -> Value {
    let (reply, elapsed) = search_by_deadline(app, body).await;
    let result = ok(&reply).clone();
    before_deadline(elapsed, fault.name);
    if fault.waits {
        assert!(elapsed >= waited, "{}: the stage did not wait ({elapsed:?}) for {body}", fault.name);
    }
    result
}

/// Asserts a hanging rewrite was waited out within the deadline: a 200
/// that took at least [`REWRITE_WAITED`] and less than [`DEADLINE_MS`], with
/// `stats.rewrite == "timeout"` and the block still rendered.
fn rewrite_waited_out(reply: &Reply, elapsed: Duration, what: &str) {
    let result = ok(reply);
    before_deadline(elapsed, what);
    assert!(elapsed >= REWRITE_WAITED, "{what}: the rewrite did not wait ({elapsed:?})");
    assert_eq!(stats(result)["rewrite"], "timeout", "{what}: {}", stats(result));
    assert!(!text(result, "rendered").is_empty(), "{what}: {result:#}");
}

fn stats(result: &Value) -> &Value {
    &result["stats"]
}

fn text<'a>(result: &'a Value, field: &str) -> &'a str {
    result[field].as_str().unwrap_or_else(|| panic!("{field} is not a string: {result:#}"))
}

/// The URIs of a context-mode result's entries, in order.
fn entry_uris(result: &Value) -> Vec<String> {
    result["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("entries is not a list: {result:#}"))
        .iter()
        .map(|e| e["uri"].as_str().expect("an entry uri").to_owned())
        .collect()
}

/// The URIs of a list-mode (`find`) result's hits, best first.
fn hit_uris(result: &Value) -> Vec<String> {
    let mut hits: Vec<(f64, String)> = ["memories", "resources", "skills"]
        .iter()
        .flat_map(|kind| result[*kind].as_array().cloned().unwrap_or_default())
        .map(|h| (h["score"].as_f64().expect("a score"), h["uri"].as_str().expect("a uri").to_owned()))
        .collect();
    hits.sort_by(|a, b| b.0.total_cmp(&a.0));
    hits.into_iter().map(|(_, uri)| uri).collect()
}

/// Every `viking://` token of `text`, up to whitespace or a delimiter,
/// without trailing punctuation.
fn viking_tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("viking://") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| c.is_whitespace() || "\"'<>()[]{},;`".contains(c)).unwrap_or(tail.len());
        out.push(tail[..end].trim_end_matches(['.', ':', '/']).to_owned());
        rest = &tail[end..];
    }
    out
}

/// The digest's bullets (without the header line).
fn bullets(result: &Value) -> Vec<String> {
    let digest = text(result, "digest");
    let mut lines = digest.lines();
    assert_eq!(lines.next(), Some("Memory digest:"), "{digest}");
    lines.map(str::to_owned).collect()
}

/// Asserts every bullet starts with `- `, is at most 500 characters and
/// cites at least one URI, each of them served (an entry of `result`).
fn bullets_cite_served_entries(result: &Value) {
    let served: BTreeSet<String> = entry_uris(result).into_iter().collect();
    for bullet in bullets(result) {
        assert!(bullet.starts_with("- "), "{bullet}");
        assert!(bullet.chars().count() <= 500, "{} characters: {bullet}", bullet.chars().count());
        let cited = viking_tokens(&bullet);
        assert!(!cited.is_empty(), "an uncited bullet survived: {bullet}");
        for uri in cited {
            assert!(served.contains(&uri), "{uri} is cited but not served: {bullet}");
        }
    }
}

/// The requests of one stage (by its system-prompt marker).
fn stage_requests(server: &ModelServer, marker: &str) -> Vec<Recorded> {
    server.requests().into_iter().filter(|r| r.raw.contains(marker)).collect()
}

/// The user message of an OpenAI-compatible request.
fn user_text(request: &Recorded) -> String {
    request.body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no user message: {}", request.raw))
        .to_owned()
}

async fn append(app: &Arc<App>, session: &str, role: &str, content: &str) {
    let path = format!("{SESSIONS_PATH}/{session}/messages");
    let reply = sessions_post(app, &path, &json!({"role": role, "content": content})).await;
    ok(&reply);
}

/// Stores `text` as the overview of archive 1 of session `session`.
async fn put_archive_overview(app: &Arc<App>, session: &str, text: &str) {
    let key = session_key("default", session, "history/archive_001/.overview.md");
    app.store.put(&key, text.to_owned().into(), PutMode::Overwrite).await.expect("write the archive overview");
}

/// A plan whose first query finds [`DINNER`]; it also repeats itself and
/// the original query (both dropped), and has more queries than are kept.
const PLAN: &str = r#"{"reasoning": "the user means the family dinner",
  "queries": [
    {"query": "Dinner with the family at the seaside restaurant", "context_type": "memory", "intent": "the dinner", "priority": 1},
    {"query": "dinner with the family  at the SEASIDE restaurant"},
    {"query": "Kubernetes cluster upgrade"},
    {"query": "Tomatoes need sun and water every morning", "context_type": "resource"},
    {"query": "a third planned query"}
  ]}"#;

// ---------------------------------------------------------------------------
// 1. Faults: 200, the right status, the block, before the deadline.
// ---------------------------------------------------------------------------

/// One scripted fault of a stage and what the caller should see.
struct Fault {
    name: &'static str,
    reply: ModelReply,
    /// `stats.query_expansion` / `stats.rewrite`.
    status: &'static str,
    /// The model never answered in time: the stage waited out its budget.
    waits: bool,
    /// The model answered 200, so its usage is reported (rewrite only).
    usage: bool,
}

impl Fault {
    fn new(name: &'static str, reply: ModelReply, status: &'static str) -> Self {
        let waits = status == "timeout";
        Self { name, reply, status, waits, usage: false }
    }

    fn answered(mut self) -> Self {
        self.usage = true;
        self
    }
}

fn late(after: Duration, reply: ModelReply) -> ModelReply {
    ModelReply::Delay(after, Box::new(reply))
}

#[tokio::test]
async fn expansion_faults_fall_back_to_the_original_query_before_the_deadline() {
    let faults = [
        Fault::new("hang", ModelReply::Hang, "timeout"),
        Fault::new("delay", late(Duration::from_millis(1500), ModelReply::Text(PLAN.into())), "timeout"),
        Fault::new("500", ModelReply::Status(500), "failed"),
        Fault::new("429", ModelReply::Status(429), "failed"),
        Fault::new("malformed body", ModelReply::Raw("{not json".into()), "failed"),
        Fault::new("not a plan", ModelReply::Text("- a fact with no source".into()), "failed"),
    ];
    for fault in faults {
        let name = fault.name;
        let server = ModelServer::start().await;
        server.on(EXPAND_MARKER, fault.reply.clone());
        let (app, _dirs) = app_with_model(&server).await;
        append(&app, "exp-fault", "user", "we talked about the family dinner").await;

        // Context mode: the original query alone, the block as without a
        // model (its 10 best, which leave the dinner out).
        let body = ctx_body(&json!({"session_id": "exp-fault", "limit": 10}));
        let result = &answered_in_time(&app, &body, &fault, EXPANSION_WAITED).await;
        let s = stats(result);
        assert_eq!(s["query_expansion"], fault.status, "{name}: {s}");
        assert!(s["query_expansion_error"].as_str().is_some_and(|e| !e.is_empty()), "{name}: {s}");
        assert_eq!(s["planned_queries"], json!([]), "{name}");
        assert_eq!(s["rewrite"], "off", "{name}");
        assert!(!text(result, "rendered").is_empty(), "{name}: {result:#}");
        assert!(!entry_uris(result).contains(&DINNER.to_owned()), "{name}: no planned query searched");
        assert_eq!(stage_requests(&server, EXPAND_MARKER).len(), 1, "{name}: one expansion call");

        // List mode: exactly find's result, no query_plan.
        let list_body = json!({"query": QUERY, "limit": 5, "session_id": "exp-fault"});
        let listed = answered_in_time(&app, &list_body, &fault, EXPANSION_WAITED).await;
        let find = call(&app, Handler::Find, "POST", FIND_PATH, &[], Some(&json!({"query": QUERY, "limit": 5}))).await;
        assert_eq!(listed, *ok(&find), "{name}: list mode after a failed expansion is find");
        assert!(listed.get("query_plan").is_none(), "{name}: {listed:#}");
        assert_eq!(stage_requests(&server, EXPAND_MARKER).len(), 2, "{name}");
    }
}

#[tokio::test]
async fn rewrite_faults_keep_the_block_and_answer_before_the_deadline() {
    let faults = [
        Fault::new("hang", ModelReply::Hang, "timeout"),
        Fault::new("delay", late(Duration::from_secs(3), ModelReply::Echo), "timeout"),
        Fault::new("500", ModelReply::Status(500), "failed"),
        Fault::new("429", ModelReply::Status(429), "failed"),
        Fault::new("malformed body", ModelReply::Raw("{not json".into()), "failed"),
        Fault::new("uncited bullet", ModelReply::Text("- a fact with no source".into()), "failed").answered(),
        Fault::new("no relevant memory", ModelReply::Text("NO_RELEVANT_MEMORY".into()), "no_relevant").answered(),
    ];
    for fault in faults {
        let name = fault.name;
        let server = ModelServer::start().await;
        server.on(REWRITE_MARKER, fault.reply.clone());
        let (app, _dirs) = app_with_model(&server).await;

        let result = &answered_in_time(&app, &ctx_body(&json!({"rewrite": true})), &fault, REWRITE_WAITED).await;
        let s = stats(result);
        assert_eq!(s["rewrite"], fault.status, "{name}: {s}");
        assert_eq!(s["query_expansion"], "off", "{name}: no session");
        assert_eq!(text(result, "digest"), "", "{name}");
        assert!(!entry_uris(result).is_empty(), "{name}: the entries are kept");
        if fault.status == "no_relevant" {
            assert_eq!(text(result, "rendered"), "", "{name}: nothing relevant, nothing injected");
            assert!(s.get("rewrite_error").is_none(), "{name}: {s}");
        } else {
            assert!(!text(result, "rendered").is_empty(), "{name}: {result:#}");
            assert!(s["rewrite_error"].as_str().is_some_and(|e| !e.is_empty()), "{name}: {s}");
        }
        let usage = if fault.usage {
            json!({"prompt_tokens": USAGE_PROMPT, "completion_tokens": USAGE_COMPLETION})
        } else {
            Value::Null
        };
        assert_eq!(s["rewrite_usage"], usage, "{name}");
        assert_eq!(stage_requests(&server, REWRITE_MARKER).len(), 1, "{name}: one rewrite call");
        assert!(stage_requests(&server, EXPAND_MARKER).is_empty(), "{name}");
    }
}

// ---------------------------------------------------------------------------
// 2. Which limit binds; a nearly spent deadline.
// ---------------------------------------------------------------------------

/// A search event as the Lambda runtime delivers it, with the invocation
/// deadline `deadline_ms` (milliseconds since the epoch) in its context.
fn lambda_event(body: &Value, deadline_ms: u64) -> lambda_http::Request {
    use lambda_http::RequestExt as _;
    let mut context = lambda_http::Context::default();
    context.deadline = deadline_ms;
    request_to(SEARCH_PATH, "POST", &[], lambda_http::Body::Text(body.to_string())).with_lambda_context(context)
}

fn epoch_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

#[tokio::test]
async fn the_lambda_deadline_binds_and_cargo_lambda_watchs_fixed_one_is_ignored() {
    let body = ctx_body(&json!({"rewrite": true}));
    // 2.5 s of invocation time left and a model that hangs: the rewrite
    // waits out its budget and the block still beats the Lambda deadline.
    let server = ModelServer::start().await;
    server.on(REWRITE_MARKER, ModelReply::Hang);
    let (app, _dirs) = app_with_model(&server).await;
    let started = Instant::now();
    let reply = call_handler(&app, Handler::Search, lambda_event(&body, epoch_ms() + DEADLINE_MS)).await;
    let elapsed = started.elapsed();
    rewrite_waited_out(&reply, elapsed, "lambda deadline");

    // `cargo lambda watch` sends 600000 (ten minutes after 1970): taken at
    // its word every request would be past its deadline; it is ignored.
    let server = ModelServer::start().await;
    let (app, _dirs) = app_with_model(&server).await;
    let reply = call_handler(&app, Handler::Search, lambda_event(&body, 600_000)).await;
    let result = ok(&reply);
    assert_eq!(stats(result)["rewrite"], "ok", "{result:#}");
}

#[tokio::test]
async fn the_client_header_beats_a_longer_gateway_limit_and_the_gateway_limit_binds_without_it() {
    let server = ModelServer::start().await;
    server.set_default(ModelReply::Hang);
    let long_gateway = |config: &mut skald::config::Config| {
        config.llm = Some(server.openai_model("stub"));
        config.retrieval.gateway_timeout_s = 30.0;
    };
    let (gateway_30, _dirs_30) = app_with_config(CONTEXT_CORPUS, long_gateway).await;
    let short_gateway = |config: &mut skald::config::Config| {
        config.llm = Some(server.openai_model("stub"));
        config.retrieval.gateway_timeout_s = 2.5;
    };
    let (gateway_2_5, _dirs_2_5) = app_with_config(CONTEXT_CORPUS, short_gateway).await;
    let body = ctx_body(&json!({"rewrite": true}));

    // Concurrently: each waits about 1.4 s on its hanging rewrite.
    let (client_wins, gateway_binds, longer_client) = tokio::join!(
        timed(&gateway_30, Handler::Search, SEARCH_PATH, &[(TIMEOUT_HEADER, "2500")], &body),
        timed(&gateway_2_5, Handler::Search, SEARCH_PATH, &[], &body),
        // A client limit longer than the gateway's changes nothing.
        timed(&gateway_2_5, Handler::Search, SEARCH_PATH, &[(TIMEOUT_HEADER, "65000")], &body),
    );
    for (name, (reply, elapsed)) in [
        ("header 2500 under a 30 s gateway", client_wins),
        ("a 2.5 s gateway", gateway_binds),
        ("header 65000 under a 2.5 s gateway", longer_client),
    ] {
        rewrite_waited_out(&reply, elapsed, name);
    }
    assert_eq!(stage_requests(&server, REWRITE_MARKER).len(), 3);
}

#[tokio::test]
async fn a_nearly_spent_deadline_skips_both_stages_without_a_call() {
    let server = ModelServer::start().await;
    server.set_default(ModelReply::Hang);
    let (app, _dirs) = app_with_model(&server).await;
    append(&app, "spent", "user", "what did we decide about the dinner?").await;
    let body = ctx_body(&json!({"session_id": "spent", "rewrite": true}));
    // 900 ms leaves less than one reserve: neither stage gets a budget.
    let (reply, elapsed) = timed(&app, Handler::Search, SEARCH_PATH, &[(TIMEOUT_HEADER, "900")], &body).await;
    let result = ok(&reply);
    assert!(elapsed < Duration::from_millis(900), "{elapsed:?}");
    let s = stats(result);
    assert_eq!(s["query_expansion"], "timeout", "{s}");
    assert_eq!(s["rewrite"], "timeout", "{s}");
    assert!(s["query_expansion_error"].as_str().is_some_and(|e| e.contains("no time left")), "{s}");
    assert!(s["rewrite_error"].as_str().is_some_and(|e| e.contains("no time left")), "{s}");
    assert!(!text(result, "rendered").is_empty(), "{result:#}");
    assert_eq!(text(result, "digest"), "");
    assert!(server.requests().is_empty(), "{:?}", server.requests());
    assert_eq!(server.connections(), 0);
}

// ---------------------------------------------------------------------------
// 3. The digest, normalised through the route.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_digest_keeps_only_cited_served_capped_bullets() {
    let server = ModelServer::start().await;
    let (app, _dirs) = app_with_model(&server).await;
    let plain = ok(&search_reply(&app, &ctx_body(&json!({"limit": 4}))).await).clone();
    let served = entry_uris(&plain);
    assert!(served.len() >= 3, "{served:?}");
    let (u0, u1, u2) = (&served[0], &served[1], &served[2]);
    let long_prose = "word ".repeat(130);
    let answer = format!(
        "Here is the digest:\n\
         * The cluster was upgraded to 1.30. (source: {u0})\n\
         - A secret plan exists. source: {UNSERVED}\n\
         - Upgrades happen every week.\n\
         • {long_prose}source: {u1}\n\
         2) Snapshot etcd first. source: {u2}\n\
         - One bullet too many. source: {u0}\n"
    );
    server.on(REWRITE_MARKER, ModelReply::Text(answer));

    let reply = search_reply(&app, &ctx_body(&json!({"limit": 4, "rewrite": true, "rewrite_max_bullets": 3}))).await;
    let result = ok(&reply);
    assert_eq!(entry_uris(result), served, "the same entries are served");
    assert_eq!(stats(result)["rewrite"], "ok", "{}", stats(result));
    assert_eq!(text(result, "rendered"), text(&plain, "rendered"), "the block is kept beside the digest");
    let kept = bullets(result);
    assert_eq!(kept.len(), 3, "the cap: {kept:#?}");
    assert_eq!(kept[0], format!("- The cluster was upgraded to 1.30. (source: {u0})"));
    assert!(kept[1].starts_with("- word word "), "{}", kept[1]);
    assert!(kept[1].ends_with(&format!("… source: {u1}")), "the long bullet keeps its citation: {}", kept[1]);
    assert!(kept[1].chars().count() <= 500, "{} characters", kept[1].chars().count());
    assert_eq!(kept[2], format!("- Snapshot etcd first. source: {u2}"));
    bullets_cite_served_entries(result);
}

// ---------------------------------------------------------------------------
// 4. The prompts.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_prompts_carry_the_session_and_the_rewrite_prompt_names_only_served_uris() {
    let server = ModelServer::start().await;
    let (app, _dirs) = app_with_model(&server).await;
    let session = "prompts";
    put_archive_overview(
        &app,
        session,
        "# Session Summary\n\nWe were rotating the etcd backups of the prod cluster.\n",
    )
    .await;
    let messages = [
        ("user", "first message: the old staging cluster"),
        ("assistant", "second message: noted"),
        ("user", "third message: which runbook applies?"),
        ("assistant", "fourth message: the upgrade runbook"),
        ("user", "fifth message: thanks"),
        ("assistant", "sixth message: anything else?"),
    ];
    for (role, content) in messages {
        append(&app, session, role, content).await;
    }
    let last = format!("seventh message: check {UNSERVED} before the upgrade");
    append(&app, session, "user", &last).await;

    let reply = search_reply(&app, &ctx_body(&json!({"session_id": session, "rewrite": true}))).await;
    let result = ok(&reply);
    assert_eq!(stats(result)["query_expansion"], "used", "{}", stats(result));
    assert_eq!(stats(result)["rewrite"], "ok", "{}", stats(result));
    let served: BTreeSet<String> = entry_uris(result).into_iter().collect();
    assert!(!served.contains(UNSERVED));

    // Expansion: the overview, the last five messages, then the query.
    let expansion = stage_requests(&server, EXPAND_MARKER);
    assert_eq!(expansion.len(), 1);
    let prompt = user_text(&expansion[0]);
    let at = |needle: &str| prompt.find(needle).unwrap_or_else(|| panic!("{needle:?} is not in:\n{prompt}"));
    assert!(at("## Session summary\n") < at("We were rotating the etcd backups of the prod cluster."), "{prompt}");
    let recent = at("## Recent messages\n");
    let mut previous = recent;
    for line in [
        "[user]: third message: which runbook applies?".to_owned(),
        "[assistant]: fourth message: the upgrade runbook".to_owned(),
        "[user]: fifth message: thanks".to_owned(),
        "[assistant]: sixth message: anything else?".to_owned(),
        format!("[user]: {last}"),
    ] {
        let here = at(&line);
        assert!(here > previous, "{line:?} is out of order:\n{prompt}");
        previous = here;
    }
    assert!(!prompt.contains("first message") && !prompt.contains("second message"), "only the last 5: {prompt}");
    assert!(prompt.ends_with(&format!("## Current query\n{QUERY}\n")), "{prompt}");

    // Rewrite: every URI in the whole prompt is a served entry's.
    let rewrite = stage_requests(&server, REWRITE_MARKER);
    assert_eq!(rewrite.len(), 1);
    let prompt = rewrite[0].prompt_text();
    let named = viking_tokens(&prompt);
    assert!(!named.is_empty(), "the block names its entries: {prompt}");
    for uri in &named {
        assert!(served.contains(uri), "{uri} is in the rewrite prompt but was not served:\n{prompt}");
    }
    assert!(!prompt.contains("unserved-plan"), "{prompt}");
    assert!(prompt.contains("seventh message: check [uri not served] before the upgrade"), "{prompt}");
    assert!(prompt.contains("We were rotating the etcd backups"), "the session slice: {prompt}");
    assert!(prompt.contains(text(result, "rendered")), "the rendered block: {prompt}");
    bullets_cite_served_entries(result);
}

#[tokio::test]
async fn the_rewrite_prompt_masks_unserved_uris_of_the_query_and_of_fragment_bodies() {
    const DOC: &str = "viking://user/default/memories/entities/infra/upgrade-doc.md";
    const PLAN_URI: &str = "viking://resources/plans/secret-upgrade-plan.md";
    let server = ModelServer::start().await;
    let mut files = CONTEXT_CORPUS.to_vec();
    files.push((
        "user/default/memories/entities/infra/upgrade-doc.md",
        "The kubernetes cluster upgrade plan lives in viking://resources/plans/secret-upgrade-plan.md today.\n",
    ));
    let (app, _dirs) = app_with_config(&files, |config| config.llm = Some(server.openai_model("stub"))).await;
    let query = format!("{QUERY} as {UNSERVED} says");
    let reply = search_reply(&app, &json!({"query": query, "mode": "context", "rewrite": true})).await;
    let result = ok(&reply);
    let served: BTreeSet<String> = entry_uris(result).into_iter().collect();
    assert!(served.contains(DOC) && !served.contains(PLAN_URI), "{served:?}");
    assert!(text(result, "rendered").contains(PLAN_URI), "the block the client gets is as stored");

    let rewrite = stage_requests(&server, REWRITE_MARKER);
    assert_eq!(rewrite.len(), 1);
    let prompt = rewrite[0].prompt_text();
    for uri in viking_tokens(&prompt) {
        assert!(served.contains(&uri), "{uri} is in the rewrite prompt but was not served:\n{prompt}");
    }
    assert!(prompt.contains(&format!("{QUERY} as [uri not served] says")), "{prompt}");
    assert!(prompt.contains("plan lives in [uri not served] today."), "{prompt}");
    // The fact that named an unserved URI survives, citing its own entry.
    assert_eq!(stats(result)["rewrite"], "ok", "{}", stats(result));
    let digest = text(result, "digest");
    assert!(digest.contains(&format!("[uri not served] today. (source: {DOC})")), "{digest}");
    bullets_cite_served_entries(result);
}

// ---------------------------------------------------------------------------
// 5. What expansion changes.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn planned_queries_bring_in_hits_the_original_query_misses() {
    let server = ModelServer::start().await;
    server.on(EXPAND_MARKER, ModelReply::Text(PLAN.into()));
    let (app, _dirs) = app_with_model(&server).await;
    append(&app, "plan", "user", "remember that evening by the sea?").await;
    let planned =
        json!(["Dinner with the family at the seaside restaurant", "Tomatoes need sun and water every morning"]);

    // Context mode.
    let without = ok(&search_reply(&app, &ctx_body(&json!({"limit": 3}))).await).clone();
    assert_eq!(stats(&without)["query_expansion"], "off", "no session");
    assert!(!entry_uris(&without).contains(&DINNER.to_owned()), "{:?}", entry_uris(&without));
    let with = ok(&search_reply(&app, &ctx_body(&json!({"limit": 3, "session_id": "plan"}))).await).clone();
    assert_eq!(stats(&with)["query_expansion"], "used", "{}", stats(&with));
    assert_eq!(stats(&with)["planned_queries"], planned, "original first, deduplicated, at most 2");
    assert!(stats(&with).get("query_expansion_error").is_none());
    assert!(entry_uris(&with).contains(&DINNER.to_owned()), "{:?}", entry_uris(&with));
    assert!(text(&with, "rendered").contains(DINNER));

    // List mode.
    let find = call(&app, Handler::Find, "POST", FIND_PATH, &[], Some(&json!({"query": QUERY, "limit": 3}))).await;
    let find = ok(&find);
    assert!(!hit_uris(find).contains(&DINNER.to_owned()), "{find:#}");
    let listed = ok(&search_reply(&app, &json!({"query": QUERY, "limit": 3, "session_id": "plan"})).await).clone();
    let hits = hit_uris(&listed);
    assert!(hits.contains(&DINNER.to_owned()), "{listed:#}");
    assert!(hits.len() <= 3, "merged hits are cut to limit: {hits:?}");
    assert_eq!(listed["total"], json!(hits.len()), "{listed:#}");
    let plan = &listed["query_plan"];
    assert_eq!(plan["reasoning"], "the user means the family dinner");
    let queries: Vec<&Value> = plan["queries"].as_array().expect("queries").iter().map(|q| &q["query"]).collect();
    assert_eq!(json!(queries), planned);
    assert_eq!(
        plan["queries"][0],
        json!({"query": "Dinner with the family at the seaside restaurant", "context_type": "memory", "intent": "the dinner", "priority": 1})
    );
    assert_eq!(plan["queries"][1]["context_type"], "resource");
    assert_eq!(plan["queries"][1]["priority"], 3, "the default priority");
    assert_eq!(stage_requests(&server, EXPAND_MARKER).len(), 2, "one expansion per request with a session");

    // Provenance: one entry per query searched, the original first.
    let body = json!({"query": QUERY, "limit": 3, "session_id": "plan", "include_provenance": true});
    let listed = ok(&search_reply(&app, &body).await).clone();
    let provenance = listed["provenance"].as_array().expect("provenance");
    let searched: Vec<&Value> = provenance.iter().map(|p| &p["query"]).collect();
    assert_eq!(searched, [&json!(QUERY), &planned[0], &planned[1]], "{listed:#}");
    let dinner_query = &provenance[1]["matched_contexts"];
    assert_eq!(dinner_query[0]["uri"], DINNER, "the planned query found the dinner: {dinner_query:#}");
    let original_matches: Vec<&Value> =
        provenance[0]["matched_contexts"].as_array().expect("matches").iter().map(|m| &m["uri"]).collect();
    assert!(!original_matches.contains(&&json!(DINNER)), "the original query alone misses it: {original_matches:?}");
}

/// An embedder that records each call's texts and when it started.
#[derive(Debug)]
struct RecordingEmbedder {
    inner: Arc<dyn Embedder>,
    calls: Mutex<Vec<(Vec<String>, Instant)>>,
}

#[async_trait::async_trait]
impl Embedder for RecordingEmbedder {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let owned = texts.iter().map(|t| (*t).to_owned()).collect();
        self.calls.lock().expect("calls").push((owned, Instant::now()));
        self.inner.embed(texts).await
    }
}

/// The original query is embedded with the session read, not after the
/// plan: the planner's answer (held back 300 ms here) only adds one call for
/// the planned queries — in context mode and in list mode alike.
#[tokio::test]
async fn the_original_query_is_embedded_while_the_planner_thinks() {
    const HELD: Duration = Duration::from_millis(300);
    let server = ModelServer::start().await;
    server.on(EXPAND_MARKER, ModelReply::Delay(HELD, Box::new(ModelReply::Text(PLAN.into()))));
    let (app, _dirs) = app_with_model(&server).await;
    append(&app, "plan", "user", "remember that evening by the sea?").await;
    let recorder = Arc::new(RecordingEmbedder { inner: Arc::clone(&app.embedder), calls: Mutex::default() });
    let app = Arc::new(skald_tests::fixture::with_embedder(&app, recorder.clone()));
    let planned = ["Dinner with the family at the seaside restaurant", "Tomatoes need sun and water every morning"];
    for body in [ctx_body(&json!({"session_id": "plan"})), json!({"query": QUERY, "session_id": "plan"})] {
        let reply = search_reply(&app, &body).await;
        ok(&reply);
        let calls = std::mem::take(&mut *recorder.calls.lock().expect("calls"));
        let texts: Vec<&Vec<String>> = calls.iter().map(|(texts, _)| texts).collect();
        assert_eq!(texts, [&vec![QUERY.to_owned()], &planned.map(str::to_owned).to_vec()], "{body}");
        let waited = calls[1].1 - calls[0].1;
        assert!(waited >= HELD, "the original was embedded only {waited:?} before the plan came: {body}");
    }
}

#[tokio::test]
async fn an_archive_overview_alone_is_context_enough_to_expand() {
    let server = ModelServer::start().await;
    server.on(EXPAND_MARKER, ModelReply::Text(PLAN.into()));
    let (app, _dirs) = app_with_model(&server).await;
    put_archive_overview(&app, "archived", "We talked about the family dinner by the sea.").await;
    let result = ok(&search_reply(&app, &ctx_body(&json!({"session_id": "archived"}))).await).clone();
    assert_eq!(stats(&result)["query_expansion"], "used", "{}", stats(&result));
    let expansion = stage_requests(&server, EXPAND_MARKER);
    assert_eq!(expansion.len(), 1);
    let prompt = user_text(&expansion[0]);
    assert!(prompt.contains("## Session summary\nWe talked about the family dinner by the sea."), "{prompt}");
    assert!(prompt.contains("## Recent messages\nNone"), "{prompt}");
}

// ---------------------------------------------------------------------------
// 6. No model call, not even a connection.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn routes_that_need_no_model_never_connect_to_it() {
    let server = ModelServer::start().await;
    let (app, _dirs) = app_with_model(&server).await;
    append(&app, "quiet", "user", "what did we decide about the dinner?").await;
    put_archive_overview(&app, "quiet", "We talked about the family dinner.").await;
    let find_body = json!({"query": QUERY, "limit": 5});
    let find = call(&app, Handler::Find, "POST", FIND_PATH, &[], Some(&find_body)).await;
    let find = ok(&find).clone();
    let cases = [
        ("find", Handler::Find, FIND_PATH, find_body.clone()),
        ("list mode without a session", Handler::Search, SEARCH_PATH, find_body.clone()),
        (
            "list mode with a session that has no context",
            Handler::Search,
            SEARCH_PATH,
            json!({"query": QUERY, "limit": 5, "session_id": "no-such-session"}),
        ),
        ("context mode without a session", Handler::Search, SEARCH_PATH, ctx_body(&json!({}))),
        (
            "context mode with both stages off",
            Handler::Search,
            SEARCH_PATH,
            ctx_body(&json!({"session_id": "quiet", "query_expansion": "off", "rewrite": false})),
        ),
        ("bootstrap", Handler::Bootstrap, BOOTSTRAP_PATH, json!({"session_id": "quiet"})),
    ];
    for (name, handler, path, body) in cases {
        let reply = call(&app, handler, "POST", path, &[], Some(&body)).await;
        let result = ok(&reply);
        if handler != Handler::Bootstrap && body.get("mode").is_none() {
            assert_eq!(*result, find, "{name} is exactly find");
        }
        if body.get("mode").is_some() {
            assert_eq!(stats(result)["query_expansion"], "off", "{name}");
            assert_eq!(stats(result)["rewrite"], "off", "{name}");
        }
        assert_eq!(server.connections(), 0, "{name} connected to the model");
    }
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn expansion_disabled_in_the_configuration_never_connects() {
    let server = ModelServer::start().await;
    let edit = |config: &mut skald::config::Config| {
        config.llm = Some(server.openai_model("stub"));
        config.retrieval.enable_intent = false;
    };
    let (app, _dirs) = app_with_config(CONTEXT_CORPUS, edit).await;
    append(&app, "no-intent", "user", "what did we decide about the dinner?").await;
    let result = ok(&search_reply(&app, &ctx_body(&json!({"session_id": "no-intent"}))).await).clone();
    assert_eq!(stats(&result)["query_expansion"], "off", "{}", stats(&result));
    let list_body = json!({"query": QUERY, "limit": 5, "session_id": "no-intent"});
    let listed = ok(&search_reply(&app, &list_body).await).clone();
    let find = call(&app, Handler::Find, "POST", FIND_PATH, &[], Some(&json!({"query": QUERY, "limit": 5}))).await;
    assert_eq!(listed, *ok(&find), "list mode is find");
    assert_eq!(server.connections(), 0);
}

// ---------------------------------------------------------------------------
// 7, 8. rewrite "auto", usage, and no model at all.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn rewrite_auto_needs_a_dedicated_query_planner() {
    let server = ModelServer::start().await;
    let body = ctx_body(&json!({"rewrite": "auto"}));

    let (main_only, _dirs) = app_with_model(&server).await;
    let result = ok(&search_reply(&main_only, &body).await).clone();
    assert_eq!(stats(&result)["rewrite"], "off", "{}", stats(&result));
    assert_eq!(text(&result, "digest"), "");
    assert_eq!(server.connections(), 0, "no call without a planner");

    let both = |config: &mut skald::config::Config| {
        config.llm = Some(server.openai_model("main-model"));
        config.query_planner = Some(server.openai_model("planner-model"));
    };
    let (with_planner, _dirs) = app_with_config(CONTEXT_CORPUS, both).await;
    let result = ok(&search_reply(&with_planner, &body).await).clone();
    assert_eq!(stats(&result)["rewrite"], "ok", "{}", stats(&result));
    bullets_cite_served_entries(&result);
    let requests = stage_requests(&server, REWRITE_MARKER);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["model"], "planner-model", "the rewrite runs on the planner");
}

#[tokio::test]
async fn rewrite_usage_is_the_models_and_null_when_it_reports_none() {
    let server = ModelServer::start().await;
    let (app, _dirs) = app_with_model(&server).await;
    let body = ctx_body(&json!({"rewrite": true}));
    let result = ok(&search_reply(&app, &body).await).clone();
    assert_eq!(stats(&result)["rewrite"], "ok", "{}", stats(&result));
    assert_eq!(
        stats(&result)["rewrite_usage"],
        json!({"prompt_tokens": USAGE_PROMPT, "completion_tokens": USAGE_COMPLETION})
    );

    let first = entry_uris(&result)[0].clone();
    server.on(REWRITE_MARKER, ModelReply::TextNoUsage(format!("- The first fact. source: {first}")));
    let result = ok(&search_reply(&app, &body).await).clone();
    assert_eq!(stats(&result)["rewrite"], "ok", "{}", stats(&result));
    assert_eq!(stats(&result)["rewrite_usage"], Value::Null);
    assert_eq!(text(&result, "digest"), format!("Memory digest:\n- The first fact. source: {first}"));
}

#[tokio::test]
async fn without_a_model_both_stages_are_off_and_a_forced_rewrite_fails() {
    let (app, _dirs) = app_with_config(CONTEXT_CORPUS, |_| {}).await;
    append(&app, "no-model", "user", "what did we decide about the dinner?").await;
    let result =
        ok(&search_reply(&app, &ctx_body(&json!({"session_id": "no-model", "rewrite": "auto"}))).await).clone();
    assert_eq!((&stats(&result)["query_expansion"], &stats(&result)["rewrite"]), (&json!("off"), &json!("off")));
    let result = ok(&search_reply(&app, &ctx_body(&json!({"session_id": "no-model", "rewrite": true}))).await).clone();
    assert_eq!(stats(&result)["query_expansion"], "off");
    assert_eq!(stats(&result)["rewrite"], "failed");
    assert!(stats(&result)["rewrite_error"].as_str().is_some_and(|e| e.contains("no model")), "{}", stats(&result));
    assert!(!text(&result, "rendered").is_empty());
    let listed = ok(&search_reply(&app, &json!({"query": QUERY, "session_id": "no-model"})).await).clone();
    assert!(listed.get("query_plan").is_none(), "{listed:#}");
}

// ---------------------------------------------------------------------------
// 9. Nothing relevant: nothing injected, nothing recorded.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn no_relevant_memory_injects_nothing_and_leaves_the_ledger_untouched() {
    let server = ModelServer::start().await;
    server.on(REWRITE_MARKER, ModelReply::Text("NO_RELEVANT_MEMORY".into()));
    let (app, _dirs) = app_with_model(&server).await;
    let session = "nothing-relevant";
    append(&app, session, "user", "tell me about the cluster").await;
    let ledger_key = session_key("default", session, ".recall_log.json");
    let body = |rewrite: bool| {
        ctx_body(&json!({
            "session_id": session, "dedup_turns": 3, "limit": 3, "rewrite": rewrite, "query_expansion": "off",
        }))
    };
    let no_relevant = |result: &Value| {
        assert_eq!(stats(result)["rewrite"], "no_relevant", "{}", stats(result));
        assert!(!entry_uris(result).is_empty(), "the entries are kept: {result:#}");
        assert_eq!(text(result, "rendered"), "");
        assert_eq!(text(result, "digest"), "");
    };

    // No ledger yet: nothing relevant writes none.
    let first = ok(&search_reply(&app, &body(true)).await).clone();
    no_relevant(&first);
    assert_eq!(stats(&first)["dedup"]["turn"], 1, "{}", stats(&first));
    assert_eq!(store_json(&app.store, &ledger_key).await, None, "nothing was injected, nothing recorded");

    // A served call records; a later nothing-relevant call changes nothing.
    let served = ok(&search_reply(&app, &body(false)).await).clone();
    let before = store_json(&app.store, &ledger_key).await.expect("the served call records the ledger");
    for uri in entry_uris(&served) {
        assert!(before["entries"].get(&uri).is_some(), "{uri} recorded: {before:#}");
    }
    let again = ok(&search_reply(&app, &body(true)).await).clone();
    no_relevant(&again);
    assert_eq!(stats(&again)["dedup"]["cooled"], json!(entry_uris(&served).len()), "{}", stats(&again));
    assert_eq!(store_json(&app.store, &ledger_key).await, Some(before), "the ledger is untouched");
}

// ---------------------------------------------------------------------------
// 10. Bedrock Converse.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn bedrock_converse_rewrites_with_signed_requests_and_fails_softly() {
    use aws_sdk_bedrockruntime::config::{BehaviorVersion, Credentials, Region};
    const MODEL_ID: &str = "anthropic.claude-3-haiku-20240307-v1:0";
    let server = ModelServer::start().await;
    let (mut app, _dirs) = app_with_config(CONTEXT_CORPUS, |_| {}).await;
    let conf = aws_sdk_bedrockruntime::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static"))
        .endpoint_url(server.endpoint())
        .build();
    let client = Arc::new(BedrockChat::with_config(MODEL_ID, conf));
    Arc::get_mut(&mut app).expect("the app is not shared yet").models = Models::with_client(client, false);
    let body = ctx_body(&json!({"rewrite": true}));

    let result = ok(&search_reply(&app, &body).await).clone();
    assert_eq!(stats(&result)["rewrite"], "ok", "{}", stats(&result));
    assert_eq!(
        stats(&result)["rewrite_usage"],
        json!({"prompt_tokens": USAGE_PROMPT, "completion_tokens": USAGE_COMPLETION})
    );
    bullets_cite_served_entries(&result);
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let request = &requests[0];
    assert!(request.path.starts_with("/model/anthropic.claude-3-haiku") && request.path.ends_with("/converse"));
    let authorization = request.header("authorization").expect("a signed request");
    assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=test/"), "{authorization}");
    assert!(request.body["system"][0]["text"].as_str().is_some_and(|s| s.contains(REWRITE_MARKER)));
    assert!(request.prompt_text().contains(text(&result, "rendered")), "the block is in the prompt");

    server.on(REWRITE_MARKER, ModelReply::Status(429));
    let result = ok(&search_reply(&app, &body).await).clone();
    assert_eq!(stats(&result)["rewrite"], "failed", "{}", stats(&result));
    assert!(stats(&result)["rewrite_error"].as_str().is_some_and(|e| e.contains("429")), "{}", stats(&result));
    assert!(!text(&result, "rendered").is_empty());
    assert_eq!(stats(&result)["rewrite_usage"], Value::Null);
}

// ---------------------------------------------------------------------------
// 11. The deadline header: refused when malformed; recall honours it.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_malformed_client_timeout_is_a_400_naming_the_header() {
    let server = ModelServer::start().await;
    let (app, _dirs) = app_with_model(&server).await;
    let body = ctx_body(&json!({"rewrite": true}));
    for value in ["0", "-5", "soon", "1.5"] {
        for (handler, path) in [(Handler::Search, SEARCH_PATH), (Handler::Recall, RECALL_PATH)] {
            let reply = call(&app, handler, "POST", path, &[(TIMEOUT_HEADER, value)], Some(&body)).await;
            assert_eq!(reply.status, 400, "{value:?} on {path}: {}", reply.text);
            assert_eq!(reply.json["error"]["code"], "INVALID_ARGUMENT", "{}", reply.text);
            let message = reply.json["error"]["message"].as_str().expect("a message");
            assert!(message.contains("X-Client-Timeout-Ms"), "{message}");
        }
    }
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn recall_with_a_hanging_rewrite_answers_before_the_client_deadline() {
    let server = ModelServer::start().await;
    server.set_default(ModelReply::Hang);
    let (app, _dirs) = app_with_model(&server).await;
    let deadline = DEADLINE_MS.to_string();
    let headers = [(TIMEOUT_HEADER, deadline.as_str())];
    let body = json!({"query": QUERY, "rewrite": true});
    let (reply, elapsed) = timed(&app, Handler::Recall, RECALL_PATH, &headers, &body).await;
    rewrite_waited_out(&reply, elapsed, "recall");
    assert_eq!(stage_requests(&server, REWRITE_MARKER).len(), 1);
}

#[tokio::test]
async fn a_server_without_json_mode_is_asked_again_without_it_once_and_then_never() {
    let server = ModelServer::start().await;
    let refusal = r#"{"error": {"message": "Unrecognized request argument supplied: response_format"}}"#;
    server.on("response_format", ModelReply::RawStatus(400, refusal.into()));
    server.on(EXPAND_MARKER, ModelReply::Text(PLAN.into()));
    let (app, _dirs) = app_with_model(&server).await;
    append(&app, "no-json-mode", "user", "How was the family dinner?").await;
    let body = ctx_body(&json!({"session_id": "no-json-mode"}));
    for call in 1..=2 {
        let result = ok(&search_reply(&app, &body).await).clone();
        assert_eq!(stats(&result)["query_expansion"], "used", "call {call}: {result:#}");
        assert!(entry_uris(&result).contains(&DINNER.to_owned()), "call {call}: the plan was used");
    }
    let sent: Vec<bool> =
        stage_requests(&server, EXPAND_MARKER).iter().map(|r| r.body.get("response_format").is_some()).collect();
    assert_eq!(sent, [true, false, false], "refused once, asked again without it, then never sent again");
}
