#!/usr/bin/env node
// Plugin conformance harness.
//
// Runs OpenViking's Claude Code and Codex memory plugins' hooks, unmodified and
// straight from their folder, against a server's base URL, feeding them the
// recorded hook events in <plugins>/fixtures, and checks what a user of those
// plugins would notice: the profile shows up at session start, prompts get a
// memory block that is not repeated on the next prompt, turns are captured,
// compaction and session end archive the session, a resumed session gets its
// archive back, and no hook logs an error.
//
//   node tests/plugins/conformance.mjs --url http://127.0.0.1:PORT \
//        --plugins ../shared/anchors/openviking/plugins
//   node tests/plugins/conformance.mjs --self-test --plugins ...   (every check
//        must fail against at least one misbehaving stand-in server)
//
// Options:
//   --profile FILE        profile.md the server serves for the demo user; its first
//                         content line must appear in the SessionStart injection
//                         (default: samplconfigs/demo/user/default/memories/profile.md)
//   --expect-uri SUBSTR   a URI substring the fixture prompt's block must contain
//                         (repeatable, any one suffices; default "niangao"; "none" = off)
//   --only cc|codex       run one plugin
//   --hook-timeout-ms N   kill a hook after min(N, its host timeout) (default 60000)
//   --archive-wait-ms N   how long to wait for the archive overview (default 60000)
//   --fixed-session-ids   use the fixtures' session ids instead of fresh ones per run
//   --keep                keep the temp dir and print its path: per plugin, logs/ holds
//                         each hook's event, stdout, stderr and debug log; home/, tmp/ its state
//   --verbose             echo each hook's stdout/stderr/debug log to stderr
//
// Output: one "PASS|FAIL name: detail" line per check, then "N passed, N failed".
// Exit status 1 when any check failed (2 on a usage error).
// Node 20, no dependencies. Talks to the given URL only.

import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, "..", "..");
const DEFAULT_PROFILE = join(REPO, "samplconfigs", "demo", "user", "default", "memories", "profile.md");

// Fixture session ids, replaced by fresh ones per run unless --fixed-session-ids.
const CC_FIXTURE_SID = "11111111-2222-3333-4444-555555555555";
const CX_FIXTURE_SID1 = "019a0000-aaaa-bbbb-cccc-000000000001";
const CX_FIXTURE_SID2 = "019a0000-aaaa-bbbb-cccc-000000000002";

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

function usage(msg) {
  if (msg) process.stderr.write(`conformance: ${msg}\n`);
  process.stderr.write(
    "usage: node conformance.mjs --url URL --plugins DIR [--profile FILE] [--expect-uri S]...\n"
    + "       [--only cc|codex] [--hook-timeout-ms N] [--archive-wait-ms N]\n"
    + "       [--fixed-session-ids] [--api-key KEY] [--keep] [--verbose]\n"
    + "       node conformance.mjs --self-test --plugins DIR\n",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const o = {
    url: "",
    plugins: "",
    profile: DEFAULT_PROFILE,
    profileGiven: false,
    expectUris: [],
    only: "",
    hookTimeoutMs: 60000,
    archiveWaitMs: 60000,
    apiTimeoutMs: 15000,
    fixedIds: false,
    apiKey: "",
    keep: false,
    verbose: false,
    selfTest: false,
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
      case "--profile": o.profile = resolve(val()); o.profileGiven = true; break;
      case "--expect-uri": o.expectUris.push(val()); break;
      case "--only": o.only = val(); break;
      case "--hook-timeout-ms": o.hookTimeoutMs = Number(val()); break;
      case "--archive-wait-ms": o.archiveWaitMs = Number(val()); break;
      case "--fixed-session-ids": o.fixedIds = true; break;
      // The plugins send it as `Authorization: Bearer`; the harness's own
      // checks as `X-API-Key`.
      case "--api-key": o.apiKey = val(); break;
      case "--keep": o.keep = true; break;
      case "--verbose": o.verbose = true; break;
      case "--self-test": o.selfTest = true; break;
      case "-h": case "--help": usage(); break;
      default: usage(`unknown argument ${a}`);
    }
  }
  if (!o.plugins) usage("--plugins is required");
  if (!o.selfTest && !o.url) usage("--url is required");
  if (o.url && !/^https?:\/\/[^/]+/.test(o.url)) usage(`bad --url ${o.url}`);
  if (o.only && !["cc", "codex"].includes(o.only)) usage("--only takes cc or codex");
  if (!(o.hookTimeoutMs > 0) || !(o.archiveWaitMs >= 0)) usage("timeouts must be positive numbers");
  if (o.expectUris.length === 0) o.expectUris = ["niangao"];
  if (o.expectUris.includes("none")) o.expectUris = [];
  for (const sub of ["claude-code-memory-plugin", "codex-memory-plugin", "fixtures"]) {
    if (!existsSync(join(o.plugins, sub))) usage(`${o.plugins} has no ${sub}/`);
  }
  return o;
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function jsonEscapeInner(s) {
  return JSON.stringify(String(s)).slice(1, -1);
}

function shorten(s, n = 120) {
  const t = String(s ?? "").replace(/\s+/g, " ").trim();
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

/** First content line of a profile file: not a heading, not blank, not a comment. */
function profileSnippet(file) {
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return null;
  }
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith("#") || line.startsWith("<!--") || line === "---") continue;
    return line.length > 80 ? line.slice(0, 80) : line;
  }
  return null;
}

