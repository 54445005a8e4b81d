// The real `ursula server` on a free loopback port, as a child process; `ursula gateway` in
// front of one.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

// Children never outlive the test process, and never keep it alive (a filtered-out test file
// runs its `before` hooks but not its `after` hooks).
const children = new Set();
process.once("exit", () => {
  for (const c of children) c.kill("SIGKILL");
});

/** Tracks `child` for the exit cleanup and lets the process exit while it runs. */
export function detach(child) {
  children.add(child);
  child.once("exit", () => children.delete(child));
  child.unref();
  return child;
}

export function ursulaBin() {
  const bin =
    process.env.URSULA_BIN || join(process.env.URSULA_PROFILE_DIR || join(repoRoot, "target", "ci"), "ursula");
  if (!existsSync(bin)) {
    throw new Error(`the ursula binary ${bin} is missing: cargo build --profile ci -p ursula, or set URSULA_BIN`);
  }
  return bin;
}

export function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

async function waitReady(base, child) {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`ursula exited with ${child.exitCode}`);
    try {
      const r = await fetch(`${base}/__ursula/ready`);
      if (r.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`ursula did not become ready at ${base}`);
}

/** Starts `ursula server`; `restart()` starts an empty one on the same port. */
export async function startServer() {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  let child = null;
  const spawnOne = async () => {
    child = spawn(ursulaBin(), ["server", "--listen", `127.0.0.1:${port}`, "--admin-listen", "off"], {
      env: { ...process.env, RUST_LOG: "warn" },
      stdio: ["ignore", "ignore", "inherit"],
    });
    detach(child);
    await waitReady(base, child);
  };
  const stop = async () => {
    if (child === null || child.exitCode !== null) return;
    const c = child;
    const exited = new Promise((r) => c.once("exit", r));
    c.ref(); // wait for the exit, which an unref'd child would not keep the process alive for
    c.kill("SIGKILL");
    await exited;
  };
  await spawnOne();
  return {
    port,
    base,
    stop,
    async restart() {
      await stop();
      await spawnOne();
    },
  };
}

/**
 * Resolves once `url` answers at all (any status: a gateway may answer / with an error); fails
 * when `child` exits first, or after 20 s.
 */
export async function waitAnswering(url, child, what) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}`);
    try {
      await fetch(url);
      return;
    } catch {
      if (Date.now() > deadline) throw new Error(`${what} did not start`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

/**
 * Starts `ursula gateway` in front of `upstream` on `port` (a free one unless given), with `args`
 * after its --upstream and --listen; resolves once it answers. `stop()` kills it and waits for
 * the exit, so that the port is free for the next start.
 */
export async function startGateway(upstream, args = [], { port } = {}) {
  port ??= await freePort();
  const base = `http://127.0.0.1:${port}`;
  const child = detach(
    spawn(ursulaBin(), ["gateway", "--upstream", upstream, "--listen", `127.0.0.1:${port}`, ...args], {
      stdio: ["ignore", "ignore", "inherit"],
      env: { ...process.env, RUST_LOG: "warn" },
    }),
  );
  await waitAnswering(`${base}/`, child, "the gateway");
  return {
    port,
    base,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      child.ref(); // as for the server: an unref'd child would not keep the process alive for the exit
      child.kill("SIGKILL");
      await exited;
    },
  };
}
