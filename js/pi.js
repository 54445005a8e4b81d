// @tonbo/sqlite-ursula/pi: Pi Durable's own node SqliteStorage on a replicated file.
// Pi Durable (@earendil-works/pi-durable >=1.0.0 <1.2.0) is an optional peer dependency: it is
// imported only when openUrsulaPiStorage runs.
// First: it checks the Node.js version before anything needs node:sqlite.
import "./src/sqlite.js";
import { resolve } from "node:path";
import { attach, status } from "./src/api.js";
import { classifyStatementError, findInChain, isSqliteError, setupError, UrsulaError } from "./src/errors.js";

const PI_NODE = "@earendil-works/pi-durable/storage/sqlite/node";
const PI_SQLITE = "@earendil-works/pi-durable/storage/sqlite";
const EXTENSION_CODES = new Set([7178, 778, 266]);

/**
 * The Ursula error inside a failure Pi reports (its driver's AggregateError around a failed
 * ROLLBACK, its StorageRejected around a read), or the failure itself.
 */
export function ursulaErrorOf(error, file) {
  const found = findInChain(error, (e) => e instanceof UrsulaError);
  if (found) return found;
  const sqlite = findInChain(error, (e) => isSqliteError(e) && EXTENSION_CODES.has(e.errcode));
  if (sqlite) {
    const c = classifyStatementError(sqlite, status, file);
    if (c instanceof UrsulaError) return c;
  }
  return error;
}

function mapped(fn, file) {
  return function mappedCall(...args) {
    let r;
    try {
      r = fn.apply(this, args);
    } catch (error) {
      throw ursulaErrorOf(error, file);
    }
    if (r !== null && typeof r === "object" && typeof r.then === "function") {
      return Promise.resolve(r).catch((error) => {
        throw ursulaErrorOf(error, file);
      });
    }
    return r;
  };
}

/** Wraps every method of `obj` (own and inherited) so failures surface as Ursula errors. */
function mapMethods(obj, file) {
  const names = new Set();
  for (let p = obj; p !== null && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const name of Object.getOwnPropertyNames(p)) {
      if (name !== "constructor") names.add(name);
    }
  }
  for (const name of names) {
    const d = Object.getOwnPropertyDescriptor(obj, name) ?? findDescriptor(obj, name);
    if (!d || typeof d.value !== "function") continue;
    Object.defineProperty(obj, name, {
      value: mapped(d.value, file),
      writable: true,
      configurable: true,
      enumerable: false,
    });
  }
}

function findDescriptor(obj, name) {
  for (let p = Object.getPrototypeOf(obj); p !== null; p = Object.getPrototypeOf(p)) {
    const d = Object.getOwnPropertyDescriptor(p, name);
    if (d) return d;
  }
  return undefined;
}

async function importPi() {
  try {
    return [await import(PI_NODE), await import(PI_SQLITE)];
  } catch (cause) {
    throw setupError(
      "openUrsulaPiStorage",
      "local_setup",
      `cannot import Pi Durable (${cause.message}): install it next to this package, npm install @earendil-works/pi-durable (>=1.0.0 <1.2.0)`,
      cause,
    );
  }
}

/**
 * Attaches `file` to `streamUrl`, then opens it with Pi's own node driver and returns Pi's
 * SqliteStorage. Options: Pi's NodeSqliteStorageOptions, plus `readOnly`.
 */
export async function openUrsulaPiStorage(file, streamUrl, options = {}) {
  if (typeof file !== "string" || file === "" || file === ":memory:" || file.startsWith("file:")) {
    throw setupError(
      "openUrsulaPiStorage",
      "invalid_argument",
      `${JSON.stringify(file)} is not a plain file path: SQLite would not open the attached file`,
    );
  }
  if (typeof streamUrl !== "string" || streamUrl.includes("?") || streamUrl.includes("#")) {
    throw setupError(
      "openUrsulaPiStorage",
      "invalid_url",
      `${JSON.stringify(streamUrl)}: a stream URL must be a string without a query or a fragment`,
    );
  }
  if (options === null || typeof options !== "object") {
    throw setupError("openUrsulaPiStorage", "invalid_argument", "options must be an object");
  }
  const { readOnly = false, ...piOptions } = options;
  const path = resolve(file);
  const [node, sqlite] = await importPi();
  attach(path, streamUrl, { readOnly });
  let db;
  try {
    db = await node.openNodeSqliteDatabase(path, piOptions);
  } catch (error) {
    throw ursulaErrorOf(error, path);
  }
  // Pi's transaction runs ROLLBACK after a failure, which fails once SQLite rolled back already:
  // the driver's AggregateError then hides the extension's failure. Surface that instead.
  mapMethods(db, path);
  const storage = await sqlite.SqliteStorage.open(db);
  mapMethods(storage, path);
  return storage;
}
