//! Session commits and session contexts end to end through the Lambda edge:
//! `POST /api/v1/sessions/{id}/commit` archives the messages since the last
//! archive into `history/archive_{N}/` (a claim with the sequence range,
//! `.overview.md`, `.abstract.md`), `GET /api/v1/sessions/{id}` counts it,
//! and `GET /api/v1/sessions/{id}/context` serves it back within a budget.
//!
//! Retries and races are checked as S3 shows them: a commit repeated after
//! an outcome left unknown (a claim written, the meta not yet moved), and 8
//! concurrent commits of one session, on a local store and on S3 (a moto
//! server on loopback): exactly one archive, nothing archived twice.

use std::sync::Arc;

use serde_json::{Value, json};
use skald::app::App;
use skald::config::{Config, IdentityConfig, IdentityMode};
use skald::embed::Embedder;
use skald::embed::hashed::HashedEmbedder;
use skald::identity::{AccountId, Identity, UserId};
use skald::sessions::{SessionId, Sessions};
use skald::store::{PutMode, SharedStore};
use skald_tests::fixture::{
    EMBED_DIMENSION, Handler, Reply, SESSIONS_PATH, app_over_store, call, local_store, ok, s3_shared_store,
    session_key, sessions_get, sessions_post, store_json,
};
use skald_tests::model_server::{ModelServer, Reply as ModelReply};

async fn append(app: &Arc<App>, id: &str, role: &str, text: &str) {
    let reply =
        sessions_post(app, &format!("{SESSIONS_PATH}/{id}/messages"), &json!({"role": role, "content": text})).await;
    ok(&reply);
}

async fn commit(app: &Arc<App>, id: &str, body: &Value) -> Reply {
    sessions_post(app, &format!("{SESSIONS_PATH}/{id}/commit"), body).await
}

async fn info(app: &Arc<App>, id: &str) -> Value {
    ok(&sessions_get(app, &format!("{SESSIONS_PATH}/{id}")).await).clone()
}

async fn context(app: &Arc<App>, id: &str, budget: Option<u64>) -> Value {
    let query = budget.map(|b| format!("?token_budget={b}")).unwrap_or_default();
    ok(&sessions_get(app, &format!("{SESSIONS_PATH}/{id}/context{query}")).await).clone()
}

fn counts(info: &Value) -> (u64, u64, u64) {
    let n = |k: &str| info[k].as_u64().unwrap_or_else(|| panic!("{k} is not a count: {info}"));
    (n("commit_count"), n("message_count"), n("total_message_count"))
}

/// A dialogue of `turns` user/assistant pairs on session `id`.
async fn dialogue(app: &Arc<App>, id: &str, turns: usize, topic: &str) {
    for i in 0..turns {
        append(app, id, "user", &format!("{topic} question {i}: how do I plan the next step?")).await;
        append(app, id, "assistant", &format!("{topic} answer {i}: book the inn first.")).await;
    }
}

