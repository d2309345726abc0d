//! The reranker (`rerank`) in context mode, end to end: Skald's real
//! client talks over real HTTP to a [`ModelServer`] answering
//! `POST /v1/rerank` in Cohere's shape, over the demo corpus with the
//! embedded USE-m3 model, through the `search` handler.
//!
//! - What it does: the block follows the reranker's scores and leaves out
//!   what it scores at or below the threshold, so "what does my cat eat"
//!   gets the cat memories and nothing else; when it finds nothing
//!   relevant the block is empty and says why.
//! - Faults: a reranker that fails, answers garbage, leaves a document
//!   unscored or hangs never fails the request: the block is the one the
//!   search alone gives, `stats.rerank` says what happened, and the answer
//!   arrives before the client's deadline. A spent deadline skips the call.
//! - Configuration: `SKALD_RERANK_*`, and a provider without `/rerank`
//!   refused.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skald::app::App;
use skald::config::{Config, ModelConfig};
use skald_tests::fixture::{Handler, SEARCH_PATH, call, ok};
use skald_tests::model_server::{ModelServer, Recorded, Reply};

use crate::demo_context::{demo_app, demo_app_with};

const CAT_QUERY: &str = "what does my cat eat";

/// The deadline the fault tests send, in milliseconds: the reranker gets
/// it less the stage reserve (1000 ms).
const DEADLINE_MS: u64 = 2500;

/// The model name the tests configure.
const MODEL: &str = "rerank-stub";

/// A reranker's score for `document`: highest for the vet's diet advice
/// (a check-up, 体检), high for anything else about a cat (in English or
/// Chinese), low otherwise.
fn cat_score(query_and_document: &str) -> String {
    let document = query_and_document.split_once('\n').map_or("", |(_, d)| d).to_lowercase();
    let about_cat = document.contains('猫') || document.split(|c: char| !c.is_alphanumeric()).any(|w| w == "cat");
    match (about_cat, document.contains("体检")) {
        (true, true) => "0.97",
        (true, false) => "0.93",
        (false, _) => "0.02",
    }
    .to_owned()
}

/// The vet visit: what [`cat_score`] ranks first.
const VET_VISIT: &str = "viking://user/default/memories/events/2026/09/29/niangao_vet_visit.md";

/// `demo` (see [`demo_app`]) with `server` as its reranker.
fn reranked(demo: &App, server: &ModelServer) -> Arc<App> {
    demo_app_with(demo, |config| config.rerank = Some(server.openai_model(MODEL)))
}

/// The context-mode result for `query` at 1600 tokens, sent with `headers`,
/// and how long the call took.
async fn context_with(app: &Arc<App>, query: &str, headers: &[(&str, &str)]) -> (Value, Duration) {
    let body = json!({"query": query, "mode": "context", "max_tokens": 1600});
    let started = Instant::now();
    let reply = call(app, Handler::Search, "POST", SEARCH_PATH, headers, Some(&body)).await;
    (ok(&reply).clone(), started.elapsed())
}

fn uris(result: &Value) -> Vec<String> {
    result["entries"].as_array().into_iter().flatten().filter_map(|e| e["uri"].as_str().map(str::to_owned)).collect()
}

fn rerank_calls(server: &ModelServer) -> Vec<Recorded> {
    server.requests().into_iter().filter(|r| r.path.ends_with("/rerank")).collect()
}

