#!/usr/bin/env node
// OpenCode plugin conformance.
//
// Loads OpenViking's OpenCode plugin (<plugins>/opencode-plugin/index.mjs,
// unmodified, in this process) the way OpenCode loads it, and plays the host
// against a server's base URL: it calls the plugin factory with a stand-in
// for OpenCode's plugin context, registers the MCP server the plugin's
// `config` hook adds and talks to it over stdio as OpenCode's MCP client
// does (the plugin's tools are that server's), and fires the hooks and bus
// events OpenCode fires for a short chat, its compaction, a session's
// deletion and the instance's shutdown. It checks what a user of the plugin
// would notice: the tools answer with the demo's content, what a tool writes
// is found and what it forgets is gone, a refused URL is a clear error, the
// first prompt carries the profile and the memories the question needs, the
// chat is captured and archived, what was said is found afterwards and
// recalled in a later session, and the plugin logs no error.
//
//   node tests/plugins/opencode.mjs --url http://127.0.0.1:PORT \
//        [--plugins ../shared/anchors/openviking/plugins] [--api-key KEY]
//        [--wait-ms N] [--keep] [--verbose]
//
// --plugins is the directory holding opencode-plugin/ (or that directory
// itself); default ../shared/anchors/openviking/plugins beside the repo.
// The server must hold the demo corpus (samplconfigs/demo) for the user
// `default`, in dev identity mode (or give --api-key for a user key).
// --wait-ms bounds how long a committed chat may take to become findable
// (default 30000). --keep keeps the temp HOME and project and prints their
// path; --verbose echoes every event, hook and tool call to stderr.
//
// Output: one "PASS|FAIL name: detail" line per check, then "N passed, N failed".
// Exit status 1 when any check failed (2 on a usage error).
// Node 20, no dependencies. Talks to the given URL only.

import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, "..", "..");
const DEMO = join(REPO, "samplconfigs", "demo", "user", "default", "memories");
const NIANGAO = "viking://user/default/memories/entities/pets/niangao.md";
const RUNBOOK = "viking://resources/runbooks/lambda_rollback_runbook.md";
const CAT_QUESTION = "what does my cat eat";
const T0 = Date.now();

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

function usage(msg) {
  if (msg) process.stderr.write(`opencode: ${msg}\n`);
  process.stderr.write(
    "usage: node opencode.mjs --url URL [--plugins DIR] [--api-key KEY] [--wait-ms N] [--keep] [--verbose]\n",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const o = {
    url: "",
    plugins: resolve(REPO, "..", "shared", "anchors", "openviking", "plugins"),
    apiKey: "",
    waitMs: 30000,
    keep: false,
    verbose: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case "--url": o.url = val().replace(/\/+$/, ""); break;
      case "--plugins": o.plugins = resolve(val()); break;
      case "--api-key": o.apiKey = val(); break;
      case "--wait-ms": o.waitMs = Number(val()); break;
      case "--keep": o.keep = true; break;
      case "--verbose": o.verbose = true; break;
      case "-h": case "--help": usage(); break;
      default: usage(`unknown argument ${a}`);
    }
  }
  if (!o.url) usage("--url is required");
  if (!/^https?:\/\/[^/]+/.test(o.url)) usage(`bad --url ${o.url}`);
  if (!(o.waitMs >= 0)) usage("--wait-ms must be a number");
  o.pluginDir = existsSync(join(o.plugins, "opencode-plugin", "index.mjs"))
    ? join(o.plugins, "opencode-plugin")
    : o.plugins;
  if (!existsSync(join(o.pluginDir, "index.mjs"))) usage(`no opencode-plugin/index.mjs under ${o.plugins}`);
  return o;
}

const opts = parseArgs(process.argv.slice(2));

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// How Skald's episode names begin for session `id` (`memory::episodes::name_stem`):
// the id, leading dots removed, when at most 24 characters; else its first 8
// and 10 hex digits of its SHA-256.
function episodeStem(id) {
  const stem = id.replace(/^\.+/, "");
  if (!stem) return "session";
  if (stem.length <= 24) return stem;
  const hex = createHash("sha256").update(id).digest("hex").slice(0, 10);
  return `${stem.slice(0, 8).replace(/[-._]+$/, "")}-${hex}`;
}

function shorten(s, n = 160) {
  const t = String(s ?? "").replace(/\s+/g, " ").trim();
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

function verbose(line) {
  if (opts.verbose) process.stderr.write(`${shorten(line, 600)}\n`);
}

/** First content line of a Markdown file: not a heading, not blank, not a comment. */
function firstLine(file, max = 40) {
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return null;
  }
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith("#") || line.startsWith("<!--") || line === "---") continue;
    return line.slice(0, max);
  }
  return null;
}

// OpenCode's identifiers: a prefix, then a time-ordered, random tail.
let idCounter = 0;
function ocId(prefix) {
  const time = (Date.now() * 0x1000 + (idCounter++ % 0x1000)).toString(16).padStart(12, "0").slice(-12);
  return `${prefix}_${time}${randomBytes(7).toString("hex")}`;
}

const RUN = randomBytes(3).toString("hex");

const results = [];
function record(name, ok, detail) {
  results.push({ name, ok: Boolean(ok) });
  process.stdout.write(`${ok ? "PASS" : "FAIL"} ${name}: ${shorten(detail, ok ? 400 : 700)}\n`);
}

// ---------------------------------------------------------------------------
// The sandbox: a temp HOME with the plugin's config, and a project directory.
// The plugin reads its server from ~/.openviking/ovcli.conf (the documented
// credential file) and its behaviour from ~/.config/opencode/openviking-config.json;
// no OPENVIKING_* variable of the caller's environment reaches it.
// ---------------------------------------------------------------------------

