// A fault-injecting HTTP proxy, run as a child process (the extension's requests block the
// thread that commits, so the proxy must not share it). Controlled through /__proxy/ paths:
//   POST /__proxy/rules   [{method, path, status, headers, body, times, action}]  (replaces)
//   POST /__proxy/bearer  {token}  requests without `Authorization: Bearer <token>` get a 401
//   GET  /__proxy/seen    [[method, path], ...]
// action: "respond" (default: answer status/headers/body without forwarding), "reset",
// "delay" (forward after delayMs, to hold a request in flight while the test acts).
import http from "node:http";

const upstream = Number(process.argv[2]);
let rules = [];
let bearer = null;
const seen = [];

function readBody(req) {
  return new Promise((ok) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => ok(Buffer.concat(chunks)));
  });
}

function control(req, res, body) {
  const send = (v) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(v));
  };
  if (req.url === "/__proxy/rules") {
    rules = JSON.parse(body.toString() || "[]");
    return send({ ok: true });
  }
  if (req.url === "/__proxy/bearer") {
    bearer = JSON.parse(body.toString()).token ?? null;
    return send({ ok: true });
  }
  if (req.url === "/__proxy/seen") return send(seen);
  res.writeHead(404);
  res.end();
}

const server = http.createServer(async (req, res) => {
  const body = await readBody(req);
  if (req.url.startsWith("/__proxy/")) return control(req, res, body);
  seen.push([req.method, req.url]);
  if (bearer !== null && req.headers.authorization !== `Bearer ${bearer}`) {
    res.writeHead(401, { "content-type": "text/plain" });
    return res.end("token refused");
  }
  const rule = rules.find(
    (r) => r.method === req.method && req.url.includes(r.path ?? "/") && (r.times == null || r.times > 0),
  );
  if (rule) {
    if (rule.times != null) rule.times -= 1;
    if (rule.action === "reset") return req.socket.destroy();
    if (rule.action === "delay") {
      await new Promise((r) => setTimeout(r, rule.delayMs ?? 0));
    } else {
      res.writeHead(rule.status, rule.headers ?? {});
      return res.end(rule.body ?? "");
    }
  }
  const headers = { ...req.headers };
  delete headers.connection;
  const up = http.request(
    { host: "127.0.0.1", port: upstream, method: req.method, path: req.url, headers, agent: false },
    (ur) => {
      const h = { ...ur.headers };
      delete h.connection;
      delete h["keep-alive"];
      res.writeHead(ur.statusCode, h);
      ur.pipe(res);
    },
  );
  up.on("error", () => req.socket.destroy());
  up.end(body);
});
server.keepAliveTimeout = 120_000;
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`${server.address().port}\n`);
});