#[tokio::test]
async fn a_commit_archives_the_messages_and_the_session_counts_it() {
    let (store, _dir) = local_store();
    let app = app_over_store(store.clone());
    dialogue(&app, "c1", 3, "Kyoto").await;
    let before = info(&app, "c1").await;
    assert_eq!(counts(&before), (0, 6, 6));
    assert!(before["pending_tokens"].as_u64().is_some_and(|t| t > 0), "{before}");

    let reply = commit(&app, "c1", &json!({})).await;
    let result = ok(&reply);
    assert_eq!(result["status"], "accepted", "{result}");
    assert_eq!(result["archived"], true);
    assert_eq!(result["archive_uri"], "viking://user/default/sessions/c1/history/archive_001");
    assert_eq!(result["archived_message_count"], 6);
    let task_id = result["task_id"].as_str().expect("a task");
    assert!(
        result["memory_extraction"].as_str().is_some_and(|m| m.contains("kept as 3 event memories under")),
        "{result}"
    );
    assert_eq!(result["summary"], "extractive");

    let after = info(&app, "c1").await;
    assert_eq!(counts(&after), (1, 0, 6), "{after}");
    assert_eq!(after["memories_extracted"], json!({"total": 3, "events": 3}), "{after}");
    assert_eq!(after["pending_tokens"], 0, "{after}");
    let overview =
        store.get(&session_key("default", "c1", "history/archive_001/.overview.md")).await.expect("overview");
    let overview = String::from_utf8_lossy(&overview.body).into_owned();
    assert!(overview.contains("3 turns, 6 messages") && overview.contains("Kyoto question 2"), "{overview}");
    let claim = store_json(&store, &session_key("default", "c1", "history/archive_001/.meta.json")).await;
    let claim = claim.expect("the archive's claim");
    assert_eq!((claim["from_seq"].as_u64(), claim["to_seq"].as_u64()), (Some(0), Some(6)), "{claim}");

    // The commit's task says what became of the conversation.
    let task = ok(&sessions_get(&app, &format!("/api/v1/tasks/{task_id}")).await).clone();
    assert_eq!((task["status"].as_str(), task["task_type"].as_str()), (Some("completed"), Some("session_commit")));
    assert_eq!(task["resource_id"], "c1");
    assert_eq!(task["result"]["memories_extracted"], json!({"events": 3, "total": 3}), "{task}");
    assert_eq!(task["result"]["archive_uri"], "viking://user/default/sessions/c1/history/archive_001");

    // Retried: nothing new, nothing archived twice.
    let again = commit(&app, "c1", &json!({})).await;
    assert_eq!((ok(&again)["status"].as_str(), ok(&again)["reason"].as_str()), (Some("skipped"), Some("no_messages")));
    assert_eq!(counts(&info(&app, "c1").await), (1, 0, 6));

    // New messages go to the next archive.
    dialogue(&app, "c1", 1, "Osaka").await;
    let second = commit(&app, "c1", &json!({})).await;
    assert_eq!(ok(&second)["archive_uri"], "viking://user/default/sessions/c1/history/archive_002");
    assert_eq!(counts(&info(&app, "c1").await), (2, 0, 8));
}

#[tokio::test]
async fn keep_recent_count_leaves_the_newest_messages_live() {
    let (store, _dir) = local_store();
    let app = app_over_store(store);
    dialogue(&app, "k1", 2, "trip").await;
    let reply = commit(&app, "k1", &json!({"keep_recent_count": 3})).await;
    assert_eq!(ok(&reply)["archived_message_count"], 1, "{}", reply.text);
    assert_eq!(counts(&info(&app, "k1").await), (1, 3, 4));
    let kept = commit(&app, "k1", &json!({"keep_recent_count": 10})).await;
    assert_eq!(ok(&kept)["reason"], "all_within_keep_window", "{}", kept.text);
    // The retained messages are what the context serves after the overview.
    let ctx = context(&app, "k1", None).await;
    let texts: Vec<&str> =
        ctx["messages"].as_array().expect("messages").iter().filter_map(|m| m["parts"][0]["text"].as_str()).collect();
    assert_eq!(
        texts,
        [
            "trip answer 0: book the inn first.",
            "trip question 1: how do I plan the next step?",
            "trip answer 1: book the inn first."
        ]
    );
    assert!(ctx["latest_archive_overview"].as_str().is_some_and(|o| o.contains("1 turn, 1 message")), "{ctx}");
}

#[tokio::test]
async fn the_context_serves_archives_and_messages_within_the_budget() {
    let (store, _dir) = local_store();
    let app = app_over_store(store);
    // No archive yet: only messages.
    dialogue(&app, "x1", 1, "first").await;
    let ctx = context(&app, "x1", None).await;
    assert_eq!(ctx["latest_archive_overview"], "");
    assert_eq!(ctx["messages"].as_array().map(Vec::len), Some(2));
    assert_eq!(ctx["stats"]["totalArchives"], 0);

    ok(&commit(&app, "x1", &json!({})).await);
    dialogue(&app, "x1", 1, "second").await;
    ok(&commit(&app, "x1", &json!({})).await);
    dialogue(&app, "x1", 1, "third").await;
    let ctx = context(&app, "x1", None).await;
    assert!(ctx["latest_archive_overview"].as_str().is_some_and(|o| o.contains("second question 0")), "{ctx}");
    let abstracts = ctx["pre_archive_abstracts"].as_array().expect("abstracts");
    assert_eq!(abstracts.len(), 1, "{ctx}");
    assert!(abstracts[0].as_str().is_some_and(|a| a.contains("first question 0")), "{ctx}");
    assert_eq!(ctx["messages"].as_array().map(Vec::len), Some(2), "only what is not archived");
    assert_eq!((ctx["stats"]["totalArchives"].as_u64(), ctx["stats"]["includedArchives"].as_u64()), (Some(2), Some(2)));
    let total = ctx["estimatedTokens"].as_u64().expect("tokens");
    // A smaller budget drops what does not fit, the oldest first.
    let tight = context(&app, "x1", Some(total - 1)).await;
    assert!(tight["estimatedTokens"].as_u64().is_some_and(|t| t < total), "{tight}");
    assert!(tight["pre_archive_abstracts"].as_array().is_some_and(Vec::is_empty), "{tight}");
    assert_eq!(tight["stats"]["droppedArchives"], 1, "{tight}");
}

