// Ownership across processes: a new owner fences the old one, a held file is in_use, and
// read-only opens run beside the owner on files of their own.
import assert from "node:assert/strict";
import { basename } from "node:path";
import { test } from "node:test";
import {
  open,
  status,
  UrsulaError,
  UrsulaFencedError,
  UrsulaReplicationError,
  UrsulaSetupError,
} from "../index.js";
import { useServer } from "./helpers/hooks.mjs";
import { place, runNode, startNode, streamUrl, tempDir, thrown } from "./helpers/kit.mjs";

const ctx = useServer();

const rows = (db) => db.prepare("SELECT body FROM notes ORDER BY id").all().map((r) => r.body);

test("another process rebuilds the database elsewhere and fences this one", async () => {
  const url = streamUrl(ctx.server.base, "fence");
  const db = open(url, { dir: tempDir() });
  db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  db.prepare("INSERT INTO notes(body) VALUES (?)").run("before");
  const file = db.location();

  const other = tempDir();
  const r = await runNode(
    `const db = U.open(${JSON.stringify(url)}, { dir: ${JSON.stringify(other)} });
     const s = U.status(db.location());
     console.log(JSON.stringify({ rows: db.prepare("SELECT body FROM notes").all().map((r) => r.body), local: s.local,
       integrity: db.prepare("PRAGMA integrity_check").get().integrity_check }));
     db.close();`,
  );
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), { rows: ["before"], local: "-1", integrity: "ok" });

  const e = thrown(() => db.prepare("INSERT INTO notes(body) VALUES (?)").run("after"));
  assert.ok(e instanceof UrsulaFencedError, e.stack);
  assert.ok(e instanceof UrsulaReplicationError && e instanceof UrsulaError);
  assert.equal(e.name, "UrsulaFencedError");
  assert.equal(e.action, "stop");
  assert.equal(e.kind, "fenced");
  assert.equal(e.fenced, true);
  assert.equal(e.errcode, 778);
  assert.equal(e.code, "ERR_SQLITE_ERROR");
  assert.equal(e.cause.errcode, 778);
  assert.match(e.message, /^commit not replicated: .+\. Another owner took the stream over: stop using this database, and never reopen it in a loop\.$/);
  const s = status(file);
  assert.equal(s.poisoned, true);
  assert.equal(s.fenced, true);
  assert.deepEqual({ kind: s.error.kind, action: s.error.action }, { kind: "fenced", action: "stop" });

  const read = thrown(() => db.prepare("SELECT body FROM notes").all());
  assert.ok(read instanceof UrsulaFencedError, read.stack);
  assert.equal(read.errcode, 266);
  assert.match(read.message, /^read refused/);
  db.close();

  // The refused row reached neither the new owner nor the stream.
  const check = await runNode(
    `const db = U.open(${JSON.stringify(url)}, { dir: ${JSON.stringify(tempDir())}, readOnly: true });
     console.log(JSON.stringify(db.prepare("SELECT body FROM notes").all().map((r) => r.body)));`,
  );
  assert.equal(check.code, 0, check.stderr);
  assert.deepEqual(JSON.parse(check.stdout), ["before"]);
});

test("a second process on the same dir is in_use until the first exits, then resumes", async () => {
  const { dir, url } = place(ctx.server.base, "held");
  const holder = startNode(
    `const db = U.open(${JSON.stringify(url)}, { dir: ${JSON.stringify(dir)} });
     db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
     db.prepare("INSERT INTO notes(body) VALUES (?)").run("from the holder");
     console.log("ready");
     process.stdin.resume();`,
  );
  await holder.waitLine(/^ready$/);
  const e = thrown(() => open(url, { dir }));
  assert.ok(e instanceof UrsulaSetupError, e.stack);
  assert.equal(e.kind, "in_use");
  assert.equal(e.action, "fix");
  assert.match(e.message, /^ursula_attach: in_use: another process holds .*: stop it, or use another dir or path$/);
  holder.kill("SIGKILL");
  await holder.exited;
  const db = open(url, { dir });
  assert.deepEqual(rows(db), ["from the holder"]);
  assert.notEqual(status(db.location()).local, "-1", "resumed from the local files");
  db.prepare("INSERT INTO notes(body) VALUES (?)").run("after the takeover");
  db.close();
});

test("read-only opens beside the owner: -ro1 here, -ro2 in another process", async () => {
  const { dir, url } = place(ctx.server.base, "shared");
  const owner = open(url, { dir });
  owner.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  owner.prepare("INSERT INTO notes(body) VALUES (?)").run("one");

  const reader = open(url, { dir, readOnly: true });
  assert.match(basename(reader.location()), /^[a-z0-9_-]+-[0-9a-f]{32}-ro1\.db$/);
  assert.deepEqual(rows(reader), ["one"]);
  const write = thrown(() => reader.prepare("INSERT INTO notes(body) VALUES (?)").run("nope"));
  assert.ok(!(write instanceof UrsulaError));
  assert.equal(write.errcode, 8);
  const rs = status(reader.location());
  assert.equal(rs.read_only, true);
  assert.equal(rs.epoch, status(owner.location()).epoch);

  const child = await runNode(
    `const db = U.open(${JSON.stringify(url)}, { dir: ${JSON.stringify(dir)}, readOnly: true });
     console.log(JSON.stringify({ file: db.location(), rows: db.prepare("SELECT body FROM notes").all().map((r) => r.body) }));`,
  );
  assert.equal(child.code, 0, child.stderr);
  const seen = JSON.parse(child.stdout);
  assert.match(basename(seen.file), /-ro2\.db$/);
  assert.deepEqual(seen.rows, ["one"]);

  // The owner was not fenced by its readers.
  owner.prepare("INSERT INTO notes(body) VALUES (?)").run("two");
  assert.deepEqual(rows(owner), ["one", "two"]);
  assert.deepEqual(rows(reader), ["one"], "a reader holds the stream as of its attach");
  reader.close();
  owner.close();
});
