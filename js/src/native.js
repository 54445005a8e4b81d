// Loading the extension, and the backend that talks to it.
//
// The prebuilt library is the napi addon (`sqlite-ursula.<platform>.node`, shipped in the
// platform package `@tonbo/sqlite-ursula-<platform>`, see prebuiltPath()): one shared object
// that is both a Node.js module and the SQLite extension. It is required first, then loaded
// into an in-memory node:sqlite connection (the control connection), which registers the
// `ursula` VFS as SQLite's default for the process. The addon's functions then read the same
// process state as the SQL functions do. A library named by SQLITE_URSULA_VFS that is not such
// an addon (a plain `libsqlite_ursula_vfs.so`) is driven through its SQL functions on the
// control connection instead.
import { existsSync, realpathSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { functionError, isSqliteError, setupError, sqliteCause } from "./errors.js";
import { DatabaseSync } from "./sqlite.js";

const ENTRY_POINT = "sqlite3_sqliteursulavfs_init";
const packageDir = dirname(dirname(fileURLToPath(import.meta.url)));

let control = null;
let backend = null;
/** The library the process loaded, as a real path: a later call naming another is refused. */
let loadedFrom = null;

/** The platform part of a prebuilt's name, as napi-rs names them. */
function platformTriple() {
  const { platform, arch } = process;
  if (platform === "linux") {
    const glibc = process.report?.getReport?.().header?.glibcVersionRuntime;
    return `linux-${arch}-${glibc ? "gnu" : "musl"}`;
  }
  return `${platform}-${arch}`;
}

/** The package napi-rs's per-platform layout puts the prebuilt addon in. */
function platformPackage() {
  return `@tonbo/sqlite-ursula-${platformTriple()}`;
}

/**
 * The prebuilt addon for this platform, or `null`. A development build lies beside the package
 * (scripts/test-js.sh copies it there) and wins; an installed release ships it in the platform
 * package, the optional dependency npm installs only on a matching os/cpu/libc.
 */
export function prebuiltPath() {
  const name = `sqlite-ursula.${platformTriple()}.node`;
  const beside = [join(packageDir, name), join(packageDir, "prebuilt", name)].find((p) => existsSync(p));
  if (beside !== undefined) return beside;
  let manifest;
  try {
    // Resolved from this file, so the platform package is found wherever npm hoisted it.
    manifest = createRequire(import.meta.url).resolve(`${platformPackage()}/package.json`);
  } catch {
    return null;
  }
  const inPackage = join(dirname(manifest), name);
  return existsSync(inPackage) ? inPackage : null;
}

function addonBackend(addon) {
  const call = (result) => {
    const r = JSON.parse(result);
    if (r.error) {
      const e = r.error;
      throw functionError(e.message, sqliteCause(e.message, e.code, e.errstr));
    }
    return r.ok;
  };
  return {
    kind: "addon",
    attach: (file, url, mode) => call(addon.attach(file, url, mode)),
    // napi async work: the attach runs on libuv's thread pool, the event loop keeps running.
    attachAsync: async (file, url, mode) => call(await addon.attachAsync(file, url, mode)),
    status: (file) => call(addon.status(file)),
    drainStats: (file) => call(addon.drainStats(file)),
    setToken: (token) => {
      call(addon.setToken(token));
    },
    commits: (url, from, limit) => call(addon.commits(url, from, limit)),
    fileName: (url, n) => {
      const r = JSON.parse(addon.fileName(url, n));
      if (r.error) throw new RangeError(r.error.message);
      return r.ok;
    },
  };
}

function sqlBackend(db) {
  const one = (sql, ...args) => {
    try {
      return db.prepare(sql).get(...args).r;
    } catch (error) {
      if (isSqliteError(error) && /^ursula_\w+: /.test(error.message)) throw functionError(error.message, error);
      throw error;
    }
  };
  const attach = (file, url, mode) => one("SELECT ursula_attach(?, ?, ?) AS r", file, url, mode);
  return {
    kind: "sql",
    attach,
    // A SQL function runs on the thread that steps it: a plain extension has no thread to hand
    // the attach to, so the promise settles only after the attach ran on the event loop.
    attachAsync: async (file, url, mode) => attach(file, url, mode),
    status: (file) => JSON.parse(one("SELECT ursula_status(?) AS r", file)),
    drainStats: (file) => JSON.parse(one("SELECT ursula_stats(?) AS r", file)),
    setToken: (token) => {
      one("SELECT ursula_set_token(?) AS r", token ?? null);
    },
    commits: (url, from, limit) => JSON.parse(one("SELECT ursula_commits(?, ?, ?) AS r", url, from, limit)),
    fileName: (url, n) => {
      try {
        return JSON.parse(one("SELECT ursula_file_name(?, ?) AS r", url, n));
      } catch (e) {
        if (e.kind === "invalid_url") throw new RangeError(e.reason ?? e.message);
        throw e;
      }
    },
  };
}

/** `path` as a real path when it exists, else resolved: what two spellings of a library share. */
function sameLibrary(path) {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}

/**
 * Loads the extension once per process and returns the control connection: the prebuilt one,
 * or the library `path` (default: SQLITE_URSULA_VFS) names. Later calls return the same
 * connection; one that names another library than the loaded one is refused, since SQLite
 * cannot load a second copy of the VFS into the process.
 */
export function loadUrsulaVfs(path) {
  if (control !== null) {
    if (path !== undefined && path !== "" && sameLibrary(path) !== loadedFrom) {
      throw setupError(
        "loadUrsulaVfs",
        "local_setup",
        `the extension is loaded already, from ${loadedFrom}, and a process loads it once: ${path} was not loaded (call loadUrsulaVfs(path) before anything opens a database, or use another process)`,
      );
    }
    return control;
  }
  path ??= process.env.SQLITE_URSULA_VFS;
  let library = path === undefined || path === "" ? null : path;
  if (library === null) {
    library = prebuiltPath();
    if (library === null) {
      throw setupError(
        "loadUrsulaVfs",
        "unsupported",
        `no prebuilt sqlite-ursula-vfs for ${platformTriple()} (neither beside the package nor in ${platformPackage()}): build the extension (cargo build --release -p sqlite-ursula-vfs) and point SQLITE_URSULA_VFS at it`,
      );
    }
  }
  let addon = null;
  if (library.endsWith(".node")) {
    try {
      // Required before SQLite loads it, so Node.js registers the module in its own dlopen.
      addon = createRequire(import.meta.url)(realpathSync(library));
    } catch (cause) {
      throw setupError("loadUrsulaVfs", "local_setup", `cannot load the addon ${library}: ${cause.message}`, cause);
    }
  }
  const db = new DatabaseSync(":memory:", { allowExtension: true });
  try {
    if (addon !== null) db.loadExtension(library, ENTRY_POINT);
    else db.loadExtension(library);
  } catch (cause) {
    db.close();
    throw setupError("loadUrsulaVfs", "local_setup", `cannot load the extension ${library}: ${cause.message}`, cause);
  }
  // The addon's functions read the extension's state only if SQLite loaded this very object.
  backend = addon !== null && addon.loaded() ? addonBackend(addon) : sqlBackend(db);
  control = db;
  loadedFrom = sameLibrary(library);
  return db;
}

/** The backend, loading the extension first when nothing loaded it yet. */
export function native() {
  if (backend === null) loadUrsulaVfs();
  return backend;
}
