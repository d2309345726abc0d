//! `infra/openapi.json` against the code it documents. The document is
//! written by hand; this test fails, naming the route and field, when the
//! two drift apart:
//!
//! 1. Routes: the document's `(method, path)` pairs are exactly the HTTP
//!    API events of `infra/template.yaml` (read with a line scanner), the
//!    events the template leaves outside the JWT authorizer (those its
//!    `HttpApi` body does not guard) are exactly the operations documented
//!    with `security: []`, and the `cargo lambda watch` router of the root
//!    `Cargo.toml` serves each of them with the function the template
//!    deploys for it (its first matching entry, which must agree with the
//!    most specific one: `/api/v1/skills/find` is `find`'s, the rest of
//!    `/api/v1/skills/…` `content`'s).
//! 2. Request fields: every body schema lists exactly the fields its parser
//!    accepts (`FIND_FIELDS`, `SEARCH_FIELDS`, `CONTEXT_ONLY_FIELDS`,
//!    `BOOTSTRAP_FIELDS`, `RECALL_FIELDS`, `MESSAGE_FIELDS`,
//!    `COMMIT_FIELDS`, the write and explore lists, `ADD_RESOURCE_FIELDS`,
//!    `ADD_SKILL_FIELDS`, `VALIDATE_SKILL_FIELDS`, `SKILLS_FIND_FIELDS`;
//!    `/mcp` the JSON-RPC members; `temp_upload`'s multipart/form-data body
//!    the `file` part it reads, the one binary and required part, and the
//!    SDK's `upload_mode`, other parts being read past), the commit body's
//!    `x-skald-refused` is `UNSUPPORTED_COMMIT_FIELDS`, and the
//!    `x-skald-modes` of `/search`'s properties agree with those lists.
//!    Every operation's query parameters are exactly the ones its route's
//!    arm of `run` in `shared/src/api/{content,sessions,tasks,write,
//!    resources}.rs` reads (read with a line scanner, which also maps those
//!    modules' routes to their paths and methods; the routes of other
//!    modules read none), and the required ones are the ones read as
//!    required; every route those modules serve is documented, but the
//!    watch edits and triggers the template does not deploy
//!    ([`UNDEPLOYED_ROUTES`], held to being exactly that).
//! 3. Acceptance, through the real handlers: every documented property,
//!    sent with its `example` (a multipart body's as parts; with its
//!    `x-skald-with` members, what it needs beside it), is accepted
//!    (no `extra_forbidden`, no validation error at that field); on
//!    `/search` it is refused in
//!    exactly the modes its `x-skald-modes` leaves out; documented integer
//!    bounds, `maxItems`, `maxLength` and the defaults `stats` echoes (or,
//!    for a commit, that change nothing) are the ones the parsers apply;
//!    the refused commit fields are refused at their `loc`; documented
//!    headers are read (on `/mcp`: each one's example is served and a bad
//!    value answered as documented). A well-formed request is answered
//!    200, but a watch by id its documented 404 (there are none). Every
//!    documented query parameter, sent with its `example`, is answered so,
//!    and a value of another type than documented is refused at
//!    `["query", name]` (a missing required one too); its documented integer
//!    bounds are the parser's (and so is their absence: a far value is
//!    accepted); sending its documented default answers exactly as leaving
//!    it out; the documented caps (`x-skald-max-bytes`, `x-skald-max-depth`,
//!    a listing's `maxItems`, the `fs/ls` defaults, the session context's,
//!    a commit's, the upload's and the archives') are the library's.
//! 4. Structure: every `$ref` resolves, every operation but `/health`
//!    (which reads nothing) documents the error envelope for 400, the error
//!    codes are exactly [`ApiError`]'s, every `example` (of a property or a
//!    parameter) fits its schema, and real responses (including those to
//!    the document's request examples, the LLM stages' fields with a
//!    scripted model, every content and fs shape and error, both commit
//!    outcomes and the session context, and every outcome and error of the
//!    resources, skills, watches and wait routes and `skills/find`: a real
//!    multipart upload, archives, a partial add, a store that fails every
//!    call) validate against the documented response schemas (a small
//!    validator for the JSON Schema keywords the document uses; `pattern`
//!    is not checked); the content and resources routes answer every
//!    status they document but those no request can reach.
//! 5. Types: the library's result types — `ContextResult` with its
//!    `ContextStats`, `BootstrapResult` with its `BootstrapStats`, list
//!    mode's `ListResult` (`FindResult` with provenance and a query plan) —
//!    serialised with every optional part set have exactly the documented
//!    properties, object by object, recursively; serialised with none set,
//!    exactly the documented `required` ones; both fit their schemas. The
//!    `stats` keys the defaults check reads are keys of the types.
//! 6. MCP: `/mcp` answers JSON-RPC, not the envelope. Its real answers —
//!    `initialize`, `tools/list`, `tools/call`, `ping`, 2026-07-28's
//!    `server/discover` and removed methods, notifications, and every
//!    refusal of the transport — fit the documented status, media type
//!    and schema, and every documented status is answered; the documented
//!    tools, revisions and `Allow` are `skald_mcp`'s.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock};

use serde_json::{Map, Value, json};
use skald::api::content::{DEFAULT_ABS_LIMIT, DEFAULT_NODE_LIMIT};
use skald::api::error::{ApiError, FieldError};
use skald::api::find::{FIND_FIELDS, MAX_LIMIT, MAX_QUERY_CHARS, MAX_TAGS, MAX_TARGET_URIS};
use skald::api::payload::LAMBDA_RESPONSE_LIMIT;
use skald::api::recall::RECALL_FIELDS;
use skald::api::search::{BOOTSTRAP_FIELDS, CONTEXT_ONLY_FIELDS, SEARCH_FIELDS};
use skald::api::sessions::{
    COMMIT_FIELDS, DEFAULT_CONTEXT_BUDGET, MAX_CONTEXT_BUDGET, MESSAGE_FIELDS, UNSUPPORTED_COMMIT_FIELDS,
};
use skald::app::App;
use skald::content::{MAX_LIST_BYTES, MAX_NODE_LIMIT, MAX_READ_BYTES, RECURSIVE_DEPTH};
use skald::documents::{MAX_ARCHIVE_BYTES, MAX_ARCHIVE_FILES, MAX_UPLOAD_BYTES};
use skald::embed::hashed::HashedEmbedder;
use skald::index::filter::{MAX_FILTER_DEPTH, MAX_FILTER_NODES};
use skald::sessions::{MAX_ARCHIVE_MESSAGES, MAX_CONTEXT_ARCHIVES, MAX_CONTEXT_MESSAGES};
use skald_tests::faults::{Fault, FaultyStore, Op as FaultOp, Rule};
use skald_tests::fixture::{
    CONTEXT_CORPUS, Handler, Reply, TempDirs, app_with_config, app_with_corpus, call, call_handler, request_to,
};
use skald_tests::model_server::{ModelServer, Reply as ModelReply};

use crate::common::zip_of;

/// A typed result serialised as a response carries it.
macro_rules! typed {
    ($value:expr) => {
        serde_json::to_value($value).expect("a result type serialises")
    };
}

const QUERY: &str = "kubernetes cluster upgrade";
/// The session every `{id}` path names.
const SESSION: &str = "openapi-drift";
/// `GET …/tool-results/{tool_result_id}/search` (its `q` is required).
const TOOL_RESULT_SEARCH: &str = "/api/v1/sessions/{id}/tool-results/{tool_result_id}/search";
/// A tool result every session [`append_messages`] wrote to holds.
const TOOL_RESULT: &str = "tool-1";

/// The task of [`SESSION`]'s first commit (user `default`), what
/// `GET /api/v1/tasks/{id}` is asked for.
fn session_task() -> String {
    let identity = skald::identity::Identity {
        account: skald::identity::AccountId::new("default").expect("account"),
        user: skald::identity::UserId::new("default").expect("user"),
        actor_peer: None,
    };
    let session = skald::sessions::SessionId::new(SESSION).expect("session id");
    skald::memory::tasks::commit_task_id(&identity, &session, 1)
}
const MODES: [&str; 3] = ["list", "context", "bootstrap"];

const FIND: &str = "/api/v1/search/find";
const SEARCH: &str = "/api/v1/search/search";
const RECALL: &str = "/api/v1/search/recall";
const BOOTSTRAP: &str = "/api/v1/search/bootstrap";
const SESSIONS: &str = "/api/v1/sessions";
const SESSION_GET: &str = "/api/v1/sessions/{id}";
const MESSAGES: &str = "/api/v1/sessions/{id}/messages";
const BATCH: &str = "/api/v1/sessions/{id}/messages/batch";
const COMMIT: &str = "/api/v1/sessions/{id}/commit";
const CONTEXT: &str = "/api/v1/sessions/{id}/context";
const HEALTH: &str = "/health";
const STATUS: &str = "/api/v1/system/status";
const READ: &str = "/api/v1/content/read";
const ABSTRACT: &str = "/api/v1/content/abstract";
const OVERVIEW: &str = "/api/v1/content/overview";
const LS: &str = "/api/v1/fs/ls";
const STAT: &str = "/api/v1/fs/stat";
/// The routes of the `content` function (`skald::api::content`).
const CONTENT_ROUTES: [&str; 7] = [HEALTH, STATUS, READ, ABSTRACT, OVERVIEW, LS, STAT];
const WRITE: &str = "/api/v1/content/write";
const EDIT: &str = "/api/v1/content/edit";
const BATCH_WRITE: &str = "/api/v1/content/batch-write";
const MKDIR: &str = "/api/v1/fs/mkdir";
const MV: &str = "/api/v1/fs/mv";
/// `DELETE /api/v1/fs`.
const REMOVE: &str = "/api/v1/fs";
const TREE: &str = "/api/v1/fs/tree";
const GREP: &str = "/api/v1/search/grep";
const GLOB: &str = "/api/v1/search/glob";
/// The other routes the `content` function serves: `fs/tree`, the writes
/// and the explore routes (`skald::api::write`, `skald::api::explore`).
const WRITE_ROUTES: [&str; 9] = [TREE, WRITE, BATCH_WRITE, EDIT, MKDIR, MV, REMOVE, GREP, GLOB];
const UPLOAD: &str = "/api/v1/resources/temp_upload";
const ADD_RESOURCE: &str = "/api/v1/resources";
/// `GET` (list) and `POST` (add).
const SKILLS: &str = "/api/v1/skills";
/// `GET`, `PUT` and `DELETE`.
const SKILL_ONE: &str = "/api/v1/skills/{name}";
const VALIDATE_SKILL: &str = "/api/v1/skills/validate";
const WATCHES: &str = "/api/v1/watches";
/// `GET` and `DELETE`: always a 404 (there are no watches).
const WATCH: &str = "/api/v1/watches/{id}";
const WAIT: &str = "/api/v1/system/wait";
/// The `find` function's other route.
const SKILLS_FIND: &str = skald::api::find::SKILLS_FIND_PATH;
/// The routes of `skald::api::resources`, which the `content` function
/// serves too.
const RESOURCE_ROUTES: [&str; 8] = [UPLOAD, ADD_RESOURCE, SKILLS, SKILL_ONE, VALIDATE_SKILL, WATCHES, WATCH, WAIT];
/// The skill every `{name}` names (the document's examples' skill), put
/// back before each request ([`reset`]) so that reading and deleting it
/// find it.
const SKILL: &str = "sourdough";
/// The watch id every `{id}` of a watch route names.
const WATCH_ID: &str = "w-1";
/// The file the base upload sends ([`base_body`]), the `file` example of
/// the document's `UploadRequest`.
const UPLOAD_NAME: &str = "ferry-notes.md";
const UPLOAD_TEXT: &str = "# Ferry notes\n\nThe 07:40 from Piraeus reaches Naxos at 13:15.\n";
/// The upload [`UPLOAD_TEXT`] as [`UPLOAD_NAME`] is: the first 16 bytes of
/// its SHA-256 in hex, `_`, the name (the document's examples name it; the
/// responses check uploads the file and compares). [`reset`] puts it back,
/// since a resource added from it removes it.
const UPLOAD_ID: &str = "652867fbf28714498f6be8a32783a596_ferry-notes.md";
/// The multipart part the upload route reads; [`multipart`] sends it as a
/// file named [`UPLOAD_NAME`].
const UPLOAD_FILE_PART: &str = "file";
/// The parts of `temp_upload`'s body: the one the handler reads and the one
/// OpenViking's SDK sends besides (read past, as any other part).
const UPLOAD_PARTS: &[&str] = &["file", "upload_mode"];
const MULTIPART: &str = "multipart/form-data";
const BOUNDARY: &str = "openapi-drift-boundary-5e1c";
/// What `DELETE /api/v1/fs`'s base query removes and `fs/mv`'s base body
/// moves away; written back before each request to them ([`reset`]), so
/// every request finds it.
const REMOVE_TARGET: &str = "user/default/notes/old.md";
/// The session `DELETE /api/v1/sessions/{id}` removes, made again before
/// each request ([`reset`]).
const DELETED_SESSION: &str = "openapi-drift-deleted";
/// Where `fs/mv`'s base body moves [`REMOVE_TARGET`] (removed by [`reset`]).
const MOVED_TARGET: &str = "user/default/archive/old.md";
/// The `mcp` function's one path.
const MCP: &str = skald_mcp::PATH;
/// The members of a JSON-RPC 2.0 request (`/mcp`'s body): the transport
/// ignores others.
const JSONRPC_MEMBERS: &[&str] = &["jsonrpc", "id", "method", "params"];
/// What a valid MCP request sends besides its body.
const MCP_ACCEPT: &str = "application/json, text/event-stream";
/// The revision the MCP checks speak (besides 2026-07-28's own checks).
const MCP_VERSION: &str = "2025-11-25";
/// The revision without a handshake: each request carries its own `_meta`.
const MCP_2026: &str = "2026-07-28";
/// A file over the read cap in [`content_app`]'s corpus.
const BIG_FILE: &str = "viking://resources/big/log.md";
/// An integer far from any bound, for bounds that are not documented.
const FAR: i64 = 1_000_000_000;
/// An embedder dimension other than the fixture's, for an index mismatch.
const EMBED_DIMENSION_OTHER: usize = 32;

/// The batch body's fields: a literal in `skald::api::sessions` (the items
/// are checked against `MESSAGE_FIELDS`).
const BATCH_FIELDS: &[&str] = &["messages", "telemetry"];

// ---------------------------------------------------------------------------
// Reading the document and the repository
// ---------------------------------------------------------------------------

fn repo_file(relative: &str) -> String {
    let path = format!("{}/../{relative}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn doc() -> Value {
    serde_json::from_str(&repo_file("infra/openapi.json"))
        .unwrap_or_else(|e| panic!("infra/openapi.json is not JSON: {e}"))
}

/// The target of a local `$ref` (`#/components/…`).
fn target<'a>(doc: &'a Value, reference: &str) -> Option<&'a Value> {
    doc.pointer(reference.strip_prefix('#')?)
}

/// `schema` with `$ref`s followed.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..16 {
        let Some(reference) = schema.get("$ref").and_then(Value::as_str) else { return schema };
        schema = target(doc, reference).unwrap_or_else(|| panic!("unresolved $ref {reference}"));
    }
    panic!("$ref chain too long (a cycle?) at {schema}")
}

/// One documented operation.
struct Operation<'a> {
    method: String,
    path: String,
    op: &'a Value,
}

impl Operation<'_> {
    fn name(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// The path with `{id}` (and `{archive_id}`, `{name}`) filled in and,
    /// for a GET route with query parameters, the query it needs besides
    /// the parameter under test.
    fn url(&self) -> String {
        let id = if self.path.starts_with("/api/v1/tasks") {
            session_task()
        } else if self.path.starts_with(WATCHES) {
            WATCH_ID.to_owned()
        } else if self.method == "DELETE" {
            // A session of its own, made again before each request ([`reset`]).
            DELETED_SESSION.to_owned()
        } else {
            SESSION.to_owned()
        };
        let path = self
            .path
            .replace("{id}", &id)
            .replace("{archive_id}", "archive_001")
            .replace("{name}", SKILL)
            .replace("{tool_result_id}", TOOL_RESULT);
        match base_query(&self.path) {
            "" => path,
            query => format!("{path}?{query}"),
        }
    }

    /// [`Operation::url`] with `name=value` added (sent last, so it wins
    /// over the base query's own value).
    fn url_with(&self, name: &str, value: &str) -> String {
        with_parameter(&self.url(), name, value)
    }

    fn handler(&self) -> Handler {
        match self.path.as_str() {
            FIND | SKILLS_FIND => Handler::Find,
            SEARCH => Handler::Search,
            RECALL => Handler::Recall,
            BOOTSTRAP => Handler::Bootstrap,
            p if p == SESSIONS || p.starts_with("/api/v1/sessions/") || p.starts_with("/api/v1/tasks") => {
                Handler::Sessions
            }
            p if CONTENT_ROUTES.contains(&p) || WRITE_ROUTES.contains(&p) || RESOURCE_ROUTES.contains(&p) => {
                Handler::Content
            }
            MCP => Handler::Mcp,
            other => panic!("no handler known for documented path {other}"),
        }
    }
}

fn operations(doc: &Value) -> Vec<Operation<'_>> {
    let paths = doc["paths"].as_object().expect("paths is an object");
    let mut out = Vec::new();
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap_or_else(|| panic!("path item {path} is not an object")) {
            if ["get", "put", "post", "delete", "options", "head", "patch", "trace"].contains(&method.as_str()) {
                out.push(Operation { method: method.to_uppercase(), path: path.clone(), op });
            }
        }
    }
    out
}

/// The JSON request body schema of `op`, resolved.
fn request_schema<'a>(doc: &'a Value, op: &Operation<'a>) -> Option<&'a Value> {
    op.op.pointer("/requestBody/content/application~1json/schema").map(|s| resolve(doc, s))
}

/// The request body schema of `op`, resolved, JSON or multipart/form-data
/// (`temp_upload`'s), whichever it documents.
fn body_schema<'a>(doc: &'a Value, op: &Operation<'a>) -> Option<&'a Value> {
    request_schema(doc, op).or_else(|| multipart_schema(doc, op))
}

/// The multipart/form-data request body schema of `op`, resolved.
fn multipart_schema<'a>(doc: &'a Value, op: &Operation<'a>) -> Option<&'a Value> {
    op.op.pointer("/requestBody/content/multipart~1form-data/schema").map(|s| resolve(doc, s))
}

/// Whether `op`'s body is multipart/form-data: [`send`] then sends the
/// body it is given as parts ([`multipart`]).
fn is_multipart(op: &Operation<'_>) -> bool {
    op.op.pointer("/requestBody/content/multipart~1form-data").is_some()
}

/// The status a well-formed request to `op` answers: 200, but for a watch
/// by id the documented 404 (there are none, and every id says so).
fn success_status(op: &Operation<'_>) -> u16 {
    if op.path == WATCH { 404 } else { 200 }
}

fn properties<'a>(schema: &'a Value, what: &str) -> &'a Map<String, Value> {
    schema["properties"].as_object().unwrap_or_else(|| panic!("{what}: the schema has no properties"))
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// `(only in a, only in b)`, for messages.
fn difference(a: &BTreeSet<String>, b: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    (a.difference(b).cloned().collect(), b.difference(a).cloned().collect())
}

/// The `type` keyword as a list.
fn types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn example<'a>(prop: &'a Value, what: &str) -> &'a Value {
    prop.get("example").unwrap_or_else(|| panic!("{what} has no `example`"))
}

/// The parameters of `op` documented `in` `location` (`query`, `header`,
/// `path`), resolved.
fn parameters<'a>(doc: &'a Value, op: &Operation<'a>, location: &str) -> Vec<&'a Value> {
    op.op["parameters"]
        .as_array()
        .map(|ps| ps.iter().map(|p| resolve(doc, p)).filter(|p| p["in"] == location).collect())
        .unwrap_or_default()
}

fn parameter_name(p: &Value) -> &str {
    p["name"].as_str().unwrap_or_else(|| panic!("a parameter without a name: {p}"))
}

/// `url` with the query parameter `name=value` added last.
fn with_parameter(url: &str, name: &str, value: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{}={}", encode(name), encode(value))
}

/// A JSON value as a query string carries it (`true`, `5`, `agent`).
fn query_text(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

/// `value` percent-encoded for a query string (`:`, `/` and `~` kept, as
/// clients send URIs).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' | b'/' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Calling the handlers
// ---------------------------------------------------------------------------

async fn app() -> (Arc<App>, TempDirs) {
    app_with_corpus(CONTEXT_CORPUS, true).await
}

/// 3000 numbered lines of 101 bytes: over the read cap.
static BIG_TEXT: LazyLock<String> =
    LazyLock::new(|| (0..3000).map(|i| format!("{i:05} {}\n", "x".repeat(94))).collect());
/// A first paragraph of 390 characters: an abstract longer than
/// `abs_limit`'s default.
static LONG_TEXT: LazyLock<String> = LazyLock::new(|| "A long note about nothing much. ".repeat(13));

/// [`app`] with what the content routes' checks need besides
/// [`CONTEXT_CORPUS`]: a sidecar and an abstract longer than `abs_limit`'s
/// default directly under `viking://resources`, a tree deeper than a
/// recursive listing goes, and a file over the read cap ([`BIG_FILE`]).
async fn content_app() -> (Arc<App>, TempDirs) {
    let mut files: Vec<(&str, &str)> = CONTEXT_CORPUS.to_vec();
    files.extend([
        ("resources/.abstract.md", "Shared resources: runbooks and notes."),
        ("resources/long-note.md", LONG_TEXT.as_str()),
        ("resources/deep/a/b/c/leaf.md", "# Leaf\n\nFour levels below viking://resources.\n"),
        ("resources/big/log.md", BIG_TEXT.as_str()),
    ]);
    app_with_corpus(&files, true).await
}

/// What a request needs besides the property under test.
fn base_body(path: &str) -> Map<String, Value> {
    let base = match path {
        FIND | SEARCH | RECALL | SKILLS_FIND => json!({ "query": QUERY }),
        MESSAGES => json!({ "role": "user", "content": "hello" }),
        BATCH => json!({ "messages": [{ "role": "user", "content": "hello" }] }),
        WRITE => json!({ "uri": "viking://~/notes/base.md", "content": "A note." }),
        BATCH_WRITE => {
            json!({ "root_uri": "viking://~/notes", "operations": [{ "uri": "batch.md", "content": "A note." }] })
        }
        // The same word back: every request finds it once.
        EDIT => json!({ "uri": format!("viking://{REMOVE_TARGET}"), "old_string": "old", "new_string": "old" }),
        MKDIR => json!({ "uri": "viking://~/projects" }),
        GREP => json!({ "uri": "viking://~/memories", "pattern": "kubernetes" }),
        GLOB => json!({ "pattern": "**/*.md" }),
        MV => json!({ "from_uri": format!("viking://{REMOVE_TARGET}"), "to_uri": format!("viking://{MOVED_TARGET}") }),
        // Multipart: sent as parts ([`multipart`]).
        UPLOAD => json!({ UPLOAD_FILE_PART: UPLOAD_TEXT }),
        ADD_RESOURCE => json!({ "temp_file_id": UPLOAD_ID }),
        // `PUT /skills/{name}` ([`SKILL`]) too.
        SKILLS | SKILL_ONE | VALIDATE_SKILL => json!({ "data": skill_text(SKILL) }),
        _ => json!({}),
    };
    base.as_object().cloned().unwrap_or_default()
}

/// What a GET request needs besides the query parameter under test: a
/// `uri` of the kind the route takes, in [`CONTEXT_CORPUS`] (a memory with
/// a `MEMORY_FIELDS` trailer to read; a directory with subdirectories,
/// files and sidecars to list).
fn base_query(path: &str) -> &'static str {
    match path {
        READ => "uri=viking://~/memories/events/2025/04/02/cluster-upgrade.md",
        ABSTRACT | OVERVIEW | STAT => "uri=viking://resources/runbooks",
        LS | TREE => "uri=viking://resources",
        REMOVE => "uri=viking://~/notes/old.md",
        TOOL_RESULT_SEARCH => "q=nodes",
        _ => "",
    }
}

