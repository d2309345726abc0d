//! The write routes of the `content` function through the Lambda edge
//! (`content/write`, `content/edit`, `fs/mkdir`, `fs/mv`, `DELETE /fs`) on
//! a local store: what a write says is searchable by the answer's time,
//! what a move or a delete removes leaves no record in `find`, and every
//! refusal is the status and code a user would expect, naming the field.

use std::sync::Arc;

use lambda_http::Body;
use serde_json::{Value, json};
use skald::app::App;

use crate::common::found_by_keywords;
use skald_tests::fixture::{
    DEFAULT_CORPUS, Handler, Reply, TempDirs, app_with_corpus, call, call_handler, ok, request_to, with_jwt_claims,
};

async fn app() -> (Arc<App>, TempDirs) {
    app_with_corpus(DEFAULT_CORPUS, true).await
}

async fn post(app: &Arc<App>, path: &str, body: &Value) -> Reply {
    call(app, Handler::Content, "POST", path, &[], Some(body)).await
}

async fn delete(app: &Arc<App>, query: &str) -> Reply {
    call(app, Handler::Content, "DELETE", &format!("/api/v1/fs?{query}"), &[], None).await
}

async fn read(app: &Arc<App>, uri: &str) -> Reply {
    call(app, Handler::Content, "GET", &format!("/api/v1/content/read?uri={uri}"), &[], None).await
}

#[tokio::test]
async fn a_write_is_searchable_and_a_replace_leaves_no_trace_of_the_old_text() {
    let (app, _dirs) = app().await;
    let uri = "viking://user/default/memories/entities/biscuit.md";
    let reply =
        post(&app, "/api/v1/content/write", &json!({"uri": uri, "content": "Biscuit the dog is allergic to chicken."}))
            .await;
    assert_eq!(ok(&reply)["created"], true, "{}", reply.text);
    assert_eq!(ok(&reply)["status"], "indexed");
    assert!(found_by_keywords(&app, "Biscuit allergic chicken").await.contains(&uri.to_owned()));
    let reply =
        post(&app, "/api/v1/content/write", &json!({"uri": uri, "content": "Biscuit now eats salmon kibble."})).await;
    assert_eq!((ok(&reply)["created"].as_bool(), ok(&reply)["mode"].as_str()), (Some(false), Some("replace")));
    assert!(!found_by_keywords(&app, "chicken").await.contains(&uri.to_owned()), "the replaced text is still indexed");
    assert!(found_by_keywords(&app, "salmon kibble").await.contains(&uri.to_owned()));
    // Append adds; create refuses an existing file with 409 and changes nothing.
    let reply =
        post(&app, "/api/v1/content/write", &json!({"uri": uri, "content": "\nHe is 4.", "mode": "append"})).await;
    assert_eq!(ok(&reply)["created"], false, "{}", reply.text);
    let reply = post(&app, "/api/v1/content/write", &json!({"uri": uri, "content": "x", "mode": "create"})).await;
    assert_eq!((reply.status, reply.json["error"]["code"].as_str()), (409, Some("CONFLICT")), "{}", reply.text);
    assert_eq!(ok(&read(&app, uri).await), "Biscuit now eats salmon kibble.\nHe is 4.");
    // A memory records who wrote it and when, in the fields block reads
    // leave out (and the stored size counts).
    let raw = call(&app, Handler::Content, "GET", &format!("/api/v1/content/read?uri={uri}&raw=true"), &[], None).await;
    let raw = ok(&raw).as_str().unwrap_or_default().to_owned();
    let (body, fields) = raw.split_once("<!-- MEMORY_FIELDS").unwrap_or_else(|| panic!("no fields block: {raw}"));
    assert_eq!(body.trim_end(), "Biscuit now eats salmon kibble.\nHe is 4.");
    let stat = call(&app, Handler::Content, "GET", &format!("/api/v1/fs/stat?uri={uri}"), &[], None).await;
    assert_eq!(ok(&stat)["size"], json!(raw.len()), "{}", stat.text);
    let fields: Value = serde_json::from_str(fields.trim().trim_end_matches("-->").trim()).expect("the block is JSON");
    assert_eq!(fields["written_by"], "user:default", "{fields}");
    assert!(fields["updated_at"].as_str().is_some_and(|t| t.len() >= 20 && t.contains('T')), "{fields}");
    // Any other file is stored as sent.
    post(&app, "/api/v1/content/write", &json!({"uri": "viking://~/notes/plain.md", "content": "as sent\n"})).await;
    let raw =
        call(&app, Handler::Content, "GET", "/api/v1/content/read?uri=viking://~/notes/plain.md&raw=true", &[], None)
            .await;
    assert_eq!(ok(&raw), "as sent\n");
}

