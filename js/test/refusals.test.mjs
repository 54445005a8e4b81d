// Commits refused in front of the stream (through a fault-injecting proxy), the ROLLBACK rule,
// tokens, and a transaction too large for one append.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, test } from "node:test";
import {
  open,
  setToken,
  status,
  UrsulaError,
  UrsulaPaymentRequiredError,
  UrsulaReattachError,
  UrsulaReplicationError,
  UrsulaWriteRefusedError,
} from "../index.js";
import { useServer } from "./helpers/hooks.mjs";
import { place, streamUrl, tempDir, thrown } from "./helpers/kit.mjs";

// Read once, when the extension loads (the first open below).
const tokenFile = join(tempDir(), "token");
writeFileSync(tokenFile, "");
process.env.URSULA_VFS_RETRY_MS = "1500";
process.env.URSULA_VFS_MAX_FRAME_BYTES = "65536";
process.env.URSULA_VFS_TOKEN_FILE = tokenFile;

const RETRY_TAIL =
  "Nothing of it reached the stream, and the database stays usable: run it again later, the whole transaction if it was one.";

const ctx = useServer({ proxy: true });
afterEach(async () => {
  await ctx.proxy.clear();
  await ctx.proxy.bearer(null);
});

function fresh() {
  const db = open(streamUrl(ctx.proxy.base, "refused"), { dir: tempDir() });
  db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  return db;
}
const insert = (db, body) => db.prepare("INSERT INTO notes(body) VALUES (?)").run(body);
const rows = (db) => db.prepare("SELECT body FROM notes ORDER BY id").all().map((r) => r.body);
const refuse = (status, body = "", headers = {}) => ctx.proxy.rules([{ method: "POST", status, body, headers }]);

function refused(e, cls, kind, action) {
  assert.ok(e instanceof cls, e?.stack);
  assert.ok(e instanceof UrsulaError);
  assert.equal(e.name, cls.name);
  assert.equal(e.kind, kind);
  assert.equal(e.action, action);
  assert.equal(e.errcode, 7178);
  assert.equal(e.code, "ERR_SQLITE_ERROR");
  assert.equal(e.errstr, "disk I/O error");
  assert.equal(e.cause.errcode, 7178);
}

test("402: UrsulaPaymentRequiredError at once, reads go on, the next commit needs no reopen", async () => {
  const db = fresh();
  await refuse(402, "quota exhausted");
  const started = Date.now();
  const e = thrown(() => insert(db, "refused"));
  assert.ok(Date.now() - started < 1000, "a 402 is not retried");
  refused(e, UrsulaPaymentRequiredError, "payment_required", "retry");
  assert.ok(e instanceof UrsulaWriteRefusedError);
  assert.equal(e.reason, "quota exhausted");
  assert.equal(
    e.message,
    `commit refused with 402 Payment Required in front of the stream: quota exhausted. ${RETRY_TAIL}`,
  );
  const s = status(db.location());
  assert.equal(s.payment_required, true);
  assert.equal(s.payment_reason, "quota exhausted");
  assert.deepEqual(rows(db), []);
  await ctx.proxy.clear();
  insert(db, "accepted");
  assert.equal(status(db.location()).payment_required, false);
  assert.deepEqual(rows(db), ["accepted"]);
  db.close();
});

test("the ROLLBACK rule after a refused COMMIT, and a wrapping transaction helper", async () => {
  const db = fresh();
  await refuse(402, "quota exhausted");
  db.exec("BEGIN");
  insert(db, "in a transaction");
  const e = thrown(() => db.exec("COMMIT"));
  assert.ok(e instanceof UrsulaPaymentRequiredError, e.stack);
  assert.equal(db.isTransaction, false);
  assert.equal(thrown(() => db.exec("ROLLBACK")), e, "exec('ROLLBACK') throws the same error");
  assert.deepEqual(db.prepare("ROLLBACK").run(), { changes: 0, lastInsertRowid: 0 });

  db.exec("BEGIN");
  db.exec("SAVEPOINT sp");
  insert(db, "in a savepoint");
  db.exec("RELEASE sp");
  const r = thrown(() => db.exec("COMMIT"));
  assert.ok(r instanceof UrsulaPaymentRequiredError, r.stack);
  assert.notEqual(r, e);
  assert.equal(thrown(() => db.exec("ROLLBACK TO sp")), r);
  assert.equal(thrown(() => db.prepare("ROLLBACK TRANSACTION TO SAVEPOINT sp").run()), r);
  assert.equal(thrown(() => db.prepare("RELEASE sp").run()), r);
  assert.equal(db.prepare("ROLLBACK").get(), undefined);
  assert.deepEqual(db.prepare("ROLLBACK").all(), []);
  assert.deepEqual([...db.prepare("ROLLBACK").iterate()], []);

  // A RELEASE that commits and fails leaves SQLite's transaction open: the ROLLBACK TO a helper
  // runs then is SQLite's own, and succeeds.
  db.exec("SAVEPOINT outer");
  insert(db, "in a savepoint");
  const o = thrown(() => db.exec("RELEASE outer"));
  assert.ok(o instanceof UrsulaPaymentRequiredError, o.stack);
  assert.equal(db.isTransaction, true);
  db.exec("ROLLBACK TO outer");
  db.exec("RELEASE outer");
  assert.equal(db.isTransaction, false);

  // A helper like drizzle's: it rolls back, and wraps what failed.
  const transaction = (fn) => {
    db.exec("BEGIN");
    try {
      fn();
      db.exec("COMMIT");
    } catch (error) {
      db.exec("ROLLBACK");
      throw new Error("Failed to run the transaction", { cause: error });
    }
  };
  const w = thrown(() => transaction(() => insert(db, "helper")));
  const inner = w instanceof UrsulaError ? w : w.cause;
  assert.ok(inner instanceof UrsulaPaymentRequiredError, w.stack);

  // Other statements clear the kept error: SQLite's own message is back.
  await ctx.proxy.clear();
  insert(db, "ok");
  assert.match(thrown(() => db.exec("ROLLBACK")).message, /no transaction is active/);
  assert.deepEqual(rows(db), ["ok"]);
  db.close();
});

