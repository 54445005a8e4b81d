// Live read replicas: open(url, { readOnly: true, follow: true }) keeps applying the owner's
// commits; a replica whose stream is deleted stops with a classified error.
import assert from "node:assert/strict";
import { test } from "node:test";
import { open, openAsync, status, UrsulaReattachError, UrsulaSetupError } from "../index.js";
import { loadUrsulaVfs } from "../index.js";
import { useServer } from "./helpers/hooks.mjs";
import { place, rows, thrown, until } from "./helpers/kit.mjs";

const ctx = useServer();

test("a follower opened beside its owner sees each commit without fencing the owner", async () => {
  const { dir, url } = place(ctx.server.base, "live");
  const owner = open(url, { dir });
  owner.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  owner.prepare("INSERT INTO notes(body) VALUES (?)").run("first");
  const replica = open(url, { dir, readOnly: true, follow: true });
  const other = await openAsync(url, { dir, readOnly: true, follow: true });
  assert.notEqual(replica.location(), other.location(), "each replica has a -ro<n> file of its own");
  assert.deepEqual(rows(replica, "SELECT body FROM notes"), [{ body: "first" }]);
  for (let i = 0; i < 10; i++) {
    owner.prepare("INSERT INTO notes(body) VALUES (?)").run(`n${i}`);
    await until("the row on both replicas", () => {
      const want = i + 2;
      return (
        replica.prepare("SELECT count(*) AS n FROM notes").get().n === want &&
        other.prepare("SELECT count(*) AS n FROM notes").get().n === want
      );
    });
  }
  const ownerOffset = status(owner.location()).offset;
  await until("the replica's status at the owner's offset", () => status(replica.location()).offset === ownerOffset);
  const s = status(replica.location());
  assert.equal(s.read_only, true);
  assert.equal(s.following, true);
  assert.equal(s.tail, ownerOffset);
  assert.equal(s.lag_bytes, 0);
  assert.equal(s.error, null);
  assert.equal(status(owner.location()).following, false);
  assert.equal(status(owner.location()).tail, null);
  const e = thrown(() => replica.exec("INSERT INTO notes(body) VALUES ('no')"));
  assert.equal(e.errcode, 8, "SQLite's own readonly error");
  owner.prepare("INSERT INTO notes(body) VALUES (?)").run("still the owner");
  for (const db of [owner, replica, other]) db.close();
});

test("follow without readOnly is refused before anything is attached", () => {
  const { dir, url } = place(ctx.server.base, "nofollow");
  const e = thrown(() => open(url, { dir, follow: true }));
  assert.ok(e instanceof UrsulaSetupError, `${e?.stack}`);
  assert.equal(e.kind, "invalid_argument");
  assert.match(e.message, /needs readOnly: true/);
  const bad = thrown(() => open(url, { dir, readOnly: true, follow: "yes" }));
  assert.equal(bad.kind, "invalid_argument");
  const both = thrown(() => open(url, { dir, readOnly: true, follow: true, at: "-1" }));
  assert.equal(both.kind, "invalid_argument");
  assert.match(both.message, /follow and at exclude each other/);
});

test("the SQL form ursula_attach(path, url, 'follow') makes a replica too", async () => {
  const { dir, url } = place(ctx.server.base, "sqlform");
  const owner = open(url, { dir });
  owner.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  const file = `${dir}/by-sql.db`;
  const ctl = loadUrsulaVfs();
  ctl.prepare("SELECT ursula_attach(?, ?, 'follow') AS r").get(file, url);
  const { DatabaseSync } = await import("node:sqlite");
  const replica = new DatabaseSync(file, { readOnly: true });
  owner.prepare("INSERT INTO notes(body) VALUES (?)").run("by sql");
  await until("the row", () => replica.prepare("SELECT count(*) AS n FROM notes").get().n === 1);
  assert.equal(status(file).following, true);
  owner.close();
  replica.close();
});

test("a replica whose stream is deleted stops: reads throw UrsulaReattachError of kind not_found", async () => {
  const { dir, url } = place(ctx.server.base, "deleted");
  const owner = open(url, { dir });
  owner.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  const replica = open(url, { dir, readOnly: true, follow: true });
  assert.equal(replica.prepare("SELECT count(*) AS n FROM notes").get().n, 0);
  owner.close();
  assert.equal((await fetch(url, { method: "DELETE" })).status, 204);
  await until("the replica to stop", () => status(replica.location()).following === false);
  const e = thrown(() => replica.prepare("SELECT count(*) AS n FROM notes").get());
  assert.ok(e instanceof UrsulaReattachError, `${e?.stack}`);
  assert.equal(e.kind, "not_found");
  assert.equal(e.action, "reattach");
  assert.match(e.message, /stopped following/);
  replica.close();
});
