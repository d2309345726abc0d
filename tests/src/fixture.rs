//! An [`App`] over a small ingested corpus, and requests to it through the
//! Lambda edge: tests build a real `lambda_http::Request` (method, path,
//! headers, body and, for authorizer tests, an API Gateway v2 request
//! context with JWT claims), run it through [`skald_lambda::serve`] into
//! `find` ([`call_find`], [`FIND_PATH`]) or `search` ([`call_search`],
//! [`SEARCH_PATH`]) and read the `lambda_http::Response` back as status and
//! JSON.
//!
//! Each [`app_with_corpus`] call writes its files into a fresh source
//! directory, opens a [`LocalStore`] in another, and ingests the tree for
//! account `default` with a 64-bucket [`HashedEmbedder`]. Both directories
//! are removed when the returned [`TempDirs`] guard is dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lambda_http::aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription, ApiGatewayV2httpRequestContext,
};
use lambda_http::request::RequestContext;
use lambda_http::{Body, RequestExt as _};
use serde_json::Value;
use skald::app::App;
use skald::config::{Config, IdentityConfig, IdentityMode};
use skald::embed::Embedder;
use skald::embed::hashed::HashedEmbedder;
use skald::identity::AccountId;
use skald::index::Backend;
use skald::ingest::{IngestOptions, ingest_dir};
use skald::store::SharedStore;
use skald::store::local::LocalStore;

/// The route under test.
pub const FIND_PATH: &str = "/api/v1/search/find";

/// The composite search route (`mode` = `list` | `context`).
pub const SEARCH_PATH: &str = "/api/v1/search/search";

/// The account every fixture corpus is ingested into.
pub const ACCOUNT: &str = "default";

/// The embedder dimension of every fixture app.
pub const EMBED_DIMENSION: usize = 64;

/// A small corpus as `(viking path without the scheme, file text)`:
/// English and Chinese memories for users `default` and `bob`, dated
/// events (`…/events/YYYY/MM/DD/…`), resources tagged through frontmatter,
/// a resource directory with `.abstract.md` and `.overview.md` sidecars,
/// and a shared skill under `agent/skills`.
///
/// What user `default` can find without a `context_type` (its user tree
/// and `viking://resources`): 7 memories and 7 resource records (5 files
/// plus the `guides` directory's level 0 and level 1 records).
pub const DEFAULT_CORPUS: &[(&str, &str)] = &[
    // user `default`: memories (EN and ZH)
    (
        "user/default/memories/profile.md",
        "# Summary\nDefault user is a backend engineer who writes Rust and maintains the search service.\n",
    ),
    (
        "user/default/memories/preferences/default/editor.md",
        "# Summary\nPrefers Neovim with a dark theme when editing Rust code.\n\n# Details\nUses rust-analyzer and format on save.\n",
    ),
    ("user/default/memories/preferences/default/food.md", "# Summary\n喜欢吃川菜，尤其是麻婆豆腐和水煮鱼。\n"),
    (
        "user/default/memories/entities/project/skald.md",
        "Skald is a serverless context-assembly service written in Rust that speaks the OpenViking protocol.\n",
    ),
    (
        "user/default/memories/events/2024/01/15/kickoff.md",
        "# Summary\nProject kickoff meeting for the search service with the infra team.\n\n# Mon 2024-01-15 ChatLog:\nWe agreed on the milestones.\n",
    ),
    (
        "user/default/memories/events/2025/03/10/launch.md",
        "# Summary\nLaunched the search service to production in March.\n\n# Mon 2025-03-10 ChatLog:\nThe launch went smoothly.\n",
    ),
    (
        "user/default/memories/events/2025/06/01/release.md",
        "# Summary\n在上海举行了产品发布会，发布了新的检索功能。\n\n# 2025-06-01 聊天记录:\n发布会很成功。\n",
    ),
    // user `bob`: memories (EN and ZH)
    (
        "user/bob/memories/preferences/bob/editor.md",
        "# Summary\nBob prefers Emacs with a light theme when editing Rust code.\n",
    ),
    ("user/bob/memories/entities/person/alice.md", "Alice is Bob's manager on the search service team.\n"),
    ("user/bob/memories/events/2025/02/02/offsite.md", "# Summary\n鲍勃参加了搜索团队的外出活动，讨论了检索服务。\n"),
    // shared resources, tagged through frontmatter
    (
        "resources/search/ranking.md",
        "---\ntags: [team=search, env=prod]\n---\n# Ranking\n\nHow the search service ranks results by cosine score.\n",
    ),
    (
        "resources/search/indexing.md",
        "---\ntags: [team=search, env=dev]\n---\n# Indexing\n\nHow documents are indexed into segments for the search service.\n",
    ),
    (
        "resources/infra/deploy.md",
        "---\ntags:\n  - team=infra\n  - env=prod\n---\n# Deploy\n\nDeploying the Lambda functions with the infra pipeline.\n",
    ),
    ("resources/zh/intro.md", "# 简介\n\n这是检索服务的中文介绍文档，说明如何使用语义搜索。\n"),
    // a directory with both sidecars, and a file in it
    ("resources/guides/.abstract.md", "Guides for getting started with the search service."),
    (
        "resources/guides/.overview.md",
        "# Guides overview\n\nStep-by-step guides: getting started, configuration and deployment of the search service.\n",
    ),
    (
        "resources/guides/getting-started.md",
        "# Getting started\n\nInstall the CLI, ingest a directory and run your first search query.\n",
    ),
    // a shared skill
    (
        "agent/skills/web-search/SKILL.md",
        "---\nname: web-search\n---\n# Web search\n\nSearch the web and summarise the top results for the user.\n",
    ),
];

