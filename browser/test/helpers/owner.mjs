// The owner of a test database: opens OWNER_URL with @tonbo/sqlite-ursula (the token, if any,
// in URSULA_VFS_TOKEN_FILE), creates the notes table, then commits OWNER_COUNT inserts at
// OWNER_RATE per second, each of OWNER_ROWS rows (of OWNER_PAD bytes, when set). After each
// commit it prints one JSON line: { i, at (ms, the machine's clock), sum (the table's
// checksum) }. It waits for a line on stdin before the inserts, so a reader can be ready first.
import { open } from "../../../js/index.js";
import { checksum, NOTES_SQL } from "./checksum.js";
import { createInterface } from "node:readline";

const url = process.env.OWNER_URL;
const count = Number(process.env.OWNER_COUNT ?? 10);
const rate = Number(process.env.OWNER_RATE ?? 10);
const rowsPer = Number(process.env.OWNER_ROWS ?? 1);
const dir = process.env.OWNER_DIR;
// Rows of this many bytes make one commit span several pages.
const pad = process.env.OWNER_PAD === undefined ? null : Number(process.env.OWNER_PAD);

const db = open(url, { dir });
db.exec("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT)");
const insert = db.prepare("INSERT INTO notes(body) VALUES (?)");
const all = db.prepare(NOTES_SQL);
const now = () => performance.timeOrigin + performance.now();
console.log(JSON.stringify({ ready: true, sum: checksum(all.all()) }));
const lines = createInterface({ input: process.stdin });
await new Promise((ok) => lines.once("line", ok));
const start = now();
for (let i = 1; i <= count; i++) {
  const due = start + (i * 1000) / rate;
  const wait = due - now();
  if (wait > 0) await new Promise((ok) => setTimeout(ok, wait));
  db.exec("BEGIN");
  for (let r = 0; r < rowsPer; r++) insert.run(`note ${i}.${r} ${"x".repeat(pad ?? i % 50)}`);
  db.exec("COMMIT");
  console.log(JSON.stringify({ i, at: now(), sum: checksum(all.all()) }));
}
console.log(JSON.stringify({ done: true }));
lines.close();
db.close();
