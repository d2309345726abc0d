#!/usr/bin/env bash
# Installs, idempotently, the pinned client-side tools that tests/mcp/conformance.sh
# and tests/mcp/client.py need, under .skald/mcp/ (git-ignored):
#
#   .skald/mcp/node/                         Node 22 (npm package `node`; the machine's is 20)
#   .skald/mcp/conformance-0.1.16/           @modelcontextprotocol/conformance (stable)
#   .skald/mcp/conformance-0.2.0-alpha.12/   @modelcontextprotocol/conformance (2026-07-28 scenarios)
#   .skald/mcp/inspector-2.12.0/             @modelcontextprotocol/inspector (CLI mode)
#   .skald/mcp/venv/                         Python venv with mcp==2.3.0
#
# Every npm tool is installed with `npm ci` from the exact lockfile in
# tests/mcp/npm/<dir>/, the Python tree from tests/mcp/requirements.lock, so a
# rerun installs the same bytes. Only the package registries are contacted.
# A tool whose lockfile has not changed since its last install is skipped.
#
# Usage: tests/mcp/install.sh            (SKALD_MCP_TOOLS=DIR installs elsewhere)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DEST=${SKALD_MCP_TOOLS:-$REPO/.skald/mcp}
# shellcheck source=versions.sh
. "$HERE/versions.sh"

say() { printf '[mcp-install] %s\n' "$*"; }
die() { printf '[mcp-install] ERROR: %s\n' "$*" >&2; exit 1; }
run() { say "+ $*"; "$@" || die "command failed (exit $?): $*"; }

command -v npm >/dev/null || die "npm not found (the system Node's npm installs the pinned Node 22)"
command -v python3 >/dev/null || die "python3 not found"
command -v sha256sum >/dev/null || die "sha256sum not found"

mkdir -p "$DEST"
say "installing into $DEST"

# npm_tool DIR: npm ci DEST/DIR from tests/mcp/npm/DIR/{package.json,package-lock.json}.
npm_tool() {
  local name=$1 src=$HERE/npm/$1 dst=$DEST/$1
  [ -f "$src/package.json" ] && [ -f "$src/package-lock.json" ] || die "missing lockfile in $src"
  local want have=""
  want=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
  [ -f "$dst/.installed" ] && have=$(cat "$dst/.installed")
  if [ "$want" = "$have" ] && [ -d "$dst/node_modules" ]; then
    say "$name: up to date (lockfile unchanged)"
    return
  fi
  say "$name: installing from tests/mcp/npm/$name/package-lock.json"
  rm -rf "$dst"
  mkdir -p "$dst"
  cp "$src/package.json" "$src/package-lock.json" "$dst/"
  run npm ci --prefix "$dst" --no-audit --no-fund --loglevel=error
  echo "$want" > "$dst/.installed"
}

for d in $MCP_NPM_DIRS; do npm_tool "$d"; done

NODE_BIN=$DEST/node/node_modules/.bin
got=$("$NODE_BIN/node" --version) || die "the installed node does not run"
[ "$got" = "v$MCP_NODE_VERSION" ] || die "node is $got, expected v$MCP_NODE_VERSION"
say "node: $got ($NODE_BIN/node)"
export PATH="$NODE_BIN:$PATH"

check_bin() { # check_bin DIR BIN EXPECTED-VERSION
  local bin=$DEST/$1/node_modules/.bin/$2 got
  [ -x "$bin" ] || die "$bin missing after install"
  got=$(node -p "require('$DEST/$1/node_modules/$3/package.json').version") || die "cannot read $3 version"
  [ "$got" = "$4" ] || die "$1: $3 is $got, expected $4"
  say "$1: $3@$got ($bin)"
}
check_bin "conformance-$MCP_CONFORMANCE_STABLE" conformance @modelcontextprotocol/conformance "$MCP_CONFORMANCE_STABLE"
check_bin "conformance-$MCP_CONFORMANCE_ALPHA" conformance @modelcontextprotocol/conformance "$MCP_CONFORMANCE_ALPHA"
check_bin "inspector-$MCP_INSPECTOR_VERSION" mcp-inspector @modelcontextprotocol/inspector "$MCP_INSPECTOR_VERSION"

# Python: a venv with the exact tree of requirements.lock (no resolver: --no-deps, then pip check).
VENV=$DEST/venv
want=$(cat "$HERE/requirements.lock" | sha256sum | cut -d' ' -f1)
have=""
[ -f "$VENV/.installed" ] && have=$(cat "$VENV/.installed")
if [ "$want" = "$have" ] && [ -x "$VENV/bin/python" ]; then
  say "venv: up to date (requirements.lock unchanged)"
else
  say "venv: installing from tests/mcp/requirements.lock"
  rm -rf "$VENV"
  run python3 -m venv "$VENV"
  run "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$HERE/requirements.lock"
  run "$VENV/bin/python" -m pip check
  echo "$want" > "$VENV/.installed"
fi
got=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))') || die "mcp does not import"
[ "$got" = "$MCP_PYTHON_SDK_VERSION" ] || die "python mcp is $got, expected $MCP_PYTHON_SDK_VERSION"
"$VENV/bin/python" -c 'from mcp.client.streamable_http import streamable_http_client' \
  || die "mcp.client.streamable_http.streamable_http_client does not import"
say "venv: mcp==$got ($VENV/bin/python)"

say "done"