/// A directory under the system temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new, empty, uniquely named directory whose name contains `label`.
    ///
    /// # Panics
    /// When the directory cannot be created.
    #[must_use]
    pub fn new(label: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!("skald-fixture-{label}-{}-{n}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        Self(path)
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The temporary directories behind a fixture app: the ingested source tree
/// and the store. Keep it alive as long as the app is used.
#[derive(Debug)]
pub struct TempDirs {
    /// The source tree that was ingested.
    pub source: TempDir,
    /// The local store's root.
    pub store: TempDir,
}

/// Writes `files` (viking paths without the scheme, e.g.
/// `resources/a.md`) under `root`, creating parent directories, every
/// file with the same modification time (now), so the index's
/// `updated_at` orders them by URI alone.
///
/// # Panics
/// When a file cannot be written.
pub fn write_tree(root: &Path, files: &[(&str, &str)]) {
    // One modification time for the whole tree: files written on both
    // sides of a second would list in another order ("newest first"
    // breaks ties by URI only within a second).
    let now = std::time::SystemTime::now();
    for (path, text) in files {
        let target = root.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).expect("create a source directory");
        }
        std::fs::write(&target, text).expect("write a source file");
        let file = std::fs::File::options().write(true).open(&target).expect("open a source file");
        file.set_modified(now).expect("set a modification time");
    }
}

/// An app over `files`, ingested for account [`ACCOUNT`] into a fresh
/// [`LocalStore`], with a [`HashedEmbedder`] of [`EMBED_DIMENSION`].
/// Identity mode is `dev` (the `X-OpenViking-*` headers are trusted,
/// defaulting to user `default`) when `dev_mode`, else `authorizer` (only
/// API Gateway authorizer claims).
///
/// # Panics
/// When the store cannot be opened or ingest fails.
pub async fn app_with_corpus(files: &[(&str, &str)], dev_mode: bool) -> (Arc<App>, TempDirs) {
    let mode = if dev_mode { IdentityMode::Dev } else { IdentityMode::Authorizer };
    app_with_config(files, |config| config.identity.mode = mode).await
}

