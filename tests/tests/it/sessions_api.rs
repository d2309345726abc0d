//! The `sessions` routes end to end through the Lambda edge (the
//! reference's `openviking/server/routers/sessions.py`): each test
//! builds a `lambda_http::Request`, runs it through `skald_lambda::serve`
//! into `skald::api::sessions::handle`, and checks the answer and what the
//! store holds afterwards (`meta.json` and `messages/{seq:010}.json` under
//! `accounts/default/tree/user/{user}/sessions/{id}/`).
//!
//! Concurrency is checked on a local store and on S3 (a moto server on
//! loopback, [`skald_tests::moto`]): 32 appends racing on one session lose
//! nothing and count nothing twice.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};
use skald::app::App;
use skald::store::SharedStore;
use skald_tests::fixture::{
    Handler, Reply, SESSIONS_PATH, app_over_store, call, local_store, ok, s3_shared_store, session_key, sessions_get,
    sessions_post, store_json,
};

fn messages_path(id: &str) -> String {
    format!("{SESSIONS_PATH}/{id}/messages")
}

fn batch_path(id: &str) -> String {
    format!("{SESSIONS_PATH}/{id}/messages/batch")
}

fn session_path(id: &str) -> String {
    format!("{SESSIONS_PATH}/{id}")
}

/// Asserts an error envelope with `status` and `code`.
fn refused(reply: &Reply, status: u16, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.text);
    assert_eq!(reply.json["status"], "error", "{}", reply.text);
    assert_eq!(reply.json["error"]["code"], code, "{}", reply.text);
}

/// The `loc`s of a 400's validation errors.
fn locs(reply: &Reply) -> Vec<Value> {
    reply.json["error"]["details"]["validation_errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no validation errors: {}", reply.text))
        .iter()
        .map(|e| e["loc"].clone())
        .collect()
}

/// The validation error at `loc`, if any.
fn error_at(reply: &Reply, loc: &Value) -> Option<Value> {
    reply.json["error"]["details"]["validation_errors"].as_array()?.iter().find(|e| &e["loc"] == loc).cloned()
}

fn count(value: &Value, key: &str) -> u64 {
    value[key].as_u64().unwrap_or_else(|| panic!("{key} is not a count: {value}"))
}

async fn app() -> (Arc<App>, skald_tests::fixture::TempDir) {
    let (store, dir) = local_store();
    (app_over_store(store), dir)
}

/// The stored message objects of default's session `id`, by key order.
async fn stored_messages(store: &SharedStore, id: &str) -> Vec<Value> {
    let prefix = session_key("default", id, "messages/");
    let mut keys: Vec<String> =
        store.list(&prefix).await.expect("list the messages").into_iter().map(|m| m.key).collect();
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        out.push(store_json(store, &key).await.expect("a listed message exists"));
    }
    out
}

async fn append(app: &Arc<App>, id: &str, message: &Value) -> Value {
    let reply = sessions_post(app, &messages_path(id), message).await;
    ok(&reply).clone()
}

#[tokio::test]
async fn creating_a_session_with_and_without_an_id_has_the_reference_shape() {
    let (app, _dir) = app().await;

    let reply = sessions_post(&app, SESSIONS_PATH, &json!({})).await;
    let made = ok(&reply);
    let id = made["session_id"].as_str().expect("a generated session_id").to_owned();
    assert!(!id.is_empty() && id.len() <= 128, "{id}");
    assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)), "{id}");
    assert_eq!(made["uri"], format!("viking://user/default/sessions/{id}"));
    assert_eq!(made["user"], json!({"account_id": "default", "user_id": "default"}));
    let meta = store_json(&app.store, &session_key("default", &id, "meta.json")).await.expect("meta.json written");
    assert_eq!((count(&meta, "total_message_count"), count(&meta, "user_turn_count")), (0, 0));

    // Two creations without an id give two sessions.
    let other = sessions_post(&app, SESSIONS_PATH, &json!({"session_id": ""})).await;
    assert_ne!(ok(&other)["session_id"], id, "an empty id is generated afresh");

    // With an id: that id, under the caller's tree; creating it again is the same session.
    let reply = sessions_post(&app, SESSIONS_PATH, &json!({"session_id": "my-session_1.a"})).await;
    let made = ok(&reply);
    assert_eq!(made["session_id"], "my-session_1.a");
    assert_eq!(made["uri"], "viking://user/default/sessions/my-session_1.a");
    assert_eq!(made["user"], json!({"account_id": "default", "user_id": "default"}));
    append(&app, "my-session_1.a", &json!({"role": "user", "content": "hello"})).await;
    let again = sessions_post(&app, SESSIONS_PATH, &json!({"session_id": "my-session_1.a"})).await;
    assert_eq!(ok(&again)["session_id"], "my-session_1.a");
    let got = sessions_get(&app, &session_path("my-session_1.a")).await;
    assert_eq!(count(ok(&got), "message_count"), 1, "re-creating keeps the messages");

    // Another user's create: its own tree.
    let bob = call(
        &app,
        Handler::Sessions,
        "POST",
        SESSIONS_PATH,
        &[("x-openviking-user", "bob")],
        Some(&json!({"session_id": "b1"})),
    )
    .await;
    assert_eq!(ok(&bob)["uri"], "viking://user/bob/sessions/b1");
    assert_eq!(ok(&bob)["user"], json!({"account_id": "default", "user_id": "bob"}));

    // A bad id in the body names session_id.
    let bad = sessions_post(&app, SESSIONS_PATH, &json!({"session_id": "a b"})).await;
    refused(&bad, 400, "INVALID_ARGUMENT");
    assert_eq!(locs(&bad), [json!(["body", "session_id"])]);
}

