#!/usr/bin/env python3
"""End-to-end checks of Skald's MCP endpoint with the official Python client.

    .skald/mcp/venv/bin/python tests/mcp/client.py http://127.0.0.1:PORT/mcp \
        [--header 'Authorization: Bearer KEY'] [--timeout 30]

Talks to the endpoint as an agent host would, against the demo corpus
(samplconfigs/demo, user `default`): the transport (JSON replies, no
sessions, GET/DELETE 405), the initialize handshake (2025-06-18 raw,
2025-11-25 through the SDK) and the stateless 2026-07-28 lifecycle
(server/discover), the tool list (OpenViking's names, argument names and
portable schemas) and one call of every tool with what a user would notice in
its text. Prints one line per check and ends with `N passed, N failed`; exits
1 on any failure. Install the client first: tests/mcp/install.sh.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import uuid
from typing import Any, Awaitable, Callable

try:
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover - environment problem
    sys.exit(f"cannot import the mcp client ({exc}); run tests/mcp/install.sh and use .skald/mcp/venv/bin/python")

DEMO = "viking://user/default/memories"
NIANGAO = f"{DEMO}/entities/pets/niangao.md"
VET_VISIT = f"{DEMO}/events/2026/09/29/niangao_vet_visit.md"
NIANGAO_DIET = "皇家低脂处方粮"  # a line of niangao.md's body, not of its abstract
VET_VISIT_BODY = "瑞派宠物医院"  # a line of the vet visit's body, not of its abstract
OTHER_USER = "viking://user/someone-else/x.md"
CAT_QUERY = "what does my cat eat"

# OpenViking's argument names for each tool (shared/spec/openviking-reference.md 5.3 + the contract).
TOOL_ARGS: dict[str, list[str]] = {
    "find": ["query", "target_uri", "limit", "min_score", "level", "context_type"],
    "search": [
        "query", "target_uri", "session_id", "limit", "min_score", "level", "context_type", "mode",
        "query_expansion", "max_tokens", "quotas", "purpose", "detail", "detail_by_category", "dedup_turns",
        "exclude_uris", "peer_scope", "other_peer_penalty", "other_peer_penalties", "rewrite",
        "rewrite_max_bullets", "search_type",
    ],
    "recall": [
        "query", "quotas", "max_chars", "min_score", "peer_scope", "other_peer_penalty", "session_id",
        "detail", "max_tokens", "rewrite",
    ],
    "bootstrap": ["session_id"],
    "read": ["uris"],
    "list": ["uri", "recursive"],
    "health": [],
    "remember": ["messages"],
    "tree": ["uri", "level_limit", "node_limit", "include_abstract"],
    "write": ["uri", "content", "mode", "wait", "timeout"],
    "edit": ["uri", "old_string", "new_string", "replace_all", "wait", "timeout"],
    "grep": ["uri", "pattern", "case_insensitive", "node_limit"],
    "glob": ["pattern", "uri", "node_limit"],
    "forget": ["uri", "recursive"],
    "add_resource": ["path", "temp_file_id", "add_type", "description", "to", "parent", "tags", "tag_mode", "args"],
    "list_watches": [],
    "cancel_watch": ["to_uri"],
}
REQUIRED_ARGS = {
    "find": ["query"], "search": ["query"], "recall": ["query"], "read": ["uris"], "list": ["uri"],
    "remember": ["messages"], "write": ["uri", "content"], "edit": ["uri", "old_string", "new_string"],
    "grep": ["uri", "pattern"], "glob": ["pattern"], "forget": ["uri"], "cancel_watch": ["to_uri"],
}
HANDSHAKE_VERSIONS = ("2025-06-18", "2025-11-25")
MODERN_VERSION = "2026-07-28"
URI_RE = re.compile(r"viking://[^\s\"'<>)\]]+")
# A hit line of `find`'s text: `- [type NN%] uri` (and ` (lines A-B)` for a
# passage); abstracts below it may quote any URI.
HIT_RE = re.compile(r"^- \[\w+ \d+%\] (viking://\S+)", re.MULTILINE)


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        line = f"{'PASS' if ok else 'FAIL'} {name}"
        if detail:
            line += f": {detail}"
        print(line, flush=True)
        return ok

    async def run(self, name: str, fn: Callable[[], Awaitable[tuple[bool, str]]]) -> bool:
        try:
            ok, detail = await fn()
        except MCPError as exc:
            ok, detail = False, f"JSON-RPC error {exc.code}: {exc.error.message}"
        except Exception as exc:  # noqa: BLE001 - every failure is a line in the report
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        return self.check(name, ok, detail)


def short(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def result_text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content if getattr(block, "type", "") == "text")


def parse_headers(values: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition(":")
        if not sep or not name.strip():
            sys.exit(f"--header wants 'Name: value', got {value!r}")
        headers[name.strip()] = rest.strip()
    return headers


def portability_problems(schema: Any, path: str = "$") -> list[str]:
    """The contract's portable schema: no anyOf/oneOf/allOf/$ref/$defs/$schema, a type on every node, no null defaults."""
    problems: list[str] = []
    if not isinstance(schema, dict):
        return [f"{path} is not an object"]
    for key in ("anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "$schema"):
        if key in schema:
            problems.append(f"{path} has {key}")
    if "type" not in schema:
        problems.append(f"{path} has no type")
    elif schema["type"] == "null" or (isinstance(schema["type"], list) and "null" in schema["type"]):
        problems.append(f"{path} allows null")
    if "default" in schema and schema["default"] is None:
        problems.append(f"{path} has a null default")
    for name, sub in (schema.get("properties") or {}).items():
        problems += portability_problems(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        problems += portability_problems(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += portability_problems(schema["additionalProperties"], f"{path}{{}}")
    return problems


# --------------------------------------------------------------------------------------------
# transport, with raw HTTP (what the SDK would paper over)


def jsonrpc_headers(extra: dict[str, str], version: str) -> dict[str, str]:
    return {
        **extra,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": version,
    }


async def transport_checks(r: Report, url: str, headers: dict[str, str], timeout: float) -> None:
    async with httpx2.AsyncClient(timeout=timeout) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "skald-tests-mcp-client", "version": "1"},
            },
        }
        resp = None

        async def initialize_json() -> tuple[bool, str]:
            nonlocal resp
            resp = await http.post(url, headers=jsonrpc_headers(headers, "2025-06-18"), json=init)
            ctype = resp.headers.get("content-type", "")
            if resp.status_code != 200:
                return False, f"HTTP {resp.status_code} {short(resp.text)}"
            if not ctype.startswith("application/json"):
                return False, f"Content-Type {ctype!r}: the endpoint must answer with JSON, not an SSE stream"
            body = resp.json()
            got = (body.get("result") or {}).get("protocolVersion")
            if got != "2025-06-18":
                return False, f"protocolVersion {got!r} for a 2025-06-18 client (body {short(resp.text)})"
            return True, f"200 application/json, protocolVersion {got}"

        await r.run("transport: initialize (2025-06-18) answers 200 application/json", initialize_json)

        async def no_session() -> tuple[bool, str]:
            if resp is None:
                return False, "no initialize response"
            sid = resp.headers.get("mcp-session-id")
            return sid is None, "no Mcp-Session-Id header" if sid is None else f"Mcp-Session-Id {sid!r}: the server must keep no sessions"

        await r.run("transport: stateless (no Mcp-Session-Id)", no_session)

        async def initialized_202() -> tuple[bool, str]:
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            got = await http.post(url, headers=jsonrpc_headers(headers, "2025-06-18"), json=note)
            return got.status_code == 202, f"HTTP {got.status_code}"

        await r.run("transport: notifications/initialized answers 202", initialized_202)

        for method in ("GET", "DELETE"):

            async def not_allowed(method: str = method) -> tuple[bool, str]:
                hdrs = {**headers, "Accept": "text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
                async with http.stream(method, url, headers=hdrs, timeout=min(timeout, 10.0)) as got:
                    ctype = got.headers.get("content-type", "")
                    if got.status_code == 405:
                        return True, "405"
                    what = "opened an event stream" if "text/event-stream" in ctype else f"Content-Type {ctype!r}"
                    return False, f"HTTP {got.status_code} ({what}); a stateless JSON server answers 405"

            await r.run(f"transport: {method} answers 405", not_allowed)


# --------------------------------------------------------------------------------------------
# tools, through the SDK


async def list_all_tools(session: ClientSession) -> list[Any]:
    tools: list[Any] = []
    cursor = None
    while True:
        params = None
        if cursor:
            from mcp_types import PaginatedRequestParams

            params = PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params) if params else await session.list_tools()
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


