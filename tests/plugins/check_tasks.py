"""Checks what became of the commits a plugin run made against a local
Skald whose extraction model is `model_stub`, through the tasks route:

    python3 tests/plugins/check_tasks.py URL answers|fails|late

- answers: every commit's task completed, and the model's memories were
  written (entities), one of them found by `find` for the fact the plugin
  run stated (Niangao's vet check-up);
- fails: every task failed with the model's HTTP 500, and kept its
  episodes (event memories);
- late: every task failed because the model ran past the deadline, and
  kept its episodes.

Prints one PASS/FAIL line per check and `N passed, N failed`; exit status
1 when a check fails.
"""

import json
import sys
import urllib.request


def call(url, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["result"]


def main():
    url, model = sys.argv[1].rstrip("/"), sys.argv[2]
    results = []

    def check(name, ok, detail):
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} tasks.{model}.{name}: {detail}")

    tasks = call(url, "/api/v1/tasks?task_type=session_commit&limit=100")
    statuses = sorted({t["status"] for t in tasks})
    check("some", len(tasks) > 0, f"{len(tasks)} commit tasks")
    episodes = [t["result"]["memories_extracted"].get("events", 0) for t in tasks]
    check("episodes", all(n > 0 for n in episodes), f"event memories per task: {episodes}")
    errors = [t.get("error") or "" for t in tasks]
    if model == "answers":
        check("completed", statuses == ["completed"], f"statuses {statuses}, errors {errors}")
        entities = sum(t["result"]["memories_extracted"].get("entities", 0) for t in tasks)
        check("extracted", entities > 0, f"{entities} entity memories extracted")
        query = {"query": "When is Niangao's vet check-up?", "limit": 10, "read_content": True}
        found = call(url, "/api/v1/search/find", query)
        hit = [
            m["uri"]
            for m in found["memories"]
            if "/memories/entities/" in m["uri"] and "vet check-up" in (m.get("content") or "")
        ]
        uris = [m["uri"] for m in found["memories"]]
        check("found", bool(hit), f"extracted entity memories saying it among the hits: {hit or uris}")
    else:
        want = "HTTP 500" if model == "fails" else ("timed out", "no time left")
        check("failed", statuses == ["failed"], f"statuses {statuses}")
        said = [e for e in errors if (want in e if isinstance(want, str) else any(w in e for w in want))]
        check("why", len(said) == len(tasks), f"errors {errors}")
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
