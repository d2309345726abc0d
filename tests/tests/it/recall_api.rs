//! `POST /api/v1/search/recall` and the session dedup ledger end to end
//! through the Lambda edge (the reference's
//! `recall_preset.py`, `ledger.py` and
//! `tests/server/test_recall_endpoint.py`).
//!
//! - The ledger over real turns: a session whose user messages advance the
//!   turn clock, context calls (through `/search` `mode="context"` and
//!   through `/recall`) that record what they served in
//!   `.recall_log.json`, and later calls that leave out what was served
//!   within `dedup_turns` turns — except bare URIs, which may come back
//!   deeper.
//! - Concurrency: 32 context calls racing on one session's ledger, on a
//!   local store and on S3 (moto on loopback), lose no record.
//! - The recall preset: its defaults and v1 alias folding, the deprecation
//!   signals, and the pin that `/recall` with explicit parameters answers
//!   exactly what `/search` `mode="context"` answers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};
use skald::app::App;
use skald::store::SharedStore;
use skald_tests::fixture::{
    CONTEXT_CORPUS, Handler, RECALL_PATH, Reply, SESSIONS_PATH, TempDir, app_with_corpus_in, call, local_store, ok,
    recall, refused_at, s3_shared_store, search_reply, session_key, sessions_post, store_json,
};

const QUERY: &str = "kubernetes cluster upgrade";

/// The coding preset's quotas.
fn coding_quotas() -> Value {
    json!({"events": 4, "entities": 6, "preferences": 2, "experiences": 4, "resources": 8, "skills": 6})
}

fn entries(result: &Value) -> &Vec<Value> {
    result["entries"].as_array().unwrap_or_else(|| panic!("entries is not a list: {result}"))
}

fn uris(result: &Value) -> Vec<String> {
    entries(result).iter().map(|e| e["uri"].as_str().expect("uri").to_owned()).collect()
}

fn detail_of(result: &Value, uri: &str) -> Option<String> {
    entries(result).iter().find(|e| e["uri"] == uri).map(|e| e["detail"].as_str().expect("detail").to_owned())
}

fn with(base: &Value, extra: &Value) -> Value {
    let mut body = base.clone();
    for (k, v) in extra.as_object().expect("an object") {
        body[k] = v.clone();
    }
    body
}

async fn ctx_app() -> (Arc<App>, TempDir, TempDir) {
    let (store, store_dir) = local_store();
    let (app, source) = app_with_corpus_in(CONTEXT_CORPUS, &[], store).await;
    (app, store_dir, source)
}

async fn append_user(app: &Arc<App>, session: &str, text: &str) {
    let reply =
        sessions_post(app, &format!("{SESSIONS_PATH}/{session}/messages"), &json!({"role": "user", "content": text}))
            .await;
    ok(&reply);
}

async fn append_assistant(app: &Arc<App>, session: &str, text: &str) {
    let reply = sessions_post(
        app,
        &format!("{SESSIONS_PATH}/{session}/messages"),
        &json!({"role": "assistant", "content": text}),
    )
    .await;
    ok(&reply);
}

async fn ledger(store: &SharedStore, session: &str) -> Option<Value> {
    store_json(store, &session_key("default", session, ".recall_log.json")).await
}