#[tokio::test]
async fn a_commit_retried_after_an_unknown_outcome_finishes_the_same_archive() {
    let (store, _dir) = local_store();
    let app = app_over_store(store.clone());
    dialogue(&app, "r1", 2, "retry").await;
    // An earlier attempt claimed archive_001 for these messages and wrote its
    // summaries, then its meta update's outcome was lost.
    let identity = Identity {
        account: AccountId::new("default").expect("valid"),
        user: UserId::new("default").expect("valid"),
        actor_peer: None,
    };
    let sessions = Sessions::new(&store, &identity);
    let id = SessionId::new("r1").expect("valid");
    let plan = sessions.plan_commit(&id, 0, "2026-12-01T00:00:00Z").await.expect("plan").expect("messages to archive");
    let claim = json!({"index": 1, "from_seq": 0, "to_seq": 4, "message_count": 4, "created_at": "2026-12-01T00:00:00Z", "summary": "extractive"});
    store
        .put(
            &session_key("default", "r1", "history/archive_001/.meta.json"),
            claim.to_string().into(),
            PutMode::CreateNew,
        )
        .await
        .expect("claim");
    assert_eq!(plan.range.index, 1);
    let reply = commit(&app, "r1", &json!({})).await;
    assert_eq!(ok(&reply)["archive_uri"], "viking://user/default/sessions/r1/history/archive_001", "{}", reply.text);
    assert_eq!(counts(&info(&app, "r1").await), (1, 0, 4));
    // The write itself, repeated after it landed, changes nothing.
    let summary = skald::sessions::extractive_summary(&plan.messages);
    let meta = sessions.write_archive(&id, &plan, &summary, "extractive", "2026-12-01T00:00:01Z").await.expect("again");
    assert_eq!((meta.commit_count, meta.archived_message_count), (1, 4));

    // A claim made for another range after this commit planned (a
    // concurrent commit's) is not taken as ours.
    dialogue(&app, "r1", 1, "more").await;
    let plan = sessions.plan_commit(&id, 0, "now").await.expect("plan").expect("messages");
    assert_eq!((plan.range.index, plan.range.from_seq, plan.range.to_seq), (2, 4, 6));
    let other =
        json!({"index": 2, "from_seq": 4, "to_seq": 5, "message_count": 1, "created_at": "x", "summary": "extractive"});
    store
        .put(
            &session_key("default", "r1", "history/archive_002/.meta.json"),
            other.to_string().into(),
            PutMode::CreateNew,
        )
        .await
        .expect("claim");
    let err =
        sessions.write_archive(&id, &plan, &summary, "extractive", "now").await.expect_err("someone else's claim");
    assert!(err.to_string().contains("busy"), "{err}");
    // That claim, left by an attempt that stopped before moving the meta, is
    // for a shorter range than what is pending now: the next commit finishes
    // it, and what came after goes to the archive after it.
    let reply = commit(&app, "r1", &json!({})).await;
    assert_eq!(ok(&reply)["archive_uri"], "viking://user/default/sessions/r1/history/archive_002", "{}", reply.text);
    assert_eq!(ok(&reply)["archived_message_count"], 1, "{}", reply.text);
    assert_eq!(counts(&info(&app, "r1").await), (2, 1, 6));
    let rest = commit(&app, "r1", &json!({})).await;
    assert_eq!(ok(&rest)["archive_uri"], "viking://user/default/sessions/r1/history/archive_003", "{}", rest.text);
    assert_eq!(counts(&info(&app, "r1").await), (3, 0, 6));
}

