//! The MCP endpoint (`POST /mcp`, `skald_mcp::handle`) end to end through
//! the Lambda edge, as the `mcp` function serves it: the handshake of each
//! protocol revision (2025-06-18, 2025-11-25, 2026-07-28) without server
//! sessions, the tool list (a snapshot, and portable schemas), each tool's
//! mapping onto its REST route (the same request sent to REST must give
//! the same text), REST errors as `isError` results, identity and the
//! deadline as REST's, and the transport's refusals.
//!
//! `SKALD_UPDATE_MCP=1 cargo test -p skald-tests --test it mcp_tools::` rewrites
//! the tool-list snapshot (`tests/fixtures/mcp/tools.json`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lambda_http::{Body, RequestExt as _};
use serde_json::{Value, json};
use skald::app::App;
use skald_tests::fixture::{
    BOOTSTRAP_PATH, CONTEXT_CORPUS, DEFAULT_CORPUS, FIND_PATH, Handler, RECALL_PATH, SEARCH_PATH, TempDirs,
    app_with_config, app_with_corpus, call, with_jwt_claims,
};
use skald_tests::model_server::{ModelServer, REWRITE_MARKER, Reply as ModelReply};

const V_2025_06: &str = "2025-06-18";
const V_2025_11: &str = "2025-11-25";
const V_2026: &str = "2026-07-28";
const ACCEPT: &str = "application/json, text/event-stream";
const UPDATE: &str = "SKALD_UPDATE_MCP";

// ---------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------

/// An HTTP answer of `/mcp`.
#[derive(Debug)]
struct Http {
    status: u16,
    headers: http::HeaderMap,
    text: String,
}

impl Http {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The JSON-RPC `result` of a 200.
    fn result(&self) -> Value {
        assert_eq!(self.status, 200, "{}", self.text);
        assert_eq!(self.header("content-type"), Some("application/json"), "{}", self.text);
        let json = self.json();
        assert!(json.get("error").is_none(), "{}", self.text);
        json["result"].clone()
    }
}

/// A Lambda event to `/mcp` (any host, as behind API Gateway).
fn event(method: &str, headers: &[(&str, &str)], body: Option<&Value>) -> lambda_http::Request {
    let mut builder = lambda_http::http::Request::builder().method(method).uri("https://mcp.example.com/mcp");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(body.map_or(Body::Empty, |b| Body::Text(b.to_string()))).expect("a valid request")
}

/// Runs `event` through the Lambda edge into the MCP handler.
async fn send(app: &Arc<App>, event: lambda_http::Request) -> Http {
    let handler = |app: Arc<App>, request| async move { skald_mcp::handle(&app, request).await };
    let response = skald_lambda::serve(app, &handler, event).await;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = match response.into_body() {
        Body::Text(text) => text,
        Body::Binary(bytes) => String::from_utf8(bytes).expect("UTF-8"),
        _ => String::new(),
    };
    Http { status, headers, text }
}

/// A JSON-RPC request `method` with `params` in protocol `version`: the
/// version header (not on `initialize`), and for 2026-07-28 the request's
/// own `_meta` and the `Mcp-Method` / `Mcp-Name` headers.
fn rpc_event(version: &str, method: &str, params: &Value, extra: &[(&str, &str)]) -> lambda_http::Request {
    let mut params = params.clone();
    let name = params["name"].as_str().map(str::to_owned);
    let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json"), ("accept", ACCEPT)];
    if method != "initialize" {
        headers.push(("mcp-protocol-version", version));
    }
    if version == V_2026 {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": V_2026,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "skald-tests", "version": "1"},
        });
        headers.push(("mcp-method", method));
    }
    if let (true, Some(name)) = (version == V_2026, name.as_deref()) {
        headers.push(("mcp-name", name));
        headers.extend_from_slice(extra);
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        return event("POST", &headers, Some(&body));
    }
    headers.extend_from_slice(extra);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    event("POST", &headers, Some(&body))
}

async fn rpc(app: &Arc<App>, version: &str, method: &str, params: &Value) -> Http {
    send(app, rpc_event(version, method, params, &[])).await
}

fn initialize_params(version: &str) -> Value {
    json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "skald-tests", "version": "1"}})
}

/// A tool call's outcome: `isError` and the text of its one content block.
#[derive(Debug)]
struct Outcome {
    is_error: bool,
    text: String,
}

fn outcome(http: &Http) -> Outcome {
    let result = http.result();
    let content = result["content"].as_array().unwrap_or_else(|| panic!("no content: {}", http.text));
    assert_eq!(content.len(), 1, "{}", http.text);
    assert_eq!(content[0]["type"], "text", "{}", http.text);
    let text = content[0]["text"].as_str().unwrap_or_default().to_owned();
    Outcome { is_error: result["isError"].as_bool().unwrap_or(false), text }
}

/// Calls tool `name` (protocol 2025-06-18) with `arguments` and `headers`.
async fn tool_with(app: &Arc<App>, name: &str, arguments: &Value, headers: &[(&str, &str)]) -> Outcome {
    let params = json!({"name": name, "arguments": arguments});
    outcome(&send(app, rpc_event(V_2025_06, "tools/call", &params, headers)).await)
}

/// Calls tool `name` as the default dev caller.
async fn tool(app: &Arc<App>, name: &str, arguments: &Value) -> Outcome {
    tool_with(app, name, arguments, &[]).await
}

/// The text of a successful call.
async fn text(app: &Arc<App>, name: &str, arguments: &Value) -> String {
    let out = tool(app, name, arguments).await;
    assert!(!out.is_error, "{name} {arguments}: {}", out.text);
    out.text
}

/// The message of a failed call.
async fn error(app: &Arc<App>, name: &str, arguments: &Value) -> String {
    let out = tool(app, name, arguments).await;
    assert!(out.is_error, "{name} {arguments} did not fail: {}", out.text);
    out.text
}

/// REST's `result` for `body` posted to `path` as the default dev caller.
async fn rest(app: &Arc<App>, handler: Handler, path: &str, body: &Value) -> Value {
    let reply = call(app, handler, "POST", path, &[], Some(body)).await;
    assert_eq!(reply.status, 200, "{path} {body}: {}", reply.text);
    reply.json["result"].clone()
}

/// REST's `result` for `GET target` (content routes).
async fn rest_get(app: &Arc<App>, target: &str) -> Value {
    let reply = call(app, Handler::Content, "GET", target, &[], None).await;
    assert_eq!(reply.status, 200, "{target}: {}", reply.text);
    reply.json["result"].clone()
}

