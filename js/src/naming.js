// Local file names: `<label>-<hash>.db` and `<label>-<hash>-ro<n>.db`, named after the stream
// the URL names, and the default cache directory.
import { createHash } from "node:crypto";
import { userInfo } from "node:os";
import { isAbsolute, join } from "node:path";

const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

/** Percent-decodes a path segment to bytes; a `%` not followed by two hex digits stays as it is. */
function decodeSegment(segment) {
  const bytes = [];
  const raw = Buffer.from(segment, "utf8");
  for (let i = 0; i < raw.length; i++) {
    const b = raw[i];
    if (b === 0x25 && i + 2 < raw.length && isHex(raw[i + 1]) && isHex(raw[i + 2])) {
      bytes.push(Number.parseInt(String.fromCharCode(raw[i + 1], raw[i + 2]), 16));
      i += 2;
    } else {
      bytes.push(b);
    }
  }
  return Buffer.from(bytes);
}

function isHex(b) {
  return b !== undefined && ((b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66));
}

/** The one fixed encoding: every byte outside RFC 3986's unreserved set as `%XX` (upper case). */
function encodeSegment(bytes) {
  let out = "";
  for (const b of bytes) {
    const c = String.fromCharCode(b);
    out += b < 0x80 && UNRESERVED.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/**
 * Parses a stream URL and returns its normal form, or throws a message for `invalid_url`.
 * - `identity`: what the hash reads: `scheme://host[:port]/seg/seg`, lower-case scheme and host,
 *   the port only when it is not the scheme's default, `.` and `..` resolved, every segment
 *   decoded and encoded again, no trailing `/`, no userinfo;
 * - `url`: the same with the userinfo kept: the spelling `open` attaches with;
 * - `segments`: the decoded path segments (Buffers), for the label.
 */
export function normalizeStreamUrl(streamUrl) {
  if (typeof streamUrl !== "string") throw new TypeError("the stream URL must be a string");
  if (streamUrl.includes("?") || streamUrl.includes("#")) {
    throw new RangeError(
      `${JSON.stringify(streamUrl)}: a stream URL must not have a query or a fragment (the extension adds its own query)`,
    );
  }
  let u;
  try {
    u = new URL(streamUrl);
  } catch {
    throw new RangeError(`${JSON.stringify(streamUrl)} is not a URL`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    throw new RangeError(`${JSON.stringify(streamUrl)}: a stream URL must start with http:// or https://`);
  }
  // WHATWG parsing lower-cases scheme and host, drops a default port and resolves dot segments
  // (also spelled %2e). Segments are then decoded and encoded one fixed way.
  const parts = u.pathname.split("/").slice(1);
  while (parts.length > 0 && parts[parts.length - 1] === "") parts.pop();
  const segments = parts.map(decodeSegment);
  const path = segments.map((s) => `/${encodeSegment(s)}`).join("");
  const origin = `${u.protocol}//${u.host}`;
  const userinfo = u.username || u.password ? `${u.username}${u.password ? `:${u.password}` : ""}@` : "";
  return {
    identity: `${origin}${path}`,
    url: `${u.protocol}//${userinfo}${u.host}${path}`,
    segments,
  };
}

/** `<label>`: the last two segments, decoded, joined by `-`, in `[a-z0-9_-]`, at most 64. */
export function labelOf(segments) {
  if (segments.length === 0) return "stream";
  const text = segments
    .slice(-2)
    .map((s) => s.toString("utf8"))
    .join("-");
  // ASCII-only lower-casing: Unicode case tables differ between Node.js versions.
  const lower = text.replace(/[A-Z]/g, (c) => c.toLowerCase());
  let label = lower.replace(/[^a-z0-9_-]+/g, "_");
  if (label.startsWith("-")) label = `_${label.slice(1)}`;
  return label.slice(0, 64);
}

/** The first 32 hex digits of the SHA-256 of the stream's identity. */
export function hashOf(identity) {
  return createHash("sha256").update(identity, "utf8").digest("hex").slice(0, 32);
}

/** The file name for a stream: `<label>-<hash>.db`, or `<label>-<hash>-ro<n>.db`. */
export function fileNameFor(streamUrl, readOnlyIndex = 0) {
  const n = normalizeStreamUrl(streamUrl);
  const base = `${labelOf(n.segments)}-${hashOf(n.identity)}`;
  return readOnlyIndex > 0 ? `${base}-ro${readOnlyIndex}.db` : `${base}.db`;
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

