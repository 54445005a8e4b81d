#!/usr/bin/env bash
# The npm package's tests: builds the Node addon (node-binding, profile ci), puts it into js/
# where the package's loader finds it, builds the `ursula` server the tests start, installs
# Node 22, and runs `node --test` on js/test/*.test.mjs.
#
# Usage: scripts/test-js.sh [--ci] [--build-only] [--no-build] [-- extra node --test args]
#   --ci          TAP output without colours; exit 1 on any failure, or when no test ran.
#   --build-only  build and copy the addon, run nothing.
#   --no-build    take the addon an earlier build left in URSULA_PROFILE_DIR (scripts/test.sh
#                 builds the workspace once; a `-p` build here could unify features differently
#                 and compile the addon's dependencies again).
# Env: URSULA_PROFILE_DIR (where cargo put the `ci` profile's artifacts; default target/ci),
#      URSULA_BIN (default $URSULA_PROFILE_DIR/ursula; built when unset),
#      NODE (default: scripts/install-node.sh).
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"

. scripts/lib.sh
take_flags "--ci --build-only --no-build" "$@"
profile_dir
build_ci sqlite-ursula-node

# One shared object is both the napi module and the SQLite extension.
lib=$URSULA_PROFILE_DIR/libsqlite_ursula_node.so
[[ -f "$lib" ]] || { echo "test-js.sh: $lib is missing (build it, or drop --no-build)" >&2; exit 1; }
addon=js/sqlite-ursula.linux-x64-gnu.node
# The whole symbol list first: `nm | grep -q` under pipefail fails when grep stops early.
exports=$(nm -D --defined-only "$lib")
for sym in napi_register_module_v1 sqlite3_sqliteursulavfs_init; do
  grep -qw "$sym" <<<"$exports" || { echo "test-js.sh: $lib does not export $sym" >&2; exit 1; }
done
# The debug line tables only make the package large.
objcopy --strip-debug "$lib" "$addon.tmp" 2>/dev/null || cp "$lib" "$addon.tmp"
mv -f "$addon.tmp" "$addon"
echo "test-js.sh: $addon ($(du -h "$addon" | cut -f1))" >&2
((build_only)) && exit 0

if [[ -z "${URSULA_BIN:-}" ]]; then
  build_ci ursula
  export URSULA_BIN="$URSULA_PROFILE_DIR/ursula"
fi

NODE=${NODE:-$(scripts/install-node.sh)}
export PATH="$(dirname "$NODE"):$PATH"
# Settings of the extension from the caller's environment would change what the tests expect.
unset SQLITE_URSULA_VFS URSULA_VFS_RETRY_MS URSULA_VFS_IDLE_MS URSULA_VFS_MAX_FRAME_BYTES \
  URSULA_VFS_SNAPSHOT_MIN_BYTES URSULA_VFS_TOKEN_FILE URSULA_VFS_CA_FILE

step "node --test js/test ($("$NODE" --version))"
reporter=spec
((ci)) && reporter=tap
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
"$NODE" --test --test-reporter="$reporter" "${extra[@]}" 'js/test/*.test.mjs' 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
if ((ci)) && ((rc == 0)) && ! grep -Eq '^# pass [1-9]' "$out"; then
  echo "test-js.sh: no test passed" >&2
  rc=1
fi
exit "$rc"
