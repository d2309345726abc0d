//! Ingest (`skald::ingest::ingest_dir`) of a small `viking://` tree written
//! into a temporary directory: which records and objects it produces, what
//! it never touches (sessions, hidden and non-UTF-8 files), incremental
//! re-runs, pruning, and the embedder guard.
//!
//! Each check runs against a [`LocalStore`] in a fresh temporary directory
//! and against an [`S3Store`] on a fresh bucket of a local moto server,
//! with the deterministic [`HashedEmbedder`].
//!
//! [`LocalStore`]: skald::store::local::LocalStore
//! [`S3Store`]: skald::store::s3::S3Store

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use skald::embed::Embedder as _;
use skald::embed::hashed::HashedEmbedder;
use skald::identity::AccountId;
use skald::index::record::{LEVEL_ABSTRACT, LEVEL_FILE, LEVEL_OVERVIEW, LEVEL_PASSAGE};
use skald::index::{
    Category, ContextType, EmbedderInfo, IndexError, IndexSnapshot, Level, Manifest, Record, Segment, commit,
    manifest_key,
};
use skald::ingest::{IngestError, IngestEvent, IngestOptions, IngestReport, ingest_dir};
use skald::store::SharedStore;
use skald::tokens::estimate_tokens;
use skald::uri::{VikingUri, tree_key, tree_prefix};
use skald_tests::fixture::TempDir;

/// Runs each check against both backends: `local::<check>` and
/// `s3::<check>`. Every check takes the store and a fresh source directory.
macro_rules! ingest_suite {
    ($($check:ident),* $(,)?) => {
        mod local {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let dir = super::TempDir::new(concat!("store-", stringify!($check)));
                    let source = super::TempDir::new(concat!("source-", stringify!($check)));
                    let store: skald::store::SharedStore = std::sync::Arc::new(
                        skald::store::local::LocalStore::open(dir.path()).expect("open the local store"),
                    );
                    Box::pin(super::$check(&store, source.path())).await;
                }
            )*
        }

        mod s3 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let source = super::TempDir::new(concat!("source-", stringify!($check)));
                    let store: skald::store::SharedStore =
                        std::sync::Arc::new(skald_tests::moto::s3_store(stringify!($check)).await);
                    Box::pin(super::$check(&store, source.path())).await;
                }
            )*
        }
    };
}

ingest_suite!(
    ingest_builds_records_and_uploads_objects,
    reingest_is_incremental,
    prune_removes_what_the_source_lost,
    another_embedder_is_refused,
);

// ---------------------------------------------------------------- helpers

fn account() -> AccountId {
    AccountId::new("acme").expect("valid account id")
}

