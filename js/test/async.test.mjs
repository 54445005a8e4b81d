// openAsync and attachAsync: the attach on libuv's thread pool, the database on the event loop.
import assert from "node:assert/strict";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { test } from "node:test";
import { attachAsync, open, openAsync, status, UrsulaWriteRefusedError } from "../index.js";
import { fileNameFor } from "../src/naming.js";
import { setupError } from "./helpers/errors.mjs";
import { useServer } from "./helpers/hooks.mjs";
import { place, rows, runNode, streamUrl, tempDir, thrown } from "./helpers/kit.mjs";
import { freePort } from "./helpers/server.mjs";

process.env.URSULA_VFS_RETRY_MS = "1000";

/** The size of the database the event-loop test rebuilds; raise it to measure by hand. */
const MIB = Number(process.env.URSULA_ASYNC_TEST_MIB || 24);

const ctx = useServer({ proxy: true });

test("openAsync resolves with the same replicated DatabaseSync as open, on the same file", async () => {
  const { dir, url } = place(ctx.server.base, "same");
  const pending = openAsync(url, { dir });
  assert.ok(pending instanceof Promise);
  const db = await pending;
  assert.ok(db instanceof DatabaseSync);
  const file = join(dir, fileNameFor(url));
  assert.equal(db.location(), file);
  assert.equal(db.prepare("PRAGMA journal_mode").get().journal_mode, "wal");
  db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  db.prepare("INSERT INTO notes(body) VALUES (?)").run("async");
  const s = status(file);
  assert.equal(s.commits, 2);
  assert.equal(s.read_only, false);
  const head = await fetch(url, { method: "HEAD" });
  assert.equal(head.headers.get("stream-next-offset"), s.offset, "the commits are in the stream");
  // A rebuild elsewhere from the stream holds the row, and a read-only openAsync refuses writes
  // as open's does.
  const reader = await openAsync(url, { dir: tempDir(), readOnly: true });
  assert.deepEqual(rows(reader, "SELECT body FROM notes"), [{ body: "async" }]);
  assert.match(reader.location(), /-ro1\.db$/);
  assert.throws(() => reader.exec("INSERT INTO notes(body) VALUES ('no')"), /readonly/);
  reader.close();
  // The same statement classification: a second open of the open database is in_use.
  setupError(thrown(() => open(url, { dir })), "in_use");
  db.close();
  // Closed, the stream opens again, with openAsync too.
  const again = await openAsync(url, { dir });
  assert.deepEqual(rows(again, "SELECT body FROM notes"), [{ body: "async" }]);
  again.close();
});

test("openAsync rejects with open's classified errors", async () => {
  await assert.rejects(openAsync("127.0.0.1:1/demo/x"), (e) => setupError(e, "invalid_url"));
  await assert.rejects(openAsync(streamUrl(ctx.server.base), { path: ":memory:" }), (e) =>
    setupError(e, "invalid_argument"),
  );
  await assert.rejects(openAsync(streamUrl(ctx.server.base, "missing"), { dir: tempDir(), readOnly: true }), (e) =>
    setupError(e, "not_found"),
  );
  const dead = `http://127.0.0.1:${await freePort()}/demo/nowhere`;
  await assert.rejects(openAsync(dead, { dir: tempDir() }), (e) => {
    assert.ok(e instanceof UrsulaWriteRefusedError, e.stack);
    assert.equal(e.kind, "unreachable");
    assert.equal(e.action, "retry");
    assert.match(e.message, /^ursula_attach: unreachable: /);
    return true;
  });
  // node:sqlite's own option check, before anything is attached.
  await assert.rejects(openAsync(streamUrl(ctx.server.base), { dir: tempDir(), timeout: "x" }), {
    code: "ERR_INVALID_ARG_TYPE",
  });
});

test("two concurrent openAsync of one URL: one opens it, the other rejects with in_use", async () => {
  const { dir, url } = place(ctx.server.base, "race");
  const [a, b] = await Promise.allSettled([openAsync(url, { dir }), openAsync(url, { dir })]);
  const won = [a, b].filter((r) => r.status === "fulfilled");
  const lost = [a, b].filter((r) => r.status === "rejected");
  assert.equal(won.length, 1, "one wins");
  assert.equal(lost.length, 1, "one loses");
  setupError(lost[0].reason, "in_use");
  const db = won[0].value;
  db.exec("CREATE TABLE t(x); INSERT INTO t VALUES (1)");
  assert.equal(status(db.location()).poisoned, false, "the winner was not disturbed");
  // A synchronous open while an openAsync of the file is unsettled is in_use too.
  db.close();
  const pending = openAsync(url, { dir });
  setupError(thrown(() => open(url, { dir })), "in_use");
  (await pending).close();
});

