// The extension's stream frames (USQ1) and snapshot bodies (USS1), decoded for a reader. The
// layouts are the extension's (docs/sqlite-vfs.md, "Stream frames" and "Snapshot bodies");
// the fixtures in test/fixtures are written by the extension's own encoder
// (vfs/src/format_fixtures.rs), and test/format.test.mjs decodes them here.
import crc32 from "crc/calculators/crc32";
import { decompress } from "fzstd";

export const PAGE_SIZE = 4096;
const FRAME_MAGIC = "USQ1";
const SNAPSHOT_MAGIC = "USS1";
const FRAME_HEADER = 12;
const KIND_COMMIT = 1;
const KIND_CLAIM = 2;

/** Bytes that are not a frame or snapshot of the format this reader knows. */
export class FormatError extends Error {
  constructor(message) {
    super(message);
    this.name = "FormatError";
  }
}

const ascii = (bytes) => String.fromCharCode(...bytes);
const view = (bytes) => new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
const checksum = (bytes) => crc32(bytes) >>> 0;

function inflate(bytes, what) {
  try {
    return decompress(bytes);
  } catch (e) {
    throw new FormatError(`${what} is not zstd: ${e?.message ?? e}`);
  }
}

function checkMagic(got, want, what) {
  if (got === want) return;
  if (got.slice(0, 3) === want.slice(0, 3)) {
    throw new FormatError(`${what} format "${got}" is not supported by this reader (it reads "${want}")`);
  }
  throw new FormatError(`not a ${what}: magic ${JSON.stringify(got)}`);
}

/**
 * A record from its decompressed bytes: `{ kind: "commit", dbPages, pages: [[pgno, Uint8Array]] }`
 * or `{ kind: "claim", epoch: bigint, nonce: Uint8Array }`.
 */
export function decodeRecord(raw) {
  const v = view(raw);
  if (raw.length >= 9 && raw[0] === KIND_COMMIT) {
    const dbPages = v.getUint32(1, true);
    const n = v.getUint32(5, true);
    if (raw.length !== 9 + n * (4 + PAGE_SIZE)) throw new FormatError("commit record length does not match its page count");
    const pages = [];
    for (let i = 0, at = 9; i < n; i++, at += 4 + PAGE_SIZE) {
      pages.push([v.getUint32(at, true), raw.subarray(at + 4, at + 4 + PAGE_SIZE)]);
    }
    return { kind: "commit", dbPages, pages };
  }
  if (raw.length === 25 && raw[0] === KIND_CLAIM) {
    return { kind: "claim", epoch: v.getBigUint64(1, true), nonce: raw.slice(9, 25) };
  }
  throw new FormatError(`unknown record kind ${raw[0]} (${raw.length} bytes)`);
}

/**
 * Frames from stream bytes that may end anywhere: `push` what a read returned, then take the
 * whole frames with `next`. `pending` is what waits for the rest of a frame.
 */
export class FrameReader {
  #buf = new Uint8Array(0);

  push(bytes) {
    if (bytes.length === 0) return;
    const joined = new Uint8Array(this.#buf.length + bytes.length);
    joined.set(this.#buf);
    joined.set(bytes, this.#buf.length);
    this.#buf = joined;
  }

  get pending() {
    return this.#buf.length;
  }

  /** The next whole frame's record and its length in the stream, or `null`. */
  next() {
    const buf = this.#buf;
    if (buf.length < 4) return null;
    checkMagic(ascii(buf.subarray(0, 4)), FRAME_MAGIC, "frame");
    if (buf.length < FRAME_HEADER) return null;
    const v = view(buf);
    const len = v.getUint32(4, true);
    const crc = v.getUint32(8, true);
    if (buf.length < FRAME_HEADER + len) return null;
    const payload = buf.subarray(FRAME_HEADER, FRAME_HEADER + len);
    if (checksum(payload) !== crc) throw new FormatError("frame checksum mismatch");
    const record = decodeRecord(inflate(payload, "frame payload"));
    this.#buf = buf.slice(FRAME_HEADER + len);
    return { record, bytes: FRAME_HEADER + len };
  }
}

/** A snapshot body: `{ epoch: bigint, pages, offset, image }`, its checksum checked. */
export function decodeSnapshot(body) {
  if (body.length < 22) throw new FormatError("short snapshot header");
  checkMagic(ascii(body.subarray(0, 4)), SNAPSHOT_MAGIC, "snapshot");
  const v = view(body);
  const epoch = v.getBigUint64(4, true);
  const pages = v.getUint32(12, true);
  const crc = v.getUint32(16, true);
  const olen = v.getUint16(20, true);
  if (body.length < 22 + olen) throw new FormatError("short snapshot offset");
  const offset = ascii(body.subarray(22, 22 + olen));
  if (!/^\d{20}$/.test(offset)) throw new FormatError("snapshot offset");
  const image = inflate(body.subarray(22 + olen), "snapshot image");
  if (image.length !== pages * PAGE_SIZE) throw new FormatError(`snapshot image is ${image.length} bytes, not ${pages} pages`);
  if (checksum(image) !== crc) throw new FormatError("snapshot checksum mismatch");
  return { epoch, pages, offset, image };
}