#[tokio::test]
async fn an_edit_replaces_one_occurrence_unless_told_all() {
    let (app, _dirs) = app().await;
    let uri = "viking://~/notes/todo.md";
    post(&app, "/api/v1/content/write", &json!({"uri": uri, "content": "buy milk; buy eggs; call mum"})).await;
    let reply =
        post(&app, "/api/v1/content/edit", &json!({"uri": uri, "old_string": "buy", "new_string": "get"})).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(reply.json["error"]["message"].as_str().is_some_and(|m| m.contains("old_string") && m.contains("2 times")));
    let body = json!({"uri": uri, "old_string": "buy", "new_string": "get", "replace_all": true});
    assert_eq!(post(&app, "/api/v1/content/edit", &body).await.status, 200);
    let body = json!({"uri": uri, "old_string": "call mum", "new_string": "call dad"});
    assert_eq!(post(&app, "/api/v1/content/edit", &body).await.status, 200);
    assert_eq!(ok(&read(&app, "viking://user/default/notes/todo.md").await), "get milk; get eggs; call dad");
    let body = json!({"uri": "viking://~/notes/none.md", "old_string": "a", "new_string": "b"});
    assert_eq!(post(&app, "/api/v1/content/edit", &body).await.status, 404);
}

#[tokio::test]
async fn a_move_and_a_delete_leave_no_stale_record() {
    let (app, _dirs) = app().await;
    for (name, text) in [("a.md", "Quokka habitats on Rottnest."), ("b.md", "Quokka diets and water.")] {
        let uri = format!("viking://~/research/{name}");
        assert_eq!(post(&app, "/api/v1/content/write", &json!({"uri": uri, "content": text})).await.status, 200);
    }
    let reply = post(
        &app,
        "/api/v1/fs/mv",
        &json!({"from_uri": "viking://~/research", "to_uri": "viking://~/archive/research"}),
    )
    .await;
    assert_eq!(ok(&reply)["moved"], 2, "{}", reply.text);
    let hits = found_by_keywords(&app, "quokka").await;
    assert!(hits.iter().all(|u| u.starts_with("viking://user/default/archive/research/")), "{hits:?}");
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert_eq!(read(&app, "viking://~/research/a.md").await.status, 404);
    // A directory with files goes only when asked to, then with everything below.
    let reply = delete(&app, "uri=viking://~/archive/research").await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(reply.json["error"]["message"].as_str().is_some_and(|m| m.starts_with("recursive:")), "{}", reply.text);
    let reply = delete(&app, "uri=viking://~/archive/research&recursive=true").await;
    assert_eq!(ok(&reply)["deleted"], 2, "{}", reply.text);
    assert!(found_by_keywords(&app, "quokka").await.is_empty());
    assert_eq!(delete(&app, "uri=viking://~/archive/research").await.status, 404);
}

