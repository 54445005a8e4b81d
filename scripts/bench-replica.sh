#!/usr/bin/env bash
# Read replicas and rebuilds (js/bench/replica-bench.mjs): a follow replica's lag at 100 and
# 1,000 commits/s, a 100 MiB rebuild (latest and point in time) beside a plain fetch of the
# stream, and the event loop's longest stall during openAsync beside open. One run, one
# release single-node ursula on loopback. Prints markdown tables.
# Usage: scripts/bench-replica.sh [MiB]   (default 100)
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
. scripts/lib.sh
bench_js_prologue
data=$(mktemp -d)
trap 'stop_pid "${node_pid:-}"; rm -rf "$data"' EXIT
start_release_node
URSULA_URL="$node_url" "$node" --no-warnings js/bench/replica-bench.mjs "${1:-100}"