/// Every hit URI of a find result, in the tool's order.
fn hit_uris(result: &Value) -> Vec<String> {
    ["memories", "resources", "skills"]
        .iter()
        .flat_map(|k| result[*k].as_array().cloned().unwrap_or_default())
        .map(|hit| hit["uri"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The URIs a `find`-style text lists (`- [type NN%] uri`).
fn listed_uris(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("- ["))
        .filter_map(|l| l.split_once("] ").map(|(_, uri)| uri.to_owned()))
        .collect()
}

async fn default_app() -> (Arc<App>, TempDirs) {
    app_with_corpus(DEFAULT_CORPUS, true).await
}

async fn context_app() -> (Arc<App>, TempDirs) {
    app_with_corpus(CONTEXT_CORPUS, true).await
}

const QUERY: &str = "kubernetes cluster upgrade";

// ---------------------------------------------------------------------------
// Handshake and listing.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn initialize_answers_each_protocol_version_without_a_session() {
    let (app, _dirs) = default_app().await;
    for version in [V_2025_06, V_2025_11] {
        let http = rpc(&app, version, "initialize", &initialize_params(version)).await;
        let result = http.result();
        assert_eq!(result["protocolVersion"], version, "{}", http.text);
        assert_eq!(result["serverInfo"]["name"], "skald", "{}", http.text);
        assert!(result["capabilities"]["tools"].is_object(), "{}", http.text);
        assert!(result["instructions"].as_str().is_some_and(|i| i.contains("bootstrap")), "{}", http.text);
        assert!(http.header("mcp-session-id").is_none(), "stateless: no session id ({:?})", http.headers);
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let headers = [("content-type", "application/json"), ("accept", ACCEPT), ("mcp-protocol-version", version)];
        let http = send(&app, event("POST", &headers, Some(&note))).await;
        assert_eq!((http.status, http.text.as_str()), (202, ""), "{version}");
        assert_eq!(rpc(&app, version, "ping", &json!({})).await.result(), json!({}), "{version}");
    }
    // 2026-07-28 has no handshake: discovery names the revisions served, and
    // requests carry their own version.
    let http = rpc(&app, V_2026, "server/discover", &json!({})).await;
    let result = http.result();
    let versions: Vec<&str> =
        result["supportedVersions"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert_eq!(versions, [V_2025_06, V_2025_11, V_2026], "{}", http.text);
    assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "skald", "{}", http.text);
    let tools = rpc(&app, V_2026, "tools/list", &json!({})).await.result();
    assert_eq!(tools["tools"].as_array().map(Vec::len), Some(17), "{tools}");
    // An `initialize` naming a revision without one (or one not served)
    // gets the newest served revision that has it.
    for asked in [V_2026, "2024-11-05"] {
        let result = rpc(&app, asked, "initialize", &initialize_params(asked)).await.result();
        assert_eq!(result["protocolVersion"], V_2025_11, "asked {asked}: {result}");
    }
}

fn snapshot_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/tools.json")
}

#[tokio::test]
async fn the_tool_list_matches_its_snapshot_in_every_revision() {
    let (app, _dirs) = default_app().await;
    let listed = rpc(&app, V_2025_06, "tools/list", &json!({})).await.result()["tools"].clone();
    let names: Vec<&str> = listed.as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "find",
            "search",
            "recall",
            "bootstrap",
            "read",
            "list",
            "tree",
            "health",
            "remember",
            "write",
            "edit",
            "grep",
            "glob",
            "forget",
            "add_resource",
            "list_watches",
            "cancel_watch"
        ]
    );
    for version in [V_2025_11, V_2026] {
        let other = rpc(&app, version, "tools/list", &json!({})).await.result()["tools"].clone();
        assert_eq!(other, listed, "{version}");
    }
    let pretty = serde_json::to_string_pretty(&listed).expect("serialisable") + "\n";
    let path = snapshot_path();
    if std::env::var(UPDATE).is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the fixture directory");
        std::fs::write(&path, &pretty).expect("write the snapshot");
    }
    let saved = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} cannot be read ({e}); create it with `{UPDATE}=1 cargo test -p skald-tests --test it mcp_tools::`",
            path.display()
        )
    });
    assert_eq!(pretty, saved, "the tool list changed; review it and rerun with {UPDATE}=1");
}

/// Where `schema` (at `path`) is not portable: `anyOf`/`oneOf`/`allOf`/
/// `$ref`/`$defs`/`definitions`/`$schema`/`format`, a node without one
/// string `type`, a `null` default, a property without a description, an
/// array without typed `items`.
fn portability_problems(schema: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(node) = schema.as_object() else {
        problems.push(format!("{path}: not an object"));
        return;
    };
    for key in ["anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "$schema", "format", "not"] {
        if node.contains_key(key) {
            problems.push(format!("{path}: has {key}"));
        }
    }
    let kind = node.get("type").and_then(Value::as_str);
    if kind.is_none() {
        problems.push(format!("{path}: no single string type ({:?})", node.get("type")));
    }
    if node.get("default").is_some_and(Value::is_null) {
        problems.push(format!("{path}: null default"));
    }
    if let Some(properties) = node.get("properties") {
        for (name, property) in properties.as_object().into_iter().flatten() {
            let at = format!("{path}.{name}");
            if property["description"].as_str().is_none_or(|d| d.trim().is_empty()) {
                problems.push(format!("{at}: no description"));
            }
            portability_problems(property, &at, problems);
        }
    }
    if kind == Some("array") {
        match node.get("items") {
            Some(items) => portability_problems(items, &format!("{path}[]"), problems),
            None => problems.push(format!("{path}: an array without items")),
        }
    }
    if let Some(extra) = node.get("additionalProperties").filter(|v| v.is_object()) {
        portability_problems(extra, &format!("{path}{{*}}"), problems);
    }
}

