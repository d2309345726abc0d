//! Nothing is lost under the faults a deployed S3 store meets: writes that
//! land but report a timeout or a 412, writes that fail before landing,
//! throttling, truncated or foreign bodies, missing objects. Each check
//! runs the library's own writes (index commits and compactions, session
//! appends, batches and the dedup ledger) through
//! [`skald_tests::faults::FaultyStore`] over a local store and over S3 on
//! moto, and asserts what a user would notice: no manifest references a
//! missing segment; every acknowledged message is readable exactly once;
//! counts equal readable messages; clients get short errors without store
//! keys.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{DIM, account, embedder, now_ms};
use bytes::Bytes;
use serde_json::{Value, json};
use skald::index::{COMPACT_AT, IndexSnapshot, Manifest, Segment, commit, compact, manifest_key};
use skald::store::{PutMode, SharedStore};
use skald_tests::faults::{Fault, FaultyStore, Gate, Op, Rule};
use skald_tests::fixture::{
    DEFAULT_CORPUS, Handler, SEARCH_PATH, SESSIONS_PATH, app_over_store, app_with_corpus_in, call, file_record_of,
    session_key, sessions_get, sessions_post,
};

// Runs each check against both backends: `local::<check>` and
// `s3::<check>`. Every check takes the store under the faults.
skald_tests::on_both_stores!(worker_threads = 4;
    an_ambiguous_commit_lists_its_segment_once,
    an_ambiguous_commit_compacted_before_its_read_back_is_not_listed_again,
    an_ambiguous_compaction_keeps_its_merged_segment,
    a_compaction_that_cannot_read_back_deletes_nothing,
    a_failed_manifest_write_commits_nothing,
    an_ambiguous_meta_write_keeps_the_message,
    an_ambiguous_slot_claim_is_read_back,
    a_failed_append_leaves_no_visible_orphan,
    a_retried_batch_applies_nothing_twice,
    a_batch_that_fails_midway_says_what_it_applied,
    a_batch_is_cut_at_the_deadline_and_says_so,
    a_corrupt_meta_degrades_dedup_and_never_answers_500,
    an_ambiguous_ledger_write_keeps_the_turn,
    a_missing_segment_answers_503_without_keys,
    a_truncated_manifest_read_is_read_again,
    store_failures_reach_the_client_without_keys,
    read_backs_cost_a_round_trip_only_after_an_unknown_outcome,
    a_move_that_fails_while_copying_moves_nothing,
    a_garbled_episode_list_fails_the_commit_rather_than_leave_duplicates,
);

// ---------------------------------------------------------------- helpers

/// A one-record segment for `viking://resources/{name}.md`.
fn one_record(name: &str) -> Segment {
    let uri = format!("viking://resources/{name}.md");
    let record = file_record_of(&uri, &format!("{name} abstract"), &format!("hash of {name}"));
    let mut vector = vec![0.0; DIM];
    vector[name.len() % DIM] = 1.0;
    Segment { dim: DIM, records: vec![record], vectors: vector, tombstones: Vec::new(), ..Segment::default() }
}

fn faulty(store: SharedStore, rules: Vec<Rule>) -> Arc<FaultyStore> {
    Arc::new(FaultyStore::new(store, rules))
}

fn shared(store: &Arc<FaultyStore>) -> SharedStore {
    Arc::clone(store) as SharedStore
}

/// The manifest as stored.
async fn manifest(store: &SharedStore) -> Manifest {
    let object = store.get(&manifest_key(&account())).await.expect("get the manifest");
    serde_json::from_slice(&object.body).expect("the manifest decodes")
}

/// The invariant every index write keeps: each segment the manifest lists
/// exists, no segment is listed twice, and the index loads.
async fn assert_index_whole(store: &SharedStore) -> IndexSnapshot {
    let manifest = manifest(store).await;
    let mut keys: Vec<&str> = manifest.segments.iter().map(|s| s.key.as_str()).collect();
    for key in &keys {
        store.head(key).await.unwrap_or_else(|e| panic!("the manifest lists {key}, which is gone: {e}"));
    }
    let listed = keys.len();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), listed, "a segment is listed twice: {:?}", manifest.segments);
    IndexSnapshot::load(store, &account(), None).await.expect("the index loads")
}

