#!/usr/bin/env bash
# The browser replica's tests (browser/, package @tonbo/sqlite-ursula-browser): installs its
# locked dependencies (npm ci), then runs `node --test` on browser/test/*.test.mjs with Node 22.
# The decoder tests need nothing else; the replica tests start the real `ursula` server and
# gateway, open pages in headless Chromium (on PATH) and commit through the npm package, so
# the addon must be in js/ (scripts/test-js.sh puts it there; run that first). The examples'
# test runs examples/browser-telemetry and examples/browser-replica the same way.
#
# Usage: scripts/test-browser.sh [--ci] [-- extra node --test args]
# Env: URSULA_BIN (required: the `ursula` binary), NODE (default: scripts/install-node.sh).
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"

. scripts/lib.sh
take_flags "--ci" "$@"

[[ -n "${URSULA_BIN:-}" && -x "$URSULA_BIN" ]] || { echo "test-browser.sh: set URSULA_BIN to the ursula binary" >&2; exit 1; }
[[ -f js/sqlite-ursula.linux-x64-gnu.node ]] || { echo "test-browser.sh: js/ has no addon: run scripts/test-js.sh --build-only first" >&2; exit 1; }
NODE=${NODE:-$(scripts/install-node.sh)}
export PATH="$(dirname "$NODE"):$PATH"
unset SQLITE_URSULA_VFS URSULA_VFS_RETRY_MS URSULA_VFS_IDLE_MS URSULA_VFS_TOKEN_FILE URSULA_VFS_CA_FILE

(cd browser && npm ci --no-audit --no-fund --loglevel=error) >&2
# The example test serves examples/browser-replica from its own node_modules (links to js/ and
# browser/, nothing from the registry).
(cd examples/browser-replica && npm ci --no-audit --no-fund --loglevel=error) >&2

reporter=spec
((ci)) && reporter=tap
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
(cd browser && "$NODE" --test --test-reporter="$reporter" "${extra[@]}" 'test/*.test.mjs') 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
if ((ci)) && ((rc == 0)) && ! grep -Eq '^# pass [1-9]' "$out"; then
  echo "test-browser.sh: no test passed" >&2
  rc=1
fi
exit "$rc"
