//! Resources, skills and watches, served by the `content` function
//! ([`crate::documents`] turns uploads into tree files; [`crate::write`]
//! writes them; shapes as the reference):
//!
//! - `POST /api/v1/resources/temp_upload` — a multipart/form-data body
//!   with one `file` (at most [`MAX_UPLOAD_BYTES`]) → `{temp_file_id}`.
//!   The upload is kept under `uploads/{account}/{user}/` (the template
//!   expires it after a day) and named by its content's hash and its file
//!   name, so a retried upload is the same upload; only its uploader can
//!   use it.
//! - `POST /api/v1/resources` — `temp_file_id` (and `source_name`), or
//!   `path`; `to` (the directory that receives the resource, or, ending in
//!   `.md`, the file itself) or `parent`; `description` (an archive's
//!   directory abstract); default parent
//!   `viking://resources` for admin and root keys and in dev mode, the
//!   caller's `viking://user/{user}/resources` for a user key. → `{status:
//!   "success", root_uri, source_path, files, warnings, errors,
//!   queue_status}`. A `path` is refused (400 naming it): this deployment
//!   fetches no URL and reads no server file; upload the file instead.
//! - `POST /api/v1/skills` — `data` (a SKILL.md text, or `{name,
//!   description, content}`) or `temp_file_id` (a SKILL.md, or a zip with
//!   SKILL.md and the files beside it); `target_uri` (default as
//!   resources: `viking://agent/skills`, or the caller's
//!   `viking://user/{user}/skills`) → `{status, uri, name,
//!   auxiliary_files}`. `POST /api/v1/skills/validate` checks without
//!   writing; `GET|PUT|DELETE /api/v1/skills/{name}`; `GET
//!   /api/v1/skills?target_uri=&node_limit=` lists (`POST
//!   /api/v1/skills/find` is the `find` function's).
//! - `GET /api/v1/watches` — `[]`: a deployment that fetches no URL
//!   watches none; `…/watches/{id}` and its `trigger` → 404.
//! - `POST /api/v1/system/wait` — returns once queued processing is done:
//!   at once, since writes index inline locally and through the store's
//!   notifications (seconds) deployed.
//!
//! Every file lands through [`Writes`], so the roles of the write routes
//! hold: a user key writes its own tree only.

use bytes::Bytes;
use futures_util::future::join_all;
use futures_util::stream;
use http::{Method, Request, Response};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::error::{ApiError, FieldError};
use super::fields::{Body, Query, decode_segment};
use super::{Admitted, admit_sized, error_response, ok, within_deadline};
use crate::app::App;
use crate::documents::{
    self, DocumentError, MAX_UPLOAD_BYTES, Skill, parse_skill, resource_documents, skill_from_fields,
};
use crate::keys::Role;
use crate::store::{PutMode, StoreError};
use crate::uri::{VikingUri, tree_key};
use crate::write::{WriteMode, Writes};

/// The routes this module serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `POST /api/v1/resources/temp_upload`.
    Upload,
    /// `POST /api/v1/resources`.
    AddResource,
    /// `POST /api/v1/skills` (add), `GET` (list).
    Skills,
    /// `POST /api/v1/skills/validate`.
    ValidateSkill,
    /// `GET|PUT|DELETE /api/v1/skills/{name}`.
    Skill(String),
    /// `GET /api/v1/watches`, `PATCH|DELETE` by `to_uri`.
    Watches,
    /// `/api/v1/watches/{id}` and `…/trigger`.
    Watch(String),
    /// `POST /api/v1/system/wait`.
    Wait,
}

