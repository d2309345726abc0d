//! What each route costs in round trips on either index backend: store
//! calls (a recording store) and S3 Vectors calls (the emulator's log of
//! the test's own bucket), over the fixture corpus, warm. The counts are pinned here and
//! listed in BENCHMARKS.md ("Index backends: calls per route"); run with
//! `--nocapture` to print the table.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use skald::app::App;
use skald::config::{Config, IdentityConfig, IdentityMode};
use skald::embed::Embedder;
use skald::embed::hashed::HashedEmbedder;
use skald::index::Backend;
use skald_tests::counting::CountingStore;
use skald_tests::fixture::{
    ACCOUNT, DEFAULT_CORPUS, EMBED_DIMENSION, Handler, TempDir, call, ingest_tree, local_store, on_backend, write_tree,
};

/// Calls of one route, by kind: `store GET manifest`, `s3vectors QueryVectors`, …
type Calls = BTreeMap<String, usize>;

struct Rig {
    app: Arc<App>,
    counting: Arc<CountingStore>,
    _dirs: (TempDir, TempDir),
}

impl Rig {
    async fn new(backend: Backend) -> Self {
        let (store, store_dir) = local_store();
        let counting = CountingStore::new(store);
        let config = Config {
            identity: IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() },
            ..Config::default()
        };
        let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(EMBED_DIMENSION));
        let app = on_backend(config, counting.clone(), embedder, backend);
        let source = TempDir::new("source");
        write_tree(source.path(), DEFAULT_CORPUS);
        ingest_tree(&app, source.path()).await;
        Self { app: Arc::new(app), counting, _dirs: (source, store_dir) }
    }

    fn take(&self) -> Calls {
        let mut calls = Calls::new();
        for c in self.counting.take() {
            let what = if c.key.ends_with("manifest.json") {
                "manifest"
            } else if c.key.contains("/index/") {
                "segment"
            } else {
                "object"
            };
            *calls.entry(format!("store {} {what}", c.op)).or_default() += 1;
        }
        for op in skald_tests::s3vectors::take_shared_calls(self.app.vectors.bucket()) {
            *calls.entry(format!("s3vectors {op}")).or_default() += 1;
        }
        calls
    }

    /// The calls of `route` the second time (warm: the index loaded).
    async fn warm(&self, handler: Handler, method: &str, path: &str, body: Option<&serde_json::Value>) -> Calls {
        for _ in 0..2 {
            self.take();
            let reply = call(&self.app, handler, method, path, &[], body).await;
            assert_eq!(reply.status, 200, "{path} {body:?}: {}", reply.text);
        }
        self.take()
    }
}

fn show(route: &str, calls: &Calls) -> String {
    let list: Vec<String> = calls.iter().map(|(k, n)| format!("{n}× {k}")).collect();
    format!("{route}: {}", list.join(", "))
}

fn s3v(calls: &Calls, op: &str) -> usize {
    calls.get(&format!("s3vectors {op}")).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_costs_what_the_docs_say_on_segments() {
    routes_on(Backend::Segments).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_costs_what_the_docs_say_on_s3_vectors() {
    routes_on(Backend::S3vectors).await;
}

async fn routes_on(backend: Backend) {
    let find = json!({"query": "search service ranking", "limit": 5});
    let context = json!({"query": "search service ranking", "mode": "context", "max_tokens": 800});
    let semantic_context = json!({"query": "search service ranking", "mode": "context", "search_type": "semantic"});
    let bootstrap = json!({"max_tokens": 800});
    {
        let rig = Rig::new(backend).await;
        rig.take();
        let name = backend.as_str();
        let found = rig.warm(Handler::Find, "POST", "/api/v1/search/find", Some(&find)).await;
        let hybrid = rig.warm(Handler::Search, "POST", "/api/v1/search/search", Some(&context)).await;
        let semantic = rig.warm(Handler::Search, "POST", "/api/v1/search/search", Some(&semantic_context)).await;
        let boot = rig.warm(Handler::Bootstrap, "POST", "/api/v1/search/bootstrap", Some(&bootstrap)).await;
        let ls = rig.warm(Handler::Content, "GET", "/api/v1/fs/ls?uri=viking://resources&output=agent", None).await;
        for (route, calls) in [
            ("find", &found),
            ("context hybrid", &hybrid),
            ("context semantic", &semantic),
            ("bootstrap", &boot),
            ("fs/ls", &ls),
        ] {
            eprintln!("{name} {}", show(route, calls));
        }
        // Warm, every route revalidates the index with one manifest HEAD.
        for calls in [&found, &hybrid, &semantic, &boot] {
            assert_eq!(calls.get("store HEAD manifest"), Some(&1), "{name}: {calls:?}");
            assert!(!calls.contains_key("store GET segment"), "{name}: warm, no segment is read: {calls:?}");
        }
        match backend {
            Backend::Segments => {
                for calls in [&found, &hybrid, &semantic, &boot, &ls] {
                    assert!(
                        !calls.keys().any(|k| k.starts_with("s3vectors")),
                        "segments call no S3 Vectors: {calls:?}"
                    );
                }
            }
            Backend::S3vectors => {
                assert_eq!(s3v(&found, "QueryVectors"), 1, "find: one query");
                assert_eq!(found.len(), 2, "find: the HEAD and the query, nothing else: {found:?}");
                // Context mode searches two scopes (the caller's own tree
                // and the shared roots; other peers' memories): one query
                // each by meaning, two for hybrid (by meaning, and among
                // records holding a query term).
                assert_eq!(s3v(&semantic, "QueryVectors"), 2, "{semantic:?}");
                assert_eq!(s3v(&hybrid, "QueryVectors"), 4, "{hybrid:?}");
                assert!(
                    !hybrid.contains_key("s3vectors GetVectors"),
                    "no read per hit: the records come with the answer"
                );
                assert_eq!(s3v(&ls, "GetVectors"), 1, "fs/ls: one lookup for the level's abstracts: {ls:?}");
                // Under 100 matching records, one query each for the
                // working state and the listing.
                assert_eq!(s3v(&boot, "QueryVectors"), 2, "bootstrap: {boot:?}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_indexer_writes_a_change_in_a_few_calls_on_s3_vectors() {
    let rig = Rig::new(Backend::S3vectors).await;
    let path = "resources/search/ranking.md";
    let key = format!("accounts/{ACCOUNT}/tree/{path}");
    rig.app
        .store
        .put(&key, bytes::Bytes::from("# Ranking\n\nNow by BM25 and cosine.\n"), skald::store::PutMode::Overwrite)
        .await
        .expect("put");
    rig.take();
    let change = skald::indexer::Change { key, at: 2_000_000, version: Some("0000000000000000AA".into()) };
    let report = skald::indexer::apply(&rig.app, &[change]).await.expect("apply");
    assert_eq!(report.indexed, 1);
    let calls = rig.take();
    eprintln!("{}", show("indexer, one changed file", &calls));
    // The node's current record (the basis), the versions before the write,
    // one put, and the manifest's swap.
    assert_eq!(s3v(&calls, "GetVectors"), 2, "{calls:?}");
    assert_eq!(s3v(&calls, "PutVectors"), 1, "{calls:?}");
    assert_eq!(calls.get("store PUT if-match manifest"), Some(&1), "{calls:?}");
    assert!(!calls.contains_key("store PUT if-none-match segment"), "no segment is written: {calls:?}");
}