/// Further queries a documented default is compared on (besides
/// [`base_query`]): some defaults only show on some inputs, as a line
/// `limit` on a file longer than it.
fn more_base_queries(path: &str) -> Vec<String> {
    match path {
        READ => vec![format!("uri={BIG_FILE}")],
        LS => vec!["uri=viking://~/memories".to_owned()],
        _ => Vec::new(),
    }
}

/// A SKILL.md for skill `name`: the frontmatter a skill needs.
fn skill_text(name: &str) -> String {
    format!("---\nname: {name}\ndescription: Feed and bake a {name} starter\n---\n")
}

/// Sends `body` to `op` after [`reset`]: as JSON, or for a
/// multipart/form-data route ([`is_multipart`]) as parts ([`multipart`]).
async fn send(app: &Arc<App>, op: &Operation<'_>, body: Option<&Value>, headers: &[(&str, &str)]) -> Reply {
    reset(app).await;
    call_handler(app, op.handler(), base_request(op, &op.url(), headers, body)).await
}

/// `op`'s method to `url` with `headers` and `body`: as JSON, or for a
/// multipart/form-data route ([`is_multipart`]) as parts ([`multipart`]).
fn base_request(op: &Operation<'_>, url: &str, headers: &[(&str, &str)], body: Option<&Value>) -> lambda_http::Request {
    if is_multipart(op) {
        let parts = body.and_then(Value::as_object).cloned().unwrap_or_default();
        return multipart_request(url, &op.method, headers, &multipart(&parts));
    }
    let body = body.map_or(lambda_http::Body::Empty, |b| lambda_http::Body::Text(b.to_string()));
    request_to(url, &op.method, headers, body)
}

/// A multipart/form-data body of `parts`: each a field, the file part
/// ([`UPLOAD_FILE_PART`]) a file named [`UPLOAD_NAME`]; strings as they
/// are, other values as JSON text.
fn multipart(parts: &Map<String, Value>) -> Vec<u8> {
    let parts: Vec<(&str, Option<&str>, Vec<u8>)> = parts
        .iter()
        .map(|(name, value)| {
            let file = (name == UPLOAD_FILE_PART).then_some(UPLOAD_NAME);
            (name.as_str(), file, query_text(value).into_bytes())
        })
        .collect();
    multipart_parts(&parts)
}

/// A multipart/form-data body of `(name, file name, bytes)` parts, with
/// [`BOUNDARY`].
fn multipart_parts(parts: &[(&str, Option<&str>, Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, file, bytes) in parts {
        let disposition = match file {
            Some(file) => format!(
                "Content-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\n\
                 Content-Type: application/octet-stream"
            ),
            None => format!("Content-Disposition: form-data; name=\"{name}\""),
        };
        body.extend_from_slice(format!("--{BOUNDARY}\r\n{disposition}\r\n\r\n").as_bytes());
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// A request of `method` to `url` (a path and query) with the multipart
/// `body` (its `Content-Type` naming [`BOUNDARY`]) and `headers`.
fn multipart_request(url: &str, method: &str, headers: &[(&str, &str)], body: &[u8]) -> lambda_http::Request {
    let content_type = format!("{MULTIPART}; boundary={BOUNDARY}");
    let mut all = vec![("content-type", content_type.as_str())];
    all.extend_from_slice(headers);
    request_to(url, method, &all, lambda_http::Body::Binary(body.to_vec()))
}

/// `op`'s method, without a body, on `url` (a path and query), after
/// [`reset`].
async fn send_to(app: &Arc<App>, op: &Operation<'_>, url: &str, headers: &[(&str, &str)]) -> Reply {
    reset(app).await;
    call(app, op.handler(), &op.method, url, headers, None).await
}

/// Puts back what a delete or a move of the base requests changed:
/// [`REMOVE_TARGET`], [`DELETED_SESSION`], the upload [`UPLOAD_ID`] (a
/// resource added from it removes it) and the shared skill [`SKILL`] (a
/// delete removes it) are there and [`MOVED_TARGET`] is not.
async fn reset(app: &Arc<App>) {
    let body = json!({ "session_id": DELETED_SESSION });
    let made = call(app, Handler::Sessions, "POST", SESSIONS, &[], Some(&body)).await;
    assert_eq!(made.status, 200, "make the session a delete removes: {}", made.text);
    let key = |path: &str| format!("accounts/default/tree/{path}");
    let body = bytes::Bytes::from_static(b"An old note.");
    app.store.put(&key(REMOVE_TARGET), body, skald::store::PutMode::Overwrite).await.expect("put the target back");
    app.store.delete(&key(MOVED_TARGET)).await.expect("clear the move's destination");
    let upload = format!("uploads/default/default/{UPLOAD_ID}");
    let text = bytes::Bytes::from_static(UPLOAD_TEXT.as_bytes());
    app.store.put(&upload, text, skald::store::PutMode::Overwrite).await.expect("put the upload back");
    let skill = bytes::Bytes::from(skill_text(SKILL));
    let skill_key = key(&format!("agent/skills/{SKILL}/SKILL.md"));
    app.store.put(&skill_key, skill, skald::store::PutMode::Overwrite).await.expect("put the skill back");
}

/// The validation errors whose `loc` names body field `field`.
fn errors_at<'a>(reply: &'a Reply, field: &str) -> Vec<&'a Value> {
    reply
        .json
        .pointer("/error/details/validation_errors")
        .and_then(Value::as_array)
        .map(|errors| errors.iter().filter(|e| e["loc"].get(1).and_then(Value::as_str) == Some(field)).collect())
        .unwrap_or_default()
}

/// The validation errors at query parameter `name` (`loc` `["query", name]`).
fn query_errors_at<'a>(reply: &'a Reply, name: &str) -> Vec<&'a Value> {
    reply
        .json
        .pointer("/error/details/validation_errors")
        .and_then(Value::as_array)
        .map(|errors| errors.iter().filter(|e| e["loc"] == json!(["query", name])).collect())
        .unwrap_or_default()
}

/// Problems with `field` in `reply`, when it should have been accepted.
fn refusal(reply: &Reply, field: &str) -> Option<String> {
    let errors = errors_at(reply, field);
    if errors.iter().any(|e| e["type"] == "extra_forbidden") {
        return Some(format!("documented but refused as extra_forbidden: {}", reply.text));
    }
    (!errors.is_empty()).then(|| format!("its example is refused: {}", reply.text))
}

/// `base` with what property `prop` needs sent beside it: its
/// `x-skald-with` members (a commit's turn-budget fields need
/// `retention_mode`).
fn with_needs(base: &Map<String, Value>, prop: &Value) -> Map<String, Value> {
    let mut body = base.clone();
    if let Some(needs) = prop.get("x-skald-with").and_then(Value::as_object) {
        body.extend(needs.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    body
}

fn with(base: &Map<String, Value>, field: &str, value: Value) -> Value {
    let mut body = base.clone();
    body.insert(field.to_owned(), value);
    Value::Object(body)
}

/// The `x-skald-modes` of a `/search` property.
fn modes<'a>(prop: &'a Value, field: &str) -> Vec<&'a str> {
    prop.get("x-skald-modes")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("POST {SEARCH}: property {field} has no x-skald-modes"))
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

fn assert_none(failures: &[String]) {
    assert!(failures.is_empty(), "the document and the code disagree:\n- {}", failures.join("\n- "));
}

// ---------------------------------------------------------------------------
// A validator for the JSON Schema keywords the document uses
// ---------------------------------------------------------------------------

fn has_type(value: &Value, t: &str) -> bool {
    match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
}

