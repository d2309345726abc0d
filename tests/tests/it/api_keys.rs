//! API keys (`identity.mode: "api_key"`) through the Lambda edge: the key
//! lifecycle (create, use, list, revoke, revalidation) on the local and the
//! S3 store, and the table of identity cases every role meets.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skald::app::App;
use skald::config::{Config, IdentityConfig, IdentityMode};
use skald::embed::Embedder;
use skald::embed::hashed::HashedEmbedder;
use skald::identity::{AccountId, UserId};
use skald::ingest::{IngestOptions, ingest_dir};
use skald::keys::{self, KeyId, Role};
use skald::store::{PutMode, SharedStore};
use skald_tests::fixture::{EMBED_DIMENSION, TempDir, call_find, post_json, write_tree};

/// Two users in account `default`, one in account `acme`.
const CORPUS: &[(&str, &str)] = &[
    ("user/alice/memories/preferences/editor.md", "Alice edits in Helix with the gruvbox theme."),
    ("user/bob/memories/preferences/editor.md", "Bob edits in Emacs with the zenburn theme."),
];
const ACME_CORPUS: &[(&str, &str)] = &[("user/carol/memories/preferences/editor.md", "Carol edits in Vim.")];

// Runs each check against both stores: `local::<check>`, `s3::<check>`.
skald_tests::on_both_stores!(worker_threads = 2;
    a_key_works_until_it_is_revoked,
    a_revoked_key_stops_within_the_revalidation,
    every_role_meets_its_bounds
);

/// An `api_key`-mode app over `store` with the corpora ingested, trusting
/// what it read of a key for `revalidate`.
async fn api_key_app(store: SharedStore, revalidate: Duration) -> Arc<App> {
    let embedder = HashedEmbedder::new(EMBED_DIMENSION);
    for (account, files) in [("default", CORPUS), ("acme", ACME_CORPUS)] {
        let source = TempDir::new("source");
        write_tree(source.path(), files);
        let account = AccountId::new(account).expect("valid account");
        ingest_dir(
            source.path(),
            &skald::index::Target::segments(&store),
            &account,
            &embedder,
            &IngestOptions::default(),
            &mut |_| {},
        )
        .await
        .expect("ingest");
    }
    let config = Config {
        identity: IdentityConfig {
            mode: IdentityMode::ApiKey,
            key_revalidate_ms: u64::try_from(revalidate.as_millis()).expect("small"),
            ..IdentityConfig::default()
        },
        ..Config::default()
    };
    let embedder: Arc<dyn Embedder> = Arc::new(embedder);
    Arc::new(App::with_parts(config, store, embedder))
}

async fn create(store: &SharedStore, account: &str, user: &str, role: Role) -> keys::NewKey {
    let account = AccountId::new(account).expect("valid account");
    let user = UserId::new(user).expect("valid user");
    keys::create(store, &account, &user, role, 1_800_000_000).await.expect("create a key")
}

/// `find` for "editor theme" with `headers`: the status and the users
/// whose memories came back (the third segment of each URI).
async fn find_as(app: &Arc<App>, headers: &[(&str, &str)]) -> (u16, Vec<String>, Value) {
    let body = json!({"query": "editor theme", "context_type": "memory", "limit": 10});
    let answer = call_find(app, post_json(&body, headers)).await;
    let mut users: Vec<String> = answer.json["result"]["memories"]
        .as_array()
        .map(|hits| {
            hits.iter().filter_map(|h| h["uri"].as_str()?.split('/').nth(3).map(str::to_owned)).collect::<Vec<_>>()
        })
        .unwrap_or_default();
    users.sort();
    users.dedup();
    (answer.status, users, answer.json)
}

