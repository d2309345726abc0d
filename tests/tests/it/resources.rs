//! Resources, skills and watches through the `content` function's Lambda
//! edge, as OpenViking's clients call them: a file uploaded as
//! multipart/form-data (`resources/temp_upload`), then `POST /resources`
//! or `POST /skills` naming it; a skill given as text; listing, reading,
//! finding and deleting skills. What lands is searchable by the answer's
//! time, and every refusal is the status a user would expect, naming the
//! field, with nothing written.

use std::sync::Arc;

use lambda_http::Body;
use serde_json::{Value, json};
use skald::app::App;

use crate::common::{found_by_keywords, upload, upload_request, zip_of};
use skald_tests::fixture::{
    DEFAULT_CORPUS, Handler, Reply, TempDirs, app_with_corpus, call, call_handler, ok, request_to, with_jwt_claims,
};

async fn app() -> (Arc<App>, TempDirs) {
    app_with_corpus(DEFAULT_CORPUS, true).await
}

async fn post(app: &Arc<App>, path: &str, body: &Value) -> Reply {
    call(app, Handler::Content, "POST", path, &[], Some(body)).await
}

async fn read(app: &Arc<App>, uri: &str) -> Reply {
    call(app, Handler::Content, "GET", &format!("/api/v1/content/read?uri={uri}"), &[], None).await
}

