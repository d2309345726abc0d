//! `POST /api/v1/search/find` end to end through the Lambda edge: each test
//! builds a `lambda_http::Request` (and, for authorizer tests, an API
//! Gateway v2 request context carrying JWT claims), runs it through
//! `skald_lambda::serve` into `skald::api::find::handle` over an ingested
//! fixture corpus, and asserts on the `lambda_http::Response`: status and
//! JSON envelope (the reference's `FindRequest` /
//! `FindResult` and `tests/server/test_api_search.py`).
//!
//! Bad input is a data-driven table, `tests/fixtures/find/bad_requests.json`:
//! each row is a request (body, raw body, padded size, method, headers) and
//! the expected status, code, message (exact or by substrings) and the
//! exact set of `details.validation_errors` locations and types.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use lambda_http::Body;
use serde_json::{Value, json};
use skald::api::find::{MAX_LIMIT, MAX_QUERY_CHARS, MAX_TAGS, MAX_TARGET_URIS};
use skald::app::App;
use skald::embed::dot;
use skald::embed::hashed::HashedEmbedder;
use skald::index::filter::{MAX_FILTER_DEPTH, MAX_FILTER_NODES};
use skald_tests::fixture::{
    DEFAULT_CORPUS, EMBED_DIMENSION, FIND_PATH, TempDirs, app_with_corpus, call_find, find, post_json, request,
    with_jwt_claims,
};
use skald_tests::tables::refused_row_failures;

const BAD_REQUESTS: &str = include_str!("../../fixtures/find/bad_requests.json");

const EMPTY_QUERY: &str = "Search query or image_url must not be empty.";
const ITEM_KEYS: [&str; 6] = ["context_type", "uri", "level", "score", "abstract", "tags"];
const SEVEN_DAYS_S: f64 = 7.0 * 86_400.0;

async fn dev_app() -> (Arc<App>, TempDirs) {
    app_with_corpus(DEFAULT_CORPUS, true).await
}

/// POSTs `body` as the default dev caller, asserts a 200 envelope and
/// returns `result`.
async fn ok_result(app: &Arc<App>, body: &Value) -> Value {
    let (status, json) = find(app, body).await;
    assert_eq!(status, 200, "body {body} answered {json}");
    assert_eq!(json["status"], "ok", "{json}");
    json["result"].clone()
}

/// Every item of a result: memories, then resources, then skills.
fn items(result: &Value) -> Vec<&Value> {
    ["memories", "resources", "skills"]
        .iter()
        .flat_map(|k| result[*k].as_array().unwrap_or_else(|| panic!("{k} is not a list: {result}")))
        .collect()
}

fn uri_of(item: &Value) -> &str {
    item["uri"].as_str().unwrap_or_else(|| panic!("uri is not a string: {item}"))
}

fn score_of(item: &Value) -> f64 {
    item["score"].as_f64().unwrap_or_else(|| panic!("score is not a number: {item}"))
}

fn uris(result: &Value) -> BTreeSet<String> {
    items(result).into_iter().map(|i| uri_of(i).to_owned()).collect()
}

fn set(uris: &[&str]) -> BTreeSet<String> {
    uris.iter().map(|u| (*u).to_owned()).collect()
}

fn total(result: &Value) -> usize {
    usize::try_from(result["total"].as_u64().unwrap_or_else(|| panic!("total is not a count: {result}")))
        .expect("total fits")
}

fn corpus_text(path: &str) -> &'static str {
    DEFAULT_CORPUS.iter().find(|(p, _)| *p == path).map(|(_, t)| *t).unwrap_or_else(|| panic!("no corpus file {path}"))
}

fn now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_secs_f64()
}