test("429 is retried, then fails alone as rate_limited", async () => {
  const db = fresh();
  await refuse(429, "slow down");
  const e = thrown(() => insert(db, "x"));
  refused(e, UrsulaWriteRefusedError, "rate_limited", "retry");
  assert.equal(e.reason, "slow down");
  assert.match(e.message, /^commit refused with 429 Too Many Requests in front of the stream: slow down\. /);
  assert.ok(status(db.location()).append_retries > 0);
  await ctx.proxy.clear();
  insert(db, "y");
  assert.deepEqual(rows(db), ["y"]);
  db.close();
});

test("a marked 503 fails alone as not_applied; an unmarked one poisons (reattach)", async () => {
  const { dir, url } = place(ctx.proxy.base, "poison");
  const db = open(url, { dir });
  db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  await refuse(503, "", { "x-ursula-not-applied": "RaftLogPressure", "x-ursula-not-applied-checked": "1" });
  const e = thrown(() => insert(db, "x"));
  refused(e, UrsulaWriteRefusedError, "not_applied", "retry");
  assert.equal(e.reason, "RaftLogPressure");
  assert.equal(status(db.location()).poisoned, false);

  await refuse(503, "", { "x-ursula-not-applied": "RaftLogPressure" });
  const p = thrown(() => insert(db, "y"));
  assert.ok(p instanceof UrsulaReattachError && p instanceof UrsulaReplicationError, p.stack);
  assert.equal(p.action, "reattach");
  assert.equal(p.kind, "outcome_unknown");
  assert.equal(p.fenced, false);
  assert.equal(p.errcode, 778);
  assert.match(p.message, /^commit not replicated: .*close the database and open it again/);
  await ctx.proxy.clear();
  assert.ok(thrown(() => insert(db, "z")) instanceof UrsulaReattachError, "poisoned until reopened");
  db.close();
  // Close and open again: the new attach replays the stream, and commits go through.
  const again = open(url, { dir });
  insert(again, "after the reopen");
  assert.equal(status(again.location()).poisoned, false);
  again.close();
});

test("401 until setToken gives the right token; then the token file", async () => {
  const db = fresh();
  await ctx.proxy.bearer("good");
  const e = thrown(() => insert(db, "x"));
  refused(e, UrsulaWriteRefusedError, "unauthorized", "retry");
  assert.equal(e.reason, "token refused");
  setToken("good");
  insert(db, "with the set token");
  // Back to the token file, which is read again when it changes.
  await ctx.proxy.bearer("from-file");
  setToken(null);
  writeFileSync(tokenFile, "from-file\n");
  insert(db, "with the file's token");
  await ctx.proxy.bearer(null);
  assert.deepEqual(rows(db), ["with the set token", "with the file's token"]);
  db.close();
});

test("too_large: never sent, fails alone with action fix, the next small commit goes through", async () => {
  const db = fresh();
  const posts = await ctx.proxy.count("POST");
  db.exec("BEGIN");
  const big = db.prepare("INSERT INTO notes(body) VALUES (randomblob(?))");
  for (let i = 0; i < 50; i++) big.run(4000);
  const e = thrown(() => db.exec("COMMIT"));
  refused(e, UrsulaWriteRefusedError, "too_large", "fix");
  assert.match(e.reason, /^\d+-byte frame over the 65536-byte frame limit$/);
  assert.match(e.message, /too large for one append: .*split the transaction into smaller ones\.$/);
  assert.equal(await ctx.proxy.count("POST"), posts, "nothing was sent");
  const s = status(db.location());
  assert.equal(s.poisoned, false);
  assert.equal(s.refused_kind, "too_large");
  insert(db, "small");
  assert.equal(status(db.location()).writes_refused, false);
  db.close();
});

test("a claim refused with 402: open throws UrsulaPaymentRequiredError; a read-only open works", async () => {
  const url = streamUrl(ctx.proxy.base, "claim");
  const seed = open(url, { dir: tempDir() });
  seed.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes(body) VALUES ('seed');");
  seed.close();
  await refuse(402, "no quota for claims");
  const e = thrown(() => open(url, { dir: tempDir() }));
  assert.ok(e instanceof UrsulaPaymentRequiredError, e.stack);
  assert.equal(e.action, "retry");
  assert.equal(e.errcode, 23);
  assert.match(e.message, /^ursula_attach: payment_required: /);
  const reader = open(url, { dir: tempDir(), readOnly: true });
  assert.deepEqual(rows(reader), ["seed"]);
  reader.close();
  await ctx.proxy.clear();
});