const URI_RE = /viking:\/\/[^\s<>"'()`\]]+/g;

function allUris(text) {
  return [...new Set(String(text || "").match(URI_RE) || [])].map((u) => u.replace(/[.,;:]+$/, ""));
}

/** <memory uri="..." detail="..."> elements of an injected block. */
function memoryElements(text) {
  const out = [];
  const re = /<memory\b([^>]*?)\/?>/g;
  let m;
  while ((m = re.exec(String(text || "")))) {
    const attrs = {};
    for (const a of m[1].matchAll(/([\w-]+)="([^"]*)"/g)) attrs[a[1]] = a[2];
    if (attrs.uri) out.push({ uri: attrs.uri.replace(/&amp;/g, "&"), detail: attrs.detail || "" });
  }
  return out;
}

/** URIs served with a body (any tier but bare "uri"). */
function servedUris(text) {
  return [...new Set(memoryElements(text).filter((e) => e.detail !== "uri").map((e) => e.uri))];
}

function additionalContext(run) {
  const hso = run?.json?.hookSpecificOutput;
  return hso && typeof hso.additionalContext === "string" ? hso.additionalContext : "";
}

function hookEventName(run) {
  return run?.json?.hookSpecificOutput?.hookEventName || "";
}

function stages(run) {
  return (run?.logs || []).map((l) => l.stage);
}

// ---------------------------------------------------------------------------
// Hook specs from the plugins' own hooks.json (script + the host's timeout)
// ---------------------------------------------------------------------------

function loadHooks(pluginDir) {
  const spec = JSON.parse(readFileSync(join(pluginDir, "hooks", "hooks.json"), "utf8"));
  const out = {};
  for (const [event, groups] of Object.entries(spec.hooks || {})) {
    for (const group of groups || []) {
      for (const h of group.hooks || []) {
        if (h.type !== "command") continue;
        const m = String(h.command || "").match(/^node\s+\$\{\w+\}\/(\S+\.mjs)\s*$/);
        if (!m || out[event]) continue;
        out[event] = { script: join(pluginDir, m[1]), timeoutS: Number(h.timeout) || 60 };
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// The run: temp dirs, hook processes, server reads
// ---------------------------------------------------------------------------

class Run {
  constructor(opts) {
    this.opts = opts;
    this.url = opts.url;
    this.root = mkdtempSync(join(tmpdir(), "skald-plugin-conf-"));
    this.results = [];
    this.children = new Set();
    this.fixtures = join(opts.plugins, "fixtures");
  }

  record(name, ok, detail) {
    this.results.push({ name, ok: Boolean(ok), detail: shorten(detail, 400) });
    if (!this.opts.quiet) process.stdout.write(`${ok ? "PASS" : "FAIL"} ${name}: ${shorten(detail, 400)}\n`);
  }

  cleanup() {
    for (const child of this.children) {
      try { process.kill(-child.pid, "SIGKILL"); } catch { /* gone */ }
    }
    if (this.opts.keep) {
      process.stderr.write(`conformance: kept ${this.root}\n`);
    } else {
      rmSync(this.root, { recursive: true, force: true });
    }
  }

  /** A plugin's sandbox: its own HOME, TMPDIR and agent working directory. */
  sandbox(tag, extraEnv) {
    const dir = join(this.root, tag);
    const s = {
      tag,
      home: join(dir, "home"),
      tmp: join(dir, "tmp"),
      workdir: join(dir, "work"),
      logs: join(dir, "logs"),
      data: join(dir, "data"),
      seq: 0,
      runs: [],
    };
    for (const d of [s.home, s.tmp, s.workdir, s.logs, s.data]) mkdirSync(d, { recursive: true });
    s.env = {
      PATH: process.env.PATH || "/usr/bin:/bin",
      LANG: "C.UTF-8",
      HOME: s.home,
      TMPDIR: s.tmp,
      OPENVIKING_MEMORY_ENABLED: "1",
      OPENVIKING_URL: this.url,
      OPENVIKING_WRITE_PATH_ASYNC: "0",
      OPENVIKING_DEBUG: "1",
      ...(this.opts.apiKey ? { OPENVIKING_API_KEY: this.opts.apiKey } : {}),
      ...extraEnv,
    };
    return s;
  }

  /** Read a fixture event, substitute its placeholders and session ids. */
  event(name, sb, ids = {}, patch = {}) {
    let text = readFileSync(join(this.fixtures, name), "utf8");
    text = text.replaceAll("@FIXTURES@", jsonEscapeInner(this.fixtures));
    text = text.replaceAll("@WORKDIR@", jsonEscapeInner(sb.workdir));
    const ev = JSON.parse(text);
    if (typeof ev.session_id === "string" && ids[ev.session_id]) ev.session_id = ids[ev.session_id];
    return { ...ev, ...patch };
  }

  /** Run one hook in its own process; resolves with what it printed and logged. */
  runHook(sb, hook, event, label) {
    const seq = String(++sb.seq).padStart(2, "0");
    const step = `${seq}-${label}`;
    const logFile = join(sb.logs, `${step}.log`);
    const limitMs = Math.min(this.opts.hookTimeoutMs, hook.timeoutS * 1000);
    const env = { ...sb.env, OPENVIKING_DEBUG_LOG: logFile };
    const input = JSON.stringify(event);
    writeFileSync(join(sb.logs, `${step}.event.json`), `${input}\n`);
    const t0 = Date.now();
    return new Promise((done) => {
      const child = spawn(process.execPath, [hook.script], {
        cwd: sb.workdir,
        env,
        stdio: ["pipe", "pipe", "pipe"],
        detached: true,
      });
      this.children.add(child);
      let stdout = "";
      let stderr = "";
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        try { process.kill(-child.pid, "SIGKILL"); } catch { /* gone */ }
      }, limitMs);
      child.stdout.on("data", (c) => { stdout += c; });
      child.stderr.on("data", (c) => { stderr += c; });
      child.on("error", (err) => { stderr += `spawn error: ${err.message}`; });
      child.on("close", (code, signal) => {
        clearTimeout(timer);
        this.children.delete(child);
        const ms = Date.now() - t0;
        let json = null;
        const lines = stdout.split("\n").map((l) => l.trim()).filter(Boolean);
        if (lines.length) {
          try { json = JSON.parse(lines[lines.length - 1]); } catch { json = null; }
        }
        let logs = [];
        let logMissing = false;
        try {
          logs = readFileSync(logFile, "utf8").split("\n").filter((l) => l.trim()).map((l) => {
            try { return JSON.parse(l); } catch { return { stage: "unparsable", error: l }; }
          });
        } catch {
          logMissing = true;
        }
        writeFileSync(join(sb.logs, `${step}.stdout`), stdout);
        if (stderr) writeFileSync(join(sb.logs, `${step}.stderr`), stderr);
        const run = { step, label, hook, code, signal, stdout, stderr, json, logs, logMissing, ms, limitMs, timedOut };
        sb.runs.push(run);
        if (this.opts.verbose) {
          process.stderr.write(`--- ${sb.tag} ${step} (${ms} ms, exit ${code}${timedOut ? ", killed" : ""})\n`);
          process.stderr.write(`stdout: ${stdout.trim()}\n`);
          if (stderr.trim()) process.stderr.write(`stderr: ${stderr.trim()}\n`);
          for (const l of logs) process.stderr.write(`log: ${JSON.stringify(l)}\n`);
        }
        done(run);
      });
      child.stdin.on("error", () => { /* hook may exit before reading */ });
      child.stdin.end(input);
    });
  }

  async api(method, path) {
    try {
      const res = await fetch(`${this.url}${path}`, {
        method,
        headers: {
          "Content-Type": "application/json",
          ...(this.opts.apiKey ? { "X-API-Key": this.opts.apiKey } : {}),
        },
        signal: AbortSignal.timeout(this.opts.apiTimeoutMs),
      });
      const body = await res.json().catch(() => null);
      return { status: res.status, body };
    } catch (err) {
      return { status: 0, body: null, error: err?.message || String(err) };
    }
  }

  /** GET /api/v1/sessions/{id}: the counters the plugins and users rely on. */
  async session(id) {
    const r = await this.api("GET", `/api/v1/sessions/${encodeURIComponent(id)}`);
    const meta = r.body && typeof r.body === "object" ? (r.body.result ?? null) : null;
    const exists = r.status >= 200 && r.status < 300 && meta && typeof meta === "object" && r.body.status !== "error";
    const num = (k) => (exists && Number.isFinite(Number(meta[k])) ? Number(meta[k]) : 0);
    return {
      exists: Boolean(exists),
      status: r.status,
      error: r.error,
      hasTotal: Boolean(exists && meta.total_message_count != null),
      message_count: num("message_count"),
      total_message_count: num("total_message_count"),
      commit_count: num("commit_count"),
      pending_tokens: num("pending_tokens"),
      messages() { return this.hasTotal ? this.total_message_count : this.message_count; },
      describe() {
        if (!this.exists) return `GET /sessions/${id} -> ${this.status || this.error}`;
        return `message_count=${this.message_count} total_message_count=${this.hasTotal ? this.total_message_count : "absent"} `
          + `commit_count=${this.commit_count}`;
      },
    };
  }

  /** Wait until GET /sessions/{id}/context carries a latest_archive_overview. */
  async archiveOverview(id, budget = 32000) {
    const deadline = Date.now() + this.opts.archiveWaitMs;
    let last = null;
    for (;;) {
      const r = await this.api("GET", `/api/v1/sessions/${encodeURIComponent(id)}/context?token_budget=${budget}`);
      last = r;
      const ov = r.body?.result?.latest_archive_overview;
      if (r.status === 200 && typeof ov === "string" && ov.trim()) {
        const abstracts = Array.isArray(r.body.result.pre_archive_abstracts) ? r.body.result.pre_archive_abstracts.length : 0;
        return { overview: ov.trim(), abstracts };
      }
      if (Date.now() >= deadline) break;
      await sleep(1000);
    }
    return { overview: "", lastStatus: last?.status || last?.error };
  }
}

// ---------------------------------------------------------------------------
// Shared checks
// ---------------------------------------------------------------------------

function checkProfile(run, name, r, envelope) {
  const ctx = additionalContext(r);
  if (!ctx) return run.record(name, false, `no additionalContext on stdout (${shorten(r.stdout, 160) || "empty"})`);
  if (hookEventName(r) !== "SessionStart") {
    return run.record(name, false, `hookEventName is "${hookEventName(r)}", not SessionStart`);
  }
  if (!ctx.includes(envelope)) return run.record(name, false, `no ${envelope} envelope`);
  const m = ctx.match(/<user-profile uri="(viking:\/\/user\/[^"]+\/memories\/profile\.md)">\n([\s\S]*?)\n<\/user-profile>/);
  if (!m) return run.record(name, false, "no <user-profile> block in the injection");
  const body = m[2].trim();
  if (!body) return run.record(name, false, `${m[1]} injected empty`);
  const snippet = run.snippet;
  if (snippet && !body.includes(snippet)) {
    return run.record(name, false, `${m[1]} injected, but without the profile's text "${shorten(snippet, 60)}"`);
  }
  const listing = /<available-memories>/.test(ctx) ? ", with <available-memories>" : "";
  return run.record(name, true, `${m[1]} injected (${body.length} chars${snippet ? ", profile text present" : ""}${listing})`);
}

function recallPath(r) {
  const s = stages(r);
  if (s.includes("recall_context_assembled")) return "context search";
  if (s.includes("recall_endpoint_fallback")) return "find fallback";
  if (s.some((x) => /context_face/.test(x))) return "recall fallback";
  return "unknown path";
}

function checkRecall(run, name, r, envelope) {
  const ctx = additionalContext(r);
  if (!ctx) return run.record(name, false, `no additionalContext on stdout (${shorten(r.stdout, 160) || "empty"}; ${recallPath(r)})`);
  if (hookEventName(r) !== "UserPromptSubmit") {
    return run.record(name, false, `hookEventName is "${hookEventName(r)}", not UserPromptSubmit`);
  }
  if (!ctx.includes(envelope)) return run.record(name, false, `no ${envelope} envelope`);
  const uris = allUris(ctx);
  const els = memoryElements(ctx);
  if (uris.length === 0) return run.record(name, false, "the injected block names no viking:// URI");
  if (els.length === 0) return run.record(name, false, `no <memory uri=...> element (${shorten(ctx, 120)})`);
  return run.record(name, true,
    `${els.length} <memory> entries via ${recallPath(r)}, e.g. ${els[0].uri} (${els[0].detail || "no detail"})`);
}

function checkExpectedUri(run, name, r) {
  const wanted = run.opts.expectUris;
  const uris = allUris(additionalContext(r));
  const hit = uris.find((u) => wanted.some((w) => u.includes(w)));
  if (hit) return run.record(name, true, `${hit} injected for the fixture prompt`);
  return run.record(name, false,
    `no injected URI contains ${wanted.map((w) => `"${w}"`).join(" or ")} (got ${uris.slice(0, 4).join(", ") || "none"})`);
}

function checkDedup(run, name, first, second) {
  const served1 = servedUris(additionalContext(first));
  if (served1.length === 0) return run.record(name, false, "the first prompt served no entry, so there is nothing to cool");
  if (!stages(second).includes("recall_context_assembled")) {
    return run.record(name, false, `the second prompt's context search did not succeed (${recallPath(second)})`);
  }
  const ctx2 = additionalContext(second);
  const served2 = servedUris(ctx2);
  const repeated = served1.filter((u) => served2.includes(u));
  if (repeated.length) {
    return run.record(name, false, `re-served ${repeated.length}/${served1.length} entries of the first prompt: ${repeated[0]}`);
  }
  const bare = allUris(ctx2).filter((u) => served1.includes(u)).length;
  return run.record(name, true,
    `none of the first prompt's ${served1.length} entries re-served; second prompt `
    + (ctx2 ? `served ${served2.length} other entries${bare ? ` (${bare} named bare)` : ""}` : "injected nothing new"));
}

function checkCaptured(run, name, r, before, after, reportedTurns) {
  if (!after.exists) return run.record(name, false, `after Stop: ${after.describe()}`);
  const delta = after.messages() - (before.exists ? before.messages() : 0);
  if (after.messages() <= 0 || delta <= 0) {
    return run.record(name, false, `after Stop: ${after.describe()} (before: ${before.describe()})`);
  }
  if (reportedTurns != null && after.hasTotal && delta !== reportedTurns) {
    return run.record(name, false, `hook sent ${reportedTurns} turns but total_message_count grew by ${delta}`);
  }
  return run.record(name, true,
    `${reportedTurns ?? "?"} turns sent; ${after.describe()}`);
}

function checkIncremental(run, name, before, after, added) {
  if (!after.exists) return run.record(name, false, `after the second Stop: ${after.describe()}`);
  const delta = after.messages() - before.messages();
  if (delta !== added) {
    return run.record(name, false,
      `transcript grew by ${added} turns, session messages grew by ${delta} (${before.describe()} -> ${after.describe()})`);
  }
  return run.record(name, true, `only the ${added} new turns captured; ${after.describe()}`);
}

function checkCommitted(run, name, before, after, what) {
  if (!after.exists) return run.record(name, false, `after ${what}: ${after.describe()}`);
  if (after.commit_count <= before.commit_count) {
    return run.record(name, false, `commit_count ${before.commit_count} -> ${after.commit_count} after ${what}`);
  }
  return run.record(name, true, `commit_count ${before.commit_count} -> ${after.commit_count}; pending_tokens=${after.pending_tokens}`);
}

function checkArchive(run, name, r, archive, markers) {
  const ctx = additionalContext(r);
  if (!archive.overview) {
    return run.record(name, false,
      `GET /sessions/{id}/context gave no latest_archive_overview within ${run.opts.archiveWaitMs} ms (${archive.lastStatus})`
      + (ctx ? "" : "; hook injected nothing"));
  }
  if (!ctx) return run.record(name, false, `no additionalContext on resume (${shorten(r.stdout, 160) || "empty"})`);
  for (const mk of markers) {
    if (!ctx.includes(mk)) return run.record(name, false, `resume injection lacks ${mk}`);
  }
  const probe = archive.overview.slice(0, 60);
  if (!ctx.includes(probe)) return run.record(name, false, `resume injection lacks the archive overview ("${shorten(probe, 40)}")`);
  return run.record(name, true, `archive overview injected (${archive.overview.length} chars, ${archive.abstracts} pre-archive abstracts)`);
}

/** Say, remember, recall: a later session's block holds what was said in an earlier, committed one. */
function checkRemembered(run, name, r, said) {
  const ctx = additionalContext(r);
  if (!ctx) return run.record(name, false, `no additionalContext on stdout (${shorten(r.stdout, 160) || "empty"}; ${recallPath(r)})`);
  if (!ctx.includes(said)) {
    return run.record(name, false, `the block does not hold "${said}" (${memoryElements(ctx).map((e) => e.uri).join(", ") || shorten(ctx, 160)})`);
  }
  const holder = memoryElements(ctx).find((e) => ctx.slice(ctx.indexOf(e.uri)).includes(said));
  return run.record(name, true, `"${said}" injected${holder ? ` from ${holder.uri}` : ""}`);
}

function checkHookHygiene(run, prefix, sb) {
  const bad = [];
  let slowest = null;
  for (const r of sb.runs) {
    if (!slowest || r.ms > slowest.ms) slowest = r;
    if (r.timedOut) bad.push(`${r.label} killed after ${r.limitMs} ms`);
    else if (r.code !== 0) bad.push(`${r.label} exited ${r.code ?? r.signal}`);
    else if (!r.json || typeof r.json !== "object") bad.push(`${r.label} printed no JSON object`);
  }
  if (sb.runs.length === 0) return run.record(`${prefix}.hooks.within-host-timeout`, false, "no hook ran");
  run.record(`${prefix}.hooks.within-host-timeout`, bad.length === 0,
    bad.length ? bad.slice(0, 3).join("; ")
      : `${sb.runs.length} hooks exited 0 with JSON within their hooks.json timeouts; slowest ${slowest.label} ${slowest.ms} ms`);

  const errors = [];
  for (const r of sb.runs) {
    if (r.logMissing || r.logs.length === 0) {
      errors.push(`${r.label}: no debug log written`);
      continue;
    }
    for (const l of r.logs) {
      const d = l.data && typeof l.data === "object" ? l.data : {};
      if (Object.prototype.hasOwnProperty.call(l, "error")) {
        const e = typeof l.error === "string" ? l.error : (l.error?.message || JSON.stringify(l.error));
        errors.push(`${r.label} ${l.stage}: ${e}`);
      } else if (d.error || d.ok === false || /(_error|_unsupported|_failed|fallback)$/.test(String(l.stage || ""))) {
        errors.push(`${r.label} ${l.stage}: ${shorten(JSON.stringify(d), 100)}`);
      }
    }
  }
  run.record(`${prefix}.debug-log.no-errors`, errors.length === 0,
    errors.length ? `${errors.length} error lines, e.g. ${errors.slice(0, 3).join("; ")}`
      : `${sb.runs.reduce((n, r) => n + r.logs.length, 0)} log lines from ${sb.runs.length} hooks, none an error`);
}

// ---------------------------------------------------------------------------
// Claude Code plugin
// ---------------------------------------------------------------------------

function ccContinuation(sid) {
  const turn = (uuid, role, content) => JSON.stringify({ type: role, sessionId: sid, uuid, message: { role, content } });
  return [
    turn("u4", "user", "Also keep in mind that Niangao has a vet check-up booked for January."),
    turn("a4", "assistant", [{ type: "text", text: "Got it: Niangao's vet check-up is in January." }]),
  ].join("\n") + "\n";
}

async function runClaudeCode(run) {
  const pluginDir = join(run.opts.plugins, "claude-code-memory-plugin");
  const hooks = loadHooks(pluginDir);
  const sb = run.sandbox("cc", {
    CLAUDE_PLUGIN_ROOT: pluginDir,
    // The host CLI would compress recall locally, so the server is not asked
    // for a digest; off keeps the same request without spawning `claude`.
    OPENVIKING_RECALL_COMPRESS: "off",
  });
  const sid = run.opts.fixedIds ? CC_FIXTURE_SID : randomUUID();
  const ids = { [CC_FIXTURE_SID]: sid };
  const ov = `cc-${sid}`;
  const has = (e) => Boolean(hooks[e]);

  if (has("SessionStart")) {
    const r = await run.runHook(sb, hooks.SessionStart, run.event("session-start.json", sb, ids), "SessionStart-startup");
    checkProfile(run, "cc.session-start.profile", r, '<openviking-context source="startup">');
  }

  if (has("UserPromptSubmit")) {
    const p1 = await run.runHook(sb, hooks.UserPromptSubmit, run.event("prompt.json", sb, ids), "UserPromptSubmit-1");
    checkRecall(run, "cc.user-prompt.recall", p1, "<openviking-context>");
    if (run.opts.expectUris.length) checkExpectedUri(run, "cc.user-prompt.expected-uri", p1);
    const p2 = await run.runHook(sb, hooks.UserPromptSubmit, run.event("prompt2.json", sb, ids), "UserPromptSubmit-2");
    checkDedup(run, "cc.user-prompt.dedup", p1, p2);
  }

  if (has("Stop")) {
    const before = await run.session(ov);
    const r = await run.runHook(sb, hooks.Stop, run.event("stop.json", sb, ids), "Stop-1");
    const after = await run.session(ov);
    const m = String(r.json?.systemMessage || "").match(/captured (\d+) turns/);
    checkCaptured(run, "cc.stop.capture", r, before, after, m ? Number(m[1]) : null);
  }

  if (has("PreCompact")) {
    const before = await run.session(ov);
    await run.runHook(sb, hooks.PreCompact, run.event("precompact.json", sb, ids), "PreCompact");
    checkCommitted(run, "cc.pre-compact.commit", before, await run.session(ov), "PreCompact");
  }

  if (has("SessionStart")) {
    const archive = await run.archiveOverview(ov);
    const r = await run.runHook(sb, hooks.SessionStart, run.event("session-start-resume.json", sb, ids), "SessionStart-resume");
    checkArchive(run, "cc.session-start.resume-archive", r, archive,
      ['<openviking-context source="resume">', "<session-archive>", "<archive-overview>"]);
  }

  if (has("Stop")) {
    // The conversation goes on after the resume: two more turns in the transcript.
    const transcript = join(sb.data, "transcript-continued.jsonl");
    writeFileSync(transcript, readFileSync(join(run.fixtures, "transcript.jsonl"), "utf8").replace(/\n*$/, "\n") + ccContinuation(sid));
    const before = await run.session(ov);
    await run.runHook(sb, hooks.Stop, run.event("stop.json", sb, ids, { transcript_path: transcript }), "Stop-2");
    checkIncremental(run, "cc.stop.incremental", before, await run.session(ov), 2);
  }

  if (has("SessionEnd")) {
    const before = await run.session(ov);
    await run.runHook(sb, hooks.SessionEnd, run.event("session-end.json", sb, ids), "SessionEnd");
    checkCommitted(run, "cc.session-end.commit", before, await run.session(ov), "SessionEnd");
  }

  if (has("SubagentStart") && has("SubagentStop")) {
    const sub = `${ov}__subagent-agent-abc`;
    const before = await run.session(sub);
    await run.runHook(sb, hooks.SubagentStart, run.event("substart.json", sb, ids), "SubagentStart");
    await run.runHook(sb, hooks.SubagentStop, run.event("substop.json", sb, ids), "SubagentStop");
    const after = await run.session(sub);
    const captured = after.exists && (after.hasTotal ? after.total_message_count > 0 : true);
    run.record("cc.subagent-stop.capture-commit",
      captured && after.commit_count > before.commit_count,
      `${sub}: ${after.describe()}`);
  }

  if (has("UserPromptSubmit") && has("SessionEnd")) {
    // A new session asks about what the user said in this one after the
    // resume (the continuation's turns, captured by Stop, committed by
    // SessionEnd): the block holds it.
    const later = { [CC_FIXTURE_SID]: randomUUID() };
    const r = await run.runHook(sb, hooks.UserPromptSubmit,
      run.event("prompt.json", sb, later, { prompt: "When is Niangao's vet check-up?" }), "UserPromptSubmit-later-session");
    checkRemembered(run, "cc.memory-loop.recall", r, "Niangao has a vet check-up booked for January");
  }

  checkHookHygiene(run, "cc", sb);
}

// ---------------------------------------------------------------------------
// Codex plugin
// ---------------------------------------------------------------------------

function cxContinuation() {
  const item = (ts, role, type, text) => JSON.stringify({
    timestamp: ts,
    type: "response_item",
    payload: { type: "message", role, content: [{ type, text }] },
  });
  return [
    item("2026-12-01T21:05:00Z", "user", "input_text", "Also keep in mind that Niangao has a vet check-up booked for January."),
    item("2026-12-01T21:05:04Z", "assistant", "output_text", "Got it: Niangao's vet check-up is in January."),
  ].join("\n") + "\n";
}

async function runCodex(run) {
  const pluginDir = join(run.opts.plugins, "codex-memory-plugin");
  const hooks = loadHooks(pluginDir);
  const sb = run.sandbox("codex", {
    PLUGIN_ROOT: pluginDir,
    // Codex would compress recall through `codex exec`; 0 keeps the server
    // request identical without spawning it.
    OPENVIKING_RECALL_COMPRESS: "0",
  });
  const sid1 = run.opts.fixedIds ? CX_FIXTURE_SID1 : randomUUID();
  const sid2 = run.opts.fixedIds ? CX_FIXTURE_SID2 : randomUUID();
  const ids = { [CX_FIXTURE_SID1]: sid1, [CX_FIXTURE_SID2]: sid2 };
  const ov = `cx-${sid1}`;
  const has = (e) => Boolean(hooks[e]);

  if (has("SessionStart")) {
    const r = await run.runHook(sb, hooks.SessionStart, run.event("cx-session-start-startup.json", sb, ids), "SessionStart-startup");
    checkProfile(run, "codex.session-start.profile", r, '<openviking-context source="session-start">');
  }

  if (has("UserPromptSubmit")) {
    const envelope = '<openviking-context source="auto-recall" format="digest">';
    const p1 = await run.runHook(sb, hooks.UserPromptSubmit, run.event("cx-prompt.json", sb, ids), "UserPromptSubmit-1");
    checkRecall(run, "codex.user-prompt.recall", p1, envelope);
    if (run.opts.expectUris.length) checkExpectedUri(run, "codex.user-prompt.expected-uri", p1);
    // Second prompt of the same turn sequence: prompt2.json's text in the Codex event shape.
    const prompt2 = JSON.parse(readFileSync(join(run.fixtures, "prompt2.json"), "utf8")).prompt;
    const p2 = await run.runHook(sb, hooks.UserPromptSubmit,
      run.event("cx-prompt.json", sb, ids, { prompt: prompt2, turn_id: "t2" }), "UserPromptSubmit-2");
    checkDedup(run, "codex.user-prompt.dedup", p1, p2);
  }

  if (has("Stop")) {
    const before = await run.session(ov);
    const r = await run.runHook(sb, hooks.Stop, run.event("cx-stop.json", sb, ids), "Stop-1");
    const after = await run.session(ov);
    const m = String(r.json?.systemMessage || "").match(/appended (\d+) turn/);
    checkCaptured(run, "codex.stop.capture", r, before, after, m ? Number(m[1]) : null);
  }

  if (has("PreCompact")) {
    const before = await run.session(ov);
    await run.runHook(sb, hooks.PreCompact, run.event("cx-precompact.json", sb, ids), "PreCompact");
    checkCommitted(run, "codex.pre-compact.commit", before, await run.session(ov), "PreCompact");
  }

  if (has("SessionStart")) {
    const archive = await run.archiveOverview(ov);
    const r = await run.runHook(sb, hooks.SessionStart, run.event("cx-session-start-resume.json", sb, ids), "SessionStart-resume");
    checkArchive(run, "codex.session-start.resume-archive", r, archive,
      ['<openviking-context source="session-resume" format="archive-digest">', "OpenViking session archive digest:"]);
  }

  if (has("Stop")) {
    const rollout = join(sb.data, "rollout-continued.jsonl");
    const base = readFileSync(join(run.fixtures, "cx-rollout.jsonl"), "utf8").replaceAll("@WORKDIR@", jsonEscapeInner(sb.workdir));
    writeFileSync(rollout, base.replace(/\n*$/, "\n") + cxContinuation());
    const before = await run.session(ov);
    await run.runHook(sb, hooks.Stop, run.event("cx-stop.json", sb, ids, { transcript_path: rollout, turn_id: "t2" }), "Stop-2");
    checkIncremental(run, "codex.stop.incremental", before, await run.session(ov), 2);
  }

  if (has("SessionStart")) {
    // A new Codex session starting right after: the plugin commits the one that just ended.
    const before = await run.session(ov);
    const r = await run.runHook(sb, hooks.SessionStart, run.event("cx-session-start-startup-2.json", sb, ids), "SessionStart-next");
    const after = await run.session(ov);
    const said = String(r.json?.systemMessage || "").includes(ov);
    if (!said) {
      run.record("codex.session-start.commits-previous", false,
        `no "${ov} is committed" message (${shorten(r.json?.systemMessage || r.stdout, 120) || "empty"}); ${after.describe()}`);
    } else {
      checkCommitted(run, "codex.session-start.commits-previous", before, after, "the next SessionStart");
    }
  }

  checkHookHygiene(run, "codex", sb);
}

// ---------------------------------------------------------------------------
// Suite and self-test
// ---------------------------------------------------------------------------

async function runSuite(opts) {
  const run = new Run(opts);
  run.snippet = profileSnippet(opts.profile);
  if (!run.snippet && opts.profileGiven) {
    process.stderr.write(`conformance: cannot read a content line from --profile ${opts.profile}\n`);
  }
  const onSignal = () => { run.cleanup(); process.exit(130); };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    const health = await run.api("GET", "/health");
    run.record("server.health", health.status >= 200 && health.status < 300 && health.body && health.body.status !== "error",
      `GET /health -> ${health.status || health.error} ${shorten(JSON.stringify(health.body), 100)}`);
    if (opts.only !== "codex") await runClaudeCode(run);
    if (opts.only !== "cc") await runCodex(run);
  } finally {
    process.removeListener("SIGINT", onSignal);
    process.removeListener("SIGTERM", onSignal);
    run.cleanup();
  }
  return run.results;
}

function summary(results) {
  const passed = results.filter((r) => r.ok).length;
  const failed = results.length - passed;
  process.stdout.write(`${passed} passed, ${failed} failed\n`);
  return failed;
}

async function selfTest(opts) {
  const { startStandin } = await import("./standin.mjs");
  const modes = [
    { mode: "404", hookTimeoutMs: opts.hookTimeoutMs },
    { mode: "dumb", hookTimeoutMs: opts.hookTimeoutMs },
    // Hooks wait on a server that never answers; a short cap stands in for the host's timeout.
    { mode: "hang", hookTimeoutMs: 3000 },
  ];
  const failedUnder = new Map();
  const names = [];
  for (const m of modes) {
    const srv = await startStandin(m.mode);
    let results;
    try {
      results = await runSuite({
        ...opts,
        url: srv.url,
        quiet: true,
        keep: false,
        hookTimeoutMs: m.hookTimeoutMs,
        archiveWaitMs: 1500,
        apiTimeoutMs: 1500,
      });
    } finally {
      await srv.close();
    }
    for (const r of results) {
      if (!names.includes(r.name)) names.push(r.name);
      if (!r.ok) failedUnder.set(r.name, [...(failedUnder.get(r.name) || []), m.mode]);
    }
    process.stderr.write(`self-test: stand-in "${m.mode}": ${results.filter((r) => !r.ok).length}/${results.length} checks failed\n`);
  }
  const results = names.map((name) => {
    const under = failedUnder.get(name) || [];
    const r = { name: `self-test.${name}`, ok: under.length > 0,
      detail: under.length ? `fails against stand-in ${under.join(", ")}` : "passes against every misbehaving stand-in" };
    process.stdout.write(`${r.ok ? "PASS" : "FAIL"} ${r.name}: ${r.detail}\n`);
    return r;
  });
  return results;
}

const opts = parseArgs(process.argv.slice(2));
const results = opts.selfTest ? await selfTest(opts) : await runSuite(opts);
process.exit(summary(results) > 0 ? 1 : 0);