fn uri(text: &str) -> VikingUri {
    VikingUri::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn write(root: &Path, rel: &str, body: impl AsRef<[u8]>) {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
    }
    std::fs::write(&path, body).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A file's modification time in Unix seconds.
fn mtime(root: &Path, rel: &str) -> i64 {
    let path = root.join(rel);
    let modified = std::fs::metadata(&path).and_then(|m| m.modified()).expect("mtime");
    let secs = modified.duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs();
    i64::try_from(secs).expect("fits")
}

const EVENT: &str = "user/u/memories/events/2026/11/20/launch.md";
const EVENT_TEXT: &str = "# Summary\nShipped the S3 ledger.\nIt uses CAS.\n\n# Log\nlots of chat\n";
const ENTITY: &str = "user/u/memories/entities/sw/skald.md";
const ENTITY_TEXT: &str = "# Skald\n\nSkald assembles context for agents.\nIt runs on Lambda.\n\nMore detail.\n";
const PREFERENCE: &str = "user/u/memories/preferences/editor.md";
const PREFERENCE_TEXT: &str = "Prefers Helix over Vim.\n";
const PROFILE: &str = "user/u/memories/profile.md";
const PROFILE_TEXT: &str = "# Profile\n\nLin, backend engineer.\n";
const RESOURCE: &str = "resources/aws/s3.md";
const RESOURCE_TEXT: &str = "---\ntags: [team=search, env=prod, bad=]\ntitle: S3\n---\n# S3 notes\n\nConditional writes make the manifest safe.\n\nDetails follow.\n";
const AWS_ABSTRACT: &str = "resources/aws/.abstract.md";
const AWS_ABSTRACT_TEXT: &str = "---\nkind: dir\n---\n  AWS reference notes: S3 and Lambda.\n\nSecond paragraph.\n";
const AWS_OVERVIEW: &str = "resources/aws/.overview.md";
const AWS_OVERVIEW_TEXT: &str = "# AWS\n\nThe services Skald runs on.\n\n## S3\nConditional writes.\n";
const GCP_OVERVIEW: &str = "resources/gcp/.overview.md";
const GCP_OVERVIEW_TEXT: &str = "# GCP\n\nGoogle Cloud, unused so far.\n\nMore.\n";
const CHINESE: &str = "resources/zh.md";
const SKILL: &str = "agent/skills/search/SKILL.md";
const SKILL_TEXT: &str = "---\nname: search\n---\n# Search skill\n\nFinds context in the tree.\n";
const SESSION: &str = "user/u/sessions/s1/messages.jsonl";
const SESSION_ABSTRACT: &str = "user/u/sessions/s1/.abstract.md";
const HIDDEN: &str = "resources/.hidden.md";
const HIDDEN_DIR_FILE: &str = "resources/.obsidian/workspace.md";
const BINARY: &str = "resources/blob.bin";

/// 600 characters, 1800 bytes, one paragraph.
fn chinese_text() -> String {
    "记忆".repeat(300)
}

/// 2026-11-20T00:00:00Z.
const EVENT_DAY: i64 = 1_795_132_800;

/// Writes the test tree under `root`.
fn write_tree(root: &Path) {
    write(root, EVENT, EVENT_TEXT);
    write(root, ENTITY, ENTITY_TEXT);
    write(root, PREFERENCE, PREFERENCE_TEXT);
    write(root, PROFILE, PROFILE_TEXT);
    write(root, RESOURCE, RESOURCE_TEXT);
    write(root, AWS_ABSTRACT, AWS_ABSTRACT_TEXT);
    write(root, AWS_OVERVIEW, AWS_OVERVIEW_TEXT);
    write(root, GCP_OVERVIEW, GCP_OVERVIEW_TEXT);
    write(root, CHINESE, chinese_text());
    write(root, SKILL, SKILL_TEXT);
    write(root, SESSION, "{\"role\":\"user\",\"content\":\"hi\"}\n");
    write(root, SESSION_ABSTRACT, "A session's abstract.\n");
    write(root, HIDDEN, "hidden notes\n");
    write(root, HIDDEN_DIR_FILE, "editor state\n");
    write(root, BINARY, [0xff, 0xfe, 0xfd, 0x00, 0x80, 0x81]);
}

/// `(uri, level)` of every record the tree gives.
fn expected_records() -> BTreeSet<(String, Level)> {
    [
        (EVENT, LEVEL_FILE),
        (ENTITY, LEVEL_FILE),
        (PREFERENCE, LEVEL_FILE),
        (PROFILE, LEVEL_FILE),
        (RESOURCE, LEVEL_FILE),
        (CHINESE, LEVEL_FILE),
        (SKILL, LEVEL_FILE),
        ("resources/aws", LEVEL_ABSTRACT),
        ("resources/aws", LEVEL_OVERVIEW),
        ("resources/gcp", LEVEL_OVERVIEW),
        // 600 CJK characters (about 600 tokens) are long enough for
        // passages: four of at most 192 tokens.
        (CHINESE, LEVEL_PASSAGE),
        (CHINESE, LEVEL_PASSAGE + 1),
        (CHINESE, LEVEL_PASSAGE + 2),
        (CHINESE, LEVEL_PASSAGE + 3),
    ]
    .into_iter()
    .map(|(path, level)| (format!("viking://{path}"), level))
    .collect()
}

/// The source paths uploaded to the store.
const UPLOADED: [&str; 10] =
    [EVENT, ENTITY, PREFERENCE, PROFILE, RESOURCE, AWS_ABSTRACT, AWS_OVERVIEW, GCP_OVERVIEW, CHINESE, SKILL];

/// Nodes the walk plans: 8 files (with the binary) and 2 directories with
/// sidecars (the session's sidecar is skipped by the walk).
const PLANNED: usize = 10;
/// Nodes indexed by a first run: 7 files and 2 directories.
const INDEXABLE: usize = 9;

fn options(prune: bool) -> IngestOptions {
    IngestOptions { prune, batch: 4, ..IngestOptions::default() }
}

async fn ingest(
    source: &Path,
    store: &SharedStore,
    embedder: &HashedEmbedder,
    options: &IngestOptions,
) -> Result<(IngestReport, Vec<IngestEvent>), IngestError> {
    let mut events = Vec::new();
    let mut on_event = |e: IngestEvent| events.push(e);
    let report =
        ingest_dir(source, &skald::index::Target::segments(store), &account(), embedder, options, &mut on_event)
            .await?;
    Ok((report, events))
}

async fn ingest_ok(
    source: &Path,
    store: &SharedStore,
    embedder: &HashedEmbedder,
    options: &IngestOptions,
) -> (IngestReport, Vec<IngestEvent>) {
    ingest(source, store, embedder, options).await.unwrap_or_else(|e| panic!("ingest: {e}"))
}

async fn load(store: &SharedStore) -> IndexSnapshot {
    IndexSnapshot::load(store, &account(), None).await.unwrap_or_else(|e| panic!("load: {e}"))
}

async fn stored_manifest(store: &SharedStore) -> Manifest {
    let object = store.get(&manifest_key(&account())).await.expect("get the manifest");
    serde_json::from_slice(&object.body).expect("the manifest decodes")
}

/// Every record by `(uri, level)`.
fn records(snapshot: &IndexSnapshot) -> BTreeMap<(String, Level), Record> {
    snapshot.records().map(|(r, _)| ((r.uri.to_string(), r.level), r.clone())).collect()
}

/// The source paths of every object in the account's tree.
async fn tree_objects(store: &SharedStore) -> BTreeSet<String> {
    let prefix = tree_prefix(&account());
    store
        .list(&prefix)
        .await
        .expect("list the tree")
        .into_iter()
        .map(|m| m.key.strip_prefix(&prefix).expect("under the prefix").to_owned())
        .collect()
}

async fn object_text(store: &SharedStore, rel: &str) -> String {
    let key = tree_key(&account(), &uri(&format!("viking://{rel}")));
    let object = store.get(&key).await.unwrap_or_else(|e| panic!("get {key}: {e}"));
    String::from_utf8(object.body.to_vec()).unwrap_or_else(|e| panic!("{key} is not UTF-8: {e}"))
}

fn get<'a>(map: &'a BTreeMap<(String, Level), Record>, rel: &str, level: Level) -> &'a Record {
    map.get(&(format!("viking://{rel}"), level)).unwrap_or_else(|| panic!("no record for {rel} at level {level}"))
}

