// The browser replica measured in headless Chromium, one run, everything on loopback (the stack
// of browser/test/helpers/stack.mjs: ursula server, gateway with access control and CORS, the
// page on another origin, a private stream read with a token):
//  1. lag: a Node owner commits one-row INSERTs through open() at 10 and 100 commits/s; the
//     lag of a commit is the time the page's replica first showed it (its onCommit listener,
//     after the batch is applied) minus the time the owner's COMMIT returned;
//  2. load: a 50 MiB database (random 4 KiB blobs in 1 MiB transactions) loaded by follow() in
//     a fresh page, beside the raw download of the same bytes (the latest snapshot's body and
//     the stream after it, fetched and dropped), alternating, three rounds each.
// Clocks: performance.timeOrigin + performance.now() in both processes: the machine's clock at
// each process's start, then monotonic. A lag can be negative: the stream answers the page's
// long-poll when it acknowledges the append, before the owner's local write and return.
// Usage: URSULA_BIN=... node browser/bench/replica-bench.mjs [MiB]
import { spawn } from "node:child_process";
import { fileURLToPath, pathToFileURL } from "node:url";
import { PRIVATE, startStack } from "../test/helpers/stack.mjs";

const MIB = Number(process.argv[2] ?? 50);
const stack = await startStack();
const runId = `${process.pid}-${Date.now().toString(36)}`;
const rowsOf = (sum) => (sum === "none" ? -1 : Number(sum.split("/")[0]));
const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};
const fmt = (x) => x.toFixed(2);

async function lag(rate, count) {
  const url = `${stack.gatewayBase}/${PRIVATE}/lag-${runId}-${rate}`;
  const owner = await stack.owner(url, { count, rate, rows: 1, token: stack.token() });
  const from = stack.reports.length;
  const page = stack.browse("test/pages/replica.js", { url, token: stack.token() });
  try {
    await stack.waitReport((r) => r.url === url && r.event === "caught-up", { from, what: "catch-up" });
    owner.go();
    const lines = await owner.done;
    const commits = lines.filter((l) => l.i !== undefined);
    const last = commits.at(-1);
    await stack.waitReport((r) => r.url === url && r.sum === last.sum, { from, what: "the last commit" });
    const seen = stack.reports.slice(from).filter((r) => r.url === url && r.sum !== undefined).sort((a, b) => a.seq - b.seq);
    const lags = commits.map((c) => {
      const first = seen.find((r) => rowsOf(r.sum) >= c.i);
      return first.at - c.at;
    });
    const secs = (last.at - commits[0].at) / 1000;
    return { rate, achieved: Math.round((commits.length - 1) / secs), commits: commits.length, lags };
  } finally {
    page.close();
  }
}

/** Fills a database of `mib` MiB at `url` from a Node process with open(). */
function fill(url, mib) {
  const pkg = pathToFileURL(fileURLToPath(new URL("../../js/index.js", import.meta.url))).href;
  const src = `
    import { open } from ${JSON.stringify(pkg)};
    const db = open(${JSON.stringify(url)});
    db.exec("CREATE TABLE blobs(id INTEGER PRIMARY KEY, b BLOB)");
    const tx = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 256) INSERT INTO blobs(b) SELECT randomblob(4000) FROM n";
    for (let i = 0; i < ${mib}; i++) db.exec(tx);
    db.close();`;
  return new Promise((ok, fail) => {
    const p = spawn(process.execPath, ["--no-warnings", "--input-type=module", "-e", src], {
      stdio: ["ignore", "inherit", "inherit"],
      env: { ...process.env, URSULA_VFS_TOKEN_FILE: stack.tokenFile(stack.token()) },
    });
    p.once("exit", (code) => (code === 0 ? ok() : fail(new Error(`fill exited with ${code}`))));
  });
}

async function load(mib) {
  const url = `${stack.gatewayBase}/${PRIVATE}/load-${runId}`;
  await fill(url, mib);
  const from = stack.reports.length;
  const page = stack.browse("bench/load.js", { url, token: stack.token(), rounds: 3 });
  try {
    const end = await stack.waitReport((r) => r.url === url && (r.event === "done" || r.event === "page-error"), {
      from,
      timeoutMs: 300_000,
      what: "the load rounds",
    });
    if (end.event === "page-error") throw new Error(end.message);
    const rs = stack.reports.slice(from).filter((r) => r.url === url);
    return { raw: rs.filter((r) => r.event === "raw"), follow: rs.filter((r) => r.event === "follow") };
  } finally {
    page.close();
  }
}

try {
  const runs = [await lag(10, 300), await lag(100, 1000)];
  console.log("| browser replica lag, COMMIT returned to the page's replica showing it | commits/s asked | achieved | commits | p50 ms | p99 ms | max ms |");
  console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
  for (const r of runs) {
    console.log(`| \`follow(url, { token })\` in Chromium, through the gateway | ${r.rate} | ${r.achieved} | ${r.commits} | ${fmt(quantile(r.lags, 0.5))} | ${fmt(quantile(r.lags, 0.99))} | ${fmt(Math.max(...r.lags))} |`);
  }
  const l = await load(MIB);
  const best = (xs) => Math.min(...xs.map((x) => x.ms));
  const mb = l.raw[0].bytes / 1e6;
  const dbMb = l.follow[0].dbBytes / 1e6;
  console.log();
  console.log(`| load of a ${MIB} MiB database in a fresh page, best of ${l.raw.length} | ms | MB/s of bytes read | MB/s of database | ratio to raw |`);
  console.log("| --- | ---: | ---: | ---: | ---: |");
  const rawMs = best(l.raw);
  const followMs = best(l.follow);
  console.log(`| raw download of the same bytes (${fmt(mb)} MB), fetch, nothing decoded | ${rawMs.toFixed(0)} | ${(mb / (rawMs / 1000)).toFixed(0)} | | 1.00 |`);
  console.log(`| \`follow()\` (snapshot ${l.follow[0].snapshot === null ? "none" : "read"}, ${l.follow[0].rows} rows) | ${followMs.toFixed(0)} | ${(mb / (followMs / 1000)).toFixed(0)} | ${(dbMb / (followMs / 1000)).toFixed(0)} | ${(followMs / rawMs).toFixed(2)} |`);
  console.log();
  console.log(`rounds (ms): raw ${l.raw.map((r) => r.ms.toFixed(0)).join(", ")}; follow ${l.follow.map((r) => r.ms.toFixed(0)).join(", ")}`);
} finally {
  await stack.stop();
}
process.exit(0);