/// [`app_with_corpus`] in dev mode with `edit` applied to the configuration
/// before the app is built (models, retrieval settings, …).
///
/// # Panics
/// When the store cannot be opened or ingest fails.
pub async fn app_with_config(files: &[(&str, &str)], edit: impl FnOnce(&mut Config)) -> (Arc<App>, TempDirs) {
    let dirs = TempDirs { source: TempDir::new("source"), store: TempDir::new("store") };
    write_tree(dirs.source.path(), files);
    let store: SharedStore = Arc::new(LocalStore::open(dirs.store.path()).expect("open the local store"));
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(EMBED_DIMENSION));
    let mut config = Config {
        store: dirs.store.path().display().to_string(),
        identity: IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() },
        ..Config::default()
    };
    // The hashed embedder's scores say little about relevance: the
    // corpora's tests of the assembly line see every candidate, and the
    // relevance cut has tests of its own (they set it back).
    config.retrieval.relevance_gap = 1.0;
    edit(&mut config);
    let app = build_app(config, store, embedder);
    ingest_tree(&app, dirs.source.path()).await;
    (Arc::new(app), dirs)
}

/// Ingests the tree under `source` into account [`ACCOUNT`] of `app`
/// (wherever `app` starts new accounts), with the default options.
///
/// # Panics
/// When ingest fails.
pub async fn ingest_tree(app: &App, source: &Path) {
    let account = AccountId::new(ACCOUNT).expect("valid account id");
    ingest_dir(source, &app.index_target(), &account, &*app.embedder, &IngestOptions::default(), &mut |_| {})
        .await
        .expect("ingest the corpus");
}

/// The index backend the fixtures start accounts on:
/// `SKALD_TEST_INDEX_BACKEND` (`segments`, the default, or `s3vectors`:
/// each app gets a fresh vector bucket in the process's S3 Vectors
/// emulator, [`crate::s3vectors::shared_endpoint`]).
///
/// # Panics
/// When the variable names neither.
#[must_use]
pub fn test_backend() -> Backend {
    match std::env::var("SKALD_TEST_INDEX_BACKEND") {
        Ok(name) if !name.is_empty() => {
            Backend::parse(&name).unwrap_or_else(|| panic!("SKALD_TEST_INDEX_BACKEND {name:?}: segments or s3vectors"))
        }
        _ => Backend::Segments,
    }
}

/// `app` rebuilt around another embedder: the same configuration, store
/// and vector bucket (tests that watch or refuse the embedder's calls).
#[must_use]
pub fn with_embedder(app: &App, embedder: Arc<dyn Embedder>) -> App {
    let mut rebuilt = App::with_parts(app.config.clone(), Arc::clone(&app.store), embedder);
    rebuilt.vectors = app.vectors.clone();
    rebuilt
}

/// The keys a result has on [`test_backend`] beyond the segment backend's:
/// `index` (how the searches went) on `s3vectors`.
#[must_use]
pub fn backend_keys() -> &'static [&'static str] {
    if test_backend() == Backend::S3vectors { &["index"] } else { &[] }
}

/// An app over `store` and `embedder` whose new accounts start on
/// [`test_backend`]: on `s3vectors`, with a fresh bucket of the emulator.
#[must_use]
pub fn build_app(config: Config, store: SharedStore, embedder: Arc<dyn Embedder>) -> App {
    on_backend(config, store, embedder, test_backend())
}

/// An app whose new accounts start on `backend` (a fresh emulator bucket
/// for `s3vectors`).
#[must_use]
pub fn on_backend(mut config: Config, store: SharedStore, embedder: Arc<dyn Embedder>, backend: Backend) -> App {
    let vectors = (backend == Backend::S3vectors).then(crate::s3vectors::fresh_bucket);
    if let Some(v) = &vectors {
        config.index.backend = Backend::S3vectors;
        config.index.s3vectors.bucket = Some(v.bucket().to_owned());
    }
    let mut app = App::with_parts(config, store, embedder);
    if let Some(v) = vectors {
        app.vectors = v;
    }
    app
}

/// A Lambda request to [`FIND_PATH`] with `method`, `headers` and `body`.
///
/// # Panics
/// When a header name or value is invalid.
#[must_use]
pub fn request(method: &str, headers: &[(&str, &str)], body: Body) -> lambda_http::Request {
    request_to(FIND_PATH, method, headers, body)
}

