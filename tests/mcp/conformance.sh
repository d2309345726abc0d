#!/usr/bin/env bash
# Runs the MCP conformance suite and the Inspector's schema check against an
# MCP endpoint, and prints one line per scenario and `N passed, N failed`.
#
#   tests/mcp/conformance.sh http://127.0.0.1:PORT/mcp [--header 'Name: value']... [--results DIR]
#
#   @modelcontextprotocol/conformance 0.1.16:          server-initialize, ping, tools-list
#   @modelcontextprotocol/conformance 0.2.0-alpha.12,
#     --spec-version 2026-07-28:                        server-stateless, http-header-validation
#   @modelcontextprotocol/inspector 2.12.0:             --cli URL --transport http --method tools/list --strict
#     (run as installed, the same package `npx @modelcontextprotocol/inspector@2.12.0` runs), twice:
#     --protocol-era legacy (initialize; the CLI's default) and --protocol-era modern (2026-07-28)
#
# A scenario passes when every check the suite wrote to its checks.json is
# SUCCESS, SKIPPED or WARNING (WARNINGs are the spec's SHOULDs: listed, never
# failing), except the checks listed in tests/mcp/expected-failures.txt. It
# fails on any other FAILURE, and on a listed check that now passes. An
# Inspector line passes when it exits 0 with no schema finding at all (its
# --strict exits 6 only on error-severity findings; warnings such as
# `"type": [..., "null"]` are non-portable schemas too, so they fail here).
# Exit status: 0 when every line passed, 1 otherwise, 2 on a usage or setup error.
#
# --header goes to the Inspector only: the conformance CLI has no way to send
# headers, so run it against a server that needs none (dev mode).
# Install the tools first: tests/mcp/install.sh. Loopback URLs only unless
# MCP_ALLOW_REMOTE=1. Results (checks.json, logs) are kept under --results
# (default .skald/mcp/results/<time>/).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TOOLS=${SKALD_MCP_TOOLS:-$REPO/.skald/mcp}
# shellcheck source=versions.sh
. "$HERE/versions.sh"
EXPECTED=${MCP_EXPECTED_FAILURES:-$HERE/expected-failures.txt}
SCENARIO_TIMEOUT=${MCP_SCENARIO_TIMEOUT:-300}

usage() { echo "usage: $0 URL [--header 'Name: value']... [--results DIR]" >&2; exit 2; }
die() { echo "conformance.sh: $*" >&2; exit 2; }

URL=""; RESULTS=""; HEADERS=()
while [ $# -gt 0 ]; do
  case $1 in
    --header) [ $# -ge 2 ] || usage; HEADERS+=("$2"); shift 2 ;;
    --header=*) HEADERS+=("${1#--header=}"); shift ;;
    --results) [ $# -ge 2 ] || usage; RESULTS=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    -*) usage ;;
    *) [ -z "$URL" ] || usage; URL=$1; shift ;;
  esac
done
[ -n "$URL" ] || usage

host=$(printf '%s' "$URL" | sed -E 's#^[a-zA-Z]+://([^/@]*@)?(\[[^]]*\]|[^:/]*).*#\2#')
case $host in
  127.*|localhost|'[::1]') ;;
  *) [ "${MCP_ALLOW_REMOTE:-0}" = 1 ] || die "refusing non-loopback URL $URL (host $host); set MCP_ALLOW_REMOTE=1 to allow" ;;
esac

NODE_BIN=$TOOLS/node/node_modules/.bin
C_STABLE=$TOOLS/conformance-$MCP_CONFORMANCE_STABLE/node_modules/.bin/conformance
C_ALPHA=$TOOLS/conformance-$MCP_CONFORMANCE_ALPHA/node_modules/.bin/conformance
INSPECTOR=$TOOLS/inspector-$MCP_INSPECTOR_VERSION/node_modules/.bin/mcp-inspector
for f in "$NODE_BIN/node" "$C_STABLE" "$C_ALPHA" "$INSPECTOR"; do
  [ -x "$f" ] || die "$f is missing: run tests/mcp/install.sh"
done
[ -f "$EXPECTED" ] || die "$EXPECTED is missing"
export PATH="$NODE_BIN:$PATH"   # the tools' `#!/usr/bin/env node` must find Node 22, not the system's 20
PY=$TOOLS/venv/bin/python
[ -x "$PY" ] || PY=$(command -v python3) || die "python3 not found"