const root = mkdtempSync(join(tmpdir(), "skald-opencode-"));
const home = join(root, "home");
const project = join(root, "project");
for (const d of [home, project, join(home, ".openviking"), join(home, ".config", "opencode")]) {
  mkdirSync(d, { recursive: true });
}
writeFileSync(join(home, ".openviking", "ovcli.conf"),
  `${JSON.stringify({ url: opts.url, ...(opts.apiKey ? { api_key: opts.apiKey } : {}) }, null, 2)}\n`);
writeFileSync(join(home, ".config", "opencode", "openviking-config.json"), `${JSON.stringify({
  enabled: true,
  mcp: { enabled: true },
  repoContext: { enabled: true },
  autoRecall: { enabled: true },
  commitKeepRecentCount: 10,
}, null, 2)}\n`);
for (const k of Object.keys(process.env)) if (k.startsWith("OPENVIKING_")) delete process.env[k];
process.env.HOME = home;
process.env.USERPROFILE = home;

const dataDir = join(home, ".config", "opencode", "openviking");
const pluginLogFile = join(dataDir, "openviking-memory.log");
// The peer the plugin derives from the project directory and sends as X-OpenViking-Actor-Peer.
const PEER = project.replace(/[^A-Za-z0-9]/g, "-");

function pluginLog() {
  try {
    return readFileSync(pluginLogFile, "utf8").split("\n").filter((l) => l.trim()).map((l) => {
      try { return JSON.parse(l); } catch { return { level: "UNPARSABLE", message: l }; }
    });
  } catch {
    return [];
  }
}

// ---------------------------------------------------------------------------
// The server, for the checks (not the plugin's path)
// ---------------------------------------------------------------------------

async function api(method, path, body, headers = {}) {
  try {
    const res = await fetch(`${opts.url}${path}`, {
      method,
      headers: {
        "Content-Type": "application/json",
        ...(opts.apiKey ? { "X-API-Key": opts.apiKey } : {}),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(15000),
    });
    const text = await res.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: res.status, body: json, text };
  } catch (err) {
    return { status: 0, body: null, text: "", error: err?.message || String(err) };
  }
}

function describe(method, path, r) {
  return `${method} ${path} -> ${r.status || r.error} ${shorten(r.text, 200)}`;
}

async function sessionMeta(id) {
  const path = `/api/v1/sessions/${encodeURIComponent(id)}`;
  const r = await api("GET", path);
  const meta = r.status === 200 && r.body?.status !== "error" ? r.body?.result : null;
  return { r, path, meta: meta && typeof meta === "object" ? meta : null };
}

function metaLine(meta) {
  if (!meta) return "no session";
  return `total_message_count=${meta.total_message_count ?? "absent"} message_count=${meta.message_count} `
    + `commit_count=${meta.commit_count} last_commit_at=${JSON.stringify(meta.last_commit_at ?? null)}`;
}

/** REST find; the hits of every kind, best first. */
async function restFind(query, limit = 5, headers = {}) {
  const r = await api("POST", "/api/v1/search/find", { query, limit }, headers);
  const res = r.body?.result || {};
  const hits = ["memories", "resources", "skills"].flatMap((k) => (Array.isArray(res[k]) ? res[k] : []));
  hits.sort((a, b) => (Number(b.score) || 0) - (Number(a.score) || 0));
  return { r, hits };
}

// ---------------------------------------------------------------------------
// The MCP server the plugin registers, driven as OpenCode's MCP client drives a
// `type: "local"` server: its command over stdio, newline-delimited JSON-RPC.
// ---------------------------------------------------------------------------

class McpClient {
  constructor(entry) {
    this.entry = entry;
    this.nextId = 1;
    this.pending = new Map();
    this.stderr = "";
    this.exited = null;
  }

  start() {
    const [cmd, ...args] = this.entry.command;
    this.child = spawn(cmd, args, {
      cwd: project,
      env: { ...process.env, ...(this.entry.environment || {}) },
      stdio: ["pipe", "pipe", "pipe"],
    });
    this.child.stderr.on("data", (c) => { this.stderr += c; });
    this.child.on("error", (err) => { this.stderr += `spawn error: ${err.message}\n`; });
    this.child.on("exit", (code, signal) => {
      this.exited = { code, signal };
      for (const { reject } of this.pending.values()) reject(new Error(`MCP server exited (${code ?? signal})`));
      this.pending.clear();
    });
    this.child.stdin.on("error", () => { /* exited */ });
    this.nonJson = [];
    createInterface({ input: this.child.stdout }).on("line", (line) => {
      if (!line.trim()) return;
      let msg;
      try { msg = JSON.parse(line); } catch { this.nonJson.push(line); return; }
      const waiter = this.pending.get(msg.id);
      if (waiter) {
        this.pending.delete(msg.id);
        waiter.resolve(msg);
      }
    });
  }

  request(method, params, timeoutMs = 20000) {
    const id = this.nextId++;
    const msg = { jsonrpc: "2.0", id, method, ...(params === undefined ? {} : { params }) };
    verbose(`mcp -> ${JSON.stringify(msg)}`);
    return new Promise((resolvePromise, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method} got no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (m) => { clearTimeout(timer); verbose(`mcp <- ${JSON.stringify(m)}`); resolvePromise(m); },
        reject: (e) => { clearTimeout(timer); reject(e); },
      });
      this.child.stdin.write(`${JSON.stringify(msg)}\n`);
    });
  }

  notify(method, params) {
    this.child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", method, ...(params ? { params } : {}) })}\n`);
  }

  async close() {
    if (!this.child || this.exited) return;
    this.child.stdin.end();
    for (let i = 0; i < 50 && !this.exited; i++) await sleep(100);
    if (!this.exited) this.child.kill("SIGKILL");
  }
}

