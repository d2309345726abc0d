//! Context mode on the demo corpus with the embedded USE-m3 model, as a
//! new user meets it: `POST /api/v1/search/search` in context mode at tight
//! budgets. The block for the README's first question at 300 tokens is a
//! golden file (`fixtures/golden/demo_cat_300.xml`, rewritten with
//! `SKALD_UPDATE_GOLDEN=1`); whatever the file says, the question's three
//! relevant memories are served with text.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use skald::app::App;
use skald::config::{Config, IdentityMode};
use skald::embed::Embedder;
use skald::embed::use_m3::UseM3Embedder;
use skald::store::SharedStore;
use skald::store::local::LocalStore;
use skald_tests::fixture::{TempDir, ok, search_reply};
use skald_tests::xml::parse_block;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where `scripts/setup-model.sh` put the USE-m3 model.
fn use_m3() -> UseM3Embedder {
    let dir = std::env::var_os("SKALD_USE_M3_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| repo().join(".skald/models/use-m3"), PathBuf::from);
    UseM3Embedder::open(&dir).unwrap_or_else(|e| {
        panic!("the USE-m3 model is not available in {} ({e}); run scripts/setup-model.sh first", dir.display())
    })
}

/// The demo ingested with USE-m3 into a fresh local store, served in dev
/// mode (user `default`); keep the directory alive while the app is used.
pub(crate) async fn demo_app() -> (Arc<App>, TempDir) {
    ingested_demo().await
}

/// Another app over `app`'s store and embedder (the demo, ingested once),
/// with `edit` applied to a copy of its configuration.
pub(crate) fn demo_app_with(app: &App, edit: impl FnOnce(&mut Config)) -> Arc<App> {
    let mut config = app.config.clone();
    edit(&mut config);
    Arc::new(App::with_parts(config, Arc::clone(&app.store), Arc::clone(&app.embedder)))
}

/// [`demo_app`]'s construction.
async fn ingested_demo() -> (Arc<App>, TempDir) {
    let dir = TempDir::new("demo");
    let store: SharedStore = Arc::new(LocalStore::open(dir.path()).expect("open the local store"));
    let embedder: Arc<dyn Embedder> = Arc::new(use_m3());
    let mut config = Config { store: dir.path().display().to_string(), ..Config::default() };
    config.identity.mode = IdentityMode::Dev;
    let app = App::with_parts(config, store, embedder);
    skald_tests::fixture::ingest_tree(&app, &repo().join("samplconfigs/demo")).await;
    (Arc::new(app), dir)
}

/// The context-mode result for `query` at `max_tokens`.
pub(crate) async fn context(app: &Arc<App>, query: &str, max_tokens: usize) -> Value {
    let reply = search_reply(app, &json!({"query": query, "mode": "context", "max_tokens": max_tokens})).await;
    ok(&reply).clone()
}

const CAT: [&str; 2] = [
    "viking://user/default/memories/entities/pets/niangao.md",
    "viking://user/default/memories/events/2026/09/29/niangao_vet_visit.md",
];

/// The user's own diet: not what the cat eats.
const USER_DIET: &str = "viking://user/default/memories/preferences/default/food.md";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cat_question_at_300_tokens_serves_its_memories_with_text() {
    let (app, _dir) = demo_app().await;
    let result = context(&app, "what does my cat eat", 300).await;
    let entries = result["entries"].as_array().expect("entries");
    let rendered = result["rendered"].as_str().expect("rendered");
    assert!(result["stats"]["used_tokens"].as_u64().expect("used") <= 300, "{}", result["stats"]);
    for uri in CAT {
        let e = entries.iter().find(|e| e["uri"] == uri).unwrap_or_else(|| panic!("{uri} not served: {rendered}"));
        assert_ne!(e["detail"], "uri", "{uri} is a bare uri: {rendered}");
        assert_ne!(e["text"], "", "{uri}: {rendered}");
    }
    // The relevance cut leaves out what is far below the cat memories.
    assert!(entries.iter().all(|e| e["uri"] != USER_DIET), "the user's diet is not the cat's: {rendered}");
    assert!(result["stats"]["relevance"]["cut"].as_u64().is_some_and(|n| n > 0), "{}", result["stats"]);
    // No entry is bare while a lower-ranked one carries text.
    let bare = entries.iter().position(|e| e["detail"] == "uri").unwrap_or(entries.len());
    assert!(entries[bare..].iter().all(|e| e["detail"] == "uri"), "{rendered}");
    // A cut text is a prefix of the entry's whole abstract, and marked.
    let parsed = parse_block(rendered).expect("the block parses");
    for (p, e) in parsed.iter().zip(entries) {
        assert_eq!(p.truncated, e["truncated"] == true, "{rendered}");
    }
    super::golden::compare_golden("demo_cat_300", rendered);
}

/// A prompt about nothing the memory holds gets an empty block, and the
/// stats say why; `find` still lists what matched best.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_about_nothing_the_memory_holds_gets_an_empty_block() {
    let (app, _dir) = demo_app().await;
    for query in
        ["What is the boiling point of tungsten?", "怎么给山地自行车换内胎", "Quelle est la capitale du Pérou ?"]
    {
        let result = context(&app, query, 1600).await;
        let relevance = &result["stats"]["relevance"];
        assert_eq!(result["entries"].as_array().map(Vec::len), Some(0), "{query}: {:#}", result["rendered"]);
        assert_eq!(result["rendered"], "", "{query}");
        let why = relevance["empty"].as_str().unwrap_or_else(|| panic!("{query}: no reason in {relevance}"));
        assert!(why.contains("relevance floor"), "{query}: {why}");
        assert!(relevance["best"].as_f64().is_some_and(|b| b < relevance["floor"].as_f64().unwrap_or(0.0)));
        let found = search_reply(&app, &json!({"query": query, "limit": 3})).await;
        let hits = ok(&found)["resources"].as_array().map_or(0, Vec::len)
            + ok(&found)["memories"].as_array().map_or(0, Vec::len);
        assert!(hits > 0, "{query}: find still lists matches: {}", found.text);
    }
    // A question the memory answers is not cut to nothing.
    let result = context(&app, "what does my cat eat", 1600).await;
    assert!(result["entries"].as_array().is_some_and(|e| !e.is_empty()), "{}", result["stats"]);
    assert!(result["stats"]["relevance"].get("empty").is_none(), "{}", result["stats"]);
}