RESULTS=${RESULTS:-$TOOLS/results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$RESULTS" || die "cannot create $RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
echo "MCP conformance against $URL (results in $RESULTS)"
if [ ${#HEADERS[@]} -gt 0 ]; then
  echo "note: --header is sent by the Inspector only; the conformance CLI cannot send headers"
fi

PASSED=0; FAILED=0

# evaluate SCENARIO LABEL DIR EXIT: one line for the scenario from DIR/**/checks.json; 0 = pass
evaluate() {
  "$PY" - "$1" "$2" "$3" "$4" "$EXPECTED" <<'PYEOF'
import glob, json, os, sys
scenario, label, out, rc, expected_path = sys.argv[1:6]
expected = {}
for raw in open(expected_path, encoding="utf-8"):
    line = raw.strip()
    if not line or line.startswith("#"):
        continue
    key, _, reason = line.partition(" ")
    scen, sep, check = key.partition(":")
    if not sep or not check:
        print(f"FAIL {scenario} ({label}): bad line in {expected_path}: {line!r} (want scenario:check-id reason)")
        sys.exit(1)
    if scen == scenario:
        expected[check] = reason.strip()
files = sorted(glob.glob(os.path.join(out, "**", "checks.json"), recursive=True))
if not files:
    log = os.path.join(out + ".log")
    tail = ""
    if os.path.exists(log):
        lines = [l.strip() for l in open(log, encoding="utf-8", errors="replace") if l.strip()]
        tail = lines[-1][:200] if lines else ""
    print(f"FAIL {scenario} ({label}): no checks.json (conformance exited {rc}) {tail}")
    sys.exit(1)
checks = []
for f in files:
    checks += json.load(open(f, encoding="utf-8"))
# one verdict per check id, most severe first (the suite collapses repeated ids the same way)
rank = {"FAILURE": 3, "WARNING": 2, "SUCCESS": 1, "SKIPPED": 0, "INFO": 0}
verdict, message = {}, {}
for c in checks:
    cid, status = c.get("id", "?"), c.get("status", "FAILURE")
    if cid not in verdict or rank.get(status, 3) > rank.get(verdict[cid], 3):
        verdict[cid] = status
        message[cid] = " ".join((c.get("errorMessage") or c.get("description") or "").split())
unexpected = [cid for cid, s in verdict.items() if s == "FAILURE" and cid not in expected]
xfail = [cid for cid, s in verdict.items() if s == "FAILURE" and cid in expected]
stale = [cid for cid in expected if verdict.get(cid) == "SUCCESS"]
unreached = [cid for cid in expected if verdict.get(cid) in (None, "SKIPPED", "INFO")]
warnings = [cid for cid, s in verdict.items() if s == "WARNING"]
counts = {s: sum(1 for v in verdict.values() if v == s) for s in ("SUCCESS", "FAILURE", "WARNING", "SKIPPED")}
parts = [f"{counts['SUCCESS']}/{len(verdict)} checks passed"]
if xfail:
    parts.append(f"{len(xfail)} expected failures")
if counts["SKIPPED"]:
    parts.append(f"{counts['SKIPPED']} skipped")
if warnings:
    parts.append("warnings: " + ", ".join(f"{w} ({message[w][:80]})" for w in warnings))
if unreached:
    parts.append("expected failures not reached: " + ", ".join(unreached))
if unexpected or stale:
    bad = [f"{cid}: {message[cid][:140]}" for cid in unexpected[:6]]
    if len(unexpected) > 6:
        bad.append(f"+{len(unexpected) - 6} more failing checks (see {out})")
    bad += [f"{cid}: listed in expected-failures.txt but now passes, remove it" for cid in stale]
    print(f"FAIL {scenario} ({label}): " + "; ".join(bad) + " | " + "; ".join(parts))
    sys.exit(1)
print(f"PASS {scenario} ({label}): " + "; ".join(parts))
PYEOF
}

# run_scenario BIN LABEL SCENARIO [extra args]
run_scenario() {
  local bin=$1 label=$2 scenario=$3 out; shift 3
  out=$RESULTS/$scenario
  rm -rf "$out"; mkdir -p "$out"
  timeout "$SCENARIO_TIMEOUT" "$bin" server --url "$URL" --scenario "$scenario" -o "$out" "$@" \
    >"$out.log" 2>&1 </dev/null
  local rc=$?
  if evaluate "$scenario" "$label" "$out" "$rc"; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
}

for s in server-initialize ping tools-list; do
  run_scenario "$C_STABLE" "conformance $MCP_CONFORMANCE_STABLE" "$s"
done
for s in server-stateless http-header-validation; do
  run_scenario "$C_ALPHA" "conformance $MCP_CONFORMANCE_ALPHA, 2026-07-28" "$s" --spec-version 2026-07-28
done

# The Inspector's CLI, with a throwaway HOME (it writes ~/.mcp-inspector/).
# inspector ERA: legacy (the initialize handshake, the CLI's default) or modern (2026-07-28).
inspector() {
  local era=$1 out=$RESULTS/inspector-$1 label="inspector $MCP_INSPECTOR_VERSION --strict, --protocol-era $1" args=() h
  mkdir -p "$out/home"
  for h in "${HEADERS[@]+"${HEADERS[@]}"}"; do args+=(--header "$h"); done
  HOME=$out/home timeout "$SCENARIO_TIMEOUT" "$INSPECTOR" --cli "$URL" --transport http \
    --method tools/list --strict --protocol-era "$era" "${args[@]+"${args[@]}"}" >"$out/stdout.json" 2>"$out/stderr.txt" </dev/null
  local rc=$?
  "$PY" - "$rc" "$out" "$label" "inspector-$era" <<'PYEOF'
import json, re, sys
rc, out, label, name = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
err = open(f"{out}/stderr.txt", encoding="utf-8", errors="replace").read()
findings = re.findall(r'^(Error|Warning): tool "([^"]*)"\n  Path: (.*)\n  Issue: (.*)', err, re.M)
summary = re.search(r"(\d+) errors?, (\d+) warnings? across (\d+) tools?", err)
try:
    tools = [t["name"] for t in json.load(open(f"{out}/stdout.json", encoding="utf-8"))["tools"]]
except Exception:
    tools = None
if rc != 0 or tools is None or findings or summary:
    why = []
    if rc != 0:
        why.append(f"exit {rc}" + (" (error-severity schema findings)" if rc == 6 else ""))
    if tools is None:
        last = [l for l in err.splitlines() if l.strip()]
        why.append("no tools/list result" + (f": {last[-1][:200]}" if last else ""))
    if summary:
        why.append(summary.group(0))
    why += [f"{sev} {tool} {path}: {issue[:100]}" for sev, tool, path, issue in findings[:5]]
    print(f"FAIL {name} ({label}): " + "; ".join(why))
    sys.exit(1)
print(f"PASS {name} ({label}): {len(tools)} tools, no schema findings")
PYEOF
}
for era in legacy modern; do
  if inspector "$era"; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
done

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