/** OpenCode's name for an MCP tool: `${server}_${tool}`, both sanitized. */
const ocToolName = (name) => `openviking_${String(name).replace(/[^a-zA-Z0-9_-]/g, "_")}`;

function toolText(msg) {
  const content = msg?.result?.content;
  if (!Array.isArray(content)) return "";
  return content.map((c) => (c?.type === "text" ? c.text : JSON.stringify(c))).join("\n");
}

// ---------------------------------------------------------------------------
// The host: the plugin context OpenCode hands the factory, and its events
// ---------------------------------------------------------------------------

const toasts = [];
const clientCalls = [];
const hostClient = {
  tui: {
    showToast: async (o) => { toasts.push(o?.body ?? o); return { data: true }; },
  },
  app: {
    log: async (o) => { clientCalls.push(["app.log", o?.body]); return { data: true }; },
  },
};
const shellCalls = [];
function hostShell(strings, ...values) {
  shellCalls.push(String.raw({ raw: strings }, ...values));
  return Promise.reject(new Error("the stand-in host runs no shell commands"));
}
const projectInfo = { id: "global", worktree: project, vcs: undefined, time: { created: Date.now() } };
const MODEL = { providerID: "anthropic", modelID: "claude-sonnet-4-5" };

const unhandled = [];
process.on("unhandledRejection", (err) => { unhandled.push(err?.message || String(err)); });

class Host {
  constructor(hooks) {
    this.hooks = hooks;
    this.eventErrors = [];
  }

  /** One bus event to the plugin's `event` hook (OpenCode does not await it; we do, in order). */
  async emit(event) {
    verbose(`event ${event.type} ${JSON.stringify(event.properties)}`);
    try {
      await this.hooks.event?.({ event });
    } catch (err) {
      this.eventErrors.push(`${event.type}: ${err?.message || err}`);
    }
  }

  sessionInfo(id, title) {
    const t = Date.now();
    return { id, projectID: projectInfo.id, directory: project, title, version: "1.0.0", time: { created: t, updated: t } };
  }

  async createSession(title) {
    const id = ocId("ses");
    const info = this.sessionInfo(id, title);
    await this.emit({ type: "session.created", properties: { info } });
    return info;
  }

  /**
   * One exchange, in OpenCode's order: the user message goes through
   * `chat.message` (where the plugin injects its parts), is stored
   * (message.updated, message.part.updated for every part, the plugin's
   * synthetic ones included), the system prompt goes through
   * `experimental.chat.system.transform`, the assistant's reply streams
   * (step-start, text deltas, step-finish), and the session goes idle.
   */
  async exchange(session, userText, assistantText) {
    const sessionID = session.id;
    const user = { id: ocId("msg"), sessionID, role: "user", time: { created: Date.now() }, agent: "build", model: MODEL };
    const output = { message: user, parts: [{ id: ocId("prt"), sessionID, messageID: user.id, type: "text", text: userText }] };
    let chatError = null;
    try {
      await this.hooks["chat.message"]?.({ sessionID, agent: "build", model: MODEL, messageID: user.id }, output);
    } catch (err) {
      chatError = err?.message || String(err);
    }
    verbose(`chat.message parts: ${JSON.stringify(output.parts)}`);
    await this.emit({ type: "message.updated", properties: { info: user } });
    for (const part of output.parts) await this.emit({ type: "message.part.updated", properties: { part } });

    const system = { system: ["You are opencode, an interactive CLI tool that helps users with software engineering tasks."] };
    let systemError = null;
    try {
      await this.hooks["experimental.chat.system.transform"]?.({ sessionID, model: { id: MODEL.modelID, providerID: MODEL.providerID } }, system);
    } catch (err) {
      systemError = err?.message || String(err);
    }

    const tokens = { input: 1200, output: 40, reasoning: 0, cache: { read: 0, write: 0 } };
    const assistant = {
      id: ocId("msg"), sessionID, role: "assistant", parentID: user.id, time: { created: Date.now() },
      modelID: MODEL.modelID, providerID: MODEL.providerID, mode: "build", agent: "build",
      path: { cwd: project, root: project }, cost: 0, tokens: { input: 0, output: 0, reasoning: 0, cache: { read: 0, write: 0 } },
    };
    await this.emit({ type: "message.updated", properties: { info: assistant } });
    await this.emit({ type: "message.part.updated", properties: { part: { id: ocId("prt"), sessionID, messageID: assistant.id, type: "step-start" } } });
    const textPart = { id: ocId("prt"), sessionID, messageID: assistant.id, type: "text", text: "", time: { start: Date.now() } };
    const cut = assistantText.indexOf(" ", Math.floor(assistantText.length / 2));
    for (const delta of cut > 0 ? [assistantText.slice(0, cut), assistantText.slice(cut)] : [assistantText]) {
      textPart.text += delta;
      await this.emit({ type: "message.part.updated", properties: { part: { ...textPart }, delta } });
    }
    textPart.time = { ...textPart.time, end: Date.now() };
    await this.emit({ type: "message.part.updated", properties: { part: { ...textPart } } });
    await this.emit({ type: "message.part.updated", properties: { part: { id: ocId("prt"), sessionID, messageID: assistant.id, type: "step-finish", reason: "stop", cost: 0, tokens } } });
    await this.emit({ type: "message.updated", properties: { info: { ...assistant, time: { ...assistant.time, completed: Date.now() }, finish: "stop", tokens } } });
    await this.emit({ type: "session.status", properties: { sessionID, status: { type: "idle" } } });
    await this.emit({ type: "session.idle", properties: { sessionID } });
    return { output, system, chatError, systemError };
  }

  /** Compaction: the `experimental.session.compacting` hook, the summary, then session.compacted. */
  async compact(session) {
    let error = null;
    try {
      await this.hooks["experimental.session.compacting"]?.({ sessionID: session.id }, { context: [], prompt: undefined });
    } catch (err) {
      error = err?.message || String(err);
    }
    await this.emit({ type: "session.compacted", properties: { sessionID: session.id } });
    return error;
  }

