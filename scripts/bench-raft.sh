#!/usr/bin/env bash
# Appends of 100-byte bodies at 1 and 32 connections, one stream and 1,000 streams, against the
# in-memory engine, a durable single node (fsync never, then always), a 3-voter Raft cluster on
# loopback (driven at its leader) and the reference server, in one run, one server at a time.
# Replaces the "Raft engine" section of docs/benchmarks.md.
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
. scripts/lib.sh
# PROFILE=ci reuses the CI build (release optimizations with debug assertions).
profile=${PROFILE:-release}
cargo build --profile "$profile" -p ursula -p ursula-bench >&2
bin=target/$profile/ursula
bench=target/$profile/ursula-bench
work=$(mktemp -d)
pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
trap 'stop_all; rm -rf "$work"' EXIT
wait_ready() { for _ in $(seq 300); do curl -sf "$1/__ursula/ready" >/dev/null && return; sleep 0.1; done; echo "not ready: $1" >&2; exit 1; }
only=append-1-c1,append-1-c32,append-1000-c1,append-1000-c32
# Runs on two shared cores spread widely; ROUNDS fresh starts of every server, the median of each
# figure reported.
rounds=${ROUNDS:-3}
rows=()
run() { # label base pid
  "$bench" load --base "$2" --server "$1" --out "$work/$1.$round.json" --pid "$3" --duration "${BENCH_SECONDS:-4}" --only "$only" >&2
  rows+=("$work/$1.$round.json")
}
for round in $(seq "$rounds"); do
p=$(free_port); "$bin" server --listen "127.0.0.1:$p" --admin-listen off >/dev/null 2>&1 & pids+=($!); wait_ready "http://127.0.0.1:$p"
run memory "http://127.0.0.1:$p" "${pids[0]}"; stop_all
for fsync in never always; do
  p=$(free_port); printf '[raft.wal]\npath = "%s/wal-%s"\nfsync = "%s"\n' "$work" "$fsync" "$fsync" > "$work/$fsync.toml"
  "$bin" server --config "$work/$fsync.toml" --listen "127.0.0.1:$p" --admin-listen off >/dev/null 2>&1 & pids+=($!); wait_ready "http://127.0.0.1:$p"
  run "durable-fsync-$fsync" "http://127.0.0.1:$p" "${pids[0]}"; stop_all
done
ports=("$(free_port)" "$(free_port)" "$(free_port)")
# The cluster authenticates its peers (docs/security.md), from the environment here.
export URSULA_PEER_SECRET="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
for i in 1 2 3; do
  { printf '[raft]\ninit_membership_per_group = true\n[raft.wal]\npath = "%s/c%s"\n' "$work" "$i"
    for j in 1 2 3; do printf '[[raft.peers]]\nnode_id = %s\nurl = "http://127.0.0.1:%s"\n' "$j" "${ports[$((j-1))]}"; done; } > "$work/c$i.toml"
  "$bin" server --config "$work/c$i.toml" --node-id "$i" --listen "127.0.0.1:${ports[$((i-1))]}" --admin-listen off >/dev/null 2>&1 & pids+=($!)
done
wait_ready "http://127.0.0.1:${ports[0]}"
run cluster-3 "http://127.0.0.1:${ports[0]}" "${pids[0]}"; stop_all
conf=interop/conformance
p=$(free_port); PORT=$p node "$conf/reference-server.mjs" >/dev/null 2>&1 & pids+=($!)
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$p/" && break; sleep 0.1; done
run reference "http://127.0.0.1:$p" "${pids[0]}"; stop_all
done
table=$(python3 - "${rows[@]}" <<'PY'
import json, sys
names = {"memory": "in memory", "durable-fsync-never": "durable node, fsync never",
         "durable-fsync-always": "durable node, fsync always", "cluster-3": "3-voter cluster (leader)",
         "reference": "reference server"}
from statistics import median
runs = [json.load(open(p)) for p in sys.argv[1:]]
servers = list(dict.fromkeys(r["server"] for r in runs))
keys = [s["key"] for s in runs[0]["scenarios"]]
titles = {s["key"]: s["title"] for s in runs[0]["scenarios"]}
print("| scenario | " + " | ".join(names.get(s, s) for s in servers) + " |")
print("| --- |" + " ---: |" * len(servers))
for k in keys:
    cells = []
    for server in servers:
        got = [next(x for x in r["scenarios"] if x["key"] == k) for r in runs if r["server"] == server]
        rate, p50, p99 = (median(s[f] for s in got) for f in ("rate", "p50_us", "p99_us"))
        cells.append(f'{rate:,.0f}/s, p50 {p50/1000:.2f}, p99 {p99/1000:.2f}')
    print(f"| {titles[k]} | " + " | ".join(cells) + " |")
def per_round(server, key, field):
    return [next(x for x in r["scenarios"] if x["key"] == key)[field] for r in runs if r["server"] == server]
print()
print("Each round, for the aims:")
for key, label in (("append-1-c32", "1 stream"), ("append-1000-c32", "1,000 streams")):
    mem, dur = per_round("memory", key, "rate"), per_round("durable-fsync-never", key, "rate")
    ratios = ", ".join(f"{100 * d / m:.0f}%" for d, m in zip(dur, mem))
    p99s = ", ".join(f"{v / 1000:.2f}" for v in per_round("cluster-3", key, "p99_us"))
    print(f"- {label}, 32 conns: durable node (fsync never) / in memory {ratios}; 3-voter cluster p99 {p99s} ms")
PY
)
echo "$table"
section="## Raft engine

\`scripts/bench-raft.sh\`, $(date -u '+%Y-%m-%d %H:%M UTC'), ursula $(git rev-parse --short HEAD), $profile build, $(nproc) cores; the same
\`ursula-bench\` load (${BENCH_SECONDS:-4} s per scenario) against each server in turn, $rounds rounds of fresh starts,
the median of each figure. The cluster's three nodes and the client share the machine's two cores. Latencies in ms.

$table"
replace_doc_section docs/benchmarks.md "Raft engine" "$section"