async fn a_key_works_until_it_is_revoked(store: SharedStore) {
    let app = api_key_app(Arc::clone(&store), Duration::ZERO).await;
    let alice = create(&store, "default", "alice", Role::User).await;
    let bob = create(&store, "default", "bob", Role::Admin).await;
    assert_ne!(alice.key, bob.key);
    assert!(alice.key.len() >= 6 + 16 + 1 + 32, "at least 128 random bits: {}", alice.key);

    let (status, users, body) = find_as(&app, &[("X-API-Key", &alice.key)]).await;
    assert_eq!((status, users), (200, vec!["alice".to_owned()]), "{body}");
    let bearer = format!("Bearer {}", alice.key);
    let (status, users, body) = find_as(&app, &[("Authorization", &bearer)]).await;
    assert_eq!((status, users), (200, vec!["alice".to_owned()]), "{body}");

    // The table lists ids, owners and roles, and stores no secret.
    let listed = keys::list(&store).await.expect("list");
    let ids: Vec<(&str, &str, Role)> = listed.iter().map(|r| (r.id.as_str(), r.user.as_str(), r.role)).collect();
    assert!(ids.contains(&(alice.record.id.as_str(), "alice", Role::User)), "{ids:?}");
    assert!(ids.contains(&(bob.record.id.as_str(), "bob", Role::Admin)), "{ids:?}");
    for key in [&alice.key, &bob.key] {
        let secret = key.rsplit('_').next().expect("a secret");
        for meta in store.list(keys::KEYS_PREFIX).await.expect("list keys/") {
            let text = String::from_utf8(store.get(&meta.key).await.expect("read").body.to_vec()).expect("utf-8");
            assert!(!text.contains(secret), "{} holds a secret: {text}", meta.key);
        }
    }

    // Revoked: refused on the next request (no revalidation window).
    let id = KeyId::new(&alice.record.id).expect("an id");
    assert!(keys::revoke(&store, &id).await.expect("revoke"));
    assert!(!keys::revoke(&store, &id).await.expect("revoke again"), "a second revoke finds nothing");
    let (status, _, body) = find_as(&app, &[("X-API-Key", &alice.key)]).await;
    assert_eq!(status, 401, "{body}");
    let (status, users, body) = find_as(&app, &[("X-API-Key", &bob.key)]).await;
    assert_eq!((status, users), (200, vec!["bob".to_owned()]), "the other key still works: {body}");
}

async fn a_revoked_key_stops_within_the_revalidation(store: SharedStore) {
    let window = Duration::from_millis(400);
    let app = api_key_app(Arc::clone(&store), window).await;
    let alice = create(&store, "default", "alice", Role::User).await;
    let (status, _, body) = find_as(&app, &[("X-API-Key", &alice.key)]).await;
    assert_eq!(status, 200, "{body}");
    assert!(keys::revoke(&store, &KeyId::new(&alice.record.id).expect("an id")).await.expect("revoke"));
    // Within the window the warm copy still answers (that is the trade);
    // past it the key is refused.
    tokio::time::sleep(window + Duration::from_millis(100)).await;
    let (status, _, body) = find_as(&app, &[("X-API-Key", &alice.key)]).await;
    assert_eq!(status, 401, "{body}");
    // A key created after the function cached its absence is found once the
    // window has passed, not before it forever.
    let late = create(&store, "default", "bob", Role::User).await;
    tokio::time::sleep(window + Duration::from_millis(100)).await;
    let (status, users, body) = find_as(&app, &[("X-API-Key", &late.key)]).await;
    assert_eq!((status, users), (200, vec!["bob".to_owned()]), "{body}");
}

async fn every_role_meets_its_bounds(store: SharedStore) {
    let app = api_key_app(Arc::clone(&store), Duration::from_secs(30)).await;
    let user = create(&store, "default", "alice", Role::User).await.key;
    let admin = create(&store, "default", "bob", Role::Admin).await.key;
    let root = create(&store, "ops", "operator", Role::Root).await.key;
    let (id, _) = keys::split_key(&user).expect("a key");
    let wrong_secret = format!("skald_{id}_{}", "0".repeat(64));
    let unknown = format!("skald_{}_{}", "f".repeat(16), "0".repeat(64));
    let bearer_user = format!("Bearer {user}");

    let alice = || vec!["alice".to_owned()];
    let bob = || vec!["bob".to_owned()];
    let carol = || vec!["carol".to_owned()];
    // (what, headers, status, users whose memories come back)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, u16, Vec<String>);
    let cases: Vec<Case<'_>> = vec![
        ("no key", vec![], 401, vec![]),
        ("no key, identity headers", vec![("X-OpenViking-User", "alice")], 401, vec![]),
        ("empty key", vec![("X-API-Key", "")], 401, vec![]),
        ("not a key", vec![("X-API-Key", "hunter2")], 401, vec![]),
        ("unknown key", vec![("X-API-Key", &unknown)], 401, vec![]),
        ("known id, wrong secret", vec![("X-API-Key", &wrong_secret)], 401, vec![]),
        ("a basic credential", vec![("Authorization", "Basic YWxpY2U6cHc=")], 401, vec![]),
        ("user key", vec![("X-API-Key", &user)], 200, alice()),
        ("user key as Bearer", vec![("Authorization", &bearer_user)], 200, alice()),
        ("user key naming itself", vec![("X-API-Key", &user), ("X-OpenViking-User", "alice")], 200, alice()),
        ("user key naming another user", vec![("X-API-Key", &user), ("X-OpenViking-User", "bob")], 403, vec![]),
        ("user key naming another account", vec![("X-API-Key", &user), ("X-OpenViking-Account", "acme")], 403, vec![]),
        ("admin key", vec![("X-API-Key", &admin)], 200, bob()),
        (
            "admin key naming a user of its account",
            vec![("X-API-Key", &admin), ("X-OpenViking-User", "alice")],
            200,
            alice(),
        ),
        (
            "admin key naming a user of another account",
            vec![("X-API-Key", &admin), ("X-OpenViking-Account", "acme"), ("X-OpenViking-User", "carol")],
            403,
            vec![],
        ),
        (
            "root key naming an account and user",
            vec![("X-API-Key", &root), ("X-OpenViking-Account", "acme"), ("X-OpenViking-User", "carol")],
            200,
            carol(),
        ),
        (
            "root key naming a user of another account",
            vec![("X-API-Key", &root), ("X-OpenViking-Account", "default"), ("X-OpenViking-User", "bob")],
            200,
            bob(),
        ),
        (
            "root key naming an invalid account",
            vec![("X-API-Key", &root), ("X-OpenViking-Account", "../x")],
            400,
            vec![],
        ),
    ];
    for (what, headers, status, users) in cases {
        let (got_status, got_users, body) = find_as(&app, &headers).await;
        assert_eq!((got_status, got_users), (status, users), "{what}: {body}");
        let text = body.to_string();
        if status != 200 {
            let code = body["error"]["code"].as_str().unwrap_or_default();
            let want = match status {
                401 => "UNAUTHENTICATED",
                403 => "PERMISSION_DENIED",
                _ => "INVALID_ARGUMENT",
            };
            assert_eq!(code, want, "{what}: {body}");
        }
        for key in [&user, &admin, &root] {
            let secret = key.rsplit('_').next().expect("a secret");
            assert!(!text.contains(secret), "{what}: the answer echoes a key: {text}");
        }
    }
}

