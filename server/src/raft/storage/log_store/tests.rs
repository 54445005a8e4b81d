//! The log store's tests: purges and truncations, and the cache of recent entries over the
//! journal.

use super::*;

fn id(index: u64) -> LogId<u64> {
    LogId::new(openraft::CommittedLeaderId::new(1, 1), index)
}

#[tokio::test]
async fn a_purge_and_a_truncation_take_their_entries_and_bytes_out_of_the_log() {
    let dir = std::env::temp_dir().join(format!("ursula-log-remove-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let journal = wal::Journal::start(
        dir.clone(),
        wal::Options {
            fsync_always: false,
            segment_size: 1 << 20,
            on_fatal: None,
        },
        Vec::new(),
        std::collections::HashMap::new(),
        std::collections::HashMap::new(),
    )
    .expect("journal");
    let mut data = LogData::default();
    for i in 1..=10 {
        data.entries.insert(
            i,
            Entry {
                log_id: id(i),
                payload: openraft::EntryPayload::Blank,
            },
        );
    }
    let node = Arc::new(NodeLog::default());
    let mut store = LogStore::new(3, journal, data, node.clone(), u64::MAX);
    let size = |d: &LogData, r: std::ops::RangeInclusive<u64>| -> u64 {
        r.map(|i| d.sizes.get(&i).copied().unwrap_or(0)).sum()
    };
    let (all, kept) = {
        let d = lock(&store.data);
        (d.bytes, size(&d, 5..=10))
    };
    assert!(all > 0 && node.bytes() == all);

    store.purge(id(4)).await.expect("purge");
    {
        let d = lock(&store.data);
        assert_eq!(
            d.entries.keys().copied().collect::<Vec<_>>(),
            (5..=10).collect::<Vec<_>>()
        );
        assert_eq!(
            d.sizes.keys().copied().collect::<Vec<_>>(),
            (5..=10).collect::<Vec<_>>()
        );
        assert_eq!((d.bytes, node.bytes()), (kept, kept));
        assert_eq!(d.purged, Some(id(4)));
    }

    store.truncate(id(8)).await.expect("truncate");
    let d = lock(&store.data);
    assert_eq!(d.entries.keys().copied().collect::<Vec<_>>(), vec![5, 6, 7]);
    assert_eq!(d.sizes.keys().copied().collect::<Vec<_>>(), vec![5, 6, 7]);
    let left = size(&d, 5..=7);
    assert_eq!((d.bytes, node.bytes()), (left, left));
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

fn term_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(openraft::CommittedLeaderId::new(term, 1), index)
}

fn blank(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: term_id(term, index),
        payload: EntryPayload::Blank,
    }
}

/// A journal on `dir` whose group 3 has `frames` (its segments kept until it purges them).
fn start_journal(dir: &std::path::Path, frames: GroupFrames) -> wal::Journal {
    let recovered_max = frames.last().map(|l| (3, l)).into_iter().collect();
    wal::Journal::start(
        dir.to_owned(),
        wal::Options {
            fsync_always: false,
            segment_size: 1 << 20,
            on_fatal: None,
        },
        Vec::new(),
        recovered_max,
        std::collections::HashMap::from([(3, frames)]),
    )
    .expect("journal")
}

/// Writes a record of group 3 and waits until it is written.
fn write_record(
    j: &wal::Journal,
    kind: u8,
    payload: Vec<u8>,
    first: Option<u64>,
    index: Option<u64>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let w = wal::Append {
        kind,
        group: 3,
        payload,
        index,
        first,
        force_sync: false,
        done: Some(Box::new(move |r| drop(tx.send(r)))),
    };
    assert!(j.write(w).is_ok());
    assert!(rx.recv().is_ok_and(|r| r.is_ok()));
}

fn write_entries(j: &wal::Journal, entries: &[Entry<TypeConfig>]) {
    let payload = record::encode(record::JOURNAL, entries).expect("encode");
    let first = entries.first().map(|e| e.log_id.index);
    let last = entries.last().map(|e| e.log_id.index);
    write_record(j, wal::KIND_ENTRIES, payload, first, last);
}