/// The route at `path`, if this module serves it.
#[must_use]
pub fn route(path: &str) -> Option<Route> {
    let path = path.trim_end_matches('/');
    Some(match path {
        "/api/v1/resources/temp_upload" => Route::Upload,
        "/api/v1/resources" => Route::AddResource,
        "/api/v1/skills" => Route::Skills,
        "/api/v1/skills/validate" => Route::ValidateSkill,
        "/api/v1/watches" | "/api/v1/watches/trigger" => Route::Watches,
        "/api/v1/system/wait" => Route::Wait,
        _ => {
            if let Some(name) = path.strip_prefix("/api/v1/skills/") {
                // `skills/find` is the find function's.
                return (!name.contains('/') && name != "find").then(|| Route::Skill(decode_segment(name)));
            }
            let id = path.strip_prefix("/api/v1/watches/")?;
            let id = id.strip_suffix("/trigger").unwrap_or(id);
            return (!id.contains('/')).then(|| Route::Watch(decode_segment(id)));
        }
    })
}

/// The fields `POST /resources` accepts (OpenViking's options; those about
/// fetching, parsing and watching are accepted and have no effect).
pub const ADD_RESOURCE_FIELDS: &[&str] = &[
    "path",
    "temp_file_id",
    "source_name",
    "to",
    "parent",
    "reason",
    "instruction",
    "description",
    "wait",
    "timeout",
    "strict",
    "include",
    "exclude",
    "ignore_dirs",
    "preserve_structure",
    "watch_interval",
    "directly_upload_media",
    "create_parent",
    "add_type",
    "tags",
    "tag_mode",
    "args",
    "acl",
    "processing_mode",
    "telemetry",
];
/// The fields `POST /skills` and `PUT /skills/{name}` accept.
pub const ADD_SKILL_FIELDS: &[&str] =
    &["data", "temp_file_id", "target_uri", "wait", "timeout", "telemetry", "source_metadata", "processing_mode"];
/// The fields `POST /skills/validate` accepts.
pub const VALIDATE_SKILL_FIELDS: &[&str] = &["data", "strict", "source_path", "skill_dir_name", "target_uri"];
/// Bytes of a multipart body beyond its file: boundaries, part headers and
/// the small fields.
const MULTIPART_OVERHEAD: usize = 64 * 1024;
/// Uploads, skills read and files written at once.
const CONCURRENCY: usize = 8;

impl From<DocumentError> for ApiError {
    fn from(e: DocumentError) -> Self {
        match &e {
            DocumentError::TooLarge { .. } => Self::TooLarge(e.to_string()),
            _ => Self::InvalidArgument(e.to_string()),
        }
    }
}

/// Handles one route of this module; never panics on input and always
/// answers JSON.
pub async fn handle(app: &App, route: Route, request: &Request<Bytes>) -> Response<String> {
    let method = request.method().clone();
    let allowed: &[Method] = match &route {
        Route::Upload | Route::AddResource | Route::ValidateSkill | Route::Wait => &[Method::POST],
        Route::Skills => &[Method::GET, Method::POST],
        Route::Skill(_) => &[Method::GET, Method::PUT, Method::DELETE],
        Route::Watches => &[Method::GET, Method::PATCH, Method::DELETE, Method::POST],
        Route::Watch(_) => &[Method::GET, Method::PATCH, Method::DELETE, Method::POST],
    };
    let expected =
        if allowed.contains(&method) { method.clone() } else { allowed.first().cloned().unwrap_or(Method::POST) };
    let limit = if route == Route::Upload {
        (MAX_UPLOAD_BYTES + MULTIPART_OVERHEAD).max(app.config.limits.max_body_bytes)
    } else {
        app.config.limits.max_body_bytes
    };
    let admitted = match admit_sized(app, request, &expected, limit).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    let query = Query::parse(request.uri().query());
    match within_deadline(&admitted.deadline, run(app, &admitted, route, &method, query)).await {
        Ok(result) => ok(result, None),
        Err(e) => error_response(&e),
    }
}