#[tokio::test]
async fn mkdir_makes_a_directory_with_its_abstract() {
    let (app, _dirs) = app().await;
    let body = json!({"uri": "viking://~/projects", "description": "Side projects and their notes."});
    assert_eq!(ok(&post(&app, "/api/v1/fs/mkdir", &body).await)["created"], true);
    let ls = call(&app, Handler::Content, "GET", "/api/v1/fs/ls?uri=viking://~", &[], None).await;
    let entry = ok(&ls).as_array().and_then(|l| l.iter().find(|e| e["name"] == "projects").cloned());
    assert_eq!(entry.map(|e| e["abstract"].clone()), Some(json!("Side projects and their notes.")), "{}", ls.text);
    // A file where the directory would be is a conflict.
    post(&app, "/api/v1/content/write", &json!({"uri": "viking://~/plain.md", "content": "x"})).await;
    let reply = post(&app, "/api/v1/fs/mkdir", &json!({"uri": "viking://~/plain.md"})).await;
    assert_eq!(reply.status, 409, "{}", reply.text);
}

/// Every refusal, as a table: (method, path, body or query, status, what
/// the message must contain).
#[tokio::test]
async fn refusals_name_the_field_and_change_nothing() {
    let (app, _dirs) = app().await;
    let big = "x".repeat(300 * 1024);
    let cases: Vec<(&str, &str, Value, u16, &str)> = vec![
        (
            "POST",
            "/api/v1/content/write",
            json!({"uri": "viking://user/bob/x.md", "content": "x"}),
            403,
            "viking://user/bob/x.md",
        ),
        (
            "POST",
            "/api/v1/content/write",
            json!({"uri": "viking://user/default/sessions/s1/x.md", "content": "x"}),
            403,
            "session routes",
        ),
        ("POST", "/api/v1/content/write", json!({"uri": "viking://agent/other/x.md", "content": "x"}), 403, "outside"),
        ("POST", "/api/v1/content/write", json!({"uri": "viking://~/../bob/x.md", "content": "x"}), 400, "uri"),
        ("POST", "/api/v1/content/write", json!({"uri": "viking://~/a\u{7}b.md", "content": "x"}), 400, "uri"),
        (
            "POST",
            "/api/v1/content/write",
            json!({"uri": format!("viking://~/{}", "n".repeat(1000)), "content": "x"}),
            400,
            "uri",
        ),
        ("POST", "/api/v1/content/write", json!({"uri": "viking://~/docs/.abstract.md", "content": "x"}), 400, "uri"),
        ("POST", "/api/v1/content/write", json!({"uri": "viking://~/x.md"}), 400, "content"),
        (
            "POST",
            "/api/v1/content/write",
            json!({"uri": "viking://~/x.md", "content": "x", "mode": "upsert"}),
            400,
            "mode",
        ),
        (
            "POST",
            "/api/v1/content/write",
            json!({"uri": "viking://~/x.md", "content": "x", "colour": 1}),
            400,
            "colour",
        ),
        ("POST", "/api/v1/content/write", json!({"uri": "viking://~/x.md", "content": big}), 413, ""),
        ("POST", "/api/v1/content/write", json!({"uri": "viking://~/memories", "content": "x"}), 400, "directory"),
        (
            "POST",
            "/api/v1/fs/mv",
            json!({"from_uri": "viking://~/memories", "to_uri": "viking://~/memories/inner"}),
            400,
            "to_uri",
        ),
        ("POST", "/api/v1/fs/mv", json!({"from_uri": "viking://~/nothing", "to_uri": "viking://~/else"}), 404, ""),
        (
            "POST",
            "/api/v1/content/write",
            json!({"uri": "viking://~/memories/profile.md/x.md", "content": "x"}),
            409,
            "is a file",
        ),
        ("POST", "/api/v1/fs/mkdir", json!({"uri": "viking://~/memories/profile.md/sub"}), 409, "is a file"),
        ("DELETE", "/api/v1/fs?uri=viking://user/default", Value::Null, 403, "root"),
        ("DELETE", "/api/v1/fs?uri=viking://resources&recursive=true", Value::Null, 403, "root"),
        ("DELETE", "/api/v1/fs?recursive=true", Value::Null, 400, "uri"),
        ("GET", "/api/v1/fs?uri=viking://~/x.md", Value::Null, 405, ""),
        // Binary where text is expected.
        (
            "POST",
            "/api/v1/content/write",
            json!({"uri": "viking://~/x.md", "content": [137, 80, 78, 71]}),
            400,
            "content",
        ),
        ("POST", "/api/v1/content/write", json!({"uri": "viking://~/x.md", "content": ""}), 200, "created"),
        (
            "POST",
            "/api/v1/fs/mv",
            json!({"from_uri": "viking://~/memories/profile.md", "to_uri": "viking://~/memories/profile.md"}),
            400,
            "to_uri",
        ),
        (
            "POST",
            "/api/v1/content/batch-write",
            json!({
                "root_uri": "viking://~/bulk",
                "operations": (0..10_000).map(|i| json!({"uri": format!("f{i}.md"), "content": "x"})).collect::<Vec<_>>(),
            }),
            413,
            "limit",
        ),
        (
            "POST",
            "/api/v1/content/write",
            json!({"uri": format!("viking://~/{}x.md", "deep/".repeat(300)), "content": "x"}),
            400,
            "uri",
        ),
    ];
    let before = store_bytes(&app).await;
    let index_before = found_by_keywords(&app, "rust").await;
    for (method, path, body, status, needle) in cases {
        let reply = call(&app, Handler::Content, method, path, &[], (!body.is_null()).then_some(&body)).await;
        let shown: String = body.to_string().chars().take(200).collect();
        assert_eq!(reply.status, status, "{method} {path} {shown}: {}", reply.text);
        assert!(reply.text.contains(needle), "{method} {path}: {needle:?} not in {}", reply.text);
        if status == 200 {
            // The one accepted case (an empty file is a file): undone, so
            // the store can be compared whole.
            call(&app, Handler::Content, "DELETE", "/api/v1/fs?uri=viking://~/x.md", &[], None).await;
        }
    }
    // Bodies that are not JSON objects: invalid UTF-8, nesting past the
    // parser's depth, nothing at all.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    for (body, needle) in [
        (Body::Binary(vec![b'{', b'"', 0xff, 0xfe, b'"', b':', b'1', b'}']), "JSON"),
        (Body::Text(format!("{{\"uri\": \"viking://~/x.md\", \"content\": {deep}}}")), "JSON"),
        (Body::Empty, "uri"),
    ] {
        let reply = call_handler(&app, Handler::Content, request_to("/api/v1/content/write", "POST", &[], body)).await;
        assert_eq!(reply.status, 400, "{}", reply.text);
        assert!(reply.text.contains(needle), "{needle:?} not in {}", reply.text);
    }
    assert_eq!(store_bytes(&app).await, before, "a refused request changed the store");
    assert_eq!(found_by_keywords(&app, "rust").await, index_before, "a refused request changed the index");
    assert_eq!(read(&app, "viking://~/x.md").await.status, 404, "a refused write left a file");
}