fn live_uris(snapshot: &IndexSnapshot) -> Vec<String> {
    let mut uris: Vec<String> = snapshot.records().map(|(r, _)| r.uri.to_string()).collect();
    uris.sort();
    uris
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("n{i:02}")).collect()
}

fn uris_of(names: &[String]) -> Vec<String> {
    let mut uris: Vec<String> = names.iter().map(|n| format!("viking://resources/{n}.md")).collect();
    uris.sort();
    uris
}

/// The session's state as a client sees it: `GET /sessions/{id}`'s
/// `message_count` and the ids of the messages its context returns.
async fn session_view(app: &Arc<skald::app::App>, id: &str) -> (u64, Vec<String>) {
    let info = sessions_get(app, &format!("{SESSIONS_PATH}/{id}")).await;
    assert_eq!(info.status, 200, "{}", info.text);
    let context = sessions_get(app, &format!("{SESSIONS_PATH}/{id}/context")).await;
    assert_eq!(context.status, 200, "{}", context.text);
    let ids = context.json["result"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_owned())
        .collect();
    (info.json["result"]["message_count"].as_u64().expect("count"), ids)
}

/// [`session_view`] once two reads in a row agree and the count matches
/// the messages (a write cut by a deadline may land after the answer);
/// the last read after 3 s.
async fn settled_view(app: &Arc<skald::app::App>, id: &str) -> (u64, Vec<String>) {
    let mut last = session_view(app, id).await;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = session_view(app, id).await;
        if now == last && now.0 == now.1.len() as u64 {
            return now;
        }
        last = now;
    }
    last
}

fn message(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": text})
}

async fn append(app: &Arc<skald::app::App>, session: &str, id: &str) -> skald_tests::fixture::Reply {
    sessions_post(app, &format!("{SESSIONS_PATH}/{session}/messages"), &message(id, &format!("text of {id}"))).await
}

#[track_caller]
fn assert_no_internals(text: &str) {
    for leak in ["accounts/", "dispatch failure", "SlowDown", ".seg", "manifest.json", "meta.json"] {
        assert!(!text.contains(leak), "the client was told {leak:?}: {text}");
    }
}

// ---------------------------------------------------------------- index

async fn an_ambiguous_commit_lists_its_segment_once(store: SharedStore) {
    for (i, fault) in [Fault::LandThenTimeout, Fault::LandThenConflict].into_iter().enumerate() {
        let faults = faulty(store.clone(), vec![Rule::nth(Op::Put, "manifest.json", 1, fault.clone())]);
        let name = format!("a{i}");
        let before = faults.calls();
        let manifest = commit(&shared(&faults), &account(), &embedder(), &one_record(&name))
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: the commit landed, so it succeeds: {e}"));
        assert_eq!(faults.injected().len(), 1, "{fault:?} was injected");
        assert!(manifest.segments.iter().any(|s| s.records == 1));
        let snapshot = assert_index_whole(&store).await;
        let committed: Vec<String> = (0..=i).map(|j| format!("a{j}")).collect();
        assert_eq!(live_uris(&snapshot), uris_of(&committed), "{fault:?}");
        // The happy path's 3 calls (manifest get, segment put, manifest
        // put) and one read-back that decides.
        assert_eq!(faults.calls() - before, 4, "{fault:?}");
    }
}

