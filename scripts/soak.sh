#!/usr/bin/env bash
# The month-in-an-hour soak (docs/cold-tier.md, "The month-in-an-hour soak"): a durable 3-voter
# cluster on SeaweedFS under thousands of streams' small appends, staged 1-8 MiB appends,
# snapshots of 1-64 MiB, retention advances, deletes, bucket purges, restarts and SIGKILLs,
# sampled after every round and read back whole at the end. Prints the report in Markdown;
# exits 1 when a byte differs, a purged stream answers, or a stream's state passes 32 KiB.
#
#   scripts/soak.sh                 # the month preset: about half an hour on 2 cores
#   scripts/soak.sh --preset short  # the test command's version (soak/tests/short.rs)
#   scripts/soak.sh --seed N        # another workload and fault order
set -euo pipefail
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
cd "$root"
scripts/install-s3.sh >/dev/null
# The same build as scripts/test.sh's, so nothing compiles twice.
eval "$(scripts/zig-env.sh)"
cargo build --profile ci -p ursula -p ursula-soak >&2
preset=(--preset month)
[[ " $* " == *" --preset "* ]] && preset=()
exec "target/$CARGO_BUILD_TARGET/ci/ursula-soak" "${preset[@]}" "$@"
