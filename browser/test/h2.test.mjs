// One page holds fifty live tails at once: Chromium reaches the gateway through Debian's nginx
// terminating TLS with http2, so every tail shares one connection instead of the six HTTP/1.1
// allows per origin. Real server, real gateway, real nginx, loopback only.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { tempDir } from "../../js/test/helpers/kit.mjs";
import { detach, freePort, startGateway, startServer } from "../../js/test/helpers/server.mjs";
import { launchChromium } from "./helpers/puppeteer.mjs";

const TAILS = 50;
let node;
let gateway;
let gatewayBase;
let nginx;
let origin;
let browser;

function nginxBin() {
  for (const p of ["/usr/sbin/nginx", "/usr/bin/nginx"]) if (existsSync(p)) return p;
  throw new Error("nginx is missing: install it (apt-get install -y nginx) to run the HTTP/2 test");
}

before(async () => {
  node = await startServer();
  gateway = await startGateway(node.base);
  gatewayBase = gateway.base;

  const dir = tempDir("ursula-nginx-");
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")], { stdio: "ignore" });
  const port = await freePort();
  origin = `https://127.0.0.1:${port}`;
  const pages = new URL("./pages", import.meta.url).pathname;
  writeFileSync(
    join(dir, "nginx.conf"),
    `daemon off;
master_process off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  server {
    listen 127.0.0.1:${port} ssl http2;
    ssl_certificate ${dir}/cert.pem;
    ssl_certificate_key ${dir}/key.pem;
    http2_max_concurrent_streams 128;
    location = /tails.html { root ${pages}; default_type text/html; }
    location / {
      proxy_pass ${gatewayBase};
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_read_timeout 1h;
    }
  }
}
`,
  );
  nginx = detach(spawn(nginxBin(), ["-p", dir, "-c", join(dir, "nginx.conf")], { stdio: ["ignore", "ignore", "inherit"] }));
  for (let tries = 0; ; tries++) {
    try {
      execFileSync("curl", ["-sk", "-o", "/dev/null", `${origin}/tails.html`], { stdio: "ignore" });
      break;
    } catch {
      if (tries > 200) throw new Error("nginx did not start");
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  browser = await launchChromium(["--ignore-certificate-errors"]);
});

after(async () => {
  await browser?.close();
  nginx?.kill("SIGKILL");
  await gateway?.stop();
  await node?.stop();
});

test(`one page over HTTP/2 holds ${TAILS} live tails at once and each gets the next append`, async () => {
  for (const [path, type] of [["/demo", undefined], ["/demo/s", "text/plain"]]) {
    const r = await fetch(`${gatewayBase}${path}`, { method: "PUT", headers: type ? { "content-type": type } : {} });
    assert.ok([200, 201, 204].includes(r.status), `PUT ${path}: ${r.status}`);
  }
  const page = await browser.newPage();
  const want = `hello-${process.pid}`;
  await page.goto(`${origin}/tails.html?n=${TAILS}&want=${want}&path=${encodeURIComponent("/demo/s?offset=now&live=sse")}`);
  assert.equal(await page.evaluate(() => performance.getEntriesByType("navigation")[0].nextHopProtocol), "h2");
  // Every tail is open before the append: over HTTP/1.1 only six would be.
  await page.waitForFunction((n) => window.tails.opened === n, { timeout: 20_000 }, TAILS).catch(async (e) => {
    throw new Error(`${JSON.stringify(await page.evaluate(() => window.tails))}: ${e.message}`);
  });
  const r = await fetch(`${gatewayBase}/demo/s`, { method: "POST", headers: { "content-type": "text/plain" }, body: want });
  assert.ok([200, 204].includes(r.status), `append: ${r.status}`);
  await page.waitForFunction((n) => window.tails.got === n, { timeout: 20_000 }, TAILS).catch(async (e) => {
    throw new Error(`${JSON.stringify(await page.evaluate(() => window.tails))}: ${e.message}`);
  });
  const tails = await page.evaluate(() => window.tails);
  assert.deepEqual(tails, { opened: TAILS, got: TAILS, errors: 0 });
  await page.close();
});
