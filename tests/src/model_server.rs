//! A scriptable model server for tests: OpenAI-compatible chat completions
//! and Amazon Bedrock Converse on one local HTTP/1.1 port, so Skald's LLM
//! clients are exercised over real HTTP without a model.
//!
//! - OpenAI: `POST /v1/chat/completions` (or `POST /chat/completions`);
//!   point the client at [`ModelServer::base_url`].
//! - Bedrock: `POST /model/{modelId}/converse` (the id percent-encoded);
//!   point the client's endpoint override at [`ModelServer::endpoint`].
//! - A reranker: `POST /v1/rerank` (or `POST /rerank`) in Cohere's shape;
//!   [`ModelServer::openai_model`] configures one. [`Reply::Echo`] scores
//!   each document by the share of the query's words it holds
//!   ([`overlap`]); [`Reply::Compute`] runs the script on
//!   `"{query}\n{document}"` per document and reads a number from it.
//!
//! Each request is answered by the first rule ([`ModelServer::on`]) whose
//! needle occurs in the raw request body, or else by the default reply
//! ([`ModelServer::set_default`], initially [`Reply::Echo`]). Every request
//! is recorded ([`ModelServer::requests`]) once its body has been read.
//!
//! [`Reply::Echo`] answers deterministically from the prompt: cited bullets
//! for a rewrite prompt, one query for a query-expansion prompt, one
//! memory per user message for a memory-extraction prompt, every memory
//! added for a comparison prompt, and `echo: …` otherwise (see [`echo`]).
//!
//! ```no_run
//! # async fn demo() {
//! use skald_tests::model_server::{ModelServer, Reply};
//! let server = ModelServer::start().await;
//! server.on("flaky", Reply::Status(429));
//! server.set_default(Reply::Text("hello".into()));
//! let base_url = server.base_url(); // http://127.0.0.1:PORT/v1
//! # }
//! ```

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The environment variable a model's `api_key_env` names when it has no
/// key: no test sets it.
pub const UNSET_KEY_ENV: &str = "SKALD_TEST_UNSET_KEY";

/// `prompt_tokens` / `inputTokens` of every reply that carries usage.
pub const USAGE_PROMPT: u64 = 321;
/// `completion_tokens` / `outputTokens` of every reply that carries usage.
pub const USAGE_COMPLETION: u64 = 54;

/// The system-prompt phrase that marks a rewrite (condense) request.
pub const REWRITE_MARKER: &str = "You condense retrieved memory";
/// The system-prompt phrase that marks a query-expansion request.
pub const EXPAND_MARKER: &str = "You plan search queries";
/// The system-prompt phrase that marks a memory-extraction request.
pub const EXTRACT_MARKER: &str = "You turn a conversation between a user and an AI assistant into long-term";
/// The system-prompt phrase that marks a memory-comparison request.
pub const RECONCILE_MARKER: &str = "You keep a user's long-term memory consistent";
/// The rewrite answer when the prompt holds no `<memory>` element.
pub const NO_RELEVANT_MEMORY: &str = "NO_RELEVANT_MEMORY";

/// Bullets a rewrite answer has at most when the prompt names no limit.
const DEFAULT_BULLETS: usize = 6;
/// Characters of a rewrite bullet's summary.
const SUMMARY_CHARS: usize = 160;
/// Characters of an expansion query.
const QUERY_CHARS: usize = 100;
/// Characters of the user message in a plain echo.
const ECHO_CHARS: usize = 200;
/// Characters of the prompt in a log line.
const LOG_CHARS: usize = 80;

/// How the server answers a request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200 with this assistant text and usage
    /// ([`USAGE_PROMPT`], [`USAGE_COMPLETION`]).
    Text(String),
    /// 200 with this text and no usage object (Bedrock: usage of zeros).
    TextNoUsage(String),
    /// Waits, then replies.
    Delay(Duration, Box<Reply>),
    /// Never answers: the handler awaits forever, until the client
    /// disconnects or the runtime stops.
    Hang,
    /// This HTTP status with an error body in the provider's shape (OpenAI:
    /// `{"error":{…}}`, plus `retry-after: 1` on 429; Bedrock:
    /// `{"message":…}` and an `x-amzn-errortype` header).
    Status(u16),
    /// 200 with exactly this body and content-type `application/json`.
    Raw(String),
    /// This status with exactly this body (a provider's own error text).
    RawStatus(u16, String),
    /// A deterministic, plausible answer computed from the prompt ([`echo`]).
    Echo,
    /// 200 with the text this function computes from the request's
    /// prompt text ([`Recorded::prompt_text`]): a test's own script.
    Compute(Script),
}

