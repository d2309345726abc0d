//! The `bootstrap` function: `POST /api/v1/search/bootstrap` — exactly the
//! search route's `mode = "bootstrap"` path. Never embeds.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    skald_lambda::run(|app, request| async move { skald::api::bootstrap::handle(&app, request).await }).await
}