#[tokio::test]
async fn every_input_schema_is_portable() {
    // The walker itself catches what it must.
    let mut problems = Vec::new();
    let bad = json!({"type": "object", "properties": {
        "a": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "x"},
        "b": {"type": ["number", "null"], "default": null},
        "c": {"type": "array", "description": "y"},
        "d": {"type": "integer", "format": "uint32", "description": "z"},
    }});
    portability_problems(&bad, "bad", &mut problems);
    assert_eq!(problems.len(), 7, "{problems:#?}");

    let (app, _dirs) = default_app().await;
    let listed = rpc(&app, V_2025_06, "tools/list", &json!({})).await.result();
    let mut problems = Vec::new();
    for tool in listed["tools"].as_array().expect("tools") {
        let name = tool["name"].as_str().unwrap_or("?");
        assert!(tool["description"].as_str().is_some_and(|d| d.len() > 20), "{name}: {tool}");
        assert_eq!(tool["inputSchema"]["type"], "object", "{name}");
        portability_problems(&tool["inputSchema"], name, &mut problems);
        for required in tool["inputSchema"]["required"].as_array().into_iter().flatten() {
            let required = required.as_str().unwrap_or_default();
            assert!(tool["inputSchema"]["properties"].get(required).is_some(), "{name}: required {required}");
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

// ---------------------------------------------------------------------------
// Each tool's mapping: the same request sent to REST gives the same text.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn find_maps_min_score_and_takes_target_uri_as_a_string_or_a_list() {
    let (app, _dirs) = default_app().await;
    let query = "search service ranking";
    // The reference's format, over exactly REST's hits at min_score 0.35.
    let out = text(&app, "find", &json!({"query": query, "limit": 4})).await;
    let expected =
        rest(&app, Handler::Find, FIND_PATH, &json!({"query": query, "limit": 4, "score_threshold": 0.35})).await;
    let uris = hit_uris(&expected);
    assert!(!uris.is_empty());
    assert!(out.starts_with(&format!("Found {} item(s):\n\n- [", uris.len())), "{out}");
    assert!(out.ends_with("\n\nUse the read tool to expand a URI."), "{out}");
    assert_eq!(listed_uris(&out), uris, "{out}");
    let first = &expected["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(expected["memories"].as_array().into_iter().flatten())
        .next()
        .cloned()
        .unwrap_or_default();
    assert!(out.contains(first["abstract"].as_str().unwrap_or("?")), "{out}");

    // min_score maps to score_threshold: a high one leaves nothing.
    let none = text(&app, "find", &json!({"query": query, "min_score": 0.999})).await;
    assert_eq!(none, "No matching context found.");
    // The 0.35 default is sent (REST alone has none). With the hashed test
    // embedder this nonsense query scores one fixture file under 0.35.
    let weak = "xqxxqx";
    let all = text(&app, "find", &json!({"query": weak, "limit": 50})).await;
    let loose = rest(&app, Handler::Find, FIND_PATH, &json!({"query": weak, "limit": 50})).await;
    let strict =
        rest(&app, Handler::Find, FIND_PATH, &json!({"query": weak, "limit": 50, "score_threshold": 0.35})).await;
    assert_eq!(listed_uris(&all), hit_uris(&strict));
    assert!(
        hit_uris(&loose).len() > hit_uris(&strict).len(),
        "REST alone must keep weaker hits for this to mean anything"
    );

    // target_uri: a plain string and a one-element list are the same search.
    let target = "viking://resources/search";
    let as_string = text(&app, "find", &json!({"query": query, "target_uri": target})).await;
    let as_list = text(&app, "find", &json!({"query": query, "target_uri": [target]})).await;
    assert_eq!(as_string, as_list);
    let listed = listed_uris(&as_string);
    assert!(!listed.is_empty() && listed.iter().all(|u| u.starts_with(target)), "{as_string}");
    // Two targets search both.
    let both =
        text(&app, "find", &json!({"query": query, "target_uri": [target, "viking://resources/infra"], "limit": 10}))
            .await;
    let both = listed_uris(&both);
    assert!(both.iter().any(|u| u.starts_with("viking://resources/infra")), "{both:?}");
    assert!(both.iter().all(|u| u.starts_with(target) || u.starts_with("viking://resources/infra")), "{both:?}");
    // context_type and level pass through.
    let memories =
        listed_uris(&text(&app, "find", &json!({"query": query, "context_type": "memory", "level": [2]})).await);
    assert!(!memories.is_empty() && memories.iter().all(|u| u.contains("/memories/")), "{memories:?}");
    // read_content adds each hit's text.
    let with_content = text(
        &app,
        "find",
        &json!({"query": query, "target_uri": "viking://resources/search/ranking.md", "read_content": true}),
    )
    .await;
    assert!(
        with_content.contains("    content:\n") && with_content.contains("How the search service ranks"),
        "{with_content}"
    );
}

#[tokio::test]
async fn search_list_mode_is_find_and_refuses_context_only_fields() {
    let (app, _dirs) = default_app().await;
    let query = "search service ranking";
    let searched = text(&app, "search", &json!({"query": query, "limit": 4})).await;
    assert_eq!(searched, text(&app, "find", &json!({"query": query, "limit": 4})).await);
    // A host that fills in every documented default is not refused.
    let defaults = json!({"query": query, "limit": 4, "mode": "list", "max_tokens": 1600, "detail": "auto",
        "rewrite": "off", "dedup_turns": 0, "peer_scope": "all", "query_expansion": "auto", "rewrite_max_bullets": 6,
        "exclude_uris": [], "detail_by_category": {}});
    assert_eq!(text(&app, "search", &defaults).await, searched);
    // Any other context-only value is REST's 400.
    let message = error(&app, "search", &json!({"query": query, "max_tokens": 800})).await;
    assert!(message.starts_with("INVALID_ARGUMENT: Invalid arguments: max_tokens: "), "{message}");
    assert!(message.contains("require mode='context'"), "{message}");
    let message = error(&app, "search", &json!({"query": query, "other_peer_penalties": {"events": 0.5}})).await;
    assert!(message.contains("other_peer_penalties: ") && message.contains("mode='context'"), "{message}");
    // min_score: list mode defaults to 0.35, context mode to REST's own
    // default (0.1). This nonsense query scores one fixture file under 0.35.
    let weak = "xqxxqx";
    let strict =
        rest(&app, Handler::Find, FIND_PATH, &json!({"query": weak, "limit": 50, "score_threshold": 0.35})).await;
    let loose = rest(&app, Handler::Find, FIND_PATH, &json!({"query": weak, "limit": 50})).await;
    assert!(hit_uris(&loose).len() > hit_uris(&strict).len());
    assert_eq!(listed_uris(&text(&app, "search", &json!({"query": weak, "limit": 50})).await), hit_uris(&strict));
    let context = |extra: Value| {
        let mut body = json!({"query": weak, "mode": "context", "max_tokens": 8000, "limit": 50});
        body.as_object_mut().expect("an object").extend(extra.as_object().cloned().unwrap_or_default());
        body
    };
    let by_default = rest(&app, Handler::Search, SEARCH_PATH, &context(json!({}))).await;
    let at_035 = rest(&app, Handler::Search, SEARCH_PATH, &context(json!({"score_threshold": 0.35}))).await;
    assert_ne!(by_default["rendered"], at_035["rendered"]);
    assert_eq!(text(&app, "search", &context(json!({}))).await, by_default["rendered"].as_str().expect("rendered"));
    let message = error(&app, "search", &json!({"query": query, "mode": "bootstrap"})).await;
    assert!(message.contains("mode: Input should be 'list' or 'context'"), "{message}");
}

#[tokio::test]
async fn search_context_mode_maps_detail_by_category_and_penalties() {
    let (app, _dirs) = context_app().await;
    let pinned =
        json!({"events": "abstract", "entities": "abstract", "preferences": "abstract", "experiences": "abstract"});
    let out = text(&app, "search", &json!({"query": QUERY, "mode": "context", "detail_by_category": pinned})).await;
    let by_rest =
        rest(&app, Handler::Search, SEARCH_PATH, &json!({"query": QUERY, "mode": "context", "detail": pinned})).await;
    let auto = rest(&app, Handler::Search, SEARCH_PATH, &json!({"query": QUERY, "mode": "context"})).await;
    assert_eq!(out, by_rest["rendered"].as_str().expect("rendered"));
    assert_ne!(by_rest["rendered"], auto["rendered"], "the pins must change the block for this test to mean anything");
    assert!(out.starts_with('<'), "{out}");
    // detail as a string, and the default.
    let plain = text(&app, "search", &json!({"query": QUERY, "mode": "context", "detail": "abstract"})).await;
    let by_rest =
        rest(&app, Handler::Search, SEARCH_PATH, &json!({"query": QUERY, "mode": "context", "detail": "abstract"}))
            .await;
    assert_eq!(plain, by_rest["rendered"].as_str().expect("rendered"));
    assert_eq!(
        text(&app, "search", &json!({"query": QUERY, "mode": "context"})).await,
        auto["rendered"].as_str().expect("rendered")
    );
    // Both forms at once are refused, as the reference.
    let message = error(
        &app,
        "search",
        &json!({"query": QUERY, "mode": "context", "detail": "full", "detail_by_category": pinned}),
    )
    .await;
    assert!(message.starts_with("INVALID_ARGUMENT: ") && message.contains("not both"), "{message}");
    let message = error(
        &app,
        "search",
        &json!({"query": QUERY, "mode": "context", "other_peer_penalty": 0.5, "other_peer_penalties": {"events": 0.1}}),
    )
    .await;
    assert!(message.contains("not both"), "{message}");
    // A bad tier inside detail_by_category is named by the argument.
    let message = error(
        &app,
        "search",
        &json!({"query": QUERY, "mode": "context", "detail_by_category": {"events": "everything"}}),
    )
    .await;
    assert!(message.contains("detail_by_category.events: "), "{message}");
    // other_peer_penalties is the per-category object of other_peer_penalty.
    let penalties = json!({"events": 1.0, "entities": 1.0, "preferences": 1.0, "experiences": 1.0, "memories": 1.0});
    let out = text(
        &app,
        "search",
        &json!({"query": QUERY, "mode": "context", "other_peer_penalties": penalties, "quotas": {"events": 4}}),
    )
    .await;
    let by_rest = rest(
        &app,
        Handler::Search,
        SEARCH_PATH,
        &json!({"query": QUERY, "mode": "context", "other_peer_penalty": penalties, "quotas": {"events": 4}}),
    )
    .await;
    let unpenalised =
        rest(&app, Handler::Search, SEARCH_PATH, &json!({"query": QUERY, "mode": "context", "quotas": {"events": 4}}))
            .await;
    assert_eq!(out, by_rest["rendered"].as_str().expect("rendered"));
    assert_ne!(by_rest["rendered"], unpenalised["rendered"], "the penalty must drop peer p1's event");
    // Context mode takes no target_uri (REST's rule).
    let message =
        error(&app, "search", &json!({"query": QUERY, "mode": "context", "target_uri": "viking://resources"})).await;
    assert!(message.contains("target_uri: ") && message.contains("mode='context'"), "{message}");
    // Nothing relevant: the reference's sentence.
    let none = text(&app, "search", &json!({"query": QUERY, "mode": "context", "min_score": 0.999})).await;
    assert_eq!(none, "No matching context found.");
}

#[tokio::test]
async fn search_rewrite_auto_forces_the_digest_as_the_reference_tool_does() {
    let server = ModelServer::start().await;
    let (app, _dirs) = app_with_config(CONTEXT_CORPUS, |config| {
        config.llm = Some(server.openai_model("stub"));
    })
    .await;
    // REST's "auto" digests only with a dedicated planner (none here); the
    // tool's "auto" is REST's `true`.
    let rest_auto =
        rest(&app, Handler::Search, SEARCH_PATH, &json!({"query": QUERY, "mode": "context", "rewrite": "auto"})).await;
    assert_eq!(rest_auto["digest"], "", "{rest_auto}");
    let forced =
        rest(&app, Handler::Search, SEARCH_PATH, &json!({"query": QUERY, "mode": "context", "rewrite": true})).await;
    let digest = forced["digest"].as_str().expect("a digest");
    assert!(digest.contains("\n- "), "{forced}");
    let out = text(&app, "search", &json!({"query": QUERY, "mode": "context", "rewrite": "auto"})).await;
    assert_eq!(out, digest);
    let off = text(&app, "search", &json!({"query": QUERY, "mode": "context", "rewrite": "off"})).await;
    assert_eq!(off, rest_auto["rendered"].as_str().expect("rendered"));
    let message = error(&app, "search", &json!({"query": QUERY, "mode": "context", "rewrite": "always"})).await;
    assert!(message.contains("rewrite: "), "{message}");
    assert!(!server.requests().is_empty() && server.requests().iter().all(|r| r.raw.contains(REWRITE_MARKER)));
}

#[tokio::test]
async fn recall_maps_max_chars_and_the_preset_defaults() {
    let (app, _dirs) = context_app().await;
    let out = text(&app, "recall", &json!({"query": QUERY, "max_chars": 400})).await;
    let by_rest = rest(&app, Handler::Recall, RECALL_PATH, &json!({"query": QUERY, "max_tokens": 100})).await;
    let default = rest(&app, Handler::Recall, RECALL_PATH, &json!({"query": QUERY})).await;
    assert_eq!(out, by_rest["rendered"].as_str().expect("rendered"));
    assert_ne!(by_rest["rendered"], default["rendered"], "the budget must bind for this test to mean anything");
    assert_eq!(text(&app, "recall", &json!({"query": QUERY})).await, default["rendered"].as_str().expect("rendered"));
    // The other arguments reach the preset as named.
    let args = json!({"query": QUERY, "quotas": {"events": 1}, "min_score": 0.2, "peer_scope": "actor", "detail": "abstract", "max_tokens": 900, "rewrite": false});
    let by_rest = rest(&app, Handler::Recall, RECALL_PATH, &args).await;
    assert_eq!(text(&app, "recall", &args).await, by_rest["rendered"].as_str().expect("rendered"));
    assert_eq!(text(&app, "recall", &json!({"query": QUERY, "min_score": 0.999})).await, "No relevant memories found.");
    let message = error(&app, "recall", &json!({"query": QUERY, "max_chars": 0})).await;
    assert!(message.starts_with("INVALID_ARGUMENT: Invalid arguments: max_chars: "), "{message}");
}

#[tokio::test]
async fn bootstrap_returns_the_session_start_block() {
    let (app, _dirs) = context_app().await;
    let out = text(&app, "bootstrap", &json!({"max_tokens": 700, "since": "3650d"})).await;
    let by_rest = rest(&app, Handler::Bootstrap, BOOTSTRAP_PATH, &json!({"max_tokens": 700, "since": "3650d"})).await;
    let default = rest(&app, Handler::Bootstrap, BOOTSTRAP_PATH, &json!({})).await;
    assert_eq!(out, by_rest["rendered"].as_str().expect("rendered"));
    assert_ne!(by_rest["rendered"], default["rendered"], "the arguments must change the block");
    assert_eq!(text(&app, "bootstrap", &json!({})).await, default["rendered"].as_str().expect("rendered"));
    let message = error(&app, "bootstrap", &json!({"max_tokens": 10})).await;
    assert!(message.contains("max_tokens: "), "{message}");
}

#[tokio::test]
async fn read_expands_uris_in_sections_and_fails_only_when_all_fail() {
    let (app, _dirs) = default_app().await;
    let profile = "viking://user/default/memories/profile.md";
    let ranking = "viking://resources/search/ranking.md";
    let profile_text = rest_get(&app, &format!("/api/v1/content/read?uri={profile}")).await;
    let profile_text = profile_text.as_str().expect("text");
    let ranking_text = rest_get(&app, &format!("/api/v1/content/read?uri={ranking}")).await;
    let ranking_text = ranking_text.as_str().expect("text");
    // A plain string and a list.
    assert_eq!(text(&app, "read", &json!({"uris": profile})).await, format!("=== {profile} ===\n{profile_text}"));
    let both = text(&app, "read", &json!({"uris": [profile, ranking]})).await;
    assert_eq!(both, format!("=== {profile} ===\n{profile_text}\n\n=== {ranking} ===\n{ranking_text}"));
    // viking://~ is the caller's own tree.
    let home = text(&app, "read", &json!({"uris": "viking://~/memories/profile.md"})).await;
    assert!(home.ends_with(profile_text), "{home}");
    // One failing URI is reported in its section; the call succeeds.
    let missing = "viking://user/default/memories/nope.md";
    let partial = tool(&app, "read", &json!({"uris": [profile, missing]})).await;
    assert!(!partial.is_error, "{}", partial.text);
    assert!(partial.text.contains(&format!("=== {missing} ===\nError: NOT_FOUND: ")), "{}", partial.text);
    // All failing: an error result carrying each.
    let all =
        error(&app, "read", &json!({"uris": [missing, "viking://user/bob/memories/entities/person/alice.md"]})).await;
    assert!(all.contains("NOT_FOUND") && all.contains("PERMISSION_DENIED"), "{all}");
    let too_many: Vec<String> = (0..11).map(|i| format!("viking://resources/{i}.md")).collect();
    let message = error(&app, "read", &json!({"uris": too_many})).await;
    assert!(message.contains("at most 10 URIs"), "{message}");
    let message = error(&app, "read", &json!({"uris": []})).await;
    assert!(message.contains("uris: at least one URI"), "{message}");
    let message = error(&app, "read", &json!({"uris": [profile, 3]})).await;
    assert!(message.contains("uris.1: Input should be a valid string"), "{message}");
}

#[tokio::test]
async fn a_read_past_the_response_limit_is_cut_and_says_so() {
    let big = "\"quoted\" text\n".repeat(8_000); // 112 KB, mostly characters escaped twice
    let files: Vec<(String, String)> =
        (0..4).map(|i| (format!("resources/big/{i}.md"), format!("# Part {i}\n{big}"))).collect();
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let limit = 400_000;
    let (app, _dirs) = app_with_config(&files, |config| config.limits.max_response_bytes = limit).await;
    let uris: Vec<String> = (0..4).map(|i| format!("viking://resources/big/{i}.md")).collect();
    let params = json!({"name": "read", "arguments": {"uris": uris}});
    let http = send(&app, rpc_event(V_2025_06, "tools/call", &params, &[])).await;
    let out = outcome(&http);
    assert!(!out.is_error, "{}", &out.text[..200]);
    assert!(out.text.starts_with("=== viking://resources/big/0.md ===\n# Part 0"), "{}", &out.text[..200]);
    assert!(out.text.ends_with("read fewer URIs per call]"), "{}", &out.text[out.text.len() - 200..]);
    // Within the limit as the invocation response counts it: the JSON-RPC
    // body escaped once more.
    let in_response = 2 + http.text.bytes().map(skald::api::payload::escaped_byte_len).sum::<usize>();
    assert!(in_response <= limit, "{in_response} > {limit}");
    assert!(in_response > limit / 2, "cut to what fits, not far below: {in_response}");
    // Under the limit nothing is cut.
    let one = text(&app, "read", &json!({"uris": uris[0]})).await;
    assert!(one.ends_with(&big), "a single read fits whole");
}

#[tokio::test]
async fn list_gives_one_line_per_entry_with_its_abstract() {
    let (app, _dirs) = default_app().await;
    let out = text(&app, "list", &json!({"uri": "viking://resources"})).await;
    let entries = rest_get(&app, "/api/v1/fs/ls?uri=viking://resources&output=agent").await;
    let entries = entries.as_array().expect("entries");
    assert_eq!(out.lines().count(), entries.len(), "{out}");
    for (line, entry) in out.lines().zip(entries) {
        let kind = if entry["isDir"] == true { "dir" } else { "file" };
        assert!(line.starts_with(&format!("- [{kind}] {}", entry["uri"].as_str().unwrap_or("?"))), "{line}");
    }
    assert!(out.contains("- [dir] viking://resources/guides — Guides for getting started"), "{out}");
    // recursive reaches the files, with their own abstracts.
    let deep = text(&app, "list", &json!({"uri": "viking://resources", "recursive": true})).await;
    assert!(deep.contains("- [file] viking://resources/search/ranking.md — "), "{deep}");
    assert!(deep.lines().count() > out.lines().count(), "{deep}");
    assert_eq!(text(&app, "list", &json!({"uri": "viking://~/memories/events/2025/03/10"})).await.lines().count(), 1);
    let message = error(&app, "list", &json!({"uri": "viking://resources", "recursive": "yes"})).await;
    assert!(message.contains("recursive: Input should be a valid boolean"), "{message}");
    let message = error(&app, "list", &json!({"uri": "viking://user/bob/memories"})).await;
    assert!(message.starts_with("PERMISSION_DENIED: "), "{message}");
}

#[tokio::test]
async fn health_needs_no_identity() {
    let (strict, _dirs) = app_with_corpus(DEFAULT_CORPUS, false).await;
    let out = text(&strict, "health", &json!({})).await;
    let facts: Value = serde_json::from_str(&out).expect("health is the route's JSON");
    assert_eq!(facts["status"], "ok");
    assert_eq!(facts["healthy"], true);
    assert_eq!(facts["auth_mode"], "authorizer");
    assert_eq!(facts["version"], skald::api::content::VERSION);
}

// ---------------------------------------------------------------------------
// Refusals, identity, deadline, transport.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn rest_errors_are_is_error_results_naming_the_argument() {
    let (app, _dirs) = default_app().await;
    let cases = [
        // Another user's tree.
        (
            "read",
            json!({"uris": "viking://user/bob/memories/entities/person/alice.md"}),
            "=== viking://user/bob/memories/entities/person/alice.md ===\nError: PERMISSION_DENIED: ",
        ),
        ("find", json!({"query": "x", "target_uri": "viking://user/bob"}), "PERMISSION_DENIED: "),
        // A missing URI.
        (
            "read",
            json!({"uris": "viking://resources/none.md"}),
            "=== viking://resources/none.md ===\nError: NOT_FOUND: ",
        ),
        ("list", json!({"uri": "viking://resources/none"}), "NOT_FOUND: "),
        // A traversal.
        (
            "read",
            json!({"uris": "viking://user/default/../bob/x.md"}),
            "=== viking://user/default/../bob/x.md ===\nError: INVALID_ARGUMENT: Invalid arguments: uris: ",
        ),
        (
            "find",
            json!({"query": "x", "target_uri": ["viking://resources", "viking://user/default/../bob"]}),
            "INVALID_ARGUMENT: Invalid arguments: target_uri.1: ",
        ),
        // A context-only field in list mode.
        ("search", json!({"query": "x", "dedup_turns": 3}), "INVALID_ARGUMENT: Invalid arguments: dedup_turns: "),
        // Types and bounds, named by the tool's own argument.
        ("find", json!({"query": "x", "min_score": "high"}), "INVALID_ARGUMENT: Invalid arguments: min_score: "),
        ("find", json!({"query": "x", "limit": 0}), "INVALID_ARGUMENT: Invalid arguments: limit: "),
        ("find", json!({"query": "  "}), "INVALID_ARGUMENT: Search query or image_url must not be empty."),
        // Unknown and missing arguments.
        ("find", json!({"query": "x", "filter": {}}), "INVALID_ARGUMENT: Invalid arguments: filter: Extra inputs"),
        ("search", json!({"limit": 3}), "INVALID_ARGUMENT: Invalid arguments: query: Field required"),
        ("list", json!({}), "INVALID_ARGUMENT: Invalid arguments: uri: Field required"),
    ];
    for (name, arguments, prefix) in cases {
        let message = error(&app, name, &arguments).await;
        assert!(message.starts_with(prefix), "{name} {arguments}: {message}");
    }
    // Null is absent, as REST.
    assert_eq!(
        text(&app, "find", &json!({"query": "search", "target_uri": null, "level": null})).await,
        text(&app, "find", &json!({"query": "search"})).await
    );
}

#[tokio::test]
async fn identity_is_rests_dev_headers_claims_or_a_refusal() {
    let (app, _dirs) = default_app().await;
    let query = json!({"query": "prefers editor theme when editing Rust code", "context_type": "memory", "limit": 3});
    let mine = listed_uris(&text(&app, "find", &query).await);
    assert!(!mine.is_empty() && mine.iter().all(|u| u.starts_with("viking://user/default/")), "{mine:?}");
    let bob = tool_with(&app, "find", &query, &[("x-openviking-user", "bob")]).await;
    let bobs = listed_uris(&bob.text);
    assert!(!bobs.is_empty() && bobs.iter().all(|u| u.starts_with("viking://user/bob/")), "{}", bob.text);
    let read = tool_with(
        &app,
        "read",
        &json!({"uris": "viking://~/memories/entities/person/alice.md"}),
        &[("x-openviking-user", "bob")],
    )
    .await;
    assert!(!read.is_error && read.text.contains("Alice is Bob's manager"), "{}", read.text);
    let bad = tool_with(&app, "find", &query, &[("x-openviking-user", "../x")]).await;
    assert!(bad.is_error && bad.text.contains("X-OpenViking-User"), "{}", bad.text);

    // A deployment that trusts only the authorizer: no claims, no answer —
    // an isError result, never an HTTP 401 that points at OAuth.
    let (strict, _strict_dirs) = app_with_corpus(DEFAULT_CORPUS, false).await;
    let params = json!({"name": "find", "arguments": query});
    let http = send(&strict, rpc_event(V_2025_06, "tools/call", &params, &[("x-openviking-user", "default")])).await;
    assert_eq!(http.status, 200, "{}", http.text);
    assert!(http.header("www-authenticate").is_none(), "{:?}", http.headers);
    let refused = outcome(&http);
    assert!(refused.is_error && refused.text.starts_with("UNAUTHENTICATED: "), "{}", refused.text);
    // With the authorizer's claims it is that user.
    let event = with_jwt_claims(
        rpc_event(V_2025_06, "tools/call", &params, &[]),
        &[("sub", "bob"), ("custom:account", "default")],
    );
    let claimed = outcome(&send(&strict, event).await);
    let claimed_uris = listed_uris(&claimed.text);
    assert!(!claimed.is_error && !claimed_uris.is_empty(), "{}", claimed.text);
    assert!(claimed_uris.iter().all(|u| u.starts_with("viking://user/bob/")), "{}", claimed.text);
    // The handshake and the listing need no identity.
    assert!(rpc(&strict, V_2025_06, "initialize", &initialize_params(V_2025_06)).await.result().is_object());
    assert!(rpc(&strict, V_2025_06, "tools/list", &json!({})).await.result()["tools"].is_array());
}

#[tokio::test]
async fn unknown_tools_are_json_rpc_errors_in_every_revision() {
    let (app, _dirs) = default_app().await;
    for version in [V_2025_06, V_2025_11, V_2026] {
        let http = rpc(&app, version, "tools/call", &json!({"name": "unlink", "arguments": {}})).await;
        assert_eq!(http.status, 200, "{version}: {}", http.text);
        let json = http.json();
        assert!(json.get("result").is_none(), "{version}: {}", http.text);
        assert_eq!(json["error"]["code"], -32602, "{version}: {}", http.text);
        assert_eq!(json["error"]["message"], "Unknown tool: unlink", "{version}: {}", http.text);
    }
    // A known tool in 2026-07-28 works the same as in the older revisions.
    let params = json!({"name": "find", "arguments": {"query": "search service ranking", "limit": 2}});
    let new = outcome(&rpc(&app, V_2026, "tools/call", &params).await);
    assert_eq!(new.text, text(&app, "find", &json!({"query": "search service ranking", "limit": 2})).await);
}

fn epoch_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

#[tokio::test]
async fn a_tool_runs_under_the_mcp_requests_deadline() {
    // A model that never answers and a 30 s gateway limit: only the
    // client's header or the Lambda deadline can end the rewrite early.
    let server = ModelServer::start().await;
    server.set_default(ModelReply::Hang);
    let (app, _dirs) = app_with_config(CONTEXT_CORPUS, |config| {
        config.llm = Some(server.openai_model("stub"));
        config.retrieval.gateway_timeout_s = 30.0;
    })
    .await;
    let arguments = json!({"query": QUERY, "mode": "context", "rewrite": "auto"});
    let params = json!({"name": "search", "arguments": arguments});
    let rendered = rest(&app, Handler::Search, SEARCH_PATH, &json!({"query": QUERY, "mode": "context"})).await;
    let rendered = rendered["rendered"].as_str().expect("rendered").to_owned();

    let started = Instant::now();
    let by_header =
        outcome(&send(&app, rpc_event(V_2025_06, "tools/call", &params, &[("x-client-timeout-ms", "1500")])).await);
    let elapsed = started.elapsed();
    assert!(!by_header.is_error, "{}", by_header.text);
    assert_eq!(by_header.text, rendered, "the late digest is dropped, the block served");
    assert!(elapsed < Duration::from_millis(1500), "answered after {elapsed:?}");

    let mut context = lambda_http::Context::default();
    context.deadline = epoch_ms() + 1500;
    let event = rpc_event(V_2025_06, "tools/call", &params, &[]).with_lambda_context(context);
    let started = Instant::now();
    let by_lambda = outcome(&send(&app, event).await);
    let elapsed = started.elapsed();
    assert_eq!(by_lambda.text, rendered);
    assert!(elapsed < Duration::from_millis(1500), "answered after {elapsed:?}");

    // A malformed header is REST's 400, naming it.
    let bad =
        outcome(&send(&app, rpc_event(V_2025_06, "tools/call", &params, &[("x-client-timeout-ms", "soon")])).await);
    assert!(
        bad.is_error
            && bad.text.starts_with("INVALID_ARGUMENT: ")
            && bad.text.to_lowercase().contains("x-client-timeout-ms"),
        "{}",
        bad.text
    );
}

#[tokio::test]
async fn the_transport_refuses_what_a_stateless_json_server_cannot_serve() {
    let (app, _dirs) = default_app().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let version = ("mcp-protocol-version", V_2025_06);
    // No stream to GET, no session to DELETE.
    for method in ["GET", "DELETE"] {
        let http = send(&app, event(method, &[("accept", ACCEPT), version], None)).await;
        assert_eq!(http.status, 405, "{method}: {}", http.text);
        assert_eq!(http.header("allow"), Some("POST"), "{method}");
    }
    // Accept must name both JSON and SSE (the transport's rule).
    let json_only = [("content-type", "application/json"), ("accept", "application/json"), version];
    let none = [("content-type", "application/json"), version];
    for headers in [&json_only[..], &none[..]] {
        let http = send(&app, event("POST", headers, Some(&body))).await;
        assert_eq!(http.status, 406, "{headers:?}: {}", http.text);
    }
    // A body that is not JSON.
    let http =
        send(&app, event("POST", &[("content-type", "text/plain"), ("accept", ACCEPT), version], Some(&body))).await;
    assert_eq!(http.status, 415, "{}", http.text);
    // A browser page from elsewhere (DNS rebinding) is refused; loopback
    // tools and non-browser clients are served, on any Host.
    let post = |origin: Option<&'static str>, host: &'static str| {
        let mut headers = vec![("content-type", "application/json"), ("accept", ACCEPT), version, ("host", host)];
        headers.extend(origin.map(|o| ("origin", o)));
        event("POST", &headers, Some(&body))
    };
    let evil = send(&app, post(Some("http://attacker.example"), "127.0.0.1:9000")).await;
    assert_eq!(evil.status, 403, "{}", evil.text);
    let inspector = send(&app, post(Some("http://localhost:6274"), "127.0.0.1:9000")).await;
    assert!(inspector.result()["tools"].is_array());
    let gateway = send(&app, post(None, "abc123.execute-api.eu-west-1.amazonaws.com")).await;
    assert!(gateway.result()["tools"].is_array());
    // Only /mcp, and REST's body limit.
    let mut other = event("POST", &[("content-type", "application/json"), ("accept", ACCEPT)], Some(&body));
    *other.uri_mut() = "https://mcp.example.com/api/v1/search/find".parse().expect("a URI");
    let http = send(&app, other).await;
    assert_eq!(http.status, 404, "{}", http.text);
    let huge = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "find", "arguments": {"query": "x".repeat(300_000)}}});
    let http =
        send(&app, event("POST", &[("content-type", "application/json"), ("accept", ACCEPT), version], Some(&huge)))
            .await;
    assert_eq!(http.status, 413, "{}", http.text);
    assert_eq!(http.json()["error"]["code"], "PAYLOAD_TOO_LARGE", "{}", http.text);
}