/// A test's answer function for [`Reply::Compute`].
#[derive(Clone)]
pub struct Script(pub Arc<dyn Fn(&str) -> String + Send + Sync>);

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Script(..)")
    }
}

impl Reply {
    /// [`Reply::Compute`] with `script`.
    pub fn compute(script: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        Self::Compute(Script(Arc::new(script)))
    }
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The HTTP method, e.g. `POST`.
    pub method: String,
    /// The request path (without the query).
    pub path: String,
    /// Every header, names lowercase, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as text (lossy UTF-8).
    pub raw: String,
    /// The body parsed as JSON; `Null` when it is not JSON.
    pub body: Value,
}

impl Recorded {
    /// All message text of the request, system first, joined by `"\n"`: for
    /// OpenAI every `messages[].content` (a string, or the text of a
    /// content-part array), system and developer messages first; for Bedrock
    /// `system[].text` then `messages[].content[].text`.
    #[must_use]
    pub fn prompt_text(&self) -> String {
        Prompt::of(&self.body).all()
    }

    /// The value of header `name` (case-insensitive); the first when repeated.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// What the handlers share with the [`ModelServer`] handle.
struct Shared {
    state: Mutex<State>,
    connections: AtomicUsize,
    next_id: AtomicU64,
    log: AtomicBool,
}

struct State {
    rules: Vec<(String, Reply)>,
    default: Reply,
    requests: Vec<Recorded>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running test server. Dropping it stops accepting connections;
/// connections already accepted are served until the runtime stops.
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for ModelServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl ModelServer {
    /// Binds `127.0.0.1:0` and serves on the current tokio runtime.
    ///
    /// # Panics
    /// When no loopback port can be bound, or outside a tokio runtime.
    pub async fn start() -> Self {
        Self::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await.expect("bind the model server to a loopback port")
    }

    /// Binds `addr` and serves on the current tokio runtime.
    ///
    /// # Errors
    /// When the address cannot be bound.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State { rules: Vec::new(), default: Reply::Echo, requests: Vec::new() }),
            connections: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            log: AtomicBool::new(false),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(Self { addr, shared, accept })
    }

    /// The OpenAI-compatible base URL, `http://127.0.0.1:PORT/v1`.
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// This server as an OpenAI-compatible chat model named `model`,
    /// with no API key (its `api_key_env`, `SKALD_TEST_UNSET_KEY`, is never
    /// set).
    #[must_use]
    pub fn openai_model(&self, model: &str) -> skald::config::ModelConfig {
        skald::config::ModelConfig::Openai {
            base_url: self.base_url(),
            model: model.into(),
            api_key_env: UNSET_KEY_ENV.into(),
            api_key_secret: None,
            api_key: None,
        }
    }

    /// The Bedrock endpoint override, `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Adds a persistent rule: a request whose raw body contains `needle`
    /// gets `reply`. Rules are checked in insertion order; the first match
    /// wins.
    pub fn on(&self, needle: &str, reply: Reply) {
        self.shared.state().rules.push((needle.to_owned(), reply));
    }

    /// Removes every rule ([`ModelServer::on`]).
    pub fn clear_rules(&self) {
        self.shared.state().rules.clear();
    }

    /// The reply when no rule matches (initially [`Reply::Echo`]).
    pub fn set_default(&self, reply: Reply) {
        self.shared.state().default = reply;
    }

    /// Every request received so far, in arrival order (recorded when its
    /// body has been read, before the reply).
    #[must_use]
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.state().requests.clone()
    }

