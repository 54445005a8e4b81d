#!/usr/bin/env bash
# Builds the Python wheel sqlite_ursula-<v>-py3-none-manylinux_2_<N>_x86_64.whl from a built
# libsqlite_ursula_vfs.so (python/build_wheel.py, stdlib only: nothing is downloaded) and prints
# its path. <v> is js/package.json's version; N is the glibc the library needs, at least 28.
#
# Usage: scripts/build-wheel.sh [--lib PATH] [--out DIR] [--plat TAG]
#   --lib   the extension (default: $URSULA_PROFILE_DIR/libsqlite_ursula_vfs.so, and
#           URSULA_PROFILE_DIR defaults to target/ci: `cargo build --profile ci -p sqlite-ursula-vfs`)
#   --out   output directory (default: target/python/dist)
#   --plat  demand a platform tag (scripts/release.sh: manylinux_2_28_x86_64); fails when the
#           library needs a newer glibc than the tag says
# Env: PYTHON (default python3, 3.9 or later).
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"

lib=${URSULA_PROFILE_DIR:-target/ci}/libsqlite_ursula_vfs.so
out=target/python/dist
plat=()
while (($#)); do
  case "$1" in
    --lib) lib=${2:?--lib needs a path}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --plat) plat=(--plat "${2:?--plat needs a tag}"); shift ;;
    *) echo "build-wheel.sh: unknown argument $1 (usage: [--lib PATH] [--out DIR] [--plat TAG])" >&2; exit 2 ;;
  esac
  shift
done

# One wheel per version and tag: an older build's wheel would be installed by a glob.
mkdir -p "$out"
rm -f "$out"/sqlite_ursula-*.whl
"${PYTHON:-python3}" python/build_wheel.py --lib "$lib" --out "$out" "${plat[@]}"
