// The rough edges a new user meets: a journal_mode change, EXCLUSIVE locking, misspelt options,
// URLs that name no stream, an old Node.js, and the log lines printed by default.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, symlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { open, status, UrsulaReplicationError } from "../index.js";
import { nodeVersionError } from "../src/sqlite.js";
import { setupError } from "./helpers/errors.mjs";
import { useServer } from "./helpers/hooks.mjs";
import { runNode, streamUrl, tempDir, thrown } from "./helpers/kit.mjs";

const packageDir = dirname(dirname(fileURLToPath(import.meta.url)));

const ctx = useServer({ proxy: true });

// One directory for the files named after the test streams, which all differ.
const dir = tempDir();

function fresh(base = ctx.server.base) {
  const db = open(streamUrl(base, "edges"), { dir });
  db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  return db;
}
const rows = (db) => db.prepare("SELECT body FROM notes ORDER BY id").all().map((r) => r.body);

for (const mode of ["DELETE", "MEMORY", "OFF", "truncate", "persist"]) {
  test(`PRAGMA journal_mode=${mode} throws UrsulaSetupError unsupported and leaves the connection usable in WAL mode`, () => {
    const db = fresh();
    db.prepare("INSERT INTO notes(body) VALUES (?)").run("before");
    const e = thrown(() => db.exec(`PRAGMA journal_mode=${mode}`));
    setupError(e, "unsupported");
    assert.match(e.message, /^sqlite-ursula-vfs: unsupported: PRAGMA journal_mode=\w+ refused: journal_mode must stay WAL/);
    assert.equal(e.errcode, 1, "refused while SQLite prepared it, as SQLite refuses a mode change in a transaction");
    // Prepared rather than exec'd: the same error.
    setupError(thrown(() => db.prepare(`PRAGMA main.journal_mode = '${mode}'`)), "unsupported");
    assert.equal(db.prepare("PRAGMA journal_mode").get().journal_mode, "wal");
    assert.deepEqual(rows(db), ["before"]);
    db.prepare("INSERT INTO notes(body) VALUES (?)").run("after");
    assert.deepEqual(rows(db), ["before", "after"]);
    const s = status(db.location());
    assert.equal(s.error, null, "nothing failed that status reports");
    assert.equal(s.commits, 3);
    db.exec("PRAGMA journal_mode=WAL");
    db.close();
  });
}

test("locking_mode=EXCLUSIVE fails the commit with 7178, and status and the error both say unsupported, fix", () => {
  const db = fresh();
  db.exec("PRAGMA locking_mode=EXCLUSIVE");
  const e = thrown(() => db.prepare("INSERT INTO notes(body) VALUES (?)").run("x"));
  assert.ok(e instanceof UrsulaReplicationError, e?.stack);
  assert.equal(e.kind, "unsupported");
  assert.equal(e.action, "fix");
  assert.equal(e.errcode, 7178);
  assert.match(e.message, /^commit refused: locking_mode=EXCLUSIVE is not supported/);
  const s = status(db.location());
  assert.deepEqual({ ...s.error }, { kind: "unsupported", action: "fix", message: e.reason });
  assert.equal(s.writes_refused, false, "refused_kind lists only what refused a write");
  assert.equal(s.refused_kind, null);
  assert.equal(s.refused_reason, null);
  assert.equal(s.poisoned, false);
  db.close();
});

