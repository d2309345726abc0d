//! The extractor's edge: S3 notifications of commit tasks in (through the
//! extractor's SQS queue, in batches), [`skald::memory::extractor::run_task`]
//! out (feature `extractor`, linked by the `extractor` function only).
//!
//! A commit that leaves model extraction to this function writes its task
//! `pending` at `accounts/{account}/tasks/{user}/{task_id}.task.json`; the
//! store's notification of that write (the rule matches the `.task.json`
//! suffix) names the task, and so the account and the user it runs for.
//! Writes of the task that are not `pending` (the claim, the result) are
//! notified too and run nothing: a task runs once it is claimed.
//!
//! A task that could not be run or recorded (a store failure) fails its
//! message alone: the answer to an SQS batch names it in
//! `batchItemFailures`, so only it comes back and, after five receipts,
//! goes to the dead-letter queue. A model failure is not such a failure:
//! the task records it and is done (its episodes stand).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt as _;
use lambda_http::{Error, LambdaEvent};
use serde_json::{Value, json};
use skald::app::App;
use skald::deadline::{Deadline, DeadlineSource};
use skald::memory::tasks::{TaskStatus, parse_key};

use crate::s3_events::{Payload, read_payload};

/// Tasks run at once within one invocation.
pub const TASK_CONCURRENCY: usize = 4;
/// The deadline of an invocation that carries none (a direct local
/// invoke).
pub const LOCAL_DEADLINE: Duration = Duration::from_secs(120);

/// How the tasks of one invocation went.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Totals {
    /// Tasks run to completion.
    pub completed: usize,
    /// Tasks run whose extraction failed (recorded in the task).
    pub failed: usize,
    /// Tasks not run: found done, failed, running elsewhere, or missing.
    pub skipped: usize,
    /// Keys that are not tasks.
    pub ignored: usize,
    /// Tasks that could not be run or recorded (their messages fail).
    pub errors: usize,
}

/// Runs every task the payload names, each once, [`TASK_CONCURRENCY`] at
/// a time; returns the totals and the keys of the tasks that errored.
async fn run_tasks(app: &App, keys: Vec<String>, deadline: &Deadline) -> (Totals, Vec<String>) {
    let mut totals = Totals::default();
    let mut unique: Vec<String> = Vec::new();
    for key in keys {
        if parse_key(&key).is_none() {
            totals.ignored += 1;
        } else if !unique.contains(&key) {
            unique.push(key);
        }
    }
    let runs = futures_util::stream::iter(unique)
        .map(|key| async move {
            let ran = skald::memory::extractor::run_task_at(app, &key, deadline).await;
            (key, ran.map(|run| run.filter(|r| r.ran).map(|r| r.task.status)))
        })
        .buffer_unordered(TASK_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let mut errored = Vec::new();
    for (key, ran) in runs {
        match ran {
            Ok(Some(TaskStatus::Completed)) => totals.completed += 1,
            Ok(Some(TaskStatus::Failed)) => totals.failed += 1,
            Ok(_) => totals.skipped += 1,
            Err(e) => {
                tracing::error!(key, error = %e, "a task could not be run");
                totals.errors += 1;
                errored.push(key);
            }
        }
    }
    (totals, errored)
}

/// Runs the tasks one invocation's notifications name and answers with
/// the totals (`{"completed", "failed", "skipped", "ignored", "errors"}`);
/// an SQS batch's answer also carries `batchItemFailures`, one
/// `{"itemIdentifier": messageId}` per message naming a task that errored.
///
/// # Errors
/// An unreadable payload; a direct notification whose task errored; an
/// SQS message that errored without a `messageId`.
pub async fn handle(app: &App, event: LambdaEvent<Value>) -> Result<Value, Error> {
    let location = app.config.store_location()?;
    let payload = read_payload(&event.payload, &location)?;
    let keys: Vec<String> = payload.changes().into_iter().map(|c| c.key).collect();
    let deadline = invocation_deadline(event.context.deadline);
    let (totals, errored) = run_tasks(app, keys, &deadline).await;
    tracing::info!(
        completed = totals.completed,
        failed = totals.failed,
        skipped = totals.skipped,
        ignored = totals.ignored,
        errors = totals.errors,
        "extractor"
    );
    let mut answer = json!({
        "completed": totals.completed,
        "failed": totals.failed,
        "skipped": totals.skipped,
        "ignored": totals.ignored,
        "errors": totals.errors,
    });
    match &payload {
        Payload::Batch(messages) => {
            let mut failures: Vec<Value> = Vec::new();
            for message in messages.iter().filter(|m| m.changes.iter().any(|c| errored.contains(&c.key))) {
                let id = message
                    .id
                    .as_deref()
                    .filter(|id| !id.is_empty())
                    .ok_or("an SQS message without a messageId failed")?;
                let item = json!({ "itemIdentifier": id });
                if !failures.contains(&item) {
                    failures.push(item);
                }
            }
            answer["batchItemFailures"] = Value::Array(failures);
        }
        Payload::Notification(_) if !errored.is_empty() => {
            return Err(format!("{} task(s) could not be run: {}", errored.len(), errored.join(", ")).into());
        }
        Payload::Notification(_) => {}
    }
    Ok(answer)
}

/// The invocation's deadline (`deadline_ms` since the epoch, from the
/// runtime context), else [`LOCAL_DEADLINE`] from now.
fn invocation_deadline(deadline_ms: u64) -> Deadline {
    let now = Instant::now();
    let lambda = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
        .and_then(|now_ms| crate::deadline_from_epoch_ms(deadline_ms, now_ms, now));
    match lambda {
        Some(at) => Deadline { at, source: DeadlineSource::Lambda },
        None => Deadline { at: now + LOCAL_DEADLINE, source: DeadlineSource::Gateway },
    }
}

/// Builds the [`App`] from the environment and runs the tasks of S3
/// notifications (in SQS batches, or one at a time) until the runtime
/// stops.
///
/// # Errors
/// An init error (bad configuration, unreachable store) or a runtime error.
pub async fn run() -> Result<(), Error> {
    crate::s3_events::run_events(|app, event| async move { handle(&app, event).await }).await
}
