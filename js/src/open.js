// open() and openAsync(): attach a file named after the stream URL (or at `path`) and return a
// node:sqlite DatabaseSync whose statements throw Ursula errors.
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { attach, attachAsync, attachMode } from "./api.js";
import { classifyStatementError, isSqliteError, setupError, UrsulaError } from "./errors.js";
import { defaultDir, fileNameFor, normalizeStreamUrl } from "./naming.js";
import { native } from "./native.js";
import { DatabaseSync } from "./sqlite.js";

/** Read-only opens without `path` use the first free of `-ro1` to `-ro8`. */
const READERS = 8;

/** open's own options. */
const OWN_OPTIONS = ["path", "dir", "readOnly", "follow", "at"];

/**
 * node:sqlite's DatabaseSync options, as documented from Node.js 22.19 to 26. node:sqlite
 * ignores a key it does not know, so a misspelt one (`readonly`) would open the file writable
 * and claim the stream, fencing its owner: open refuses every key outside these lists.
 */
const SQLITE_OPTIONS = [
  "open",
  "readOnly",
  "enableForeignKeyConstraints",
  "enableDoubleQuotedStringLiterals",
  "allowExtension",
  "timeout",
  "readBigInts",
  "returnArrays",
  "allowBareNamedParameters",
  "allowUnknownNamedParameters",
  "defensive",
  "limits",
];

/** Throws `invalid_argument` naming the first key open does not know, before anything else. */
function checkOptionNames(options) {
  const known = new Set([...OWN_OPTIONS, ...SQLITE_OPTIONS]);
  for (const key of Object.keys(options)) {
    if (known.has(key)) continue;
    const near = [...known].find((k) => k.toLowerCase() === key.toLowerCase());
    const hint = near === undefined ? "" : ` (did you mean ${near}?)`;
    throw setupError(
      "open",
      "invalid_argument",
      `unknown option ${JSON.stringify(key)}${hint}: open takes ${OWN_OPTIONS.join(", ")} and node:sqlite's DatabaseSync options (${SQLITE_OPTIONS.join(", ")})`,
    );
  }
}

/**
 * Opens the database a stream replicates. Options: node:sqlite's own (checked before anything
 * is attached), plus `path`, `dir`, `readOnly`, `follow` (with `readOnly`: a live read
 * replica that keeps applying the owner's commits) and `at` (with `readOnly`: the database as
 * it was after the last commit at or before that stream offset).
 */
export function open(streamUrl, options = {}) {
  const plan = prepare("open", streamUrl, options);
  let file;
  if (plan.file !== null) {
    file = plan.file;
    unlessOpening(file);
    attach(file, plan.url, plan.attachOptions);
  } else {
    file = attachReader(plan.where, streamUrl, plan.url, (f) => {
      unlessOpening(f);
      attach(f, plan.url, plan.attachOptions);
    });
  }
  return finish(plan, file);
}

/**
 * `open` with the attach, and so the catch-up from the stream, off the event loop (on libuv's
 * thread pool): the event loop runs only the checks and `new DatabaseSync(file)`. The same
 * options, database and errors (as rejections).
 */
export async function openAsync(streamUrl, options = {}) {
  const plan = prepare("openAsync", streamUrl, options);
  if (plan.file !== null) {
    const file = plan.file;
    return opening(file, async () => {
      await attachAsync(file, plan.url, plan.attachOptions);
      return finish(plan, file);
    });
  }
  for (let n = 1; n <= READERS; n++) {
    const file = join(plan.where, fileNameFor(streamUrl, n));
    if (pending.has(file)) continue;
    try {
      return await opening(file, async () => {
        await attachAsync(file, plan.url, plan.attachOptions);
        return finish(plan, file);
      });
    } catch (e) {
      if (!(e instanceof UrsulaError) || e.kind !== "in_use") throw e;
    }
  }
  throw readersInUse(plan.where, plan.url);
}

/**
 * Files an openAsync is attaching, until its database is open. The extension refuses a second
 * attach while one runs, but between the attach's end and `new DatabaseSync(file)` the file
 * is attached with no connection open, which an attach would take as a closed database to
 * attach again: so the package refuses (in_use) an open of such a file itself.
 */
const pending = new Set();

async function opening(file, run) {
  unlessOpening(file);
  pending.add(file);
  try {
    return await run();
  } finally {
    pending.delete(file);
  }
}

function unlessOpening(file) {
  if (pending.has(file)) {
    throw setupError(
      "open",
      "in_use",
      `${file} is being opened in this process already (an openAsync of it has not finished): wait for it, and share its database`,
    );
  }
}

