//! The `find` function: `POST /api/v1/search/find` — one vector search, no
//! LLM, no content read (unless `read_content`).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    skald_lambda::run(|app, request| async move { skald::api::find::handle(&app, request).await }).await
}