/// `remember` keeps what it is given: a new `mcp-store-…` session,
/// committed, whose event memory `find` then returns; bad messages are the
/// tool's error, naming the message.
#[tokio::test]
async fn remember_keeps_messages_that_find_returns() {
    let (app, _dirs) = default_app().await;
    let messages = json!([
        {"role": "user", "content": "My locker code at the climbing gym is 4471."},
        {"role": "assistant", "content": "Noted: locker code 4471 at the climbing gym."}
    ]);
    let stored = outcome(
        &rpc(&app, V_2025_06, "tools/call", &json!({"name": "remember", "arguments": {"messages": messages}})).await,
    );
    assert!(!stored.is_error, "{}", stored.text);
    assert!(stored.text.starts_with("Stored 2 message(s) in session mcp-store-"), "{}", stored.text);
    assert!(stored.text.contains("kept as 1 event memory"), "{}", stored.text);
    let found = text(&app, "find", &json!({"query": "what is my locker code at the climbing gym", "limit": 3})).await;
    assert!(found.contains("/memories/events/") && found.contains("4471"), "{found}");

    for (arguments, says) in [
        (json!({"messages": []}), "messages"),
        (json!({"messages": [{"role": "system", "content": "x"}]}), "messages.0"),
        (json!({"messages": [{"role": "user"}]}), "messages.0"),
    ] {
        let refused =
            outcome(&rpc(&app, V_2025_06, "tools/call", &json!({"name": "remember", "arguments": arguments})).await);
        assert!(refused.is_error && refused.text.contains(says), "{arguments}: {}", refused.text);
    }
}

