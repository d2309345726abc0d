//! The indexer's edge: S3 event notifications in, [`skald::indexer`]
//! changes out (feature `s3-events`, linked by the `indexer` function only).

use std::sync::Arc;

use aws_lambda_events::s3::{S3Event, S3EventRecord};
use lambda_http::{Error, LambdaEvent, service_fn};
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

/// Applies one notification to the index and answers with the run's totals
/// (`{"indexed", "removed", "unchanged", "ignored"}`), logged as one line.
///
/// # Errors
/// A store, index or embedder failure: the invocation fails, and S3's
/// asynchronous invocation retries it (a retry is safe: the indexer reads
/// the current state).
pub async fn handle(app: &App, event: LambdaEvent<S3Event>) -> Result<Value, Error> {
    let location = app.config.store_location()?;
    let changes = s3_changes(&event.payload, &location);
    let report = apply(app, &changes).await?;
    tracing::info!(
        records = event.payload.records.len(),
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
/// notifications until the runtime stops.
///
/// # Errors
/// An init error (bad configuration, unreachable store) or a runtime error.
pub async fn run() -> Result<(), Error> {
    crate::init_tracing();
    let config = Config::from_env()?;
    let app = Arc::new(App::new(config).await?);
    let app = &app;
    lambda_http::lambda_runtime::run(service_fn(
        move |event: LambdaEvent<S3Event>| async move { handle(app, event).await },
    ))
    .await
}
