//! One behaviour suite for the vector index: segments and a
//! manifest swapped by compare-and-swap, exact cosine search with filters,
//! replacement and tombstones, concurrent writers, compaction, the embedder
//! guard, the snapshot cache and event time decay.
//!
//! Each check is an `async fn` over a store, run once against a
//! [`LocalStore`] in a fresh temporary directory and once against an
//! [`S3Store`] on a fresh bucket of a local moto server.
//!
//! Vectors are small hand-made unit vectors of dimension 8 and queries are
//! the first axis, so a record whose vector starts with `c` scores exactly
//! `(1 + c) / 2` ([`score`]).
//!
//! [`LocalStore`]: skald::store::local::LocalStore
//! [`S3Store`]: skald::store::s3::S3Store

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{DIM, account, embedder, now_ms};
use skald::identity::AccountId;
use skald::index::filter::{Field, FilterExpr, TimeField, TimeRange};
use skald::index::record::{LEVEL_ABSTRACT, LEVEL_FILE, LEVEL_OVERVIEW};
use skald::index::{
    COMPACT_AT, Category, ContextType, EmbedderInfo, EventDecay, Filter, IndexCache, IndexError, IndexSnapshot, Level,
    Manifest, Record, SearchKind, SearchParams, Segment, Tombstone, commit, compact, manifest_key,
};
use skald::store::SharedStore;
use skald::uri::VikingUri;

// Runs each check against both backends: `local::<check>` and
// `s3::<check>`. Every check takes `&SharedStore`.
skald_tests::on_both_stores!(worker_threads = 4;
    commit_load_search_round_trip(shared),
    scores_threshold_and_limit(shared),
    filters_select_the_right_records(shared),
    later_segments_replace_and_tombstones_remove(shared),
    concurrent_writers_lose_nothing(shared),
    concurrent_writers_past_compact_at_lose_nothing(shared),
    commits_keep_working_through_compaction(shared),
    concurrent_compactions_keep_every_segment(shared),
    mixing_embedders_is_refused(shared),
    cache_reuses_and_revalidates_snapshots(shared),
    cache_keeps_within_its_memory_bound(shared),
    a_slow_account_load_holds_up_no_other(shared),
    ordered_commits_never_go_back(shared),
    events_decay_with_age(shared),
    keyword_search_sees_only_live_records(shared),
    a_long_keyword_query_keeps_its_rarest_terms(shared),
    a_compaction_reuses_the_index_it_is_given(shared),
    compactions_prune_tombstones_a_week_after_keeping_them(shared),
);

// ---------------------------------------------------------------- helpers

fn uri(text: &str) -> VikingUri {
    VikingUri::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// A record of `uri` at `level`, typed by where the URI lives, with times 0
/// and no tags.
fn record(text: &str, level: Level) -> Record {
    let abstract_text = format!("{text} at level {level}");
    Record { level, ..skald_tests::fixture::file_record_of(text, &abstract_text, &format!("hash of {text}")) }
}

fn with_times(mut r: Record, created_at: i64, updated_at: i64) -> Record {
    r.created_at = created_at;
    r.updated_at = updated_at;
    r
}

fn with_tags(mut r: Record, tags: &[&str]) -> Record {
    r.tags = tags.iter().map(|t| (*t).to_owned()).collect();
    r
}

/// The unit vector along axis `i`.
fn axis(i: usize) -> Vec<f32> {
    let mut v = vec![0.0; DIM];
    v[i % DIM] = 1.0;
    v
}

/// A unit vector whose first component is `c` (the rest on axis `other`).
fn toward(c: f32, other: usize) -> Vec<f32> {
    assert!((1..DIM).contains(&other));
    let mut v = vec![0.0; DIM];
    v[0] = c;
    v[other] = (1.0 - c * c).max(0.0).sqrt();
    v
}

/// The score a record whose vector starts with `c` gets for the query
/// `axis(0)`: `(1 + cos) / 2`, computed as the index does.
fn score(c: f32) -> f64 {
    (1.0 + f64::from(c)) / 2.0
}

fn segment(rows: Vec<(Record, Vec<f32>)>, tombstones: &[(&str, Level)]) -> Segment {
    let mut out = Segment { dim: DIM, ..Segment::default() };
    for (r, v) in rows {
        assert_eq!(v.len(), DIM);
        out.records.push(r);
        out.vectors.extend(v);
    }
    out.tombstones = tombstones
        .iter()
        .map(|(u, level)| Tombstone { uri: uri(u), level: *level, source_version: None, kept_since: None })
        .collect();
    out
}

async fn commit_ok(store: &SharedStore, seg: &Segment) -> Manifest {
    commit(store, &account(), &embedder(), seg).await.unwrap_or_else(|e| panic!("commit: {e}"))
}

async fn load(store: &SharedStore) -> IndexSnapshot {
    IndexSnapshot::load(store, &account(), None).await.unwrap_or_else(|e| panic!("load: {e}"))
}

/// The manifest as stored, and its etag.
async fn stored_manifest(store: &SharedStore) -> (Manifest, String) {
    let object = store.get(&manifest_key(&account())).await.expect("get the manifest");
    let manifest = serde_json::from_slice(&object.body).expect("the manifest decodes");
    (manifest, object.meta.etag)
}

/// Keys of every segment object in the store, sorted.
async fn stored_segments(store: &SharedStore) -> Vec<String> {
    let prefix = format!("accounts/{}/index/segments/", account());
    store.list(&prefix).await.expect("list segments").into_iter().map(|m| m.key).collect()
}

/// Every live `(display uri, abstract)`, sorted.
fn live(snapshot: &IndexSnapshot) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> =
        snapshot.records().map(|(r, _)| (r.display_uri(), r.abstract_text.clone())).collect();
    out.sort();
    out
}

/// Searches with the query `axis(0)`: `(display uri, score)` best first.
fn search(snapshot: &IndexSnapshot, filter: &Filter, limit: usize, threshold: Option<f64>) -> Vec<(String, f64)> {
    let query = axis(0);
    let params = SearchParams {
        kind: SearchKind::Semantic,
        terms: &[],
        vector: &query,
        filter,
        limit,
        score_threshold: threshold,
        decay: None,
    };
    snapshot.search(&params).into_iter().map(|h| (h.record.display_uri(), h.score)).collect()
}

#[track_caller]
fn assert_hits(got: &[(String, f64)], want: &[(&str, f64)], what: &str) {
    let got_uris: Vec<&str> = got.iter().map(|(u, _)| u.as_str()).collect();
    let want_uris: Vec<&str> = want.iter().map(|(u, _)| *u).collect();
    assert_eq!(got_uris, want_uris, "{what}: hits (best first)");
    for ((u, g), (_, w)) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-12, "{what}: score of {u} is {g}, want {w}");
    }
}

// ------------------------------------------------------- the search corpus

const A: &str = "viking://a/b/.abstract.md";
const F: &str = "viking://a/b/.overview.md";
const B: &str = "viking://a/b/x.md";
const C: &str = "viking://a/bc/y.md";
const D: &str = "viking://user/u/memories/events/2026/11/20/e.md";
const E: &str = "viking://agent/skills/s/SKILL.md";
const G: &str = "viking://resources/g.md";

