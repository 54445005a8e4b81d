//! The Raft journal as recovery reads it (`server/src/raft/storage/wal.rs`, `frame.rs`,
//! `record.rs`, `log_store.rs`): one segment's bytes split into frames, each frame's payload a
//! sealed journal record, and a group's log rebuilt from its records.
//!
//! Input: a knob byte, then a segment's bytes. Knob bit 0 recomputes each frame's CRC and bit
//! 1 reseals each payload that starts with a journal record's magic, so that mutations reach
//! the MessagePack decoders and the log rebuild instead of stopping at a checksum.
//!
//! Beyond "no panic": the verified prefix is a run of back-to-back frames that the writer's
//! encoder reproduces byte for byte, the first byte past it starts no good frame, and every
//! journal value that decodes re-encodes to a record that decodes to the same encoding.

#![no_main]

use libfuzzer_sys::fuzz_target;
use openraft::Entry;
use openraft::LogId;
use openraft::Vote;
use serde::Serialize;
use serde::de::DeserializeOwned;
use ursula::raft::types::TypeConfig;
use ursula::raft::storage::frame;
use ursula::raft::storage::log_store::LogData;
use ursula::raft::storage::record;
use ursula::raft::storage::wal;

const SEGMENT: u64 = 7;

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, segment)) = data.split_first() else {
        return;
    };
    let mut bytes = segment.to_vec();
    if knobs & 3 != 0 {
        fix(&mut bytes, knobs & 1 == 1, knobs & 2 == 2);
    }
    let scan = wal::parse_segment(SEGMENT, &bytes);
    assert!(scan.end <= bytes.len());
    let mut at = 0u64;
    for r in &scan.records {
        assert_eq!((r.loc.seg, r.loc.at), (SEGMENT, at));
        let start = at as usize;
        let whole = &bytes[start..start + r.loc.len as usize];
        let seq = u64::from_le_bytes(whole[8..16].try_into().expect("8 bytes"));
        assert_eq!(frame::encode(seq, r.kind, r.group, &r.payload), whole);
        at += u64::from(r.loc.len);
        stable_payload(r);
    }
    assert_eq!(at, scan.end as u64);
    if scan.end < bytes.len() {
        let next = frame::parse(&bytes[scan.end..]);
        assert!(!matches!(next, frame::Parsed::Frame { .. }), "{next:?}");
        assert_eq!(scan.damaged, next == frame::Parsed::Damaged);
    }
    for (_, records) in wal::by_group(scan.records) {
        if let Ok(log) = LogData::recover(&records) {
            for (index, entry) in &log.entries {
                assert_eq!(*index, entry.log_id.index);
            }
        }
    }
});

/// Recomputes what a mutation broke: each frame's CRC (`frames`), and the length and CRC of
/// each journal record a frame carries (`records`), in place (neither changes a length).
fn fix(bytes: &mut [u8], frames: bool, records: bool) {
    let mut at = 0;
    while bytes.len() >= at + frame::HEADER {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        if !(frame::MIN_BODY..=frame::MAX_FRAME).contains(&len) || bytes.len() < at + 8 + len {
            return;
        }
        let body = at + frame::HEADER;
        let seq = u64::from_le_bytes(bytes[body..body + 8].try_into().expect("8 bytes"));
        let kind = bytes[body + 8];
        let group = u32::from_le_bytes(bytes[body + 9..body + 13].try_into().expect("4 bytes"));
        let mut payload = bytes[body + frame::MIN_BODY..body + len].to_vec();
        if records && payload.starts_with(&record::JOURNAL.magic[..]) && payload.len() >= 13 {
            let journal = record::Kind {
                version: payload[4],
                ..record::JOURNAL
            };
            payload = record::seal(journal, &payload[9..payload.len() - 4]).expect("seals");
        }
        if frames {
            bytes[at..body + len].copy_from_slice(&frame::encode(seq, kind, group, &payload));
        } else {
            bytes[body + frame::MIN_BODY..body + len].copy_from_slice(&payload);
        }
        at = body + len;
    }
}

/// A journal payload that decodes as its kind's value re-encodes to a record that decodes
/// and re-encodes to the same bytes.
fn stable_payload(r: &wal::Record) {
    match r.kind {
        wal::KIND_ENTRIES => stable::<Vec<Entry<TypeConfig>>>(&r.payload),
        wal::KIND_VOTE => stable::<Vote<u64>>(&r.payload),
        wal::KIND_TRUNCATE => stable::<u64>(&r.payload),
        wal::KIND_PURGE => stable::<LogId<u64>>(&r.payload),
        wal::KIND_COMMITTED => stable::<Option<LogId<u64>>>(&r.payload),
        _ => {}
    }
}

fn stable<T: Serialize + DeserializeOwned>(payload: &[u8]) {
    let Ok(value) = record::decode::<T>(record::JOURNAL, payload) else {
        return;
    };
    let once = record::encode(record::JOURNAL, &value).expect("a decoded value encodes");
    let again: T = record::decode(record::JOURNAL, &once).expect("an encoded record decodes");
    assert_eq!(
        record::encode(record::JOURNAL, &again).expect("encodes"),
        once
    );
}