/// Records in `errors` where `value` does not fit `schema` (`at` names it).
fn check(doc: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    let ts = types(schema);
    if !ts.is_empty() && !ts.iter().any(|t| has_type(value, t)) {
        errors.push(format!("{at}: {value} is not of type {ts:?}"));
        return;
    }
    if let Some(c) = schema.get("const").filter(|c| *c != value) {
        errors.push(format!("{at}: {value} is not {c}"));
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array).filter(|o| !o.contains(value)) {
        errors.push(format!("{at}: {value} is not one of {}", Value::Array(options.clone())));
    }
    if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
        let mut why = Vec::new();
        let matching = options
            .iter()
            .filter(|o| {
                let mut e = Vec::new();
                check(doc, o, value, at, &mut e);
                why.extend(e.clone());
                e.is_empty()
            })
            .count();
        if matching != 1 {
            errors.push(format!("{at}: matches {matching} of oneOf ({})", why.join("; ")));
        }
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64).filter(|m| n < *m) {
            errors.push(format!("{at}: {n} < minimum {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64).filter(|m| n > *m) {
            errors.push(format!("{at}: {n} > maximum {max}"));
        }
    }
    if let (Value::String(s), Some(max)) = (value, schema.get("maxLength").and_then(Value::as_u64))
        && s.chars().count() as u64 > max
    {
        errors.push(format!("{at}: longer than maxLength {max}"));
    }
    if let Value::Array(items) = value {
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64).filter(|m| items.len() as u64 > *m) {
            errors.push(format!("{at}: more than maxItems {max}"));
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                check(doc, item_schema, item, &format!("{at}[{i}]"), errors);
            }
        }
    }
    if let Value::Object(map) = value {
        for key in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !map.contains_key(key) {
                errors.push(format!("{at}: required key {key} is missing"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (key, v) in map {
            let at = format!("{at}.{key}");
            match (props.and_then(|p| p.get(key)), schema.get("additionalProperties")) {
                (Some(s), _) => check(doc, s, v, &at, errors),
                (None, Some(Value::Bool(false))) => errors.push(format!("{at}: key not in the schema")),
                (None, Some(s)) if s.is_object() => check(doc, s, v, &at, errors),
                (None, _) => {}
            }
        }
    }
}

fn fits(doc: &Value, schema: &Value, value: &Value, at: &str) -> Vec<String> {
    let mut errors = Vec::new();
    check(doc, schema, value, at, &mut errors);
    errors
}

// ---------------------------------------------------------------------------
// 1. Routes
// ---------------------------------------------------------------------------

/// `(method, path, binary)` of every HTTP API event in the SAM template.
fn template_routes() -> Vec<(String, String, String)> {
    let mut routes = Vec::new();
    let (mut binary, mut method, mut path) = (String::new(), None::<String>, None::<String>);
    for line in repo_file("infra/template.yaml").lines() {
        let line = line.trim();
        let value = |key: &str| line.strip_prefix(key).map(|v| v.trim().trim_matches('"').to_owned());
        if let Some(b) = value("Binary:") {
            binary = b;
        } else if let Some(m) = value("Method:") {
            method = Some(m.to_uppercase());
        } else if let Some(p) = value("Path:") {
            path = Some(p);
        }
        if let (Some(m), Some(p)) = (&method, &path) {
            // The catch-all is no route of its own: see
            // `unknown_routes_answer_the_404_envelope_deployed_and_locally`.
            if p != "$default" {
                routes.push((m.clone(), p.clone(), binary.clone()));
            }
            (method, path) = (None, None);
        }
    }
    routes
}

/// `(method, path)` of the HTTP API events the template leaves without an
/// authorizer in either identity mode: every event route the `HttpApi`'s
/// `DefinitionBody` does not put behind the JWT authorizer (a
/// `security: !If [UsesJwt, [{Jwt: []}], …]` line under its `paths:`).
/// A body entry that is no event route is a failure, named.
fn template_open_routes() -> Result<BTreeSet<(String, String)>, String> {
    let template = repo_file("infra/template.yaml");
    let mut guarded = BTreeSet::new();
    let mut stale = Vec::new();
    // Inside the body's `paths:` (its indentation), the path being read.
    let (mut paths_indent, mut path) = (None::<usize>, None::<String>);
    for line in template.lines() {
        let indent = line.len() - line.trim_start().len();
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match paths_indent {
            None if line == "paths:" => paths_indent = Some(indent),
            Some(base) if indent <= base => paths_indent = None,
            Some(_) => {
                if let Some(p) = line.strip_suffix(':').filter(|p| !p.contains(' ')) {
                    // A path, or the `$default` catch-all (checked apart).
                    path = p.starts_with('/').then(|| p.to_owned());
                } else if let (Some(p), Some((method, rest))) = (&path, line.split_once(':'))
                    && rest.contains("Jwt")
                {
                    guarded.insert((method.trim().to_uppercase(), p.clone()));
                }
            }
            None => {}
        }
    }
    let routes: BTreeSet<(String, String)> = template_routes().into_iter().map(|(m, p, _)| (m, p)).collect();
    for (method, path) in guarded.difference(&routes) {
        stale.push(format!("{method} {path}: behind the JWT in the HttpApi body, but no function event serves it"));
    }
    if stale.is_empty() { Ok(routes.difference(&guarded).cloned().collect()) } else { Err(stale.join("\n")) }
}

/// `(path pattern, function)` of `[workspace.metadata.lambda.watch.router]`.
fn watch_router() -> Vec<(String, String)> {
    let manifest = repo_file("Cargo.toml");
    let section = manifest.lines().map(str::trim).skip_while(|l| *l != "[workspace.metadata.lambda.watch.router]");
    let mut router = Vec::new();
    for line in section.skip(1).take_while(|l| !l.starts_with('[')) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (pattern, function) = line.split_once('=').unwrap_or_else(|| panic!("router line {line:?} has no `=`"));
        router.push((pattern.trim().trim_matches('"').to_owned(), function.trim().trim_matches('"').to_owned()));
    }
    assert!(!router.is_empty(), "Cargo.toml has no [workspace.metadata.lambda.watch.router] entries");
    router
}

/// Whether router `pattern` (`{name}` one segment, `{*name}` the rest)
/// serves OpenAPI `path` (`{name}` any one segment).
fn router_serves(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.trim_matches('/').split('/').collect();
    let path: Vec<&str> = path.trim_matches('/').split('/').collect();
    for (i, segment) in pattern.iter().enumerate() {
        if segment.starts_with("{*") {
            return path.len() > i;
        }
        let Some(actual) = path.get(i) else { return false };
        if !(segment == actual || (segment.starts_with('{') && segment.ends_with('}'))) {
            return false;
        }
    }
    pattern.len() == path.len()
}

/// How specific router `pattern` is: its literal segments, then whether it
/// has no catch-all.
fn router_specificity(pattern: &str) -> (usize, bool) {
    let segments: Vec<&str> = pattern.trim_matches('/').split('/').collect();
    (segments.iter().filter(|s| !s.starts_with('{')).count(), !segments.iter().any(|s| s.starts_with("{*")))
}

#[test]
fn routes_are_the_templates_and_the_watch_routers() {
    let doc = doc();
    let documented: BTreeSet<(String, String)> =
        operations(&doc).iter().map(|o| (o.method.clone(), o.path.clone())).collect();
    let template = template_routes();
    let deployed: BTreeSet<(String, String)> = template.iter().map(|(m, p, _)| (m.clone(), p.clone())).collect();
    let only_doc: Vec<_> = documented.difference(&deployed).collect();
    let only_template: Vec<_> = deployed.difference(&documented).collect();
    assert!(
        only_doc.is_empty() && only_template.is_empty(),
        "routes differ: only in infra/openapi.json {only_doc:?}; only in infra/template.yaml {only_template:?}"
    );

    let mut failures = Vec::new();
    // Only the routes the template takes out of the authorizer are
    // documented as needing no token.
    let open = template_open_routes().unwrap_or_else(|stale| panic!("{stale}"));
    assert!(!open.is_empty() && open.len() < deployed.len(), "open routes {open:?}: the body guards none or all");
    for op in operations(&doc) {
        let documented_open = op.op.get("security").and_then(Value::as_array).is_some_and(Vec::is_empty);
        let deployed_open = open.contains(&(op.method.clone(), op.path.clone()));
        if documented_open != deployed_open {
            let documented = if documented_open { "without a token (`security: []`)" } else { "behind the JWT" };
            let deployed = if deployed_open { "takes it out of the authorizer" } else { "keeps the JWT authorizer" };
            failures.push(format!("{}: documented {documented}, but the template {deployed}", op.name()));
        }
    }

    let router = watch_router();
    for (method, path, binary) in &template {
        let matching: Vec<&(String, String)> = router.iter().filter(|(p, _)| router_serves(p, path)).collect();
        // The gateway takes the first entry that matches; the most specific
        // one (`/api/v1/skills/find` before `/api/v1/skills/{*rest}`) must
        // agree, whichever way a gateway picks.
        let (Some(first), Some(specific)) =
            (matching.first(), matching.iter().rev().max_by_key(|(p, _)| router_specificity(p)))
        else {
            failures.push(format!("{method} {path}: no watch-router entry in Cargo.toml serves it"));
            continue;
        };
        for (pattern, function) in [first, specific] {
            if function != binary {
                failures.push(format!(
                    "{method} {path}: the watch router's {pattern:?} sends it to {function}, the template deploys {binary}"
                ));
            }
        }
    }
    for (pattern, function) in &router {
        if !documented.iter().any(|(_, path)| router_serves(pattern, path)) {
            failures.push(format!("watch-router entry {pattern:?} = {function:?} serves no documented route"));
        }
    }
    assert_none(&failures);
}

/// Every function the watch router names is one the local gateway
/// dispatches to, and answers there: a route added to the router cannot be
/// forgotten in the gateway.
#[tokio::test]
async fn the_local_gateway_dispatches_every_function_of_the_watch_router() {
    let (app, _dirs) = skald_tests::fixture::app_with_corpus(&[], true).await;
    let mut functions: Vec<String> = watch_router().into_iter().map(|(_, f)| f).collect();
    functions.sort();
    functions.dedup();
    assert!(functions.len() >= 7, "the router's functions: {functions:?}");
    for function in &functions {
        let request = http::Request::builder().method("GET").uri("/health").body(bytes::Bytes::new()).expect("request");
        let answer = skald_tests::gateway::dispatch(function, std::sync::Arc::clone(&app), request).await;
        assert!(answer.is_some(), "the watch router names {function}, the local gateway does not dispatch it");
    }
    let request = http::Request::builder().uri("/").body(bytes::Bytes::new()).expect("request");
    assert!(skald_tests::gateway::dispatch("bench_use", app, request).await.is_none());
}

/// A method and path no route serves reaches the function the watch
/// router's catch-all names — deployed through the template's `$default`
/// route (behind the JWT like every route but `/health`), locally through
/// the router — and that function answers OpenViking's 404 envelope before
/// any identity or store call.
#[tokio::test]
async fn unknown_routes_answer_the_404_envelope_deployed_and_locally() {
    let template = repo_file("infra/template.yaml");
    let mut binary = String::new();
    let mut catch_all = None;
    let mut method = None;
    for line in template.lines().map(str::trim) {
        if let Some(b) = line.strip_prefix("Binary:") {
            binary = b.trim().to_owned();
        } else if let Some(m) = line.strip_prefix("Method:") {
            method = Some(m.trim().to_owned());
        } else if line == "Path: $default" {
            catch_all = Some((method.clone(), binary.clone()));
        }
    }
    let router = watch_router();
    let (pattern, local) = router.last().expect("a watch router");
    assert_eq!(pattern, "/{*rest}", "the watch router's last entry is its catch-all");
    assert_eq!(
        catch_all,
        Some((Some("ANY".to_owned()), local.clone())),
        "infra/template.yaml has an `ANY $default` event on the function the watch router's catch-all names"
    );
    let body = template.split("DefinitionBody:").nth(1).expect("the HttpApi's body");
    let default_entry = body.split("$default:").nth(1).map(|rest| rest.lines().nth(1).unwrap_or_default().trim());
    assert!(
        default_entry.is_some_and(|l| l.starts_with("x-amazon-apigateway-any-method:") && l.contains("Jwt")),
        "the HttpApi body's `$default` takes any method behind the JWT: {default_entry:?}"
    );

    // In both modes that leave identity to the function, no credential:
    // the 404 comes first.
    for mode in [skald::config::IdentityMode::ApiKey, skald::config::IdentityMode::Authorizer] {
        let (app, _dirs) = skald_tests::fixture::app_with_config(&[], |c| c.identity.mode = mode).await;
        for (method, path) in [("GET", "/api/v1/nope"), ("POST", "/lambda-url/bench_use/"), ("DELETE", "/")] {
            let request = http::Request::builder().method(method).uri(path).body(bytes::Bytes::new()).expect("request");
            let response = skald::api::content::handle(&app, request).await;
            let body: Value = serde_json::from_str(response.body()).expect("a JSON body");
            assert_eq!(response.status(), 404, "{method} {path}: {body}");
            assert_eq!(body["status"], "error", "{method} {path}: {body}");
            assert_eq!(body["error"]["code"], "NOT_FOUND", "{method} {path}: {body}");
            assert!(
                body["error"]["message"].as_str().is_some_and(|m| m.contains(path)),
                "{method} {path}: the message names the path: {body}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 2. Request fields
// ---------------------------------------------------------------------------

#[test]
fn request_bodies_list_exactly_the_accepted_fields() {
    let doc = doc();
    let search: Vec<&str> = FIND_FIELDS.iter().chain(SEARCH_FIELDS).chain(CONTEXT_ONLY_FIELDS).copied().collect();
    let bootstrap: Vec<&str> = BOOTSTRAP_FIELDS.iter().copied().filter(|f| *f != "mode").collect();
    let expected: BTreeMap<&str, BTreeSet<String>> = [
        (FIND, names(FIND_FIELDS)),
        (SEARCH, names(&search)),
        (RECALL, names(RECALL_FIELDS)),
        (BOOTSTRAP, names(&bootstrap)),
        (MESSAGES, names(MESSAGE_FIELDS)),
        (BATCH, names(BATCH_FIELDS)),
        (COMMIT, names(COMMIT_FIELDS)),
        // Lenient, as the reference: only `session_id` is read.
        (SESSIONS, names(&["session_id"])),
        // JSON-RPC, read by the transport (which ignores other members).
        (MCP, names(JSONRPC_MEMBERS)),
        (WRITE, names(skald::api::write::WRITE_FIELDS)),
        (EDIT, names(skald::api::write::EDIT_FIELDS)),
        (BATCH_WRITE, names(skald::api::write::BATCH_WRITE_FIELDS)),
        (MKDIR, names(skald::api::write::MKDIR_FIELDS)),
        (MV, names(skald::api::write::MV_FIELDS)),
        (GREP, names(skald::api::explore::GREP_FIELDS)),
        (GLOB, names(skald::api::explore::GLOB_FIELDS)),
        (ADD_RESOURCE, names(skald::api::resources::ADD_RESOURCE_FIELDS)),
        // `POST /skills` and `PUT /skills/{name}`.
        (SKILLS, names(skald::api::resources::ADD_SKILL_FIELDS)),
        (SKILL_ONE, names(skald::api::resources::ADD_SKILL_FIELDS)),
        (VALIDATE_SKILL, names(skald::api::resources::VALIDATE_SKILL_FIELDS)),
        (SKILLS_FIND, names(skald::api::find::SKILLS_FIND_FIELDS)),
        // Multipart parts: the handler reads `file` and reads past others.
        (UPLOAD, names(UPLOAD_PARTS)),
    ]
    .into_iter()
    .collect();
    let mut failures = Vec::new();
    for op in operations(&doc) {
        let Some(schema) = body_schema(&doc, &op) else { continue };
        let Some(want) = expected.get(op.path.as_str()) else {
            failures.push(format!("{}: a request body this test does not know; add its accepted fields", op.name()));
            continue;
        };
        let got: BTreeSet<String> = properties(schema, &op.name()).keys().cloned().collect();
        let (only_doc, only_code) = difference(&got, want);
        if !only_doc.is_empty() {
            failures.push(format!("{}: documented fields the parser refuses: {only_doc:?}", op.name()));
        }
        if !only_code.is_empty() {
            failures.push(format!("{}: accepted fields the document lacks: {only_code:?}", op.name()));
        }
        // Lenient: `/sessions` (as the reference), `/mcp` (JSON-RPC) and
        // the multipart upload (other parts are read past).
        let strict = op.path != SESSIONS && op.path != MCP && !is_multipart(&op);
        if schema.get("additionalProperties") != Some(&Value::Bool(!strict)) {
            failures.push(format!("{}: additionalProperties must be {}", op.name(), !strict));
        }
    }
    // The commit fields refused by name are listed, and only there.
    let commit = resolve(&doc, &doc["components"]["schemas"]["CommitRequest"]);
    let refused: BTreeSet<String> = commit["x-skald-refused"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let (only_doc, only_code) = difference(&refused, &names(UNSUPPORTED_COMMIT_FIELDS));
    if !only_doc.is_empty() || !only_code.is_empty() {
        failures.push(format!(
            "POST {COMMIT}: x-skald-refused: only documented {only_doc:?}, \
             only in UNSUPPORTED_COMMIT_FIELDS {only_code:?}"
        ));
    }
    for field in &refused {
        if properties(commit, "CommitRequest").contains_key(field) {
            failures.push(format!("POST {COMMIT}: {field} is refused, but documented as a property"));
        }
    }
    // The upload's one file part, required, is the one the handler reads.
    let ops = operations(&doc);
    let upload = ops.iter().find(|o| o.path == UPLOAD).expect("POST /resources/temp_upload is documented");
    let parts = multipart_schema(&doc, upload).expect("temp_upload's body is multipart/form-data");
    let files: Vec<&str> = properties(parts, "UploadRequest")
        .iter()
        .filter(|(_, p)| p["format"] == "binary")
        .map(|(name, _)| name.as_str())
        .collect();
    if files != [UPLOAD_FILE_PART] || parts["required"] != json!([UPLOAD_FILE_PART]) {
        failures.push(format!(
            "POST {UPLOAD}: the binary parts {files:?} (required: {}) are not the one part read, {UPLOAD_FILE_PART:?}",
            parts["required"]
        ));
    }
    // The batch's items are messages.
    let batch = resolve(&doc, &doc["components"]["schemas"]["MessageBatch"]["properties"]["messages"]["items"]);
    let items: BTreeSet<String> = properties(batch, "MessageBatch.messages.items").keys().cloned().collect();
    let (only_doc, only_code) = difference(&items, &names(MESSAGE_FIELDS));
    if !only_doc.is_empty() || !only_code.is_empty() {
        failures
            .push(format!("POST {BATCH}: message items: only documented {only_doc:?}, only accepted {only_code:?}"));
    }
    // The mode matrix of /search, statically.
    let search_schema = resolve(&doc, &doc["components"]["schemas"]["SearchRequest"]);
    for (field, prop) in properties(search_schema, "SearchRequest") {
        let documented: BTreeSet<&str> = modes(prop, field).into_iter().collect();
        let f = field.as_str();
        let mut want = BTreeSet::new();
        if !CONTEXT_ONLY_FIELDS.contains(&f) {
            want.insert("list");
        }
        // Context mode takes every field but these two (refused in
        // `parse_context` when sent with a value).
        if !["target_uri", "read_content"].contains(&f) {
            want.insert("context");
        }
        if BOOTSTRAP_FIELDS.contains(&f) {
            want.insert("bootstrap");
        }
        if documented != want {
            failures
                .push(format!("POST {SEARCH}: {field} has x-skald-modes {documented:?}, the field lists say {want:?}"));
        }
    }
    assert_none(&failures);
}

/// A route of a scanned module: its path, the module, its method when the
/// module names it (`None`: any), and what its arm of `fn run` reads from
/// the query as `(name, reader)` pairs (`reader` as in `query.int("limit",
/// …)`).
struct RouteReads {
    path: String,
    module: &'static str,
    method: Option<String>,
    reads: BTreeSet<(String, String)>,
}

/// What the routes of the scanned modules read from the query.
fn query_reads_by_route() -> Vec<RouteReads> {
    let mut out = module_query_reads("content", "shared/src/api/content.rs", None);
    out.extend(module_query_reads("sessions", "shared/src/api/sessions.rs", Some(SESSIONS)));
    out.extend(module_query_reads("tasks", "shared/src/api/tasks.rs", Some("/api/v1/tasks")));
    out.extend(module_query_reads("write", "shared/src/api/write.rs", None));
    out.extend(module_query_reads("resources", "shared/src/api/resources.rs", None));
    out
}

/// The scanned route `op` is: the one at its path for its method, else the
/// one at its path for any method.
fn route_reads<'a>(code: &'a [RouteReads], op: &Operation<'_>) -> Option<&'a RouteReads> {
    let at_path = || code.iter().filter(|r| r.path == op.path);
    at_path()
        .find(|r| r.method.as_deref() == Some(op.method.as_str()))
        .or_else(|| at_path().find(|r| r.method.is_none()))
}

/// Routes `skald::api::resources` answers (each a 404: "this deployment
/// fetches no URL, so it watches none") that the template deploys no event
/// for: the reference's watch edits and triggers. API Gateway answers them
/// itself, so they are reachable only under `cargo lambda watch`, and not
/// documented. Each must stay routed by the module and out of the
/// template (else this list is stale).
const UNDEPLOYED_ROUTES: &[(&str, &str)] = &[
    ("PATCH", "/api/v1/watches"),
    ("DELETE", "/api/v1/watches"),
    ("POST", "/api/v1/watches"),
    ("GET", "/api/v1/watches/trigger"),
    ("PATCH", "/api/v1/watches/trigger"),
    ("DELETE", "/api/v1/watches/trigger"),
    ("POST", "/api/v1/watches/trigger"),
    ("PATCH", "/api/v1/watches/{id}"),
    ("POST", "/api/v1/watches/{id}"),
    ("GET", "/api/v1/watches/{id}/trigger"),
    ("PATCH", "/api/v1/watches/{id}/trigger"),
    ("DELETE", "/api/v1/watches/{id}/trigger"),
    ("POST", "/api/v1/watches/{id}/trigger"),
];

/// What `module`'s routes read from the query, from its source `file` read
/// with a line scanner.
///
/// `fn route` maps paths to `Route` variants: as `"/api/v1/fs/ls" =>
/// Route::Ls,` (`"/a" | "/b" => Route::A,` for several); as a prefix bound
/// to a name that the variant takes (`if let Some(name) =
/// path.strip_prefix("/api/v1/skills/") {` … `Route::Skill(decode(name))`
/// is `/api/v1/skills/{name}`; `let id = id.strip_suffix("/trigger")…` adds
/// `…/{id}/trigger`); or, below `prefix` (the path `fn route` strips), as
/// `(_, [id, "commit"]) => want(&Method::POST, Route::Commit(…)),` (`("",
/// _)` is `prefix` itself, an identifier a `{name}` segment).
///
/// Or as a route table below `prefix`: `(Method::GET, &["{id}", "context"],
/// Kind::Context),`, each `Kind::Context => context(cx, …)` of `fn run`
/// reading what its handler reads.
///
/// The methods: the one `want` (or the table) names, else those of the variant's line in
/// `fn handle`'s table of allowed methods (`Route::Skill(_) =>
/// &[Method::GET, Method::PUT, Method::DELETE],`), else any.
///
/// What is read: each arm of `fn run` (`Route::A | Route::B(id) => {`, or
/// by method `(Route::Skills, "GET") => {`, where `_` or a name is any
/// other method) reads what it names as `query.<reader>("<name>"`, also
/// through the helpers it hands the query (`uri_param(&mut query)`, which
/// reads `required("uri")`).
fn module_query_reads(module: &'static str, file: &str, prefix: Option<&str>) -> Vec<RouteReads> {
    let source = repo_file(file);
    if let Some(prefix) = prefix {
        assert!(
            source.contains(&format!("strip_prefix(\"{prefix}\")")),
            "{file}: fn route no longer strips {prefix:?}; update this scanner"
        );
    }
    // (path, method, variant)
    let mut paths: Vec<(String, Option<String>, String)> = Vec::new();
    // In `fn route`: the prefix bound to each name, and the suffixes it may have.
    let mut bound: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    // In `fn handle`: the methods each variant allows.
    let mut allowed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Per function, or per arm of `run` (`Variant`, or `Variant METHOD` and
    // `Variant *` for arms by method): what it reads and which helpers it
    // hands `&mut query`.
    let mut reads: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    let mut helpers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let (mut function, mut arm) = (String::new(), Vec::<String>::new());
    let mut arms = BTreeSet::new();
    // A route pattern whose arm rustfmt wrapped (`(…) => {` then `want(…)`)
    // is read as one line.
    let mut pending: Option<String> = None;
    for raw in source.lines().map(str::trim) {
        let joined = pending.take().map(|head| format!("{head} {raw}"));
        let line = joined.as_deref().unwrap_or(raw);
        if function == "route" && line.starts_with('(') && line.ends_with("=> {") {
            pending = Some(line.trim_end_matches('{').trim_end().to_owned());
            continue;
        }
        if let Some(name) = fn_name(line) {
            (function, arm) = (name.to_owned(), Vec::new());
        }
        // A route table's entry, below `prefix`: `(Method::GET, &["{id}",
        // "context"], Kind::Context),`.
        if let (Some(prefix), Some(rest)) = (prefix, line.strip_prefix("(Method::"))
            && let Some((method, rest)) = rest.split_once(", &[")
            && let Some((segments, variant)) = rest.split_once("], Kind::")
        {
            let segments: Vec<&str> =
                segments.split(',').map(|s| s.trim().trim_matches('"')).filter(|s| !s.is_empty()).collect();
            let path = if segments.is_empty() { prefix.to_owned() } else { format!("{prefix}/{}", segments.join("/")) };
            paths.push((path, Some(method.to_owned()), identifier(variant).to_owned()));
        }
        // A table's dispatch in `fn run`: `Kind::Context => context(cx, …)`
        // reads what the handler reads.
        if function == "run"
            && let Some((variant, handler)) = line.strip_prefix("Kind::").and_then(|l| l.split_once(" => "))
        {
            let variant = identifier(variant).to_owned();
            arms.insert(variant.clone());
            helpers.entry(variant).or_default().insert(identifier(handler).to_owned());
        }
        if function == "route" {
            if let Some((alternatives, variant)) = line.strip_prefix('"').and_then(|l| l.split_once("\" => Route::")) {
                for path in alternatives.split("\" | \"") {
                    paths.push((path.to_owned(), None, identifier(variant).to_owned()));
                }
            } else if let (Some(prefix), Some((pattern, rest))) =
                (prefix, line.strip_prefix('(').and_then(|l| l.split_once(") => want(&Method::")))
                && let Some((method, variant)) = rest.split_once(", Route::")
            {
                paths.push((pattern_path(prefix, pattern), Some(method.to_owned()), identifier(variant).to_owned()));
            } else if prefix.is_none() {
                route_binding(line, &mut bound, &mut paths);
            }
        }
        if function == "handle"
            && line.starts_with("Route::")
            && let Some((variants, methods)) = line.split_once("=> &[")
        {
            let methods: Vec<String> = methods
                .split(',')
                .filter_map(|m| m.trim().strip_prefix("Method::"))
                .map(identifier)
                .map(str::to_owned)
                .collect();
            for variant in variants.split('|') {
                allowed.insert(identifier(variant.trim().trim_start_matches("Route::")).to_owned(), methods.clone());
            }
        }
        if function == "run"
            && let Some((pattern, _)) = line.split_once("=>")
        {
            if line.starts_with("Route::") {
                arm =
                    pattern.split('|').map(|v| identifier(v.trim().trim_start_matches("Route::")).to_owned()).collect();
                arms.extend(arm.iter().cloned());
            } else if let Some(tuple) = line.strip_prefix("(Route::")
                && let Some((variant, method)) = tuple.split_once(", ")
            {
                let method = method.split(')').next().unwrap_or_default().trim();
                let method = method.strip_prefix('"').and_then(|m| m.strip_suffix('"')).unwrap_or("*");
                arm = vec![format!("{} {method}", identifier(variant))];
                arms.extend(arm.iter().cloned());
            }
        }
        let owners = if arm.is_empty() { vec![function.clone()] } else { arm.clone() };
        for read in query_reads(line) {
            for owner in &owners {
                reads.entry(owner.clone()).or_default().insert(read.clone());
            }
        }
        let pieces: Vec<&str> = line.split("(&mut query").collect();
        for helper in pieces[..pieces.len() - 1].iter().filter_map(|piece| last_identifier(piece)) {
            for owner in &owners {
                helpers.entry(owner.clone()).or_default().insert(helper.to_owned());
            }
        }
    }
    assert!(!paths.is_empty(), "{file}: no route lines in fn route; update this scanner");
    let read_by = |owner: &str| {
        let mut read = reads.get(owner).cloned().unwrap_or_default();
        let mut pending: Vec<String> = helpers.get(owner).into_iter().flatten().cloned().collect();
        let mut seen = BTreeSet::new();
        while let Some(helper) = pending.pop() {
            if seen.insert(helper.clone()) {
                read.extend(reads.get(&helper).into_iter().flatten().cloned());
                pending.extend(helpers.get(&helper).into_iter().flatten().cloned());
            }
        }
        read
    };
    let mut out = Vec::new();
    for (path, method, variant) in paths {
        let methods: Vec<Option<String>> = match (&method, allowed.get(&variant)) {
            (Some(_), _) => vec![method.clone()],
            (None, Some(methods)) => methods.iter().cloned().map(Some).collect(),
            (None, None) => vec![None],
        };
        for method in methods {
            // The arm that serves it: by method, then for any other method, then for all.
            let owner = [
                method.as_ref().map(|m| format!("{variant} {m}")),
                Some(format!("{variant} *")),
                Some(variant.clone()),
            ]
            .into_iter()
            .flatten()
            .find(|owner| arms.contains(owner));
            let owner = owner.unwrap_or_else(|| {
                let method = method.as_deref().unwrap_or("any method");
                panic!("{file}: no arm of fn run serves Route::{variant} for {method}; update this scanner")
            });
            out.push(RouteReads { path: path.clone(), module, method, reads: read_by(&owner) });
        }
    }
    out
}

/// One line of a `fn route` that binds a path's rest to a name
/// (`if let Some(name) = path.strip_prefix("/api/v1/skills/") {`, `let id
/// = path.strip_prefix("/api/v1/watches/")?;`), gives that rest another
/// form (`let id = id.strip_suffix("/trigger").unwrap_or(id);`: the path
/// may end so), or makes a variant of it (`Route::Skill(decode(name))`:
/// the bound prefix, `{name}`, and each suffix).
fn route_binding(
    line: &str,
    bound: &mut BTreeMap<String, (String, Vec<String>)>,
    paths: &mut Vec<(String, Option<String>, String)>,
) {
    let quoted = |call: &str| line.split_once(call).and_then(|(_, rest)| rest.split('"').next()).map(str::to_owned);
    let name = line.strip_prefix("if let Some(").or_else(|| line.strip_prefix("let ")).map(identifier);
    if let (Some(name), Some(prefix)) = (name, quoted(".strip_prefix(\"")) {
        bound.insert(name.to_owned(), (prefix, vec![String::new()]));
    } else if let (Some(name), Some(suffix)) = (name, quoted(".strip_suffix(\""))
        && let Some((_, suffixes)) = bound.get_mut(name)
    {
        suffixes.push(suffix);
    }
    for (at, _) in line.match_indices("Route::") {
        let rest = &line[at + "Route::".len()..];
        let variant = identifier(rest);
        let argument = rest[variant.len()..].strip_prefix('(').unwrap_or_default();
        let argument = argument.strip_prefix("decode_segment(").unwrap_or(argument);
        if let Some((prefix, suffixes)) = bound.get(identifier(argument)) {
            for suffix in suffixes {
                paths.push((format!("{prefix}{{{}}}{suffix}", identifier(argument)), None, variant.to_owned()));
            }
        }
    }
}

/// The path a `fn route` match pattern names below `prefix`: `"", _` is
/// `prefix`; `_, [id, "messages"]` is `{prefix}/{id}/messages`.
fn pattern_path(prefix: &str, pattern: &str) -> String {
    let Some((_, segments)) = pattern.split_once('[') else { return prefix.to_owned() };
    let segments = segments.split(']').next().unwrap_or_default();
    let mut path = prefix.to_owned();
    for segment in segments.split(',').map(str::trim) {
        path.push('/');
        match segment.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
            Some(literal) => path.push_str(literal),
            None => path.push_str(&format!("{{{segment}}}")),
        }
    }
    path
}

/// The identifier `text` starts with.
fn identifier(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(text.len());
    &text[..end]
}

/// The function a line declares (`fn name(`, `pub async fn name<`), if any.
fn fn_name(line: &str) -> Option<&str> {
    let rest = line.trim_start_matches("pub ").trim_start_matches("pub(crate) ").trim_start_matches("async ");
    let rest = rest.strip_prefix("fn ")?;
    rest.split(['(', '<']).next().filter(|n| !n.is_empty())
}

/// The identifier `text` ends with, if any.
fn last_identifier(text: &str) -> Option<&str> {
    let start = text.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
    Some(&text[start..]).filter(|n| !n.is_empty())
}

/// The `query.<reader>("<name>"` calls on a line, as `(name, reader)`.
fn query_reads(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (at, _) in line.match_indices("query.") {
        if line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let rest = &line[at + "query.".len()..];
        let Some((reader, rest)) = rest.split_once("(\"") else { continue };
        if reader.is_empty() || !reader.chars().all(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some((name, _)) = rest.split_once('"') {
            out.push((name.to_owned(), reader.to_owned()));
        }
    }
    out
}

#[test]
fn query_parameters_are_exactly_the_parsers() {
    let doc = doc();
    let code = query_reads_by_route();
    let ops = operations(&doc);
    let mut failures = Vec::new();
    for op in &ops {
        let documented = parameters(&doc, op, "query");
        let names: BTreeSet<String> = documented.iter().map(|p| parameter_name(p).to_owned()).collect();
        // Routes outside the scanned modules read no query.
        let read = route_reads(&code, op).map(|r| r.reads.clone()).unwrap_or_default();
        let (only_doc, only_code) = difference(&names, &read.iter().map(|(name, _)| name.clone()).collect());
        if !only_doc.is_empty() {
            failures.push(format!("{}: documented query parameters the route never reads: {only_doc:?}", op.name()));
        }
        if !only_code.is_empty() {
            failures.push(format!("{}: query parameters read but not documented: {only_code:?}", op.name()));
        }
        for p in &documented {
            let name = parameter_name(p);
            let required = read.iter().any(|(n, reader)| n == name && reader == "required");
            if p.get("required").and_then(Value::as_bool).unwrap_or(false) != required {
                failures.push(format!("{}: query parameter {name}: `required` must be {required}", op.name()));
            }
        }
    }
    let deployed: BTreeSet<(String, String)> = template_routes().into_iter().map(|(m, p, _)| (m, p)).collect();
    for route in &code {
        let served = ops.iter().any(|o| o.path == route.path && route.method.as_ref().is_none_or(|m| *m == o.method));
        let method = route.method.as_deref().unwrap_or("any method");
        let undeployed = UNDEPLOYED_ROUTES.contains(&(method, route.path.as_str()));
        if !served && !undeployed {
            failures
                .push(format!("{method} {}: served by skald::api::{} but not documented", route.path, route.module));
        }
    }
    for (method, path) in UNDEPLOYED_ROUTES {
        if !code.iter().any(|r| r.module == "resources" && r.path == *path && r.method.as_deref() == Some(*method)) {
            failures
                .push(format!("{method} {path}: listed as undeployed, but skald::api::resources no longer serves it"));
        }
        if deployed.contains(&((*method).to_owned(), (*path).to_owned())) {
            failures.push(format!("{method} {path}: listed as undeployed, but the template deploys it"));
        }
    }
    assert_none(&failures);
}

// ---------------------------------------------------------------------------
// 3. Acceptance through the handlers
// ---------------------------------------------------------------------------

#[tokio::test]
async fn every_documented_property_is_accepted() {
    let doc = doc();
    let (app, _dirs) = app().await;
    let mut failures = Vec::new();
    for op in operations(&doc) {
        // JSON-RPC: `mcp_responses_fit_their_schemas` sends its examples.
        // A multipart body's properties are sent as parts ([`send`]).
        let Some(schema) = body_schema(&doc, &op).filter(|_| op.path != MCP) else { continue };
        for (field, prop) in properties(schema, &op.name()) {
            let value = example(prop, &format!("{} property {field}", op.name())).clone();
            if op.path == SEARCH && field != "mode" {
                // Accepted in exactly the modes documented.
                let accepted = modes(prop, field);
                for mode in MODES {
                    let mut base = base_body(SEARCH);
                    base.insert("mode".into(), json!(mode));
                    let reply = send(&app, &op, Some(&with(&base, field, value.clone())), &[]).await;
                    if accepted.contains(&mode) {
                        if let Some(why) = refusal(&reply, field) {
                            failures.push(format!("{} {field} (mode {mode}): {why}", op.name()));
                        }
                    } else if errors_at(&reply, field).is_empty() {
                        failures.push(format!(
                            "{} {field}: documented as refused in mode {mode}, but answered {}: {}",
                            op.name(),
                            reply.status,
                            reply.text
                        ));
                    }
                }
                continue;
            }
            let reply = send(&app, &op, Some(&with(&with_needs(&base_body(&op.path), prop), field, value)), &[]).await;
            if let Some(why) = refusal(&reply, field) {
                failures.push(format!("{} {field}: {why}", op.name()));
            }
        }
    }
    // The commit fields refused by name: a value error at their loc that
    // points at what Skald has instead, and nothing archived.
    let ops = operations(&doc);
    let commit = ops.iter().find(|o| o.path == COMMIT).expect("POST /commit is documented");
    let schema = request_schema(&doc, commit).expect("a commit body");
    append_messages(&app, SESSION, 2).await;
    let before = commit_count(&app, SESSION).await;
    for field in schema["x-skald-refused"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        for value in [json!("turn_budget"), json!(3)] {
            let reply = send(&app, commit, Some(&json!({ field: value })), &[]).await;
            let errors = errors_at(&reply, field);
            let named = errors.iter().any(|e| {
                e["type"] == "value_error" && e["message"].as_str().is_some_and(|m| m.contains("keep_recent_count"))
            });
            if reply.status != 400 || !named {
                failures.push(format!(
                    "{} {field}={value}: documented as refused, but answered {}",
                    commit.name(),
                    reply.text
                ));
            }
        }
    }
    let after = commit_count(&app, SESSION).await;
    if before.is_none() || after != before {
        failures.push(format!("POST {COMMIT}: refused commits changed the commit count from {before:?} to {after:?}"));
    }
    assert_none(&failures);
}

/// Session `id`'s `commit_count`, `None` when it cannot be read.
async fn commit_count(app: &Arc<App>, id: &str) -> Option<u64> {
    let session = call(app, Handler::Sessions, "GET", &format!("{SESSIONS}/{id}"), &[], None).await;
    session.json["result"]["commit_count"].as_u64()
}

/// Appends `n` messages to session `id` (creating it), alternating user and
/// assistant, the user's with a `turn_id`, `message_kind` and `peer_id`, the
/// assistant's as `parts`.
async fn append_messages(app: &Arc<App>, id: &str, n: usize) {
    for i in 0..n {
        let message = if i % 2 == 0 {
            json!({
                "role": "user",
                "content": format!("question {i} about the {QUERY}"),
                "turn_id": format!("t-{i}"),
                "message_kind": "user_query",
                "peer_id": "p1",
            })
        } else {
            let part = json!({ "type": "text", "text": format!("answer {i}: drain the nodes first") });
            // A tool result ([`TOOL_RESULT`] for the first answer).
            let tool = json!({
                "type": "tool", "tool_id": format!("tool-{i}"), "tool_name": "bash",
                "tool_output": format!("drained 3 nodes in {i} minutes"), "tool_status": "completed",
            });
            json!({ "role": "assistant", "parts": [part, tool] })
        };
        let path = format!("{SESSIONS}/{id}/messages");
        let reply = call(app, Handler::Sessions, "POST", &path, &[], Some(&message)).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text);
    }
}

/// The mode a `/search` property is tried in (its first documented one).
fn search_mode(prop: &Value, field: &str) -> String {
    modes(prop, field).first().map_or_else(|| "list".to_owned(), |m| (*m).to_owned())
}

#[tokio::test]
async fn documented_bounds_are_the_parsers() {
    let doc = doc();
    let (app, _dirs) = app().await;
    let mut failures = Vec::new();
    for op in operations(&doc) {
        let Some(schema) = request_schema(&doc, &op) else { continue };
        for (field, prop) in properties(schema, &op.name()) {
            let mut base = with_needs(&base_body(&op.path), prop);
            if op.path == SEARCH {
                base.insert("mode".into(), json!(search_mode(prop, field)));
            }
            // (value, accepted, expected error type when refused)
            let mut probes: Vec<(Value, bool, &str)> = Vec::new();
            if types(prop).contains(&"integer") {
                if let Some(min) = prop.get("minimum").and_then(Value::as_i64) {
                    probes.push((json!(min), true, ""));
                    probes.push((json!(min - 1), false, "greater_than_equal"));
                }
                if let Some(max) = prop.get("maximum").and_then(Value::as_i64) {
                    probes.push((json!(max), true, ""));
                    probes.push((json!(max + 1), false, "less_than_equal"));
                }
            }
            if let Some(max) = prop.get("maxItems").and_then(Value::as_u64) {
                let item = example(prop, field)
                    .as_array()
                    .and_then(|items| items.first())
                    .cloned()
                    .unwrap_or_else(|| panic!("{}: {field} needs a non-empty example list", op.name()));
                let n = usize::try_from(max).expect("a small maxItems");
                probes.push((Value::Array(vec![item.clone(); n]), true, ""));
                probes.push((Value::Array(vec![item; n + 1]), false, "too_long"));
            }
            if let Some(max) = prop.get("maxLength").and_then(Value::as_u64) {
                let n = usize::try_from(max).expect("a small maxLength");
                probes.push((json!("a".repeat(n)), true, ""));
                probes.push((json!("a".repeat(n + 1)), false, "string_too_long"));
            }
            for (value, accepted, kind) in probes {
                let shown: String = value.to_string().chars().take(60).collect();
                let reply = send(&app, &op, Some(&with(&base, field, value)), &[]).await;
                let errors = errors_at(&reply, field);
                if accepted && !errors.is_empty() {
                    failures.push(format!(
                        "{} {field}: documented bound {shown} is refused: {}",
                        op.name(),
                        reply.text
                    ));
                }
                if !accepted && !errors.iter().any(|e| e["type"] == kind) {
                    failures.push(format!(
                        "{} {field}: {shown} is past the documented bound but not refused with {kind}: {}",
                        op.name(),
                        reply.text
                    ));
                }
            }
        }
    }
    assert_none(&failures);
}

#[tokio::test]
async fn documented_defaults_are_what_stats_report() {
    let doc = doc();
    let (app, _dirs) = app().await;
    // Fields whose effective value `stats` echoes, and where.
    let context_echo = [
        ("max_tokens", "/max_tokens"),
        ("score_threshold", "/score_threshold"),
        ("peer_scope", "/peer_scope"),
        ("purpose", "/purpose"),
        ("dedup_turns", "/dedup/turns"),
    ];
    // Where they are echoed is a key of the types, not a guess.
    let (context_stats, bootstrap_stats) =
        (typed!(&context_result(true))["stats"].clone(), typed!(&bootstrap_result(false)));
    for (field, pointer) in context_echo {
        assert!(context_stats.pointer(pointer).is_some(), "{field}: stats{pointer} is not a key of ContextStats");
    }
    assert!(bootstrap_stats["stats"].pointer(context_echo[0].1).is_some(), "max_tokens is not a key of BootstrapStats");
    let cases = [
        (SEARCH, json!({ "query": QUERY, "mode": "context" }), &context_echo[..]),
        (SEARCH, json!({ "mode": "bootstrap" }), &context_echo[..1]),
        (RECALL, json!({ "query": QUERY }), &context_echo[..]),
        (BOOTSTRAP, json!({}), &context_echo[..1]),
    ];
    let ops = operations(&doc);
    let mut failures = Vec::new();
    for (path, body, echoed) in cases {
        let op = ops.iter().find(|o| o.path == path).expect("documented");
        let schema = request_schema(&doc, op).expect("a body");
        let reply = send(&app, op, Some(&body), &[]).await;
        assert_eq!(reply.status, 200, "{}: {}", op.name(), reply.text);
        for (field, pointer) in echoed {
            let Some(default) = properties(schema, &op.name()).get(*field).and_then(|p| p.get("default")) else {
                continue;
            };
            let reported = reply.json["result"]["stats"].pointer(pointer);
            if reported != Some(default) {
                failures.push(format!(
                    "{} {field}: documented default {default}, but {body} reports stats{pointer} = {reported:?}",
                    op.name()
                ));
            }
        }
    }
    // A commit's documented defaults change nothing: two sessions alike,
    // committed without and with the default, archive alike.
    let commit = ops.iter().find(|o| o.path == COMMIT).expect("documented");
    let schema = request_schema(&doc, commit).expect("a commit body");
    for (field, prop) in properties(schema, &commit.name()) {
        let Some(default) = prop.get("default") else { continue };
        let mut results = Vec::new();
        let needs = Value::Object(with_needs(&Map::new(), prop));
        let with_default = with(&with_needs(&Map::new(), prop), field, default.clone());
        for (label, body) in [("without", needs.clone()), ("with", with_default)] {
            let id = format!("default-{field}-{label}");
            append_messages(&app, &id, 3).await;
            let path = format!("{SESSIONS}/{id}/commit");
            let reply = call(&app, Handler::Sessions, "POST", &path, &[], Some(&body)).await;
            let mut result = reply.json["result"].clone();
            if let Some(result) = result.as_object_mut() {
                for key in ["session_id", "archive_uri", "trace_id", "task_id"] {
                    result.remove(key);
                }
            }
            results.push((reply.status, result));
        }
        if results[0] != results[1] {
            failures.push(format!(
                "{} {field}: the documented default {default} commits otherwise than leaving it out: {:?} vs {:?}",
                commit.name(),
                results[1],
                results[0]
            ));
        }
    }
    assert_none(&failures);
}

#[tokio::test]
async fn documented_headers_are_read() {
    let doc = doc();
    let (app, _dirs) = app().await;
    let search_routes = [FIND, SEARCH, RECALL, BOOTSTRAP];
    // GET /sessions/{id} needs the session, GET /tasks/{id} its commit's task.
    let created = call(&app, Handler::Sessions, "POST", SESSIONS, &[], Some(&json!({ "session_id": SESSION }))).await;
    assert_eq!(created.status, 200, "{}", created.text);
    append_messages(&app, SESSION, 2).await;
    let path = format!("{SESSIONS}/{SESSION}/commit");
    let committed = call(&app, Handler::Sessions, "POST", &path, &[], Some(&json!({}))).await;
    assert_eq!(committed.json["result"]["task_id"], session_task().as_str(), "{}", committed.text);
    let mut failures = Vec::new();
    for op in operations(&doc) {
        // MCP reads its headers otherwise: `mcp_documented_headers_are_read`.
        if op.path == MCP {
            continue;
        }
        let params = parameters(&doc, &op, "header");
        let documents =
            |name: &str| params.iter().any(|p| p["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)));
        if search_routes.contains(&op.path.as_str()) && !documents("X-Client-Timeout-Ms") {
            failures.push(format!("{}: X-Client-Timeout-Ms is not documented", op.name()));
        }
        let mut body = base_body(&op.path);
        if op.path == SEARCH {
            body.insert("mode".into(), json!("context"));
        }
        let body = op.op.get("requestBody").is_some().then_some(Value::Object(body));
        let want = success_status(&op);
        for p in &params {
            let name = p["name"].as_str().expect("a header name");
            let value = p["example"].as_str().map(str::to_owned).unwrap_or_else(|| p["example"].to_string());
            let reply = send(&app, &op, body.as_ref(), &[(name, &value)]).await;
            if reply.status != want {
                failures.push(format!("{}: header {name}: {value} (its example) answered {}", op.name(), reply.text));
            }
            let bad = if name.eq_ignore_ascii_case("X-Client-Timeout-Ms") { "0" } else { "../x" };
            let reply = send(&app, &op, body.as_ref(), &[(name, bad)]).await;
            if reply.status != 400 || !reply.text.contains(name) {
                failures.push(format!("{}: header {name}: {bad} is not refused naming it: {}", op.name(), reply.text));
            }
        }
    }
    assert_none(&failures);
}

/// A value of another type than `schema` documents, and the error type the
/// parser must answer it with.
fn wrong_value(name: &str, schema: &Value) -> Option<(&'static str, &'static str)> {
    if schema.get("enum").is_some() {
        Some(("not-an-option", "literal_error"))
    } else if types(schema).contains(&"integer") {
        Some(("x", "int_parsing"))
    } else if types(schema).contains(&"boolean") {
        Some(("maybe", "bool_parsing"))
    } else if name.ends_with("uri") {
        Some(("../x", "value_error"))
    } else {
        // Free text (a tool's name, a search's text): every value is one.
        None
    }
}

/// [`content_app`] with session [`SESSION`]: an archive, and messages since.
async fn query_app() -> (Arc<App>, TempDirs) {
    let (app, dirs) = content_app().await;
    append_messages(&app, SESSION, 4).await;
    let path = format!("{SESSIONS}/{SESSION}/commit");
    let reply = call(&app, Handler::Sessions, "POST", &path, &[], Some(&json!({}))).await;
    assert_eq!(reply.json["result"]["status"], "accepted", "{}", reply.text);
    append_messages(&app, SESSION, 2).await;
    (app, dirs)
}

#[tokio::test]
async fn every_documented_query_parameter_is_read() {
    let doc = doc();
    let (app, _dirs) = query_app().await;
    let mut failures = Vec::new();
    for op in operations(&doc) {
        for p in parameters(&doc, &op, "query") {
            let name = parameter_name(p);
            let what = format!("{} query parameter {name}", op.name());
            let value = query_text(example(p, &what));
            let reply = send_to(&app, &op, &op.url_with(name, &value), &[]).await;
            if reply.status != success_status(&op) {
                failures.push(format!("{what}: its example {name}={value} answered {}", reply.text));
            }
            // Free text has no wrong value: only its absence, when required.
            let mut errors_reply = None;
            if let Some((bad, kind)) = wrong_value(name, &p["schema"]) {
                let reply = send_to(&app, &op, &op.url_with(name, bad), &[]).await;
                if reply.status != 400 || !query_errors_at(&reply, name).iter().any(|e| e["type"] == kind) {
                    failures.push(format!("{what}: {name}={bad} is not refused with {kind} at it: {}", reply.text));
                }
                errors_reply = Some(reply);
            }
            let errors = errors_reply.as_ref().map(|r| query_errors_at(r, name)).unwrap_or_default();
            // An `enum` is exactly the options the parser names when it refuses one.
            if let Some(options) = p["schema"].get("enum").and_then(Value::as_array) {
                let documented: BTreeSet<String> = options.iter().map(query_text).collect();
                let named: BTreeSet<String> = errors
                    .iter()
                    .filter_map(|e| e["message"].as_str())
                    .flat_map(|m| m.split('\'').skip(1).step_by(2).map(str::to_owned))
                    .collect();
                if named != documented {
                    failures.push(format!("{what}: documented options {documented:?}, the parser's {named:?}"));
                }
            }
            if p.get("required").and_then(Value::as_bool) == Some(true) {
                let reply = send_to(&app, &op, &op.path.replace("{id}", SESSION), &[]).await;
                if reply.status != 400 || !query_errors_at(&reply, name).iter().any(|e| e["type"] == "missing") {
                    failures
                        .push(format!("{what}: documented as required, but leaving it out answered {}", reply.text));
                }
            }
        }
    }
    assert_none(&failures);
}

#[tokio::test]
async fn documented_query_bounds_and_defaults_are_the_parsers() {
    let doc = doc();
    let (app, _dirs) = query_app().await;
    let mut failures = Vec::new();
    for op in operations(&doc) {
        for p in parameters(&doc, &op, "query") {
            let (name, schema) = (parameter_name(p), &p["schema"]);
            // (value, accepted, expected error type when refused); without a
            // documented bound, a far value must be accepted.
            let mut probes: Vec<(i64, bool, &str)> = Vec::new();
            if types(schema).contains(&"integer") {
                match schema.get("minimum").and_then(Value::as_i64) {
                    Some(min) => probes.extend([(min, true, ""), (min - 1, false, "greater_than_equal")]),
                    None => probes.push((-FAR, true, "")),
                }
                match schema.get("maximum").and_then(Value::as_i64) {
                    Some(max) => probes.extend([(max, true, ""), (max + 1, false, "less_than_equal")]),
                    None => probes.push((FAR, true, "")),
                }
            }
            for (value, accepted, kind) in probes {
                let reply = send_to(&app, &op, &op.url_with(name, &value.to_string()), &[]).await;
                let errors = query_errors_at(&reply, name);
                if accepted && (reply.status != success_status(&op) || !errors.is_empty()) {
                    failures.push(format!(
                        "{} {name}={value}: within the documented bounds, but answered {}",
                        op.name(),
                        reply.text
                    ));
                }
                if !accepted && !errors.iter().any(|e| e["type"] == kind) {
                    failures.push(format!(
                        "{} {name}={value}: past the documented bound but not refused with {kind}: {}",
                        op.name(),
                        reply.text
                    ));
                }
            }
            // Sending the documented default answers exactly as leaving it out.
            let Some(default) = schema.get("default").map(query_text) else { continue };
            let more = more_base_queries(&op.path).into_iter().map(|query| format!("{}?{query}", op.path));
            for base in std::iter::once(op.url()).chain(more) {
                let without = send_to(&app, &op, &base, &[]).await;
                let with = send_to(&app, &op, &with_parameter(&base, name, &default), &[]).await;
                if (without.status, &without.json) != (with.status, &with.json) {
                    failures.push(format!(
                        "{} {name}: the documented default {default} answers otherwise than leaving it out ({base}):\n  {}\n  {}",
                        op.name(),
                        with.text.chars().take(300).collect::<String>(),
                        without.text.chars().take(300).collect::<String>()
                    ));
                }
            }
        }
    }
    assert_none(&failures);
}

/// The documented query parameter `name` of `GET path`.
fn query_parameter<'a>(doc: &'a Value, path: &str, name: &str) -> &'a Value {
    let ops = operations(doc);
    let op = ops.iter().find(|o| o.method == "GET" && o.path == path).unwrap_or_else(|| panic!("GET {path}"));
    parameters(doc, op, "query")
        .into_iter()
        .find(|p| parameter_name(p) == name)
        .unwrap_or_else(|| panic!("GET {path}: no query parameter {name}"))
}

#[tokio::test]
async fn documented_caps_are_the_librarys() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    let documented = |value: Option<&Value>| value.and_then(Value::as_u64);
    let read_cap = schemas.pointer("/ReadResponse/properties/result/x-skald-max-bytes");
    let ls_result = schemas.pointer("/LsResponse/properties/result");
    let ls = |name: &str, key: &str| query_parameter(&doc, LS, name)["schema"].get(key).cloned();
    let context = |key: &str| query_parameter(&doc, CONTEXT, "token_budget")["schema"].get(key).cloned();
    let as_u64 = |n: usize| n as u64;
    let checks: Vec<(&str, Option<u64>, u64)> = vec![
        ("ReadResponse.result x-skald-max-bytes (MAX_READ_BYTES)", documented(read_cap), as_u64(MAX_READ_BYTES)),
        (
            "LsResponse.result x-skald-max-bytes (MAX_LIST_BYTES)",
            documented(ls_result.and_then(|r| r.get("x-skald-max-bytes"))),
            as_u64(MAX_LIST_BYTES),
        ),
        (
            "LsResponse.result maxItems (MAX_NODE_LIMIT)",
            documented(ls_result.and_then(|r| r.get("maxItems"))),
            as_u64(MAX_NODE_LIMIT),
        ),
        (
            "ls node_limit maximum (MAX_NODE_LIMIT)",
            documented(ls("node_limit", "maximum").as_ref()),
            as_u64(MAX_NODE_LIMIT),
        ),
        ("ls limit maximum (MAX_NODE_LIMIT)", documented(ls("limit", "maximum").as_ref()), as_u64(MAX_NODE_LIMIT)),
        (
            "ls node_limit default (DEFAULT_NODE_LIMIT)",
            documented(ls("node_limit", "default").as_ref()),
            DEFAULT_NODE_LIMIT.unsigned_abs(),
        ),
        (
            "ls abs_limit default (DEFAULT_ABS_LIMIT)",
            documented(ls("abs_limit", "default").as_ref()),
            DEFAULT_ABS_LIMIT.unsigned_abs(),
        ),
        (
            "ls recursive x-skald-max-depth (RECURSIVE_DEPTH)",
            documented(ls("recursive", "x-skald-max-depth").as_ref()),
            as_u64(RECURSIVE_DEPTH),
        ),
        (
            "CommitAccepted.archived_message_count maximum (MAX_ARCHIVE_MESSAGES)",
            documented(schemas.pointer("/CommitAccepted/properties/archived_message_count/maximum")),
            as_u64(MAX_ARCHIVE_MESSAGES),
        ),
        (
            "SessionContext.messages maxItems (MAX_CONTEXT_MESSAGES)",
            documented(schemas.pointer("/SessionContext/properties/messages/maxItems")),
            MAX_CONTEXT_MESSAGES,
        ),
        (
            "SessionContext.pre_archive_abstracts maxItems (MAX_CONTEXT_ARCHIVES)",
            documented(schemas.pointer("/SessionContext/properties/pre_archive_abstracts/maxItems")),
            MAX_CONTEXT_ARCHIVES,
        ),
        (
            "context token_budget maximum (MAX_CONTEXT_BUDGET)",
            documented(context("maximum").as_ref()),
            MAX_CONTEXT_BUDGET.unsigned_abs(),
        ),
        (
            "context token_budget default (DEFAULT_CONTEXT_BUDGET)",
            documented(context("default").as_ref()),
            DEFAULT_CONTEXT_BUDGET.unsigned_abs(),
        ),
        (
            "UploadRequest.file x-skald-max-bytes (MAX_UPLOAD_BYTES)",
            documented(schemas.pointer("/UploadRequest/properties/file/x-skald-max-bytes")),
            as_u64(MAX_UPLOAD_BYTES),
        ),
        (
            "Uploaded.size maximum (MAX_UPLOAD_BYTES)",
            documented(schemas.pointer("/Uploaded/properties/size/maximum")),
            as_u64(MAX_UPLOAD_BYTES),
        ),
        (
            "SkillList.skills maxItems (skills node_limit maximum)",
            documented(schemas.pointer("/SkillList/properties/skills/maxItems")),
            documented(query_parameter(&doc, SKILLS, "node_limit").pointer("/schema/maximum")).unwrap_or_default(),
        ),
    ];
    let mut failures = Vec::new();
    for (what, documented, code) in checks {
        if documented != Some(code) {
            failures.push(format!("{what}: documented {documented:?}, the library's is {code}"));
        }
    }
    // The archive bounds, where an upload is unpacked.
    for request in ["AddResourceRequest", "AddSkillRequest"] {
        for (key, code) in
            [("x-skald-max-archive-files", MAX_ARCHIVE_FILES), ("x-skald-max-archive-bytes", MAX_ARCHIVE_BYTES)]
        {
            let documented = documented(schemas.pointer(&format!("/{request}/properties/temp_file_id/{key}")));
            if documented != Some(as_u64(code)) {
                failures
                    .push(format!("{request}.temp_file_id {key}: documented {documented:?}, the library's is {code}"));
            }
        }
    }

    // A read over the cap: cut at it, marked, and continued where the marker says.
    let (app, _dirs) = content_app().await;
    let cap = documented(read_cap).unwrap_or_default();
    let read = |query: String| {
        let app = Arc::clone(&app);
        async move { call(&app, Handler::Content, "GET", &format!("{READ}?{query}"), &[], None).await }
    };
    let reply = read(format!("uri={BIG_FILE}")).await;
    let text = reply.json["result"].as_str().unwrap_or_default();
    let (body, marker) = text.trim_end_matches('\n').rsplit_once('\n').unwrap_or_default();
    if reply.json["truncated"] != true || body.len() as u64 + 1 > cap {
        failures.push(format!(
            "GET {READ}: a read over the cap: truncated {}, {} bytes",
            reply.json["truncated"],
            body.len()
        ));
    }
    if !marker.starts_with("[truncated: lines 1-") || !marker.contains(&format!("at most {cap} bytes per read")) {
        failures.push(format!("GET {READ}: the closing line {marker:?} does not name the documented cap {cap}"));
    }
    let next = marker.rsplit_once("offset=").map(|(_, n)| n.trim_end_matches(']')).unwrap_or_default();
    let rest = read(format!("uri={BIG_FILE}&offset={next}")).await;
    let first = rest.json["result"].as_str().unwrap_or_default().lines().next().unwrap_or_default();
    if !first.starts_with(&format!("{:0>5} ", next)) || rest.json.get("truncated").is_some() {
        failures.push(format!("GET {READ}: reading on at offset={next} starts with {first:?}"));
    }

    // A recursive listing goes the documented depth and says it was cut.
    let depth = documented(ls("recursive", "x-skald-max-depth").as_ref()).unwrap_or_default();
    let reply =
        call(&app, Handler::Content, "GET", &format!("{LS}?uri=viking://resources&recursive=true"), &[], None).await;
    let deepest = reply.json["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["rel_path"].as_str())
        .map(|r| r.split('/').count() as u64)
        .max();
    if deepest != Some(depth) || reply.json["truncated"] != true {
        failures.push(format!(
            "GET {LS}: a recursive listing of a deeper tree reaches depth {deepest:?} (documented {depth}), truncated {}",
            reply.json["truncated"]
        ));
    }
    assert_none(&failures);
}

// ---------------------------------------------------------------------------
// 4. Structure, error codes, examples and response shapes
// ---------------------------------------------------------------------------

fn collect_refs<'a>(value: &'a Value, at: &str, out: &mut Vec<(String, &'a str)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref" {
                    if let Some(r) = v.as_str() {
                        out.push((at.to_owned(), r));
                    }
                } else {
                    collect_refs(v, &format!("{at}/{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                collect_refs(v, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Every variant once; the `match` makes a new variant fail to compile
/// here until it is added (and documented).
fn every_api_error() -> Vec<ApiError> {
    let all = vec![
        ApiError::Validation(vec![FieldError::new("f", "value_error", "m")]),
        ApiError::InvalidArgument(String::new()),
        ApiError::Unauthenticated(String::new()),
        ApiError::PermissionDenied(String::new()),
        ApiError::NotFound(String::new()),
        ApiError::MethodNotAllowed(String::new(), String::new()),
        ApiError::PayloadTooLarge { size: 1, limit: 0 },
        ApiError::TooLarge(String::new()),
        ApiError::Conflict(String::new()),
        ApiError::Busy { message: String::new(), retry_after_s: 1 },
        ApiError::Unavailable(String::new()),
        ApiError::dependency("the store is unavailable; retry", "detail"),
        ApiError::Internal(String::new()),
    ];
    for e in &all {
        match e {
            ApiError::Validation(_)
            | ApiError::InvalidArgument(_)
            | ApiError::Unauthenticated(_)
            | ApiError::PermissionDenied(_)
            | ApiError::NotFound(_)
            | ApiError::MethodNotAllowed(..)
            | ApiError::PayloadTooLarge { .. }
            | ApiError::TooLarge(_)
            | ApiError::Conflict(_)
            | ApiError::Busy { .. }
            | ApiError::Unavailable(_)
            | ApiError::Dependency { .. }
            | ApiError::Internal(_) => {}
        }
    }
    all
}

#[test]
fn refs_resolve_and_errors_are_the_envelope() {
    let doc = doc();
    let mut failures = Vec::new();
    let mut refs = Vec::new();
    collect_refs(&doc, "", &mut refs);
    for (at, r) in &refs {
        if target(&doc, r).is_none() {
            failures.push(format!("{at}: $ref {r} does not resolve"));
        }
    }
    assert_none(&failures);

    // The workspace version (the test crate inherits it).
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"), "info.version is not the workspace version");
    assert_eq!(doc["openapi"].as_str().map(|v| v.starts_with("3.1.")), Some(true), "not OpenAPI 3.1");

    let error_schema = &doc["components"]["schemas"]["Error"];
    let errors = every_api_error();
    let statuses: BTreeSet<String> = errors.iter().map(|e| e.status().to_string()).collect();
    let codes: BTreeSet<String> = errors.iter().map(|e| e.code().to_owned()).collect();
    let documented_codes: BTreeSet<String> = error_schema
        .pointer("/properties/error/properties/code/enum")
        .and_then(Value::as_array)
        .expect("Error.error.code has an enum")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let (only_doc, only_code) = difference(&documented_codes, &codes);
    if !only_doc.is_empty() || !only_code.is_empty() {
        failures.push(format!("error codes: only documented {only_doc:?}, only in ApiError {only_code:?}"));
    }
    for e in &errors {
        let body = e.body();
        failures.extend(fits(&doc, error_schema, &body, &format!("ApiError {} body", e.code())));
    }
    for op in operations(&doc) {
        let responses = op.op["responses"].as_object().unwrap_or_else(|| panic!("{}: no responses", op.name()));
        // `/health` reads nothing it could refuse.
        if !responses.contains_key("400") && op.path != HEALTH {
            failures.push(format!("{}: no 400 response", op.name()));
        }
        for (status, response) in responses {
            if status.starts_with('2') {
                continue;
            }
            if op.path == MCP {
                failures.extend(mcp_error_media(&doc, &op, status, response, &statuses));
                continue;
            }
            let schema = resolve(&doc, response).pointer("/content/application~1json/schema");
            let is_error =
                schema.is_some_and(|s| s.get("$ref").and_then(Value::as_str) == Some("#/components/schemas/Error"));
            if !statuses.contains(status) {
                failures.push(format!("{}: status {status} is not one ApiError answers", op.name()));
            }
            if !is_error {
                failures.push(format!("{}: status {status} does not use the error envelope", op.name()));
            }
        }
    }
    assert_none(&failures);
}

/// What is wrong with how `/mcp` documents its error `status`: the
/// transport answers plain text or a JSON-RPC error, Skald's own refusals
/// (413) the envelope, so each media type must be one of those.
fn mcp_error_media(
    doc: &Value,
    op: &Operation<'_>,
    status: &str,
    response: &Value,
    envelope_statuses: &BTreeSet<String>,
) -> Vec<String> {
    let mut failures = Vec::new();
    let content = resolve(doc, response).get("content").and_then(Value::as_object);
    let Some(content) = content.filter(|c| !c.is_empty()) else {
        return vec![format!("{}: status {status} documents no body", op.name())];
    };
    for (media, body) in content {
        let schema = &body["schema"];
        let reference = schema.get("$ref").and_then(Value::as_str);
        match (media.as_str(), reference) {
            ("application/json", Some("#/components/schemas/JsonRpcErrorResponse")) => {}
            ("application/json", Some("#/components/schemas/Error")) if envelope_statuses.contains(status) => {}
            ("text/plain", None) if types(schema) == ["string"] => {}
            _ => failures.push(format!(
                "{}: status {status} {media} is neither the transport's text, a JSON-RPC error nor the error envelope",
                op.name()
            )),
        }
    }
    failures
}

#[test]
fn every_example_fits_its_schema() {
    let doc = doc();
    let mut failures = Vec::new();
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    for (name, schema) in schemas {
        for (field, prop) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
            if let Some(example) = prop.get("example") {
                failures.extend(fits(&doc, prop, example, &format!("{name}.{field} example")));
            }
        }
    }
    for op in operations(&doc) {
        for location in ["path", "query", "header"] {
            for p in parameters(&doc, &op, location) {
                if let Some(example) = p.get("example") {
                    let what = format!("{} {location} parameter {} example", op.name(), parameter_name(p));
                    failures.extend(fits(&doc, &p["schema"], example, &what));
                }
            }
        }
        let Some(content) = op.op.pointer("/requestBody/content/application~1json") else { continue };
        for (label, example) in content.get("examples").and_then(Value::as_object).into_iter().flatten() {
            failures.extend(fits(
                &doc,
                &content["schema"],
                &example["value"],
                &format!("{} example {label:?}", op.name()),
            ));
        }
    }
    assert_none(&failures);
}

// ---------------------------------------------------------------------------
// 5. The result and stats types
// ---------------------------------------------------------------------------

/// One served entry of the typed results, cut and a passage (`truncated`
/// and `lines`, its optional parts) or not.
fn entry(truncated: bool) -> skald::assemble::Entry {
    use skald::assemble::candidate::{Candidate, Origin};
    use skald::uri::VikingUri;
    let uri = VikingUri::parse("viking://resources/runbooks/cluster-upgrade.md").expect("uri");
    skald::assemble::Entry {
        candidate: Candidate {
            dedup_key: uri.to_string(),
            uri,
            category: skald::index::Category::Resources,
            is_directory: false,
            is_memory: false,
            score: 0.8,
            rank_score: 0.8,
            origin: Origin::Own,
            abstract_text: "Steps.".into(),
            abstract_tokens: 3,
            overview_tokens: None,
            full_tokens: Some(40),
            // The cut entry is a passage too: every optional part set.
            span: truncated.then_some(skald::index::record::Span { start: 0, end: 39, first_line: 12, last_line: 30 }),
            level: if truncated { skald::index::record::LEVEL_PASSAGE } else { skald::index::record::LEVEL_FILE },
        },
        tier: skald::assemble::params::Tier::Full,
        text: "Steps for a kubernetes cluster upgrade.".into(),
        truncated,
    }
}

/// A context-mode result with every optional part of its stats set
/// (`full`) or none (`!full`).
fn context_result(full: bool) -> skald::pipeline::ContextResult {
    use skald::assemble::params::{Detail, PeerScope, Tier, default_penalties};
    use skald::assemble::{AssemblyStats, Named, Origins, TierCounts};
    use skald::index::Category;
    use skald::index::account::IndexStats;
    use skald::ledger::DedupStatus;
    use skald::llm::Usage;
    use skald::llm::expansion::ExpansionStatus;
    use skald::llm::rewrite::RewriteStatus;
    use skald::pipeline::{ContextResult, ContextStats, Deprecation, SuccessorBody};
    let some = |text: &str| full.then(|| text.to_owned());
    let assembly = AssemblyStats {
        searched: Named(vec![("events", 3), ("resources", 2)]),
        candidates: 5,
        relevance: skald::assemble::relevance::CutStats {
            gap: Some(0.15),
            floor: full.then_some(0.55),
            threshold: full.then_some(0.1),
            best: Some(0.71),
            cut: 2,
            empty: some("nothing relevant"),
        },
        rerank: full.then(|| skald::assemble::rerank::RerankStats {
            model: "rerank:bge-reranker-v2-m3".into(),
            status: "timeout",
            scored: 0,
            threshold: 0.1,
            error: Some("no answer within 1500 ms".into()),
        }),
        excluded: 1,
        origins: Origins { actor_peer: 1, own: 3, other_peer: 1 },
        peer_scope: PeerScope::All,
        quotas: full.then(|| [(Category::Events, 4), (Category::Resources, 2)].into()),
        max_tokens: 1600,
        used_tokens: 420,
        per_entry_cap: 400,
        returned: 4,
        dropped: 1,
        deduped: 0,
        detail: if full { Detail::PerCategory([(Category::Resources, Tier::Abstract)].into()) } else { Detail::Auto },
        tier_counts: TierCounts { full: 1, overview: 1, abstract_: 1, uri: 1 },
        fill: skald::assemble::plan::Fill::default(),
        purpose: some("coding"),
        score_threshold: 0.35,
        other_peer_penalties: default_penalties(),
        bytes_read: 2048,
        reads: 2,
        retrieval_errors: if full { vec!["a read failed".into()] } else { Vec::new() },
        index: full.then_some(IndexStats { backend: "s3vectors", searches: 4, incomplete: true }),
    };
    let stats = ContextStats {
        assembly,
        query_expansion: if full { ExpansionStatus::Failed } else { ExpansionStatus::Off },
        planned_queries: if full { vec!["the seaside dinner".into()] } else { Vec::new() },
        query_expansion_error: some("the model answered 500"),
        rewrite: if full { RewriteStatus::Ok } else { RewriteStatus::Off },
        rewrite_usage: full.then_some(Usage { prompt_tokens: 321, completion_tokens: 54 }),
        rewrite_error: some("the model answered late"),
        dedup: DedupStatus { turns: 5, status: "ok", cooled: 2, turn: full.then_some(7) },
        ignored: if full { vec!["level", "limit"] } else { Vec::new() },
        deprecated: full.then(|| Deprecation {
            endpoint: "/api/v1/search/recall",
            successor: "/api/v1/search/search",
            successor_body: SuccessorBody { mode: "context" },
            aliases_used: vec!["max_chars"],
        }),
    };
    ContextResult { entries: vec![entry(full)], rendered: "<memory/>".into(), digest: String::new(), stats }
}

/// A bootstrap result with every slot, its entry cut (`truncated`) or not.
fn bootstrap_result(truncated: bool) -> skald::pipeline::BootstrapResult {
    use skald::assemble::bootstrap::{BootstrapStats, InstructionsStats, Manifest, SlotStats, instructions_hash};
    use skald::assemble::{Named, TierCounts};
    let manifest = Manifest::default();
    let slots = manifest.slots.iter().map(|(slot, _)| (slot.as_str(), SlotStats { entries: 1, tokens: 9 }));
    skald::pipeline::BootstrapResult {
        entries: vec![entry(truncated)],
        rendered: "<memory/>".into(),
        digest: String::new(),
        stats: BootstrapStats {
            mode: "bootstrap",
            slots: Named(slots.collect()),
            max_tokens: 1600,
            used_tokens: 45,
            returned: 5,
            dropped: 0,
            tier_counts: TierCounts { full: 5, ..TierCounts::default() },
            instructions: InstructionsStats {
                version: skald::assemble::bootstrap::INSTRUCTIONS_VERSION,
                content_hash: instructions_hash(),
            },
            bytes_read: 100,
            reads: 1,
            index: truncated.then_some(skald::index::account::IndexStats {
                backend: "s3vectors",
                searches: 2,
                incomplete: false,
            }),
        },
    }
}

/// A list-mode result with every optional part set (`full`) or none.
fn list_result(full: bool) -> skald::pipeline::ListResult {
    use skald::find::{FindItem, FindResult, MatchedContext, Provenance};
    use skald::llm::expansion::{PlannedQuery, QueryPlan};
    let item = FindItem {
        context_type: "resource",
        uri: "viking://resources/runbooks/cluster-upgrade.md".into(),
        level: 2,
        lines: full.then_some([12, 30]),
        score: 0.8,
        abstract_text: "Steps.".into(),
        tags: vec!["k=v".into()],
        origin_score: full.then_some(0.9),
        time_score: full.then_some(0.9),
        content: full.then(|| "Steps for a kubernetes cluster upgrade.".into()),
    };
    let provenance = Provenance {
        query: "kubernetes".into(),
        searched_directories: vec!["viking://resources".into()],
        matched_contexts: vec![MatchedContext {
            uri: item.uri.clone(),
            tier: "L2".into(),
            context_type: "resource",
            score: 0.8,
            match_reason: "",
        }],
    };
    let plan = QueryPlan {
        reasoning: "the dinner".into(),
        queries: vec![PlannedQuery {
            query: "the seaside dinner".into(),
            context_type: "memory",
            intent: "the dinner's memory".into(),
            priority: 1,
        }],
    };
    skald::pipeline::ListResult {
        found: FindResult {
            memories: Vec::new(),
            resources: vec![item],
            skills: Vec::new(),
            total: 1,
            provenance: full.then(|| vec![provenance]),
            index: full.then_some(skald::index::account::IndexStats {
                backend: "s3vectors",
                searches: 1,
                incomplete: true,
            }),
        },
        query_plan: full.then_some(plan),
    }
}

/// Where, object by object, the keys of `value` are not `want(schema)`:
/// with `want` the documented properties (for a fully set value) or the
/// required ones (for a minimal one). Follows `$ref`s, the `oneOf` option
/// `value` fits, array items and map values.
fn key_drift(doc: &Value, schema: &Value, value: &Value, at: &str, required: bool, out: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
        if let Some(option) = options.iter().find(|o| fits(doc, o, value, at).is_empty()) {
            key_drift(doc, option, value, at, required, out);
        }
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                let served: BTreeSet<String> = map.keys().cloned().collect();
                // An object without `required` (bootstrap's slots) leaves
                // every key optional: only a fully set value is compared.
                let documented: Option<BTreeSet<String>> = if required {
                    schema
                        .get("required")
                        .and_then(Value::as_array)
                        .map(|keys| keys.iter().filter_map(Value::as_str).map(String::from).collect())
                } else {
                    Some(props.keys().cloned().collect())
                };
                let (undocumented, unserved) =
                    documented.map_or_else(Default::default, |documented| difference(&served, &documented));
                if !undocumented.is_empty() || !unserved.is_empty() {
                    let what = if required { "required" } else { "documented" };
                    out.push(format!(
                        "{at}: the type serialises {undocumented:?} that are not {what}, and not {unserved:?} that are"
                    ));
                }
                for (key, v) in map {
                    if let Some(s) = props.get(key) {
                        key_drift(doc, s, v, &format!("{at}.{key}"), required, out);
                    }
                }
            } else if let Some(s) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                for (key, v) in map {
                    key_drift(doc, s, v, &format!("{at}.{key}"), required, out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    key_drift(doc, s, item, &format!("{at}[{i}]"), required, out);
                }
            }
        }
        _ => {}
    }
}

#[test]
fn result_and_stats_types_are_the_documented_schemas() {
    let doc = doc();
    let schema = |name: &str| doc["components"]["schemas"][name].clone();
    let mut failures = Vec::new();
    let cases = [
        ("ContextResult", "ContextResult (every optional part)", typed!(&context_result(true)), false),
        ("ContextResult", "ContextResult (no optional part)", typed!(&context_result(false)), true),
        ("BootstrapResult", "BootstrapResult", typed!(&bootstrap_result(true)), false),
        ("BootstrapResult", "BootstrapResult (required)", typed!(&bootstrap_result(false)), true),
        ("FindResult", "ListResult (every optional part)", typed!(&list_result(true)), false),
        ("FindResult", "ListResult (no optional part)", typed!(&list_result(false)), true),
    ];
    for (name, label, value, required) in cases {
        let schema = schema(name);
        assert!(schema.is_object(), "components.schemas.{name} is not documented");
        failures.extend(fits(&doc, &schema, &value, label));
        key_drift(&doc, &schema, &value, label, required, &mut failures);
    }
    assert_none(&failures);
}

/// Records in `failures` whether `reply` has status `want` and fits the
/// schema documented for its status.
fn verify(doc: &Value, failures: &mut Vec<String>, op: &Operation<'_>, label: &str, reply: &Reply, want: u16) {
    let what = format!("{} ({label})", op.name());
    if reply.status != want {
        failures.push(format!("{what}: answered {} not {want}: {}", reply.status, reply.text));
    }
    match response_schema(doc, op, reply.status) {
        Some(schema) => failures.extend(fits(doc, schema, &reply.json, &what)),
        None => failures.push(format!("{what}: status {} is not documented", reply.status)),
    }
}

/// The documented response of `op` for `status`, resolved to its schema.
fn response_schema<'a>(doc: &'a Value, op: &Operation<'a>, status: u16) -> Option<&'a Value> {
    let response = op.op["responses"].get(status.to_string())?;
    resolve(doc, response).pointer("/content/application~1json/schema")
}

#[tokio::test]
async fn responses_fit_their_schemas() {
    let doc = doc();
    let (app, _dirs) = app().await;
    let ops = operations(&doc);
    let op = |method: &str, path: &str| {
        ops.iter().find(|o| o.method == method && o.path == path).unwrap_or_else(|| panic!("{method} {path}"))
    };
    let mut failures = Vec::new();
    // The session every `{id}` names (the commit examples need it).
    let created = call(&app, Handler::Sessions, "POST", SESSIONS, &[], Some(&json!({ "session_id": SESSION }))).await;
    assert_eq!(created.status, 200, "{}", created.text);
    // The document's own request examples (`/mcp`'s: `mcp_responses_fit_their_schemas`).
    for o in ops.iter().filter(|o| o.path != MCP) {
        let Some(content) = o.op.pointer("/requestBody/content/application~1json") else { continue };
        for (label, example) in content.get("examples").and_then(Value::as_object).into_iter().flatten() {
            let reply = send(&app, o, Some(&example["value"]), &[]).await;
            verify(&doc, &mut failures, o, &format!("example {label:?}"), &reply, 200);
        }
    }

    let probes: Vec<(&str, &str, Value, u16)> = vec![
        ("POST", FIND, json!({ "query": QUERY, "limit": 3 }), 200),
        (
            "POST",
            FIND,
            json!({ "query": QUERY, "read_content": true, "events_time_decay_protection": "0", "telemetry": true }),
            200,
        ),
        ("POST", FIND, json!({ "query": QUERY, "mode": "context", "limit": 0 }), 400),
        ("POST", FIND, json!({ "query": "" }), 400),
        ("POST", FIND, json!({ "query": QUERY, "target_uri": "viking://user/bob" }), 403),
        ("POST", SEARCH, json!({ "query": QUERY }), 200),
        (
            "POST",
            SEARCH,
            json!({ "query": QUERY, "mode": "context", "level": 2, "limit": 3, "purpose": "chat", "detail": { "resources": "full" } }),
            200,
        ),
        ("POST", SEARCH, json!({ "query": QUERY, "mode": "context", "session_id": SESSION, "dedup_turns": 3 }), 200),
        ("POST", SEARCH, json!({ "mode": "bootstrap", "session_id": SESSION, "telemetry": true }), 200),
        ("POST", SEARCH, json!({ "query": QUERY, "max_tokens": 100 }), 400),
        ("POST", RECALL, json!({ "query": QUERY, "render": false }), 200),
        ("POST", RECALL, json!({ "query": QUERY, "mode": "context" }), 400),
        ("POST", BOOTSTRAP, json!({ "mode": "bootstrap" }), 400),
        ("POST", SESSIONS, json!({}), 200),
        ("POST", MESSAGES, json!({ "role": "user", "content": "hi", "id": "m-1" }), 200),
        ("POST", MESSAGES, json!({ "role": "user", "content": "hi", "id": "m-1" }), 200),
        ("POST", BATCH, json!({ "messages": [{ "role": "x" }] }), 400),
        ("POST", BATCH, json!({ "messages": [] }), 200),
    ];
    for (method, path, body, want) in probes {
        let o = op(method, path);
        let reply = send(&app, o, Some(&body), &[]).await;
        verify(&doc, &mut failures, o, &body.to_string(), &reply, want);
    }
    // An acting peer's memories come back as `origin: "actor_peer"`.
    let search = op("POST", SEARCH);
    let body = json!({ "query": QUERY, "mode": "context", "limit": 20 });
    let reply = send(&app, search, Some(&body), &[("X-OpenViking-Actor-Peer", "p1")]).await;
    verify(&doc, &mut failures, search, "an acting peer", &reply, 200);
    let entries = reply.json["result"]["entries"].as_array().cloned().unwrap_or_default();
    assert!(entries.iter().any(|e| e["origin"] == "actor_peer"), "no actor_peer entry to check: {}", reply.text);

    let get = op("GET", SESSION_GET);
    let reply = send(&app, get, None, &[]).await;
    verify(&doc, &mut failures, get, "an existing session", &reply, 200);
    let reply = call(&app, Handler::Sessions, "GET", "/api/v1/sessions/no-such-session", &[], None).await;
    verify(&doc, &mut failures, get, "a missing session", &reply, 404);
    session_probes(&doc, &app, &mut failures).await;

    // /recall's deprecation headers are the documented ones, and only with
    // an alias.
    let recall = op("POST", RECALL);
    let headers = recall.op.pointer("/responses/200/headers").and_then(Value::as_object).expect("recall headers");
    let reply = send(&app, recall, Some(&json!({ "query": QUERY, "max_chars": 2000, "min_score": 0.2 })), &[]).await;
    verify(&doc, &mut failures, recall, "v1 aliases", &reply, 200);
    for (name, header) in headers {
        let documented = header.pointer("/schema/const").and_then(Value::as_str);
        if reply.header(name) != documented {
            failures
                .push(format!("POST {RECALL}: header {name} is {:?}, documented {documented:?}", reply.header(name)));
        }
    }
    let reply = send(&app, recall, Some(&json!({ "query": QUERY })), &[]).await;
    for name in headers.keys() {
        if let Some(value) = reply.header(name) {
            failures.push(format!("POST {RECALL}: header {name}: {value} without an alias"));
        }
    }
    assert_none(&failures);
}

/// Commits (both outcomes, every skip reason, refusals, a missing session)
/// and the context of what they archived, against their schemas.
async fn session_probes(doc: &Value, app: &Arc<App>, failures: &mut Vec<String>) {
    let ops = operations(doc);
    let op = |method: &str, path: &str| {
        ops.iter().find(|o| o.method == method && o.path == path).unwrap_or_else(|| panic!("{method} {path}"))
    };
    let (commit, context) = (op("POST", COMMIT), op("GET", CONTEXT));
    let id = "commit-drift";
    let commit_of = |id: &str| format!("{SESSIONS}/{id}/commit");
    let context_of = |id: &str, query: &str| format!("{SESSIONS}/{id}/context{query}");
    append_messages(app, id, 4).await;
    let probes: Vec<(&str, Value, u16)> = vec![
        // Archives 3, keeps the newest.
        (id, json!({ "keep_recent_count": 1 }), 200),
        (id, json!({ "keep_recent_count": 5 }), 200),
        // Archives the one kept.
        (id, json!({ "telemetry": true, "extraction_metadata": { "source": "x" } }), 200),
        (id, json!({}), 200),
        ("no-such-session", json!({}), 404),
        (id, json!({ "keep_recent_count": -1 }), 400),
        (id, json!({ "keep_recent_count": 10_001 }), 400),
        (id, json!({ "min_raw_tail_steps": 2 }), 400),
        (id, json!({ "keep": 1 }), 400),
    ];
    let mut outcomes = BTreeSet::new();
    for (session, body, want) in probes {
        let reply = call(app, Handler::Sessions, "POST", &commit_of(session), &[], Some(&body)).await;
        verify(doc, failures, commit, &format!("{session} {body}"), &reply, want);
        let result = &reply.json["result"];
        if let Some(status) = result["status"].as_str() {
            let why = result["reason"].as_str().or(result["summary"].as_str()).unwrap_or_default();
            outcomes.insert(format!("{status}: {why}"));
        }
        if want == 404 && !reply.text.contains(&format!("Session not found: {session}")) {
            failures.push(format!(
                "{}: a missing session is not `Session not found: <id>`: {}",
                commit.name(),
                reply.text
            ));
        }
    }
    let want: BTreeSet<String> = ["accepted: extractive", "skipped: all_within_keep_window", "skipped: no_messages"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(outcomes, want, "the commit outcomes to check");
    let reply = call(app, Handler::Sessions, "GET", &commit_of(id), &[], None).await;
    verify(doc, failures, commit, "GET", &reply, 405);

    // Two archives and two messages since, one with every optional field.
    append_messages(app, id, 2).await;
    let probes: Vec<(String, &str, u16)> = vec![
        (context_of(id, ""), "GET", 200),
        (context_of(id, "?token_budget=1000000"), "GET", 200),
        (context_of(id, "?token_budget=1"), "GET", 200),
        (context_of(id, "?token_budget=0"), "GET", 400),
        (context_of(id, "?token_budget=1.5"), "GET", 400),
        (context_of("no-such-session", ""), "GET", 404),
        (context_of(id, ""), "POST", 405),
    ];
    let mut replies = Vec::new();
    for (target, method, want) in probes {
        let reply = call(app, Handler::Sessions, method, &target, &[], None).await;
        verify(doc, failures, context, &format!("{method} {target}"), &reply, want);
        replies.push(reply);
    }
    // What the schema leaves optional or empty did occur, so it was checked.
    let full = &replies[0].json["result"];
    let messages = full["messages"].as_array().cloned().unwrap_or_default();
    assert!(!full["latest_archive_overview"].as_str().unwrap_or_default().is_empty(), "no overview: {full}");
    assert_eq!(full["pre_archive_abstracts"].as_array().map(Vec::len), Some(1), "{full}");
    assert!(messages.iter().any(|m| m.get("turn_id").is_some() && m.get("peer_id").is_some()), "{full}");
    let stats = &full["stats"];
    let sum = stats["activeTokens"].as_u64().zip(stats["archiveTokens"].as_u64()).map(|(a, b)| a + b);
    if full["estimatedTokens"].as_u64() != sum {
        failures.push(format!("GET {CONTEXT}: estimatedTokens is not activeTokens + archiveTokens: {full}"));
    }
    let tight = &replies[2].json["result"];
    assert!(tight["stats"]["droppedArchives"].as_u64().is_some_and(|n| n > 0), "nothing dropped: {tight}");
}

#[tokio::test]
async fn llm_stage_responses_fit_their_schemas() {
    let doc = doc();
    let server = ModelServer::start().await;
    let model = server.openai_model("stub");
    let (app, _dirs) = app_with_config(CONTEXT_CORPUS, |config| config.llm = Some(model)).await;
    let ops = operations(&doc);
    let search = ops.iter().find(|o| o.path == SEARCH).expect("documented");
    let messages = ops.iter().find(|o| o.path == MESSAGES).expect("documented");
    let appended = send(&app, messages, Some(&json!({ "role": "user", "content": "the seaside dinner" })), &[]).await;
    assert_eq!(appended.status, 200, "{}", appended.text);
    let mut failures = Vec::new();

    // The echoing stand-in plans the latest user message and cites every
    // served entry: list mode adds `query_plan`, context mode reports usage.
    let list = json!({ "query": QUERY, "session_id": SESSION, "limit": 3 });
    let reply = send(&app, search, Some(&list), &[]).await;
    verify(&doc, &mut failures, search, "list mode, expanded", &reply, 200);
    assert!(reply.json["result"].get("query_plan").is_some(), "no query_plan to check: {}", reply.text);
    let context = json!({ "query": QUERY, "mode": "context", "session_id": SESSION, "rewrite": true, "limit": 4 });
    let reply = send(&app, search, Some(&context), &[]).await;
    verify(&doc, &mut failures, search, "context mode, both stages", &reply, 200);
    assert!(reply.json["result"]["stats"]["rewrite_usage"].is_object(), "no rewrite_usage to check: {}", reply.text);

    // A failing model: the stages say why.
    server.set_default(ModelReply::Status(500));
    let reply = send(&app, search, Some(&context), &[]).await;
    verify(&doc, &mut failures, search, "context mode, failing model", &reply, 200);
    let stats = &reply.json["result"]["stats"];
    assert!(
        stats.get("query_expansion_error").is_some() && stats.get("rewrite_error").is_some(),
        "no stage errors to check: {}",
        reply.text
    );
    assert_none(&failures);
}

/// A request to a content route: method, route, query, headers, and the
/// status it must get.
type ContentProbe<'a> = (&'a str, &'a str, String, &'a [(&'a str, &'a str)], u16);

#[tokio::test]
async fn content_responses_fit_their_schemas() {
    let doc = doc();
    let (app, dirs) = content_app().await;
    let ops = operations(&doc);
    let op =
        |path: &str| ops.iter().find(|o| o.method == "GET" && o.path == path).unwrap_or_else(|| panic!("GET {path}"));
    let mut failures = Vec::new();
    let bob = "viking://user/bob/memories/events/2025/04/02/bob-upgrade.md";
    let probes: Vec<ContentProbe<'_>> = vec![
        ("GET", HEALTH, String::new(), &[], 200),
        ("DELETE", HEALTH, String::new(), &[], 405),
        ("GET", STATUS, String::new(), &[], 200),
        ("GET", STATUS, String::new(), &[("X-OpenViking-User", "../x")], 400),
        ("POST", STATUS, String::new(), &[], 405),
        ("GET", READ, base_query(READ).to_owned(), &[], 200),
        ("GET", READ, format!("{}&raw=true&offset=-2&limit=1", base_query(READ)), &[], 200),
        ("GET", READ, format!("uri={BIG_FILE}"), &[], 200),
        ("GET", READ, format!("uri={BIG_FILE}&offset=10&limit=0"), &[], 200),
        ("GET", READ, "uri=viking://resources/runbooks".to_owned(), &[], 400),
        ("GET", READ, format!("uri={BIG_FILE}&offset=x&limit=1.5"), &[], 400),
        ("GET", READ, "uri=viking://~/memories/nothing.md".to_owned(), &[], 404),
        ("GET", READ, format!("uri={bob}"), &[], 403),
        (
            "GET",
            READ,
            "uri=viking://~/peers/p1/memories/events/2025/06/11/staging-upgrade.md".to_owned(),
            &[("X-OpenViking-Actor-Peer", "p2")],
            403,
        ),
        ("POST", READ, base_query(READ).to_owned(), &[], 405),
        ("GET", ABSTRACT, "uri=viking://resources/runbooks".to_owned(), &[], 200),
        ("GET", ABSTRACT, "uri=viking://resources/notes".to_owned(), &[], 200),
        ("GET", ABSTRACT, "uri=viking://~/memories/experiences/upgrade-lessons.md".to_owned(), &[], 200),
        ("GET", ABSTRACT, "uri=viking://resources/nothing".to_owned(), &[], 404),
        ("GET", ABSTRACT, "uri=viking://agent/private".to_owned(), &[], 403),
        ("GET", ABSTRACT, "uri=viking://resources/a/../b".to_owned(), &[], 400),
        ("PUT", ABSTRACT, base_query(ABSTRACT).to_owned(), &[], 405),
        ("GET", OVERVIEW, "uri=viking://resources/runbooks".to_owned(), &[], 200),
        ("GET", OVERVIEW, "uri=viking://resources/notes".to_owned(), &[], 200),
        ("GET", OVERVIEW, "uri=viking://resources/runbooks/cluster-upgrade.md".to_owned(), &[], 200),
        ("GET", OVERVIEW, String::new(), &[], 400),
        ("GET", OVERVIEW, "uri=viking://~/memories/nothing".to_owned(), &[], 404),
        ("GET", OVERVIEW, "uri=viking://user/bob/memories".to_owned(), &[], 403),
        ("POST", OVERVIEW, base_query(OVERVIEW).to_owned(), &[], 405),
        ("GET", LS, "uri=viking://".to_owned(), &[], 200),
        ("GET", LS, base_query(LS).to_owned(), &[], 200),
        ("GET", LS, "uri=viking://~/memories&recursive=true&abs_limit=20".to_owned(), &[], 200),
        ("GET", LS, "uri=viking://resources&output=original".to_owned(), &[], 200),
        ("GET", LS, "uri=viking://resources&output=original&recursive=true&show_all_hidden=true".to_owned(), &[], 200),
        ("GET", LS, "uri=viking://resources&simple=true&recursive=true".to_owned(), &[], 200),
        ("GET", LS, "uri=viking://resources&node_limit=2".to_owned(), &[], 200),
        ("GET", LS, "uri=viking://resources&limit=0".to_owned(), &[], 200),
        ("GET", LS, "uri=viking://~/peers".to_owned(), &[("X-OpenViking-Actor-Peer", "p1")], 200),
        ("GET", LS, "uri=viking://resources/runbooks/cluster-upgrade.md".to_owned(), &[], 400),
        ("GET", LS, "uri=viking://resources&node_limit=10001&output=tree".to_owned(), &[], 400),
        ("GET", LS, "uri=viking://resources/nothing".to_owned(), &[], 404),
        ("GET", LS, "uri=viking://user/bob".to_owned(), &[], 403),
        ("DELETE", LS, base_query(LS).to_owned(), &[], 405),
        ("GET", STAT, "uri=viking://".to_owned(), &[], 200),
        ("GET", STAT, "uri=viking://resources/runbooks".to_owned(), &[], 200),
        ("GET", STAT, format!("uri={BIG_FILE}"), &[], 200),
        ("GET", STAT, "uri=viking://~/memories/nothing.md".to_owned(), &[], 404),
        ("GET", STAT, format!("uri={bob}"), &[], 403),
        ("GET", STAT, "uri=viking%3A%2F%2Fresources%2Fa%252Fb".to_owned(), &[], 400),
        ("POST", STAT, base_query(STAT).to_owned(), &[], 405),
    ];
    let mut seen = BTreeMap::<&str, BTreeSet<u16>>::new();
    let mut replies = BTreeMap::<String, Reply>::new();
    for (method, path, query, headers, want) in probes {
        let target = if query.is_empty() { path.to_owned() } else { format!("{path}?{query}") };
        let reply = call(&app, Handler::Content, method, &target, headers, None).await;
        verify(&doc, &mut failures, op(path), &format!("{method} {target}"), &reply, want);
        seen.entry(path).or_default().insert(reply.status);
        replies.insert(format!("{method} {target}"), reply);
    }
    // What the schemas leave optional did occur, so it was checked.
    let reply = |key: &str| replies.get(key).unwrap_or_else(|| panic!("no probe {key}"));
    let health = reply("GET /health");
    assert_eq!(health.json["version"], doc["info"]["version"], "GET /health: version is not info.version");
    let big = reply(&format!("GET {READ}?uri={BIG_FILE}"));
    assert_eq!(big.json["truncated"], true, "a read over the cap is not flagged: {}", &big.text[..200]);
    let cut = reply(&format!("GET {LS}?uri=viking://resources&node_limit=2"));
    assert_eq!(cut.json["truncated"], true, "a cut listing is not flagged: {}", cut.text);
    let listed = reply(&format!("GET {LS}?{}", base_query(LS)));
    assert!(listed.text.contains("\"modTime\""), "no agent entry with a modTime to check: {}", listed.text);

    // Without identity under the authorizer: 401, but /health still answers.
    let (strict, _strict_dirs) = app_with_corpus(CONTEXT_CORPUS, false).await;
    for path in CONTENT_ROUTES {
        let want = if path == HEALTH { 200 } else { 401 };
        let reply = call(&strict, Handler::Content, "GET", &op(path).url(), &[], None).await;
        verify(&doc, &mut failures, op(path), "identity mode authorizer, no claims", &reply, want);
        seen.entry(path).or_default().insert(reply.status);
    }
    // An index built by another embedder: agent entries cannot be served.
    let other = Arc::new(App::with_parts(
        app.config.clone(),
        Arc::clone(&app.store),
        Arc::new(HashedEmbedder::new(EMBED_DIMENSION_OTHER)),
    ));
    let reply = call(&other, Handler::Content, "GET", &op(LS).url(), &[], None).await;
    verify(&doc, &mut failures, op(LS), "another embedder's index", &reply, 503);
    seen.entry(LS).or_default().insert(reply.status);
    drop(dirs);

    // Every documented status but the ones no probe can reach (413: a GET
    // body over the limit; 500: a corrupt index; 503 of the store or the
    // deadline) was seen.
    for path in CONTENT_ROUTES {
        let documented: BTreeSet<u16> =
            op(path).op["responses"].as_object().into_iter().flatten().filter_map(|(s, _)| s.parse().ok()).collect();
        let unseen: Vec<u16> = documented
            .iter()
            .copied()
            .filter(|s| !seen.get(path).is_some_and(|seen| seen.contains(s)) && ![413, 500, 503].contains(s))
            .collect();
        if !unseen.is_empty() {
            failures.push(format!("GET {path}: no probe answered documented statuses {unseen:?}"));
        }
    }
    assert_none(&failures);
}

/// What a [`ResourceProbe`] sends as its body.
enum Sent {
    Empty,
    Json(Value),
    /// Text as it is (with `Content-Type: application/json`).
    Text(String),
    /// A multipart/form-data body ([`multipart_parts`]).
    Parts(Vec<u8>),
}

/// A request to a resources route: the operation its answer is checked
/// against, the method sent (another for a 405), the target (a path and
/// query), the body and headers, and the status it must get.
struct ResourceProbe {
    op: (&'static str, &'static str),
    method: &'static str,
    target: String,
    body: Sent,
    headers: Vec<(&'static str, &'static str)>,
    want: u16,
}

impl ResourceProbe {
    /// `op`'s own method to `target` (a path and query) with `body`.
    fn new(op: (&'static str, &'static str), target: &str, body: Sent, want: u16) -> Self {
        Self { op, method: op.0, target: target.to_owned(), body, headers: Vec::new(), want }
    }

    /// The same, sent with `method` instead.
    fn sent_as(mut self, method: &'static str) -> Self {
        self.method = method;
        self
    }

    /// The same, with header `name: value`.
    fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }

    fn label(&self) -> String {
        let body = match &self.body {
            Sent::Empty => String::new(),
            Sent::Json(v) => v.to_string().chars().take(160).collect(),
            Sent::Text(t) => format!("{} bytes of text", t.len()),
            Sent::Parts(p) => format!("{} bytes of parts", p.len()),
        };
        format!("{} {} {body} {:?}", self.method, self.target, self.headers)
    }

    fn request(&self) -> lambda_http::Request {
        let headers = self.headers.as_slice();
        match &self.body {
            Sent::Empty => request_to(&self.target, self.method, headers, lambda_http::Body::Empty),
            Sent::Json(v) => request_to(&self.target, self.method, headers, lambda_http::Body::Text(v.to_string())),
            Sent::Text(t) => request_to(&self.target, self.method, headers, lambda_http::Body::Text(t.clone())),
            Sent::Parts(p) => multipart_request(&self.target, self.method, headers, p),
        }
    }
}

/// Uploads `bytes` as `name` through the handler; its `temp_file_id`.
async fn upload(app: &Arc<App>, name: &str, bytes: &[u8]) -> String {
    let body = multipart_parts(&[(UPLOAD_FILE_PART, Some(name), bytes.to_vec())]);
    let reply = call_handler(app, Handler::Content, multipart_request(UPLOAD, "POST", &[], &body)).await;
    reply.json["result"]["temp_file_id"].as_str().unwrap_or_else(|| panic!("upload {name}: {}", reply.text)).to_owned()
}

/// Every resources, skills, watches and wait operation (and
/// `skills/find`), through the handlers: each outcome its description
/// names, every error, and each of them fits the schema documented for its
/// status; every documented status is answered but 500 (a bug or a
/// corrupt index) and, on the routes that call no store in dev mode
/// (`skills/validate`, the watches, `system/wait`), 503 (only an API key
/// lookup or the deadline reaches it). A store that fails every call gives
/// the others' 503; the uploads, archives and conflicts they need are made
/// through the handlers or put in the store.
#[tokio::test]
async fn resource_responses_fit_their_schemas() {
    let doc = doc();
    let (app, _dirs) = app().await;
    let ops = operations(&doc);
    let op = |method: &str, path: &str| {
        ops.iter().find(|o| o.method == method && o.path == path).unwrap_or_else(|| panic!("{method} {path}"))
    };
    let mut failures = Vec::new();
    reset(&app).await;

    // The base upload is the document's: its id is the one the examples name.
    let id = upload(&app, UPLOAD_NAME, UPLOAD_TEXT.as_bytes()).await;
    let example = &doc["components"]["schemas"]["AddResourceRequest"]["properties"]["temp_file_id"]["example"];
    let file_example = &doc["components"]["schemas"]["UploadRequest"]["properties"]["file"]["example"];
    if id != UPLOAD_ID || example != UPLOAD_ID || file_example != UPLOAD_TEXT {
        failures.push(format!(
            "POST {UPLOAD}: the upload of {UPLOAD_NAME} is {id}, the examples' temp_file_id {example}, their file {file_example}"
        ));
    }
    // Uploads the probes name: each is used once (a used upload is removed).
    let archive = zip_of(&[
        ("README.md", b"# Ferry tools\n\nScripts for the ferry timetable."),
        ("src/timetable.py", b"def next_ferry():\n    return '07:40 from Piraeus'\n"),
        ("logo.png", b"\x89PNG\r\n\x1a\n\0\0\0"),
    ]);
    let archive = upload(&app, "ferry.zip", &archive).await;
    // `old.md/x.md` lands below the file `viking://~/notes/old.md` (reset puts it there): refused.
    let half = upload(&app, "half.zip", &zip_of(&[("a.md", b"# A"), ("old.md/x.md", b"# X")])).await;
    let many: Vec<(String, &[u8])> = (0..=MAX_ARCHIVE_FILES).map(|i| (format!("f{i}.md"), b"x".as_slice())).collect();
    let many: Vec<(&str, &[u8])> = many.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    let many = upload(&app, "many.zip", &zip_of(&many)).await;
    let png = upload(&app, "photo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").await;
    let skill_md = upload(&app, "SKILL.md", skill_text("kiln").as_bytes()).await;
    let skill_zip = upload(
        &app,
        "glaze.zip",
        &zip_of(&[("glaze/SKILL.md", skill_text("glaze").as_bytes()), ("glaze/recipes.csv", b"cone,6\n")]),
    )
    .await;
    let skill_many: Vec<(String, Vec<u8>)> = std::iter::once(("SKILL.md".to_owned(), skill_text("big").into_bytes()))
        .chain((0..MAX_ARCHIVE_FILES).map(|i| (format!("f{i}.txt"), b"x".to_vec())))
        .collect();
    let skill_many: Vec<(&str, &[u8])> = skill_many.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    let skill_many = upload(&app, "big.zip", &zip_of(&skill_many)).await;
    let missing = "0123456789abcdef0123456789abcdef_gone.md";
    // A file where a skill's directory would be: adding that skill is a 409.
    let clash = bytes::Bytes::from_static(b"not a directory");
    let clash_key = "accounts/default/tree/agent/skills/clash";
    app.store.put(clash_key, clash, skald::store::PutMode::Overwrite).await.expect("put the clash");
    // Another user's skill: not the caller's to remove.
    let bob = bytes::Bytes::from(skill_text(SKILL));
    let bob_key = format!("accounts/default/tree/user/bob/skills/{SKILL}/SKILL.md");
    app.store.put(&bob_key, bob, skald::store::PutMode::Overwrite).await.expect("put bob's skill");

    let too_big = "x".repeat(app.config.limits.max_body_bytes + 1);
    let big_json = || Sent::Json(json!({ "data": too_big }));
    let big_text = || Sent::Text(format!("{{\"data\": \"{too_big}\"}}"));
    let parts = |parts: &[(&str, Option<&str>, &[u8])]| {
        Sent::Parts(multipart_parts(&parts.iter().map(|(n, f, b)| (*n, *f, b.to_vec())).collect::<Vec<_>>()))
    };
    let skill = format!("{SKILLS}/{SKILL}");
    let watch = format!("{WATCHES}/{WATCH_ID}");
    let (upload_op, add, list, add_skill, validate, get, put, delete, watches, get_watch, delete_watch, wait, find) = (
        ("POST", UPLOAD),
        ("POST", ADD_RESOURCE),
        ("GET", SKILLS),
        ("POST", SKILLS),
        ("POST", VALIDATE_SKILL),
        ("GET", SKILL_ONE),
        ("PUT", SKILL_ONE),
        ("DELETE", SKILL_ONE),
        ("GET", WATCHES),
        ("GET", WATCH),
        ("DELETE", WATCH),
        ("POST", WAIT),
        ("POST", SKILLS_FIND),
    );
    let file = UPLOAD_TEXT.as_bytes();
    let probes = vec![
        ResourceProbe::new(upload_op, UPLOAD, parts(&[("file", Some(UPLOAD_NAME), file)]), 200),
        ResourceProbe::new(
            upload_op,
            UPLOAD,
            parts(&[("upload_mode", None, b"local"), ("other", None, b"x"), ("file", Some("a b.md"), file)]),
            200,
        ),
        ResourceProbe::new(upload_op, UPLOAD, Sent::Json(json!({ "file": "x" })), 400),
        ResourceProbe::new(upload_op, UPLOAD, parts(&[("upload_mode", None, b"local")]), 400),
        ResourceProbe::new(
            upload_op,
            UPLOAD,
            parts(&[("file", Some("big.md"), &vec![b'a'; MAX_UPLOAD_BYTES + 1])]),
            413,
        ),
        ResourceProbe::new(upload_op, UPLOAD, parts(&[("file", Some("full.md"), &vec![b'a'; MAX_UPLOAD_BYTES])]), 200),
        ResourceProbe::new(upload_op, UPLOAD, Sent::Empty, 405).sent_as("GET"),
        ResourceProbe::new(add, ADD_RESOURCE, Sent::Json(json!({ "temp_file_id": UPLOAD_ID })), 200),
        ResourceProbe::new(
            add,
            ADD_RESOURCE,
            Sent::Json(json!({ "temp_file_id": UPLOAD_ID, "to": "viking://resources/travel/ferry.md" })),
            200,
        ),
        ResourceProbe::new(
            add,
            ADD_RESOURCE,
            Sent::Json(json!({ "temp_file_id": UPLOAD_ID, "parent": "viking://~/resources", "source_name": "a/b.md" })),
            200,
        ),
        ResourceProbe::new(
            add,
            ADD_RESOURCE,
            Sent::Json(
                json!({ "temp_file_id": archive, "parent": "viking://resources/projects", "description": "Ferry tools." }),
            ),
            200,
        ),
        ResourceProbe::new(
            add,
            ADD_RESOURCE,
            Sent::Json(json!({ "temp_file_id": half, "to": "viking://~/notes" })),
            200,
        ),
        ResourceProbe::new(add, ADD_RESOURCE, Sent::Json(json!({ "path": "https://example.com/ferry.html" })), 400),
        ResourceProbe::new(
            add,
            ADD_RESOURCE,
            Sent::Json(
                json!({ "temp_file_id": UPLOAD_ID, "to": "viking://resources/a", "parent": "viking://resources" }),
            ),
            400,
        ),
        ResourceProbe::new(add, ADD_RESOURCE, Sent::Json(json!({ "temp_file_id": png })), 400),
        ResourceProbe::new(add, ADD_RESOURCE, Sent::Json(json!({ "temp_file_id": "../../keys" })), 400),
        ResourceProbe::new(add, ADD_RESOURCE, Sent::Json(json!({ "temp_file_id": UPLOAD_ID, "nonsense": 1 })), 400),
        ResourceProbe::new(
            add,
            ADD_RESOURCE,
            Sent::Json(json!({ "temp_file_id": UPLOAD_ID, "parent": "viking://user/bob/resources" })),
            403,
        ),
        ResourceProbe::new(add, ADD_RESOURCE, Sent::Json(json!({ "temp_file_id": missing })), 404),
        ResourceProbe::new(add, ADD_RESOURCE, Sent::Json(json!({ "temp_file_id": many })), 413),
        ResourceProbe::new(add, ADD_RESOURCE, big_text(), 413),
        // Nothing lands: below the file `viking://~/notes/old.md`.
        ResourceProbe::new(
            add,
            ADD_RESOURCE,
            Sent::Json(json!({ "temp_file_id": UPLOAD_ID, "to": "viking://~/notes/old.md/sub" })),
            503,
        ),
        ResourceProbe::new(add, ADD_RESOURCE, Sent::Empty, 405).sent_as("GET"),
        ResourceProbe::new(list, SKILLS, Sent::Empty, 200),
        ResourceProbe::new(list, &format!("{SKILLS}?target_uri=viking://agent/skills&node_limit=1"), Sent::Empty, 200),
        ResourceProbe::new(list, &format!("{SKILLS}?target_uri=viking://"), Sent::Empty, 200),
        ResourceProbe::new(list, &format!("{SKILLS}?node_limit=0"), Sent::Empty, 400),
        ResourceProbe::new(list, &format!("{SKILLS}?target_uri=viking://user/bob/skills"), Sent::Empty, 403),
        ResourceProbe::new(list, SKILLS, big_text(), 413),
        ResourceProbe::new(list, SKILLS, Sent::Empty, 405).sent_as("PATCH"),
        ResourceProbe::new(add_skill, SKILLS, Sent::Json(json!({ "data": skill_text(SKILL) })), 200),
        ResourceProbe::new(
            add_skill,
            SKILLS,
            Sent::Json(
                json!({ "data": { "name": "kiln", "description": "Fire pottery", "content": "Cone 6." }, "target_uri": "viking://~/skills" }),
            ),
            200,
        ),
        ResourceProbe::new(add_skill, SKILLS, Sent::Json(json!({ "temp_file_id": skill_md })), 200),
        ResourceProbe::new(add_skill, SKILLS, Sent::Json(json!({ "temp_file_id": skill_zip })), 200),
        ResourceProbe::new(add_skill, SKILLS, Sent::Json(json!({ "data": 5 })), 400),
        ResourceProbe::new(add_skill, SKILLS, Sent::Json(json!({ "data": "no frontmatter" })), 400),
        ResourceProbe::new(
            add_skill,
            SKILLS,
            Sent::Json(json!({ "data": skill_text(SKILL), "temp_file_id": missing })),
            400,
        ),
        ResourceProbe::new(
            add_skill,
            SKILLS,
            Sent::Json(json!({ "data": skill_text(SKILL), "target_uri": "viking://user/bob/skills" })),
            403,
        ),
        ResourceProbe::new(add_skill, SKILLS, Sent::Json(json!({ "temp_file_id": missing })), 404),
        ResourceProbe::new(add_skill, SKILLS, Sent::Json(json!({ "data": skill_text("clash") })), 409),
        ResourceProbe::new(add_skill, SKILLS, Sent::Json(json!({ "temp_file_id": skill_many })), 413),
        ResourceProbe::new(add_skill, SKILLS, big_json(), 413),
        ResourceProbe::new(add_skill, SKILLS, Sent::Empty, 405).sent_as("DELETE"),
        ResourceProbe::new(
            validate,
            VALIDATE_SKILL,
            Sent::Json(json!({ "data": skill_text(SKILL), "strict": true })),
            200,
        ),
        ResourceProbe::new(
            validate,
            VALIDATE_SKILL,
            Sent::Json(json!({ "data": { "name": "kiln", "description": "Fire pottery", "body": "Cone 6." } })),
            200,
        ),
        ResourceProbe::new(validate, VALIDATE_SKILL, Sent::Json(json!({ "data": "no frontmatter" })), 400),
        ResourceProbe::new(validate, VALIDATE_SKILL, Sent::Json(json!({})), 400),
        ResourceProbe::new(validate, VALIDATE_SKILL, big_json(), 413),
        ResourceProbe::new(validate, VALIDATE_SKILL, Sent::Empty, 405).sent_as("GET"),
        ResourceProbe::new(get, &skill, Sent::Empty, 200),
        ResourceProbe::new(get, &format!("{skill}?target_uri=viking://agent/skills"), Sent::Empty, 200),
        ResourceProbe::new(get, &format!("{SKILLS}/.hidden"), Sent::Empty, 400),
        ResourceProbe::new(get, &format!("{skill}?target_uri=../x"), Sent::Empty, 400),
        ResourceProbe::new(get, &format!("{SKILLS}/no-such-skill"), Sent::Empty, 404),
        ResourceProbe::new(get, &skill, big_text(), 413),
        ResourceProbe::new(get, &skill, Sent::Empty, 405).sent_as("POST"),
        ResourceProbe::new(put, &skill, Sent::Json(json!({ "data": skill_text(SKILL) })), 200),
        ResourceProbe::new(put, &skill, Sent::Json(json!({ "data": skill_text("kiln") })), 400),
        ResourceProbe::new(
            put,
            &skill,
            Sent::Json(json!({ "data": skill_text(SKILL), "target_uri": "viking://user/bob/skills" })),
            403,
        ),
        ResourceProbe::new(put, &skill, Sent::Json(json!({ "temp_file_id": missing })), 404),
        ResourceProbe::new(put, &format!("{SKILLS}/clash"), Sent::Json(json!({ "data": skill_text("clash") })), 409),
        ResourceProbe::new(put, &skill, big_json(), 413),
        ResourceProbe::new(put, &skill, Sent::Empty, 405).sent_as("PATCH"),
        ResourceProbe::new(delete, &skill, Sent::Empty, 200),
        ResourceProbe::new(delete, &format!("{skill}?target_uri=viking://agent/skills"), Sent::Empty, 200),
        ResourceProbe::new(delete, &format!("{SKILLS}/.hidden"), Sent::Empty, 400),
        ResourceProbe::new(delete, &format!("{skill}?target_uri=viking://user/bob/skills"), Sent::Empty, 403),
        ResourceProbe::new(delete, &format!("{SKILLS}/no-such-skill"), Sent::Empty, 404),
        ResourceProbe::new(delete, &skill, big_text(), 413),
        ResourceProbe::new(delete, &skill, Sent::Empty, 405).sent_as("POST"),
        ResourceProbe::new(watches, WATCHES, Sent::Empty, 200),
        ResourceProbe::new(watches, &format!("{WATCHES}?active_only=false"), Sent::Empty, 200),
        ResourceProbe::new(watches, WATCHES, Sent::Empty, 400).with_header("X-OpenViking-User", "../x"),
        ResourceProbe::new(watches, WATCHES, big_text(), 413),
        ResourceProbe::new(watches, WATCHES, Sent::Empty, 405).sent_as("PUT"),
        ResourceProbe::new(get_watch, &watch, Sent::Empty, 404),
        ResourceProbe::new(get_watch, &watch, Sent::Empty, 400).with_header("X-OpenViking-User", "../x"),
        ResourceProbe::new(get_watch, &watch, big_text(), 413),
        ResourceProbe::new(get_watch, &watch, Sent::Empty, 405).sent_as("PUT"),
        ResourceProbe::new(delete_watch, &watch, Sent::Empty, 404),
        ResourceProbe::new(delete_watch, &watch, Sent::Empty, 400).with_header("X-Client-Timeout-Ms", "0"),
        ResourceProbe::new(delete_watch, &watch, big_text(), 413),
        ResourceProbe::new(delete_watch, &watch, Sent::Empty, 405).sent_as("PUT"),
        ResourceProbe::new(wait, WAIT, Sent::Empty, 200),
        ResourceProbe::new(wait, WAIT, Sent::Json(json!({ "timeout": 5 })), 200),
        ResourceProbe::new(wait, WAIT, Sent::Empty, 400).with_header("X-OpenViking-User", "../x"),
        ResourceProbe::new(wait, WAIT, big_text(), 413),
        ResourceProbe::new(wait, WAIT, Sent::Empty, 405).sent_as("GET"),
        ResourceProbe::new(find, SKILLS_FIND, Sent::Json(json!({ "query": "bake bread with a starter" })), 200),
        ResourceProbe::new(
            find,
            SKILLS_FIND,
            Sent::Json(
                json!({ "query": QUERY, "target_uri": ["viking://agent/skills"], "telemetry": true, "level": 2 }),
            ),
            200,
        ),
        ResourceProbe::new(find, SKILLS_FIND, Sent::Json(json!({ "query": "" })), 400),
        ResourceProbe::new(find, SKILLS_FIND, Sent::Json(json!({ "query": QUERY, "context_type": "skill" })), 400),
        ResourceProbe::new(
            find,
            SKILLS_FIND,
            Sent::Json(json!({ "query": QUERY, "target_uri": "viking://user/bob" })),
            403,
        ),
        ResourceProbe::new(find, SKILLS_FIND, big_json(), 413),
        ResourceProbe::new(find, SKILLS_FIND, Sent::Empty, 405).sent_as("GET"),
    ];
    let mut seen = BTreeMap::<String, BTreeSet<u16>>::new();
    let mut expectations: Vec<(String, bool)> = Vec::new();
    for probe in &probes {
        let o = op(probe.op.0, probe.op.1);
        reset(&app).await;
        let reply = call_handler(&app, o.handler(), probe.request()).await;
        verify(&doc, &mut failures, o, &probe.label(), &reply, probe.want);
        seen.entry(o.name()).or_default().insert(reply.status);
        // What the schemas leave open did occur, so it was checked.
        let result = &reply.json["result"];
        let body = if let Sent::Json(body) = &probe.body { body.clone() } else { Value::Null };
        let sent = |id: &str| body["temp_file_id"] == id;
        let mut expect =
            |what: &str, held: bool| expectations.push((format!("{}: {what}: {}", probe.label(), reply.text), held));
        match (probe.op.1, reply.status) {
            (UPLOAD, 200) => {
                let id = result["temp_file_id"].as_str().unwrap_or_default();
                let named = [UPLOAD_NAME, "a_b.md", "full.md"].iter().any(|name| id.ends_with(&format!("_{name}")));
                expect("the id ends with the file's cleaned name", named);
            }
            (ADD_RESOURCE, 400) if body.get("path").is_some() => {
                expect("`path` is refused at it", !errors_at(&reply, "path").is_empty())
            }
            (ADD_RESOURCE, 200) if sent(&archive) => {
                let warned = result["warnings"]
                    .as_array()
                    .is_some_and(|w| w.len() == 1 && w[0].as_str().is_some_and(|w| w.contains("logo.png")));
                let placed = result["root_uri"] == "viking://resources/projects/ferry" && result["files"] == 2;
                expect("an archive gets its own directory, its binary entry named", placed && warned);
            }
            (ADD_RESOURCE, 200) if sent(&half) => {
                let one_error = result["errors"].as_array().is_some_and(|e| e.len() == 1);
                expect(
                    "a half-written archive is partial",
                    result["status"] == "partial" && result["files"] == 1 && one_error,
                );
            }
            (ADD_RESOURCE, 503) => {
                expect("nothing written says so", reply.text.contains("no file of the resource was written"))
            }
            (SKILLS, 200) if sent(&skill_zip) => {
                expect("the file beside the SKILL.md is kept", result["auxiliary_files"] == 1)
            }
            (SKILLS, 200) if probe.op.0 == "GET" && probe.target == SKILLS => {
                expect("skills are listed", result["skills"].as_array().is_some_and(|s| !s.is_empty()));
            }
            (WATCH, 404) => expect("the 404 says why", reply.text.contains("fetches no URL")),
            _ => {}
        }
    }
    for (what, held) in expectations {
        if !held {
            failures.push(what);
        }
    }

    // Without identity under the authorizer: 401. A store that fails every
    // call: 503 where the route calls one.
    let (strict, _strict_dirs) = app_with_corpus(CONTEXT_CORPUS, false).await;
    let faulty =
        FaultyStore::new(Arc::clone(&app.store), vec![Rule::every(FaultOp::Any, "", Fault::FailBeforeLanding)]);
    let failing = Arc::new(App::with_parts(app.config.clone(), Arc::new(faulty), Arc::clone(&app.embedder)));
    let no_store = [VALIDATE_SKILL, WATCHES, WATCH, WAIT];
    let resource_ops = || ops.iter().filter(|o| RESOURCE_ROUTES.contains(&o.path.as_str()) || o.path == SKILLS_FIND);
    for o in resource_ops() {
        let body = o.op.get("requestBody").is_some().then(|| Value::Object(base_body(&o.path)));
        let reply = call_handler(&strict, o.handler(), base_request(o, &o.url(), &[], body.as_ref())).await;
        verify(&doc, &mut failures, o, "identity mode authorizer, no claims", &reply, 401);
        seen.entry(o.name()).or_default().insert(reply.status);
        if !no_store.contains(&o.path.as_str()) {
            let reply = call_handler(&failing, o.handler(), base_request(o, &o.url(), &[], body.as_ref())).await;
            verify(&doc, &mut failures, o, "a store that fails every call", &reply, 503);
            seen.entry(o.name()).or_default().insert(reply.status);
        }
    }

    // Every documented status was answered, but 500 and, where no store is
    // called, 503.
    for o in resource_ops() {
        let unreachable: &[u16] = if no_store.contains(&o.path.as_str()) { &[500, 503] } else { &[500] };
        let documented: BTreeSet<u16> =
            o.op["responses"].as_object().into_iter().flatten().filter_map(|(s, _)| s.parse().ok()).collect();
        let answered = seen.get(&o.name()).cloned().unwrap_or_default();
        let unseen: Vec<&u16> =
            documented.iter().filter(|s| !answered.contains(s) && !unreachable.contains(s)).collect();
        if !unseen.is_empty() {
            failures.push(format!("{}: no probe answered documented statuses {unseen:?}", o.name()));
        }
    }
    assert_none(&failures);
}

// ---------------------------------------------------------------------------
// 5. MCP
// ---------------------------------------------------------------------------

/// An answer of `/mcp`: the transport's refusals are plain text and a
/// notification's 202 has no body, so the JSON is only there when the body
/// is JSON.
struct McpAnswer {
    status: u16,
    headers: lambda_http::http::HeaderMap,
    text: String,
    json: Option<Value>,
}

impl McpAnswer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The headers a valid MCP request sends in `version` (2025-06-18 and
/// 2025-11-25 also on `initialize`, where they must match its body).
fn mcp_headers(version: &str) -> Vec<(String, String)> {
    [
        ("accept", MCP_ACCEPT),
        ("content-type", "application/json"),
        ("host", "127.0.0.1"),
        ("mcp-protocol-version", version),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v.to_owned()))
    .collect()
}

/// `headers` with `name` set to `value` (replacing it, whatever its case).
fn with_header(mut headers: Vec<(String, String)>, name: &str, value: &str) -> Vec<(String, String)> {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    headers.push((name.to_owned(), value.to_owned()));
    headers
}

/// `headers` without `name`.
fn without_header(mut headers: Vec<(String, String)>, name: &str) -> Vec<(String, String)> {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    headers
}

/// A JSON-RPC request (`id` `Some`) or notification, as text.
fn rpc_text(id: Option<i64>, method: &str, params: &Value) -> String {
    let mut message = json!({ "jsonrpc": "2.0", "method": method, "params": params });
    if let Some(id) = id {
        message["id"] = json!(id);
    }
    message.to_string()
}

/// A 2026-07-28 request: `params` with the request's own `_meta`, and the
/// `Mcp-Method` (and for a tool call `Mcp-Name`) headers that must agree
/// with the body.
fn rpc_2026(method: &str, params: &Value) -> (Vec<(String, String)>, String) {
    let mut params = params.clone();
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MCP_2026,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "openapi-drift", "version": "1" },
    });
    let mut headers = with_header(mcp_headers(MCP_2026), "mcp-method", method);
    if let Some(name) = params["name"].as_str() {
        headers = with_header(headers, "mcp-name", name);
    }
    (headers, rpc_text(Some(1), method, &params))
}

