//! The indexer's edge: S3 event notifications in, [`skald::indexer`]
//! changes out (feature `s3-events`, linked by the `indexer` function only).
//!
//! Deployed, S3 sends its notifications to an SQS queue and the function
//! takes them in batches (one index commit per batch, a bounded number of
//! invocations at once); a notification invoked directly (as
//! `cargo lambda invoke` does locally) is taken as well.

use std::sync::Arc;

use aws_lambda_events::s3::{S3Event, S3EventRecord};
use lambda_http::{Error, LambdaEvent, service_fn};
use serde::Deserialize;
use serde_json::{Value, json};
use skald::app::App;
use skald::config::Config;
use skald::indexer::{Change, apply};
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
    Some(Change { key: relative.to_owned(), at: record.event_time.timestamp() })
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

/// The changes an invocation's payload names: an SQS batch whose messages
/// are S3 notifications (a message that is not one, such as the
/// `s3:TestEvent` S3 sends when the notification is set up, is skipped and
/// logged), or one S3 notification.
///
/// # Errors
/// A payload that is neither (the message names what was expected).
pub fn payload_changes(payload: &Value, location: &StoreLocation) -> Result<Vec<Change>, Error> {
    let source = payload.pointer("/Records/0/eventSource").and_then(Value::as_str);
    if source == Some("aws:sqs") {
        let batch: SqsBatch = serde_json::from_value(payload.clone())?;
        let mut changes = Vec::new();
        for message in &batch.records {
            let body = message.body.as_deref().unwrap_or_default();
            match serde_json::from_str::<S3Event>(body) {
                Ok(event) => changes.extend(s3_changes(&event, location)),
                Err(e) => tracing::info!(
                    message_id = message.message_id.as_deref().unwrap_or_default(),
                    error = %e,
                    "an SQS message that is not an S3 notification; skipped"
                ),
            }
        }
        return Ok(changes);
    }
    let event: S3Event = serde_json::from_value(payload.clone())
        .map_err(|e| format!("the payload is neither an SQS batch nor an S3 notification: {e}"))?;
    Ok(s3_changes(&event, location))
}

/// Applies one invocation's notifications to the index and answers with
/// the run's totals (`{"indexed", "removed", "unchanged", "ignored"}`),
/// logged as one line.
///
/// # Errors
/// An unreadable payload, or a store, index or embedder failure: the
/// invocation fails and its messages are delivered again (a retry is safe:
/// the indexer reads the current state).
pub async fn handle(app: &App, event: LambdaEvent<Value>) -> Result<Value, Error> {
    let location = app.config.store_location()?;
    let changes = payload_changes(&event.payload, &location)?;
    let report = apply(app, &changes).await?;
    tracing::info!(
        changes = changes.len(),
        indexed = report.indexed,
        removed = report.removed,
        unchanged = report.unchanged,
        ignored = report.ignored,
        "s3 event"
    );
    Ok(json!({
        "indexed": report.indexed,
        "removed": report.removed,
        "unchanged": report.unchanged,
        "ignored": report.ignored,
    }))
}

/// Builds the [`App`] from the environment and serves S3 event
/// notifications (in SQS batches, or one at a time) until the runtime
/// stops.
///
/// # Errors
/// An init error (bad configuration, unreachable store) or a runtime error.
pub async fn run() -> Result<(), Error> {
    crate::init_tracing();
    let config = Config::from_env()?;
    let app = Arc::new(App::new(config).await?);
    let app = &app;
    lambda_http::lambda_runtime::run(service_fn(
        move |event: LambdaEvent<Value>| async move { handle(app, event).await },
    ))
    .await
}
