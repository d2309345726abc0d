//! Memory extraction with a model, end to end through the Lambda edge and a
//! scripted model server on loopback: a commit's task extracts profile,
//! preferences, entities and events, compares them with the user's nearest
//! memories (add, update, delete, nothing), writes them by compare-and-swap
//! with their sources, and a later session finds them. The model's output
//! is data (it cannot write outside the caller's tree), a failing or late
//! model fails only the task (the episodes stand), two extractions racing
//! on one memory both land, and a session deleted mid-extraction gets
//! nothing more.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skald::app::App;
use skald::config::{Config, IdentityConfig, IdentityMode};
use skald::embed::Embedder;
use skald::embed::hashed::HashedEmbedder;
use skald::store::SharedStore;
use skald_tests::fixture::{
    EMBED_DIMENSION, Handler, Reply, SESSIONS_PATH, call, call_handler, local_store, ok, request_to, sessions_get,
    sessions_post,
};
use skald_tests::model_server::{EXTRACT_MARKER, ModelServer, RECONCILE_MARKER, Reply as ModelReply};

const USER_TREE: &str = "accounts/default/tree/user/default/";

fn app_with_model(store: SharedStore, server: &ModelServer) -> Arc<App> {
    app_with_memory(store, server, skald::config::MemoryConfig::default())
}

/// A dev-mode app over `store` extracting with `server`, with `memory`.
fn app_with_memory(store: SharedStore, server: &ModelServer, memory: skald::config::MemoryConfig) -> Arc<App> {
    let config = Config {
        identity: IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() },
        extraction: Some(server.openai_model("extractor")),
        memory,
        ..Config::default()
    };
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(EMBED_DIMENSION));
    Arc::new(App::with_parts(config, store, embedder))
}

fn say(id: &str, role: &str, text: &str, at: &str) -> Value {
    json!({"id": id, "role": role, "content": text, "created_at": at})
}

async fn said_and_committed(app: &Arc<App>, session: &str, messages: Vec<Value>) -> Reply {
    let batch = json!({ "messages": messages });
    ok(&sessions_post(app, &format!("{SESSIONS_PATH}/{session}/messages/batch"), &batch).await);
    sessions_post(app, &format!("{SESSIONS_PATH}/{session}/commit"), &json!({})).await
}

async fn text_of(store: &SharedStore, key: &str) -> Option<String> {
    store.get(key).await.ok().map(|o| String::from_utf8_lossy(&o.body).into_owned())
}

fn extraction(memories: &Value) -> ModelReply {
    ModelReply::Text(json!({ "memories": memories }).to_string())
}

