//! Appends under load: `n` clients each append one message to one session
//! at the same moment, through the Lambda edge, on a local store and on S3
//! (moto). Each client does what the plugins do: sends its message with its
//! id and, told 429, waits the `Retry-After` it was given and sends it
//! again. Every message must land exactly once, in one stable order, and
//! every answer must come before its deadline: 200, or 429 with a
//! `Retry-After` — never 503, never 500.
//!
//! `scripts/test.sh` runs this suite on its own, after the others, so the
//! crowd does not slow their S3 calls. A crowd of 1,000 on moto (a server
//! that answers one request at a time) takes minutes: it is left to an
//! explicit run, `cargo test -p skald-tests --test it append_load --
//! --ignored --nocapture`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use skald::store::SharedStore;
use skald_tests::fixture::{SESSIONS_PATH, app_over_store, session_key, sessions_post, store_json};

skald_tests::on_both_stores!(worker_threads = 4; a_crowd_of_128_appends_lands_exactly_once);

async fn a_crowd_of_128_appends_lands_exactly_once(store: SharedStore) {
    crowd(store, 128).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crowd_of_1000_appends_lands_exactly_once_locally() {
    let (store, _dir) = skald_tests::fixture::labelled_local_store("crowd-1000");
    crowd(store, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes on moto: run with --ignored"]
async fn a_crowd_of_1000_appends_lands_exactly_once_on_s3() {
    crowd(skald_tests::fixture::s3_shared_store("crowd-1000").await, 1000).await;
}

/// What one client saw: its 429s, and the longest any answer took.
struct Client {
    busy: u32,
    slowest: Duration,
}

async fn crowd(store: SharedStore, n: usize) {
    let app = app_over_store(store.clone());
    let session = "crowd";
    let path = format!("{SESSIONS_PATH}/{session}/messages");
    // The session exists first, as a plugin's session does.
    let first = sessions_post(&app, &path, &json!({"id": "m-first", "role": "user", "content": "hello"})).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let deadline = Duration::from_secs_f64(app.config.retrieval.gateway_timeout_s);
    let started = Instant::now();
    let clients: Vec<_> = (0..n)
        .map(|i| {
            let (app, path) = (Arc::clone(&app), path.clone());
            tokio::spawn(async move {
                let body = json!({"id": format!("m{i:04}"), "role": "user", "content": format!("message {i}")});
                let mut client = Client { busy: 0, slowest: Duration::ZERO };
                loop {
                    let sent = Instant::now();
                    let reply = sessions_post(&app, &path, &body).await;
                    client.slowest = client.slowest.max(sent.elapsed());
                    match reply.status {
                        200 => return client,
                        429 => {
                            let wait = reply.header("retry-after").and_then(|s| s.parse::<u64>().ok());
                            let wait = wait.unwrap_or_else(|| panic!("a 429 says when to retry: {}", reply.text));
                            assert!((1..=skald::sessions::MAX_RETRY_AFTER_S).contains(&wait), "Retry-After {wait}");
                            assert_eq!(reply.json["error"]["code"], "RESOURCE_EXHAUSTED", "{}", reply.text);
                            client.busy += 1;
                            tokio::time::sleep(Duration::from_secs(wait)).await;
                        }
                        status => panic!("message {i} answered {status}: {}", reply.text),
                    }
                }
            })
        })
        .collect();
    let mut busy = 0;
    let mut slowest = Duration::ZERO;
    for client in clients {
        let client = client.await.expect("a client");
        busy += client.busy;
        slowest = slowest.max(client.slowest);
    }
    let landed = started.elapsed();
    let meta = store.get(&session_key("default", session, "meta.json")).await.expect("the meta");
    let meta_bytes = meta.body.len();
    let meta: skald::sessions::SessionMeta = serde_json::from_slice(&meta.body).expect("a meta");
    eprintln!(
        "{n} concurrent appends: all landed in {:.1} s, {busy} answers 429, the slowest answer {:.2} s; meta.json \
         {meta_bytes} B with {} gaps",
        landed.as_secs_f64(),
        slowest.as_secs_f64(),
        meta.gaps.len(),
    );
    assert!(slowest < deadline, "every answer came before the deadline ({deadline:?}): the slowest took {slowest:?}");

    // Every message exactly once, in the order of the slots the meta
    // records; a second read gives the same order.
    assert_eq!(meta.total_message_count, n as u64 + 1, "each message counted once");
    let order = recorded_ids(&store, &meta, session).await;
    assert_eq!(order.len(), n + 1, "each message recorded once");
    let mut unique = order.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), n + 1, "no message recorded twice");
    assert_eq!(order[0], "m-first");
    assert_eq!(recorded_ids(&store, &meta, session).await, order, "a stable order");
}

/// The ids of the messages `meta` records, in sequence order.
async fn recorded_ids(store: &SharedStore, meta: &skald::sessions::SessionMeta, session: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for seq in meta.recorded_in(0..meta.end_seq()) {
        let slot = store_json(store, &session_key("default", session, &format!("messages/{seq:010}.json"))).await;
        ids.push(slot.expect("a recorded slot")["id"].as_str().expect("id").to_owned());
    }
    ids
}
