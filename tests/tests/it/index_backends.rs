//! The index on both backends, side by side: one corpus committed to an
//! account on segments and to an account on Amazon S3 Vectors (the
//! emulator, `skald_tests::s3vectors`, through the real client), then the
//! same searches — every filter part and expression operator, limits,
//! thresholds, decay, exclusions, keyword and hybrid — must give the same
//! hits with the same scores; the lookups, the newest records and the
//! ordering of versioned commits agree; what S3 Vectors cannot rank past
//! its `topK` is flagged incomplete; and a migration moves an account both
//! ways without losing a record while searches and writes go on.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use skald::identity::AccountId;
use skald::index::account::{self, AccountIndex, Backend, Target};
use skald::index::filter::{FilterExpr, TimeField, TimeRange};
use skald::index::lexical::{encode_counts, query_terms};
use skald::index::record::{LEVEL_ABSTRACT, LEVEL_FILE, LEVEL_OVERVIEW, classify};
use skald::index::s3vectors::VectorBucket;
use skald::index::{
    EmbedderInfo, EventDecay, Exclusion, Filter, IndexSnapshot, Level, Record, SearchKind, SearchParams, Searched,
    Segment, Tombstone, read_manifest,
};
use skald::store::SharedStore;
use skald::uri::VikingUri;
use skald_tests::fixture::local_store;
use skald_tests::s3vectors::fresh_bucket;

const DIM: usize = 16;

fn embedder() -> EmbedderInfo {
    EmbedderInfo { id: "test-embedder".into(), dimension: DIM }
}

fn uri(text: &str) -> VikingUri {
    VikingUri::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// A deterministic pseudo-random stream (64-bit LCG).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() as usize) % items.len()]
    }

    fn unit(&mut self) -> Vec<f32> {
        let v: Vec<f32> = (0..DIM).map(|_| (self.next() % 2001) as f32 / 1000.0 - 1.0).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        v.into_iter().map(|x| x / norm).collect()
    }
}

const WORDS: [&str; 12] = [
    "kubernetes",
    "upgrade",
    "dinner",
    "seaside",
    "invoice",
    "rust",
    "lambda",
    "budget",
    "tokyo",
    "周报",
    "cache",
    "deploy",
];
const TAGS: [&str; 5] = ["team=search", "env=prod", "env=dev", "lang=rust", "k=v"];

fn record(path: &str, level: Level, rng: &mut Rng, i: usize) -> Record {
    let uri = uri(path);
    let (context_type, category) = classify(&uri).unwrap_or_else(|| panic!("{path} is indexed"));
    let text: Vec<&str> = (0..1 + i % 4).map(|_| rng.pick(&WORDS)).collect();
    let tags: Vec<String> =
        (0..i % 3).map(|_| rng.pick(&TAGS).to_owned()).collect::<BTreeSet<_>>().into_iter().collect();
    Record {
        owner_user_id: path.strip_prefix("viking://user/").and_then(|p| p.split('/').next()).map(str::to_owned),
        uri,
        level,
        context_type,
        category,
        abstract_text: format!("record {i}: {}", text.join(" ")),
        abstract_tokens: 8,
        overview_tokens: None,
        full_tokens: Some(20),
        size: 100,
        created_at: 1_000_000 + (i as i64) * 3_600,
        updated_at: 1_000_000 + (i as i64) * 3_600 + (i as i64 % 7) * 600,
        tags,
        source_hash: format!("h{i}"),
        source_version: None,
        terms: encode_counts(&[path, &text.join(" ")]),
        passages: 0,
        span: None,
    }
}

