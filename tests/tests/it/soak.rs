//! A soak test over seeds: concurrent index commits (with their
//! compactions), uploads, deletes and moves indexed by two overlapping
//! indexers, session appends (two writers sharing one session too) and
//! commits, and context-mode searches with dedup, over a store that injects
//! random faults ([`FaultyStore::random`]): writes that land but report a
//! timeout or 412, writes that fail, throttling, truncated and foreign
//! bodies, lagging listings. Writers retry what was not acknowledged, as
//! clients do. At the end, with the faults off, the invariants must hold:
//!
//! - no manifest references a missing segment, and the index loads;
//! - every node's record is the last version its writer had acknowledged,
//!   and every uploaded or moved file is indexed at the content the store
//!   holds (or not at all once deleted or moved away);
//! - every acknowledged message is counted exactly once, readable exactly
//!   once while not archived, and the archives cover the archived ones
//!   back to back; every archived message is in exactly one episode (an
//!   event memory the commit wrote);
//! - commits extract memories through a scripted model (a local server
//!   answering as `model_stub` does): every memory the extraction wrote is
//!   whole, in the user's tree, and cites an archive that exists; every
//!   commit's task ended (completed, or failed with why) or waits
//!   (`pending`, `running`) where a store fault cut it (deployed, the
//!   event's redelivery runs it again);
//! - no request answered 500, and every operation was acknowledged in the
//!   end.
//!
//! Each seed runs on a fresh store and prints one line: the operations
//! run, the faults injected and what was lost (which must be 0). By
//! default a run soaks the fixed seeds and the day's (its date, so CI
//! meets a new one every day); `SKALD_SOAK_SEED` (decimal or `0x` hex)
//! soaks that seed alone, and with `SKALD_SOAK_SEEDS=N` the `N` seeds from
//! it (loop mode). A failure names each failed seed and how to run it
//! again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use skald::identity::AccountId;
use skald::index::record::LEVEL_FILE;
use skald::index::{IndexSnapshot, Segment, commit, manifest_key};
use skald::indexer::{Change, apply};
use skald::store::{PutMode, SharedStore};
use skald::uri::VikingUri;
use skald_tests::faults::{Fault, FaultyStore, Rates};
use skald_tests::fixture::{
    ACCOUNT, DEFAULT_CORPUS, EMBED_DIMENSION, Handler, SEARCH_PATH, SESSIONS_PATH, TempDir, app_over_store,
    app_with_corpus_in, call, file_record_of, session_key, sessions_get, sessions_post, store_json, tree_key,
};

/// The seeds every run soaks, besides the day's.
const FIXED_SEEDS: [u64; 3] = [0x5EED_2026_1203, 0x5EED_0000_0001, 0x5EED_0000_0002];
const WRITERS: usize = 3;
const NODES_PER_WRITER: usize = 3;
const COMMITS_PER_WRITER: usize = 24;
const APPENDERS: usize = 2;
const MESSAGES_PER_APPENDER: usize = 30;
const SEARCHES: usize = 30;
/// Files the uploader changes, and its uploads, deletes and moves in all.
const FILES: usize = 4;
const UPLOADS: usize = 40;
/// Commits of the sessions, spread over the appends.
const SESSION_COMMITS: usize = 8;
/// Attempts a writer makes before it gives an operation up (counted as
/// lost when it was never acknowledged).
const RETRIES: usize = 40;
/// Attempts per session commit. A commit is some twenty to forty store
/// calls (the archive, an episode per exchange, their index commit, the
/// meta, the task), each failing at the injected rate, and an attempt gets
/// through only when all of them do: one attempt in ten for a small
/// session, fewer than one in forty for the shared session when a loaded
/// machine lets its appenders get ahead of the commits (seed
/// 0x5eed00000002 in a full CI run gave up after 100 attempts, each a 503
/// from an injected backend fault). 400 attempts leave such a commit a
/// chance below 1 in 10,000 of being given up.
const COMMIT_RETRIES: usize = 400;

const RATES: Rates = Rates { write_per_mille: 60, read_per_mille: 30, corrupt_per_mille: 10, list_per_mille: 20 };

