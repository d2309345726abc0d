//! Extraction with a model, the I/O half: runs a commit's task — reads the
//! archive, asks the model ([`super::extract`] builds the prompts and
//! reads the answers), compares with the user's nearest memories through
//! the index, and writes the result by compare-and-swap.
//!
//! The same entry point, [`run_task`], serves the `extractor` function (on
//! the store's notification of a task's write) and a commit that runs
//! extraction inline (a local store, which sends no notifications).
//!
//! Nothing said is lost on any failure: the episodes were written by the
//! commit before its task existed, and a failed extraction fails only its
//! task, with the reason. Running a task twice is harmless: a task runs
//! once it is claimed `pending` → `running` by compare-and-swap, and a
//! completed or failed one is left as it is.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;
use time::OffsetDateTime;

use super::extract::{
    Action, Candidate, Category, EXTRACT_SYSTEM, Fields, RECONCILE_SYSTEM, Shown, Source, append_statement,
    extract_prompt, memory_path, parse_actions, parse_candidates, render_memory, split_memory, title_of, transcript,
};
use super::tasks::{self, Task, TaskStatus};
use crate::app::App;
use crate::deadline::Deadline;
use crate::identity::Identity;
use crate::llm::{ChatModel, ChatRequest};
use crate::sessions::{SessionError, SessionId, Sessions, StoredMessage};
use crate::store::{PutMode, StoreError};
use crate::uri::{VikingUri, tree_key};

/// The first call's cap; the deadline may leave less.
pub const EXTRACT_CAP: Duration = Duration::from_secs(90);
/// The second call's cap.
pub const RECONCILE_CAP: Duration = Duration::from_secs(60);
/// Time kept back from the model calls for the writes after them.
pub const WRITE_RESERVE: Duration = Duration::from_secs(2);
/// Tokens the first call may generate.
const EXTRACT_TOKENS: u32 = 2_000;
/// Tokens the second call may generate.
const RECONCILE_TOKENS: u32 = 2_000;
/// Existing memories compared with the candidates at most.
pub const MAX_SHOWN: usize = 24;
/// Nearest memories looked up per candidate.
const NEIGHBOURS: usize = 3;
/// Compare-and-swap attempts on one memory.
const CAS_ATTEMPTS: usize = 6;

/// Why an extraction did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// The first model call failed, timed out, found no time left, or
    /// answered something unreadable: nothing was written.
    #[error("memory extraction: {0}")]
    Model(String),
    /// The session or its archive is gone (deleted while the task waited
    /// or ran): nothing more is written.
    #[error("the session's archive is gone; nothing extracted")]
    Gone,
    /// The store failed; what was written before stays (a memory is only
    /// ever a whole file).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The session could not be read.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// Indexing what was written failed (inline only).
    #[error("memories written but not indexed: {0}")]
    Index(String),
}

impl ExtractError {
    /// Whether running the task again may succeed without anything
    /// changing: the store (or the index) failed, not the model, and the
    /// session is still there.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        // A message that reads corrupt may be a read cut short: read again.
        matches!(
            self,
            Self::Store(_) | Self::Session(SessionError::Store(_) | SessionError::Corrupt(_)) | Self::Index(_)
        )
    }

    /// This error as the store error [`run_task`] reports (a store error
    /// as it is; another named with task `task_id`).
    fn into_store_error(self, task_id: &str) -> StoreError {
        match self {
            Self::Store(e) | Self::Session(SessionError::Store(e)) => e,
            other => StoreError::Backend { op: "extract", key: task_id.to_owned(), message: other.to_string() },
        }
    }
}

/// What one extraction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extraction {
    /// Memories added or updated, per category.
    pub made: BTreeMap<Category, u64>,
    /// Memories removed (the conversation said they no longer hold).
    pub deleted: u64,
    /// Candidates that memories already said.
    pub kept: u64,
    /// What went less than fully (the comparison skipped, a memory changed
    /// under a delete), for the task.
    pub notes: Vec<String>,
    /// Files written, for the index.
    pub written: Vec<VikingUri>,
    /// Files removed, for the index.
    pub removed: Vec<VikingUri>,
    /// Tokens the model calls used (prompt and completion, as reported).
    pub tokens: u64,
}

/// One existing memory the second call may name.
#[derive(Debug, Clone)]
struct Existing {
    uri: VikingUri,
    key: String,
    etag: String,
    body: String,
    fields: Fields,
    shown: Shown,
}