/// A commit whose manifest write lands unacknowledged, and a compaction
/// that merges (and deletes) its segment before the commit reads the
/// manifest back: the commit finds it landed, and does not list its
/// deleted segment again.
async fn an_ambiguous_commit_compacted_before_its_read_back_is_not_listed_again(store: SharedStore) {
    commit(&store, &account(), &embedder(), &one_record("before")).await.expect("commit");
    for (i, fault) in [Fault::LandThenTimeout, Fault::LandThenConflict].into_iter().enumerate() {
        let gate = Gate::default();
        let faults = faulty(
            store.clone(),
            vec![
                Rule::nth(Op::Put, "manifest.json", 1, fault.clone()),
                // The read-back that decides the write's outcome (the 1st
                // read is the commit's own).
                Rule::nth(Op::Get, "manifest.json", 2, Fault::Wait(gate.clone())),
            ],
        );
        let name = format!("compacted{i}");
        let writer = {
            let (faults, name) = (shared(&faults), name.clone());
            tokio::spawn(async move { commit(&faults, &account(), &embedder(), &one_record(&name)).await })
        };
        gate.reached().await;
        compact(&store, &account(), &embedder(), None, now_ms()).await.expect("compact");
        gate.open();
        writer.await.expect("the writer").unwrap_or_else(|e| panic!("{fault:?}: the commit landed: {e}"));
        let manifest = manifest(&store).await;
        assert_eq!(manifest.segments.len(), 1, "{fault:?}: only the merged segment: {:?}", manifest.segments);
        let snapshot = assert_index_whole(&store).await;
        let mut expected = vec!["before".to_owned()];
        expected.extend((0..=i).map(|j| format!("compacted{j}")));
        assert_eq!(live_uris(&snapshot), uris_of(&expected), "{fault:?}");
    }
}

async fn an_ambiguous_compaction_keeps_its_merged_segment(store: SharedStore) {
    // Round 0 compacts 16 segments, round 1 its merged one and 15 more.
    let all = names(COMPACT_AT * 2 - 1);
    for (round, fault) in [Fault::LandThenConflict, Fault::LandThenTimeout].into_iter().enumerate() {
        let faults = faulty(store.clone(), Vec::new());
        let shared = shared(&faults);
        let (from, to) = if round == 0 { (0, COMPACT_AT) } else { (COMPACT_AT, all.len()) };
        let batch = &all[from..to];
        for (i, name) in batch.iter().enumerate() {
            if i + 1 == batch.len() {
                // This commit's own manifest put is the 1st from here; its
                // compaction's is the 2nd.
                faults.push(Rule::nth(Op::Put, "manifest.json", 2, fault.clone()));
            }
            commit(&shared, &account(), &embedder(), &one_record(name)).await.expect("commit");
        }
        assert_eq!(faults.injected().len(), 1, "{fault:?} hit the compaction's manifest write");
        let manifest = manifest(&store).await;
        assert_eq!(manifest.segments.len(), 1, "{fault:?}: the compaction landed: {:?}", manifest.segments);
        let snapshot = assert_index_whole(&store).await;
        assert_eq!(live_uris(&snapshot), uris_of(&all[..to]), "{fault:?}");
        let segments = store.list(&format!("accounts/{}/index/segments/", account())).await.expect("list");
        assert_eq!(segments.len(), 1, "{fault:?}: the replaced segments were deleted, the merged one kept");
    }
}

async fn a_compaction_that_cannot_read_back_deletes_nothing(store: SharedStore) {
    let all = names(COMPACT_AT);
    let faults = faulty(store.clone(), Vec::new());
    let shared = shared(&faults);
    for (i, name) in all.iter().enumerate() {
        if i + 1 == COMPACT_AT {
            faults.push(Rule::calls(Op::Put, "manifest.json", 2, 2, Fault::LandThenTimeout));
            // Every read-back of the compaction fails: its outcome stays unknown.
            faults.push(Rule::calls(Op::Get, "manifest.json", 3, u64::MAX, Fault::SlowDown));
        }
        commit(&shared, &account(), &embedder(), &one_record(name)).await.expect("the commit itself landed");
    }
    faults.clear();
    let snapshot = assert_index_whole(&store).await;
    assert_eq!(live_uris(&snapshot), uris_of(&all));
}

async fn a_failed_manifest_write_commits_nothing(store: SharedStore) {
    commit(&store, &account(), &embedder(), &one_record("first")).await.expect("commit");
    let faults = faulty(store.clone(), vec![Rule::every(Op::Put, "manifest.json", Fault::FailBeforeLanding)]);
    let err = commit(&shared(&faults), &account(), &embedder(), &one_record("second")).await;
    assert!(err.is_err(), "a write that never lands is an error: {err:?}");
    let snapshot = assert_index_whole(&store).await;
    assert_eq!(live_uris(&snapshot), ["viking://resources/first.md"]);
    faults.clear();
    commit(&shared(&faults), &account(), &embedder(), &one_record("second")).await.expect("a retry commits");
    assert_eq!(live_uris(&assert_index_whole(&store).await).len(), 2);
}