test("an unknown option name is invalid_argument naming it, before any request", async () => {
  const url = streamUrl(ctx.proxy.base);
  const seen = (await ctx.proxy.seen()).length;
  const typo = thrown(() => open(url, { dir, readonly: true }));
  setupError(typo, "invalid_argument");
  assert.match(typo.message, /^open: invalid_argument: unknown option "readonly" \(did you mean readOnly\?\)/);
  const other = thrown(() => open(url, { dir, encoding: "utf8" }));
  setupError(other, "invalid_argument");
  assert.match(other.message, /unknown option "encoding": open takes path, dir, readOnly, follow, at and node:sqlite's/);
  assert.doesNotMatch(other.message, /did you mean/);
  assert.equal((await ctx.proxy.seen()).length, seen, "no request reached the proxy");
  // Every documented option still passes.
  const db = open(url, { dir, timeout: 10, readBigInts: false, enableForeignKeyConstraints: true });
  db.close();
});

test("URLs that name no stream are invalid_url or invalid_name, naming the rule, before any request", async () => {
  const seen = (await ctx.proxy.seen()).length;
  const cases = [
    [`${ctx.proxy.base}/demo`, "invalid_url", /a stream URL's path is \/\{bucket\}\/\{stream\}.*names only the bucket "demo"/],
    [`${ctx.proxy.base}/demo/a/b`, "invalid_url", /has 3 segments, which the server reads as the stream demo\/a and its subresource b/],
    [`${ctx.proxy.base}/De/notes`, "invalid_name", /bucket ID must be 4-64 bytes of a-z, 0-9, '_' or '-'/],
    [`${ctx.proxy.base}/ab/notes`, "invalid_name", /bucket ID must be 4-64 bytes of a-z, 0-9, '_' or '-'/],
  ];
  for (const [url, kind, says] of cases) {
    const e = thrown(() => open(url, { dir }));
    setupError(e, kind);
    assert.match(e.message, new RegExp(`^ursula_attach: ${kind}: `));
    assert.match(e.message, says);
  }
  assert.equal((await ctx.proxy.seen()).length, seen, "no request reached the proxy");
});

test("the package refuses a Node.js older than 22.19 with a message naming the version it needs", () => {
  assert.equal(nodeVersionError("22.19.0"), null);
  assert.equal(nodeVersionError("23.0.0"), null);
  assert.equal(nodeVersionError("22.18.9").message, "@tonbo/sqlite-ursula needs Node.js 22.19 or later (this is 22.18.9)");
});

const OLD_NODE = "/usr/bin/node";
const oldVersion = existsSync(OLD_NODE) ? execFileSync(OLD_NODE, ["-p", "process.versions.node"]).toString().trim() : null;
test(
  "importing the package on the system's Node.js 20 throws the version message, not ERR_UNKNOWN_BUILTIN_MODULE",
  { skip: oldVersion === null || nodeVersionError(oldVersion) === null ? `${OLD_NODE} is not a Node.js older than 22.19` : false },
  () => {
    // Imported by name from a project that has the package directory installed.
    const project = tempDir();
    mkdirSync(join(project, "node_modules", "@tonbo"), { recursive: true });
    symlinkSync(packageDir, join(project, "node_modules", "@tonbo", "sqlite-ursula"));
    for (const entry of ["@tonbo/sqlite-ursula", "@tonbo/sqlite-ursula/pi"]) {
      const r = spawnSync(OLD_NODE, ["--input-type=module", "-e", `await import(${JSON.stringify(entry)})`], {
        cwd: project,
        encoding: "utf8",
      });
      assert.notEqual(r.status, 0);
      assert.match(r.stderr, new RegExp(`Error: @tonbo/sqlite-ursula needs Node.js 22.19 or later \\(this is ${oldVersion.replaceAll(".", "\\.")}\\)`));
      assert.doesNotMatch(r.stderr, /ERR_UNKNOWN_BUILTIN_MODULE/);
    }
  },
);

test("an open prints no log line by default; URSULA_VFS_LOG=debug shows attach_claimed", async () => {
  // Each child opens its own stream, in the shared dir.
  const code = (url) => `const db = U.open(${JSON.stringify(url)}, { dir: ${JSON.stringify(dir)} });
db.exec("CREATE TABLE t(x)"); db.close();`;
  const quiet = await runNode(code(streamUrl(ctx.server.base, "quiet")));
  assert.equal(quiet.code, 0, quiet.stderr);
  assert.doesNotMatch(quiet.stderr, /sqlite-ursula-vfs/);
  const loud = await runNode(code(streamUrl(ctx.server.base, "loud")), { env: { URSULA_VFS_LOG: "debug" } });
  assert.equal(loud.code, 0, loud.stderr);
  assert.match(loud.stderr, /sqlite-ursula-vfs level=debug event=attach_claimed file=\S+ stream=\S+ epoch=\d+/);
});