// ---------------------------------------------------------------------------
// Bad input: the table.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn bad_requests_are_refused_as_the_table_says_and_never_with_a_500() {
    let (app, _dirs) = dev_app().await;
    let rows: Vec<Value> = serde_json::from_str(BAD_REQUESTS).expect("the table is JSON");
    assert!(rows.len() > 50, "the table lost rows");
    let empty_query_rows = rows.iter().filter(|r| r["message"] == EMPTY_QUERY).count();
    assert!(empty_query_rows >= 5, "the table lost its empty-query rows");
    let failures = refused_row_failures(&rows, FIND_PATH, async |request| call_find(&app, request).await).await;
    assert!(failures.is_empty(), "{} of {} rows failed:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

#[tokio::test]
async fn a_body_of_exactly_256_kib_is_accepted() {
    let (app, _dirs) = dev_app().await;
    let size = 256 * 1024;
    let text = format!("{{\"query\":\"{}\"}}", "a".repeat(size - r#"{"query":""}"#.len()));
    assert_eq!(text.len(), size);
    let answer = call_find(&app, request("POST", &[], Body::Text(text))).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
}

#[tokio::test]
async fn a_binary_body_is_read_like_a_text_body() {
    let (app, _dirs) = dev_app().await;
    let body = json!({"query": "search service", "limit": 2});
    let binary = call_find(&app, request("POST", &[], Body::Binary(body.to_string().into_bytes()))).await;
    let text = call_find(&app, post_json(&body, &[])).await;
    assert_eq!(binary.status, 200, "{}", binary.text);
    assert_eq!(binary.json, text.json);
}

#[tokio::test]
async fn odd_but_valid_inputs_are_answered_not_refused() {
    let (app, _dirs) = dev_app().await;
    let cases = [
        json!({"query": "x", "limit": 3.0}),
        json!({"query": "x", "limit": 1000}),
        json!({"query": "x", "node_limit": 1000}),
        json!({"query": "x", "level": []}),
        json!({"query": "x", "level": ""}),
        json!({"query": "x", "level": ["0", 2]}),
        json!({"query": "x", "context_type": ""}),
        json!({"query": "x", "context_type": []}),
        json!({"query": "x", "context_type": " memory , skill "}),
        json!({"query": "x", "tags": []}),
        json!({"query": "x", "target_uri": ["", "viking://resources"]}),
        json!({"query": "x", "target_uri": "viking://resources/"}),
        json!({"query": "x", "target_uri": "viking://resources/does/not/exist"}),
        json!({"query": "x", "telemetry": {}}),
        json!({"query": "x", "telemetry": {"summary": false}}),
        json!({"query": "x", "score_threshold": 0}),
        json!({"query": "x", "score_threshold": 2}),
        json!({"query": "x", "score_threshold": -1e300}),
        json!({"query": "x", "include_provenance": true}),
        json!({"query": "x", "since": "2025-01-01T00:00:00+08:00", "until": "2026-01-01 12:00:00"}),
        json!({"query": "x", "since": "30s", "until": "1w"}),
        json!({"query": "x", "events_time_decay_protection": "90m"}),
        json!({"query": "x", "filter": {"op": "and", "conds": [
            {"op": "must", "field": "context_type", "conds": ["resource"]},
            {"op": "time_range", "field": "updated_at", "gte": "30d"}
        ]}}),
        json!({"query": "x", "image_url": []}),
        json!({"query": "😀 emoji, 中文, العربية, \u{0000} nul"}),
        json!({"query": "q".repeat(100_000)}),
    ];
    for body in cases {
        let (status, json) = find(&app, &body).await;
        let shown: String = body.to_string().chars().take(200).collect();
        assert_eq!(status, 200, "{shown} answered {json}");
        let result = &json["result"];
        assert_eq!(total(result), items(result).len(), "{shown}");
    }
}

/// `limit` and `node_limit` take at most `MAX_LIMIT` (1000) hits, which
/// the reference does not bound: the bound itself is a valid limit, one
/// past it a 400 at the field.
#[tokio::test]
async fn the_largest_limit_is_accepted_and_one_past_it_is_refused() {
    let (app, _dirs) = dev_app().await;
    for field in ["limit", "node_limit"] {
        let result = ok_result(&app, &json!({"query": "search", field: MAX_LIMIT})).await;
        assert_eq!(total(&result), 14, "{field}: {result}");
        for past in [json!(MAX_LIMIT + 1), json!(i64::MAX)] {
            let (status, json) = find(&app, &json!({"query": "search", field: past})).await;
            assert_eq!(status, 400, "{field} {past}: {json}");
            let error = &json["error"]["details"]["validation_errors"][0];
            assert_eq!(error["loc"], json!(["body", field]), "{json}");
            assert_eq!(error["type"], "less_than_equal", "{json}");
            assert_eq!(error["message"], "Input should be less than or equal to 1000", "{json}");
        }
    }
}

/// An integer past `i64` is still an integer (not "a number with a
/// fractional part"): it is refused for being over the bound.
#[tokio::test]
async fn an_integer_limit_beyond_i64_is_still_an_integer() {
    let (app, _dirs) = dev_app().await;
    let body = r#"{"query": "search", "limit": 18446744073709551615}"#;
    let answer = call_find(&app, request("POST", &[], Body::Text(body.to_owned()))).await;
    assert_eq!(answer.status, 400, "{}", answer.text);
    assert_eq!(answer.json["error"]["details"]["validation_errors"][0]["type"], "less_than_equal", "{}", answer.text);
}

/// Every list bound of the find body, at the bound (answered) and one
/// past it (a 400 whose first error names the field exactly).
#[tokio::test]
async fn list_and_filter_bounds_hold_at_the_bound_and_refuse_one_past_it() {
    let (app, _dirs) = dev_app().await;
    let targets = |n: usize| json!(vec!["viking://resources"; n]);
    let tags = |n: usize| json!((0..n).map(|i| format!("k{i}=v")).collect::<Vec<_>>());
    // A `must` over `n - 1` values: `n` nodes.
    let filter_nodes = |n: usize| json!({"op": "must", "field": "uri", "conds": vec!["viking://resources/x"; n - 1]});
    // `depth` operators nested in `and`s.
    let filter_depth = |depth: usize| {
        let mut f = json!({"op": "must", "field": "context_type", "conds": ["resource"]});
        for _ in 1..depth {
            f = json!({"op": "and", "conds": [f]});
        }
        f
    };
    let cases: [(&str, Value, Value, &str); 4] = [
        ("target_uri", targets(MAX_TARGET_URIS), targets(MAX_TARGET_URIS + 1), "too_long"),
        ("tags", tags(MAX_TAGS), tags(MAX_TAGS + 1), "too_long"),
        ("filter", filter_nodes(MAX_FILTER_NODES), filter_nodes(MAX_FILTER_NODES + 1), "value_error"),
        ("filter", filter_depth(MAX_FILTER_DEPTH), filter_depth(MAX_FILTER_DEPTH + 1), "value_error"),
    ];
    for (field, at, past, kind) in cases {
        let (status, json) = find(&app, &json!({"query": "search", field: at})).await;
        assert_eq!(status, 200, "{field} at its bound: {json}");
        let (status, json) = find(&app, &json!({"query": "search", field: past})).await;
        assert_eq!(status, 400, "{field} past its bound: {json}");
        let error = &json["error"]["details"]["validation_errors"][0];
        assert_eq!(error["loc"], json!(["body", field]), "{json}");
        assert_eq!(error["type"], kind, "{json}");
    }
}

/// A query longer than `MAX_QUERY_CHARS` is cut, not refused: the search
/// reads its first characters (after leading whitespace), so it answers
/// exactly as that prefix does; at the bound nothing is cut.
#[tokio::test]
async fn a_long_query_is_cut_to_its_searched_prefix_not_refused() {
    let (app, _dirs) = dev_app().await;
    let head = "search service ".repeat(MAX_QUERY_CHARS / 15 + 1);
    let prefix: String = head.chars().take(MAX_QUERY_CHARS).collect();
    let at = ok_result(&app, &json!({"query": prefix, "include_provenance": true})).await;
    assert_eq!(at["provenance"][0]["query"], json!(prefix), "at the bound nothing is cut");
    let past = format!("  \n{prefix}and a pasted log that goes on {}", "年糕".repeat(20_000));
    let cut = ok_result(&app, &json!({"query": past, "include_provenance": true})).await;
    assert_eq!(cut, at, "the cut query searches as its prefix");
}

/// A response that would pass what Lambda carries is cut, not refused:
/// with `read_content`, the best-scoring hits whose bodies fit are kept,
/// `total` counts them, and the envelope says `"truncated": true`.
#[tokio::test]
async fn find_with_bodies_past_the_response_limit_keeps_the_best_hits_and_says_so() {
    let big =
        format!("# Big\n\nsearch service notes \"quoted\"\n{}", "line with \"quotes\" and \\ slashes\n".repeat(4_000));
    let files: Vec<(String, String)> =
        (0..6).map(|i| (format!("resources/big/file{i}.md"), big.replace("Big", &format!("Big {i}")))).collect();
    let corpus: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let limit = 400 * 1024;
    let (app, _dirs) = skald_tests::fixture::app_with_config(&corpus, |c| c.limits.max_response_bytes = limit).await;
    let body = json!({"query": "search service notes", "limit": 6, "read_content": true,
        "target_uri": "viking://resources/big"});
    let answer = call_find(&app, post_json(&body, &[])).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["truncated"], true, "the cut is flagged");
    let result = &answer.json["result"];
    let kept = items(result);
    assert!(!kept.is_empty() && kept.len() < 6, "{} hits kept", kept.len());
    assert_eq!(total(result), kept.len());
    assert!(kept.iter().all(|i| i["content"].is_string()), "every kept hit carries its body");
    assert!(kept.iter().any(|i| i["content"].as_str().is_some_and(|c| c.starts_with("# Big"))));
    let envelope = serde_json::json!({"body": answer.text}).to_string();
    assert!(envelope.len() <= limit, "the response takes {} bytes", envelope.len());
    // Without the cut every hit is served, and the flag is absent.
    let small = json!({"query": "search service notes", "limit": 1, "read_content": true,
        "target_uri": "viking://resources/big"});
    let answer = call_find(&app, post_json(&small, &[])).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(answer.json.get("truncated").is_none(), "{}", answer.text.chars().take(200).collect::<String>());
}

// ---------------------------------------------------------------------------
// Results.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_result_has_the_reference_shape_and_key_order() {
    // The raw key order is only observable if JSON maps keep insertion order.
    let probe: Value = serde_json::from_str(r#"{"b": 1, "a": 2}"#).expect("json");
    assert_eq!(probe.as_object().expect("object").keys().collect::<Vec<_>>(), ["b", "a"], "preserve_order is off");

    let (app, _dirs) = dev_app().await;
    let answer = call_find(&app, post_json(&json!({"query": "search service"}), &[])).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.content_type.as_deref(), Some("application/json"));
    let envelope: Vec<&String> = answer.json.as_object().expect("object").keys().collect();
    assert_eq!(envelope, ["status", "result"], "{}", answer.text);
    assert_eq!(answer.json["status"], "ok");
    let result = &answer.json["result"];
    let keys: Vec<&String> = result.as_object().expect("object").keys().collect();
    let want: Vec<&str> = ["memories", "resources", "skills", "total"]
        .into_iter()
        .chain(skald_tests::fixture::backend_keys().iter().copied())
        .collect();
    assert_eq!(keys, want, "{}", answer.text);

    for (bucket, context_type) in [("memories", "memory"), ("resources", "resource"), ("skills", "skill")] {
        for item in result[bucket].as_array().expect("list") {
            let keys: Vec<&String> = item.as_object().expect("item object").keys().collect();
            assert_eq!(keys, ITEM_KEYS, "{item}");
            assert_eq!(item["context_type"], context_type, "{item} in {bucket}");
            assert!(uri_of(item).starts_with("viking://"), "{item}");
            assert!(item["level"].as_u64().is_some_and(|l| l <= 2), "{item}");
            assert!((0.0..=1.0).contains(&score_of(item)), "{item}");
            assert!(item["abstract"].is_string(), "{item}");
            assert!(item["tags"].as_array().is_some_and(|t| t.iter().all(Value::is_string)), "{item}");
        }
    }
    // No context_type, no limit: the default limit of 10 out of the 14
    // records the default user can see; total is the sum of the lists.
    assert_eq!(total(result), 10, "{result}");
    assert_eq!(items(result).len(), 10);
    // The raw text has the items' keys in the reference's order too.
    let first_item = answer.text.find(r#"{"context_type":"#).expect("an item in the raw text");
    let tail = &answer.text[first_item..];
    let positions: Vec<usize> =
        ITEM_KEYS.iter().map(|k| tail.find(&format!("\"{k}\":")).expect("every key in the raw item")).collect();
    assert!(positions.is_sorted(), "raw item keys out of order: {tail:.200}");
}

/// `include_provenance` adds, after `total`, one entry per query: where it
/// searched (the default targets for the request) and what it matched, in
/// the reference's `QueryResult` shape. Absent or false, there is none.
#[tokio::test]
async fn include_provenance_reports_where_the_query_searched_and_what_it_matched() {
    let (app, _dirs) = dev_app().await;
    for body in [json!({"query": "search service"}), json!({"query": "search service", "include_provenance": false})] {
        let result = ok_result(&app, &body).await;
        assert!(result.get("provenance").is_none(), "{body}: {result}");
    }

    let body = json!({"query": "search service", "context_type": "resource", "limit": 3, "include_provenance": true});
    let result = ok_result(&app, &body).await;
    let keys: Vec<&String> = result.as_object().expect("object").keys().collect();
    let want: Vec<&str> = ["memories", "resources", "skills", "total", "provenance"]
        .into_iter()
        .chain(skald_tests::fixture::backend_keys().iter().copied())
        .collect();
    assert_eq!(keys, want, "{result}");
    let provenance = result["provenance"].as_array().expect("a list");
    assert_eq!(provenance.len(), 1, "one query, one entry: {result}");
    let entry = &provenance[0];
    assert_eq!(entry["query"], "search service");
    // context_type resource: viking://resources and the user's tree.
    assert_eq!(entry["searched_directories"], json!(["viking://resources", "viking://user/default"]), "{entry}");
    let matched = entry["matched_contexts"].as_array().expect("a list");
    assert_eq!(matched.len(), 3, "the query's own top `limit`: {entry}");
    for (m, item) in matched.iter().zip(items(&result)) {
        let keys: Vec<&String> = m.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["uri", "tier", "context_type", "score", "match_reason"], "{m}");
        assert_eq!(m["uri"], item["uri"], "one query: the matches are the result, in order");
        assert_eq!(m["tier"], format!("L{}", item["level"]), "{m}");
        assert_eq!(m["context_type"], "resource");
        assert_eq!(m["score"], item["score"]);
    }
}

#[tokio::test]
async fn abstracts_are_the_summary_the_first_paragraph_or_the_sidecar() {
    let (app, _dirs) = dev_app().await;
    let result = ok_result(&app, &json!({"query": "search", "target_uri": "viking://", "limit": 100})).await;
    let by_uri: BTreeMap<&str, &Value> = items(&result).into_iter().map(|i| (uri_of(i), i)).collect();
    let expected = [
        (
            "viking://user/default/memories/preferences/default/editor.md",
            "Prefers Neovim with a dark theme when editing Rust code.",
        ),
        ("viking://user/default/memories/preferences/default/food.md", "喜欢吃川菜，尤其是麻婆豆腐和水煮鱼。"),
        (
            "viking://user/default/memories/entities/project/skald.md",
            "Skald is a serverless context-assembly service written in Rust that speaks the OpenViking protocol.",
        ),
        ("viking://resources/search/ranking.md", "How the search service ranks results by cosine score."),
        ("viking://resources/guides/.abstract.md", "Guides for getting started with the search service."),
        ("viking://resources/guides/.overview.md", "Guides for getting started with the search service."),
        ("viking://agent/skills/web-search/SKILL.md", "Search the web and summarise the top results for the user."),
    ];
    for (uri, want) in expected {
        let item = by_uri.get(uri).unwrap_or_else(|| panic!("{uri} missing from {result}"));
        assert_eq!(item["abstract"], want, "{uri}");
    }
}

#[tokio::test]
async fn directory_hits_carry_the_sidecar_suffix_and_their_level() {
    let (app, _dirs) = dev_app().await;
    let result = ok_result(&app, &json!({"query": "guides", "target_uri": "viking://resources/guides"})).await;
    let got: BTreeMap<String, u64> =
        items(&result).into_iter().map(|i| (uri_of(i).to_owned(), i["level"].as_u64().expect("level"))).collect();
    let want: BTreeMap<String, u64> = [
        ("viking://resources/guides/.abstract.md".to_owned(), 0),
        ("viking://resources/guides/.overview.md".to_owned(), 1),
        ("viking://resources/guides/getting-started.md".to_owned(), 2),
    ]
    .into();
    assert_eq!(got, want, "{result}");

    let all = ok_result(&app, &json!({"query": "guides", "target_uri": "viking://", "limit": 100})).await;
    for item in items(&all) {
        let uri = uri_of(item);
        let level = item["level"].as_u64().expect("level");
        assert_eq!(uri.ends_with("/.abstract.md"), level == 0, "{item}");
        assert_eq!(uri.ends_with("/.overview.md"), level == 1, "{item}");
    }
}

#[tokio::test]
async fn scores_are_in_the_unit_interval_and_ranked_across_the_lists() {
    let (app, _dirs) = dev_app().await;
    let all = ok_result(&app, &json!({"query": "search service in Rust", "limit": 100})).await;
    assert_eq!(total(&all), 14, "{all}");
    for bucket in ["memories", "resources", "skills"] {
        let scores: Vec<f64> = all[bucket].as_array().expect("list").iter().map(score_of).collect();
        assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)), "{bucket}: {scores:?}");
        assert!(scores.is_sorted_by(|a, b| a >= b), "{bucket} not best first: {scores:?}");
    }
    let mut merged: Vec<(f64, String)> = items(&all).into_iter().map(|i| (score_of(i), uri_of(i).to_owned())).collect();
    merged.sort_by(|a, b| b.0.total_cmp(&a.0));
    assert!(merged.windows(2).all(|w| w[0].0 > w[1].0), "ties make the check below ambiguous: {merged:?}");
    // The top k across all lists is the same whatever k is asked for.
    for k in [1, 3, 5, 9] {
        let top = ok_result(&app, &json!({"query": "search service in Rust", "limit": k})).await;
        let mut got: Vec<(f64, String)> =
            items(&top).into_iter().map(|i| (score_of(i), uri_of(i).to_owned())).collect();
        got.sort_by(|a, b| b.0.total_cmp(&a.0));
        assert_eq!(got, merged[..k], "limit {k}");
    }
}