/// A Lambda event to `/mcp` with exactly `headers` (nothing added) and a
/// relative target, so that the `Host` header is what names the host.
fn mcp_event(method: &str, headers: &[(String, String)], body: Option<&str>) -> lambda_http::Request {
    let mut builder = lambda_http::http::Request::builder().method(method).uri(MCP);
    for (name, value) in headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let body = body.map_or(lambda_http::Body::Empty, |b| lambda_http::Body::Text(b.to_owned()));
    builder.body(body).expect("a valid request")
}

/// Sends `method` to `/mcp` through the Lambda edge. An answer expected as
/// JSON (`json`) goes through [`Handler::Mcp`] as every route's does in
/// these tests; plain text and empty bodies are read as they come.
async fn mcp_send(
    app: &Arc<App>,
    method: &str,
    headers: &[(String, String)],
    body: Option<&str>,
    json: bool,
) -> McpAnswer {
    let event = mcp_event(method, headers, body);
    if json {
        let reply = call_handler(app, Handler::Mcp, event).await;
        return McpAnswer { status: reply.status, headers: reply.headers, text: reply.text, json: Some(reply.json) };
    }
    let handler = |app: Arc<App>, request| async move { skald_mcp::handle(&app, request).await };
    let response = skald_lambda::serve(app, &handler, event).await;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = match response.into_body() {
        lambda_http::Body::Text(text) => text,
        lambda_http::Body::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    };
    let is_json =
        headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|c| c.starts_with("application/json"));
    let json = if is_json { serde_json::from_str(&text).ok() } else { None };
    McpAnswer { status, headers, text, json }
}