#[tokio::test]
async fn the_block_follows_the_rerankers_scores_and_holds_only_what_it_finds_relevant() {
    let server = ModelServer::start().await;
    server.set_default(Reply::compute(cat_score));
    let (plain, _dir) = demo_app().await;
    let app = reranked(&plain, &server);

    let (result, _) = context_with(&app, CAT_QUERY, &[]).await;
    let (without, _) = context_with(&plain, CAT_QUERY, &[]).await;
    let stats = &result["stats"];
    assert_eq!(stats["rerank"]["status"], "ok", "{stats}");
    assert_eq!(stats["rerank"]["model"], format!("rerank:{MODEL}"), "{stats}");
    assert!(without["stats"].get("rerank").is_none(), "no reranker, no stats.rerank: {}", without["stats"]);

    // One call, carrying the query and the candidates' abstracts.
    let calls = rerank_calls(&server);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let sent = &calls[0].body;
    assert_eq!((sent["model"].as_str(), sent["query"].as_str()), (Some(MODEL), Some(CAT_QUERY)));
    let documents = sent["documents"].as_array().expect("documents");
    assert_eq!(stats["rerank"]["scored"].as_u64(), Some(documents.len() as u64), "{stats}");
    assert_eq!(sent["top_n"].as_u64(), Some(documents.len() as u64));
    let about_cat = documents.iter().filter(|d| cat_score(&format!("q\n{}", d.as_str().unwrap_or(""))) != "0.02");
    let relevant = about_cat.count();
    assert!(relevant >= 2 && relevant < documents.len(), "the candidates mix cats and strangers: {documents:?}");

    // What it found relevant, all of it, and nothing else: the search
    // alone injects strangers beside the cat memories.
    let served = uris(&result);
    assert_eq!(served.len(), relevant, "{:#}", result["rendered"]);
    let scores: Vec<f64> =
        result["entries"].as_array().into_iter().flatten().filter_map(|e| e["score"].as_f64()).collect();
    let mut want = vec![0.93; relevant];
    want[0] = 0.97;
    assert_eq!(scores, want, "the reranker's scores are shown, best first: {served:?}");
    assert_eq!(served.first().map(String::as_str), Some(VET_VISIT), "its best comes first");
    assert_ne!(uris(&without).first().map(String::as_str), Some(VET_VISIT), "the search alone ranks it lower");
    for cat in ["memories/entities/pets/niangao.md", "memories/events/2026/09/29/niangao_vet_visit.md"] {
        assert!(served.iter().any(|u| u.ends_with(cat)), "{cat} not in {served:?}");
    }
    assert!(uris(&without).len() > served.len(), "the search alone: {:?}", uris(&without));
    assert_eq!(stats["relevance"]["threshold"].as_f64(), Some(0.1), "{stats}");
    assert_eq!(stats["relevance"]["cut"].as_u64(), Some((documents.len() - relevant) as u64), "{stats}");
}

#[tokio::test]
async fn a_reranker_that_finds_nothing_relevant_empties_the_block_and_says_why() {
    let server = ModelServer::start().await;
    server.set_default(Reply::compute(|_| "0.04".to_owned()));
    let (demo, _dir) = demo_app().await;
    let app = reranked(&demo, &server);
    let (result, _) = context_with(&app, CAT_QUERY, &[]).await;
    assert_eq!(result["entries"], json!([]), "{result:#}");
    assert_eq!(result["rendered"], "");
    let why = result["stats"]["relevance"]["empty"].as_str().unwrap_or_default();
    assert!(why.contains("reranker") && why.contains("0.04") && why.contains("0.10"), "{why}");
}