/// The ledger's records as `uri -> (turn, detail)`.
fn records(ledger: &Value) -> BTreeMap<String, (u64, String)> {
    ledger["entries"]
        .as_object()
        .unwrap_or_else(|| panic!("ledger entries is not an object: {ledger}"))
        .iter()
        .map(|(uri, r)| {
            (uri.clone(), (r["turn"].as_u64().expect("turn"), r["detail"].as_str().expect("detail").to_owned()))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The dedup ledger over real turns.
// ---------------------------------------------------------------------------

const DEDUP_QUERY: &str = "orbital telescope mirror calibration";

/// Six entity memories that all match [`DEDUP_QUERY`], each a ~300-byte
/// summary (its abstract) over a long body, so that a tight budget can show
/// two at `abstract` and the third only as a bare URI.
fn dedup_corpus() -> Vec<(String, String)> {
    let names = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let summary = format!(
                "Orbital telescope mirror calibration log {name}: the {name} team aligned segment {i} of the \
                 primary mirror, measured the wavefront error after calibration and recorded the orbital \
                 telescope's thermal drift over {n} orbits before signing off the mirror calibration run.",
                n = 10 + i
            );
            let details =
                format!("Step {i}: the mirror calibration procedure repeated for the orbital telescope. ").repeat(30);
            (
                format!("user/default/memories/entities/telescope/{name}.md"),
                format!("# Summary\n{summary}\n\n# Details\n{details}\n"),
            )
        })
        .collect()
}

async fn dedup_app(store: SharedStore) -> (Arc<App>, TempDir) {
    let corpus = dedup_corpus();
    let files: Vec<(&str, &str)> = corpus.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    app_with_corpus_in(&files, &[], store).await
}

/// How a context call is made: through `/search` `mode="context"`, or
/// through `/recall` (bucketed on entities with the v1 quotas, so that the
/// same three candidates come back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Search,
    Recall,
}

async fn context_call(app: &Arc<App>, route: Route, extra: &Value) -> Value {
    let reply = match route {
        Route::Search => {
            let body = with(&json!({"query": DEDUP_QUERY, "mode": "context", "limit": 3}), extra);
            search_reply(app, &body).await
        }
        Route::Recall => {
            let base = json!({
                "query": DEDUP_QUERY,
                "quotas": {"events": 0, "entities": 3, "preferences": 0, "experiences": 0},
                "score_threshold": 0.1,
            });
            recall(app, &with(&base, extra)).await
        }
    };
    ok(&reply).clone()
}

fn details(result: &Value) -> Vec<String> {
    entries(result).iter().map(|e| e["detail"].as_str().expect("detail").to_owned()).collect()
}

/// The smallest `max_tokens` at which a call without dedup serves exactly
/// two entries at `abstract` (the third candidate does not fit).
async fn two_abstracts_budget(app: &Arc<App>, route: Route) -> u64 {
    for max_tokens in (64..=800).step_by(2) {
        let result = context_call(app, route, &json!({"max_tokens": max_tokens, "dedup_turns": 0})).await;
        if details(&result) == ["abstract", "abstract"] {
            return max_tokens;
        }
    }
    panic!("no max_tokens serves [abstract, abstract] through {route:?}");
}

fn dedup(result: &Value) -> &Value {
    &result["stats"]["dedup"]
}

