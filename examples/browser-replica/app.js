// A read-only copy of the notes database in this tab: follow() loads it and applies every
// commit the writer makes; the list is drawn again after each batch. The stream's URL (through
// a gateway that allows this page's origin) comes from `?url=`, a token for a private bucket
// from `?token=`.
import sqlite3InitModule from "@sqlite.org/sqlite-wasm";
import { follow } from "@tonbo/sqlite-ursula-browser";

const q = new URLSearchParams(location.search);
const status = document.querySelector("#status");
const app = { notes: [], renders: 0, error: null };
window.app = app;

function render(replica) {
  const hasTable = replica.db.selectValue("SELECT count(*) FROM sqlite_master WHERE name = 'notes'");
  app.notes = hasTable
    ? replica.db.exec({ sql: "SELECT id, body, at FROM notes ORDER BY id", rowMode: "object", returnValue: "resultRows" })
    : [];
  app.renders += 1;
  const list = document.querySelector("#notes");
  list.replaceChildren(
    ...app.notes.map((n) => {
      const item = document.createElement("li");
      item.textContent = `${n.body} (${n.at})`;
      return item;
    }),
  );
  const s = replica.status();
  status.textContent = `${app.notes.length} notes, at offset ${s.offset}, ${s.following ? "following" : "stopped"}`;
}

try {
  const sqlite3 = await sqlite3InitModule({ print: () => {}, printErr: () => {} });
  const replica = await follow(q.get("url"), { sqlite3, token: q.get("token") ?? undefined });
  render(replica);
  replica.onCommit(() => render(replica));
  replica.stopped.then((e) => {
    if (e !== null) {
      app.error = { kind: e.kind, action: e.action, message: e.message };
      status.textContent = `stopped: ${e.message}`;
    }
  });
} catch (e) {
  app.error = { kind: e.kind, action: e.action, message: e.message };
  status.textContent = `could not follow: ${e.message}`;
}
