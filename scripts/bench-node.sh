#!/usr/bin/env bash
# The Node column of the extension's benchmark: one-row INSERT commits through open() beside
# plain node:sqlite, same run, against a release single-node ursula. Prints a markdown table.
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
. scripts/lib.sh
cargo build --release -p ursula >&2
scripts/test-js.sh --build-only >&2
node=$(scripts/install-node.sh)
port=$(free_port)
./target/release/ursula server --listen "127.0.0.1:$port" --admin-listen off >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/__ursula/ready" >/dev/null && break; sleep 0.1; done
URSULA_URL="http://127.0.0.1:$port" "$node" --no-warnings js/bench/commit-bench.mjs "${1:-3000}"
