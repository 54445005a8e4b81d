// The before/after hooks most test files share: the real `ursula server` for the file (or the
// describe block the call is in), and optionally the fault-injecting proxy in front of it.
import { after, before } from "node:test";
import { startProxy } from "./kit.mjs";
import { startServer } from "./server.mjs";

/**
 * Registers hooks that start the server (and with `proxy: true` the proxy) before the tests and
 * stop them after. Returns an object whose `server` and `proxy` are set once the `before` hook
 * ran: read them inside tests, not at import time.
 */
export function useServer({ proxy = false } = {}) {
  const ctx = { server: null, proxy: null };
  before(async () => {
    ctx.server = await startServer();
    if (proxy) ctx.proxy = await startProxy(ctx.server.port);
  });
  after(async () => {
    ctx.proxy?.stop();
    await ctx.server?.stop();
  });
  return ctx;
}
