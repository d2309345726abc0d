//! The `extractor` function: S3 notifications of commit tasks run model
//! extraction for them, turning archived conversations into memories (no
//! HTTP route).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    skald_lambda::extractor::run().await
}
