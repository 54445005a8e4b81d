// Point-in-time opens (`readOnly: true, at`) and commits(), against a real server: each
// recorded commit point rebuilds exactly its rows, and once retention moved the points below the
// latest snapshot fail with kind retained naming it.
import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { attach, attachAsync, commits, open, openAsync, status } from "../index.js";
import { fileNameFor } from "../src/naming.js";
import { setupError } from "./helpers/errors.mjs";
import { useServer } from "./helpers/hooks.mjs";
import { rows, streamUrl, tempDir, thrown, until } from "./helpers/kit.mjs";

// Snapshots once the log passes 64 KiB (and the database), so the retention test is short.
process.env.URSULA_VFS_SNAPSHOT_MIN_BYTES = "65536";
process.env.URSULA_VFS_RETRY_MS = "2000";

const ctx = useServer();

/** The offset `n` bytes after `offset`: inside the frame that follows it. */
function plus(offset, n) {
  return String(BigInt(offset) + BigInt(n)).padStart(20, "0");
}

async function head(url) {
  const r = await fetch(url, { method: "HEAD" });
  assert.equal(r.status, 200);
  return r.headers;
}

/**
 * An owner that commits one note at a time. `points[k]` is status().offset after the commit that
 * left k notes (points[0]: the CREATE TABLE).
 */
function history(url, notes) {
  const db = open(url, { dir: tempDir() });
  const file = db.location();
  db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  const points = [status(file).offset];
  const insert = db.prepare("INSERT INTO notes(body) VALUES (?)");
  const add = (body) => {
    insert.run(body);
    points.push(status(file).offset);
  };
  for (let i = 1; i <= notes; i++) add(`note ${i}`);
  return { db, file, points, add };
}

const notesUpTo = (k) => Array.from({ length: k }, (_, i) => ({ body: `note ${i + 1}` }));

test("open with readOnly and at holds exactly the rows of each commit point, and of the point before an offset between two", async () => {
  const url = streamUrl(ctx.server.base, "points");
  const h = history(url, 4);
  assert.equal((await head(url)).get("stream-next-offset"), h.points.at(-1));
  const dir = tempDir();
  // One -ro1 file for every point, forwards then back: a file holding another point is rebuilt.
  for (const k of [...h.points.keys(), 1, 0]) {
    const p = h.points[k];
    const db = open(url, { dir, readOnly: true, at: p });
    assert.equal(db.location(), join(dir, fileNameFor(url, 1)), "read-only naming: -ro1");
    assert.deepEqual(rows(db, "SELECT body FROM notes ORDER BY id"), notesUpTo(k), `at points[${k}]`);
    const s = status(db.location());
    assert.equal(s.offset, p);
    assert.equal(s.at, p);
    assert.equal(s.read_only, true);
    db.close();
  }
  const between = plus(h.points[2], 5);
  const db = open(url, { dir, readOnly: true, at: between });
  assert.deepEqual(rows(db, "SELECT body FROM notes ORDER BY id"), notesUpTo(2));
  assert.equal(status(db.location()).offset, h.points[2]);
  assert.equal(status(db.location()).at, between);
  db.close();
  const empty = open(url, { dir, readOnly: true, at: "-1" });
  assert.deepEqual(rows(empty, "SELECT count(*) AS n FROM sqlite_master"), [{ n: 0 }], "before any commit");
  assert.equal(status(empty.location()).offset, "-1");
  empty.close();
  assert.equal(status(h.file).read_only, false);
  assert.equal(status(h.file).at, null, "only an at attach has at");
  h.db.close();
});

test("commits() lists the recorded commit points, oldest first, and pages by from and limit", () => {
  const url = streamUrl(ctx.server.base, "listing");
  const h = history(url, 4);
  const all = commits(url);
  assert.deepEqual(all.commits.map((c) => c.offset), h.points);
  assert.equal(all.earliest, "-1");
  assert.equal(all.snapshot, "-1");
  assert.equal(all.tail, h.points.at(-1));
  assert.equal(all.more, false);
  for (const c of all.commits) {
    assert.equal(c.epoch, 1);
    assert.ok(c.pages >= 1 && c.db_pages >= 2 && c.bytes > 12, JSON.stringify(c));
  }
  const page = commits(url, { limit: 2 });
  assert.deepEqual(page.commits.map((c) => c.offset), h.points.slice(0, 2));
  assert.equal(page.more, true);
  const next = commits(url, { from: page.commits.at(-1).offset, limit: 2 });
  assert.deepEqual(next.commits.map((c) => c.offset), h.points.slice(2, 4));
  h.add("note 5");
  assert.deepEqual(commits(url, { from: h.points[3] }).commits.map((c) => c.offset), h.points.slice(4));
  h.db.close();
});

