//! The `mcp` function: `POST /mcp` (GET and DELETE: 405) — find, search,
//! recall, bootstrap, read, list and health as MCP tools.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    skald_lambda::run(|app, request| async move { skald_mcp::handle(&app, request).await }).await
}
