#!/usr/bin/env bash
# Real clients against a local Skald: OpenViking's Claude Code and Codex
# plugins (their hooks, run with Node straight from
# ../shared/anchors/openviking/plugins), MCP's conformance suite and
# Inspector, and the Python MCP client calling every tool.
#
#   scripts/conformance.sh        # after `cargo test` (uses its debug build)
#
# It ingests the demo corpus into a fresh local store, serves every route on
# a free loopback port with `local_gateway` (the watch router of Cargo.toml,
# each request through the Lambda edge), runs the three suites and stops
# the server. Each suite prints `N passed, N failed`; any failure fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

work=$(mktemp -d)
gateway_pid=""
cleanup() {
  if [ -n "$gateway_pid" ]; then kill "$gateway_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/config.json" <<EOF
{
  "store": "$work/store",
  "identity": { "mode": "dev", "default_account": "default", "default_user": "default" },
  "embedding": { "provider": "use-m3", "model_dir": "$root/.skald/models/use-m3" }
}
EOF
cargo build --quiet --locked -p skald-cli -p skald-tests --bin skald --bin local_gateway
target/debug/skald --config "$work/config.json" ingest samplconfigs/demo >/dev/null

SKALD_CONFIG="$work/config.json" target/debug/local_gateway >"$work/gateway.log" 2>&1 &
gateway_pid=$!
url=""
for _ in $(seq 1 100); do
  url=$(sed -n 's/^listening on //p' "$work/gateway.log")
  [ -n "$url" ] && break
  kill -0 "$gateway_pid" 2>/dev/null || { cat "$work/gateway.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "local_gateway did not start" >&2; cat "$work/gateway.log" >&2; exit 1; }
echo "serving the demo on $url" >&2

status=0
echo "== OpenViking plugins (Claude Code, Codex) against $url" >&2
tests/plugins/run.sh "$url" || status=1

echo "== MCP: conformance suite and Inspector against $url/mcp" >&2
tests/mcp/install.sh >&2
tests/mcp/conformance.sh "$url/mcp" || status=1

echo "== MCP: the Python client calling every tool" >&2
"${SKALD_MCP_TOOLS:-$root/.skald/mcp}/venv/bin/python" tests/mcp/client.py "$url/mcp" || status=1

if [ "$status" -ne 0 ]; then
  echo "the gateway's log:" >&2
  tail -n 50 "$work/gateway.log" >&2
fi
exit "$status"