// ---------------------------------------------------------------- sessions

async fn an_ambiguous_meta_write_keeps_the_message(store: SharedStore) {
    for (i, fault) in [Fault::LandThenConflict, Fault::LandThenTimeout].into_iter().enumerate() {
        let session = format!("meta-{i}");
        // The session's create is the 1st meta put; the append's update the 2nd.
        let pattern = format!("sessions/{session}/meta.json");
        let faults = faulty(store.clone(), vec![Rule::nth(Op::Put, &pattern, 2, fault.clone())]);
        let app = app_over_store(shared(&faults));
        let reply = append(&app, &session, "m1").await;
        assert_eq!(reply.status, 200, "{fault:?}: {}", reply.text);
        assert_eq!(reply.json["result"]["added"], true, "{fault:?}");
        assert_eq!(faults.injected().len(), 1, "{fault:?}");
        assert_eq!(session_view(&app, &session).await, (1, vec!["m1".to_owned()]), "{fault:?}");
        let slot = store.head(&session_key("default", &session, "messages/0000000000.json")).await;
        assert!(slot.is_ok(), "{fault:?}: the slot the meta records is kept");
        // A retry of the same message changes nothing.
        let again = append(&app, &session, "m1").await;
        assert_eq!(again.json["result"]["added"], false);
        assert_eq!(session_view(&app, &session).await, (1, vec!["m1".to_owned()]));
    }
}

async fn an_ambiguous_slot_claim_is_read_back(store: SharedStore) {
    for (i, fault) in [Fault::LandThenConflict, Fault::LandThenTimeout].into_iter().enumerate() {
        let session = format!("slot-{i}");
        let faults = faulty(store.clone(), vec![Rule::nth(Op::Put, &format!("{session}/messages/"), 1, fault.clone())]);
        let app = app_over_store(shared(&faults));
        let reply = append(&app, &session, "m1").await;
        assert_eq!((reply.status, &reply.json["result"]["added"]), (200, &json!(true)), "{fault:?}: {}", reply.text);
        let slots = store.list(&session_key("default", &session, "messages/")).await.expect("list");
        assert_eq!(slots.len(), 1, "{fault:?}: one slot claimed, not two: {slots:?}");
        assert_eq!(session_view(&app, &session).await, (1, vec!["m1".to_owned()]));
    }
}

async fn a_failed_append_leaves_no_visible_orphan(store: SharedStore) {
    let session = "orphan";
    let faults = faulty(store.clone(), Vec::new());
    let app = app_over_store(shared(&faults));
    assert_eq!(append(&app, session, "a").await.status, 200);
    faults.push(Rule::every(Op::Put, &format!("{session}/meta.json"), Fault::FailBeforeLanding));
    let failed = append(&app, session, "b").await;
    assert_eq!(failed.status, 503, "{}", failed.text);
    assert_no_internals(&failed.text);
    assert!(failed.json["error"]["request_id"].as_str().is_some_and(|id| !id.is_empty()), "{}", failed.text);
    faults.clear();
    // The failed append's slot is in the store, and nobody sees it.
    let slots = store.list(&session_key("default", session, "messages/")).await.expect("list");
    assert_eq!(slots.len(), 2, "{slots:?}");
    assert_eq!(session_view(&app, session).await, (1, vec!["a".to_owned()]));
    assert_eq!(append(&app, session, "c").await.status, 200);
    assert_eq!(session_view(&app, session).await, (2, vec!["a".to_owned(), "c".to_owned()]));
    // The client retries b: appended once.
    let retried = append(&app, session, "b").await;
    assert_eq!(retried.json["result"]["added"], true, "{}", retried.text);
    assert_eq!(append(&app, session, "b").await.json["result"]["added"], false);
    assert_eq!(session_view(&app, session).await, (3, vec!["a".into(), "c".into(), "b".into()]));
    // A commit archives exactly what the client saw.
    let committed = sessions_post(&app, &format!("{SESSIONS_PATH}/{session}/commit"), &json!({})).await;
    assert_eq!(committed.json["result"]["archived_message_count"], 3, "{}", committed.text);
    assert_eq!(session_view(&app, session).await, (0, Vec::new()));
    let slots = store.list(&session_key("default", session, "messages/")).await.expect("list");
    assert_eq!(slots.len(), 3, "the commit deleted the failed append's slot: {slots:?}");
}