  async deleteSession(session) {
    await this.emit({ type: "session.deleted", properties: { info: { ...session, time: { ...session.time, updated: Date.now() } } } });
  }
}

/** The text of the injected synthetic parts of a `chat.message` output. */
function injected(output) {
  return output.parts.filter((p) => p.synthetic).map((p) => p.text).join("\n");
}

function logLines(pattern, since = 0) {
  return pluginLog().slice(since).filter((l) => pattern.test(String(l.message || "")));
}

// ---------------------------------------------------------------------------
// The suite
// ---------------------------------------------------------------------------

async function checkTools(mcp, tools) {
  const called = new Set();
  const call = async (name, args) => {
    called.add(name);
    const t = Date.now();
    try {
      const msg = await mcp.request("tools/call", { name, arguments: args });
      return { msg, text: toolText(msg), isError: Boolean(msg?.result?.isError), rpcError: msg?.error, ms: Date.now() - t };
    } catch (err) {
      return { msg: null, text: "", isError: true, rpcError: { message: err?.message || String(err) }, ms: Date.now() - t };
    }
  };
  const has = (name) => tools.some((t) => t.name === name);
  const failure = (r) => (r.rpcError
    ? `JSON-RPC error ${r.rpcError.code ?? ""} ${r.rpcError.message}${r.rpcError.data ? ` ${JSON.stringify(r.rpcError.data)}` : ""}`
    : `isError: ${shorten(r.text, 200)}`);
  /** A call that must succeed and whose text must hold `expect` (a string or a RegExp). */
  const expectOk = async (name, args, expect, what) => {
    if (!has(name)) return record(`tool.${ocToolName(name)}`, false, `the MCP server lists no ${name} tool`);
    const r = await call(name, args);
    const label = `tool.${ocToolName(name)}${what ? `.${what}` : ""}`;
    if (r.rpcError || r.isError) return record(label, false, `${JSON.stringify(args)} -> ${failure(r)}`), r;
    const hit = expect instanceof RegExp ? expect.test(r.text) : r.text.includes(expect);
    record(label, hit, hit
      ? `${JSON.stringify(args)} -> ${String(expect)} in the answer (${r.text.length} chars, ${r.ms} ms)`
      : `${JSON.stringify(args)} -> no ${String(expect)} in "${shorten(r.text, 200)}"`);
    return r;
  };
  /** A call the server must refuse with a tool error whose text explains why (not a protocol error). */
  const expectRefusal = async (name, args, explain, what) => {
    if (!has(name)) return record(`tool.${ocToolName(name)}.${what}`, false, `the MCP server lists no ${name} tool`);
    const r = await call(name, args);
    const label = `tool.${ocToolName(name)}.${what}`;
    if (r.rpcError) return record(label, false, `${JSON.stringify(args)} -> ${failure(r)} (a protocol error, not a tool result)`);
    if (!r.isError) return record(label, false, `${JSON.stringify(args)} -> accepted: ${shorten(r.text, 200)}`);
    record(label, explain.test(r.text), `${JSON.stringify(args)} -> isError: ${shorten(r.text, 200)}`);
  };

  const niangaoLine = firstLine(join(DEMO, "entities", "pets", "niangao.md")) || "年糕";
  const profileLine = firstLine(join(DEMO, "profile.md"), 30);

  await expectOk("health", {}, /ok|healthy/i);
  await expectOk("find", { query: CAT_QUESTION }, NIANGAO);
  await expectOk("search", { query: CAT_QUESTION }, NIANGAO, "list");
  await expectOk("search", { query: CAT_QUESTION, mode: "context" }, NIANGAO, "context");
  await expectOk("recall", { query: CAT_QUESTION }, NIANGAO);
  if (profileLine) await expectOk("bootstrap", {}, profileLine);
  await expectOk("read", { uris: [NIANGAO] }, niangaoLine);
  await expectOk("list", { uri: "viking://user/default/memories/entities/pets" }, NIANGAO);
  await expectOk("tree", { uri: "viking://user/default/memories/entities", level_limit: 2 }, "niangao.md");
  await expectOk("grep", { uri: "viking://user/default/memories", pattern: "皇家低脂" }, "niangao.md");
  await expectOk("glob", { uri: "viking://user/default/memories", pattern: "**/pets/*.md" }, NIANGAO);

  // A note where the write tool's own description puts one
  // (viking://~/resources/notes/…, inside find's scope with an acting peer):
  // found by find, then forgotten.
  const note = `viking://~/resources/notes/opencode-${RUN}.md`;
  const noteQuery = `where is the wifi password for the lake cabin ${RUN} written`;
  const wn = await expectOk("write", {
    uri: note, mode: "create",
    content: `# Lake cabin\n\nThe wifi password for the lake cabin ${RUN} is written inside the lid of the board game cupboard.\n`,
  }, /./, "note");
  if (wn && !wn.isError && !wn.rpcError && has("find")) {
    const label = "tool.openviking_find.finds-written-note";
    const r = await call("find", { query: noteQuery, limit: 5 });
    if (r.rpcError || r.isError) {
      record(label, false, `${noteQuery} -> ${failure(r)}`);
    } else if (r.text.includes(`opencode-${RUN}.md`)) {
      record(label, true, `find "${noteQuery}" lists the note (${r.ms} ms)`);
    } else {
      // Why not: the same find over REST, with and without the peer the proxy sends.
      const body = { query: noteQuery, limit: 5 };
      const rank = async (headers, extra = {}) => {
        const x = await api("POST", "/api/v1/search/find", { ...body, ...extra }, headers);
        const res = x.body?.result || {};
        const hits = ["memories", "resources", "skills"].flatMap((k) => (Array.isArray(res[k]) ? res[k] : []));
        hits.sort((a, b) => (Number(b.score) || 0) - (Number(a.score) || 0));
        const i = hits.findIndex((h) => String(h.uri).includes(`opencode-${RUN}.md`));
        return x.status !== 200 ? `HTTP ${x.status || x.error}`
          : i < 0 ? `not among its ${hits.length} hits` : `hit ${i + 1} of ${hits.length} (score ${Number(hits[i].score).toFixed(2)})`;
      };
      const peer = { "X-OpenViking-Actor-Peer": PEER };
      record(label, false, `find "${noteQuery}" (limit 5) does not list ${note}. `
        + `POST /api/v1/search/find ${JSON.stringify(body)}: without X-OpenViking-Actor-Peer -> ${await rank({})}; `
        + `with X-OpenViking-Actor-Peer (as the plugin's MCP proxy sends it) -> ${await rank(peer)}; `
        + `with that header and target_uri viking://~/resources/notes -> ${await rank(peer, { target_uri: "viking://~/resources/notes" })}`);
    }
  }
  if (wn && !wn.isError && !wn.rpcError) await expectOk("forget", { uri: note }, /./, "note");

  // A memory: written, found, edited, read back, forgotten, and then gone.
  const mem = `viking://~/memories/entities/places/opencode-${RUN}.md`;
  const memQuery = `which community garden plot ${RUN} is ours`;
  const w = await expectOk("write", {
    uri: mem, mode: "create",
    content: `# Community garden\n\nOur community garden plot ${RUN} is number 14, next to the compost bins.\n`,
  }, /./, "memory");
  if (w && !w.isError && !w.rpcError) {
    const f = await expectOk("find", { query: memQuery, limit: 5 }, `opencode-${RUN}.md`, "finds-written-memory");
    await expectOk("edit", { uri: mem, old_string: "number 14", new_string: "number 41" }, /./);
    await expectOk("read", { uris: [mem] }, "number 41", "reads-edited");
    await expectOk("forget", { uri: mem }, /./, "memory");
    if (has("read")) {
      const r = await call("read", { uris: [mem] });
      const gone = !r.rpcError && (r.isError || /not found|no such|does not exist|not exist/i.test(r.text)) && !r.text.includes("number 41");
      record("tool.openviking_read.forgotten-is-gone", gone, `${mem} after forget -> ${r.rpcError ? failure(r) : `${r.isError ? "isError: " : ""}${shorten(r.text, 160)}`}`);
    }
    if (f && has("find")) {
      const again = await call("find", { query: memQuery, limit: 5 });
      record("tool.openviking_find.forgotten-not-found", !again.rpcError && !again.isError && !again.text.includes(`opencode-${RUN}.md`),
        again.rpcError || again.isError ? failure(again) : `find no longer returns opencode-${RUN}.md`);
    }
  }

  // Remember: stored as a committed session, found as an event memory.
  const climb = `Tomasz ${RUN}`;
  const rem = await expectOk("remember", {
    messages: [
      { role: "user", content: `For later: my climbing partner ${climb} only climbs on Wednesdays at 7pm, at the Boulder Barn.` },
      { role: "assistant", content: `Noted: ${climb} climbs Wednesdays at 7pm at the Boulder Barn.` },
    ],
  }, /./);
  if (rem && !rem.isError && !rem.rpcError) {
    const deadline = Date.now() + opts.waitMs;
    let last;
    for (;;) {
      last = await call("find", { query: `when does my climbing partner ${climb} climb`, limit: 5 });
      if (!last.isError && !last.rpcError && /\/memories\/events\//.test(last.text) && last.text.includes(RUN)) break;
      if (Date.now() >= deadline) break;
      await sleep(500);
    }
    const m = last.text.match(/viking:\/\/\S*\/memories\/events\/\S+/);
    record("tool.openviking_find.finds-remembered", Boolean(m) && last.text.includes(RUN),
      m ? `${m[0].replace(/[)\],.;]+$/, "")} holds what remember stored` : `find -> ${shorten(last.text || failure(last), 200)}`);
  }

  // Resources: a URL or a server path is refused with a clear error; an
  // uploaded file is added, found, and forgotten again.
  await expectRefusal("add_resource", { path: "https://example.com/guides/porto-bakeries.md", to: `viking://~/resources/opencode-${RUN}` },
    /url|fetch|upload|temp_file_id/i, "url-refused");
  await expectRefusal("add_resource", { path: join(project, "notes.md") }, /path|server|upload|temp_file_id/i, "server-path-refused");
  if (has("add_resource")) {
    const fact = `The ferry to Ilha ${RUN} leaves from pier nine at 06:40 on weekdays.`;
    const form = new FormData();
    form.append("file", new Blob([`# Ferry timetable\n\n${fact}\n`], { type: "text/markdown" }), `ferry-${RUN}.md`);
    let tempId = "";
    let upload = "";
    try {
      const res = await fetch(`${opts.url}/api/v1/resources/temp_upload`, {
        method: "POST", body: form, headers: opts.apiKey ? { "X-API-Key": opts.apiKey } : {}, signal: AbortSignal.timeout(15000),
      });
      upload = await res.text();
      tempId = JSON.parse(upload)?.result?.temp_file_id || "";
    } catch (err) {
      upload = err?.message || String(err);
    }
    if (!tempId) {
      record("tool.openviking_add_resource.uploaded", false, `POST /api/v1/resources/temp_upload -> ${shorten(upload, 200)}`);
    } else {
      const dir = `viking://~/resources/opencode-${RUN}`;
      const added = await expectOk("add_resource", { temp_file_id: tempId, to: dir }, /./, "uploaded");
      if (added && !added.isError && !added.rpcError) {
        await expectOk("find", { query: `when does the ferry to Ilha ${RUN} leave`, limit: 5 }, `opencode-${RUN}`, "finds-added-resource");
        await expectOk("forget", { uri: dir, recursive: true }, /./, "resource");
      }
    }
  }

  await expectOk("list_watches", {}, /./);
  if (has("cancel_watch")) {
    const r = await call("cancel_watch", { to_uri: `viking://~/resources/opencode-${RUN}` });
    record("tool.openviking_cancel_watch", !r.rpcError && r.text.trim().length > 0,
      r.rpcError ? failure(r) : `${r.isError ? "isError (clear): " : ""}${shorten(r.text, 200)}`);
  }

  const untested = tools.map((t) => t.name).filter((n) => !called.has(n));
  record("tool.all-called", untested.length === 0,
    untested.length ? `not called: ${untested.map(ocToolName).join(", ")}` : `all ${tools.length} tools called`);
}

async function runSuite() {
  process.stderr.write(`opencode: ${opts.pluginDir} against ${opts.url}\n`);
  const health = await api("GET", "/health");
  record("server.health", health.status === 200 && health.body?.status !== "error", describe("GET", "/health", health));

  // --- Load the plugin as OpenCode does: import its entry, call the factory.
  const entry = join(opts.pluginDir, "index.mjs");
  const mod = await import(pathToFileURL(entry).href);
  const factory = mod.OpenVikingPlugin ?? mod.default;
  if (typeof factory !== "function") {
    record("plugin.load", false, `${entry} exports no plugin factory (${Object.keys(mod).join(", ")})`);
    return;
  }
  const ctx = { client: hostClient, project: projectInfo, directory: project, worktree: project, $: hostShell, serverUrl: new URL("http://127.0.0.1:4096") };
  let hooks;
  try {
    hooks = await factory(ctx);
  } catch (err) {
    record("plugin.load", false, `the factory threw: ${err?.message || err}`);
    return;
  }
  const hookNames = Object.keys(hooks || {});
  const wanted = ["config", "event", "chat.message", "experimental.chat.system.transform", "experimental.session.compacting", "tool.execute.before"];
  const missing = wanted.filter((h) => typeof hooks?.[h] !== "function");
  record("plugin.load", missing.length === 0, missing.length
    ? `no ${missing.join(", ")} hook (has ${hookNames.join(", ") || "none"}; is it disabled, or the server unreachable?)`
    : `hooks: ${hookNames.join(", ")}`);
  if (missing.includes("event")) return;
  const host = new Host(hooks);

  // --- The `config` hook registers the MCP server the tools come from.
  const opencodeConfig = { $schema: "https://opencode.ai/config.json", mcp: {} };
  await hooks.config?.(opencodeConfig);
  const mcpEntry = opencodeConfig.mcp?.openviking;
  const mcpOk = mcpEntry?.type === "local" && Array.isArray(mcpEntry.command) && mcpEntry.enabled !== false;
  record("config.mcp-registered", mcpOk, mcpOk ? `mcp.openviking = ${JSON.stringify(mcpEntry.command.map((c) => c.replace(opts.pluginDir, "<plugin>")))}` : `mcp = ${JSON.stringify(opencodeConfig.mcp)}`);

  // --- Tools, through that MCP server.
  let mcp = null;
  if (mcpOk) {
    mcp = new McpClient(mcpEntry);
    mcp.start();
    try {
      const init = await mcp.request("initialize", {
        protocolVersion: "2025-06-18",
        capabilities: {},
        clientInfo: { name: "opencode", version: "1.0.0" },
      }, mcpEntry.timeout || 15000);
      if (init.error) throw new Error(`initialize -> ${JSON.stringify(init.error)}`);
      mcp.notify("notifications/initialized");
      const list = await mcp.request("tools/list", {}, mcpEntry.timeout || 15000);
      const tools = Array.isArray(list?.result?.tools) ? list.result.tools : [];
      record("mcp.tools-list", tools.length > 0,
        tools.length ? `${tools.length} tools: ${tools.map((t) => ocToolName(t.name)).join(", ")}` : `tools/list -> ${shorten(JSON.stringify(list), 200)}`);
      // OpenCode also lists the server's prompts (as slash commands) and lives
      // with an error: only an answer that never comes would hold it up.
      try {
        const prompts = await mcp.request("prompts/list", {}, mcpEntry.timeout || 15000);
        record("mcp.prompts-list", true, prompts.error
          ? `answered with JSON-RPC error ${prompts.error.code} ${shorten(prompts.error.message, 80)} (OpenCode logs it and goes on)`
          : `${Array.isArray(prompts.result?.prompts) ? prompts.result.prompts.length : "no"} prompts`);
      } catch (err) {
        record("mcp.prompts-list", false, err?.message || String(err));
      }
      if (tools.length) await checkTools(mcp, tools);
    } catch (err) {
      record("mcp.tools-list", false, `${err?.message || err}; proxy stderr: ${shorten(mcp.stderr, 200) || "empty"}`);
    }
  }

  // --- Guard: OpenCode's own file tools refuse viking:// URIs and name the MCP tool.
  {
    let blocked = null;
    try {
      await hooks["tool.execute.before"]({ tool: "read", sessionID: "ses_guard", callID: "call_1" }, { args: { filePath: NIANGAO } });
    } catch (err) {
      blocked = err?.message || String(err);
    }
    let passedLocal = true;
    try {
      await hooks["tool.execute.before"]({ tool: "read", sessionID: "ses_guard", callID: "call_2" }, { args: { filePath: join(project, "README.md") } });
    } catch {
      passedLocal = false;
    }
    record("tool-guard.viking-uri", Boolean(blocked && /openviking_read/.test(blocked)) && passedLocal,
      blocked ? `read(${NIANGAO}) blocked: ${shorten(blocked, 140)}${passedLocal ? "" : "; a local path was blocked too"}` : "read of a viking:// URI was not blocked");
  }

  // --- A chat: three exchanges, the first asking about the cat, two stating a fact.
  const logStart = pluginLog().length;
  const chat = await host.createSession("Porto weekend");
  const ovChat = `oc-${chat.id}`;
  // The first question is not the cat's: what this chat says is kept, and the
  // suites run after this one on the same store ask about the cat.
  const t1 = await host.exchange(chat, "Before I leave for the weekend: how do I roll back a bad Lambda deploy?",
    "Follow the Lambda rollback runbook: point the live alias back at the previous version, then check the error rate.");

  // The system prompt lists the indexed repositories.
  {
    const prompt = t1.system.system.find((s) => s.includes("OpenViking - Indexed Code Repositories")) || "";
    const repos = prompt.match(/viking:\/\/resources\/[^\s)]+/g) || [];
    record("system-transform.repo-context", !t1.systemError && repos.length > 0,
      t1.systemError ? `threw: ${t1.systemError}` : repos.length ? `system prompt lists ${repos.length} resources, e.g. ${repos[0]}` : "no repository block in the system prompt");
  }
  // The first prompt carries the session-start block with the profile...
  {
    const text = injected(t1.output);
    const profileLine = firstLine(join(DEMO, "profile.md"), 30);
    const m = text.match(/<user-profile uri="([^"]+)">/);
    const ok = !t1.chatError && text.includes('<openviking-context source="session-start">') && m && (!profileLine || text.includes(profileLine));
    record("chat-message.session-start-profile", ok,
      t1.chatError ? `chat.message threw: ${t1.chatError}`
        : ok ? `${m[1]} injected as a synthetic part (${text.length} chars)`
          : `no profile block in the injected parts (${shorten(text, 200) || "nothing injected"})`);
  }
  // ...and the memories the question needs.
  {
    const text = injected(t1.output);
    const stages = logLines(/^recall_/, logStart).map((l) => l.message);
    const path = stages.includes("recall_context_assembled") ? "context search" : stages.join(",") || "no recall log";
    const recall = t1.output.parts.find((p) => p.synthetic && p.text.startsWith("<openviking-context>"));
    record("chat-message.recall", Boolean(recall) && recall.text.includes(RUNBOOK) && path === "context search",
      recall ? `${recall.text.includes(RUNBOOK) ? RUNBOOK : `no ${RUNBOOK}`} in the recall block (${recall.text.length} chars, via ${path})`
        : `no recall block injected (via ${path})`);
  }

  const facts = [
    ["Something to remember: my sister's bakery in Porto is called Miolo. It's on Rua das Flores, near the Sao Bento station.",
      "Noted: your sister runs Miolo, a bakery on Rua das Flores in Porto, near Sao Bento."],
    ["She opened Miolo in 2019 and the pastel de nata there is her own recipe, so we'll stop by on Saturday morning.",
      "Great, a Saturday morning stop at Miolo for her pastel de nata then."],
  ];
  const turns = [t1];
  for (const [u, a] of facts) turns.push(await host.exchange(chat, u, a));

  // Captured after each idle: every user and assistant message, once, without the injected block.
  {
    const { meta, r, path } = await sessionMeta(ovChat);
    const count = Number(meta?.total_message_count ?? meta?.message_count ?? -1);
    const want = turns.length * 2;
    record("chat.capture", count === want, meta ? `${ovChat}: ${metaLine(meta)} (${want} messages sent over ${turns.length} idles)` : describe("GET", path, r));
    const ctxPath = `/api/v1/sessions/${encodeURIComponent(ovChat)}/context?token_budget=32000`;
    const c = await api("GET", ctxPath);
    const msgs = Array.isArray(c.body?.result?.messages) ? c.body.result.messages : [];
    const texts = msgs.map((m) => (m.parts || []).map((p) => p.text || "").join(" ") + (m.content || ""));
    const leaked = texts.filter((t) => /<openviking-context|<user-profile/.test(t)).length;
    const saysMiolo = texts.some((t) => t.includes("Miolo"));
    record("chat.capture.clean", c.status === 200 && leaked === 0 && saysMiolo,
      c.status !== 200 ? describe("GET", ctxPath, c)
        : `${msgs.length} live messages, ${leaked} holding the plugin's injected block, the fact ${saysMiolo ? "present" : "absent"}`);
  }

  // Compaction ends the stretch: the plugin flushes and commits (keep_recent_count 10).
  const beforeCompact = pluginLog().length;
  const compactError = await host.compact(chat);
  {
    const commits = logLines(/^Committed OpenViking session$/, beforeCompact).filter((l) => l.data?.openviking_session === ovChat);
    const reasons = commits.map((l) => l.data?.reason);
    const failed = logLines(/Failed to commit|Queued OpenViking session commit/, beforeCompact);
    const { meta } = await sessionMeta(ovChat);
    record("chat.compaction.commit", !compactError && reasons.includes("experimental.session.compacting") && failed.length === 0,
      compactError ? `experimental.session.compacting threw: ${compactError}`
        : `commits accepted for ${reasons.join(", ") || "nothing"}${failed.length ? `; ${failed[0].message}: ${JSON.stringify(failed[0].data)}` : ""}; ${metaLine(meta)}`);
    const listed = await api("GET", "/api/v1/sessions");
    const ids = Array.isArray(listed.body?.result) ? listed.body.result.map((s) => s.session_id || s.id) : [];
    record("chat.sessions-listed", ids.includes(ovChat), ids.includes(ovChat) ? `GET /api/v1/sessions lists ${ovChat} (${ids.length} sessions)` : describe("GET", "/api/v1/sessions", listed));
  }

  // What was said is found: an event memory of this session holding the fact.
  {
    const query = "What is my sister's bakery in Porto called?";
    const deadline = Date.now() + opts.waitMs;
    let found = null;
    let last;
    for (;;) {
      last = await restFind(query, 5);
      found = last.hits.find((h) => /\/memories\/events\//.test(h.uri || "") && String(h.uri).includes(`/${episodeStem(ovChat)}-`) && /Miolo/.test(`${h.abstract || ""} ${h.overview || ""}`));
      if (!found) {
        for (const h of last.hits.filter((x) => /\/memories\/events\//.test(x.uri || "") && String(x.uri).includes(`/${episodeStem(ovChat)}-`))) {
          const rd = await api("GET", `/api/v1/content/read?uri=${encodeURIComponent(h.uri)}`);
          if (JSON.stringify(rd.body ?? "").includes("Miolo")) { found = h; break; }
        }
      }
      if (found || Date.now() >= deadline) break;
      await sleep(500);
    }
    record("chat.archived-fact-found", Boolean(found),
      found ? `POST /api/v1/search/find "${query}" -> ${found.uri} (score ${Number(found.score).toFixed(3)})`
        : `POST /api/v1/search/find "${query}" -> ${last.r.status || last.r.error}: ${last.hits.slice(0, 3).map((h) => h.uri).join(", ") || shorten(last.r.text, 200)}`);
  }

  // A later session: the question brings the fact back.
  const later = await host.createSession("Saturday plans");
  const ovLater = `oc-${later.id}`;
  const q = await host.exchange(later, "What's the name of my sister's bakery in Porto again?", "It's Miolo, on Rua das Flores.");
  {
    const recall = q.output.parts.find((p) => p.synthetic && p.text.startsWith("<openviking-context>"));
    const ok = Boolean(recall) && recall.text.includes("Miolo");
    const uri = recall?.text.match(/viking:\/\/\S*\/memories\/events\/[^\s"<]+/);
    record("chat-message.memory-loop", ok,
      ok ? `the later session's recall block holds "Miolo"${uri ? ` from ${uri[0]}` : ""}`
        : recall ? `recall block without "Miolo": ${shorten(recall.text, 200)}` : `no recall block (${q.chatError || "nothing injected"})`);
  }

  // Deleting a session commits it.
  const beforeDelete = pluginLog().length;
  await host.deleteSession(later);
  {
    const commits = logLines(/^Committed OpenViking session$/, beforeDelete).filter((l) => l.data?.openviking_session === ovLater);
    const failed = logLines(/Failed to commit|Queued OpenViking session commit/, beforeDelete);
    const { meta } = await sessionMeta(ovLater);
    record("session-deleted.commit", commits.some((l) => l.data?.reason === "session.deleted") && failed.length === 0 && meta,
      `commit ${commits.length ? "accepted" : "not logged"} for session.deleted${failed.length ? `; ${failed[0].message}` : ""}; ${ovLater}: ${metaLine(meta)}`);
  }

  // Shutting down: dispose flushes and commits what is left.
  {
    let error = null;
    try {
      await hooks.dispose?.();
    } catch (err) {
      error = err?.message || String(err);
    }
    const disposed = logLines(/plugin disposed/).length > 0;
    record("dispose.flush", !error && disposed, error ? `dispose threw: ${error}` : "dispose committed the open sessions and resolved");
  }

  if (mcp) {
    await mcp.close();
    const bad = mcp.nonJson.length;
    record("mcp.stdout-clean", bad === 0 && (mcp.exited?.code === 0 || mcp.exited?.signal == null),
      `${bad} non-JSON stdout lines; the proxy exited ${mcp.exited ? (mcp.exited.code ?? mcp.exited.signal) : "not"} on stdin close`);
  }

  // Hygiene: no ERROR/WARN in the plugin's log, nothing queued for retry, no toast, no thrown event hook.
  await sleep(400); // the plugin's debounced state save
  {
    const lines = pluginLog();
    const bad = lines.filter((l) => l.level === "ERROR" || l.level === "WARN" || l.level === "UNPARSABLE");
    const pendingDir = join(home, ".openviking", "pending");
    const pending = existsSync(pendingDir) ? readdirSync(pendingDir).filter((f) => f.endsWith(".json")) : [];
    const problems = [
      ...bad.slice(0, 2).map((l) => `${l.level} ${l.tool}: ${l.message} ${shorten(JSON.stringify(l.data ?? ""), 120)}`),
      ...(pending.length ? [`${pending.length} requests queued for retry in ~/.openviking/pending`] : []),
      ...toasts.map((t) => `toast: ${t?.message}`),
      ...host.eventErrors.map((e) => `event hook threw on ${e}`),
      ...unhandled.map((e) => `unhandled rejection: ${e}`),
      ...(shellCalls.length ? [`ran ${shellCalls.length} shell commands`] : []),
    ];
    record("plugin.no-errors", problems.length === 0 && lines.length > 0,
      problems.length ? `${problems.length} problems, e.g. ${problems.slice(0, 3).join("; ")}`
        : `${lines.length} log lines, none an error or warning; nothing queued; no toast`);
  }
}

let exitCode = 0;
try {
  await runSuite();
} catch (err) {
  record("suite", false, `the runner crashed: ${err?.stack || err}`);
} finally {
  if (opts.keep) process.stderr.write(`opencode: kept ${root}\n`);
  else rmSync(root, { recursive: true, force: true });
}
const passed = results.filter((r) => r.ok).length;
const failed = results.length - passed;
process.stdout.write(`${passed} passed, ${failed} failed\n`);
process.stderr.write(`opencode: ${((Date.now() - T0) / 1000).toFixed(1)} s\n`);
exitCode = failed > 0 ? 1 : 0;
process.exit(exitCode);