/// The corpus: ~240 records over every root, directories at levels 0 and
/// 1, a node deeper than the stored ancestors, a record with more tags
/// than are stored, in two segments, the second replacing and removing
/// some of the first.
fn corpus() -> (Segment, Segment) {
    let mut rng = Rng(7);
    let roots = [
        "viking://user/alice/memories/events/2026/11",
        "viking://user/alice/memories/preferences",
        "viking://user/alice/memories/entities/tools",
        "viking://user/alice/peers/bob/memories/events",
        "viking://user/alice/resources/notes",
        "viking://user/alice/skills/s1",
        "viking://user/carol/memories/events",
        "viking://resources/aws",
        "viking://resources/aws-docs",
        "viking://agent/skills/deploy",
    ];
    let mut first = Segment { dim: DIM, ..Segment::default() };
    for i in 0..220 {
        let root = roots[i % roots.len()];
        let path = format!("{root}/f{i}.md");
        first.records.push(record(&path, LEVEL_FILE, &mut rng, i));
        first.vectors.extend(rng.unit());
    }
    for (i, dir) in ["viking://resources/aws", "viking://user/alice/resources/notes"].iter().enumerate() {
        for level in [LEVEL_ABSTRACT, LEVEL_OVERVIEW] {
            first.records.push(record(dir, level, &mut rng, 300 + i));
            first.vectors.extend(rng.unit());
        }
    }
    let deep = format!("viking://resources/{}leaf.md", "d/".repeat(30));
    first.records.push(record(&deep, LEVEL_FILE, &mut rng, 400));
    first.vectors.extend(rng.unit());
    let mut tagged = record("viking://resources/aws/many-tags.md", LEVEL_FILE, &mut rng, 401);
    tagged.tags = (0..40).map(|t| format!("t{t}=x")).collect();
    tagged.tags.push("team=search".into());
    first.records.push(tagged);
    first.vectors.extend(rng.unit());

    let mut second = Segment { dim: DIM, ..Segment::default() };
    for i in (0..220).step_by(9) {
        let replaced = record(&first.records[i].uri.to_string(), LEVEL_FILE, &mut rng, i + 1000);
        second.records.push(replaced);
        second.vectors.extend(rng.unit());
    }
    for i in (4..220).step_by(13) {
        second.tombstones.push(Tombstone {
            uri: first.records[i].uri.clone(),
            level: LEVEL_FILE,
            source_version: None,
            kept_since: None,
        });
    }
    (first, second)
}

/// One account on each backend, over one store.
struct Pair {
    store: SharedStore,
    bucket: VectorBucket,
    _dir: skald_tests::fixture::TempDir,
}

impl Pair {
    fn new() -> Self {
        let (store, dir) = local_store();
        Self { store, bucket: fresh_bucket(), _dir: dir }
    }

    fn target(&self, backend: Backend) -> Target<'_> {
        Target { store: &self.store, vectors: Some(&self.bucket), new_accounts: backend, write_rate: 0.0 }
    }

    fn account(backend: Backend) -> AccountId {
        AccountId::new(backend.as_str()).expect("valid")
    }

    async fn commit(&self, backend: Backend, segment: &Segment) {
        account::commit(&self.target(backend), &Self::account(backend), &embedder(), segment.clone(), None)
            .await
            .unwrap_or_else(|e| panic!("commit on {}: {e}", backend.as_str()));
    }

    async fn open(&self, backend: Backend) -> AccountIndex {
        let account = Self::account(backend);
        let snapshot = IndexSnapshot::load(&self.store, &account, None).await.expect("load");
        AccountIndex::open(&account, Arc::new(snapshot), Some(&self.bucket)).expect("open")
    }

    /// Both accounts with the corpus committed, opened.
    async fn with_corpus() -> (Self, AccountIndex, AccountIndex) {
        let pair = Self::new();
        let (first, second) = corpus();
        for backend in [Backend::Segments, Backend::S3vectors] {
            pair.commit(backend, &first).await;
            pair.commit(backend, &second).await;
        }
        let (segments, vectors) = (pair.open(Backend::Segments).await, pair.open(Backend::S3vectors).await);
        assert!(matches!(segments, AccountIndex::Segments(_)));
        assert!(matches!(vectors, AccountIndex::Vectors { .. }), "a new account starts on s3vectors");
        (pair, segments, vectors)
    }
}

fn hits(found: &Searched<'_>) -> Vec<(String, f64)> {
    found.hits.iter().map(|h| (h.record.display_uri(), h.score)).collect()
}