async def tool_list_checks(r: Report, session: ClientSession) -> dict[str, Any]:
    found: dict[str, Any] = {}

    async def listing() -> tuple[bool, str]:
        tools = await list_all_tools(session)
        found.update({t.name: t for t in tools})
        missing = [name for name in TOOL_ARGS if name not in found]
        if missing:
            return False, f"missing {', '.join(missing)} (listed: {', '.join(found) or 'none'})"
        return True, f"{len(tools)} tools: {', '.join(found)}"

    await r.run("tools/list: lists OpenViking's tools (find … remember, write, edit, grep, glob, forget, add_resource, watches)", listing)

    for name, args in TOOL_ARGS.items():
        tool = found.get(name)
        if tool is None:
            continue

        async def shape(tool: Any = tool, name: str = name, args: list[str] = args) -> tuple[bool, str]:
            schema = tool.input_schema or {}
            problems = []
            if not (tool.description or "").strip():
                problems.append("no description")
            if schema.get("type") != "object":
                problems.append(f"inputSchema type {schema.get('type')!r}")
            props = schema.get("properties") or {}
            missing = [a for a in args if a not in props]
            if missing:
                problems.append(f"no argument {', '.join(missing)}")
            req_missing = [a for a in REQUIRED_ARGS.get(name, []) if a not in (schema.get("required") or [])]
            if req_missing:
                problems.append(f"{', '.join(req_missing)} not required")
            problems += portability_problems(schema)
            if problems:
                return False, "; ".join(problems[:8]) + (" …" if len(problems) > 8 else "")
            return True, f"{len(props)} arguments, portable schema"

        await r.run(f"tools/list: {name} has OpenViking's arguments and a portable schema", shape)
    return found


