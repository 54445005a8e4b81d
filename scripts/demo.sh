#!/usr/bin/env bash
# The main job: builds `ursula`, starts a single in-memory node on 127.0.0.1:4437, and runs the
# quick start against it (create, append, read, SSE), then stops the node.
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
cargo build --release -p ursula
./target/release/ursula server &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf http://127.0.0.1:4437/__ursula/ready >/dev/null && break; sleep 0.1; done
set -x
curl -X PUT http://127.0.0.1:4437/demo
curl -X PUT http://127.0.0.1:4437/demo/hello
curl -X POST http://127.0.0.1:4437/demo/hello -H 'Content-Type: application/octet-stream' --data-binary 'first message'
curl -X POST http://127.0.0.1:4437/demo/hello -H 'Content-Type: application/octet-stream' --data-binary 'second message'
curl -i 'http://127.0.0.1:4437/demo/hello?offset=-1'
timeout 2 curl -sN 'http://127.0.0.1:4437/demo/hello?offset=-1&live=sse' || true
