#!/usr/bin/env bash
# Builds the release artifacts into dist/ (docs/release.md):
#   ursula, ursulactl                      the server and the operator CLI
#   ursulagw                               a link to ursula: `ursula gateway` by its own name
#   libsqlite_ursula_vfs.so                the SQLite extension (ursula_attach, from any
#                                          SQLite 3.45.3+ that loads extensions)
#   tonbo-sqlite-ursula-<v>.tgz            @tonbo/sqlite-ursula, optional dependency on:
#   tonbo-sqlite-ursula-linux-x64-gnu-<v>.tgz  @tonbo/sqlite-ursula-linux-x64-gnu, the addon
#   sqlite_ursula-<v>-py3-none-manylinux_2_28_x86_64.whl  the Python package sqlite-ursula,
#                                          which carries libsqlite_ursula_vfs.so
#   SHA256SUMS
# for x86_64 Linux with a glibc 2.28 floor: cargo-zigbuild links against glibc 2.28's symbol
# versions (target x86_64-unknown-linux-gnu.2.28) with the installed Rust std, so nothing
# needs an old distribution to build on. Every binary is checked (scripts/check-glibc.sh)
# before it lands in dist/. The Dockerfile copies dist/ursula and dist/ursulactl.
#
# Usage: scripts/release.sh [--profile NAME] [--out DIR]
#   --profile  cargo profile (default: release). The artifacts are release builds; another
#              profile is for trying the script out faster, and says so in dist/PROFILE.
#   --out      output directory (default: dist), emptied first
# Installs cargo-zigbuild and zig (PyPI) into .tools/zigvenv when missing (idempotent).
set -euo pipefail
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
cd "$root"

profile=release
out=dist
while (($#)); do
  case "$1" in
    --profile) profile=${2:?--profile needs a cargo profile name}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    *) echo "release.sh: unknown argument $1 (usage: [--profile NAME] [--out DIR])" >&2; exit 2 ;;
  esac
  shift
done

# The glibc floor of the spec ("glibc 2.28 or later": Debian 11, Ubuntu 20.04, Amazon Linux
# 2023). The Rust target and the npm platform package this script builds.
glibc_floor=2.28
rust_target=x86_64-unknown-linux-gnu
npm_triple=linux-x64-gnu

step() { printf '\n== release: %s\n' "$*" >&2; }

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) echo "release.sh: builds on linux x86_64 only (the target is $rust_target)" >&2; exit 1 ;;
esac
for tool in cargo npm node objcopy nm python3; do
  command -v "$tool" >/dev/null || { echo "release.sh: $tool is required" >&2; exit 1; }
done
if ! command -v objdump >/dev/null; then
  (apt-get install -y binutils || (apt-get update && apt-get install -y binutils)) >&2
fi

# cargo-zigbuild and zig in a venv (scripts/zig-env.sh): both are on PyPI, the only way to
# them from here. cargo-zigbuild finds zig through the ziglang module (python-zig) on PATH.
PATH="$(scripts/zig-env.sh --install):$PATH"
export PATH

step "cargo zigbuild --profile $profile --target $rust_target.$glibc_floor"
start=$SECONDS
# The whole workspace (but the bundled-SQLite test host), not only the four packages shipped:
# dependencies' features are unified over the packages one build selects, so this is the
# build scripts/test.sh's tests reuse as is (same features, same zig environment) instead of
# compiling every dependency a second time. The soak is left out: it needs ursula-cold's
# test-support (a SeaweedFS launcher), which no shipped binary should carry; the tests'
# dev-dependencies turn that feature on for their build anyway.
cargo zigbuild --profile "$profile" --target "$rust_target.$glibc_floor" \
  --workspace --exclude ursula-vfs-tests --exclude ursula-soak
echo "release.sh: build took $((SECONDS - start)) s" >&2
case "$profile" in
  dev) built="target/$rust_target/debug" ;;
  *) built="target/$rust_target/$profile" ;;
esac

step "assembling $out/"
rm -rf "$out"
mkdir -p "$out"
# Line tables only make the files large; the symbol tables stay, for backtraces.
for f in ursula ursulactl libsqlite_ursula_vfs.so; do
  objcopy --strip-debug "$built/$f" "$out/$f"
done
objcopy --strip-debug "$built/libsqlite_ursula_node.so" "$out/libsqlite_ursula_node.so.tmp"
# `ursulagw` is `ursula gateway` under the gateway's own name: the binary dispatches on the
# name it is invoked by, so a relative link ships it without a second copy.
ln -s ursula "$out/ursulagw"
nm -D --defined-only "$out/libsqlite_ursula_vfs.so" | grep -w sqlite3_sqliteursulavfs_init >/dev/null \
  || { echo "release.sh: libsqlite_ursula_vfs.so does not export sqlite3_sqliteursulavfs_init" >&2; exit 1; }

step "glibc floor $glibc_floor"
scripts/check-glibc.sh --max "$glibc_floor" \
  "$out/ursula" "$out/ursulactl" "$out/libsqlite_ursula_vfs.so" "$out/libsqlite_ursula_node.so.tmp"

step "npm packages ($npm_triple)"
scripts/pack-npm.sh --addon "$out/libsqlite_ursula_node.so.tmp" --out "$out" >/dev/null
rm -f "$out/libsqlite_ursula_node.so.tmp"

# A zip of the Python files and the extension already checked above (about a second).
step "Python wheel (manylinux_${glibc_floor/./_}_x86_64)"
scripts/build-wheel.sh --lib "$out/libsqlite_ursula_vfs.so" --out "$out" \
  --plat "manylinux_${glibc_floor/./_}_x86_64" >/dev/null

if [[ "$profile" != release ]]; then
  echo "$profile" >"$out/PROFILE"
fi
(cd "$out" && sha256sum -- * >SHA256SUMS)

step "done: $out/"
(cd "$out" && ls -l) >&2
