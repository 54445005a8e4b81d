#!/usr/bin/env bash
# Where a 3-voter cluster's CPU goes. Starts a 3-voter cluster on loopback,
# drives its leader with `ursula-bench load` (100-byte appends, 1,000 streams, 32 connections),
# and reports for each node the CPU of each of its threads and, when `perf` can sample the
# processes, the share of each node's samples per kind of work (HTTP, Raft core, replication,
# peer lanes, state machine, journal). The same run repeats with `raft.group_count = 4` beside
# the default (16 per core): with fewer groups more appends share one Raft entry, which shows
# what the per-entry cost is. The anchor, the Durable Streams reference server (one Node.js
# process, in memory), takes the same load in the same run. Replaces the section "Where a cluster's CPU goes (issue 19)" of
# docs/benchmarks.md.
#
# env: BENCH_SECONDS=S measured seconds (default 6)   URSULA_BIN=PATH (default: release build)
#      BENCH_PERF=0 skips the profile   BENCH_OUT=DIR keeps the raw files
set -euo pipefail
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
. "$root/scripts/lib.sh"
cd "$root"
if [[ -z ${URSULA_BIN:-} ]]; then
  cargo build --release -p ursula -p ursula-bench >&2
fi
cargo build --release -p ursula-bench >&2
ursula_bin=${URSULA_BIN:-$root/target/release/ursula}
bench=$root/target/release/ursula-bench
seconds=${BENCH_SECONDS:-6}
out=${BENCH_OUT:-$(mktemp -d)}
mkdir -p "$out"
use_perf=${BENCH_PERF:-1}
if [[ $use_perf == 1 ]] && ! perf record -q -o /dev/null -- true 2>/dev/null; then
  echo "bench-cluster-cpu.sh: perf cannot sample here; CPU per thread only" >&2
  use_perf=0
fi
conf_dir=$root/interop/conformance
# Node 22 (scripts/install-node.sh, idempotent) runs the reference and the npm install.
node_bin=$("$root/scripts/install-node.sh")
export PATH="$(dirname "$node_bin"):$PATH"
if [[ ! -f "$conf_dir/node_modules/@durable-streams/server/package.json" ]]; then
  echo "bench-cluster-cpu.sh: npm ci in interop/conformance" >&2
  (cd "$conf_dir" && npm ci --no-audit --no-fund >&2)
fi
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
cleanup() { stop_all; [[ -n ${BENCH_OUT:-} ]] || rm -rf "$out"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
# threads PID...: "pid tid comm ticks" for every thread of the given processes.
threads() {
  local p t
  for p in "$@"; do
    for t in /proc/"$p"/task/*; do
      [[ -r $t/stat ]] || continue
      echo "$p ${t##*/} $(tr ' ' '_' <"$t/comm") $(awk '{print $14 + $15}' "$t/stat")"
    done
  done
}