/// Group 3's log as a restart finds it in `dir`, over a journal started on it, holding
/// `budget` bytes of entries.
#[tokio::test]
async fn the_tail_kept_below_a_snapshot_leaves_the_unsnapshotted_log_and_its_purge_counts_once() {
    let dir = scratch("snapshotted");
    let writer = start_journal(&dir, GroupFrames::default());
    let all: Vec<_> = (1..=10).map(|i| blank(1, i)).collect();
    write_entries(&writer, &all);
    let mut store = reopen(&dir, u64::MAX);
    let node = store.log_bytes.clone();
    let size = |s: &LogStore, r: std::ops::RangeInclusive<u64>| -> u64 {
        let d = lock(&s.data);
        r.map(|i| d.sizes.get(&i).copied().unwrap_or(0)).sum()
    };
    let whole = size(&store, 1..=10);
    assert_eq!((store.bytes(), node.bytes()), (whole, whole));
    // A snapshot through 7: 1..=7 stay in the log (openraft's kept tail) but count no more.
    store.mark_snapshotted(7);
    let above = size(&store, 8..=10);
    assert_eq!((store.bytes(), node.bytes()), (above, above));
    store.mark_snapshotted(5);
    assert_eq!(store.bytes(), above, "an older snapshot changes nothing");
    // Purging the kept tail takes nothing more off the counts; appends above count.
    store.purge(id(6)).await.expect("purge");
    assert_eq!((store.bytes(), node.bytes()), (above, above));
    let (_, _, counted) = store.hold(vec![blank(1, 11)], 100);
    assert_eq!(counted, 100);
    node.bytes.fetch_add(counted, Ordering::Relaxed);
    assert_eq!((store.bytes(), node.bytes()), (above + 100, above + 100));
    // A later snapshot moves what it covers, once.
    store.mark_snapshotted(11);
    assert_eq!((store.bytes(), node.bytes()), (0, 0));
    store.purge(id(11)).await.expect("purge");
    assert_eq!((store.bytes(), node.bytes()), (0, 0));
    assert_eq!(
        lock(&store.data).below,
        0,
        "the kept part left with its entries"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn reopen(dir: &std::path::Path, budget: u64) -> LogStore {
    let records = wal::scan(dir).expect("scan").records;
    let mine: Vec<_> = records.into_iter().filter(|r| r.group == 3).collect();
    let mut data = LogData::recover(&mine).expect("recover");
    let frames = std::mem::take(&mut data.frames);
    let journal = start_journal(dir, frames);
    LogStore::new(3, journal, data, Arc::new(NodeLog::default()), budget)
}

fn ids(entries: &[Entry<TypeConfig>]) -> Vec<(u64, u64)> {
    entries
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ursula-log-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

#[tokio::test]
async fn a_log_over_its_budget_holds_its_newest_entries_and_reads_the_rest_back_from_the_journal() {
    let dir = scratch("cache");
    let writer = start_journal(&dir, GroupFrames::default());
    let all: Vec<_> = (1..=10).map(|i| blank(1, i)).collect();
    for batch in all.chunks(3) {
        write_entries(&writer, batch);
    }
    let mut store = reopen(&dir, 0);
    let view = store.cache_view();
    {
        let d = lock(&store.data);
        // Only the last entry stays, whatever the budget: the log's state is read from it.
        assert_eq!(d.entries.keys().copied().collect::<Vec<_>>(), vec![10]);
        assert_eq!(view.bytes, d.sizes[&10]);
        assert_eq!(d.cached, d.sizes[&10]);
    }
    assert_eq!(view.entries, 10, "every entry is still indexed");

    let read = store.try_get_log_entries(1..=10).await.expect("read");
    assert_eq!(ids(&read), (1..=10).map(|i| (1, i)).collect::<Vec<_>>());
    let view = store.cache_view();
    assert_eq!((view.hits, view.misses, view.disk_reads), (1, 9, 3));
    assert!(view.disk_read_bytes > 0);
    // A range inside the frames reads just the frames that hold it.
    let read = store.try_get_log_entries(5..8).await.expect("read");
    assert_eq!(ids(&read), vec![(1, 5), (1, 6), (1, 7)]);
    assert_eq!(store.cache_view().disk_reads, 5);

    store.purge(id(4)).await.expect("purge");
    let read = store.try_get_log_entries(0..100).await.expect("read");
    assert_eq!(ids(&read), (5..=10).map(|i| (1, i)).collect::<Vec<_>>());
    // A truncation that takes every held entry brings the new last one back from the
    // journal: the log's state never reads the disk.
    store.truncate(id(7)).await.expect("truncate");
    assert_eq!(store.view().last, Some(id(6)));
    assert_eq!(
        lock(&store.data)
            .entries
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![6]
    );
    let read = store.try_get_log_entries(0..100).await.expect("read");
    assert_eq!(ids(&read), vec![(1, 5), (1, 6)]);
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_log_id, Some(id(6)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn entries_written_over_after_a_truncation_read_back_as_the_new_ones_live_and_after_a_restart()
 {
    let dir = scratch("overwrite");
    let writer = start_journal(&dir, GroupFrames::default());
    let old: Vec<_> = (1..=6).map(|i| blank(1, i)).collect();
    write_entries(&writer, &old[..3]);
    write_entries(&writer, &old[3..]);
    write_record(
        &writer,
        wal::KIND_TRUNCATE,
        enc(&4u64).expect("enc"),
        None,
        Some(4),
    );
    write_entries(&writer, &[blank(2, 4), blank(2, 5)]);
    // The writer's own index followed the truncation.
    let frames = writer.read_entries(3, 1, 6).expect("read");
    let spans: Vec<_> = frames.iter().map(|(s, _)| (s.first, s.last)).collect();
    assert_eq!(spans, vec![(1, 3), (4, 5)]);

    let mut store = reopen(&dir, 0);
    let read = store.try_get_log_entries(1..=9).await.expect("read");
    assert_eq!(
        ids(&read),
        vec![(1, 1), (1, 2), (1, 3), (2, 4), (2, 5)],
        "the truncated entries of term 1 never come back"
    );
    assert_eq!(store.view().last, Some(term_id(2, 5)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_log_within_its_budget_reads_nothing_from_the_journal() {
    let dir = scratch("within");
    let writer = start_journal(&dir, GroupFrames::default());
    let all: Vec<_> = (1..=6).map(|i| blank(1, i)).collect();
    write_entries(&writer, &all);
    let mut store = reopen(&dir, u64::MAX);
    let read = store.try_get_log_entries(1..=6).await.expect("read");
    assert_eq!(read.len(), 6);
    let view = store.cache_view();
    assert_eq!((view.hits, view.misses, view.disk_reads), (6, 0, 0));
    assert_eq!(view.bytes, lock(&store.data).bytes);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn entries_after_a_truncation_stay_held_until_their_own_write_completes() {
    let dir = scratch("generation");
    let writer = start_journal(&dir, GroupFrames::default());
    let old: Vec<_> = (1..=10).map(|i| blank(1, i)).collect();
    write_entries(&writer, &old);
    let mut store = reopen(&dir, 0);
    let held = |s: &LogStore| lock(&s.data).entries.keys().copied().collect::<Vec<_>>();
    assert_eq!(lock(&store.data).written, Some(10));

    // A new leader's entries replace 5..: the journal may still hold the old ones at those
    // indexes (under `always` the truncation waits in the journal thread's queue), so only
    // what this log's own writes confirmed may leave memory.
    store.truncate(id(5)).await.expect("truncate");
    assert_eq!(held(&store), vec![4]);
    assert_eq!(lock(&store.data).written, Some(4));
    let before = lock(&store.data).generation;
    let (over, generation, _) = store.hold(vec![blank(2, 5), blank(2, 6)], 10);
    assert!(over && generation == before);
    store.trim();
    assert_eq!(
        held(&store),
        vec![5, 6],
        "4 was written; 5 and 6 are not yet"
    );

    // A completion from before the truncation does not count.
    written_through(&store.data, generation - 1, Some(10));
    store.trim();
    assert_eq!(held(&store), vec![5, 6]);
    written_through(&store.data, generation, Some(6));
    store.trim();
    assert_eq!(held(&store), vec![6]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A purge record at the last index there is (fuzz/wal_records found it: `index + 1`
/// overflowed) takes every entry out on recovery, and the purge point stays what it says.
#[test]
fn a_recovered_purge_at_the_last_index_takes_every_entry_out() {
    let record = |kind: u8, payload: Vec<u8>| wal::Record {
        kind,
        group: 3,
        payload,
        loc: crate::raft::storage::frame::Loc {
            seg: 1,
            at: 0,
            len: 0,
        },
    };
    let entries: Vec<_> = (1..=3).map(|i| blank(1, i)).collect();
    let last = id(u64::MAX);
    let records = [
        record(
            wal::KIND_ENTRIES,
            record::encode(record::JOURNAL, &entries).expect("encode"),
        ),
        record(
            wal::KIND_PURGE,
            record::encode(record::JOURNAL, &last).expect("encode"),
        ),
    ];
    let data = LogData::recover(&records).expect("recover");
    assert!(data.entries.is_empty());
    assert_eq!(data.purged, Some(last));
}
