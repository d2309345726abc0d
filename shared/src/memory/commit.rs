//! The write path's commit: what a session said becomes an archive and
//! memory. [`commit`] is the sequence behind `POST
//! /api/v1/sessions/{id}/commit` — plan the archive, summarise it, claim
//! it, keep its messages as event memories ([`crate::memory`]), keep the
//! live ones too, move the archive mark, record the task, and (on a store
//! that sends no notifications) run the model's extraction inline — and
//! [`Committed`] its answer, which serialises to the route's shape
//! (`CommitResult` in `infra/openapi.json`). The route only parses the
//! body and maps [`CommitError`] to a status.

use serde::Serialize;
use serde_json::json;

use crate::app::App;
use crate::deadline::Deadline;
use crate::identity::Identity;
use crate::memory::tasks::{Task, TaskStatus};
use crate::sessions::{SessionError, SessionId, Sessions, StoredMessage};

/// What a skipped commit's response says about memory.
pub const NOTHING_TO_REMEMBER: &str = "Nothing was archived.";

/// What a commit can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The session does not exist (404).
    #[error("Session not found: {}", .0.as_str())]
    NotFound(SessionId),
    /// The conversation's memories could not be written (503): the archive
    /// mark did not move, so a retry writes what is missing.
    #[error("the conversation's memories could not be written; retry the commit: {0}")]
    Memories(String),
    /// The session's store failed, or the commit lost its race three
    /// times (its own mapping: 503, 409, 429).
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// A commit's answer: an archive made, or nothing new to archive.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Committed {
    /// An archive was made (`status: "accepted"`).
    Accepted(Accepted),
    /// Nothing new to archive (`status: "skipped"`).
    Skipped(Skipped),
}

/// A commit that archived: OpenViking's commit result with Skald's
/// `memory_extraction` sentence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accepted {
    /// The session.
    pub session_id: String,
    /// `"accepted"`.
    pub status: &'static str,
    /// The commit's task (`GET /api/v1/tasks/{id}`).
    pub task_id: String,
    /// The archive made.
    pub archive_uri: String,
    /// `true`.
    pub archived: bool,
    /// Messages the archive holds.
    pub archived_message_count: u64,
    /// Commits of the session so far.
    pub commit_count: u64,
    /// How the archive was summarised (`llm` or `extractive`).
    pub summary: &'static str,
    /// What became of the conversation, in a sentence.
    pub memory_extraction: String,
    /// An id for the logs.
    pub trace_id: String,
    /// Tokens still live after the commit.
    pub estimated_active_tokens: u64,
    /// Whether the live tokens exceed a turn budget's.
    pub budget_exceeded: bool,
}

/// A commit with nothing new to archive.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    /// The session.
    pub session_id: String,
    /// `"skipped"`.
    pub status: &'static str,
    /// `null`.
    pub archive_uri: Option<String>,
    /// `false`.
    pub archived: bool,
    /// Why nothing was archived.
    pub reason: &'static str,
    /// `null`.
    pub task_id: Option<String>,
    /// What became of the live messages, in a sentence.
    pub memory_extraction: String,
    /// An id for the logs.
    pub trace_id: String,
    /// Under a turn budget: tokens still live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_active_tokens: Option<u64>,
    /// Under a turn budget: whether they exceed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_exceeded: Option<bool>,
}

/// [`commit`] under a turn budget (`retention_mode: "turn_budget"`): the
/// newest turns that fit `policy` stay live, and the answer says what
/// remains active.
///
/// # Errors
/// As [`commit`].
pub async fn commit_turn_budget(
    app: &App,
    identity: &Identity,
    deadline: &Deadline,
    id: &SessionId,
    policy: crate::retention::TurnBudget,
    now: &str,
) -> Result<Committed, CommitError> {
    let sessions = Sessions::new(&app.store, identity);
    let live = match sessions.live_messages(id, None).await {
        Ok(live) => live,
        Err(SessionError::NotFound(_)) => return Err(CommitError::NotFound(id.clone())),
        Err(e) => return Err(e.into()),
    };
    let steps: Vec<crate::retention::Step> =
        live.iter().map(|m| crate::retention::Step { user: m.role == "user", tokens: m.token_estimate() }).collect();
    let retained = crate::retention::turn_budget(&steps, policy);
    let mut committed = commit(app, identity, deadline, id, retained.keep, now).await?;
    match &mut committed {
        Committed::Accepted(a) => {
            a.estimated_active_tokens = retained.estimated_active_tokens;
            a.budget_exceeded = retained.budget_exceeded;
        }
        Committed::Skipped(s) => {
            s.estimated_active_tokens = Some(retained.estimated_active_tokens);
            s.budget_exceeded = Some(retained.budget_exceeded);
        }
    }
    Ok(committed)
}

