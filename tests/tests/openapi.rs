//! `infra/openapi.json` against the code it documents. The document is
//! written by hand; this test fails, naming the route and field, when the
//! two drift apart:
//!
//! 1. Routes: the document's `(method, path)` pairs are exactly the HTTP
//!    API events of `infra/template.yaml` (read with a line scanner), and
//!    the `cargo lambda watch` router of the root `Cargo.toml` serves each
//!    of them with the function the template deploys for it.
//! 2. Request fields: every body schema lists exactly the fields its parser
//!    accepts (`FIND_FIELDS`, `SEARCH_FIELDS`, `CONTEXT_ONLY_FIELDS`,
//!    `BOOTSTRAP_FIELDS`, `RECALL_FIELDS`, `MESSAGE_FIELDS`), and the
//!    `x-skald-modes` of `/search`'s properties agree with those lists.
//! 3. Acceptance, through the real handlers: every documented property,
//!    sent with its `example`, is accepted (no `extra_forbidden`, no
//!    validation error at that field); on `/search` it is refused in
//!    exactly the modes its `x-skald-modes` leaves out; documented integer
//!    bounds, `maxItems`, `maxLength` and the defaults `stats` echoes are
//!    the ones the parsers apply; documented headers are read.
//! 4. Structure: every `$ref` resolves, every operation documents the error
//!    envelope for 400, the error codes are exactly [`ApiError`]'s, every
//!    `example` fits its schema, and real responses (including those to the
//!    document's request examples, and the LLM stages' fields with a
//!    scripted model) validate against the documented response schemas (a
//!    small validator for the JSON Schema keywords the document uses;
//!    `pattern` is not checked).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use skald::api::error::{ApiError, FieldError};
use skald::api::find::FIND_FIELDS;
use skald::api::recall::RECALL_FIELDS;
use skald::api::search::{BOOTSTRAP_FIELDS, CONTEXT_ONLY_FIELDS, SEARCH_FIELDS};
use skald::api::sessions::MESSAGE_FIELDS;
use skald::app::App;
use skald::config::ModelConfig;
use skald_tests::fixture::{CONTEXT_CORPUS, Handler, Reply, TempDirs, app_with_config, app_with_corpus, call};
use skald_tests::model_server::{ModelServer, Reply as ModelReply};

const QUERY: &str = "kubernetes cluster upgrade";
/// The session every `{id}` path names.
const SESSION: &str = "openapi-drift";
const MODES: [&str; 3] = ["list", "context", "bootstrap"];

