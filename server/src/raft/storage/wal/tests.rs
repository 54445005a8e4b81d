//! The journal's own tests: segments, reclaim, restatement and recovery.

use super::*;

fn write_and_wait(j: &Journal, kind: u8, group: u32, payload: Vec<u8>, index: Option<u64>) {
    write_waited(j, kind, group, payload, index, false);
}

/// Writes a record whose writer waits for it (fsynced first when `force_sync`).
fn write_waited(
    j: &Journal,
    kind: u8,
    group: u32,
    payload: Vec<u8>,
    index: Option<u64>,
    force_sync: bool,
) {
    let (tx, rx) = mpsc::channel();
    let w = Append {
        kind,
        group,
        payload,
        index,
        first: None,
        force_sync,
        done: Some(Box::new(move |r| drop(tx.send(r)))),
    };
    assert!(j.write(w).is_ok());
    assert!(rx.recv().is_ok_and(|r| r.is_ok()));
}

#[test]
fn segments_go_once_every_group_purged_their_entries_and_the_vote_survives() {
    let dir = std::env::temp_dir().join(format!("ursula-wal-reclaim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let vote = rmp_serde::to_vec(&openraft::Vote::new(3, 1)).expect("vote");
    let j = Journal::start(
        dir.clone(),
        Options {
            fsync_always: false,
            segment_size: 256,
            on_fatal: None,
        },
        Vec::new(),
        HashMap::new(),
        HashMap::new(),
    )
    .expect("start");
    write_and_wait(&j, KIND_VOTE, 7, vote.clone(), None);
    for i in 1..=20u64 {
        write_and_wait(&j, KIND_ENTRIES, 7, vec![0u8; 100], Some(i));
        write_and_wait(&j, KIND_ENTRIES, 8, vec![0u8; 100], Some(i));
    }
    let before = segments(&dir).expect("segments").len();
    assert!(before > 5, "small segments rotate: {before}");
    // Group 7 purges everything, group 8 only half: segments holding 8's later entries stay.
    let purge = |i: u64| {
        rmp_serde::to_vec(&openraft::LogId::new(
            openraft::CommittedLeaderId::new(1, 1),
            i,
        ))
        .expect("purge")
    };
    write_and_wait(&j, KIND_PURGE, 7, purge(20), Some(20));
    write_and_wait(&j, KIND_PURGE, 8, purge(10), Some(10));
    for _ in 0..4 {
        write_and_wait(&j, KIND_COMMITTED, 9, vec![0u8; 200], None);
    }
    let c = j.counters();
    let on_disk = || -> (usize, u64) {
        let segs = segments(&dir).expect("segments");
        let bytes = segs
            .iter()
            .map(|(_, p)| std::fs::metadata(p).map_or(0, |m| m.len()))
            .sum();
        (segs.len(), bytes)
    };
    // Deletions run on the reclaimer's thread: wait for the directory the journal kept.
    let settled = || {
        let (n, bytes) = on_disk();
        n as u64 == counters::get(&c.segments) && bytes == counters::get(&c.physical_bytes)
    };
    counters::eventually(settled);
    let (after, bytes) = on_disk();
    assert!(
        after < before,
        "purged segments were deleted: {before} -> {after}"
    );
    // The counters agree with the directory: bytes and segments on disk, and what went.
    assert_eq!(counters::get(&c.physical_bytes), bytes);
    assert_eq!(counters::get(&c.segments), after as u64);
    // Under `never` the rotations sync (timed) and the segment is synced ahead of them.
    assert!(counters::get(&c.rotation_sync_ns) > 0);
    assert!(counters::eventually(
        || counters::get(&c.background_syncs) > 0
    ));
    assert_eq!(
        counters::get(&c.reclaims),
        counters::get(&c.rotations) + 1 - after as u64,
        "every segment rotated away and not pinned was reclaimed"
    );
    assert!(counters::get(&c.reclaimed_bytes) > 0);
    assert_eq!(counters::get(&c.reclaim_failures), 0);
    // Group 8 purged only half: its later entries pin the segments that hold them.
    assert_eq!(counters::get(&c.lagging_groups), 1);
    assert!(c.is_lagging(8) && !c.is_lagging(7), "group 8 is named");
    assert_eq!(counters::get(&c.pinned_segments), after as u64 - 1);
    let r = recover(&dir).expect("recover");
    let records_of = |kind: u8, group: u32| -> Vec<_> {
        r.records
            .iter()
            .filter(|x| x.kind == kind && x.group == group)
            .collect()
    };
    assert_eq!(
        records_of(KIND_VOTE, 7).last().map(|v| v.payload.clone()),
        Some(vote),
        "the vote was restated"
    );
    let kept = records_of(KIND_ENTRIES, 8);
    assert!(
        kept.len() >= 10,
        "group 8's unpurged entries stay: {}",
        kept.len()
    );
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn frames_survive_a_torn_tail_and_damage_in_the_newest_segment_is_cut() {
    let dir = std::env::temp_dir().join(format!("ursula-wal-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut bytes = encode(1, KIND_VOTE, 3, b"vote");
    bytes.extend(encode(2, KIND_ENTRIES, 3, b"entries"));
    let good = bytes.len();
    bytes.extend(&encode(3, KIND_ENTRIES, 3, b"torn")[..10]);
    std::fs::write(dir.join(segment_name(1)), &bytes).expect("write");
    let r = recover(&dir).expect("recover");
    assert_eq!(r.records.len(), 2);
    assert_eq!(r.records[1].payload, b"entries");
    assert!(!r.damaged_tail);
    assert_eq!(
        std::fs::metadata(dir.join(segment_name(1)))
            .map(|m| m.len() as usize)
            .ok(),
        Some(good)
    );
    // A complete frame with a bad checksum is damage, not a tear.
    let mut damaged = encode(4, KIND_ENTRIES, 1, b"x");
    damaged[9] ^= 0xff;
    let mut f = OpenOptions::new()
        .append(true)
        .open(dir.join(segment_name(1)))
        .expect("open");
    f.write_all(&damaged).expect("append");
    let r = recover(&dir).expect("recover");
    assert!(r.damaged_tail);
    assert_eq!(r.records.len(), 2);
    // The same damage in an older segment refuses to start.
    std::fs::write(dir.join(segment_name(2)), encode(5, KIND_VOTE, 1, b"v")).expect("write");
    let mut f = OpenOptions::new()
        .append(true)
        .open(dir.join(segment_name(1)))
        .expect("open");
    f.write_all(&damaged).expect("append");
    assert!(matches!(recover(&dir), Err(WalError::SealedDamage { .. })));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A journal under `never` in a fresh directory, holding commit points for `rt`'s flusher.
fn holding_journal(name: &str, rt: &tokio::runtime::Runtime) -> (Journal, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ursula-wal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let j = Journal::start(
        dir.clone(),
        Options {
            fsync_always: false,
            segment_size: 1 << 20,
            on_fatal: None,
        },
        Vec::new(),
        HashMap::new(),
        HashMap::new(),
    )
    .expect("start");
    j.hold_commit_points(rt.handle());
    (j, dir)
}

fn commit_point(j: &Journal, group: u32, payload: &[u8]) {
    let w = Append {
        kind: KIND_COMMITTED,
        group,
        payload: payload.to_vec(),
        index: None,
        first: None,
        force_sync: false,
        done: None,
    };
    assert!(j.write(w).is_ok());
}

/// What the journal's files hold, as (kind, group, payload), in order.
fn on_disk(dir: &Path) -> Vec<(u8, u32, Vec<u8>)> {
    let r = scan(dir).expect("scan");
    r.records
        .into_iter()
        .map(|r| (r.kind, r.group, r.payload))
        .collect()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn held_commit_points_go_in_front_of_the_next_write_and_a_newer_one_replaces_its_groups() {
    // The runtime is never driven here, so its flusher never runs: only writes carry them.
    let rt = current_thread();
    let (j, dir) = holding_journal("held", &rt);
    commit_point(&j, 1, b"c1");
    commit_point(&j, 2, b"d1");
    commit_point(&j, 1, b"c2");
    assert_eq!(on_disk(&dir), Vec::new(), "held, not written");
    write_and_wait(&j, KIND_ENTRIES, 3, b"entry".to_vec(), Some(1));
    assert_eq!(
        on_disk(&dir),
        vec![
            (KIND_COMMITTED, 1, b"c2".to_vec()),
            (KIND_COMMITTED, 2, b"d1".to_vec()),
            (KIND_ENTRIES, 3, b"entry".to_vec()),
        ]
    );
    // A write that waits for an fsync goes through the sync thread and carries them too.
    commit_point(&j, 2, b"d2");
    write_waited(&j, KIND_VOTE, 2, b"vote".to_vec(), None, true);
    let shutdown = current_thread();
    commit_point(&j, 1, b"c3");
    shutdown.block_on(j.sync()).expect("sync");
    let all = on_disk(&dir);
    assert_eq!(
        all[3..].to_vec(),
        vec![
            (KIND_COMMITTED, 2, b"d2".to_vec()),
            (KIND_VOTE, 2, b"vote".to_vec()),
            (KIND_COMMITTED, 1, b"c3".to_vec()),
        ],
        "in the order they were written; the shutdown's sync writes what is held"
    );
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_held_commit_point_with_no_write_after_it_is_written_by_the_cores_flusher() {
    let rt = current_thread();
    let (j, dir) = holding_journal("flusher", &rt);
    commit_point(&j, 4, b"alone");
    assert_eq!(on_disk(&dir), Vec::new());
    // Driving the core's runtime runs its flusher.
    rt.block_on(async {
        for _ in 0..100 {
            if !on_disk(&dir).is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    assert_eq!(on_disk(&dir), vec![(KIND_COMMITTED, 4, b"alone".to_vec())]);
    // A commit point someone waits for is written at once, never held.
    write_and_wait(&j, KIND_COMMITTED, 4, b"waited".to_vec(), None);
    assert_eq!(on_disk(&dir).len(), 2);
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
}