/// A Lambda request to `path` (e.g. [`SEARCH_PATH`]) with `method`,
/// `headers` and `body`; `content-type: application/json` unless
/// `headers` name another.
///
/// # Panics
/// When a header name or value is invalid.
#[must_use]
pub fn request_to(path: &str, method: &str, headers: &[(&str, &str)], body: Body) -> lambda_http::Request {
    let mut builder =
        lambda_http::http::Request::builder().method(method).uri(format!("https://api.example.com{path}"));
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-type")) {
        builder = builder.header("content-type", "application/json");
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(body).expect("a valid request")
}

/// A `POST` of `body` as JSON text to [`FIND_PATH`], with `headers`.
#[must_use]
pub fn post_json(body: &Value, headers: &[(&str, &str)]) -> lambda_http::Request {
    request("POST", headers, Body::Text(body.to_string()))
}

/// A `POST` of `body` as JSON text to [`SEARCH_PATH`], with `headers`.
#[must_use]
pub fn post_search_json(body: &Value, headers: &[(&str, &str)]) -> lambda_http::Request {
    request_to(SEARCH_PATH, "POST", headers, Body::Text(body.to_string()))
}

/// `request` as API Gateway (HTTP API, payload 2.0) delivers it after a JWT
/// authorizer accepted a token with these claims.
#[must_use]
pub fn with_jwt_claims(request: lambda_http::Request, claims: &[(&str, &str)]) -> lambda_http::Request {
    let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
    jwt.claims = claims.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let mut authorizer = ApiGatewayRequestAuthorizer::default();
    authorizer.jwt = Some(jwt);
    let mut context = ApiGatewayV2httpRequestContext::default();
    context.route_key = Some(format!("POST {FIND_PATH}"));
    context.authorizer = Some(authorizer);
    request.with_request_context(RequestContext::ApiGatewayV2(context))
}

/// A response as status, the raw body text, and the body parsed as JSON.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The `content-type` header, if any.
    pub content_type: Option<String>,
    /// The body as sent.
    pub text: String,
    /// The body parsed as JSON.
    pub json: Value,
}

/// Runs `event` through the Lambda edge ([`skald_lambda::serve`]) into the
/// `find` handler, as the `find` function binary does.
///
/// # Panics
/// When the response body is not JSON text.
pub async fn call_find(app: &Arc<App>, event: lambda_http::Request) -> Answer {
    let handler = |app: Arc<App>, request| async move { skald::api::find::handle(&app, request).await };
    answer(skald_lambda::serve(app, &handler, event).await)
}

/// Runs `event` through the Lambda edge ([`skald_lambda::serve`]) into the
/// `search` handler, as the `search-context` function binary does.
///
/// # Panics
/// When the response body is not JSON text.
pub async fn call_search(app: &Arc<App>, event: lambda_http::Request) -> Answer {
    let handler = |app: Arc<App>, request| async move { skald::api::search::handle(&app, request).await };
    answer(skald_lambda::serve(app, &handler, event).await)
}

/// POSTs `body` to `search` as the default dev-mode caller (no headers)
/// and returns the status and the JSON body.
pub async fn search(app: &Arc<App>, body: &Value) -> (u16, Value) {
    let answer = call_search(app, post_search_json(body, &[])).await;
    (answer.status, answer.json)
}

/// A Lambda response as an [`Answer`].
fn answer(response: lambda_http::Response<Body>) -> Answer {
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).map(std::borrow::ToOwned::to_owned);
    let text = match response.into_body() {
        Body::Text(text) => text,
        Body::Binary(bytes) => String::from_utf8(bytes).expect("a UTF-8 body"),
        _ => String::new(),
    };
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("response body is not JSON ({e}): {text}"));
    Answer { status, content_type, text, json }
}

/// POSTs `body` to `find` as the default dev-mode caller (no headers) and
/// returns the status and the JSON body.
pub async fn find(app: &Arc<App>, body: &Value) -> (u16, Value) {
    let answer = call_find(app, post_json(body, &[])).await;
    (answer.status, answer.json)
}

