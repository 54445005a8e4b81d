// One checksum of the notes table, computed alike by the owner (node:sqlite) and the replica
// (SQLite in WebAssembly): FNV-1a over "id:body;" of every row in id order.
export function checksum(rows) {
  let h = 0x811c9dc5;
  for (const r of rows) {
    const s = `${r.id}:${r.body};`;
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
  }
  return `${rows.length}/${h.toString(16)}`;
}

export const NOTES_SQL = "SELECT id, body FROM notes ORDER BY id";