test("at needs readOnly and a string offset, before any request; past the tail is refused naming it", async () => {
  const url = streamUrl(ctx.server.base, "refusals");
  const h = history(url, 1);
  const p = h.points[1];
  setupError(thrown(() => open(url, { dir: tempDir(), at: p })), "invalid_argument");
  assert.match(thrown(() => open(url, { dir: tempDir(), at: p })).message, /at needs readOnly: true/);
  setupError(thrown(() => open(url, { dir: tempDir(), readOnly: false, at: p })), "invalid_argument");
  for (const bad of [5, "5", "now", null, BigInt(5)]) {
    const e = thrown(() => open(url, { dir: tempDir(), readOnly: true, at: bad }));
    setupError(e, "invalid_argument");
    assert.match(e.message, /at must be a stream offset string/);
  }
  const file = join(tempDir(), "x.db");
  setupError(thrown(() => attach(file, url, { at: p })), "invalid_argument");
  await assert.rejects(openAsync(url, { dir: tempDir(), at: p }), (e) => setupError(e, "invalid_argument"));
  const tail = h.points.at(-1);
  const past = thrown(() => open(url, { dir: tempDir(), readOnly: true, at: plus(tail, 1) }));
  setupError(past, "invalid_argument");
  assert.match(past.message, new RegExp(`past the stream's tail ${tail}`));
  setupError(thrown(() => commits(url, { from: "12" })), "invalid_argument");
  setupError(thrown(() => commits(url, { limit: 0 })), "invalid_argument");
  setupError(thrown(() => commits(url, { limit: 1.5 })), "invalid_argument");
  setupError(thrown(() => commits(42)), "invalid_url");
  h.db.close();
});

test("writes on an at database fail with SQLite's readonly error, and the owner is not fenced", () => {
  const url = streamUrl(ctx.server.base, "readonly");
  const h = history(url, 2);
  const tail = h.points.at(-1);
  const db = open(url, { dir: tempDir(), readOnly: true, at: h.points[1] });
  assert.throws(() => db.exec("INSERT INTO notes(body) VALUES ('no')"), /readonly/);
  assert.deepEqual(rows(db, "SELECT body FROM notes"), notesUpTo(1));
  db.close();
  assert.equal(commits(url).tail, tail, "the at open appended nothing (no claim)");
  h.add("note 3");
  assert.equal(status(h.file).commits, 4);
  h.db.close();
});

test("openAsync and attachAsync take at as open and attach do", async () => {
  const url = streamUrl(ctx.server.base, "async");
  const h = history(url, 3);
  const db = await openAsync(url, { dir: tempDir(), readOnly: true, at: h.points[2] });
  assert.deepEqual(rows(db, "SELECT body FROM notes ORDER BY id"), notesUpTo(2));
  db.close();
  const file = join(tempDir(), "manual.db");
  assert.equal(await attachAsync(file, url, { readOnly: true, at: h.points[1] }), h.points[1]);
  assert.equal(status(file).at, h.points[1]);
  assert.equal(attach(file, url, { readOnly: true, at: h.points[3] }), h.points[3]);
  h.db.close();
});

test("once retention moved, an at below the latest snapshot is UrsulaSetupError retained with earliest; at it and after it opens", async () => {
  const url = streamUrl(ctx.server.base, "retained");
  const h = history(url, 0);
  const snapshot = () => status(h.file).snapshot;
  const write = (n) => {
    for (let i = 0; i < n; i++) h.add(h.db.prepare("SELECT hex(randomblob(1500)) AS b").get().b);
  };
  while (snapshot() === "-1") {
    assert.ok(h.points.length < 4000, "no first snapshot");
    write(10);
    await new Promise((r) => setTimeout(r, 20));
  }
  const first = snapshot();
  while (snapshot() === first) {
    assert.ok(h.points.length < 8000, "no second snapshot");
    write(10);
    await new Promise((r) => setTimeout(r, 20));
  }
  await until("retention to move to the first snapshot", async () => (await head(url)).get("stream-retained-offset") === first);
  const latest = snapshot();
  assert.equal((await head(url)).get("stream-snapshot-offset"), latest);
  const dir = tempDir();
  const e = thrown(() => open(url, { dir, readOnly: true, at: h.points[2] }));
  setupError(e, "retained");
  assert.equal(e.earliest, latest);
  assert.match(e.message, new RegExp(`earliest reachable point is ${latest}`));
  await assert.rejects(openAsync(url, { dir, readOnly: true, at: first }), (r) => setupError(r, "retained") && r.earliest === latest);
  const count = (db) => db.prepare("SELECT count(*) AS n FROM notes").get().n;
  const notesAt = (offset) => h.points.filter((p) => p <= offset).length - 1;
  const atSnapshot = open(url, { dir, readOnly: true, at: latest });
  assert.equal(count(atSnapshot), notesAt(latest));
  assert.equal(status(atSnapshot.location()).installed, latest);
  atSnapshot.close();
  const listing = commits(url, { limit: 100_000 });
  assert.equal(listing.earliest, latest);
  const after = h.points.filter((p) => p > latest);
  assert.deepEqual(listing.commits.map((c) => c.offset), after);
  const last = open(url, { dir, readOnly: true, at: after.at(-1) });
  assert.equal(count(last), h.points.length - 1);
  assert.deepEqual(rows(last, "SELECT body FROM notes ORDER BY id"), rows(h.db, "SELECT body FROM notes ORDER BY id"));
  last.close();
  h.db.close();
});
