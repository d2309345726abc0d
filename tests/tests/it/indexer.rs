//! The indexer (`skald::indexer::apply`) against a real store — a local
//! directory and S3 on a moto server — with `find` through the Lambda edge
//! as the judge: after objects change in the store and the changes are
//! applied, search sees exactly what the store holds. The function's edge
//! (`skald_lambda::s3_events`) is driven with S3 event notifications in the
//! shape S3 sends them, through `lambda_runtime`'s `LambdaEvent`. An
//! account whose index is broken fails alone: an SQS batch is answered with
//! exactly the messages that touched it (`batchItemFailures`).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use skald::app::App;
use skald::embed::hashed::HashedEmbedder;
use skald::identity::AccountId;
use skald::index::{IndexError, IndexSnapshot, Record, manifest_key};
use skald::indexer::{Change, IndexerReport, apply};
use skald::ingest::IngestError;
use skald::store::{PutMode, SharedStore};
use skald_tests::fixture::{
    ACCOUNT, DEFAULT_CORPUS, EMBED_DIMENSION, app_with_corpus_in, find, local_store, s3_shared_store, store_json,
    tree_key,
};

const NOTE: &str = "resources/notes/kafka.md";
const NOTE_URI: &str = "viking://resources/notes/kafka.md";
const NOTE_V1: &str = "# Summary\nKafka consumer lag alerts fire at ten thousand messages.\n";
const NOTE_V2: &str = "# Summary\nKafka consumer lag alerts now fire at fifty thousand messages.\n";

fn account() -> AccountId {
    AccountId::new(ACCOUNT).expect("account")
}

fn change(path: &str, at: i64) -> Change {
    Change { key: tree_key(path), at, version: None }
}

async fn put(store: &SharedStore, path: &str, text: &str) {
    put_in(store, &tree_key(path), text).await;
}

async fn put_in(store: &SharedStore, key: &str, text: &str) {
    store.put(key, Bytes::from(text.to_owned()), PutMode::Overwrite).await.expect("put");
}

async fn generation(store: &SharedStore) -> Value {
    store_json(store, &manifest_key(&account())).await.expect("a manifest")["generation"].clone()
}

async fn record(store: &SharedStore, uri: &str, level: skald::index::Level) -> Option<Record> {
    let snapshot = IndexSnapshot::load(store, &account(), None).await.expect("load the index");
    snapshot.get(&skald::uri::VikingUri::parse(uri).expect("uri"), level).cloned()
}

/// The URIs `find` returns for `query`, every hit of every type, best
/// first.
async fn found(app: &Arc<App>, query: &str) -> Vec<String> {
    let (status, json) = find(app, &json!({"query": query, "limit": 100})).await;
    assert_eq!(status, 200, "{json}");
    let mut hits: Vec<&Value> =
        ["memories", "resources", "skills"].iter().flat_map(|k| json["result"][*k].as_array().expect("list")).collect();
    hits.sort_by(|a, b| b["score"].as_f64().unwrap_or(0.0).total_cmp(&a["score"].as_f64().unwrap_or(0.0)));
    hits.iter().map(|hit| hit["uri"].as_str().expect("uri").to_owned()).collect()
}

async fn applied(app: &App, changes: &[Change]) -> IndexerReport {
    apply(app, changes).await.expect("apply the changes")
}

/// A new S3 `sequencer` for each notification record, increasing as S3's
/// are for one key's successive changes (and of varying width, as S3's
/// may be: they compare as padded hex).
fn next_sequencer() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0x0A1B_2C3D_4E5F_6789);
    format!("{:X}", NEXT.fetch_add(0x10, std::sync::atomic::Ordering::Relaxed))
}