/// Commits the search corpus in two segments; returns the expected
/// `(display uri, score)` of every record, best first.
///
/// | hit | level | type     | tags                   | created | updated | c    |
/// |-----|-------|----------|------------------------|---------|---------|------|
/// | A   | 0     | resource | team=search            | 1000    | 5000    | 1.0  |
/// | E   | 2     | skill    |                        | 5000    | 9000    | 0.6  |
/// | B   | 2     | resource | team=search, env=prod  | 2000    | 6000    | 0.5  |
/// | C   | 2     | resource | env=prod               | 3000    | 7000    | 0.0  |
/// | G   | 2     | resource |                        | 0       | 0       | 0.0  |
/// | D   | 2     | memory   | team=search, env=prod  | 4000    | 8000    | -0.5 |
/// | F   | 1     | resource |                        | 1000    | 5000    | -1.0 |
async fn commit_corpus(store: &SharedStore) -> Vec<(&'static str, f64)> {
    let first = segment(
        vec![
            (with_tags(with_times(record("viking://a/b", LEVEL_ABSTRACT), 1000, 5000), &["team=search"]), axis(0)),
            (with_tags(with_times(record(B, LEVEL_FILE), 2000, 6000), &["team=search", "env=prod"]), toward(0.5, 1)),
            (with_tags(with_times(record(C, LEVEL_FILE), 3000, 7000), &["env=prod"]), axis(2)),
        ],
        &[],
    );
    let second = segment(
        vec![
            (with_tags(with_times(record(D, LEVEL_FILE), 4000, 8000), &["team=search", "env=prod"]), toward(-0.5, 3)),
            (with_times(record(E, LEVEL_FILE), 5000, 9000), toward(0.6, 4)),
            (with_times(record("viking://a/b", LEVEL_OVERVIEW), 1000, 5000), toward(-1.0, 5)),
            (record(G, LEVEL_FILE), axis(6)),
        ],
        &[],
    );
    let m1 = commit_ok(store, &first).await;
    assert_eq!((m1.segments.len(), m1.generation), (1, 1));
    let m2 = commit_ok(store, &second).await;
    assert_eq!((m2.segments.len(), m2.generation), (2, 2));
    assert_eq!(m2.embedder, embedder());
    // C (first segment) and G (second) tie at 0.5: index order breaks it.
    vec![
        (A, score(1.0)),
        (E, score(0.6)),
        (B, score(0.5)),
        (C, score(0.0)),
        (G, score(0.0)),
        (D, score(-0.5)),
        (F, score(-1.0)),
    ]
}

// ---------------------------------------------------------------- checks

async fn commit_load_search_round_trip(store: &SharedStore) {
    let empty = load(store).await;
    assert!(empty.is_empty() && empty.etag.is_none() && empty.embedder().is_none(), "no index yet: {empty:?}");
    assert!(search(&empty, &Filter::default(), 10, None).is_empty());

    let all = commit_corpus(store).await;
    let (manifest, etag) = stored_manifest(store).await;
    assert_eq!(manifest.segments.len(), 2);
    assert_eq!(manifest.segments.iter().map(|s| s.records).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(stored_segments(store).await, {
        let mut keys: Vec<String> = manifest.segments.iter().map(|s| s.key.clone()).collect();
        keys.sort();
        keys
    });

    let snapshot = load(store).await;
    assert_eq!(snapshot.len(), 7);
    assert_eq!(snapshot.etag.as_deref(), Some(etag.as_str()), "the snapshot carries the manifest's etag");
    assert_eq!(snapshot.manifest.as_ref(), Some(&manifest));
    assert_eq!(snapshot.embedder(), Some(&embedder()));

    // Records and vectors come back exactly as committed.
    let b = snapshot.get(&uri(B), LEVEL_FILE).expect("B is indexed");
    assert_eq!(b, &with_tags(with_times(record(B, LEVEL_FILE), 2000, 6000), &["team=search", "env=prod"]));
    let (_, b_vector) = snapshot.records().find(|(r, _)| r.uri == uri(B)).expect("B has a vector");
    assert_eq!(b_vector, toward(0.5, 1).as_slice());
    assert!(snapshot.get(&uri(B), LEVEL_ABSTRACT).is_none(), "level is part of the key");
    assert!(snapshot.get(&uri("viking://a/b"), LEVEL_ABSTRACT).is_some());
    assert!(snapshot.get(&uri("viking://a/b"), LEVEL_OVERVIEW).is_some());

    assert_hits(&search(&snapshot, &Filter::default(), 100, None), &all, "everything");
}

async fn scores_threshold_and_limit(store: &SharedStore) {
    let all = commit_corpus(store).await;
    let snapshot = load(store).await;
    let none = Filter::default();

    assert_hits(&search(&snapshot, &none, 3, None), &all[..3], "limit 3");
    assert_hits(&search(&snapshot, &none, 1, None), &all[..1], "limit 1");
    assert!(search(&snapshot, &none, 0, None).is_empty(), "limit 0");
    assert_hits(&search(&snapshot, &none, usize::MAX, None), &all, "a huge limit");
    // A limit that cuts through the tie keeps the earlier record (C).
    assert_hits(&search(&snapshot, &none, 4, None), &all[..4], "limit inside a tie");

    // Strictly greater: a hit scoring exactly the threshold is excluded.
    assert_hits(&search(&snapshot, &none, 10, Some(score(0.5))), &all[..2], "threshold = B's score");
    assert_hits(&search(&snapshot, &none, 10, Some(score(0.5) - 1e-9)), &all[..3], "threshold just below B");
    assert_hits(&search(&snapshot, &none, 10, Some(0.0)), &all[..6], "threshold 0 drops the 0.0 hit");
    assert_hits(&search(&snapshot, &none, 10, Some(1.0)), &[], "nothing is above 1");
    assert_hits(&search(&snapshot, &none, 2, Some(0.5)), &all[..2], "limit and threshold together");

    // Scores are (1 + cos) / 2 for another query too.
    let query = toward(0.6, 4); // E's own vector
    let params = SearchParams {
        kind: SearchKind::Semantic,
        terms: &[],
        vector: &query,
        filter: &none,
        limit: 1,
        score_threshold: None,
        decay: None,
    };
    let hits = snapshot.search(&params);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].record.display_uri(), E);
    assert!((hits[0].score - 1.0).abs() < 1e-6, "a vector scores 1 against itself: {}", hits[0].score);
    assert_eq!((hits[0].origin_score, hits[0].time_score), (None, None), "no decay asked");

    // A query of another dimension matches nothing (and does not panic).
    let short = vec![1.0f32; 4];
    let params = SearchParams {
        kind: SearchKind::Semantic,
        terms: &[],
        vector: &short,
        filter: &none,
        limit: 10,
        score_threshold: None,
        decay: None,
    };
    assert!(snapshot.search(&params).is_empty());
}

