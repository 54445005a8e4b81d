#!/usr/bin/env bash
# Runs the Durable Streams server conformance suite (interop/conformance) against a server.
#
#   scripts/conformance.sh BINARY [vitest args...]      start `BINARY server --listen 127.0.0.1:PORT`
#   scripts/conformance.sh --reference [vitest args...] start the Node reference server instead
#   CONFORMANCE_URL=http://127.0.0.1:4437 scripts/conformance.sh [vitest args...]
#                                                       test an already running server
#
# Extra args go to vitest, e.g. -t "offset=now with long-poll" to run one test.
# Prints one line "N passed, N failed[, N skipped]", then exits non-zero iff some failure is not
# listed in interop/conformance/expected-failures.txt (one full name "Group › Sub › test" per line,
# `#` comments, a trailing `*` means prefix match). Expected failures that now pass are warnings.
#
# env: CONFORMANCE_SUBSCRIPTIONS=1  also run "Reserved subscription APIs" (reference: WEBHOOKS=1)
#      CONFORMANCE_LONGPOLL_MS=N    passed to the suite (per-test timeout of 3 long-poll tests)
#      REFERENCE_LONG_POLL_MS=N     reference server's long-poll timeout (default 500; the suite
#                                   needs it well under 5 s)
#      CONFORMANCE_OUT=DIR          keep conf.json and server.log in DIR (default: temp, removed)
#      CONFORMANCE_EXPECTED=FILE    alternative expected-failures file (--reference defaults to
#                                   interop/conformance/expected-failures.reference.txt)
#      CONFORMANCE_TIMEOUT=SECS     hard cap on the vitest run (default 1200)
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$script_dir/lib.sh"
root=$(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null || (cd "$script_dir/.." && pwd))
conf_dir="$root/interop/conformance"

usage() { echo "usage: $0 BINARY|--reference [vitest args...]  (or CONFORMANCE_URL=... $0)" >&2; exit 2; }

mode=url
if [[ -z "${CONFORMANCE_URL:-}" ]]; then
  [[ $# -ge 1 ]] || usage
  case "$1" in
    --reference) mode=reference ;;
    -*) usage ;;
    *) mode=binary; binary=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
       [[ -x "$binary" ]] || { echo "conformance.sh: $1 is not an executable" >&2; exit 2; } ;;
  esac
  shift
