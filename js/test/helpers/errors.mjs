// Assertions on the package's classified errors, shared by the test files that check them.
import assert from "node:assert/strict";
import { UrsulaError, UrsulaSetupError } from "../../index.js";

/**
 * Asserts that `e` is an UrsulaSetupError (action fix) of `kind`. Returns true, so it also
 * serves as the validation function of assert.rejects and assert.throws.
 */
export function setupError(e, kind) {
  assert.ok(e instanceof UrsulaSetupError, `${e?.stack}`);
  assert.ok(e instanceof UrsulaError);
  assert.equal(e.name, "UrsulaSetupError");
  assert.equal(e.action, "fix");
  assert.equal(e.kind, kind);
  return true;
}
