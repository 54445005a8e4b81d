// node:sqlite, loaded only after the Node.js version is checked. A static
// `import ... from "node:sqlite"` fails while Node links the module graph, before any code of
// the package runs: on Node 20 the user would see only ERR_UNKNOWN_BUILTIN_MODULE. So this
// module checks `process.versions.node` first and then requires node:sqlite, and the entries
// (index.js, pi.js) import it before anything else.
import { createRequire } from "node:module";

/** The oldest Node.js whose node:sqlite the package supports (the spec's requirement). */
export const NODE_MIN = [22, 19];

/** The error for a Node.js too old for the package, or null. */
export function nodeVersionError(version) {
  const [major, minor] = String(version).split(".").map(Number);
  const ok = major > NODE_MIN[0] || (major === NODE_MIN[0] && minor >= NODE_MIN[1]);
  if (ok) return null;
  return new Error(`@tonbo/sqlite-ursula needs Node.js ${NODE_MIN.join(".")} or later (this is ${version})`);
}

const tooOld = nodeVersionError(process.versions.node);
if (tooOld) throw tooOld;

let sqlite;
try {
  sqlite = createRequire(import.meta.url)("node:sqlite");
} catch (cause) {
  // A version past the check that still lacks it (a build without SQLite, or a 23.x that
  // kept it behind --experimental-sqlite).
  throw new Error(
    `@tonbo/sqlite-ursula needs node:sqlite, which this Node.js (${process.versions.node}) does not provide: ${cause.message}`,
    { cause },
  );
}

export const { DatabaseSync } = sqlite;
