"""Times the first request to every route of a running local Skald.

    python3 tests/local/first_requests.py http://127.0.0.1:9000 [--limit-ms 1000]

Meant right after `scripts/run-local.sh` prints its `ready` line (as
`scripts/test.sh` runs it): every route of `infra/openapi.json` gets one
request — a real one for the read routes (find, search, recall, bootstrap,
listings, reads), one the route refuses with a 4xx for the write routes, so
that the demo store is left as it was — and each must answer within the
limit (default 1 s) with a status below 500, in OpenViking's JSON envelope
(`/mcp` excepted: JSON-RPC). Then paths no function serves — an unknown
`/api/v1/…` route, and `/lambda-url/NAME/` paths that `cargo lambda watch`
alone would hand to a workspace binary — must answer 404 in the envelope
(`NOT_FOUND`), as fast. Prints one line per request and `N passed, N failed`;
exits 1 on any failure.
"""

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Bodies of the routes asked for real; any other POST/PUT gets `{` (400).
REAL_BODIES = {
    ("POST", "/api/v1/search/find"): {"query": "what does my cat eat", "limit": 3},
    ("POST", "/api/v1/search/search"): {"query": "what does my cat eat", "mode": "context", "max_tokens": 800},
    ("POST", "/api/v1/search/recall"): {"query": "what does my cat eat"},
    ("POST", "/api/v1/search/bootstrap"): {},
    ("POST", "/api/v1/search/grep"): {"uri": "viking://", "pattern": "cat"},
    ("POST", "/api/v1/search/glob"): {"pattern": "**/*.md"},
    ("POST", "/api/v1/skills/find"): {"query": "release notes"},
    ("POST", "/api/v1/system/wait"): {"timeout": 1},
}
QUERIES = {
    "/api/v1/content/read": "uri=viking://user/default/memories/entities/pets/niangao.md",
    "/api/v1/content/abstract": "uri=viking://user/default/memories/entities/pets/niangao.md",
    "/api/v1/content/overview": "uri=viking://user/default/memories/entities/pets/niangao.md",
    "/api/v1/fs/ls": "uri=viking://user/default/memories",
    "/api/v1/fs/stat": "uri=viking://user/default/memories",
    "/api/v1/fs/tree": "uri=viking://user/default/memories",
}
PLACEHOLDERS = {
    "{id}": "first-requests-check",
    "{archive_id}": "archive_001",
    "{tool_result_id}": "none",
    "{name}": "no-such-skill",
}
# Paths no function serves: the gateway's own 404.
UNKNOWN = [
    ("GET", "/api/v1/nope"),
    ("POST", "/api/v2/search/find"),
    ("GET", "/lambda-url/bench_use/"),
    ("POST", "/lambda-url/model_stub/v1/chat/completions"),
    ("POST", "/2015-03-31/functions/bench_use/invocations"),
]


def routes():
    doc = json.loads((ROOT / "infra/openapi.json").read_text(encoding="utf-8"))
    for path, ops in doc["paths"].items():
        for method in ops:
            if method in {"get", "post", "put", "delete", "patch"}:
                yield method.upper(), path


def request(base, method, path, body, headers):
    req = urllib.request.Request(base + path, data=body, method=method, headers=headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, payload = e.code, e.read()
    return status, payload, (time.monotonic() - started) * 1000


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    base = args[0].rstrip("/")
    limit_ms = float(args[args.index("--limit-ms") + 1]) if "--limit-ms" in args else 1000.0
    passed = failed = 0

    def check(label, ok, why):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok   {label}")
        else:
            failed += 1
            print(f"FAIL {label}: {why}")

    for method, template in routes():
        path = template
        for key, value in PLACEHOLDERS.items():
            path = path.replace(key, value)
        if template in QUERIES and method == "GET":
            path += "?" + QUERIES[template]
        headers = {"Content-Type": "application/json"}
        body = None
        if template == "/mcp":
            headers["Accept"] = "application/json, text/event-stream"
            if method == "POST":
                body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "first-requests", "version": "1"}}}).encode()
        elif (method, template) in REAL_BODIES:
            body = json.dumps(REAL_BODIES[(method, template)]).encode()
        elif method in {"POST", "PUT"}:
            body = b"{"
        status, payload, ms = request(base, method, path, body, headers)
        label = f"{method} {path} -> {status} in {ms:.0f} ms"
        if status >= 500:
            check(label, False, payload[:200])
            continue
        if ms > limit_ms:
            check(label, False, f"slower than {limit_ms:.0f} ms")
            continue
        if template != "/mcp" and status != 405:
            try:
                parsed = json.loads(payload)
            except ValueError:
                check(label, False, f"not JSON: {payload[:120]!r}")
                continue
            if "status" not in parsed:
                check(label, False, f"no envelope: {payload[:120]!r}")
                continue
        check(label, True, "")

    for method, path in UNKNOWN:
        status, payload, ms = request(base, method, path, b"{}" if method == "POST" else None, {})
        label = f"{method} {path} -> {status} in {ms:.0f} ms"
        try:
            code = json.loads(payload).get("error", {}).get("code")
        except (ValueError, AttributeError):
            code = None
        check(label, status == 404 and code == "NOT_FOUND" and ms <= limit_ms,
              f"wanted 404 NOT_FOUND within {limit_ms:.0f} ms, got {payload[:160]!r}")

    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
