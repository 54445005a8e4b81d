// The Ursula errors and the mapping from the extension's failures to them.
//
// Three sources feed the mapping:
// - a failed attach: the extension's kind and SQLite result code (`ursula_attach: <kind>: ...`);
// - a failed status or drainStats (`ursula_status: <kind>: ...`, or `attach_failed: <kind>`);
// - a failed statement: node:sqlite's error (errcode 7178, 778 or 266) read together with
//   `status(file).error` of the file the database attached;
// - a statement the extension refused while it was prepared, such as `PRAGMA journal_mode=DELETE`
//   (errcode 1, message `sqlite-ursula-vfs: <kind>: ...`): it changed nothing, so no status
//   records it.

import { createRequire } from "node:module";

/**
 * The extension's table of kinds, actions and sentences (vfs/src/package_errors.rs), generated
 * into error-table.json; a Rust test fails when this copy drifts from the source.
 */
const TABLE = createRequire(import.meta.url)("./error-table.json");
const KIND = new Map(Object.entries(TABLE.kinds));
const REFUSED_BY = TABLE.refused_by;
/** A sentence of the table, `{reason}` filled in and `{reopen}` said as this package says it. */
const say = (name, reason) =>
  TABLE.messages[name].replaceAll("{reopen}", "open it again").replaceAll("{reason}", String(reason));

/** SQLite's extended result codes the extension fails statements with. */
export const SQLITE_IOERR_AUTH = 7178;
export const SQLITE_IOERR_WRITE = 778;
export const SQLITE_IOERR_READ = 266;
export const SQLITE_AUTH = 23;
export const SQLITE_ERROR = 1;

export class UrsulaError extends Error {
  /**
   * @param {string} message
   * @param {{action: string, kind: string, reason?: string|null, fenced?: boolean, cause?: unknown}} details
   */
  constructor(message, details) {
    const { action, kind, reason = null, fenced = false, cause } = details;
    super(message, cause === undefined ? undefined : { cause });
    this.action = action;
    this.kind = kind;
    this.reason = reason;
    this.fenced = fenced;
    if (isSqliteError(cause)) {
      this.code = cause.code;
      this.errcode = cause.errcode;
      this.errstr = cause.errstr;
    }
  }
}

/** A commit or attach refused before it reached the stream: nothing of it was applied. */
export class UrsulaWriteRefusedError extends UrsulaError {}
/** A write refused with 402 Payment Required by a layer in front of the stream. */
export class UrsulaPaymentRequiredError extends UrsulaWriteRefusedError {}
/** A commit the stream did not take: the file is poisoned until it is attached again. */
export class UrsulaReplicationError extends UrsulaError {}
/** Poisoned with an unknown outcome or a damaged local file: close and open again. */
export class UrsulaReattachError extends UrsulaReplicationError {}
/** Another owner took the stream over: stop using the database. */
export class UrsulaFencedError extends UrsulaReplicationError {}
/** The request cannot succeed as made: change the URL, the options or the files. */
export class UrsulaSetupError extends UrsulaError {}

for (const cls of [
  UrsulaError,
  UrsulaWriteRefusedError,
  UrsulaPaymentRequiredError,
  UrsulaReplicationError,
  UrsulaReattachError,
  UrsulaFencedError,
  UrsulaSetupError,
]) {
  Object.defineProperty(cls.prototype, "name", {
    value: cls.name,
    writable: true,
    configurable: true,
    enumerable: false,
  });
}

/** The table's error classes. */
const CLASSES = {
  write_refused: UrsulaWriteRefusedError,
  payment_required: UrsulaPaymentRequiredError,
  reattach: UrsulaReattachError,
  fenced: UrsulaFencedError,
  setup: UrsulaSetupError,
};

/** An error node:sqlite threw for a SQLite failure. */
export function isSqliteError(e) {
  return e instanceof Error && e.code === "ERR_SQLITE_ERROR" && typeof e.errcode === "number";
}

/** A stand-in for node:sqlite's error when the failure came through the addon, not SQL. */
export function sqliteCause(message, errcode, errstr) {
  const e = new Error(message);
  e.code = "ERR_SQLITE_ERROR";
  e.errcode = errcode;
  e.errstr = errstr ?? "";
  return e;
}

/**
 * The error of a failed attach (or of `open` before it attached), by the extension's kind.
 * Only attach sees a 402's own code (SQLITE_AUTH): that makes it a payment error.
 */
export function attachError(message, kind, cause, { paymentCode = true } = {}) {
  const d = { kind, cause, reason: message };
  const entry = KIND.get(kind) ?? { action: "fix", error: "setup" };
  if (entry.error === "payment_required") {
    if (paymentCode && cause?.errcode === SQLITE_AUTH) {
      return new UrsulaPaymentRequiredError(message, { ...d, action: entry.action });
    }
    return new UrsulaWriteRefusedError(message, { ...d, kind: "refused", action: entry.action });
  }
  const Class = CLASSES[entry.error];
  const e = new Class(message, { ...d, action: entry.action, fenced: entry.action === "stop" });
  // An `at` below what the stream can rebuild: the offset to open at instead.
  if (kind === "retained") e.earliest = EARLIEST.exec(message)?.[1] ?? null;
  return e;
}

/** How the extension names the earliest point a `retained` refusal could open at. */
const EARLIEST = /the earliest reachable point is (-1|\d{20})/;