/// A corpus for context mode (`POST /search` with `mode = "context"`),
/// as `(viking path without the scheme, file text)`, around the query
/// "kubernetes cluster upgrade": for user `default`, memories in every
/// bucket (events with a frontmatter tag and a trailing `MEMORY_FIELDS`
/// block, entities, a preference, an experience), a `profile.md` full of
/// the query's words (never a candidate), resources (a runbook file, a
/// `runbooks` directory with both sidecars, an unrelated note), a user
/// skill and a shared skill; one memory of peer `p1`; and one of user
/// `bob` (never visible to `default`).
///
/// What user `default` can see as distinct nodes: 7 memories (3 events,
/// 2 entities, 1 preference, 1 experience), 3 resources (2 files and the
/// directory), 2 skills, and peer `p1`'s event: 13.
pub const CONTEXT_CORPUS: &[(&str, &str)] = &[
    (
        "user/default/memories/profile.md",
        "# Summary\nKubernetes cluster upgrade expert who runs a kubernetes cluster upgrade every week.\n",
    ),
    (
        "user/default/memories/events/2025/04/02/cluster-upgrade.md",
        "---\ntags: [team=platform]\n---\n# Summary\nUpgraded the kubernetes cluster to version 1.30 with no downtime.\n\n# Wed 2025-04-02 ChatLog:\nWe drained nodes one by one and watched the pods reschedule.\n\n<!-- MEMORY_FIELDS\n{\"importance\": 3}\n-->\n",
    ),
    (
        "user/default/memories/events/2025/05/20/cluster-rollback.md",
        "# Summary\nRolled back the kubernetes cluster upgrade after an etcd alarm.\n\n# Tue 2025-05-20 ChatLog:\nThe etcd quorum recovered after the rollback.\n",
    ),
    (
        "user/default/memories/events/2024/11/03/dinner.md",
        "# Summary\nDinner with the family at the seaside restaurant.\n",
    ),
    (
        "user/default/memories/entities/infra/prod-cluster.md",
        "The prod kubernetes cluster runs 40 nodes in three zones.\n",
    ),
    ("user/default/memories/entities/people/dana.md", "Dana owns the kubernetes cluster upgrade runbook.\n"),
    (
        "user/default/memories/preferences/default/upgrades.md",
        "# Summary\nPrefers blue-green cluster upgrades over in-place upgrades.\n",
    ),
    (
        "user/default/memories/experiences/upgrade-lessons.md",
        "# Summary\nAlways snapshot etcd before a kubernetes cluster upgrade.\n\n# Details\nA missing snapshot cost a day of work in 2024.\n",
    ),
    (
        "resources/runbooks/cluster-upgrade.md",
        "---\ntags: [team=platform, env=prod]\n---\n# Cluster upgrade runbook\n\nSteps for a kubernetes cluster upgrade: drain, upgrade, uncordon.\n\n## Drain\nDrain each node.\n\n## Upgrade\nUpgrade the control plane first.\n",
    ),
    ("resources/runbooks/.abstract.md", "Runbooks for kubernetes cluster operations."),
    (
        "resources/runbooks/.overview.md",
        "# Runbooks overview\n\nRunbooks: kubernetes cluster upgrade, node drain, and etcd backup.\n",
    ),
    ("resources/notes/gardening.md", "# Gardening\n\nTomatoes need sun and water every morning.\n"),
    (
        "user/default/skills/cluster-upgrade/SKILL.md",
        "---\nname: cluster-upgrade\n---\n# Cluster upgrade skill\n\nRun a kubernetes cluster upgrade with kubeadm.\n",
    ),
    (
        "agent/skills/kubectl/SKILL.md",
        "---\nname: kubectl\n---\n# kubectl\n\nRun kubectl commands against a kubernetes cluster.\n",
    ),
    (
        "user/default/peers/p1/memories/events/2025/06/11/staging-upgrade.md",
        "# Summary\nPeer p1 upgraded the staging kubernetes cluster.\n",
    ),
    (
        "user/bob/memories/events/2025/04/02/bob-upgrade.md",
        "# Summary\nBob did a kubernetes cluster upgrade of his own.\n",
    ),
];

// ---------------------------------------------------------------------------
// Every route, with response headers; apps over a given store.
// ---------------------------------------------------------------------------

/// The sessions routes' base path.
pub const SESSIONS_PATH: &str = "/api/v1/sessions";

/// The recall preset's route.
pub const RECALL_PATH: &str = "/api/v1/search/recall";

