#!/usr/bin/env bash
# Cold catch-up reads against hot reads, one run: a single node with an S3 cold tier on a local
# SeaweedFS. One stream is written and flushed whole to the object store ("cold"), another is
# written on a node whose flush threshold it never reaches ("hot"); then both are read from
# offset 0 to the tail by sequential catch-up GETs (8 MiB each, the read cap), three rounds.
# Prints the table of the "Cold tier" section of docs/benchmarks.md. PROFILE=ci reuses the CI build.
set -euo pipefail
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
. scripts/lib.sh
profile=${PROFILE:-release}
cargo build --profile "$profile" -p ursula >&2
bin=target/$profile/ursula
weed=$(scripts/install-s3.sh)
mib=${BENCH_MIB:-128}
work=$(mktemp -d)
pids=()
# Servers are started inside command substitutions (subshells), so their pids go to a file.
stop_all() { for p in "${pids[@]}" $(cat "$work/pids" 2>/dev/null); do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
trap 'stop_all; rm -rf "$work"' EXIT

# SeaweedFS on ports of its own, loopback only.
p=(); for _ in $(seq 10); do p+=("$(free_port)"); done
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret
mkdir -p "$work/weed"
"$weed" -logdir="$work/weed" mini -dir="$work/weed" -ip=127.0.0.1 -ip.bind=127.0.0.1 -admin.ui=false -webdav=false \
  -master.port="${p[0]}" -master.port.grpc="${p[1]}" -volume.port="${p[2]}" -volume.port.grpc="${p[3]}" \
  -filer.port="${p[4]}" -filer.port.grpc="${p[5]}" -s3.port="${p[6]}" -s3.port.grpc="${p[7]}" \
  -admin.port="${p[8]}" -admin.port.grpc="${p[9]}" -bucket=bench -master.telemetry=false >"$work/weed.log" 2>&1 &
pids+=($!)
s3="http://127.0.0.1:${p[6]}"
for _ in $(seq 300); do curl -s -o /dev/null "$s3/" && break; sleep 0.1; done
sleep 2

node() { # name flush_size
  local np; np=$(free_port)
  cat >"$work/$1.toml" <<TOML
[storage.cold]
backend = "s3"
root = "bench-$1"
flush_size = $2
flush_interval = "100ms"
flush_max_concurrency = 8
max_hot_size_per_group = 0
[storage.cold.s3]
bucket = "bench"
endpoint = "$s3"
region = "us-east-1"
access_key_id = "bench"
secret_access_key = "bench-secret"
server_side_encryption = "none"
TOML
  "$bin" server --config "$work/$1.toml" --listen "127.0.0.1:$np" --admin-listen off >"$work/$1.log" 2>&1 &
  echo $! >>"$work/pids"
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$np/__ursula/ready" >/dev/null && break; sleep 0.1; done
  echo "http://127.0.0.1:$np"
}
# Retry until weed's bucket takes writes (the node refuses to start on a store it cannot use).
for _ in $(seq 30); do cold=$(node cold 1) && curl -sf "$cold/__ursula/ready" >/dev/null && break; sleep 1; done
hot=$(node hot 1099511627776)

python3 - "$cold" "$hot" "$mib" <<'PY'
import sys, time, urllib.request, json
cold, hot, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
chunk = bytes(range(256)) * 256  # 64 KiB
def req(method, url, body=None, headers={}):
    r = urllib.request.Request(url, data=body, method=method, headers=headers)
    with urllib.request.urlopen(r) as resp:
        return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
def fill(base):
    req("PUT", f"{base}/bench/s", b"", {"content-type": "application/octet-stream"})
    for _ in range(mib * 16):
        req("POST", f"{base}/bench/s", chunk, {"content-type": "application/octet-stream"})
def head(base):
    _, h, _ = req("HEAD", f"{base}/bench/s")
    return int(h["stream-cold-hot-start-offset"]), int(h["stream-next-offset"])
def read_all(base):
    off, total, t0 = 0, 0, time.perf_counter()
    while True:
        _, h, body = req("GET", f"{base}/bench/s?offset={off:020d}")
        total += len(body)
        off = int(h["stream-next-offset"])
        if h.get("stream-up-to-date") == "true":
            break
    return total, time.perf_counter() - t0
fill(cold); fill(hot)
deadline = time.time() + 120
while head(cold)[0] != head(cold)[1]:
    assert time.time() < deadline, "the cold stream never flushed whole"
    time.sleep(0.2)
assert head(hot)[0] == 0, "the hot stream was flushed"
rows = {}
for name, base in (("cold (S3 range GETs)", cold), ("hot (memory)", hot)):
    rates = []
    for _ in range(3):
        total, secs = read_all(base)
        assert total == mib << 20, (name, total)
        rates.append(total / secs / 1e6)
    rows[name] = rates
print(f"| catch-up read of a {mib} MiB stream, 8 MiB per GET | round 1 | round 2 | round 3 | best |")
print("| --- | ---: | ---: | ---: | ---: |")
for name, r in rows.items():
    print(f"| {name} | " + " | ".join(f"{x:,.0f} MB/s" for x in r) + f" | {max(r):,.0f} MB/s |")
c, h = max(rows["cold (S3 range GETs)"]), max(rows["hot (memory)"])
print(f"\nCold reads reach {c / h:.2f}x the hot rate (best rounds).")
PY
