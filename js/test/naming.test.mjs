// File naming and URL normalisation (no server needed): the addon's naming (vfs/src/naming.rs)
// as the package calls it, and the default directory.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import { readFileSync } from "node:fs";
import { defaultDir, fileNameFor, normalizeStreamUrl } from "../src/naming.js";

const P = "http://127.0.0.1:4437";

test("the spec's example maps to demo-notes-<hash>.db, the hash of the normal URL", () => {
  const name = fileNameFor(`${P}/demo/notes`);
  const hash = createHash("sha256").update(`${P}/demo/notes`).digest("hex").slice(0, 32);
  assert.equal(name, `demo-notes-${hash}.db`);
  assert.equal(fileNameFor(`${P}/demo/notes`, 2), `demo-notes-${hash}-ro2.db`);
});

test("every spelling of one stream maps to the same file", () => {
  const one = fileNameFor(`${P}/demo/notes`);
  for (const spelling of [
    `HTTP://127.0.0.1:4437/demo/./x/../notes/`,
    `${P}/demo/%6Eotes`,
    `${P}/demo/%6eotes//`,
    `http://u:p@127.0.0.1:4437/demo/notes`,
    `${P}/demo/x/%2e%2e/notes`,
  ]) {
    assert.equal(fileNameFor(spelling), one, spelling);
  }
  assert.equal(fileNameFor("http://EXAMPLE.com:80/a/b"), fileNameFor("http://example.com/a/b"));
  assert.equal(fileNameFor("https://example.com:443/a/b"), fileNameFor("https://example.com/a/b"));
});

test("different streams map to different files", () => {
  const one = fileNameFor(`${P}/demo/notes`);
  assert.notEqual(fileNameFor(`${P}/demo/notes2`), one);
  assert.notEqual(fileNameFor("http://localhost:4437/demo/notes"), one);
  assert.notEqual(fileNameFor("https://127.0.0.1:4437/demo/notes"), one);
  assert.notEqual(fileNameFor(`${P}/demo/no%2Ftes`), fileNameFor(`${P}/demo/no/tes`));
});

test("the attach URL keeps the userinfo and the one spelling of the path", () => {
  const n = normalizeStreamUrl("HTTP://u:p@127.0.0.1:4437/demo/./%6Eotes/");
  assert.equal(n.url, "http://u:p@127.0.0.1:4437/demo/notes");
  assert.equal(n.identity, "http://127.0.0.1:4437/demo/notes");
  assert.equal(normalizeStreamUrl(`${P}/a/b%20c`).identity, `${P}/a/b%20c`);
  assert.equal(normalizeStreamUrl(`${P}/a/b c`).identity, `${P}/a/b%20c`);
  assert.equal(normalizeStreamUrl(`${P}/a/%7e`).identity, `${P}/a/~`);
});

test("label rules", () => {
  assert.ok(fileNameFor(`${P}/demo/Stream.Name%20X!!`).startsWith("demo-stream_name_x_-"));
  assert.ok(fileNameFor(`${P}/-abc/notes`).startsWith("_abc-notes-"));
  assert.ok(fileNameFor(P).startsWith("stream-"));
  assert.ok(fileNameFor(`${P}/only`).startsWith("only-"));
  assert.ok(fileNameFor(`${P}/x/y/Z`).startsWith("y-z-"));
  const long = fileNameFor(`${P}/bucket/${"s".repeat(100)}`, 8);
  assert.equal(long.length, 104);
  assert.match(long, /^[a-z0-9_-]+-[0-9a-f]{32}-ro8\.db$/);
  assert.ok(fileNameFor(`${P}/é/Ä`).startsWith("_-_-"));
});

test("every vector names the file the WHATWG parser of Node.js names, as the Python package does", () => {
  const dir = new URL("../../vfs/tests/naming/", import.meta.url);
  const { urls, envs } = JSON.parse(readFileSync(new URL("urls.json", dir), "utf8"));
  const want = JSON.parse(readFileSync(new URL("expected.json", dir), "utf8"));
  const got = urls.map((url) => {
    try {
      const n = normalizeStreamUrl(url);
      return { url, identity: n.identity, attach: n.url, name: fileNameFor(url), ro3: fileNameFor(url, 3) };
    } catch (e) {
      assert.ok(e instanceof RangeError, `${url}: ${e}`);
      return { url, error: "invalid_url" };
    }
  });
  assert.deepEqual(got, want.names);
  assert.deepEqual(envs.map(([env, platform]) => defaultDir(env, platform)), want.dirs);
});

test("query, fragment and other schemes are refused", () => {
  assert.throws(() => normalizeStreamUrl(`${P}/a/b?x=1`), /query or a fragment/);
  assert.throws(() => normalizeStreamUrl(`${P}/a/b#f`), /query or a fragment/);
  assert.throws(() => normalizeStreamUrl(`${P}/a/b?`), /query or a fragment/);
  assert.throws(() => normalizeStreamUrl("ftp://h/a/b"), /http/);
  assert.throws(() => normalizeStreamUrl("not a url"), /not a URL/);
});

test("the default directory", () => {
  assert.equal(defaultDir({ XDG_CACHE_HOME: "/x/cache", HOME: "/h" }), "/x/cache/sqlite-ursula");
  assert.equal(defaultDir({ XDG_CACHE_HOME: "rel", HOME: "/h" }, "linux"), "/h/.cache/sqlite-ursula");
  assert.equal(defaultDir({ HOME: "/h" }, "darwin"), "/h/Library/Caches/sqlite-ursula");
  const fromUserDb = defaultDir({ HOME: "relative" }, "linux");
  assert.ok(fromUserDb === null || fromUserDb.endsWith("/.cache/sqlite-ursula"));
});
