// The writer: owns the notes database and adds a note every `--every` ms (`--count` of them,
// or forever). Each INSERT returns once the stream holds it; every tab following the stream
// shows it next.
//
//   node writer.mjs http://127.0.0.1:8080/demo/notes.db [--every 1000] [--count N]
import { open } from "@tonbo/sqlite-ursula";
import { parseArgs } from "node:util";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { every: { type: "string", default: "1000" }, count: { type: "string" } },
});
const url = positionals[0];
if (url === undefined) throw new Error("usage: node writer.mjs STREAM_URL [--every MS] [--count N]");
const count = values.count === undefined ? Infinity : Number(values.count);

const db = open(url);
db.exec("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT NOT NULL, at TEXT NOT NULL)");
const add = db.prepare("INSERT INTO notes(body, at) VALUES (?, ?) RETURNING id");
for (let i = 1; i <= count; i++) {
  const { id } = add.get(`note ${i} from process ${process.pid}`, new Date().toISOString());
  console.log(JSON.stringify({ id }));
  await new Promise((r) => setTimeout(r, Number(values.every)));
}
db.close();