/// A query equal to a record's embedded text has cosine 1 up to `f32`
/// rounding, which can land just above 1: the score must still be in
/// [0, 1].
#[tokio::test]
async fn an_exact_match_scores_at_most_one() {
    let embedder = HashedEmbedder::new(EMBED_DIMENSION);
    let text = (0..100_000)
        .map(|i| format!("exact match probe {i}"))
        .find(|t| {
            let v = embedder.embed_one(t);
            dot(&v, &v) > 1.0
        })
        .expect("some text whose f32 self-similarity rounds above 1");
    let (app, _dirs) = app_with_corpus(&[("resources/probe/.abstract.md", text.as_str())], true).await;
    let result = ok_result(&app, &json!({"query": text, "level": 0})).await;
    let item = &result["resources"][0];
    assert_eq!(item["uri"], "viking://resources/probe/.abstract.md", "{result}");
    let score = score_of(item);
    assert!((0.0..=1.0).contains(&score), "score {score} is outside [0, 1]: {result}");
    assert!(score > 0.999_999, "an exact match scores about 1, got {score}");
}

#[tokio::test]
async fn limit_and_node_limit_cap_the_total_and_node_limit_wins() {
    let (app, _dirs) = dev_app().await;
    let cases = [
        (json!({"query": "search"}), 10),
        (json!({"query": "search", "limit": 3}), 3),
        (json!({"query": "search", "limit": 100}), 14),
        (json!({"query": "search", "node_limit": 4}), 4),
        (json!({"query": "search", "limit": 2, "node_limit": 5}), 5),
        (json!({"query": "search", "limit": 5, "node_limit": 2}), 2),
        (json!({"query": "search", "limit": 6, "node_limit": null}), 6),
    ];
    for (body, want) in cases {
        let result = ok_result(&app, &body).await;
        assert_eq!(total(&result), want, "{body}: {result}");
        assert_eq!(items(&result).len(), want, "{body}");
    }
}