async fn a_retried_batch_applies_nothing_twice(store: SharedStore) {
    let faults = faulty(store.clone(), vec![Rule::every(Op::Put, "batched/meta.json", Fault::LandThenConflict)]);
    let app = app_over_store(shared(&faults));
    let batch = json!({"messages": (0..5).map(|i| message(&format!("b{i}"), "text")).collect::<Vec<_>>()});
    let path = format!("{SESSIONS_PATH}/batched/messages/batch");
    let first = sessions_post(&app, &path, &batch).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!((&first.json["result"]["added"], &first.json["result"]["applied"]), (&json!(5), &json!(5)));
    let again = sessions_post(&app, &path, &batch).await;
    assert_eq!((&again.json["result"]["added"], &again.json["result"]["applied"]), (&json!(0), &json!(5)));
    let ids: Vec<String> = (0..5).map(|i| format!("b{i}")).collect();
    assert_eq!(session_view(&app, "batched").await, (5, ids));
}

/// A batch whose third message cannot be written answers what it applied
/// (the first two), not an error; sent again once the store is back, it
/// applies the rest once.
async fn a_batch_that_fails_midway_says_what_it_applied(store: SharedStore) {
    let app = app_over_store(store.clone());
    assert_eq!(append(&app, "midway", "m-first").await.status, 200);
    // The batch's first two meta updates land; every later one fails.
    let failing = Rule::calls(Op::Put, "midway/meta.json", 3, u64::MAX, Fault::FailBeforeLanding);
    let faulted = app_over_store(shared(&faulty(store.clone(), vec![failing])));
    let batch = json!({"messages": (0..4).map(|i| message(&format!("h{i}"), "text")).collect::<Vec<_>>()});
    let path = format!("{SESSIONS_PATH}/midway/messages/batch");
    let cut = sessions_post(&faulted, &path, &batch).await;
    assert_eq!(cut.status, 200, "{}", cut.text);
    let result = &cut.json["result"];
    assert_eq!((&result["applied"], &result["added"], &result["truncated"]), (&json!(2), &json!(2), &json!(true)));
    assert_eq!(result["message_count"], 3, "{}", cut.text);
    let again = sessions_post(&app, &path, &batch).await;
    assert_eq!((&again.json["result"]["applied"], &again.json["result"]["added"]), (&json!(4), &json!(2)));
    let ids: Vec<String> = ["m-first", "h0", "h1", "h2", "h3"].map(str::to_owned).to_vec();
    assert_eq!(session_view(&app, "midway").await, (5, ids));
}

async fn a_batch_is_cut_at_the_deadline_and_says_so(store: SharedStore) {
    let faults =
        faulty(store.clone(), vec![Rule::every(Op::Put, "slow/messages/", Fault::Latency(Duration::from_millis(150)))]);
    let app = app_over_store(shared(&faults));
    let batch = json!({"messages": (0..20).map(|i| message(&format!("s{i}"), "text")).collect::<Vec<_>>()});
    let path = format!("{SESSIONS_PATH}/slow/messages/batch");
    let started = std::time::Instant::now();
    let cut = call(&app, Handler::Sessions, "POST", &path, &[("X-Client-Timeout-Ms", "1200")], Some(&batch)).await;
    assert!(started.elapsed() < Duration::from_millis(1200), "answered within the client's deadline");
    assert_eq!(cut.status, 200, "{}", cut.text);
    let applied = cut.json["result"]["applied"].as_u64().expect("applied");
    assert!((1..20).contains(&applied), "{}", cut.text);
    assert_eq!(cut.json["result"]["truncated"], true);
    assert_eq!(cut.json["result"]["message_count"], applied);
    // The append the deadline cut has an unknown outcome: its write may
    // still land (after the answer, so wait until the session settles),
    // so the session holds the `applied` messages and at most that one
    // more — never a gap, never out of order.
    let (count, seen) = settled_view(&app, "slow").await;
    assert!(count == applied || count == applied + 1, "count {count}, applied {applied}");
    let expected: Vec<String> = (0..count).map(|i| format!("s{i}")).collect();
    assert_eq!(seen, expected, "the first messages, in order");
    // The client sends the whole batch again: each message once.
    let rest = sessions_post(&app, &path, &batch).await;
    assert_eq!(rest.json["result"]["truncated"], false, "{}", rest.text);
    assert_eq!(rest.json["result"]["added"].as_u64(), Some(20 - count));
    let all: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
    assert_eq!(session_view(&app, "slow").await, (20, all));
}

