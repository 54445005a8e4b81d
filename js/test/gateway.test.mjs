// The package through `ursula gateway` with access control and quotas on: setToken and the
// token file (rotated mid-run) carry the owner's access tokens; a stranger's token meets the
// concealing 404 (not_applied, NotFound), an expired one is unauthorized, and a bucket past its
// request rate is rate_limited with the spec's reason. Tokens are RFC 9068 access tokens signed
// here with the gateway tests' Ed25519 key (gateway/tests/auth_keys).
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { open, setToken, status, UrsulaError, UrsulaWriteRefusedError } from "../index.js";
import { AUDIENCE, startIssuer } from "./helpers/issuer.mjs";
import { tempDir, thrown } from "./helpers/kit.mjs";
import { startGateway, startServer } from "./helpers/server.mjs";

// Read once, when the extension loads (the first open below).
const tokenFile = join(tempDir(), "token");
writeFileSync(tokenFile, "");
process.env.URSULA_VFS_RETRY_MS = "800";
process.env.URSULA_VFS_TOKEN_FILE = tokenFile;

const BUCKET = "tenant-js";
const RATED = "tenant-rated";

let server;
let iss;
let issuer;
let gateway;
let gatewayBase;
const token = (subject, ttlSecs) => iss.token(subject, ttlSecs);

before(async () => {
  server = await startServer();
  for (const b of [BUCKET, RATED]) {
    const r = await fetch(`${server.base}/${b}`, { method: "PUT" });
    assert.ok([200, 201, 204].includes(r.status), `bucket ${b}: ${r.status}`);
  }
  iss = await startIssuer();
  issuer = iss.url;
  const dir = tempDir();
  const owners = `owners = [{ issuer = "${issuer}", subject = "owner-1" }]`;
  writeFileSync(
    join(dir, "policy.toml"),
    `[[bucket]]\nid = "${BUCKET}"\n${owners}\n\n[[bucket]]\nid = "${RATED}"\n${owners}\n`,
  );
  writeFileSync(join(dir, "quotas.toml"), `[[bucket]]\nid = "${RATED}"\nrequests_per_sec = 6\n`);
  gateway = await startGateway(server.base, [
    "--auth-issuer",
    issuer,
    "--auth-audience",
    AUDIENCE,
    "--auth-jwks-url",
    `${issuer}/jwks`,
    "--auth-policy",
    join(dir, "policy.toml"),
    "--quota-policy",
    join(dir, "quotas.toml"),
  ]);
  gatewayBase = gateway.base;
  // The JWKS server lives in this process, whose event loop a synchronous open() blocks: have
  // the gateway fetch and cache the key now, while this process can answer.
  const warm = await fetch(`${gatewayBase}/${BUCKET}`, {
    method: "HEAD",
    headers: { authorization: `Bearer ${token("owner-1")}` },
  });
  assert.notEqual(warm.status, 503, "the gateway could not fetch the JWKS");
});

after(async () => {
  await gateway?.stop();
  iss?.close();
  await server?.stop();
});

let n = 0;
const url = (bucket) => `${gatewayBase}/${bucket}/db${process.pid}x${++n}`;
const insert = (db, body) => db.prepare("INSERT INTO notes(body) VALUES (?)").run(body);
const rows = (db) => db.prepare("SELECT body FROM notes ORDER BY id").all().map((r) => r.body);

function refusedAs(e, kind, reason) {
  assert.ok(e instanceof UrsulaWriteRefusedError, e?.stack);
  assert.ok(e instanceof UrsulaError);
  assert.equal(e.kind, kind);
  assert.equal(e.errcode, 7178);
  if (reason !== undefined) assert.equal(e.reason, reason);
}

test("setToken carries the owner's token; a stranger's meets the concealing 404, an expired one is unauthorized", () => {
  setToken(token("owner-1"));
  const db = open(url(BUCKET), { dir: tempDir() });
  db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  insert(db, "mine");

  setToken(token("stranger-1"));
  refusedAs(
    thrown(() => insert(db, "theirs")),
    "not_applied",
    "NotFound",
  );
  setToken(token("owner-1", -60));
  refusedAs(
    thrown(() => insert(db, "expired")),
    "unauthorized",
  );
  assert.equal(status(db.location()).refused_kind, "unauthorized");

  setToken(token("owner-1"));
  insert(db, "mine again");
  assert.deepEqual(rows(db), ["mine", "mine again"]);
  db.close();
});

test("the token file rotated mid-run keeps commits going without a new open", () => {
  setToken(null);
  writeFileSync(tokenFile, `${token("owner-1")}\n`);
  const db = open(url(BUCKET), { dir: tempDir() });
  db.exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)");
  insert(db, "first file token");
  writeFileSync(tokenFile, `${token("owner-1", 900)}\n`);
  insert(db, "rotated file token");
  writeFileSync(tokenFile, `${token("stranger-1")}\n`);
  refusedAs(
    thrown(() => insert(db, "stranger in the file")),
    "not_applied",
    "NotFound",
  );
  writeFileSync(tokenFile, `${token("owner-1")}\n`);
  insert(db, "owner again");
  assert.deepEqual(rows(db), ["first file token", "rotated file token", "owner again"]);
  db.close();
});

test("a bucket past its request rate refuses a commit as rate_limited with the gateway's reason", async () => {
  setToken(token("owner-1"));
  let db;
  const deadline = Date.now() + 20_000;
  // The open itself takes several requests; retry it past the rate.
  for (;;) {
    try {
      db = open(url(RATED), { dir: tempDir() });
      break;
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 1100));
    }
  }
  let refusal;
  for (let i = 0; i < 60 && refusal === undefined; i++) {
    try {
      db.exec(`CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES (${i})`);
    } catch (e) {
      refusal = e;
    }
  }
  assert.ok(refusal !== undefined, "60 commits stayed within 6 requests a second");
  refusedAs(refusal, "rate_limited", "tenant request rate limit exceeded");
  await new Promise((r) => setTimeout(r, 1500));
  db.exec("CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES (100)");
  db.close();
});
