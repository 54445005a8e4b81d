#!/usr/bin/env bash
# Benchmark of the SQLite extension (one command): a one-row INSERT commit through the VFS
# against a local single-node ursula beside the same commit on plain SQLite in WAL mode, and a
# rebuild of a 100 MiB database on a new host. Replaces the "SQLite extension" section of
# docs/benchmarks.md with the tables it prints.
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
. scripts/lib.sh
cargo build --release -p ursula -p sqlite-ursula-vfs >&2
cargo build --release -p ursula-vfs-tests --bin vfs-bench >&2
tables=$(./target/release/vfs-bench 2>/dev/null)
echo "$tables"
node_tables=""
if [[ -x scripts/bench-node.sh ]]; then
  node_tables=$(scripts/bench-node.sh 2>/dev/null || true)
fi
section=$(cat <<MD
## SQLite extension

\`scripts/bench-vfs.sh\`, $(date -u '+%Y-%m-%d %H:%M UTC'), release build, $(nproc) cores. A one-row
\`INSERT\` commit, one transaction each, through \`sqlite-ursula-vfs\` against a single-node
\`ursula\` on loopback (in memory), beside the same commit on plain SQLite in WAL mode
(\`synchronous=FULL\`), in one run; then a 100 MiB database of random rows written in 4 MiB
transactions and rebuilt on a "new host" (a fresh directory in a child process, whose peak RSS
is reported).

$tables
${node_tables:+
$node_tables}
MD
)
doc=docs/benchmarks.md
touch "$doc"
replace_doc_section "$doc" "SQLite extension" "$section"
