// Writes expected.json for the vectors of urls.json (argv[2]): the file names Node.js's own
// WHATWG URL parser gives, an implementation of the standard independent of the `url` crate
// that vfs/src/naming.rs uses, and the default directories of the npm package's defaultDir.
// Test oracle only: the packages call naming.rs. Run by Node.js 20 or later:
//   node vfs/tests/naming/whatwg.mjs vfs/tests/naming/urls.json > vfs/tests/naming/expected.json
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const { defaultDir } = await import(pathToFileURL(join(here, "..", "..", "..", "js", "src", "naming.js")).href);

const hex = (b) => b !== undefined && /[0-9A-Fa-f]/.test(String.fromCharCode(b));

function decode(segment) {
  const raw = Buffer.from(segment, "utf8");
  const out = [];
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] === 0x25 && hex(raw[i + 1]) && hex(raw[i + 2])) {
      out.push(Number.parseInt(String.fromCharCode(raw[i + 1], raw[i + 2]), 16));
      i += 2;
    } else out.push(raw[i]);
  }
  return Buffer.from(out);
}

const encode = (bytes) =>
  [...bytes].map((b) => (/[A-Za-z0-9\-._~]/.test(String.fromCharCode(b)) && b < 0x80 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, "0")}`)).join("");

function names(text) {
  if (text.includes("?") || text.includes("#")) throw new RangeError("query or fragment");
  const u = new URL(text);
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new RangeError("scheme");
  const parts = u.pathname.split("/").slice(1);
  while (parts.length > 0 && parts[parts.length - 1] === "") parts.pop();
  const segments = parts.map(decode);
  const path = segments.map((s) => `/${encode(s)}`).join("");
  const userinfo = u.username || u.password ? `${u.username}${u.password ? `:${u.password}` : ""}@` : "";
  const identity = `${u.protocol}//${u.host}${path}`;
  let label = "stream";
  if (segments.length > 0) {
    const t = segments.slice(-2).map((s) => s.toString("utf8")).join("-");
    label = t.replace(/[A-Z]/g, (c) => c.toLowerCase()).replace(/[^a-z0-9_-]+/g, "_").replace(/^-/, "_").slice(0, 64);
  }
  const base = `${label}-${createHash("sha256").update(identity, "utf8").digest("hex").slice(0, 32)}`;
  return { identity, attach: `${u.protocol}//${userinfo}${u.host}${path}`, name: `${base}.db`, ro3: `${base}-ro3.db` };
}

const { urls, envs } = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = {
  names: urls.map((url) => {
    try {
      return { url, ...names(url) };
    } catch {
      return { url, error: "invalid_url" };
    }
  }),
  dirs: envs.map(([env, platform]) => defaultDir(env, platform)),
};
process.stdout.write(`${JSON.stringify(out, null, 1)}\n`);
