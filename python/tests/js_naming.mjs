// Prints the npm package's file names for the URLs of naming_urls.json (argv[2]), as JSON on
// stdout: tests/test_naming.py compares them with the Python port. Run by Node.js 20 or later.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const naming = await import(pathToFileURL(join(here, "..", "..", "js", "src", "naming.js")).href);
const { urls, envs } = JSON.parse(readFileSync(process.argv[2], "utf8"));
const names = urls.map((url) => {
  try {
    const n = naming.normalizeStreamUrl(url);
    return { url, identity: n.identity, attach: n.url, name: naming.fileNameFor(url), ro3: naming.fileNameFor(url, 3) };
  } catch (e) {
    return { url, error: e.constructor.name };
  }
});
const dirs = envs.map(([env, platform]) => naming.defaultDir(env, platform));
process.stdout.write(`${JSON.stringify({ names, dirs }, null, 1)}\n`);
