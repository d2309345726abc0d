//! The indexer's edge: S3 event notifications in, [`skald::indexer`]
//! changes out (feature `s3-events`, linked by the `indexer` function only).
//!
//! Deployed, S3 sends its notifications to an SQS queue and the function
//! takes them in batches (one index commit per batch, a bounded number of
//! invocations at once); a notification invoked directly (as
//! `cargo lambda invoke` does locally) is taken as well.
//!
//! An account whose changes fail does not fail the batch: the answer to an
//! SQS batch is Lambda's partial batch response (the event source reports
//! batch item failures), naming only the messages whose changes touched a
//! failed account, so only they come back and, after five receipts, go to
//! the dead-letter queue.

use std::sync::Arc;

use aws_lambda_events::s3::{S3Event, S3EventRecord};
use lambda_http::{Error, LambdaEvent, service_fn};
use serde::Deserialize;
use serde_json::{Value, json};
use skald::app::App;
use skald::config::Config;
use skald::indexer::{AccountFailure, ApplyError, Change, apply};
use skald::store::StoreLocation;

/// The changes an S3 event notification names, with keys relative to the
/// store's root. On an S3 store, records of another bucket or outside its
/// key prefix are left out; on a local store every key is taken as
/// relative. Keys arrive URL-encoded (`+` is a space) and are decoded; a key
/// that does not decode to UTF-8 is left out (and logged).
#[must_use]
pub fn s3_changes(event: &S3Event, location: &StoreLocation) -> Vec<Change> {
    event.records.iter().filter_map(|record| change(record, location)).collect()
}

fn change(record: &S3EventRecord, location: &StoreLocation) -> Option<Change> {
    let raw = record.s3.object.key.as_deref()?;
    let plus_as_space = raw.replace('+', " ");
    let Ok(key) = percent_encoding::percent_decode_str(&plus_as_space).decode_utf8() else {
        tracing::warn!(key = raw, "s3 event key is not UTF-8 once decoded; skipped");
        return None;
    };
    let relative = match location {
        StoreLocation::S3 { bucket, prefix } => {
            if record.s3.bucket.name.as_deref() != Some(bucket.as_str()) {
                return None;
            }
            if prefix.is_empty() { Some(key.as_ref()) } else { key.strip_prefix(prefix.as_str())?.strip_prefix('/') }
        }
        StoreLocation::Local(_) => Some(key.as_ref()),
    }?;
    Some(Change {
        key: relative.to_owned(),
        at: record.event_time.timestamp(),
        version: record.s3.object.sequencer.clone().filter(|s| !s.is_empty()),
    })
}

/// The part of an SQS batch the indexer reads. (`aws_lambda_events`'
/// `sqs` feature has the whole type, but brings `serde_with` and some twenty
/// crates for these two fields.)
#[derive(Debug, Deserialize)]
struct SqsBatch {
    #[serde(rename = "Records")]
    records: Vec<SqsMessage>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SqsMessage {
    #[serde(default)]
    message_id: Option<String>,
    #[serde(default)]
    body: Option<String>,
}

/// One message of an SQS batch: its id and the changes its notification
/// names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The message's `messageId` (SQS always sends one).
    pub id: Option<String>,
    /// The changes its S3 notification names; none for a message that is
    /// not an S3 notification, or whose records are all left out.
    pub changes: Vec<Change>,
}

/// An invocation's payload, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// An SQS batch of S3 notifications, one [`Message`] per SQS message,
    /// in the batch's order.
    Batch(Vec<Message>),
    /// One S3 notification, invoked directly: its changes.
    Notification(Vec<Change>),
}

impl Payload {
    /// Every change the payload names, in order.
    #[must_use]
    pub fn changes(&self) -> Vec<Change> {
        match self {
            Self::Batch(messages) => messages.iter().flat_map(|m| m.changes.iter().cloned()).collect(),
            Self::Notification(changes) => changes.clone(),
        }
    }
}