runs=()
for groups in default 4; do
  "$bench" wait-quiet --max-wait "${BENCH_QUIET_WAIT:-120}"
  ports=("$(free_port)" "$(free_port)" "$(free_port)")
  # The cluster authenticates its peers (docs/security.md), from the environment here.
  export URSULA_PEER_SECRET="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
  for i in 1 2 3; do
    dir="$out/$groups/c$i"; rm -rf "$dir"; mkdir -p "$dir"
    {
      # Three nodes share the two CPUs: pinned (the default where a node's cpuset has one CPU
      # per core thread), six busy core threads sit on two CPUs and the scheduler cannot move
      # them to the idle one; an operator putting nodes side by side turns pinning off.
      printf '[runtime]\ncpu_affinity = false\n'
      printf '[raft]\ninit_membership_per_group = true\n'
      [[ $groups == default ]] || printf 'group_count = %s\n' "$groups"
      printf '[raft.wal]\npath = "%s/wal"\n' "$dir"
      for j in 1 2 3; do
        printf '[[raft.peers]]\nnode_id = %s\nurl = "http://127.0.0.1:%s"\n' "$j" "${ports[$((j - 1))]}"
      done
    } >"$dir/ursula.toml"
    "$ursula_bin" server --config "$dir/ursula.toml" --node-id "$i" \
      --listen "127.0.0.1:${ports[$((i - 1))]}" --admin-listen off >"$dir/log" 2>&1 &
    pids+=($!)
  done
  base="http://127.0.0.1:${ports[0]}"
  for _ in $(seq 300); do curl -sf "$base/__ursula/ready" >/dev/null && break; sleep 0.1; done
  curl -sf "$base/__ursula/ready" >/dev/null || { echo "bench-cluster-cpu.sh: the cluster did not start" >&2; exit 1; }
  # The CPU window starts after the load's stream setup and warm-up and ends before it does.
  "$bench" load --base "$base" --server "cluster-$groups" --out "$out/$groups.json" \
    --duration "$seconds" --warmup 1 --only append-1000-c32 >&2 &
  load=$!
  sleep 2
  threads "${pids[@]}" >"$out/$groups.before"
  start_ns=$(date +%s%N)
  sleep "$((seconds - 3))"
  threads "${pids[@]}" >"$out/$groups.after"
  end_ns=$(date +%s%N)
  wait "$load"
  echo "$((end_ns - start_ns))" >"$out/$groups.window"
  # The profile gets a load of its own: sampling with stacks slows the nodes, which must not
  # show in the figures above.
  if [[ $use_perf == 1 ]]; then
    "$bench" load --base "$base" --server "cluster-$groups" --out "$out/$groups.profiled.json" \
      --duration "$seconds" --warmup 1 --only append-1000-c32 >&2 &
    load=$!
    sleep 2
    perfs=()
    for i in 0 1 2; do
      perf record -q -F 199 --call-graph dwarf,8192 -o "$out/$groups.node$((i + 1)).perf" \
        -p "${pids[$i]}" -- sleep "$((seconds - 3))" 2>/dev/null &
      perfs+=($!)
    done
    for p in "${perfs[@]}" "$load"; do wait "$p" || true; done
  fi
  printf '%s\n' "${pids[@]}" >"$out/$groups.pids"
  stop_all
  if [[ $use_perf == 1 ]]; then
    for i in 1 2 3; do
      perf script -F comm,tid,ip,sym -i "$out/$groups.node$i.perf" 2>/dev/null >"$out/$groups.node$i.txt" || true
    done
  fi
  runs+=("$groups")
done

"$bench" wait-quiet --max-wait "${BENCH_QUIET_WAIT:-120}"
port=$(free_port)
PORT=$port "$node_bin" "$conf_dir/reference-server.mjs" >"$out/reference.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
"$node_bin" --version >"$out/reference.node"
"$bench" load --base "http://127.0.0.1:$port" --server reference --out "$out/reference.json" \
  --pid "${pids[0]}" --duration "$seconds" --warmup 1 --only append-1000-c32 >&2
stop_all

