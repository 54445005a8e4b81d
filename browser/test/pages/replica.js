// Follows the streams named by `?url=` (repeatable) with `?token=` (optional) and reports to
// the page server: `caught-up` once follow() resolves, `commit` after every applied batch
// (with the notes table's checksum), `stopped` when the replica stops and `refused` when
// follow() rejects, each with the page's clock (ms since the epoch, sub-millisecond).
import sqlite3InitModule from "@sqlite.org/sqlite-wasm";
import { follow, UrsulaReplicaError } from "/src/index.js";
import { checksum, NOTES_SQL } from "/test/helpers/checksum.js";

const q = new URLSearchParams(location.search);
const token = q.get("token") || undefined;
const now = () => performance.timeOrigin + performance.now();
let seq = 0;
const report = (body) =>
  fetch("/report", { method: "POST", body: JSON.stringify({ seq: ++seq, ...body }), keepalive: true });

function sumOf(db) {
  const table = db.selectValue("SELECT count(*) FROM sqlite_master WHERE name = 'notes'");
  if (!table) return "none";
  return checksum(db.exec({ sql: NOTES_SQL, rowMode: "object", returnValue: "resultRows" }));
}

const errorOf = (e) => ({
  name: e?.name,
  kind: e?.kind,
  action: e?.action,
  classified: e instanceof UrsulaReplicaError,
  message: String(e?.message ?? e),
});

try {
  const sqlite3 = await sqlite3InitModule({ print: () => {}, printErr: () => {} });
  for (const url of q.getAll("url")) {
    follow(url, { sqlite3, token }).then(
      (replica) => {
        report({ url, event: "caught-up", at: now(), sum: sumOf(replica.db), status: replica.status() });
        replica.onCommit(({ offset, commits }) => {
          report({ url, event: "commit", at: now(), sum: sumOf(replica.db), offset, commits });
        });
        replica.stopped.then((e) => report({ url, event: "stopped", at: now(), sum: sumOf(replica.db), error: e && errorOf(e) }));
      },
      (e) => report({ url, event: "refused", at: now(), error: errorOf(e) }),
    );
  }
} catch (e) {
  report({ event: "page-error", error: errorOf(e) });
}