test("two concurrent read-only openAsync of one URL take -ro1 and -ro2", async () => {
  const url = streamUrl(ctx.server.base, "readers");
  const owner = open(url, { dir: tempDir() });
  owner.exec("CREATE TABLE t(x); INSERT INTO t VALUES (7)");
  const dir = tempDir();
  const [r1, r2] = await Promise.all([openAsync(url, { dir, readOnly: true }), openAsync(url, { dir, readOnly: true })]);
  assert.deepEqual([r1.location(), r2.location()].map((f) => f.slice(-7)).sort(), ["-ro1.db", "-ro2.db"]);
  for (const r of [r1, r2]) {
    assert.deepEqual(rows(r, "SELECT x FROM t"), [{ x: 7 }]);
    r.close();
  }
  owner.close();
});

test("two concurrent attachAsync of one file: the extension refuses the second with in_use", async () => {
  const url = streamUrl(ctx.proxy.base, "attach");
  // The first attach's HEAD is held in flight, so the second surely starts while it runs.
  await ctx.proxy.rules([{ method: "HEAD", path: new URL(url).pathname, action: "delay", delayMs: 500, times: 1 }]);
  const file = join(tempDir(), "a.db");
  try {
    const [a, b] = await Promise.allSettled([attachAsync(file, url), attachAsync(file, url)]);
    const won = [a, b].filter((r) => r.status === "fulfilled");
    const lost = [a, b].filter((r) => r.status === "rejected");
    assert.equal(won.length, 1, "one wins");
    assert.equal(typeof won[0].value, "string", "the offset, as attach returns it");
    assert.equal(lost.length, 1, "one loses");
    setupError(lost[0].reason, "in_use");
    assert.match(lost[0].reason.message, /^ursula_attach: in_use: .* is being attached in this process already/);
  } finally {
    await ctx.proxy.clear();
  }
  // The refused attach changed nothing: the file opens, attached once.
  const db = new DatabaseSync(file);
  db.exec("CREATE TABLE t(x); INSERT INTO t VALUES (1)");
  assert.equal(status(file).commits, 2);
  db.close();
});

/** Publishes a database of about `mib` MiB of incompressible rows to `url`. */
function publish(url, mib) {
  const db = open(url, { dir: tempDir() });
  db.exec("CREATE TABLE blobs(id INTEGER PRIMARY KEY, b BLOB)");
  // 4 MiB per transaction: well below the 32 MiB a frame may hold.
  const insert = db.prepare(
    "INSERT INTO blobs(b) WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1024) SELECT randomblob(4000) FROM c",
  );
  for (let i = 0; i < mib / 4; i++) insert.run();
  const rows = db.prepare("SELECT count(*) AS n FROM blobs").get().n;
  db.close();
  return rows;
}

/** A fresh process that opens `url` read-only with `mode` while a 5 ms timer counts its ticks. */
async function measure(url, mode) {
  const code = `
    import { watchLoop } from ${JSON.stringify(new URL("./helpers/loop.mjs", import.meta.url).href)};
    const { url, dir, mode } = JSON.parse(process.env.MEASURE);
    U.loadUrsulaVfs(); // the load is no part of what is measured
    const loop = watchLoop(5);
    const started = loop.start();
    const db = mode === "async" ? await U.openAsync(url, { dir, readOnly: true }) : U.open(url, { dir, readOnly: true });
    const during = loop.ticks;
    const openMs = performance.now() - started;
    const maxGap = await loop.stop();
    const rows = db.prepare("SELECT count(*) AS n FROM blobs").get().n;
    console.log(JSON.stringify({ mode, ticks: during, maxGap, openMs, rows }));
  `;
  const r = await runNode(code, {
    env: { MEASURE: JSON.stringify({ url, dir: tempDir(), mode }), URSULA_VFS_RETRY_MS: "30000" },
    timeoutMs: 120_000,
  });
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout.trim().split("\n").at(-1));
}

test("the event loop keeps running while openAsync rebuilds a database, and stops while open does", async (t) => {
  const url = streamUrl(ctx.server.base, "big");
  const rows = publish(url, MIB);
  const sync = await measure(url, "sync");
  const async_ = await measure(url, "async");
  for (const m of [sync, async_]) {
    t.diagnostic(`${MIB} MiB ${m.mode}: open ${m.openMs.toFixed(0)} ms, ${m.ticks} ticks during it, longest gap ${m.maxGap.toFixed(1)} ms`);
    assert.equal(m.rows, rows, "the rebuilt database holds every row");
  }
  // A blocking open lets no timer fire: this is what the test would see without the split.
  assert.equal(sync.ticks, 0);
  // Off the event loop, the 5 ms timer keeps firing through the rebuild (a count, not a latency).
  assert.ok(async_.ticks >= 10, `only ${async_.ticks} ticks during a ${async_.openMs} ms openAsync`);
});