async fn concurrent_commits_make_one_archive(store: SharedStore) {
    let app = app_over_store(store.clone());
    dialogue(&app, "race", 5, "race").await;
    let commits = (0..8).map(|_| {
        let app = Arc::clone(&app);
        tokio::spawn(async move { commit(&app, "race", &json!({})).await })
    });
    let replies = futures_util_join(commits).await;
    let mut accepted = Vec::new();
    for reply in &replies {
        let result = ok(reply);
        match result["status"].as_str() {
            Some("accepted") => accepted.push(result["archive_uri"].as_str().unwrap_or_default().to_owned()),
            Some("skipped") => assert_eq!(result["reason"], "no_messages", "{result}"),
            other => panic!("unexpected status {other:?}: {result}"),
        }
    }
    assert!(!accepted.is_empty(), "one commit archived");
    assert!(accepted.iter().all(|u| u.ends_with("/history/archive_001")), "{accepted:?}");
    assert_eq!(counts(&info(&app, "race").await), (1, 0, 10));
    let listed = store.list(&session_key("default", "race", "history/")).await.expect("list");
    let dirs: std::collections::BTreeSet<String> =
        listed.iter().filter_map(|m| m.key.split("/history/").nth(1)?.split('/').next().map(str::to_owned)).collect();
    assert_eq!(dirs.into_iter().collect::<Vec<_>>(), ["archive_001"]);
}

