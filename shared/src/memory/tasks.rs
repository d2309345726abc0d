//! Tasks: what became of a commit's conversation, in OpenViking's task
//! shape (`GET /api/v1/tasks/{id}`).
//!
//! A task lives at `accounts/{account}/tasks/{user}/{task_id}.task.json`:
//! under its owner, so another user's task id is simply not found. A
//! commit's task id is derived from the session and the archive, so a
//! retried commit reports, and rewrites, the same task.
//!
//! A commit's task is also the extractor's work item: a `pending` task is
//! taken ([`claim`]: `running`, by compare-and-swap) by whoever runs the
//! extraction — the `extractor` function, on the store's notification of
//! the task's write (the `.task.json` suffix is what its notification rule
//! matches), or the commit itself when it runs extraction inline.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest as _;

use crate::identity::Identity;
use crate::sessions::SessionId;
use crate::store::{PutMode, SharedStore, StoreError};

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Waiting to run.
    Pending,
    /// Running.
    Running,
    /// Done; `result` says what it made.
    Completed,
    /// Failed; `error` says why.
    Failed,
}

impl TaskStatus {
    /// `pending`, `running`, `completed` or `failed`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    /// The status `text` names.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::Running, Self::Completed, Self::Failed].into_iter().find(|s| s.as_str() == text)
    }
}

/// One task, as stored and as `GET /api/v1/tasks/{id}` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Its id (32 hex digits).
    pub task_id: String,
    /// `session_commit`.
    pub task_type: String,
    /// Where it is.
    pub status: TaskStatus,
    /// When it was made, Unix seconds.
    pub created_at: i64,
    /// When it last changed, Unix seconds.
    pub updated_at: i64,
    /// `created_at` in RFC 3339.
    pub created_at_iso: String,
    /// `updated_at` in RFC 3339.
    pub updated_at_iso: String,
    /// What it is about: the session id.
    pub resource_id: String,
    /// What it is doing or did last (`episodes`, `done`).
    pub stage: String,
    /// What it made, once completed (for a commit: `session_id`,
    /// `archive_uri`, `memories_extracted` per category with `total`).
    pub result: Option<Value>,
    /// Why it failed.
    pub error: Option<String>,
}

/// The id of the task that remembers archive `archive` of `session` for
/// `identity`: 32 hex digits of a SHA-256 of the four, so a retried commit
/// has the same task.
#[must_use]
pub fn commit_task_id(identity: &Identity, session: &SessionId, archive: u64) -> String {
    let seed = format!("{}\n{}\n{}\n{archive}", identity.account, identity.user, session.as_str());
    hex::encode(&sha2::Sha256::digest(seed.as_bytes())[..16])
}

