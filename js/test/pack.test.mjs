// scripts/pack-npm.sh packs the package in napi-rs's per-platform layout (the main package,
// and the platform package that holds the addon); the two tarballs install into an empty
// directory with no registry (the platform tarball satisfies the optional dependency) and run
// the notes example against a real server. scripts/test-release.sh does the same with the
// release build.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, cpSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";
import { useServer } from "./helpers/hooks.mjs";
import { startProxy, streamUrl, tempDir } from "./helpers/kit.mjs";
import { repoRoot } from "./helpers/server.mjs";

const ctx = useServer();

// npm runs on the Node.js that runs the tests.
const env = { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH}`, npm_config_update_notifier: "false" };
const npm = (args, cwd) => execFileSync("npm", args, { cwd, env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

let app;

const tarFiles = (tgz) =>
  execFileSync("tar", ["-tzf", tgz], { encoding: "utf8" })
    .split("\n")
    .filter(Boolean)
    .map((f) => f.replace(/^package\//, ""));

test("the packed packages install offline and run the notes example", () => {
  const dest = tempDir();
  const addon = join(repoRoot, "js", "sqlite-ursula.linux-x64-gnu.node");
  const [main, platform] = execFileSync(
    "bash",
    [join(repoRoot, "scripts", "pack-npm.sh"), "--addon", addon, "--out", dest],
    { env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] },
  )
    .trim()
    .split("\n");
  const files = tarFiles(main);
  for (const f of ["package.json", "index.js", "index.d.ts", "pi.js", "pi.d.ts", "src/open.js", "src/error-table.json"]) {
    assert.ok(files.includes(f), `${f} in ${files.join(", ")}`);
  }
  assert.ok(!files.some((f) => f.endsWith(".node")), "the main package holds no addon");
  assert.ok(!files.some((f) => f.startsWith("test/") || f.startsWith("npm/")), "tests and platform dirs are not packed");
  assert.deepEqual(tarFiles(platform).sort(), ["LICENSE", "README.md", "package.json", "sqlite-ursula.linux-x64-gnu.node"]);
  // Both packages carry the repository's license text (Apache-2.0, as their manifests say).
  const license = readFileSync(join(repoRoot, "LICENSE"), "utf8");
  for (const tgz of [main, platform]) {
    const text = execFileSync("tar", ["-xzOf", tgz, "package/LICENSE"], { encoding: "utf8" });
    assert.equal(text, license, `${tgz}'s LICENSE is the repository's`);
  }

  app = tempDir();
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  npm(["install", "--offline", "--no-audit", "--no-fund", main, platform], app);
  const installed = join(app, "node_modules", "@tonbo");
  assert.ok(existsSync(join(installed, "sqlite-ursula-linux-x64-gnu", "sqlite-ursula.linux-x64-gnu.node")));
  assert.ok(!existsSync(join(installed, "sqlite-ursula", "sqlite-ursula.linux-x64-gnu.node")));
  copyFileSync(join(repoRoot, "examples", "notes", "index.mjs"), join(app, "index.mjs"));
  const run = () =>
    spawnSync(process.execPath, ["index.mjs"], {
      cwd: app,
      env: { ...env, URSULA_STREAM_URL: `${ctx.server.base}/demo/notes`, XDG_CACHE_HOME: join(app, "cache"), SQLITE_URSULA_VFS: "" },
      encoding: "utf8",
      timeout: 30_000,
    });
  const first = run();
  assert.equal(first.status, 0, first.stderr);
  assert.equal(first.stdout, "[ [Object: null prototype] { id: 1, body: 'hello' } ]\n");
  const second = run();
  assert.equal(second.status, 0, second.stderr);
  assert.match(second.stdout, /id: 2, body: 'hello'/);
});

// Pi Durable itself is not on the registry reachable here: a stand-in with the shape of its
// node driver (js/test/fixtures/pi-standin) checks how the installed /pi entry maps failures.
const PI_SCRIPT = `
import { open, UrsulaFencedError, UrsulaPaymentRequiredError } from "@tonbo/sqlite-ursula";
import { openUrsulaPiStorage } from "@tonbo/sqlite-ursula/pi";
const [url, proxy, other] = process.argv.slice(2);
const rules = (r) => fetch(proxy + "/__proxy/rules", { method: "POST", body: JSON.stringify(r) });
const out = {};
const what = (e) => [e.constructor.name, e.kind, e.action, e.message.split(":")[0]];
const storage = await openUrsulaPiStorage("pi.db", url);
out.first = await storage.commit(["a"], {});
await rules([{ method: "POST", status: 402, body: "quota exhausted" }]);
out.refused = await storage.commit(["b"], {}).then(() => "committed", what);
await rules([]);
out.after = await storage.commit(["c"], {});
open(url, { path: other }).close();
out.fenced = await storage.commit(["d"], {}).then(() => "committed", (e) => [...what(e), e instanceof UrsulaFencedError]);
out.read = await storage.entries({}).then(() => "read", what);
console.log(JSON.stringify(out));
`;

test("the installed /pi entry with a Pi Durable stand-in: refused and fenced commits, fenced reads", async () => {
  assert.ok(app, "the install test ran first");
  const standin = join(tempDir(), "pi-standin");
  cpSync(join(repoRoot, "js", "test", "fixtures", "pi-standin"), standin, { recursive: true });
  npm(["install", "--offline", "--no-audit", "--no-fund", "--install-links", standin], app);
  writeFileSync(join(app, "pi.mjs"), PI_SCRIPT);
  const proxy = await startProxy(ctx.server.port);
  try {
    const r = spawnSync(
      process.execPath,
      ["pi.mjs", streamUrl(proxy.base, "pi"), proxy.base, join(tempDir(), "other.db")],
      { cwd: app, env: { ...env, SQLITE_URSULA_VFS: "" }, encoding: "utf8", timeout: 30_000 },
    );
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), {
      first: 1,
      refused: ["UrsulaPaymentRequiredError", "payment_required", "retry", "commit refused with 402 Payment Required in front of the stream"],
      after: 2,
      fenced: ["UrsulaFencedError", "fenced", "stop", "commit not replicated", true],
      read: ["UrsulaFencedError", "fenced", "stop", "read refused, the file is fenced"],
    });
  } finally {
    proxy.stop();
  }
});

test("the manifests: ESM, Node >= 22.19, two entries with types, the platform package as the only (optional) dependency, Pi as optional peer", () => {
  const m = JSON.parse(readFileSync(join(repoRoot, "js", "package.json"), "utf8"));
  assert.equal(m.name, "@tonbo/sqlite-ursula");
  assert.equal(m.type, "module");
  assert.equal(m.engines.node, ">=22.19");
  assert.deepEqual(Object.keys(m.exports).filter((k) => k !== "./package.json"), [".", "./pi"]);
  assert.equal(m.exports["."].types, "./index.d.ts");
  assert.equal(m.exports["./pi"].types, "./pi.d.ts");
  assert.equal(m.dependencies, undefined);
  assert.deepEqual(m.optionalDependencies, { "@tonbo/sqlite-ursula-linux-x64-gnu": m.version });
  assert.ok(!m.files.some((f) => f.includes(".node")), "the main package ships no addon");
  const p = JSON.parse(readFileSync(join(repoRoot, "js", "npm", "linux-x64-gnu", "package.json"), "utf8"));
  assert.equal(p.name, "@tonbo/sqlite-ursula-linux-x64-gnu");
  assert.equal(p.version, m.version);
  assert.deepEqual([p.os, p.cpu, p.libc], [["linux"], ["x64"], ["glibc"]]);
  assert.equal(p.main, "sqlite-ursula.linux-x64-gnu.node");
  assert.deepEqual(p.files, ["sqlite-ursula.linux-x64-gnu.node", "README.md"]);
  assert.deepEqual(m.peerDependencies, { "@earendil-works/pi-durable": ">=1.0.0 <1.2.0" });
  assert.deepEqual(m.peerDependenciesMeta, { "@earendil-works/pi-durable": { optional: true } });
});

test("each entry's types declare exactly the values it exports", async () => {
  for (const [entry, types] of [["index.js", "index.d.ts"], ["pi.js", "pi.d.ts"]]) {
    const mod = await import(pathToFileURL(join(repoRoot, "js", entry)).href);
    const dts = readFileSync(join(repoRoot, "js", types), "utf8");
    const declared = [...dts.matchAll(/^export (?:declare )?(?:function|class|const|let|var|enum)\s+(\w+)/gm)].map(
      (d) => d[1],
    );
    const exported = Object.keys(mod).sort();
    assert.deepEqual([...new Set(declared)].sort(), exported, `${types} against what ${entry} exports`);
  }
});
