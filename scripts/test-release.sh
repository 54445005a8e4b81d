#!/usr/bin/env bash
# The release, for real (docs/release.md): builds dist/ with scripts/release.sh, checks the
# artifacts (glibc floor, exports, the npm layout), builds the Docker image, and runs it:
#   1. the spec's throwaway node: ready and healthy, the README's curl quick start, the npm
#      package (the two packed tarballs installed offline) running examples/notes, the released
#      libsqlite_ursula_vfs.so in pysqlite3 running ursula_attach; `docker stop` exits 0 within
#      the spec's 20 s shutdown deadline and removes the temporary WAL;
#   2. a node that keeps its data: a mounted config (--config) and a WAL volume; appends read
#      back byte for byte after a container restart and in a new container on the volume.
# Containers use the host network and loopback only (127.0.0.1:4437, the spec's port, which
# nothing else of the test run uses while this runs).
#
# Usage: scripts/test-release.sh [--no-build]
#   --no-build  test the dist/ an earlier scripts/release.sh left, instead of building it
# Needs root on Debian 12: installs docker.io and debootstrap when missing, starts dockerd
# (--bridge=none --iptables=false) when no daemon answers and stops it at the end, and makes
# the base image (scripts/make-base-image.sh) when the daemon lacks it.
set -euo pipefail
shopt -s inherit_errexit
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
cd "$root"

build=1
case "${1:-}" in
  "") ;;
  --no-build) build=0 ;;
  *) echo "test-release.sh: unknown argument $1 (usage: [--no-build])" >&2; exit 2 ;;
esac

t0=$SECONDS
timings=()
phase_start=$SECONDS
step() {
  timings+=("$(printf '%-64s %4d s' "${current:-setup}" $((SECONDS - phase_start)))")
  current=$*
  phase_start=$SECONDS
  printf '\n== release test: %s\n' "$*" >&2
}
fail() {
  echo "test-release.sh: FAILED: $*" >&2
  exit 1
}
pass() { echo "  ok: $*" >&2; }

version=$(node -p 'require("./js/package.json").version')
image="ghcr.io/tonbo-io/ursula:$version"
port=4437
base="http://127.0.0.1:$port"
tag="ursula-release-test-$$"
work=$(mktemp -d)
containers=()
volume=""
dockerd_pid=""