async fn search_one(index: &AccountIndex, params: &SearchParams<'_>, exclude: &Exclusion) -> Searched<'static> {
    let found = index.search(std::slice::from_ref(params), exclude).await.expect("search").remove(0);
    Searched {
        hits: found
            .hits
            .into_iter()
            .map(|h| skald::index::Hit { record: std::borrow::Cow::Owned(h.record.into_owned()), ..h })
            .collect(),
        excluded: found.excluded,
        incomplete: found.incomplete,
    }
}

#[track_caller]
fn assert_same(segments: &[(String, f64)], vectors: &[(String, f64)], what: &str) {
    let a: Vec<&str> = segments.iter().map(|(u, _)| u.as_str()).collect();
    let b: Vec<&str> = vectors.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(a, b, "{what}: the same hits, best first");
    for ((u, x), (_, y)) in segments.iter().zip(vectors) {
        assert!((x - y).abs() < 1e-5, "{what}: {u} scores {x} on segments, {y} on s3vectors");
    }
}

/// The filters compared: every part of a [`Filter`] and every operator of
/// the reference's expressions, alone and combined.
fn filters() -> Vec<(&'static str, Filter)> {
    let parse = |v: serde_json::Value| {
        FilterExpr::parse(&v, &|s: &str| s.parse().map_err(|_| s.to_owned())).unwrap_or_else(|e| panic!("{e}"))
    };
    let expr = |v| Filter { expr: Some(parse(v)), ..Filter::default() };
    let deep = uri(&format!("viking://resources/{}", "d/".repeat(28).trim_end_matches('/')));
    vec![
        ("none", Filter::default()),
        ("one target", Filter { targets: vec![uri("viking://resources/aws")], ..Filter::default() }),
        (
            "targets by whole segments",
            Filter { targets: vec![uri("viking://resources/aws-docs")], ..Filter::default() },
        ),
        (
            "two targets",
            Filter { targets: vec![uri("viking://user/alice"), uri("viking://agent")], ..Filter::default() },
        ),
        ("a file as target", Filter { targets: vec![uri("viking://resources/aws/f7.md")], ..Filter::default() }),
        ("a target deeper than the stored ancestors", Filter { targets: vec![deep], ..Filter::default() }),
        (
            "not under",
            Filter {
                targets: vec![uri("viking://user/alice")],
                not_under: vec![uri("viking://user/alice/peers"), uri("viking://user/alice/resources/notes")],
                ..Filter::default()
            },
        ),
        ("context types", Filter { context_types: vec![skald::index::ContextType::Skill], ..Filter::default() }),
        ("levels", Filter { levels: vec![LEVEL_ABSTRACT, LEVEL_OVERVIEW], ..Filter::default() }),
        ("two tags", Filter { tags: vec!["team=search".into(), "env=prod".into()], ..Filter::default() }),
        ("a tag past the stored ones", Filter { tags: vec!["t39=x".into()], ..Filter::default() }),
        (
            "created since",
            Filter {
                time: Some(TimeRange { field: TimeField::CreatedAt, since: Some(1_400_000), until: None }),
                ..Filter::default()
            },
        ),
        (
            "updated within",
            Filter {
                time: Some(TimeRange { field: TimeField::UpdatedAt, since: Some(1_100_000), until: Some(1_300_000) }),
                ..Filter::default()
            },
        ),
        ("must category", expr(json!({"op": "must", "field": "category", "conds": ["events", "preferences"]}))),
        ("must_not context type", expr(json!({"op": "must_not", "field": "context_type", "conds": "memory"}))),
        ("must owner", expr(json!({"op": "must", "field": "owner_user_id", "conds": ["carol"]}))),
        ("must_not owner", expr(json!({"op": "must_not", "field": "owner_user_id", "conds": ["alice"]}))),
        ("must level", expr(json!({"op": "must", "field": "level", "conds": [0, 2]}))),
        ("must tags", expr(json!({"op": "must", "field": "tags", "conds": ["lang=rust", "env=dev"]}))),
        ("must_not tags", expr(json!({"op": "must_not", "field": "tags", "conds": ["env=prod"]}))),
        ("must uri", expr(json!({"op": "must", "field": "uri", "conds": ["viking://resources/aws"]}))),
        ("must_not uri", expr(json!({"op": "must_not", "field": "uri", "conds": ["viking://resources/aws/f7.md"]}))),
        ("must created_at", expr(json!({"op": "must", "field": "created_at", "conds": [1_007_200, 1_010_800]}))),
        ("range level", expr(json!({"op": "range", "field": "level", "gt": 0, "lte": 1}))),
        (
            "time_range updated",
            expr(json!({"op": "time_range", "field": "updated_at", "gte": "1200000", "lt": "1500000"})),
        ),
        ("range on a text field", expr(json!({"op": "range", "field": "category", "gte": 1}))),
        (
            "prefix uri",
            expr(
                json!({"op": "prefix", "field": "uri", "prefix": ["viking://user/alice/memories", "viking://agent/"]}),
            ),
        ),
        ("prefix category", expr(json!({"op": "prefix", "field": "category", "prefix": "pref"}))),
        (
            "and",
            expr(json!({"op": "and", "conds": [
            {"op": "must", "field": "context_type", "conds": ["resource"]},
            {"op": "range", "field": "created_at", "gte": 1_200_000}]})),
        ),
        (
            "or",
            expr(json!({"op": "or", "conds": [
            {"op": "must", "field": "category", "conds": ["skills"]},
            {"op": "prefix", "field": "uri", "prefix": "viking://resources/aws"}]})),
        ),
        ("prefix owner (cannot be pushed)", expr(json!({"op": "prefix", "field": "owner_user_id", "prefix": "car"}))),
        (
            "or with a branch that cannot be pushed",
            expr(json!({"op": "or", "conds": [
            {"op": "must", "field": "category", "conds": ["skills"]},
            {"op": "prefix", "field": "owner_user_id", "prefix": "car"}]})),
        ),
        (
            "nested",
            expr(json!({"op": "and", "conds": [
            {"op": "or", "conds": [{"op": "must", "field": "level", "conds": [2]}, {"op": "must", "field": "tags", "conds": ["k=v"]}]},
            {"op": "must_not", "field": "category", "conds": ["events"]}]})),
        ),
        (
            "everything at once",
            Filter {
                targets: vec![uri("viking://user/alice"), uri("viking://resources")],
                not_under: vec![uri("viking://user/alice/peers")],
                context_types: vec![skald::index::ContextType::Memory, skald::index::ContextType::Resource],
                levels: vec![LEVEL_FILE],
                tags: vec!["team=search".into()],
                time: Some(TimeRange { field: TimeField::CreatedAt, since: Some(1_050_000), until: None }),
                expr: Some(parse(json!({"op": "must_not", "field": "category", "conds": ["preferences"]}))),
            },
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semantic_searches_agree_on_every_filter_limit_and_threshold() {
    let (_pair, segments, vectors) = Pair::with_corpus().await;
    let mut rng = Rng(99);
    let mut compared = 0;
    for (name, filter) in filters() {
        for (limit, threshold) in [(1, None), (7, None), (40, None), (10, Some(0.55))] {
            let query = rng.unit();
            let params = SearchParams {
                kind: SearchKind::Semantic,
                vector: &query,
                terms: &[],
                filter: &filter,
                limit,
                score_threshold: threshold,
                decay: None,
            };
            let none = Exclusion::default();
            let (a, b) = (search_one(&segments, &params, &none).await, search_one(&vectors, &params, &none).await);
            let what = format!("{name}, limit {limit}, threshold {threshold:?}");
            if name.contains("cannot be pushed") && b.incomplete {
                // What came back is right, only possibly short.
                let (a, b) = (hits(&a), hits(&b));
                assert!(b.len() < limit, "{what}: flagged because it is short");
                for hit in &b {
                    assert!(a.iter().any(|x| x.0 == hit.0 && (x.1 - hit.1).abs() < 1e-5), "{what}: {} is a hit", hit.0);
                }
                continue;
            }
            assert!(!b.incomplete, "{what}: a filter pushed down misses nothing under topK");
            assert_same(&hits(&a), &hits(&b), &what);
            compared += usize::from(!a.hits.is_empty());
        }
    }
    assert!(compared > 100, "most searches find something ({compared})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusions_decay_keywords_and_hybrid_agree() {
    let (_pair, segments, vectors) = Pair::with_corpus().await;
    let mut rng = Rng(5);
    let filter = Filter { targets: vec![uri("viking://user/alice"), uri("viking://resources")], ..Filter::default() };
    let query = rng.unit();
    let base = SearchParams {
        kind: SearchKind::Semantic,
        vector: &query,
        terms: &[],
        filter: &filter,
        limit: 10,
        score_threshold: None,
        decay: None,
    };

    // Exclusions: the best hits' nodes and a subtree are left out on both.
    let first = search_one(&segments, &base, &Exclusion::default()).await;
    let exclude = Exclusion {
        subtrees: vec![uri("viking://user/alice/memories/preferences")],
        exact: first.hits.iter().take(3).map(|h| h.record.uri.clone()).collect(),
    };
    let (a, b) = (search_one(&segments, &base, &exclude).await, search_one(&vectors, &base, &exclude).await);
    assert_same(&hits(&a), &hits(&b), "with exclusions");
    assert!(b.excluded >= 3, "the excluded hits are counted: {}", b.excluded);

    // Event decay re-ranks: the same hits and scores within what came back.
    let decay = Some(EventDecay { now: 2_000_000, window_s: 86_400, field: TimeField::UpdatedAt });
    let events = Filter { targets: vec![uri("viking://user/alice/memories/events")], ..Filter::default() };
    let decayed = SearchParams { decay, limit: 5, filter: &events, ..base.clone() };
    let (a, b) = (
        search_one(&segments, &decayed, &Exclusion::default()).await,
        search_one(&vectors, &decayed, &Exclusion::default()).await,
    );
    assert_same(&hits(&a), &hits(&b), "with decay");
    assert!(b.hits.iter().any(|h| h.time_score.is_some()), "decay applied on s3vectors too");

    // Keywords: a query whose matches all fit in one query's topK finds the
    // same records (scores may differ: keyword statistics are those of the
    // records that came back).
    for text in ["seaside dinner", "周报 cache", "kubernetes"] {
        let terms = query_terms(text);
        let narrow = Filter { targets: vec![uri("viking://user/alice/memories/preferences")], ..Filter::default() };
        let params =
            SearchParams { kind: SearchKind::Keywords, terms: &terms, filter: &narrow, limit: 50, ..base.clone() };
        let (a, b) = (
            search_one(&segments, &params, &Exclusion::default()).await,
            search_one(&vectors, &params, &Exclusion::default()).await,
        );
        let set = |s: &Searched<'_>| s.hits.iter().map(|h| h.record.display_uri()).collect::<BTreeSet<_>>();
        assert!(!a.hits.is_empty(), "{text}: found on segments");
        assert_eq!(set(&a), set(&b), "{text}: the same records match");
        assert!(b.hits.windows(2).all(|w| w[0].score >= w[1].score), "{text}: best first");
        // Hybrid never scores a record below its semantic score.
        let hybrid = SearchParams { kind: SearchKind::Hybrid, ..params.clone() };
        let semantic = SearchParams { kind: SearchKind::Semantic, ..params.clone() };
        let (h, s) = (
            search_one(&vectors, &hybrid, &Exclusion::default()).await,
            search_one(&vectors, &semantic, &Exclusion::default()).await,
        );
        for hit in &h.hits {
            if let Some(plain) =
                s.hits.iter().find(|x| x.record.uri == hit.record.uri && x.record.level == hit.record.level)
            {
                assert!(hit.score >= plain.score - 1e-9, "{text}: hybrid lifts, never lowers");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_s3_vectors_cannot_rank_is_flagged_incomplete() {
    let (_pair, segments, vectors) = Pair::with_corpus().await;
    let query = Rng(3).unit();
    let none = Filter::default();
    // More than topK asked for: 100 come back, flagged.
    let big = SearchParams {
        kind: SearchKind::Semantic,
        vector: &query,
        terms: &[],
        filter: &none,
        limit: 150,
        score_threshold: None,
        decay: None,
    };
    let (a, b) = (
        search_one(&segments, &big, &Exclusion::default()).await,
        search_one(&vectors, &big, &Exclusion::default()).await,
    );
    assert_eq!((a.hits.len(), a.incomplete), (150, false));
    assert_eq!((b.hits.len(), b.incomplete), (100, true), "the service returns 100 at most");
    assert_same(&hits(&a)[..100], &hits(&b), "the 100 best agree");
    // Decay over a full page may promote a record past topK: flagged.
    let decay = Some(EventDecay { now: 2_000_000, window_s: 1, field: TimeField::CreatedAt });
    let decayed = SearchParams { limit: 40, decay, ..big.clone() };
    assert!(search_one(&vectors, &decayed, &Exclusion::default()).await.incomplete);
    // A plain search under topK is complete.
    let plain = SearchParams { limit: 40, ..big };
    assert!(!search_one(&vectors, &plain, &Exclusion::default()).await.incomplete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_basis_and_newest_agree() {
    let (_pair, segments, vectors) = Pair::with_corpus().await;
    let nodes: Vec<(VikingUri, Level)> = vec![
        (uri("viking://resources/aws/f7.md"), LEVEL_FILE),
        (uri("viking://resources/aws"), LEVEL_ABSTRACT),
        (uri("viking://resources/aws"), LEVEL_OVERVIEW),
        (uri("viking://resources/aws/missing.md"), LEVEL_FILE),
        (uri("viking://user/alice/memories/events/2026/11/f0.md"), LEVEL_FILE),
    ];
    let sorted = |mut v: Vec<Record>| {
        v.sort_by(|a, b| (a.uri.as_str(), a.level).cmp(&(b.uri.as_str(), b.level)));
        v
    };
    let (a, b) =
        (sorted(segments.lookup(&nodes).await.expect("lookup")), sorted(vectors.lookup(&nodes).await.expect("lookup")));
    assert_eq!(a.len(), 4, "the missing node is left out");
    assert_eq!(a, b, "records come back whole from the metadata");

    let basis = vectors.basis(&nodes).await.expect("basis");
    assert_eq!(basis.len(), 4);
    let (seg_basis, _) = (segments.basis(&nodes).await.expect("basis"), ());
    for (record, vector) in basis.records() {
        let (_, want) = seg_basis.get_with_vector(&record.uri, record.level).expect("on segments too");
        assert_eq!(vector, want, "{}: vectors come back exactly", record.uri);
    }

    assert_eq!(
        sorted(segments.all_records().await.expect("all")),
        sorted(vectors.all_records().await.expect("all")),
        "every live record, replaced and removed ones as on segments"
    );

    // The newest records by either time, through time windows on S3
    // Vectors — a window of all 200 records is halved until it holds 100.
    let own = Filter { targets: vec![uri("viking://user/alice"), uri("viking://resources")], ..Filter::default() };
    for (field, since, max) in
        [(TimeField::CreatedAt, 1_500_000, 5), (TimeField::UpdatedAt, i64::MIN, 30), (TimeField::CreatedAt, 0, 500)]
    {
        let (a, cut_a) = segments.newest(&own, field, since, max, 2_000_000).await.expect("newest");
        let (b, cut_b) = vectors.newest(&own, field, since, max, 2_000_000).await.expect("newest");
        let uris = |v: &[Record]| v.iter().map(Record::display_uri).collect::<Vec<_>>();
        assert!(!cut_a);
        if max <= 100 {
            assert_eq!(uris(&a), uris(&b), "{field:?} since {since}, {max}");
            assert!(!cut_b);
        } else {
            assert!(uris(&b).len() >= 100 && uris(&a).starts_with(&uris(&b)[..1]), "{field:?}: the newest first");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versioned_commits_never_go_back_on_s3_vectors() {
    let pair = Pair::new();
    let mut rng = Rng(11);
    let versioned = |version: &str, hash: &str, rng: &mut Rng| {
        let mut r = record("viking://resources/aws/v.md", LEVEL_FILE, rng, 1);
        r.source_version = Some(version.into());
        r.source_hash = hash.into();
        Segment { dim: DIM, records: vec![r], vectors: rng.unit(), ..Segment::default() }
    };
    let target = pair.target(Backend::S3vectors);
    let account = Pair::account(Backend::S3vectors);
    let info = embedder();
    let commit = |segment: Segment| account::commit(&target, &account, &info, segment, None);
    let newer = commit(versioned("0B", "new", &mut rng)).await.expect("commit");
    assert_eq!((newer.dropped, newer.backend), (0, Backend::S3vectors));
    let older = commit(versioned("0A", "old", &mut rng)).await.expect("commit");
    assert_eq!(older.dropped, 1, "an older version is dropped");
    let stale_removal = Segment {
        dim: DIM,
        tombstones: vec![Tombstone {
            uri: uri("viking://resources/aws/v.md"),
            level: LEVEL_FILE,
            source_version: Some("09".into()),
            kept_since: None,
        }],
        ..Segment::default()
    };
    assert_eq!(commit(stale_removal).await.expect("commit").dropped, 1, "so is an older removal");
    let index = pair.open(Backend::S3vectors).await;
    let held = index.lookup(&[(uri("viking://resources/aws/v.md"), LEVEL_FILE)]).await.expect("lookup");
    assert_eq!(held.iter().map(|r| r.source_hash.as_str()).collect::<Vec<_>>(), ["new"]);
    let removal = Segment {
        dim: DIM,
        tombstones: vec![Tombstone {
            uri: uri("viking://resources/aws/v.md"),
            level: LEVEL_FILE,
            source_version: Some("0C".into()),
            kept_since: None,
        }],
        ..Segment::default()
    };
    assert_eq!(commit(removal).await.expect("commit").dropped, 0);
    assert!(index.lookup(&[(uri("viking://resources/aws/v.md"), LEVEL_FILE)]).await.expect("lookup").is_empty());
    let (manifest, _) = read_manifest(&pair.store, &account).await.expect("read").expect("a manifest");
    assert!(manifest.segments.is_empty() && manifest.vectors.is_some());
    assert_eq!(manifest.generation, 5, "every commit moves the manifest: creation and four commits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migration_moves_an_account_both_ways_while_it_is_used() {
    let pair = Arc::new(Pair::new());
    let (first, second) = corpus();
    let account = Pair::account(Backend::Segments);
    pair.commit(Backend::Segments, &first).await;
    pair.commit(Backend::Segments, &second).await;
    let before = pair.open(Backend::Segments).await;
    let mut want = before.all_records().await.expect("records");
    let query = Rng(1).unit();
    let none = Filter::default();
    let params = SearchParams {
        kind: SearchKind::Semantic,
        vector: &query,
        terms: &[],
        filter: &none,
        limit: 20,
        score_threshold: None,
        decay: None,
    };
    let expected = hits(&search_one(&before, &params, &Exclusion::default()).await);

    // Searches and a writer run while the account moves.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let searcher = {
        let (pair, stop, account, query) = (Arc::clone(&pair), Arc::clone(&stop), account.clone(), query.clone());
        tokio::spawn(async move {
            let mut searches = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let snapshot = IndexSnapshot::load(&pair.store, &account, None).await.expect("load during the move");
                let index = AccountIndex::open(&account, Arc::new(snapshot), Some(&pair.bucket)).expect("open");
                let filter = Filter::default();
                let p = SearchParams {
                    kind: SearchKind::Semantic,
                    vector: &query,
                    terms: &[],
                    filter: &filter,
                    limit: 20,
                    score_threshold: None,
                    decay: None,
                };
                let found = index.search(&[p], &Exclusion::default()).await.expect("a search during the move");
                assert_eq!(found[0].hits.len(), 20, "searches keep finding");
                searches += 1;
            }
            searches
        })
    };
    let mut rng = Rng(42);
    let added = record("viking://resources/aws/added-during.md", LEVEL_FILE, &mut rng, 500);
    let writer = {
        let (pair, account, added) = (Arc::clone(&pair), account.clone(), added.clone());
        let vector = rng.unit();
        tokio::spawn(async move {
            let segment = Segment { dim: DIM, records: vec![added], vectors: vector, ..Segment::default() };
            account::commit(&pair.target(Backend::Segments), &account, &embedder(), segment, None)
                .await
                .expect("a write during the move")
        })
    };
    let mut copied = 0;
    let moved =
        account::migrate(&pair.target(Backend::Segments), &account, Backend::S3vectors, Duration::ZERO, &mut |n| {
            copied = n
        })
        .await
        .expect("migrate to s3vectors");
    writer.await.expect("the writer");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(searcher.await.expect("the searcher") > 0);
    assert!(!moved.already && moved.passes >= 1 && copied >= want.len());
    want.push(added);
    let sorted = |mut v: Vec<Record>| {
        v.sort_by(|a, b| (a.uri.as_str(), a.level).cmp(&(b.uri.as_str(), b.level)));
        v
    };
    let want = sorted(want);

    let (manifest, _) = read_manifest(&pair.store, &account).await.expect("read").expect("a manifest");
    assert!(manifest.vectors.is_some() && manifest.segments.is_empty(), "switched: {manifest:?}");
    let listed = pair.store.list(&format!("accounts/{account}/index/segments/")).await.expect("list");
    assert!(listed.is_empty(), "the old segments are deleted: {listed:?}");
    let on_vectors = pair.open(Backend::Segments).await;
    assert!(matches!(on_vectors, AccountIndex::Vectors { .. }));
    assert_eq!(sorted(on_vectors.all_records().await.expect("records")), want, "no record lost, none re-embedded");
    let after = hits(&search_one(&on_vectors, &params, &Exclusion::default()).await);
    assert_same(&expected, &after, "the same search after the move");
    let again =
        account::migrate(&pair.target(Backend::Segments), &account, Backend::S3vectors, Duration::ZERO, &mut |_| {})
            .await
            .expect("again");
    assert!(again.already, "migrating again is a no-op");

    // A write after the switch lands in S3 Vectors.
    let later = record("viking://resources/aws/after.md", LEVEL_FILE, &mut rng, 501);
    let segment = Segment { dim: DIM, records: vec![later.clone()], vectors: rng.unit(), ..Segment::default() };
    let committed =
        account::commit(&pair.target(Backend::Segments), &account, &embedder(), segment, None).await.expect("commit");
    assert_eq!(committed.backend, Backend::S3vectors);

    // And back.
    let back =
        account::migrate(&pair.target(Backend::Segments), &account, Backend::Segments, Duration::ZERO, &mut |_| {})
            .await
            .expect("migrate back");
    assert_eq!(back.records, want.len() + 1);
    let on_segments = pair.open(Backend::Segments).await;
    assert!(matches!(on_segments, AccountIndex::Segments(_)));
    let mut want_back = want;
    want_back.push(later);
    assert_eq!(sorted(on_segments.all_records().await.expect("records")), sorted(want_back));
    assert_same(
        &expected,
        &hits(&search_one(&on_segments, &params, &Exclusion::default()).await),
        "the same search back on segments",
    );
    let (manifest, _) = read_manifest(&pair.store, &account).await.expect("read").expect("a manifest");
    assert!(manifest.vectors.is_none() && manifest.segments.len() == 1);
    // The S3 Vectors index is gone: a handle on it finds nothing.
    let gone = AccountIndex::Vectors { bucket: pair.bucket.clone(), index: pair.bucket.index_name(&account), manifest };
    assert!(
        gone.lookup(&[(uri("viking://resources/aws/after.md"), LEVEL_FILE)]).await.is_err(),
        "the index was deleted"
    );
}