section=$(python3 - "$out" "$use_perf" "${runs[@]}" <<'PY'
import collections, json, sys
out, use_perf, runs = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
ref = json.load(open(f"{out}/reference.json"))["scenarios"][0]
node = open(f"{out}/reference.node").read().strip()

def threads(path):
    rows = {}
    for line in open(path):
        pid, tid, comm, ticks = line.split()
        rows[(pid, tid)] = (comm, int(ticks))
    return rows

# A sample's kind: the first rule that matches any frame of its stack wins, so work done on
# behalf of a task (a journal write inside the Raft core) counts as that work.
KINDS = [
    ("storage::wal", "journal writes"),
    ("peer::server", "peer RPCs served"),
    ("openraft::replication", "replication streams"),
    ("peer::lanes", "peer lanes (sending)"),
    ("peer::client", "peer lanes (sending)"),
    ("sm::worker", "state machine"),
    ("storage::state_machine", "state machine"),
    ("raft_core", "Raft core"),
    ("raft::batch", "write batcher"),
    ("spawn_accept_loops", "HTTP serving"),
    ("hyper::", "HTTP serving"),
]

def bare(frame):
    # The function's own path: generic arguments name other types (openraft's core is generic
    # over our network factory), which would match the wrong kind.
    depth, keep = 0, []
    for ch in frame:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            keep.append(ch)
    return "".join(keep)

def profile(path):
    counts, stack = collections.Counter(), None
    def done(s):
        if s is None:
            return
        kind = "runtime, kernel, idle wakeups"
        for key, name in KINDS:
            if any(key in f for f in s):
                kind = name
                break
        counts[kind] += 1
    for line in open(path, errors="replace"):
        if not line.strip():
            done(stack); stack = None
        elif not line[0].isspace():
            done(stack); stack = []
        elif stack is not None:
            stack.append(bare(line))
    done(stack)
    return counts

lines = []
for run in runs:
    res = json.load(open(f"{out}/{run}.json"))["scenarios"][0]
    window = int(open(f"{out}/{run}.window").read()) / 1e9
    pids = open(f"{out}/{run}.pids").read().split()
    before, after = threads(f"{out}/{run}.before"), threads(f"{out}/{run}.after")
    appends = res["rate"] * window
    label = "default groups (16 per core)" if run == "default" else f"group_count = {run}"
    lines.append(f"### {label}: {res['rate']:,.0f} appends/s ({res['rate']/ref['rate']:.2f}x the reference), p50 {res['p50_us']/1000:.2f} ms, p99 {res['p99_us']/1000:.2f} ms")
    lines.append("")
    lines.append("| node | CPU (cores) | µs of CPU per append | by thread (cores) |")
    lines.append("| --- | ---: | ---: | --- |")
    total = 0.0
    for n, pid in enumerate(pids, 1):
        per = collections.Counter()
        for (p, tid), (comm, ticks) in after.items():
            if p != pid:
                continue
            per[comm] += ticks - before.get((p, tid), (comm, 0))[1]
        cores = sum(per.values()) / 100 / window
        total += cores
        split = ", ".join(f"{c} {t/100/window:.2f}" for c, t in per.most_common() if t > 0)
        role = "leader" if n == 1 else "follower"
        lines.append(f"| {n} ({role}) | {cores:.2f} | {cores*1e6/max(res['rate'],1):.0f} | {split} |")
    lines.append(f"| all three | {total:.2f} | {total*1e6/max(res['rate'],1):.0f} | |")
    lines.append("")
    if use_perf:
        profiles = [profile(f"{out}/{run}.node{n}.txt") for n in (1, 2, 3)]
        kinds = [k for k, _ in collections.Counter(sum(profiles, collections.Counter())).most_common()]
        lines.append("| kind of work (share of the node's samples) | " + " | ".join(["leader", "follower", "follower"]) + " |")
        lines.append("| --- |" + " ---: |" * 3)
        for k in kinds:
            cells = [f"{100*p[k]/max(sum(p.values()),1):.0f}%" for p in profiles]
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        lines.append("")
lines.append(f"The anchor, the reference server (one Node.js {node} process, in memory), under the same load in "
             f"the same run: {ref['rate']:,.0f} appends/s, p50 {ref['p50_us']/1000:.2f} ms, p99 {ref['p99_us']/1000:.2f} ms, "
             f"{ref['server_cores']:.2f} cores, {ref['server_cores']*1e6/max(ref['rate'],1):.0f} µs of CPU per append.")
default = json.load(open(f"{out}/default.json"))["scenarios"][0] if "default" in runs else None
if default:
    met = default["rate"] >= ref["rate"] and default["p99_us"] < 5000
    lines.append("")
    lines.append(f"Against the aim (at least the reference's throughput with p99 under 5 ms, default groups): "
                 f"{default['rate']/ref['rate']:.2f}x, p99 {default['p99_us']/1000:.2f} ms — **{'met' if met else 'missed'}**")
print("\n".join(lines))
PY
)
echo "$section"
doc=$root/docs/benchmarks.md
python3 - "$doc" "$section" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(git rev-parse --short HEAD)" "$seconds" "$use_perf" <<'PY'
import sys
path, body, date, rev, seconds, perf = sys.argv[1:]
head = "## Where a cluster's CPU goes (issue 19)"
intro = (f"`scripts/bench-cluster-cpu.sh`, {date}, tree {rev}: a 3-voter cluster on loopback, its leader "
         f"driven by `ursula-bench` with 100-byte appends on 1,000 streams at 32 connections; CPU of each "
         f"node's threads from `/proc` over {int(seconds) - 3} s of the load"
         + (", and a `perf` profile of each node (199 Hz, DWARF stacks), each sample counted as the first "
            "kind of work its stack shows (HTTP serving is hyper and the routes: the clients' requests on "
            "the leader, the leader's peer batches on a follower)." if perf == "1" else ".")
         + " The three nodes and the client share the machine's two cores.")
section = f"{head}\n\n{intro}\n\n{body.strip()}\n"
text = open(path).read()
start = text.find(head)
if start >= 0:
    end = text.find("\n## ", start + 1)
    text = text[:start] + section + ("\n" + text[end + 1:] if end >= 0 else "")
else:
    at = text.find("\n## Rolling restart")
    text = text[:at + 1] + section + "\n" + text[at + 1:] if at >= 0 else text.rstrip("\n") + "\n\n" + section
open(path, "w").write(text)
PY
echo "bench-cluster-cpu.sh: wrote docs/benchmarks.md" >&2