cleanup() {
  local rc=$?
  set +e
  for c in "${containers[@]}"; do
    if ((rc != 0)); then
      echo "--- docker logs $c (last 40 lines)" >&2
      docker logs --tail 40 "$c" >&2 2>&1
    fi
    docker rm -f "$c" >/dev/null 2>&1
  done
  [[ -n "$volume" ]] && docker volume rm -f "$volume" >/dev/null 2>&1
  if [[ -n "$dockerd_pid" ]]; then
    echo "test-release.sh: stopping the dockerd this script started ($dockerd_pid)" >&2
    kill "$dockerd_pid" 2>/dev/null
    wait "$dockerd_pid" 2>/dev/null
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

apt_install() {
  ((EUID == 0)) || fail "$* missing and not root: install them (apt-get install -y $*)"
  (apt-get install -y "$@" || (apt-get update && apt-get install -y "$@")) >/dev/null
}

# ---------------------------------------------------------------------------------------------
step "scripts/release.sh"
if ((build)); then
  scripts/release.sh
else
  [[ -f dist/SHA256SUMS ]] || fail "--no-build, but dist/ holds no release (run scripts/release.sh)"
  [[ ! -f dist/PROFILE ]] || echo "test-release.sh: note: dist/ was built with profile $(cat dist/PROFILE)" >&2
fi
(cd dist && sha256sum --quiet -c SHA256SUMS) || fail "dist/ does not match its SHA256SUMS"

# ---------------------------------------------------------------------------------------------
step "artifacts: glibc floor, exports, npm layout"
main_tgz="dist/tonbo-sqlite-ursula-$version.tgz"
platform_tgz="dist/tonbo-sqlite-ursula-linux-x64-gnu-$version.tgz"
for f in dist/ursula dist/ursulactl dist/libsqlite_ursula_vfs.so "$main_tgz" "$platform_tgz"; do
  [[ -s "$f" ]] || fail "$f is missing"
  echo "  $(du -h "$f" | cut -f1)	$f" >&2
done
mkdir -p "$work/main" "$work/platform"
tar -xzf "$main_tgz" -C "$work/main"
tar -xzf "$platform_tgz" -C "$work/platform"
addon="$work/platform/package/sqlite-ursula.linux-x64-gnu.node"
[[ -f "$addon" ]] || fail "the platform package holds no sqlite-ursula.linux-x64-gnu.node"
if [[ -n "$(find "$work/main" -name '*.node')" ]]; then
  fail "the main package holds an addon: $(find "$work/main" -name '*.node')"
fi
node -e '
  const [main, platform, version] = [require(process.argv[1]), require(process.argv[2]), process.argv[3]];
  const want = (what, ok) => { if (!ok) { console.error("test-release.sh: FAILED: " + what); process.exit(1); } };
  want(`main is @tonbo/sqlite-ursula@${version}`, main.name === "@tonbo/sqlite-ursula" && main.version === version);
  want(`platform is @tonbo/sqlite-ursula-linux-x64-gnu@${version}`, platform.name === "@tonbo/sqlite-ursula-linux-x64-gnu" && platform.version === version);
  want("main optionally depends on exactly that version", JSON.stringify(main.optionalDependencies) === JSON.stringify({ [platform.name]: version }));
  want("platform os/cpu/libc/main", JSON.stringify([platform.os, platform.cpu, platform.libc, platform.main]) === JSON.stringify([["linux"], ["x64"], ["glibc"], "sqlite-ursula.linux-x64-gnu.node"]));
' "$work/main/package/package.json" "$work/platform/package/package.json" "$version"
pass "npm layout: main $version without an addon, optional dependency on the platform package that holds it"
# The floor of the spec's install page; the addon is checked as npm installs it.
scripts/check-glibc.sh --max 2.28 dist/ursula dist/ursulactl dist/libsqlite_ursula_vfs.so "$addon" \
  || fail "a release artifact needs a glibc newer than 2.28"
# The check itself must be able to fail: this machine's own binaries need its glibc 2.36.
if scripts/check-glibc.sh --max 2.28 /bin/ls >/dev/null 2>&1; then
  fail "check-glibc.sh passed /bin/ls, which is linked against this machine's glibc (> 2.28)"
fi
pass "check-glibc.sh refuses /bin/ls (this machine's glibc)"
nm -D --defined-only dist/libsqlite_ursula_vfs.so | grep -w sqlite3_sqliteursulavfs_init >/dev/null \
  || fail "libsqlite_ursula_vfs.so does not export sqlite3_sqliteursulavfs_init"
for sym in napi_register_module_v1 sqlite3_sqliteursulavfs_init; do
  nm -D --defined-only "$addon" | grep -w "$sym" >/dev/null || fail "the addon does not export $sym"
done
dist/ursula --version >&2 && dist/ursulactl --version >&2
dist/ursulagw --version | grep -q '^ursulagw ' || fail "dist/ursulagw does not run the gateway"

# ---------------------------------------------------------------------------------------------
step "docker: daemon and base image"
command -v dockerd >/dev/null || apt_install docker.io
command -v debootstrap >/dev/null || apt_install debootstrap
if ! docker info >/dev/null 2>&1; then
  echo "test-release.sh: no Docker daemon answers: starting dockerd --bridge=none --iptables=false" >&2
  dockerd --bridge=none --iptables=false >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 150); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || { cat "$work/dockerd.log" >&2; fail "dockerd exited"; }
    sleep 0.2
  done
  docker info >/dev/null 2>&1 || { tail -n 20 "$work/dockerd.log" >&2; fail "dockerd did not answer within 30 s"; }
fi
scripts/make-base-image.sh debian:bookworm-slim

# ---------------------------------------------------------------------------------------------
step "docker build $image"
# The legacy builder: the daemon here (Debian's 20.10) has no BuildKit client to go with it.
# The host network only for the RUN step's apt-get (no bridge here).
DOCKER_BUILDKIT=0 docker build --network host -t "$image" . >"$work/build.log" 2>&1 \
  || { tail -n 30 "$work/build.log" >&2; fail "docker build"; }
image_size=$(docker image inspect -f '{{.Size}}' "$image")
echo "  image $image: $((image_size / 1000000)) MB" >&2
[[ "$(docker image inspect -f '{{.Config.User}}' "$image")" == "10001:10001" ]] || fail "the image's USER is not 10001:10001"
[[ "$(docker run --rm --network host "$image" id -u)" == 10001 ]] || fail "the image does not run as uid 10001"
docker run --rm --network host "$image" sh -c 'command -v ursula && command -v ursulactl && command -v ursulagw && ursula --version && ursulactl --version && ursulagw --version' >&2 \
  || fail "ursula, ursulactl and ursulagw are not all on the image's PATH"
