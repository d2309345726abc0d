//! Keyword and hybrid search (`search_type: "keywords" | "hybrid"`) through
//! the real routes: exact terms in English and Chinese, every filter and
//! target, tenancy, and list and context modes. The records' terms are the
//! same whether ingest or the indexer built them (`indexer::`'s record
//! parity compares whole records, terms included).

use std::sync::Arc;

use serde_json::{Value, json};
use skald::app::App;
use skald_tests::fixture::{TempDirs, app_with_corpus, call_find, find, ok, post_json, search_reply};

const DANA: &str = "viking://user/default/memories/entities/people/dana.md";
const INCIDENT: &str = "viking://user/default/memories/events/2026/03/02/build-incident.md";
const WEEKLY: &str = "viking://user/default/memories/events/2026/03/09/weekly.md";
const GARDEN: &str = "viking://user/default/resources/notes/garden.md";
const S3_DOC: &str = "viking://resources/docs/s3-writes.md";
const BOB: &str = "viking://user/bob/memories/entities/secret.md";

const CORPUS: &[(&str, &str)] = &[
    (
        "user/default/memories/entities/people/dana.md",
        "Dana Whitfield leads the storage team and reports to Priya Raman.\n",
    ),
    (
        "user/default/memories/events/2026/03/02/build-incident.md",
        "---\ntags: [kind=incident]\n---\nThe build failed with error E0425: cannot find value `frobnicate` in this scope.\n",
    ),
    ("user/default/memories/events/2026/03/09/weekly.md", "本周周报：完成了索引压缩，下周计划优化冷启动时间。\n"),
    ("user/default/resources/notes/garden.md", "Tomatoes need six hours of sun and deep watering.\n"),
    ("resources/docs/s3-writes.md", "Amazon S3 conditional writes: If-None-Match on PUT creates only when absent.\n"),
    ("user/bob/memories/entities/secret.md", "Bob's codename list: frobnicate, Priya, 周报, E0425.\n"),
];

async fn app() -> (Arc<App>, TempDirs) {
    app_with_corpus(CORPUS, true).await
}

use skald_tests::fixture::ranked_uris as hits;

fn score_of(result: &Value, uri: &str) -> Option<f64> {
    ["memories", "resources", "skills"]
        .iter()
        .flat_map(|k| result[*k].as_array().cloned().unwrap_or_default())
        .find(|h| h["uri"] == uri)
        .and_then(|h| h["score"].as_f64())
}

async fn keywords(app: &Arc<App>, extra: Value) -> Value {
    let mut body = json!({"search_type": "keywords", "limit": 10});
    for (k, v) in extra.as_object().expect("an object") {
        body[k] = v.clone();
    }
    let (status, reply) = find(app, &body).await;
    assert_eq!(status, 200, "{body}: {reply}");
    reply["result"].clone()
}

#[tokio::test]
async fn exact_terms_are_found_in_english_and_chinese() {
    let (app, _dirs) = app().await;
    for (query, want) in [
        ("E0425", INCIDENT),
        ("error e0425", INCIDENT),
        ("frobnicate", INCIDENT),
        ("周报", WEEKLY),
        ("冷启动", WEEKLY),
        ("who does Dana report to", DANA),
        ("Priya", DANA),
        ("If-None-Match", S3_DOC),
        ("ｔｏｍａｔｏｅｓ", GARDEN),
    ] {
        let result = keywords(&app, json!({"query": query})).await;
        let found = hits(&result);
        assert_eq!(found.first().map(String::as_str), Some(want), "{query}: {found:?}");
        let score = score_of(&result, want).expect("scored");
        assert!(score > 0.0 && score <= 1.0, "{query}: score {score} in (0, 1]");
        assert!(!found.iter().any(|u| u == BOB), "{query}: another user's node: {found:?}");
    }
    // Records matching no term are no hits: a query of function words finds nothing.
    assert!(hits(&keywords(&app, json!({"query": "what is the"})).await).is_empty());
    assert!(hits(&keywords(&app, json!({"query": "zyxwvut"})).await).is_empty());
}

