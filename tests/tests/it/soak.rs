//! A soak test with a fixed seed: concurrent index commits (with their
//! compactions), uploads indexed by two overlapping indexers, session
//! appends (two writers sharing one session too) and context-mode searches
//! with dedup, over a store that injects random
//! faults ([`FaultyStore::random`]): writes that land but report a timeout
//! or 412, writes that fail, throttling, truncated and foreign bodies,
//! lagging listings. Writers retry what was not acknowledged, as clients
//! do. At the end, with the faults off, the invariants must hold:
//!
//! - no manifest references a missing segment, and the index loads;
//! - every node's record is the last version its writer had acknowledged,
//!   and every uploaded file is indexed at the content the store holds;
//! - every acknowledged message is readable exactly once, and each
//!   session's count equals its readable messages;
//! - no request answered 500.
//!
//! It prints the operations run, the faults injected and what was lost
//! (which must be 0). `SKALD_SOAK_SEED` replaces the seed.

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
    app_with_corpus_in, call, file_record_of, sessions_get, sessions_post,
};

const SEED: u64 = 0x5EED_2026_1203;
const WRITERS: usize = 3;
const NODES_PER_WRITER: usize = 3;
const COMMITS_PER_WRITER: usize = 24;
const APPENDERS: usize = 2;
const MESSAGES_PER_APPENDER: usize = 30;
const SEARCHES: usize = 30;
/// Files the uploader changes, and its uploads and deletes in all.
const FILES: usize = 4;
const UPLOADS: usize = 40;
/// Attempts a writer makes before it gives an operation up (counted as
/// lost when it was never acknowledged).
const RETRIES: usize = 40;

const RATES: Rates = Rates { write_per_mille: 60, read_per_mille: 30, corrupt_per_mille: 10, list_per_mille: 20 };

