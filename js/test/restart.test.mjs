// A stream that went missing (server restarted empty), and an unreachable endpoint.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { test } from "node:test";
import { DatabaseSync } from "node:sqlite";
import { open, status, UrsulaSetupError, UrsulaWriteRefusedError } from "../index.js";
import { fileNameFor } from "../src/naming.js";
import { useServer } from "./helpers/hooks.mjs";
import { freePort } from "./helpers/server.mjs";
import { place, streamUrl, tempDir, thrown } from "./helpers/kit.mjs";

process.env.URSULA_VFS_RETRY_MS = "1000";

const ctx = useServer();

test("after a server restart the stream is gone: not_found, the local file is kept", async () => {
  const { dir, url } = place(ctx.server.base, "restart");
  const db = open(url, { dir });
  db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes(body) VALUES ('kept');");
  const file = db.location();
  db.close();
  const bytes = readFileSync(file);
  await ctx.server.restart();
  const e = thrown(() => open(url, { dir }));
  assert.ok(e instanceof UrsulaSetupError, e.stack);
  assert.equal(e.kind, "not_found");
  assert.equal(e.action, "fix");
  assert.match(e.message, /^ursula_attach: not_found: the stream .* does not exist; the local file .* holds data/);
  assert.ok(e.message.includes(`${basename(file)} holds data`), `the message names the file: ${e.message}`);
  assert.deepEqual(readFileSync(file), bytes, "the local file is unchanged");
  assert.equal((await fetch(url, { method: "HEAD" })).status, 404, "no stream was created");
  // status names the failed attach.
  const s = thrown(() => status(file));
  assert.ok(s instanceof UrsulaSetupError, s.stack);
  assert.equal(s.kind, "not_found");
  assert.match(s.message, /^ursula_status: attach_failed: not_found: .* is not attached: its last attach failed/);
  // Another stream opens as usual.
  const other = open(streamUrl(ctx.server.base, "fresh"), { dir });
  other.exec("CREATE TABLE t(x)");
  other.close();
});

test("an unreachable endpoint: UrsulaWriteRefusedError unreachable, and the file is locked out", async () => {
  const port = await freePort();
  const dir = tempDir();
  const url = `http://127.0.0.1:${port}/demo/nowhere`;
  const e = thrown(() => open(url, { dir }));
  assert.ok(e instanceof UrsulaWriteRefusedError, e.stack);
  assert.equal(e.kind, "unreachable");
  assert.equal(e.action, "retry");
  assert.match(e.message, /^ursula_attach: unreachable: /);
  // The file opens only after an attach of it succeeds, and status names the failed attach.
  const file = join(dir, fileNameFor(url));
  const locked = thrown(() => new DatabaseSync(file));
  assert.equal(locked.errcode, 14);
  assert.match(locked.message, /unable to open database file/);
  const s = thrown(() => status(file));
  assert.ok(s instanceof UrsulaWriteRefusedError, s.stack);
  assert.equal(s.kind, "unreachable");
  assert.match(s.message, /^ursula_status: attach_failed: unreachable: /);
});
