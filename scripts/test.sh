#!/usr/bin/env bash
# Runs every test: formatting and lints, the Rust tests (unit, in-process HTTP, real binary),
# then the Durable Streams conformance suite against the built `ursula` binary.
# Everything builds once, with the `ci` profile (optimized, debug assertions on).
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy"
cargo clippy --workspace --all-targets --profile ci -- -D warnings

step "build (profile ci)"
cargo build --workspace --profile ci

step "cargo nextest"
cargo nextest run --workspace --cargo-profile ci --no-fail-fast

step "conformance suite"
scripts/conformance.sh target/ci/ursula
