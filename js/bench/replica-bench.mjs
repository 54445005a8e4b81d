// Read replicas and rebuilds, measured in one run against a local ursula server:
//  1. a live read replica's lag: from the owner's COMMIT returning to the row being visible to
//     a reader of a `follow` replica in another process, at 100 and 1,000 commits/s;
//  2. rebuilding a 100 MiB database in a fresh process: a read-only open of the latest state and
//     a point-in-time open (`at`), in MB/s, beside a plain fetch of the stream's bytes (the
//     ceiling of any rebuild that reads them);
//  3. the event loop's longest stall while openAsync rebuilds it, beside open.
// Usage: URSULA_URL=http://127.0.0.1:PORT node js/bench/replica-bench.mjs [MiB]
// Clocks: process.hrtime is CLOCK_MONOTONIC, one clock for every process of the machine. A lag
// can be negative: the stream acknowledges a commit (and answers the replica's long-poll)
// before the owner has written its local WAL and returned from COMMIT.
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { open, status } from "../index.js";

const base = process.env.URSULA_URL;
if (!base) throw new Error("set URSULA_URL to a running ursula server");
const MIB = Number(process.argv[2] ?? 100);
const packageUrl = pathToFileURL(fileURLToPath(new URL("../index.js", import.meta.url))).href;
const tempDir = () => mkdtempSync(join(tmpdir(), "replica-bench-"));
const run = Date.now().toString(36);

/** Sleeps `ms` (fractions too) without the event loop's timer granularity. */
const nap = (() => {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  return (ms) => {
    if (ms > 0) Atomics.wait(cell, 0, 0, ms);
  };
})();

/** Runs `code` (an async function body with `U` the package) in a fresh Node process. */
function child(code, env = {}) {
  const src = `import * as U from ${JSON.stringify(packageUrl)};\n${code}`;
  const p = spawn(process.execPath, ["--no-warnings", "--input-type=module", "-e", src], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  const lines = [];
  const waiters = [];
  p.stdout.on("data", (d) => {
    out += d;
    let i;
    while ((i = out.indexOf("\n")) >= 0) {
      const line = out.slice(0, i);
      out = out.slice(i + 1);
      const w = waiters.shift();
      if (w) w(line);
      else lines.push(line);
    }
  });
  const exited = new Promise((resolve) => p.on("exit", (code) => resolve(code)));
  return {
    line: () => (lines.length ? Promise.resolve(lines.shift()) : new Promise((r) => waiters.push(r))),
    exited,
  };
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.round((sorted.length - 1) * p))];

/** Lag of a follower in another process at `rate` commits/s for `seconds`. */
async function lag(rate, seconds) {
  const url = `${base}/bench/replica-${run}-${rate}`;
  const owner = open(url, { dir: tempDir() });
  owner.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT)");
  const total = rate * seconds;
  const follower = child(
    `
    const db = U.open(${JSON.stringify(url)}, { dir: ${JSON.stringify(tempDir())}, readOnly: true, follow: true });
    const q = db.prepare("SELECT coalesce(max(id), 0) AS m FROM t");
    const cell = new Int32Array(new SharedArrayBuffer(4));
    const seen = [];
    let last = 0;
    console.log("ready");
    while (last < ${total}) {
      const m = q.get().m;
      if (m > last) {
        const t = process.hrtime.bigint();
        for (let id = last + 1; id <= m; id++) seen.push([id, String(t)]);
        last = m;
      } else Atomics.wait(cell, 0, 0, 0.2);
    }
    console.log(JSON.stringify(seen));
  `,
  );
  await follower.line();
  const insert = owner.prepare("INSERT INTO t(id, body) VALUES (?, ?)");
  const committed = new Array(total + 1);
  const start = process.hrtime.bigint();
  for (let id = 1; id <= total; id++) {
    const due = start + BigInt(Math.round(((id - 1) * 1e9) / rate));
    const now = process.hrtime.bigint();
    if (due > now) nap(Number(due - now) / 1e6);
    insert.run(id, `row ${id}`);
    committed[id] = process.hrtime.bigint();
  }
  const achieved = total / (Number(process.hrtime.bigint() - start) / 1e9);
  const seen = JSON.parse(await follower.line());
  await follower.exited;
  owner.close();
  const lags = seen.map(([id, t]) => Number(BigInt(t) - committed[id]) / 1e6).sort((a, b) => a - b);
  return { rate, achieved, commits: total, p50: pct(lags, 0.5), p99: pct(lags, 0.99), max: lags.at(-1) };
}

/** Publishes about `mib` MiB of incompressible rows; returns the owner's offset and the rows. */
function publish(url, mib) {
  const db = open(url, { dir: tempDir() });
  db.exec("CREATE TABLE blobs(id INTEGER PRIMARY KEY, b BLOB)");
  const insert = db.prepare(
    "INSERT INTO blobs(b) WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1024) SELECT randomblob(4000) FROM c",
  );
  let middle = null;
  for (let i = 0; i < mib / 4; i++) {
    insert.run();
    if (i + 1 === Math.floor(mib / 8)) middle = { offset: status(db.location()).offset, rows: (i + 1) * 1024 };
  }
  const rows = db.prepare("SELECT count(*) AS n FROM blobs").get().n;
  const offset = status(db.location()).offset;
  db.close();
  return { rows, offset, middle };
}

