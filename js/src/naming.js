// Local file names, `<label>-<hash>.db` and `<label>-<hash>-ro<n>.db`, and the default cache
// directory. The names come from the extension (vfs/src/naming.rs: the one implementation, which
// the Python package calls too); the directory is read from this process's environment and user
// database, checked against the same vectors as Python's (vfs/tests/naming/).
import { userInfo } from "node:os";
import { isAbsolute, join } from "node:path";
import { native } from "./native.js";

/**
 * The names of reader `n` (0: the owner) of the stream at `streamUrl`, from the extension's own
 * naming code (vfs/src/naming.rs), or a RangeError saying why the text is not a stream URL.
 */
function names(streamUrl, n) {
  if (typeof streamUrl !== "string") throw new TypeError("the stream URL must be a string");
  return native().fileName(streamUrl, n);
}

/**
 * The stream URL's normal forms, or a RangeError for `invalid_url`:
 * - `identity`: what the hash reads: `scheme://host[:port]/seg/seg`, no userinfo;
 * - `url`: the same with the userinfo kept: the spelling `open` attaches with.
 */
export function normalizeStreamUrl(streamUrl) {
  const { identity, url } = names(streamUrl, 0);
  return { identity, url };
}

/** The file name for a stream: `<label>-<hash>.db`, or `<label>-<hash>-ro<n>.db`. */
export function fileNameFor(streamUrl, readOnlyIndex = 0) {
  return names(streamUrl, readOnlyIndex).file;
}

/**
 * The default directory: `sqlite-ursula` in `$XDG_CACHE_HOME` when it is absolute, else in
 * `~/Library/Caches` (macOS) or `~/.cache`, where `~` is `$HOME` when absolute, else the user
 * database's home. `null` when there is neither.
 */
export function defaultDir(env = process.env, platform = process.platform) {
  const xdg = env.XDG_CACHE_HOME;
  if (xdg && isAbsolute(xdg)) return join(xdg, "sqlite-ursula");
  let home = env.HOME;
  if (!home || !isAbsolute(home)) {
    try {
      home = userInfo().homedir;
    } catch {
      home = undefined;
    }
  }
  if (!home || !isAbsolute(home)) return null;
  const cache = platform === "darwin" ? join(home, "Library", "Caches") : join(home, ".cache");
  return join(cache, "sqlite-ursula");
}

