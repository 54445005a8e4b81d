#!/usr/bin/env bash
# The main job: builds `ursula` and the npm package's addon, starts a single in-memory node on
# 127.0.0.1:4437, runs the HTTP quick start against it (create, append, read, SSE), then the
# SQLite example (examples/notes: open() a replicated node:sqlite database, insert, select),
# installed from the packed npm packages on Node 22, and stops the node.
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
root=$PWD
cargo build --release -p ursula
scripts/test-js.sh --build-only
node=$(scripts/install-node.sh)
export PATH="$(dirname "$node"):$PATH"
./target/release/ursula server &
pid=$!
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -sf http://127.0.0.1:4437/__ursula/ready >/dev/null && break; sleep 0.1; done
set -x
curl -X PUT http://127.0.0.1:4437/demo
curl -X PUT http://127.0.0.1:4437/demo/hello
curl -X POST http://127.0.0.1:4437/demo/hello -H 'Content-Type: application/octet-stream' --data-binary 'first message'
curl -X POST http://127.0.0.1:4437/demo/hello -H 'Content-Type: application/octet-stream' --data-binary 'second message'
curl -i 'http://127.0.0.1:4437/demo/hello?offset=-1'
timeout 2 curl -sN 'http://127.0.0.1:4437/demo/hello?offset=-1&live=sse' || true
set +x
# The SQLite example, from the packed package, with its cache in a scratch directory.
# The main package and the platform package that holds the addon, both from this build.
mapfile -t tarballs < <(scripts/pack-npm.sh --addon js/sqlite-ursula.linux-x64-gnu.node --out "$work")
cp examples/notes/index.mjs examples/notes/package.json "$work/"
(cd "$work" && npm install --offline --silent --no-audit --no-fund "${tarballs[@]}" >/dev/null)
(cd "$work" && XDG_CACHE_HOME="$work/cache" node index.mjs)
(cd "$work" && XDG_CACHE_HOME="$work/cache" node index.mjs)
echo "demo: the notes database replicates to http://127.0.0.1:4437/demo/notes"
