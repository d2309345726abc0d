# Pinned versions of the client-side MCP test tools (sourced by install.sh
# and conformance.sh). Each npm tool also has an exact lockfile under npm/<dir>/,
# and Python's whole dependency tree is pinned in requirements.lock.
MCP_NODE_VERSION=22.23.3                    # conformance and the Inspector need Node >= 22.19
MCP_CONFORMANCE_STABLE=0.1.16               # server-initialize, ping, tools-list
MCP_CONFORMANCE_ALPHA=0.2.0-alpha.12        # --spec-version 2026-07-28: server-stateless, http-header-validation
MCP_INSPECTOR_VERSION=2.12.0                # --cli ... --method tools/list --strict
MCP_PYTHON_SDK_VERSION=2.3.0                # client.py (streamable_http_client)

# name of each npm lock directory under tests/mcp/npm/ (and under the install dir)
MCP_NPM_DIRS="node conformance-$MCP_CONFORMANCE_STABLE conformance-$MCP_CONFORMANCE_ALPHA inspector-$MCP_INSPECTOR_VERSION"