#[tokio::test]
async fn a_failing_or_late_reranker_keeps_the_searchs_block_before_the_deadline() {
    let (plain, _dir) = demo_app().await;
    let (without, _) = context_with(&plain, CAT_QUERY, &[]).await;
    let deadline = DEADLINE_MS.to_string();
    // (what, reply, status, waits for the stage's budget)
    let faults: [(&str, Reply, &str, bool); 5] = [
        ("500", Reply::Status(500), "failed", false),
        ("malformed body", Reply::Raw("{not json".into()), "failed", false),
        (
            "a document unscored",
            Reply::Raw(r#"{"results":[{"index":0,"relevance_score":0.9}]}"#.into()),
            "failed",
            false,
        ),
        ("hang", Reply::Hang, "timeout", true),
        ("late", Reply::Delay(Duration::from_secs(4), Box::new(Reply::Echo)), "timeout", true),
    ];
    for (what, reply, status, waits) in faults {
        let server = ModelServer::start().await;
        server.set_default(reply);
        let app = reranked(&plain, &server);
        let (result, elapsed) = context_with(&app, CAT_QUERY, &[("x-client-timeout-ms", deadline.as_str())]).await;
        let stats = &result["stats"];
        assert_eq!(stats["rerank"]["status"], status, "{what}: {stats}");
        assert!(stats["rerank"]["error"].as_str().is_some_and(|e| !e.is_empty()), "{what}: {stats}");
        assert_eq!(uris(&result), uris(&without), "{what}: the search's own block");
        assert_eq!(result["rendered"], without["rendered"], "{what}");
        assert!(elapsed < Duration::from_millis(DEADLINE_MS), "{what}: answered after {elapsed:?}");
        if waits {
            assert!(elapsed >= Duration::from_millis(1000), "{what}: the stage did not wait ({elapsed:?})");
        }
        assert_eq!(rerank_calls(&server).len(), 1, "{what}");
    }
}

#[tokio::test]
async fn a_spent_deadline_skips_the_reranker_without_a_call() {
    let server = ModelServer::start().await;
    server.set_default(Reply::compute(cat_score));
    let (demo, _dir) = demo_app().await;
    let app = reranked(&demo, &server);
    // The stage reserve (1000 ms) takes all of it.
    let (result, _) = context_with(&app, CAT_QUERY, &[("x-client-timeout-ms", "1000")]).await;
    assert_eq!(result["stats"]["rerank"]["status"], "skipped", "{}", result["stats"]);
    assert!(!uris(&result).is_empty(), "the search's block is served");
    assert!(rerank_calls(&server).is_empty());
    assert_eq!(server.connections(), 0, "not even a connection");
}

#[test]
fn the_reranker_is_configured_from_the_environment_and_a_provider_without_rerank_is_refused() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
    };
    let model = ModelConfig::rerank_from_variables(vars(&[
        ("SKALD_RERANK_MODEL", "bge-reranker-v2-m3"),
        ("SKALD_RERANK_BASE_URL", "http://127.0.0.1:8080/v1"),
    ]))
    .expect("valid")
    .expect("set");
    assert_eq!(model.id(), "openai:bge-reranker-v2-m3");
    assert_eq!(ModelConfig::rerank_from_variables(vars(&[("SKALD_RERANK_BASE_URL", "http://x/v1")])).ok(), Some(None));
    // (what, variables, the error's words)
    type Variables = &'static [(&'static str, &'static str)];
    let refused: [(&str, Variables, &str); 2] = [
        (
            "bedrock has no /rerank here",
            &[("SKALD_RERANK_MODEL", "cohere.rerank-v3-5:0"), ("SKALD_RERANK_PROVIDER", "bedrock")],
            "rerank.provider",
        ),
        ("OpenAI's own API has none", &[("SKALD_RERANK_MODEL", "m")], "SKALD_RERANK_BASE_URL is required"),
    ];
    for (what, variables, words) in refused {
        let err = ModelConfig::rerank_from_variables(vars(variables)).expect_err(what).to_string();
        assert!(err.contains(words), "{what}: {err}");
    }
    // (what, configuration, the error's words)
    let table = [
        (
            "bedrock has no /rerank here",
            json!({"rerank": {"provider": "bedrock", "model_id": "cohere.rerank-v3-5:0"}}),
            "rerank.provider must be openai",
        ),
        ("a zero timeout", json!({"retrieval": {"rerank_timeout_s": 0}}), "retrieval.rerank_timeout_s"),
    ];
    for (what, config, words) in table {
        let err =
            Config::from_json(&config.to_string(), "test.json", std::path::Path::new(".")).expect_err(what).to_string();
        assert!(err.contains(words), "{what}: {err}");
    }
    let config = Config::from_json(
        &json!({"rerank": {"provider": "openai", "base_url": "http://x/v1", "model": "m"},
                "retrieval": {"rerank_threshold": -2.5}})
        .to_string(),
        "test.json",
        std::path::Path::new("."),
    )
    .expect("logits may be negative");
    assert_eq!(config.retrieval.rerank_threshold, -2.5);
}