/// A wrong memory is corrected and then forgotten through the tools, and
/// `find` follows each step: the written text is found, the edited text
/// replaces it, and after `forget` nothing is left; a refusal is the
/// tool's error, naming the argument or the rule.
#[tokio::test]
async fn write_edit_and_forget_change_what_find_returns() {
    let (app, _dirs) = default_app().await;
    let uri = "viking://~/memories/entities/biscuit.md";
    let wrote = text(&app, "write", &json!({"uri": uri, "content": "Biscuit the dog is allergic to chicken."})).await;
    assert!(wrote.starts_with("Wrote viking://user/default/memories/entities/biscuit.md (created"), "{wrote}");
    let found = text(&app, "find", &json!({"query": "what is Biscuit allergic to", "limit": 3})).await;
    assert!(found.contains("biscuit.md"), "{found}");
    let edited = text(&app, "edit", &json!({"uri": uri, "old_string": "chicken", "new_string": "salmon"})).await;
    assert!(edited.starts_with("Edited viking://user/default/memories/entities/biscuit.md"), "{edited}");
    let read = text(&app, "read", &json!({"uris": [uri]})).await;
    assert!(read.contains("allergic to salmon") && !read.contains("chicken"), "{read}");
    let forgot = text(&app, "forget", &json!({"uri": uri})).await;
    assert!(forgot.starts_with("Removed 1 file(s)"), "{forgot}");
    let found = text(&app, "find", &json!({"query": "what is Biscuit allergic to", "limit": 10})).await;
    assert!(!found.contains("biscuit.md"), "{found}");

    for (name, arguments, says) in [
        ("write", json!({"uri": "viking://user/bob/x.md", "content": "x"}), "PERMISSION_DENIED"),
        ("write", json!({"uri": uri}), "content"),
        ("edit", json!({"uri": uri, "old_string": "a", "new_string": "b"}), "NOT_FOUND"),
        ("forget", json!({"uri": "viking://~/memories"}), "recursive"),
        ("forget", json!({"uri": uri}), "NOT_FOUND"),
    ] {
        let refused = error(&app, name, &arguments).await;
        assert!(refused.contains(says), "{name} {arguments}: {refused}");
    }
}

