// attach, attachAsync, status, drainStats, setToken: the extension's functions, with Ursula errors.
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

/**
 * The extension's attach mode for these options (`ursula_attach`'s third argument, `""` for
 * the owner): the extension parses it, so the SQL form and the package accept the same modes.
 */
export function attachMode(fn, options) {
  const { readOnly = false, follow = false } = options;
  if (typeof readOnly !== "boolean") throw setupError(fn, "invalid_argument", "readOnly must be a boolean");
  if (typeof follow !== "boolean") throw setupError(fn, "invalid_argument", "follow must be a boolean");
  if (follow && !readOnly) {
    throw setupError(
      fn,
      "invalid_argument",
      "follow makes a live read replica and needs readOnly: true; the owner of the stream already has every commit",
    );
  }
  if (follow) return "follow";
  return readOnly ? "read_only" : "";
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
