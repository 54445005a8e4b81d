#!/usr/bin/env bash
# Builds the cargo-fuzz targets in fuzz/ and runs each for a bounded time
# (docs/reliability.md, "Fuzzing").
#
# Usage: scripts/fuzz.sh --short | --long SECONDS [TARGET...]
#   --short          each target for 20 s (the step of scripts/test.sh); non-zero on any crash
#   --long SECONDS   each target for SECONDS; a summary per target at the end, non-zero if
#                    any target crashed
#   TARGET...        only these targets (default: every target in fuzz/Cargo.toml)
#
# Installs cargo-fuzz into .tools/cargo-fuzz when missing (idempotent: a second run finds it),
# builds with nightly Rust (`cargo +nightly`; installed by rustup when missing) into
# target/fuzz, and runs each target from its checked-in seeds (fuzz/corpus/<target>, read
# only) plus the corpus earlier runs grew (target/fuzz/corpus/<target>, where new inputs go).
# A crash, a timeout (10 s on one input) or an allocation past the limits below stops that
# target's run; its input is saved under target/fuzz/artifacts/<target>/ and the log under
# target/fuzz/logs/<target>.log. Reproduce one with
#   target/fuzz/x86_64-unknown-linux-gnu/release/<target> <artifact>
set -euo pipefail
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
cd "$root"

cargo_fuzz_version=0.13.2
seconds=
case "${1:-}" in
  --short) seconds=20 ;;
  --long)
    seconds=${2:-}
    [[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --long needs SECONDS" >&2; exit 2; }
    shift
    ;;
  *) echo "usage: scripts/fuzz.sh --short | --long SECONDS [TARGET...]" >&2; exit 2 ;;
esac
shift

# scripts/test.sh exports the release's zig toolchain (scripts/zig-env.sh): its C compilers,
# linker, flags and build target would build the targets without the sanitizer runtime and
# libFuzzer they link. The fuzz build is its own, so none of that applies to it.
while IFS= read -r name; do
  unset "$name"
done < <(compgen -e | grep -E '^(CC|CXX|AR|CFLAGS|CXXFLAGS|LDFLAGS|RUSTFLAGS|CARGO_ENCODED_RUSTFLAGS|CARGO_BUILD_|CARGO_TARGET_|CARGO_PROFILE_|BINDGEN_|ZIG)' || true)

tools="$root/.tools/cargo-fuzz"
if ! [[ "$("$tools/bin/cargo-fuzz" --version 2>/dev/null)" == *" $cargo_fuzz_version" ]]; then
  echo "fuzz.sh: installing cargo-fuzz $cargo_fuzz_version into $tools" >&2
  cargo install cargo-fuzz --version "=$cargo_fuzz_version" --locked --root "$tools" >&2
fi
export PATH="$tools/bin:$PATH"
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal >&2
fi

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^ursula-fuzz$')
fi

# cargo-fuzz's default build: optimized, with debug assertions and overflow checks (an
# overflow is a finding; `-O` would turn them off), and AddressSanitizer. Sixteen codegen
# units instead of its one: the server's dependency tree builds much faster on few cores, for
# little loss of executions per second (docs/reliability.md, "Fuzzing").
build_start=$SECONDS
nice -n 10 cargo +nightly fuzz build --codegen-units 16 --target-dir target/fuzz
echo "fuzz.sh: built in $((SECONDS - build_start)) s"

bin="target/fuzz/x86_64-unknown-linux-gnu/release"
mkdir -p target/fuzz/logs
summary=()
failed=0
for t in "${targets[@]}"; do
  mkdir -p "target/fuzz/corpus/$t" "target/fuzz/artifacts/$t"
  dict=()
  [[ -f "fuzz/dict/$t.dict" ]] && dict=("-dict=fuzz/dict/$t.dict")
  log="target/fuzz/logs/$t.log"
  echo "fuzz.sh: $t for $seconds s"
  # -malloc_limit_mb: no input of a few KiB may make one allocation of 512 MiB (a length
  # prefix trusted before the bytes behind it are there).
  rc=0
  nice -n 10 "$bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="target/fuzz/artifacts/$t/" \
    "${dict[@]}" "target/fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
  if [[ $rc -eq 0 ]]; then
    verdict="no crash"
  else
    failed=1
    verdict="CRASH (rc $rc): $(grep -m1 -E '^==[0-9]+==|panicked at|^SUMMARY' "$log" | cut -c1-120 || true)"
    echo "fuzz.sh: $t crashed; log $log, input in target/fuzz/artifacts/$t/" >&2
    tail -40 "$log" >&2
  fi
  summary+=("$(printf '%-14s %12s runs  cov %6s  ft %7s  corpus %-10s %s' \
    "$t" "${runs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$verdict")")
done

printf '\n== fuzz.sh summary (%s s per target)\n' "$seconds"
printf '  %s\n' "${summary[@]}"
exit "$failed"
