#!/usr/bin/env bash
# Runs every check CI runs: formatting, clippy (warnings denied), the whole
# test suite — with a local S3-protocol server (moto) for the S3 store and
# index suites, started here and stopped on exit — the real clients'
# conformance runs (scripts/conformance.sh), scripts/run-local.sh to its
# ready line with every route's first request timed, and the template lint.
set -euo pipefail
cd "$(dirname "$0")/.."

# moto's S3 server (the tests also start their own when this is unset).
if ! python3 -c "import moto.server, flask, werkzeug" >/dev/null 2>&1; then
  echo "installing moto[server] from PyPI…" >&2
  python3 -m pip install --quiet "moto[server]>=5.0"
fi

cargo fmt --all -- --check
# The evaluation sets' files (questions, evidence, the parts answers need).
python3 tests/eval/check.py
python3 tests/eval/retrieval/check.py
cargo clippy --workspace --all-targets --locked -- -D warnings

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp)
# moto, serving one request at a time so conditional writes are atomic as on S3.
python3 tests/s3_server.py "$port" >"$log" 2>&1 &
moto_pid=$!
trap 'kill $moto_pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 100); do
  if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null; then break; fi
  sleep 0.2
done
export SKALD_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
export AWS_EC2_METADATA_DISABLED=true

# The USE-m3 model for the parity and retrieval-quality suites (idempotent).
scripts/setup-model.sh

# Everything but the append crowds, which run on their own next (their
# load would slow every other suite's S3 calls).
cargo test --workspace --locked -- --skip append_load::
cargo test --locked -p skald-tests --test it -- append_load::

# The route suites once more with every account on the S3 Vectors index
# backend (the tests' in-process emulator, driven by the real client).
SKALD_TEST_INDEX_BACKEND=s3vectors cargo test --locked -p skald-tests --test it -- \
  find_api:: search_api:: bootstrap_api:: content_api:: recall_api:: keyword_search:: \
  mcp_tools:: sessions_api:: golden:: llm_stages::

# The real clients against a local Skald: OpenViking's plugins, MCP's
# conformance suite and Inspector, the Python MCP client.
scripts/conformance.sh

# A newcomer's first minutes: scripts/run-local.sh, as the README gives it,
# to its ready line (its own build of the functions, the demo ingest), then
# the first request to every route within 1 s and OpenViking's 404 for any
# path no function serves (tests/local/first_requests.py).
local_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
local_log=$(mktemp)
SKALD_PORT=$local_port setsid scripts/run-local.sh >"$local_log" 2>&1 &
local_pid=$!
trap 'kill -TERM $local_pid 2>/dev/null || true; kill $moto_pid 2>/dev/null || true; rm -f "$log" "$local_log"' EXIT
ready=""
for _ in $(seq 1 1800); do
  ready=$(grep '^ready in' "$local_log" || true)
  [ -n "$ready" ] && break
  kill -0 $local_pid 2>/dev/null || break
  sleep 0.5
done
if [ -z "$ready" ]; then
  echo "scripts/run-local.sh never printed its ready line:" >&2
  tail -50 "$local_log" >&2
  exit 1
fi
echo "scripts/run-local.sh: $ready" >&2
python3 tests/local/first_requests.py "http://127.0.0.1:$local_port"
kill -TERM $local_pid
wait $local_pid 2>/dev/null || true

if command -v cfn-lint >/dev/null 2>&1; then
  cfn-lint infra/template.yaml
else
  echo "cfn-lint not installed; skipping the template lint" >&2
fi
