//! The `indexer` function: S3 `ObjectCreated` / `ObjectRemoved` event
//! notifications on the store bucket keep each account's vector index in
//! step with its content tree (no HTTP route).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    skald_lambda::s3_events::run().await
}
