// Serves the page and, under /vendor/, the modules it imports from this example's
// node_modules (npm install): SQLite's WebAssembly build, @tonbo/sqlite-ursula-browser and its
// two dependencies. A bundler would do the same; an import map keeps the example plain.
//
//   node serve.mjs [--listen 127.0.0.1:3001]
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { createServer } from "node:http";
import { dirname, extname, join, normalize, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const { values } = parseArgs({ options: { listen: { type: "string", default: "127.0.0.1:3001" } } });
const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "node_modules");
const browserPackage = realpathSync(join(modules, "@tonbo", "sqlite-ursula-browser"));
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm" };
// The browser package's own dependencies sit in its node_modules when it is linked from the
// repository, or beside it when installed from the registry.
const roots = [modules, join(browserPackage, "node_modules")];

function file(path) {
  if (path === "/" || path === "/index.html") return join(here, "index.html");
  if (path === "/app.js") return join(here, "app.js");
  if (!path.startsWith("/vendor/")) return null;
  const rel = normalize(decodeURIComponent(path.slice("/vendor/".length)));
  if (rel.startsWith("..")) return null;
  for (const root of roots) {
    const full = join(root, rel);
    if (full.startsWith(root + sep) && existsSync(full)) return full;
  }
  return null;
}

const server = createServer((req, res) => {
  const path = file(new URL(req.url, "http://page").pathname);
  if (path === null) return res.writeHead(404).end();
  res.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream", "cache-control": "no-store" });
  res.end(readFileSync(path));
});
const [host, port] = values.listen.split(/:(?=\d+$)/);
server.listen(Number(port), host, () => {
  const a = server.address();
  console.log(`http://${a.address}:${a.port}/`);
});