async def call(session: ClientSession, name: str, args: dict[str, Any], timeout: float) -> tuple[bool, str]:
    result = await session.call_tool(name, args, read_timeout_seconds=timeout)
    return bool(result.is_error), result_text(result)


def expect_ok(is_error: bool, text: str) -> str | None:
    if is_error:
        return f"isError: {short(text)}"
    if not text.strip():
        return "empty text"
    return None


async def tool_call_checks(r: Report, session: ClientSession, timeout: float) -> None:
    async def find_cat() -> tuple[bool, str]:
        err, text = await call(session, "find", {"query": CAT_QUERY, "limit": 5}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        uris = URI_RE.findall(text)
        if NIANGAO not in uris:
            return False, f"{NIANGAO} not among the URIs {uris[:5]} in {short(text)}"
        return True, f"{len(uris)} viking:// URIs, {NIANGAO} among them"

    await r.run(f"find {CAT_QUERY!r} lists niangao.md", find_cat)

    async def find_scoped() -> tuple[bool, str]:
        args = {"query": "S3 conditional writes", "target_uri": "viking://resources", "limit": 5}
        err, text = await call(session, "find", args, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        uris = HIT_RE.findall(text)
        outside = [u for u in uris if not u.startswith("viking://resources")]
        if not uris or outside:
            return False, f"URIs outside viking://resources: {outside[:3]}" if outside else f"no URI in {short(text)}"
        return True, f"{len(uris)} URIs, all under viking://resources"

    await r.run("find with target_uri viking://resources stays under it", find_scoped)

    async def search_list() -> tuple[bool, str]:
        err, text = await call(session, "search", {"query": CAT_QUERY, "limit": 5}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        if NIANGAO not in URI_RE.findall(text):
            return False, f"{NIANGAO} not in {short(text)}"
        if "<memory" in text:
            return False, "list mode returned a <memory> block"
        return True, "lists niangao.md"

    await r.run("search (list mode) lists niangao.md", search_list)

    async def search_context() -> tuple[bool, str]:
        args = {"query": CAT_QUERY, "mode": "context", "max_tokens": 1200, "limit": 4}
        err, text = await call(session, "search", args, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        if "<memory" not in text:
            return False, f"no <memory block in {short(text)}"
        if f'uri="{NIANGAO}"' not in text:
            return False, f'no <memory uri="{NIANGAO}"> in {short(text)}'
        return True, f"{text.count('<memory')} <memory> entries, niangao.md among them"

    await r.run("search (context mode) returns a <memory> block", search_context)

    async def search_context_target() -> tuple[bool, str]:
        args = {"query": CAT_QUERY, "mode": "context", "target_uri": "viking://resources"}
        err, text = await call(session, "search", args, timeout)
        return err, f"isError: {short(text)}" if err else f"accepted: {short(text)}"

    await r.run("search (context mode) refuses target_uri with an isError result", search_context_target)

    async def recall() -> tuple[bool, str]:
        err, text = await call(session, "recall", {"query": CAT_QUERY, "max_tokens": 600}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        if NIANGAO not in text:
            return False, f"{NIANGAO} not in {short(text)}"
        return True, f"{len(text)} chars, niangao.md among them"

    await r.run("recall returns the cat's memories", recall)

    async def bootstrap() -> tuple[bool, str]:
        sid = f"mcp-client-check-{uuid.uuid4().hex[:12]}"
        err, text = await call(session, "bootstrap", {"session_id": sid}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        return True, f"{len(text)} chars for a new session"

    await r.run("bootstrap returns context for a new session", bootstrap)

    async def read_one() -> tuple[bool, str]:
        err, text = await call(session, "read", {"uris": NIANGAO}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        if NIANGAO_DIET not in text:
            return False, f"body line {NIANGAO_DIET!r} not in {short(text)}"
        return True, f"{len(text)} chars, the body"

    await r.run("read (uris: a string) returns niangao.md's body", read_one)

    async def read_many() -> tuple[bool, str]:
        err, text = await call(session, "read", {"uris": [NIANGAO, VET_VISIT]}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        missing = [s for s in (NIANGAO_DIET, VET_VISIT_BODY) if s not in text]
        if missing:
            return False, f"missing {missing} in {short(text)}"
        return True, "both bodies"

    await r.run("read (uris: a list) returns both bodies", read_many)

    async def read_other_user() -> tuple[bool, str]:
        err, text = await call(session, "read", {"uris": OTHER_USER}, timeout)
        if not err:
            return False, f"not an isError result: {short(text)}"
        if not text.strip():
            return False, "isError without a message"
        return True, f"isError: {short(text, 100)}"

    await r.run(f"read {OTHER_USER} is an isError result", read_other_user)

    flat: dict[str, str] = {}

    async def list_resources() -> tuple[bool, str]:
        err, text = await call(session, "list", {"uri": "viking://resources"}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        flat["text"] = text
        missing = [d for d in ("aws", "runbooks", "tessera") if d not in text]
        if missing:
            return False, f"missing {missing} in {short(text)}"
        return True, "aws, runbooks, tessera"

    await r.run("list viking://resources shows aws, runbooks, tessera", list_resources)

    async def list_recursive() -> tuple[bool, str]:
        err, text = await call(session, "list", {"uri": "viking://resources", "recursive": True}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        leaf = "s3_conditional_writes.md"  # viking://resources/aws/s3_conditional_writes.md
        if leaf not in text:
            return False, f"no {leaf} in {short(text)}"
        if "text" in flat and text.count(leaf) <= flat["text"].count(leaf):
            return False, f"recursive lists {leaf} no more often than the flat listing"
        return True, f"reaches viking://resources/aws/{leaf}, which the flat listing does not"

    await r.run("list viking://resources recursive reaches the files", list_recursive)

    async def health() -> tuple[bool, str]:
        err, text = await call(session, "health", {}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        if "ok" not in text.lower() and "healthy" not in text.lower():
            return False, f"no ok/healthy in {short(text)}"
        return True, short(text, 100)

    await r.run("health says ok", health)

    async def remember_then_find() -> tuple[bool, str]:
        said = "The spare key to the allotment shed is under the blue watering can."
        messages = [{"role": "user", "content": said}, {"role": "assistant", "content": "Noted."}]
        err, text = await call(session, "remember", {"messages": messages}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        err, found = await call(session, "find", {"query": "where is the spare key to the allotment shed", "limit": 3}, timeout)
        if bad := expect_ok(err, found):
            return False, bad
        if "blue watering can" not in found:
            return False, f"find does not return what remember kept: {short(found)}"
        return True, short(text, 100)

    await r.run("remember keeps messages that find then returns", remember_then_find)

    async def remember_across_languages() -> tuple[bool, str]:
        # Said in Chinese, asked in English in a later call: the recall block
        # holds it (the embedded embedder is multilingual).
        messages = [
            {"role": "user", "content": "我的护照放在书房第二个抽屉里的红色文件夹中。"},
            {"role": "assistant", "content": "记住了：护照在书房第二个抽屉的红色文件夹里。"},
        ]
        err, text = await call(session, "remember", {"messages": messages}, timeout)
        if bad := expect_ok(err, text):
            return False, bad
        err, block = await call(session, "recall", {"query": "Where did I put my passport?", "max_tokens": 1600}, timeout)
        if bad := expect_ok(err, block):
            return False, bad
        if "红色文件夹" not in block:
            return False, f"recall in English does not return what was said in Chinese: {short(block)}"
        return True, "a fact said in Chinese is recalled by an English question"

    await r.run("remember in one language, recall in another", remember_across_languages)

    async def write_grep_glob_edit_tree_forget() -> tuple[bool, str]:
        uri = "viking://user/default/notes/mcp-client/heron.md"
        steps = [
            ("write", {"uri": uri, "content": "A grey heron nests by the mill pond every April."}, "Wrote"),
            ("grep", {"uri": "viking://user/default/notes", "pattern": "grey heron"}, f"{uri}:1:"),
            ("glob", {"pattern": "**/heron.md", "uri": "viking://user/default/notes"}, uri),
            ("edit", {"uri": uri, "old_string": "April", "new_string": "March"}, "Edited"),
            ("tree", {"uri": "viking://user/default/notes", "level_limit": 2}, "heron.md"),
        ]
        for name, args, says in steps:
            err, text = await call(session, name, args, timeout)
            if bad := expect_ok(err, text):
                return False, f"{name}: {bad}"
            if says not in text:
                return False, f"{name}: no {says!r} in {short(text)}"
        err, found = await call(session, "find", {"query": "where does the heron nest", "limit": 5}, timeout)
        if uri not in found:
            return False, f"find does not return the written note: {short(found)}"
        err, text = await call(session, "forget", {"uri": "viking://user/default/notes/mcp-client", "recursive": True}, timeout)
        if bad := expect_ok(err, text):
            return False, f"forget: {bad}"
        err, found = await call(session, "find", {"query": "where does the heron nest", "limit": 10}, timeout)
        if uri in found:
            return False, f"find still returns a forgotten note: {short(found)}"
        return True, "write, grep, glob, edit and tree see the note; after forget, find does not"

    await r.run("write, grep, glob, edit, tree, then forget: find follows each step", write_grep_glob_edit_tree_forget)

    async def resources_and_watches() -> tuple[bool, str]:
        err, text = await call(session, "add_resource", {"path": "https://example.com/guide.html"}, timeout)
        if not err or "temp_upload" not in text:
            return False, f"a URL is not refused with what to do instead: {short(text)}"
        err, text = await call(session, "list_watches", {}, timeout)
        if bad := expect_ok(err, text):
            return False, f"list_watches: {bad}"
        err, cancelled = await call(session, "cancel_watch", {"to_uri": "viking://resources/x"}, timeout)
        if not err:
            return False, f"cancel_watch of nothing watched succeeded: {short(cancelled)}"
        return True, f"URL refused; list_watches: {short(text, 60)}"

    await r.run("add_resource refuses a URL; list_watches and cancel_watch answer", resources_and_watches)

    async def unknown_tool() -> tuple[bool, str]:
        try:
            result = await session.call_tool("no_such_tool", {}, read_timeout_seconds=timeout)
        except MCPError as exc:
            return True, f"JSON-RPC error {exc.code}: {short(exc.error.message, 100)}"
        return False, f"answered with a result (isError={result.is_error}: {short(result_text(result))}); an unknown tool is a JSON-RPC error"

    await r.run("an unknown tool is a JSON-RPC error", unknown_tool)


# --------------------------------------------------------------------------------------------


def http_client(headers: dict[str, str], timeout: float) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout))


async def handshake_era(r: Report, url: str, headers: dict[str, str], timeout: float) -> None:
    async with http_client(headers, timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=timeout) as session:
                ok = await r.run(
                    "SDK: initialize handshake",
                    lambda: _initialize(session),
                )
                if not ok:
                    return
                await tool_list_checks(r, session)
                await tool_call_checks(r, session, timeout)


async def _initialize(session: ClientSession) -> tuple[bool, str]:
    result = await session.initialize()
    version = result.protocol_version
    info = result.server_info
    if version not in HANDSHAKE_VERSIONS:
        return False, f"negotiated {version}, expected one of {HANDSHAKE_VERSIONS}"
    if result.capabilities.tools is None:
        return False, "no tools capability"
    return True, f"protocol {version}, server {info.name} {info.version}".rstrip()


async def modern_era(r: Report, url: str, headers: dict[str, str], timeout: float) -> None:
    async with http_client(headers, timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=timeout) as session:

                async def discover() -> tuple[bool, str]:
                    result = await session.discover()
                    if MODERN_VERSION not in result.supported_versions:
                        return False, f"supportedVersions {result.supported_versions}"
                    if result.capabilities.tools is None:
                        return False, "no tools capability"
                    return True, f"supportedVersions {', '.join(result.supported_versions)}"

                if not await r.run(f"SDK: server/discover ({MODERN_VERSION}, no initialize)", discover):
                    return

                async def tools() -> tuple[bool, str]:
                    names = [t.name for t in await list_all_tools(session)]
                    missing = [n for n in TOOL_ARGS if n not in names]
                    return not missing, f"missing {missing}" if missing else f"{len(names)} tools"

                await r.run(f"SDK {MODERN_VERSION}: tools/list lists every tool", tools)

                async def find() -> tuple[bool, str]:
                    err, text = await call(session, "find", {"query": CAT_QUERY, "limit": 5}, timeout)
                    if bad := expect_ok(err, text):
                        return False, bad
                    return NIANGAO in text, "lists niangao.md" if NIANGAO in text else f"no niangao.md in {short(text)}"

                await r.run(f"SDK {MODERN_VERSION}: find {CAT_QUERY!r} lists niangao.md", find)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the MCP endpoint, e.g. http://127.0.0.1:9000/mcp")
    parser.add_argument("--header", action="append", default=[], metavar="'Name: value'",
                        help="an HTTP header for every request (repeatable), e.g. 'Authorization: Bearer KEY'")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    args = parser.parse_args()
    headers = parse_headers(args.header)
    r = Report()

    for label, phase in (("transport", transport_checks), ("handshake", handshake_era), ("2026-07-28", modern_era)):
        try:
            await asyncio.wait_for(phase(r, args.url, headers, args.timeout), timeout=args.timeout * 20)
        except Exception as exc:  # noqa: BLE001 - a dead connection is one failed line, not a traceback
            # ExceptionGroup from the SDK's task groups: report its leaves
            leaves = getattr(exc, "exceptions", None) or [exc]
            r.check(f"{label}: connection", False, "; ".join(f"{type(e).__name__}: {e}" for e in leaves)[:300])

    print(f"{r.passed} passed, {r.failed} failed", flush=True)
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