fn seed() -> u64 {
    std::env::var("SKALD_SOAK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(SEED)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_local() {
    let dir = TempDir::new("soak");
    let store: SharedStore = Arc::new(skald::store::local::LocalStore::open(dir.path()).expect("open the local store"));
    soak(store, "local").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_s3() {
    let store: SharedStore = Arc::new(skald_tests::moto::s3_store("soak").await);
    soak(store, "s3").await;
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

#[derive(Default)]
struct Tally {
    operations: AtomicU64,
    retries: AtomicU64,
    given_up: AtomicU64,
    server_errors: AtomicU64,
    unavailable: AtomicU64,
}

async fn soak(inner: SharedStore, backend: &str) {
    let seed = seed();
    // The corpus goes in before the faults start.
    let (_seeded, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], inner.clone()).await;
    let faulty = Arc::new(FaultyStore::random(inner.clone(), RATES, seed));
    let app = app_over_store(Arc::clone(&faulty) as SharedStore);
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
                let mut done = false;
                for _ in 0..RETRIES {
                    if commit(&app.store, &account, &app.embedder_info(), &segment).await.is_ok() {
                        done = true;
                        break;
                    }
                    tally.retries.fetch_add(1, Ordering::Relaxed);
                }
                if done {
                    let record = &segment.records[0];
                    acknowledged.insert(record.uri.to_string(), record.source_hash.clone());
                } else {
                    tally.given_up.fetch_add(1, Ordering::Relaxed);
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
                    let mut done = false;
                    for _ in 0..RETRIES {
                        let reply = sessions_post(&app, &format!("{SESSIONS_PATH}/{session}/messages"), &body).await;
                        match reply.status {
                            200 => {
                                done = true;
                                break;
                            }
                            500 => {
                                tally.server_errors.fetch_add(1, Ordering::Relaxed);
                                eprintln!("500 on append: {}", reply.text);
                            }
                            _ => {}
                        }
                        tally.retries.fetch_add(1, Ordering::Relaxed);
                    }
                    if done {
                        acknowledged.push((session, id));
                    } else {
                        tally.given_up.fetch_add(1, Ordering::Relaxed);
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
            for step in 0..UPLOADS {
                let path = format!("resources/soak-idx/f{}.md", step % FILES);
                let key = format!("accounts/{ACCOUNT}/tree/{path}");
                if step % 5 == 4 {
                    inner.delete(&key).await.expect("a user's delete");
                } else {
                    let text = format!("# Summary\nSoak file {} at upload {step}.\n", step % FILES);
                    inner.put(&key, bytes::Bytes::from(text), PutMode::Overwrite).await.expect("a user's upload");
                }
                let version = Some(format!("{:X}", 0x1000 + step));
                let _ = notify.send(Change { key, at: 1_000 + step as i64, version });
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
                    let mut done = false;
                    for _ in 0..RETRIES {
                        if apply(&app, &batch).await.is_ok() {
                            done = true;
                            break;
                        }
                        tally.retries.fetch_add(1, Ordering::Relaxed);
                    }
                    if !done {
                        tally.given_up.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();

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
    uploader.await.expect("the uploader");
    for indexer in indexers {
        indexer.await.expect("an indexer");
    }

    // The faults stop here: what is left is judged through the plain store.
    let judge = app_over_store(inner.clone());
    let mut lost = Vec::new();
    let manifest: skald::index::Manifest =
        serde_json::from_slice(&inner.get(&manifest_key(&account)).await.expect("the manifest").body).expect("json");
    for segment in &manifest.segments {
        if inner.head(&segment.key).await.is_err() {
            lost.push(format!("the manifest lists {}, which is gone", segment.key));
        }
    }
    let snapshot = IndexSnapshot::load(&inner, &account, None).await.expect("the index loads");
    for (uri, hash) in &expected_records {
        let uri = VikingUri::parse(uri).expect("uri");
        let got = snapshot.get(&uri, LEVEL_FILE).map(|r| r.source_hash.clone());
        if got.as_deref() != Some(hash.as_str()) {
            lost.push(format!("{uri}: index holds {got:?}, the last acknowledged commit was {hash}"));
        }
    }
    // The index equals what the store holds: each uploaded file at its
    // current content, or absent once deleted.
    for f in 0..FILES {
        let path = format!("resources/soak-idx/f{f}.md");
        let stored = match inner.get(&format!("accounts/{ACCOUNT}/tree/{path}")).await {
            Ok(object) => Some(skald::ingest::source_hash(&object.body)),
            Err(_) => None,
        };
        let uri = VikingUri::parse(&format!("viking://{path}")).expect("uri");
        let indexed = snapshot.get(&uri, LEVEL_FILE).map(|r| r.source_hash.clone());
        if indexed != stored {
            lost.push(format!("{uri}: the index holds {indexed:?}, the store {stored:?}"));
        }
    }
    let corpus = DEFAULT_CORPUS.iter().filter(|(path, _)| !path.contains("/.")).count();
    assert!(snapshot.len() >= corpus, "the corpus is still indexed: {} records", snapshot.len());
    let mut messages = 0;
    for (session, ids) in &acknowledged {
        let info = sessions_get(&judge, &format!("{SESSIONS_PATH}/{session}")).await;
        let context = sessions_get(&judge, &format!("{SESSIONS_PATH}/{session}/context")).await;
        assert_eq!((info.status, context.status), (200, 200), "{} {}", info.text, context.text);
        let readable: Vec<String> = context.json["result"]["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["id"].as_str().expect("id").to_owned())
            .collect();
        let count = info.json["result"]["message_count"].as_u64().expect("count");
        if count != readable.len() as u64 {
            lost.push(format!("session {session}: message_count {count}, {} readable", readable.len()));
        }
        let unique: BTreeSet<&String> = readable.iter().collect();
        if unique.len() != readable.len() {
            lost.push(format!("session {session}: a message is readable twice: {readable:?}"));
        }
        for id in ids {
            if !unique.contains(id) {
                lost.push(format!("session {session}: acknowledged message {id} is not readable"));
            }
        }
        messages += ids.len();
    }
    let injected = faulty.injected();
    let mut by_fault: BTreeMap<String, usize> = BTreeMap::new();
    for fault in &injected {
        let name = match &fault.fault {
            Fault::Latency(_) => "Latency".to_owned(),
            other => format!("{other:?}"),
        };
        *by_fault.entry(name).or_default() += 1;
    }
    eprintln!(
        "soak ({backend}, seed {seed:#x}): {} operations ({} index commits, {UPLOADS} uploads through the indexers, {messages} acknowledged messages, {SEARCHES} searches), {} store calls, {} faults injected {by_fault:?}, {} retries, {} given up, {} searches answered 503, {} answers 500, lost: {}",
        tally.operations.load(Ordering::Relaxed),
        WRITERS * COMMITS_PER_WRITER,
        faulty.calls(),
        injected.len(),
        tally.retries.load(Ordering::Relaxed),
        tally.given_up.load(Ordering::Relaxed),
        tally.unavailable.load(Ordering::Relaxed),
        tally.server_errors.load(Ordering::Relaxed),
        lost.len(),
    );
    assert!(lost.is_empty(), "lost under faults:\n{}", lost.join("\n"));
    assert!(injected.len() > 20, "the soak injected faults: {}", injected.len());
    assert_eq!(tally.given_up.load(Ordering::Relaxed), 0, "every operation was acknowledged in the end");
    assert_eq!(tally.server_errors.load(Ordering::Relaxed), 0, "no request answered 500");
}
