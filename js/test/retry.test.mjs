// Which failures the attach retries within URSULA_VFS_RETRY_MS: a refused connection fails at
// once (docs/sqlite-vfs.md, "Reads and the retry budget"); a 503, or a connection reset
// without an answer, is retried.
import assert from "node:assert/strict";
import { test } from "node:test";
import { open, openAsync, UrsulaWriteRefusedError } from "../index.js";
import { useServer } from "./helpers/hooks.mjs";
import { rows, streamUrl, tempDir, thrown } from "./helpers/kit.mjs";
import { freePort } from "./helpers/server.mjs";

// A budget no open below may spend: a refused connection must not wait for it.
const BUDGET_MS = 20_000;
process.env.URSULA_VFS_RETRY_MS = String(BUDGET_MS);

const ctx = useServer({ proxy: true });

function unreachable(e) {
  assert.ok(e instanceof UrsulaWriteRefusedError, e.stack);
  assert.equal(e.kind, "unreachable");
  assert.equal(e.action, "retry");
  assert.match(e.message, /^ursula_attach: unreachable: cannot reach the stream: .*Connection refused/);
}

// A refused connection, through either open: the old rule retried it for the whole budget; this
// one returns in milliseconds. The bound is loose on purpose: only a retry loop comes near it.
for (const [name, refusal] of [
  [
    "open of a port nobody listens on fails at once as unreachable, not after the retry budget",
    async (url) => thrown(() => open(url, { dir: tempDir() })),
  ],
  [
    "openAsync of a port nobody listens on rejects at once as unreachable",
    (url) => openAsync(url, { dir: tempDir() }).then(() => assert.fail("openAsync resolved"), (e) => e),
  ],
]) {
  test(name, async () => {
    const url = `http://127.0.0.1:${await freePort()}/demo/nowhere`;
    const started = performance.now();
    unreachable(await refusal(url));
    const tookMs = performance.now() - started;
    assert.ok(tookMs < BUDGET_MS / 2, `took ${tookMs} ms`);
  });
}

// A HEAD failed `times` times, then answered: the open (sync or async) succeeds, and the proxy saw
// the failed HEADs, then the one that found no stream and the one after creating it.
for (const { name, stream, rule, openDb } of [
  {
    name: "a stream answering 503 to the attach's HEAD is retried within the budget and open succeeds",
    stream: "busy",
    rule: { status: 503, body: "busy", times: 3 },
    openDb: open,
  },
  {
    name: "a HEAD whose connection is reset without an answer is retried within the budget and open succeeds",
    stream: "reset",
    rule: { action: "reset", times: 2 },
    openDb: openAsync,
  },
]) {
  test(name, async () => {
    const url = streamUrl(ctx.proxy.base, stream);
    const path = new URL(url).pathname;
    await ctx.proxy.rules([{ method: "HEAD", path, ...rule }]);
    try {
      const db = await openDb(url, { dir: tempDir() });
      db.exec("CREATE TABLE t(x); INSERT INTO t VALUES (1)");
      assert.deepEqual(rows(db, "SELECT x FROM t"), [{ x: 1 }]);
      db.close();
    } finally {
      await ctx.proxy.clear();
    }
    const heads = (await ctx.proxy.seen()).filter(([m, p]) => m === "HEAD" && p.startsWith(path));
    assert.equal(heads.length, rule.times + 2);
  });
}