fn indexed(events: &[IngestEvent]) -> BTreeSet<String> {
    events
        .iter()
        .filter_map(|e| match e {
            IngestEvent::Indexed(u) => Some(u.clone()),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------- checks

async fn ingest_builds_records_and_uploads_objects(store: &SharedStore, source: &Path) {
    write_tree(source);
    let embedder = HashedEmbedder::new(64);
    let (report, events) = ingest_ok(source, store, &embedder, &options(false)).await;

    assert!(events.contains(&IngestEvent::Planned(PLANNED)), "{events:?}");
    assert_eq!(report.indexed, INDEXABLE, "{report:?} {events:?}");
    assert_eq!(report.skipped, 4, "the hidden file, the session file and sidecar, the binary: {report:?} {events:?}");
    assert_eq!(report.removed, 0);
    let skipped: BTreeSet<String> = events
        .iter()
        .filter_map(|e| match e {
            IngestEvent::Skipped(what, _) => Some(what.clone()),
            _ => None,
        })
        .collect();
    let want_skipped: BTreeSet<String> =
        [HIDDEN, SESSION, SESSION_ABSTRACT, BINARY].iter().map(|p| format!("viking://{p}")).collect();
    assert_eq!(skipped, want_skipped);
    let want_indexed: BTreeSet<String> =
        [EVENT, ENTITY, PREFERENCE, PROFILE, RESOURCE, CHINESE, SKILL, "resources/aws", "resources/gcp"]
            .iter()
            .map(|p| format!("viking://{p}"))
            .collect();
    assert_eq!(indexed(&events), want_indexed);

    // The index holds exactly the indexable nodes.
    let snapshot = load(store).await;
    let map = records(&snapshot);
    assert_eq!(map.keys().cloned().collect::<BTreeSet<_>>(), expected_records());
    assert_eq!(snapshot.len(), expected_records().len());
    assert_eq!(snapshot.embedder(), Some(&EmbedderInfo { id: embedder.id().to_owned(), dimension: 64 }));
    assert!(stored_manifest(store).await.generation >= 2, "batches of 4 records commit more than once");

    // Types, categories, owners.
    let kinds = [
        (EVENT, ContextType::Memory, Category::Events, Some("u")),
        (ENTITY, ContextType::Memory, Category::Entities, Some("u")),
        (PREFERENCE, ContextType::Memory, Category::Preferences, Some("u")),
        (PROFILE, ContextType::Memory, Category::Memories, Some("u")),
        (RESOURCE, ContextType::Resource, Category::Resources, None),
        (CHINESE, ContextType::Resource, Category::Resources, None),
        (SKILL, ContextType::Skill, Category::Skills, None),
    ];
    for (rel, context_type, category, owner) in kinds {
        let r = get(&map, rel, LEVEL_FILE);
        assert_eq!((r.context_type, r.category), (context_type, category), "{rel}");
        assert_eq!(r.owner_user_id.as_deref(), owner, "{rel}");
    }

    // Abstracts: the summary section, else the first paragraph (after any
    // frontmatter and headings).
    let abstracts = [
        (EVENT, "Shipped the S3 ledger.\nIt uses CAS."),
        (ENTITY, "Skald assembles context for agents.\nIt runs on Lambda."),
        (PREFERENCE, "Prefers Helix over Vim."),
        (PROFILE, "Lin, backend engineer."),
        (RESOURCE, "Conditional writes make the manifest safe."),
        (SKILL, "Finds context in the tree."),
    ];
    for (rel, want) in abstracts {
        let r = get(&map, rel, LEVEL_FILE);
        assert_eq!(r.abstract_text, want, "{rel}");
        assert_eq!(r.abstract_tokens as usize, estimate_tokens(want), "{rel}");
    }
    // A long Chinese file is cut at 400 bytes on a char boundary: 133
    // three-byte characters.
    let zh = get(&map, CHINESE, LEVEL_FILE);
    assert_eq!(zh.abstract_text.len(), 399);
    assert_eq!(zh.abstract_text, chinese_text().chars().take(133).collect::<String>());

    // Directories: both levels carry the abstract sidecar's text; without
    // one, the overview's first paragraph.
    let aws0 = get(&map, "resources/aws", LEVEL_ABSTRACT);
    let aws1 = get(&map, "resources/aws", LEVEL_OVERVIEW);
    let gcp1 = get(&map, "resources/gcp", LEVEL_OVERVIEW);
    let sidecar = "AWS reference notes: S3 and Lambda.\n\nSecond paragraph.";
    assert_eq!(aws0.abstract_text, sidecar);
    assert_eq!(aws1.abstract_text, sidecar);
    assert_eq!(gcp1.abstract_text, "Google Cloud, unused so far.");
    assert!(!map.contains_key(&("viking://resources/gcp".to_owned(), LEVEL_ABSTRACT)));
    for r in [aws0, aws1, gcp1] {
        assert_eq!((r.context_type, r.category), (ContextType::Resource, Category::Resources));
        assert_eq!(
            r.display_uri(),
            format!("{}/{}", r.uri, if r.level == 0 { ".abstract.md" } else { ".overview.md" })
        );
    }

    // Sizes are the bytes a full read returns.
    for rel in [EVENT, ENTITY, PREFERENCE, PROFILE, RESOURCE, SKILL] {
        let len = std::fs::read(source.join(rel)).expect("read source").len() as u64;
        assert_eq!(get(&map, rel, LEVEL_FILE).size, len, "{rel}");
    }
    assert_eq!(zh.size, chinese_text().len() as u64);
    assert_eq!(aws0.size, AWS_ABSTRACT_TEXT.len() as u64);
    assert_eq!(aws1.size, AWS_OVERVIEW_TEXT.len() as u64);
    assert_eq!(gcp1.size, GCP_OVERVIEW_TEXT.len() as u64);

    // Tags from the frontmatter (only valid k=v).
    assert_eq!(get(&map, RESOURCE, LEVEL_FILE).tags, ["team=search", "env=prod"]);
    assert!(get(&map, SKILL, LEVEL_FILE).tags.is_empty());

    // Times: an event's creation is its path date; others are the file's.
    let event = get(&map, EVENT, LEVEL_FILE);
    assert_eq!(event.created_at, EVENT_DAY);
    assert_eq!(event.updated_at, mtime(source, EVENT).max(EVENT_DAY));
    let entity = get(&map, ENTITY, LEVEL_FILE);
    assert_eq!((entity.created_at, entity.updated_at), (mtime(source, ENTITY), mtime(source, ENTITY)));

    // Objects are in the store under accounts/{account}/tree/..., verbatim;
    // nothing from sessions, hidden or non-UTF-8 files.
    let objects = tree_objects(store).await;
    assert_eq!(objects, UPLOADED.iter().map(|p| (*p).to_owned()).collect::<BTreeSet<_>>());
    assert_eq!(object_text(store, RESOURCE).await, RESOURCE_TEXT);
    assert_eq!(object_text(store, AWS_OVERVIEW).await, AWS_OVERVIEW_TEXT);
    assert_eq!(object_text(store, CHINESE).await, chinese_text());
    for rel in [SESSION, SESSION_ABSTRACT, HIDDEN, HIDDEN_DIR_FILE, BINARY] {
        let key = tree_key(&account(), &uri(&format!("viking://{rel}")));
        assert!(store.head(&key).await.is_err(), "{key} must not be uploaded");
    }
    assert!(store.list("accounts/acme/tree/user/u/sessions").await.expect("list").is_empty());

    // The vectors are the embedder's.
    let (_, vector) =
        snapshot.records().find(|(r, _)| r.uri.as_str() == "viking://agent/skills/search/SKILL.md").expect("skill");
    assert_eq!(vector.len(), 64);
    assert!((vector.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-4, "unit length");
}

async fn reingest_is_incremental(store: &SharedStore, source: &Path) {
    write_tree(source);
    let embedder = HashedEmbedder::new(64);
    ingest_ok(source, store, &embedder, &options(false)).await;
    let first = records(&load(store).await);
    let manifest = stored_manifest(store).await;

    // A second run changes nothing.
    let (report, events) = ingest_ok(source, store, &embedder, &options(false)).await;
    assert_eq!(report.indexed, 0, "{events:?}");
    assert_eq!(report.unchanged, PLANNED - 1, "every node but the binary is unchanged: {report:?}");
    assert_eq!(report.removed, 0);
    assert!(indexed(&events).is_empty(), "{events:?}");
    let unchanged = events.iter().filter(|e| matches!(e, IngestEvent::Unchanged(_))).count();
    assert_eq!(unchanged, PLANNED - 1);
    assert_eq!(stored_manifest(store).await, manifest, "nothing new is committed");
    assert_eq!(records(&load(store).await), first);

    // Editing one file re-indexes only that file.
    let edited =
        RESOURCE_TEXT.replace("Conditional writes make the manifest safe.", "If-Match keeps the manifest safe.");
    write(source, RESOURCE, &edited);
    let (report, events) = ingest_ok(source, store, &embedder, &options(false)).await;
    assert_eq!(report.indexed, 1, "{events:?}");
    assert_eq!(report.unchanged, PLANNED - 2);
    assert_eq!(indexed(&events), BTreeSet::from([format!("viking://{RESOURCE}")]));
    let after = stored_manifest(store).await;
    assert_eq!(after.generation, manifest.generation + 1, "one commit");
    assert_eq!(after.segments.len(), manifest.segments.len() + 1);
    assert_eq!(after.segments.last().map(|s| s.records), Some(1), "the new segment holds one record");
    let second = records(&load(store).await);
    let key = (format!("viking://{RESOURCE}"), LEVEL_FILE);
    assert_eq!(second[&key].abstract_text, "If-Match keeps the manifest safe.");
    assert_eq!(second[&key].size, edited.len() as u64);
    assert_ne!(second[&key].source_hash, first[&key].source_hash);
    assert_eq!(object_text(store, RESOURCE).await, edited, "the object is updated");
    for (k, r) in &first {
        if k != &key {
            assert_eq!(&second[k], r, "{k:?} is untouched");
        }
    }

    // Editing a sidecar re-indexes its directory (both levels).
    write(source, AWS_OVERVIEW, "# AWS\n\nNow also DynamoDB.\n");
    let (report, events) = ingest_ok(source, store, &embedder, &options(false)).await;
    assert_eq!(report.indexed, 1, "{events:?}");
    assert_eq!(indexed(&events), BTreeSet::from(["viking://resources/aws".to_owned()]));
    assert_eq!(stored_manifest(store).await.segments.last().map(|s| s.records), Some(2));
    assert_eq!(object_text(store, AWS_OVERVIEW).await, "# AWS\n\nNow also DynamoDB.\n");
    let third = records(&load(store).await);
    assert_eq!(third[&("viking://resources/aws".to_owned(), LEVEL_OVERVIEW)].size, 26);
    assert_eq!(third.len(), first.len());

    // And once more: nothing.
    let before = stored_manifest(store).await;
    let (report, _) = ingest_ok(source, store, &embedder, &options(false)).await;
    assert_eq!(report.indexed, 0);
    assert_eq!(stored_manifest(store).await, before);
}

async fn prune_removes_what_the_source_lost(store: &SharedStore, source: &Path) {
    write_tree(source);
    let embedder = HashedEmbedder::new(64);
    ingest_ok(source, store, &embedder, &options(false)).await;
    let before = records(&load(store).await);

    std::fs::remove_file(source.join(PREFERENCE)).expect("delete a file");
    std::fs::remove_file(source.join(AWS_OVERVIEW)).expect("delete an overview");

    // Without prune nothing is removed (the directory's abstract record is
    // re-indexed: its source changed).
    let (report, _) = ingest_ok(source, store, &embedder, &options(false)).await;
    assert_eq!(report.removed, 0);
    let kept = records(&load(store).await);
    assert_eq!(kept.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    assert!(tree_objects(store).await.contains(PREFERENCE));

    // With prune the deleted file and overview go, records and objects.
    let (report, events) = ingest_ok(source, store, &embedder, &options(true)).await;
    assert_eq!(report.removed, 2, "{events:?}");
    let removed: BTreeSet<String> = events
        .iter()
        .filter_map(|e| match e {
            IngestEvent::Removed(u) => Some(u.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        removed,
        BTreeSet::from([format!("viking://{PREFERENCE}"), "viking://resources/aws/.overview.md".to_owned()])
    );
    let snapshot = load(store).await;
    let after = records(&snapshot);
    let mut want = expected_records();
    want.remove(&(format!("viking://{PREFERENCE}"), LEVEL_FILE));
    want.remove(&("viking://resources/aws".to_owned(), LEVEL_OVERVIEW));
    assert_eq!(after.keys().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(snapshot.len(), before.len() - 2);
    let objects = tree_objects(store).await;
    let mut want_objects: BTreeSet<String> = UPLOADED.iter().map(|p| (*p).to_owned()).collect();
    want_objects.remove(PREFERENCE);
    want_objects.remove(AWS_OVERVIEW);
    assert_eq!(objects, want_objects);

    // Pruning again finds nothing more.
    let (report, _) = ingest_ok(source, store, &embedder, &options(true)).await;
    assert_eq!((report.removed, report.indexed), (0, 0));
    assert_eq!(records(&load(store).await), after);
}

async fn another_embedder_is_refused(store: &SharedStore, source: &Path) {
    write_tree(source);
    ingest_ok(source, store, &HashedEmbedder::new(32), &options(false)).await;
    let manifest = stored_manifest(store).await;
    let objects = tree_objects(store).await;

    // Another dimension (and id): refused before anything is uploaded.
    write(source, RESOURCE, "# Changed\n\nThis must not be uploaded.\n");
    match ingest(source, store, &HashedEmbedder::new(64), &options(true)).await {
        Err(IngestError::Index(IndexError::EmbedderMismatch { index, configured, .. })) => {
            assert!(index.contains("hashed-ngram-v1/32"), "{index}");
            assert!(configured.contains("hashed-ngram-v1/64"), "{configured}");
        }
        other => panic!("want EmbedderMismatch, got {other:?}"),
    }
    assert_eq!(stored_manifest(store).await, manifest, "the index is unchanged");
    assert_eq!(tree_objects(store).await, objects);
    assert_eq!(object_text(store, RESOURCE).await, RESOURCE_TEXT, "nothing was uploaded");

    // Same dimension, another id: refused too (another account of the
    // same store, whose index a different model built).
    let beta = AccountId::new("beta").expect("valid account id");
    let hashed = HashedEmbedder::new(64);
    let info = EmbedderInfo { id: "another-model/64".to_owned(), dimension: 64 };
    let seed = skald::ingest::file_record(
        &uri("viking://resources/seed.md"),
        "seed",
        skald::ingest::Times { created_at: 1, updated_at: 1 },
        &IngestOptions::default(),
    )
    .expect("indexable");
    let seg = Segment {
        dim: 64,
        records: vec![seed.record],
        vectors: hashed.embed_one("seed"),
        tombstones: vec![],
        ..Segment::default()
    };
    commit(store, &beta, &info, &seg).await.expect("seed an index of another embedder");
    let beta_manifest = store.get(&manifest_key(&beta)).await.expect("beta's manifest").body;
    let mut on_event = |_: IngestEvent| {};
    match ingest_dir(source, &skald::index::Target::segments(store), &beta, &hashed, &options(false), &mut on_event)
        .await
    {
        Err(IngestError::Index(IndexError::EmbedderMismatch { account, index, configured })) => {
            assert_eq!(account, "beta");
            assert!(index.contains("another-model/64"), "{index}");
            assert!(configured.contains("hashed-ngram-v1/64"), "{configured}");
        }
        other => panic!("want EmbedderMismatch, got {other:?}"),
    }
    assert_eq!(store.get(&manifest_key(&beta)).await.expect("beta's manifest").body, beta_manifest);
    assert!(store.list(&tree_prefix(&beta)).await.expect("list").is_empty(), "nothing was uploaded");
    assert_eq!(load(store).await.len(), expected_records().len(), "the other account is untouched");
}