/// Records in `failures` whether `answer` has status `want` and fits what
/// `op` documents for its status: the media type (JSON, the transport's
/// plain text, or no body), its schema, and the headers documented `const`.
fn verify_mcp(doc: &Value, failures: &mut Vec<String>, op: &Operation<'_>, label: &str, answer: &McpAnswer, want: u16) {
    let what = format!("{} ({label})", op.name());
    if answer.status != want {
        failures.push(format!("{what}: answered {} not {want}: {}", answer.status, answer.text));
    }
    let Some(response) = op.op["responses"].get(answer.status.to_string()).map(|r| resolve(doc, r)) else {
        failures.push(format!("{what}: status {} is not documented", answer.status));
        return;
    };
    let content = response.get("content").and_then(Value::as_object);
    let media: Vec<&String> = content.into_iter().flat_map(|c| c.keys()).collect();
    match (&answer.json, content) {
        (_, None) if answer.text.is_empty() => {}
        (_, None) => failures.push(format!("{what}: documented without a body, answered {:?}", answer.text)),
        (Some(json), Some(content)) => match content.get("application/json") {
            Some(body) => {
                failures.extend(fits(doc, &body["schema"], json, &what));
                if answer.header("content-type").is_none_or(|c| !c.starts_with("application/json")) {
                    failures.push(format!("{what}: JSON without `Content-Type: application/json`"));
                }
            }
            None => failures.push(format!("{what}: answered JSON, documented {media:?}: {}", answer.text)),
        },
        (None, Some(content)) => match content.get("text/plain") {
            Some(body) => failures.extend(fits(doc, &body["schema"], &json!(answer.text), &what)),
            None => failures.push(format!("{what}: answered text {:?}, documented {media:?}", answer.text)),
        },
    }
    for (name, header) in response.get("headers").and_then(Value::as_object).into_iter().flatten() {
        if let Some(documented) = header.pointer("/schema/const").and_then(Value::as_str)
            && answer.header(name) != Some(documented)
        {
            failures.push(format!("{what}: header {name} is {:?}, documented {documented:?}", answer.header(name)));
        }
    }
}

