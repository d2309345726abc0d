#!/usr/bin/env bash
# Run the plugin conformance harness against a running server.
#
#   tests/plugins/run.sh http://127.0.0.1:PORT [conformance.mjs options...]
#
# The OpenViking plugins are taken from ../shared/anchors/openviking/plugins
# relative to the repository root (CI clones shared/ beside the repo), or from
# $PLUGINS_DIR when set.
set -euo pipefail

if [ $# -lt 1 ] || [ -z "${1:-}" ]; then
  echo "usage: $0 URL [conformance.mjs options...]" >&2
  exit 2
fi
url=$1
shift

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
plugins=${PLUGINS_DIR:-$repo/../shared/anchors/openviking/plugins}

if [ ! -d "$plugins/claude-code-memory-plugin" ] || [ ! -d "$plugins/codex-memory-plugin" ]; then
  echo "run.sh: no OpenViking plugins at $plugins (expected shared/ beside the repo, or set PLUGINS_DIR)" >&2
  exit 2
fi
if ! command -v node >/dev/null 2>&1; then
  echo "run.sh: node is not on PATH (Node 20 or newer is needed)" >&2
  exit 2
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "run.sh: node $(node --version) is too old; Node 20 or newer is needed" >&2
  exit 2
fi

exec node "$here/conformance.mjs" --url "$url" --plugins "$plugins" "$@"