async fn filters_select_the_right_records(store: &SharedStore) {
    let all = commit_corpus(store).await;
    let snapshot = load(store).await;
    let only =
        |names: &[&str]| -> Vec<(&str, f64)> { all.iter().filter(|(u, _)| names.contains(u)).copied().collect() };
    let check = |filter: &Filter, want: &[&str], what: &str| {
        assert_hits(&search(&snapshot, filter, 100, None), &only(want), what);
    };

    // Targets, by whole segments: viking://a/b is not a prefix of viking://a/bc.
    check(&Filter { targets: vec![uri("viking://a/b")], ..Filter::default() }, &[A, B, F], "target a/b");
    check(&Filter { targets: vec![uri("viking://a/b/")], ..Filter::default() }, &[A, B, F], "target a/b/");
    check(&Filter { targets: vec![uri("viking://a/bc")], ..Filter::default() }, &[C], "target a/bc");
    check(&Filter { targets: vec![uri("viking://a")], ..Filter::default() }, &[A, B, C, F], "target a");
    check(&Filter { targets: vec![uri(B)], ..Filter::default() }, &[B], "a file as target");
    check(
        &Filter { targets: vec![uri("viking://a/b"), uri("viking://agent/skills")], ..Filter::default() },
        &[A, E, B, F],
        "two targets",
    );
    check(&Filter { targets: vec![uri("viking://")], ..Filter::default() }, &[A, E, B, C, G, D, F], "the root");
    check(&Filter { targets: vec![uri("viking://a/b/x")], ..Filter::default() }, &[], "target a/b/x");

    // Context types and levels.
    check(
        &Filter { context_types: vec![ContextType::Memory, ContextType::Skill], ..Filter::default() },
        &[E, D],
        "memories and skills",
    );
    check(&Filter { context_types: vec![ContextType::Resource], ..Filter::default() }, &[A, B, C, G, F], "resources");
    check(&Filter { levels: vec![LEVEL_ABSTRACT, LEVEL_OVERVIEW], ..Filter::default() }, &[A, F], "levels 0, 1");
    check(&Filter { levels: vec![LEVEL_OVERVIEW], ..Filter::default() }, &[F], "level 1");
    check(&Filter { levels: vec![LEVEL_FILE], ..Filter::default() }, &[E, B, C, G, D], "level 2");

    // Tags are AND-ed.
    let tags = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    check(&Filter { tags: tags(&["team=search"]), ..Filter::default() }, &[A, B, D], "team=search");
    check(&Filter { tags: tags(&["team=search", "env=prod"]), ..Filter::default() }, &[B, D], "both tags");
    check(&Filter { tags: tags(&["env=prod", "team=other"]), ..Filter::default() }, &[], "a missing tag");

    // Time ranges are inclusive, on the field asked for.
    let time = |field, since, until| Filter { time: Some(TimeRange { field, since, until }), ..Filter::default() };
    check(&time(TimeField::UpdatedAt, Some(6000), Some(8000)), &[B, C, D], "updated 6000..=8000");
    check(&time(TimeField::UpdatedAt, Some(8001), None), &[E], "updated after 8000");
    check(&time(TimeField::UpdatedAt, None, Some(4999)), &[G], "updated before 5000");
    check(&time(TimeField::CreatedAt, Some(3000), None), &[E, C, D], "created since 3000");
    check(&time(TimeField::CreatedAt, None, Some(1000)), &[A, G, F], "created until 1000");
    check(&time(TimeField::CreatedAt, Some(2000), Some(2000)), &[B], "created exactly 2000");

    // Filter expressions, built directly.
    let expr = |e: FilterExpr| Filter { expr: Some(e), ..Filter::default() };
    let strings = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    check(&expr(FilterExpr::Must(Field::Category, strings(&["events", "skills"]))), &[E, D], "must category");
    check(&expr(FilterExpr::Must(Field::Tags, strings(&["env=prod"]))), &[B, C, D], "must tags");
    check(&expr(FilterExpr::Must(Field::Uri, strings(&["viking://a/b/"]))), &[A, F], "must uri (trailing /)");
    check(&expr(FilterExpr::Must(Field::Level, strings(&["0", "1"]))), &[A, F], "must level");
    check(&expr(FilterExpr::MustNot(Field::ContextType, strings(&["resource"]))), &[E, D], "must_not context_type");
    check(&expr(FilterExpr::MustNot(Field::Tags, strings(&["team=search"]))), &[E, C, G, F], "must_not tags");
    check(
        &expr(FilterExpr::Range { field: Field::UpdatedAt, lower: Some((6000.0, false)), upper: Some((8000.0, true)) }),
        &[C, D],
        "range updated_at (6000, 8000]",
    );
    check(
        &expr(FilterExpr::Range { field: Field::CreatedAt, lower: Some((2000.0, true)), upper: Some((4000.0, false)) }),
        &[B, C],
        "range created_at [2000, 4000)",
    );
    check(
        &expr(FilterExpr::Range { field: Field::Level, lower: None, upper: Some((1.0, true)) }),
        &[A, F],
        "range level <= 1",
    );
    check(
        &expr(FilterExpr::Range { field: Field::Tags, lower: Some((0.0, true)), upper: None }),
        &[],
        "a range over a non-numeric field matches nothing",
    );
    check(
        &expr(FilterExpr::And(vec![
            FilterExpr::Must(Field::Tags, strings(&["env=prod"])),
            FilterExpr::Range { field: Field::CreatedAt, lower: Some((2000.0, false)), upper: None },
        ])),
        &[C, D],
        "and",
    );
    check(
        &expr(FilterExpr::Or(vec![
            FilterExpr::Must(Field::ContextType, strings(&["skill"])),
            FilterExpr::Must(Field::Level, strings(&["0"])),
        ])),
        &[A, E],
        "or",
    );
    check(
        &expr(FilterExpr::And(vec![
            FilterExpr::Or(vec![
                FilterExpr::Must(Field::Tags, strings(&["team=search"])),
                FilterExpr::Must(Field::Category, strings(&["skills"])),
            ]),
            FilterExpr::MustNot(Field::Level, strings(&["0"])),
        ])),
        &[E, B, D],
        "nested and/or/must_not",
    );

    // The same, parsed from the request's JSON.
    let parse_time = |s: &str| -> Result<i64, String> { s.parse::<i64>().map_err(|e| e.to_string()) };
    let parsed = |json: serde_json::Value| {
        expr(FilterExpr::parse(&json, &parse_time).unwrap_or_else(|e| panic!("parse {json}: {e}")))
    };
    check(
        &parsed(serde_json::json!({"op": "and", "conds": [
            {"op": "must", "field": "tags", "conds": ["env=prod"]},
            {"op": "range", "field": "created_at", "gt": 2000},
        ]})),
        &[C, D],
        "parsed and",
    );
    check(
        &parsed(serde_json::json!({"op": "or", "conds": [
            {"op": "must", "field": "context_type", "conds": "skill"},
            {"op": "must", "field": "level", "conds": [0]},
        ]})),
        &[A, E],
        "parsed or",
    );
    check(
        &parsed(serde_json::json!({"op": "must_not", "field": "search_tags", "conds": ["team=search", "env=prod"]})),
        &[E, G, F],
        "parsed must_not",
    );
    check(
        &parsed(serde_json::json!({"op": "time_range", "field": "updated_at", "gte": "6000", "lt": "8000"})),
        &[B, C],
        "parsed time_range",
    );
    check(
        &parsed(serde_json::json!({"op": "prefix", "field": "uri", "prefix": "viking://a/b"})),
        &[A, B, F],
        "parsed uri prefix, by segment",
    );

    // Every part of a filter must hold.
    check(
        &Filter {
            targets: vec![uri("viking://a")],
            levels: vec![LEVEL_FILE],
            tags: tags(&["env=prod"]),
            time: Some(TimeRange { field: TimeField::UpdatedAt, since: Some(6500), until: None }),
            expr: Some(FilterExpr::MustNot(Field::Uri, strings(&[B]))),
            ..Filter::default()
        },
        &[C],
        "everything at once",
    );
    // A filter and a threshold together.
    let filter = Filter { tags: tags(&["team=search"]), ..Filter::default() };
    assert_hits(&search(&snapshot, &filter, 10, Some(score(0.0))), &only(&[A, B]), "tags with threshold");
}