#[tokio::test]
async fn score_threshold_is_strict() {
    let (app, _dirs) = dev_app().await;
    let all = ok_result(&app, &json!({"query": "search service", "limit": 100})).await;
    let mut scores: Vec<f64> = items(&all).into_iter().map(score_of).collect();
    scores.sort_by(|a, b| b.total_cmp(a));
    for k in [0, 3, 7] {
        let threshold = scores[k];
        let result =
            ok_result(&app, &json!({"query": "search service", "limit": 100, "score_threshold": threshold})).await;
        let got: Vec<f64> = items(&result).into_iter().map(score_of).collect();
        assert!(got.iter().all(|s| *s > threshold), "threshold {threshold} kept {got:?}");
        let want = scores.iter().filter(|s| **s > threshold).count();
        assert_eq!(total(&result), want, "threshold {threshold}: the record scoring exactly it must be dropped");
    }
    let none = ok_result(&app, &json!({"query": "search service", "score_threshold": 1.0})).await;
    assert_eq!(total(&none), 0, "{none}");
    let every = ok_result(&app, &json!({"query": "search service", "limit": 100, "score_threshold": -1})).await;
    assert_eq!(total(&every), 14, "{every}");
}

#[tokio::test]
async fn context_type_selects_the_lists_and_their_default_targets() {
    let (app, _dirs) = dev_app().await;
    let counts = |r: &Value| ["memories", "resources", "skills"].map(|k| r[k].as_array().map_or(usize::MAX, Vec::len));

    let memory = ok_result(&app, &json!({"query": "search", "context_type": "memory", "limit": 100})).await;
    assert_eq!(counts(&memory), [7, 0, 0], "{memory}");
    assert!(uris(&memory).iter().all(|u| u.starts_with("viking://user/default/memories/")), "{memory}");

    for body in [
        json!({"query": "search", "context_type": "memory,resource", "limit": 100}),
        json!({"query": "search", "context_type": ["memory", "resource"], "limit": 100}),
    ] {
        let result = ok_result(&app, &body).await;
        assert_eq!(counts(&result), [7, 7, 0], "{body}: {result}");
    }

    let resource = ok_result(&app, &json!({"query": "search", "context_type": "resource", "limit": 100})).await;
    assert_eq!(counts(&resource), [0, 7, 0], "{resource}");

    for body in [
        json!({"query": "web search", "context_type": "skill"}),
        json!({"query": "web search", "context_type": ["skill"]}),
    ] {
        let result = ok_result(&app, &body).await;
        assert_eq!(uris(&result), set(&["viking://agent/skills/web-search/SKILL.md"]), "{body}: {result}");
        assert_eq!(result["skills"][0]["context_type"], "skill");
    }

    // Without a context_type the defaults are the user's tree and
    // viking://resources (the reference's table): no shared skills.
    let default = ok_result(&app, &json!({"query": "web search", "limit": 100})).await;
    assert_eq!(counts(&default), [7, 7, 0], "{default}");
}