async fn a_corrupt_meta_degrades_dedup_and_never_answers_500(store: SharedStore) {
    let (app, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;
    assert_eq!(append(&app, "broken", "m1").await.status, 200);
    let key = session_key("default", "broken", "meta.json");
    store.put(&key, Bytes::from_static(b"{\"session_id\": \"bro"), PutMode::Overwrite).await.expect("corrupt it");
    let body = json!({"query": "search service", "mode": "context", "session_id": "broken", "dedup_turns": 3});
    let reply = call(&app, Handler::Search, "POST", SEARCH_PATH, &[], Some(&body)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["result"]["stats"]["dedup"]["status"], "write_failed", "{}", reply.text);
    assert!(!reply.json["result"]["rendered"].as_str().unwrap_or_default().is_empty());
    let info = sessions_get(&app, &format!("{SESSIONS_PATH}/broken")).await;
    assert_eq!(info.status, 503, "{}", info.text);
    assert_no_internals(&info.text);
}

async fn an_ambiguous_ledger_write_keeps_the_turn(store: SharedStore) {
    let faults = faulty(store.clone(), Vec::new());
    let (app, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], shared(&faults)).await;
    assert_eq!(append(&app, "ledger", "m1").await.status, 200);
    faults.push(Rule::nth(Op::Put, ".recall_log.json", 1, Fault::LandThenConflict));
    let body = json!({"query": "search service", "mode": "context", "session_id": "ledger", "dedup_turns": 3});
    let reply = call(&app, Handler::Search, "POST", SEARCH_PATH, &[], Some(&body)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(faults.injected().len(), 1);
    assert_eq!(reply.json["result"]["stats"]["dedup"]["status"], "new", "{}", reply.text);
    let served: Vec<&str> =
        reply.json["result"]["entries"].as_array().expect("entries").iter().filter_map(|e| e["uri"].as_str()).collect();
    let ledger = skald_tests::fixture::store_json(&store, &session_key("default", "ledger", ".recall_log.json"))
        .await
        .expect("the ledger landed");
    for uri in served {
        assert!(ledger["entries"].get(uri).is_some(), "{uri} is recorded: {ledger}");
    }
}

// ---------------------------------------------------------------- reads and errors

async fn a_missing_segment_answers_503_without_keys(store: SharedStore) {
    let (app, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;
    let manifest_key = format!("accounts/{}/index/manifest.json", skald_tests::fixture::ACCOUNT);
    let manifest: Manifest =
        serde_json::from_slice(&store.get(&manifest_key).await.expect("manifest").body).expect("json");
    store.delete(&manifest.segments[0].key).await.expect("delete a segment");
    let reply = call(&app, Handler::Find, "POST", "/api/v1/search/find", &[], Some(&json!({"query": "search"}))).await;
    assert_eq!(reply.status, 503, "{}", reply.text);
    assert_eq!(reply.json["error"]["code"], "UNAVAILABLE");
    assert_no_internals(&reply.text);
}

async fn a_truncated_manifest_read_is_read_again(store: SharedStore) {
    let faults = faulty(store.clone(), Vec::new());
    let (app, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], shared(&faults)).await;
    for fault in [Fault::TruncatedBody, Fault::ForeignBody] {
        faults.push(Rule::nth(Op::Get, "manifest.json", 1, fault.clone()));
        // A fresh app: its cache has no snapshot yet, so it reads the manifest.
        let app = app_over_store(Arc::clone(&app.store));
        let reply =
            call(&app, Handler::Find, "POST", "/api/v1/search/find", &[], Some(&json!({"query": "search"}))).await;
        assert_eq!(reply.status, 200, "{fault:?}: {}", reply.text);
        faults.clear();
    }
    assert_eq!(faults.injected().len(), 2);
}

async fn store_failures_reach_the_client_without_keys(store: SharedStore) {
    let faults = faulty(store.clone(), Vec::new());
    let (app, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], shared(&faults)).await;
    faults.push(Rule::every(Op::Any, "", Fault::SlowDown));
    let find = call(&app, Handler::Find, "POST", "/api/v1/search/find", &[], Some(&json!({"query": "search"}))).await;
    let info = sessions_get(&app, &format!("{SESSIONS_PATH}/anything")).await;
    for reply in [find, info] {
        assert_eq!(reply.status, 503, "{}", reply.text);
        assert_eq!(reply.json["error"]["code"], "UNAVAILABLE");
        assert_eq!(reply.json["error"]["message"], "the store is unavailable; retry");
        assert_no_internals(&reply.text);
    }
}

