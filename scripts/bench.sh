#!/usr/bin/env bash
# Measures Skald's index and the `find` function and prints the figures that
# BENCHMARKS.md records:
#
#   index  — the `bench` binary (bench/src/bin/bench.rs): commit, cold load,
#            search, at 10,000 and 100,000 records of dimension 512
#   size   — release size of `find` (cargo, and cargo-lambda when installed)
#   serve  — peak RSS and request latency of `find` under `cargo lambda watch`
#            after ingesting the demo corpus
#   context — the `bench_context` binary (bench/src/bin/bench_context.rs):
#            `search` in context mode over the demo corpus (local store, the
#            S3 client with and without per-call latency, moto), and the
#            planner on 1,000 candidates
#   sessions — the `bench_sessions` binary (bench/src/bin/bench_sessions.rs):
#            what the dedup ledger adds to a context call, message append
#            latency, and concurrent appends on one session (local store,
#            moto, moto with per-call latency)
#   agent  — the agent surface, `content` and `mcp`: release sizes next to
#            `find` and `search-context`, the dependency count rmcp adds,
#            and the `bench_agent` binary (bench/src/bin/bench_agent.rs):
#            init of `content`, `mcp` and `find` (spawn → first runtime-API
#            poll, against a fake Lambda Runtime API on loopback) with peak
#            RSS and the first invocation, then a warm MCP `search` call in
#            context mode next to the same REST call, in-process (USE-m3)
#
#   scripts/bench.sh                 # all six
#   scripts/bench.sh index size      # some of them
#
# Environment: BENCH_RECORDS (default "10000 100000"), BENCH_REPEAT (5),
# BENCH_QUERIES (200), BENCH_S3=1 to also run the index bench on a local moto
# S3 server, BENCH_PORT (9011) for `cargo lambda watch`; for `context` and
# `sessions`: BENCH_ROUNDS (5), BENCH_LATENCY_MS (20), BENCH_NO_MOTO=1; for
# `context`: BENCH_PLAN_RUNS (300), BENCH_HASHED=1 (hashed embedder instead
# of USE-m3); for `sessions`: BENCH_APPENDS (600), BENCH_SLOW_APPENDS (100,
# the appends with latency), BENCH_CONCURRENT ("32,128"),
# BENCH_SESSIONS_USE_M3=1 (the USE-m3 embedder instead of the hashed one);
# for `agent`: BENCH_SPAWNS (100), BENCH_CALLS (500), BENCH_HASHED=1.
#
# Release builds use the workspace profile (fat LTO, codegen-units 1): each
# takes minutes on a small machine. Everything started here is stopped on
# exit.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

records=${BENCH_RECORDS:-10000 100000}
repeat=${BENCH_REPEAT:-5}
queries=${BENCH_QUERIES:-200}
port=${BENCH_PORT:-9011}
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(index size serve context sessions agent)
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }

say() { printf '\n### %s\n' "$*"; }

say "machine and tree"
echo "date:     $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "cpu:      $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "memory:   $(free -m | awk '/^Mem:/ {print $2 " MiB"}')"
echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min)"
echo "rustc:    $(rustc --version)"
echo "commit:   $(git rev-parse --short HEAD) ($(git status --short | wc -l) paths modified or untracked)"

if want index; then
  say "index: cargo build --release -p skald-bench --bin bench"
  cargo build --quiet --release -p skald-bench --bin bench
  extra=()
  [ -n "${BENCH_S3:-}" ] && extra=(--s3)
  for n in $records; do
    say "index: target/release/bench --records $n --repeat $repeat --queries $queries ${extra[*]}"
    target/release/bench --records "$n" --repeat "$repeat" --queries "$queries" "${extra[@]}"
  done
fi

if want context; then
  if [ -z "${BENCH_HASHED:-}" ] && [ ! -f .skald/models/use-m3/model.bin ] && [ -z "${SKALD_USE_M3_DIR:-}" ]; then
    echo "the USE-m3 model is missing: run scripts/setup-model.sh (or set BENCH_HASHED=1)" >&2
    exit 1
  fi
  say "context: cargo build --release -p skald-bench --bin bench_context"
  cargo build --quiet --release -p skald-bench --bin bench_context
  flags=(--rounds "${BENCH_ROUNDS:-5}" --latency-ms "${BENCH_LATENCY_MS:-20}" --plan-runs "${BENCH_PLAN_RUNS:-300}")
  [ -n "${BENCH_HASHED:-}" ] && flags+=(--hashed)
  [ -n "${BENCH_NO_MOTO:-}" ] && flags+=(--no-moto)
  say "context: target/release/bench_context ${flags[*]}"
  target/release/bench_context "${flags[@]}"