#[tokio::test]
async fn an_unreadable_key_table_is_a_503_not_a_401() {
    let dir = TempDir::new("corrupt-keys");
    let store: SharedStore = Arc::new(skald::store::local::LocalStore::open(dir.path()).expect("open the local store"));
    let app = api_key_app(Arc::clone(&store), Duration::ZERO).await;
    let key = create(&store, "default", "alice", Role::User).await;
    let record_key = format!("{}{}.json", keys::KEYS_PREFIX, key.record.id);
    store.put(&record_key, "{not json".into(), PutMode::Overwrite).await.expect("overwrite");
    let (status, _, body) = find_as(&app, &[("X-API-Key", &key.key)]).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "UNAVAILABLE", "{body}");
    assert!(!body.to_string().contains(&record_key), "store keys stay in the log: {body}");
}

/// The MCP tools take the same keys, as MCP hosts send them
/// (`Authorization: Bearer`): the caller's own memories with a key, an
/// `isError` result (never an HTTP 401) without one.
#[tokio::test]
async fn mcp_tools_take_the_same_keys() {
    let dir = TempDir::new("mcp-keys");
    let store: SharedStore = Arc::new(skald::store::local::LocalStore::open(dir.path()).expect("open the local store"));
    let app = api_key_app(Arc::clone(&store), Duration::ZERO).await;
    let key = create(&store, "default", "bob", Role::User).await.key;
    let call = |headers: Vec<(&'static str, String)>| {
        let app = Arc::clone(&app);
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "find", "arguments": {"query": "editor theme", "limit": 5}}});
            let mut request = lambda_http::http::Request::builder()
                .method("POST")
                .uri("https://mcp.example.com/mcp")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-06-18");
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let event = request.body(lambda_http::Body::Text(body.to_string())).expect("a request");
            let handler = |app: Arc<App>, request| async move { skald_mcp::handle(&app, request).await };
            let response = skald_lambda::serve(&app, &handler, event).await;
            let status = response.status().as_u16();
            let text = match response.into_body() {
                lambda_http::Body::Text(text) => text,
                other => panic!("not text: {other:?}"),
            };
            let json: Value = serde_json::from_str(&text).expect("JSON");
            (status, json["result"]["isError"].as_bool().unwrap_or(false), json["result"]["content"][0]["text"].clone())
        }
    };
    let (status, is_error, text) = call(vec![("authorization", format!("Bearer {key}"))]).await;
    let text = text.as_str().unwrap_or_default().to_owned();
    assert!(status == 200 && !is_error, "{status} {text}");
    assert!(text.contains("viking://user/bob/") && !text.contains("viking://user/alice/"), "{text}");
    let (status, is_error, text) = call(vec![]).await;
    assert!(status == 200 && is_error, "{status} {text}");
    assert!(text.as_str().is_some_and(|t| t.starts_with("UNAUTHENTICATED: ")), "{text}");
}