#[tokio::test]
async fn messages_are_stored_with_content_or_parts_and_parts_win() {
    let (app, _dir) = app().await;
    let result = append(
        &app,
        "s1",
        &json!({"role": "user", "content": "how do I upgrade?", "turn_id": "t1", "message_kind": "user_query"}),
    )
    .await;
    assert_eq!(result["session_id"], "s1");
    assert_eq!((count(&result, "message_count"), count(&result, "user_turn_count")), (1, 1));
    assert_eq!(result["added"], true);

    let parts = json!([{"type": "text", "text": "from parts"}, {"type": "context", "uri": "viking://resources/x", "context_type": "resource", "abstract": "x"}]);
    let result =
        append(&app, "s1", &json!({"role": "assistant", "content": "from content", "parts": parts.clone()})).await;
    assert_eq!((count(&result, "message_count"), count(&result, "user_turn_count")), (2, 1));

    let stored = stored_messages(&app.store, "s1").await;
    assert_eq!(stored.len(), 2, "{stored:#?}");
    assert_eq!(stored[0]["role"], "user");
    assert_eq!(stored[0]["content"], "how do I upgrade?");
    assert_eq!(stored[0]["turn_id"], "t1");
    assert_eq!(stored[0]["message_kind"], "user_query");
    assert!(stored[0].get("parts").is_none_or(Value::is_null), "{}", stored[0]);
    assert_eq!(stored[1]["role"], "assistant");
    assert_eq!(stored[1]["parts"], parts, "the parts are kept as sent");
    assert!(stored[1].get("content").is_none_or(Value::is_null), "parts win over content: {}", stored[1]);
    assert_eq!(stored.iter().map(|m| count(m, "seq")).collect::<Vec<_>>(), [0, 1]);
}

#[tokio::test]
async fn counters_count_messages_and_user_turns_and_get_returns_them() {
    let (app, _dir) = app().await;
    let steps = [("user", 1, 1), ("assistant", 2, 1), ("assistant", 3, 1), ("user", 4, 2), ("user", 5, 3)];
    for (i, (role, messages, turns)) in steps.into_iter().enumerate() {
        let result = append(&app, "c1", &json!({"role": role, "content": format!("message {i}")})).await;
        assert_eq!(
            (count(&result, "message_count"), count(&result, "user_turn_count")),
            (messages, turns),
            "after message {i} ({role})"
        );
    }
    let reply = sessions_get(&app, &session_path("c1")).await;
    let info = ok(&reply);
    assert_eq!(info["session_id"], "c1");
    assert_eq!(info["uri"], "viking://user/default/sessions/c1");
    assert_eq!(count(info, "message_count"), 5);
    assert_eq!(count(info, "total_message_count"), 5);
    assert_eq!(count(info, "user_turn_count"), 3, "assistant messages do not advance the turn clock");
    let meta = store_json(&app.store, &session_key("default", "c1", "meta.json")).await.expect("meta.json");
    assert_eq!((count(&meta, "total_message_count"), count(&meta, "user_turn_count")), (5, 3));
}

