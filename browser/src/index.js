// @tonbo/sqlite-ursula-browser: a live, read-only replica of a SQLite database that
// sqlite-ursula-vfs replicates to an Ursula stream, in a browser tab, over plain HTTP.
//
//   import sqlite3InitModule from "@sqlite.org/sqlite-wasm";
//   import { follow } from "@tonbo/sqlite-ursula-browser";
//   const replica = await follow(url, { sqlite3: await sqlite3InitModule(), token });
//   replica.db.selectValue("SELECT count(*) FROM notes");
//
// Module map: follow.js (the reads and the replica's life), image.js (the database inside
// SQLite's WebAssembly build), format.js (the extension's frames and snapshots), errors.js.
import { UrsulaReplicaError } from "./errors.js";
import { Replica } from "./follow.js";

export { UrsulaReplicaError } from "./errors.js";
export { FormatError, FrameReader, decodeRecord, decodeSnapshot } from "./format.js";
export { Replica } from "./follow.js";

/**
 * Catches a replica up with the stream at `url` (the latest snapshot, then every commit after
 * it) and keeps following it. Resolves once the replica holds everything the stream held when
 * it was asked; rejects with an `UrsulaReplicaError` when it cannot get there.
 *
 * @param {string} url the stream's URL, as the owner attached it (through a gateway for a page)
 * @param {{ sqlite3: object, token?: string, fetch?: typeof fetch }} options
 */
export async function follow(url, options) {
  if (options?.sqlite3?.oo1 === undefined) {
    throw new UrsulaReplicaError("follow needs { sqlite3 }: the module @sqlite.org/sqlite-wasm initializes", {
      kind: "invalid_argument",
      action: "fix",
    });
  }
  const replica = new Replica(url, options);
  try {
    await replica.start();
    let backoff = 50;
    while (!replica.status().caughtUp) {
      if (!(await replica.poll())) {
        await new Promise((ok) => setTimeout(ok, backoff));
        backoff = Math.min(backoff * 2, 2_000);
      }
    }
  } catch (e) {
    replica.close();
    if (e instanceof UrsulaReplicaError) throw e;
    let info = { kind: "unavailable", action: "retry" };
    if (e?.cause?.kind !== undefined) info = e.cause;
    else if (e?.name === "FormatError") info = { kind: "stream_state", action: "fix" };
    throw new UrsulaReplicaError(`follow ${url}: ${e?.message ?? e}`, { ...info, cause: e });
  }
  replica.run();
  return replica;
}