    /// TCP connections accepted so far, including ones that sent nothing.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Whether to log one line per request to stderr (method, path, the
    /// start of the prompt). Off initially.
    pub fn log_requests(&self, on: bool) {
        self.shared.log.store(on, Ordering::SeqCst);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Transient (e.g. too many open files): back off briefly.
                eprintln!("model server: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(Arc::clone(&shared), req));
            // A client that goes away mid-request is not the server's error.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// Which wire format a request speaks.
enum Api {
    OpenAi,
    Bedrock,
    Rerank,
}

fn route(path: &str) -> Option<Api> {
    if path == "/v1/chat/completions" || path == "/chat/completions" {
        return Some(Api::OpenAi);
    }
    if path == "/v1/rerank" || path == "/rerank" {
        return Some(Api::Rerank);
    }
    let id = path.strip_prefix("/model/")?.strip_suffix("/converse")?;
    (!id.is_empty() && !id.contains('/')).then_some(Api::Bedrock)
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let Ok(collected) = body.collect().await else {
        return Ok(json_response(StatusCode::BAD_REQUEST, &json!({"error": {"message": "unreadable body"}})));
    };
    let raw = String::from_utf8_lossy(&collected.to_bytes()).into_owned();
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        raw,
    };
    if shared.log.load(Ordering::SeqCst) {
        let prompt: String = recorded.prompt_text().chars().take(LOG_CHARS).collect();
        eprintln!("{} {}  {}", recorded.method, recorded.path, prompt.replace(['\n', '\r'], " "));
    }
    let api = route(&recorded.path);
    let reply = {
        let mut state = shared.state();
        let reply = match state.rules.iter().find(|(needle, _)| recorded.raw.contains(needle.as_str())) {
            Some((_, reply)) => reply.clone(),
            None => state.default.clone(),
        };
        state.requests.push(recorded.clone());
        reply
    };
    if parts.method != Method::POST {
        let error = json!({"error": {"message": format!("method {} not allowed", parts.method), "code": 405}});
        return Ok(json_response(StatusCode::METHOD_NOT_ALLOWED, &error));
    }
    let Some(api) = api else {
        let message = format!("stub: no route for {}", recorded.path);
        let error = json!({"error": {"message": message, "type": "not_found", "code": 404}, "path": recorded.path});
        return Ok(json_response(StatusCode::NOT_FOUND, &error));
    };
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    Ok(answer(reply, &api, &recorded.body, id).await)
}

async fn answer(mut reply: Reply, api: &Api, body: &Value, id: u64) -> Response<Full<Bytes>> {
    loop {
        match reply {
            Reply::Delay(delay, next) => {
                tokio::time::sleep(delay).await;
                reply = *next;
            }
            Reply::Hang => std::future::pending::<()>().await,
            Reply::Echo | Reply::Compute(_) if matches!(api, Api::Rerank) => return reranked(&reply, body),
            Reply::Text(text) => return success(api, body, id, &text, true),
            Reply::TextNoUsage(text) => return success(api, body, id, &text, false),
            Reply::Echo => return success(api, body, id, &echo(body), true),
            Reply::Compute(script) => return success(api, body, id, &(script.0)(&Prompt::of(body).all()), true),
            Reply::Raw(raw) => return response(StatusCode::OK, raw),
            Reply::RawStatus(code, raw) => {
                return response(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), raw);
            }
            Reply::Status(code) => return failure(api, code),
        }
    }
}

fn success(api: &Api, body: &Value, id: u64, text: &str, usage: bool) -> Response<Full<Bytes>> {
    let (prompt, completion) = if usage { (USAGE_PROMPT, USAGE_COMPLETION) } else { (0, 0) };
    let value = match api {
        // A reranker's text reply is its whole answer.
        Api::Rerank => return response(StatusCode::OK, text.to_owned()),
        Api::OpenAi => {
            let mut value = json!({
                "id": format!("chatcmpl-stub-{id}"),
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model").cloned().unwrap_or(Value::Null),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            });
            if usage {
                value["usage"] = json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
            }
            value
        }
        Api::Bedrock => json!({
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": prompt, "outputTokens": completion, "totalTokens": prompt + completion},
            "metrics": {"latencyMs": 1},
        }),
    };
    json_response(StatusCode::OK, &value)
}

fn failure(api: &Api, code: u16) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let message = format!("stub error {code}");
    match api {
        Api::OpenAi | Api::Rerank => {
            let mut response =
                json_response(status, &json!({"error": {"message": message, "type": "server_error", "code": code}}));
            if code == 429 {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            response
        }
        Api::Bedrock => {
            let kind = match code {
                429 => "ThrottlingException",
                400 => "ValidationException",
                _ => "InternalServerException",
            };
            let mut response = json_response(status, &json!({ "message": message }));
            response.headers_mut().insert("x-amzn-errortype", HeaderValue::from_static(kind));
            response
        }
    }
}

/// A rerank answer to `body` (`query`, `documents`): every document scored
/// by [`overlap`] ([`Reply::Echo`]) or by the script ([`Reply::Compute`]),
/// best first, as servers sort them.
fn reranked(reply: &Reply, body: &Value) -> Response<Full<Bytes>> {
    let query = body.get("query").and_then(Value::as_str).unwrap_or_default();
    let documents: Vec<&str> =
        body.get("documents").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let mut results: Vec<(usize, f64)> = documents
        .iter()
        .enumerate()
        .map(|(index, document)| {
            let score = match reply {
                Reply::Compute(script) => (script.0)(&format!("{query}\n{document}")).trim().parse().unwrap_or(0.0),
                _ => overlap(query, document),
            };
            (index, score)
        })
        .collect();
    results.sort_by(|a, b| b.1.total_cmp(&a.1));
    let results: Vec<Value> =
        results.into_iter().map(|(index, score)| json!({"index": index, "relevance_score": score})).collect();
    json_response(StatusCode::OK, &json!({"id": "rerank-stub", "results": results}))
}

/// The share of `query`'s words (lowercase; runs of letters or digits of
/// three or more, and every CJK character) that `document` holds, in
/// `[0, 1]`: a deterministic stand-in for a reranker's relevance.
#[must_use]
pub fn overlap(query: &str, document: &str) -> f64 {
    fn words(text: &str) -> Vec<String> {
        let lower = text.to_lowercase();
        let mut out: Vec<String> = lower
            .split(|c: char| !c.is_alphanumeric() || is_cjk(c))
            .filter(|w| w.chars().count() >= 3)
            .map(str::to_owned)
            .collect();
        out.extend(lower.chars().filter(|c| is_cjk(*c)).map(String::from));
        out.sort();
        out.dedup();
        out
    }
    fn is_cjk(c: char) -> bool {
        matches!(c, '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{9fff}' | '\u{ac00}'..='\u{d7af}')
    }
    let asked = words(query);
    if asked.is_empty() {
        return 0.0;
    }
    let held = words(document);
    asked.iter().filter(|w| held.binary_search(w).is_ok()).count() as f64 / asked.len() as f64
}

fn json_response(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    response(status, value.to_string())
}

fn response(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The messages of a request, in either wire format.
struct Prompt {
    /// System text: Bedrock's `system[]`, OpenAI's system/developer messages.
    system: Vec<String>,
    /// The other messages: (role, text).
    turns: Vec<(String, String)>,
}

impl Prompt {
    fn of(body: &Value) -> Self {
        let mut system = Vec::new();
        match body.get("system") {
            Some(Value::String(s)) => system.push(s.clone()),
            Some(Value::Array(blocks)) => system.extend(blocks.iter().filter_map(block_text).map(str::to_owned)),
            _ => {}
        }
        let mut turns = Vec::new();
        for message in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
            let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
            let text = match message.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts.iter().filter_map(block_text).collect::<Vec<_>>().join("\n"),
                _ => continue,
            };
            if role == "system" || role == "developer" {
                system.push(text);
            } else {
                turns.push((role.to_owned(), text));
            }
        }
        Self { system, turns }
    }

    fn all(&self) -> String {
        self.system.iter().chain(self.turns.iter().map(|(_, text)| text)).cloned().collect::<Vec<_>>().join("\n")
    }

    fn user(&self) -> String {
        self.turns.iter().filter(|(role, _)| role == "user").map(|(_, t)| t.as_str()).collect::<Vec<_>>().join("\n")
    }

    fn last_user(&self) -> &str {
        self.turns.iter().rev().find(|(role, _)| role == "user").map_or("", |(_, text)| text)
    }
}

/// The `text` of a content block / part (`{"text": …}`, any `type`).
fn block_text(block: &Value) -> Option<&str> {
    block.get("text").and_then(Value::as_str)
}

/// The answer [`Reply::Echo`] gives to a request body (either wire format).
///
/// - The system text (or, without one, the whole prompt) contains
///   [`REWRITE_MARKER`]: one bullet `- <summary> (source: <uri>)` per
///   `<memory>` element of the user text, in order, at most N (`at most N
///   bullets` in the prompt, else 6). The summary is the element body's first
///   non-empty line that is not a markdown heading (else the first heading
///   without its `#`s), entity-decoded, cut to 160 characters; `see <uri>`
///   for a self-closing element. Without elements: [`NO_RELEVANT_MEMORY`].
/// - It contains [`EXPAND_MARKER`]: JSON with one memory query, the last
///   user-text line starting with `[user]: ` (after the prefix, trimmed, cut
///   to 100 characters); no queries when there is no such line.
/// - Otherwise `echo: ` and the first 200 characters of the last user message.
#[must_use]
pub fn echo(body: &Value) -> String {
    let prompt = Prompt::of(body);
    let instructions = if prompt.system.is_empty() { prompt.all() } else { prompt.system.join("\n") };
    if instructions.contains(REWRITE_MARKER) {
        rewrite(&prompt.user(), &instructions)
    } else if instructions.contains(EXPAND_MARKER) {
        expand(&prompt.user())
    } else if instructions.contains(EXTRACT_MARKER) {
        extract(&prompt.user())
    } else if instructions.contains(RECONCILE_MARKER) {
        reconcile(&prompt.user())
    } else {
        format!("echo: {}", cut(prompt.last_user(), ECHO_CHARS))
    }
}

/// The echo of an extraction prompt: one `entities` memory per user line
/// of the transcript (`[n] (time) user: text`), named by its first three
/// words, saying what the user said, sourced to that line.
fn extract(user: &str) -> String {
    let memories: Vec<Value> = user
        .lines()
        .filter_map(|line| {
            let (number, rest) = line.strip_prefix('[')?.split_once(']')?;
            let number: u64 = number.parse().ok()?;
            let (_, text) = rest.split_once(" user: ")?;
            let name: Vec<&str> = text.split_whitespace().take(3).collect();
            Some(json!({
                "category": "entities",
                "name": name.join(" "),
                "content": format!("The user said: {}", cut(text.trim(), SUMMARY_CHARS)),
                "sources": [number],
            }))
        })
        .collect();
    json!({ "memories": memories }).to_string()
}

/// The echo of a comparison prompt: every new memory added.
fn reconcile(user: &str) -> String {
    let count = user.lines().filter(|l| l.starts_with("[N")).count();
    let actions: Vec<Value> = (1..=count).map(|n| json!({ "new": n, "action": "add" })).collect();
    json!({ "actions": actions }).to_string()
}

fn rewrite(user: &str, instructions: &str) -> String {
    let limit = bullet_limit(user).or_else(|| bullet_limit(instructions)).unwrap_or(DEFAULT_BULLETS);
    let elements = memory_elements(user);
    if elements.is_empty() {
        return NO_RELEVANT_MEMORY.to_owned();
    }
    let bullets: Vec<String> = elements
        .iter()
        .take(limit)
        .map(|(uri, body)| {
            let summary =
                body.as_deref().map(summary).filter(|s| !s.is_empty()).unwrap_or_else(|| format!("see {uri}"));
            format!("- {summary} (source: {uri})")
        })
        .collect();
    bullets.join("\n")
}

/// N of the first `at most N bullet(s)` in `text`.
fn bullet_limit(text: &str) -> Option<usize> {
    const PHRASE: &str = "at most ";
    let mut rest = text;
    while let Some(at) = rest.find(PHRASE) {
        rest = &rest[at + PHRASE.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0
            && rest[digits..].trim_start().starts_with("bullet")
            && let Ok(n) = rest[..digits].parse()
        {
            return Some(n);
        }
    }
    None
}

/// Every `<memory …>` element of `text`: its decoded `uri` attribute and,
/// unless self-closing, its raw (still escaped) body.
fn memory_elements(text: &str) -> Vec<(String, Option<String>)> {
    const OPEN: &str = "<memory";
    const CLOSE: &str = "</memory>";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        rest = &rest[at + OPEN.len()..];
        if !rest.starts_with(|c: char| c.is_whitespace() || c == '/' || c == '>') {
            continue;
        }
        let Some((attributes, self_closing, after)) = split_tag(rest) else { break };
        let uri = decode_entities(&attribute(attributes, "uri").unwrap_or_default());
        if self_closing {
            out.push((uri, None));
            rest = after;
        } else {
            let end = after.find(CLOSE).unwrap_or(after.len());
            out.push((uri, Some(after[..end].to_owned())));
            rest = after.get(end + CLOSE.len()..).unwrap_or_default();
        }
    }
    out
}

/// Splits `rest` (just after the element name) at the tag's closing `>`
/// outside quotes: (attribute text, self-closing, text after the tag).
fn split_tag(rest: &str) -> Option<(&str, bool, &str)> {
    let mut quote = None;
    for (i, c) in rest.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '>') => {
                let attributes = rest[..i].trim_end();
                let self_closing = attributes.ends_with('/');
                let attributes = attributes.strip_suffix('/').unwrap_or(attributes);
                return Some((attributes, self_closing, &rest[i + 1..]));
            }
            (None, _) => {}
        }
    }
    None
}