/** Checks the arguments, and names the file to attach (or the directory of a reader's). */
function prepare(fn, streamUrl, options) {
  if (options === null || typeof options !== "object") {
    throw setupError(fn, "invalid_argument", "options must be an object");
  }
  checkOptionNames(options);
  const { path, dir, readOnly = false, follow = false, at, ...sqliteOptions } = options;
  if (typeof readOnly !== "boolean") throw setupError(fn, "invalid_argument", "readOnly must be a boolean");
  if (path !== undefined && typeof path !== "string") {
    throw setupError(fn, "invalid_argument", "path must be a string");
  }
  if (dir !== undefined && typeof dir !== "string") throw setupError(fn, "invalid_argument", "dir must be a string");
  let normal;
  try {
    normal = normalizeStreamUrl(streamUrl);
  } catch (e) {
    if (!(e instanceof RangeError)) throw e;
    throw setupError(fn, "invalid_url", e.message);
  }
  if (path !== undefined && (path === "" || path === ":memory:" || path.startsWith("file:"))) {
    throw setupError(
      fn,
      "invalid_argument",
      `${JSON.stringify(path)} is not a plain file path: SQLite would not open the attached file (give a file path)`,
    );
  }
  // node:sqlite checks its options when it constructs: do that before anything is attached.
  new DatabaseSync(":memory:", { ...sqliteOptions, readOnly, open: false });
  const attachOptions = at === undefined ? { readOnly, follow } : { readOnly, follow, at };
  attachMode(fn, attachOptions);
  const plan = {
    sqliteOptions,
    readOnly,
    attachOptions,
    openNow: sqliteOptions.open !== false,
    file: null,
    where: null,
    url: null,
  };
  if (path !== undefined) {
    // With path, the URL goes to the extension as given.
    return { ...plan, file: resolve(path), url: streamUrl };
  }
  const where = dir !== undefined ? resolve(dir) : defaultDir();
  if (where === null) {
    throw setupError(
      fn,
      "invalid_argument",
      "no cache directory: neither XDG_CACHE_HOME nor HOME is an absolute path and the user database names no home; give dir or path",
    );
  }
  try {
    mkdirSync(where, { recursive: true, mode: 0o700 });
  } catch (cause) {
    throw setupError(fn, "local_setup", `cannot create the directory ${where}: ${cause.message}`, cause);
  }
  if (!readOnly) return { ...plan, file: join(where, fileNameFor(streamUrl)), url: normal.url };
  return { ...plan, where, url: normal.url };
}

/** The database on the attached `file`, its errors classified. */
function finish(plan, file) {
  const db = new DatabaseSync(file, { ...plan.sqliteOptions, readOnly: plan.readOnly, open: plan.openNow });
  classify(db, file);
  return db;
}

function attachReader(where, streamUrl, url, attachOne) {
  for (let n = 1; n <= READERS; n++) {
    const file = join(where, fileNameFor(streamUrl, n));
    try {
      attachOne(file);
      return file;
    } catch (e) {
      if (!(e instanceof UrsulaError) || e.kind !== "in_use") throw e;
    }
  }
  throw readersInUse(where, url);
}

function readersInUse(where, url) {
  return setupError(
    "open",
    "in_use",
    `every read-only file of ${url} in ${where} (-ro1 to -ro${READERS}) is held by another connection or process; a process holds every file it attached until it exits: give this reader its own dir or path`,
  );
}

function define(target, name, value) {
  Object.defineProperty(target, name, { value, writable: true, configurable: true, enumerable: false });
}

/** Which statements the ROLLBACK rule covers. */
export function rollbackKind(sql) {
  if (typeof sql !== "string") return null;
  const s = sql.replace(/^(?:\s+|--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/)+/, "");
  if (/^ROLLBACK(?:\s+TRANSACTION)?\s*(?:;\s*)?$/i.test(s)) return "rollback";
  if (/^ROLLBACK\b/i.test(s)) return "rollback_to";
  if (/^RELEASE\b/i.test(s)) return "release";
  return null;
}

function noTransaction(e) {
  return isSqliteError(e) && e.errcode === 1 && /no transaction is active|no such savepoint/.test(e.message);
}

/**
 * Makes `db`'s exec, prepare and applyChangeset, and its statements' run, get, all and
 * iterate, throw Ursula errors for failures of the extension on `file`, and keeps the last
 * one for the ROLLBACK rule: after it, a prepared plain ROLLBACK succeeds (SQLite already
 * rolled back), and ROLLBACK through exec, ROLLBACK TO and RELEASE throw it again.
 */
function classify(db, file) {
  const state = { file, kept: null };
  const status = (f) => native().status(f);
  const guarded = (rb, fn, noop) => {
    try {
      const r = fn();
      if (rb === null) state.kept = null;
      return r;
    } catch (error) {
      if (state.kept !== null && rb !== null && noTransaction(error)) {
        if (rb === "rollback" && noop) return noop();
        throw state.kept;
      }
      const c = classifyStatementError(error, status, state.file);
      if (c instanceof UrsulaError) state.kept = c;
      else if (rb === null) state.kept = null;
      throw c;
    }
  };
  const { exec, prepare, applyChangeset } = db;
  define(db, "exec", function execClassified(sql) {
    return guarded(rollbackKind(sql), () => exec.call(db, sql));
  });
  define(db, "applyChangeset", function applyChangesetClassified(...args) {
    return guarded(null, () => applyChangeset.apply(db, args));
  });
  define(db, "prepare", function prepareClassified(...args) {
    const rb = rollbackKind(args[0]);
    // Preparing runs nothing: it neither keeps nor clears an error.
    let stmt;
    try {
      stmt = prepare.apply(db, args);
    } catch (error) {
      const c = classifyStatementError(error, status, state.file);
      if (c instanceof UrsulaError) state.kept = c;
      throw c;
    }
    const { run, get, all, iterate } = stmt;
    define(stmt, "run", function runClassified(...a) {
      return guarded(rb, () => run.apply(stmt, a), () => ({ changes: 0, lastInsertRowid: 0 }));
    });
    define(stmt, "get", function getClassified(...a) {
      return guarded(rb, () => get.apply(stmt, a), () => undefined);
    });
    define(stmt, "all", function allClassified(...a) {
      return guarded(rb, () => all.apply(stmt, a), () => []);
    });
    define(stmt, "iterate", function iterateClassified(...a) {
      const it = guarded(rb, () => iterate.apply(stmt, a));
      const next = it.next;
      define(it, "next", function nextClassified(...n) {
        return guarded(rb, () => next.apply(it, n), () => ({ done: true, value: undefined }));
      });
      return it;
    });
    return stmt;
  });
}