async fn later_segments_replace_and_tombstones_remove(store: &SharedStore) {
    const X: &str = "viking://resources/x.md";
    const Y: &str = "viking://resources/y.md";
    const Z: &str = "viking://resources/z.md";
    let dir = "viking://resources";
    let mut x_old = with_tags(record(X, LEVEL_FILE), &["v=1"]);
    x_old.abstract_text = "x, first version".into();
    commit_ok(
        store,
        &segment(
            vec![
                (x_old, axis(0)),
                (record(Y, LEVEL_FILE), toward(0.5, 1)),
                (record(Z, LEVEL_FILE), toward(0.0, 2)),
                (record(dir, LEVEL_ABSTRACT), toward(-0.5, 3)),
                (record(dir, LEVEL_OVERVIEW), toward(-0.5, 4)),
            ],
            &[],
        ),
    )
    .await;
    assert_eq!(load(store).await.len(), 5);

    // A later segment replaces x (new abstract, vector and tags).
    let mut x_new = with_tags(record(X, LEVEL_FILE), &["v=2"]);
    x_new.abstract_text = "x, second version".into();
    commit_ok(store, &segment(vec![(x_new.clone(), toward(-1.0, 5))], &[])).await;
    let snapshot = load(store).await;
    assert_eq!(snapshot.len(), 5, "a replaced record is counted once");
    assert_eq!(snapshot.records().count(), 5);
    assert_eq!(snapshot.get(&uri(X), LEVEL_FILE), Some(&x_new));
    let hits = search(&snapshot, &Filter::default(), 10, None);
    assert_eq!(hits.iter().filter(|(u, _)| u == X).count(), 1, "x comes back once: {hits:?}");
    assert_eq!(hits.last().map(|(u, s)| (u.as_str(), *s)), Some((X, score(-1.0))), "x scores with its new vector");
    let old_tag = Filter { tags: vec!["v=1".into()], ..Filter::default() };
    assert!(search(&snapshot, &old_tag, 10, None).is_empty(), "the replaced record's tags no longer match");
    assert_eq!(search(&snapshot, &Filter { tags: vec!["v=2".into()], ..Filter::default() }, 10, None).len(), 1);

    // Tombstones remove y and the directory's overview, not its abstract.
    commit_ok(store, &segment(vec![], &[(Y, LEVEL_FILE), (dir, LEVEL_OVERVIEW)])).await;
    let snapshot = load(store).await;
    assert_eq!(snapshot.len(), 3);
    assert!(snapshot.get(&uri(Y), LEVEL_FILE).is_none());
    assert!(snapshot.get(&uri(dir), LEVEL_OVERVIEW).is_none());
    assert!(snapshot.get(&uri(dir), LEVEL_ABSTRACT).is_some(), "a tombstone removes only its level");
    let hits: Vec<String> = search(&snapshot, &Filter::default(), 10, None).into_iter().map(|(u, _)| u).collect();
    assert_eq!(hits, [Z, "viking://resources/.abstract.md", X]);

    // A tombstone of something never indexed changes nothing.
    commit_ok(store, &segment(vec![], &[("viking://resources/never.md", LEVEL_FILE)])).await;
    assert_eq!(load(store).await.len(), 3);

    // A record committed after its tombstone is live again.
    commit_ok(store, &segment(vec![(record(Y, LEVEL_FILE), toward(0.5, 6))], &[])).await;
    let snapshot = load(store).await;
    assert_eq!(snapshot.len(), 4);
    assert!(snapshot.get(&uri(Y), LEVEL_FILE).is_some());

    // An empty segment writes nothing.
    let before = stored_manifest(store).await;
    let returned = commit_ok(store, &segment(vec![], &[])).await;
    assert_eq!(returned, before.0);
    assert_eq!(stored_manifest(store).await, before, "an empty commit leaves the manifest alone");

    assert_eq!(
        live(&load(store).await),
        [
            (X.to_owned(), "x, second version".to_owned()),
            ("viking://resources/.abstract.md".to_owned(), format!("{dir} at level 0")),
            (Y.to_owned(), format!("{Y} at level 2")),
            (Z.to_owned(), format!("{Z} at level 2")),
        ]
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
}

async fn concurrent_writers_lose_nothing(store: &SharedStore) {
    const WRITERS: usize = 16;
    const PER_WRITER: usize = 5;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let store = Arc::clone(store);
        tasks.spawn(async move {
            let rows = (0..PER_WRITER)
                .map(|i| (record(&format!("viking://resources/w{w}/r{i}.md"), LEVEL_FILE), axis(w + i)))
                .collect();
            commit(&store, &account(), &embedder(), &segment(rows, &[]))
                .await
                .unwrap_or_else(|e| panic!("writer {w}: {e}"))
        });
    }
    let mut generations = BTreeSet::new();
    while let Some(joined) = tasks.join_next().await {
        generations.insert(joined.expect("a writer panicked").generation);
    }
    assert_eq!(generations.len(), WRITERS, "every commit got its own generation: {generations:?}");

    let snapshot = load(store).await;
    assert_eq!(snapshot.len(), WRITERS * PER_WRITER, "all records survive");
    for w in 0..WRITERS {
        for i in 0..PER_WRITER {
            let u = uri(&format!("viking://resources/w{w}/r{i}.md"));
            assert!(snapshot.get(&u, LEVEL_FILE).is_some(), "{u} was lost");
        }
    }
    // Every segment the manifest lists exists, and nothing else is left.
    let (manifest, _) = stored_manifest(store).await;
    let mut listed: Vec<String> = manifest.segments.iter().map(|s| s.key.clone()).collect();
    listed.sort();
    assert_eq!(stored_segments(store).await, listed);
}

