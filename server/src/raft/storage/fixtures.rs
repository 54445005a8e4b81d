//! The checked-in record fixtures (`server/testdata/records/`): a snapshot file and a journal
//! segment of this build's format (and the version 1 snapshot file, still read), built from fixed commands at a fixed clock. Every test run
//! decodes them and encodes the decoded values again: a change to the layout of any persisted
//! type (a reordered field of a stream, a new command variant in the middle) changes those
//! bytes and fails here, so it cannot ship without a new record version.
//!
//! To write them again after a deliberate format change (with a new version and a decoder for
//! the old one): `cargo test -p ursula --lib write_record_fixtures -- --ignored`.

use std::path::PathBuf;

use bytes::Bytes;
use openraft::CommittedLeaderId;
use openraft::Entry;
use openraft::EntryPayload;
use openraft::LogId;
use openraft::Membership;
use openraft::SnapshotMeta;
use openraft::StoredMembership;
use openraft::Vote;

use super::log_store::LogData;
use super::record;
use super::state_machine;
use super::state_machine::StoredSnapshot;
use super::wal;
use crate::raft::types::TypeConfig;
use crate::raft::types::Writes;
use ursula_state::stream::Append;
use ursula_state::stream::Body;
use ursula_state::stream::Command;
use ursula_state::stream::Create;
use ursula_state::stream::GroupState;
use ursula_state::stream::Lifetime;
use ursula_state::stream::ProducerTuple;
use ursula_state::stream::PublishSnapshot;

const NOW: u64 = 1_764_547_200_000;
const OCTET: &str = "application/octet-stream";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/records")
}

/// The commands behind both fixtures: every command kind and every stream feature a snapshot
/// carries (bytes, JSON messages, a producer, `Stream-Seq`, a closed stream, a TTL, a
/// snapshot, retention).
fn commands() -> Vec<Command> {
    let create = |key: &str, ctype: &str, lifetime, closed| {
        Command::Create(Create {
            key: key.into(),
            content_type: ctype.into(),
            lifetime,
            closed,
            stream_seq: None,
            producer: None,
            incarnation: None,
            body: None,
        })
    };
    let append = |key: &str, ctype: &str, body: Body, producer, seq: Option<&[u8]>, close| {
        Command::Append(Append {
            key: key.into(),
            content_type: Some(ctype.into()),
            close,
            stream_seq: seq.map(<[u8]>::to_vec),
            producer,
            incarnation: None,
            body,
        })
    };
    let raw = |s: &'static str| Body::Raw(Bytes::from_static(s.as_bytes()));
    vec![
        create("fix/octet", "application/octet-stream", None, false),
        create(
            "fix/json",
            "application/json",
            Some(Lifetime::Ttl(3600)),
            false,
        ),
        create("fix/closed", "text/plain", None, false),
        append("fix/octet", OCTET, raw("first;"), None, Some(b"a1"), false),
        append(
            "fix/octet",
            OCTET,
            raw("second;"),
            Some(ProducerTuple {
                id: "p1".into(),
                epoch: 2,
                seq: 0,
            }),
            None,
            false,
        ),
        append(
            "fix/json",
            "application/json",
            Body::Json(Ok(Bytes::from_static(b"{\"n\":1}\n{\"n\":2}\n"))),
            None,
            None,
            false,
        ),
        append("fix/closed", "text/plain", raw("done"), None, None, true),
        Command::PublishSnapshot(PublishSnapshot {
            key: "fix/octet".into(),
            offset: 6,
            content_type: "application/octet-stream".into(),
            body: Bytes::from_static(b"state at 6"),
            incarnation: None,
            cold: None,
            boundary: None,
        }),
        Command::Retain {
            key: "fix/octet".into(),
            offset: 6,
            incarnation: None,
            boundary: None,
        },
        Command::Renew {
            key: "fix/json".into(),
        },
        Command::Sweep,
    ]
}

