#!/usr/bin/env python3
"""Writes the checked-in seed corpus of the fuzz targets: fuzz/corpus/<target>/<name>.

A handful of small valid inputs per target, so that each run starts from the formats' real
shapes instead of discovering magics, lengths and checksums by chance. Binary seeds are built
from the record fixtures the server's tests pin (server/testdata/records), so they stay the
bytes this build writes; the rest is written out here. Run it after a format change:

    python3 fuzz/seeds.py

It replaces every file it names and leaves others alone (a minimized crash input added by
hand, say).
"""

import base64
import json
import pathlib
import struct
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
RECORDS = ROOT / "server" / "testdata" / "records"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


def frames(segment):
    """(header+body bytes, kind, payload) of each journal frame (server/src/raft/storage/frame.rs)."""
    at, out = 0, []
    while at < len(segment):
        length, _crc = struct.unpack_from("<II", segment, at)
        body = segment[at + 8 : at + 8 + length]
        out.append((segment[at : at + 8 + length], body[8], body[13:]))
        at += 8 + length
    return out


def sealed_body(record):
    """The MessagePack body of a sealed record (server/src/raft/storage/record.rs)."""
    return record[9:-4]


def http_request():
    t = "http_request"
    write(t, "append", "/demo/hello\ncontent-type:application/json\nstream-seq:0001\n"
          "producer-id:p1\nproducer-epoch:0\nproducer-seq:7\nstream-incarnation:00000000000000ff")
    write(t, "read-live", "/demo/hello?offset=00000000000000000042&live=sse&cursor=abc"
          "&max_bytes=1024&timeout_ms=500\nif-none-match:\"x\"")
    write(t, "read-leader", "/v1/stream/he%20llo?offset=-1&consistency=leader\n"
          "stream-closed:TRUE\ncontent-type: Text/Plain ;Charset=UTF-8 ")
    write(t, "create", "/demo/a.b-c_d/bootstrap?offset=now\nstream-ttl:3600\n"
          "content-type:application/octet-stream")
    write(t, "expires", "/demo/s/snapshot/00000000000000000007\n"
          "stream-expires-at:2030-01-02T03:04:05.678Z")
    write(t, "retention", "/demo/s/retention/00000000000000000009?record=1\n"
          "stream-record-match:x\nproducer-id:p\nproducer-id:q")
    write(t, "internal", "/__ursula/metrics\nstream-seq:1\nstream-seq:2")


def json_messages():
    t = "json_messages"
    write(t, "object", ' { "b" : 1 , "a" : [ 1.50e3 , "x y" ], "a": null } ')
    write(t, "array", '[{"a":1},{"b":[true,false]},"s",-0.5E-7,[[1,2],[3]]]')
    write(t, "escapes", '"\\ud800\\u00e9\\n\\"\\\\\\/ caf\u00e9 \U0001F600"')
    write(t, "empty", "[]")
    write(t, "deep", "[" * 20 + "]" * 20)
    write(t, "bad", '{"a" 1}')


def zstd_raw(data):
    """A zstd frame holding `data` as one raw block: the format needs no compressor."""
    assert len(data) < 256
    # Magic; frame header descriptor: single segment, 1-byte content size; the size.
    header = struct.pack("<I", 0xFD2FB528) + bytes([0x20, len(data)])
    block = (len(data) << 3) | 1  # raw block, the last
    return header + struct.pack("<I", block)[:3] + data


def vfs_frame():
    t = "vfs_frame"
    claim = bytes([2]) + struct.pack("<Q", 5) + bytes(range(16))
    commit = bytes([1]) + struct.pack("<II", 3, 1) + struct.pack("<I", 2) + bytes(4096)
    write(t, "raw-claim", bytes([0]) + claim)
    write(t, "raw-commit", bytes([0]) + commit)
    empty_commit = bytes([1]) + struct.pack("<II", 0, 0)
    stream = b""
    for raw in (claim, empty_commit):
        payload = zstd_raw(raw)
        stream += b"USQ1" + struct.pack("<II", len(payload), zlib.crc32(payload)) + payload
    write(t, "stream", bytes([1, 0x0E]) + stream)
    write(t, "stream-fixcrc", bytes([1, 0x01]) + stream + b"USQ1\x03\x00\x00\x00\x00\x00\x00\x00ab")
    offset = b"00000000000000001234"
    snapshot = b"USS1" + struct.pack("<QIIH", 9, 3, 0xDEADBEEF, len(offset)) + offset + b"(zstd)"
    write(t, "snapshot", bytes([2]) + snapshot)
    sidecar = {
        "version": 1,
        "stream": "http://127.0.0.1:4437/demo/db",
        "incarnation": "00000000000000ff",
        "offset": "00000000000000000042",
        "epoch": 3,
        "log_bytes": 100,
        "boot_id": "b",
        "inode": 7,
        "wal": "1:2:3",
    }
    write(t, "sidecar", bytes([3]) + json.dumps(sidecar, indent=2).encode())


