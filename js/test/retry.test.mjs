// Which failures the attach retries within URSULA_VFS_RETRY_MS: a refused connection fails at
// once (docs/sqlite-vfs.md, "Reads and the retry budget"); a 503, or a connection reset
// without an answer, is retried.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { open, openAsync, UrsulaWriteRefusedError } from "../index.js";
import { rows, startProxy, streamUrl, tempDir, thrown } from "./helpers/kit.mjs";
import { freePort, startServer } from "./helpers/server.mjs";

// A budget no open below may spend: a refused connection must not wait for it.
const BUDGET_MS = 20_000;
process.env.URSULA_VFS_RETRY_MS = String(BUDGET_MS);

let server;
let proxy;
before(async () => {
  server = await startServer();
  proxy = await startProxy(server.port);
});
after(async () => {
  proxy?.stop();
  await server?.stop();
});

function unreachable(e) {
  assert.ok(e instanceof UrsulaWriteRefusedError, e.stack);
  assert.equal(e.kind, "unreachable");
  assert.equal(e.action, "retry");
  assert.match(e.message, /^ursula_attach: unreachable: cannot reach the stream: .*Connection refused/);
}

test("open of a port nobody listens on fails at once as unreachable, not after the retry budget", async () => {
  const url = `http://127.0.0.1:${await freePort()}/demo/nowhere`;
  const started = performance.now();
  unreachable(thrown(() => open(url, { dir: tempDir() })));
  const tookMs = performance.now() - started;
  // The old rule retried the refusal for the whole budget; this one returns in milliseconds.
  // The bound is loose on purpose: only a retry loop comes near it.
  assert.ok(tookMs < BUDGET_MS / 2, `took ${tookMs} ms`);
});

test("openAsync of a port nobody listens on rejects at once as unreachable", async () => {
  const url = `http://127.0.0.1:${await freePort()}/demo/nowhere`;
  const started = performance.now();
  await assert.rejects(openAsync(url, { dir: tempDir() }), (e) => {
    unreachable(e);
    return true;
  });
  const tookMs = performance.now() - started;
  assert.ok(tookMs < BUDGET_MS / 2, `took ${tookMs} ms`);
});

test("a stream answering 503 to the attach's HEAD is retried within the budget and open succeeds", async () => {
  const url = streamUrl(proxy.base, "busy");
  const path = new URL(url).pathname;
  await proxy.rules([{ method: "HEAD", path, status: 503, body: "busy", times: 3 }]);
  try {
    const db = open(url, { dir: tempDir() });
    db.exec("CREATE TABLE t(x); INSERT INTO t VALUES (1)");
    assert.deepEqual(rows(db, "SELECT x FROM t"), [{ x: 1 }]);
    db.close();
  } finally {
    await proxy.clear();
  }
  // Three 503s, then the HEAD that found no stream, and the one after creating it.
  const heads = (await proxy.seen()).filter(([m, p]) => m === "HEAD" && p.startsWith(path));
  assert.equal(heads.length, 5);
});

test("a HEAD whose connection is reset without an answer is retried within the budget and open succeeds", async () => {
  const url = streamUrl(proxy.base, "reset");
  const path = new URL(url).pathname;
  await proxy.rules([{ method: "HEAD", path, action: "reset", times: 2 }]);
  try {
    const db = await openAsync(url, { dir: tempDir() });
    db.exec("CREATE TABLE t(x); INSERT INTO t VALUES (2)");
    assert.deepEqual(rows(db, "SELECT x FROM t"), [{ x: 2 }]);
    db.close();
  } finally {
    await proxy.clear();
  }
  // Two resets, then the HEAD that found no stream, and the one after creating it.
  const heads = (await proxy.seen()).filter(([m, p]) => m === "HEAD" && p.startsWith(path));
  assert.equal(heads.length, 4);
});