/// The figures BENCHMARKS.md quotes: store calls per write on the happy
/// path and after each kind of unknown outcome.
async fn read_backs_cost_a_round_trip_only_after_an_unknown_outcome(store: SharedStore) {
    let faults = faulty(store.clone(), Vec::new());
    let app = app_over_store(shared(&faults));
    assert_eq!(append(&app, "costs", "m0").await.status, 200);
    let mut figures = Vec::new();
    let cases: [(&str, Option<Rule>); 5] = [
        ("happy path", None),
        ("slot put answered 412", Some(Rule::nth(Op::Put, "costs/messages/", 1, Fault::LandThenConflict))),
        ("slot put timed out", Some(Rule::nth(Op::Put, "costs/messages/", 1, Fault::LandThenTimeout))),
        ("meta put answered 412", Some(Rule::nth(Op::Put, "costs/meta.json", 1, Fault::LandThenConflict))),
        ("meta put timed out", Some(Rule::nth(Op::Put, "costs/meta.json", 1, Fault::LandThenTimeout))),
    ];
    for (i, (what, rule)) in cases.into_iter().enumerate() {
        faults.clear();
        faults.extend(rule);
        let before = faults.calls();
        let reply = append(&app, "costs", &format!("m{}", i + 1)).await;
        assert_eq!((reply.status, &reply.json["result"]["added"]), (200, &json!(true)), "{what}: {}", reply.text);
        figures.push((format!("append, {what}"), faults.calls() - before));
    }
    for (i, fault) in [None, Some(Fault::LandThenConflict), Some(Fault::LandThenTimeout)].into_iter().enumerate() {
        faults.clear();
        faults.extend(fault.clone().map(|f| Rule::nth(Op::Put, "manifest.json", 1, f)));
        let before = faults.calls();
        commit(&shared(&faults), &account(), &embedder(), &one_record(&format!("c{i}"))).await.expect("commit");
        figures.push((format!("commit, {fault:?}"), faults.calls() - before));
    }
    eprintln!("store calls per write: {figures:?}");
    let calls: Vec<u64> = figures.iter().map(|(_, n)| *n).collect();
    // An append: meta GET, slot PUT, meta PUT; a commit: manifest GET,
    // segment PUT, manifest PUT. Each unknown outcome adds one GET.
    assert_eq!(calls, [3, 4, 4, 4, 4, 3, 4, 4], "{figures:?}");
}

