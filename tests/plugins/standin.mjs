#!/usr/bin/env node
// Misbehaving stand-in servers for the plugin conformance harness's self-test.
//
// Each mode breaks the plugins in a different, user-visible way, so that the
// self-test can show every conformance check is able to fail:
//
//   404   every route answers 404 (a server without the plugin surface);
//   dumb  /health and the read routes answer, but nothing is stored: sessions
//         never count messages or commits, no profile, no archive, and
//         context search returns the same block on every call (no dedup);
//   hang  accepts connections and never answers (hooks run out of time).
//
// Usable on its own, to point conformance.mjs at by hand:
//   node tests/plugins/standin.mjs --mode dumb [--port 0]
// Binds 127.0.0.1 only.

import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import { resolve } from "node:path";

const NIANGAO = "viking://user/default/memories/entities/pets/niangao.md";

function send(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
  res.end(text);
}

function notFound(res, path) {
  send(res, 404, { status: "error", error: { code: "NOT_FOUND", message: `no route ${path}` } });
}

function ok(res, result) {
  send(res, 200, { status: "ok", result });
}

function dumb(req, res, path) {
  const m = req.method;
  if (m === "GET" && path === "/health") {
    return send(res, 200, { status: "ok", healthy: true, version: "standin" });
  }
  if (m === "GET" && path === "/api/v1/system/status") return ok(res, { initialized: true, user: "default" });
  if (m === "GET" && path === "/api/v1/fs/ls") return ok(res, []);
  if (m === "POST" && path === "/api/v1/search/search") {
    const rendered = `<memory uri="${NIANGAO}" type="entities" score="0.90" detail="full">\n`
      + "Niangao is an orange tabby cat.\n</memory>";
    return ok(res, {
      entries: [{ uri: NIANGAO, category: "entities", score: 0.9, detail: "full", text: "Niangao is an orange tabby cat." }],
      rendered,
      digest: "",
      stats: {},
    });
  }
  const s = path.match(/^\/api\/v1\/sessions\/([^/]+)(\/.*)?$/);
  if (s) {
    const id = decodeURIComponent(s[1]);
    const rest = s[2] || "";
    if (m === "GET" && rest === "") {
      return ok(res, { session_id: id, message_count: 0, total_message_count: 0, commit_count: 0, pending_tokens: 0 });
    }
    if (m === "POST" && (rest === "/messages" || rest === "/messages/batch")) {
      return ok(res, { session_id: id, message_count: 0 });
    }
    if (m === "POST" && rest === "/commit") {
      return ok(res, { session_id: id, status: "accepted", archived: false });
    }
    if (m === "GET" && rest === "/context") {
      return ok(res, { latest_archive_overview: "", pre_archive_abstracts: [], messages: [] });
    }
  }
  return notFound(res, path);
}

/** Start a stand-in on 127.0.0.1; resolves to { url, close() }. */
export function startStandin(mode, port = 0) {
  if (!["404", "dumb", "hang"].includes(mode)) throw new Error(`unknown stand-in mode: ${mode}`);
  const sockets = new Set();
  const server = createServer((req, res) => {
    const path = new URL(req.url, "http://127.0.0.1").pathname;
    req.resume();
    req.on("end", () => {
      if (mode === "hang") return; // never answer
      if (mode === "404") return notFound(res, path);
      return dumb(req, res, path);
    });
  });
  server.on("connection", (sock) => {
    sockets.add(sock);
    sock.on("close", () => sockets.delete(sock));
  });
  return new Promise((resolvePromise, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => {
      const { port: bound } = server.address();
      resolvePromise({
        url: `http://127.0.0.1:${bound}`,
        close: () => new Promise((done) => {
          for (const sock of sockets) sock.destroy();
          server.close(() => done());
        }),
      });
    });
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const get = (flag, fallback) => {
    const i = args.indexOf(flag);
    return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
  };
  const mode = get("--mode", "404");
  const port = Number(get("--port", "0"));
  const srv = await startStandin(mode, port);
  process.stdout.write(`${srv.url}\n`);
  const stop = () => srv.close().then(() => process.exit(0));
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}
