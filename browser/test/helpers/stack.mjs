// What a browser test runs against, all real and on loopback: an `ursula server`, a token
// issuer, `ursula gateway` with access control and CORS for the page's origin, a static server
// for the page (another origin) that also collects what the page reports, headless Chromium,
// and owners: Node processes committing through `@tonbo/sqlite-ursula`'s `open()`.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { delimiter, dirname, extname, join, normalize, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { AUDIENCE, startIssuer } from "../../../js/test/helpers/issuer.mjs";
import { tempDir } from "../../../js/test/helpers/kit.mjs";
import { detach, freePort, startGateway as startGatewayOn, startServer } from "../../../js/test/helpers/server.mjs";

const browserRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const OWNER = "owner-1";
export const PRIVATE = "notes-private";
export const PUBLIC = "notes-public";

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript",
  ".mjs": "text/javascript",
  ".wasm": "application/wasm",
  ".json": "application/json",
};

/** `chromium` on PATH: a test that needs it fails without it rather than skip. */
export function chromium() {
  for (const d of (process.env.PATH ?? "").split(delimiter)) {
    const p = join(d, "chromium");
    if (existsSync(p)) return p;
  }
  throw new Error("chromium is not on PATH: install it (apt-get install -y chromium) to run the browser tests");
}

/**
 * Serves `browser/` (the package's source, its node_modules, the test pages) and takes the
 * page's reports: `POST /report` with a JSON body, handed to `onReport`.
 */