/// A request to `/mcp`: label, method, headers, body, the status it must
/// get and whether that answer is JSON.
struct McpProbe {
    label: String,
    method: &'static str,
    headers: Vec<(String, String)>,
    body: Option<String>,
    want: u16,
    json: bool,
}

impl McpProbe {
    fn post(label: &str, headers: Vec<(String, String)>, body: String, want: u16, json: bool) -> Self {
        Self { label: label.to_owned(), method: "POST", headers, body: Some(body), want, json }
    }
}

/// The names of `skald_mcp`'s tools, in listing order.
fn mcp_tool_names() -> Vec<String> {
    skald_mcp::tools::list().iter().map(|t| t.name.to_string()).collect()
}

/// The string `enum` at `pointer` in the components' schemas.
fn schema_enum(doc: &Value, pointer: &str) -> Vec<String> {
    doc["components"]["schemas"]
        .pointer(pointer)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("components.schemas{pointer} is not an enum"))
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn mcp_responses_fit_their_schemas() {
    let doc = doc();
    let (app, _dirs) = app().await;
    let ops = operations(&doc);
    let op = |method: &str| {
        ops.iter().find(|o| o.path == MCP && o.method == method).unwrap_or_else(|| panic!("{method} {MCP}"))
    };
    let headers = mcp_headers(MCP_VERSION);
    let rpc = |id: i64, method: &str, params: Value| rpc_text(Some(id), method, &params);
    let mut probes = Vec::new();
    // The document's request examples: a request is answered, a notification accepted.
    let content = op("POST").op.pointer("/requestBody/content/application~1json").expect("a JSON-RPC body");
    for (label, example) in content["examples"].as_object().into_iter().flatten() {
        let request = example["value"].get("id").is_some();
        let want = if request { 200 } else { 202 };
        probes.push(McpProbe::post(
            &format!("example {label}"),
            headers.clone(),
            example["value"].to_string(),
            want,
            request,
        ));
    }
    let (discover, discover_body) = rpc_2026("server/discover", &json!({}));
    let (list_2026, list_2026_body) = rpc_2026("tools/list", &json!({}));
    let (call_2026, call_2026_body) = rpc_2026("tools/call", &json!({ "name": "health", "arguments": {} }));
    let (ping_2026, ping_2026_body) = rpc_2026("ping", &json!({}));
    let (init_2026, init_2026_body) = rpc_2026("initialize", &json!({}));
    let (mismatch_2026, mismatch_2026_body) = rpc_2026("tools/list", &json!({}));
    let huge = rpc(9, "tools/call", json!({ "name": "find", "arguments": { "query": "x".repeat(300_000) } }));
    let tools_list = rpc(1, "tools/list", json!({}));
    let unknown_tool = rpc(5, "tools/call", json!({ "name": "remember", "arguments": {} }));
    let refused_argument = rpc(6, "tools/call", json!({ "name": "find", "arguments": { "query": QUERY, "limit": 0 } }));
    let extra_member = json!({ "jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {}, "extra": true });
    let client = json!({ "name": "x", "version": "1" });
    let newer_initialize =
        rpc(1, "initialize", json!({ "protocolVersion": MCP_VERSION, "capabilities": {}, "clientInfo": client }));
    let posted_response = json!({ "jsonrpc": "2.0", "id": 1, "result": {} }).to_string();
    probes.extend([
        McpProbe::post("ping", headers.clone(), rpc(4, "ping", json!({})), 200, true),
        McpProbe::post("an unknown tool", headers.clone(), unknown_tool, 200, true),
        McpProbe::post("a refused argument", headers.clone(), refused_argument, 200, true),
        McpProbe::post("a method not offered", headers.clone(), rpc(7, "resources/list", json!({})), 200, true),
        McpProbe::post("an unknown member", headers.clone(), extra_member.to_string(), 200, true),
        McpProbe::post("2026 server/discover", discover, discover_body, 200, true),
        McpProbe::post("2026 tools/list", list_2026, list_2026_body, 200, true),
        McpProbe::post("2026 tools/call", call_2026, call_2026_body, 200, true),
        McpProbe::post("2026 ping", ping_2026, ping_2026_body, 404, true),
        McpProbe::post("2026 initialize", init_2026, init_2026_body, 404, true),
        McpProbe::post(
            "2026 Mcp-Method against the body",
            with_header(mismatch_2026, "mcp-method", "tools/call"),
            mismatch_2026_body,
            400,
            true,
        ),
        McpProbe::post(
            "2026 without _meta",
            with_header(mcp_headers(MCP_2026), "mcp-method", "tools/list"),
            tools_list.clone(),
            400,
            true,
        ),
        McpProbe::post("initialize against the header", mcp_headers("2025-06-18"), newer_initialize, 400, true),
        McpProbe::post("a posted response", headers.clone(), posted_response, 400, true),
        McpProbe::post("an unknown revision", mcp_headers("1999-01-01"), tools_list.clone(), 400, false),
        McpProbe::post("no Host", without_header(headers.clone(), "host"), tools_list.clone(), 400, false),
        McpProbe::post(
            "a foreign Origin",
            with_header(headers.clone(), "origin", "http://attacker.example"),
            tools_list.clone(),
            403,
            false,
        ),
        McpProbe::post(
            "a loopback Origin",
            with_header(headers.clone(), "origin", "http://localhost:6274"),
            tools_list.clone(),
            200,
            true,
        ),
        McpProbe::post(
            "Accept without SSE",
            with_header(headers.clone(), "accept", "application/json"),
            tools_list.clone(),
            406,
            false,
        ),
        McpProbe::post("no Accept", without_header(headers.clone(), "accept"), tools_list.clone(), 406, false),
        McpProbe::post(
            "a text body",
            with_header(headers.clone(), "content-type", "text/plain"),
            tools_list.clone(),
            415,
            false,
        ),
        McpProbe::post("a batch", headers.clone(), "[]".to_owned(), 415, false),
        McpProbe::post("not JSON", headers.clone(), "{".to_owned(), 415, false),
        McpProbe::post("over the body limit", headers.clone(), huge.clone(), 413, true),
    ]);
    for method in ["GET", "DELETE"] {
        let plain = vec![("accept".to_owned(), MCP_ACCEPT.to_owned()), ("host".to_owned(), "127.0.0.1".to_owned())];
        let probe = |label: &str, headers: Vec<(String, String)>, body: Option<String>, want: u16, json: bool| {
            McpProbe { label: label.to_owned(), method, headers, body, want, json }
        };
        probes.extend([
            probe("no stream, no session", plain.clone(), None, 405, false),
            probe("no Host", without_header(plain.clone(), "host"), None, 400, false),
            probe(
                "a foreign Origin",
                with_header(plain.clone(), "origin", "http://attacker.example"),
                None,
                403,
                false,
            ),
            probe("over the body limit", plain.clone(), Some(huge.clone()), 413, true),
        ]);
    }

    let mut failures = Vec::new();
    let mut seen = BTreeMap::<&str, BTreeSet<u16>>::new();
    let mut answers = BTreeMap::new();
    for probe in &probes {
        let answer = mcp_send(&app, probe.method, &probe.headers, probe.body.as_deref(), probe.json).await;
        verify_mcp(&doc, &mut failures, op(probe.method), &probe.label, &answer, probe.want);
        seen.entry(probe.method).or_default().insert(answer.status);
        answers.insert(format!("{} {}", probe.method, probe.label), answer);
    }
    for method in ["POST", "GET", "DELETE"] {
        let documented: BTreeSet<u16> =
            op(method).op["responses"].as_object().into_iter().flatten().filter_map(|(s, _)| s.parse().ok()).collect();
        let unseen: Vec<&u16> =
            documented.iter().filter(|s| !seen.get(method).is_some_and(|seen| seen.contains(s))).collect();
        if !unseen.is_empty() {
            failures.push(format!("{method} {MCP}: no probe answered documented statuses {unseen:?}"));
        }
    }

    // The handshake and the listing, against their own schemas.
    let result = |key: &str| {
        let answer = answers.get(key).unwrap_or_else(|| panic!("no probe {key}"));
        answer.json.as_ref().map(|j| j["result"].clone()).unwrap_or_default()
    };
    let schemas = &doc["components"]["schemas"];
    let initialized = result("POST example initialize");
    failures.extend(fits(&doc, &schemas["McpInitializeResult"], &initialized, "initialize result"));
    if initialized["serverInfo"]["version"] != doc["info"]["version"] {
        failures.push(format!("initialize: serverInfo.version is not info.version: {initialized}"));
    }
    let listed = result("POST example toolsList");
    failures.extend(fits(&doc, &schemas["McpListToolsResult"], &listed, "tools/list result"));
    let listed_names: Vec<String> = listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .map(str::to_owned)
        .collect();
    let tools = mcp_tool_names();
    assert_eq!(listed_names, tools, "tools/list lists skald_mcp's tools");
    failures.extend(fits(
        &doc,
        &schemas["McpListToolsResult"],
        &result("POST 2026 tools/list"),
        "2026 tools/list result",
    ));
    failures.extend(fits(&doc, &schemas["McpDiscoverResult"], &result("POST 2026 server/discover"), "discover result"));
    let called = result("POST example toolsCall");
    failures.extend(fits(&doc, &schemas["McpCallToolResult"], &called, "tools/call result"));
    if called["isError"] != false {
        failures.push(format!("the tools/call example failed: {called}"));
    }
    if result("POST a refused argument")["isError"] != true {
        failures.push("a refused argument is not an isError result".to_owned());
    }

    // The tools, revisions and methods documented are skald_mcp's.
    if schema_enum(&doc, "/McpTool/properties/name/enum") != tools {
        failures.push(format!("McpTool.name: the enum is not skald_mcp's tools {tools:?}"));
    }
    let description = op("POST").op["description"].as_str().unwrap_or_default();
    for tool in &tools {
        if !description.contains(&format!("`{tool}` — ")) {
            failures.push(format!("POST {MCP}: the description does not list tool {tool}"));
        }
    }
    let served: Vec<String> = skald_mcp::PROTOCOL_VERSIONS.iter().map(|v| v.as_str().to_owned()).collect();
    let handshake: Vec<String> =
        skald_mcp::PROTOCOL_VERSIONS.iter().filter(|v| v.has_initialize()).map(|v| v.as_str().to_owned()).collect();
    let version_header = parameters(&doc, op("POST"), "header")
        .into_iter()
        .find(|p| parameter_name(p).eq_ignore_ascii_case("MCP-Protocol-Version"))
        .and_then(|p| p.pointer("/schema/enum"))
        .and_then(Value::as_array)
        .map(|e| e.iter().filter_map(Value::as_str).map(str::to_owned).collect::<Vec<_>>());
    let checks = [
        ("the MCP-Protocol-Version header's enum", version_header.unwrap_or_default(), &served),
        (
            "McpDiscoverResult.supportedVersions",
            schema_enum(&doc, "/McpDiscoverResult/properties/supportedVersions/items/enum"),
            &served,
        ),
        (
            "McpInitializeResult.protocolVersion",
            schema_enum(&doc, "/McpInitializeResult/properties/protocolVersion/enum"),
            &handshake,
        ),
    ];
    for (what, documented, code) in checks {
        if documented != *code {
            failures.push(format!("{what}: documented {documented:?}, skald_mcp serves {code:?}"));
        }
    }
    assert_none(&failures);
}

/// How `/mcp` must answer a bad value of a header it reads.
enum McpRefusal {
    /// The transport's status (`json`: a JSON-RPC error, else text).
    Status(u16, bool),
    /// A tool call's `isError` result naming the header (REST read it).
    ToolError,
}

#[tokio::test]
async fn mcp_documented_headers_are_read() {
    let doc = doc();
    let (app, _dirs) = app().await;
    let ops = operations(&doc);
    let post = ops.iter().find(|o| o.path == MCP && o.method == "POST").expect("POST /mcp is documented");
    // A bad value of each header /mcp reads.
    let refusals: BTreeMap<&str, (&str, McpRefusal)> = [
        ("accept", ("application/json", McpRefusal::Status(406, false))),
        ("mcp-protocol-version", ("1999-01-01", McpRefusal::Status(400, false))),
        ("mcp-method", ("tools/list", McpRefusal::Status(400, true))),
        ("mcp-name", ("health", McpRefusal::Status(400, true))),
        ("origin", ("http://attacker.example", McpRefusal::Status(403, false))),
        ("x-client-timeout-ms", ("0", McpRefusal::ToolError)),
        ("x-openviking-account", ("../x", McpRefusal::ToolError)),
        ("x-openviking-user", ("../x", McpRefusal::ToolError)),
        ("x-openviking-actor-peer", ("../x", McpRefusal::ToolError)),
    ]
    .into_iter()
    .collect();
    let mut failures = Vec::new();
    let params = parameters(&doc, post, "header");
    let documented: BTreeSet<String> = params.iter().map(|p| parameter_name(p).to_ascii_lowercase()).collect();
    for name in refusals.keys().filter(|n| !documented.contains(**n)) {
        failures.push(format!("POST {MCP}: header {name} is read but not documented"));
    }
    for p in &params {
        let name = parameter_name(p);
        let Some((bad, refusal)) = refusals.get(name.to_ascii_lowercase().as_str()) else {
            failures
                .push(format!("POST {MCP}: documented header {name} is one this test does not know; add its refusal"));
            continue;
        };
        // A `find` call; in 2026-07-28 for the headers only that revision reads.
        let arguments = json!({ "query": QUERY, "limit": 2 });
        let (headers, body) = if ["mcp-method", "mcp-name"].contains(&name.to_ascii_lowercase().as_str()) {
            rpc_2026("tools/call", &json!({ "name": "find", "arguments": arguments }))
        } else {
            (
                mcp_headers(MCP_VERSION),
                rpc_text(Some(1), "tools/call", &json!({ "name": "find", "arguments": arguments })),
            )
        };
        let value = query_text(example(p, &format!("POST {MCP} header {name}")));
        let answer = mcp_send(&app, "POST", &with_header(headers.clone(), name, &value), Some(&body), true).await;
        let result = answer.json.as_ref().map(|j| j["result"].clone()).unwrap_or_default();
        if answer.status != 200 || result["isError"] != false {
            failures.push(format!(
                "POST {MCP}: header {name}: {value} (its example) answered {}: {}",
                answer.status, answer.text
            ));
        }
        let (json, want) = match refusal {
            McpRefusal::Status(status, json) => (*json, *status),
            McpRefusal::ToolError => (true, 200),
        };
        let answer = mcp_send(&app, "POST", &with_header(headers, name, bad), Some(&body), json).await;
        verify_mcp(&doc, &mut failures, post, &format!("header {name}: {bad}"), &answer, want);
        if let McpRefusal::ToolError = refusal {
            let result = answer.json.as_ref().map(|j| j["result"].clone()).unwrap_or_default();
            let text = result["content"][0]["text"].as_str().unwrap_or_default().to_ascii_lowercase();
            if result["isError"] != true || !text.contains(&name.to_ascii_lowercase()) {
                failures
                    .push(format!("POST {MCP}: header {name}: {bad} is not a tool error naming it: {}", answer.text));
            }
        }
    }
    assert_none(&failures);
}

/// The request bounds the document states are the parsers' constants: the
/// hit limits, the list sizes, the filter's nodes and depth (the bounds
/// the generic probes of [`documented_bounds_are_the_parsers`] cannot
/// reach: `target_uri`'s sits inside its `oneOf`, the filter's are
/// Skald's own keywords) and the length a query is cut at.
#[tokio::test]
async fn documented_request_bounds_are_the_librarys() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    let as_u64 = |n: usize| n as u64;
    let mut failures = Vec::new();
    for request in ["FindRequest", "SearchRequest"] {
        let prop = |name: &str| &schemas[request]["properties"][name];
        let array_variant = prop("target_uri")["oneOf"]
            .as_array()
            .and_then(|variants| variants.iter().find(|v| v["type"] == "array"))
            .and_then(|v| v.get("maxItems"))
            .and_then(Value::as_u64);
        let checks: Vec<(&str, Option<u64>, u64)> = vec![
            ("limit maximum (MAX_LIMIT)", prop("limit")["maximum"].as_u64(), MAX_LIMIT.unsigned_abs()),
            ("node_limit maximum (MAX_LIMIT)", prop("node_limit")["maximum"].as_u64(), MAX_LIMIT.unsigned_abs()),
            ("target_uri list maxItems (MAX_TARGET_URIS)", array_variant, as_u64(MAX_TARGET_URIS)),
            ("tags maxItems (MAX_TAGS)", prop("tags")["maxItems"].as_u64(), as_u64(MAX_TAGS)),
            (
                "filter x-skald-max-nodes (MAX_FILTER_NODES)",
                prop("filter")["x-skald-max-nodes"].as_u64(),
                as_u64(MAX_FILTER_NODES),
            ),
            (
                "filter x-skald-max-depth (MAX_FILTER_DEPTH)",
                prop("filter")["x-skald-max-depth"].as_u64(),
                as_u64(MAX_FILTER_DEPTH),
            ),
            (
                "query x-skald-cut-at (MAX_QUERY_CHARS)",
                prop("query")["x-skald-cut-at"].as_u64(),
                as_u64(MAX_QUERY_CHARS),
            ),
        ];
        for (what, documented, code) in checks {
            if documented != Some(code) {
                failures.push(format!("{request}.{what}: documented {documented:?}, the library's is {code}"));
            }
        }
    }
    // `skills/find`'s subset of them.
    let prop = |name: &str| &schemas["SkillsFindRequest"]["properties"][name];
    let list_variant = prop("target_uri")["oneOf"]
        .as_array()
        .and_then(|variants| variants.iter().find(|v| v["type"] == "array"))
        .and_then(|v| v.get("maxItems"))
        .and_then(Value::as_u64);
    let checks: Vec<(&str, Option<u64>, u64)> = vec![
        ("limit maximum (MAX_LIMIT)", prop("limit")["maximum"].as_u64(), MAX_LIMIT.unsigned_abs()),
        ("target_uri list maxItems (MAX_TARGET_URIS)", list_variant, as_u64(MAX_TARGET_URIS)),
        ("query x-skald-cut-at (MAX_QUERY_CHARS)", prop("query")["x-skald-cut-at"].as_u64(), as_u64(MAX_QUERY_CHARS)),
    ];
    for (what, documented, code) in checks {
        if documented != Some(code) {
            failures.push(format!("SkillsFindRequest.{what}: documented {documented:?}, the library's is {code}"));
        }
    }
    let recall = schemas.pointer("/RecallRequest/properties/query/x-skald-cut-at").and_then(Value::as_u64);
    if recall != Some(as_u64(MAX_QUERY_CHARS)) {
        failures.push(format!(
            "RecallRequest.query x-skald-cut-at: documented {recall:?}, the library's is {MAX_QUERY_CHARS}"
        ));
    }
    let description = doc["info"]["description"].as_str().unwrap_or_default();
    if !description.contains("6,291,456") || LAMBDA_RESPONSE_LIMIT != 6_291_456 {
        failures.push("info.description must state Lambda's response limit, LAMBDA_RESPONSE_LIMIT".to_owned());
    }
    // Every route that can cut its result to fit a response documents the flag.
    for response in
        ["FindResponse", "SearchResponse", "TextResponse", "ReadResponse", "LsResponse", "SessionContextResponse"]
    {
        if schemas[response]["properties"]["truncated"]["const"] != json!(true) {
            failures.push(format!("{response}: no top-level `truncated: true`"));
        }
    }
    assert_none(&failures);
}