#[tokio::test]
async fn a_model_extracts_memories_that_a_later_session_finds() {
    let server = ModelServer::start().await;
    server.on(
        EXTRACT_MARKER,
        extraction(&json!([
            {"category": "preferences", "name": "Biscuit's food", "content": "The user's dog Biscuit must never eat chicken.", "sources": [1]},
            {"category": "profile", "name": "me", "content": "The user runs marathons.", "sources": [3]},
            {"category": "entity", "name": "Biscuit", "content": "Biscuit is the user's dog, a beagle.", "sources": [1, 3]},
            {"category": "events", "name": "Lisbon marathon", "content": "The user runs the Lisbon marathon in October 2026.", "sources": [3]},
            // Output that tries to leave the caller's tree stays in it.
            {"category": "preferences", "name": "../../../bob/memories/preferences/evil", "content": "Write this into bob's tree.", "sources": [1]},
            {"category": "../../bob", "name": "x", "content": "An unknown category is dropped."}
        ])),
    );
    let (store, _dir) = local_store();
    let app = app_with_model(store.clone(), &server);
    let committed = said_and_committed(
        &app,
        "pets",
        vec![
            say("m1", "user", "Our beagle Biscuit is allergic to chicken.", "2026-03-09T08:15:00+01:00"),
            say("m2", "assistant", "Noted: no chicken for Biscuit.", "2026-03-09T08:15:20+01:00"),
            say("m3", "user", "I run the Lisbon marathon in October.", "2026-03-09T08:16:00+01:00"),
            say("m4", "assistant", "Good luck in Lisbon.", "2026-03-09T08:16:30+01:00"),
        ],
    )
    .await;
    let result = ok(&committed).clone();
    assert_eq!(result["status"], "accepted", "{result}");
    let text = result["memory_extraction"].as_str().unwrap_or_default();
    assert!(text.contains("the model extracted 5 more"), "{text}");

    let task_id = result["task_id"].as_str().expect("a task");
    let task = ok(&call(&app, Handler::Sessions, "GET", &format!("/api/v1/tasks/{task_id}"), &[], None).await).clone();
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(
        task["result"]["memories_extracted"],
        json!({"entities": 1, "events": 3, "preferences": 2, "profile": 1, "total": 7}),
        "two episodes and five memories: {task}"
    );
    let session = ok(&sessions_get(&app, &format!("{SESSIONS_PATH}/pets")).await).clone();
    assert_eq!(session["memories_extracted"]["preferences"], 2, "{session}");

    let food = text_of(&store, &format!("{USER_TREE}memories/preferences/biscuit-s-food.md")).await.expect("written");
    assert!(food.starts_with("# Biscuit s food\n\nThe user's dog Biscuit must never eat chicken.\n"), "{food}");
    assert!(
        food.contains(r#""archive":"viking://user/default/sessions/pets/history/archive_001","messages":["m1"]"#),
        "the memory records where it came from: {food}"
    );
    let event = text_of(&store, &format!("{USER_TREE}memories/events/2026/03/09/lisbon-marathon.md")).await;
    assert!(event.is_some_and(|e| e.contains("October 2026")), "an event is filed under the day it was said");
    assert!(text_of(&store, &format!("{USER_TREE}memories/profile.md")).await.is_some_and(|p| p.contains("marathons")));
    let evil = text_of(&store, &format!("{USER_TREE}memories/preferences/bob-memories-preferences-evil.md")).await;
    assert!(evil.is_some(), "a hostile name is a plain name in the caller's own tree");
    let bob = store.list("accounts/default/tree/user/bob/").await.expect("list");
    assert!(bob.is_empty(), "nothing reached another user's tree: {bob:?}");

    // A later question finds what was extracted, and the read hides the fields.
    let find = json!({"query": "what must my dog never eat", "limit": 5});
    let found = ok(&call(&app, Handler::Find, "POST", "/api/v1/search/find", &[], Some(&find)).await).clone();
    let uris: Vec<&str> =
        found["memories"].as_array().into_iter().flatten().filter_map(|m| m["uri"].as_str()).collect();
    assert!(uris.contains(&"viking://user/default/memories/preferences/biscuit-s-food.md"), "{uris:?}");
    let read = call(
        &app,
        Handler::Content,
        "GET",
        "/api/v1/content/read?uri=viking://user/default/memories/preferences/biscuit-s-food.md",
        &[],
        None,
    )
    .await;
    assert!(!ok(&read).to_string().contains("MEMORY_FIELDS"), "{}", read.text);

    // The task runs once: running it again calls no model and changes nothing.
    let calls = server.requests().len();
    let identity = skald::identity::Identity {
        account: skald::identity::AccountId::new("default").expect("account"),
        user: skald::identity::UserId::new("default").expect("user"),
        actor_peer: None,
    };
    let deadline = skald::deadline::Deadline {
        at: std::time::Instant::now() + Duration::from_secs(30),
        source: skald::deadline::DeadlineSource::Lambda,
    };
    let again =
        skald::memory::extractor::run_task(&app, &identity, task_id, &deadline, time::OffsetDateTime::now_utc())
            .await
            .expect("read")
            .expect("the task");
    assert!(!again.ran);
    assert_eq!(serde_json::to_value(&again.task).expect("json"), task);
    assert_eq!(server.requests().len(), calls);
}

/// The number `[E{n}]` the comparison prompt gave the existing memory
/// whose line holds `needle`.
fn shown_as(prompt: &str, needle: &str) -> Option<u64> {
    prompt
        .lines()
        .find(|l| l.starts_with("[E") && l.contains(needle))?
        .strip_prefix("[E")?
        .split(']')
        .next()?
        .parse()
        .ok()
}

#[tokio::test]
async fn a_later_session_updates_and_deletes_what_it_contradicts() {
    let server = ModelServer::start().await;
    // The comparison names existing memories by the numbers its prompt gave.
    server.on(
        RECONCILE_MARKER,
        ModelReply::compute(|prompt| {
            if !prompt.contains("Berlin") {
                return json!({"actions": [{"new": 1, "action": "add"}]}).to_string();
            }
            json!({"actions": [
                {"new": 1, "action": "update", "target": shown_as(prompt, "Paris"), "content": "The user lives in Berlin (moved from Paris in March 2026)."},
                {"new": 2, "action": "delete", "target": shown_as(prompt, "sushi")},
                {"new": 3, "action": "none"}
            ]})
            .to_string()
        }),
    );
    server.on(
        "I live in Paris",
        extraction(
            &json!([{"category": "entities", "name": "home", "content": "The user lives in Paris.", "sources": [1]}]),
        ),
    );
    server.on(
        "Sushi in Tokyo",
        extraction(
            &json!([{"category": "preferences", "name": "sushi", "content": "The user loves sushi.", "sources": [1]}]),
        ),
    );
    server.on(
        "moved to Berlin",
        extraction(&json!([
            {"category": "entities", "name": "residence", "content": "The user moved to Berlin in March 2026.", "sources": [1]},
            {"category": "preferences", "name": "raw-fish", "content": "The user no longer eats raw fish.", "sources": [1]},
            {"category": "preferences", "name": "sushi", "content": "The user loves sushi.", "sources": [1]}
        ])),
    );
    let (store, _dir) = local_store();
    let app = app_with_model(store.clone(), &server);
    ok(&said_and_committed(&app, "s1", vec![say("a1", "user", "I live in Paris.", "2026-01-05T10:00:00Z")]).await);
    ok(&said_and_committed(
        &app,
        "s2",
        vec![say("b1", "user", "Sushi in Tokyo was the best.", "2026-01-06T10:00:00Z")],
    )
    .await);
    let home = format!("{USER_TREE}memories/entities/home.md");
    let sushi = format!("{USER_TREE}memories/preferences/sushi.md");
    assert!(text_of(&store, &home).await.is_some_and(|t| t.contains("lives in Paris")));
    assert!(text_of(&store, &sushi).await.is_some());

    let committed =
        said_and_committed(&app, "s3", vec![say("c1", "user", "We moved to Berlin in March.", "2026-03-02T09:00:00Z")])
            .await;
    let task = ok(&committed)["task_id"].as_str().expect("task").to_owned();
    let task = ok(&call(&app, Handler::Sessions, "GET", &format!("/api/v1/tasks/{task}"), &[], None).await).clone();
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(
        (task["result"]["deleted"].as_u64(), task["result"]["unchanged"].as_u64()),
        (Some(1), Some(1)),
        "{task}"
    );

    let updated = text_of(&store, &home).await.expect("the home memory stays where it was");
    assert!(updated.starts_with("# Home\n\nThe user lives in Berlin (moved from Paris in March 2026).\n"), "{updated}");
    assert!(
        updated.contains("sessions/s1/history/archive_001") && updated.contains("sessions/s3/history/archive_001"),
        "both archives are its sources: {updated}"
    );
    assert!(text_of(&store, &sushi).await.is_none(), "the contradicted preference is gone");
    assert!(text_of(&store, &format!("{USER_TREE}memories/entities/residence.md")).await.is_none(), "no duplicate");
    let find = json!({"query": "sushi", "limit": 10});
    let found = call(&app, Handler::Find, "POST", "/api/v1/search/find", &[], Some(&find)).await;
    assert!(!ok(&found).to_string().contains("preferences/sushi.md"), "no stale record: {}", found.text);
}

#[tokio::test]
async fn a_failing_or_late_model_fails_the_task_and_the_episodes_stand() {
    let server = ModelServer::start().await;
    server.on(EXTRACT_MARKER, ModelReply::Status(500));
    let (store, _dir) = local_store();
    let app = app_with_model(store.clone(), &server);
    let committed =
        said_and_committed(&app, "f1", vec![say("x1", "user", "My bike is a green Brompton.", "2026-04-01T12:00:00Z")])
            .await;
    let result = ok(&committed).clone();
    assert_eq!(result["status"], "accepted", "{result}");
    let text = result["memory_extraction"].as_str().unwrap_or_default();
    assert!(text.contains("failed") && text.contains("HTTP 500") && text.contains("event memories stand"), "{text}");
    let task = result["task_id"].as_str().expect("task");
    let task = ok(&call(&app, Handler::Sessions, "GET", &format!("/api/v1/tasks/{task}"), &[], None).await).clone();
    assert_eq!(
        (task["status"].as_str(), task["result"]["memories_extracted"]["events"].as_u64()),
        (Some("failed"), Some(1)),
        "{task}"
    );
    assert!(task["error"].as_str().is_some_and(|e| e.contains("HTTP 500")), "{task}");
    let episodes = store.list(&format!("{USER_TREE}memories/events/")).await.expect("list");
    assert_eq!(episodes.len(), 1, "the episode landed: {episodes:?}");

    // A model slower than the request's deadline: cut, the task says so.
    server.clear_rules();
    server.on(EXTRACT_MARKER, ModelReply::Delay(Duration::from_secs(30), Box::new(ModelReply::Text("{}".into()))));
    let batch = json!({ "messages": [say("y1", "user", "My bike was stolen.", "2026-04-02T12:00:00Z")] });
    ok(&sessions_post(&app, &format!("{SESSIONS_PATH}/f2/messages/batch"), &batch).await);
    let event = request_to(
        &format!("{SESSIONS_PATH}/f2/commit"),
        "POST",
        &[("x-client-timeout-ms", "4000")],
        lambda_http::Body::Text("{}".into()),
    );
    let started = std::time::Instant::now();
    let reply = call_handler(&app, Handler::Sessions, event).await;
    assert!(started.elapsed() < Duration::from_secs(4), "answered within the deadline: {:?}", started.elapsed());
    let result = ok(&reply).clone();
    let task = result["task_id"].as_str().expect("task");
    let task = ok(&call(&app, Handler::Sessions, "GET", &format!("/api/v1/tasks/{task}"), &[], None).await).clone();
    assert_eq!(task["status"], "failed", "{task}");
    assert!(task["error"].as_str().is_some_and(|e| e.contains("timed out")), "{task}");
    let episodes = store.list(&format!("{USER_TREE}memories/events/")).await.expect("list");
    assert_eq!(episodes.len(), 2, "{episodes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_extractions_racing_on_one_memory_both_land() {
    let server = ModelServer::start().await;
    // No comparison: both see no existing memory, or the other's, and add.
    server.on(RECONCILE_MARKER, ModelReply::Status(503));
    server.on("Lisbon", extraction(&json!([{"category": "entities", "name": "travel", "content": "The user flies to Lisbon in May.", "sources": [1]}])));
    server.on("Porto", extraction(&json!([{"category": "entities", "name": "travel", "content": "The user takes the train to Porto in June.", "sources": [1]}])));
    let (store, _dir) = local_store();
    let app = app_with_model(store.clone(), &server);
    for round in 0..4 {
        let (a, b) = (format!("r{round}a"), format!("r{round}b"));
        let (app1, app2) = (app.clone(), app.clone());
        let one = tokio::spawn(async move {
            said_and_committed(&app1, &a, vec![say("l", "user", "Flying to Lisbon in May.", "2026-05-01T09:00:00Z")])
                .await
        });
        let two = tokio::spawn(async move {
            said_and_committed(&app2, &b, vec![say("p", "user", "Train to Porto in June.", "2026-05-01T09:00:00Z")])
                .await
        });
        ok(&one.await.expect("join"));
        ok(&two.await.expect("join"));
        let travel = text_of(&store, &format!("{USER_TREE}memories/entities/travel.md")).await.expect("written");
        assert!(travel.contains("Lisbon in May") && travel.contains("Porto in June"), "round {round}: {travel}");
        assert_eq!(travel.matches("Lisbon in May").count(), 1, "{travel}");
    }
}

#[tokio::test]
async fn a_session_deleted_mid_extraction_gets_nothing_more() {
    let server = ModelServer::start().await;
    server.on(
        EXTRACT_MARKER,
        ModelReply::Delay(
            Duration::from_millis(800),
            Box::new(extraction(&json!([{"category": "entities", "name": "cat", "content": "The user's cat is Mochi.", "sources": [1]}]))),
        ),
    );
    let (store, _dir) = local_store();
    let app = app_with_model(store.clone(), &server);
    let batch = json!({ "messages": [say("k1", "user", "Our cat is Mochi.", "2026-06-01T09:00:00Z")] });
    ok(&sessions_post(&app, &format!("{SESSIONS_PATH}/gone/messages/batch"), &batch).await);
    let app2 = app.clone();
    let commit =
        tokio::spawn(async move { sessions_post(&app2, &format!("{SESSIONS_PATH}/gone/commit"), &json!({})).await });
    // While the model thinks, the session goes (as a delete of the session's
    // files would take it).
    let session_dir = format!("{USER_TREE}sessions/gone/");
    let mut deleted = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if server.requests().iter().any(|r| r.prompt_text().contains(EXTRACT_MARKER)) {
            for object in store.list(&session_dir).await.expect("list") {
                store.delete(&object.key).await.expect("delete");
            }
            deleted = true;
            break;
        }
    }
    assert!(deleted, "the extraction call was made");
    let result = ok(&commit.await.expect("join")).clone();
    assert!(result["memory_extraction"].as_str().is_some_and(|t| t.contains("gone")), "{result}");
    assert!(text_of(&store, &format!("{USER_TREE}memories/entities/cat.md")).await.is_none(), "nothing more written");
}

/// Deployed, the commit leaves extraction to the `extractor` function: its
/// task waits `pending`, and the store's notification of the task's write
/// runs it. A redelivery runs nothing; a key that is no task is ignored; a
/// task the store cannot read fails only its own message.
#[tokio::test]
async fn the_extractor_function_runs_a_commits_task_from_its_notification() {
    use skald_tests::faults::{Fault, FaultyStore, Op, Rule};

    use super::indexer::{created, sqs_message, test_event};
    let server = ModelServer::start().await;
    server.on(
        EXTRACT_MARKER,
        extraction(&json!([{"category": "entities", "name": "bike", "content": "The user's bike is a green Brompton.", "sources": [1]}])),
    );
    let (store, _dir) = local_store();
    let faulty = Arc::new(FaultyStore::new(store.clone(), vec![]));
    let shared: SharedStore = faulty.clone();
    let memory = skald::config::MemoryConfig { index_inline: Some(false), ..skald::config::MemoryConfig::default() };
    let app = app_with_memory(shared, &server, memory);
    let committed =
        said_and_committed(&app, "e1", vec![say("z1", "user", "My bike is a green Brompton.", "2026-04-01T12:00:00Z")])
            .await;
    let result = ok(&committed).clone();
    assert!(result["memory_extraction"].as_str().is_some_and(|t| t.contains("in the background")), "{result}");
    let task_id = result["task_id"].as_str().expect("task").to_owned();
    let task = ok(&call(&app, Handler::Sessions, "GET", &format!("/api/v1/tasks/{task_id}"), &[], None).await).clone();
    assert_eq!(task["status"], "pending", "{task}");
    assert!(server.requests().is_empty(), "the commit called no model");

    let task_key = format!("accounts/default/tasks/default/{task_id}.task.json");
    let invoke = |messages: Vec<Value>| {
        let app = app.clone();
        async move {
            let event = lambda_http::LambdaEvent::new(json!({ "Records": messages }), lambda_http::Context::default());
            skald_lambda::extractor::handle(&app, event).await.expect("the handler answers a batch")
        }
    };
    // The store fails reading the task: only its message comes back.
    faulty.push(Rule::every(Op::Get, ".task.json", Fault::FailBeforeLanding));
    let answer = invoke(vec![
        sqs_message("1", &created("any", &[&task_key])),
        sqs_message("2", &created("any", &[&format!("{USER_TREE}memories/events/x.md")])),
        sqs_message("3", &test_event()),
    ])
    .await;
    assert_eq!(answer["batchItemFailures"], json!([{"itemIdentifier": "1"}]), "{answer}");
    assert_eq!((answer["errors"].as_u64(), answer["ignored"].as_u64()), (Some(1), Some(1)), "{answer}");
    faulty.clear();

    let answer = invoke(vec![sqs_message("1", &created("any", &[&task_key]))]).await;
    assert_eq!(
        answer,
        json!({"completed": 1, "failed": 0, "skipped": 0, "ignored": 0, "errors": 0, "batchItemFailures": []})
    );
    let task = ok(&call(&app, Handler::Sessions, "GET", &format!("/api/v1/tasks/{task_id}"), &[], None).await).clone();
    assert_eq!(
        (task["status"].as_str(), task["result"]["memories_extracted"]["entities"].as_u64()),
        (Some("completed"), Some(1)),
        "{task}"
    );
    assert!(
        text_of(&store, &format!("{USER_TREE}memories/entities/bike.md")).await.is_some_and(|t| t.contains("Brompton"))
    );

    // Redelivered (and the notifications of the task's own writes): nothing runs.
    let calls = server.requests().len();
    let answer =
        invoke(vec![sqs_message("1", &created("any", &[&task_key])), sqs_message("2", &created("any", &[&task_key]))])
            .await;
    assert_eq!((answer["skipped"].as_u64(), answer["completed"].as_u64()), (Some(1), Some(0)), "{answer}");
    assert_eq!(server.requests().len(), calls);
}

/// A local store sends no events: an extraction that store failures left
/// `pending` through the commit's inline attempts is run by the session's
/// next commit.
#[tokio::test]
async fn the_next_commit_runs_an_extraction_store_failures_left_pending() {
    use skald_tests::faults::{Fault, FaultyStore, Op, Rule};
    let server = ModelServer::start().await;
    server.on("Vespa", extraction(&json!([{"category": "entities", "name": "scooter", "content": "The user rides a red Vespa.", "sources": [1]}])));
    server.on("Kyoto", extraction(&json!([{"category": "entities", "name": "trip", "content": "The user visits Kyoto in May.", "sources": [1]}])));
    server.on(RECONCILE_MARKER, ModelReply::Echo);
    let (store, _dir) = local_store();
    let faulty = Arc::new(FaultyStore::new(store.clone(), vec![]));
    let shared: SharedStore = faulty.clone();
    let app = app_with_model(shared, &server);

    // Every write of an extracted memory fails during the first commit.
    faulty.push(Rule::every(Op::Put, "memories/entities/", Fault::FailBeforeLanding));
    let first =
        said_and_committed(&app, "c1", vec![say("v1", "user", "I ride a red Vespa.", "2026-05-01T09:00:00Z")]).await;
    let first_task = ok(&first)["task_id"].as_str().expect("task").to_owned();
    let task =
        ok(&call(&app, Handler::Sessions, "GET", &format!("/api/v1/tasks/{first_task}"), &[], None).await).clone();
    assert_eq!(task["status"], "pending", "a store failure leaves the task waiting, not failed: {task}");
    faulty.clear();

    let batch = json!({ "messages": [say("k1", "user", "We visit Kyoto in May.", "2026-05-02T09:00:00Z")] });
    ok(&sessions_post(&app, &format!("{SESSIONS_PATH}/c1/messages/batch"), &batch).await);
    ok(&sessions_post(&app, &format!("{SESSIONS_PATH}/c1/commit"), &json!({})).await);
    let task =
        ok(&call(&app, Handler::Sessions, "GET", &format!("/api/v1/tasks/{first_task}"), &[], None).await).clone();
    assert_eq!(task["status"], "completed", "{task}");
    assert!(
        text_of(&store, &format!("{USER_TREE}memories/entities/scooter.md")).await.is_some_and(|t| t.contains("Vespa"))
    );
    assert!(
        text_of(&store, &format!("{USER_TREE}memories/entities/trip.md")).await.is_some_and(|t| t.contains("Kyoto"))
    );
}
