// openUrsulaPiStorage through Pi Durable's own storage conformance suite, and how it reports
// fenced and refused commits. These run only when @earendil-works/pi-durable is installed next
// to the package (it is not on the registry this repo's machines reach); otherwise each is
// reported as skipped, with the reason.
import assert from "node:assert/strict";
import { describe, it, test } from "node:test";
import { UrsulaFencedError, UrsulaPaymentRequiredError, UrsulaReplicationError, UrsulaSetupError } from "../index.js";
import { openUrsulaPiStorage } from "../pi.js";
import { useServer } from "./helpers/hooks.mjs";
import { runNode, streamUrl, tempDir } from "./helpers/kit.mjs";

let pi = null;
try {
  pi = await import("@earendil-works/pi-durable/testing");
} catch (e) {
  if (e?.code !== "ERR_MODULE_NOT_FOUND") throw e;
}
const SKIP = pi === null ? "@earendil-works/pi-durable is not installed: the Pi Durable tests are skipped" : false;
if (SKIP) console.log(`# ${SKIP}`);

test("without Pi Durable, openUrsulaPiStorage says what to install", { skip: SKIP ? false : "Pi Durable is installed" }, async () => {
  await assert.rejects(openUrsulaPiStorage(`${tempDir()}/pi.db`, "http://127.0.0.1:9/pi/x"), (e) => {
    assert.ok(e instanceof UrsulaSetupError);
    assert.match(e.message, /npm install @earendil-works\/pi-durable/);
    return true;
  });
});

test("openUrsulaPiStorage checks its arguments before anything else", async () => {
  await assert.rejects(openUrsulaPiStorage(":memory:", "http://127.0.0.1:9/pi/x"), (e) => e.kind === "invalid_argument");
  await assert.rejects(openUrsulaPiStorage("", "http://127.0.0.1:9/pi/x"), (e) => e.kind === "invalid_argument");
  await assert.rejects(openUrsulaPiStorage("x.db", "http://127.0.0.1:9/pi/x?a=1"), (e) => e.kind === "invalid_url");
});

// The suite's assertions, with Vitest's semantics: deepEqual ignores keys whose value is
// undefined, partialDeepEqual is a recursive subset match.
function dropUndefined(v) {
  if (Array.isArray(v)) return v.map(dropUndefined);
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined).map(([k, x]) => [k, dropUndefined(x)]));
  }
  return v;
}
function subset(actual, expected, at = "$") {
  if (expected === null || typeof expected !== "object") return assert.strictEqual(actual, expected, at);
  assert.ok(actual !== null && typeof actual === "object", `${at}: not an object`);
  if (Array.isArray(expected)) {
    assert.ok(Array.isArray(actual) && actual.length === expected.length, `${at}: array length`);
  }
  for (const [k, x] of Object.entries(expected)) subset(actual[k], x, `${at}.${k}`);
}
const assertions = {
  ok: (v, m) => assert.ok(v, m),
  strictEqual: (a, e) => assert.strictEqual(a, e),
  deepEqual: (a, e) => assert.deepStrictEqual(dropUndefined(a), dropUndefined(e)),
  partialDeepEqual: (a, e) => subset(a, e),
  greaterThan: (a, e) => assert.ok(a > e, `${a} is not greater than ${e}`),
  async rejects(operation, includes) {
    await assert.rejects(operation, (e) => String(e?.message ?? e).includes(includes));
  },
};

const PI_TESTS = [
  "passes Pi's storage conformance suite through the extension",
  "a commit refused with 402 rejects with UrsulaPaymentRequiredError, and the next one succeeds",
  "a fenced commit rejects with UrsulaFencedError",
];
if (SKIP) {
  for (const name of PI_TESTS) test(`Pi Durable: ${name}`, { skip: SKIP }, () => {});
} else describe("Pi Durable", () => {
  const ctx = useServer({ proxy: true });
  const provider = (prepare) => async (use) => {
    const url = streamUrl(ctx.proxy.base, "pi");
    const storage = await openUrsulaPiStorage(`${tempDir()}/pi.db`, url);
    try {
      await prepare?.(url);
      await use(storage);
    } finally {
      await ctx.proxy.clear();
      await storage.close?.({}).catch?.(() => {});
    }
  };
  const cases = () => pi?.createStorageConformance({ assertions, withStorage: provider() }) ?? [];

  it(PI_TESTS[0], async () => {
    const all = cases();
    assert.ok(all.length >= 23, `only ${all.length} cases`);
    for (const c of all) await c.run();
  });

  /** Runs conformance cases until one fails; returns that failure. */
  async function firstFailure(prepare) {
    for (const c of pi.createStorageConformance({ assertions, withStorage: provider(prepare) })) {
      try {
        await c.run();
      } catch (e) {
        return e;
      }
    }
    return null;
  }

  it(PI_TESTS[1], async () => {
    const e = await firstFailure(() =>
      ctx.proxy.rules([{ method: "POST", status: 402, body: "quota exhausted" }]),
    );
    assert.ok(e instanceof UrsulaPaymentRequiredError, e?.stack);
    assert.equal(e.action, "retry");
    assert.equal(e.reason, "quota exhausted");
    assert.equal(await firstFailure(), null);
  });

  it(PI_TESTS[2], async () => {
    const e = await firstFailure(async (url) => {
      const r = await runNode(`U.open(${JSON.stringify(url)}, { dir: ${JSON.stringify(tempDir())} }).close();`);
      assert.equal(r.code, 0, r.stderr);
    });
    assert.ok(e instanceof UrsulaFencedError && e instanceof UrsulaReplicationError, e?.stack);
    assert.equal(e.fenced, true);
    assert.equal(e.action, "stop");
  });
});
