//! The `content` function's routes end to end through the Lambda edge:
//! `/health`, `/api/v1/system/status`, `/api/v1/content/{read,abstract,overview}`
//! and `/api/v1/fs/{ls,stat}` over the fixture corpus, with the tenancy of
//! `find` (the caller's own tree, `viking://~/…`, the shared roots; another
//! user's tree is a 403) and every bound a 400 naming the parameter.
//!
//! The cases are a table: a request, the status and code it must get, and
//! what its result must hold.

use std::sync::Arc;

use serde_json::{Value, json};
use skald::app::App;
use skald_tests::fixture::{DEFAULT_CORPUS, Handler, Reply, TempDirs, app_with_corpus, call, ok};

/// A body over the read cap (256 KiB): 3000 numbered lines of 101 bytes.
fn big_file() -> String {
    (0..3000).map(|i| format!("{i:05} {}\n", "x".repeat(94))).collect()
}

async fn app() -> (Arc<App>, TempDirs) {
    let big = big_file();
    let mut files: Vec<(&str, &str)> = DEFAULT_CORPUS.to_vec();
    files.push(("user/default/peers/laptop/memories/entities/laptop.md", "# Summary\nThe laptop peer's own note.\n"));
    files.push(("user/default/peers/desktop/memories/entities/desktop.md", "# Summary\nThe desktop peer's note.\n"));
    files.push(("user/default/memories/events/2025/07/01/notes.md", "line one\nline two\nline three\n"));
    let big: &'static str = Box::leak(big.into_boxed_str());
    files.push(("resources/big/log.md", big));
    app_with_corpus(&files, true).await
}

async fn get(app: &Arc<App>, target: &str, headers: &[(&str, &str)]) -> Reply {
    call(app, Handler::Content, "GET", target, headers, None).await
}

fn text(reply: &Reply) -> &str {
    ok(reply).as_str().unwrap_or_else(|| panic!("result is not a string: {}", reply.text))
}

