#!/usr/bin/env bash
# The Python package's tests (python/, docs/python-package.md): builds the extension and the
# server (profile ci), builds the wheel from that extension (scripts/build-wheel.sh), installs
# THE WHEEL into a venv under target/python/, and runs pytest on python/tests against a real
# `ursula server` on a loopback port.
#
# Usage: scripts/test-python.sh [--no-build] [-- extra pytest args]
#   --no-build  take the extension (and server) an earlier build left in URSULA_PROFILE_DIR
#               (scripts/test.sh builds the workspace once, with the release's toolchain).
# Env: URSULA_PROFILE_DIR (where cargo put the `ci` profile's artifacts; default target/ci),
#      URSULA_BIN (default $URSULA_PROFILE_DIR/ursula; built when unset),
#      PYTHON (the venv's interpreter, default python3), NODE (default: scripts/install-node.sh;
#      the naming parity test runs js/src/naming.js with it).
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"

. scripts/lib.sh
take_flags "--no-build" "$@"
profile_dir
build_ci sqlite-ursula-vfs
if [[ -z "${URSULA_BIN:-}" ]]; then
  build_ci ursula
  export URSULA_BIN="$URSULA_PROFILE_DIR/ursula"
fi
[[ -x "$URSULA_BIN" ]] || { echo "test-python.sh: $URSULA_BIN is missing (build it, or drop --no-build)" >&2; exit 1; }

work=target/python
venv=$work/venv
# Pinned: pysqlite3-binary is the driver where the interpreter's sqlite3 cannot host the
# extension (pyenv's Python 3.11 here: SQLite 3.40.1, no extension loading).
pins=(pysqlite3-binary==0.5.4.post2 pytest==9.2.0)
step "venv $venv (${pins[*]})"
if [[ ! -x "$venv/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi
if [[ "$(cat "$venv/pins" 2>/dev/null)" != "${pins[*]}" ]]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
  echo "${pins[*]}" >"$venv/pins"
fi

step "the wheel, from $URSULA_PROFILE_DIR/libsqlite_ursula_vfs.so"
wheel=$(PYTHON="$venv/bin/python" scripts/build-wheel.sh --lib "$URSULA_PROFILE_DIR/libsqlite_ursula_vfs.so" --out "$work/dist")
echo "test-python.sh: $wheel ($(du -h "$wheel" | cut -f1))" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-index --force-reinstall "$wheel"

# The stdlib driver, for real: Debian's python3 has a sqlite3 module that loads extensions but
# links the system's SQLite 3.40.1 (libsqlite3.so.0). A libsqlite3.so.0 built from the SQLite
# amalgamation the workspace already has (libsqlite3-sys's bundled copy, ~5 s at -O0, kept
# under target/) gives it a current SQLite through LD_LIBRARY_PATH. Without the source or a C
# compiler that test is skipped, and pytest says so.
sys_version=$(awk '/^name = "libsqlite3-sys"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
amalgamation=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"libsqlite3-sys-$sys_version"/sqlite3/sqlite3.c 2>/dev/null | head -n1 || true)
libdir=$work/libsqlite3-$sys_version
if [[ ! -f "$libdir/libsqlite3.so.0" && -n "$amalgamation" ]] && command -v gcc >/dev/null; then
  step "libsqlite3.so.0 from $amalgamation"
  mkdir -p "$libdir"
  gcc -shared -fPIC -O0 -o "$libdir/libsqlite3.so.0.tmp" "$amalgamation" -lpthread -lm -ldl
  mv "$libdir/libsqlite3.so.0.tmp" "$libdir/libsqlite3.so.0"
fi
if [[ -f "$libdir/libsqlite3.so.0" ]]; then
  export SQLITE_URSULA_TEST_LIBSQLITE3_DIR="$PWD/$libdir"
fi

NODE=${NODE:-$(scripts/install-node.sh)}
export NODE
# Settings of the extension from the caller's environment would change what the tests expect,
# and SQLITE_URSULA_VFS would load another library than the wheel's.
unset SQLITE_URSULA_VFS URSULA_VFS_RETRY_MS URSULA_VFS_IDLE_MS URSULA_VFS_MAX_FRAME_BYTES \
  URSULA_VFS_SNAPSHOT_MIN_BYTES URSULA_VFS_TOKEN_FILE URSULA_VFS_CA_FILE PYTHONPATH

step "pytest python/tests ($("$venv/bin/python" --version))"
# -rs: a skipped test says why. pytest exits 5 when it collected nothing. --basetemp keeps the
# tests' temporary directories under target/ (pytest empties it at the start of each run)
# instead of leaving /tmp/pytest-of-$USER behind on the machine.
exec "$venv/bin/python" -m pytest -p no:cacheprovider -rs --basetemp "$PWD/$work/pytest-tmp" \
  "${extra[@]}" python/tests