/// The bootstrap preset's route.
pub const BOOTSTRAP_PATH: &str = "/api/v1/search/bootstrap";

/// A library handler, as one of the function binaries serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// `skald::api::find::handle`.
    Find,
    /// `skald::api::search::handle`.
    Search,
    /// `skald::api::recall::handle`.
    Recall,
    /// `skald::api::bootstrap::handle`.
    Bootstrap,
    /// `skald::api::sessions::handle`.
    Sessions,
    /// `skald::api::content::handle`.
    Content,
    /// `skald_mcp::handle` (the `mcp` function). Its transport's refusals
    /// are plain text and a notification's 202 has no body, which
    /// [`call_handler`] cannot read as JSON: send those another way.
    Mcp,
}

/// A response as status, headers, the raw body text and the body as JSON.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The response headers.
    pub headers: lambda_http::http::HeaderMap,
    /// The body as sent.
    pub text: String,
    /// The body parsed as JSON.
    pub json: Value,
}

impl Reply {
    /// The value of header `name` as text, if present.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Asserts that `reply` is a 200 `ok` envelope and returns its `result`.
///
/// # Panics
/// When it is not (the panic names the caller's line).
#[track_caller]
pub fn ok(reply: &Reply) -> &Value {
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["status"], "ok", "{}", reply.text);
    &reply.json["result"]
}

/// Asserts that `reply` is a 400 `INVALID_ARGUMENT` whose validation errors
/// include one at `loc` (e.g. `["body", "query"]`).
///
/// # Panics
/// When it is not (the panic names the caller's line).
#[track_caller]
pub fn refused_at(reply: &Reply, loc: &Value) {
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.json["error"]["code"], "INVALID_ARGUMENT", "{}", reply.text);
    let errors = reply.json["error"]["details"]["validation_errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no validation errors: {}", reply.text));
    assert!(errors.iter().any(|e| &e["loc"] == loc), "no error at {loc}: {}", reply.text);
}

/// Runs `event` through the Lambda edge ([`skald_lambda::serve`]) into
/// `handler`, as that handler's function binary does, keeping the headers.
///
/// # Panics
/// When the response body is not JSON text.
pub async fn call_handler(app: &Arc<App>, handler: Handler, event: lambda_http::Request) -> Reply {
    let response = match handler {
        Handler::Find => {
            let h = |app: Arc<App>, request| async move { skald::api::find::handle(&app, request).await };
            skald_lambda::serve(app, &h, event).await
        }
        Handler::Search => {
            let h = |app: Arc<App>, request| async move { skald::api::search::handle(&app, request).await };
            skald_lambda::serve(app, &h, event).await
        }
        Handler::Recall => {
            let h = |app: Arc<App>, request| async move { skald::api::recall::handle(&app, request).await };
            skald_lambda::serve(app, &h, event).await
        }
        Handler::Bootstrap => {
            let h = |app: Arc<App>, request| async move { skald::api::bootstrap::handle(&app, request).await };
            skald_lambda::serve(app, &h, event).await
        }
        Handler::Sessions => {
            let h = |app: Arc<App>, request| async move { skald::api::sessions::handle(&app, request).await };
            skald_lambda::serve(app, &h, event).await
        }
        Handler::Content => {
            let h = |app: Arc<App>, request| async move { skald::api::content::handle(&app, request).await };
            skald_lambda::serve(app, &h, event).await
        }
        Handler::Mcp => {
            let h = |app: Arc<App>, request| async move { skald_mcp::handle(&app, request).await };
            skald_lambda::serve(app, &h, event).await
        }
    };
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = match response.into_body() {
        Body::Text(text) => text,
        Body::Binary(bytes) => String::from_utf8(bytes).expect("a UTF-8 body"),
        _ => String::new(),
    };
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("response body is not JSON ({e}): {text}"));
    Reply { status, headers, text, json }
}