fn names(reply: &Reply) -> Vec<String> {
    ok(reply)
        .as_array()
        .unwrap_or_else(|| panic!("result is not a list: {}", reply.text))
        .iter()
        .map(|e| e["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn health_answers_without_identity_or_envelope() {
    let (app, _dirs) = app().await;
    let reply = get(&app, "/health", &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!((reply.json["status"].as_str(), reply.json["healthy"].as_bool()), (Some("ok"), Some(true)));
    assert_eq!(reply.json["auth_mode"], "dev");
    assert!(reply.json["version"].is_string() && reply.json.get("result").is_none(), "{}", reply.text);
    // Even a deployment that trusts only the authorizer answers it: no identity is needed.
    let (strict, _d) = app_with_corpus(DEFAULT_CORPUS, false).await;
    let reply = get(&strict, "/health", &[]).await;
    assert_eq!((reply.status, reply.json["auth_mode"].as_str()), (200, Some("authorizer")), "{}", reply.text);
    let reply = get(&strict, "/api/v1/system/status", &[]).await;
    assert_eq!(reply.status, 401, "{}", reply.text);
}

#[tokio::test]
async fn system_status_names_the_caller() {
    let (app, _dirs) = app().await;
    assert_eq!(ok(&get(&app, "/api/v1/system/status", &[]).await), &json!({"initialized": true, "user": "default"}));
    let bob = get(&app, "/api/v1/system/status", &[("x-openviking-user", "bob")]).await;
    assert_eq!(ok(&bob)["user"], "bob");
}

#[tokio::test]
async fn reads_expand_a_uri_to_its_text() {
    let (app, _dirs) = app().await;
    let profile = get(&app, "/api/v1/content/read?uri=viking://user/default/memories/profile.md", &[]).await;
    assert!(text(&profile).contains("backend engineer who writes Rust"), "{}", profile.text);
    // The home alias names the caller's own tree.
    let home = get(&app, "/api/v1/content/read?uri=viking%3A%2F%2F~%2Fmemories%2Fprofile.md", &[]).await;
    assert_eq!(text(&home), text(&profile));
    let bob = get(
        &app,
        "/api/v1/content/read?uri=viking://~/memories/entities/person/alice.md",
        &[("x-openviking-user", "bob")],
    )
    .await;
    assert!(text(&bob).contains("Alice is Bob's manager"), "{}", bob.text);
    // Lines, as Python slices.
    let path = "/api/v1/content/read?uri=viking://~/memories/events/2025/07/01/notes.md";
    assert_eq!(text(&get(&app, &format!("{path}&offset=1&limit=1"), &[]).await), "line two\n");
    assert_eq!(text(&get(&app, &format!("{path}&offset=-1"), &[]).await), "line three\n");
    // A shared resource.
    let shared = get(&app, "/api/v1/content/read?uri=viking://resources/search/ranking.md", &[]).await;
    assert!(text(&shared).contains("ranks results by cosine score"), "{}", shared.text);
}

#[tokio::test]
async fn a_read_over_its_cap_is_cut_and_says_where_to_read_on() {
    let (app, _dirs) = app().await;
    let reply = get(&app, "/api/v1/content/read?uri=viking://resources/big/log.md", &[]).await;
    let body = text(&reply);
    assert!(body.len() <= 256 * 1024 + 200, "{} bytes", body.len());
    assert_eq!(reply.json["truncated"], true, "{}", &reply.text[..200]);
    let marker = body.lines().last().unwrap_or_default();
    assert!(marker.starts_with("[truncated: lines 1-2595 of 3000 shown"), "{marker}");
    assert!(marker.ends_with("read on with offset=2595]"), "{marker}");
    let rest = get(&app, "/api/v1/content/read?uri=viking://resources/big/log.md&offset=2595", &[]).await;
    assert!(text(&rest).starts_with("02595 "), "{}", &rest.text[..80]);
    assert!(rest.json.get("truncated").is_none());
}

#[tokio::test]
async fn abstracts_and_overviews_of_files_and_directories() {
    let (app, _dirs) = app().await;
    let cases: &[(&str, &str)] = &[
        // A directory's sidecars, without frontmatter.
        ("abstract?uri=viking://resources/guides", "Guides for getting started with the search service."),
        ("overview?uri=viking://resources/guides", "# Guides overview"),
        // A file's own abstract and overview (the reference falls back to the parent's).
        ("abstract?uri=viking://~/memories/preferences/default/editor.md", "Prefers Neovim with a dark theme"),
        ("overview?uri=viking://~/memories/preferences/default/editor.md", "Prefers Neovim with a dark theme"),
        ("overview?uri=viking://resources/search/ranking.md", "Ranking"),
        // A directory without sidecars: summaries made from its children.
        ("abstract?uri=viking://resources/search", "Holds the files indexing.md, ranking.md."),
        (
            "overview?uri=viking://resources/search",
            "# search\n\nHolds the files indexing.md, ranking.md.\n\n- [file] viking://resources/search/indexing.md\n\
             - [file] viking://resources/search/ranking.md\n",
        ),
    ];
    for (route, want) in cases {
        let reply = get(&app, &format!("/api/v1/content/{route}"), &[]).await;
        assert!(text(&reply).contains(want), "{route}: {}", reply.text);
    }
    let details =
        get(&app, "/api/v1/content/abstract?uri=viking://~/memories/preferences/default/editor.md", &[]).await;
    assert!(!text(&details).contains("rust-analyzer"), "an abstract is the summary only: {}", details.text);
}

#[tokio::test]
async fn listings_show_only_what_the_caller_may_see() {
    let (app, _dirs) = app().await;
    let ls = |target: &str| format!("/api/v1/fs/ls?{target}");
    // The account root lists the three scopes; `viking://user` only the caller's own space.
    assert_eq!(names(&get(&app, &ls("uri=viking://"), &[]).await), ["agent", "resources", "user"]);
    assert_eq!(names(&get(&app, &ls("uri=viking://user&output=original"), &[]).await), ["default"]);
    assert_eq!(names(&get(&app, &ls("uri=viking://user"), &[("x-openviking-user", "bob")]).await), ["bob"]);
    // Dot-files are hidden unless asked for.
    assert_eq!(names(&get(&app, &ls("uri=viking://resources/guides"), &[]).await), ["getting-started.md"]);
    let all = names(&get(&app, &ls("uri=viking://resources/guides&show_all_hidden=true"), &[]).await);
    assert_eq!(all, [".abstract.md", ".overview.md", "getting-started.md"]);
    // The profile injection's listing: recursive, agent entries with rel_path and each file's own abstract.
    let prefs = get(
        &app,
        &ls("uri=viking://~/memories/preferences&output=agent&recursive=true&abs_limit=512&node_limit=512"),
        &[],
    )
    .await;
    let files: Vec<(String, String)> = ok(&prefs)
        .as_array()
        .expect("a list")
        .iter()
        .filter(|e| e["isDir"] == false)
        .map(|e| (e["rel_path"].as_str().unwrap_or("").to_owned(), e["abstract"].as_str().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(files.len(), 2, "{}", prefs.text);
    assert_eq!(files[0].0, "default/editor.md");
    assert!(files[0].1.starts_with("Prefers Neovim"), "{files:?}");
    assert!(files[1].1.contains("川菜"), "{files:?}");
    // Directories carry their sidecar abstract from the index.
    let resources = get(&app, &ls("uri=viking://resources"), &[]).await;
    let guides = ok(&resources).as_array().expect("a list").iter().find(|e| e["name"] == "guides").cloned();
    assert_eq!(guides.expect("guides listed")["abstract"], "Guides for getting started with the search service.");
    // Original entries carry a mode and no abstract.
    let original = get(&app, &ls("uri=viking://resources/guides&output=original"), &[]).await;
    assert_eq!(ok(&original)[0]["mode"], 420);
    assert!(ok(&original)[0].get("abstract").is_none(), "{}", original.text);
    // An acting peer does not see the other peers' trees.
    let peers = ls("uri=viking://~/peers");
    assert_eq!(names(&get(&app, &peers, &[]).await), ["desktop", "laptop"]);
    assert_eq!(names(&get(&app, &peers, &[("x-openviking-actor-peer", "laptop")]).await), ["laptop"]);
}

#[tokio::test]
async fn a_listing_over_its_limit_is_cut_and_flagged() {
    let (app, _dirs) = app().await;
    let reply = get(&app, "/api/v1/fs/ls?uri=viking://~/memories&recursive=true&node_limit=3", &[]).await;
    assert_eq!(ok(&reply).as_array().map(Vec::len), Some(3), "{}", reply.text);
    assert_eq!(reply.json["truncated"], true, "{}", reply.text);
    // `limit` wins over `node_limit`, as the reference.
    let reply = get(&app, "/api/v1/fs/ls?uri=viking://~/memories&node_limit=1&limit=2", &[]).await;
    assert_eq!(ok(&reply).as_array().map(Vec::len), Some(2), "{}", reply.text);
    let whole = get(&app, "/api/v1/fs/ls?uri=viking://resources/guides", &[]).await;
    assert!(whole.json.get("truncated").is_none(), "{}", whole.text);
    // Deeper than the fixed depth of three levels is cut too.
    let deep = get(&app, "/api/v1/fs/ls?uri=viking://~/memories/events&recursive=true", &[]).await;
    let rels: Vec<&str> = ok(&deep).as_array().expect("a list").iter().filter_map(|e| e["rel_path"].as_str()).collect();
    assert!(rels.contains(&"2025/03/10") && !rels.iter().any(|r| r.ends_with(".md")), "{rels:?}");
    assert_eq!(deep.json["truncated"], true, "{}", deep.text);
}

#[tokio::test]
async fn what_the_caller_may_not_see_never_uses_up_the_limit() {
    let (app, _dirs) = app().await;
    // The sidecars sort first and are hidden: the one visible file still comes back.
    let one = get(&app, "/api/v1/fs/ls?uri=viking://resources/guides&node_limit=1", &[]).await;
    assert_eq!(names(&one), ["getting-started.md"], "{}", one.text);
    // `bob` sorts before `default` and is never listed to default.
    let users = get(&app, "/api/v1/fs/ls?uri=viking://user&node_limit=1", &[]).await;
    assert_eq!(names(&users), ["default"], "{}", users.text);
    // A peer's tree hidden from an acting peer does not use up the limit either.
    let peers =
        get(&app, "/api/v1/fs/ls?uri=viking://~/peers&node_limit=1", &[("x-openviking-actor-peer", "laptop")]).await;
    assert_eq!(names(&peers), ["laptop"], "{}", peers.text);
}

#[tokio::test]
async fn a_directory_whose_files_were_removed_is_gone() {
    let (app, _dirs) = app().await;
    let key = skald_tests::fixture::tree_key("resources/guides");
    for file in [".abstract.md", ".overview.md", "getting-started.md"] {
        app.store.delete(&format!("{key}/{file}")).await.expect("delete");
    }
    let resources = names(&get(&app, "/api/v1/fs/ls?uri=viking://resources", &[]).await);
    assert!(!resources.contains(&"guides".to_owned()), "{resources:?}");
    let gone = get(&app, "/api/v1/fs/ls?uri=viking://resources/guides", &[]).await;
    assert_eq!(gone.status, 404, "{}", gone.text);
    let stat = get(&app, "/api/v1/fs/stat?uri=viking://resources/guides", &[]).await;
    assert_eq!(stat.status, 404, "{}", stat.text);
}

#[tokio::test]
async fn stat_tells_files_from_directories() {
    let (app, _dirs) = app().await;
    let file = get(&app, "/api/v1/fs/stat?uri=viking://~/memories/profile.md", &[]).await;
    let size = DEFAULT_CORPUS.iter().find(|(p, _)| p.ends_with("default/memories/profile.md")).map(|(_, t)| t.len());
    assert_eq!((ok(&file)["isDir"].as_bool(), ok(&file)["size"].as_u64()), (Some(false), size.map(|s| s as u64)));
    assert_eq!(ok(&file)["uri"], "viking://user/default/memories/profile.md", "the alias is never echoed");
    let dir = get(&app, "/api/v1/fs/stat?uri=viking://resources/guides", &[]).await;
    assert_eq!((ok(&dir)["isDir"].as_bool(), ok(&dir)["name"].as_str()), (Some(true), Some("guides")));
}

/// Bad requests: each gets its status, code and, for a 400 on a parameter,
/// that parameter's `loc`.
#[tokio::test]
async fn bad_requests_are_refused_with_the_field_named() {
    let (app, _dirs) = app().await;
    let cases: &[(&str, &str, u16, &str, Option<&str>)] = &[
        (
            "GET",
            "/api/v1/content/read?uri=viking://user/bob/memories/entities/person/alice.md",
            403,
            "PERMISSION_DENIED",
            None,
        ),
        ("GET", "/api/v1/fs/ls?uri=viking://user/bob", 403, "PERMISSION_DENIED", None),
        ("GET", "/api/v1/content/overview?uri=viking://agent/private", 403, "PERMISSION_DENIED", None),
        ("GET", "/api/v1/content/read?uri=viking://~/memories/nothing.md", 404, "NOT_FOUND", None),
        ("GET", "/api/v1/content/abstract?uri=viking://resources/nothing", 404, "NOT_FOUND", None),
        ("GET", "/api/v1/fs/ls?uri=viking://resources/nothing", 404, "NOT_FOUND", None),
        ("GET", "/api/v1/fs/stat?uri=viking://resources/nothing.md", 404, "NOT_FOUND", None),
        ("GET", "/api/v1/content/read?uri=viking://resources/guides", 400, "INVALID_ARGUMENT", None),
        ("GET", "/api/v1/fs/ls?uri=viking://resources/guides/getting-started.md", 400, "INVALID_ARGUMENT", None),
        ("GET", "/api/v1/content/read?uri=viking://user/default/../bob/x.md", 400, "INVALID_ARGUMENT", Some("uri")),
        ("GET", "/api/v1/content/read?uri=viking://resources/a%2F..%2Fb", 400, "INVALID_ARGUMENT", Some("uri")),
        ("GET", "/api/v1/content/read?uri=/etc/passwd", 400, "INVALID_ARGUMENT", Some("uri")),
        ("GET", "/api/v1/content/read", 400, "INVALID_ARGUMENT", Some("uri")),
        (
            "GET",
            "/api/v1/content/read?uri=viking://resources/big/log.md&offset=abc",
            400,
            "INVALID_ARGUMENT",
            Some("offset"),
        ),
        ("GET", "/api/v1/fs/ls?uri=viking://resources&node_limit=10001", 400, "INVALID_ARGUMENT", Some("node_limit")),
        ("GET", "/api/v1/fs/ls?uri=viking://resources&output=tree", 400, "INVALID_ARGUMENT", Some("output")),
        ("GET", "/api/v1/fs/ls?uri=viking://resources&recursive=maybe", 400, "INVALID_ARGUMENT", Some("recursive")),
        ("GET", "/api/v1/fs/ls?uri=viking://resources&abs_limit=0", 400, "INVALID_ARGUMENT", Some("abs_limit")),
        // Listing nothing still checks what is listed.
        ("GET", "/api/v1/fs/ls?uri=viking://resources/nothing&node_limit=0", 404, "NOT_FOUND", None),
        (
            "GET",
            "/api/v1/fs/ls?uri=viking://resources/guides/getting-started.md&limit=0",
            400,
            "INVALID_ARGUMENT",
            None,
        ),
        ("POST", "/api/v1/fs/ls?uri=viking://resources", 405, "METHOD_NOT_ALLOWED", None),
        ("DELETE", "/health", 405, "METHOD_NOT_ALLOWED", None),
        ("GET", "/api/v1/content/upload?uri=viking://resources", 404, "NOT_FOUND", None),
        ("GET", "/api/v1/content/write?uri=viking://resources", 405, "METHOD_NOT_ALLOWED", None),
    ];
    for (method, target, status, code, loc) in cases {
        let reply = call(&app, Handler::Content, method, target, &[], None).await;
        assert_eq!(
            (reply.status, reply.json["error"]["code"].as_str()),
            (*status, Some(*code)),
            "{target}: {}",
            reply.text
        );
        if let Some(field) = loc {
            let locs: Vec<&Value> = reply.json["error"]["details"]["validation_errors"]
                .as_array()
                .map(|errors| errors.iter().map(|e| &e["loc"]).collect())
                .unwrap_or_default();
            assert!(locs.contains(&&json!(["query", field])), "{target}: {}", reply.text);
        }
    }
    // An acting peer may not read another peer's tree.
    let other = "/api/v1/content/read?uri=viking://~/peers/desktop/memories/entities/desktop.md";
    let reply = get(&app, other, &[("x-openviking-actor-peer", "laptop")]).await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    assert_eq!(get(&app, other, &[]).await.status, 200);
}

#[tokio::test]
async fn the_home_alias_works_wherever_a_uri_is_accepted() {
    let (app, _dirs) = app().await;
    // find's target (OpenClaw's default target is `viking://~/memories`).
    let found = call(
        &app,
        Handler::Find,
        "POST",
        "/api/v1/search/find",
        &[],
        Some(&json!({"query": "editor", "target_uri": "viking://~/memories"})),
    )
    .await;
    assert_eq!(found.status, 200, "{}", found.text);
    let uris: Vec<&str> = found.json["result"]["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .filter_map(|m| m["uri"].as_str())
        .collect();
    assert!(!uris.is_empty() && uris.iter().all(|u| u.starts_with("viking://user/default/memories/")), "{uris:?}");
    // Context mode's exclusions.
    let body = |exclude: Value| json!({"query": "editor Neovim", "mode": "context", "max_tokens": 2000, "exclude_uris": exclude, "score_threshold": 0});
    let all = call(&app, Handler::Search, "POST", "/api/v1/search/search", &[], Some(&body(json!([])))).await;
    assert!(all.text.contains("preferences/default/editor.md"), "{}", all.text);
    let excluded =
        call(&app, Handler::Search, "POST", "/api/v1/search/search", &[], Some(&body(json!(["viking://~/memories"]))))
            .await;
    assert_eq!(excluded.status, 200, "{}", excluded.text);
    assert!(!excluded.text.contains("viking://user/default/memories"), "{}", excluded.text);
}

/// The invocation response Lambda would carry for `reply` (API Gateway
/// payload v2: the envelope as a JSON string), without its headers.
fn invocation_bytes(reply: &Reply) -> usize {
    json!({ "statusCode": 200, "body": reply.text }).to_string().len()
}

#[tokio::test]
async fn a_read_past_the_response_limit_is_cut_further_and_says_where_to_read_on() {
    use skald::api::payload::RESERVE;
    let limit = RESERVE + 64 * 1024;
    let big: String = (0..3000).map(|i| format!("{i:05} \"{}\"\n", "x\\".repeat(46))).collect();
    let files = [("resources/big/quoted.md", big.as_str())];
    let (app, _dirs) = skald_tests::fixture::app_with_config(&files, |c| c.limits.max_response_bytes = limit).await;
    let reply = get(&app, "/api/v1/content/read?uri=viking://resources/big/quoted.md", &[]).await;
    assert_eq!(reply.json["truncated"], true, "the cut is flagged");
    assert!(invocation_bytes(&reply) <= limit, "{} bytes", invocation_bytes(&reply));
    let marker = text(&reply).lines().last().unwrap_or_default().to_owned();
    assert!(marker.starts_with("[truncated: lines 1-"), "{marker}");
    let next: usize =
        marker.rsplit("offset=").next().and_then(|n| n.trim_end_matches(']').parse().ok()).expect("an offset");
    assert!(next > 100 && next < 2595, "the response cut reads fewer lines than the 256 KiB cap: {next}");
    let rest =
        get(&app, &format!("/api/v1/content/read?uri=viking://resources/big/quoted.md&offset={next}"), &[]).await;
    assert!(text(&rest).starts_with(&format!("{next:05} ")), "{}", &rest.text[..80]);
    // A read that fits is whole and unflagged.
    let small = get(&app, "/api/v1/content/read?uri=viking://resources/big/quoted.md&limit=10", &[]).await;
    assert_eq!(text(&small).lines().count(), 10);
    assert!(small.json.get("truncated").is_none(), "{}", small.text);
}

#[tokio::test]
async fn an_overview_past_the_response_limit_is_cut_with_a_marker() {
    use skald::api::payload::RESERVE;
    let limit = RESERVE + 32 * 1024;
    // A file's overview is its whole `# Summary` section, however long.
    let paragraph = format!("# Summary\n{}", "A \"quoted\" sentence about the service.\n".repeat(5_000));
    let files = [("resources/long/para.md", paragraph.as_str())];
    let (app, _dirs) = skald_tests::fixture::app_with_config(&files, |c| c.limits.max_response_bytes = limit).await;
    let reply = get(&app, "/api/v1/content/overview?uri=viking://resources/long/para.md", &[]).await;
    assert_eq!(reply.json["truncated"], true, "the cut is flagged");
    assert!(invocation_bytes(&reply) <= limit, "{} bytes", invocation_bytes(&reply));
    let body = text(&reply);
    assert!(body.starts_with("A \"quoted\" sentence"), "{}", &body[..80]);
    assert!(body.ends_with("bytes shown, as much as one response carries]"), "{}", &body[body.len() - 120..]);
}

#[tokio::test]
async fn a_listing_past_the_response_limit_keeps_its_first_entries_and_is_flagged() {
    use skald::api::payload::RESERVE;
    let limit = RESERVE + 8 * 1024;
    let notes: Vec<(String, String)> = (0..120)
        .map(|i| (format!("resources/many/note{i:03}.md"), format!("# Note {i}\n\nThe \"{i}\" note.\n")))
        .collect();
    let files: Vec<(&str, &str)> = notes.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let (app, _dirs) = skald_tests::fixture::app_with_config(&files, |c| c.limits.max_response_bytes = limit).await;
    let reply = get(&app, "/api/v1/fs/ls?uri=viking://resources/many", &[]).await;
    let listed = names(&reply);
    assert!(!listed.is_empty() && listed.len() < 120, "{} entries", listed.len());
    assert_eq!(listed.first().map(String::as_str), Some("note000.md"), "the first entries are kept");
    assert_eq!(reply.json["truncated"], true, "the cut is flagged");
    assert!(invocation_bytes(&reply) <= limit, "{} bytes", invocation_bytes(&reply));
}
