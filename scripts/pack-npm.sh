#!/usr/bin/env bash
# Packs the npm packages in napi-rs's per-platform layout and prints the two tarballs' paths:
#   @tonbo/sqlite-ursula                 js/ (JavaScript and types only; no .node, even when a
#                                        development build lies in js/), with an optional
#                                        dependency on the platform package below
#   @tonbo/sqlite-ursula-linux-x64-gnu   js/npm/linux-x64-gnu/ plus the addon given
#
# Usage: scripts/pack-npm.sh --addon FILE --out DIR
#   --addon  the napi addon (libsqlite_ursula_node.so of some build), packed as
#            sqlite-ursula.linux-x64-gnu.node
#   --out    where the tarballs go (created when missing)
# Used by scripts/release.sh (the release addon), scripts/demo.sh and js/test/pack.test.mjs
# (the ci-profile addon), so every install path sees the same two packages.
set -euo pipefail
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)

addon=""
out=""
while (($#)); do
  case "$1" in
    --addon) addon=${2:?--addon needs a file}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    *) echo "pack-npm.sh: unknown argument $1 (usage: --addon FILE --out DIR)" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$addon" && -n "$out" ]] || { echo "pack-npm.sh: usage: --addon FILE --out DIR" >&2; exit 2; }
[[ -f "$addon" ]] || { echo "pack-npm.sh: the addon $addon does not exist" >&2; exit 1; }
command -v npm >/dev/null || { echo "pack-npm.sh: npm is required" >&2; exit 1; }
for sym in napi_register_module_v1 sqlite3_sqliteursulavfs_init; do
  nm -D --defined-only "$addon" | grep -w "$sym" >/dev/null \
    || { echo "pack-npm.sh: $addon does not export $sym: not the sqlite-ursula-node addon" >&2; exit 1; }
done

triple=linux-x64-gnu
platform_dir="$root/js/npm/$triple"
field() { node -e 'const m = require(process.argv[1]); const v = process.argv[2].split(".").reduce((o, k) => o?.[k], m); process.stdout.write(v === undefined ? "" : String(v))' "$1" "$2"; }
main_version=$(field "$root/js/package.json" version)
platform_name=$(field "$platform_dir/package.json" name)
platform_version=$(field "$platform_dir/package.json" version)
wanted=$(node -e 'const m = require(process.argv[1]); process.stdout.write(m.optionalDependencies?.[process.argv[2]] ?? "")' \
  "$root/js/package.json" "$platform_name")
# One version for both: the main package pins its platform package exactly, as napi-rs does.
if [[ "$platform_version" != "$main_version" || "$wanted" != "$main_version" ]]; then
  echo "pack-npm.sh: versions disagree: js/package.json $main_version, its optional dependency" \
    "$platform_name@${wanted:-<missing>}, js/npm/$triple/package.json $platform_version" >&2
  exit 1
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$platform_dir/package.json" "$platform_dir/README.md" "$root/LICENSE" "$stage/"
cp "$addon" "$stage/sqlite-ursula.$triple.node"
chmod 0755 "$stage/sqlite-ursula.$triple.node"

pack() { (cd "$1" && npm pack --json --silent --pack-destination "$out") | node -e '
  let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
    const [p] = JSON.parse(s);
    process.stdout.write(p.filename + "\n" + p.files.map((f) => f.path).join("\n") + "\n");
  });'; }
# npm packs a LICENSE at a package's root whatever "files" says: js/LICENSE is the repository's.
cmp -s "$root/LICENSE" "$root/js/LICENSE" \
  || { echo "pack-npm.sh: js/LICENSE differs from LICENSE: copy LICENSE over it" >&2; exit 1; }
main_listing=$(pack "$root/js")
platform_listing=$(pack "$stage")
# The main package must not carry an addon: it would shadow the platform package's.
if grep -q '\.node$' <<<"$main_listing"; then
  echo "pack-npm.sh: the main package packed an addon:" $(grep '\.node$' <<<"$main_listing") >&2
  exit 1
fi
grep -qx "sqlite-ursula.$triple.node" <<<"$platform_listing" \
  || { echo "pack-npm.sh: the platform package lacks sqlite-ursula.$triple.node" >&2; exit 1; }
echo "$out/$(head -n1 <<<"$main_listing")"
echo "$out/$(head -n1 <<<"$platform_listing")"
