#!/usr/bin/env bash
# The browser replica measured in headless Chromium (browser/bench/replica-bench.mjs): the lag
# of follow() through the gateway at 10 and 100 commits/s, and a 50 MiB database loaded in a
# fresh page beside the raw download of the same bytes. One run, everything on loopback: the
# stack of browser/test/helpers/stack.mjs (ursula server, gateway with access control and CORS,
# the page on another origin, a private stream read with a token). Prints markdown tables.
# Needs chromium on PATH; builds `ursula` (release) and the js addon.
# Usage: scripts/bench-browser.sh [MiB]   (default 50)
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
cargo build --release -p ursula >&2
scripts/test-js.sh --build-only >&2
NODE=${NODE:-$(scripts/install-node.sh)}
(cd browser && npm ci --no-audit --no-fund --loglevel=error) >&2
export URSULA_BIN=${URSULA_BIN:-$PWD/target/release/ursula}
cd browser
"$NODE" --no-warnings bench/replica-bench.mjs "${1:-50}"
