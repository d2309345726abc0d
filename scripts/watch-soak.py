#!/usr/bin/env python3
# Soak test for a running local Skald (`scripts/run-local.sh`, i.e.
# `cargo lambda watch` on http://127.0.0.1:9000): it checks that every request
# is answered by the function, promptly.
#
# After a warm-up (one request per route, waited on for up to --warmup-timeout
# seconds: the first request to a route may compile and start its function;
# the run stops there when one gets no answer from the function),
# it sends --sequential requests one after another, then --concurrent requests
# spread over --threads threads. Requests cycle through a mix of routes:
#
#   find     POST /api/v1/search/find      {"query": "cold start", "limit": 5}
#   context  POST /api/v1/search/search    {"query": …, "mode": "context", …}
#   health   GET  /health
#   append   POST /api/v1/sessions/{id}/messages  (one session per thread and
#            per 100 messages, named soak-<run>-…; stored under .skald/store)
#
# Each request uses its own connection (`Connection: close`) and a --timeout
# (30 s) socket timeout. An answer is the function's when its body is a JSON
# object whose "status" is "ok" or "error" (Skald's envelope; /health answers
# {"status":"ok",…}). The report gives counts per route and outcome, p50 / p99
# / max latency, and lists, with wall-clock times (to match against the
# server's log), every answer slower than --slow (1 s), every timeout or
# connection error, every answer that is not from the function (e.g. the
# emulator's own problem+json 500), and every Skald error envelope (these
# requests are all valid, so an error is unexpected too). The exit status is 1
# when any of those occurred, 2 when the server could not be reached at all.
#
#   scripts/run-local.sh &                     # wait until it answers
#   python3 scripts/watch-soak.py              # 2000 sequential + 2000 on 8 threads
#   python3 scripts/watch-soak.py http://127.0.0.1:9000 --sequential 5000 \
#       --concurrent 5000 --threads 8 --records /tmp/soak.csv
#
# --records writes one CSV line per request (start time, phase, route, status,
# outcome, milliseconds). Python 3.11, standard library only.

from __future__ import annotations

import argparse
import csv
import http.client
import json
import math
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import datetime

ROUTES = ("find", "context", "health", "append")
MESSAGES_PER_SESSION = 100


@dataclass
class Result:
    phase: str
    index: int
    route: str
    started: float  # wall clock, seconds since the epoch
    ms: float
    status: int | None  # HTTP status; None when no answer came
    outcome: str  # ok | error-envelope | foreign | timeout | transport
    detail: str = ""


@dataclass
class Target:
    host: str
    port: int
    base_path: str
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @classmethod
    def parse(cls, base_url: str) -> Target:
        url = urllib.parse.urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise SystemExit(f"base URL must be http://host[:port][/prefix], got {base_url!r}")
        return cls(url.hostname, url.port or 80, url.path.rstrip("/"))


def request_for(route: str, target: Target, worker: str, seq: int) -> tuple[str, str, bytes | None]:
    """Method, path and body of the route's request number `seq` of `worker`."""
    if route == "find":
        return "POST", "/api/v1/search/find", json.dumps({"query": "cold start", "limit": 5}).encode()
    if route == "context":
        body = {"query": "what does my cat eat", "mode": "context", "max_tokens": 800, "limit": 4}
        return "POST", "/api/v1/search/search", json.dumps(body).encode()
    if route == "health":
        return "GET", "/health", None
    if route == "append":
        session = f"soak-{target.run_id}-{worker}-{seq // MESSAGES_PER_SESSION}"
        body = {"role": "user", "content": f"soak message {seq} from {worker}"}
        return "POST", f"/api/v1/sessions/{session}/messages", json.dumps(body).encode()
    raise ValueError(route)


def classify(status: int, body: bytes) -> tuple[str, str]:
    """(outcome, detail) of an HTTP answer."""
    excerpt = " ".join(body[:300].decode("utf-8", "replace").split())
    try:
        doc = json.loads(body)
    except ValueError:
        return "foreign", excerpt
    if isinstance(doc, dict) and doc.get("status") == "ok" and 200 <= status < 300:
        return "ok", ""
    if isinstance(doc, dict) and doc.get("status") == "error":
        return "error-envelope", excerpt
    return "foreign", excerpt