const FIND: &str = "/api/v1/search/find";
const SEARCH: &str = "/api/v1/search/search";
const RECALL: &str = "/api/v1/search/recall";
const BOOTSTRAP: &str = "/api/v1/search/bootstrap";
const SESSIONS: &str = "/api/v1/sessions";
const SESSION_GET: &str = "/api/v1/sessions/{id}";
const MESSAGES: &str = "/api/v1/sessions/{id}/messages";
const BATCH: &str = "/api/v1/sessions/{id}/messages/batch";

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

    /// The path with `{id}` filled in.
    fn url(&self) -> String {
        self.path.replace("{id}", SESSION)
    }

    fn handler(&self) -> Handler {
        match self.path.as_str() {
            FIND => Handler::Find,
            SEARCH => Handler::Search,
            RECALL => Handler::Recall,
            BOOTSTRAP => Handler::Bootstrap,
            p if p == SESSIONS || p.starts_with("/api/v1/sessions/") => Handler::Sessions,
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

/// The request body schema of `op`, resolved.
fn request_schema<'a>(doc: &'a Value, op: &Operation<'a>) -> Option<&'a Value> {
    op.op.pointer("/requestBody/content/application~1json/schema").map(|s| resolve(doc, s))
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

// ---------------------------------------------------------------------------
// Calling the handlers
// ---------------------------------------------------------------------------

async fn app() -> (Arc<App>, TempDirs) {
    app_with_corpus(CONTEXT_CORPUS, true).await
}

/// What a request needs besides the property under test.
fn base_body(path: &str) -> Map<String, Value> {
    let base = match path {
        FIND | SEARCH | RECALL => json!({ "query": QUERY }),
        MESSAGES => json!({ "role": "user", "content": "hello" }),
        BATCH => json!({ "messages": [{ "role": "user", "content": "hello" }] }),
        _ => json!({}),
    };
    base.as_object().cloned().unwrap_or_default()
}

async fn send(app: &Arc<App>, op: &Operation<'_>, body: Option<&Value>, headers: &[(&str, &str)]) -> Reply {
    call(app, op.handler(), &op.method, &op.url(), headers, body).await
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

/// Problems with `field` in `reply`, when it should have been accepted.
fn refusal(reply: &Reply, field: &str) -> Option<String> {
    let errors = errors_at(reply, field);
    if errors.iter().any(|e| e["type"] == "extra_forbidden") {
        return Some(format!("documented but refused as extra_forbidden: {}", reply.text));
    }
    (!errors.is_empty()).then(|| format!("its example is refused: {}", reply.text))
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
            routes.push((m.clone(), p.clone(), binary.clone()));
            (method, path) = (None, None);
        }
    }
    routes
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

    let router = watch_router();
    let mut failures = Vec::new();
    for (method, path, binary) in &template {
        let serving: Vec<&String> = router.iter().filter(|(p, _)| router_serves(p, path)).map(|(_, f)| f).collect();
        if serving.is_empty() {
            failures.push(format!("{method} {path}: no watch-router entry in Cargo.toml serves it"));
        }
        for function in serving.iter().filter(|f| **f != binary) {
            failures.push(format!(
                "{method} {path}: the watch router sends it to {function}, the template deploys {binary}"
            ));
        }
    }
    for (pattern, function) in &router {
        if !documented.iter().any(|(_, path)| router_serves(pattern, path)) {
            failures.push(format!("watch-router entry {pattern:?} = {function:?} serves no documented route"));
        }
    }
    assert_none(&failures);
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
        // Lenient, as the reference: only `session_id` is read.
        (SESSIONS, names(&["session_id"])),
    ]
    .into_iter()
    .collect();
    let mut failures = Vec::new();
    for op in operations(&doc) {
        let Some(schema) = request_schema(&doc, &op) else { continue };
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
        let strict = op.path != SESSIONS;
        if schema.get("additionalProperties") != Some(&Value::Bool(!strict)) {
            failures.push(format!("{}: additionalProperties must be {}", op.name(), !strict));
        }
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

// ---------------------------------------------------------------------------
// 3. Acceptance through the handlers
// ---------------------------------------------------------------------------

#[tokio::test]
async fn every_documented_property_is_accepted() {
    let doc = doc();
    let (app, _dirs) = app().await;
    let mut failures = Vec::new();
    for op in operations(&doc) {
        let Some(schema) = request_schema(&doc, &op) else { continue };
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
            let reply = send(&app, &op, Some(&with(&base_body(&op.path), field, value)), &[]).await;
            if let Some(why) = refusal(&reply, field) {
                failures.push(format!("{} {field}: {why}", op.name()));
            }
        }
    }
    assert_none(&failures);
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
            let mut base = base_body(&op.path);
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
    assert_none(&failures);
}

#[tokio::test]
async fn documented_headers_are_read() {
    let doc = doc();
    let (app, _dirs) = app().await;
    let search_routes = [FIND, SEARCH, RECALL, BOOTSTRAP];
    // GET /sessions/{id} needs the session.
    let created = call(&app, Handler::Sessions, "POST", SESSIONS, &[], Some(&json!({ "session_id": SESSION }))).await;
    assert_eq!(created.status, 200, "{}", created.text);
    let mut failures = Vec::new();
    for op in operations(&doc) {
        let params: Vec<&Value> = op.op["parameters"]
            .as_array()
            .map(|ps| ps.iter().map(|p| resolve(&doc, p)).filter(|p| p["in"] == "header").collect())
            .unwrap_or_default();
        let documents =
            |name: &str| params.iter().any(|p| p["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)));
        if search_routes.contains(&op.path.as_str()) && !documents("X-Client-Timeout-Ms") {
            failures.push(format!("{}: X-Client-Timeout-Ms is not documented", op.name()));
        }
        let mut body = base_body(&op.path);
        if op.path == SEARCH {
            body.insert("mode".into(), json!("context"));
        }
        let body = (op.method == "POST").then_some(Value::Object(body));
        for p in &params {
            let name = p["name"].as_str().expect("a header name");
            let value = p["example"].as_str().map(str::to_owned).unwrap_or_else(|| p["example"].to_string());
            let reply = send(&app, &op, body.as_ref(), &[(name, &value)]).await;
            if reply.status != 200 {
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
        ApiError::Conflict(String::new()),
        ApiError::Unavailable(String::new()),
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
            | ApiError::Conflict(_)
            | ApiError::Unavailable(_)
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
        if !responses.contains_key("400") {
            failures.push(format!("{}: no 400 response", op.name()));
        }
        for (status, response) in responses {
            if status.starts_with('2') {
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
    // The document's own request examples.
    for o in &ops {
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

#[tokio::test]
async fn llm_stage_responses_fit_their_schemas() {
    let doc = doc();
    let server = ModelServer::start().await;
    let model = ModelConfig::Openai {
        base_url: server.base_url(),
        model: "stub".into(),
        api_key_env: "SKALD_TEST_UNSET_KEY".into(),
    };
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
