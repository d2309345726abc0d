//! The `search-context` function: `POST /api/v1/search/search` — list mode
//! (exactly `find` without a session) and context mode (the assembled,
//! budgeted block).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    skald_lambda::run(|app, request| async move { skald::api::search::handle(&app, request).await }).await
}
