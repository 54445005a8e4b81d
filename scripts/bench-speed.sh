#!/usr/bin/env bash
# Speed against the machine's own ceiling, written to docs/benchmarks.md's section
# "## Speed against the machine's ceiling (issue 19)":
#
#   scripts/bench-speed.sh            # about 20 minutes on 2 cores
#
# Builds `ursula` and `ursula-bench` (release) and installs oha 1.16 (crates.io) into
# target/tools if missing. Then, for each of BENCH_ROUNDS rounds (default 3), starts each server
# fresh and alone on a loopback port:
#   - hyper-204:      `ursula-bench ceiling`, a hyper server answering 204 (the ceiling), and
#                     queuing each POST as one event to every held SSE GET (the fan-out's);
#   - ursula-memory:  `ursula server`, in memory;
#   - ursula-never:   `ursula server` on a disk WAL with `fsync = "never"`;
# and measures, with `ursula-bench point` and with oha, appends of 100 bytes at 32 connections on
# 1 and 1,000 streams (closed loop); on ursula, fixed offered rates at 25/50/75% of that round's
# closed-loop maximum on one stream, and the ceiling again at each ursula server's 50% rate (the
# machine's own tail at that load); on ursula in memory, 1 / 1,000 / 100,000 streams at 32 /
# 256 / 1,024 connections, and the SSE fan-out to 1,000 subscribers, which also runs against
# the ceiling server. Memory per idle stream comes from `ursula-bench idle` on a fresh node,
# memory per held SSE subscriber from `ursula-bench idle-sse` (10,000 of them) on another.
#
# env: BENCH_ROUNDS=N (default 3)   BENCH_SECONDS=S per point (default 6)
#      BENCH_OUT=DIR  keep points, oha reports and server logs (default: temp, removed)
#      BENCH_QUICK=1  only the ceiling rows (no fixed rates, no scaling grid, no idle streams)
#      URSULA_BIN=F   measure this ursula binary instead (to compare two builds)
#      BENCH_QUIET_WAIT=S  wait at most S seconds for a quiet machine before each start (120)
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$script_dir/lib.sh"
root=$(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null || (cd "$script_dir/.." && pwd))
cd "$root"
rounds=${BENCH_ROUNDS:-3}
seconds=${BENCH_SECONDS:-6}
quick=${BENCH_QUICK:-0}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench-speed.sh: BENCH_ROUNDS must be a positive integer" >&2; exit 2; }
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "bench-speed.sh: BENCH_SECONDS must be a positive integer" >&2; exit 2; }

echo "bench-speed.sh: cargo build --release -p ursula -p ursula-bench" >&2
cargo build --release -p ursula -p ursula-bench
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain -- server protocol 2>/dev/null | head -c1)
ursula_bin=${URSULA_BIN:-$root/target/release/ursula}
bench="$root/target/release/ursula-bench"

oha="$root/target/tools/bin/oha"
if [[ ! -x $oha ]] || [[ $("$oha" --version) != "oha 1.16.0" ]]; then
  echo "bench-speed.sh: cargo install oha 1.16.0 (about 7 minutes)" >&2
  cargo install oha --version 1.16.0 --locked --root "$root/target/tools"
fi

if [[ -n "${BENCH_OUT:-}" ]]; then out=$BENCH_OUT; mkdir -p "$out"; keep=1
else out=$(mktemp -d "${TMPDIR:-/tmp}/bench-speed.XXXXXX"); keep=0; fi
points="$out/points.jsonl"
: > "$points"
server_pid=""
stop_server() { stop_pid "$server_pid"; server_pid=""; }
cleanup() { stop_server; [[ $keep == 1 ]] || rm -rf "$out"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
# 1,024 client connections and as many on the server side.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

wait_up() { # URL ANY: until it answers 2xx (ANY=1: anything at all), 30 s at most
  local deadline=$((SECONDS + 30))
  while (( SECONDS < deadline )); do
    kill -0 "$server_pid" 2>/dev/null || { echo "bench-speed.sh: server exited:" >&2; tail -n 20 "$log" >&2; exit 1; }
    if python3 -c 'import sys,urllib.request,urllib.error
try: urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError: sys.exit(0 if sys.argv[2] == "1" else 1)
except Exception: sys.exit(1)' "$1" "$2" 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "bench-speed.sh: $1 did not answer within 30 s" >&2; tail -n 20 "$log" >&2; exit 1
}

# start NAME ROUND: a fresh server; sets server_pid and base.
start() {
  "$bench" wait-quiet --max-wait "${BENCH_QUIET_WAIT:-120}"
  local port; port=$(free_port); base="http://127.0.0.1:$port"
  log="$out/$1-$2.log"
  case $1 in
    hyper-204)
      "$bench" ceiling --listen "127.0.0.1:$port" >"$log" 2>&1 & server_pid=$! ;;
    ursula-memory)
      "$ursula_bin" server --listen "127.0.0.1:$port" --admin-listen off >"$log" 2>&1 & server_pid=$! ;;
    ursula-never)
      local dir="$out/data-$2"; rm -rf "$dir"; mkdir -p "$dir"
      printf '[raft.wal]\npath = "%s"\nfsync = "never"\n' "$dir" >"$out/never.toml"
      "$ursula_bin" server --config "$out/never.toml" --listen "127.0.0.1:$port" --admin-listen off \
        >"$log" 2>&1 & server_pid=$! ;;
  esac
  if [[ $1 == hyper-204 ]]; then wait_up "$base/" 1; else wait_up "$base/__ursula/ready" 0; fi
}

