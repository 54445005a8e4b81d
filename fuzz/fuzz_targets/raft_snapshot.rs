//! A group's state as snapshots and backups carry it (`server/src/raft/storage/state_machine.rs`,
//! `record.rs`, `state/src/backup.rs`): a snapshot file, the group state a leader's
//! `InstallSnapshot` ships, and a backup's group object with its deep check.
//!
//! The first byte picks the input: 0 a snapshot file, 1 a group state record, 2 a backup group
//! object. Its bit 2 reseals the file's and the state's records (length and CRC) so that
//! mutations reach the MessagePack decoders instead of stopping at a checksum.
//!
//! Beyond "no panic": a file, state or object that decodes re-encodes to bytes that decode
//! and re-encode to the same bytes (equal states encode equally on every replica), and a state
//! that passes the backup's deep check answers the questions a node asks of a loaded state
//! (sizes, usage, cold references, reads of every stream) without a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ursula_state::backup::GroupObject;
use ursula::raft::storage::record;
use ursula::raft::storage::state_machine;
use ursula_state::stream::GroupState;
use ursula_protocol::offset::Offset;
use ursula_protocol::offset::ReadFrom;

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    let reseal = knobs & 4 == 4;
    match knobs % 4 {
        0 => {
            if reseal {
                bytes = resealed(record::SNAPSHOT_FILE, bytes);
            }
            snapshot_file(&bytes, reseal);
        }
        1 => {
            if reseal {
                bytes = resealed(record::GROUP_STATE, bytes);
            }
            group_state(&bytes);
        }
        _ => backup_object(&bytes),
    }
});

/// `bytes` with a good length and CRC, if they start with `kind`'s magic.
fn resealed(kind: record::Kind, bytes: Vec<u8>) -> Vec<u8> {
    if !bytes.starts_with(&kind.magic[..]) || bytes.len() < 13 {
        return bytes;
    }
    let kind = record::Kind {
        version: bytes[4],
        ..kind
    };
    record::seal(kind, &bytes[9..bytes.len() - 4]).expect("seals")
}

fn snapshot_file(bytes: &[u8], reseal: bool) {
    let Ok(mut snap) = state_machine::read_snapshot_file(bytes) else {
        return;
    };
    let mut once = Vec::new();
    state_machine::write_snapshot_file_to(&snap, &mut once).expect("a decoded snapshot encodes");
    let again = state_machine::read_snapshot_file(&once).expect("an encoded snapshot decodes");
    let mut twice = Vec::new();
    state_machine::write_snapshot_file_to(&again, &mut twice).expect("encodes again");
    assert_eq!(once, twice);
    if reseal {
        snap.data = resealed(record::GROUP_STATE, std::mem::take(&mut snap.data));
    }
    group_state(&snap.data);
}

fn group_state(data: &[u8]) {
    let Ok(state) = state_machine::read_group_state(data) else {
        return;
    };
    let once = state_machine::write_group_state(&state).expect("a decoded state encodes");
    let again = state_machine::read_group_state(&once).expect("an encoded state decodes");
    assert_eq!(
        state_machine::write_group_state(&again).expect("encodes again"),
        once
    );
    loaded(state);
}

fn backup_object(bytes: &[u8]) {
    let Ok(object) = GroupObject::decode(bytes) else {
        return;
    };
    let once = object.encode().expect("a decoded object encodes");
    assert_eq!(GroupObject::decode(&once).as_ref().ok(), Some(&object));
    let Ok(state) = object.open(object.raft_group_id, object.raft_group_count) else {
        return;
    };
    // The import stores the state as it decoded: it must encode as it does in a snapshot.
    let record = state_machine::write_group_state(&state).expect("an opened state encodes");
    let back: GroupState = state_machine::read_group_state(&record).expect("decodes");
    assert_eq!(
        state_machine::write_group_state(&back).expect("encodes again"),
        record
    );
    loaded(state);
}

/// What a node asks of a state once it loaded it, for a state the deep check passes.
fn loaded(mut state: GroupState) {
    if state.check().is_err() {
        return;
    }
    state.recount_hot();
    assert!(state.hot_bytes() <= state.held_bytes());
    let mut usage = std::collections::BTreeMap::new();
    state.usage_into(&mut usage, 0);
    let _ = ursula_state::backup::cold_references(&state);
    let streams: Vec<(String, u64)> = state
        .streams()
        .map(|(k, s)| (k.to_owned(), s.retained))
        .collect();
    // Reads from the start, the retention floor and the tail, as a client's would.
    for (key, retained) in streams {
        for from in [
            ReadFrom::Start,
            ReadFrom::At(Offset(retained)),
            ReadFrom::Now,
        ] {
            let _ = state.read(&key, from, 4096, None, 0);
        }
    }
}