/// Reads an invocation's payload: an SQS batch whose messages are S3
/// notifications (a message that is not one, such as the `s3:TestEvent` S3
/// sends when the notification is set up, names no change and is logged),
/// or one S3 notification.
///
/// # Errors
/// A payload that is neither (the message names what was expected).
pub fn read_payload(payload: &Value, location: &StoreLocation) -> Result<Payload, Error> {
    let source = payload.pointer("/Records/0/eventSource").and_then(Value::as_str);
    if source == Some("aws:sqs") {
        let batch: SqsBatch = serde_json::from_value(payload.clone())?;
        let messages = batch
            .records
            .into_iter()
            .map(|message| {
                let body = message.body.as_deref().unwrap_or_default();
                let changes = match serde_json::from_str::<S3Event>(body) {
                    Ok(event) => s3_changes(&event, location),
                    Err(e) => {
                        tracing::info!(
                            message_id = message.message_id.as_deref().unwrap_or_default(),
                            error = %e,
                            "an SQS message that is not an S3 notification; skipped"
                        );
                        Vec::new()
                    }
                };
                Message { id: message.message_id, changes }
            })
            .collect();
        return Ok(Payload::Batch(messages));
    }
    let event: S3Event = serde_json::from_value(payload.clone())
        .map_err(|e| format!("the payload is neither an SQS batch nor an S3 notification: {e}"))?;
    Ok(Payload::Notification(s3_changes(&event, location)))
}

/// The ids of the messages whose changes were not applied (some change
/// names a node of an account that failed), each once, in the batch's
/// order; none when nothing failed.
///
/// # Errors
/// A failed message without an id: it cannot be named, so the whole batch
/// must come back.
pub fn failed_messages<'a>(messages: &'a [Message], failure: Option<&ApplyError>) -> Result<Vec<&'a str>, Error> {
    let Some(failure) = failure else { return Ok(Vec::new()) };
    let mut ids: Vec<&str> = Vec::new();
    for message in messages.iter().filter(|m| m.changes.iter().any(|c| failure.failed_change(c))) {
        let id =
            message.id.as_deref().filter(|id| !id.is_empty()).ok_or("an SQS message without a messageId failed")?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Applies one invocation's notifications to the index and answers with
/// the run's totals (`{"indexed", "removed", "unchanged", "ignored"}`, of
/// the accounts whose changes were applied); an SQS batch's answer is also
/// Lambda's partial batch response, `"batchItemFailures"`: one
/// `{"itemIdentifier": messageId}` per message whose changes touched an
/// account that failed (empty when none did), so that only those messages
/// are delivered again (a retry is safe: the indexer reads the current
/// state). Logged as one line with the totals and how many accounts and
/// messages failed, and one line per failed account with its error (the
/// error's detail goes to the log only).
///
/// # Errors
/// An unreadable payload; for an S3 notification invoked directly, an
/// account whose changes were not applied (the other accounts' changes
/// are committed); for an SQS batch, a failed message without a
/// `messageId`. The invocation fails, and all its messages are delivered
/// again.
pub async fn handle(app: &App, event: LambdaEvent<Value>) -> Result<Value, Error> {
    let location = app.config.store_location()?;
    let payload = read_payload(&event.payload, &location)?;
    let changes = payload.changes();
    let (report, failure) = match apply(app, &changes).await {
        Ok(report) => (report, None),
        Err(failure) => (failure.report.clone(), Some(failure)),
    };
    let failed = failure.as_ref().map_or(&[][..], |f| &f.failed[..]);
    for AccountFailure { account, error } in failed {
        tracing::error!(%account, %error, "an account's changes were not applied");
    }
    let failed_ids = match &payload {
        Payload::Batch(messages) => failed_messages(messages, failure.as_ref()),
        Payload::Notification(_) => Ok(Vec::new()),
    };
    tracing::info!(
        changes = changes.len(),
        indexed = report.indexed,
        removed = report.removed,
        unchanged = report.unchanged,
        ignored = report.ignored,
        failed_accounts = failed.len(),
        failed_messages = failed_ids.as_ref().map_or(0, Vec::len),
        "s3 event"
    );
    let mut answer = json!({
        "indexed": report.indexed,
        "removed": report.removed,
        "unchanged": report.unchanged,
        "ignored": report.ignored,
    });
    match (&payload, failure) {
        (Payload::Batch(_), _) => {
            answer["batchItemFailures"] = failed_ids?.into_iter().map(|id| json!({ "itemIdentifier": id })).collect();
        }
        (Payload::Notification(_), Some(failure)) => return Err(failure.into()),
        (Payload::Notification(_), None) => {}
    }
    Ok(answer)
}

/// Builds the [`App`] from the environment and serves S3 event
/// notifications (in SQS batches, or one at a time) until the runtime
/// stops.
///
/// # Errors
/// An init error (bad configuration, unreachable store) or a runtime error.
pub async fn run() -> Result<(), Error> {
    run_events(|app, event| async move { handle(&app, event).await }).await
}

/// The event functions' runtime loop (the indexer's, the extractor's):
/// builds the [`App`] from the environment, then hands every invocation's
/// payload to `handler` until the runtime stops.
///
/// # Errors
/// An init error (bad configuration, unreachable store) or a runtime error.
pub async fn run_events<F, Fut>(handler: F) -> Result<(), Error>
where
    F: Fn(Arc<App>, LambdaEvent<Value>) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = Result<Value, Error>> + Send,
{
    crate::init_tracing();
    let config = Config::from_env()?;
    let app = Arc::new(App::new(config).await?);
    let (app, handler) = (&app, &handler);
    lambda_http::lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        handler(Arc::clone(app), event).await
    }))
    .await
}