/** A fresh process opens `url` with `options` while timers watch its event loop. */
async function rebuild(url, options, mode) {
  const p = child(
    `
    import { statSync } from "node:fs";
    import { watchLoop } from ${JSON.stringify(new URL("../test/helpers/loop.mjs", import.meta.url).href)};
    U.loadUrsulaVfs();
    const options = JSON.parse(process.env.OPTIONS);
    const loop = watchLoop(1);
    const started = loop.start();
    const db = ${JSON.stringify(mode)} === "async"
      ? await U.openAsync(${JSON.stringify(url)}, options)
      : U.open(${JSON.stringify(url)}, options);
    const ms = performance.now() - started;
    const maxGap = await loop.stop();
    const rows = db.prepare("SELECT count(*) AS n FROM blobs").get().n;
    const bytes = statSync(db.location()).size;
    console.log(JSON.stringify({ ms, rows, bytes, maxGap }));
  `,
    { OPTIONS: JSON.stringify({ dir: tempDir(), ...options }), URSULA_VFS_RETRY_MS: "30000" },
  );
  const r = JSON.parse(await p.line());
  await p.exited;
  return r;
}

/** A plain read of the whole stream, as one client reads it: the ceiling of a rebuild. */
async function fetchAll(url) {
  const started = performance.now();
  let offset = "-1";
  let bytes = 0;
  for (;;) {
    const r = await fetch(`${url}?offset=${offset}`);
    const body = await r.arrayBuffer();
    bytes += body.byteLength;
    offset = r.headers.get("stream-next-offset");
    if (r.headers.get("stream-up-to-date")) break;
  }
  return { ms: performance.now() - started, bytes };
}

const lagRows = [];
for (const [rate, seconds] of [
  [100, 10],
  [1000, 5],
]) {
  lagRows.push(await lag(rate, seconds));
}
console.log("| follower lag, COMMIT returned to row visible in another process | commits/s asked | achieved | commits | p50 ms | p99 ms | max ms |");
console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const r of lagRows) {
  console.log(
    `| \`open(url, {readOnly: true, follow: true})\` | ${r.rate} | ${r.achieved.toFixed(0)} | ${r.commits} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.max.toFixed(2)} |`,
  );
}

const url = `${base}/bench/rebuild-${run}`;
const { rows, offset, middle } = publish(url, MIB);
// The first read also warms the client up: the better of two.
const ceiling = [await fetchAll(url), await fetchAll(url)].sort((a, b) => a.ms - b.ms)[0];
const latest = await rebuild(url, { readOnly: true }, "sync");
const pitrSupported = process.env.URSULA_BENCH_AT !== "0";
const at = pitrSupported ? await rebuild(url, { readOnly: true, at: offset }, "sync") : null;
const atMiddle = pitrSupported ? await rebuild(url, { readOnly: true, at: middle.offset }, "sync") : null;
if (atMiddle && atMiddle.rows !== middle.rows) throw new Error(`the middle point holds ${atMiddle.rows} rows, not ${middle.rows}`);
const sync = await rebuild(url, { readOnly: true }, "sync");
const async_ = await rebuild(url, { readOnly: true }, "async");
for (const r of [latest, at, sync, async_]) {
  if (r && r.rows !== rows) throw new Error(`a rebuild holds ${r.rows} rows, not ${rows}`);
}
const mbs = (bytes, ms) => (bytes / 1e6 / (ms / 1000)).toFixed(0);
console.log("");
console.log(`| rebuild of a ${MIB} MiB database (${rows} rows), fresh process | ms | MB/s of database | stream MB read |`);
console.log("| --- | ---: | ---: | ---: |");
console.log(`| fetch of the whole stream, no SQLite (ceiling) | ${ceiling.ms.toFixed(0)} | ${mbs(latest.bytes, ceiling.ms)} | ${(ceiling.bytes / 1e6).toFixed(0)} |`);
console.log(`| \`open(url, {readOnly: true})\` (latest) | ${latest.ms.toFixed(0)} | ${mbs(latest.bytes, latest.ms)} | |`);
if (at) console.log(`| \`open(url, {readOnly: true, at})\` (point in time: the last commit) | ${at.ms.toFixed(0)} | ${mbs(at.bytes, at.ms)} | |`);
if (atMiddle) console.log(`| \`open(url, {readOnly: true, at})\` (point in time: half way, ${atMiddle.rows} rows) | ${atMiddle.ms.toFixed(0)} | ${mbs(atMiddle.bytes, atMiddle.ms)} | |`);
console.log("");
console.log("| event loop during the rebuild | open ms | longest gap of a 1 ms timer, ms |");
console.log("| --- | ---: | ---: |");
console.log(`| \`open\` | ${sync.ms.toFixed(0)} | ${sync.maxGap.toFixed(1)} |`);
console.log(`| \`await openAsync\` | ${async_.ms.toFixed(0)} | ${async_.maxGap.toFixed(1)} |`);
