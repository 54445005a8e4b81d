//! The SQLite extension's stream and file formats (`vfs/src/format.rs`): commit and claim
//! frames as a reader splits them out of stream bytes, the raw record inside a frame, the
//! snapshot body's header and the sidecar file.
//!
//! The first byte picks what the rest is:
//! - 0: a raw record. One [`Record::decode_raw`] accepts encodes back to exactly its bytes, and
//!   framed by the writer's code it reads back whole however the stream bytes are cut.
//! - 1: stream bytes, pushed to a [`FrameReader`] in pieces. Each frame's checksum is
//!   recomputed first when the second byte is odd, so that mutations reach the zstd payload
//!   and the record decoder instead of stopping at the CRC.
//! - 2: a snapshot body. A header that reads encodes back to a body whose header reads the same.
//! - 3: a sidecar. One that parses serializes to bytes that parse to it again.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sqlite_ursula_vfs::format::FRAME_HEADER;
use sqlite_ursula_vfs::format::FrameReader;
use sqlite_ursula_vfs::format::Record;
use sqlite_ursula_vfs::format::Sidecar;
use sqlite_ursula_vfs::format::encode_snapshot;
use sqlite_ursula_vfs::format::read_snapshot_header;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => raw_record(rest),
        1 => stream(rest),
        2 => snapshot(rest),
        _ => sidecar(rest),
    }
});

fn raw_record(raw: &[u8]) {
    let Ok(record) = Record::decode_raw(raw) else {
        return;
    };
    assert_eq!(record.encode_raw(), raw, "{record:?}");
    let frame = record.to_frame().expect("a decoded record frames");
    // Any cut of the frame reads nothing until the rest arrives, then the record.
    let cut = raw.len() % frame.len();
    let mut reader = FrameReader::default();
    reader.push(&frame[..cut]);
    assert_eq!(reader.next("fuzz"), Ok(None));
    reader.push(&frame[cut..]);
    assert_eq!(reader.next("fuzz"), Ok(Some((record, frame.len()))));
    assert_eq!(reader.pending(), 0);
}

fn stream(rest: &[u8]) {
    let Some((&knobs, bytes)) = rest.split_first() else {
        return;
    };
    let mut bytes = bytes.to_vec();
    if knobs & 1 == 1 {
        fix_checksums(&mut bytes);
    }
    let piece = usize::from(knobs >> 1).max(1);
    let mut reader = FrameReader::default();
    let mut pushed = 0;
    let mut consumed = 0;
    for chunk in bytes.chunks(piece) {
        reader.push(chunk);
        pushed += chunk.len();
        loop {
            match reader.next("fuzz") {
                Ok(Some((record, len))) => {
                    consumed += len;
                    assert!(len >= FRAME_HEADER);
                    assert_eq!(reader.pending(), pushed - consumed);
                    // What a reader takes from the stream re-encodes to a record that decodes
                    // to it again.
                    assert_eq!(Record::decode_raw(&record.encode_raw()), Ok(record));
                }
                Ok(None) => break,
                // A reader stops at the first bad frame: the stream is not the extension's.
                Err(_) => return,
            }
        }
    }
}

/// Rewrites each frame's CRC to match its payload, walking frames by their length fields.
fn fix_checksums(bytes: &mut [u8]) {
    let mut at = 0;
    while bytes.len() >= at + FRAME_HEADER {
        let len = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        let end = at + FRAME_HEADER + len as usize;
        let Some(payload) = bytes.get(at + FRAME_HEADER..end) else {
            return;
        };
        let crc = crc32fast::hash(payload).to_le_bytes();
        bytes[at + 8..at + 12].copy_from_slice(&crc);
        at = end;
    }
}

fn snapshot(body: &[u8]) {
    let mut r = body;
    let Ok(header) = read_snapshot_header(&mut r) else {
        return;
    };
    let again = encode_snapshot(&header, r);
    let mut r2 = &again[..];
    assert_eq!(read_snapshot_header(&mut r2).as_ref(), Ok(&header));
    assert_eq!(r2, r, "the image follows the header unchanged");
}

fn sidecar(bytes: &[u8]) {
    let Ok(sidecar) = Sidecar::parse(bytes) else {
        return;
    };
    assert_eq!(Sidecar::parse(&sidecar.to_bytes()).as_ref(), Ok(&sidecar));
}
