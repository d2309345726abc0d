//! Skald's MCP surface (`POST /mcp`): the routes agents use, as MCP tools
//! over Streamable HTTP — stateless, JSON responses — for hosts that speak
//! only MCP.
//!
//! [`handle`] takes a library request (as every function binary does) and
//! hands it to one process-wide rmcp [`StreamableHttpService`] run without
//! sessions ([`NeverSessionManager`], `legacy_session_mode = false`) and
//! with JSON responses, so every POST is answered by one JSON body (a
//! Lambda cannot hold a stream): `initialize` → 200, notifications → 202,
//! `tools/list` / `tools/call` / `ping` → 200; requests of the 2026-07-28
//! revision work without `initialize` (`server/discover`); `GET` and
//! `DELETE` → 405. Protocol versions: 2025-06-18, 2025-11-25, 2026-07-28.
//!
//! Each tool ([`tools`]) is a REST call in-process: it builds the REST
//! route's request from its arguments with the MCP request's headers
//! (identity headers, `Authorization`, `X-API-Key`, `X-Client-Timeout-Ms`)
//! and extensions (authorizer claims, the invocation deadline), so
//! validation, tenancy, the deadline and errors are exactly REST's; a REST
//! error is an `isError` result, an unknown tool a JSON-RPC error.
//!
//! # Host and Origin
//!
//! rmcp checks `Host` against an allow-list (loopback by default) to stop
//! DNS rebinding. Behind API Gateway `Host` is the gateway's domain, a
//! custom domain or a function URL, none of which the function knows, so the
//! `Host` check is off: any host is served (a `Host` header, or an absolute
//! request URI, is still required). What a rebinding attack needs is a
//! victim's browser sending the request, and a browser always names the
//! page's origin in `Origin` on a POST; agent hosts (Claude Code, Codex,
//! SDK clients) send none. So `Origin`, when present, must be a loopback
//! origin (`http(s)://localhost`, `127.0.0.1`, `[::1]`, any port — local
//! tools such as the MCP Inspector) or one of the configuration's
//! `mcp.allowed_origins` (also `SKALD_MCP_ALLOWED_ORIGINS`, comma-separated,
//! e.g. `https://app.example.com:443`); any other is a 403 before any tool
//! runs.
//! A rebinding page has the attacker's origin, so it is refused even when
//! the server listens on loopback (`cargo lambda watch`).
//!
//! No response advertises OAuth discovery: a missing credential is a tool's
//! `isError` result (REST's 401 message), never an HTTP 401 with
//! `WWW-Authenticate`, which would make hosts such as Claude Code ignore the
//! static headers they were configured with.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use skald::api::error::ApiError;
use skald::api::error_response;
use skald::app::App;
use skald::deadline::Deadline;

mod args;
mod render;
mod rest;
pub mod tools;

/// The path the function serves.
pub const PATH: &str = "/mcp";

/// The protocol revisions served.
pub const PROTOCOL_VERSIONS: &[ProtocolVersion] =
    &[ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28];

/// The origins always allowed: local tools on loopback, any port.
pub const LOOPBACK_ORIGINS: &[&str] = &[
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://[::1]:*",
    "https://[::1]:*",
];

/// What a tool needs of the request that carried it, attached by
/// [`handle`] as an extension (it reaches the tool inside the request's
/// `http::request::Parts`).
#[derive(Clone)]
struct Admission {
    /// The process's app.
    app: Arc<App>,
    /// The MCP request's deadline, fixed on arrival (`None` when
    /// `X-Client-Timeout-Ms` is malformed: the REST call then reports it).
    deadline: Option<Deadline>,
}

type Service = StreamableHttpService<Server, NeverSessionManager>;

/// One service per process: built on the first request from that request's
/// app configuration (a function has one app per process; nothing but
/// settings, and the tools' schemas are parsed on first use).
static SERVICE: OnceLock<Service> = OnceLock::new();