async fn run(
    app: &App,
    admitted: &Admitted<'_>,
    route: Route,
    method: &Method,
    mut query: Query,
) -> Result<Value, ApiError> {
    let shared_writer = matches!(admitted.role, Role::Admin | Role::Root);
    let writes = Writes::new(&app.store, &admitted.identity, shared_writer, admitted.now);
    match (route, method.as_str()) {
        (Route::Upload, _) => upload(app, admitted).await,
        (Route::AddResource, _) => add_resource(app, admitted, &writes).await,
        (Route::Skills, "GET") => {
            let node_limit = query.int("node_limit", Some(1), Some(10_000)).unwrap_or(1000);
            let target = query.raw("target_uri").map(str::to_owned);
            let roots = skill_targets(&mut query, admitted, target);
            query.finish()?;
            list_skills(app, admitted, &roots, usize::try_from(node_limit).unwrap_or(1000)).await
        }
        (Route::Skills, _) => add_skill(app, admitted, &writes, None).await,
        (Route::Skill(name), "PUT") => add_skill(app, admitted, &writes, Some(&name)).await,
        (Route::Skill(name), method) => {
            documents::check_skill_name(&name)?;
            let target = query.raw("target_uri").map(str::to_owned);
            let roots = skill_targets(&mut query, admitted, target);
            query.finish()?;
            if method == "DELETE" {
                // The caller's own skills first, then the shared ones.
                for root in roots {
                    let dir = root.join(&name).map_err(|e| ApiError::InvalidArgument(e.to_string()))?;
                    let mut changed = Vec::new();
                    match writes.remove(&dir, true, &mut changed).await {
                        Ok(()) => {
                            let status = super::write::index(app, admitted, &changed).await;
                            return Ok(
                                json!({ "name": name, "uri": dir, "deleted": changed.len(), "queue_status": status }),
                            );
                        }
                        Err(crate::write::WriteError::NotFound(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(ApiError::NotFound(format!("skill {name} not found")))
            } else {
                // Read only where the caller may read, as `find`.
                for root in crate::retrieval::authorize_targets(&admitted.identity, &roots)? {
                    let uri =
                        root.join(&format!("{name}/SKILL.md")).map_err(|e| ApiError::InvalidArgument(e.to_string()))?;
                    if let Some((skill, uri)) = read_skill(app, admitted, &uri).await? {
                        return Ok(json!({
                            "name": skill.name, "description": skill.description,
                            "uri": uri.parent().unwrap_or(uri), "content": skill.text,
                        }));
                    }
                }
                Err(ApiError::NotFound(format!("skill {name} not found")))
            }
        }
        (Route::ValidateSkill, _) => {
            let mut body = Body::parse(admitted.body, VALIDATE_SKILL_FIELDS)?;
            let data = body.raw("data").cloned();
            body.boolean("strict");
            body.string("source_path");
            body.string("skill_dir_name");
            body.string("target_uri");
            body.finish()?;
            let skill = skill_of_data(data)?;
            Ok(json!({ "valid": true, "name": skill.name, "description": skill.description }))
        }
        (Route::Watches, "GET") => Ok(json!([])),
        (Route::Watches, _) => {
            let to = query.raw("to_uri").unwrap_or_default().to_owned();
            Err(ApiError::NotFound(format!("no watch on {to:?}: this deployment fetches no URL, so it watches none")))
        }
        (Route::Watch(id), _) => {
            Err(ApiError::NotFound(format!("watch {id} not found: this deployment fetches no URL, so it watches none")))
        }
        (Route::Wait, _) => Ok(json!({
            "waited": true,
            "inline": app.config.memory_index_inline(),
        })),
    }
}

/// Where the skill routes look: `target` (the `target_uri` query
/// parameter, `~` resolved; a malformed one is recorded in `query` at
/// `["query", "target_uri"]`), else the caller's own skills, then the
/// shared ones.
fn skill_targets(query: &mut Query, admitted: &Admitted<'_>, target: Option<String>) -> Vec<VikingUri> {
    match target.map(|t| VikingUri::parse(t.trim())) {
        None => skill_roots(admitted),
        Some(Ok(uri)) => vec![admitted.identity.resolve_home(&uri)],
        Some(Err(e)) => {
            query.value_error("target_uri", &e.to_string());
            Vec::new()
        }
    }
}

/// Whether the caller writes the shared roots by default (admin, root,
/// dev mode) or its own tree.
fn writes_shared(admitted: &Admitted<'_>) -> bool {
    matches!(admitted.role, Role::Admin | Role::Root)
}

/// Where skills are looked up by name: the caller's own, then the shared.
fn skill_roots(admitted: &Admitted<'_>) -> Vec<VikingUri> {
    let own = admitted.identity.user_root().join("skills").ok();
    let shared = VikingUri::parse("viking://agent/skills").ok();
    own.into_iter().chain(shared).collect()
}

/// The key an upload is kept at.
fn upload_key(admitted: &Admitted<'_>, id: &str) -> String {
    format!("uploads/{}/{}/{id}", admitted.identity.account, admitted.identity.user)
}

/// The longest file name an upload id keeps.
const MAX_UPLOAD_NAME: usize = 100;

/// The file name `id` carries, when `id` is one [`upload`] makes: 32
/// lowercase hex digits, `_`, and the uploaded file's name (1–100 ASCII
/// letters, digits, `.`, `-` or `_`, not starting with `.`).
fn upload_name(id: &str) -> Option<&str> {
    let (hash, name) = id.split_once('_')?;
    let hash_ok = hash.len() == 32 && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let name_ok = (1..=MAX_UPLOAD_NAME).contains(&name.len())
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    (hash_ok && name_ok).then_some(name)
}

/// `name` as an upload id keeps it: other characters become `_`, a
/// leading `.` is dropped, the end kept when it is too long (the
/// extension says what the file is).
fn upload_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name).trim_start_matches('.');
    let clean: String =
        base.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' }).collect();
    let start = clean.len().saturating_sub(MAX_UPLOAD_NAME);
    let clean = clean[start..].trim_start_matches('.');
    if clean.is_empty() { "upload".to_owned() } else { clean.to_owned() }
}

/// `POST /resources/temp_upload`: keeps the multipart body's `file`.
async fn upload(app: &App, admitted: &Admitted<'_>) -> Result<Value, ApiError> {
    let content_type =
        admitted.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let boundary = multer::parse_boundary(content_type).map_err(|_| {
        ApiError::InvalidArgument(format!(
            "content-type: expected multipart/form-data with a boundary, got {content_type:?}"
        ))
    })?;
    let body = Bytes::copy_from_slice(admitted.body);
    let mut multipart =
        multer::Multipart::new(stream::once(async move { Ok::<_, std::convert::Infallible>(body) }), boundary);
    let mut file: Option<(String, Bytes)> = None;
    while let Some(field) =
        multipart.next_field().await.map_err(|e| ApiError::InvalidArgument(format!("multipart body: {e}")))?
    {
        if field.name() != Some("file") {
            continue;
        }
        let name = field.file_name().unwrap_or("upload").to_owned();
        let bytes = field.bytes().await.map_err(|e| ApiError::InvalidArgument(format!("multipart file: {e}")))?;
        file = Some((name, bytes));
    }
    let Some((name, bytes)) = file else {
        return Err(ApiError::Validation(vec![FieldError::new("file", "missing", "Field required")]));
    };
    if bytes.len() > MAX_UPLOAD_BYTES {
        return Err(ApiError::TooLarge(format!(
            "file {name} is {} bytes; an upload is at most {MAX_UPLOAD_BYTES}",
            bytes.len()
        )));
    }
    let hash = hex::encode(&sha2::Sha256::digest(&bytes)[..16]);
    let id = format!("{hash}_{}", upload_file_name(&name));
    // Named by its content and name: a retry, or a PUT whose outcome S3
    // left unknown, writes the same bytes to the same key.
    app.store.put(&upload_key(admitted, &id), bytes.clone(), PutMode::Overwrite).await?;
    Ok(json!({ "temp_file_id": id, "source_name": name, "size": bytes.len() }))
}

/// The upload `id` of the caller (`field` names it in errors).
async fn fetch_upload(app: &App, admitted: &Admitted<'_>, id: &str, field: &str) -> Result<Bytes, ApiError> {
    if upload_name(id).is_none() {
        return Err(ApiError::Validation(vec![FieldError::new(
            field,
            "value_error",
            format!("Value error, {id:?} is not a temp_file_id from POST /api/v1/resources/temp_upload"),
        )]));
    }
    match app.store.get(&upload_key(admitted, id)).await {
        Ok(object) => Ok(object.body),
        Err(StoreError::NotFound(_)) => {
            Err(ApiError::NotFound(format!("{field} {id} not found or expired; upload the file again")))
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes a used upload (best effort: an upload left behind expires).
async fn drop_upload(app: &App, admitted: &Admitted<'_>, id: &str) {
    if let Err(e) = app.store.delete(&upload_key(admitted, id)).await {
        tracing::warn!(error = %e, id, "a used upload was not removed; it expires");
    }
}

/// Refuses `path`: no URL is fetched and no server file read.
fn refuse_path(path: &str) -> ApiError {
    let lower = path.trim().to_ascii_lowercase();
    let message = if ["http://", "https://", "git@", "ssh://", "git://"].iter().any(|p| lower.starts_with(p)) {
        format!(
            "Value error, this deployment fetches no URL ({path}); download it and upload the file \
             (POST /api/v1/resources/temp_upload, then temp_file_id)"
        )
    } else {
        format!(
            "Value error, {path} is not a file this server can read; upload it \
             (POST /api/v1/resources/temp_upload, then temp_file_id)"
        )
    };
    ApiError::Validation(vec![FieldError::new("path", "value_error", message)])
}

/// `POST /resources`.
async fn add_resource(app: &App, admitted: &Admitted<'_>, writes: &Writes<'_>) -> Result<Value, ApiError> {
    let mut body = Body::parse(admitted.body, ADD_RESOURCE_FIELDS)?;
    let path = body.string("path");
    let temp = body.string("temp_file_id");
    let source_name = body.string("source_name");
    let to = body.uri("to");
    let parent = body.uri("parent");
    for flag in ["wait", "strict", "preserve_structure", "directly_upload_media", "create_parent"] {
        body.boolean(flag);
    }
    for number in ["timeout", "watch_interval"] {
        body.number(number);
    }
    let description = body.string("description");
    for text in ["reason", "instruction", "include", "exclude", "ignore_dirs", "add_type", "tag_mode"] {
        body.string(text);
    }
    if body.sent("to") && body.sent("parent") {
        body.error(FieldError::new("to", "value_error", "Value error, give either to or parent, not both"));
    }
    if path.is_some() == temp.is_some() {
        body.error(FieldError::new(
            "temp_file_id",
            "missing",
            "Value error, give exactly one of path and temp_file_id",
        ));
    }
    body.finish()?;
    let Some(id) = temp else { return Err(refuse_path(path.as_deref().unwrap_or_default())) };
    let bytes = fetch_upload(app, admitted, &id, "temp_file_id").await?;
    let uploaded = upload_name(&id).unwrap_or("upload").to_owned();
    let name = source_name.filter(|n| !n.trim().is_empty()).unwrap_or(uploaded);
    let name = name.rsplit(['/', '\\']).next().unwrap_or(&name).to_owned();
    let converted = resource_documents(&name, &bytes)?;
    let identity = &admitted.identity;
    let default_parent = if writes_shared(admitted) {
        VikingUri::parse("viking://resources").map_err(|e| ApiError::Internal(e.to_string()))?
    } else {
        identity.user_root().join("resources").map_err(|e| ApiError::Internal(e.to_string()))?
    };
    let bad_target = |field: &str, e: String| ApiError::Validation(vec![FieldError::new(field, "value_error", e)]);
    // Where each document goes, and the resource's root.
    let (root, targets) = match (to.map(|t| identity.resolve_home(&t)), converted.archive) {
        (Some(to), false) if to.as_str().ends_with(".md") => (to.clone(), vec![to]),
        (Some(to), _) => {
            let targets = converted
                .documents
                .iter()
                .map(|d| to.join(&d.path).map_err(|e| bad_target("to", format!("Value error, {e}"))))
                .collect::<Result<Vec<_>, _>>()?;
            // A single file is its own root (it has exactly one target).
            let root = if converted.archive { to } else { targets.first().cloned().unwrap_or(to) };
            (root, targets)
        }
        (None, archive) => {
            let parent = parent.map_or(default_parent, |p| identity.resolve_home(&p));
            let base = if archive {
                let stem = name.strip_suffix(".zip").unwrap_or(&name);
                parent.join(stem).map_err(|e| bad_target("source_name", format!("Value error, {e}")))?
            } else {
                parent
            };
            let targets = converted
                .documents
                .iter()
                .map(|d| base.join(&d.path).map_err(|e| bad_target("source_name", format!("Value error, {e}"))))
                .collect::<Result<Vec<_>, _>>()?;
            let root = if archive { base } else { targets.first().cloned().unwrap_or(base) };
            (root, targets)
        }
    };
    // Every target is authorised before anything is written.
    for target in &targets {
        writes.authorize(target)?;
    }
    let mut changed = Vec::with_capacity(targets.len());
    let mut errors = Vec::new();
    let pairs: Vec<_> = targets.iter().zip(&converted.documents).collect();
    for chunk in pairs.chunks(CONCURRENCY) {
        let writing = chunk.iter().map(|(uri, document)| writes.write(uri, &document.text, WriteMode::Replace));
        for ((uri, _), result) in chunk.iter().zip(join_all(writing).await) {
            match result {
                Ok(written) => changed.push(written.uri),
                Err(e) => errors.push(format!("{uri}: {e}")),
            }
        }
    }
    // A directory's description is its abstract.
    if let (true, Some(text)) = (converted.archive && !changed.is_empty(), description.filter(|d| !d.trim().is_empty()))
    {
        match writes.mkdir(&root, Some(&text)).await {
            Ok(_) => changed.extend(root.join(crate::ingest::ABSTRACT_SIDECAR).ok()),
            Err(e) => errors.push(format!("{root}: the description was not written: {e}")),
        }
    }
    let queue_status = super::write::index(app, admitted, &changed).await;
    if changed.is_empty() {
        // Nothing landed: the upload stays for a retry.
        return Err(ApiError::Unavailable(format!("no file of the resource was written: {}", errors.join("; "))));
    }
    if errors.is_empty() {
        drop_upload(app, admitted, &id).await;
    }
    tracing::info!(account = %identity.account, user = %identity.user, root = %root, files = changed.len(), "resource added");
    Ok(json!({
        "status": if errors.is_empty() { "success" } else { "partial" },
        "root_uri": root,
        "source_path": name,
        "files": changed.iter().filter(|u| u.file_name() != Some(crate::ingest::ABSTRACT_SIDECAR)).count(),
        "warnings": converted.warnings,
        "errors": errors,
        "queue_status": queue_status,
    }))
}

/// The skill `data` describes: a SKILL.md text, or `{name, description,
/// content}`.
fn skill_of_data(data: Option<Value>) -> Result<Skill, ApiError> {
    let field_error = |message: String| ApiError::Validation(vec![FieldError::new("data", "value_error", message)]);
    match data {
        Some(Value::String(text)) => parse_skill(&text).map_err(|e| field_error(format!("Value error, {e}"))),
        Some(Value::Object(fields)) => {
            let get = |k: &str| fields.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
            let content = if fields.contains_key("content") { get("content") } else { get("body") };
            skill_from_fields(&get("name"), &get("description"), &content)
                .map_err(|e| field_error(format!("Value error, {e}")))
        }
        Some(_) => Err(field_error("Value error, data is a SKILL.md text or {name, description, content}".into())),
        None => Err(ApiError::Validation(vec![FieldError::new("data", "missing", "Field required")])),
    }
}

/// `POST /skills` (`name` `None`) and `PUT /skills/{name}`.
async fn add_skill(
    app: &App,
    admitted: &Admitted<'_>,
    writes: &Writes<'_>,
    name: Option<&str>,
) -> Result<Value, ApiError> {
    let mut body = Body::parse(admitted.body, ADD_SKILL_FIELDS)?;
    let data = body.raw("data").cloned();
    let temp = body.string("temp_file_id");
    let target = body.uri("target_uri");
    body.boolean("wait");
    body.number("timeout");
    if data.is_some() == temp.is_some() {
        body.error(FieldError::new("data", "missing", "Value error, give exactly one of data and temp_file_id"));
    }
    body.finish()?;
    // The SKILL.md and the files beside it (path below the skill, bytes).
    let (skill, auxiliary) = match &temp {
        None => (skill_of_data(data)?, Vec::new()),
        Some(id) => {
            let bytes = fetch_upload(app, admitted, id, "temp_file_id").await?;
            if documents::is_archive(id, &bytes) {
                skill_of_archive(documents::unpack(id, &bytes)?.files)?
            } else {
                let text = std::str::from_utf8(&bytes)
                    .map_err(|_| ApiError::InvalidArgument(format!("temp_file_id {id}: SKILL.md is not UTF-8 text")))?;
                (parse_skill(text)?, Vec::new())
            }
        }
    };
    if let Some(name) = name.filter(|n| *n != skill.name) {
        return Err(ApiError::InvalidArgument(format!(
            "data: the SKILL.md names skill {:?}, the path {name:?}",
            skill.name
        )));
    }
    let identity = &admitted.identity;
    let root = match target {
        Some(t) => identity.resolve_home(&t),
        None if writes_shared(admitted) => {
            VikingUri::parse("viking://agent/skills").map_err(|e| ApiError::Internal(e.to_string()))?
        }
        None => identity.user_root().join("skills").map_err(|e| ApiError::Internal(e.to_string()))?,
    };
    let invalid = |e: crate::uri::UriError| ApiError::InvalidArgument(format!("target_uri: {e}"));
    let dir = root.join(&skill.name).map_err(invalid)?;
    let mut files = vec![(dir.join("SKILL.md").map_err(invalid)?, Bytes::from(skill.text.clone()))];
    for (path, bytes) in auxiliary {
        files.push((dir.join(&path).map_err(|e| ApiError::InvalidArgument(format!("temp_file_id: {e}")))?, bytes));
    }
    for (uri, _) in &files {
        writes.authorize(uri)?;
    }
    let mut changed = Vec::with_capacity(files.len());
    let mut outcome = Ok(());
    for (uri, bytes) in files {
        match writes.write_bytes(&uri, bytes, WriteMode::Replace).await {
            Ok(written) => changed.push(written.uri),
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    let queue_status = super::write::index(app, admitted, &changed).await;
    outcome?;
    if let Some(id) = &temp {
        drop_upload(app, admitted, id).await;
    }
    Ok(json!({
        "status": "success",
        "uri": dir,
        "name": skill.name,
        "description": skill.description,
        "auxiliary_files": changed.len() - 1,
        "queue_status": queue_status,
    }))
}

/// A skill from an archive's files: the SKILL.md at its root or in its one
/// top directory, and the files beside it (others are left out).
fn skill_of_archive(files: Vec<(String, Vec<u8>)>) -> Result<(Skill, Vec<(String, Bytes)>), ApiError> {
    let prefix = if files.iter().any(|(p, _)| p == "SKILL.md") {
        String::new()
    } else {
        let tops: std::collections::BTreeSet<&str> =
            files.iter().filter_map(|(p, _)| p.split_once('/')).map(|(t, _)| t).collect();
        match tops.iter().next() {
            Some(top) if tops.len() == 1 && files.iter().any(|(p, _)| *p == format!("{top}/SKILL.md")) => {
                format!("{top}/")
            }
            _ => {
                return Err(ApiError::InvalidArgument(
                    "temp_file_id: the archive holds no SKILL.md at its root".into(),
                ));
            }
        }
    };
    let mut skill = None;
    let mut auxiliary = Vec::new();
    for (path, bytes) in files {
        let Some(rest) = path.strip_prefix(&prefix) else { continue };
        if rest == "SKILL.md" {
            let text = String::from_utf8(bytes)
                .map_err(|_| ApiError::InvalidArgument("temp_file_id: SKILL.md is not UTF-8 text".into()))?;
            skill = Some(parse_skill(&text)?);
        } else {
            auxiliary.push((rest.to_owned(), Bytes::from(bytes)));
        }
    }
    let skill = skill.ok_or_else(|| ApiError::InvalidArgument("temp_file_id: the archive holds no SKILL.md".into()))?;
    Ok((skill, auxiliary))
}

/// The skill whose SKILL.md is at `uri`, if the caller may read it and it
/// is there and valid.
async fn read_skill(
    app: &App,
    admitted: &Admitted<'_>,
    uri: &VikingUri,
) -> Result<Option<(Skill, VikingUri)>, ApiError> {
    let key = tree_key(&admitted.identity.account, uri);
    match app.store.get(&key).await {
        Ok(object) => {
            let text = String::from_utf8_lossy(&object.body);
            Ok(parse_skill(&text).ok().map(|s| (s, uri.clone())))
        }
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `GET /skills`: the skills directly under `roots` (each a directory
/// with a SKILL.md), the caller's first, at most `node_limit`.
async fn list_skills(
    app: &App,
    admitted: &Admitted<'_>,
    roots: &[VikingUri],
    node_limit: usize,
) -> Result<Value, ApiError> {
    let readable = crate::retrieval::authorize_targets(&admitted.identity, roots)?;
    let mut uris = Vec::new();
    for root in &readable {
        // The skills' directories, one level down (not the files inside):
        // each one's SKILL.md is read below; one without is no skill.
        let left = node_limit.saturating_sub(uris.len());
        if left == 0 {
            break;
        }
        let listing = app.store.list_dir(&tree_key(&admitted.identity.account, root), left).await?;
        let names = listing.dirs.iter().filter(|name| !name.starts_with('.'));
        uris.extend(names.filter_map(|name| root.join(&format!("{name}/SKILL.md")).ok()));
    }
    uris.truncate(node_limit);
    let mut skills = Vec::with_capacity(uris.len());
    for chunk in uris.chunks(CONCURRENCY) {
        for found in join_all(chunk.iter().map(|uri| read_skill(app, admitted, uri))).await {
            if let Some((skill, uri)) = found? {
                let dir = uri.parent().unwrap_or(uri);
                skills.push(json!({ "name": skill.name, "description": skill.description, "uri": dir }));
            }
        }
    }
    Ok(json!({ "skills": skills, "total": skills.len() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_upload_ids_parse() {
        assert_eq!(route("/api/v1/resources/temp_upload"), Some(Route::Upload));
        assert_eq!(route("/api/v1/skills/find"), None);
        assert_eq!(route("/api/v1/skills/pdf-tools"), Some(Route::Skill("pdf-tools".into())));
        assert_eq!(route("/api/v1/watches/w1/trigger"), Some(Route::Watch("w1".into())));
        assert_eq!(route("/api/v1/resourcesx"), None);
        assert_eq!(upload_name("0123456789abcdef0123456789abcdef_notes.zip"), Some("notes.zip"));
        for bad in [
            "../x",
            "0123456789abcdef0123456789abcdeF_a.md",
            "0123456789abcdef0123456789abcdef_",
            "0123456789abcdef0123456789abcdef_../a",
            "0123456789abcdef0123456789abcdef_.env",
            "0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(upload_name(bad), None, "{bad}");
        }
        assert_eq!(upload_file_name("../My Notes (v2).md"), "My_Notes__v2_.md");
        assert_eq!(upload_file_name(".env"), "env");
        assert_eq!(upload_file_name("日記.txt"), "__.txt");
        assert_eq!(upload_file_name(""), "upload");
    }
}
