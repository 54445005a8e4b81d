// Loads the stream `?url=` (with `?token=`) `?rounds=` times each way, alternating, and reports
// the times: `raw`, the bytes follow() reads (the latest snapshot's body and the stream after
// it) fetched with nothing done to them; `follow`, follow() resolving with the database ready.
import sqlite3InitModule from "@sqlite.org/sqlite-wasm";
import { follow } from "/src/index.js";

const q = new URLSearchParams(location.search);
const url = q.get("url");
const token = q.get("token") || undefined;
const rounds = Number(q.get("rounds") ?? 3);
const headers = token === undefined ? {} : { authorization: `Bearer ${token}` };
const report = (body) => fetch("/report", { method: "POST", body: JSON.stringify({ url, ...body }) });

async function raw() {
  let bytes = 0;
  const head = await fetch(url, { method: "HEAD", headers, cache: "no-store" });
  let offset = head.headers.get("stream-snapshot-offset");
  if (offset !== null) {
    const snap = await fetch(`${url}/snapshot/${offset}`, { headers, cache: "no-store" });
    bytes += (await snap.arrayBuffer()).byteLength;
  } else {
    offset = "-1";
  }
  for (;;) {
    const r = await fetch(`${url}?offset=${offset}`, { headers, cache: "no-store" });
    if (r.status === 204) break;
    bytes += (await r.arrayBuffer()).byteLength;
    offset = r.headers.get("stream-next-offset");
    if (r.headers.get("stream-up-to-date") !== null) break;
  }
  return bytes;
}

try {
  const sqlite3 = await sqlite3InitModule({ print: () => {}, printErr: () => {} });
  for (let i = 0; i < rounds; i++) {
    let t = performance.now();
    const bytes = await raw();
    report({ event: "raw", round: i, ms: performance.now() - t, bytes });
    t = performance.now();
    const replica = await follow(url, { sqlite3, token });
    const ms = performance.now() - t;
    const rows = replica.db.selectValue("SELECT count(*) FROM blobs");
    report({ event: "follow", round: i, ms, rows, dbBytes: replica.status().dbBytes, snapshot: replica.status().snapshot });
    replica.close();
  }
  report({ event: "done" });
} catch (e) {
  report({ event: "page-error", message: String(e?.stack ?? e) });
}