/// Calls `handler` with `method` on `path`, with `headers` and `body` (JSON
/// text, or no body for `None`).
pub async fn call(
    app: &Arc<App>,
    handler: Handler,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Reply {
    let body = body.map_or(Body::Empty, |b| Body::Text(b.to_string()));
    call_handler(app, handler, request_to(path, method, headers, body)).await
}

/// `POST` of `body` to the sessions route `path` as the default dev caller.
pub async fn sessions_post(app: &Arc<App>, path: &str, body: &Value) -> Reply {
    call(app, Handler::Sessions, "POST", path, &[], Some(body)).await
}

/// `GET` of the sessions route `path` as the default dev caller.
pub async fn sessions_get(app: &Arc<App>, path: &str) -> Reply {
    call(app, Handler::Sessions, "GET", path, &[], None).await
}

/// `POST` of `body` to `/recall` as the default dev caller.
pub async fn recall(app: &Arc<App>, body: &Value) -> Reply {
    call(app, Handler::Recall, "POST", RECALL_PATH, &[], Some(body)).await
}

/// `POST` of `body` to `/bootstrap` as the default dev caller.
pub async fn bootstrap(app: &Arc<App>, body: &Value) -> Reply {
    call(app, Handler::Bootstrap, "POST", BOOTSTRAP_PATH, &[], Some(body)).await
}

/// `POST` of `body` to `/search` as the default dev caller, with headers.
pub async fn search_reply(app: &Arc<App>, body: &Value) -> Reply {
    call(app, Handler::Search, "POST", SEARCH_PATH, &[], Some(body)).await
}

/// A fresh [`LocalStore`] in a temporary directory (removed on drop).
///
/// # Panics
/// When the store cannot be opened.
#[must_use]
pub fn local_store() -> (SharedStore, TempDir) {
    let dir = TempDir::new("store");
    let store: SharedStore = Arc::new(LocalStore::open(dir.path()).expect("open the local store"));
    (store, dir)
}

/// A store on a fresh bucket of the local S3 server ([`crate::moto`]).
pub async fn s3_shared_store(test_name: &str) -> SharedStore {
    Arc::new(crate::moto::s3_store(test_name).await)
}

/// A fresh [`LocalStore`] in a temporary directory whose name contains
/// `label` (the directory is removed when the [`TempDir`] drops).
///
/// # Panics
/// When the store cannot be opened.
#[must_use]
pub fn labelled_local_store(label: &str) -> (SharedStore, TempDir) {
    let dir = TempDir::new(label);
    let store: SharedStore = Arc::new(LocalStore::open(dir.path()).expect("open the local store"));
    (store, dir)
}

/// Runs each check against both store backends, as two test modules:
/// `local::<check>` over a [`LocalStore`] in a fresh temporary directory
/// ([`labelled_local_store`]) and `s3::<check>` over a fresh bucket of the
/// local S3 server ([`s3_shared_store`]). Each check is an `async fn` of
/// the calling module, run as a `#[tokio::test]` on a multi-thread runtime
/// with `worker_threads` workers.
///
/// A check takes the [`SharedStore`] by value; one marked `(shared)` takes
/// `&SharedStore` (to hand clones to the tasks it spawns) and one marked
/// `(borrowed)` takes `&dyn Store`.
///
/// ```text
/// skald_tests::on_both_stores!(worker_threads = 2; get_put_round_trip(borrowed), a_key_works);
/// ```
#[macro_export]
macro_rules! on_both_stores {
    (worker_threads = $threads:literal; $($check:ident $(($how:ident))?),* $(,)?) => {
        mod local {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $check() {
                    let (store, _dir) = $crate::fixture::labelled_local_store(stringify!($check));
                    Box::pin(super::$check($crate::on_both_stores!(@arg $($how)? store))).await;
                }
            )*
        }

        mod s3 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $check() {
                    let store = $crate::fixture::s3_shared_store(stringify!($check)).await;
                    Box::pin(super::$check($crate::on_both_stores!(@arg $($how)? store))).await;
                }
            )*
        }
    };
    (@arg borrowed $store:ident) => { &*$store };
    (@arg shared $store:ident) => { &$store };
    (@arg $store:ident) => { $store };
}

/// A dev-mode app over `store` with the fixture's [`HashedEmbedder`] and
/// nothing ingested.
#[must_use]
pub fn app_over_store(store: SharedStore) -> Arc<App> {
    let config = Config {
        identity: IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() },
        ..Config::default()
    };
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(EMBED_DIMENSION));
    Arc::new(build_app(config, store, embedder))
}

