//! The `content` function: `GET /health`, `/api/v1/system/status`,
//! `/api/v1/content/{read,abstract,overview}` and `/api/v1/fs/{ls,stat}` —
//! what agents' plugins probe, and the expansion of the URIs a block hands out.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    skald_lambda::run(|app, request| async move { skald::api::content::handle(&app, request).await }).await
}