#[tokio::test]
async fn target_uri_restricts_results_to_its_subtrees() {
    let (app, _dirs) = dev_app().await;
    let search = set(&["viking://resources/search/indexing.md", "viking://resources/search/ranking.md"]);
    for target in
        [json!("viking://resources/search"), json!("viking://resources/search/"), json!(["viking://resources/search"])]
    {
        let result = ok_result(&app, &json!({"query": "search", "target_uri": target})).await;
        assert_eq!(uris(&result), search, "{target}: {result}");
    }

    let result = ok_result(
        &app,
        &json!({"query": "search", "limit": 100,
                "target_uri": ["viking://resources/search", "viking://user/default/memories/events"]}),
    )
    .await;
    let got = uris(&result);
    assert_eq!(got.len(), 5, "{result}");
    assert!(got.is_superset(&search), "{result}");
    assert!(
        got.iter()
            .all(|u| u.starts_with("viking://resources/search/")
                || u.starts_with("viking://user/default/memories/events/")),
        "{result}"
    );

    let file = ok_result(&app, &json!({"query": "x", "target_uri": "viking://resources/infra/deploy.md"})).await;
    assert_eq!(uris(&file), set(&["viking://resources/infra/deploy.md"]), "{file}");
}

#[tokio::test]
async fn an_empty_target_uri_is_absent() {
    let (app, _dirs) = dev_app().await;
    let plain = ok_result(&app, &json!({"query": "search service"})).await;
    for target in [json!(""), json!([]), json!(null), json!([""])] {
        let result = ok_result(&app, &json!({"query": "search service", "target_uri": target})).await;
        assert_eq!(result, plain, "target_uri {target}");
    }
}

#[tokio::test]
async fn tags_must_all_be_present() {
    let (app, _dirs) = dev_app().await;
    let cases: [(&[&str], &[&str]); 5] = [
        (&["team=search"], &["viking://resources/search/indexing.md", "viking://resources/search/ranking.md"]),
        (&["team=search", "env=prod"], &["viking://resources/search/ranking.md"]),
        (&["env=prod"], &["viking://resources/infra/deploy.md", "viking://resources/search/ranking.md"]),
        (&["env=prod", "team=infra"], &["viking://resources/infra/deploy.md"]),
        (&["team=search", "team=infra"], &[]),
    ];
    for (tags, want) in cases {
        let result = ok_result(&app, &json!({"query": "search", "tags": tags, "limit": 100})).await;
        assert_eq!(uris(&result), set(want), "tags {tags:?}: {result}");
        for item in items(&result) {
            let have: Vec<&str> = item["tags"].as_array().expect("tags").iter().filter_map(Value::as_str).collect();
            assert!(tags.iter().all(|t| have.contains(t)), "{item} lacks one of {tags:?}");
        }
    }
    let result = ok_result(&app, &json!({"query": "deploy", "target_uri": "viking://resources/infra"})).await;
    assert_eq!(result["resources"][0]["tags"], json!(["team=infra", "env=prod"]), "{result}");
    let result =
        ok_result(&app, &json!({"query": "ranking", "target_uri": "viking://resources/search/ranking.md"})).await;
    assert_eq!(result["resources"][0]["tags"], json!(["team=search", "env=prod"]), "{result}");
}