/// One model call within `deadline`'s budget for `cap`; its text and the
/// tokens it used.
async fn call(
    model: &dyn ChatModel,
    deadline: &Deadline,
    cap: Duration,
    system: &str,
    user: &str,
    max_tokens: u32,
) -> Result<(String, u64), String> {
    let Some(budget) = deadline.stage_budget(Instant::now(), cap, WRITE_RESERVE) else {
        return Err("no time left before the deadline".to_owned());
    };
    let request = ChatRequest { system, user, json: true, max_tokens };
    match tokio::time::timeout(budget, model.complete(&request)).await {
        Ok(Ok(answer)) => {
            let tokens = answer.usage.map_or(0, |u| u.prompt_tokens + u.completion_tokens);
            Ok((answer.text, tokens))
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("{} timed out after {} ms", model.id(), budget.as_millis())),
    }
}

/// Extracts memories from archive `archive` of `session` (its `messages`)
/// into `identity`'s tree with `model`, within `deadline`.
///
/// Cost: two model calls (one when nothing is near); one embedding call
/// and one index search per candidate, a GET per existing memory shown
/// (at most [`MAX_SHOWN`]); a GET of the archive's claim; one PUT per
/// memory written (a GET and a PUT more per compare-and-swap retry), a
/// conditional DELETE per memory removed.
///
/// Unknown outcomes: a write whose outcome is unknown fails the call;
/// running it again merges into what landed (an added statement is never
/// added twice). Writes are compare-and-swap: an update that finds the
/// memory changed since it was shown merges into the new text instead,
/// and a delete is conditional on the version shown, so what another
/// writer changed meanwhile is kept.
///
/// # Errors
/// [`ExtractError`]; the first call's failure writes nothing.
#[allow(clippy::too_many_arguments)]
pub async fn extract(
    app: &App,
    identity: &Identity,
    session: &SessionId,
    archive: u64,
    messages: &[StoredMessage],
    model: &dyn ChatModel,
    deadline: &Deadline,
    now: OffsetDateTime,
) -> Result<Extraction, ExtractError> {
    let mut done = Extraction::default();
    let (text, numbered) = transcript(messages);
    if numbered.is_empty() {
        return Ok(done);
    }
    let (answer, tokens) = call(model, deadline, EXTRACT_CAP, EXTRACT_SYSTEM, &extract_prompt(&text), EXTRACT_TOKENS)
        .await
        .map_err(ExtractError::Model)?;
    done.tokens += tokens;
    let candidates = parse_candidates(&answer, &numbered).map_err(|e| ExtractError::Model(e.to_string()))?;
    if candidates.is_empty() {
        return Ok(done);
    }
    let existing = match nearest(app, identity, &candidates, now.unix_timestamp()).await {
        Ok(existing) => existing,
        Err(e) => {
            done.notes.push(format!("existing memories not compared: {e}"));
            Vec::new()
        }
    };
    let actions = if existing.is_empty() {
        vec![Action::Add; candidates.len()]
    } else {
        let shown: Vec<Shown> = existing.iter().map(|e| e.shown.clone()).collect();
        let prompt = super::extract::reconcile_prompt(&shown, &candidates);
        match call(model, deadline, RECONCILE_CAP, RECONCILE_SYSTEM, &prompt, RECONCILE_TOKENS).await {
            Ok((answer, tokens)) => {
                done.tokens += tokens;
                parse_actions(&answer, &candidates, existing.len()).unwrap_or_else(|e| {
                    done.notes.push(format!("comparison with existing memories skipped: {e}"));
                    vec![Action::Add; candidates.len()]
                })
            }
            Err(e) => {
                done.notes.push(format!("comparison with existing memories skipped: {e}"));
                vec![Action::Add; candidates.len()]
            }
        }
    };
    // A session deleted while the model worked gets nothing more.
    if !Sessions::new(&app.store, identity).archive_exists(session, archive).await? {
        return Err(ExtractError::Gone);
    }
    let source = Source {
        archive: Sessions::new(&app.store, identity).archive_uri(session, archive).as_str().to_owned(),
        messages: Vec::new(),
    };
    let stamp = now.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
    let today = (now.year(), u8::from(now.month()), now.day());
    let root = identity.user_root();
    for (candidate, action) in candidates.iter().zip(actions) {
        let source = Source { messages: candidate.sources.clone(), ..source.clone() };
        match action {
            Action::Keep => done.kept += 1,
            Action::Add => {
                let Ok(uri) = root.join(&memory_path(candidate, today)) else { continue };
                add(app, identity, &uri, candidate, &source, &stamp).await?;
                *done.made.entry(candidate.category).or_default() += 1;
                done.written.push(uri);
            }
            Action::Update { target, content } => {
                let Some(old) = existing.get(target) else { continue };
                update(app, old, &content, &source, &stamp).await?;
                let category = old.fields.category.or(old.shown.category).unwrap_or(candidate.category);
                *done.made.entry(category).or_default() += 1;
                done.written.push(old.uri.clone());
            }
            Action::Delete { target } => {
                let Some(old) = existing.get(target) else { continue };
                match app.store.delete_if(&old.key, &old.etag).await {
                    Ok(()) => {
                        done.deleted += 1;
                        done.removed.push(old.uri.clone());
                    }
                    Err(StoreError::Conflict(_)) => {
                        done.notes.push(format!("{} changed meanwhile; not removed", old.uri));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    done.written.sort();
    done.written.dedup();
    Ok(done)
}

/// The memories of `identity` nearest the candidates (preferences and
/// entities, through the index), and the profile when there is one; each
/// read with its etag. At most [`MAX_SHOWN`].
async fn nearest(app: &App, identity: &Identity, candidates: &[Candidate], now: i64) -> Result<Vec<Existing>, String> {
    let root = identity.user_root();
    let targets: Vec<VikingUri> =
        ["memories/preferences", "memories/entities"].iter().filter_map(|dir| root.join(dir).ok()).collect();
    let queries: Vec<&str> = candidates
        .iter()
        .filter(|c| matches!(c.category, Category::Preferences | Category::Entities))
        .map(|c| c.content.as_str())
        .collect();
    let mut uris: Vec<VikingUri> = Vec::new();
    if let Ok(profile) = root.join("memories/profile.md") {
        uris.push(profile);
    }
    if !queries.is_empty() {
        let params = crate::find::FindParams {
            query: queries[0].to_owned(),
            targets,
            limit: (NEIGHBOURS * queries.len()).min(MAX_SHOWN),
            ..crate::find::FindParams::default()
        };
        let found =
            crate::find::find_queries(app, identity, &params, &queries, now).await.map_err(|e| e.to_string())?;
        for item in found.memories.iter().filter(|m| m.level == crate::index::record::LEVEL_FILE) {
            if let Ok(uri) = VikingUri::parse(&item.uri)
                && !uris.contains(&uri)
            {
                uris.push(uri);
            }
        }
    }
    uris.truncate(MAX_SHOWN);
    let mut out = Vec::new();
    for uri in uris {
        let key = tree_key(&identity.account, &uri);
        let object = match app.store.get(&key).await {
            Ok(object) => object,
            Err(StoreError::NotFound(_)) => continue,
            Err(e) => return Err(e.to_string()),
        };
        let body = String::from_utf8_lossy(&object.body).into_owned();
        let (text, fields) = split_memory(&body);
        let category = fields.category.or_else(|| category_of(&uri));
        let shown = Shown { category, text: text.to_owned() };
        out.push(Existing { uri, key, etag: object.meta.etag, body: text.to_owned(), fields, shown });
    }
    Ok(out)
}

/// The category a memory's place says (`memories/preferences/…` →
/// preferences), for files no extraction wrote.
fn category_of(uri: &VikingUri) -> Option<Category> {
    let path = uri.path();
    let rest = path.split_once("/memories/").map(|(_, rest)| rest)?;
    if rest == "profile.md" {
        return Some(Category::Profile);
    }
    Category::parse(rest.split('/').next()?)
}

/// Writes a new memory for `candidate` at `uri`: created, or, when one is
/// there, merged into it (the statement added as a line when it does not
/// already say it) by compare-and-swap.
async fn add(
    app: &App,
    identity: &Identity,
    uri: &VikingUri,
    candidate: &Candidate,
    source: &Source,
    stamp: &str,
) -> Result<(), ExtractError> {
    let key = tree_key(&identity.account, uri);
    let fields = Fields::new(Some(candidate.category), source, stamp);
    let title = match candidate.category {
        Category::Profile => "Profile".to_owned(),
        _ => title_of(&candidate.name),
    };
    let body = render_memory(&title, &candidate.content, &fields);
    match app.store.put(&key, body.into(), PutMode::CreateNew).await {
        Ok(_) => Ok(()),
        Err(StoreError::Conflict(_)) => merge(app, &key, &candidate.content, None, source, stamp).await,
        Err(e) => Err(e.into()),
    }
}

/// Replaces `old`'s statement with `content` if it is unchanged since it
/// was shown; when another writer changed it meanwhile, `content` is
/// merged into what they wrote instead.
async fn update(app: &App, old: &Existing, content: &str, source: &Source, stamp: &str) -> Result<(), ExtractError> {
    let heading = old.body.lines().next().filter(|l| l.starts_with("# ")).map(str::to_owned);
    let name = old.uri.path().rsplit('/').next().unwrap_or_default().trim_end_matches(".md");
    let title = heading.as_deref().map_or_else(|| title_of(name), |h| h[2..].trim().to_owned());
    let mut fields = old.fields.clone();
    fields.category = fields.category.or(old.shown.category);
    fields.touch(source, stamp);
    let body = render_memory(&title, content, &fields);
    match app.store.put(&old.key, body.into(), PutMode::IfMatch(old.etag.clone())).await {
        Ok(_) => Ok(()),
        Err(StoreError::Conflict(_)) => merge(app, &old.key, content, Some(&title), source, stamp).await,
        Err(e) => Err(e.into()),
    }
}

/// Adds `statement` to the memory under `key` as it is now, by
/// compare-and-swap, retried ([`CAS_ATTEMPTS`]); creates it (with
/// `title`, else its name) when it is gone.
async fn merge(
    app: &App,
    key: &str,
    statement: &str,
    title: Option<&str>,
    source: &Source,
    stamp: &str,
) -> Result<(), ExtractError> {
    let name = key.rsplit('/').next().unwrap_or_default().trim_end_matches(".md");
    let title = title.map_or_else(|| title_of(name), str::to_owned);
    for _ in 0..CAS_ATTEMPTS {
        let (body, mode) = match app.store.get(key).await {
            Ok(current) => {
                let text = String::from_utf8_lossy(&current.body).into_owned();
                let (said, mut fields) = split_memory(&text);
                let merged = append_statement(said, statement);
                fields.touch(source, stamp);
                (render_memory(&title, &merged, &fields), PutMode::IfMatch(current.meta.etag))
            }
            Err(StoreError::NotFound(_)) => {
                (render_memory(&title, statement, &Fields::new(None, source, stamp)), PutMode::CreateNew)
            }
            Err(e) => return Err(e.into()),
        };
        match app.store.put(key, body.into(), mode).await {
            Ok(_) => return Ok(()),
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(ExtractError::Store(StoreError::Conflict(key.to_owned())))
}

/// A task [`run_task`] was asked to run.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRun {
    /// The task as it ends, or as found.
    pub task: Task,
    /// Whether this call ran it (else it was done, failed, or running
    /// elsewhere, and is returned as found).
    pub ran: bool,
}

/// Runs task `task_id` of `identity` (a commit's): claims it, reads its
/// archive, extracts with the extraction model within `deadline`, indexes
/// the result when the app indexes inline, and completes or fails it.
/// Returns the task as it ends (`None`: no such task). A task that is not
/// this caller's to run (done, failed, running elsewhere) is returned as
/// found, not run; with no extraction model (or `memory.extract` off) a
/// claimed task completes with the episodes only.
///
/// Cost: the claim (a GET, a PUT); the archive's reads; [`extract`]; the
/// task's final PUT and a compare-and-swap of the session's counts.
///
/// # Errors
/// Store errors claiming or recording the task, or failing the extraction
/// itself (the task is then back to `pending`, or stays as it was): a
/// redelivered event, or the inline commit's next attempt, runs it again.
/// Only the model's failures (and a session that is gone) fail the task.
pub async fn run_task(
    app: &App,
    identity: &Identity,
    task_id: &str,
    deadline: &Deadline,
    now: OffsetDateTime,
) -> Result<Option<TaskRun>, StoreError> {
    let (mut task, etag) = match tasks::claim(&app.store, identity, task_id, now.unix_timestamp()).await? {
        None => return Ok(None),
        Some(Err(found)) => return Ok(Some(TaskRun { task: found, ran: false })),
        Some(Ok(claimed)) => claimed,
    };
    let outcome = match run_claimed(app, identity, &task, deadline, now).await {
        Err(e) if e.is_transient() => {
            // The store failed, not the model: the task goes back to
            // `pending`, and the caller's error brings it back (the event
            // is redelivered; an inline commit tries again).
            let mut back = task.clone();
            back.status = TaskStatus::Pending;
            tasks::swap(&app.store, identity, &back, &etag).await?;
            return Err(e.into_store_error(&task.task_id));
        }
        outcome => outcome,
    };
    let finished = OffsetDateTime::now_utc().unix_timestamp().max(now.unix_timestamp());
    task.updated_at = finished;
    task.updated_at_iso = tasks::iso(finished);
    let mut counts: BTreeMap<String, u64> = task
        .result
        .as_ref()
        .and_then(|r| r.get("memories_extracted"))
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default();
    counts.remove("total");
    match outcome {
        Ok(done) => {
            for (category, n) in &done.made {
                *counts.entry(category.as_str().to_owned()).or_default() += n;
            }
            task.status = TaskStatus::Completed;
            task.stage = "done".to_owned();
            task.error = None;
            if let Some(result) = task.result.as_mut() {
                result["deleted"] = json!(done.deleted);
                result["unchanged"] = json!(done.kept);
                result["token_usage"] = json!({ "llm": done.tokens, "total": done.tokens });
                if !done.notes.is_empty() {
                    result["notes"] = json!(done.notes);
                }
            }
            if let Ok(session) = SessionId::new(&task.resource_id) {
                let made: Vec<(&str, u64)> = done.made.iter().map(|(c, n)| (c.as_str(), *n)).collect();
                if let Err(e) = Sessions::new(&app.store, identity).add_memories(&session, &made).await {
                    tracing::warn!(task = task.task_id, error = %e, "the session's memory counts were not updated");
                }
            }
        }
        Err(e) => {
            task.status = TaskStatus::Failed;
            task.stage = "extraction".to_owned();
            task.error = Some(e.to_string());
            tracing::warn!(task = task.task_id, error = %e, "memory extraction failed; the episodes stand");
        }
    }
    let total: u64 = counts.values().sum();
    counts.insert("total".to_owned(), total);
    if let Some(result) = task.result.as_mut() {
        result["memories_extracted"] = json!(counts);
    }
    tasks::swap(&app.store, identity, &task, &etag).await?;
    Ok(Some(TaskRun { task, ran: true }))
}

/// Runs the task a store key names (`accounts/{account}/tasks/{user}/
/// {task_id}.task.json`, as its notification gives it) for that account
/// and user, with [`run_task`]; `None` for a key that is not a task's, or
/// a task that is not there.
///
/// # Errors
/// As [`run_task`].
pub async fn run_task_at(app: &App, key: &str, deadline: &Deadline) -> Result<Option<TaskRun>, StoreError> {
    let Some((account, user, task_id)) = tasks::parse_key(key) else { return Ok(None) };
    let identity = Identity { account, user, actor_peer: None };
    run_task(app, &identity, &task_id, deadline, OffsetDateTime::now_utc()).await
}

/// The work of a claimed task: its archive's messages, the extraction, the
/// inline indexing.
async fn run_claimed(
    app: &App,
    identity: &Identity,
    task: &Task,
    deadline: &Deadline,
    now: OffsetDateTime,
) -> Result<Extraction, ExtractError> {
    let Some(model) = app.config.memory.extract.then(|| app.models.extraction_model()).flatten() else {
        return Ok(Extraction::default());
    };
    let session = SessionId::new(&task.resource_id).map_err(|_| ExtractError::Gone)?;
    let archive = task
        .result
        .as_ref()
        .and_then(|r| r.get("archive_uri"))
        .and_then(serde_json::Value::as_str)
        .and_then(crate::sessions::archive_number)
        .ok_or(ExtractError::Gone)?;
    let messages = Sessions::new(&app.store, identity).archived_messages(&session, archive).await?;
    let messages = messages.ok_or(ExtractError::Gone)?;
    let done = extract(app, identity, &session, archive, &messages, model.as_ref(), deadline, now).await?;
    if app.config.memory_index_inline() {
        let changed: Vec<VikingUri> = done.written.iter().chain(&done.removed).cloned().collect();
        super::index_now(app, identity, &changed, now.unix_timestamp()).await.map_err(ExtractError::Index)?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memorys_place_names_its_category() {
        let table = [
            ("viking://user/u/memories/profile.md", Some(Category::Profile)),
            ("viking://user/u/memories/preferences/food.md", Some(Category::Preferences)),
            ("viking://user/u/memories/entities/biscuit.md", Some(Category::Entities)),
            ("viking://user/u/memories/events/2026/03/01/x.md", Some(Category::Events)),
            ("viking://user/u/memories/cases/x.md", None),
        ];
        for (uri, want) in table {
            assert_eq!(category_of(&VikingUri::parse(uri).expect("uri")), want, "{uri}");
        }
    }
}