def send(target: Target, phase: str, index: int, route: str, worker: str, seq: int, timeout: float) -> Result:
    method, path, body = request_for(route, target, worker, seq)
    headers = {"Connection": "close", "Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    started = time.time()
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout)
    try:
        conn.request(method, target.base_path + path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        ms = (time.perf_counter() - t0) * 1000
        outcome, detail = classify(response.status, data)
        return Result(phase, index, route, started, ms, response.status, outcome, detail)
    except (TimeoutError, socket.timeout):
        ms = (time.perf_counter() - t0) * 1000
        return Result(phase, index, route, started, ms, None, "timeout", f"no answer within {timeout:g} s")
    except (OSError, http.client.HTTPException) as err:
        ms = (time.perf_counter() - t0) * 1000
        return Result(phase, index, route, started, ms, None, "transport", f"{type(err).__name__}: {err}")
    finally:
        conn.close()


class Progress:
    def __init__(self, phase: str, total: int) -> None:
        self.phase, self.total, self.done = phase, total, 0
        self.lock = threading.Lock()

    def tick(self) -> None:
        with self.lock:
            self.done += 1
            if self.done % 500 == 0 or self.done == self.total:
                print(f"  {self.phase}: {self.done}/{self.total}", file=sys.stderr, flush=True)


def run_sequential(target: Target, n: int, routes: list[str], timeout: float) -> list[Result]:
    progress = Progress("sequential", n)
    results = []
    for i in range(n):
        route = routes[i % len(routes)]
        results.append(send(target, "sequential", i, route, "s", i // len(routes), timeout))
        progress.tick()
    return results


def run_concurrent(target: Target, m: int, threads: int, routes: list[str], timeout: float) -> list[Result]:
    progress = Progress("concurrent", m)
    results: list[Result] = []
    lock = threading.Lock()
    counter = iter(range(m))

    def worker(w: int) -> None:
        mine: list[Result] = []
        per_route = {r: 0 for r in routes}
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            route = routes[i % len(routes)]
            mine.append(send(target, "concurrent", i, route, f"t{w}", per_route[route], timeout))
            per_route[route] += 1
            progress.tick()
        with lock:
            results.extend(mine)

    pool = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sorted(results, key=lambda r: r.index)


def percentile(sorted_ms: list[float], p: float) -> float:
    if not sorted_ms:
        return float("nan")
    # nearest rank
    k = max(0, min(len(sorted_ms) - 1, math.ceil(p / 100 * len(sorted_ms)) - 1))
    return sorted_ms[k]


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]


def summarize(name: str, results: list[Result], slow_ms: float) -> list[Result]:
    """Prints the phase's table; returns its anomalies."""
    print(f"\n{name}: {len(results)} requests")
    answered = sorted(r.ms for r in results if r.status is not None)
    wall = (max(r.started + r.ms / 1000 for r in results) - min(r.started for r in results)) if results else 0
    print(
        f"  latency of answers: p50 {percentile(answered, 50):.1f} ms, p99 {percentile(answered, 99):.1f} ms, "
        f"max {answered[-1] if answered else float('nan'):.1f} ms; wall {wall:.1f} s"
    )
    outcomes = ("ok", "error-envelope", "foreign", "timeout", "transport")
    print(f"  {'route':<8} {'sent':>6} " + " ".join(f"{o:>14}" for o in outcomes) + f" {'>slow':>6} {'p50 ms':>8} {'p99 ms':>8}")
    for route in sorted({r.route for r in results}, key=ROUTES.index):
        rs = [r for r in results if r.route == route]
        ms = sorted(r.ms for r in rs if r.status is not None)
        counts = " ".join(f"{sum(r.outcome == o for r in rs):>14}" for o in outcomes)
        slow = sum(r.ms > slow_ms and r.status is not None for r in rs)
        print(f"  {route:<8} {len(rs):>6} {counts} {slow:>6} {percentile(ms, 50):>8.1f} {percentile(ms, 99):>8.1f}")
    return [r for r in results if r.outcome != "ok" or r.ms > slow_ms]


def main() -> int:
    parser = argparse.ArgumentParser(description="Soak a local Skald under cargo lambda watch.")
    parser.add_argument("base_url", nargs="?", default="http://127.0.0.1:9000")
    parser.add_argument("--sequential", type=int, default=2000, metavar="N", help="sequential requests (2000)")
    parser.add_argument("--concurrent", type=int, default=2000, metavar="M", help="concurrent requests (2000)")
    parser.add_argument("--threads", type=int, default=8, help="threads for the concurrent phase (8)")
    parser.add_argument("--timeout", type=float, default=30.0, help="per-request socket timeout, s (30)")
    parser.add_argument("--slow", type=float, default=1.0, help="an answer slower than this (s) is listed (1)")
    parser.add_argument("--routes", default=",".join(ROUTES), help=f"comma-separated subset of {','.join(ROUTES)}")
    parser.add_argument("--warmup-timeout", type=float, default=900.0, help="per warm-up request, s (900)")
    parser.add_argument("--no-warmup", action="store_true", help="measure the first requests too")
    parser.add_argument("--records", metavar="FILE", help="write one CSV line per request")
    args = parser.parse_args()

    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    if not routes or any(r not in ROUTES for r in routes):
        parser.error(f"--routes takes a subset of {','.join(ROUTES)}")
    target = Target.parse(args.base_url)
    slow_ms = args.slow * 1000
    print(f"soak {args.base_url}: run {target.run_id}, routes {','.join(routes)}, {args.sequential} sequential, "
          f"{args.concurrent} concurrent on {args.threads} threads, timeout {args.timeout:g} s, slow > {args.slow:g} s")

    if not args.no_warmup:
        for route in routes:
            r = send(target, "warmup", 0, route, "w", 0, args.warmup_timeout)
            print(f"  warm-up {route}: {r.status} {r.outcome} in {r.ms:.0f} ms {r.detail[:120]}", file=sys.stderr)
            if r.outcome == "transport" and "Refused" in r.detail:
                print(f"cannot reach {args.base_url}: {r.detail}", file=sys.stderr)
                return 2
            if r.outcome != "ok":
                print(f"FAIL: the warm-up request to {route} got no answer from the function", file=sys.stderr)
                return 1

    t_start = time.time()
    seq = run_sequential(target, args.sequential, routes, args.timeout) if args.sequential > 0 else []
    conc = run_concurrent(target, args.concurrent, args.threads, routes, args.timeout) if args.concurrent > 0 else []
    print(f"\nstarted {stamp(t_start)}, finished {stamp(time.time())}")

    anomalies = []
    if seq:
        anomalies += summarize("sequential", seq, slow_ms)
    if conc:
        anomalies += summarize(f"concurrent ({args.threads} threads)", conc, slow_ms)

    if args.records:
        with open(args.records, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["started", "phase", "index", "route", "status", "outcome", "ms", "detail"])
            for r in seq + conc:
                out.writerow([f"{r.started:.3f}", r.phase, r.index, r.route, r.status or "", r.outcome, f"{r.ms:.1f}", r.detail])

    kinds = {
        "slower than the slow threshold": [a for a in anomalies if a.outcome == "ok"],
        "timeouts": [a for a in anomalies if a.outcome == "timeout"],
        "connection errors": [a for a in anomalies if a.outcome == "transport"],
        "answers not from the function": [a for a in anomalies if a.outcome == "foreign"],
        "Skald error envelopes": [a for a in anomalies if a.outcome == "error-envelope"],
    }
    print("\nanomalies: " + ", ".join(f"{len(v)} {k}" for k, v in kinds.items()))
    for kind, items in kinds.items():
        if items:
            print(f"\n{kind}:")
            for a in items:
                status = a.status if a.status is not None else "-"
                print(f"  {stamp(a.started)} {a.phase} #{a.index} {a.route}: {status} in {a.ms:.0f} ms {a.detail[:200]}")
    total = len(seq) + len(conc)
    print(f"\n{'FAIL' if anomalies else 'PASS'}: {len(anomalies)} anomalies in {total} requests")
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