#[tokio::test]
async fn level_accepts_an_int_a_list_and_a_comma_string() {
    let (app, _dirs) = dev_app().await;
    let abstract_md = "viking://resources/guides/.abstract.md";
    let overview_md = "viking://resources/guides/.overview.md";
    let files = set(&[
        "viking://resources/guides/getting-started.md",
        "viking://resources/infra/deploy.md",
        "viking://resources/search/indexing.md",
        "viking://resources/search/ranking.md",
        "viking://resources/zh/intro.md",
    ]);
    let cases = [
        (json!(0), set(&[abstract_md])),
        (json!("0"), set(&[abstract_md])),
        (json!(1), set(&[overview_md])),
        (json!([0, 1]), set(&[abstract_md, overview_md])),
        (json!("0,1"), set(&[abstract_md, overview_md])),
        (json!(["0", "1"]), set(&[abstract_md, overview_md])),
        (json!(2), files.clone()),
        (json!([2]), files.clone()),
    ];
    for (level, want) in cases {
        let body = json!({"query": "guides", "target_uri": "viking://resources", "level": level, "limit": 100});
        let result = ok_result(&app, &body).await;
        assert_eq!(uris(&result), want, "level {level}: {result}");
    }
}

#[tokio::test]
async fn since_and_until_filter_on_the_chosen_time_field() {
    let (app, _dirs) = dev_app().await;
    let events = "viking://user/default/memories/events";
    let kickoff = "viking://user/default/memories/events/2024/01/15/kickoff.md";
    let launch = "viking://user/default/memories/events/2025/03/10/launch.md";
    let release = "viking://user/default/memories/events/2025/06/01/release.md";
    let body = |extra: Value| {
        let mut b = json!({"query": "event", "target_uri": events, "limit": 100});
        b.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        b
    };
    let cases = [
        // created_at of an event is the date in its path.
        (json!({"time_field": "created_at"}), set(&[kickoff, launch, release])),
        (json!({"time_field": "created_at", "since": "2025-01-01", "until": "2025-12-31"}), set(&[launch, release])),
        (json!({"time_field": "created_at", "since": "2025-06-01"}), set(&[release])),
        (json!({"time_field": "created_at", "until": "2024-01-15"}), set(&[kickoff])),
        (json!({"time_field": "created_at", "until": "2025-03-10T00:00:00Z"}), set(&[kickoff, launch])),
        (json!({"time_field": "created_at", "since": "2025-03-10T00:00:01Z"}), set(&[release])),
        (json!({"time_field": "created_at", "since": "7d"}), set(&[])),
        // updated_at is when the file was written (just now, by the
        // fixture): the default field, so the same windows flip.
        (json!({"since": "1h"}), set(&[kickoff, launch, release])),
        (json!({"time_field": "updated_at", "since": "1h"}), set(&[kickoff, launch, release])),
        (json!({"since": "2025-01-01", "until": "2025-12-31"}), set(&[])),
    ];
    for (extra, want) in cases {
        let body = body(extra);
        let result = ok_result(&app, &body).await;
        assert_eq!(uris(&result), want, "{body}: {result}");
    }
}

#[tokio::test]
async fn a_user_never_sees_another_users_memories() {
    let (app, _dirs) = dev_app().await;
    let query = "Bob Emacs light theme 鲍勃 外出活动 Alice manager";
    for target in [json!(null), json!("viking://"), json!("viking://user"), json!(["viking://user", "viking://"])] {
        let result = ok_result(&app, &json!({"query": query, "target_uri": target, "limit": 100})).await;
        let got = uris(&result);
        assert!(!got.is_empty(), "{target}: {result}");
        assert!(got.iter().all(|u| !u.starts_with("viking://user/bob")), "{target} leaked bob's tree: {result}");
    }
    // viking:// is narrowed to what the caller may see: its tree and both
    // shared roots.
    let root = ok_result(&app, &json!({"query": query, "target_uri": "viking://", "limit": 100})).await;
    assert_eq!(total(&root), 15, "7 memories, 7 resource records and the shared skill: {root}");
    assert!(uris(&root).contains("viking://agent/skills/web-search/SKILL.md"), "{root}");
    // A filter expression narrows further; it never widens the targets.
    for filter in [
        json!({"op": "prefix", "field": "uri", "prefix": ["viking://user/bob"]}),
        json!({"op": "must", "field": "owner_user_id", "conds": ["bob"]}),
        json!({"op": "or", "conds": [{"op": "must", "field": "owner_user_id", "conds": ["bob"]},
                                     {"op": "must", "field": "context_type", "conds": ["skill"]}]}),
    ] {
        let result =
            ok_result(&app, &json!({"query": query, "target_uri": "viking://", "filter": filter, "limit": 100})).await;
        assert!(uris(&result).iter().all(|u| !u.starts_with("viking://user/bob")), "{filter} leaked: {result}");
    }
    let user = ok_result(&app, &json!({"query": query, "target_uri": "viking://user", "limit": 100})).await;
    assert!(uris(&user).iter().all(|u| u.starts_with("viking://user/default/")), "{user}");
    assert_eq!(total(&user), 7, "{user}");
}

#[tokio::test]
async fn null_optional_fields_are_absent() {
    let (app, _dirs) = dev_app().await;
    let plain = ok_result(&app, &json!({"query": "search service"})).await;
    let nulls = json!({
        "query": "search service", "image_url": null, "target_uri": null, "context_type": null,
        "limit": null, "node_limit": null, "score_threshold": null, "filter": null,
        "include_provenance": null, "tags": null, "since": null, "until": null, "time_field": null,
        "level": null, "telemetry": null, "read_content": null, "events_time_decay_protection": null
    });
    let (status, json) = find(&app, &nulls).await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(json.get("telemetry"), None, "{json}");
    assert_eq!(json["result"], plain);
}

#[tokio::test]
async fn an_openviking_sdk_body_is_accepted() {
    let (app, _dirs) = dev_app().await;
    let sdk = json!({"query": "x", "target_uri": "", "limit": 10, "score_threshold": null, "filter": null});
    let (status, json) = find(&app, &sdk).await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["result"], ok_result(&app, &json!({"query": "x"})).await);
}

#[tokio::test]
async fn read_content_attaches_each_hits_body() {
    let (app, _dirs) = dev_app().await;
    let body = json!({"query": "guides search", "target_uri": ["viking://resources/guides", "viking://resources/search"],
                      "read_content": true, "limit": 100});
    let result = ok_result(&app, &body).await;
    assert_eq!(total(&result), 5, "{result}");
    for item in items(&result) {
        let uri = uri_of(item);
        let path = uri.strip_prefix("viking://").expect("scheme");
        assert_eq!(item["content"], corpus_text(path), "{uri}");
        let keys: Vec<&String> = item.as_object().expect("object").keys().collect();
        assert_eq!(keys[..6], ITEM_KEYS, "{item}");
    }
    for read_content in [json!(false), json!(null)] {
        let result = ok_result(
            &app,
            &json!({"query": "guides", "target_uri": "viking://resources/guides", "read_content": read_content}),
        )
        .await;
        assert!(items(&result).iter().all(|i| i.get("content").is_none()), "{read_content}: {result}");
    }
}

