#!/usr/bin/env bash
# The glibc 2.28 toolchain of the release (docs/release.md): cargo-zigbuild and zig from PyPI
# in .tools/zigvenv, installed when missing (idempotent).
#
# Usage: scripts/zig-env.sh [--install]
#   (none)     install if needed, then print, as `export` lines for `eval`, the environment
#              `cargo zigbuild --target x86_64-unknown-linux-gnu.2.28` gives cargo, plus
#              CARGO_BUILD_TARGET. Plain `cargo` commands run in that environment build
#              exactly what `cargo zigbuild` builds, into the same target directory, so
#              scripts/test.sh compiles once: its tests and scripts/release.sh share every
#              artifact instead of compiling the workspace twice.
#   --install  install if needed and print the venv's bin directory (for PATH).
#
# The environment is read from cargo-zigbuild itself (it runs a stand-in for cargo that
# records what it was given), so a new cargo-zigbuild cannot drift from what this prints.
set -euo pipefail
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)

# The glibc floor of the spec ("glibc 2.28 or later": Debian 11, Ubuntu 20.04, Amazon Linux
# 2023) and the one Rust target the release builds.
glibc_floor=2.28
rust_target=x86_64-unknown-linux-gnu
zig_version=0.17.1
zigbuild_version=0.24.1

mode=env
case "${1:-}" in
  "") ;;
  --install) mode=install ;;
  *) echo "zig-env.sh: unknown argument $1 (usage: [--install])" >&2; exit 2 ;;
esac

venv="$root/.tools/zigvenv"
if ! { [[ -x "$venv/bin/cargo-zigbuild" ]] \
  && [[ "$("$venv/bin/cargo-zigbuild" --version 2>/dev/null)" == *" $zigbuild_version"* ]] \
  && [[ "$("$venv/bin/python-zig" version 2>/dev/null)" == "$zig_version" ]]; }; then
  echo "zig-env.sh: installing ziglang==$zig_version cargo-zigbuild==$zigbuild_version into $venv" >&2
  if [[ ! -x "$venv/bin/pip" ]]; then
    rm -rf "$venv"
    mkdir -p "$root/.tools"
    if ! python3 -m venv "$venv" >&2; then
      rm -rf "$venv"
      (apt-get install -y python3-venv || (apt-get update && apt-get install -y python3-venv)) >&2
      python3 -m venv "$venv" >&2
    fi
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "ziglang==$zig_version" "cargo-zigbuild==$zigbuild_version" >&2
fi

if [[ "$mode" == install ]]; then
  echo "$venv/bin"
  exit 0
fi

# cargo-zigbuild runs "$CARGO build ..." with its environment added; the stand-in writes that
# environment down and does nothing else.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cat >"$scratch/cargo" <<'EOF'
#!/usr/bin/env bash
env -0 >"$ZIG_ENV_CAPTURE"
EOF
chmod +x "$scratch/cargo"
(cd "$root" && PATH="$venv/bin:$PATH" CARGO="$scratch/cargo" ZIG_ENV_CAPTURE="$scratch/after" \
  "$venv/bin/cargo-zigbuild" zigbuild --target "$rust_target.$glibc_floor" >/dev/null)
[[ -s "$scratch/after" ]] || { echo "zig-env.sh: cargo-zigbuild did not run cargo" >&2; exit 1; }

# What it added or changed, except the stand-in's own plumbing and the shell's bookkeeping.
# Names a shell cannot export (BINDGEN_EXTRA_CLANG_ARGS_x86_64-unknown-linux-gnu, a spelling
# bindgen also reads with underscores, which is printed) are left out: no build script of
# this workspace runs bindgen, so none reruns on them.
PATH="$venv/bin:$PATH" python3 - "$scratch/after" <<'EOF'
import os, re, shlex, sys
after = dict(kv.split("=", 1) for kv in open(sys.argv[1]).read().split("\0") if "=" in kv)
skip = {"CARGO", "ZIG_ENV_CAPTURE", "SHLVL", "_", "OLDPWD", "PWD"}
for key in sorted(after):
    if key in skip or os.environ.get(key) == after[key]:
        continue
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        continue
    print(f"export {key}={shlex.quote(after[key])}")
EOF
echo "export PATH=$(printf '%q' "$venv/bin"):\"\$PATH\""
echo "export CARGO_BUILD_TARGET=$rust_target"