fn group_state() -> GroupState {
    let mut g = GroupState::default();
    for (i, c) in commands().into_iter().enumerate() {
        let what = format!("{c:?}");
        if let Err(e) = g.apply(c, NOW + i as u64) {
            panic!("fixture command {what} refused: {e}");
        }
    }
    g
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn snapshot_file() -> Vec<u8> {
    let members = Membership::new(vec![std::collections::BTreeSet::from([1u64])], ());
    let snap = StoredSnapshot {
        meta: SnapshotMeta {
            last_log_id: Some(log_id(2, 11)),
            last_membership: StoredMembership::new(Some(log_id(1, 0)), members),
            snapshot_id: "11-1764547200000".into(),
        },
        data: state_machine::write_group_state(&group_state()).expect("state"),
    };
    state_machine::write_snapshot_file(&snap).expect("file")
}

/// A segment's frames: one of each record kind for group 3.
fn journal_frames() -> Vec<u8> {
    let members = Membership::new(vec![std::collections::BTreeSet::from([1u64])], ());
    let entries: Vec<Entry<TypeConfig>> = vec![
        Entry {
            log_id: log_id(1, 0),
            payload: EntryPayload::Membership(members),
        },
        Entry {
            log_id: log_id(2, 1),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: log_id(2, 2),
            payload: EntryPayload::Normal(Writes {
                now_ms: NOW,
                cmds: commands(),
            }),
        },
    ];
    let j = |r: Result<Vec<u8>, record::RecordError>| r.expect("encode");
    let records: Vec<(u8, Vec<u8>)> = vec![
        (
            wal::KIND_VOTE,
            j(record::encode(record::JOURNAL, &Vote::new_committed(2, 1))),
        ),
        (
            wal::KIND_ENTRIES,
            j(record::encode(record::JOURNAL, &entries)),
        ),
        (
            wal::KIND_COMMITTED,
            j(record::encode(record::JOURNAL, &Some(log_id(2, 2)))),
        ),
        (
            wal::KIND_TRUNCATE,
            j(record::encode(record::JOURNAL, &3u64)),
        ),
        (
            wal::KIND_PURGE,
            j(record::encode(record::JOURNAL, &log_id(1, 0))),
        ),
    ];
    let mut out = Vec::new();
    for (seq, (kind, payload)) in records.into_iter().enumerate() {
        out.extend_from_slice(&wal::encode(seq as u64 + 1, kind, 3, &payload));
    }
    out
}

#[test]
#[ignore = "writes the fixtures; run after a deliberate format change"]
fn write_record_fixtures() {
    std::fs::create_dir_all(dir()).expect("dir");
    std::fs::write(dir().join("group-v2.snap"), snapshot_file()).expect("snap");
    std::fs::write(dir().join("journal-v1.seg"), journal_frames()).expect("seg");
}

#[test]
fn the_checked_in_snapshot_file_decodes_to_its_streams_and_encodes_to_the_same_bytes() {
    let bytes = std::fs::read(dir().join("group-v2.snap")).expect("fixture");
    assert_eq!(&bytes[..5], b"URSN\x01");
    let snap = state_machine::read_snapshot_file(&bytes).expect("decode");
    assert_eq!(snap.meta.last_log_id, Some(log_id(2, 11)));
    assert_eq!(&snap.data[..5], b"URGS\x02");
    let state = state_machine::read_group_state(&snap.data).expect("state");
    check_streams(&state);
    let mut usage = std::collections::BTreeMap::new();
    state.usage_into(&mut usage, NOW + 100);
    assert_eq!(usage["fix"].stream_count, 3);
    assert!(usage["fix"].committed_records > 0);
    // Encoding what was decoded gives the fixture back, byte for byte; and so does building
    // it from the commands with this build.
    assert_eq!(
        state_machine::write_group_state(&state).expect("state"),
        snap.data
    );
    assert_eq!(
        state_machine::write_snapshot_file(&snap).expect("file"),
        bytes
    );
    let mut streamed = Vec::new();
    state_machine::write_snapshot_file_to(&snap, &mut streamed).expect("streamed file");
    assert_eq!(
        streamed, bytes,
        "the file written piece by piece is the same record"
    );
    assert_eq!(
        snapshot_file(),
        bytes,
        "this build writes the fixture's bytes"
    );
}

/// The streams both fixtures hold.
fn check_streams(state: &GroupState) {
    let at = NOW + 100;
    let octet = state.get("fix/octet", at).expect("octet");
    assert_eq!((octet.tail(), octet.retained), (13, 6));
    assert_eq!(octet.data.read(6, 7), b"second;".to_vec());
    let closed = state.get("fix/closed", at).expect("closed");
    assert!(closed.closed);
    assert_eq!(state.len(), 3);
}

#[test]
fn a_version_1_group_state_still_reads_with_an_empty_ledger() {
    let bytes = std::fs::read(dir().join("group-v1.snap")).expect("fixture");
    let snap = state_machine::read_snapshot_file(&bytes).expect("decode");
    assert_eq!(&snap.data[..5], b"URGS\x01");
    let state = state_machine::read_group_state(&snap.data).expect("state");
    check_streams(&state);
    assert_eq!(
        state.tenancy(),
        &ursula_state::stream::ledger::Tenancy::default()
    );
}

#[test]
fn the_checked_in_journal_segment_recovers_every_record_kind_and_encodes_to_the_same_bytes() {
    let bytes = std::fs::read(dir().join("journal-v1.seg")).expect("fixture");
    let tmp = std::env::temp_dir().join(format!("ursula-journal-fixture-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("dir");
    std::fs::write(tmp.join("0000000000000001.seg"), &bytes).expect("seg");
    let scanned = wal::scan(&tmp).expect("scan");
    let _ = std::fs::remove_dir_all(&tmp);
    assert_eq!(scanned.records.len(), 5);
    assert!(
        scanned
            .records
            .iter()
            .all(|r| r.group == 3 && r.payload.starts_with(b"URJR\x01"))
    );
    let log = LogData::recover(&scanned.records).expect("recover");
    assert_eq!(log.vote, Some(Vote::new_committed(2, 1)));
    assert_eq!(log.committed, Some(log_id(2, 2)));
    assert_eq!(log.purged, Some(log_id(1, 0)));
    // Truncated from 3, purged through 0: entries 1 and 2 remain.
    assert_eq!(log.entries.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    let EntryPayload::Normal(w) = &log.entries[&2].payload else {
        panic!("entry 2 carries the writes");
    };
    assert_eq!((w.now_ms, w.cmds.len()), (NOW, commands().len()));
    assert_eq!(
        journal_frames(),
        bytes,
        "this build writes the fixture's bytes"
    );
}