#[tokio::test]
async fn telemetry_adds_a_find_summary_at_the_top_level() {
    let (app, _dirs) = dev_app().await;
    for telemetry in [json!(true), json!({"summary": true})] {
        let (status, json) = find(&app, &json!({"query": "search", "telemetry": telemetry})).await;
        assert_eq!(status, 200, "{json}");
        let keys: Vec<&String> = json.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["status", "result", "telemetry"], "{json}");
        let t = &json["telemetry"];
        assert_eq!(t["summary"]["operation"], "search.find", "{t}");
        assert_eq!(t["summary"]["status"], "ok", "{t}");
        assert!(t["summary"]["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{t}");
        assert!(t["id"].as_str().is_some_and(|id| id.starts_with("tm_")), "{t}");
        assert!(json["result"]["total"].is_u64(), "{json}");
    }
    for telemetry in [json!(false), json!({"summary": false}), json!({})] {
        let (status, json) = find(&app, &json!({"query": "search", "telemetry": telemetry})).await;
        assert_eq!(status, 200, "{json}");
        assert_eq!(json.get("telemetry"), None, "{telemetry}: {json}");
    }
}

#[tokio::test]
async fn old_events_decay_and_report_origin_and_time_scores() {
    let (app, _dirs) = dev_app().await;
    let events = "viking://user/default/memories/events";
    let dates = [
        ("viking://user/default/memories/events/2024/01/15/kickoff.md", 1_705_276_800.0),
        ("viking://user/default/memories/events/2025/03/10/launch.md", 1_741_564_800.0),
        ("viking://user/default/memories/events/2025/06/01/release.md", 1_748_736_000.0),
    ];
    let plain = ok_result(&app, &json!({"query": "search service launch", "target_uri": events})).await;
    let plain_scores: BTreeMap<&str, f64> = items(&plain).into_iter().map(|i| (uri_of(i), score_of(i))).collect();

    let decayed = ok_result(
        &app,
        &json!({"query": "search service launch", "target_uri": events,
                "events_time_decay_protection": "0", "time_field": "created_at"}),
    )
    .await;
    assert_eq!(total(&decayed), 3, "{decayed}");
    let now = now_s();
    for item in items(&decayed) {
        let uri = uri_of(item);
        let keys: Vec<&String> = item.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["context_type", "uri", "level", "score", "abstract", "tags", "origin_score", "time_score"]);
        let origin = item["origin_score"].as_f64().unwrap_or_else(|| panic!("no origin_score: {item}"));
        let time = item["time_score"].as_f64().unwrap_or_else(|| panic!("no time_score: {item}"));
        assert!(time > 0.0 && time < 1.0, "{item}");
        assert_eq!(origin, plain_scores[uri], "origin_score is the undecayed score: {item}");
        assert!((score_of(item) - origin * time).abs() <= 1e-12 * origin, "{item}");
        let created = dates.iter().find(|(u, _)| *u == uri).map(|(_, d)| *d).expect("a known event");
        let weeks = (now - created) / SEVEN_DAYS_S;
        assert!((time.log2() + weeks).abs() < 0.01, "time_score {time} is not 0.5^{weeks}: {item}");
    }
    let scores = items(&decayed).into_iter().map(score_of).collect::<Vec<_>>();
    assert!(scores.is_sorted_by(|a, b| a >= b), "decayed scores rank the list: {scores:?}");
    assert_eq!(decayed["memories"][0]["uri"], dates[2].0, "the newest event ranks first once decayed: {decayed}");

    // A protection window longer than the events' age: no decay at all.
    let protected = ok_result(
        &app,
        &json!({"query": "search service launch", "target_uri": events,
                "events_time_decay_protection": "3650d", "time_field": "created_at"}),
    )
    .await;
    assert_eq!(protected, plain, "nothing older than the window");

    // Only events decay.
    let everything = ok_result(
        &app,
        &json!({"query": "search service", "limit": 100, "events_time_decay_protection": "0",
                "time_field": "created_at"}),
    )
    .await;
    for item in items(&everything) {
        let is_event = uri_of(item).contains("/memories/events/");
        assert_eq!(item.get("origin_score").is_some(), is_event, "{item}");
        assert_eq!(item.get("time_score").is_some(), is_event, "{item}");
    }
}

#[tokio::test]
async fn queries_rank_the_matching_memory_first_in_english_and_chinese() {
    let (app, _dirs) = dev_app().await;
    let cases = [
        ("Neovim dark theme", "viking://user/default/memories/preferences/default/editor.md"),
        ("麻婆豆腐", "viking://user/default/memories/preferences/default/food.md"),
        ("上海 产品发布会", "viking://user/default/memories/events/2025/06/01/release.md"),
    ];
    for (query, want) in cases {
        let result = ok_result(&app, &json!({"query": query, "context_type": "memory"})).await;
        assert_eq!(result["memories"][0]["uri"], want, "{query}: {result}");
    }
}

// ---------------------------------------------------------------------------
// Identity.
// ---------------------------------------------------------------------------

fn memory_owners(result: &Value) -> BTreeSet<String> {
    result["memories"]
        .as_array()
        .expect("list")
        .iter()
        .map(|i| uri_of(i).split('/').nth(3).expect("viking://user/{id}/…").to_owned())
        .collect()
}

#[tokio::test]
async fn dev_mode_without_headers_acts_as_the_default_user() {
    let (app, _dirs) = dev_app().await;
    let answer =
        call_find(&app, post_json(&json!({"query": "editor theme", "context_type": "memory", "limit": 100}), &[]))
            .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(memory_owners(&answer.json["result"]), set(&["default"]), "{}", answer.text);
    assert_eq!(total(&answer.json["result"]), 7);
}

