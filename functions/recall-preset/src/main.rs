//! The `recall-preset` function: `POST /api/v1/search/recall` — recall's
//! defaults and the v1 aliases, then exactly the context-mode path.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    skald_lambda::run(|app, request| async move { skald::api::recall::handle(&app, request).await }).await
}
