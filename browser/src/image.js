// The replica's database inside SQLite's WebAssembly build: an in-memory database
// (sqlite3_deserialize) over a buffer this module owns the layout of. Commits are applied by
// writing their page images into that buffer between statements, so a reader never sees half
// of one; the file change counter then changes, which makes SQLite drop its page cache at the
// next read transaction, as it does for a file another process wrote.
import { PAGE_SIZE } from "./format.js";

// sqlite3_deserialize flags: SQLite frees the buffer with the database, and refuses writes.
const FREEONCLOSE = 1;
const READONLY = 4;

function putU32BE(heap, at, value) {
  heap[at] = (value >>> 24) & 0xff;
  heap[at + 1] = (value >>> 16) & 0xff;
  heap[at + 2] = (value >>> 8) & 0xff;
  heap[at + 3] = value & 0xff;
}

export class Image {
  /** @param sqlite3 the initialized `@sqlite.org/sqlite-wasm` module */
  constructor(sqlite3) {
    this.sqlite3 = sqlite3;
    this.db = new sqlite3.oo1.DB(":memory:", "r");
    this.ptr = 0;
    this.capacity = 0;
    this.pages = 0;
    // Ours alone: a new value after every applied batch tells SQLite its cache is stale.
    this.changes = 1;
  }

  /** Replaces the whole database with `image` (a snapshot's, `pages` × 4096 bytes). */
  load(image) {
    this.pages = image.length / PAGE_SIZE;
    this.#reserve(this.pages, false);
    this.sqlite3.wasm.heap8u().set(image, this.ptr);
    this.#settle();
  }

  /** Applies whole commits (`{ dbPages, pages }` records) in order. */
  apply(commits) {
    if (commits.length === 0) return;
    for (const c of commits) {
      this.#reserve(c.dbPages, true);
      const heap = this.sqlite3.wasm.heap8u();
      for (const [pgno, bytes] of c.pages) {
        // Pages past the commit's database size are dropped, as the extension's replay does.
        if (pgno >= 1 && pgno <= c.dbPages) heap.set(bytes, this.ptr + (pgno - 1) * PAGE_SIZE);
      }
      this.pages = c.dbPages;
    }
    this.#settle();
  }

  close() {
    this.db.close();
  }

  /** Room for `pages`: a new buffer, twice as large, when they do not fit. */
  #reserve(pages, keep) {
    const need = pages * PAGE_SIZE;
    if (need <= this.capacity && this.ptr !== 0) return;
    // The pages copied over carry page 1 as the owner wrote it (a WAL header, which memdb
    // refuses to open): make it this copy's before SQLite reads it.
    if (keep) this.#settle();
    const { capi, wasm } = this.sqlite3;
    const capacity = Math.max(need, this.capacity * 2, 16 * PAGE_SIZE);
    const ptr = capi.sqlite3_malloc64(capacity);
    if (!ptr) throw new Error(`out of memory for a ${capacity}-byte database`);
    const heap = wasm.heap8u();
    heap.fill(0, ptr, ptr + capacity);
    if (keep && this.ptr !== 0) heap.copyWithin(ptr, this.ptr, this.ptr + Math.min(this.capacity, capacity));
    const rc = capi.sqlite3_deserialize(this.db.pointer, "main", ptr, capacity, capacity, FREEONCLOSE | READONLY);
    if (rc !== 0) {
      // On failure SQLite frees the buffer itself (FREEONCLOSE).
      throw new Error(`sqlite3_deserialize failed: ${capi.sqlite3_js_rc_str(rc)}`);
    }
    // The old buffer went with the database it replaced.
    this.ptr = ptr;
    this.capacity = capacity;
  }

  /**
   * Page 1 as this copy needs it: a rollback-journal header (memdb has no WAL), the database
   * size in the header (the buffer is larger), and a change counter SQLite has not seen.
   */
  #settle() {
    if (this.pages === 0) return;
    const heap = this.sqlite3.wasm.heap8u();
    const p = this.ptr;
    heap[p + 18] = 1;
    heap[p + 19] = 1;
    this.changes = (this.changes + 1) >>> 0 || 1;
    putU32BE(heap, p + 24, this.changes);
    putU32BE(heap, p + 28, this.pages);
    // version-valid-for: the header's size counts only while it equals the change counter.
    putU32BE(heap, p + 92, this.changes);
  }
}
