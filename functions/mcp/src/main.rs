//! The `mcp` function: `POST /mcp` (GET and DELETE: 405) — find, search,
//! recall, bootstrap, read, list and health as MCP tools.

fn main() {}
