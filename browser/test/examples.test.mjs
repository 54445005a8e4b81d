// The browser examples run as a person would run them, in headless Chromium (driven with
// puppeteer-core): examples/browser-telemetry (a collector appending JSON events, a viewer
// replaying and tailing them over EventSource) and examples/browser-replica (a notes list live
// in two tabs while a Node writer adds notes). Real server, real gateway, loopback only.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";
import { tempDir } from "../../js/test/helpers/kit.mjs";
import { detach, freePort, repoRoot, startGateway, startServer } from "../../js/test/helpers/server.mjs";
import { launchChromium } from "./helpers/puppeteer.mjs";

const examples = join(repoRoot, "examples");
let node;
let gateway;
let gatewayBase;
let browser;
let replicaOrigin;
/** The example servers started, stopped after the tests (their piped stdout holds the loop). */
const served = [];

/** Starts a Node script that prints its URL as its first line; resolves with that URL. */
function serve(script, args) {
  const child = detach(spawn(process.execPath, [script, ...args], { stdio: ["ignore", "pipe", "inherit"] }));
  served.push(child);
  return new Promise((ok, fail) => {
    createInterface({ input: child.stdout }).once("line", (l) => ok(l.trim().replace(/\/$/, "")));
    child.once("exit", (code) => fail(new Error(`${script} exited with ${code}`)));
  });
}

before(async () => {
  node = await startServer();
  const replicaPort = await freePort();
  replicaOrigin = `http://127.0.0.1:${replicaPort}`;
  gateway = await startGateway(node.base, ["--cors-allowed-origin", replicaOrigin]);
  gatewayBase = gateway.base;
  browser = await launchChromium([
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
  ]);
});

after(async () => {
  for (const child of served) child.kill("SIGKILL");
  await browser?.close();
  await gateway?.stop();
  await node?.stop();
});

const put = async (url, type) => {
  const r = await fetch(url, { method: "PUT", headers: type === undefined ? {} : { "content-type": type } });
  assert.ok([200, 201, 204].includes(r.status), `PUT ${url}: ${r.status}`);
};

/** Every record of a JSON stream, read with catch-up GETs. */
async function records(url) {
  let offset = "-1";
  let text = "";
  for (;;) {
    const r = await fetch(`${url}?offset=${offset}`);
    text += await r.text();
    offset = r.headers.get("stream-next-offset");
    if (r.headers.get("stream-up-to-date") !== null) break;
  }
  return text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
}

test("browser-telemetry: each click shows in the viewer's live tail once its append is acknowledged", async () => {
  await put(`${gatewayBase}/telemetry`);
  await put(`${gatewayBase}/telemetry/events`, "application/json");
  const site = await serve(join(examples, "browser-telemetry", "serve.mjs"), ["--gateway", gatewayBase, "--listen", "127.0.0.1:0"]);
  const viewer = await browser.newPage();
  await viewer.goto(`${site}/viewer.html`);
  await viewer.waitForFunction(() => window.telemetry?.live === true, { timeout: 10_000 });
  const collector = await browser.newPage();
  await collector.goto(`${site}/`);
  const sent = () => collector.$eval("#sent", (e) => Number(e.textContent));
  await collector.waitForFunction(() => document.querySelector("#sent").textContent === "1", { timeout: 10_000 });
  await viewer.waitForFunction(() => window.telemetry.events.length === 1, { timeout: 10_000 });
  for (let n = 2; n <= 6; n++) {
    await collector.click(n % 2 === 0 ? "#buy" : "#help");
    await collector.waitForFunction((k) => Number(document.querySelector("#sent").textContent) >= k, { timeout: 10_000 }, n);
    // The append is acknowledged: the viewer shows it without waiting for another one (a
    // tail whose last record lacked its line feed would hold it back until the next append).
    await viewer.waitForFunction((k) => window.telemetry.events.length === k, { timeout: 10_000 }, n);
  }
  assert.equal(await sent(), 6);
  const state = await viewer.evaluate(() => window.telemetry);
  assert.deepEqual(state.events, await records(`${gatewayBase}/telemetry/events`));
  assert.deepEqual(state.events.map((e) => e.type), ["navigation", "click", "click", "click", "click", "click"]);
  assert.deepEqual(state.events.slice(1).map((e) => e.target), ["buy", "help", "buy", "help", "buy"]);
  // EventSource's data: whole NDJSON records, each event ending with its last record's LF.
  assert.ok(state.rawEvents.length >= 6, JSON.stringify(state.rawEvents));
  for (const data of state.rawEvents) assert.ok(data.endsWith("\n"), `an SSE data event without its final LF: ${JSON.stringify(data)}`);
  await viewer.close();
  await collector.close();
});

test("browser-replica: two tabs show the writer's notes live and end with exactly its notes", async () => {
  const dir = join(examples, "browser-replica");
  await put(`${gatewayBase}/demo`);
  const url = `${gatewayBase}/demo/notes-${process.pid}.db`;
  const site = await serve(join(dir, "serve.mjs"), ["--listen", replicaOrigin.replace("http://", "")]);
  assert.equal(site, replicaOrigin);
  // The stream and the table exist before the tabs open: one note, then the tabs, then more.
  const writer = detach(
    spawn(process.execPath, [join(dir, "writer.mjs"), url, "--every", "150", "--count", "12"], {
      cwd: tempDir("ursula-writer-"),
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, NODE_NO_WARNINGS: "1" },
    }),
  );
  const ids = [];
  const firstNote = new Promise((ok) => {
    createInterface({ input: writer.stdout }).on("line", (l) => {
      ids.push(JSON.parse(l).id);
      if (ids.length === 1) ok();
    });
  });
  const exited = new Promise((ok) => writer.once("exit", ok));
  await firstNote;
  const tabs = [await browser.newPage(), await browser.newPage()];
  await Promise.all(tabs.map((t) => t.goto(`${site}/?url=${encodeURIComponent(url)}`)));
  assert.equal(await exited, 0, "the writer failed");
  assert.deepEqual(ids, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
  for (const tab of tabs) {
    await tab.waitForFunction(() => window.app?.notes.length === 12 || window.app?.error !== null, { timeout: 15_000 });
    const app = await tab.evaluate(() => window.app);
    assert.equal(app.error, null, JSON.stringify(app.error));
    assert.deepEqual(app.notes.map((n) => n.id), ids);
    assert.ok(app.notes.every((n, i) => n.body === `note ${i + 1} from process ${writer.pid}`), JSON.stringify(app.notes));
    // Drawn as the notes came, not once at the end.
    assert.ok(app.renders > 2, `the tab drew the list ${app.renders} times`);
    assert.equal(await tab.$$eval("#notes li", (li) => li.length), 12);
  }
  for (const t of tabs) await t.close();
});