# measure NAME ROUND STREAMS CONNS [RATE]: one point with each client.
measure() {
  local name=$1 round=$2 streams=$3 conns=$4 rate=${5:-}
  local at=(--target "$name" --streams "$streams" --connections "$conns" --round "$round" --out "$points")
  local url=${urls[$streams]}
  "$bench" point --base "$base" "${at[@]}" ${rate:+--rate "$rate"} --duration "$seconds" --warmup 1
  local oha_args=(--no-tui -z "${seconds}s" -c "$conns" -m POST
    -H 'Content-Type: application/octet-stream' -d "$body" --output-format json)
  [[ -z $rate ]] || oha_args+=(-q "$rate" --latency-correction)
  if (( streams > 1 )); then oha_args+=(--rand-regex-url "$url"); else oha_args+=("$url"); fi
  local report="$out/oha-$name-$round-$streams-$conns-${rate:-max}.json"
  "$oha" "${oha_args[@]}" >"$report"
  "$bench" oha --file "$report" "${at[@]}" ${rate:+--rate "$rate"}
}

body=$(head -c 100 /dev/zero | tr '\0' x)
declare -A urls
fanout_args=()
for round in $(seq "$rounds"); do
  for name in hyper-204 ursula-memory ursula-never; do
    echo "bench-speed.sh: round $round/$rounds: $name" >&2
    start "$name" "$round"
    sets=(1 1000)
    [[ $name != ursula-memory || $quick == 1 ]] || sets+=(100000)
    for n in "${sets[@]}"; do
      urls[$n]=$("$bench" setup --base "$base" --streams "$n")
      # Every URL oha would make must be this server's: a regex gone wrong reaches other hosts.
      if (( n > 1 )) && "$oha" --dump-urls 200 --rand-regex-url "${urls[$n]}" | grep -qv "^$base/v1/stream/n$n-"; then
        echo "bench-speed.sh: oha's URLs for ${urls[$n]} leave $base" >&2; exit 1
      fi
    done
    for n in 1 1000; do measure "$name" "$round" "$n" 32; done
    if [[ $name != hyper-204 && $quick != 1 ]]; then
      max=$("$bench" max --points "$points" --target "$name" --round "$round")
      for share in 25 50 75; do measure "$name" "$round" 1 32 $((max * share / 100)); done
    fi
    if [[ $name == hyper-204 && $quick != 1 ]]; then
      # The fan-out's ceiling: the same client against a server that only queues each event.
      "$bench" load --base "$base" --server hyper-204 --pid "$server_pid" --only sse-fanout \
        --out "$out/fanout-ceiling-$round.json"
      fanout_args+=(--fanout-ceiling "$out/fanout-ceiling-$round.json")
    fi
    if [[ $name == ursula-memory && $quick != 1 ]]; then
      "$bench" load --base "$base" --server ursula --pid "$server_pid" --only sse-fanout \
        --out "$out/fanout-$round.json"
      fanout_args+=(--fanout "$out/fanout-$round.json")
      for n in 1 1000 100000; do
        for c in 32 256 1024; do
          [[ $c == 32 && $n != 100000 ]] || measure "$name" "$round" "$n" "$c"
        done
      done
    fi
    stop_server
  done
  if [[ $quick != 1 ]]; then
    # The ceiling at each ursula server's 50% rate of this round: the tail the machine itself
    # gives at that load, beside the aim's p99.
    echo "bench-speed.sh: round $round/$rounds: hyper-204 at ursula's 50% rates" >&2
    start hyper-204 "$round-fixed"
    urls[1]=$("$bench" setup --base "$base" --streams 1)
    for target in ursula-memory ursula-never; do
      max=$("$bench" max --points "$points" --target "$target" --round "$round")
      measure hyper-204 "$round" 1 32 $((max * 50 / 100))
    done
    stop_server
  fi
done

idle_args=()
if [[ $quick != 1 ]]; then
  echo "bench-speed.sh: memory per idle stream" >&2
  start ursula-memory idle
  "$bench" idle --base "$base" --server ursula --pid "$server_pid" --out "$out/idle.json"
  stop_server
  echo "bench-speed.sh: 10,000 idle SSE subscribers" >&2
  start ursula-memory idle-sse
  "$bench" idle-sse --base "$base" --pid "$server_pid" --subscribers 10000 --out "$out/idle-sse.json"
  stop_server
  idle_args=(--idle "$out/idle.json" --idle-sse "$out/idle-sse.json")
fi

cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
"$bench" speed-report --points "$points" "${idle_args[@]}" "${fanout_args[@]}" --rounds "$rounds" --seconds "$seconds" \
  --date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
  --machine "$(nproc) cores (${cpu_model:-unknown CPU}), $(uname -sr)" \
  --build "${URSULA_BIN:+ursula binary $URSULA_BIN, }tree ${rev}${dirty:+ (with uncommitted changes)}, release build" \
  --command "scripts/bench-speed.sh" \
  --doc "$root/docs/benchmarks.md"
echo "bench-speed.sh: wrote docs/benchmarks.md" >&2
