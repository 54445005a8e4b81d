#!/usr/bin/env bash
# Fault runs against a real cluster (docs/reliability.md): nodes as hosts in network
# namespaces, a seeded nemesis, concurrent clients and a SQLite owner with a live follower,
# and a checker over each recorded history. Needs root (namespaces, iptables, tmpfs mounts).
#
#   scripts/chaos.sh --short [--bin DIR]   # the set in scripts/test.sh: the egress drill and a
#                                          # few schedules, a few minutes
#   scripts/chaos.sh --long  [--bin DIR]   # 100 seeded schedules (about 80 minutes on 2 cores)
#   scripts/chaos.sh --seed N --nodes 3|5 --fsync always|never [--steps K]   # repeat one
#
# DIR holds ursula, ursula-chaos and chaos-sqlite with libsqlite_ursula_vfs.so beside it
# (default target/ci, built here if missing). Results: a table per variant on stdout, and per
# schedule DIR/chaos/<variant>/seed-N/report.json (logs and the history kept when it failed).
set -euo pipefail
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
cd "$root"

mode=""; bin=""; seed=""; nodes=3; fsync=always; steps=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --short|--long) mode=${1#--}; shift ;;
    --bin) bin=$2; shift 2 ;;
    --seed) mode=one; seed=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --fsync) fsync=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "chaos.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$mode" ]] || { echo "usage: scripts/chaos.sh --short | --long | --seed N [...]" >&2; exit 2; }

if [[ $(id -u) != 0 ]]; then
  echo "chaos.sh: needs root (network namespaces, iptables, tmpfs); not run" >&2
  exit 1
fi
if ! command -v iptables >/dev/null; then
  (apt-get install -y iptables || (apt-get update && apt-get install -y iptables)) >/dev/null
fi

if [[ -z "$bin" ]]; then
  bin="$root/target/ci"
  cargo build --profile ci -p ursula -p ursula-chaos -p sqlite-ursula-vfs
  cargo build --profile ci -p ursula-vfs-tests --bin chaos-sqlite
fi
bin=$(cd "$bin" && pwd)
for f in ursula ursula-chaos chaos-sqlite libsqlite_ursula_vfs.so; do
  [[ -e "$bin/$f" ]] || { echo "chaos.sh: $bin/$f is missing" >&2; exit 2; }
done
out=$(mktemp -d "${TMPDIR:-/tmp}/ursula-chaos.XXXXXX")
echo "chaos.sh: runs in $out" >&2

rc=0
variant() { # NAME NODES FSYNC FIRST_SEED COUNT STEPS
  echo
  echo "### $1: $2 voters, fsync = $3, seeds $4..$(($4 + $5 - 1)), $6 steps each"
  echo
  "$bin/ursula-chaos" run --ursula "$bin/ursula" --sqlite "$bin/chaos-sqlite" \
    --nodes "$2" --fsync "$3" --seed "$4" --count "$5" --steps "$6" --out "$out/$1" || rc=$?
}

drill() { # NAME
  echo
  echo "### drill: $1"
  echo
  "$bin/ursula-chaos" "$1" --ursula "$bin/ursula" --out "$out/$1" || rc=$?
}

case "$mode" in
  short)
    drill egress-drill
    variant three-always 3 always 1 2 3
    variant three-never 3 never 101 1 3
    variant five-always 5 always 201 1 3
    ;;
  long)
    drill egress-drill
    variant three-always 3 always 1001 40 3
    variant three-never 3 never 2001 30 3
    variant five-always 5 always 3001 30 3
    ;;
  one)
    variant "seed-$seed" "$nodes" "$fsync" "$seed" 1 "$steps"
    ;;
esac
if [[ $rc == 0 ]]; then
  rm -rf "$out"
else
  echo "chaos.sh: rc=$rc; the failing runs' logs, histories and reports are in $out" >&2
fi
exit "$rc"