/// The transport configuration: stateless, JSON responses, no SSE keep-alive
/// or retry, any `Host`, `Origin` limited to loopback plus `extra_origins`,
/// and no body limit of its own (the configured limit is checked first, by
/// [`handle`]).
#[must_use]
pub fn config(extra_origins: &[String]) -> StreamableHttpServerConfig {
    let origins = LOOPBACK_ORIGINS.iter().map(|o| (*o).to_owned()).chain(extra_origins.iter().cloned());
    StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_sse_retry(None)
        .disable_allowed_hosts()
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(usize::MAX)
}

/// Handles one request to `/mcp`; never panics on input. Other paths are a
/// 404 and bodies over the configured limit a 413, in REST's envelope;
/// everything else is rmcp's answer (JSON-RPC, or a plain-text 4xx from the
/// transport: 400 without `Host`, 403 for a refused `Origin`, 405 for
/// `GET` / `DELETE`, 406 without both `application/json` and
/// `text/event-stream` in `Accept`, 415 for a body that is not JSON).
pub async fn handle(app: &Arc<App>, request: Request<Bytes>) -> Response<String> {
    let started = Instant::now();
    if request.uri().path().trim_end_matches('/') != PATH {
        return error_response(&ApiError::NotFound(format!("no route {} {}", request.method(), request.uri().path())));
    }
    let limit = app.config.limits.max_body_bytes;
    if request.body().len() > limit {
        return error_response(&ApiError::PayloadTooLarge { size: request.body().len(), limit });
    }
    let deadline = skald::api::request_deadline(app, &request, started).ok();
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(Admission { app: Arc::clone(app), deadline });
    let service = SERVICE.get_or_init(|| {
        let config = config(&app.config.mcp.allowed_origins);
        StreamableHttpService::new(|| Ok(Server), Arc::new(NeverSessionManager::default()), config)
    });
    let response = service.handle(Request::from_parts(parts, Full::new(body))).await;
    let (parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    Response::from_parts(parts, String::from_utf8_lossy(&bytes).into_owned())
}

/// The MCP server: no state of its own (the app arrives with each request).
#[derive(Debug, Clone, Copy)]
struct Server;

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("skald", skald::api::content::VERSION)
                    .with_title("Skald")
                    .with_description("Context assembly for agent memory (OpenViking's protocol)"),
            )
            .with_instructions(tools::INSTRUCTIONS)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::list().to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::list().iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parts = context
            .extensions
            .get::<http::request::Parts>()
            .ok_or_else(|| ErrorData::internal_error("the HTTP request did not reach the tool", None))?;
        let admission = parts
            .extensions
            .get::<Admission>()
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("the request was not admitted", None))?;
        let started = Instant::now();
        let name = request.name.clone();
        let result = tools::call(&admission.app, parts, admission.deadline.as_ref(), &name, request.arguments).await?;
        tracing::info!(
            tool = %name,
            is_error = result.is_error.unwrap_or(false),
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "tool call"
        );
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_host_and_loopback_or_listed_origins() {
        let config = config(&["https://app.example.com:443".into(), "https://other.example:*".into()]);
        assert!(config.allowed_hosts.is_empty(), "the Host check is off: {:?}", config.allowed_hosts);
        assert_eq!(config.allowed_origins.len(), LOOPBACK_ORIGINS.len() + 2);
        assert!(config.allowed_origins.iter().any(|o| o == "http://localhost:*"));
        assert!(
            config.allowed_origins.ends_with(&["https://app.example.com:443".into(), "https://other.example:*".into()])
        );
        assert!(!config.legacy_session_mode && config.json_response && config.sse_keep_alive.is_none());
        assert!(config.sse_retry.is_none());
    }

    #[test]
    fn the_three_revisions_are_served() {
        let served = Server.supported_protocol_versions();
        let versions: Vec<&str> = served.iter().map(ProtocolVersion::as_str).collect();
        assert_eq!(versions, ["2025-06-18", "2025-11-25", "2026-07-28"]);
    }
}