fi

if want sessions; then
  flags=(--rounds "${BENCH_ROUNDS:-5}" --latency-ms "${BENCH_LATENCY_MS:-20}" --appends "${BENCH_APPENDS:-600}"
    --slow-appends "${BENCH_SLOW_APPENDS:-100}" --concurrent "${BENCH_CONCURRENT:-32,128}")
  if [ -z "${BENCH_SESSIONS_USE_M3:-}" ]; then
    # The ledger and the appends do not depend on the embedder: the hashed
    # one keeps the query embedding (2-3 ms of noise) out of the differences.
    flags+=(--hashed)
  elif [ ! -f .skald/models/use-m3/model.bin ] && [ -z "${SKALD_USE_M3_DIR:-}" ]; then
    echo "the USE-m3 model is missing: run scripts/setup-model.sh (or unset BENCH_SESSIONS_USE_M3)" >&2
    exit 1
  fi
  [ -n "${BENCH_NO_MOTO:-}" ] && flags+=(--no-moto)
  say "sessions: cargo build --release -p skald-bench --bin bench_sessions"
  cargo build --quiet --release -p skald-bench --bin bench_sessions
  say "sessions: target/release/bench_sessions ${flags[*]}"
  target/release/bench_sessions "${flags[@]}"
fi

if want size; then
  say "size: cargo build --release -p find"
  start=$(date +%s)
  cargo build --quiet --release -p find
  echo "build: $(($(date +%s) - start)) s (0 when nothing was stale)"
  ls -l target/release/find
  if cargo lambda --version >/dev/null 2>&1; then
    say "size: cargo lambda build --release --compiler cargo -p find"
    start=$(date +%s)
    cargo lambda build --quiet --release --compiler cargo -p find
    echo "build: $(($(date +%s) - start)) s"
    ls -l target/lambda/find/bootstrap
    echo "gzip -9: $(gzip -9 -c target/lambda/find/bootstrap | wc -c) bytes (about the deployment zip)"
  else
    echo "cargo-lambda is not installed: skipped"
  fi
fi

if want agent; then
  if [ -z "${BENCH_HASHED:-}" ] && [ ! -f .skald/models/use-m3/model.bin ] && [ -z "${SKALD_USE_M3_DIR:-}" ]; then
    echo "the USE-m3 model is missing: run scripts/setup-model.sh (or set BENCH_HASHED=1)" >&2
    exit 1
  fi
  # One build for the four: cargo unifies the library's features across
  # them (`find` and `content` get `assemble` and `bedrock` compiled in, and
  # fat LTO drops what they never call).
  say "agent: cargo build --release -p content -p mcp -p find -p search-context"
  start=$(date +%s)
  cargo build --quiet --release -p content -p mcp -p find -p search-context
  echo "build: $(($(date +%s) - start)) s (0 when nothing was stale)"
  ls -l target/release/content target/release/mcp target/release/find target/release/search-context
  say "agent: cargo tree -p <package> -e normal --prefix none | sort -u | wc -l"
  for p in mcp search-context content find; do
    # The second figure counts each package once ("(*)" repeats removed).
    printf '  %-15s %4s lines, %4s packages\n' "$p" \
      "$(cargo tree -p "$p" -e normal --prefix none | sort -u | wc -l)" \
      "$(cargo tree -p "$p" -e normal --prefix none | sed 's/ (\*)$//' | sort -u | wc -l)"
  done
  echo "  in mcp's tree, not in search-context's:"
  comm -23 <(cargo tree -p mcp -e normal --prefix none 2>/dev/null | sed 's/ (\*)$//' | sort -u) \
    <(cargo tree -p search-context -e normal --prefix none 2>/dev/null | sed 's/ (\*)$//' | sort -u) | sed 's/^/    /'
  flags=(--spawns "${BENCH_SPAWNS:-100}" --calls "${BENCH_CALLS:-500}")
  [ -n "${BENCH_HASHED:-}" ] && flags+=(--hashed)
  say "agent: cargo build --release -p skald-bench --bin bench_agent"
  cargo build --quiet --release -p skald-bench --bin bench_agent
  say "agent: target/release/bench_agent ${flags[*]}"
  target/release/bench_agent "${flags[@]}"