/// Every key of the store (names only), sorted.
async fn store_keys(app: &Arc<App>) -> Vec<String> {
    let mut keys: Vec<String> = app.store.list("").await.expect("list the store").into_iter().map(|o| o.key).collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn an_uploaded_page_becomes_a_searchable_markdown_resource() {
    let (app, _dirs) = app().await;
    let page = b"<html><head><title>Trail notes</title><script>track()</script></head><body>\
        <p>The Zanskar trail crosses the frozen river in February.</p></body></html>";
    let id = upload(&app, "trail.html", page).await;
    // Named by its content: the same upload again is the same id.
    assert_eq!(upload(&app, "trail.html", page).await, id);
    let reply =
        post(&app, "/api/v1/resources", &json!({"temp_file_id": id, "source_name": "trail.html", "wait": true})).await;
    let result = ok(&reply);
    assert_eq!(result["status"], "success", "{}", reply.text);
    assert_eq!(result["root_uri"], "viking://resources/trail.md");
    assert_eq!(result["queue_status"], "indexed");
    let text = ok(&read(&app, "viking://resources/trail.md").await).as_str().unwrap_or_default().to_owned();
    assert_eq!(text, "# Trail notes\n\nThe Zanskar trail crosses the frozen river in February.\n");
    assert!(found_by_keywords(&app, "Zanskar frozen river").await.contains(&"viking://resources/trail.md".to_owned()));
    // A used upload is gone: naming it again is a 404 that says so.
    let again = post(&app, "/api/v1/resources", &json!({"temp_file_id": id})).await;
    assert_eq!((again.status, again.json["error"]["code"].as_str()), (404, Some("NOT_FOUND")), "{}", again.text);
    assert!(again.text.contains("expired"), "{}", again.text);
}

#[tokio::test]
async fn an_uploaded_directory_lands_below_its_target_and_skips_what_is_not_text() {
    let (app, _dirs) = app().await;
    let archive = zip_of(&[
        ("README.md", b"# Ferry tools\n\nScripts for the ferry timetable."),
        ("src/timetable.py", b"def next_ferry():\n    return '07:40 from Piraeus'\n"),
        ("logo.png", b"\x89PNG\r\n\x1a\n\0\0\0"),
    ]);
    let id = upload(&app, "ferry.zip", &archive).await;
    let reply = post(
        &app,
        "/api/v1/resources",
        &json!({
            "temp_file_id": id, "source_name": "ferry", "to": "viking://resources/projects/ferry",
            "description": "Scripts and notes for the Piraeus ferry timetable.",
        }),
    )
    .await;
    let result = ok(&reply);
    assert_eq!(result["root_uri"], "viking://resources/projects/ferry", "{}", reply.text);
    assert_eq!(result["files"], 2);
    let warnings = result["warnings"].as_array().cloned().unwrap_or_default();
    assert!(warnings.len() == 1 && warnings[0].as_str().is_some_and(|w| w.contains("logo.png")), "{warnings:?}");
    let code = ok(&read(&app, "viking://resources/projects/ferry/src/timetable.py.md").await).clone();
    assert!(code.as_str().is_some_and(|c| c.contains("```python\ndef next_ferry")), "{code}");
    assert!(
        found_by_keywords(&app, "Piraeus")
            .await
            .contains(&"viking://resources/projects/ferry/src/timetable.py.md".to_owned())
    );
    // The description is the directory's abstract.
    let summary = call(
        &app,
        Handler::Content,
        "GET",
        "/api/v1/content/abstract?uri=viking://resources/projects/ferry",
        &[],
        None,
    )
    .await;
    assert_eq!(ok(&summary), "Scripts and notes for the Piraeus ferry timetable.", "{}", summary.text);
}

#[tokio::test]
async fn a_user_key_adds_to_its_own_tree_and_never_the_shared_one() {
    let (app, _dirs) = app().await;
    let as_alice = |path: &str, body: Value| {
        let request = request_to(path, "POST", &[], Body::Text(body.to_string()));
        with_jwt_claims(request, &[("sub", "alice"), ("custom:account", "default")])
    };
    let upload = with_jwt_claims(
        upload_request("notes.txt", b"Alice keeps bees."),
        &[("sub", "alice"), ("custom:account", "default")],
    );
    let id = ok(&call_handler(&app, Handler::Content, upload).await)["temp_file_id"].as_str().map(str::to_owned);
    let id = id.expect("an upload id");
    // Another user cannot use alice's upload: it is not theirs to name.
    let theirs = post(&app, "/api/v1/resources", &json!({"temp_file_id": id})).await;
    assert_eq!(theirs.status, 404, "{}", theirs.text);
    let shared = call_handler(
        &app,
        Handler::Content,
        as_alice("/api/v1/resources", json!({"temp_file_id": id, "parent": "viking://resources"})),
    )
    .await;
    assert_eq!(
        (shared.status, shared.json["error"]["code"].as_str()),
        (403, Some("PERMISSION_DENIED")),
        "{}",
        shared.text
    );
    let own = call_handler(&app, Handler::Content, as_alice("/api/v1/resources", json!({"temp_file_id": id}))).await;
    assert_eq!(ok(&own)["root_uri"], "viking://user/alice/resources/notes.txt.md", "{}", own.text);
    let skill = call_handler(
        &app,
        Handler::Content,
        as_alice(
            "/api/v1/skills",
            json!({"data": "---\nname: hive-check\ndescription: Inspect a beehive\n---\nLook for the queen."}),
        ),
    )
    .await;
    assert_eq!(ok(&skill)["uri"], "viking://user/alice/skills/hive-check", "{}", skill.text);
    // Alice's skill by `~`; bob cannot read it by naming her tree, nor list it.
    let as_user = |user: &str, path: &str| {
        let request = request_to(path, "GET", &[], Body::Empty);
        with_jwt_claims(request, &[("sub", user), ("custom:account", "default")])
    };
    let mine = call_handler(
        &app,
        Handler::Content,
        as_user("alice", "/api/v1/skills/hive-check?target_uri=viking://~/skills"),
    )
    .await;
    assert_eq!(ok(&mine)["uri"], "viking://user/alice/skills/hive-check", "{}", mine.text);
    let theirs = "/api/v1/skills/hive-check?target_uri=viking://user/alice/skills";
    let read = call_handler(&app, Handler::Content, as_user("bob", theirs)).await;
    assert_eq!((read.status, read.json["error"]["code"].as_str()), (403, Some("PERMISSION_DENIED")), "{}", read.text);
    let listed =
        call_handler(&app, Handler::Content, as_user("bob", "/api/v1/skills?target_uri=viking://user/alice/skills"))
            .await;
    assert_eq!(listed.status, 403, "{}", listed.text);
    let malformed = call_handler(&app, Handler::Content, as_user("bob", "/api/v1/skills?target_uri=../x")).await;
    assert_eq!(malformed.status, 400, "{}", malformed.text);
    assert_eq!(malformed.json["error"]["details"]["validation_errors"][0]["loc"], json!(["query", "target_uri"]));
}

#[tokio::test]
async fn refused_resources_name_the_field_and_write_nothing() {
    let (app, _dirs) = app().await;
    let png = upload(&app, "photo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").await;
    let text = upload(&app, "a.md", b"# A").await;
    let bomb_part = vec![b'a'; skald::documents::MAX_ARCHIVE_BYTES / 2 + 1];
    let bomb = upload(&app, "bomb.zip", &zip_of(&[("a.md", &bomb_part), ("b.md", &bomb_part)])).await;
    let traversal = upload(&app, "t.zip", &zip_of(&[("../../escape.md", b"x")])).await;
    let before = store_keys(&app).await;
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"path": "https://example.com/page.html"}), 400, "fetches no URL"),
        (json!({"path": "/etc/passwd"}), 400, "upload it"),
        (json!({}), 400, "temp_file_id"),
        (json!({"temp_file_id": text, "path": "x"}), 400, "exactly one"),
        (json!({"temp_file_id": "../../keys"}), 400, "temp_file_id"),
        (json!({"temp_file_id": png}), 400, "photo.png"),
        (json!({"temp_file_id": text, "to": "viking://resources/a", "parent": "viking://resources"}), 400, "not both"),
        (json!({"temp_file_id": text, "to": "viking://resources/../x"}), 400, "to"),
        (json!({"temp_file_id": text, "parent": "viking://user/bob/resources"}), 403, "permission denied"),
        (json!({"temp_file_id": text, "nonsense": 1}), 400, "nonsense"),
        (json!({"temp_file_id": bomb}), 413, "bomb.zip unpacks to more than 16777216 bytes"),
        (json!({"temp_file_id": traversal}), 400, "leaves the archive"),
    ];
    for (body, status, says) in cases {
        let reply = post(&app, "/api/v1/resources", &body).await;
        assert_eq!(reply.status, status, "{body}: {}", reply.text);
        assert!(reply.text.contains(says), "{body}: {} does not say {says:?}", reply.text);
    }
    assert_eq!(store_keys(&app).await, before, "a refused resource changed the store");
    // Uploads: not multipart, no file, over the cap.
    let not_multipart =
        call(&app, Handler::Content, "POST", "/api/v1/resources/temp_upload", &[], Some(&json!({}))).await;
    assert_eq!(not_multipart.status, 400, "{}", not_multipart.text);
    assert!(not_multipart.text.contains("multipart/form-data"), "{}", not_multipart.text);
    let big = vec![b'a'; skald::documents::MAX_UPLOAD_BYTES + 1];
    let too_big = call_handler(&app, Handler::Content, upload_request("big.md", &big)).await;
    assert_eq!(too_big.status, 413, "{}", too_big.text);
    assert!(too_big.text.contains("file big.md is 4194305 bytes"), "{}", too_big.text);
}

