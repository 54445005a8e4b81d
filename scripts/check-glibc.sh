#!/usr/bin/env bash
# The glibc floor of ELF files: prints, for each file, the highest GLIBC_x.y symbol version it
# needs (`objdump -T`, the versions of its undefined dynamic symbols), and exits 1 when any file
# needs more than the floor, or is not a dynamically linked ELF file that needs glibc at all.
# A binary that needs GLIBC_2.34 does not start on a glibc 2.28 system ("version `GLIBC_2.34'
# not found"), which is what this guards: the release artifacts must run on glibc 2.28.
#
# Usage: scripts/check-glibc.sh [--max 2.28] FILE...
set -euo pipefail

max=2.28
files=()
while (($#)); do
  case "$1" in
    --max) max=${2:?--max needs a version like 2.28}; shift ;;
    -*) echo "check-glibc.sh: unknown option $1 (usage: [--max 2.28] FILE...)" >&2; exit 2 ;;
    *) files+=("$1") ;;
  esac
  shift
done
((${#files[@]})) || { echo "check-glibc.sh: no files given (usage: [--max 2.28] FILE...)" >&2; exit 2; }
[[ "$max" =~ ^2\.[0-9]+$ ]] || { echo "check-glibc.sh: --max $max is not a version like 2.28" >&2; exit 2; }
command -v objdump >/dev/null || { echo "check-glibc.sh: objdump (binutils) is required" >&2; exit 1; }

# True when version $1 is above version $2.
above() { [[ "$1" != "$2" && "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n1)" == "$1" ]]; }

failed=0
for f in "${files[@]}"; do
  if ! dump=$(objdump -T "$f" 2>&1); then
    echo "check-glibc.sh: $f: objdump -T failed: ${dump%%$'\n'*}" >&2
    failed=1
    continue
  fi
  # "version symbol" for each symbol the file needs (*UND*) from a numbered GLIBC_ version;
  # GLIBC_PRIVATE and the like carry no number.
  needs=$(awk '/\*UND\*/ && match($0, /GLIBC_[0-9][0-9.]*/) { print substr($0, RSTART + 6, RLENGTH - 6), $NF }' <<<"$dump" | sort -V -u)
  if [[ -z "$needs" ]]; then
    echo "check-glibc.sh: $f: needs no versioned glibc symbol (static, or not linked against glibc?)" >&2
    failed=1
    continue
  fi
  highest=$(cut -d' ' -f1 <<<"$needs" | sort -V | tail -n1)
  if above "$highest" "$max"; then
    echo "$f: GLIBC_$highest > GLIBC_$max"
    # The symbols over the floor, so the failure says what to get rid of.
    while read -r version symbol; do
      if above "$version" "$max"; then echo "  needs GLIBC_$version: $symbol"; fi
    done <<<"$needs"
    failed=1
  else
    echo "$f: GLIBC_$highest <= GLIBC_$max"
  fi
done
exit "$failed"
