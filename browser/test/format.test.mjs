// The fixtures the extension's encoder wrote (vfs/src/format_fixtures.rs) decode here to the
// same records, and broken bytes are refused by name.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { FormatError, FrameReader, decodeSnapshot } from "../src/format.js";

const fixture = (name) => new Uint8Array(readFileSync(new URL(`./fixtures/${name}`, import.meta.url)));

test("the extension's claim and commit frames decode, split at every byte", () => {
  const bytes = new Uint8Array([...fixture("claim.usq1"), ...fixture("commit.usq1")]);
  for (let cut = 0; cut <= bytes.length; cut += 7) {
    const r = new FrameReader();
    const got = [];
    r.push(bytes.subarray(0, cut));
    for (let f = r.next(); f !== null; f = r.next()) got.push(f.record);
    r.push(bytes.subarray(cut));
    for (let f = r.next(); f !== null; f = r.next()) got.push(f.record);
    assert.equal(r.pending, 0);
    assert.equal(got.length, 2, `cut at ${cut}`);
    assert.deepEqual(got[0], { kind: "claim", epoch: 7n, nonce: new TextEncoder().encode("0123456789abcdef") });
    assert.equal(got[1].kind, "commit");
    assert.equal(got[1].dbPages, 3);
    assert.deepEqual(got[1].pages.map(([n, p]) => [n, p[0], p[1], p.length]), [[1, 1, 32, 4096], [3, 3, 34, 4096]]);
  }
});

test("the extension's snapshot body decodes with its checksum checked", () => {
  const s = decodeSnapshot(fixture("snapshot.uss1"));
  assert.equal(s.epoch, 5n);
  assert.equal(s.pages, 2);
  assert.equal(s.offset, "00000000000000004242");
  assert.equal(s.image.length, 8192);
  assert.equal(s.image[4096], 11);
});

test("a flipped payload byte, another format version and foreign bytes are refused by name", () => {
  const bad = fixture("commit.usq1");
  bad[20] ^= 0xff;
  const r = new FrameReader();
  r.push(bad);
  assert.throws(() => r.next(), (e) => e instanceof FormatError && /checksum/.test(e.message));
  const v2 = fixture("claim.usq1");
  v2[3] = "2".charCodeAt(0);
  const r2 = new FrameReader();
  r2.push(v2);
  assert.throws(() => r2.next(), /frame format "USQ2" is not supported by this reader \(it reads "USQ1"\)/);
  const r3 = new FrameReader();
  r3.push(new TextEncoder().encode("hello"));
  assert.throws(() => r3.next(), /not a frame/);
  const snap = fixture("snapshot.uss1");
  snap[snap.length - 1] ^= 0xff;
  assert.throws(() => decodeSnapshot(snap), FormatError);
});
