#!/usr/bin/env bash
# The Node column of the extension's benchmark: one-row INSERT commits through open() beside
# plain node:sqlite, same run, against a release single-node ursula. Prints a markdown table.
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
. scripts/lib.sh
bench_js_prologue
trap 'stop_pid "${node_pid:-}"' EXIT
start_release_node
URSULA_URL="$node_url" "$node" --no-warnings js/bench/commit-bench.mjs "${1:-3000}"
