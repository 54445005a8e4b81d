// Serves this example's pages and a same-origin route to the stream: every request under
// /telemetry/ goes to the gateway as it came (method, headers, body) and its answer comes back
// as it goes (an SSE tail included), so the pages need no CORS. The gateway owns access control.
//
//   node serve.mjs --gateway http://127.0.0.1:4437 [--listen 127.0.0.1:3000]
import { readFileSync } from "node:fs";
import { createServer, request } from "node:http";
import { dirname, extname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: { gateway: { type: "string" }, listen: { type: "string", default: "127.0.0.1:3000" } },
});
if (values.gateway === undefined) throw new Error("usage: node serve.mjs --gateway URL [--listen HOST:PORT]");
const gateway = new URL(values.gateway);
const here = dirname(fileURLToPath(import.meta.url));
const PAGES = { "/": "collector.html", "/collector.html": "collector.html", "/collector.js": "collector.js", "/viewer.html": "viewer.html", "/viewer.js": "viewer.js" };
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript" };

const server = createServer((req, res) => {
  const path = new URL(req.url, "http://page").pathname;
  if (path.startsWith("/telemetry/")) {
    const headers = { ...req.headers, host: gateway.host };
    const up = request({ host: gateway.hostname, port: gateway.port, method: req.method, path: req.url, headers }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    up.on("error", () => {
      if (!res.headersSent) res.writeHead(502).end("the gateway is unreachable");
      else res.destroy();
    });
    res.on("close", () => up.destroy());
    req.pipe(up);
    return;
  }
  const page = PAGES[path];
  if (page === undefined) return res.writeHead(404).end();
  res.writeHead(200, { "content-type": TYPES[extname(page)], "cache-control": "no-store" });
  res.end(readFileSync(join(here, page)));
});
const [host, port] = values.listen.split(/:(?=\d+$)/);
server.listen(Number(port), host, () => {
  const a = server.address();
  console.log(`http://${a.address}:${a.port}/`);
});
