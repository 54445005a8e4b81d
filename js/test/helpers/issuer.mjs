// A token issuer for tests: its JWKS served on a loopback port, and RFC 9068 access tokens
// signed with the gateway tests' Ed25519 key (gateway/tests/auth_keys).
import { createPrivateKey, sign } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { repoRoot } from "./server.mjs";

export const AUDIENCE = "https://streams.example";
const keys = join(repoRoot, "gateway", "tests", "auth_keys");

const b64 = (v) => Buffer.from(typeof v === "string" ? v : JSON.stringify(v)).toString("base64url");

/** Serves the JWKS; `token(subject, ttlSecs)` signs a token `url` issued. */
export async function startIssuer() {
  const privateKey = createPrivateKey({
    key: readFileSync(join(keys, "issuer-ed25519.pk8")),
    format: "der",
    type: "pkcs8",
  });
  const all = JSON.parse(readFileSync(join(keys, "public-jwks.json"), "utf8"));
  const body = JSON.stringify({ keys: [{ ...all.ed, kid: "ed1" }] });
  const server = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(body);
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  const url = `http://127.0.0.1:${server.address().port}`;
  let jti = 0;
  return {
    url,
    jwksUrl: `${url}/jwks`,
    token(subject, ttlSecs = 600) {
      const now = Math.floor(Date.now() / 1000);
      const exp = now + ttlSecs;
      const header = b64({ alg: "EdDSA", typ: "at+jwt", kid: "ed1" });
      jti += 1;
      const claims = b64({
        iss: url,
        aud: AUDIENCE,
        sub: subject,
        client_id: "js-tests",
        iat: Math.min(now, exp),
        exp,
        jti: `js-${process.pid}-${jti}`,
      });
      const signature = sign(null, Buffer.from(`${header}.${claims}`), privateKey).toString("base64url");
      return `${header}.${claims}.${signature}`;
    },
    close() {
      server.close();
    },
  };
}
