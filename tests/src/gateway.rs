//! The local gateway's dispatch: a function's name, as the watch router of
//! the root `Cargo.toml` names it, to the library handler its binary
//! serves (`tests/src/bin/local_gateway.rs`). A test checks that every
//! function the router names is here.

use std::sync::Arc;

use bytes::Bytes;
use skald::app::App;

/// Hands `request` to the handler of `function`; `None` for a name that
/// is no HTTP function of the service.
pub async fn dispatch(function: &str, app: Arc<App>, request: http::Request<Bytes>) -> Option<http::Response<String>> {
    Some(match function {
        "find" => skald::api::find::handle(&app, request).await,
        "search-context" => skald::api::search::handle(&app, request).await,
        "recall-preset" => skald::api::recall::handle(&app, request).await,
        "bootstrap" => skald::api::bootstrap::handle(&app, request).await,
        "sessions" => skald::api::sessions::handle(&app, request).await,
        "content" => skald::api::content::handle(&app, request).await,
        "mcp" => skald_mcp::handle(&app, request).await,
        _ => return None,
    })
}
