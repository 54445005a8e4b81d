// Shared test kit: the proxy child, child Node processes running the package, temp dirs.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath, pathToFileURL } from "node:url";
import { detach } from "./server.mjs";

const here = dirname(fileURLToPath(import.meta.url));
export const packageUrl = pathToFileURL(join(here, "..", "..", "index.js")).href;

/** Temp dirs to remove when the test process exits: one exit listener for all of them. */
const tempDirs = [];
process.once("exit", () => {
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
});

/** A temp dir removed when the test process exits. */
export function tempDir(prefix = "ursula-js-") {
  const d = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(d);
  return d;
}

/** A stream URL no other test uses. */
let n = 0;
export function streamUrl(base, name = "db") {
  n += 1;
  return `${base}/t${process.pid}x${Date.now().toString(36)}/${name}${n}`;
}

/** Where a test opens its database: a new temp dir and a stream URL no other test uses. */
export function place(base, name) {
  return { dir: tempDir(), url: streamUrl(base, name) };
}

/** Starts the fault-injecting proxy in front of `upstreamPort`. */
export async function startProxy(upstreamPort) {
  const child = spawn(process.execPath, [join(here, "proxy.mjs"), String(upstreamPort)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await new Promise((ok, fail) => {
    const rl = createInterface({ input: child.stdout });
    rl.once("line", (l) => ok(Number(l)));
    child.once("exit", (c) => fail(new Error(`proxy exited with ${c}`)));
  });
  child.stdout.destroy();
  detach(child);
  const base = `http://127.0.0.1:${port}`;
  const post = async (path, v) => {
    const r = await fetch(`${base}/__proxy/${path}`, { method: "POST", body: JSON.stringify(v) });
    if (!r.ok) throw new Error(`proxy ${path}: ${r.status}`);
  };
  return {
    port,
    base,
    rules: (rules) => post("rules", rules),
    clear: () => post("rules", []),
    bearer: (token) => post("bearer", { token }),
    async seen() {
      return (await fetch(`${base}/__proxy/seen`)).json();
    },
    async count(method) {
      return (await this.seen()).filter(([m]) => m === method).length;
    },
    stop() {
      child.kill("SIGKILL");
    },
  };
}

/**
 * Runs `code` (an ES module body; `U` is the package) in a child Node process and resolves
 * with its exit code and output.
 */
export function runNode(code, { env = {}, timeoutMs = 30_000 } = {}) {
  const child = startNode(code, { env });
  return new Promise((ok) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("exit", (code) => {
      clearTimeout(timer);
      ok({ code, stdout: child.out.join(""), stderr: child.err.join("") });
    });
  });
}

/** Starts `code` in a child Node process; `waitLine(re)` waits for a line of its stdout. */
export function startNode(code, { env = {} } = {}) {
  const src = `import * as U from ${JSON.stringify(packageUrl)};\n${code}`;
  const child = spawn(process.execPath, ["--no-warnings", "--input-type=module", "-e", src], {
    env: { ...process.env, ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  child.out = [];
  child.err = [];
  const lines = [];
  const waiters = [];
  const rl = createInterface({ input: child.stdout });
  rl.on("line", (l) => {
    child.out.push(`${l}\n`);
    lines.push(l);
    for (const w of [...waiters]) {
      if (w.re.test(l)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.ok(l);
      }
    }
  });
  child.stderr.on("data", (d) => child.err.push(d.toString()));
  child.waitLine = (re, timeoutMs = 20_000) =>
    new Promise((ok, fail) => {
      const found = lines.find((l) => re.test(l));
      if (found) return ok(found);
      const timer = setTimeout(() => fail(new Error(`no line ${re} in: ${child.out.join("")}${child.err.join("")}`)), timeoutMs);
      waiters.push({ re, ok: (l) => (clearTimeout(timer), ok(l)) });
    });
  child.exited = new Promise((ok) => child.once("exit", ok));
  return child;
}

/**
 * Polls `f` (sync or async) every 10 ms until it returns true; fails naming `what` after `ms`.
 * For a state that settles on its own time, where a fixed sleep would guess how long it takes.
 */
export async function until(what, f, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await f()) return;
    await sleep(10);
  }
  assert.fail(`timed out waiting for ${what}`);
}

/** Calls `f` and returns what it threw (fails when it did not throw). */
export function thrown(f) {
  try {
    f();
  } catch (e) {
    return e;
  }
  throw new Error("expected a throw");
}

/** The rows of `sql`, as plain objects (node:sqlite gives null-prototype ones). */
export function rows(db, sql) {
  return db.prepare(sql).all().map((r) => ({ ...r }));
}
