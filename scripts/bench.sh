#!/usr/bin/env bash
# Benchmarks ursula against the Durable Streams reference server (@durable-streams/server, in
# memory) with the same load, and writes the comparison to docs/benchmarks.md.
#
#   scripts/bench.sh [ursula-bench load options...]     e.g. --duration 10 --warmup 2
#
# Builds `ursula` and `ursula-bench` in release mode, installs interop/conformance's npm packages
# if missing, then for each server in turn (never both at once, so they do not share the CPU):
# starts it on a free loopback port, runs `ursula-bench load` (append, catch-up and SSE fan-out
# scenarios), stops it, starts it again fresh and runs `ursula-bench idle` (memory per idle
# stream), stops it. All of that is repeated BENCH_ROUNDS times; `ursula-bench report` then
# prints the table (each scenario's median round) and writes docs/benchmarks.md. About four
# minutes per round, plus waits whenever other processes keep the CPU busy (the benchmark waits
# for a quiet machine and re-runs a scenario they disturbed).
#
# env: BENCH_ROUNDS=N  rounds (default 3)
#      BENCH_OUT=DIR   keep the JSON results and server logs in DIR (default: temp, removed)
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$script_dir/lib.sh"
root=$(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null || (cd "$script_dir/.." && pwd))
cd "$root"
conf_dir="$root/interop/conformance"
rounds=${BENCH_ROUNDS:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench.sh: BENCH_ROUNDS must be a positive integer" >&2; exit 2; }
command_line="scripts/bench.sh${*:+ $*}"
[[ $rounds == 3 ]] || command_line="BENCH_ROUNDS=$rounds $command_line"

echo "bench.sh: cargo build --release -p ursula -p ursula-bench" >&2
cargo build --release -p ursula -p ursula-bench
# What was built, for the report (the tree may change while the benchmark runs).
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain -- server protocol 2>/dev/null | head -c1)
ursula_bin="$root/target/release/ursula"
bench_bin="$root/target/release/ursula-bench"

# --- Node and the reference server (same rules as scripts/conformance.sh) -------------------------
interop_node
if [[ ! -f "$conf_dir/node_modules/@durable-streams/server/package.json" ]]; then
  echo "bench.sh: npm ci in interop/conformance" >&2
  (cd "$conf_dir" && npm ci --no-audit --no-fund >&2)
fi

# --- scratch dir and cleanup ---------------------------------------------------------------------
if [[ -n "${BENCH_OUT:-}" ]]; then out=$BENCH_OUT; mkdir -p "$out"; keep=1
else out=$(mktemp -d "${TMPDIR:-/tmp}/bench.XXXXXX"); keep=0; fi
server_pid=""
stop_server() { stop_pid "$server_pid"; server_pid=""; }
cleanup() { stop_server; [[ $keep == 1 ]] || rm -rf "$out"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  "$node_bin" -e 'const s=require("net").createServer();
    s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
http_status() { # URL -> status code, or 000 if nothing answers
  "$node_bin" -e 'fetch(process.argv[1],{signal:AbortSignal.timeout(2000)})
    .then(r=>console.log(r.status),()=>console.log("000"))' "$1"
}
# wait_up URL WANT: until the status is WANT (or, for WANT=any, anything but 000); 30 s at most.
wait_up() {
  local deadline=$((SECONDS + 30)) status
  while (( SECONDS < deadline )); do
    kill -0 "$server_pid" 2>/dev/null || { echo "bench.sh: server exited during startup:" >&2
                                           tail -n 30 "$log" >&2; exit 1; }
    status=$(http_status "$1")
    if [[ $2 == any && $status != 000 ]] || [[ $status == "$2" ]]; then return 0; fi
    sleep 0.2
  done
  echo "bench.sh: server not ready at $1 after 30 s; log tail:" >&2
  tail -n 30 "$log" >&2
  exit 1
}

# start_server NAME RUN: starts one server on a fresh port; sets server_pid and base. Waits first
# (up to 2 minutes) for other processes on the machine to go quiet.
start_server() {
  "$bench_bin" wait-quiet --max-wait 120
  local port; port=$(free_port); base="http://127.0.0.1:$port"
  log="$out/$1-$2.log"
  case $1 in
    ursula)
      "$ursula_bin" server --listen "127.0.0.1:$port" --admin-listen off >"$log" 2>&1 &
      server_pid=$!
      wait_up "$base/__ursula/ready" 200 ;;
    reference)
      # exec: $! is node itself, so VmHWM/VmRSS are the server's. The reference has no
      # readiness endpoint; any answer (404 here) means it is up.
      (cd "$conf_dir" && PORT=$port exec "$node_bin" reference-server.mjs) >"$log" 2>&1 &
      server_pid=$!
      wait_up "$base/v1/stream/__ready_probe__" any ;;
  esac
}

results=()
for round in $(seq "$rounds"); do
  for server in ursula reference; do
    echo "bench.sh: round $round/$rounds: $server: load scenarios" >&2
    start_server "$server" "load-$round"
    timeout 900 "$bench_bin" load --base "$base" --server "$server" --pid "$server_pid" \
      --out "$out/$server-load-$round.json" "$@"
    stop_server
    echo "bench.sh: round $round/$rounds: $server: idle streams" >&2
    start_server "$server" "idle-$round"
    timeout 900 "$bench_bin" idle --base "$base" --server "$server" --pid "$server_pid" \
      --out "$out/$server-idle-$round.json"
    stop_server
    results+=(--"$server"-load "$out/$server-load-$round.json" --"$server"-idle "$out/$server-idle-$round.json")
  done
done

# --- report --------------------------------------------------------------------------------------
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
mem_gib=$(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)
ref_version=$("$node_bin" -p 'require(process.argv[1]).version' \
  "$conf_dir/node_modules/@durable-streams/server/package.json")
# `report --out` replaces only the report's own sections: the ones other scripts write
# (scripts/bench-speed.sh, scripts/bench-vfs.sh, ...) and hand-written ones stay.
"$bench_bin" report "${results[@]}" \
  --date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
  --machine "$(nproc) cores (${cpu_model:-unknown CPU}), ${mem_gib} GiB RAM, $(uname -sr)" \
  --servers "ursula ${rev}${dirty:+ (with uncommitted changes)}, release build, default config; @durable-streams/server ${ref_version}, in memory, on Node $("$node_bin" --version)" \
  --command "$command_line" \
  --out "$root/docs/benchmarks.md"
echo "bench.sh: wrote docs/benchmarks.md" >&2