/// Sets the modification time of `path` under `root` to `unix_seconds`.
///
/// # Panics
/// When the file cannot be opened or its time set.
pub fn set_mtime(root: &Path, path: &str, unix_seconds: i64) {
    let file = std::fs::File::options().write(true).open(root.join(path)).expect("open a source file");
    let secs = u64::try_from(unix_seconds).expect("a time after 1970");
    file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)).expect("set a modification time");
}

/// A dev-mode app over `store` with `files` ingested for account
/// [`ACCOUNT`] (the fixture's [`HashedEmbedder`]); files named in `mtimes`
/// get that modification time (Unix seconds) first, which the index
/// records as their `updated_at`. Returns the source directory's guard.
///
/// # Panics
/// When ingest fails.
pub async fn app_with_corpus_in(
    files: &[(&str, &str)],
    mtimes: &[(&str, i64)],
    store: SharedStore,
) -> (Arc<App>, TempDir) {
    let source = TempDir::new("source");
    write_tree(source.path(), files);
    for (path, t) in mtimes {
        set_mtime(source.path(), path, *t);
    }
    let app = app_over_store(store);
    ingest_tree(&app, source.path()).await;
    (app, source)
}

/// The store key of `viking://{path}` for account [`ACCOUNT`].
#[must_use]
pub fn tree_key(path: &str) -> String {
    format!("accounts/{ACCOUNT}/tree/{path}")
}

/// The store key of an object of session `id` of user `user`
/// (`rest` e.g. `meta.json`, `.recall_log.json`).
#[must_use]
pub fn session_key(user: &str, id: &str, rest: &str) -> String {
    tree_key(&format!("user/{user}/sessions/{id}/{rest}"))
}

/// The object under `key` as JSON, or `None` when it does not exist.
///
/// # Panics
/// When the store fails otherwise or the object is not JSON.
pub async fn store_json(store: &SharedStore, key: &str) -> Option<Value> {
    match store.get(key).await {
        Ok(object) => Some(serde_json::from_slice(&object.body).expect("a JSON object")),
        Err(skald::store::StoreError::NotFound(_)) => None,
        Err(e) => panic!("store get {key}: {e}"),
    }
}

/// A level-2 record of `uri` (typed by where it lives), with
/// `abstract_text`, `source_hash`, 4 abstract tokens, size 10, times 0, no
/// tags and no version: an index record for tests that commit segments
/// by hand.
///
/// # Panics
/// When `uri` is not a valid, indexable URI.
#[must_use]
pub fn file_record_of(uri: &str, abstract_text: &str, source_hash: &str) -> skald::index::Record {
    let uri = skald::uri::VikingUri::parse(uri).unwrap_or_else(|e| panic!("{uri:?}: {e}"));
    let (context_type, category) =
        skald::index::record::classify(&uri).unwrap_or_else(|| panic!("{uri} is never indexed"));
    skald::index::Record {
        abstract_text: abstract_text.to_owned(),
        uri,
        level: skald::index::record::LEVEL_FILE,
        context_type,
        category,
        abstract_tokens: 4,
        overview_tokens: None,
        full_tokens: None,
        size: 10,
        created_at: 0,
        updated_at: 0,
        tags: Vec::new(),
        owner_user_id: None,
        source_hash: source_hash.to_owned(),
        source_version: None,
        terms: String::new(),
        passages: 0,
        span: None,
    }
}

/// The hits of a find or list-mode `result` (`memories`, `resources` and
/// `skills` together) as URIs, best score first.
#[must_use]
pub fn ranked_uris(result: &Value) -> Vec<String> {
    let mut hits: Vec<(f64, String)> = ["memories", "resources", "skills"]
        .iter()
        .flat_map(|k| result[*k].as_array().cloned().unwrap_or_default())
        .map(|h| (h["score"].as_f64().unwrap_or(0.0), h["uri"].as_str().unwrap_or("").to_owned()))
        .collect();
    hits.sort_by(|a, b| b.0.total_cmp(&a.0));
    hits.into_iter().map(|(_, u)| u).collect()
}