[[ "$(docker image inspect -f '{{json .Config.ExposedPorts}}' "$image")" == '{"4437/tcp":{}}' ]] || fail "the image does not expose 4437"
[[ "$(docker image inspect -f '{{json .Config.Healthcheck.Test}}' "$image")" == *"ursulactl ready"* ]] || fail "no ursulactl ready health check"
[[ "$(docker run --rm --network host "$image" ursula --version)" == "ursula $version" ]] \
  || fail "the image's ursula --version is not ursula $version"
[[ "$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' "$image")" == "$version" ]] \
  || fail "the image's version label is not $version"
[[ "$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.licenses"}}' "$image")" == Apache-2.0 ]] \
  || fail "the image's licenses label is not Apache-2.0"
docker run --rm --network host "$image" cat /usr/share/doc/ursula/LICENSE | cmp -s - LICENSE \
  || fail "the image does not carry LICENSE at /usr/share/doc/ursula/LICENSE"
pass "non-root (10001), ursula and ursulactl on PATH, version $version, LICENSE, EXPOSE 4437, health check"

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }
# Waits until the container answers /__ursula/ready with 200, failing if it stops first.
wait_ready() {
  local c=$1
  for _ in $(seq 300); do
    curl -sf -o /dev/null "$base/__ursula/ready" && return 0
    [[ "$(docker inspect -f '{{.State.Running}}' "$c")" == true ]] || fail "container $c stopped before it was ready"
    sleep 0.1
  done
  fail "container $c was not ready within 30 s"
}
# Stops a container as `docker stop` does (SIGTERM, SIGKILL after 30 s) and checks that it
# exited 0, by itself, within the spec's 20 s deadline.
stop_cleanly() {
  local c=$1 start=$SECONDS took
  docker stop -t 30 "$c" >/dev/null
  took=$((SECONDS - start))
  local code oom
  code=$(docker inspect -f '{{.State.ExitCode}}' "$c")
  oom=$(docker inspect -f '{{.State.OOMKilled}}' "$c")
  [[ "$code" == 0 && "$oom" == false ]] || fail "$c exited with $code (OOM killed: $oom) after docker stop"
  ((took <= 20)) || fail "$c took $took s to stop, beyond the spec's 20 s deadline"
  # Whole outputs into variables before grep: `grep -q` would end a pipe early, and with
  # pipefail the writer's SIGPIPE would turn a match into a failure.
  local log
  log=$(docker logs "$c" 2>&1)
  grep -F "ursula node stopped" <<<"$log" >/dev/null || fail "$c did not log a clean stop"
  pass "docker stop: $c exited 0 in $took s"
}

# ---------------------------------------------------------------------------------------------
step "the spec's node: docker run $image"
port_free || fail "127.0.0.1:$port is taken: the quick start needs it"
quick="$tag-quick"
containers+=("$quick")
# The spec's `docker run --rm -p 4437:4437 IMAGE`, on the host network (no bridge here); kept
# after it stops (no --rm) to read its exit code. The health check runs every second here.
docker run -d --name "$quick" --network host --health-interval 1s "$image" >/dev/null
wait_ready "$quick"
for _ in $(seq 100); do
  [[ "$(docker inspect -f '{{.State.Health.Status}}' "$quick")" == healthy ]] && break
  sleep 0.2
done
[[ "$(docker inspect -f '{{.State.Health.Status}}' "$quick")" == healthy ]] || fail "the health check did not report healthy"
pass "ready, and healthy by its health check"
metrics=$(curl -sf "$base/__ursula/metrics")
engine=$(node -p 'JSON.parse(process.argv[1]).engine' "$metrics")
[[ "$engine" == raft ]] || fail "the node runs the $engine engine, not Raft"
wal=$(docker exec "$quick" sh -c 'ls -d /tmp/ursula-wal-*') || fail "no temporary WAL under /tmp"
docker exec "$quick" sh -c "test -n \"\$(ls -A $wal)\"" || fail "the temporary WAL $wal is empty"
pass "a Raft node with its WAL in $wal"

