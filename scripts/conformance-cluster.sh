#!/usr/bin/env bash
# Runs the conformance suite against a 3-voter Raft cluster of BINARY on loopback ports: one
# TOML file, three --node-id's, a WAL directory each. The suite talks to the node that leads
# the groups (the lowest node id initializes them and leads after start), so the fair-share
# balancer is off here: moving leaderships away would make that node a follower, whose reads
# trail the leader's (the suite expects a single node's read-your-writes).
#   scripts/conformance-cluster.sh target/ci/ursula
set -euo pipefail
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
. "$root/scripts/lib.sh"
binary=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=$(mktemp -d "${TMPDIR:-/tmp}/ursula-cluster.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

ports=("$(free_port)" "$(free_port)" "$(free_port)")
# The cluster authenticates its peers (docs/security.md), from the environment here.
export URSULA_PEER_SECRET="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
for i in 1 2 3; do
  {
    printf '[raft]\ngroup_count = 16\ninit_membership_per_group = true\n'
    printf '[governance.leadership_balance]\nmax_per_tick = 0\n'
    printf '[raft.wal]\npath = "%s/wal%s"\n' "$work" "$i"
    for j in 1 2 3; do
      printf '[[raft.peers]]\nnode_id = %s\nurl = "http://127.0.0.1:%s"\n' "$j" "${ports[$((j-1))]}"
    done
  } > "$work/n$i.toml"
  RUST_LOG=warn "$binary" server --config "$work/n$i.toml" --node-id "$i" \
    --listen "127.0.0.1:${ports[$((i-1))]}" --admin-listen off > "$work/n$i.log" 2>&1 &
  pids+=($!)
done
leader="http://127.0.0.1:${ports[0]}"
for _ in $(seq 200); do
  # Ready, and a create goes through: every group has elected its leader.
  if curl -sf "$leader/__ursula/ready" >/dev/null &&
     [[ $(curl -s -o /dev/null -w '%{http_code}' -X PUT "$leader/v1/stream/__cluster_probe") =~ ^20 ]]; then
    break
  fi
  sleep 0.1
done
echo "conformance against a 3-voter cluster (leader $leader)"
CONFORMANCE_URL="$leader" "$root/scripts/conformance.sh"