async fn dedup_round_trip(route: Route) {
    let (store, _store_dir) = local_store();
    let (app, _source) = dedup_app(Arc::clone(&store)).await;
    let budget = two_abstracts_budget(&app, route).await;
    let session = "dedup-rt";
    let call = |extra: Value| {
        let app = Arc::clone(&app);
        async move { context_call(&app, route, &with(&json!({"max_tokens": budget, "session_id": session}), &extra)).await }
    };

    // Turn 1: the user speaks, the first call serves A and B at abstract; C does not fit.
    append_user(&app, session, "how did the mirror calibration go?").await;
    let first = call(json!({"dedup_turns": 2})).await;
    assert_eq!(details(&first), ["abstract", "abstract"], "{first:#}");
    let served = uris(&first);
    let (a, b) = (served[0].clone(), served[1].clone());
    assert_eq!(dedup(&first), &json!({"turns": 2, "status": "new", "cooled": 0, "turn": 1}), "no ledger yet");
    let log = ledger(&store, session).await.expect("the first call writes the ledger");
    assert_eq!(log["version"], 1);
    assert_eq!(log["updated_turn"], 1);
    let expected: BTreeMap<String, (u64, String)> =
        [(a.clone(), (1, "abstract".to_owned())), (b.clone(), (1, "abstract".to_owned()))].into_iter().collect();
    assert_eq!(records(&log), expected, "every served URI is recorded with its tier: {log:#}");

    // Turn 2: A and B are cooled; C (never served) comes first; others fill in.
    append_user(&app, session, "and what about the thermal drift?").await;
    let second = call(json!({"dedup_turns": 2})).await;
    assert_eq!(dedup(&second), &json!({"turns": 2, "status": "ok", "cooled": 2, "turn": 2}), "{second:#}");
    let second_uris = uris(&second);
    assert!(!second_uris.contains(&a) && !second_uris.contains(&b), "A and B are cooled: {second_uris:?}");
    assert_eq!(second["stats"]["candidates"], 3, "exclusion is over-fetched for: {second:#}");
    assert!(!second_uris.is_empty(), "{second:#}");
    let c = second_uris[0].clone();
    assert_ne!(detail_of(&second, &c).as_deref(), Some("uri"), "C is served with text: {second:#}");
    assert!(second["stats"]["excluded"].as_u64().expect("excluded") >= 2, "{}", second["stats"]);
    let log = ledger(&store, session).await.expect("ledger");
    let recs = records(&log);
    assert_eq!(recs[&a], (1, "abstract".to_owned()));
    assert_eq!(recs[&c].0, 2, "C served on turn 2: {log:#}");
    for uri in &second_uris {
        assert_eq!(recs[uri].0, 2, "{uri} recorded on turn 2");
    }
    assert_eq!(log["updated_turn"], 2);

    // An assistant message does not advance the clock: still turn 2, A and B still cooled.
    append_assistant(&app, session, "the drift was within tolerance").await;
    let same_turn = call(json!({"dedup_turns": 2})).await;
    assert_eq!(dedup(&same_turn)["turn"], 2, "{}", dedup(&same_turn));
    let same_uris = uris(&same_turn);
    assert!(!same_uris.contains(&a) && !same_uris.contains(&b), "{same_uris:?}");

    // Two more user turns: A and B were served on turn 1, 4 - 1 >= 2, so they return.
    append_user(&app, session, "next question").await;
    append_user(&app, session, "show me the calibration again").await;
    let later = call(json!({"dedup_turns": 2})).await;
    assert_eq!(dedup(&later)["turn"], 4);
    assert_eq!(dedup(&later)["status"], "ok");
    let later_uris = uris(&later);
    assert!(later_uris.contains(&a) && later_uris.contains(&b), "A and B return: {later:#}");
    assert_eq!(later_uris, served, "nothing is cooled any more: the first answer again");
}

#[tokio::test]
async fn the_ledger_cools_served_uris_for_dedup_turns_user_turns_through_search() {
    dedup_round_trip(Route::Search).await;
}

#[tokio::test]
async fn the_ledger_cools_served_uris_for_dedup_turns_user_turns_through_recall() {
    dedup_round_trip(Route::Recall).await;
}