step "the README's curl quick start"
# The fenced block after the README's <!-- quick-start-curl --> marker, run as the README
# gives it, with each curl bounded; the SSE tail never ends, so its timeout is its success.
block=$(awk '/<!-- quick-start-curl/ { m = 1; next } m && /^```/ { if (in_block) exit; in_block = 1; next } in_block' README.md)
[[ "$block" == *"curl -X PUT $base/demo/hello"* ]] || fail "no curl quick start after <!-- quick-start-curl --> in README.md"
quick_start() {
  curl() {
    local rc=0 sse=0
    [[ "$*" == *live=sse* ]] && sse=1
    # -s only: the SSE tail's timeout is expected, and any other failure is reported below.
    command curl -s --max-time $((sse ? 3 : 10)) "$@" || rc=$?
    echo
    ((rc == 0 || (sse && rc == 28))) || { echo "test-release.sh: curl $* failed ($rc)" >&2; return 1; }
  }
  eval "$block"
}
qs=$(quick_start) || fail "the README's curl quick start"
qs=$(tr -d '\r' <<<"$qs")
cut -c1-160 <<<"$qs" | sed 's/^/    /' >&2
grep -q '^HTTP/1.1 200' <<<"$qs" || fail "the catch-up read did not answer 200"
grep -qx 'first messagesecond message' <<<"$qs" || fail "the catch-up read did not return both messages"
# The SSE tail of a binary stream carries base64 in its data events.
sse=$(awk '/^event: data$/ { d = 1; next } d && /^data:/ { sub(/^data: ?/, ""); print; d = 0 }' <<<"$qs" \
  | while read -r line; do base64 -d <<<"$line"; done)
[[ "$sse" == "first messagesecond message" ]] || fail "the SSE tail's data events carried '$sse'"
[[ "$(tail -n1 <<<"$qs" | node -p 'JSON.parse(require("fs").readFileSync(0, "utf8")).streams')" == 1 ]] \
  || fail "the metrics do not count the one stream"
pass "create, append, read, SSE and metrics as the README shows"

step "the image's client port takes no peer RPC (docs/security.md)"
# The bucket purge a stranger once sent to the propose RPC of every group, as the node's own
# operator command encodes it: {"Purge": ["demo", false]}.
printf '\x81\xa5Purge\x92\xa4demo\xc2' >"$work/purge.bin"
groups=$(curl -sf "$base/__ursula/metrics" | node -p 'JSON.parse(require("fs").readFileSync(0, "utf8")).group_count')
for ((g = 0; g < groups; g++)); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data-binary "@$work/purge.bin" \
    -H 'x-ursula-raft-from: 2' -H 'x-ursula-raft-to: 1' "$base/__ursula/raft-rpc/$g/propose")
  [[ "$code" == 421 ]] || fail "group $g's propose RPC answered $code, not 421"
done
[[ "$(curl -s "$base/demo/hello?offset=-1")" == "first messagesecond message" ]] \
  || fail "the stream demo/hello did not survive the forged purges"
pass "every group's propose RPC answered 421; demo/hello kept both messages"

step "npm: the packed tarballs offline, examples/notes"
node=$(scripts/install-node.sh)
app="$work/app"
mkdir -p "$app"
echo '{"name": "app", "private": true, "type": "module"}' >"$app/package.json"
# --offline: the two tarballs are everything; the platform tarball satisfies the optional
# dependency, so npm asks no registry.
(cd "$app" && PATH="$(dirname "$node"):$PATH" npm install --offline --no-audit --no-fund \
  "$root/$main_tgz" "$root/$platform_tgz" >&2) || fail "npm install --offline of the two tarballs"
[[ -f "$app/node_modules/@tonbo/sqlite-ursula-linux-x64-gnu/sqlite-ursula.linux-x64-gnu.node" ]] \
  || fail "npm did not install the platform package"
cp examples/notes/index.mjs "$app/"
notes() {
  (cd "$app" && env -u SQLITE_URSULA_VFS -u URSULA_STREAM_URL XDG_CACHE_HOME="$work/cache" "$node" index.mjs 2>"$work/notes.err")
}
first=$(notes) || { cat "$work/notes.err" >&2; fail "examples/notes (first run)"; }
[[ "$first" == "[ [Object: null prototype] { id: 1, body: 'hello' } ]" ]] || fail "examples/notes printed: $first"
second=$(notes) || { cat "$work/notes.err" >&2; fail "examples/notes (second run)"; }
[[ "$second" == *"id: 2, body: 'hello'"* ]] || fail "examples/notes (second run) printed: $second"
pass "examples/notes against the container: $first, then two rows"
# Without the platform package the loader has no addon: the runs above used the platform's.
mv "$app/node_modules/@tonbo/sqlite-ursula-linux-x64-gnu" "$work/platform-moved"
if notes >/dev/null; then fail "examples/notes ran without the platform package"; fi
grep -q "no prebuilt sqlite-ursula-vfs for linux-x64-gnu" "$work/notes.err" || { cat "$work/notes.err" >&2; fail "the loader's error without the platform package"; }
pass "without the platform package the loader says there is no prebuilt"

step "pysqlite3: the released libsqlite_ursula_vfs.so, ursula_attach"
pyvenv="$root/.tools/pyvenv"
if ! "$pyvenv/bin/python" -c 'import pysqlite3' 2>/dev/null; then
  rm -rf "$pyvenv"
  python3 -m venv "$pyvenv" >&2 || { apt_install python3-venv; python3 -m venv "$pyvenv" >&2; }
  "$pyvenv/bin/pip" install --quiet --disable-pip-version-check "pysqlite3-binary==0.5.4.post2" >&2
