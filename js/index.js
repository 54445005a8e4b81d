// @tonbo/sqlite-ursula: a node:sqlite database that an Ursula stream replicates.
// First: it checks the Node.js version before anything needs node:sqlite.
import "./src/sqlite.js";
export { attach, attachAsync, commits, drainStats, setToken, status } from "./src/api.js";
export {
  UrsulaError,
  UrsulaFencedError,
  UrsulaPaymentRequiredError,
  UrsulaReattachError,
  UrsulaReplicationError,
  UrsulaSetupError,
  UrsulaWriteRefusedError,
} from "./src/errors.js";
export { instrument } from "./src/instrument.js";
export { loadUrsulaVfs } from "./src/native.js";
export { open, openAsync } from "./src/open.js";