/// `add_resource` adds a file uploaded over REST (as OpenViking's clients
/// upload it) and `find` returns it; a URL is refused with what to do
/// instead; the watch tools say there is nothing to watch.
#[tokio::test]
async fn add_resource_adds_an_upload_and_the_watch_tools_say_there_are_none() {
    let (app, _dirs) = default_app().await;
    let id =
        crate::common::upload(&app, "tides.md", b"# Tides\n\nSpring tides at Mont-Saint-Michel rise fourteen metres.")
            .await;
    let added = text(&app, "add_resource", &json!({"temp_file_id": id, "parent": "viking://resources/coast"})).await;
    assert_eq!(added, "Added viking://resources/coast/tides.md (1 file(s); index: indexed).");
    let found =
        text(&app, "find", &json!({"query": "how high do the tides rise at Mont-Saint-Michel", "limit": 3})).await;
    assert!(found.contains("viking://resources/coast/tides.md"), "{found}");
    let refused = error(&app, "add_resource", &json!({"path": "https://example.com/tides.html"})).await;
    assert!(refused.contains("fetches no URL") && refused.contains("temp_upload"), "{refused}");
    let none = text(&app, "list_watches", &json!({})).await;
    assert!(none.starts_with("No watches"), "{none}");
    let refused = error(&app, "cancel_watch", &json!({"to_uri": "viking://resources/coast"})).await;
    assert!(refused.starts_with("NOT_FOUND") && refused.contains("viking://resources/coast"), "{refused}");
}