/// More concurrent writers than [`COMPACT_AT`]: several commits see a long
/// manifest and compact at the same time as other commits land. Whether two
/// of those compactions read the same manifest depends on timing, so this
/// catches the lost-compaction deletion (see
/// [`concurrent_compactions_keep_every_segment`]) only some of the time.
async fn concurrent_writers_past_compact_at_lose_nothing(store: &SharedStore) {
    const WRITERS: usize = COMPACT_AT + 8;
    const PER_WRITER: usize = 2;
    let name = |w: usize, i: usize| format!("viking://resources/p{w}/r{i}.md");
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let store = Arc::clone(store);
        tasks.spawn(async move {
            let rows = (0..PER_WRITER).map(|i| (record(&name(w, i), LEVEL_FILE), axis(w + i))).collect();
            commit(&store, &account(), &embedder(), &segment(rows, &[]))
                .await
                .unwrap_or_else(|e| panic!("writer {w}: {e}"))
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("a writer panicked");
    }
    let (manifest, _) = stored_manifest(store).await;
    for seg in &manifest.segments {
        assert!(store.head(&seg.key).await.is_ok(), "the manifest lists {} but it was deleted: {manifest:?}", seg.key);
    }
    let snapshot = IndexSnapshot::load(store, &account(), None)
        .await
        .unwrap_or_else(|e| panic!("the index no longer loads: {e}; {manifest:?}"));
    assert_eq!(snapshot.len(), WRITERS * PER_WRITER, "all records survive");
    for w in 0..WRITERS {
        for i in 0..PER_WRITER {
            assert!(snapshot.get(&uri(&name(w, i)), LEVEL_FILE).is_some(), "{} was lost", name(w, i));
        }
    }
}

async fn commits_keep_working_through_compaction(store: &SharedStore) {
    let total = COMPACT_AT + 4;
    let name = |i: usize| format!("viking://resources/c/{i}.md");
    let mut segment_keys = BTreeSet::new();
    for i in 0..total {
        let mut rows = vec![(record(&name(i), LEVEL_FILE), axis(i))];
        let mut tombstones = Vec::new();
        let gone_early = name(1);
        let gone_late = name(3);
        match i {
            // Before compaction: a tombstone and a replacement that the
            // merged segment must honour.
            5 => tombstones.push((gone_early.as_str(), LEVEL_FILE)),
            8 => {
                let mut v2 = record(&name(2), LEVEL_FILE);
                v2.abstract_text = "2, second version".into();
                rows.push((v2, toward(0.6, 7)));
            }
            // After compaction: a tombstone over the merged segment.
            i if i == COMPACT_AT + 2 => tombstones.push((gone_late.as_str(), LEVEL_FILE)),
            _ => {}
        }
        let manifest = commit_ok(store, &segment(rows, &tombstones)).await;
        segment_keys.insert(manifest.segments.last().expect("the commit's segment is listed").key.clone());
        let snapshot = load(store).await;
        assert!(snapshot.get(&uri(&name(i)), LEVEL_FILE).is_some(), "record {i} is found right after its commit");
    }
    assert_eq!(segment_keys.len(), total, "every commit wrote its own segment");

    let (manifest, _) = stored_manifest(store).await;
    assert!(manifest.segments.len() < total, "compaction ran: {} segments listed", manifest.segments.len());
    // The commit that listed COMPACT_AT segments merged them into one; the
    // four commits after it each added one.
    assert_eq!(manifest.segments.len(), 1 + (total - COMPACT_AT), "{manifest:?}");
    let mut listed: Vec<String> = manifest.segments.iter().map(|s| s.key.clone()).collect();
    listed.sort();
    assert_eq!(stored_segments(store).await, listed, "replaced segment objects are deleted");

    let snapshot = load(store).await;
    assert_eq!(snapshot.len(), total - 2);
    for i in 0..total {
        let found = snapshot.get(&uri(&name(i)), LEVEL_FILE);
        match i {
            1 | 3 => assert!(found.is_none(), "record {i} was removed"),
            2 => assert_eq!(found.map(|r| r.abstract_text.as_str()), Some("2, second version")),
            _ => assert_eq!(found.map(|r| r.abstract_text.clone()), Some(format!("{} at level 2", name(i)))),
        }
    }
    // Vectors survive compaction: only record 2's new vector is this one.
    let nearest = {
        let query = toward(0.6, 7);
        let filter = Filter::default();
        let params = SearchParams {
            kind: SearchKind::Semantic,
            terms: &[],
            vector: &query,
            filter: &filter,
            limit: 1,
            score_threshold: None,
            decay: None,
        };
        snapshot.search(&params).into_iter().map(|h| h.record.uri.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(nearest, [name(2)]);

    // An explicit compaction merges the rest into one segment.
    compact(store, &account(), &embedder(), None, now_ms()).await.expect("compact");
    let (manifest, _) = stored_manifest(store).await;
    assert_eq!(manifest.segments.len(), 1);
    assert_eq!(stored_segments(store).await, [manifest.segments[0].key.clone()]);
    assert_eq!(manifest.segments[0].tombstones, 0);
    let compacted = load(store).await;
    assert_eq!(live(&compacted), live(&snapshot), "compaction keeps exactly the live records");
}

/// Two compactions of the same manifest build the same merged segment (same
/// content, same key). The one that loses the manifest swap must not delete
/// the segment the winner put in place.
async fn concurrent_compactions_keep_every_segment(store: &SharedStore) {
    const ROUNDS: usize = 6;
    const SEGMENTS: usize = 3;
    for round in 0..ROUNDS {
        for s in 0..SEGMENTS {
            let rows = vec![(record(&format!("viking://resources/r{round}/s{s}.md"), LEVEL_FILE), axis(s))];
            commit_ok(store, &segment(rows, &[])).await;
        }
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..2 {
            let store = Arc::clone(store);
            tasks.spawn(async move { compact(&store, &account(), &embedder(), None, now_ms()).await });
        }
        while let Some(joined) = tasks.join_next().await {
            // A compaction may fail (its segments vanished under it); it must
            // never leave the index broken.
            let _ = joined.expect("a compaction panicked");
        }
        let (manifest, _) = stored_manifest(store).await;
        for seg in &manifest.segments {
            assert!(
                store.head(&seg.key).await.is_ok(),
                "round {round}: the manifest lists segment {} but it was deleted: {manifest:?}",
                seg.key
            );
        }
        let snapshot = IndexSnapshot::load(store, &account(), None)
            .await
            .unwrap_or_else(|e| panic!("round {round}: the index no longer loads after two compactions: {e}"));
        assert_eq!(snapshot.len(), (round + 1) * SEGMENTS, "round {round}");
    }
}

async fn mixing_embedders_is_refused(store: &SharedStore) {
    commit_ok(store, &segment(vec![(record("viking://resources/a.md", LEVEL_FILE), axis(0))], &[])).await;
    let before = stored_manifest(store).await;
    let before_live = live(&load(store).await);

    let other_id = EmbedderInfo { id: "another-model/8".into(), dimension: DIM };
    let other_dim = EmbedderInfo { id: embedder().id, dimension: 16 };
    let mut wide = Segment { dim: 16, ..Segment::default() };
    wide.records.push(record("viking://resources/wide.md", LEVEL_FILE));
    wide.vectors = vec![0.25; 16];
    let narrow = segment(vec![(record("viking://resources/b.md", LEVEL_FILE), axis(1))], &[]);

    for (info, seg, what) in [(&other_id, &narrow, "another id"), (&other_dim, &wide, "same id, another dimension")] {
        match commit(store, &account(), info, seg).await {
            Err(IndexError::EmbedderMismatch { account: a, index, configured }) => {
                assert_eq!(a, "acme");
                assert!(index.contains("test-fixed/8") && index.contains('8'), "{what}: index {index:?}");
                assert!(configured.contains(&info.id), "{what}: configured {configured:?}");
                assert!(configured.contains(&info.dimension.to_string()), "{what}: configured {configured:?}");
            }
            other => panic!("{what}: want EmbedderMismatch, got {other:?}"),
        }
        assert_eq!(stored_manifest(store).await, before, "{what}: the manifest is unchanged");
        assert_eq!(live(&load(store).await), before_live, "{what}: the records are unchanged");
    }
    // Compaction refuses too.
    commit_ok(store, &segment(vec![(record("viking://resources/c.md", LEVEL_FILE), axis(2))], &[])).await;
    let before = stored_manifest(store).await;
    assert!(
        matches!(compact(store, &account(), &other_id, None, now_ms()).await, Err(IndexError::EmbedderMismatch { .. })),
        "compaction with another embedder"
    );
    assert_eq!(stored_manifest(store).await, before, "a refused compaction leaves the manifest alone");
    // The right embedder still commits.
    assert_eq!(load(store).await.len(), 2);
}

async fn cache_reuses_and_revalidates_snapshots(store: &SharedStore) {
    let cache = IndexCache::new(Arc::clone(store), Duration::ZERO, usize::MAX);
    let name = |i: usize| format!("viking://resources/cache/{i}.md");
    let one = |i: usize| segment(vec![(record(&name(i), LEVEL_FILE), axis(i))], &[]);

    // No index yet: an empty snapshot, reused while there still is none.
    let empty = cache.snapshot(&account()).await.expect("snapshot of no index");
    assert!(empty.is_empty() && empty.etag.is_none());
    assert!(Arc::ptr_eq(&empty, &cache.snapshot(&account()).await.expect("again")));

    commit_ok(store, &one(0)).await;
    let s1 = cache.snapshot(&account()).await.expect("snapshot 1");
    assert!(!Arc::ptr_eq(&empty, &s1), "the first commit is seen");
    assert_eq!(s1.len(), 1);
    assert_eq!(s1.etag.as_deref(), Some(stored_manifest(store).await.1.as_str()));
    for _ in 0..3 {
        let again = cache.snapshot(&account()).await.expect("snapshot 1 again");
        assert!(Arc::ptr_eq(&s1, &again), "an unchanged manifest reuses the warm snapshot");
    }

    // Another writer commits: the next call sees it.
    commit_ok(store, &one(1)).await;
    let s2 = cache.snapshot(&account()).await.expect("snapshot 2");
    assert!(!Arc::ptr_eq(&s1, &s2));
    assert_eq!(s2.len(), 2);
    assert!(s2.get(&uri(&name(1)), LEVEL_FILE).is_some());
    assert_eq!(s1.len(), 1, "a snapshot handed out never changes");
    assert!(Arc::ptr_eq(&s2, &cache.snapshot(&account()).await.expect("snapshot 2 again")));

    // Accounts are cached separately.
    let other = AccountId::new("other").expect("valid account id");
    assert!(cache.snapshot(&other).await.expect("other account").is_empty());
    assert!(Arc::ptr_eq(&s2, &cache.snapshot(&account()).await.expect("snapshot 2, once more")));

    // A long revalidation interval: the stale snapshot is returned.
    let lazy = IndexCache::new(Arc::clone(store), Duration::from_secs(3600), usize::MAX);
    let l1 = lazy.snapshot(&account()).await.expect("lazy snapshot");
    assert_eq!(l1.len(), 2);
    commit_ok(store, &one(2)).await;
    for _ in 0..3 {
        let again = lazy.snapshot(&account()).await.expect("lazy again");
        assert!(Arc::ptr_eq(&l1, &again), "within revalidate_after the cached snapshot is trusted");
    }
    assert_eq!(cache.snapshot(&account()).await.expect("eager").len(), 3, "the eager cache sees the commit");

    // A short interval: stale until it expires, then revalidated.
    let window = Duration::from_millis(1500);
    let short = IndexCache::new(Arc::clone(store), window, usize::MAX);
    let before_first = Instant::now();
    let t1 = short.snapshot(&account()).await.expect("short snapshot");
    let after_first = Instant::now();
    assert_eq!(t1.len(), 3);
    commit_ok(store, &one(3)).await;
    if before_first.elapsed() < window {
        let stale = short.snapshot(&account()).await.expect("short, stale");
        assert!(Arc::ptr_eq(&t1, &stale), "before expiry the cached snapshot is returned");
        assert_eq!(stale.len(), 3);
    }
    tokio::time::sleep((after_first + window + Duration::from_millis(200)).saturating_duration_since(Instant::now()))
        .await;
    let fresh = short.snapshot(&account()).await.expect("short, expired");
    assert!(!Arc::ptr_eq(&t1, &fresh), "after expiry the manifest is checked again");
    assert_eq!(fresh.len(), 4);
}

async fn cache_keeps_within_its_memory_bound(store: &SharedStore) {
    let accounts: Vec<AccountId> = ["a1", "a2", "a3"].iter().map(|a| AccountId::new(a).expect("account")).collect();
    for (n, account) in accounts.iter().enumerate() {
        let rows =
            (0..20 + n).map(|i| (record(&format!("viking://resources/m/{i}.md"), LEVEL_FILE), axis(i))).collect();
        commit(store, account, &embedder(), &segment(rows, &[])).await.expect("commit");
    }
    let one = IndexSnapshot::load(store, &accounts[2], None).await.expect("load").memory_bytes();
    assert!(one > 20 * DIM * 4, "the estimate counts the vectors at least: {one}");
    // Room for two accounts' indexes, not three.
    let counting = skald_tests::counting::CountingStore::new(Arc::clone(store));
    let cache = IndexCache::new(Arc::clone(&counting) as SharedStore, Duration::ZERO, one * 2 + one / 2);
    for account in &accounts {
        assert_eq!(
            cache.snapshot(account).await.expect("snapshot").len(),
            20 + accounts.iter().position(|a| a == account).unwrap_or(0)
        );
        assert!(cache.usage().bytes <= cache.usage().max_bytes, "{:?}", cache.usage());
    }
    assert!(cache.usage().bytes > one, "two accounts stay warm: {:?}", cache.usage());
    counting.take();
    // a3 and a2 are warm (a HEAD each); a1, the least recently used, was
    // dropped and loads again (manifest and segment GETs).
    cache.snapshot(&accounts[2]).await.expect("warm");
    cache.snapshot(&accounts[1]).await.expect("warm");
    let ops: Vec<&str> = counting.take().iter().map(|c| c.op).collect();
    assert_eq!(ops, ["HEAD", "HEAD"]);
    cache.snapshot(&accounts[0]).await.expect("reloaded");
    let ops: Vec<&str> = counting.take().iter().map(|c| c.op).collect();
    assert_eq!(ops, ["GET", "GET"], "the evicted account is loaded again");
    // One account alone over the bound is still served.
    let tiny = IndexCache::new(Arc::clone(store), Duration::ZERO, 1);
    assert_eq!(tiny.snapshot(&accounts[0]).await.expect("served").len(), 20);
    assert_eq!(tiny.snapshot(&accounts[1]).await.expect("served").len(), 21);
    assert!(tiny.usage().bytes < one * 2, "only the last account is held: {:?}", tiny.usage());
}

/// One account's index load, held at its manifest read, does not hold up
/// another account's snapshot from the same cache; a second request for
/// the held account waits for that load and shares it.
async fn a_slow_account_load_holds_up_no_other(store: &SharedStore) {
    use skald_tests::faults::{Fault, FaultyStore, Gate, Op, Rule};
    let slow = AccountId::new("slow").expect("account");
    let one = |name: &str| segment(vec![(record(&format!("viking://resources/{name}.md"), LEVEL_FILE), axis(0))], &[]);
    commit(store, &slow, &embedder(), &one("s")).await.expect("commit");
    commit_ok(store, &one("fast")).await;
    let gate = Gate::default();
    let held = Rule::nth(Op::Get, "accounts/slow/index/manifest.json", 1, Fault::Wait(gate.clone()));
    let faults = Arc::new(FaultyStore::new(Arc::clone(store), vec![held]));
    let cache = Arc::new(IndexCache::new(Arc::clone(&faults) as SharedStore, Duration::ZERO, usize::MAX));
    let first = tokio::spawn({
        let (cache, slow) = (Arc::clone(&cache), slow.clone());
        async move { cache.snapshot(&slow).await }
    });
    gate.reached().await;
    let second = tokio::spawn({
        let (cache, slow) = (Arc::clone(&cache), slow.clone());
        async move { cache.snapshot(&slow).await }
    });
    let fast = tokio::time::timeout(Duration::from_secs(5), cache.snapshot(&account()))
        .await
        .expect("another account's snapshot is not held up by the slow load")
        .expect("snapshot");
    assert_eq!(fast.len(), 1);
    gate.open();
    let first = first.await.expect("join").expect("the slow account loads");
    let second = second.await.expect("join").expect("the slow account again");
    assert_eq!(first.len(), 1);
    assert!(Arc::ptr_eq(&first, &second), "the second request shared the first's load");
}

async fn ordered_commits_never_go_back(store: &SharedStore) {
    let node = "viking://resources/ordered/n.md";
    let at = |version: &str| {
        let mut r = record(node, LEVEL_FILE);
        r.source_hash = format!("content {version}");
        r.source_version = Some(version.to_owned());
        segment(vec![(r, axis(1))], &[])
    };
    let removed = |version: &str| {
        let mut s = segment(Vec::new(), &[(node, LEVEL_FILE)]);
        s.tombstones[0].source_version = Some(version.to_owned());
        s
    };
    let hash = |snapshot: &IndexSnapshot| snapshot.get(&uri(node), LEVEL_FILE).map(|r| r.source_hash.clone());

    let start = load(store).await;
    let (_, dropped) = ordered(store, at("01"), &start).await;
    assert_eq!(dropped, 0);
    // Two indexers read the index at the same point; the one that read the
    // newer source (03) commits first, the stale one (02) after it.
    let basis = load(store).await;
    assert_eq!(ordered(store, at("03"), &basis).await.1, 0);
    let (_, dropped) = ordered(store, at("02"), &basis).await;
    assert_eq!(dropped, 1, "the older version is not committed over the newer");
    assert_eq!(hash(&load(store).await).as_deref(), Some("content 03"));
    // Sequencers of different widths compare as padded hex.
    assert_eq!(ordered(store, at("0A"), &load(store).await).await.1, 0);
    assert_eq!(hash(&load(store).await).as_deref(), Some("content 0A"));

    // A removal (0B) wins over a stale read of the file (09), also after a
    // compaction has merged the removal away.
    let basis = load(store).await;
    assert_eq!(ordered(store, removed("0B"), &basis).await.1, 0);
    compact(store, &account(), &embedder(), None, now_ms()).await.expect("compact");
    assert_eq!(stored_manifest(store).await.0.segments.len(), 1);
    let (_, dropped) = ordered(store, at("09"), &basis).await;
    assert_eq!(dropped, 1, "no resurrection of a removed node");
    assert_eq!(hash(&load(store).await), None);
    // A newer source brings it back; an unversioned commit (ingest) always lands.
    assert_eq!(ordered(store, at("0C"), &load(store).await).await.1, 0);
    assert_eq!(hash(&load(store).await).as_deref(), Some("content 0C"));
    let mut ingested = record(node, LEVEL_FILE);
    ingested.source_hash = "ingested".into();
    commit_ok(store, &segment(vec![(ingested, axis(2))], &[])).await;
    assert_eq!(hash(&load(store).await).as_deref(), Some("ingested"));
    assert_eq!(
        ordered(store, at("0D"), &load(store).await).await.1,
        0,
        "any version is newer than an unversioned record"
    );
}

async fn ordered(store: &SharedStore, seg: Segment, basis: &IndexSnapshot) -> (Manifest, usize) {
    skald::index::commit_ordered(store, &account(), &embedder(), seg, basis).await.expect("commit")
}

async fn events_decay_with_age(store: &SharedStore) {
    const DAY: i64 = 86_400;
    let now = 1_800_000_000;
    let window = 3 * DAY;
    let events = "viking://user/u/memories/events/2026";
    let old_event = with_times(record(&format!("{events}/old.md"), LEVEL_FILE), 0, now - window - 7 * DAY);
    let older_event = with_times(record(&format!("{events}/older.md"), LEVEL_FILE), 0, now - window - 14 * DAY);
    let fresh_event = with_times(record(&format!("{events}/fresh.md"), LEVEL_FILE), 0, now - window + 60);
    let edge_event = with_times(record(&format!("{events}/edge.md"), LEVEL_FILE), 0, now - window);
    // Old by creation, fresh by update.
    let created_old = with_times(record(&format!("{events}/created.md"), LEVEL_FILE), now - window - 7 * DAY, now);
    let entity = with_times(
        record("viking://user/u/memories/entities/x.md", LEVEL_FILE),
        now - window - 30 * DAY,
        now - window - 30 * DAY,
    );
    let resource =
        with_times(record("viking://resources/old.md", LEVEL_FILE), now - window - 30 * DAY, now - window - 30 * DAY);
    assert_eq!(old_event.category, Category::Events);
    assert_eq!(entity.category, Category::Entities);
    commit_ok(
        store,
        &segment(
            vec![
                (old_event.clone(), axis(0)),
                (older_event.clone(), axis(0)),
                (fresh_event.clone(), toward(0.5, 1)),
                (edge_event.clone(), toward(0.5, 2)),
                (created_old.clone(), toward(0.5, 3)),
                (entity.clone(), toward(0.2, 4)),
                (resource.clone(), toward(0.0, 5)),
            ],
            &[],
        ),
    )
    .await;
    let snapshot = load(store).await;
    let query = axis(0);
    let all = Filter::default();
    let run = |field, threshold| {
        let decay = EventDecay { now, window_s: window, field };
        let params = SearchParams {
            kind: SearchKind::Semantic,
            terms: &[],
            vector: &query,
            filter: &all,
            limit: 100,
            score_threshold: threshold,
            decay: Some(decay),
        };
        snapshot
            .search(&params)
            .into_iter()
            .map(|h| (h.record.display_uri(), h.score, h.origin_score, h.time_score))
            .collect::<Vec<_>>()
    };

    let hits = run(TimeField::UpdatedAt, None);
    let find = |u: &Record| {
        hits.iter()
            .find(|h| h.0 == u.uri.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{} is missing from {hits:?}", u.uri))
    };
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;

    // 7 days past the window: halved; 14 days: quartered.
    let (_, s, origin, time) = find(&old_event);
    assert!(
        close(s, 0.5) && origin == Some(1.0) && time.is_some_and(|t| close(t, 0.5)),
        "old: {s} {origin:?} {time:?}"
    );
    let (_, s, origin, time) = find(&older_event);
    assert!(
        close(s, 0.25) && origin == Some(1.0) && time.is_some_and(|t| close(t, 0.25)),
        "older: {s} {origin:?} {time:?}"
    );
    // Inside the window (and exactly at its edge): untouched.
    for r in [&fresh_event, &edge_event, &created_old] {
        let (u, s, origin, time) = find(r);
        assert!(close(s, score(0.5)) && origin.is_none() && time.is_none(), "{u}: {s} {origin:?} {time:?}");
    }
    // Not events: untouched, however old.
    let (_, s, origin, time) = find(&entity);
    assert!(close(s, score(0.2)) && origin.is_none() && time.is_none(), "entity: {s} {origin:?} {time:?}");
    let (_, s, origin, time) = find(&resource);
    assert!(close(s, score(0.0)) && origin.is_none() && time.is_none(), "resource: {s} {origin:?} {time:?}");

    // Ranking uses the decayed score: the halved 1.0 (0.5) now ranks below
    // the undecayed 0.75s and the entity's 0.6.
    let order: Vec<&str> = hits.iter().map(|h| h.0.as_str()).collect();
    let pos = |r: &Record| order.iter().position(|u| *u == r.uri.as_str()).expect("present");
    assert!(pos(&fresh_event) < pos(&entity) && pos(&entity) < pos(&old_event), "{order:?}");
    assert!(pos(&old_event) < pos(&older_event), "{order:?}");
    for w in hits.windows(2) {
        assert!(w[0].1 >= w[1].1, "best first: {hits:?}");
    }

    // The threshold applies to the decayed score.
    let above = run(TimeField::UpdatedAt, Some(0.5));
    assert!(above.iter().all(|h| h.0 != old_event.uri.as_str()), "0.5 is not above 0.5: {above:?}");
    assert!(above.iter().any(|h| h.0 == entity.uri.as_str()));

    // Measured from created_at instead.
    let by_created = run(TimeField::CreatedAt, None);
    let created = by_created.iter().find(|h| h.0 == created_old.uri.as_str()).expect("present");
    assert!(close(created.1, score(0.5) * 0.5), "created-at decay: {created:?}");
    assert_eq!(created.2, Some(score(0.5)));
    assert!(created.3.is_some_and(|t| close(t, 0.5)));
    let old = by_created.iter().find(|h| h.0 == old_event.uri.as_str()).expect("present");
    // created_at 0 is ~20 834 days old: decayed to (almost) nothing.
    assert!(old.1 < 1e-100 && old.2 == Some(1.0), "{old:?}");

    // Without decay every score is the plain one.
    let plain = search(&snapshot, &all, 100, None);
    assert_eq!(plain.first().map(|(_, s)| *s), Some(1.0));
}

/// `r` with the keyword terms of `text`.
fn with_words(mut r: Record, text: &str) -> Record {
    r.terms = skald::index::lexical::encode_counts(&[text]);
    r
}

/// Keyword search over several segments: a later segment's record replaces
/// an earlier one's words, a tombstone removes its node's, BM25 counts only
/// live records; the postings are built on the first keyword search and
/// the warm cache counts them.
async fn keyword_search_sees_only_live_records(store: &SharedStore) {
    let a = "viking://resources/k/a.md";
    let b = "viking://resources/k/b.md";
    let c = "viking://resources/k/c.md";
    let first = vec![
        (with_words(record(a, LEVEL_FILE), "zebra crossing"), axis(0)),
        (with_words(record(b, LEVEL_FILE), "zebra stripes"), axis(1)),
        (with_words(record(c, LEVEL_FILE), "lion pride"), axis(2)),
    ];
    commit_ok(store, &segment(first, &[])).await;
    // a is rewritten without "zebra"; b is removed.
    commit_ok(
        store,
        &segment(vec![(with_words(record(a, LEVEL_FILE), "pedestrian crossing"), axis(0))], &[(b, LEVEL_FILE)]),
    )
    .await;
    let snapshot = load(store).await;
    assert_eq!(snapshot.lexical_memory_bytes(), 0, "no postings before a keyword search");
    let keywords = |query: &str| -> Vec<(String, f64)> {
        let none = Filter::default();
        let terms = skald::index::lexical::query_terms(query);
        let params = SearchParams {
            kind: SearchKind::Keywords,
            terms: &terms,
            vector: &[],
            filter: &none,
            limit: 10,
            score_threshold: None,
            decay: None,
        };
        snapshot.search(&params).iter().map(|h| (h.record.uri.to_string(), h.score)).collect()
    };
    assert!(keywords("zebra").is_empty(), "neither the old a nor the removed b: {:?}", keywords("zebra"));
    let crossing = keywords("crossing");
    assert_eq!(crossing.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(), [a]);
    assert!(crossing[0].1 > 0.0 && crossing[0].1 < 1.0, "{crossing:?}");
    assert_eq!(keywords("lion pride").iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(), [c]);
    assert!(snapshot.lexical_memory_bytes() > 0, "built on first use");
    assert_eq!(snapshot.resident_bytes(), snapshot.memory_bytes() + snapshot.lexical_memory_bytes());
}

/// A query of more matching terms than a keyword search scores
/// (`MAX_QUERY_TERMS`, as when an agent sends a whole prompt) keeps the
/// rarest: the one record holding the rare word still comes first.
async fn a_long_keyword_query_keeps_its_rarest_terms(store: &SharedStore) {
    let common: Vec<String> = (0..100).map(|i| format!("common{i}")).collect();
    let mut rows: Vec<(Record, Vec<f32>)> = (0..40)
        .map(|i| {
            (
                with_words(record(&format!("viking://resources/long/{i}.md"), LEVEL_FILE), &common.join(" ")),
                axis(i % DIM),
            )
        })
        .collect();
    let needle = "viking://resources/long/needle.md";
    rows.push((with_words(record(needle, LEVEL_FILE), "needle"), axis(0)));
    commit_ok(store, &segment(rows, &[])).await;
    let snapshot = load(store).await;
    let query = format!("{} needle", common.join(" "));
    let terms = skald::index::lexical::query_terms(&query);
    assert!(terms.len() > skald::index::lexical::MAX_QUERY_TERMS, "the query has more terms than are scored");
    let none = Filter::default();
    let params = SearchParams {
        kind: SearchKind::Keywords,
        terms: &terms,
        vector: &[],
        filter: &none,
        limit: 3,
        score_threshold: None,
        decay: None,
    };
    let hits = snapshot.search(&params);
    assert_eq!(hits.first().map(|h| h.record.uri.as_str()), Some(needle), "the rare word is kept and wins");
    assert!(hits.iter().all(|h| h.score > 0.0 && h.score <= 1.0));
}

/// Given the index as the caller holds it, a compaction reads only the
/// segments committed since (not the whole index again) and writes a
/// merged segment that holds exactly the live records.
async fn a_compaction_reuses_the_index_it_is_given(store: &SharedStore) {
    for s in 0..4 {
        let rows = vec![(record(&format!("viking://resources/reuse/s{s}.md"), LEVEL_FILE), axis(s))];
        commit_ok(store, &segment(rows, &[])).await;
    }
    let held = load(store).await;
    commit_ok(store, &segment(vec![(record("viking://resources/reuse/late.md", LEVEL_FILE), axis(5))], &[])).await;
    let (before, _) = stored_manifest(store).await;
    let late = before.segments.last().expect("a segment").key.clone();

    let counting = skald_tests::counting::CountingStore::new(Arc::clone(store));
    let shared: SharedStore = counting.clone();
    compact(&shared, &account(), &embedder(), Some(&held), now_ms()).await.expect("compact");
    let reads: Vec<String> =
        counting.take().into_iter().filter(|c| c.op == "GET" && c.key.contains("/segments/")).map(|c| c.key).collect();
    assert_eq!(reads, [late], "only the segment committed after the held index is read");

    let (after, _) = stored_manifest(store).await;
    assert_eq!(after.segments.len(), 1);
    assert_eq!(after.segments[0].records, 5);
    let compacted = load(store).await;
    let names: BTreeSet<String> = compacted.records().map(|(r, _)| r.uri.to_string()).collect();
    assert_eq!(names.len(), 5);
    assert!(names.contains("viking://resources/reuse/late.md"));
}

/// A removal's versioned tombstone survives compactions for a week after
/// the first one kept it (a stale read of the node still finds it
/// removed), and the first compaction past the week drops it.
async fn compactions_prune_tombstones_a_week_after_keeping_them(store: &SharedStore) {
    const DAY: i64 = 24 * 3600 * 1000;
    let node = "viking://resources/pruned/n.md";
    let mut r = record(node, LEVEL_FILE);
    r.source_version = Some("01".into());
    commit_ok(store, &segment(vec![(r.clone(), axis(1))], &[])).await;
    let stale = load(store).await;
    let mut removal = segment(Vec::new(), &[(node, LEVEL_FILE)]);
    removal.tombstones[0].source_version = Some("02".into());
    commit_ok(store, &removal).await;
    commit_ok(store, &segment(vec![(record("viking://resources/pruned/other.md", LEVEL_FILE), axis(2))], &[])).await;

    let start = now_ms();
    let removed_at =
        |snapshot: &IndexSnapshot| snapshot.version_of(&uri(node), LEVEL_FILE).flatten().map(str::to_owned);
    compact(store, &account(), &embedder(), None, start).await.expect("compact");
    let (manifest, _) = stored_manifest(store).await;
    assert_eq!((manifest.segments.len(), manifest.segments[0].tombstones), (1, 1));
    // Six days on, another compaction keeps it, stamped with the first time.
    commit_ok(store, &segment(vec![(record("viking://resources/pruned/more.md", LEVEL_FILE), axis(3))], &[])).await;
    compact(store, &account(), &embedder(), None, start + 6 * DAY).await.expect("compact");
    assert_eq!(removed_at(&load(store).await).as_deref(), Some("02"));
    let (_, dropped) = ordered(store, segment(vec![(r.clone(), axis(1))], &[]), &stale).await;
    assert_eq!(dropped, 1, "a stale read of the removed node is still refused");
    // Eight days after the first: gone.
    commit_ok(store, &segment(vec![(record("viking://resources/pruned/last.md", LEVEL_FILE), axis(4))], &[])).await;
    compact(store, &account(), &embedder(), None, start + 8 * DAY).await.expect("compact");
    let (manifest, _) = stored_manifest(store).await;
    assert_eq!((manifest.segments.len(), manifest.segments[0].tombstones), (1, 0));
    let index = load(store).await;
    assert_eq!(index.version_of(&uri(node), LEVEL_FILE), None, "the index no longer knows the node");
    assert_eq!(index.len(), 3);
}