#[tokio::test]
async fn a_batch_is_appended_in_order() {
    let (app, _dir) = app().await;
    append(&app, "b1", &json!({"role": "user", "content": "zero"})).await;
    let batch = json!({"messages": [
        {"role": "user", "content": "one"},
        {"role": "assistant", "parts": [{"type": "text", "text": "two"}]},
        {"role": "user", "content": "three", "id": "m-three"},
    ]});
    let reply = sessions_post(&app, &batch_path("b1"), &batch).await;
    let result = ok(&reply);
    assert_eq!(result["session_id"], "b1");
    assert_eq!((count(result, "message_count"), count(result, "user_turn_count")), (4, 3));
    assert_eq!(count(result, "added"), 3);

    let stored = stored_messages(&app.store, "b1").await;
    let texts: Vec<String> = stored
        .iter()
        .map(|m| {
            m["content"]
                .as_str()
                .map_or_else(|| m["parts"][0]["text"].as_str().expect("text").to_owned(), str::to_owned)
        })
        .collect();
    assert_eq!(texts, ["zero", "one", "two", "three"]);
    let roles: Vec<&str> = stored.iter().map(|m| m["role"].as_str().expect("role")).collect();
    assert_eq!(roles, ["user", "user", "assistant", "user"]);
    assert_eq!(stored.iter().map(|m| count(m, "seq")).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(stored[3]["id"], "m-three");

    // Re-sending the batch: only the message with an id is recognised.
    let again = sessions_post(
        &app,
        &batch_path("b1"),
        &json!({"messages": [{"role": "user", "content": "three", "id": "m-three"}]}),
    )
    .await;
    assert_eq!(count(ok(&again), "added"), 0);
    assert_eq!(count(ok(&again), "message_count"), 4);
}

/// Each store call is an HTTP round trip on S3, in a row: an append to an
/// existing session is one meta read, the message create and the meta
/// compare-and-swap; a new session adds only the meta create.
#[tokio::test]
async fn an_append_makes_three_store_round_trips_and_a_first_append_four() {
    let (store, _dir) = local_store();
    let counting = skald_tests::counting::CountingStore::new(store);
    let app = app_over_store(counting.clone());
    let meta = session_key("default", "trips", "meta.json");
    let message = |seq: u64| session_key("default", "trips", &format!("messages/{seq:010}.json"));
    let trips = |calls: Vec<skald_tests::counting::Call>| -> Vec<(&'static str, String)> {
        calls.into_iter().map(|c| (c.op, c.key)).collect()
    };

    append(&app, "trips", &json!({"role": "user", "content": "first"})).await;
    assert_eq!(
        trips(counting.take()),
        [
            ("GET", meta.clone()),
            ("PUT if-none-match", meta.clone()),
            ("PUT if-none-match", message(0)),
            ("PUT if-match", meta.clone()),
        ]
    );
    append(&app, "trips", &json!({"role": "assistant", "content": "second"})).await;
    assert_eq!(
        trips(counting.take()),
        [("GET", meta.clone()), ("PUT if-none-match", message(1)), ("PUT if-match", meta.clone())]
    );
    let got = ok(&sessions_get(&app, &session_path("trips")).await).clone();
    assert_eq!((count(&got, "message_count"), count(&got, "user_turn_count")), (2, 1), "{got}");
}

#[tokio::test]
async fn an_append_with_a_known_id_is_counted_once() {
    let (app, _dir) = app().await;
    let message = json!({"role": "user", "content": "retry me", "id": "client-msg-1"});
    let first = append(&app, "i1", &message).await;
    assert_eq!(first["added"], true);
    assert_eq!((count(&first, "message_count"), count(&first, "user_turn_count")), (1, 1));
    let second = append(&app, "i1", &message).await;
    assert_eq!(second["added"], false, "the same id twice is one message");
    assert_eq!((count(&second, "message_count"), count(&second, "user_turn_count")), (1, 1));
    // A different id is a new message.
    let third = append(&app, "i1", &json!({"role": "user", "content": "retry me", "id": "client-msg-2"})).await;
    assert_eq!(third["added"], true);
    assert_eq!(count(&third, "message_count"), 2);
    let stored = stored_messages(&app.store, "i1").await;
    let ids: Vec<&str> = stored.iter().map(|m| m["id"].as_str().expect("id")).collect();
    assert_eq!(ids, ["client-msg-1", "client-msg-2"]);
    let reply = sessions_get(&app, &session_path("i1")).await;
    assert_eq!((count(ok(&reply), "total_message_count"), count(ok(&reply), "user_turn_count")), (2, 2));
}

/// `n` appends racing on one session (even ones `user`, odd ones
/// `assistant`, each with its own id), plus `retries` more that re-send
/// messages 0 and 1 with the same ids while the race is on: exactly `n`
/// messages, each stored once with its own sequence number, the counters
/// exact. An append crowded out (429) is sent again after its
/// `Retry-After`, as a client does.
async fn concurrent_appends_lose_nothing(app: Arc<App>, n: usize, retries: usize) {
    let created = sessions_post(&app, SESSIONS_PATH, &json!({"session_id": "race"})).await;
    ok(&created);
    let mut tasks = Vec::new();
    for i in 0..n + retries {
        let app = Arc::clone(&app);
        let k = if i < n { i } else { i % 2 };
        tasks.push(tokio::spawn(async move {
            let role = if k % 2 == 0 { "user" } else { "assistant" };
            let body = json!({"role": role, "content": format!("message {k}"), "id": format!("race-{k}")});
            loop {
                let reply = sessions_post(&app, &messages_path("race"), &body).await;
                if reply.status == 429 {
                    let wait = reply.header("retry-after").and_then(|s| s.parse().ok()).expect("a Retry-After");
                    tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
                    continue;
                }
                assert_eq!(reply.status, 200, "append {i}: {}", reply.text);
                break reply.json["result"]["added"].as_bool().expect("added");
            }
        }));
    }
    let mut added = 0;
    for task in tasks {
        added += usize::from(task.await.expect("the task ran"));
    }
    assert_eq!(added, n, "exactly one append per id was new");

    let reply = sessions_get(&app, &session_path("race")).await;
    let info = ok(&reply);
    // A retry that loses the race leaves its slot unrecorded (the meta's
    // `gaps`, or past its `next_seq`): such slots are never read. The
    // recorded ones are exactly one per message.
    let meta = store_json(&app.store, &session_key("default", "race", "meta.json")).await.expect("the meta");
    let gaps: BTreeSet<u64> = meta["gaps"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
    let next = count(&meta, "next_seq");
    let stored: Vec<Value> = stored_messages(&app.store, "race")
        .await
        .into_iter()
        .filter(|m| count(m, "seq") < next && !gaps.contains(&count(m, "seq")))
        .collect();
    let seqs: Vec<u64> = stored.iter().map(|m| count(m, "seq")).collect();
    assert_eq!(count(info, "total_message_count"), n as u64, "{info}; stored seqs {seqs:?}");
    assert_eq!(count(info, "message_count"), n as u64, "{info}");
    assert_eq!(count(info, "user_turn_count"), n.div_ceil(2) as u64, "{info}");
    assert_eq!(stored.len(), n, "one recorded object per message: {seqs:?}, gaps {gaps:?}");
    assert_eq!(seqs.iter().copied().collect::<BTreeSet<u64>>().len(), n, "unique sequence numbers: {seqs:?}");
    let ids: BTreeSet<String> = stored.iter().map(|m| m["id"].as_str().expect("id").to_owned()).collect();
    assert_eq!(ids, (0..n).map(|k| format!("race-{k}")).collect());
    // A commit archives them all and deletes the unrecorded slots below its mark.
    let committed = sessions_post(&app, &format!("{}/commit", session_path("race")), &json!({})).await;
    assert_eq!(count(ok(&committed), "archived_message_count"), n as u64, "{}", committed.text);
    let left = stored_messages(&app.store, "race").await;
    assert!(left.iter().all(|m| !gaps.contains(&count(m, "seq"))), "gap slots are deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_appends_lose_nothing_on_a_local_store() {
    let (app, _dir) = app().await;
    concurrent_appends_lose_nothing(app, 32, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_appends_lose_nothing_on_s3() {
    let store = s3_shared_store("concurrent_appends_lose_nothing_on_s3").await;
    concurrent_appends_lose_nothing(app_over_store(store), 32, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn retries_racing_their_original_are_counted_once_on_a_local_store() {
    let (app, _dir) = app().await;
    concurrent_appends_lose_nothing(app, 32, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn retries_racing_their_original_are_counted_once_on_s3() {
    let store = s3_shared_store("retries_racing_their_original_are_counted_once_on_s3").await;
    concurrent_appends_lose_nothing(app_over_store(store), 32, 8).await;
}

#[tokio::test]
async fn another_users_session_is_not_found_and_shows_nothing() {
    let (app, _dir) = app().await;
    append(&app, "private-1", &json!({"role": "user", "content": "the launch code is swordfish"})).await;
    let bob = [("x-openviking-user", "bob")];
    let reply = call(&app, Handler::Sessions, "GET", &session_path("private-1"), &bob, None).await;
    refused(&reply, 404, "NOT_FOUND");
    assert!(!reply.text.contains("swordfish"), "{}", reply.text);
    assert!(reply.json.get("result").is_none_or(Value::is_null), "{}", reply.text);

    // Bob appending to the same id writes into his own tree, not default's.
    let bobs = call(
        &app,
        Handler::Sessions,
        "POST",
        &messages_path("private-1"),
        &bob,
        Some(&json!({"role": "user", "content": "hi"})),
    )
    .await;
    assert_eq!(count(ok(&bobs), "message_count"), 1);
    let mine = sessions_get(&app, &session_path("private-1")).await;
    assert_eq!(count(ok(&mine), "message_count"), 1, "default's session is untouched");
    assert!(store_json(&app.store, &session_key("bob", "private-1", "meta.json")).await.is_some());
    assert_eq!(stored_messages(&app.store, "private-1").await.len(), 1);
}

#[tokio::test]
async fn invalid_messages_are_refused_with_their_field_and_write_nothing() {
    let (app, _dir) = app().await;
    append(&app, "v1", &json!({"role": "user", "content": "first"})).await;

    let cases = [
        (json!({"role": "user", "content": "x", "colour": "red"}), "colour", Some("extra_forbidden")),
        (json!({"role": "user", "content": ""}), "content", None),
        (json!({"role": "user", "content": "   "}), "content", None),
        (json!({"role": "user"}), "content", None),
        (json!({"role": "user", "parts": []}), "content", None),
        (json!({"role": "system", "content": "x"}), "role", None),
        (json!({"content": "x"}), "role", Some("missing")),
        (json!({"role": "user", "content": 5}), "content", Some("string_type")),
        (json!({"role": "user", "content": "x", "message_kind": "chit_chat"}), "message_kind", None),
    ];
    for (body, field, kind) in cases {
        let reply = sessions_post(&app, &messages_path("v1"), &body).await;
        refused(&reply, 400, "INVALID_ARGUMENT");
        let error = error_at(&reply, &json!(["body", field]))
            .unwrap_or_else(|| panic!("{body}: no error at body.{field}: {}", reply.text));
        if let Some(kind) = kind {
            assert_eq!(error["type"], kind, "{body}: {}", reply.text);
        }
        assert!(reply.json["error"]["message"].as_str().expect("message").contains(&format!("body.{field}")));
    }
    // A body that is not an object.
    let reply = sessions_post(&app, &messages_path("v1"), &json!(["role", "user"])).await;
    refused(&reply, 400, "INVALID_ARGUMENT");

    let reply = sessions_get(&app, &session_path("v1")).await;
    assert_eq!((count(ok(&reply), "message_count"), count(ok(&reply), "user_turn_count")), (1, 1));
    assert_eq!(stored_messages(&app.store, "v1").await.len(), 1, "nothing was written");

    // An invalid message on a session that does not exist creates nothing.
    let reply = sessions_post(&app, &messages_path("v-none"), &json!({"role": "system", "content": "x"})).await;
    refused(&reply, 400, "INVALID_ARGUMENT");
    assert!(store_json(&app.store, &session_key("default", "v-none", "meta.json")).await.is_none());
}

#[tokio::test]
async fn a_bad_batch_writes_nothing() {
    let (app, _dir) = app().await;
    append(&app, "bb", &json!({"role": "user", "content": "first"})).await;
    let message = json!({"role": "user", "content": "x"});
    let too_many = json!({"messages": vec![message.clone(); 101]});

    // 101 messages: refused, on an existing session and on a new one.
    let reply = sessions_post(&app, &batch_path("bb"), &too_many).await;
    refused(&reply, 400, "INVALID_ARGUMENT");
    assert_eq!(locs(&reply), [json!(["body", "messages"])]);
    let reply = sessions_post(&app, &batch_path("bb-new"), &too_many).await;
    refused(&reply, 400, "INVALID_ARGUMENT");
    assert!(store_json(&app.store, &session_key("default", "bb-new", "meta.json")).await.is_none(), "no meta created");
    refused(&sessions_get(&app, &session_path("bb-new")).await, 404, "NOT_FOUND");

    // One bad message among good ones: refused with its index, nothing appended.
    let mixed = json!({"messages": [message.clone(), {"role": "system", "content": "x"}, message.clone()]});
    let reply = sessions_post(&app, &batch_path("bb"), &mixed).await;
    refused(&reply, 400, "INVALID_ARGUMENT");
    assert!(error_at(&reply, &json!(["body", "messages", 1, "role"])).is_some(), "{}", reply.text);
    let extra = json!({"messages": [message.clone(), {"role": "user", "content": "x", "bogus": 1}]});
    let reply = sessions_post(&app, &batch_path("bb"), &extra).await;
    refused(&reply, 400, "INVALID_ARGUMENT");
    let error = error_at(&reply, &json!(["body", "messages", 1, "bogus"])).expect("the extra field is named");
    assert_eq!(error["type"], "extra_forbidden");
    // Missing or wrong `messages`, unknown top-level fields.
    for (body, field) in [
        (json!({}), "messages"),
        (json!({"messages": "no"}), "messages"),
        (json!({"messages": [], "extra": 1}), "extra"),
    ] {
        let reply = sessions_post(&app, &batch_path("bb"), &body).await;
        refused(&reply, 400, "INVALID_ARGUMENT");
        assert!(error_at(&reply, &json!(["body", field])).is_some(), "{body}: {}", reply.text);
    }

    // 100 is fine.
    let hundred = json!({"messages": vec![message; 100]});
    let reply = sessions_get(&app, &session_path("bb")).await;
    assert_eq!(count(ok(&reply), "message_count"), 1, "nothing from the refused batches");
    assert_eq!(stored_messages(&app.store, "bb").await.len(), 1);
    let reply = sessions_post(&app, &batch_path("bb"), &hundred).await;
    assert_eq!(count(ok(&reply), "message_count"), 101);
}

#[tokio::test]
async fn malformed_session_ids_in_the_path_are_refused() {
    let (app, _dir) = app().await;
    let long = "x".repeat(200);
    let message = json!({"role": "user", "content": "x"});
    for id in ["a%20b", "..", ".", long.as_str(), "a%2Fb", "caf%C3%A9"] {
        let reply = call(&app, Handler::Sessions, "GET", &session_path(id), &[], None).await;
        refused(&reply, 400, "INVALID_ARGUMENT");
        let reply = sessions_post(&app, &messages_path(id), &message).await;
        refused(&reply, 400, "INVALID_ARGUMENT");
        let reply = sessions_post(&app, &batch_path(id), &json!({"messages": [message.clone()]})).await;
        refused(&reply, 400, "INVALID_ARGUMENT");
    }
    let listed = app.store.list("accounts/").await.expect("list the store");
    assert!(listed.is_empty(), "nothing written: {listed:?}");
    // 128 characters is the longest id.
    let longest = "y".repeat(128);
    let reply = sessions_post(&app, &messages_path(&longest), &message).await;
    assert_eq!(count(ok(&reply), "message_count"), 1);
}

#[tokio::test]
async fn a_missing_session_is_not_found_and_wrong_methods_are_refused() {
    let (app, _dir) = app().await;
    refused(&sessions_get(&app, &session_path("nope")).await, 404, "NOT_FOUND");
    assert!(
        store_json(&app.store, &session_key("default", "nope", "meta.json")).await.is_none(),
        "GET creates nothing"
    );
    let message = json!({"role": "user", "content": "x"});
    for (method, path) in [
        ("DELETE", SESSIONS_PATH.to_owned()),
        ("PUT", SESSIONS_PATH.to_owned()),
        ("POST", session_path("s1")),
        ("PATCH", session_path("s1")),
        ("POST", format!("{}/archives/archive_001", session_path("s1"))),
        ("GET", messages_path("s1")),
        ("PUT", messages_path("s1")),
        ("GET", batch_path("s1")),
    ] {
        let reply = call(&app, Handler::Sessions, method, &path, &[], Some(&message)).await;
        refused(&reply, 405, "METHOD_NOT_ALLOWED");
    }
    // A missing session is not deleted, and nothing is made.
    refused(&call(&app, Handler::Sessions, "DELETE", &session_path("s1"), &[], None).await, 404, "NOT_FOUND");
    // Unknown routes under the prefix.
    let reply = call(&app, Handler::Sessions, "POST", &format!("{}/commit", session_path("s1")), &[], None).await;
    refused(&reply, 404, "NOT_FOUND");
    let listed = app.store.list("accounts/").await.expect("list the store");
    assert!(listed.is_empty(), "refused requests write nothing: {listed:?}");
}

#[tokio::test]
async fn a_session_context_past_the_response_limit_keeps_its_newest_messages_and_is_flagged() {
    use skald::api::payload::RESERVE;
    let limit = RESERVE + 16 * 1024;
    let (app, _dirs) = skald_tests::fixture::app_with_config(&[], |c| c.limits.max_response_bytes = limit).await;
    for i in 0..30 {
        let text = format!("message {i:02}: {}", "a \"quoted\" word ".repeat(100));
        append(&app, "big-1", &json!({"role": "user", "content": text})).await;
    }
    let reply = call(&app, Handler::Sessions, "GET", &format!("{}/context", session_path("big-1")), &[], None).await;
    let context = ok(&reply);
    assert_eq!(reply.json["truncated"], true, "the cut is flagged");
    let bytes = json!({ "statusCode": 200, "body": reply.text }).to_string().len();
    assert!(bytes <= limit, "{bytes} bytes");
    let messages = context["messages"].as_array().expect("messages");
    assert!(!messages.is_empty() && messages.len() < 30, "{} messages", messages.len());
    let last = messages.last().and_then(|m| m["parts"][0]["text"].as_str()).unwrap_or_default();
    assert!(last.starts_with("message 29:"), "the newest message is kept: {last:.40}");
    assert_eq!(context["estimatedTokens"], context["stats"]["activeTokens"], "no archive: the counts follow the cut");
}

/// The caller's sessions are listed; an archive is read back whole; a
/// deleted session takes its archives and event memories with it (`find`
/// no longer returns them), and is then not found; another user never
/// sees or deletes it.
#[tokio::test]
async fn sessions_are_listed_read_by_archive_and_deleted_with_their_memories() {
    let (store, _dir) = local_store();
    let app = app_over_store(store);
    for id in ["beta", "alpha"] {
        let said = json!({"messages": [
            {"role": "user", "content": format!("session {id}: the quince jam needs 40 minutes")},
            {"role": "assistant", "content": "Noted: 40 minutes for the quince jam."},
        ]});
        assert_eq!(sessions_post(&app, &batch_path(id), &said).await.status, 200);
    }
    let committed = sessions_post(&app, &format!("{SESSIONS_PATH}/alpha/commit"), &json!({})).await;
    assert_eq!(ok(&committed)["archive_uri"], "viking://user/default/sessions/alpha/history/archive_001");
    let listed = sessions_get(&app, SESSIONS_PATH).await;
    let ids: Vec<&str> =
        ok(&listed).as_array().into_iter().flatten().filter_map(|s| s["session_id"].as_str()).collect();
    assert_eq!(ids, ["alpha", "beta"], "{}", listed.text);

    let archive = sessions_get(&app, &format!("{SESSIONS_PATH}/alpha/archives/archive_001")).await;
    let messages = ok(&archive)["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(messages.len(), 2, "{}", archive.text);
    assert_eq!(messages[0]["parts"][0]["text"], "session alpha: the quince jam needs 40 minutes");
    assert!(ok(&archive)["overview"].as_str().is_some_and(|o| !o.is_empty()), "{}", archive.text);
    for missing in ["archive_002", "archive_1", "../meta.json", "x"] {
        let reply = sessions_get(&app, &format!("{SESSIONS_PATH}/alpha/archives/{missing}")).await;
        refused(&reply, 404, "NOT_FOUND");
    }

    let find = |app: Arc<App>| async move {
        let body = json!({"query": "quince jam minutes", "search_type": "keywords", "limit": 10});
        let reply = call(&app, Handler::Find, "POST", "/api/v1/search/find", &[], Some(&body)).await;
        ok(&reply)["memories"].as_array().cloned().unwrap_or_default().len()
    };
    assert_eq!(find(Arc::clone(&app)).await, 1, "the committed session's episode is found");
    // Another user neither sees nor deletes it.
    let bob = [("x-openviking-user", "bob")];
    refused(&call(&app, Handler::Sessions, "DELETE", &session_path("alpha"), &bob, None).await, 404, "NOT_FOUND");
    let theirs = call(&app, Handler::Sessions, "GET", SESSIONS_PATH, &bob, None).await;
    assert_eq!(ok(&theirs), &json!([]), "{}", theirs.text);

    let deleted = call(&app, Handler::Sessions, "DELETE", &session_path("alpha"), &[], None).await;
    assert_eq!(ok(&deleted), &json!({"session_id": "alpha", "deleted_memories": 1, "index_updated": true}));
    assert_eq!(find(Arc::clone(&app)).await, 0, "the deleted session's episode is gone from find");
    refused(&sessions_get(&app, &session_path("alpha")).await, 404, "NOT_FOUND");
    refused(&call(&app, Handler::Sessions, "DELETE", &session_path("alpha"), &[], None).await, 404, "NOT_FOUND");
    let listed = sessions_get(&app, SESSIONS_PATH).await;
    assert_eq!(ok(&listed), &json!([{"session_id": "beta", "uri": "viking://user/default/sessions/beta"}]));
}

/// OpenClaw's tool-result routes: a session's tool outputs, archived or
/// live, listed newest first, read by code-point pages and searched; another
/// user sees none, and a missing one is a 404.
#[tokio::test]
async fn tool_results_are_listed_paged_and_searched() {
    let (app, _dir) = app().await;
    let tool = |id: &str, name: &str, output: &str| {
        json!({"role": "assistant", "parts": [
            {"type": "text", "text": "ran a tool"},
            {"type": "tool", "tool_id": id, "tool_name": name, "tool_output": output, "tool_status": "completed"},
        ]})
    };
    let log = format!("{}ERROR: disk full on /var\n{}", "ok\n".repeat(100), "ok\n".repeat(10));
    append(&app, "tools", &tool("t-1", "bash", &log)).await;
    assert_eq!(sessions_post(&app, &format!("{SESSIONS_PATH}/tools/commit"), &json!({})).await.status, 200);
    append(&app, "tools", &tool("t-2", "read", "日本語のファイル")).await;

    let listed = sessions_get(&app, &format!("{SESSIONS_PATH}/tools/tool-results")).await;
    let results = ok(&listed)["tool_results"].as_array().cloned().unwrap_or_default();
    let ids: Vec<&str> = results.iter().filter_map(|r| r["tool_result_id"].as_str()).collect();
    assert_eq!(ids, ["t-2", "t-1"], "{}", listed.text);
    assert_eq!(results[0]["original_chars"], 8);
    assert_eq!(results[1]["storage_uri"], "viking://session/tools/tool-results/t%2D1");
    let bash = sessions_get(&app, &format!("{SESSIONS_PATH}/tools/tool-results?tool_name=bash")).await;
    assert_eq!(ok(&bash)["tool_results"].as_array().map(Vec::len), Some(1), "{}", bash.text);

    let page = sessions_get(&app, &format!("{SESSIONS_PATH}/tools/tool-results/t-2?offset=3&limit=2")).await;
    let page = ok(&page);
    assert_eq!(
        (page["content"].as_str(), page["has_more"].as_bool(), page["total_chars"].as_u64()),
        (Some("のフ"), Some(true), Some(8))
    );
    let hits =
        sessions_get(&app, &format!("{SESSIONS_PATH}/tools/tool-results/t-1/search?q=disk%20full&context_chars=7"))
            .await;
    assert_eq!(
        ok(&hits)["matches"],
        json!([{"offset": 307, "offset_unit": "unicode_code_point", "snippet": "ERROR: disk full on /va"}]),
        "{}",
        hits.text
    );

    for path in ["tools/tool-results/t-9", "tools/tool-results/t-9/search?q=x", "nobody/tool-results"] {
        refused(&sessions_get(&app, &format!("{SESSIONS_PATH}/{path}")).await, 404, "NOT_FOUND");
    }
    let bob = [("x-openviking-user", "bob")];
    let theirs = call(&app, Handler::Sessions, "GET", &format!("{SESSIONS_PATH}/tools/tool-results"), &bob, None).await;
    refused(&theirs, 404, "NOT_FOUND");
    let no_query = sessions_get(&app, &format!("{SESSIONS_PATH}/tools/tool-results/t-1/search")).await;
    refused(&no_query, 400, "INVALID_ARGUMENT");
}