/// `grep` and `glob` find what `find`'s meaning misses: an exact word in
/// the text, a name in the tree; each answer says when it was cut.
#[tokio::test]
async fn grep_and_glob_find_words_and_names() {
    let (app, _dirs) = default_app().await;
    text(&app, "write", &json!({"uri": "viking://~/notes/a.md", "content": "first line\nthe code is ZX-81\nlast"}))
        .await;
    text(&app, "write", &json!({"uri": "viking://~/notes/b.md", "content": "zx-81 again"})).await;
    let found = text(&app, "grep", &json!({"uri": "viking://~/notes", "pattern": "ZX-81"})).await;
    assert_eq!(found, "viking://user/default/notes/a.md:2: the code is ZX-81", "{found}");
    let found = text(
        &app,
        "grep",
        &json!({"uri": "viking://~/notes", "pattern": ["zx-81"], "case_insensitive": true, "node_limit": 1}),
    )
    .await;
    assert!(found.starts_with("viking://user/default/notes/a.md:2:"), "{found}");
    assert!(found.ends_with("[1 of 2 matching lines shown; narrow uri or pattern, or raise node_limit]"), "{found}");
    let listed = text(&app, "glob", &json!({"pattern": "notes/*.md", "uri": "viking://~"})).await;
    assert_eq!(listed, "viking://user/default/notes/a.md\nviking://user/default/notes/b.md");
    let refused = error(&app, "grep", &json!({"uri": "viking://~/notes", "pattern": "(unclosed"})).await;
    assert!(refused.starts_with("INVALID_ARGUMENT: Invalid arguments: pattern:"), "{refused}");
    let refused = error(&app, "glob", &json!({"pattern": "*.md", "uri": "viking://user/bob"})).await;
    assert!(refused.starts_with("PERMISSION_DENIED"), "{refused}");
    // The tree shows both notes one level down, and stops where asked.
    let shown = text(&app, "tree", &json!({"uri": "viking://~", "level_limit": 2})).await;
    assert!(
        shown.contains("- [dir] viking://user/default/notes")
            && shown.contains("- [file] viking://user/default/notes/b.md"),
        "{shown}"
    );
    let shallow = text(&app, "tree", &json!({"uri": "viking://~", "level_limit": 1})).await;
    assert!(!shallow.contains("notes/a.md") && shallow.contains("[truncated"), "{shallow}");
    let refused = error(&app, "tree", &json!({"uri": "viking://~", "level_limit": 0})).await;
    assert!(refused.contains("level_limit"), "{refused}");
}