#[tokio::test]
async fn dedup_is_opt_in_and_validated() {
    let (store, _store_dir) = local_store();
    let (app, _source) = dedup_app(Arc::clone(&store)).await;
    let search = |body: Value| {
        let app = Arc::clone(&app);
        async move { search_reply(&app, &with(&json!({"query": DEDUP_QUERY, "mode": "context"}), &body)).await }
    };

    // A session that does not exist yet: turn 0, status new, the ledger is written.
    let result = search(json!({"session_id": "fresh", "dedup_turns": 3})).await;
    assert_eq!(dedup(ok(&result)), &json!({"turns": 3, "status": "new", "cooled": 0, "turn": 0}));
    let log = ledger(&store, "fresh").await.expect("ledger written");
    assert_eq!(log["version"], 1);
    let served: BTreeSet<String> = uris(ok(&result)).into_iter().collect();
    assert!(!served.is_empty());
    assert_eq!(records(&log).keys().cloned().collect::<BTreeSet<_>>(), served);

    // dedup_turns 0, or no session: off, nothing read or written.
    append_user(&app, "quiet", "hello").await;
    for body in [
        json!({"session_id": "quiet", "dedup_turns": 0}),
        json!({"session_id": "quiet"}),
        json!({"dedup_turns": 5}),
        json!({}),
    ] {
        let reply = search(body.clone()).await;
        let turns = body.get("dedup_turns").cloned().unwrap_or(json!(0));
        assert_eq!(dedup(ok(&reply))["status"], "off", "{body}");
        assert_eq!(dedup(ok(&reply))["turns"], turns, "{body}");
        assert_eq!(dedup(ok(&reply))["cooled"], 0, "{body}");
    }
    assert!(ledger(&store, "quiet").await.is_none(), "no ledger without opting in");
    // Recall without a session: dedup 0, off.
    let reply = recall(&app, &json!({"query": DEDUP_QUERY})).await;
    assert_eq!(dedup(ok(&reply))["status"], "off");
    assert_eq!(dedup(ok(&reply))["turns"], 0);

    // Out of range and malformed.
    refused_at(&search(json!({"session_id": "quiet", "dedup_turns": 101})).await, &json!(["body", "dedup_turns"]));
    refused_at(&search(json!({"session_id": "quiet", "dedup_turns": -1})).await, &json!(["body", "dedup_turns"]));
    let at_max = search(json!({"session_id": "quiet", "dedup_turns": 100})).await;
    assert_eq!(dedup(ok(&at_max))["turns"], 100);
    for bad in ["a b", "../etc", "..", "x/y", &"z".repeat(129)] {
        let reply = search(json!({"session_id": bad, "dedup_turns": 2})).await;
        refused_at(&reply, &json!(["body", "session_id"]));
        assert!(reply.json["error"]["message"].as_str().expect("message").contains("session_id"), "{}", reply.text);
        let reply = recall(&app, &json!({"query": DEDUP_QUERY, "session_id": bad})).await;
        refused_at(&reply, &json!(["body", "session_id"]));
    }
    let written: Vec<String> = store
        .list("accounts/default/tree/user/default/sessions/")
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert!(written.iter().all(|k| !k.contains("etc") && !k.contains("a b")), "{written:?}");
}

// ---------------------------------------------------------------------------
// Concurrent ledger writes.
// ---------------------------------------------------------------------------

const RACE_FILES: usize = 40;

fn race_uri(i: usize) -> String {
    format!("viking://user/default/memories/entities/fleet/ship-{i:02}.md")
}

fn race_corpus() -> Vec<(String, String)> {
    (0..RACE_FILES)
        .map(|i| {
            (
                format!("user/default/memories/entities/fleet/ship-{i:02}.md"),
                format!("# Summary\nStarship fleet vessel number {i} carries cargo between the orbital stations.\n"),
            )
        })
        .collect()
}