#[tokio::test]
async fn dev_mode_trusts_the_user_header() {
    let (app, _dirs) = dev_app().await;
    let body = json!({"query": "Emacs editor theme", "context_type": "memory", "limit": 100});
    let answer = call_find(&app, post_json(&body, &[("X-OpenViking-User", "bob")])).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let result = &answer.json["result"];
    assert_eq!(memory_owners(result), set(&["bob"]), "{result}");
    assert_eq!(total(result), 3, "{result}");
    assert_eq!(result["memories"][0]["uri"], "viking://user/bob/memories/preferences/bob/editor.md", "{result}");
    // Bob may not reach into default's tree either.
    let answer = call_find(
        &app,
        post_json(
            &json!({"query": "x", "target_uri": "viking://user/default/memories"}),
            &[("X-OpenViking-User", "bob")],
        ),
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.text);
    assert_eq!(answer.json["error"]["code"], "PERMISSION_DENIED");
}

#[tokio::test]
async fn authorizer_mode_without_claims_is_unauthenticated() {
    let (app, _dirs) = app_with_corpus(DEFAULT_CORPUS, false).await;
    for headers in [&[][..], &[("X-OpenViking-User", "default")][..], &[("X-OpenViking-Account", "default")][..]] {
        let answer = call_find(&app, post_json(&json!({"query": "search"}), headers)).await;
        assert_eq!(answer.status, 401, "{headers:?}: {}", answer.text);
        assert_eq!(answer.json["status"], "error");
        assert_eq!(answer.json["error"]["code"], "UNAUTHENTICATED", "{}", answer.text);
    }
    // Claims without the user claim are no credentials either.
    let event = with_jwt_claims(post_json(&json!({"query": "search"}), &[]), &[("scope", "find")]);
    let answer = call_find(&app, event).await;
    assert_eq!(answer.status, 401, "{}", answer.text);
}

#[tokio::test]
async fn authorizer_mode_acts_as_the_jwt_subject_and_ignores_identity_headers() {
    let (app, _dirs) = app_with_corpus(DEFAULT_CORPUS, false).await;
    let body = json!({"query": "Emacs editor theme", "context_type": "memory", "limit": 100});
    let event = with_jwt_claims(
        post_json(&body, &[("X-OpenViking-User", "default"), ("X-OpenViking-Account", "other")]),
        &[("sub", "bob"), ("custom:account", "default")],
    );
    let answer = call_find(&app, event).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(memory_owners(&answer.json["result"]), set(&["bob"]), "{}", answer.text);
    assert_eq!(total(&answer.json["result"]), 3, "{}", answer.text);

    // The header cannot widen the JWT subject's reach.
    let event = with_jwt_claims(
        post_json(&json!({"query": "x", "target_uri": "viking://user/default"}), &[("X-OpenViking-User", "default")]),
        &[("sub", "bob"), ("custom:account", "default")],
    );
    let answer = call_find(&app, event).await;
    assert_eq!(answer.status, 403, "{}", answer.text);

    // A token that names no account is refused, never served from a
    // default account.
    let event = with_jwt_claims(post_json(&body, &[("X-OpenViking-Account", "default")]), &[("sub", "bob")]);
    let answer = call_find(&app, event).await;
    assert_eq!(answer.status, 401, "{}", answer.text);
    assert!(answer.json["error"]["message"].as_str().is_some_and(|m| m.contains("custom:account")), "{}", answer.text);

    // The account claim picks the tenant: another account has no index.
    let event =
        with_jwt_claims(post_json(&json!({"query": "search"}), &[]), &[("sub", "bob"), ("custom:account", "acme")]);
    let answer = call_find(&app, event).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(total(&answer.json["result"]), 0, "{}", answer.text);

    // An invalid subject is not an identity.
    let event = with_jwt_claims(
        post_json(&json!({"query": "search"}), &[]),
        &[("sub", "../default"), ("custom:account", "default")],
    );
    let answer = call_find(&app, event).await;
    assert_eq!(answer.status, 401, "{}", answer.text);
}

#[tokio::test]
async fn jwt_claims_win_over_headers_in_dev_mode_too() {
    let (app, _dirs) = dev_app().await;
    let body = json!({"query": "editor theme", "context_type": "memory", "limit": 100});
    let event = with_jwt_claims(post_json(&body, &[("X-OpenViking-User", "default")]), &[("sub", "bob")]);
    let answer = call_find(&app, event).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(memory_owners(&answer.json["result"]), set(&["bob"]), "{}", answer.text);
}

/// An asymmetric embedder, as E5 is with its `query: ` and `passage: `
/// prefixes: documents go through `embed`, and its query side reads the
/// one query it knows as another text.
#[derive(Debug)]
struct QuerySide {
    inner: HashedEmbedder,
    /// (a query, the text its query vector is that of)
    reads: (&'static str, &'static str),
}

#[async_trait::async_trait]
impl skald::embed::Embedder for QuerySide {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, skald::embed::EmbedError> {
        self.inner.embed(texts).await
    }

    async fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, skald::embed::EmbedError> {
        let read: Vec<&str> = texts.iter().map(|t| if *t == self.reads.0 { self.reads.1 } else { t }).collect();
        self.inner.embed(&read).await
    }
}

/// `find` and context mode embed what they are asked with the embedder's
/// query side: the file the query vector is near comes first, although
/// the query shares no word with it.
#[tokio::test]
async fn searches_embed_their_queries_with_the_query_side() {
    const ASKED: &str = "qqq zzz";
    const EDITOR: &str = "viking://user/default/memories/preferences/default/editor.md";
    let (app, _dirs) = dev_app().await;
    let side = QuerySide {
        inner: HashedEmbedder::new(EMBED_DIMENSION),
        reads: (ASKED, corpus_text("user/default/memories/preferences/default/editor.md")),
    };
    let app = Arc::new(skald_tests::fixture::with_embedder(&app, Arc::new(side)));
    let result = ok_result(&app, &json!({"query": ASKED, "limit": 3})).await;
    assert_eq!(items(&result).first().map(|i| uri_of(i)), Some(EDITOR), "{result:#}");
    let (status, reply) = skald_tests::fixture::search(
        &app,
        &json!({"query": ASKED, "mode": "context", "search_type": "semantic", "max_tokens": 400}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["result"]["entries"][0]["uri"], EDITOR, "{reply:#}");
}