async function startPages(onReport) {
  const server = createServer((req, res) => {
    const url = new URL(req.url, "http://page");
    if (req.method === "POST" && url.pathname === "/report") {
      const chunks = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        res.writeHead(204).end();
        try {
          onReport(JSON.parse(Buffer.concat(chunks).toString("utf8")));
        } catch (e) {
          onReport({ event: "bad-report", message: String(e) });
        }
      });
      return;
    }
    const path = normalize(join(browserRoot, decodeURIComponent(url.pathname)));
    if (!path.startsWith(browserRoot + "/") || !existsSync(path)) {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = readFileSync(path);
      res.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream", "cache-control": "no-store" });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  return server;
}

/** The whole stack. `stack.reports` holds every report the pages sent, in arrival order. */
export async function startStack() {
  const dir = tempDir("ursula-browser-");
  const node = await startServer();
  for (const b of [PRIVATE, PUBLIC]) {
    const r = await fetch(`${node.base}/${b}`, { method: "PUT" });
    if (![200, 201, 204].includes(r.status)) throw new Error(`bucket ${b}: ${r.status}`);
  }
  const issuer = await startIssuer();
  const reports = [];
  const waiters = new Set();
  const pages = await startPages((r) => {
    reports.push(r);
    for (const w of waiters) w();
  });
  const pageBase = `http://127.0.0.1:${pages.address().port}`;
  const owners = `owners = [{ issuer = "${issuer.url}", subject = "${OWNER}" }]`;
  const policy = join(dir, "policy.toml");
  writeFileSync(policy, `[[bucket]]\nid = "${PRIVATE}"\n${owners}\n\n[[bucket]]\nid = "${PUBLIC}"\npublic_read = true\n${owners}\n`);
  const gatewayPort = await freePort();
  const gatewayBase = `http://127.0.0.1:${gatewayPort}`;
  let gateway = null;
  // On the same port every time: a page that lost its gateway finds it again when it is back.
  const startGateway = async () => {
    gateway = await startGatewayOn(
      node.base,
      [
        "--auth-issuer", issuer.url,
        "--auth-audience", AUDIENCE,
        "--auth-jwks-url", issuer.jwksUrl,
        "--auth-policy", policy,
        "--cors-allowed-origin", pageBase,
      ],
      { port: gatewayPort },
    );
  };
  const stopGateway = async () => {
    await gateway?.stop();
  };
  await startGateway();
  const browsers = new Set();

  return {
    dir,
    node,
    issuer,
    gatewayBase,
    pageBase,
    reports,
    token: (subject = OWNER, ttl) => issuer.token(subject, ttl),
    startGateway,
    stopGateway,

    /** Resolves with the first report (from index `from` on) `pred` accepts. */
    waitReport(pred, { from = 0, timeoutMs = 30_000, what = "a report" } = {}) {
      return new Promise((ok, fail) => {
        let timer;
        const look = () => {
          const hit = reports.slice(from).find(pred);
          if (hit === undefined) return false;
          clearTimeout(timer);
          waiters.delete(look);
          ok(hit);
          return true;
        };
        if (look()) return;
        timer = setTimeout(() => {
          waiters.delete(look);
          fail(new Error(`no ${what} within ${timeoutMs} ms; the pages reported: ${JSON.stringify(reports.slice(from, from + 20))}`));
        }, timeoutMs);
        waiters.add(look);
      });
    },

    /** A file holding `token`, for `URSULA_VFS_TOKEN_FILE`. */
    tokenFile(token) {
      const file = join(tempDir("ursula-token-"), "token");
      writeFileSync(file, `${token}\n`);
      return file;
    },

    /**
     * Opens test/pages/host.html running `module` (under browser/) in headless Chromium with
     * `params`; `close()` kills it.
     */
    browse(module, params) {
      const profile = join(dir, `chromium-${browsers.size}-${Date.now()}`);
      const query = Object.entries({ module: `/${module}`, ...params }).flatMap(([k, v]) =>
        (Array.isArray(v) ? v : [v]).map((x) => [k, x]),
      );
      const url = `${pageBase}/test/pages/host.html?${new URLSearchParams(query)}`;
      const child = spawn(
        chromium(),
        [
          "--headless=new",
          "--no-sandbox",
          "--disable-gpu",
          "--disable-dev-shm-usage",
          "--no-first-run",
          "--no-default-browser-check",
          "--disable-background-timer-throttling",
          "--disable-renderer-backgrounding",
          `--user-data-dir=${profile}`,
          url,
        ],
        // Its shared-memory files go to the temp dir without /dev/shm: ours, removed at exit.
        { stdio: "ignore", detached: true, env: { ...process.env, TMPDIR: dir } },
      );
      detach(child);
      const b = {
        close() {
          browsers.delete(b);
          try {
            process.kill(-child.pid, "SIGKILL");
          } catch {
            // already gone
          }
        },
      };
      browsers.add(b);
      return b;
    },

    /**
     * A Node process committing to `url` through `open()` (test/helpers/owner.mjs). `go()`
     * starts its commits; `done` resolves with every line it printed once it exits.
     */
    async owner(url, { count = 10, rate = 10, rows = 1, pad = null, token = null } = {}) {
      const ownerDir = tempDir("ursula-owner-");
      const env = { ...process.env, NODE_NO_WARNINGS: "1", OWNER_URL: url, OWNER_COUNT: String(count), OWNER_RATE: String(rate), OWNER_ROWS: String(rows), OWNER_DIR: ownerDir };
      if (pad !== null) env.OWNER_PAD = String(pad);
      if (token !== null) env.URSULA_VFS_TOKEN_FILE = this.tokenFile(token);
      const child = detach(spawn(process.execPath, [join(browserRoot, "test", "helpers", "owner.mjs")], { stdio: ["pipe", "pipe", "inherit"], env }));
      const lines = [];
      let readyOk;
      const ready = new Promise((ok) => { readyOk = ok; });
      createInterface({ input: child.stdout }).on("line", (l) => {
        const v = JSON.parse(l);
        lines.push(v);
        if (v.ready) readyOk(v);
      });
      const done = new Promise((ok, fail) =>
        child.once("exit", (code) => (code === 0 ? ok(lines) : fail(new Error(`the owner exited with ${code}: ${JSON.stringify(lines.slice(-3))}`)))),
      );
      await Promise.race([ready, done]);
      return {
        lines,
        ready: await ready,
        go: () => child.stdin.end("go\n"),
        done,
      };
    },

    async stop() {
      for (const b of [...browsers]) b.close();
      await stopGateway();
      pages.close();
      issuer.close();
      await node.stop();
    },
  };
}
