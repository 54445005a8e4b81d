// open, attach, status and loadUrsulaVfs in one process, against a real server.
import assert from "node:assert/strict";
import { existsSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { test } from "node:test";
import { attach, drainStats, loadUrsulaVfs, open, status, UrsulaError } from "../index.js";
import { fileNameFor } from "../src/naming.js";
import { setupError } from "./helpers/errors.mjs";
import { useServer } from "./helpers/hooks.mjs";
import { place, streamUrl, tempDir, thrown } from "./helpers/kit.mjs";

const ctx = useServer({ proxy: true });

test("open returns a node:sqlite DatabaseSync on a WAL file named after the stream", async () => {
  const { dir, url } = place(ctx.server.base, "notes");
  const db = open(url, { dir });
  assert.ok(db instanceof DatabaseSync);
  assert.equal(db.constructor, DatabaseSync);
  const file = join(dir, fileNameFor(url));
  assert.equal(db.location(), file);
  assert.ok(existsSync(`${file}-ursula`) && existsSync(`${file}-ursula.lock`));
  assert.equal(db.prepare("PRAGMA journal_mode").get().journal_mode, "wal");
  assert.equal(db.prepare("PRAGMA page_size").get().page_size, 4096);
  db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  db.prepare("INSERT INTO notes(body) VALUES (?)").run("one");
  const s = status(file);
  assert.equal(typeof s.offset, "string");
  assert.equal(s.commits, 2);
  assert.equal(s.error, null);
  assert.equal(s.local, "-1");
  assert.equal(s.poisoned, false);
  assert.equal(s.read_only, false);
  const head = await fetch(url, { method: "HEAD" });
  assert.equal(head.headers.get("stream-next-offset"), s.offset);
  const stats = drainStats(file);
  assert.equal(stats.commits.length, 2);
  assert.deepEqual(Object.keys(stats).sort(), ["checkpoints_us", "commits", "dropped", "snapshots"]);
  assert.equal(drainStats(file).commits.length, 0, "drained");
  db.close();
});

test("a second open of the stream while it is open is in_use; after close it opens again", () => {
  const { dir, url } = place(ctx.server.base);
  const db = open(url, { dir });
  db.exec("CREATE TABLE t(x)");
  setupError(thrown(() => open(url, { dir })), "in_use");
  assert.match(thrown(() => open(url, { dir })).message, /^ursula_attach: in_use: /);
  db.exec("INSERT INTO t VALUES (1)");
  db.close();
  const again = open(url, { dir });
  assert.deepEqual(again.prepare("SELECT x FROM t").all(), [{ __proto__: null, x: 1 }]);
  again.close();
});

test("loadUrsulaVfs returns one control connection whose SQL functions share the addon's state", () => {
  const ctl = loadUrsulaVfs();
  assert.equal(loadUrsulaVfs(), ctl);
  assert.ok(ctl instanceof DatabaseSync);
  const dir = tempDir();
  const file = join(dir, "sql.db");
  const url = streamUrl(ctx.server.base);
  const offset = ctl.prepare("SELECT ursula_attach(?, ?) AS o").get(file, url).o;
  assert.equal(typeof offset, "string");
  // Attached through SQL, read through the addon, and the other way round.
  assert.equal(status(file).offset, offset);
  const viaSql = JSON.parse(ctl.prepare("SELECT ursula_status(?) AS s").get(file).s);
  assert.equal(viaSql.offset, status(file).offset);
  const db = new DatabaseSync(file);
  db.exec("CREATE TABLE t(x)");
  assert.equal(JSON.parse(ctl.prepare("SELECT ursula_status(?) AS s").get(file).s).commits, 1);
  assert.equal(status(file).commits, 1);
  // Both spell the fields in the spec's order (offset, epoch, poisoned, fenced, reason, ...),
  // not the alphabet's.
  const first = ["offset", "epoch", "poisoned", "fenced", "reason", "read_only"];
  assert.deepEqual(Object.keys(status(file)).slice(0, first.length), first);
  assert.deepEqual(Object.keys(JSON.parse(ctl.prepare("SELECT ursula_status(?) AS s").get(file).s)).slice(0, first.length), first);
  db.close();
});

test("attach a file yourself: two connections, both commits reach the stream", async () => {
  const dir = tempDir();
  const file = join(dir, "app.db");
  const url = streamUrl(ctx.server.base);
  assert.equal(typeof attach(file, url), "string");
  const a = new DatabaseSync(file);
  const b = new DatabaseSync(file);
  a.exec("CREATE TABLE t(x)");
  a.prepare("INSERT INTO t VALUES (?)").run("a");
  b.prepare("INSERT INTO t VALUES (?)").run("b");
  assert.equal(status(file).commits, 3);
  a.close();
  b.close();
  // A rebuild elsewhere holds both.
  const other = open(url, { path: join(tempDir(), "rebuilt.db") });
  assert.deepEqual(
    other.prepare("SELECT x FROM t ORDER BY x").all().map((r) => r.x),
    ["a", "b"],
  );
  other.close();
});

test("open's own checks come before any request", async () => {
  const before = (await ctx.proxy.seen()).length;
  const { dir, url } = place(ctx.proxy.base);
  for (const path of [":memory:", "", "file:x.db"]) setupError(thrown(() => open(url, { path })), "invalid_argument");
  setupError(thrown(() => open(`${url}?a=1`, { dir })), "invalid_url");
  setupError(thrown(() => open(`${url}#f`, { dir })), "invalid_url");
  setupError(thrown(() => open(url, { dir, readOnly: "yes" })), "invalid_argument");
  // node:sqlite's own options: its own error, before anything is attached.
  const bad = thrown(() => open(url, { dir, timeout: "x" }));
  assert.ok(!(bad instanceof UrsulaError));
  assert.equal(bad.code, "ERR_INVALID_ARG_TYPE");
  assert.equal((await ctx.proxy.seen()).length, before, "no request reached the proxy");
  assert.ok(!existsSync(join(dir, fileNameFor(url))));
});

test("node:sqlite options apply; a relative path is made absolute; a missing dir is created 0700", () => {
  const dir = join(tempDir(), "a", "b");
  const url = streamUrl(ctx.server.base);
  const db = open(url, { dir, readBigInts: true });
  assert.equal((statSync(dir).mode & 0o777).toString(8), "700");
  assert.equal(typeof db.prepare("SELECT 1 AS one").get().one, "bigint");
  db.close();
  const path = relative(process.cwd(), join(tempDir(), "rel.db"));
  const db2 = open(streamUrl(ctx.server.base), { path });
  assert.ok(db2.location().startsWith("/"));
  db2.close();
});

test("the cache dir defaults to $XDG_CACHE_HOME/sqlite-ursula", () => {
  const cache = tempDir();
  const saved = process.env.XDG_CACHE_HOME;
  process.env.XDG_CACHE_HOME = cache;
  try {
    const url = streamUrl(ctx.server.base);
    const db = open(url);
    assert.equal(db.location(), join(cache, "sqlite-ursula", fileNameFor(url)));
    db.close();
  } finally {
    if (saved === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = saved;
  }
});

test("setup refusals: other_stream, unreplicated_file, not_attached", () => {
  const dir = tempDir();
  const file = join(dir, "a.db");
  attach(file, streamUrl(ctx.server.base));
  setupError(thrown(() => attach(file, streamUrl(ctx.server.base))), "other_stream");
  const plain = join(dir, "plain.db");
  const p = new DatabaseSync(plain);
  p.exec("CREATE TABLE t(x); INSERT INTO t VALUES (zeroblob(10000));");
  p.close();
  setupError(thrown(() => open(streamUrl(ctx.server.base), { path: plain })), "unreplicated_file");
  const e = thrown(() => status(join(dir, "never.db")));
  setupError(e, "not_attached");
  assert.match(e.message, /^ursula_status: not_attached: /);
  assert.ok(new DatabaseSync(plain).prepare("SELECT count(*) AS n FROM t").get().n === 1);
});
