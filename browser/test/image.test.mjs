// The replica's in-memory database (src/image.js) in SQLite's WebAssembly build under Node:
// commits applied as the extension writes them, page 1 in WAL mode, growing past the buffer.
import assert from "node:assert/strict";
import { test } from "node:test";
import sqlite3InitModule from "@sqlite.org/sqlite-wasm";
import { Image } from "../src/image.js";

const sqlite3 = await sqlite3InitModule({ print: () => {}, printErr: () => {} });
const PAGE = 4096;

/** A database of `rows` 3000-byte rows as the owner's file holds it: pages, page 1 in WAL mode. */
function ownerPages(rows) {
  const db = new sqlite3.oo1.DB(":memory:");
  db.exec(`PRAGMA page_size=${PAGE}; CREATE TABLE t(id INTEGER PRIMARY KEY, b BLOB)`);
  for (let i = 0; i < rows; i++) db.exec("INSERT INTO t(b) VALUES (zeroblob(3000))");
  const bytes = sqlite3.capi.sqlite3_js_db_export(db.pointer);
  db.close();
  bytes[18] = 2;
  bytes[19] = 2;
  const pages = [];
  for (let n = 1; n <= bytes.length / PAGE; n++) pages.push([n, bytes.slice((n - 1) * PAGE, n * PAGE)]);
  return { dbPages: bytes.length / PAGE, pages };
}

test("commits that outgrow the buffer inside one batch apply whole, page 1 coming in WAL mode", () => {
  const image = new Image(sqlite3);
  try {
    // The first commit fits the first buffer; the second needs a larger one while page 1 still
    // holds the owner's WAL header.
    const small = ownerPages(1);
    const large = ownerPages(400);
    assert.ok(large.dbPages > 16 * 2, `${large.dbPages} pages`);
    image.apply([small, large]);
    assert.equal(image.db.selectValue("SELECT count(*) FROM t"), 400);
    assert.equal(image.pages, large.dbPages);
    // And again past that buffer, in a later batch, after a reader saw the database.
    image.apply([ownerPages(2000)]);
    assert.equal(image.db.selectValue("SELECT count(*) FROM t"), 2000);
    assert.equal(image.db.selectValue("PRAGMA journal_mode"), "memory");
  } finally {
    image.close();
  }
});