elif [[ "${1:-}" == "--reference" ]] || [[ $# -ge 1 && "$1" != -* ]]; then
  # With CONFORMANCE_URL set no server is started; drop a BINARY/--reference argument.
  echo "conformance.sh: CONFORMANCE_URL is set, not starting $1" >&2; shift
fi

# The reference server has its own known gaps against suite 0.3.6 (newer protocol features).
default_expected=$conf_dir/expected-failures.txt
[[ $mode == reference ]] && default_expected=$conf_dir/expected-failures.reference.txt
expected="${CONFORMANCE_EXPECTED:-$default_expected}"

# --- Node: vitest 4 / vite 8 need ^20.19 || >=22.12; else fetch Node 22 from npm ------------------
interop_node

# --- npm deps (pinned by package-lock.json) ------------------------------------------------------
if [[ ! -f "$conf_dir/node_modules/vitest/vitest.mjs" ||
      ! -d "$conf_dir/node_modules/@durable-streams/server-conformance-tests" ]]; then
  echo "conformance.sh: npm ci in interop/conformance" >&2
  (cd "$conf_dir" && npm ci --no-audit --no-fund >&2)
fi

# --- scratch dir and cleanup ---------------------------------------------------------------------
if [[ -n "${CONFORMANCE_OUT:-}" ]]; then out=$CONFORMANCE_OUT; mkdir -p "$out"; keep=1
else out=$(mktemp -d "${TMPDIR:-/tmp}/conformance.XXXXXX"); keep=0; fi
server_pid=""
cleanup() {
  stop_pid "$server_pid"
  [[ $keep == 1 ]] || rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- start the server ----------------------------------------------------------------------------
free_port() {
  # Let the kernel pick a free loopback port (tiny race until the server binds it; acceptable).
  "$node_bin" -e 'const s=require("net").createServer();
    s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
# http_status URL -> prints the status code, or 000 if nothing answers (no curl dependency).
http_status() {
  "$node_bin" -e 'fetch(process.argv[1],{signal:AbortSignal.timeout(2000)})
    .then(r=>console.log(r.status),()=>console.log("000"))' "$1"
}
wait_ready() { # URL: wait up to 30 s for 200, failing early if the server process died
  local deadline=$((SECONDS + 30))
  while (( SECONDS < deadline )); do
    kill -0 "$server_pid" 2>/dev/null || { echo "conformance.sh: server exited during startup:" >&2
                                           tail -n 30 "$out/server.log" >&2; exit 1; }
    [[ "$(http_status "$1")" == 200 ]] && return 0
    sleep 0.2
  done
  echo "conformance.sh: server not ready at $1 after 30 s; log tail:" >&2
  tail -n 30 "$out/server.log" >&2
  exit 1
}

case $mode in
  url) url=$CONFORMANCE_URL ;;
  binary)
    port=$(free_port); url="http://127.0.0.1:$port"
    "$binary" server --listen "127.0.0.1:$port" --admin-listen off >"$out/server.log" 2>&1 &
    server_pid=$!
    wait_ready "$url/__ursula/ready" ;;
  reference)
    port=$(free_port); url="http://127.0.0.1:$port"
    webhooks=0; [[ "${CONFORMANCE_SUBSCRIPTIONS:-}" == 1 ]] && webhooks=1
    (cd "$conf_dir" && PORT=$port LONG_POLL_MS="${REFERENCE_LONG_POLL_MS:-500}" WEBHOOKS=$webhooks \
       exec "$node_bin" reference-server.mjs) >"$out/server.log" 2>&1 &
    server_pid=$!
    # The reference server has no readiness endpoint; any answer (404 here) means it is up.
    deadline=$((SECONDS + 30))
    until [[ "$(http_status "$url/v1/stream/__ready_probe__")" != 000 ]]; do
      kill -0 "$server_pid" 2>/dev/null && (( SECONDS < deadline )) ||
        { echo "conformance.sh: reference server failed to start:" >&2; tail -n 30 "$out/server.log" >&2; exit 1; }
      sleep 0.2
    done ;;
esac
echo "conformance.sh: testing $url (node $("$node_bin" --version))" >&2

# --- run the suite -------------------------------------------------------------------------------
# --testTimeout=40000: a few long-poll tests set no timeout of their own and would die at vitest's
# 5 s default against a server with a long long-poll timeout.
rc=0
(cd "$conf_dir" && CONFORMANCE_TEST_URL=$url timeout "${CONFORMANCE_TIMEOUT:-1200}" \
   "$node_bin" node_modules/vitest/vitest.mjs run conformance.test.mjs \
   --reporter=dot --reporter=json --outputFile.json="$out/conf.json" --testTimeout=40000 "$@") || rc=$?

if [[ ! -s "$out/conf.json" ]]; then
  echo "conformance.sh: vitest produced no JSON report (exit $rc)" >&2
  exit $(( rc == 0 ? 1 : rc ))
fi

# --- summarise and compare with expected failures ------------------------------------------------
"$node_bin" - "$out/conf.json" "$expected" <<'JS'
const fs = require("fs")
const [report, expectedFile] = process.argv.slice(2)
const r = JSON.parse(fs.readFileSync(report, "utf8"))
const tests = r.testResults.flatMap((f) => f.assertionResults.map((a) => ({
  name: [...a.ancestorTitles, a.title].join(" › "), status: a.status })))
const passed = tests.filter((t) => t.status === "passed")
const failed = tests.filter((t) => t.status === "failed")
const skipped = tests.length - passed.length - failed.length
console.log(`${passed.length} passed, ${failed.length} failed` + (skipped ? `, ${skipped} skipped` : ""))

const entries = fs.existsSync(expectedFile) ? fs.readFileSync(expectedFile, "utf8").split("\n")
  .map((l) => l.trim()).filter((l) => l && !l.startsWith("#")) : []
const matches = (e, name) => e.endsWith("*") ? name.startsWith(e.slice(0, -1)) : name === e
const isExpected = (name) => entries.some((e) => matches(e, name))

let bad = 0
const unexpected = failed.filter((t) => !isExpected(t.name))
if (unexpected.length) {
  bad = 1
  console.error(`\nUNEXPECTED FAILURES (${unexpected.length}):`)
  for (const t of unexpected) console.error(`  ${t.name}`)
}
// A test file that failed to load/collect shows up as a failed file with no failed test.
for (const f of r.testResults) if (f.status === "failed" && !f.assertionResults.some((a) => a.status === "failed")) {
  bad = 1; console.error(`\nTEST FILE FAILED: ${f.name}\n${f.message ?? ""}`)
}
if (tests.length === 0) { bad = 1; console.error("no tests ran") }

const warn = []
for (const e of entries) {
  const hit = tests.filter((t) => matches(e, t.name))
  const nowPass = hit.filter((t) => t.status === "passed")
  if (e.endsWith("*") && nowPass.length) warn.push(`${e}  (${nowPass.length} of ${hit.length} now pass)`)
  else if (!e.endsWith("*") && nowPass.length) warn.push(e)
}
if (warn.length) {
  console.error(`\nwarning: expected failures that now pass (${warn.length}) — remove them from the list:`)
  for (const w of warn) console.error(`  ${w}`)
}
process.exit(bad)
JS
