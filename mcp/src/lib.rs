//! Skald's MCP surface (`POST /mcp`): the routes agents use, as MCP tools
//! over Streamable HTTP — stateless, JSON responses — for hosts that speak
//! only MCP.