/// `fs/mv` of a directory: a copy that fails (the second file's put)
/// undoes the copies made, so every file is where it was and the
/// destination is empty; a removal that fails leaves the move complete at
/// the destination, says which original is left, and loses nothing.
async fn a_move_that_fails_while_copying_moves_nothing(store: SharedStore) {
    let faults = faulty(store.clone(), Vec::new());
    let app = app_over_store(shared(&faults));
    let write = |name: &'static str| {
        let app = Arc::clone(&app);
        async move {
            let body = json!({"uri": format!("viking://~/trip/{name}"), "content": format!("{name} says hello")});
            call(&app, Handler::Content, "POST", "/api/v1/content/write", &[], Some(&body)).await
        }
    };
    for name in ["a.md", "b.md", "c.md"] {
        assert_eq!(write(name).await.status, 200);
    }
    let files = |prefix: &'static str| {
        let store = store.clone();
        async move {
            let mut keys: Vec<String> = store
                .list(&format!("accounts/default/tree/user/default/{prefix}/"))
                .await
                .expect("list")
                .into_iter()
                .map(|m| m.key.rsplit('/').next().unwrap_or_default().to_owned())
                .collect();
            keys.sort();
            keys
        }
    };
    let mv = json!({"from_uri": "viking://~/trip", "to_uri": "viking://~/archive/trip"});
    faults.push(Rule::nth(Op::Put, "archive/trip/b.md", 1, Fault::FailBeforeLanding));
    let failed = call(&app, Handler::Content, "POST", "/api/v1/fs/mv", &[], Some(&mv)).await;
    assert_eq!(failed.status, 503, "{}", failed.text);
    assert_no_internals(&failed.text);
    assert_eq!(files("trip").await, ["a.md", "b.md", "c.md"]);
    assert!(files("archive/trip").await.is_empty(), "the copies made stay: {:?}", files("archive/trip").await);
    faults.clear();

    faults.push(Rule::nth(Op::Delete, "trip/c.md", 1, Fault::FailBeforeLanding));
    let half = call(&app, Handler::Content, "POST", "/api/v1/fs/mv", &[], Some(&mv)).await;
    assert_eq!(half.status, 409, "{}", half.text);
    assert!(half.text.contains("viking://user/default/trip/c.md"), "{}", half.text);
    faults.clear();
    assert_eq!(files("archive/trip").await, ["a.md", "b.md", "c.md"]);
    assert_eq!(files("trip").await, ["c.md"]);
}

/// The live episodes' list (`archive_000/.episodes.json`) names what a
/// commit must remove once it archives those messages: read garbled twice,
/// the commit fails (503) rather than take it for empty and leave the old
/// live episodes beside the archive's; its retry then leaves every message
/// in exactly one episode.
async fn a_garbled_episode_list_fails_the_commit_rather_than_leave_duplicates(store: SharedStore) {
    let session = "garbled";
    let faults = faulty(store.clone(), Vec::new());
    let app = app_over_store(shared(&faults));
    let commit = |keep: u64| {
        let app = Arc::clone(&app);
        async move {
            let body = json!({"keep_recent_count": keep});
            sessions_post(&app, &format!("{SESSIONS_PATH}/{session}/commit"), &body).await
        }
    };
    for id in ["m1", "m2", "m3", "m4"] {
        assert_eq!(append(&app, session, id).await.status, 200);
    }
    assert_eq!(commit(10).await.json["result"]["reason"], "all_within_keep_window");
    for id in ["m5", "m6"] {
        assert_eq!(append(&app, session, id).await.status, 200);
    }
    faults.push(Rule::every(Op::Get, "archive_000/.episodes.json", Fault::ForeignBody));
    let failed = commit(2).await;
    assert_eq!(failed.status, 503, "{}", failed.text);
    assert_no_internals(&failed.text);
    faults.clear();
    let landed = commit(2).await;
    assert_eq!(landed.json["result"]["archived_message_count"], 4, "{}", landed.text);
    let events = store.list("accounts/default/tree/user/default/memories/events/").await.expect("list the events");
    let mut text = String::new();
    for object in events.iter().filter(|o| o.key.rsplit('/').next().is_some_and(|n| n.starts_with(session))) {
        text.push_str(&String::from_utf8_lossy(&store.get(&object.key).await.expect("an episode").body));
    }
    for id in ["m1", "m2", "m3", "m4", "m5", "m6"] {
        assert_eq!(text.matches(&format!(": text of {id}\n")).count(), 1, "{id} in: {text}");
    }
}