/// Every object of the store's account trees with its bytes (index files
/// left out: an accepted-then-undone write rewrites them).
async fn store_bytes(app: &Arc<App>) -> Vec<(String, bytes::Bytes)> {
    let mut out = Vec::new();
    for object in app.store.list("accounts/").await.expect("list the store") {
        if object.key.contains("/tree/") {
            let body = app.store.get(&object.key).await.expect("read an object").body;
            out.push((object.key, body));
        }
    }
    out.sort();
    out
}

/// A token's user (the authorizer's claims) writes its own tree, not the
/// shared roots, which take an admin key or dev mode.
#[tokio::test]
async fn a_users_token_writes_its_own_tree_only() {
    let (app, _dirs) = app_with_corpus(DEFAULT_CORPUS, false).await;
    let send = |uri: &str| {
        let body = Body::Text(json!({"uri": uri, "content": "a note"}).to_string());
        let request = request_to("/api/v1/content/write", "POST", &[], body);
        with_jwt_claims(request, &[("sub", "alice"), ("custom:account", "default")])
    };
    let own = call_handler(&app, Handler::Content, send("viking://~/notes/a.md")).await;
    assert_eq!(ok(&own)["uri"], "viking://user/alice/notes/a.md");
    let shared = call_handler(&app, Handler::Content, send("viking://resources/notes/a.md")).await;
    assert_eq!((shared.status, shared.json["error"]["code"].as_str()), (403, Some("PERMISSION_DENIED")));
    assert!(shared.text.contains("admin"), "{}", shared.text);
}