/// 32 context calls racing on one session with `dedup_turns`: call `i` may
/// only serve ships `i..i+5` (everything else is in its `exclude_uris`),
/// so the calls serve different URIs. Afterwards the ledger holds exactly
/// every URI any of them served.
async fn concurrent_context_calls_lose_no_record(store: SharedStore) {
    let corpus = race_corpus();
    let files: Vec<(&str, &str)> = corpus.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let (app, _source) = app_with_corpus_in(&files, &[], Arc::clone(&store)).await;
    let session = "race-ledger";
    append_user(&app, session, "which ships are in the fleet?").await;

    let mut tasks = Vec::new();
    for i in 0..32 {
        let app = Arc::clone(&app);
        let window: BTreeSet<usize> = (i..i + 5).map(|k| k % RACE_FILES).collect();
        let exclude: Vec<String> = (0..RACE_FILES).filter(|k| !window.contains(k)).map(race_uri).collect();
        tasks.push(tokio::spawn(async move {
            let body = json!({
                "query": format!("starship fleet vessel number {i} cargo"),
                "mode": "context",
                "session_id": session,
                "dedup_turns": 3,
                "limit": 3,
                // Every fourth call is tight: it serves fewer, shorter texts, which are recorded too.
                "max_tokens": if i % 4 == 0 { 64 } else { 1600 },
                "exclude_uris": exclude,
            });
            let reply = search_reply(&app, &body).await;
            let result = ok(&reply).clone();
            let status = result["stats"]["dedup"]["status"].as_str().expect("status").to_owned();
            (i, window, status, result)
        }));
    }
    let mut served: BTreeSet<String> = BTreeSet::new();
    let mut tiers: BTreeSet<String> = BTreeSet::new();
    for task in tasks {
        let (i, window, status, result) = task.await.expect("the task ran");
        assert!(status == "new" || status == "ok", "call {i}: the ledger write failed: {}", result["stats"]["dedup"]);
        tiers.extend(details(&result));
        for uri in uris(&result) {
            let k: usize = uri.trim_end_matches(".md").rsplit('-').next().and_then(|n| n.parse().ok()).expect("a ship");
            assert!(window.contains(&k), "call {i} served {uri} outside its window");
            served.insert(uri);
        }
    }
    assert!(served.len() >= 10, "the calls served different URIs: {served:?}");
    assert!(!tiers.is_empty() && !tiers.contains("uri"), "texts, not bare URIs, were served: {tiers:?}");
    let log = ledger(&store, session).await.expect("ledger");
    let recorded: BTreeSet<String> = records(&log).keys().cloned().collect();
    let lost: Vec<&String> = served.difference(&recorded).collect();
    assert!(lost.is_empty(), "records lost under concurrency: {lost:?} (ledger {log:#})");
    assert_eq!(recorded, served, "the ledger holds exactly what was served");
    assert!(records(&log).values().all(|(turn, _)| *turn == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_context_calls_lose_no_ledger_record_on_a_local_store() {
    let (store, _dir) = local_store();
    concurrent_context_calls_lose_no_record(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_context_calls_lose_no_ledger_record_on_s3() {
    let store = s3_shared_store("concurrent_context_calls_lose_no_ledger_record_on_s3").await;
    concurrent_context_calls_lose_no_record(store).await;
}

// ---------------------------------------------------------------------------
// The recall preset: defaults and v1 aliases.
// ---------------------------------------------------------------------------

fn stats(result: &Value) -> &Value {
    &result["stats"]
}

fn deprecated(aliases: &[&str]) -> Value {
    json!({
        "endpoint": "/api/v1/search/recall",
        "successor": "/api/v1/search/search",
        "successor_body": {"mode": "context"},
        "aliases_used": aliases,
    })
}

/// Asserts the deprecation signals of a reply that used `aliases`.
fn assert_deprecated(reply: &Reply, aliases: &[&str]) {
    assert_eq!(reply.header("deprecation"), Some("true"), "{:?}", reply.headers);
    assert_eq!(reply.header("link"), Some("</api/v1/search/search>; rel=\"successor-version\""), "{:?}", reply.headers);
    assert_eq!(stats(ok(reply))["deprecated"], deprecated(aliases), "{}", stats(ok(reply)));
}

fn assert_not_deprecated(reply: &Reply) {
    assert!(reply.header("deprecation").is_none(), "{:?}", reply.headers);
    assert!(reply.header("link").is_none(), "{:?}", reply.headers);
    assert!(stats(ok(reply)).get("deprecated").is_none(), "{}", stats(ok(reply)));
}

#[tokio::test]
async fn max_chars_folds_into_max_tokens_and_max_tokens_wins() {
    let (app, _s, _c) = ctx_app().await;
    let cases = [
        (json!({"max_chars": 6500}), 1625, vec!["max_chars"]),
        (json!({"max_chars": 100}), 64, vec!["max_chars"]),
        (json!({"max_chars": 200}), 64, vec!["max_chars"]),
        (json!({"max_chars": 4000}), 1000, vec!["max_chars"]),
        (json!({"max_chars": 6501}), 1625, vec!["max_chars"]),
        (json!({"max_chars": 6500, "max_tokens": 500}), 500, vec!["max_chars"]),
        (json!({"max_tokens": 700}), 700, vec![]),
        (json!({}), 1600, vec![]),
    ];
    for (extra, max_tokens, aliases) in cases {
        let reply = recall(&app, &with(&json!({"query": QUERY}), &extra)).await;
        let result = ok(&reply);
        assert_eq!(stats(result)["max_tokens"], max_tokens, "{extra}");
        let used = stats(result)["used_tokens"].as_u64().expect("used_tokens");
        assert!(used <= max_tokens, "{extra}: {used} > {max_tokens}");
        if aliases.is_empty() {
            assert_not_deprecated(&reply);
        } else {
            assert_deprecated(&reply, &aliases);
        }
    }
}

#[tokio::test]
async fn render_compact_pins_abstract_and_render_false_keeps_entries_only() {
    let (app, _s, _c) = ctx_app().await;
    let base = json!({"query": QUERY, "score_threshold": 0.0, "max_tokens": 4000});

    let reply = recall(&app, &with(&base, &json!({"render": "compact"}))).await;
    let result = ok(&reply);
    assert_eq!(stats(result)["detail"], "abstract");
    assert!(!entries(result).is_empty(), "{result:#}");
    for e in entries(result) {
        assert!(e["detail"] == "abstract" || e["detail"] == "uri", "{e}");
    }
    assert!(!result["rendered"].as_str().expect("rendered").is_empty());
    assert_deprecated(&reply, &["render"]);
    // Without it the same budget goes deeper: the pin is what kept it shallow.
    let deep = recall(&app, &base).await;
    assert!(entries(ok(&deep)).iter().any(|e| e["detail"] == "full" || e["detail"] == "overview"), "{}", deep.text);
    assert!(stats(ok(&deep))["detail"].is_null());
    // An explicit detail wins over render "compact".
    let reply = recall(&app, &with(&base, &json!({"render": "compact", "detail": "full"}))).await;
    assert_eq!(stats(ok(&reply))["detail"], "full");

    let reply = recall(&app, &with(&base, &json!({"render": false}))).await;
    let result = ok(&reply);
    assert_eq!(result["rendered"], "", "render false: no rendered text");
    assert!(!entries(result).is_empty(), "entries are kept: {result:#}");
    assert_eq!(uris(result), uris(ok(&deep)), "the same entries as with rendering");
    assert_deprecated(&reply, &["render"]);

    let reply = recall(&app, &with(&base, &json!({"render": true}))).await;
    assert_eq!(ok(&reply)["rendered"], ok(&deep)["rendered"]);
    assert_deprecated(&reply, &["render"]);
    refused_at(&recall(&app, &with(&base, &json!({"render": "loud"}))).await, &json!(["body", "render"]));
}

#[tokio::test]
async fn score_threshold_defaults_to_0_35_and_min_score_folds_into_it() {
    let (app, _s, _c) = ctx_app().await;
    let reply = recall(&app, &json!({"query": QUERY})).await;
    assert_eq!(stats(ok(&reply))["score_threshold"], 0.35);
    assert_not_deprecated(&reply);
    for e in entries(ok(&reply)) {
        assert!(e["score"].as_f64().expect("score") >= 0.35, "{e}");
    }

    let reply = recall(&app, &json!({"query": QUERY, "min_score": 0.2})).await;
    assert_eq!(stats(ok(&reply))["score_threshold"], 0.2);
    assert_deprecated(&reply, &["min_score"]);

    let reply = recall(&app, &json!({"query": QUERY, "score_threshold": 0.25})).await;
    assert_eq!(stats(ok(&reply))["score_threshold"], 0.25);
    assert_not_deprecated(&reply);

    let reply = recall(&app, &json!({"query": QUERY, "min_score": 0.2, "score_threshold": 0.3})).await;
    assert_eq!(stats(ok(&reply))["score_threshold"], 0.3, "an explicit score_threshold wins");
    assert_deprecated(&reply, &["min_score"]);

    // The threshold is applied: a lower one finds at least as much.
    let low = recall(&app, &json!({"query": QUERY, "min_score": 0.0})).await;
    let high = recall(&app, &json!({"query": QUERY})).await;
    assert!(entries(ok(&low)).len() >= entries(ok(&high)).len());
}

#[tokio::test]
async fn recall_defaults_to_the_coding_purpose_and_dedup_5_with_a_session() {
    let (store, _store_dir) = local_store();
    let (app, _source) = app_with_corpus_in(CONTEXT_CORPUS, &[], Arc::clone(&store)).await;
    let reply = recall(&app, &json!({"query": QUERY})).await;
    let s = stats(ok(&reply));
    assert_eq!(s["purpose"], "coding");
    assert_eq!(s["quotas"], coding_quotas());
    assert_eq!(s["max_tokens"], 1600);
    assert_eq!(s["score_threshold"], 0.35);
    assert_eq!(s["peer_scope"], "all");
    assert_eq!(s["dedup"]["turns"], 0);
    assert_eq!(s["dedup"]["status"], "off");
    assert_not_deprecated(&reply);

    append_user(&app, "rs1", "what did we do to the cluster?").await;
    let reply = recall(&app, &json!({"query": QUERY, "session_id": "rs1"})).await;
    let s = stats(ok(&reply));
    assert_eq!(s["dedup"]["turns"], 5);
    assert_eq!(s["dedup"]["status"], "new");
    assert_eq!(s["dedup"]["turn"], 1);
    assert!(ledger(&store, "rs1").await.is_some(), "recall with a session records what it served");
    // An explicit dedup_turns wins.
    let reply = recall(&app, &json!({"query": QUERY, "session_id": "rs2", "dedup_turns": 0})).await;
    assert_eq!(stats(ok(&reply))["dedup"], json!({"turns": 0, "status": "off", "cooled": 0, "turn": null}));
    assert!(ledger(&store, "rs2").await.is_none());
    // An explicit purpose wins.
    let reply = recall(&app, &json!({"query": QUERY, "purpose": "chat"})).await;
    assert_eq!(stats(ok(&reply))["purpose"], "chat");
    assert_eq!(
        stats(ok(&reply))["quotas"],
        json!({"events": 10, "entities": 8, "preferences": 4, "experiences": 1, "resources": 1, "skills": 2})
    );
}

#[tokio::test]
async fn v1_quotas_merge_over_the_v1_defaults() {
    let (app, _s, _c) = ctx_app().await;
    let reply = recall(&app, &json!({"query": QUERY, "quotas": {"events": 1}})).await;
    let result = ok(&reply);
    assert_eq!(stats(result)["quotas"], json!({"events": 1, "entities": 10, "preferences": 3, "experiences": 0}));
    let categories: BTreeMap<String, usize> = entries(result).iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e["category"].as_str().expect("category").to_owned()).or_default() += 1;
        m
    });
    assert!(categories.get("events").copied().unwrap_or(0) <= 1, "{categories:?}");
    assert_eq!(categories.get("resources"), None, "no resources bucket in the v1 quotas: {categories:?}");
    let reply = recall(&app, &json!({"query": QUERY, "quotas": {"experiences": 2, "resources": 1}})).await;
    assert_eq!(
        stats(ok(&reply))["quotas"],
        json!({"events": 10, "entities": 10, "preferences": 3, "experiences": 2, "resources": 1})
    );
    refused_at(&recall(&app, &json!({"query": QUERY, "quotas": {"bogus": 1}})).await, &json!(["body", "quotas"]));
}

#[tokio::test]
async fn every_alias_is_listed_in_the_deprecation_notice() {
    let (app, _s, _c) = ctx_app().await;
    let body = json!({"query": QUERY, "max_chars": 2000, "min_score": 0.15, "render": "compact"});
    let reply = recall(&app, &body).await;
    assert_deprecated(&reply, &["max_chars", "min_score", "render"]);
    let s = stats(ok(&reply));
    assert_eq!(
        (s["max_tokens"].clone(), s["score_threshold"].clone(), s["detail"].clone()),
        (json!(500), json!(0.15), json!("abstract"))
    );

    let reply = recall(&app, &json!({"query": QUERY, "max_chars": 2000, "render": false})).await;
    assert_deprecated(&reply, &["max_chars", "render"]);
    // No alias: no notice, whatever else is sent.
    let plain = json!({
        "query": QUERY, "max_tokens": 900, "score_threshold": 0.2, "purpose": "chat", "detail": "abstract",
        "peer_scope": "actor", "query_expansion": "off", "dedup_turns": 0, "quotas": {"events": 2},
    });
    assert_not_deprecated(&recall(&app, &plain).await);
}

#[tokio::test]
async fn recall_refuses_unknown_fields_and_a_missing_query() {
    let (app, _s, _c) = ctx_app().await;
    for field in ["bogus", "max_char"] {
        let reply = recall(&app, &json!({"query": QUERY, field: 1})).await;
        refused_at(&reply, &json!(["body", field]));
    }
    let reply = recall(&app, &json!({"max_chars": 6500})).await;
    refused_at(&reply, &json!(["body", "query"]));
    let reply = recall(&app, &json!({})).await;
    refused_at(&reply, &json!(["body", "query"]));
    let reply = recall(&app, &json!({"query": "   "})).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    for (field, value) in [
        ("max_chars", json!("lots")),
        ("min_score", json!("high")),
        ("max_tokens", json!(10)),
        ("dedup_turns", json!(101)),
        ("purpose", json!("gossip")),
    ] {
        let reply = recall(&app, &json!({"query": QUERY, field: value})).await;
        refused_at(&reply, &json!(["body", field]));
    }
    // GET is not a recall.
    let reply = call(&app, Handler::Recall, "GET", RECALL_PATH, &[], None).await;
    assert_eq!(reply.status, 405, "{}", reply.text);
}

// ---------------------------------------------------------------------------
// The pin: recall is exactly context mode.
// ---------------------------------------------------------------------------

/// Serialises `reply`'s `result`.
fn result_bytes(reply: &Reply) -> String {
    serde_json::to_string(ok(reply)).expect("serialise the result")
}

#[tokio::test]
async fn recall_with_explicit_parameters_answers_exactly_what_context_mode_answers() {
    let (app, _s, _c) = ctx_app().await;
    append_user(&app, "pin-s", "we upgraded the cluster").await;
    let explicit: Vec<Value> = vec![
        json!({
            "query": QUERY, "max_tokens": 1200, "purpose": "coding", "score_threshold": 0.2, "dedup_turns": 0,
            "query_expansion": "auto", "detail": "auto", "peer_scope": "all",
        }),
        json!({
            "query": QUERY, "max_tokens": 300, "purpose": "chat", "score_threshold": 0.1, "dedup_turns": 0,
            "query_expansion": "off", "detail": "abstract", "peer_scope": "actor",
        }),
        json!({
            "query": QUERY, "max_tokens": 2000,
            "quotas": {"events": 2, "entities": 1, "preferences": 1, "experiences": 1, "resources": 2, "skills": 1},
            "score_threshold": 0.15, "dedup_turns": 0, "query_expansion": "off",
            "detail": {"resources": "full"}, "peer_scope": "all", "session_id": "pin-s",
        }),
        json!({
            "query": QUERY, "max_tokens": 800, "purpose": "coding", "score_threshold": 0.0, "dedup_turns": 0,
            "query_expansion": "auto", "detail": "full", "peer_scope": "all", "other_peer_penalty": 0.5,
            "exclude_uris": ["viking://resources/runbooks"],
        }),
    ];
    for body in explicit {
        let from_recall = recall(&app, &body).await;
        let from_search = search_reply(&app, &with(&body, &json!({"mode": "context"}))).await;
        assert!(!entries(ok(&from_search)).is_empty(), "a pin over nothing proves nothing: {body}");
        assert_eq!(result_bytes(&from_recall), result_bytes(&from_search), "{body}");
        assert_not_deprecated(&from_recall);
    }
}
