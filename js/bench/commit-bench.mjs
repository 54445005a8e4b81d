// One-row INSERT commits through open() (the VFS, against a local single-node ursula) beside the
// same commit on plain node:sqlite in WAL mode, in one run. Prints a markdown table.
// Usage: URSULA_URL=http://127.0.0.1:PORT node js/bench/commit-bench.mjs [commits]
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { open } from "../index.js";

const commits = Number(process.argv[2] ?? 3000);
const base = process.env.URSULA_URL;
if (!base) throw new Error("set URSULA_URL to a running ursula server");

function run(label, db) {
  db.exec("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT)");
  const insert = db.prepare("INSERT INTO notes(body) VALUES (?)");
  for (let i = 0; i < 50; i++) insert.run(`warm-up ${i}`);
  const lat = new Float64Array(commits);
  const start = process.hrtime.bigint();
  for (let i = 0; i < commits; i++) {
    const t = process.hrtime.bigint();
    insert.run(`note number ${i}`);
    lat[i] = Number(process.hrtime.bigint() - t) / 1e6;
  }
  const total = Number(process.hrtime.bigint() - start) / 1e9;
  lat.sort();
  const pct = (p) => lat[Math.min(lat.length - 1, Math.round((lat.length - 1) * p))];
  return { label, rate: commits / total, p50: pct(0.5), p99: pct(0.99) };
}

const dir = mkdtempSync(join(tmpdir(), "commit-bench-"));
const plain = new DatabaseSync(join(dir, "plain.db"));
plain.exec("PRAGMA journal_mode=WAL");
const rows = [run("node:sqlite, plain, WAL", plain)];
plain.close();
const db = open(`${base}/bench/node-commits`, { dir });
rows.push(run("node:sqlite through open() (sqlite-ursula-vfs)", db));
db.close();

console.log("| Node 22: commit of a one-row INSERT | commits/s | p50 ms | p99 ms |");
console.log("| --- | ---: | ---: | ---: |");
for (const r of rows) console.log(`| ${r.label} | ${r.rate.toFixed(0)} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} |`);