#[cfg(test)]
mod tests {
    use skald::identity::AccountId;
    use skald::index::IndexError;
    use skald::indexer::IndexerReport;
    use skald::ingest::IngestError;

    use super::*;

    fn notification(keys: &[&str]) -> String {
        let records: Vec<Value> = keys
            .iter()
            .map(|key| {
                json!({
                    "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
                    "eventTime": "2026-11-30T06:00:00Z", "eventName": "ObjectCreated:Put",
                    "userIdentity": {"principalId": "P"}, "requestParameters": {"sourceIPAddress": "127.0.0.1"},
                    "responseElements": {},
                    "s3": {"s3SchemaVersion": "1.0", "configurationId": "indexer",
                        "bucket": {"name": "store", "ownerIdentity": {"principalId": "O"}, "arn": "arn:aws:s3:::store"},
                        "object": {"key": key, "size": 1, "eTag": "e", "sequencer": "0"}}
                })
            })
            .collect();
        json!({ "Records": records }).to_string()
    }

    fn batch(messages: &[(Option<&str>, String)]) -> Value {
        let records: Vec<Value> = messages
            .iter()
            .map(|(id, body)| json!({"messageId": id, "body": body, "eventSource": "aws:sqs"}))
            .collect();
        json!({ "Records": records })
    }

    fn failure(accounts: &[&str]) -> ApplyError {
        let failed = accounts
            .iter()
            .map(|a| AccountFailure {
                account: AccountId::new(a).expect("account"),
                error: IngestError::Index(IndexError::Corrupt("manifest".into())),
            })
            .collect();
        ApplyError { report: IndexerReport::default(), failed }
    }

    #[test]
    fn a_batch_keeps_each_message_with_its_changes() {
        let location = StoreLocation::Local("/store".into());
        let payload = batch(&[
            (Some("m1"), notification(&["accounts/a/tree/resources/x.md", "accounts/b/tree/resources/y.md"])),
            (Some("m2"), r#"{"Event": "s3:TestEvent"}"#.to_owned()),
            (Some("m3"), notification(&["accounts/a/tree/resources/z.md"])),
        ]);
        let Ok(Payload::Batch(messages)) = read_payload(&payload, &location) else { panic!("a batch") };
        let keys: Vec<(Option<&str>, Vec<&str>)> =
            messages.iter().map(|m| (m.id.as_deref(), m.changes.iter().map(|c| c.key.as_str()).collect())).collect();
        assert_eq!(
            keys,
            [
                (Some("m1"), vec!["accounts/a/tree/resources/x.md", "accounts/b/tree/resources/y.md"]),
                (Some("m2"), vec![]),
                (Some("m3"), vec!["accounts/a/tree/resources/z.md"]),
            ]
        );
        assert_eq!(Payload::Batch(messages).changes().len(), 3);
    }

    #[test]
    fn only_messages_touching_a_failed_account_fail() {
        let location = StoreLocation::Local("/store".into());
        let payload = batch(&[
            (Some("m1"), notification(&["accounts/a/tree/resources/x.md", "accounts/b/tree/resources/y.md"])),
            (Some("m2"), r#"{"Event": "s3:TestEvent"}"#.to_owned()),
            (Some("m3"), notification(&["accounts/a/tree/resources/z.md"])),
            (Some("m4"), notification(&["accounts/b/index/manifest.json"])),
            (Some("m1"), notification(&["accounts/b/tree/resources/y.md"])),
            (None, notification(&["accounts/c/tree/resources/w.md"])),
        ]);
        let Ok(Payload::Batch(messages)) = read_payload(&payload, &location) else { panic!("a batch") };
        assert!(failed_messages(&messages, None).expect("named").is_empty());
        assert_eq!(failed_messages(&messages, Some(&failure(&["b"]))).expect("named"), ["m1"]);
        assert_eq!(failed_messages(&messages, Some(&failure(&["a"]))).expect("named"), ["m1", "m3"]);
        assert_eq!(failed_messages(&messages, Some(&failure(&["d"]))).expect("named"), Vec::<&str>::new());
        // A failed message SQS did not name cannot be reported alone.
        assert!(failed_messages(&messages, Some(&failure(&["c"]))).is_err());
    }
}
