//! The `sessions` function: `POST /api/v1/sessions`, `POST
//! /api/v1/sessions/{id}/messages`, `POST /api/v1/sessions/{id}/messages/batch`,
//! `GET /api/v1/sessions/{id}` — the turn clock and context for recall.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    skald_lambda::run(|app, request| async move { skald::api::sessions::handle(&app, request).await }).await
}
