# shellcheck shell=bash
# Sourced by the scripts (`. "$script_dir/lib.sh"`): what several of them do the same way.

# A step's heading, on stderr.
step() { printf '\n== %s\n' "$*" >&2; }

# Stops process PID (one this script started, by pid only): SIGTERM, up to 5 s to exit, then
# SIGKILL. No-op for an empty or gone PID.
stop_pid() {
  local pid=$1
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}

# Sets node_bin to a Node.js the interop runners (vitest 4, vite 8) accept: `node` on PATH when
# it is ^20.19, ^22.12 or >=24, else Node 22 from npm (install-node.sh), put first on PATH so npm
# and the runners' children use it too.
interop_node() {
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if command -v node >/dev/null &&
    node -e 'const [a,b]=process.versions.node.split(".").map(Number);
             process.exit((a===20&&b>=19)||(a===22&&b>=12)||a>=24?0:1)' 2>/dev/null; then
    node_bin=$(command -v node)
  else
    node_bin=$("$here/install-node.sh")
    export PATH="$(dirname "$node_bin"):$PATH"
  fi
}

# Reads a script's arguments: each flag named in FLAGS (one word, e.g. "--ci --no-build") sets
# the variable of its name to 1 (ci=1, no_build=1; 0 when absent); the words after `--` and any
# other word go, in order, to the array `extra`.
# Usage: take_flags FLAGS "$@"
take_flags() {
  local known=" $1 " word name
  shift
  for word in $known; do name=${word#--}; printf -v "${name//-/_}" 0; done
  extra=()
  while (($#)); do
    if [[ "$1" == -- ]]; then
      shift
      extra+=("$@")
      break
    elif [[ "$known" == *" $1 "* ]]; then
      name=${1#--}
      printf -v "${name//-/_}" 1
    else
      extra+=("$1")
    fi
    shift
  done
}

# Builds cargo package PKG with the ci profile, unless the caller's no_build is 1.
build_ci() {
  ((no_build)) && return 0
  step "cargo build --profile ci -p $1"
  cargo build --profile ci -p "$1"
}

# What the Node benchmarks need: a release `ursula`, the npm package's addon in js/, and Node
# 22 (its path in `node`).
bench_js_prologue() {
  cargo build --release -p ursula >&2
  scripts/test-js.sh --build-only >&2
  node=$(scripts/install-node.sh)
}

# Exports URSULA_PROFILE_DIR (default target/ci) as an absolute path.
profile_dir() {
  URSULA_PROFILE_DIR=${URSULA_PROFILE_DIR:-target/ci}
  [[ "$URSULA_PROFILE_DIR" == /* ]] || URSULA_PROFILE_DIR="$PWD/$URSULA_PROFILE_DIR"
  export URSULA_PROFILE_DIR
}

# A free loopback port, as the kernel picks one (a short race until the caller binds it).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Replaces the section of markdown FILE that starts at `## HEADING` (up to the next `## `) with
# TEXT, placed at the end of the file; adds it when the file has no such section.
replace_doc_section() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys
path, heading, section = sys.argv[1:4]
text = open(path).read()
start = text.find("## " + heading)
if start >= 0:
    end = text.find("\n## ", start + 1)
    text = text[:start] + (text[end + 1:] if end >= 0 else "")
open(path, "w").write(text.rstrip("\n") + "\n\n" + section.strip() + "\n")
PY
}

# Starts target/release/ursula on a free loopback port (admin plane off), waits until it
# answers, and sets node_pid and node_url; the caller stops it (`stop_pid "$node_pid"`).
start_release_node() {
  local port
  port=$(free_port)
  ./target/release/ursula server --listen "127.0.0.1:$port" --admin-listen off >/dev/null 2>&1 &
  node_pid=$!
  node_url="http://127.0.0.1:$port"
  for _ in $(seq 100); do
    curl -sf "$node_url/__ursula/ready" >/dev/null && return 0
    sleep 0.1
  done
  echo "start_release_node: nothing answers at $node_url" >&2
  return 1
}