/// `search/grep` and `search/glob` over REST: the tenancy of `find` (a
/// search from `viking://` sees the caller's tree and the shared roots,
/// never another user's), the bounds said, and refusals naming the field.
#[tokio::test]
async fn grep_and_glob_see_what_find_sees() {
    let (app, _dirs) = app().await;
    for (user, text) in [("default", "the launch code is 0000"), ("bob", "bob's launch code is 1234")] {
        let headers = [("x-openviking-user", user)];
        let body = json!({"uri": "viking://~/notes/codes.md", "content": text});
        let reply = call(&app, Handler::Content, "POST", "/api/v1/content/write", &headers, Some(&body)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let reply = post(&app, "/api/v1/search/grep", &json!({"uri": "viking://", "pattern": "launch code"})).await;
    let matches = ok(&reply)["matches"].as_array().cloned().unwrap_or_default();
    assert_eq!(matches.len(), 1, "{}", reply.text);
    assert_eq!(
        matches[0],
        json!({"uri": "viking://user/default/notes/codes.md", "line": 1, "content": "the launch code is 0000"})
    );
    let reply = post(&app, "/api/v1/search/glob", &json!({"pattern": "**/codes.md"})).await;
    assert_eq!(ok(&reply)["matches"], json!(["viking://user/default/notes/codes.md"]), "{}", reply.text);
    // A node limit below what matches: cut, and said.
    let reply = post(&app, "/api/v1/search/glob", &json!({"pattern": "**/*.md", "node_limit": 1})).await;
    assert_eq!((ok(&reply)["count"].as_u64(), reply.json["truncated"].as_bool()), (Some(1), Some(true)));
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        ("/api/v1/search/grep", json!({"uri": "viking://user/bob", "pattern": "x"}), 403, "viking://user/bob"),
        ("/api/v1/search/grep", json!({"uri": "viking://~/nothing", "pattern": "x"}), 404, "nothing"),
        ("/api/v1/search/grep", json!({"uri": "viking://~", "pattern": "a("}), 400, "pattern"),
        ("/api/v1/search/grep", json!({"uri": "viking://~"}), 400, "pattern"),
        ("/api/v1/search/grep", json!({"uri": "viking://~", "pattern": "x", "node_limit": 0}), 400, "node_limit"),
        ("/api/v1/search/glob", json!({"pattern": "{a,b"}), 400, "pattern"),
        ("/api/v1/search/glob", json!({"pattern": "*", "uri": "viking://~/../x"}), 400, "uri"),
    ];
    for (path, body, status, needle) in cases {
        let reply = post(&app, path, &body).await;
        assert_eq!(reply.status, status, "{path} {body}: {}", reply.text);
        assert!(reply.text.contains(needle), "{path} {body}: {needle:?} not in {}", reply.text);
    }
}

/// A batch writes every file below its root and indexes them; a batch with
/// one refused operation (another user's tree, a taken `create`, a path
/// outside the root, bad base64) writes nothing and names the operation.
#[tokio::test]
async fn a_batch_writes_all_or_names_what_it_refused() {
    let (app, _dirs) = app().await;
    let batch = json!({"root_uri": "viking://~/garden", "operations": [
        {"uri": "beds.md", "content": "The raised beds get compost in March."},
        {"uri": "viking://user/default/garden/tools.md", "content_base64": "U2hhcnBlbiB0aGUgc2VjYXRldXJzLg==", "mode": "upsert"},
    ]});
    let reply = post(&app, "/api/v1/content/batch-write", &batch).await;
    assert_eq!(
        (ok(&reply)["written"].as_u64(), ok(&reply)["status"].as_str()),
        (Some(2), Some("indexed")),
        "{}",
        reply.text
    );
    assert_eq!(ok(&read(&app, "viking://~/garden/tools.md").await), "Sharpen the secateurs.");
    assert!(
        found_by_keywords(&app, "compost raised beds")
            .await
            .contains(&"viking://user/default/garden/beds.md".to_owned())
    );

    let refusals: Vec<(Value, u16, &str)> = vec![
        (
            json!([{"uri": "new.md", "content": "x"}, {"uri": "beds.md", "content": "x", "mode": "create"}]),
            409,
            "operations.1",
        ),
        (
            json!([{"uri": "new.md", "content": "x"}, {"uri": "viking://user/bob/x.md", "content": "x"}]),
            400,
            "not below root_uri",
        ),
        (json!([{"uri": "new.md", "content": "x"}, {"uri": "y.md", "content_base64": "%%%"}]), 400, "content_base64"),
        (json!([{"uri": "new.md", "content": "x", "content_base64": "eA=="}]), 400, "exactly one"),
        (json!([{"uri": "new.md", "content": "x", "colour": 1}]), 400, "colour"),
        (json!([]), 400, "at least 1"),
    ];
    for (operations, status, needle) in refusals {
        let body = json!({"root_uri": "viking://~/garden", "operations": operations});
        let reply = post(&app, "/api/v1/content/batch-write", &body).await;
        assert_eq!(reply.status, status, "{operations}: {}", reply.text);
        assert!(reply.text.contains(needle), "{operations}: {needle:?} not in {}", reply.text);
        assert_eq!(read(&app, "viking://~/garden/new.md").await.status, 404, "{operations}: a refused batch wrote");
    }
    let too_many: Vec<Value> = (0..101).map(|i| json!({"uri": format!("f{i}.md"), "content": "x"})).collect();
    let reply =
        post(&app, "/api/v1/content/batch-write", &json!({"root_uri": "viking://~/garden", "operations": too_many}))
            .await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    let outside = json!({"root_uri": "viking://user/bob", "operations": [{"uri": "x.md", "content": "x"}]});
    assert_eq!(post(&app, "/api/v1/content/batch-write", &outside).await.status, 403);
}

/// A directory without a summary of its own is described by its children
/// in listings, and the description follows a write and a delete.
#[tokio::test]
async fn a_directory_without_a_summary_is_described_by_its_children() {
    let (app, _dirs) = app().await;
    let abstract_of = |entries: &Value, uri: &str| {
        entries
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["uri"] == uri)
            .and_then(|e| e["abstract"].as_str())
            .map(str::to_owned)
    };
    let write = |name: &str| json!({"uri": format!("viking://~/trips/{name}"), "content": "Ferry at dawn."});
    post(&app, "/api/v1/content/write", &write("crete.md")).await;
    let ls = call(&app, Handler::Content, "GET", "/api/v1/fs/ls?uri=viking://~&output=agent", &[], None).await;
    let trips = "viking://user/default/trips";
    assert_eq!(abstract_of(ok(&ls), trips).as_deref(), Some("Holds the file crete.md."), "{}", ls.text);
    post(&app, "/api/v1/content/write", &write("naxos.md")).await;
    delete(&app, "uri=viking://~/trips/crete.md").await;
    let ls = call(&app, Handler::Content, "GET", "/api/v1/fs/ls?uri=viking://~&output=agent", &[], None).await;
    assert_eq!(abstract_of(ok(&ls), trips).as_deref(), Some("Holds the file naxos.md."), "{}", ls.text);
    // One with a description keeps it.
    post(&app, "/api/v1/fs/mkdir", &json!({"uri": "viking://~/trips", "description": "Island trips."})).await;
    let ls = call(&app, Handler::Content, "GET", "/api/v1/fs/ls?uri=viking://~&output=agent", &[], None).await;
    assert_eq!(abstract_of(ok(&ls), trips).as_deref(), Some("Island trips."), "{}", ls.text);
}