def peer_wire():
    t = "peer_wire"
    journal = {kind: sealed_body(p) for _, kind, p in frames((RECORDS / "journal-v1.seg").read_bytes())}
    vote, entries, log_id = journal[2], journal[1], journal[5]
    snap_body = sealed_body((RECORDS / "group-v2.snap").read_bytes())
    meta = snap_body[1 : snap_body.index(b"\xc5\x01")]  # [meta, bin data]: the meta
    # Structs are arrays of their fields, enums maps of one variant name (rmp_serde::to_vec).
    write(t, "append", bytes([0]) + b"\x94" + vote + b"\xc0" + entries + log_id)
    write(t, "heartbeat", bytes([0]) + b"\x94" + vote + log_id + b"\x90" + log_id)
    write(t, "vote", bytes([1]) + b"\x92" + vote + log_id)
    write(t, "snapshot", bytes([2]) + b"\x95" + vote + meta + b"\x00\x93\x01\x02\x03\xc3")
    item = b"\x94" + vote + b"\xc0\x90\xc0"
    write(t, "batch", bytes([3]) + b"\x92" + (b"\x92\x00\xc4" + bytes([len(item)]) + item) * 2)
    write(t, "elect", bytes([4]) + b"\x93\x01\x02\xc2")
    ok = b"\x81\xa2Ok"
    write(t, "append-answer", bytes([6]) + ok + b"\xa7Success")
    write(t, "vote-answer", bytes([7]) + ok + b"\x93" + vote + b"\xc3" + log_id)
    write(t, "batch-answer", bytes([9]) + b"\x91\x92\xcc\xc8\xc4\x02ab")
    write(t, "barrier", bytes([10]) + ok + b"\x92\x05" + vote)
    write(t, "elect-answer", bytes([11]) + b"\x81\xa3Err\xa4busy")
    write(t, "probe", bytes([13]) + b"\x93\xc3\x01\x07")


def wal_records():
    t = "wal_records"
    segment = (RECORDS / "journal-v1.seg").read_bytes()
    write(t, "journal", bytes([0]) + segment)
    # Every fix-up on, and a torn tail: what a crash mid-write leaves.
    write(t, "journal-fix-torn", bytes([3]) + segment + segment[:20])
    # One frame whose checksum fails: damage, not a tear.
    damaged = bytearray(frames(segment)[0][0])
    damaged[-1] ^= 1
    write(t, "damaged", bytes([0]) + segment[: len(segment) // 2] + bytes(damaged))
    # The purge record the target found overflowing `index + 1` (log_store.rs): LogId
    # [[term 1, node 1], u64::MAX], sealed, in a frame of group 3.
    body = b"\x92\x92\x01\x01\xcf" + b"\xff" * 8
    record = b"URJR\x01" + struct.pack("<I", len(body)) + body
    record += struct.pack("<I", zlib.crc32(record))
    frame_body = struct.pack("<QBI", 1, 4, 3) + record
    write(t, "purge-at-max", bytes([0]) + struct.pack("<II", len(frame_body), zlib.crc32(frame_body))
          + frame_body)


def raft_snapshot():
    t = "raft_snapshot"
    for name in ("group-v1.snap", "group-v2.snap"):
        snap = (RECORDS / name).read_bytes()
        write(t, name.replace(".snap", "-file"), bytes([0]) + snap)
    v2 = (RECORDS / "group-v2.snap").read_bytes()
    body = sealed_body(v2)
    state = body[body.index(b"\xc5\x01") + 3 :]  # the bin's bytes: a sealed group state
    write(t, "group-state", bytes([1]) + state)
    write(t, "group-state-reseal", bytes([5]) + state)
    # A backup group object: named fields (rmp_serde::to_vec_named), the state unsealed.
    obj = b"\x87"
    for key, value in (
        ("format_epoch", b"\x03"),
        ("raft_group_id", b"\x00"),
        ("raft_group_count", b"\x01"),
        ("commit_index", b"\x0b"),
        ("source_node_id", b"\x01"),
        ("captured_unix_ms", b"\x00"),
    ):
        obj += bytes([0xA0 | len(key)]) + key.encode() + value
    inner = sealed_body(state)
    obj += b"\xa5state\xc5" + struct.pack(">H", len(inner)) + inner
    write(t, "backup-object", bytes([2]) + obj)


def gateway_token():
    t = "gateway_token"
    b64 = lambda v: base64.urlsafe_b64encode(v.encode()).rstrip(b"=").decode()
    header = '{"alg":"EdDSA","typ":"at+jwt","kid":"fuzz-key"}'
    claims = json.dumps({
        "iss": "https://issuer.example",
        "aud": ["https://other.example", "https://streams.example"],
        "sub": "user-1",
        "client_id": "app",
        "jti": "j1",
        "iat": 1_800_000_000 - 10,
        "exp": 1_800_000_000 + 300.5,
        "nbf": 1_800_000_000,
    })
    # Mode 1: the target signs header and claims with its test key.
    write(t, "signed", b"\x01" + header.encode() + b"\x00" + claims.encode())
    write(t, "signed-expired", b"\x01" + header.encode() + b"\x00"
          + json.dumps({"iss": "https://issuer.example", "aud": "https://streams.example",
                        "sub": "s", "client_id": "c", "jti": "j", "iat": 1, "exp": 2}).encode())
    write(t, "signed-es256", b"\x01" + b'{"alg":"ES256","typ":"application/at+JWT","kid":"fuzz-key"}'
          + b"\x00{}")
    # Mode 0: an Authorization value as sent; its signature is not the key's.
    write(t, "bearer", "\x00Bearer " + b64(header) + "." + b64(claims) + ".c2lnbmF0dXJl")
    write(t, "bearer-hs256", "\x00bearer " + b64('{"alg":"HS256","typ":"at+jwt","kid":"k"}')
          + "." + b64("{}") + ".sig")
    write(t, "basic", "\x00Basic dXNlcjpwYXNz")


if __name__ == "__main__":
    for seed in (http_request, json_messages, vfs_frame, peer_wire, wal_records, raft_snapshot,
                 gateway_token):
        seed()
    total = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    print(f"seeds.py: {sum(1 for f in CORPUS.rglob('*') if f.is_file())} files, {total} bytes")