/// Commits session `id` for `identity`, keeping its newest `keep`
/// messages live: plans the archive of the messages since the last one,
/// summarises it (the model's summary within `deadline`, else the
/// extractive one), claims it, keeps its messages as event memories, keeps
/// the live messages as event memories too, moves the archive mark, and
/// records the commit's task — running the model's extraction inline
/// where the store sends no notifications (a local store), else leaving
/// it `pending` for the `extractor`. Nothing new to archive is a skip,
/// not an error. A commit that loses a race for the archive claim or the
/// mark plans again (three attempts).
///
/// Cost: the session's meta and live messages read; the archive and its
/// episodes written (and, inline, embedded and indexed); the live episodes
/// rewritten; the meta updated; the task written.
///
/// # Errors
/// [`CommitError::NotFound`] for a session that does not exist;
/// [`CommitError::Memories`] when the memories could not be written (the
/// mark has not moved: a retry writes what is missing, nothing twice);
/// [`CommitError::Session`] when the store fails or the race is lost three
/// times. When S3 leaves a write's outcome unknown, the commit fails and
/// its retry plans the same range and writes the same keys.
pub async fn commit(
    app: &App,
    identity: &Identity,
    deadline: &Deadline,
    id: &SessionId,
    keep: u64,
    now: &str,
) -> Result<Committed, CommitError> {
    let sessions = Sessions::new(&app.store, identity);
    let sessions = &sessions;
    let trace_id = format!("{:016x}", crate::index::unique());
    // When the messages' own times do not parse, episodes are dated by it.
    let at = time::OffsetDateTime::parse(now, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| time::OffsetDateTime::now_utc());
    let mut attempt = 0;
    loop {
        attempt += 1;
        let plan = match sessions.plan_commit(id, keep, now).await {
            Ok(Ok(plan)) => plan,
            Ok(Err(skip)) => {
                // Best effort: what is live stays live, and the next
                // commit keeps it.
                let live = keep_live(app, identity, sessions, id, None, at).await.unwrap_or_else(|(messages, e)| {
                    tracing::warn!(session = id.as_str(), error = %e, "the live messages' episodes were not written; the next commit writes them");
                    Live { messages, episodes: None }
                });
                return Ok(Committed::Skipped(Skipped {
                    session_id: id.as_str().to_owned(),
                    status: "skipped",
                    archive_uri: None,
                    archived: false,
                    reason: skip.as_str(),
                    task_id: None,
                    memory_extraction: describe_live(live, NOTHING_TO_REMEMBER),
                    trace_id,
                    estimated_active_tokens: None,
                    budget_exceeded: None,
                }));
            }
            Err(SessionError::NotFound(_)) => return Err(CommitError::NotFound(id.clone())),
            Err(e) => return Err(e.into()),
        };
        let (summary, how) = summarize(app, deadline, &plan.messages).await;
        let claimed = match sessions.claim_archive(id, &plan, &summary, how).await {
            Ok(claimed) => claimed,
            Err(SessionError::Contention(_)) if attempt < 3 => continue,
            Err(e) => return Err(e.into()),
        };
        // The memories land before the archive mark moves: a commit cut
        // between the two is finished by the next one, which plans the
        // same range and writes the same files once.
        let events = remember(app, identity, sessions, id, &plan, at).await?;
        // The live episodes give way to the archive's before the mark
        // moves, so a message is never in both once the commit lands.
        let live = keep_live(app, identity, sessions, id, Some(plan.range.to_seq), at)
            .await
            .map_err(|(_, e)| CommitError::Memories(e))?;
        let counted = [("events", events as u64)];
        let memories: &[(&str, u64)] = if events == 0 { &[] } else { &counted };
        match sessions.mark_archived(id, &plan, &claimed, memories, now).await {
            Ok(meta) => {
                let extract = extraction_configured(app);
                let mut task =
                    record_task(app, identity, sessions, id, plan.range.index, events, None, extract, at).await;
                if extract && app.config.memory_index_inline() {
                    task = extract_inline(app, identity, deadline, task).await;
                    // No event runs again a task that store failures left
                    // pending on a local store: the next commit does.
                    if plan.range.index > 1 {
                        let before = crate::memory::tasks::commit_task_id(identity, id, plan.range.index - 1);
                        catch_up(app, identity, deadline, &before).await;
                    }
                }
                return Ok(Committed::Accepted(Accepted {
                    session_id: id.as_str().to_owned(),
                    status: "accepted",
                    memory_extraction: describe_live(live, &describe_memory(&task, identity)),
                    task_id: task.task_id,
                    archive_uri: sessions.archive_uri(id, plan.range.index).as_str().to_owned(),
                    archived: true,
                    archived_message_count: plan.range.message_count,
                    commit_count: meta.commit_count,
                    summary: how,
                    trace_id,
                    estimated_active_tokens: meta.pending_tokens,
                    budget_exceeded: false,
                }));
            }
            Err(SessionError::Contention(_)) if attempt < 3 => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// What a commit's live messages became: event memories ([`keep_live`]),
/// `None` when they could not be written now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Live {
    /// Messages not archived.
    messages: usize,
    /// Event memories they make.
    episodes: Option<usize>,
}

/// Keeps the messages a commit leaves live (its keep window, and what was
/// appended meanwhile) as event memories too, so what was said is found
/// before a commit archives it: the episodes of "archive 0", which is
/// never claimed ([`crate::memory::remember_archive`] with index 0), from
/// sequence number `from` on (where the commit's archive ends; `None`: the
/// archive mark). Each commit writes them again, removing those its
/// archive now holds, before its mark moves. Two commits of one session
/// racing can leave one's view until the next commit.
///
/// # Errors
/// The live messages' count (0 when they could not be read) and what
/// failed.
async fn keep_live(
    app: &App,
    identity: &Identity,
    sessions: &Sessions<'_>,
    id: &SessionId,
    from: Option<u64>,
    at: time::OffsetDateTime,
) -> Result<Live, (usize, String)> {
    let messages = sessions.live_messages(id, from).await.map_err(|e| (0, e.to_string()))?;
    match crate::memory::remember_archive(app, identity, id, 0, &messages, at).await {
        Ok(events) => Ok(Live { messages: messages.len(), episodes: Some(events.len()) }),
        Err(e) => Err((messages.len(), e.to_string())),
    }
}

/// `said` (what the commit's archive became), followed by what its live
/// messages became.
fn describe_live(live: Live, said: &str) -> String {
    match live {
        Live { messages: 0, .. } | Live { episodes: Some(0), .. } => said.to_owned(),
        Live { messages, episodes: Some(episodes) } => format!(
            "{said} The {messages} newest {} (kept live by keep_recent_count) {} kept as {episodes} event {} until a \
             commit archives them.",
            if messages == 1 { "message" } else { "messages" },
            if messages == 1 { "is" } else { "are" },
            if episodes == 1 { "memory" } else { "memories" },
        ),
        Live { messages, episodes: None } => format!(
            "{said} The {messages} newest {} could not be kept as event memories now; the next commit keeps them.",
            if messages == 1 { "message" } else { "messages" },
        ),
    }
}

/// Keeps the messages of the archive `plan` claimed as memories
/// ([`crate::memory::remember_archive`]); returns how many event memories
/// they make. A failure records the commit's task as failed, with why, and
/// fails the commit (503): the archive mark has not moved, so a retry
/// plans the same range and writes what is missing.
async fn remember(
    app: &App,
    identity: &Identity,
    sessions: &Sessions<'_>,
    id: &SessionId,
    plan: &crate::sessions::CommitPlan,
    at: time::OffsetDateTime,
) -> Result<usize, CommitError> {
    let index = plan.range.index;
    match crate::memory::remember_archive(app, identity, id, index, &plan.messages, at).await {
        Ok(events) => Ok(events.len()),
        Err(e) => {
            let why = e.to_string();
            record_task(app, identity, sessions, id, index, 0, Some(why.clone()), false, at).await;
            Err(CommitError::Memories(why))
        }
    }
}

/// Whether commits extract memories with a model: `memory.extract` and an
/// extraction model (`extraction`, else `llm`) configured.
#[cfg(feature = "llm")]
fn extraction_configured(app: &App) -> bool {
    app.config.memory.extract && app.models.extraction_model().is_some()
}

/// This build has no model client: commits keep episodes only.
#[cfg(not(feature = "llm"))]
fn extraction_configured(_app: &App) -> bool {
    false
}

/// Attempts at running a commit's task inline when the store fails.
#[cfg(feature = "llm")]
const INLINE_TASK_ATTEMPTS: usize = 3;

/// Runs the commit's pending extraction task within the request's
/// deadline (a store that sends no notifications); the task as it ends.
#[cfg(feature = "llm")]
async fn extract_inline(app: &App, identity: &Identity, deadline: &Deadline, task: Task) -> Task {
    let mut last = None;
    // A store failure claiming or recording the task is retried: no event
    // will run it later on a store that sends none.
    for _ in 0..INLINE_TASK_ATTEMPTS {
        let now = time::OffsetDateTime::now_utc();
        match crate::memory::extractor::run_task(app, identity, &task.task_id, deadline, now).await {
            Ok(Some(run)) => return run.task,
            Ok(None) => return task,
            Err(e) => last = Some(e),
        }
    }
    if let Some(e) = last {
        tracing::warn!(task = task.task_id, error = %e, "the extraction task could not run; it stays as it was");
    }
    crate::memory::tasks::get(&app.store, identity, &task.task_id).await.ok().flatten().unwrap_or(task)
}

#[cfg(not(feature = "llm"))]
async fn extract_inline(_app: &App, _identity: &Identity, _deadline: &Deadline, task: Task) -> Task {
    task
}

/// Runs the earlier task `task_id` when it still waits (`pending`, or
/// `running` and stale): what an inline commit's store failures left
/// behind. A task that is done, or missing, costs one GET.
#[cfg(feature = "llm")]
async fn catch_up(app: &App, identity: &Identity, deadline: &Deadline, task_id: &str) {
    let now = time::OffsetDateTime::now_utc();
    match crate::memory::extractor::run_task(app, identity, task_id, deadline, now).await {
        Ok(Some(run)) if run.ran => tracing::info!(task = task_id, "an earlier commit's extraction caught up"),
        Ok(_) => {}
        Err(e) => tracing::warn!(task = task_id, error = %e, "an earlier commit's extraction still waits"),
    }
}

#[cfg(not(feature = "llm"))]
async fn catch_up(_app: &App, _identity: &Identity, _deadline: &Deadline, _task_id: &str) {}

/// Records the commit's task: completed with the `events` it made,
/// failed with `error`, or (`pending`) waiting for model extraction. A
/// task that cannot be written is logged; the commit still answers with
/// its id.
#[allow(clippy::too_many_arguments)]
async fn record_task(
    app: &App,
    identity: &Identity,
    sessions: &Sessions<'_>,
    id: &SessionId,
    index: u64,
    events: usize,
    error: Option<String>,
    pending: bool,
    at: time::OffsetDateTime,
) -> Task {
    let iso = at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
    let failed = error.is_some();
    let task = Task {
        task_id: crate::memory::tasks::commit_task_id(identity, id, index),
        task_type: "session_commit".to_owned(),
        status: if failed {
            TaskStatus::Failed
        } else if pending {
            TaskStatus::Pending
        } else {
            TaskStatus::Completed
        },
        created_at: at.unix_timestamp(),
        updated_at: at.unix_timestamp(),
        created_at_iso: iso.clone(),
        updated_at_iso: iso,
        resource_id: id.as_str().to_owned(),
        stage: if failed {
            "episodes"
        } else if pending {
            "extraction"
        } else {
            "done"
        }
        .to_owned(),
        result: Some(json!({
            "session_id": id.as_str(),
            "archive_uri": sessions.archive_uri(id, index).as_str(),
            "episodes": events,
            "memories_extracted": { "events": events, "total": events },
        })),
        error,
    };
    if let Err(e) = crate::memory::tasks::put(&app.store, identity, &task).await {
        tracing::warn!(task = task.task_id, error = %e, "a commit's task was not recorded");
    }
    task
}

/// What a commit's response says became of the conversation.
fn describe_memory(task: &Task, identity: &crate::identity::Identity) -> String {
    let result = task.result.as_ref();
    let episodes = result.and_then(|r| r["episodes"].as_u64()).unwrap_or(0);
    let counts = result.map(|r| &r["memories_extracted"]);
    let total = counts.and_then(|c| c["total"].as_u64()).unwrap_or(0);
    let root = identity.user_root();
    let kept = format!(
        "The conversation was kept as {episodes} event {} under {root}/memories/events, searchable by find, search \
         and recall",
        if episodes == 1 { "memory" } else { "memories" },
    );
    match (task.status, task.stage.as_str(), &task.error) {
        (TaskStatus::Failed, "episodes", e) => format!(
            "The conversation's memories were not written ({}); commit again.",
            e.as_deref().unwrap_or("unknown error")
        ),
        (TaskStatus::Failed, _, e) => format!(
            "{kept}; extracting memories with the model failed ({}), and the event memories stand.",
            e.as_deref().unwrap_or("unknown error")
        ),
        (TaskStatus::Pending | TaskStatus::Running, _, _) => format!(
            "{kept}; the model extracts profile, preferences, entities and events from it in the background (task \
             {}).",
            task.task_id
        ),
        (TaskStatus::Completed, _, _) if total > episodes => {
            let each: Vec<String> = counts
                .and_then(serde_json::Value::as_object)
                .into_iter()
                .flatten()
                .filter(|(k, _)| k.as_str() != "total")
                .filter_map(|(k, v)| {
                    let n = v.as_u64()?;
                    let n = if k == "events" { n.saturating_sub(episodes) } else { n };
                    (n > 0).then(|| format!("{k} {n}"))
                })
                .collect();
            format!(
                "{kept}; the model extracted {} more under {root}/memories ({}).",
                total - episodes,
                each.join(", ")
            )
        }
        (TaskStatus::Completed, _, _) if result.is_some_and(|r| r.get("token_usage").is_some()) => {
            format!("{kept}; the model found nothing more to remember.")
        }
        (TaskStatus::Completed, _, _) if episodes == 0 => {
            "The session was archived; memory from conversations is off.".to_owned()
        }
        (TaskStatus::Completed, _, _) => format!("{kept}; no model extracts facts from it."),
    }
}

/// The archive summaries: the configured model's within the request's
/// deadline (its cap, less the reserve the rest of the commit needs),
/// else the extractive ones.
#[cfg(feature = "llm")]
async fn summarize(
    app: &App,
    deadline: &Deadline,
    messages: &[StoredMessage],
) -> (crate::sessions::ArchiveSummary, &'static str) {
    use crate::llm::archive::{SUMMARY_CAP, summarize};
    let model = app.models.stage_model();
    let reserve = std::time::Duration::from_millis(app.config.retrieval.stage_reserve_ms).max(COMMIT_RESERVE);
    let budget = deadline.stage_budget(std::time::Instant::now(), SUMMARY_CAP, reserve);
    summarize(model.as_deref(), messages, budget).await
}

/// The least time a commit keeps back after its summary stage for what
/// follows (the archive's claim, its episodes written and, on a local
/// store, embedded and indexed, the live episodes, the mark): a model
/// slower than the deadline must not take the commit with it, also on a
/// loaded machine.
#[cfg(feature = "llm")]
const COMMIT_RESERVE: std::time::Duration = std::time::Duration::from_secs(4);

/// The extractive summaries (this build has no model client).
#[cfg(not(feature = "llm"))]
async fn summarize(
    _app: &App,
    _deadline: &Deadline,
    messages: &[StoredMessage],
) -> (crate::sessions::ArchiveSummary, &'static str) {
    (crate::sessions::extractive_summary(messages), "extractive")
}
