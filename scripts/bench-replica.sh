#!/usr/bin/env bash
# Read replicas and rebuilds (js/bench/replica-bench.mjs): a follow replica's lag at 100 and
# 1,000 commits/s, a 100 MiB rebuild (latest and point in time) beside a plain fetch of the
# stream, and the event loop's longest stall during openAsync beside open. One run, one
# release single-node ursula on loopback. Prints markdown tables.
# Usage: scripts/bench-replica.sh [MiB]   (default 100)
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
. scripts/lib.sh
cargo build --release -p ursula >&2
scripts/test-js.sh --build-only >&2
node=$(scripts/install-node.sh)
port=$(free_port)
data=$(mktemp -d)
./target/release/ursula server --listen "127.0.0.1:$port" --admin-listen off >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/__ursula/ready" >/dev/null && break; sleep 0.1; done
URSULA_URL="http://127.0.0.1:$port" "$node" --no-warnings js/bench/replica-bench.mjs "${1:-100}"