/// The raw value of attribute `name` in `attributes` (`a="1" b='2'`).
fn attribute(attributes: &str, name: &str) -> Option<String> {
    let mut rest = attributes;
    loop {
        rest = rest.trim_start();
        let eq = rest.find('=')?;
        let key = rest[..eq].trim();
        let value = rest[eq + 1..].trim_start();
        let quote = value.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let value = &value[1..];
        let end = value.find(quote)?;
        if key == name {
            return Some(value[..end].to_owned());
        }
        rest = &value[end + 1..];
    }
}

/// The summary of an escaped element body.
fn summary(body: &str) -> String {
    let decoded = decode_entities(body);
    let lines: Vec<&str> = decoded.split('\n').map(str::trim).filter(|l| !l.is_empty()).collect();
    let line = match lines.iter().find(|l| !is_heading(l)) {
        Some(line) => (*line).to_owned(),
        None => lines.first().map(|l| l.trim_start_matches('#').trim().to_owned()).unwrap_or_default(),
    };
    cut(&line, SUMMARY_CHARS)
}

/// A markdown ATX heading: 1–6 `#`, then a space or nothing.
fn is_heading(line: &str) -> bool {
    let text = line.trim_start_matches('#');
    let level = line.len() - text.len();
    (1..=6).contains(&level) && (text.is_empty() || text.starts_with([' ', '\t']))
}