fi
# The same host script the extension's own tests run: attach, commit, rebuild a read-only copy.
py=$("$pyvenv/bin/python" vfs-tests/python/pysqlite3_host.py "$root/dist/libsqlite_ursula_vfs.so" \
  "$base/demo/python" "$work/owner.db" "$work/copy.db") || fail "pysqlite3 with the released extension"
[[ "$py" == "pysqlite3 "*" ok" ]] || fail "pysqlite3 host printed: $py"
offset=$(curl -sfI "$base/demo/python" | tr -d '\r' | awk -F': ' 'tolower($1) == "stream-next-offset" { print $2 }')
[[ -n "$offset" && "$offset" != "0" && "$offset" != 0000000000000000_0000000000000000 ]] || fail "the stream demo/python is empty (next offset '$offset')"
pass "$py; the container's stream demo/python is at $offset"

step "docker stop (SIGTERM)"
stop_cleanly "$quick"
changes=$(docker diff "$quick")
if grep -F /tmp/ursula-wal- <<<"$changes"; then fail "the temporary WAL outlived a clean stop"; fi
pass "the temporary WAL is gone"

# ---------------------------------------------------------------------------------------------
step "a node that keeps its data: --config and a WAL volume"
port_free || fail "127.0.0.1:$port is still taken after the stop"
volume="$tag-wal"
docker volume create "$volume" >/dev/null
mkdir -p "$work/config"
cat >"$work/config/ursula.toml" <<EOF
[server]
listen = "0.0.0.0:$port"
[raft.wal]
path = "/var/lib/ursula/wal"
EOF
chmod 0755 "$work/config" && chmod 0644 "$work/config/ursula.toml"
durable() {
  docker run -d --name "$1" --network host -v "$work/config:/config:ro" -v "$volume:/var/lib/ursula" \
    "$image" ursula server --config /config/ursula.toml >/dev/null
}
keep="$tag-keep"
containers+=("$keep")
durable "$keep"
wait_ready "$keep"
log=$(docker logs "$keep" 2>&1)
if grep -F "temporary directory" <<<"$log"; then fail "the mounted config's raft.wal.path was not used"; fi
# Three appends: text, 64 KiB of random bytes, and bytes a text path would mangle.
printf 'first append\n' >"$work/a1"
head -c 65536 /dev/urandom >"$work/a2"
printf '\x00\r\n\xff\xfe tail' >"$work/a3"
cat "$work/a1" "$work/a2" "$work/a3" >"$work/expected"
curl -sf -X PUT "$base/keep" >/dev/null || fail "PUT /keep"
curl -sf -X PUT "$base/keep/log" -H 'Content-Type: application/octet-stream' >/dev/null || fail "PUT /keep/log"
for a in a1 a2 a3; do
  curl -sf -X POST "$base/keep/log" -H 'Content-Type: application/octet-stream' --data-binary "@$work/$a" >/dev/null \
    || fail "append $a"
done
read_back() {
  curl -sf -o "$work/got" "$base/keep/log?offset=-1" || fail "GET /keep/log ($1)"
  cmp "$work/expected" "$work/got" || fail "the stream's bytes differ from the appends ($1)"
  pass "read back $(stat -c %s "$work/got") bytes, identical ($1)"
}
read_back "before the restart"
stop_cleanly "$keep"
[[ -n "$(docker run --rm --network host -v "$volume:/var/lib/ursula" "$image" ls -A /var/lib/ursula/wal)" ]] \
  || fail "the WAL volume is empty after the stop"
docker start "$keep" >/dev/null
wait_ready "$keep"
read_back "after docker restart"
stop_cleanly "$keep"
# A new container on the same volume (an upgrade replaces the container, not the volume).
again="$tag-again"
containers+=("$again")
durable "$again"
wait_ready "$again"
read_back "in a new container on the volume"
printf 'after the restarts' >"$work/a4"
curl -sf -X POST "$base/keep/log" -H 'Content-Type: application/octet-stream' --data-binary "@$work/a4" >/dev/null \
  || fail "append after the restarts"
cat "$work/a4" >>"$work/expected"
read_back "with an append after the restarts"
stop_cleanly "$again"

step "done"
echo "test-release.sh: all release checks passed in $((SECONDS - t0)) s; image $image $((image_size / 1000000)) MB" >&2
printf '  %s\n' "${timings[@]:1}" >&2