/// Whether `text` can be a task id (what [`commit_task_id`] makes): a
/// request's id is checked before it becomes part of a key.
#[must_use]
pub fn is_task_id(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

fn prefix(identity: &Identity) -> String {
    format!("accounts/{}/tasks/{}/", identity.account, identity.user)
}

/// What a task's key ends with.
pub const TASK_SUFFIX: &str = ".task.json";

fn key(identity: &Identity, task_id: &str) -> String {
    format!("{}{task_id}{TASK_SUFFIX}", prefix(identity))
}

/// The account, user and task id a task's store key names
/// (`accounts/{account}/tasks/{user}/{task_id}.task.json`), each
/// validated; `None` for any other key.
#[must_use]
pub fn parse_key(key: &str) -> Option<(crate::identity::AccountId, crate::identity::UserId, String)> {
    let rest = key.strip_prefix("accounts/")?;
    let (account, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("tasks/")?;
    let (user, file) = rest.split_once('/')?;
    let task_id = file.strip_suffix(TASK_SUFFIX)?;
    if !is_task_id(task_id) {
        return None;
    }
    let account = crate::identity::AccountId::new(account).ok()?;
    let user = crate::identity::UserId::new(user).ok()?;
    Some((account, user, task_id.to_owned()))
}

/// Writes `task` for its owner `identity` (overwriting: the last state
/// wins). Cost: one PUT (up to four when the store fails). Unknown
/// outcomes: the write is sent again, which is harmless.
///
/// # Errors
/// Store errors.
pub async fn put(store: &SharedStore, identity: &Identity, task: &Task) -> Result<(), StoreError> {
    let body = encode(identity, task)?;
    let mut last = None;
    // An overwrite is repeatable: a write that failed, or whose outcome is
    // unknown, is sent again (a task left at an earlier state would say
    // what is no longer true).
    for _ in 0..PUT_ATTEMPTS {
        match store.put(&key(identity, &task.task_id), body.clone(), PutMode::Overwrite).await {
            Ok(_) => return Ok(()),
            Err(e @ StoreError::Backend { .. }) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| StoreError::Conflict(key(identity, &task.task_id))))
}

/// Attempts [`put`] makes.
const PUT_ATTEMPTS: usize = 4;

/// `identity`'s task `task_id` (`None`: no such task of theirs, or an id
/// that is not one). Cost: one GET.
///
/// # Errors
/// Store errors; a task that does not decode is a `Backend` error.
pub async fn get(store: &SharedStore, identity: &Identity, task_id: &str) -> Result<Option<Task>, StoreError> {
    Ok(get_tagged(store, identity, task_id).await?.map(|(task, _)| task))
}

/// [`get`] with the task's etag, for a compare-and-swap ([`claim`],
/// [`put_if`]).
///
/// # Errors
/// As [`get`].
pub async fn get_tagged(
    store: &SharedStore,
    identity: &Identity,
    task_id: &str,
) -> Result<Option<(Task, String)>, StoreError> {
    if !is_task_id(task_id) {
        return Ok(None);
    }
    let key = key(identity, task_id);
    match store.get(&key).await {
        Ok(object) => serde_json::from_slice(&object.body)
            .map(|t| Some((t, object.meta.etag)))
            .map_err(|e| StoreError::Backend { op: "get", key, message: format!("task does not decode: {e}") }),
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `task` only if its stored version still has `etag`; returns
/// the new etag. Cost: one conditional PUT.
///
/// Unknown outcomes: the caller reads the task again; a task showing
/// what this write said is this write's.
///
/// # Errors
/// [`StoreError::Conflict`] when the task changed meanwhile; store errors.
pub async fn put_if(store: &SharedStore, identity: &Identity, task: &Task, etag: &str) -> Result<String, StoreError> {
    let body = encode(identity, task)?;
    store.put(&key(identity, &task.task_id), body, PutMode::IfMatch(etag.to_owned())).await.map(|meta| meta.etag)
}

fn encode(identity: &Identity, task: &Task) -> Result<bytes::Bytes, StoreError> {
    serde_json::to_vec(task).map(bytes::Bytes::from).map_err(|e| StoreError::Backend {
        op: "put",
        key: key(identity, &task.task_id),
        message: e.to_string(),
    })
}

/// Writes `task` over the version with `etag` (compare-and-swap), and
/// settles an outcome the store left unknown by reading back: returns the
/// new etag when the task now reads as `task` (this write, or an earlier
/// attempt of it, landed), `None` when another writer changed it first.
/// A write that failed before landing is tried again, up to 4 times.
///
/// Cost: one conditional PUT; a GET more per unknown outcome or conflict.
///
/// # Errors
/// Store errors that persist through the attempts.
pub async fn swap(
    store: &SharedStore,
    identity: &Identity,
    task: &Task,
    etag: &str,
) -> Result<Option<String>, StoreError> {
    let etag = etag.to_owned();
    let mut last = None;
    for _ in 0..4 {
        match put_if(store, identity, task, &etag).await {
            Ok(new) => return Ok(Some(new)),
            Err(e @ (StoreError::Conflict(_) | StoreError::Backend { .. })) => {
                let conflict = matches!(e, StoreError::Conflict(_));
                match get_tagged(store, identity, &task.task_id).await {
                    Ok(Some((found, new))) if &found == task => return Ok(Some(new)),
                    // Still the version this write meant to replace: it did
                    // not land.
                    Ok(Some((_, new))) if new == etag && !conflict => {}
                    Ok(_) => return Ok(None),
                    Err(read) => last = Some(read),
                }
                if conflict {
                    return Ok(None);
                }
                last.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| StoreError::Conflict(key(identity, &task.task_id))))
}

/// How long a `running` task may go without a change before another
/// worker may take it over (its worker is presumed gone): 16 minutes, past
/// the longest a Lambda function runs.
pub const STALE_AFTER_S: i64 = 16 * 60;

/// Takes task `task_id` of `identity` to run it: a `pending` task (or a
/// `running` one unchanged for [`STALE_AFTER_S`]) becomes `running` at
/// `now` (Unix seconds) by compare-and-swap. Returns the task as claimed
/// and its etag, or `Err(task)` with the task as found when it is not
/// this caller's to run (done, failed, being run, or taken meanwhile);
/// `None` when there is no such task.
///
/// Cost: a GET and a conditional PUT ([`swap`]: a GET more when the
/// store leaves the outcome unknown).
///
/// # Errors
/// Store errors that persist through [`swap`]'s attempts.
pub async fn claim(
    store: &SharedStore,
    identity: &Identity,
    task_id: &str,
    now: i64,
) -> Result<Option<Result<(Task, String), Task>>, StoreError> {
    let Some((mut task, etag)) = get_tagged(store, identity, task_id).await? else { return Ok(None) };
    let takeable = match task.status {
        TaskStatus::Pending => true,
        TaskStatus::Running => now - task.updated_at >= STALE_AFTER_S,
        TaskStatus::Completed | TaskStatus::Failed => false,
    };
    if !takeable {
        return Ok(Some(Err(task)));
    }
    task.status = TaskStatus::Running;
    task.stage = "extraction".to_owned();
    task.updated_at = now;
    task.updated_at_iso = iso(now);
    match swap(store, identity, &task, &etag).await? {
        Some(etag) => Ok(Some(Ok((task, etag)))),
        None => Ok(get(store, identity, task_id).await?.map(Err)),
    }
}

/// Unix seconds `at` in RFC 3339 (`""` out of range).
#[must_use]
pub fn iso(at: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(at)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

/// `identity`'s tasks, newest first, that match the filters, at most
/// `limit`. Cost: a LIST and a GET per task the owner has (tasks that do
/// not decode are skipped).
///
/// # Errors
/// Store errors.
pub async fn list(
    store: &SharedStore,
    identity: &Identity,
    task_type: Option<&str>,
    status: Option<TaskStatus>,
    resource_id: Option<&str>,
    limit: usize,
) -> Result<Vec<Task>, StoreError> {
    use futures_util::{StreamExt as _, TryStreamExt as _};
    let listed = store.list(&prefix(identity)).await?;
    let mut tasks: Vec<Task> = futures_util::stream::iter(listed)
        .map(|meta| async move {
            match store.get(&meta.key).await {
                Ok(object) => Ok(serde_json::from_slice::<Task>(&object.body).ok()),
                Err(StoreError::NotFound(_)) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .buffered(8)
        .try_filter_map(|task| async move { Ok(task) })
        .try_collect()
        .await?;
    tasks.retain(|t| {
        task_type.is_none_or(|k| t.task_type == k)
            && status.is_none_or(|s| t.status == s)
            && resource_id.is_none_or(|r| t.resource_id == r)
    });
    tasks.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.task_id.cmp(&b.task_id)));
    tasks.truncate(limit);
    Ok(tasks)
}