#[tokio::test]
async fn filters_targets_and_tenancy_hold() {
    let (app, _dirs) = app().await;
    // Priya is in Dana's memory and in bob's: only the caller's is found.
    assert_eq!(hits(&keywords(&app, json!({"query": "Priya"})).await), [DANA]);
    // Bob finds his own node, and never the default user's.
    let answer = call_find(
        &app,
        post_json(&json!({"query": "Priya", "search_type": "keywords"}), &[("X-OpenViking-User", "bob")]),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(hits(&answer.json["result"]), [BOB]);
    // Targets, context types, tags, levels, time windows and filter expressions.
    let cases = [
        (json!({"query": "S3 writes sun", "target_uri": "viking://resources"}), vec![S3_DOC]),
        (json!({"query": "S3 writes sun", "context_type": "memory"}), vec![]),
        (json!({"query": "build error sun", "tags": ["kind=incident"]}), vec![INCIDENT]),
        (json!({"query": "build error sun", "level": 0}), vec![]),
        (json!({"query": "build error 周报", "since": "2026-03-05", "time_field": "created_at"}), vec![WEEKLY]),
        (
            json!({"query": "Dana sun", "filter": {"op": "prefix", "field": "uri", "prefix": "viking://user/default/resources"}}),
            vec![GARDEN],
        ),
    ];
    for (body, want) in cases {
        let found = hits(&keywords(&app, body.clone()).await);
        assert_eq!(found, want, "{body}");
    }
}

#[tokio::test]
async fn a_keyword_search_needs_a_query_and_takes_no_image() {
    let (app, _dirs) = app().await;
    let (status, reply) = find(&app, &json!({"query": "  ", "search_type": "keywords"})).await;
    assert_eq!(status, 400, "{reply}");
    let (status, reply) = find(&app, &json!({"query": "x", "search_type": "exact"})).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["details"]["validation_errors"][0]["loc"], json!(["body", "search_type"]));
}

#[tokio::test]
async fn hybrid_lifts_keyword_matches_and_never_lowers_a_score() {
    let (app, _dirs) = app().await;
    let query = "frobnicate E0425 tomatoes";
    let semantic = find(&app, &json!({"query": query, "limit": 10})).await.1["result"].clone();
    let hybrid = find(&app, &json!({"query": query, "limit": 10, "search_type": "hybrid"})).await.1["result"].clone();
    for uri in hits(&semantic) {
        let (s, h) = (score_of(&semantic, &uri).expect("semantic"), score_of(&hybrid, &uri).expect("hybrid"));
        assert!(h >= s, "{uri}: hybrid {h} < semantic {s}");
        if uri == INCIDENT || uri == GARDEN {
            assert!(h > s, "{uri} matches query words: {h} > {s}");
        } else if uri != BOB {
            assert!((h - s).abs() < 1e-12, "{uri} matches no query word: {h} == {s}");
        }
    }
    assert_eq!(hits(&hybrid).first().map(String::as_str), Some(INCIDENT), "{hybrid}");
}

#[tokio::test]
async fn list_and_context_modes_search_by_keywords() {
    let (app, _dirs) = app().await;
    for kind in ["keywords", "hybrid"] {
        let list = search_reply(&app, &json!({"query": "周报", "search_type": kind})).await;
        assert_eq!(hits(ok(&list)).first().map(String::as_str), Some(WEEKLY), "{kind}");

        let context = search_reply(
            &app,
            &json!({"query": "error E0425", "mode": "context", "search_type": kind, "max_tokens": 400}),
        )
        .await;
        let result = ok(&context);
        let entries = result["entries"].as_array().expect("entries");
        assert_eq!(entries.first().map(|e| e["uri"].clone()), Some(json!(INCIDENT)), "{kind}: {result}");
        assert!(entries.iter().all(|e| e["uri"] != BOB), "{kind}");
        assert!(result["rendered"].as_str().expect("rendered").contains("E0425"), "{kind}");
    }
    // A context-mode keyword search with no matching word serves an empty block.
    let empty = search_reply(&app, &json!({"query": "zyxwvut", "mode": "context", "search_type": "keywords"})).await;
    assert_eq!(ok(&empty)["entries"], json!([]));
}