fi

watch_pid=
# Every process below `cargo lambda watch` (cargo run, the function).
descendants() {
  local pid
  for pid in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$pid"
    descendants "$pid"
  done
}
stop_watch() {
  if [ -n "$watch_pid" ]; then
    local pids
    pids="$(descendants "$watch_pid") $watch_pid"
    # shellcheck disable=SC2086
    kill $pids 2>/dev/null || true
    watch_pid=
  fi
}
trap stop_watch EXIT

if want serve; then
  if ss -ltn 2>/dev/null | grep -q ":$port "; then
    echo "port $port is in use; set BENCH_PORT" >&2
    exit 1
  fi
  say "serve: SKALD_NO_SERVE=1 scripts/run-local.sh"
  SKALD_NO_SERVE=1 scripts/run-local.sh
  # Build first so the watch's first request does not compile for minutes.
  cargo build --quiet --release -p find
  log=$(mktemp -t skald-bench-watch.XXXXXX)
  # --ignore-changes: other people's edits in the workspace would otherwise
  # recompile and restart the function in the middle of the measurement.
  say "serve: cargo lambda watch --release --ignore-changes -A 127.0.0.1 -P $port --env-var SKALD_CONFIG=$root/samplconfigs/local.json"
  cargo lambda watch --release --ignore-changes -A 127.0.0.1 -P "$port" \
    --env-var "SKALD_CONFIG=$root/samplconfigs/local.json" >"$log" 2>&1 &
  watch_pid=$!
  for _ in $(seq 100); do
    ss -ltn | grep -q "127.0.0.1:$port " && break
    sleep 0.2
  done
  url="http://127.0.0.1:$port/api/v1/search/find"
  body='{"query":"S3 conditional writes","limit":5}'
  request() {
    curl -sS -m "${1:-30}" -o /dev/null -w "%{http_code} %{time_total}\n" \
      -X POST -H 'content-type: application/json' -d "$body" "$url"
  }
  echo "first request (starts the function; compiles if stale): $(request 900)"
  for _ in 1 2 3; do request >/dev/null; done
  fn_pid=
  for pid in $(descendants "$watch_pid"); do
    # The executable may show as "(deleted)" once a later build replaced it.
    case "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" in
      *target/release/find*) fn_pid=$pid ;;
    esac
  done
  if [ -z "$fn_pid" ]; then
    echo "the find process was not found under the watch; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  echo "after 4 requests: pid $fn_pid $(grep -E '^(VmHWM|VmRSS)' "/proc/$fn_pid/status" | tr -s ' \t' ' ' | tr '\n' ' ')"
  times=$(for _ in $(seq 20); do request | cut -d' ' -f2; done | sort -n)
  echo "20 sequential requests, curl time_total in ms:"
  echo "$times" | awk '{ t[NR] = $1 * 1000 } END {
    printf "  min %.2f  p50 %.2f  p95 %.2f  max %.2f\n", t[1], t[10], t[19], t[20] }'
  echo "after 24 requests: $(grep -E '^(VmHWM|VmRSS)' "/proc/$fn_pid/status" | tr -s ' \t' ' ' | tr '\n' ' ')"
  echo "handler time (lambda_runtime log, ms=): $(grep -o 'ms=[0-9.]*' "$log" | tail -20 | cut -d= -f2 | sort -n | awk '{ t[NR] = $1 } END { if (NR) printf "p50 %.3f ms over the last %d", t[int((NR + 1) / 2)], NR }')"
  stop_watch
  sleep 1
  rm -f "$log"
  # Others may run their own watch (e.g. scripts/run-local.sh on 9000): only ours counts.
  echo "left running on port $port: [$(pgrep -f "cargo-lambda.* -P $port " | tr '\n' ' ')] (empty: all stopped)"
fi