/** An error `open` finds itself, before anything is attached. */
export function setupError(fn, kind, message, cause) {
  return new UrsulaSetupError(`${fn}: ${kind}: ${message}`, { action: "fix", kind, cause, reason: message });
}

const KIND_IN_MESSAGE = /^ursula_\w+: (\w+): (?:(\w+): )?/;

/** The message of a statement the extension refused while SQLite prepared it. */
const REFUSED_STATEMENT = /^sqlite-ursula-vfs: (\w+): /;

/**
 * The error of a failed `ursula_status` / `ursula_stats` (or `ursula_attach` through SQL):
 * the kind is in the message. `status` of a path whose attach failed names that attach's kind,
 * except that a 402 shows as `refused` there: only attach itself has the 402's code.
 */
export function functionError(message, cause) {
  const m = KIND_IN_MESSAGE.exec(message);
  let kind = m ? m[1] : "internal";
  if (kind === "attach_failed") kind = m[2] ?? "internal";
  if (kind === "not_loaded") kind = "not_attached";
  const isAttach = message.startsWith("ursula_attach:");
  const e = attachError(message, kind, cause, { paymentCode: isAttach });
  // The reason is what the extension says after `<function>: <kind>: `.
  if (m) e.reason = message.slice(m[0].length);
  return e;
}

/**
 * Classifies an error node:sqlite threw on the database attached as `file`, or returns it
 * unchanged. `readStatus(file)` returns the file's status, or throws.
 */
export function classifyStatementError(error, readStatus, file) {
  if (!isSqliteError(error)) return error;
  const code = error.errcode;
  const refused = code === SQLITE_ERROR ? REFUSED_STATEMENT.exec(error.message) : null;
  if (refused) {
    const [head, kind] = refused;
    return new UrsulaSetupError(error.message, { action: "fix", kind, reason: error.message.slice(head.length), cause: error });
  }
  if (code !== SQLITE_IOERR_AUTH && code !== SQLITE_IOERR_WRITE && code !== SQLITE_IOERR_READ) return error;
  let s;
  try {
    s = readStatus(file);
  } catch {
    return error;
  }
  const failure = s?.error;
  if (failure == null) return error;
  if (!s.poisoned && failure.kind === "unsupported") {
    // A setup the extension does not support (locking_mode=EXCLUSIVE, a journal mode or page
    // size change): nothing reached the stream and the file is not poisoned, but running it
    // again fails the same way until the setup changes.
    if (code === SQLITE_IOERR_READ) return error;
    const reason = failure.message ?? null;
    return new UrsulaReplicationError(say("unsupported", reason), { kind: "unsupported", reason, cause: error, action: "fix" });
  }
  if (failure.kind === "refused") {
    if (code === SQLITE_IOERR_READ) return error;
    const kind = failure.refused_kind ?? s.refused_kind ?? "refused";
    const reason = s.refused_reason ?? failure.message ?? null;
    const d = { kind, reason, cause: error };
    if (kind === "payment_required") {
      return new UrsulaPaymentRequiredError(`${REFUSED_BY[kind]}: ${reason}. ${say("retry_tail")}`, { ...d, action: "retry" });
    }
    if (kind === "too_large") {
      return new UrsulaWriteRefusedError(say("too_large", reason), { ...d, action: "fix" });
    }
    if (KIND.get(kind)?.action === "retry") {
      return new UrsulaWriteRefusedError(`${REFUSED_BY[kind]}: ${reason}. ${say("retry_tail")}`, { ...d, action: "retry" });
    }
    return new UrsulaReplicationError(say("refused_setup", reason), { ...d, action: "fix" });
  }
  // Poisoned: every later commit fails until the file is attached again.
  const reason = s.reason ?? failure.message ?? null;
  const d = { kind: failure.kind, reason, cause: error, fenced: s.fenced === true };
  if (failure.action === "stop") {
    const head = say(code === SQLITE_IOERR_READ ? "fenced_read" : "not_replicated");
    return new UrsulaFencedError(`${head}: ${reason}. ${say("stop_tail")}`, { ...d, action: "stop", fenced: true });
  }
  if (code === SQLITE_IOERR_READ && s.read_only && s.following === false && failure.action === "reattach") {
    // A live read replica whose stream was deleted, recreated or trimmed past it.
    return new UrsulaReattachError(`${say("stopped_following")}: ${reason}. ${say("reattach_tail")}`, {
      ...d,
      action: "reattach",
    });
  }
  if (code === SQLITE_IOERR_READ) return error;
  if (failure.action === "reattach") {
    return new UrsulaReattachError(`${say("not_replicated")}: ${reason}. ${say("reattach_tail")}`, { ...d, action: "reattach" });
  }
  return new UrsulaReplicationError(`${say("not_replicated")}: ${reason}. ${say("fix_tail")}`, { ...d, action: "fix" });
}

/** The first Ursula error, or extension failure, in an error's cause chain (Pi wraps them). */
export function findInChain(error, pick) {
  const seen = new Set();
  const walk = (e) => {
    if (e == null || typeof e !== "object" || seen.has(e)) return undefined;
    seen.add(e);
    if (pick(e)) return e;
    if (e instanceof AggregateError) {
      for (const inner of e.errors) {
        const f = walk(inner);
        if (f) return f;
      }
    }
    return walk(e.cause);
  };
  return walk(error);
}