/// One life of a node through the indexer, on `store`.
async fn the_index_follows_the_store(store: SharedStore) {
    let (app, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;

    // A file `ingest` already indexed: read again, nothing embedded or written.
    let before = generation(&store).await;
    let report = applied(&app, &[change("user/default/memories/profile.md", 1_000)]).await;
    assert_eq!(report, IndexerReport { unchanged: 1, ..IndexerReport::default() });
    assert_eq!(generation(&store).await, before, "an unchanged node commits nothing");

    // A new file written straight to the store.
    put(&store, NOTE, NOTE_V1).await;
    assert!(!found(&app, "Kafka consumer lag alerts").await.contains(&NOTE_URI.to_owned()));
    let report = applied(&app, &[change(NOTE, 2_000)]).await;
    assert_eq!(report, IndexerReport { indexed: 1, ..IndexerReport::default() });
    let hits = found(&app, "Kafka consumer lag alerts").await;
    assert_eq!(hits.first().map(String::as_str), Some(NOTE_URI), "{hits:?}");
    let first = record(&store, NOTE_URI, 2).await.expect("indexed");
    assert_eq!(first.abstract_text, "Kafka consumer lag alerts fire at ten thousand messages.");
    assert_eq!((first.created_at, first.updated_at), (2_000, 2_000));

    // Changed: re-indexed, created_at kept. The same change twice (S3
    // delivers at least once) and a change named twice in one run count once.
    put(&store, NOTE, NOTE_V2).await;
    let report = applied(&app, &[change(NOTE, 3_000), change(NOTE, 2_500)]).await;
    assert_eq!(report.indexed, 1, "{report:?}");
    let second = record(&store, NOTE_URI, 2).await.expect("indexed");
    assert_eq!(second.abstract_text, "Kafka consumer lag alerts now fire at fifty thousand messages.");
    assert_eq!((second.created_at, second.updated_at), (2_000, 3_000), "the latest change's time");
    assert_eq!(applied(&app, &[change(NOTE, 3_000)]).await.unchanged, 1);

    // Deleted: removed from the index; a late "created" notification for it
    // changes nothing, because the store no longer has it.
    store.delete(&tree_key(NOTE)).await.expect("delete");
    let report = applied(&app, &[change(NOTE, 4_000)]).await;
    assert_eq!(report, IndexerReport { removed: 1, ..IndexerReport::default() });
    assert!(record(&store, NOTE_URI, 2).await.is_none());
    assert!(!found(&app, "Kafka consumer lag alerts").await.contains(&NOTE_URI.to_owned()));
    let before = generation(&store).await;
    assert_eq!(applied(&app, &[change(NOTE, 2_000)]).await.unchanged, 1);
    assert_eq!(generation(&store).await, before);

    // Sidecars index their directory at levels 0 and 1.
    put(&store, "resources/notes/.overview.md", "Runbooks for the streaming platform.\n").await;
    put(&store, "resources/notes/.abstract.md", "Streaming platform runbooks.\n").await;
    let report = applied(&app, &[change("resources/notes/.overview.md", 5_000)]).await;
    assert_eq!(report.indexed, 2, "{report:?}");
    let dir = "viking://resources/notes";
    assert_eq!(record(&store, dir, 0).await.expect("level 0").abstract_text, "Streaming platform runbooks.");
    assert!(record(&store, dir, 1).await.is_some(), "level 1");
    store.delete(&tree_key("resources/notes/.abstract.md")).await.expect("delete");
    store.delete(&tree_key("resources/notes/.overview.md")).await.expect("delete");
    let report = applied(&app, &[change("resources/notes/.abstract.md", 6_000)]).await;
    assert_eq!(report.removed, 2, "{report:?}");
    assert!(record(&store, dir, 0).await.is_none() && record(&store, dir, 1).await.is_none());

    // What is never indexed is ignored: sessions, the index itself, hidden
    // files, other prefixes.
    put(&store, "user/default/sessions/s1/meta.json", "{}").await;
    put(&store, "resources/.draft.md", "# Summary\nA hidden draft.\n").await;
    let before = generation(&store).await;
    let ignored = [
        change("user/default/sessions/s1/meta.json", 7_000),
        change("resources/.draft.md", 7_000),
        Change { key: manifest_key(&account()), at: 7_000, version: None },
        Change { key: "elsewhere/x.md".into(), at: 7_000, version: None },
    ];
    assert_eq!(applied(&app, &ignored).await, IndexerReport { ignored: 4, ..IndexerReport::default() });
    assert_eq!(generation(&store).await, before);
}

#[tokio::test]
async fn the_index_follows_a_local_store() {
    let (store, _dir) = local_store();
    the_index_follows_the_store(store).await;
}

#[tokio::test]
async fn the_index_follows_s3() {
    the_index_follows_the_store(s3_shared_store("indexer-follows").await).await;
}

const NOTE_V3: &str = "# Summary\nKafka consumer lag alerts are paged to the streaming on-call.\n";

/// A change of `path` at `at` with notification version `version`.
fn versioned(path: &str, at: i64, version: &str) -> Change {
    Change { key: tree_key(path), at, version: Some(version.to_owned()) }
}

/// The abstract the index holds for the note, if any.
async fn note_abstract(store: &SharedStore) -> Option<String> {
    record(store, NOTE_URI, 2).await.map(|r| r.abstract_text)
}

/// A second indexer (its own app over the store) held just before its
/// first segment write, having read the store: the caller changes the
/// store meanwhile, then [`Held::finish`]es it, as when two indexer
/// invocations overlap.
struct Held {
    gate: skald_tests::faults::Gate,
    task: tokio::task::JoinHandle<IndexerReport>,
}

impl Held {
    /// Lets the held indexer commit and returns its report.
    async fn finish(self) -> IndexerReport {
        self.gate.open();
        self.task.await.expect("the held indexer")
    }
}

/// Runs `changes` through a [`Held`] indexer over `store`; returns once it
/// is held.
async fn held_indexer(store: &SharedStore, changes: Vec<Change>) -> Held {
    use skald_tests::faults::{Fault, FaultyStore, Gate, Op, Rule};
    let gate = Gate::default();
    let hold = Rule::nth(Op::Put, "/index/segments/", 1, Fault::Wait(gate.clone()));
    let faults = Arc::new(FaultyStore::new(Arc::clone(store), vec![hold]));
    let app = skald_tests::fixture::app_over_store(faults as SharedStore);
    let task = tokio::spawn(async move { applied(&app, &changes).await });
    tokio::time::timeout(std::time::Duration::from_secs(10), gate.reached())
        .await
        .expect("the held indexer reached its commit");
    Held { gate, task }
}

/// Overlapping indexer invocations, each committing what it read, never
/// leave the index behind the store: a stale read committed last is
/// dropped, a removed file is not brought back (even after a compaction),
/// and a file changed and changed back keeps its current content.
async fn overlapping_indexers_never_go_back(store: SharedStore) {
    let (app, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;
    put(&store, NOTE, NOTE_V1).await;
    applied(&app, &[versioned(NOTE, 1_000, "01")]).await;

    // An older read (02) commits after a newer one (03).
    put(&store, NOTE, NOTE_V2).await;
    let stale = held_indexer(&store, vec![versioned(NOTE, 2_000, "02")]).await;
    put(&store, NOTE, NOTE_V3).await;
    assert_eq!(applied(&app, &[versioned(NOTE, 3_000, "03")]).await.indexed, 1);
    stale.finish().await;
    assert_eq!(
        note_abstract(&store).await.as_deref(),
        Some("Kafka consumer lag alerts are paged to the streaming on-call.")
    );

    // A read of a file (04) that is then removed (05), with a compaction
    // between the removal and the stale commit.
    put(&store, NOTE, NOTE_V1).await;
    let stale = held_indexer(&store, vec![versioned(NOTE, 4_000, "04")]).await;
    store.delete(&tree_key(NOTE)).await.expect("delete");
    assert_eq!(applied(&app, &[versioned(NOTE, 5_000, "05")]).await.removed, 1);
    skald::index::compact(&store, &account(), &app.embedder_info(), None, crate::common::now_ms())
        .await
        .expect("compact");
    stale.finish().await;
    assert_eq!(note_abstract(&store).await, None, "the removed file stays removed");

    // Changed (07) and changed back (08) while the read of the change is
    // held: the change back finds the index unchanged and records its
    // version, which the held commit then cannot pass.
    put(&store, NOTE, NOTE_V1).await;
    assert_eq!(applied(&app, &[versioned(NOTE, 6_000, "06")]).await.indexed, 1);
    put(&store, NOTE, NOTE_V2).await;
    let stale = held_indexer(&store, vec![versioned(NOTE, 7_000, "07")]).await;
    put(&store, NOTE, NOTE_V1).await;
    assert_eq!(applied(&app, &[versioned(NOTE, 8_000, "08")]).await.unchanged, 1);
    stale.finish().await;
    assert_eq!(
        note_abstract(&store).await.as_deref(),
        Some("Kafka consumer lag alerts fire at ten thousand messages.")
    );
    let version = record(&store, NOTE_URI, 2).await.and_then(|r| r.source_version);
    assert_eq!(version.as_deref(), Some("08"));

    // A repeat of the newest notification costs no write.
    let before = generation(&store).await;
    assert_eq!(applied(&app, &[versioned(NOTE, 8_000, "08")]).await.unchanged, 1);
    assert_eq!(generation(&store).await, before);

    // A new file read (09) and removed (0A) before that read commits: the
    // removal finds no record of the file and records its version all the
    // same, which the held commit then cannot pass.
    let new = "resources/notes/new.md";
    put(&store, new, NOTE_V2).await;
    let stale = held_indexer(&store, vec![versioned(new, 9_000, "09")]).await;
    store.delete(&tree_key(new)).await.expect("delete");
    assert_eq!(applied(&app, &[versioned(new, 10_000, "0A")]).await.unchanged, 1);
    stale.finish().await;
    let brought_back = record(&store, "viking://resources/notes/new.md", 2).await.map(|r| r.source_hash);
    assert_eq!(brought_back, None, "the removed file is not brought back");
    let before = generation(&store).await;
    assert_eq!(applied(&app, &[versioned(new, 10_000, "0A")]).await.unchanged, 1);
    assert_eq!(generation(&store).await, before, "a repeated removal costs no write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_indexers_never_go_back_on_a_local_store() {
    let (store, _dir) = local_store();
    overlapping_indexers_never_go_back(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_indexers_never_go_back_on_s3() {
    overlapping_indexers_never_go_back(s3_shared_store("indexer-overlap").await).await;
}

/// A file body cut short or replaced in transit (a proxy's error page) is
/// never indexed: the indexer sees that it does not match the object's
/// etag, reads it again and indexes what the store holds.
async fn a_body_cut_in_transit_is_never_indexed(store: SharedStore) {
    use skald_tests::faults::{Fault, FaultyStore, Op, Rule};
    for (i, (fault, text)) in [(Fault::TruncatedBody, NOTE_V1), (Fault::ForeignBody, NOTE_V2)].into_iter().enumerate() {
        let faults = Arc::new(FaultyStore::new(Arc::clone(&store), vec![Rule::nth(Op::Get, NOTE, 1, fault.clone())]));
        let app = skald_tests::fixture::app_over_store(Arc::clone(&faults) as SharedStore);
        put(&store, NOTE, text).await;
        applied(&app, &[versioned(NOTE, 1_000 + i as i64, &format!("0{i}"))]).await;
        assert_eq!(faults.injected().len(), 1, "{fault:?} was injected");
        let indexed = record(&store, NOTE_URI, 2).await.map(|r| r.source_hash);
        assert_eq!(indexed, Some(skald::ingest::source_hash(text.as_bytes())), "{fault:?}");
    }
    // Replaced on both reads (a proxy that keeps answering its error
    // page): the change fails, to be retried, and nothing is indexed.
    let twice = Rule::calls(Op::Get, NOTE, 1, 2, Fault::ForeignBody);
    let faults = Arc::new(FaultyStore::new(Arc::clone(&store), vec![twice]));
    let app = skald_tests::fixture::app_over_store(Arc::clone(&faults) as SharedStore);
    put(&store, NOTE, NOTE_V3).await;
    assert!(apply(&app, &[versioned(NOTE, 1_010, "09")]).await.is_err(), "the change fails");
    let indexed = record(&store, NOTE_URI, 2).await.map(|r| r.source_hash);
    assert_eq!(indexed, Some(skald::ingest::source_hash(NOTE_V2.as_bytes())), "the page was not indexed");
    applied(&app, &[versioned(NOTE, 1_010, "09")]).await;
    let indexed = record(&store, NOTE_URI, 2).await.map(|r| r.source_hash);
    assert_eq!(indexed, Some(skald::ingest::source_hash(NOTE_V3.as_bytes())), "its retry indexes the file");
}

#[tokio::test]
async fn a_body_cut_in_transit_is_never_indexed_from_a_local_store() {
    let (store, _dir) = local_store();
    a_body_cut_in_transit_is_never_indexed(store).await;
}

#[tokio::test]
async fn a_body_cut_in_transit_is_never_indexed_from_s3() {
    a_body_cut_in_transit_is_never_indexed(s3_shared_store("indexer-cut-body").await).await;
}

/// A tree the indexer builds from store notifications has the records (and
/// vectors) `ingest` builds from the same files, but for their times.
#[tokio::test]
async fn the_indexer_builds_the_records_ingest_builds() {
    let (ingested, _a) = local_store();
    let (_, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], ingested.clone()).await;

    let (notified, _b) = local_store();
    let app = skald_tests::fixture::app_over_store(notified.clone());
    let mut changes = Vec::new();
    for (path, text) in DEFAULT_CORPUS {
        put(&notified, path, text).await;
        changes.push(change(path, 1_700_000_000));
    }
    let report = applied(&app, &changes).await;
    assert_eq!(report.removed + report.unchanged, 0, "{report:?}");

    let records = |snapshot: &IndexSnapshot| -> BTreeMap<(String, skald::index::Level), (Record, Vec<f32>)> {
        snapshot
            .records()
            .map(|(r, v)| {
                let mut r = r.clone();
                (r.created_at, r.updated_at) = (0, 0);
                ((r.uri.to_string(), r.level), (r, v.to_vec()))
            })
            .collect()
    };
    let want = records(&IndexSnapshot::load(&ingested, &account(), None).await.expect("load"));
    let got = records(&IndexSnapshot::load(&notified, &account(), None).await.expect("load"));
    assert_eq!(report.indexed, want.len(), "{report:?}");
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (key, (record, vector)) in &want {
        let (other, other_vector) = &got[key];
        assert!(!record.terms.is_empty(), "{key:?} has keyword terms");
        assert_eq!(other, record, "{key:?}");
        assert_eq!(other_vector, vector, "{key:?}");
    }
}

/// An S3 event notification as S3 sends it (trimmed to the fields read),
/// one record per `(event name, bucket, raw key, time)`.
fn notification(records: &[(&str, &str, &str, &str)]) -> aws_lambda_events::s3::S3Event {
    let records: Vec<Value> = records
        .iter()
        .map(|(name, bucket, key, time)| {
            json!({
                "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
                "eventTime": time, "eventName": name,
                "userIdentity": {"principalId": "AWS:EXAMPLE"},
                "requestParameters": {"sourceIPAddress": "127.0.0.1"},
                "responseElements": {"x-amz-request-id": "R", "x-amz-id-2": "I"},
                "s3": {
                    "s3SchemaVersion": "1.0", "configurationId": "indexer",
                    "bucket": {"name": bucket, "ownerIdentity": {"principalId": "O"}, "arn": format!("arn:aws:s3:::{bucket}")},
                    "object": {"key": key, "size": 64, "eTag": "0123456789abcdef0123456789abcdef", "sequencer": next_sequencer()}
                }
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).expect("an S3 event")
}

#[test]
fn s3_keys_are_decoded_and_kept_to_the_store_bucket_and_prefix() {
    let location = skald::store::StoreLocation::S3 { bucket: "skald-store".into(), prefix: "skald".into() };
    let event = notification(&[
        (
            "ObjectCreated:Put",
            "skald-store",
            "skald/accounts/default/tree/resources/notes/Kafka+lag%C3%A9+%2B1.md",
            "2026-11-30T06:00:00.000Z",
        ),
        (
            "ObjectRemoved:Delete",
            "skald-store",
            "skald/accounts/default/tree/resources/a.md",
            "2026-11-30T06:00:01.000Z",
        ),
        (
            "ObjectCreated:Put",
            "another-bucket",
            "skald/accounts/default/tree/resources/b.md",
            "2026-11-30T06:00:02.000Z",
        ),
        ("ObjectCreated:Put", "skald-store", "skaldx/accounts/default/tree/resources/c.md", "2026-11-30T06:00:03.000Z"),
        ("ObjectCreated:Put", "skald-store", "accounts/default/tree/resources/d.md", "2026-11-30T06:00:04.000Z"),
        (
            "ObjectCreated:Put",
            "skald-store",
            "skald/accounts/default/tree/resources/%FF.md",
            "2026-11-30T06:00:05.000Z",
        ),
    ]);
    let changes = skald_lambda::s3_events::s3_changes(&event, &location);
    assert_eq!(
        changes,
        [
            Change {
                key: "accounts/default/tree/resources/notes/Kafka lagé +1.md".into(),
                at: 1_796_018_400,
                version: event.records[0].s3.object.sequencer.clone(),
            },
            Change {
                key: "accounts/default/tree/resources/a.md".into(),
                at: 1_796_018_401,
                version: event.records[1].s3.object.sequencer.clone(),
            },
        ]
    );
    // Without a prefix, every key of the bucket is relative to the root.
    let bare = skald::store::StoreLocation::S3 { bucket: "skald-store".into(), prefix: String::new() };
    let keys: Vec<String> = skald_lambda::s3_events::s3_changes(&event, &bare).into_iter().map(|c| c.key).collect();
    assert!(keys.contains(&"accounts/default/tree/resources/d.md".to_owned()), "{keys:?}");
}

/// The function's handler, as the runtime calls it: a created object is
/// indexed, a removed one leaves the index, and the answer counts them.
#[tokio::test]
async fn the_function_indexes_what_s3_notifies() {
    let (store, _dir) = local_store();
    let (app, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;
    let invoke = |event: aws_lambda_events::s3::S3Event| {
        let app = Arc::clone(&app);
        async move {
            let payload = serde_json::to_value(event).expect("an S3 event as JSON");
            let event = lambda_http::LambdaEvent::new(payload, lambda_http::Context::default());
            skald_lambda::s3_events::handle(&app, event).await.expect("the handler succeeds")
        }
    };
    let key = tree_key(NOTE);
    put(&store, NOTE, NOTE_V1).await;
    let created = notification(&[("ObjectCreated:Put", "any", &key, "2026-11-30T06:00:00Z")]);
    assert_eq!(invoke(created).await, json!({"indexed": 1, "removed": 0, "unchanged": 0, "ignored": 0}));
    assert_eq!(found(&app, "Kafka consumer lag alerts").await.first().map(String::as_str), Some(NOTE_URI));
    assert_eq!(record(&store, NOTE_URI, 2).await.map(|r| r.updated_at), Some(1_796_018_400));

    store.delete(&key).await.expect("delete");
    let removed = notification(&[
        ("ObjectRemoved:Delete", "any", &key, "2026-11-30T06:01:00Z"),
        ("ObjectCreated:Put", "any", "accounts/default/index/manifest.json", "2026-11-30T06:01:00Z"),
    ]);
    assert_eq!(invoke(removed).await, json!({"indexed": 0, "removed": 1, "unchanged": 0, "ignored": 1}));
    assert!(!found(&app, "Kafka consumer lag alerts").await.contains(&NOTE_URI.to_owned()));
}

/// A warm function that trusts its loaded index for a minute
/// (`index.revalidate_after_ms`) still compares against the index as it is:
/// a file it indexed itself a moment ago is removed when it goes.
#[tokio::test]
async fn the_indexer_revalidates_whatever_the_search_cache_trusts() {
    let (store, _dir) = local_store();
    let (_, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;
    let mut config = skald_tests::fixture::app_over_store(store.clone()).config.clone();
    config.index.revalidate_after_ms = 60_000;
    let embedder: Arc<dyn skald::embed::Embedder> =
        Arc::new(skald::embed::hashed::HashedEmbedder::new(skald_tests::fixture::EMBED_DIMENSION));
    let app = App::with_parts(config, store.clone(), embedder);

    put(&store, NOTE, NOTE_V1).await;
    assert_eq!(applied(&app, &[change(NOTE, 1_000)]).await.indexed, 1);
    store.delete(&tree_key(NOTE)).await.expect("delete");
    assert_eq!(applied(&app, &[change(NOTE, 2_000)]).await.removed, 1);
    assert!(record(&store, NOTE_URI, 2).await.is_none());
}

/// One changed file costs five store calls: the manifest HEAD that
/// revalidates the index and, beside it, the file's GET; then the commit —
/// the manifest GET, the segment PUT and the manifest's compare-and-swap
/// (the commit reads the manifest once). The next notification also loads
/// the segment that commit wrote; after that, a repeat costs the HEAD and
/// the file's GET only. (Calls are compared sorted, per notification: the
/// HEAD and the GET go out together, in either order.)
#[tokio::test]
async fn a_changed_file_costs_five_store_calls_and_a_repeat_two() {
    let (store, _dir) = local_store();
    let (_, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;
    let counting = skald_tests::counting::CountingStore::new(store.clone());
    let app = skald_tests::fixture::app_over_store(counting.clone());
    let calls = || {
        let mut calls = counting
            .take()
            .into_iter()
            .map(|c| {
                let what = if c.key.ends_with("manifest.json") {
                    "manifest"
                } else if c.key.contains("/index/") {
                    "segment"
                } else {
                    "file"
                };
                format!("{} {what}", c.op)
            })
            .collect::<Vec<String>>();
        calls.sort();
        calls
    };
    let sorted = |calls: &[&str]| {
        let mut calls: Vec<String> = calls.iter().map(|c| (*c).to_owned()).collect();
        calls.sort();
        calls
    };
    put(&store, NOTE, NOTE_V1).await;
    assert_eq!(applied(&app, &[change(NOTE, 1_000)]).await.indexed, 1);
    assert_eq!(applied(&app, &[change(NOTE, 1_000)]).await.unchanged, 1);
    calls();

    put(&store, NOTE, NOTE_V2).await;
    assert_eq!(applied(&app, &[change(NOTE, 2_000)]).await.indexed, 1);
    assert_eq!(
        calls(),
        sorted(&["HEAD manifest", "GET file", "GET manifest", "PUT if-none-match segment", "PUT if-match manifest"])
    );
    assert_eq!(applied(&app, &[change(NOTE, 2_000)]).await.unchanged, 1);
    assert_eq!(calls(), sorted(&["HEAD manifest", "GET manifest", "GET segment", "GET file"]));
    assert_eq!(applied(&app, &[change(NOTE, 2_000)]).await.unchanged, 1);
    assert_eq!(calls(), sorted(&["HEAD manifest", "GET file"]));
}

/// Deployed, S3 notifies an SQS queue and the function takes a batch: every
/// message's notification counts, in one commit; the test message S3 sends
/// when the notification is set up is skipped; a payload that is neither
/// fails the invocation (so its messages come back), with a message.
#[tokio::test]
async fn the_function_takes_sqs_batches_of_s3_notifications() {
    let (store, _dir) = local_store();
    let (app, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;
    let other = "resources/notes/zookeeper.md";
    put(&store, NOTE, NOTE_V1).await;
    put(&store, other, "# Summary\nZooKeeper quorum needs three voters.\n").await;
    let body = |key: String| created("any", &[&key]);
    let batch = json!({"Records": [
        sqs_message("1", &body(tree_key(NOTE))),
        sqs_message("2", &test_event()),
        sqs_message("3", &body(tree_key(other))),
    ]});
    let before = generation(&store).await;
    let event = lambda_http::LambdaEvent::new(batch, lambda_http::Context::default());
    let answer = skald_lambda::s3_events::handle(&app, event).await.expect("the handler succeeds");
    assert_eq!(
        answer,
        json!({"indexed": 2, "removed": 0, "unchanged": 0, "ignored": 0, "batchItemFailures": []}),
        "a batch whose accounts all succeed names no failed message"
    );
    assert_eq!(generation(&store).await.as_u64(), before.as_u64().map(|g| g + 1), "one commit for the batch");
    assert!(record(&store, "viking://resources/notes/zookeeper.md", 2).await.is_some());

    let event = lambda_http::LambdaEvent::new(json!({"hello": "world"}), lambda_http::Context::default());
    let err = skald_lambda::s3_events::handle(&app, event).await.expect_err("not a notification");
    assert!(err.to_string().contains("neither an SQS batch nor an S3 notification"), "{err}");
}

/// An SQS message of the indexer's queue, as Lambda hands it over, carrying
/// `body`.
pub(crate) fn sqs_message(id: &str, body: &str) -> Value {
    json!({
        "messageId": id, "receiptHandle": "R", "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1796018400000"},
        "messageAttributes": {}, "md5OfBody": "0", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:indexer", "awsRegion": "us-east-1"
    })
}

/// The body of an S3 notification (as SQS carries it) of objects created
/// under `keys` (raw, as S3 writes them) in `bucket`.
pub(crate) fn created(bucket: &str, keys: &[&str]) -> String {
    let records: Vec<(&str, &str, &str, &str)> =
        keys.iter().map(|key| ("ObjectCreated:Put", bucket, *key, "2026-11-30T06:00:00Z")).collect();
    serde_json::to_string(&notification(&records)).expect("json")
}

/// The test message S3 sends when the notification is set up.
pub(crate) fn test_event() -> String {
    json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-11-30T06:00:00Z",
        "Bucket": "any", "RequestId": "R", "HostId": "H"})
    .to_string()
}

/// The handler's answer to an SQS batch of `messages`.
async fn invoke_batch(app: &App, messages: Vec<Value>) -> Value {
    let event = lambda_http::LambdaEvent::new(json!({ "Records": messages }), lambda_http::Context::default());
    skald_lambda::s3_events::handle(app, event).await.expect("the handler answers a batch")
}

/// The account whose index the failure tests break.
const BROKEN: &str = "broken";

/// What a broken manifest holds: bytes that are not JSON.
const NOT_JSON: &[u8] = b"\x00{ manifest: not JSON";

fn broken() -> AccountId {
    AccountId::new(BROKEN).expect("account")
}

/// The store key of `viking://{path}` for account [`BROKEN`].
fn broken_key(path: &str) -> String {
    format!("accounts/{BROKEN}/tree/{path}")
}

async fn break_manifest(store: &SharedStore) {
    store.put(&manifest_key(&broken()), Bytes::from_static(NOT_JSON), PutMode::Overwrite).await.expect("put");
}

/// One SQS batch over two accounts, one of whose index is broken (its
/// manifest is not JSON), on `store`; `s3` is the store's bucket and key
/// prefix when it is S3 (the function is then configured with
/// `s3://bucket/prefix` and the notifications carry the full keys), `None`
/// for a local store. The answer names exactly the messages that touched
/// the broken account, the other account's changes are searchable, and a
/// redelivery of the named messages once the index is repaired succeeds.
async fn one_broken_account_fails_only_its_messages(store: SharedStore, s3: Option<(String, String)>) {
    let (fixture, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;
    let mut config = fixture.config.clone();
    let (bucket, key_prefix) = match s3 {
        Some((bucket, prefix)) => {
            config.store = format!("s3://{bucket}/{prefix}");
            (bucket, format!("{prefix}/"))
        }
        None => ("any".to_owned(), String::new()),
    };
    let embedder: Arc<dyn skald::embed::Embedder> = Arc::new(HashedEmbedder::new(EMBED_DIMENSION));
    let app = Arc::new(App::with_parts(config, store.clone(), embedder));
    let raw = |key: &str| format!("{key_prefix}{key}");
    let body = |keys: &[String]| created(&bucket, &keys.iter().map(String::as_str).collect::<Vec<_>>());

    // Account `broken` has an index (built by the indexer), then its
    // manifest is overwritten with bytes that are not JSON.
    let (broken_a, broken_b) = ("resources/ops/pager.md", "resources/ops/escalation.md");
    put_in(&store, &broken_key(broken_a), "# Summary\nPager duty rotates every Monday at nine.\n").await;
    put_in(&store, &broken_key(broken_b), "# Summary\nEscalate to the incident commander after an hour.\n").await;
    let report = applied(&app, &[Change { key: broken_key(broken_a), at: 1_000, version: None }]).await;
    assert_eq!(report.indexed, 1, "{report:?}");
    break_manifest(&store).await;

    let zookeeper = "resources/notes/zookeeper.md";
    put(&store, NOTE, NOTE_V1).await;
    put(&store, zookeeper, "# Summary\nZooKeeper quorum needs three voters.\n").await;
    let before = generation(&store).await;
    let messages = vec![
        sqs_message("m1", &body(&[raw(&tree_key(NOTE))])),
        sqs_message("m2", &body(&[raw(&broken_key(broken_a))])),
        sqs_message("m3", &test_event()),
        sqs_message("m4", &body(&[raw(&tree_key(zookeeper)), raw(&broken_key(broken_b))])),
        sqs_message("m5", &body(&[raw(&manifest_key(&account()))])),
    ];
    let answer = invoke_batch(&app, messages.clone()).await;
    assert_eq!(
        answer,
        json!({
            "indexed": 2, "removed": 0, "unchanged": 0, "ignored": 1,
            "batchItemFailures": [{"itemIdentifier": "m2"}, {"itemIdentifier": "m4"}],
        }),
        "exactly the messages that touched the broken account fail; the error's detail is not in the answer"
    );

    // The healthy account's changes are committed (once) and searchable,
    // those of a message that failed among them.
    assert_eq!(generation(&store).await.as_u64(), before.as_u64().map(|g| g + 1), "one commit");
    assert_eq!(found(&app, "Kafka consumer lag alerts").await.first().map(String::as_str), Some(NOTE_URI));
    let hits = found(&app, "ZooKeeper quorum needs three voters").await;
    assert_eq!(hits.first().map(String::as_str), Some("viking://resources/notes/zookeeper.md"), "{hits:?}");
    // The broken index is left as it was: nothing was written over it.
    let manifest = store.get(&manifest_key(&broken())).await.expect("the broken manifest");
    assert_eq!(&manifest.body[..], NOT_JSON);

    // Repaired (its manifest removed, so the indexer starts it again), the
    // failed messages come back and succeed; the healthy account's change
    // in `m4` is already indexed.
    store.delete(&manifest_key(&broken())).await.expect("delete");
    let failed: Vec<Value> = messages
        .iter()
        .filter(|m| ["m2", "m4"].contains(&m["messageId"].as_str().unwrap_or_default()))
        .cloned()
        .collect();
    let answer = invoke_batch(&app, failed).await;
    assert_eq!(answer, json!({"indexed": 2, "removed": 0, "unchanged": 1, "ignored": 0, "batchItemFailures": []}));
    let snapshot = IndexSnapshot::load(&store, &broken(), None).await.expect("the repaired index");
    for path in [broken_a, broken_b] {
        let uri = skald::uri::VikingUri::parse(&format!("viking://{path}")).expect("uri");
        assert!(snapshot.get(&uri, 2).is_some(), "{path} indexed");
    }

    // A notification invoked directly (no SQS) that touches a broken
    // account fails the invocation, naming the account; the healthy
    // account's change in it is committed all the same.
    break_manifest(&store).await;
    put(&store, NOTE, NOTE_V2).await;
    let direct = notification(&[
        ("ObjectCreated:Put", &bucket, &raw(&tree_key(NOTE)), "2026-11-30T07:00:00Z"),
        ("ObjectCreated:Put", &bucket, &raw(&broken_key(broken_a)), "2026-11-30T07:00:00Z"),
    ]);
    let payload = serde_json::to_value(direct).expect("an S3 event as JSON");
    let event = lambda_http::LambdaEvent::new(payload, lambda_http::Context::default());
    let err = skald_lambda::s3_events::handle(&app, event).await.expect_err("the broken account fails it");
    let err = err.to_string();
    assert!(err.contains("account broken") && err.contains("corrupt"), "{err}");
    assert!(!err.contains("account default"), "{err}");
    let note = record(&store, NOTE_URI, 2).await.expect("indexed");
    assert_eq!(note.abstract_text, "Kafka consumer lag alerts now fire at fifty thousand messages.");
}

#[tokio::test]
async fn one_broken_account_fails_only_its_messages_in_a_local_store() {
    let (store, _dir) = local_store();
    one_broken_account_fails_only_its_messages(store, None).await;
}

#[tokio::test]
async fn one_broken_account_fails_only_its_messages_on_s3() {
    let store = skald_tests::moto::s3_store("indexer-broken-account").await;
    let location = (store.bucket().to_owned(), store.prefix().to_owned());
    one_broken_account_fails_only_its_messages(Arc::new(store), Some(location)).await;
}

/// `apply` goes past an account whose index another embedder built: that
/// account is named with the embedder mismatch, the other account's
/// changes are committed and counted, and the totals leave the failed
/// account out.
#[tokio::test]
async fn apply_names_the_failed_account_and_commits_the_others() {
    let (store, _dir) = local_store();
    let (app, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;
    let other_embedder: Arc<dyn skald::embed::Embedder> = Arc::new(HashedEmbedder::new(EMBED_DIMENSION / 2));
    let other_app = App::with_parts(app.config.clone(), store.clone(), other_embedder);
    let mismatched = Change { key: broken_key("resources/ops/pager.md"), at: 1_000, version: None };
    put_in(&store, &mismatched.key, "# Summary\nPager duty rotates every Monday at nine.\n").await;
    assert_eq!(applied(&other_app, std::slice::from_ref(&mismatched)).await.indexed, 1);

    put(&store, NOTE, NOTE_V1).await;
    let ignored = Change { key: manifest_key(&account()), at: 2_000, version: None };
    let changes = [change(NOTE, 2_000), mismatched.clone(), ignored.clone()];
    let err = apply(&app, &changes).await.expect_err("the other embedder's account fails");
    assert_eq!(err.report, IndexerReport { indexed: 1, ignored: 1, ..IndexerReport::default() });
    assert_eq!(err.failed.len(), 1, "{err:?}");
    assert_eq!(err.failed[0].account, broken());
    assert!(
        matches!(&err.failed[0].error, IngestError::Index(IndexError::EmbedderMismatch { account, .. }) if account == BROKEN),
        "{:?}",
        err.failed[0].error
    );
    assert!(err.failed_change(&mismatched));
    assert!(!err.failed_change(&changes[0]) && !err.failed_change(&ignored));
    assert_eq!(record(&store, NOTE_URI, 2).await.map(|r| r.updated_at), Some(2_000));
}

proptest::proptest! {
    /// Any key a notification can carry gets an answer, never a panic; a
    /// key that names a file of a tree names that file's URI, whatever its
    /// account and path, unless it is hidden or a session's.
    #[test]
    fn every_key_maps_to_a_node_or_a_reason(
        noise in "\\PC{0,80}",
        account in "[a-z0-9][a-z0-9_-]{0,20}",
        root in proptest::sample::select(vec!["resources", "agent/skills", "user/u1/memories/events", "user/u1/sessions/s1"]),
        dirs in proptest::collection::vec("[.]?[a-zA-Z0-9 _éü中-]{1,12}", 0..4),
        name in "[.]?[a-zA-Z0-9 _中-]{1,12}",
    ) {
        let _ = skald::indexer::node_of(&noise);
        // Sidecars name their directory (tested above), not a file.
        proptest::prop_assume!(name != ".abstract" && name != ".overview");
        let path = [root.to_owned()].into_iter().chain(dirs.iter().cloned()).chain([format!("{name}.md")]).collect::<Vec<_>>().join("/");
        let key = format!("accounts/{account}/tree/{path}");
        let hidden = dirs.iter().any(|d| d.starts_with('.')) || name.starts_with('.');
        let valid = AccountId::new(&account).is_ok() && skald::uri::VikingUri::from_path(&path).is_ok();
        let indexable = valid && !hidden && !root.contains("sessions");
        match skald::indexer::node_of(&key) {
            Ok((got_account, skald::indexer::Node::File(uri))) => {
                proptest::prop_assert!(indexable, "{key} should be ignored");
                proptest::prop_assert_eq!(got_account.to_string(), account);
                proptest::prop_assert_eq!(uri.to_string(), format!("viking://{path}"));
            }
            Ok(other) => proptest::prop_assert!(false, "{key}: {other:?}"),
            Err(why) => proptest::prop_assert!(!indexable, "{key} should be indexed: {why:?}"),
        }
    }
}

/// Locally nothing sends notifications: `skald watch` polls the store's
/// directory, and a file written into it by hand is found after one poll;
/// removed, it is gone after the next.
#[tokio::test]
async fn a_file_written_into_a_local_store_is_found_after_a_poll() {
    let (store, dir) = local_store();
    let app = skald_tests::fixture::app_over_store(store);
    let root = dir.path().to_path_buf();
    let before = skald::watch::scan(&root);
    let file = root.join("accounts/default/tree/resources/notes/kafka.md");
    std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
    std::fs::write(&file, "# Summary\nKafka consumer lag alerts fire at ten thousand messages.\n").expect("write");
    let after = skald::watch::scan(&root);
    let keys = skald::watch::changed(&before, &after);
    assert_eq!(keys, ["accounts/default/tree/resources/notes/kafka.md"]);
    let done = skald::watch::notify(&app, &keys, 1_800_000_000).await;
    assert_eq!((done.index.indexed, done.errors.len()), (1, 0), "{done:?}");
    let query = json!({"query": "kafka consumer lag", "limit": 3});
    let (status, found) = find(&app, &query).await;
    assert!(status == 200 && found.to_string().contains("viking://resources/notes/kafka.md"), "{found}");

    std::fs::remove_file(&file).expect("rm");
    let gone = skald::watch::scan(&root);
    let keys = skald::watch::changed(&after, &gone);
    let done = skald::watch::notify(&app, &keys, 1_800_000_001).await;
    assert_eq!(done.index.removed, 1, "{done:?}");
    let (status, found) = find(&app, &query).await;
    assert!(status == 200 && !found.to_string().contains("notes/kafka.md"), "{found}");
}