#[tokio::test]
async fn skills_are_added_listed_read_found_and_deleted() {
    let (app, _dirs) = app().await;
    let text = "---\nname: sourdough\ndescription: Feed and bake a sourdough starter\n---\n\n\
                Feed the starter at a 1:5:5 ratio; bake at 250 degrees.\n";
    let added = post(&app, "/api/v1/skills", &json!({"data": text})).await;
    let result = ok(&added);
    assert_eq!(
        (result["uri"].as_str(), result["name"].as_str(), result["auxiliary_files"].as_u64()),
        (Some("viking://agent/skills/sourdough"), Some("sourdough"), Some(0)),
        "{}",
        added.text
    );
    // A skill from a zip with a file beside its SKILL.md.
    let archive = zip_of(&[
        ("kiln/SKILL.md", b"---\nname: kiln\ndescription: Fire pottery in an electric kiln\n---\nCone 6.\n"),
        ("kiln/schedule.csv", b"ramp,hold\n100,0\n"),
    ]);
    let id = upload(&app, "kiln.zip", &archive).await;
    let kiln = post(&app, "/api/v1/skills", &json!({"temp_file_id": id})).await;
    assert_eq!(ok(&kiln)["auxiliary_files"], 1, "{}", kiln.text);
    let list = call(&app, Handler::Content, "GET", "/api/v1/skills", &[], None).await;
    let names: Vec<&str> =
        ok(&list)["skills"].as_array().into_iter().flatten().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["kiln", "sourdough"], "{}", list.text);
    let one = call(&app, Handler::Content, "GET", "/api/v1/skills/sourdough", &[], None).await;
    assert_eq!(ok(&one)["description"], "Feed and bake a sourdough starter", "{}", one.text);
    // find_skills: the find function, skills only.
    let request = request_to(
        "/api/v1/skills/find",
        "POST",
        &[],
        Body::Text(json!({"query": "bake bread starter", "limit": 5}).to_string()),
    );
    let hits = call_handler(&app, Handler::Find, request).await;
    let result = ok(&hits);
    assert_eq!(
        (result["memories"].as_array().map(Vec::len), result["resources"].as_array().map(Vec::len)),
        (Some(0), Some(0))
    );
    let skill_uris: Vec<&str> =
        result["skills"].as_array().into_iter().flatten().filter_map(|h| h["uri"].as_str()).collect();
    assert!(skill_uris.iter().any(|u| u.starts_with("viking://agent/skills/sourdough")), "{}", hits.text);
    // Refusals name the field.
    for (body, says) in [
        (json!({"data": "no frontmatter"}), "frontmatter"),
        (json!({"data": "---\nname: ../x\ndescription: d\n---\n"}), "skill name"),
        (json!({}), "data"),
        (json!({"data": 5}), "data"),
    ] {
        let reply = post(&app, "/api/v1/skills", &body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text);
        assert!(reply.text.contains(says), "{body}: {}", reply.text);
    }
    let deleted = call(&app, Handler::Content, "DELETE", "/api/v1/skills/sourdough", &[], None).await;
    assert_eq!(ok(&deleted)["deleted"], 1, "{}", deleted.text);
    assert!(!found_by_keywords(&app, "sourdough starter").await.iter().any(|u| u.contains("sourdough")));
    let gone = call(&app, Handler::Content, "GET", "/api/v1/skills/sourdough", &[], None).await;
    assert_eq!(gone.status, 404, "{}", gone.text);
}

#[tokio::test]
async fn watches_are_an_empty_list_and_wait_returns() {
    let (app, _dirs) = app().await;
    let list = call(&app, Handler::Content, "GET", "/api/v1/watches?active_only=false", &[], None).await;
    assert_eq!(ok(&list), &json!([]), "{}", list.text);
    let one = call(&app, Handler::Content, "DELETE", "/api/v1/watches/w-1", &[], None).await;
    assert_eq!((one.status, one.json["error"]["code"].as_str()), (404, Some("NOT_FOUND")), "{}", one.text);
    assert!(one.text.contains("fetches no URL"), "{}", one.text);
    let wait = call(&app, Handler::Content, "POST", "/api/v1/system/wait", &[], Some(&json!({}))).await;
    assert_eq!(ok(&wait)["waited"], true, "{}", wait.text);
}
