// The spec's first code block, verbatim, against a real server: only the address differs.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";
import { useServer } from "./helpers/hooks.mjs";
import { tempDir } from "./helpers/kit.mjs";
import { repoRoot } from "./helpers/server.mjs";

const NOTES_EXAMPLE = `import { open } from "@tonbo/sqlite-ursula";

const db = open("http://127.0.0.1:4437/demo/notes");
db.exec("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT)");
db.prepare("INSERT INTO notes(body) VALUES (?)").run("hello"); // returns once the stream holds it
console.log(db.prepare("SELECT id, body FROM notes").all());
db.close();
`;

const ERRORS_EXAMPLE = `import { UrsulaError } from "@tonbo/sqlite-ursula";

try {
  db.prepare("INSERT INTO notes(body) VALUES (?)").run("hello");
} catch (error) {
  if (!(error instanceof UrsulaError)) throw error; // SQLite's own error, such as a constraint violation
  if (error.action === "stop") process.exit(1); // another owner took over, see Rules for what may restart us
  throw error; // retry: try again later. reattach: close and open again. fix: change the setup.
}
`;

const ctx = useServer();
let app;
before(async () => {
  app = tempDir();
  // A project that depends on the package: node_modules/@tonbo/sqlite-ursula is this js/ folder.
  mkdirSync(join(app, "node_modules", "@tonbo"), { recursive: true });
  symlinkSync(join(repoRoot, "js"), join(app, "node_modules", "@tonbo", "sqlite-ursula"), "dir");
});

// The examples make their own temp dirs (the README's attach example does): TMPDIR keeps them
// inside `app`, which goes when the test process exits.
function run(file, source) {
  writeFileSync(join(app, file), source.replaceAll("127.0.0.1:4437", `127.0.0.1:${ctx.server.port}`));
  mkdirSync(join(app, "tmp"), { recursive: true });
  return spawnSync(process.execPath, [join(app, file)], {
    cwd: app,
    env: { ...process.env, XDG_CACHE_HOME: join(app, "cache"), TMPDIR: join(app, "tmp") },
    encoding: "utf8",
    timeout: 30_000,
  });
}

test("the notes example prints the row it committed", () => {
  const r = run("notes.mjs", NOTES_EXAMPLE);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, "[ [Object: null prototype] { id: 1, body: 'hello' } ]\n");
  const files = readdirSync(join(app, "cache", "sqlite-ursula"));
  const db = files.find((f) => /^demo-notes-[0-9a-f]{32}\.db$/.test(f));
  assert.ok(db, files.join(", "));
  for (const sibling of ["-ursula", "-ursula.lock"]) assert.ok(files.includes(`${db}${sibling}`), sibling);
});

test("run again, it resumes the local copy and adds a row", () => {
  const r = run("notes.mjs", NOTES_EXAMPLE);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /id: 1, body: 'hello' \}.*id: 2, body: 'hello' \}/s);
});

test("the errors example: SQLite's own errors pass through, a commit goes through", () => {
  const lines = ERRORS_EXAMPLE.split("\n");
  const source = [
    lines[0],
    'import { open } from "@tonbo/sqlite-ursula";',
    'const db = open("http://127.0.0.1:4437/demo/notes");',
    'db.exec("CREATE UNIQUE INDEX IF NOT EXISTS notes_body ON notes(body)");',
    ...lines.slice(2),
  ].join("\n");
  const r = run("errors.mjs", source);
  // The unique index turns the insert into a constraint violation: node:sqlite's own error.
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /UNIQUE constraint failed: notes\.body/);
  assert.match(r.stderr, /errcode: 2067/);
  assert.doesNotMatch(r.stderr, /Ursula/);
  assert.ok(existsSync(join(app, "cache", "sqlite-ursula")));
});

test("every js example of js/README.md runs verbatim (only the address differs), against paths that exist", () => {
  const readme = readFileSync(join(repoRoot, "js", "README.md"), "utf8");
  const blocks = [...readme.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
  assert.ok(blocks.length >= 2, "the quick start and the attach example");
  const out = blocks.map((block, i) => {
    const r = run(`readme-${i}.mjs`, block);
    assert.equal(r.status, 0, `block ${i}:\n${block}\n${r.stderr}`);
    assert.notEqual(r.stdout, "", `block ${i} prints what it says`);
    return r.stdout;
  });
  const attachExample = blocks.findIndex((b) => b.includes("attach(file,"));
  assert.equal(out[attachExample], "2\n", "its comment's output: the CREATE and the INSERT");
  // Its mkdtemp directory was made in the test's TMPDIR, not in the machine's temp dir.
  assert.ok(readdirSync(join(app, "tmp")).some((d) => d.startsWith("app-")), "the attach example's directory");
});
