// attach, attachAsync, status, drainStats, setToken, commits: the extension's functions, with
// Ursula errors.
import { setupError } from "./errors.js";
import { native } from "./native.js";

function checkFile(fn, file) {
  if (typeof file !== "string") throw setupError(fn, "invalid_argument", "the file must be a path string");
}

/**
 * Catches `file` up from the stream, claims the stream (unless `readOnly`) and attaches the
 * file; with `follow` (and `readOnly`) it then keeps applying the owner's commits. No connection to it may be open yet. Returns the stream offset the file reflects.
 */
export function attach(file, streamUrl, options = {}) {
  return native().attach(...attachArgs("attach", file, streamUrl, options));
}

/**
 * `attach` off the event loop (on libuv's thread pool): resolves with the same offset, or
 * rejects with the same errors. Two attaches of one file at once: the second gets in_use.
 */
export async function attachAsync(file, streamUrl, options = {}) {
  return native().attachAsync(...attachArgs("attachAsync", file, streamUrl, options));
}

function attachArgs(fn, file, streamUrl, options) {
  checkFile(fn, file);
  if (typeof streamUrl !== "string") throw setupError(fn, "invalid_url", "the stream URL must be a string");
  if (options === null || typeof options !== "object") {
    throw setupError(fn, "invalid_argument", "options must be an object");
  }
  return [file, streamUrl, attachMode(fn, options)];
}

/** A stream offset as the server writes it (20 digits), or `-1` for the stream's start. */
const OFFSET = /^(?:-1|\d{20})$/;

function checkOffset(fn, name, value) {
  if (typeof value !== "string" || !OFFSET.test(value)) {
    throw setupError(
      fn,
      "invalid_argument",
      `${name} must be a stream offset string as the server writes it (20 digits, as status().offset and commits() give them) or "-1", not ${typeof value === "string" ? JSON.stringify(value) : typeof value}`,
    );
  }
}

/**
 * The extension's attach mode for these options (`ursula_attach`'s third argument, `""` for
 * the owner): the extension parses it, so the SQL form and the package accept the same modes.
 * `at` is checked here too, so a bad one fails before any request with the package's message.
 */
export function attachMode(fn, options) {
  const { readOnly = false, follow = false, at } = options;
  if (typeof readOnly !== "boolean") throw setupError(fn, "invalid_argument", "readOnly must be a boolean");
  if (typeof follow !== "boolean") throw setupError(fn, "invalid_argument", "follow must be a boolean");
  if (follow && !readOnly) {
    throw setupError(
      fn,
      "invalid_argument",
      "follow makes a live read replica and needs readOnly: true; the owner of the stream already has every commit",
    );
  }
  if (follow && at !== undefined) {
    throw setupError(
      fn,
      "invalid_argument",
      "follow and at exclude each other: a replica follows the stream's tail, an at-open stays at one point",
    );
  }
  if (follow) return "follow";
  if (at === undefined) return readOnly ? "read_only" : "";
  checkOffset(fn, "at", at);
  if (!readOnly) {
    throw setupError(
      fn,
      "invalid_argument",
      "at needs readOnly: true: a point-in-time database is a past state of the stream, and never writes it",
    );
  }
  return `at:${at}`;
}

/**
 * The commit points of a stream that an `at` open can rebuild, oldest first: those after
 * `from` (default: all), at most `limit` (default 1000) of them (`ursula_commits`).
 */
export function commits(streamUrl, options = {}) {
  if (typeof streamUrl !== "string") throw setupError("commits", "invalid_url", "the stream URL must be a string");
  if (options === null || typeof options !== "object") {
    throw setupError("commits", "invalid_argument", "options must be an object");
  }
  const { from, limit } = options;
  if (from !== undefined) checkOffset("commits", "from", from);
  if (limit !== undefined && !(Number.isInteger(limit) && limit >= 1 && limit <= 0xffffffff)) {
    throw setupError("commits", "invalid_argument", "limit must be a positive integer");
  }
  return native().commits(streamUrl, from ?? null, limit ?? null);
}

/** The health and offsets of an attached file (`ursula_status`). */
export function status(file) {
  checkFile("status", file);
  return native().status(file);
}

/** Drains the measurements the extension kept for `file` since the last drain (`ursula_stats`). */
export function drainStats(file) {
  checkFile("drainStats", file);
  return native().drainStats(file);
}

/** Sets the process-wide bearer token; `null` returns to URSULA_VFS_TOKEN_FILE. */
export function setToken(token) {
  if (token !== null && token !== undefined && typeof token !== "string") {
    throw setupError("setToken", "invalid_argument", "the token must be a string or null");
  }
  native().setToken(token ?? null);
}