/// A seed as written: decimal or `0x` hex.
fn parse_seed(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16).ok(),
        None => text.parse().ok(),
    }
}

/// The day's seed: today's UTC date as the number `YYYYMMDD`.
fn day_seed() -> u64 {
    let today = time::OffsetDateTime::now_utc().date();
    let (year, month, day) = (today.year().unsigned_abs(), u32::from(u8::from(today.month())), u32::from(today.day()));
    u64::from(year * 10_000 + month * 100 + day)
}

/// The seeds this run soaks: `SKALD_SOAK_SEED` alone, or `SKALD_SOAK_SEEDS`
/// seeds from it (from the first fixed seed when it is unset); by default
/// the fixed seeds and the day's.
fn seeds() -> Vec<u64> {
    let from = std::env::var("SKALD_SOAK_SEED").ok().map(|s| parse_seed(&s).expect("SKALD_SOAK_SEED is a number"));
    let count = std::env::var("SKALD_SOAK_SEEDS").ok().map(|s| s.parse::<u64>().expect("SKALD_SOAK_SEEDS is a count"));
    match (from, count) {
        (from, Some(n)) => {
            let from = from.unwrap_or(FIXED_SEEDS[0]);
            (0..n).map(|i| from.wrapping_add(i)).collect()
        }
        (Some(seed), None) => vec![seed],
        (None, None) => FIXED_SEEDS.iter().copied().chain([day_seed()]).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_local() {
    soak_seeds("local").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_s3() {
    soak_seeds("s3").await;
}

/// Soaks every seed of [`seeds`] on a fresh store of `backend` (`local` or
/// `s3`), one after the other, and fails naming each seed that lost
/// anything.
async fn soak_seeds(backend: &str) {
    let seeds = seeds();
    let mut failed = Vec::new();
    for &seed in &seeds {
        let dir = TempDir::new("soak");
        let store: SharedStore = match backend {
            "local" => Arc::new(skald::store::local::LocalStore::open(dir.path()).expect("open the local store")),
            _ => Arc::new(skald_tests::moto::s3_store(&format!("soak-{seed:x}")).await),
        };
        if let Err(lost) = soak(store, backend, seed).await {
            eprintln!("soak ({backend}, seed {seed:#x}) lost:\n{}", lost.join("\n"));
            failed.push(seed);
        }
    }
    eprintln!("soak ({backend}): {} seeds, {} failed {failed:#x?}", seeds.len(), failed.len());
    assert!(
        failed.is_empty(),
        "soak ({backend}): seeds {failed:#x?} lost data (above); run one again with SKALD_SOAK_SEED=<seed> cargo test -p \
         skald-tests --test it soak::soak_{backend}"
    );
}

/// A record of node `node` of writer `writer` at `version`.
fn versioned(writer: usize, node: usize, version: usize) -> Segment {
    let uri = format!("viking://resources/soak/w{writer}/n{node}.md");
    let abstract_text = format!("soak node {node} of writer {writer}, version {version}");
    let record = file_record_of(&uri, &abstract_text, &format!("w{writer}-n{node}-v{version}"));
    let mut vector = vec![0.0; EMBED_DIMENSION];
    vector[(writer * 7 + node) % EMBED_DIMENSION] = 1.0;
    Segment {
        dim: EMBED_DIMENSION,
        records: vec![record],
        vectors: vector,
        tombstones: Vec::new(),
        ..Segment::default()
    }
}

/// A client's pause before retry `attempt` (from 1): a millisecond more
/// each time, at most 20, as a client backs off rather than spin on a
/// contended key.
async fn back_off(attempt: usize) {
    tokio::time::sleep(std::time::Duration::from_millis(attempt.min(20) as u64)).await;
}

#[derive(Default)]
struct Tally {
    operations: AtomicU64,
    retries: AtomicU64,
    /// The operations retried until the soak gave up, with their last
    /// answer.
    given_up: std::sync::Mutex<Vec<String>>,
    server_errors: AtomicU64,
    unavailable: AtomicU64,
}

impl Tally {
    fn give_up(&self, what: String) {
        if let Ok(mut given_up) = self.given_up.lock() {
            given_up.push(what);
        }
    }
}

/// One soak of `seed` over `inner`: its summary line printed, and what was
/// lost (never empty) as the error.
async fn soak(inner: SharedStore, backend: &str, seed: u64) -> Result<(), Vec<String>> {
    // The corpus goes in before the faults start.
    let (_seeded, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], inner.clone()).await;
    let faulty = Arc::new(FaultyStore::random(inner.clone(), RATES, seed));
    // Commits extract memories with a scripted model (one entity per user
    // message, every candidate added).
    let model = skald_tests::model_server::ModelServer::start().await;
    let config = skald::config::Config {
        identity: skald::config::IdentityConfig {
            mode: skald::config::IdentityMode::Dev,
            ..skald::config::IdentityConfig::default()
        },
        extraction: Some(model.openai_model("soak")),
        ..skald::config::Config::default()
    };
    let embedder: Arc<dyn skald::embed::Embedder> =
        Arc::new(skald::embed::hashed::HashedEmbedder::new(EMBED_DIMENSION));
    let app = Arc::new(skald_tests::fixture::build_app(config, Arc::clone(&faulty) as SharedStore, embedder));
    let tally = Arc::new(Tally::default());
    let account = AccountId::new(ACCOUNT).expect("account");

    // Index writers: each commits versions of its own nodes, retrying a
    // commit until it is acknowledged.
    let writers = (0..WRITERS).map(|w| {
        let (app, tally, account) = (Arc::clone(&app), Arc::clone(&tally), account.clone());
        tokio::spawn(async move {
            let mut acknowledged: BTreeMap<String, String> = BTreeMap::new();
            for c in 0..COMMITS_PER_WRITER {
                let node = c % NODES_PER_WRITER;
                let segment = versioned(w, node, c);
                tally.operations.fetch_add(1, Ordering::Relaxed);
                let mut last = None;
                for attempt in 0..RETRIES {
                    if attempt > 0 {
                        back_off(attempt).await;
                    }
                    match commit(&app.store, &account, &app.embedder_info(), &segment).await {
                        Ok(_) => {
                            last = None;
                            break;
                        }
                        Err(e) => last = Some(e.to_string()),
                    }
                    tally.retries.fetch_add(1, Ordering::Relaxed);
                }
                match last {
                    None => {
                        let record = &segment.records[0];
                        acknowledged.insert(record.uri.to_string(), record.source_hash.clone());
                    }
                    Some(error) => tally.give_up(format!("index commit {c} of writer {w}: {error}")),
                }
            }
            acknowledged
        })
    });
    let writers: Vec<_> = writers.collect();

    // Session appenders: each its own session, and all of them one shared
    // session; a message not acknowledged is sent again with its id.
    let appenders: Vec<_> = (0..APPENDERS)
        .map(|a| {
            let (app, tally) = (Arc::clone(&app), Arc::clone(&tally));
            tokio::spawn(async move {
                let mut acknowledged: Vec<(String, String)> = Vec::new();
                for m in 0..MESSAGES_PER_APPENDER {
                    let session = if m % 3 == 0 { "shared".to_owned() } else { format!("own-{a}") };
                    let id = format!("a{a}-m{m}");
                    let body = json!({"id": id, "role": "user", "content": format!("message {m} of appender {a}")});
                    tally.operations.fetch_add(1, Ordering::Relaxed);
                    let mut last = None;
                    for attempt in 0..RETRIES {
                        if attempt > 0 {
                            back_off(attempt).await;
                        }
                        let reply = sessions_post(&app, &format!("{SESSIONS_PATH}/{session}/messages"), &body).await;
                        match reply.status {
                            200 => {
                                last = None;
                                break;
                            }
                            500 => {
                                tally.server_errors.fetch_add(1, Ordering::Relaxed);
                                eprintln!("500 on append: {}", reply.text);
                            }
                            _ => {}
                        }
                        last = Some(format!("{} {}", reply.status, reply.text));
                        tally.retries.fetch_add(1, Ordering::Relaxed);
                    }
                    match last {
                        None => acknowledged.push((session, id)),
                        Some(answer) => tally.give_up(format!("append of {id} to session {session}: {answer}")),
                    }
                }
                acknowledged
            })
        })
        .collect();

    // Files written straight to the store (as users upload them), each
    // change notified with an increasing sequencer to a queue that two
    // indexers drain in small batches, in whatever order they get to them.
    let (notify, queue) = tokio::sync::mpsc::unbounded_channel::<Change>();
    let queue = Arc::new(tokio::sync::Mutex::new(queue));
    let uploader = {
        let inner = inner.clone();
        tokio::spawn(async move {
            let mut sequencer = 0x1000_u64;
            let mut notify_change = |key: String, step: usize| {
                sequencer += 1;
                let _ = notify.send(Change { key, at: 1_000 + step as i64, version: Some(format!("{sequencer:X}")) });
            };
            for step in 0..UPLOADS {
                let file = step % FILES;
                let key = tree_key(&format!("resources/soak-idx/f{file}.md"));
                let held = inner.get(&key).await.ok();
                match (step % 5, step % 7, held) {
                    (4, _, _) => inner.delete(&key).await.expect("a user's delete"),
                    // A move: the file under a new name, then the old name removed.
                    (_, 3, Some(object)) => {
                        let to = tree_key(&format!("resources/soak-idx/moved/f{file}.md"));
                        inner.put(&to, object.body, PutMode::Overwrite).await.expect("a user's move");
                        inner.delete(&key).await.expect("a user's move");
                        notify_change(to, step);
                    }
                    _ => {
                        let text = format!("# Summary\nSoak file {file} at upload {step}.\n");
                        inner.put(&key, bytes::Bytes::from(text), PutMode::Overwrite).await.expect("a user's upload");
                    }
                }
                notify_change(key, step);
                tokio::time::sleep(std::time::Duration::from_millis(3)).await;
            }
        })
    };
    let indexers: Vec<_> = (0..2)
        .map(|_| {
            let (app, tally, queue) = (Arc::clone(&app), Arc::clone(&tally), Arc::clone(&queue));
            tokio::spawn(async move {
                loop {
                    let mut batch = Vec::new();
                    {
                        let mut queue = queue.lock().await;
                        match queue.recv().await {
                            Some(change) => batch.push(change),
                            None => break,
                        }
                        while batch.len() < 3 {
                            match queue.try_recv() {
                                Ok(change) => batch.push(change),
                                Err(_) => break,
                            }
                        }
                    }
                    tally.operations.fetch_add(1, Ordering::Relaxed);
                    let mut last = None;
                    for attempt in 0..RETRIES {
                        if attempt > 0 {
                            back_off(attempt).await;
                        }
                        match apply(&app, &batch).await {
                            Ok(_) => {
                                last = None;
                                break;
                            }
                            Err(e) => last = Some(e.to_string()),
                        }
                        tally.retries.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Some(error) = last {
                        let keys: Vec<&str> = batch.iter().map(|c| c.key.as_str()).collect();
                        tally.give_up(format!("indexer batch {keys:?}: {error}"));
                    }
                }
            })
        })
        .collect();

    // A committer: archives the sessions while they are appended to,
    // retrying a commit until it is answered (archived or skipped).
    let committer = {
        let (app, tally) = (Arc::clone(&app), Arc::clone(&tally));
        tokio::spawn(async move {
            for c in 0..SESSION_COMMITS {
                tokio::time::sleep(std::time::Duration::from_millis(15)).await;
                let session = if c % 2 == 0 { "shared".to_owned() } else { format!("own-{}", c % APPENDERS) };
                let path = format!("{SESSIONS_PATH}/{session}/commit");
                tally.operations.fetch_add(1, Ordering::Relaxed);
                let mut last = None;
                for attempt in 0..COMMIT_RETRIES {
                    if attempt > 0 {
                        back_off(attempt).await;
                    }
                    let reply = sessions_post(&app, &path, &json!({})).await;
                    match reply.status {
                        // A session no message has reached yet.
                        200 | 404 => {
                            last = None;
                            break;
                        }
                        500 => {
                            tally.server_errors.fetch_add(1, Ordering::Relaxed);
                            eprintln!("500 on commit: {}", reply.text);
                        }
                        _ => {}
                    }
                    last = Some(format!("{} {}", reply.status, reply.text));
                    tally.retries.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(answer) = last {
                    tally.give_up(format!("commit {c} of session {session}: {answer}"));
                }
            }
        })
    };

    // A searcher: context mode with dedup on the shared session.
    let searcher = {
        let (app, tally) = (Arc::clone(&app), Arc::clone(&tally));
        tokio::spawn(async move {
            for _ in 0..SEARCHES {
                tally.operations.fetch_add(1, Ordering::Relaxed);
                let body =
                    json!({"query": "search service", "mode": "context", "session_id": "shared", "dedup_turns": 2});
                let reply = call(&app, Handler::Search, "POST", SEARCH_PATH, &[], Some(&body)).await;
                match reply.status {
                    200 => {}
                    503 => {
                        tally.unavailable.fetch_add(1, Ordering::Relaxed);
                    }
                    status => {
                        tally.server_errors.fetch_add(u64::from(status >= 500), Ordering::Relaxed);
                        eprintln!("search answered {status}: {}", reply.text);
                    }
                }
            }
        })
    };

    let mut expected_records: BTreeMap<String, String> = BTreeMap::new();
    for writer in writers {
        expected_records.extend(writer.await.expect("a writer"));
    }
    let mut acknowledged: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for appender in appenders {
        for (session, id) in appender.await.expect("an appender") {
            acknowledged.entry(session).or_default().push(id);
        }
    }
    searcher.await.expect("the searcher");
    committer.await.expect("the committer");
    uploader.await.expect("the uploader");
    for indexer in indexers {
        indexer.await.expect("an indexer");
    }

    // The faults stop here: what is left is judged through the plain store.
    let judge = app_over_store(inner.clone());
    let mut lost = Vec::new();
    judge_index(&inner, &account, &expected_records, &mut lost).await;
    let (mut messages, mut archives) = (0, 0);
    for (session, ids) in &acknowledged {
        archives += judge_session(&judge, &inner, session, ids, &mut lost).await;
        messages += ids.len();
    }
    let extracted = judge_extraction(&inner, &mut lost).await;
    let injected = faulty.injected();
    let mut by_fault: BTreeMap<String, usize> = BTreeMap::new();
    for fault in &injected {
        let name = match &fault.fault {
            Fault::Latency(_) => "Latency".to_owned(),
            other => format!("{other:?}"),
        };
        *by_fault.entry(name).or_default() += 1;
    }
    if injected.len() <= 20 {
        lost.push(format!("the soak injected only {} faults", injected.len()));
    }
    let given_up = tally.given_up.lock().map(|g| g.clone()).unwrap_or_default();
    let server_errors = tally.server_errors.load(Ordering::Relaxed);
    lost.extend(given_up.iter().map(|op| format!("never acknowledged: {op}")));
    let given_up = given_up.len();
    if server_errors > 0 {
        lost.push(format!("{server_errors} requests answered 500"));
    }
    eprintln!(
        "soak ({backend}, seed {seed:#x}): {} operations ({} index commits, {UPLOADS} uploads, deletes and moves \
         through the indexers, {messages} acknowledged messages, {SESSION_COMMITS} session commits making {archives} \
         archives and {extracted}, {SEARCHES} searches), {} store calls, {} faults injected {by_fault:?}, {} retries, {given_up} given up, {} searches \
         answered 503, {server_errors} answers 500, lost: {}",
        tally.operations.load(Ordering::Relaxed),
        WRITERS * COMMITS_PER_WRITER,
        faulty.calls(),
        injected.len(),
        tally.retries.load(Ordering::Relaxed),
        tally.unavailable.load(Ordering::Relaxed),
        lost.len(),
    );
    if lost.is_empty() { Ok(()) } else { Err(lost) }
}

/// The memories extraction wrote, after the soak: each whole (a title, a
/// statement and a fields block that decodes), citing archives that
/// exist; the commits' tasks ended, or wait where a store fault cut them.
/// Returns what extraction made, for the report.
async fn judge_extraction(inner: &SharedStore, lost: &mut Vec<String>) -> String {
    let entities = inner.list("accounts/default/tree/user/default/memories/entities/").await.expect("list entities");
    let mut extracted = 0;
    for object in &entities {
        let text = String::from_utf8_lossy(&inner.get(&object.key).await.expect("a memory").body).into_owned();
        if !text.contains("<!-- MEMORY_FIELDS") {
            continue; // the corpus's own
        }
        extracted += 1;
        let (said, fields) = skald::memory::extract::split_memory(&text);
        if !said.starts_with("# ") || !said.contains("The user said: ") || fields.sources.is_empty() {
            lost.push(format!("memory {} is not whole: {text:?}", object.key));
        }
        for source in &fields.sources {
            let Ok(archive) = VikingUri::parse(&source.archive) else {
                lost.push(format!("memory {} cites {:?}", object.key, source.archive));
                continue;
            };
            let claim = format!("accounts/default/tree/{}/.meta.json", archive.path());
            if inner.get(&claim).await.is_err() {
                lost.push(format!("memory {} cites archive {} that does not exist", object.key, source.archive));
            }
        }
    }
    let others = inner.list("accounts/default/tree/user/").await.expect("list users");
    for object in others.iter().filter(|o| !o.key.starts_with("accounts/default/tree/user/default/")) {
        let body = inner.get(&object.key).await.expect("a file").body;
        if String::from_utf8_lossy(&body).contains("<!-- MEMORY_FIELDS") {
            lost.push(format!("extraction wrote outside the user's tree: {}", object.key));
        }
    }
    let tasks = inner.list("accounts/default/tasks/default/").await.expect("list tasks");
    let (mut completed, mut failed, mut waiting) = (0, 0, 0);
    for object in &tasks {
        let task = store_json(inner, &object.key).await.expect("a task");
        match task["status"].as_str() {
            Some("completed") => completed += 1,
            Some("failed") if task["error"].as_str().is_some_and(|e| !e.is_empty()) => failed += 1,
            // Cut by a store fault before it was claimed, or before its
            // last write: a worker (the extractor, on the task's event)
            // runs it, or takes it over once it is stale.
            Some("pending" | "running") => waiting += 1,
            _ => lost.push(format!("task {} did not end: {task}", object.key)),
        }
    }
    format!("{extracted} extracted memories (tasks: {completed} completed, {failed} failed, {waiting} waiting)")
}

/// The index after the soak: whole (every segment the manifest lists is
/// there, and it loads), each writer's nodes at their last acknowledged
/// commit, each uploaded file at what the store holds, the corpus intact.
async fn judge_index(
    inner: &SharedStore,
    account: &AccountId,
    expected_records: &BTreeMap<String, String>,
    lost: &mut Vec<String>,
) {
    let manifest: skald::index::Manifest =
        serde_json::from_slice(&inner.get(&manifest_key(account)).await.expect("the manifest").body).expect("json");
    for segment in &manifest.segments {
        if inner.head(&segment.key).await.is_err() {
            lost.push(format!("the manifest lists {}, which is gone", segment.key));
        }
    }
    let snapshot = match IndexSnapshot::load(inner, account, None).await {
        Ok(snapshot) => snapshot,
        Err(e) => return lost.push(format!("the index does not load: {e}")),
    };
    for (uri, hash) in expected_records {
        let uri = VikingUri::parse(uri).expect("uri");
        let got = snapshot.get(&uri, LEVEL_FILE).map(|r| r.source_hash.clone());
        if got.as_deref() != Some(hash.as_str()) {
            lost.push(format!("{uri}: index holds {got:?}, the last acknowledged commit was {hash}"));
        }
    }
    // The index equals what the store holds: each uploaded file at its
    // current content, or absent once deleted or moved away.
    for f in 0..FILES {
        for path in [format!("resources/soak-idx/f{f}.md"), format!("resources/soak-idx/moved/f{f}.md")] {
            let stored = match inner.get(&tree_key(&path)).await {
                Ok(object) => Some(skald::ingest::source_hash(&object.body)),
                Err(_) => None,
            };
            let uri = VikingUri::parse(&format!("viking://{path}")).expect("uri");
            let indexed = snapshot.get(&uri, LEVEL_FILE).map(|r| r.source_hash.clone());
            if indexed != stored {
                lost.push(format!("{uri}: the index holds {indexed:?}, the store {stored:?}"));
            }
        }
    }
    let corpus = DEFAULT_CORPUS.iter().filter(|(path, _)| !path.contains("/.")).count();
    if snapshot.len() < corpus {
        lost.push(format!("the corpus is no longer indexed: {} records", snapshot.len()));
    }
}

/// Session `session` after the soak, given the message ids acknowledged
/// to it (`ids`, every message sent): each counted once, the ones not yet
/// archived readable exactly once, the archives back to back from the
/// first message, and every other one in a slot they passed. Returns the
/// archives it has.
async fn judge_session(
    judge: &Arc<skald::app::App>,
    inner: &SharedStore,
    session: &str,
    ids: &[String],
    lost: &mut Vec<String>,
) -> u64 {
    let info = sessions_get(judge, &format!("{SESSIONS_PATH}/{session}")).await;
    let context = sessions_get(judge, &format!("{SESSIONS_PATH}/{session}/context")).await;
    if (info.status, context.status) != (200, 200) {
        lost.push(format!("session {session} does not read: {} {}", info.text, context.text));
        return 0;
    }
    let readable: Vec<String> = context.json["result"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_owned())
        .collect();
    let count = |name: &str| info.json["result"][name].as_u64().expect("a count");
    let (live, total, commits) = (count("message_count"), count("total_message_count"), count("commit_count"));
    if total != ids.len() as u64 {
        lost.push(format!("session {session}: {total} messages counted, {} acknowledged", ids.len()));
    }
    if live != readable.len() as u64 {
        lost.push(format!("session {session}: message_count {live}, {} readable", readable.len()));
    }
    let unique: BTreeSet<&String> = readable.iter().collect();
    if unique.len() != readable.len() {
        lost.push(format!("session {session}: a message is readable twice: {readable:?}"));
    }
    if let Some(stranger) = readable.iter().find(|id| !ids.contains(id)) {
        lost.push(format!("session {session}: message {stranger} was never acknowledged"));
    }
    // The archives, back to back from the first message; the messages
    // they passed, as their slots hold them.
    let mut mark = 0;
    for n in 1..=commits {
        let claim = format!("history/{}/.meta.json", skald::sessions::archive_name(n));
        let Some(range) = store_json(inner, &session_key("default", session, &claim)).await else {
            lost.push(format!("session {session}: archive {n} has no claim"));
            continue;
        };
        let (from, to) = (range["from_seq"].as_u64().expect("from"), range["to_seq"].as_u64().expect("to"));
        if from != mark {
            lost.push(format!("session {session}: archive {n} starts at {from}, the one before ends at {mark}"));
        }
        mark = to;
    }
    let slots = inner.list(&session_key("default", session, "messages/")).await.expect("list the slots");
    let mut archived = BTreeSet::new();
    let mut said = Vec::new();
    for slot in slots {
        let seq: u64 = slot.key.rsplit('/').next().and_then(|n| n.strip_suffix(".json")?.parse().ok()).expect("a slot");
        if seq < mark {
            let message = store_json(inner, &slot.key).await.expect("an archived slot");
            archived.insert(message["id"].as_str().expect("id").to_owned());
            said.push(message["content"].as_str().expect("content").to_owned());
        }
    }
    // What the archives passed is memory: each archived message's line in
    // exactly one of the session's episodes.
    let events = inner.list("accounts/default/tree/user/default/memories/events/").await.expect("list the events");
    let mut episodes = String::new();
    for object in
        events.iter().filter(|o| o.key.rsplit('/').next().is_some_and(|n| n.starts_with(&format!("{session}-"))))
    {
        let body = inner.get(&object.key).await.expect("an episode").body;
        episodes.push_str(&String::from_utf8_lossy(&body));
    }
    for content in &said {
        let times = episodes.matches(&format!(": {content}\n")).count();
        if times != 1 {
            lost.push(format!("session {session}: archived message {content:?} is in {times} episodes"));
        }
    }
    for id in ids {
        if !unique.contains(id) && !archived.contains(id) {
            lost.push(format!("session {session}: acknowledged message {id} is neither live nor archived"));
        }
    }
    commits
}