/// `text` with the five XML entities and numeric references decoded;
/// anything else (an unknown or malformed reference) is kept as is.
fn decode_entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let decoded = rest.find(';').filter(|end| *end <= 10).and_then(|end| {
            let c = match &rest[1..end] {
                "lt" => '<',
                "gt" => '>',
                "amp" => '&',
                "quot" => '"',
                "apos" => '\'',
                name => {
                    let number = name.strip_prefix('#')?;
                    let code = match number.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                        None => number.parse().ok()?,
                    };
                    char::from_u32(code)?
                }
            };
            Some((c, end))
        });
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn expand(user: &str) -> String {
    const PREFIX: &str = "[user]: ";
    let latest = user.lines().rev().find_map(|line| line.trim_start().strip_prefix(PREFIX));
    let value = match latest {
        Some(text) => json!({
            "reasoning": "echo of the latest user message",
            "queries": [{
                "query": cut(text.trim(), QUERY_CHARS),
                "context_type": "memory",
                "intent": "recent context",
                "priority": 2,
            }],
        }),
        None => json!({"reasoning": "no session context", "queries": []}),
    };
    value.to_string()
}

/// The first `n` characters of `text`.
fn cut(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_entities_and_keeps_stray_ampersands() {
        assert_eq!(
            decode_entities("a &lt;b&gt; &amp;&quot;&apos; &#13;&#x41; & x &bogus; &"),
            "a <b> &\"' \rA & x &bogus; &"
        );
    }

    #[test]
    fn parses_attributes_and_tags() {
        let (attributes, self_closing, after) = split_tag(r#" uri="a>b" type='t' />tail"#).expect("a tag");
        assert!(self_closing);
        assert_eq!(after, "tail");
        assert_eq!(attribute(attributes, "uri").as_deref(), Some("a>b"));
        assert_eq!(attribute(attributes, "type").as_deref(), Some("t"));
        assert_eq!(attribute(attributes, "score"), None);
    }

    #[test]
    fn summaries_skip_headings() {
        assert_eq!(summary("\n# Title\n\n## Sub\nFirst &amp; line\nsecond\n"), "First & line");
        assert_eq!(summary("\n# Only heading\n"), "Only heading");
        assert_eq!(summary("#hashtag is text"), "#hashtag is text");
        assert_eq!(bullet_limit("Answer with at most 12 bullets."), Some(12));
        assert_eq!(bullet_limit("at most once; at most 3 bullet points"), Some(3));
    }

    #[test]
    fn routes() {
        assert!(matches!(route("/v1/chat/completions"), Some(Api::OpenAi)));
        assert!(matches!(route("/model/a%3A0/converse"), Some(Api::Bedrock)));
        assert!(route("/model//converse").is_none());
        assert!(route("/v1/embeddings").is_none());
    }
}
