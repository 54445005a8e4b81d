// SQLITE_URSULA_VFS: another copy of the addon, or the plain extension library, whose SQL
// functions then serve attach and status. Each case runs in a process of its own, since the
// extension loads once per process.
import assert from "node:assert/strict";
import { copyFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { useServer } from "./helpers/hooks.mjs";
import { runNode, streamUrl, tempDir } from "./helpers/kit.mjs";
import { repoRoot } from "./helpers/server.mjs";

const ctx = useServer();

const addon = join(repoRoot, "js", "sqlite-ursula.linux-x64-gnu.node");
const plain = join(
  process.env.URSULA_PROFILE_DIR || join(repoRoot, "target", "ci"),
  "libsqlite_ursula_vfs.so",
);

const probe = (url) => `
  const db = U.open(${JSON.stringify(url)}, { dir: ${JSON.stringify(tempDir())} });
  db.exec("CREATE TABLE t(x); INSERT INTO t VALUES (1)");
  const s = U.status(db.location());
  let notAttached;
  try { U.status("/nowhere/x.db"); } catch (e) { notAttached = [e.name, e.kind]; }
  let inUse;
  try { U.open(${JSON.stringify(url)}, { path: db.location() }); } catch (e) { inUse = [e.name, e.kind, e.message.split(":")[0]]; }
  U.setToken("t"); U.setToken(null);
  // commits() and an at open: ursula_commits and the at: mode through either backend.
  const listed = U.commits(${JSON.stringify(url)}).commits.map((c) => c.offset);
  const past = U.open(${JSON.stringify(url)}, { dir: ${JSON.stringify(tempDir())}, readOnly: true, at: listed[0] });
  const atRows = past.prepare("SELECT count(*) AS n FROM t").get().n;
  let pastTail;
  try { U.open(${JSON.stringify(url)}, { dir: ${JSON.stringify(tempDir())}, readOnly: true, at: "09999999999999999999" }); } catch (e) { pastTail = [e.name, e.kind, /past the stream's tail/.test(e.message)]; }
  // openAsync through either backend: the SQL one has no thread to attach on, and attaches on
  // the event loop, with the same result.
  const a = await U.openAsync(${JSON.stringify(url)} + "a", { dir: ${JSON.stringify(tempDir())} });
  a.exec("CREATE TABLE t(x); INSERT INTO t VALUES (1)");
  let asyncInUse;
  try { await U.openAsync(${JSON.stringify(url)} + "a", { path: a.location() }); } catch (e) { asyncInUse = [e.name, e.kind]; }
  console.log(JSON.stringify({
    commits: s.commits, notAttached, inUse, same: U.loadUrsulaVfs() === U.loadUrsulaVfs(),
    asyncCommits: U.status(a.location()).commits, asyncInUse,
    listed: listed.length, atRows, atOffset: U.status(past.location()).offset === listed[0],
    pastTail,
  }));
`;
const expected = {
  commits: 2,
  notAttached: ["UrsulaSetupError", "not_attached"],
  inUse: ["UrsulaSetupError", "in_use", "ursula_attach"],
  same: true,
  asyncCommits: 2,
  asyncInUse: ["UrsulaSetupError", "in_use"],
  listed: 2,
  atRows: 0,
  atOffset: true,
  pastTail: ["UrsulaSetupError", "invalid_argument", true],
};

test("SQLITE_URSULA_VFS naming a copy of the addon", async () => {
  const copy = join(tempDir(), "copy.node");
  copyFileSync(addon, copy);
  const r = await runNode(probe(streamUrl(ctx.server.base)), { env: { SQLITE_URSULA_VFS: copy } });
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), expected);
});

test("SQLITE_URSULA_VFS naming the plain extension: attach and status go through SQL", { skip: !existsSync(plain) && `${plain} is not built` }, async () => {
  const r = await runNode(probe(streamUrl(ctx.server.base)), { env: { SQLITE_URSULA_VFS: plain } });
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), expected);
});

test("a library that does not load is an UrsulaSetupError", async () => {
  const r = await runNode(
    `try { U.loadUrsulaVfs(); } catch (e) { console.log(JSON.stringify([e.name, e.kind, e.cause?.code])); }`,
    { env: { SQLITE_URSULA_VFS: join(tempDir(), "missing.so") } },
  );
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), ["UrsulaSetupError", "local_setup", "ERR_LOAD_SQLITE_EXTENSION"]);
});

test("a later loadUrsulaVfs naming another library is refused and names the one loaded", async () => {
  const other = join(tempDir(), "other.node");
  copyFileSync(addon, other);
  const r = await runNode(`
    const ctl = U.loadUrsulaVfs();
    const same = [U.loadUrsulaVfs() === ctl, U.loadUrsulaVfs(${JSON.stringify(addon)}) === ctl];
    try {
      U.loadUrsulaVfs(${JSON.stringify(other)});
      console.log(JSON.stringify([same, "loaded"]));
    } catch (e) {
      console.log(JSON.stringify([same, e.name, e.kind, e.message.includes(${JSON.stringify(addon)}), e.message.includes(${JSON.stringify(other)})]));
    }`);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), [[true, true], "UrsulaSetupError", "local_setup", true, true]);
});

test("on a platform without a prebuilt extension, open() throws UrsulaSetupError unsupported naming the way out", async () => {
  // The process reports another CPU, as a riscv64 or a musl host would: no prebuilt matches.
  const r = await runNode(
    `Object.defineProperty(process, "arch", { value: "riscv64" });
    try {
      U.open(${JSON.stringify(streamUrl(ctx.server.base))}, { dir: ${JSON.stringify(tempDir())} });
      console.log(JSON.stringify("opened"));
    } catch (e) {
      console.log(JSON.stringify([e.name, e.kind, e.action, /linux-riscv64/.test(e.message), /SQLITE_URSULA_VFS/.test(e.message)]));
    }`,
    { env: { SQLITE_URSULA_VFS: "" } },
  );
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), ["UrsulaSetupError", "unsupported", "fix", true, true]);
});