async fn futures_util_join(handles: impl Iterator<Item = tokio::task::JoinHandle<Reply>>) -> Vec<Reply> {
    let mut out = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        out.push(handle.await.expect("a commit task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_make_one_archive_locally() {
    let (store, _dir) = local_store();
    concurrent_commits_make_one_archive(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_make_one_archive_on_s3() {
    concurrent_commits_make_one_archive(s3_shared_store("session-commit-race").await).await;
}

fn app_with_model(store: SharedStore, server: &ModelServer) -> Arc<App> {
    let config = Config {
        identity: IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() },
        llm: Some(server.openai_model("stub")),
        ..Config::default()
    };
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(EMBED_DIMENSION));
    Arc::new(App::with_parts(config, store, embedder))
}

#[tokio::test]
async fn a_configured_model_writes_the_summary_and_a_failing_one_falls_back() {
    let server = ModelServer::start().await;
    server.set_default(ModelReply::Text(
        "# Kyoto trip\n\nThe user is booking a December inn in Kyoto.\n\n## Goals\n- book the inn\n".into(),
    ));
    let (store, _dir) = local_store();
    let app = app_with_model(store.clone(), &server);
    dialogue(&app, "m1", 2, "Kyoto").await;
    let reply = commit(&app, "m1", &json!({})).await;
    assert_eq!(ok(&reply)["summary"], "llm", "{}", reply.text);
    // The summary's request (the extraction's comes after it).
    let prompt =
        server.requests().iter().map(|r| r.prompt_text()).find(|p| p.contains("working memory")).unwrap_or_default();
    assert!(prompt.contains("[user]: Kyoto question 1") && prompt.contains("[assistant]: Kyoto answer 0"), "{prompt}");
    let ctx = context(&app, "m1", None).await;
    assert!(ctx["latest_archive_overview"].as_str().is_some_and(|o| o.starts_with("# Kyoto trip")), "{ctx}");
    let abstract_ =
        store.get(&session_key("default", "m1", "history/archive_001/.abstract.md")).await.expect("abstract");
    assert_eq!(String::from_utf8_lossy(&abstract_.body), "The user is booking a December inn in Kyoto.\n");

    server.set_default(ModelReply::Status(500));
    dialogue(&app, "m1", 1, "Osaka").await;
    let reply = commit(&app, "m1", &json!({})).await;
    assert_eq!((ok(&reply)["status"].as_str(), ok(&reply)["summary"].as_str()), (Some("accepted"), Some("extractive")));
    // A client deadline too short for the model: no call, the extractive summary.
    let calls = server.requests().len();
    dialogue(&app, "m1", 1, "Nara").await;
    let event = skald_tests::fixture::request_to(
        &format!("{SESSIONS_PATH}/m1/commit"),
        "POST",
        &[("x-client-timeout-ms", "500")],
        lambda_http::Body::Text("{}".into()),
    );
    let reply = skald_tests::fixture::call_handler(&app, skald_tests::fixture::Handler::Sessions, event).await;
    assert_eq!(ok(&reply)["summary"], "extractive", "{}", reply.text);
    assert_eq!(server.requests().len(), calls, "no model call without time for it");
}

#[tokio::test]
async fn bad_commits_and_contexts_are_refused_with_the_field_named() {
    let (store, _dir) = local_store();
    let app = app_over_store(store);
    append(&app, "b1", "user", "hello there").await;
    let missing = commit(&app, "nobody", &json!({})).await;
    assert_eq!((missing.status, missing.json["error"]["code"].as_str()), (404, Some("NOT_FOUND")), "{}", missing.text);
    assert!(missing.text.contains("Session not found: nobody"), "{}", missing.text);
    let cases: &[(Value, &str)] = &[
        (json!({"keep_recent_count": -1}), "keep_recent_count"),
        (json!({"keep_recent_count": 10001}), "keep_recent_count"),
        (json!({"keep_recent_count": "3"}), "keep_recent_count"),
        (json!({"retention_mode": "sliding"}), "retention_mode"),
        // The turn fields need the mode.
        (json!({"keep_recent_turn_count": 3}), "keep_recent_turn_count"),
        (json!({"retention_mode": "turn_budget", "retained_message_token_budget": 0}), "retained_message_token_budget"),
        (json!({"retention_mode": "turn_budget", "min_raw_tail_steps": -1}), "min_raw_tail_steps"),
        (json!({"keep_everything": true}), "keep_everything"),
    ];
    for (body, field) in cases {
        let reply = commit(&app, "b1", body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text);
        let locs = &reply.json["error"]["details"]["validation_errors"];
        assert!(
            locs.as_array().is_some_and(|l| l.iter().any(|e| e["loc"] == json!(["body", field]))),
            "{body}: {}",
            reply.text
        );
    }
    for query in ["token_budget=0", "token_budget=abc", "token_budget=1000001"] {
        let reply = sessions_get(&app, &format!("{SESSIONS_PATH}/b1/context?{query}")).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.text);
        assert!(reply.text.contains("\"query\",\"token_budget\""), "{query}: {}", reply.text);
    }
    let ctx_missing = sessions_get(&app, &format!("{SESSIONS_PATH}/nobody/context")).await;
    assert_eq!(ctx_missing.status, 404, "{}", ctx_missing.text);
    let wrong_method = sessions_get(&app, &format!("{SESSIONS_PATH}/b1/commit")).await;
    assert_eq!(wrong_method.status, 405, "{}", wrong_method.text);
    // Nothing was archived by the refused commits.
    assert_eq!(counts(&info(&app, "b1").await), (0, 1, 1));
}

/// Say, remember, recall: what a user said in a committed session is an
/// event memory that a later `find` and context `search` return, verbatim,
/// with its date and speaker; another user finds none of it, and the task
/// of another user's commit is not found.
#[tokio::test]
async fn what_a_committed_session_said_is_found_later() {
    let (store, _dir) = local_store();
    let app = app_over_store(store.clone());
    let say = |id: &'static str, role: &'static str, text: &'static str, at: &'static str| json!({"id": id, "role": role, "content": text, "created_at": at});
    let batch = json!({"messages": [
        say("m1", "user", "Our dog Biscuit is allergic to chicken.", "2026-03-09T08:15:00+01:00"),
        say("m2", "assistant", "Noted: no chicken for Biscuit. Lamb or fish kibble are the usual alternatives; check treats and dental chews too, since many hide chicken fat.", "2026-03-09T08:15:20+01:00"),
        say("m3", "user", "Also, the marathon is in Lisbon this year.", "2026-03-09T08:16:00+01:00"),
        say("m4", "assistant", "Lisbon it is.", "2026-03-09T08:16:30+01:00"),
    ]});
    ok(&sessions_post(&app, &format!("{SESSIONS_PATH}/pets/messages/batch"), &batch).await);
    let committed = commit(&app, "pets", &json!({})).await;
    let task_id = ok(&committed)["task_id"].as_str().expect("a task").to_owned();

    let event = "viking://user/default/memories/events/2026/03/09/pets-001-01.md";
    let file = store.get("accounts/default/tree/user/default/memories/events/2026/03/09/pets-001-01.md").await;
    let text = String::from_utf8(file.expect("the episode file").body.to_vec()).expect("utf-8");
    assert_eq!(
        text,
        "2026-03-09 (Monday) 08:15\nuser: Our dog Biscuit is allergic to chicken.\nassistant: Noted: no chicken for \
         Biscuit. Lamb or fish kibble are the usual alternatives; check treats and dental chews too, since many \
         hide chicken fat.\n"
    );

    let find = json!({"query": "what is my dog allergic to", "limit": 5});
    let found = call(&app, Handler::Find, "POST", "/api/v1/search/find", &[], Some(&find)).await;
    let memories = ok(&found)["memories"].as_array().expect("memories").clone();
    let hit = memories.iter().find(|m| m["uri"] == event).unwrap_or_else(|| panic!("no episode in {memories:?}"));
    assert_eq!(hit["context_type"], "memory", "{hit}");

    let search = json!({"query": "what is my dog allergic to", "mode": "context", "max_tokens": 800});
    let block = call(&app, Handler::Search, "POST", "/api/v1/search/search", &[], Some(&search)).await;
    let rendered = ok(&block)["rendered"].as_str().expect("rendered").to_owned();
    assert!(rendered.contains("Biscuit is allergic to chicken"), "{rendered}");
    assert!(rendered.contains("since many hide chicken fat."), "a roomy block holds the whole exchange: {rendered}");

    // A tight budget shows the episode's digest: what the user said,
    // without the reply.
    let tight = json!({"query": "what is my dog allergic to", "mode": "context", "max_tokens": 64});
    let block = call(&app, Handler::Search, "POST", "/api/v1/search/search", &[], Some(&tight)).await;
    let rendered = ok(&block)["rendered"].as_str().expect("rendered").to_owned();
    assert!(rendered.contains("detail=\"abstract\">\n2026-03-09 (Monday) 08:15\nuser: Our dog Biscuit"), "{rendered}");
    assert!(!rendered.contains("Noted"), "{rendered}");

    // A quota bounds the bucket, the episode after a hit included.
    let one =
        json!({"query": "what is my dog allergic to", "mode": "context", "max_tokens": 800, "quotas": {"events": 1}});
    let block = call(&app, Handler::Search, "POST", "/api/v1/search/search", &[], Some(&one)).await;
    let served: Vec<&str> =
        ok(&block)["entries"].as_array().expect("entries").iter().filter_map(|e| e["uri"].as_str()).collect();
    assert_eq!(served, [event], "one event entry for a quota of one");

    // Another user of the account sees none of it.
    let bob = [("X-OpenViking-User", "bob")];
    let theirs = call(&app, Handler::Find, "POST", "/api/v1/search/find", &bob, Some(&find)).await;
    assert!(!theirs.text.contains("Biscuit"), "{}", theirs.text);
    let task = call(&app, Handler::Sessions, "GET", &format!("/api/v1/tasks/{task_id}"), &bob, None).await;
    assert_eq!(task.status, 404, "{}", task.text);

    // One file per exchange, and nothing else under events.
    let listed = store.list("accounts/default/tree/user/default/memories/events/").await.expect("list");
    assert_eq!(listed.len(), 2, "one file per exchange: {listed:?}");
}

/// The memories land before the archive mark moves: a commit whose episode
/// write fails answers 503, its task says why, and nothing is lost — the
/// retry plans the same archive, writes the missing file and keeps the one
/// already there, and the session counts its memories once.
#[tokio::test]
async fn a_commit_whose_memories_fail_is_finished_by_its_retry() {
    use skald_tests::faults::{Fault, FaultyStore, Op, Rule};
    let (store, _dir) = local_store();
    let faulty = Arc::new(FaultyStore::new(store.clone(), vec![]));
    let shared: SharedStore = faulty.clone();
    let app = app_over_store(shared);
    // 14 messages: seven episodes; the second one's write fails (others
    // may land beside it).
    dialogue(&app, "f1", 7, "Porto").await;
    faulty.push(Rule::nth(Op::Put, "memories/events/", 2, Fault::FailBeforeLanding));
    let failed = commit(&app, "f1", &json!({})).await;
    assert_eq!(failed.status, 503, "{}", failed.text);
    assert_eq!(counts(&info(&app, "f1").await), (0, 14, 14), "nothing archived yet");
    let events = "accounts/default/tree/user/default/memories/events/";
    let landed = store.list(events).await.expect("list").len();
    assert!((1..7).contains(&landed), "the first episode landed, the second did not: {landed}");
    let tasks = ok(&sessions_get(&app, "/api/v1/tasks?resource_id=f1").await).clone();
    assert_eq!(tasks[0]["status"], "failed", "{tasks}");
    assert!(tasks[0]["error"].as_str().is_some_and(|e| !e.is_empty()), "{tasks}");

    let retried = commit(&app, "f1", &json!({})).await;
    let result = ok(&retried);
    assert_eq!(result["archive_uri"], "viking://user/default/sessions/f1/history/archive_001", "{result}");
    assert_eq!(store.list(events).await.expect("list").len(), 7);
    let task =
        ok(&sessions_get(&app, &format!("/api/v1/tasks/{}", result["task_id"].as_str().expect("task"))).await).clone();
    assert_eq!((task["status"].as_str(), task["error"].is_null()), (Some("completed"), true), "{task}");
    let after = info(&app, "f1").await;
    assert_eq!(counts(&after), (1, 0, 14));
    assert_eq!(after["memories_extracted"], json!({"total": 7, "events": 7}), "{after}");
}

/// The archive's list of episodes is a file of the user's tree: what it
/// names outside the user's events is never deleted by a commit.
#[tokio::test]
async fn an_episode_list_naming_other_files_deletes_none_of_them() {
    let (store, _dir) = local_store();
    let app = app_over_store(store.clone());
    dialogue(&app, "g1", 1, "guard").await;
    let notes = "accounts/default/tree/resources/notes.md";
    let own = "accounts/default/tree/user/default/memories/profile.md";
    for key in [notes, own] {
        store.put(key, "# Keep me\n".into(), PutMode::Overwrite).await.expect("seed a file");
    }
    let listed = json!([
        "viking://resources/notes.md",
        "viking://user/default/memories/profile.md",
        "viking://user/default/memories/events"
    ]);
    let list = session_key("default", "g1", "history/archive_001/.episodes.json");
    store.put(&list, listed.to_string().into(), PutMode::Overwrite).await.expect("a forged list");
    ok(&commit(&app, "g1", &json!({})).await);
    for key in [notes, own] {
        assert!(store.get(key).await.is_ok(), "{key} was deleted");
    }
    let now_listed = store_json(&store, &list).await.expect("the list");
    assert_eq!(now_listed.as_array().map(Vec::len), Some(1), "only the commit's own episode: {now_listed}");
}

/// OpenCode commits with `keep_recent_count: 10` at every boundary, the
/// chat's end included: a short chat is never archived. What it said is
/// still remembered — the live messages are event memories after each
/// commit — and each message is one episode at rest: once a commit
/// archives messages, their live episodes give way to the archive's.
#[tokio::test]
async fn messages_a_keep_window_leaves_live_are_remembered_once() {
    let (store, _dir) = local_store();
    let app = app_over_store(store);
    let find_uris = |app: Arc<App>, query: &'static str| async move {
        let body = json!({"query": query, "search_type": "keywords", "limit": 20});
        let reply = call(&app, Handler::Find, "POST", "/api/v1/search/find", &[], Some(&body)).await;
        ok(&reply)["memories"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["uri"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    let said = |n: usize| {
        let messages: Vec<Value> = (0..n)
            .flat_map(|i| {
                [
                    json!({"role": "user", "content": format!("turn {i}: the greenhouse vent opens at 24 degrees")}),
                    json!({"role": "assistant", "content": format!("noted {i}")}),
                ]
            })
            .collect();
        json!({ "messages": messages })
    };
    assert_eq!(sessions_post(&app, "/api/v1/sessions/oc1/messages/batch", &said(2)).await.status, 200);
    let kept = commit(&app, "oc1", &json!({"keep_recent_count": 10})).await;
    assert_eq!(ok(&kept)["reason"], "all_within_keep_window", "{}", kept.text);
    let text = ok(&kept)["memory_extraction"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains("The 4 newest messages") && text.contains("2 event memories"), "{text}");
    let live = find_uris(Arc::clone(&app), "greenhouse vent").await;
    assert_eq!(live.len(), 2, "the short chat is found: {live:?}");
    assert!(live.iter().all(|u| u.contains("/oc1-000-")), "{live:?}");

    // More is said; a commit archives all but the newest 10: the archived
    // exchanges are the archive's episodes, the live ones stay live, and
    // no exchange is found twice.
    assert_eq!(sessions_post(&app, "/api/v1/sessions/oc1/messages/batch", &said(6)).await.status, 200);
    let accepted = commit(&app, "oc1", &json!({"keep_recent_count": 10})).await;
    assert_eq!(ok(&accepted)["archived_message_count"], 6, "{}", accepted.text);
    let all = find_uris(Arc::clone(&app), "greenhouse vent").await;
    let (archived, live): (Vec<_>, Vec<_>) = all.iter().partition(|u| u.contains("/oc1-001-"));
    assert_eq!((archived.len(), live.len()), (3, 5), "{all:?}");
    assert!(live.iter().all(|u| u.contains("/oc1-000-")), "{all:?}");

    // A commit that archives everything leaves no live episode behind.
    let last = commit(&app, "oc1", &json!({})).await;
    assert_eq!(ok(&last)["archived_message_count"], 10, "{}", last.text);
    let all = find_uris(Arc::clone(&app), "greenhouse vent").await;
    assert_eq!(all.len(), 8, "{all:?}");
    assert!(all.iter().all(|u| !u.contains("/oc1-000-")), "{all:?}");
}

/// Turn-budget retention (`retention_mode: "turn_budget"`): the newest
/// user turns that fit the token budget stay live, the rest is archived,
/// and the answer says how many tokens stayed and whether the budget held.
#[tokio::test]
async fn a_turn_budget_commit_keeps_the_newest_turns_that_fit() {
    let (store, _dir) = local_store();
    let app = app_over_store(store);
    for turn in 1..=4 {
        append(&app, "tb", "user", &format!("question {turn} about the greenhouse")).await;
        append(&app, "tb", "assistant", &format!("answer {turn}: water the tomatoes at dawn")).await;
    }
    let body = json!({"retention_mode": "turn_budget", "keep_recent_turn_count": 2});
    let reply = commit(&app, "tb", &body).await;
    let result = ok(&reply);
    assert_eq!(
        (result["status"].as_str(), result["archived"].as_bool()),
        (Some("accepted"), Some(true)),
        "{}",
        reply.text
    );
    assert_eq!(result["budget_exceeded"], false, "{}", reply.text);
    assert!(result["estimated_active_tokens"].as_u64().is_some_and(|t| t > 0), "{}", reply.text);
    let archive = sessions_get(&app, &format!("{SESSIONS_PATH}/tb/archives/archive_001")).await;
    let archived = ok(&archive)["messages"].as_array().map(Vec::len);
    assert_eq!(archived, Some(4), "two turns archived, two kept: {}", archive.text);
    let context = sessions_get(&app, &format!("{SESSIONS_PATH}/tb/context")).await;
    let live: Vec<String> = ok(&context)["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["parts"][0]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(live.first().map(String::as_str), Some("question 3 about the greenhouse"), "{live:?}");
    // A budget too small for a turn keeps the minimal tail and says so.
    append(&app, "tb", "user", &"a very long question ".repeat(50)).await;
    let body = json!({"retention_mode": "turn_budget", "retained_message_token_budget": 5, "min_raw_tail_steps": 1});
    let reply = commit(&app, "tb", &body).await;
    assert_eq!(ok(&reply)["budget_exceeded"], true, "{}", reply.text);
}
