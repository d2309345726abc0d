//! Tasks: what became of a commit's conversation, in OpenViking's task
//! shape (`GET /api/v1/tasks/{id}`).
//!
//! A task lives at `accounts/{account}/tasks/{user}/{task_id}.json`: under
//! its owner, so another user's task id is simply not found. A commit's
//! task id is derived from the session and the archive, so a retried
//! commit reports, and rewrites, the same task.

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

fn key(identity: &Identity, task_id: &str) -> String {
    format!("{}{task_id}.json", prefix(identity))
}

/// Writes `task` for its owner `identity` (overwriting: the last state
/// wins). Cost: one PUT. Unknown outcomes: writing it again is harmless.
///
/// # Errors
/// Store errors.
pub async fn put(store: &SharedStore, identity: &Identity, task: &Task) -> Result<(), StoreError> {
    let body = serde_json::to_vec(task).map_err(|e| StoreError::Backend {
        op: "put",
        key: key(identity, &task.task_id),
        message: e.to_string(),
    })?;
    store.put(&key(identity, &task.task_id), body.into(), PutMode::Overwrite).await.map(|_| ())
}

/// `identity`'s task `task_id` (`None`: no such task of theirs, or an id
/// that is not one). Cost: one GET.
///
/// # Errors
/// Store errors; a task that does not decode is a `Backend` error.
pub async fn get(store: &SharedStore, identity: &Identity, task_id: &str) -> Result<Option<Task>, StoreError> {
    if !is_task_id(task_id) {
        return Ok(None);
    }
    let key = key(identity, task_id);
    match store.get(&key).await {
        Ok(object) => serde_json::from_slice(&object.body).map(Some).map_err(|e| StoreError::Backend {
            op: "get",
            key,
            message: format!("task does not decode: {e}"),
        }),
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
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
