//! A group's Raft log over its core's journal: what openraft's `RaftLogStorage` asks of it, the
//! log rebuilt from the journal at start, and the byte counts the snapshot driver weighs.
//!
//! Only the group's recent entries stay in memory: its share of `raft.wal.cache_size`. Once
//! the held entries outgrow it, the oldest that the journal has written are dropped, and a read
//! of them (a lagging follower's catch-up, an apply far behind) goes back to the journal
//! ([`wal::Journal::read_entries`]). The log's last entry is always held, so the log's state
//! never needs the disk.

// openraft's traits fix the error type, StorageError, which is large.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use openraft::Entry;
use openraft::EntryPayload;
use openraft::LogId;
use openraft::LogState;
use openraft::RaftLogReader;
use openraft::StorageError;
use openraft::StorageIOError;
use openraft::Vote;
use openraft::storage::LogFlushed;
use openraft::storage::RaftLogStorage;

use super::background;
use super::frame::GroupFrames;
use super::log_counters::NodeLog;
use super::record;
use super::record::RecordError;
use super::wal;
use crate::raft::types::TypeConfig;

type StoreError = StorageError<u64>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A journal payload: a sealed record ([`record::JOURNAL`]).
fn enc<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    record::encode(record::JOURNAL, v).map_err(|e| StorageIOError::write(&e).into())
}

/// About the encoded size of `entries`, so their buffer is allocated once: grown from the
/// default guess it would be reallocated even for a single small append (docs/dev/speed-log.md,
/// "What a write does with its headers, trimmed again").
fn encoded_guess(entries: &[Entry<TypeConfig>]) -> usize {
    // Keys, types, producer and the entry's own fields: well under this for a usual write.
    const PER_WRITE: usize = 160;
    entries
        .iter()
        .map(|e| match &e.payload {
            EntryPayload::Normal(w) => w
                .cmds
                .iter()
                .map(|c| c.body_bytes() as usize + PER_WRITE)
                .sum(),
            _ => PER_WRITE,
        })
        .sum()
}

/// The log of one group as far as this replica has it.
#[derive(Debug, Default)]
pub struct LogData {
    /// The entries held in memory: after recovery every one, then the newest (see the module
    /// docs).
    pub entries: BTreeMap<u64, Entry<TypeConfig>>,
    /// Journal bytes of each entry of the log, held or not (the batch's size spread over its
    /// entries).
    pub sizes: BTreeMap<u64, u64>,
    /// The sum of `sizes`.
    pub bytes: u64,
    /// The latest snapshot's last index, as [`LogStore::mark_snapshotted`] learned it: entries
    /// at or below it are kept only for lagging followers (openraft keeps a tail after a
    /// snapshot) and are not the unsnapshotted log.
    pub snapshotted: Option<u64>,
    /// The part of `bytes` at or below `snapshotted`. `bytes - below` is the unsnapshotted log:
    /// what the snapshot driver weighs this group by and what `RaftLogPressure` counts.
    pub below: u64,
    /// The part of `bytes` whose entries are held in `entries`.
    pub cached: u64,
    /// Where the recovered entries are in the journal; handed to the journal at start.
    pub frames: GroupFrames,
    pub vote: Option<Vote<u64>>,
    pub committed: Option<LogId<u64>>,
    pub purged: Option<LogId<u64>>,
    /// The highest index of this log the journal has written, as this log's own writes
    /// learned it: only entries up to it may be dropped from memory. Not the journal's index,
    /// which lags a truncation still queued for the journal's thread.
    pub written: Option<u64>,
    /// Bumped by every truncation, so an append's completion that an earlier truncation
    /// overtook does not count its entries as written.
    pub generation: u64,
}

impl LogData {
    /// The records a new journal segment restates for `group`: vote, purge point, commit.
    pub fn restate(&self, group: u32) -> Result<Vec<wal::Restated>, RecordError> {
        let mut out = Vec::new();
        let mut add = |kind, payload, purged_to| {
            out.push(wal::Restated {
                kind,
                group,
                payload,
                purged_to,
            })
        };
        if let Some(v) = &self.vote {
            add(wal::KIND_VOTE, record::encode(record::JOURNAL, v)?, None);
        }
        if let Some(p) = &self.purged {
            add(
                wal::KIND_PURGE,
                record::encode(record::JOURNAL, p)?,
                Some(p.index),
            );
        }
        if self.committed.is_some() {
            add(
                wal::KIND_COMMITTED,
                record::encode(record::JOURNAL, &self.committed)?,
                None,
            );
        }
        Ok(out)
    }

    pub fn last_index(&self) -> Option<u64> {
        self.entries.keys().next_back().copied()
    }

    /// Whether the replica ever held the group: a vote, entries or a purge point.
    pub fn holds(&self) -> bool {
        self.vote.is_some() || !self.entries.is_empty() || self.purged.is_some()
    }

    /// Rebuilds a group's log from its journal records, in journal order.
    pub fn recover(records: &[wal::Record]) -> Result<LogData, RecordError> {
        let mut d = LogData::default();
        let kind = record::JOURNAL;
        for r in records {
            match r.kind {
                wal::KIND_ENTRIES => {
                    let entries: Vec<Entry<TypeConfig>> = record::decode(kind, &r.payload)?;
                    if let (Some(first), Some(last)) = (entries.first(), entries.last()) {
                        d.frames.add(first.log_id.index, last.log_id.index, r.loc);
                        // Entries at or below the last replace it from there, as live.
                        d.entries.split_off(&first.log_id.index);
                    }
                    for e in entries {
                        d.entries.insert(e.log_id.index, e);
                    }
                }
                wal::KIND_VOTE => d.vote = Some(record::decode(kind, &r.payload)?),
                wal::KIND_TRUNCATE => {
                    let from: u64 = record::decode(kind, &r.payload)?;
                    d.entries.split_off(&from);
                    d.frames.truncate(from);
                }
                wal::KIND_PURGE => {
                    let upto: LogId<u64> = record::decode(kind, &r.payload)?;
                    // A purge at the last index there is keeps nothing; `+ 1` would overflow on
                    // such a record (CRC-valid, but no log reaches it), found by fuzzing.
                    d.entries = match upto.index.checked_add(1) {
                        Some(next) => d.entries.split_off(&next),
                        None => BTreeMap::new(),
                    };
                    d.frames.purge(upto.index);
                    d.purged = Some(upto);
                }
                wal::KIND_COMMITTED => d.committed = record::decode(kind, &r.payload)?,
                _ => {}
            }
        }
        Ok(d)
    }
}

/// What a group's log holds now, for metrics, probes and refused votes.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogView {
    pub vote: Option<Vote<u64>>,
    /// The last log id, the purge point when every entry was purged.
    pub last: Option<LogId<u64>>,
    pub committed: Option<LogId<u64>>,
    pub purged: Option<LogId<u64>>,
}

impl LogView {
    /// Whether the replica ever held the group: a vote, entries or a purge point.
    pub fn holds(&self) -> bool {
        self.vote.is_some() || self.last.is_some()
    }
}

/// What a group's log holds in memory now and what Raft read of it (the `wal_cache_*` and
/// `wal_disk_read*` metrics).
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheView {
    /// Journal bytes of the entries held in memory.
    pub bytes: u64,
    /// Entries of the log, held or not.
    pub entries: u64,
    /// Since the process started: entries served to Raft (replication, apply) from memory,
    /// and read back from the journal.
    pub hits: u64,
    pub misses: u64,
    /// Journal frames read back, and their payloads' bytes.
    pub disk_reads: u64,
    pub disk_read_bytes: u64,
}

/// What [`CacheView`] counts; atomics, so counting costs the read path no lock.
#[derive(Debug, Default)]
struct Reads {
    hits: AtomicU64,
    misses: AtomicU64,
    disk_reads: AtomicU64,
    disk_read_bytes: AtomicU64,
}

/// The first and last index `range` names (`None` when it names none).
fn inclusive(range: &impl RangeBounds<u64>) -> Option<(u64, u64)> {
    use std::ops::Bound;
    let from = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let to = match range.end_bound() {
        Bound::Included(e) => *e,
        Bound::Excluded(e) => e.checked_sub(1)?,
        Bound::Unbounded => u64::MAX,
    };
    (from <= to).then_some((from, to))
}

#[derive(Debug, Clone)]
pub struct LogStore {
    group: u32,
    journal: wal::Journal,
    data: Arc<Mutex<LogData>>,
    /// The node's unsnapshotted Raft log, shared by every group (`RaftLogPressure`).
    log_bytes: Arc<NodeLog>,
    /// The journal bytes of entries this group holds in memory before it drops its oldest.
    budget: u64,
    reads: Arc<Reads>,
}

impl LogStore {
    /// `budget`: the journal bytes of entries the group holds in memory, its share of
    /// `raft.wal.cache_size`. `journal` must hold `data`'s frames.
    pub fn new(
        group: u32,
        journal: wal::Journal,
        mut data: LogData,
        log_bytes: Arc<NodeLog>,
        budget: u64,
    ) -> LogStore {
        // Recovered entries count too; their size is approximated by their encoding.
        let mut total = 0;
        let sizes: Vec<(u64, u64)> = data
            .entries
            .iter()
            .map(|(i, e)| (*i, rmp_serde::to_vec(e).map_or(0, |b| b.len() as u64)))
            .collect();
        for (i, n) in sizes {
            data.sizes.insert(i, n);
            total += n;
        }
        data.bytes = total;
        data.cached = total;
        data.frames = GroupFrames::default();
        // Recovered entries were read from the journal.
        data.written = data.last_index();
        let now = log_bytes.bytes.fetch_add(total, Ordering::Relaxed) + total;
        log_bytes.high.fetch_max(now, Ordering::Relaxed);
        let store = LogStore {
            group,
            journal,
            data: Arc::new(Mutex::new(data)),
            log_bytes,
            budget,
            reads: Arc::new(Reads::default()),
        };
        store.trim();
        store
    }

    /// The group's log in memory and the reads it served.
    pub fn cache_view(&self) -> CacheView {
        let (bytes, entries) = {
            let d = lock(&self.data);
            (d.cached, d.sizes.len() as u64)
        };
        let r = &self.reads;
        CacheView {
            bytes,
            entries,
            hits: r.hits.load(Ordering::Relaxed),
            misses: r.misses.load(Ordering::Relaxed),
            disk_reads: r.disk_reads.load(Ordering::Relaxed),
            disk_read_bytes: r.disk_read_bytes.load(Ordering::Relaxed),
        }
    }

    /// Takes appended entries into the log, each `each` journal bytes; returns whether the
    /// held entries are now over the budget, and the truncation generation they belong to.
    fn hold(&self, entries: Vec<Entry<TypeConfig>>, each: u64) -> (bool, u64, u64) {
        let mut d = lock(&self.data);
        // Entries are written after the log's last; should any come at or below it, they
        // replace it from there, as in the journal's index (held entries stay the log's
        // newest, which reads rely on).
        if let Some(first) = entries.first().map(|e| e.log_id.index)
            && d.sizes.last_key_value().is_some_and(|(l, _)| first <= *l)
        {
            self.remove_from(&mut d, first);
        }
        let mut counted = 0;
        for e in entries {
            d.sizes.insert(e.log_id.index, each);
            d.bytes += each;
            if d.snapshotted.is_some_and(|s| e.log_id.index <= s) {
                d.below += each;
            } else {
                counted += each;
            }
            d.cached += each;
            d.entries.insert(e.log_id.index, e);
        }
        (d.cached > self.budget, d.generation, counted)
    }

    /// Openraft's start reads no commit index, so it replays nothing: for a group whose
    /// committed entry failed to apply at start (`raft::start`). Nothing is written; the commit
    /// index comes back from the leader, or from the journal at the next start.
    pub fn forget_committed(&self) {
        lock(&self.data).committed = None;
    }

    /// The group's latest snapshot covers the log up to `index`: the entries kept at or below
    /// it leave the unsnapshotted log, the group's and the node's.
    pub fn mark_snapshotted(&self, index: u64) {
        let mut d = lock(&self.data);
        if d.snapshotted.is_some_and(|s| s >= index) {
            return;
        }
        let from = d.snapshotted.map_or(0, |s| s + 1);
        let moved: u64 = d.sizes.range(from..=index).map(|(_, n)| n).sum();
        d.below += moved;
        d.snapshotted = Some(index);
        drop(d);
        let _ = self
            .log_bytes
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(moved))
            });
    }

    /// Drops the oldest held entries the journal has written while the held ones exceed the
    /// budget, keeping the last. Off the core when a recovery or a large batch drops many.
    fn trim(&self) {
        let mut d = lock(&self.data);
        let written = d.written;
        let mut dropped = Vec::new();
        while d.cached > self.budget && d.entries.len() > 1 {
            let Some(entry) = d.entries.first_entry() else {
                break;
            };
            if written.is_none_or(|w| *entry.key() > w) {
                break;
            }
            let (index, e) = entry.remove_entry();
            let size = d.sizes.get(&index).copied().unwrap_or(0);
            d.cached = d.cached.saturating_sub(size);
            dropped.push(e);
        }
        drop(d);
        if dropped.len() > 64 {
            background::drop_later(dropped);
        }
    }

    /// Reads `from..=to` back from the journal, off the core thread, and counts it. Entries
    /// purged meanwhile may be missing.
    async fn read_back(&self, from: u64, to: u64) -> Result<Vec<Entry<TypeConfig>>, StoreError> {
        let (journal, group) = (self.journal.clone(), self.group);
        let frames = tokio::task::spawn_blocking(move || journal.read_entries(group, from, to))
            .await
            .map_err(|e| StoreError::from(StorageIOError::read_logs(&e)))?;
        let frames = frames.map_err(|e| StoreError::from(StorageIOError::read_logs(&e)))?;
        let mut out = Vec::new();
        for (span, payload) in frames {
            self.reads.disk_reads.fetch_add(1, Ordering::Relaxed);
            let n = payload.len() as u64;
            self.reads.disk_read_bytes.fetch_add(n, Ordering::Relaxed);
            let entries: Vec<Entry<TypeConfig>> = record::decode(record::JOURNAL, &payload)
                .map_err(|e| StoreError::from(StorageIOError::read_logs(&e)))?;
            let want = from.max(span.first)..=to.min(span.last);
            out.extend(
                entries
                    .into_iter()
                    .filter(|e| want.contains(&e.log_id.index)),
            );
        }
        Ok(out)
    }

    /// The journal bytes of this group's unsnapshotted log: the entries it still holds above
    /// its latest snapshot.
    pub fn bytes(&self) -> u64 {
        let d = lock(&self.data);
        d.bytes.saturating_sub(d.below)
    }

    /// Whether this group's unpurged entries kept a sealed journal segment on disk at the
    /// journal's last reclaim pass.
    pub fn pins_sealed_segment(&self) -> bool {
        self.journal.counters().is_lagging(self.group)
    }

    pub fn view(&self) -> LogView {
        let d = lock(&self.data);
        LogView {
            vote: d.vote,
            last: d
                .entries
                .values()
                .next_back()
                .map(|e| e.log_id)
                .or(d.purged),
            committed: d.committed,
            purged: d.purged,
        }
    }

    /// Takes the entries at and after `from` out of the log (a truncation).
    fn remove_from(&self, d: &mut LogData, from: u64) {
        d.generation += 1;
        d.written = d.written.min(from.checked_sub(1));
        let entries = d.entries.split_off(&from);
        let sizes = d.sizes.split_off(&from);
        self.release(d, entries, sizes);
    }

    /// Takes the entries before `end` out of the log (a purge).
    fn remove_before(&self, d: &mut LogData, end: u64) {
        let kept = d.entries.split_off(&end);
        let kept_sizes = d.sizes.split_off(&end);
        let entries = std::mem::replace(&mut d.entries, kept);
        let sizes = std::mem::replace(&mut d.sizes, kept_sizes);
        self.release(d, entries, sizes);
    }

    /// Takes what a truncation or purge removed off the log's and the node's byte counts, and
    /// frees it on the reaper thread: a purge after a snapshot removes tens of thousands of
    /// entries, and freeing them here stalled the core's appends for tens of milliseconds.
    fn release(
        &self,
        d: &mut LogData,
        entries: BTreeMap<u64, Entry<TypeConfig>>,
        sizes: BTreeMap<u64, u64>,
    ) {
        let freed: u64 = sizes.values().sum();
        d.bytes = d.bytes.saturating_sub(freed);
        let below: u64 = match d.snapshotted {
            Some(s) => sizes.range(..=s).map(|(_, n)| n).sum(),
            None => 0,
        };
        d.below = d.below.saturating_sub(below);
        let freed = freed.saturating_sub(below);
        let held: u64 = entries.keys().filter_map(|i| sizes.get(i)).sum();
        d.cached = d.cached.saturating_sub(held);
        // Saturating: the spread per-entry sizes may round below what was added.
        let _ = self
            .log_bytes
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(freed))
            });
        if !entries.is_empty() {
            background::drop_later((entries, sizes));
        }
    }

    fn write(
        &self,
        kind: u8,
        payload: Vec<u8>,
        force_sync: bool,
        done: Option<wal::Done>,
    ) -> Result<(), StoreError> {
        self.write_indexed(kind, payload, None, force_sync, done)
    }

    fn write_indexed(
        &self,
        kind: u8,
        payload: Vec<u8>,
        index: Option<u64>,
        force_sync: bool,
        done: Option<wal::Done>,
    ) -> Result<(), StoreError> {
        self.send(wal::Append {
            kind,
            group: self.group,
            payload,
            index,
            first: None,
            force_sync,
            done,
        })
    }

    fn send(&self, w: wal::Append) -> Result<(), StoreError> {
        self.journal
            .write(w)
            .map_err(|_| StorageIOError::write(&std::io::Error::other("journal stopped")).into())
    }

    /// Writes and waits until the record is durable.
    async fn write_durable(&self, kind: u8, payload: Vec<u8>) -> Result<(), StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.write(
            kind,
            payload,
            true,
            Some(Box::new(move |r| drop(tx.send(r)))),
        )?;
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StorageIOError::write(&e).into()),
            Err(e) => Err(StorageIOError::write(&e).into()),
        }
    }
}

/// An append of entries up to `last` is written: the journal writes in order, so everything
/// before it is too. Unless a truncation came after the append was queued (`generation`
/// moved on): its entries may be gone.
fn written_through(data: &Mutex<LogData>, generation: u64, last: Option<u64>) {
    let mut d = lock(data);
    if d.generation == generation {
        d.written = d.written.max(last);
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StoreError> {
        let Some((from, to)) = inclusive(&range) else {
            return Ok(Vec::new());
        };
        // What is held, and the part of the range before it that the log has on disk only.
        let (held, behind) = {
            let d = lock(&self.data);
            let held: Vec<_> = d.entries.range(range).map(|(_, e)| e.clone()).collect();
            let first_held = d.entries.keys().next().copied();
            let first_on_disk = d.sizes.keys().next().copied();
            let behind = match (first_on_disk, first_held) {
                (Some(a), Some(b)) if a < b => {
                    let (lo, hi) = (from.max(a), to.min(b - 1));
                    (lo <= hi).then_some((lo, hi))
                }
                _ => None,
            };
            (held, behind)
        };
        self.reads
            .hits
            .fetch_add(held.len() as u64, Ordering::Relaxed);
        let Some((lo, hi)) = behind else {
            return Ok(held);
        };
        let mut out = self.read_back(lo, hi).await?;
        // A purge while the read ran may have taken entries from the front; anything else
        // missing is a journal that lost entries the log still counts.
        let purged = lock(&self.data).purged.map(|p| p.index);
        out.retain(|e| purged.is_none_or(|p| e.log_id.index > p));
        let misses = out.len() as u64;
        self.reads.misses.fetch_add(misses, Ordering::Relaxed);
        let start = purged.map_or(lo, |p| lo.max(p.saturating_add(1)));
        let contiguous = out.first().is_none_or(|e| e.log_id.index == start)
            && out
                .windows(2)
                .all(|w| w[1].log_id.index == w[0].log_id.index + 1);
        let complete = match out.last() {
            Some(e) => e.log_id.index == hi,
            None => purged.is_some_and(|p| p >= hi),
        };
        if !(contiguous && complete) {
            let got = (
                out.first().map(|e| e.log_id.index),
                out.last().map(|e| e.log_id.index),
            );
            let e = std::io::Error::other(format!(
                "group {}: entries {lo}..={hi} read back from the journal as {got:?}",
                self.group
            ));
            return Err(StorageIOError::read_logs(&e).into());
        }
        out.extend(held);
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StoreError> {
        let d = lock(&self.data);
        let last = d
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(d.purged);
        Ok(LogState {
            last_purged_log_id: d.purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StoreError> {
        self.write_durable(wal::KIND_VOTE, enc(vote)?).await?;
        lock(&self.data).vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StoreError> {
        Ok(lock(&self.data).vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), StoreError> {
        self.write(wal::KIND_COMMITTED, enc(&committed)?, false, None)?;
        lock(&self.data).committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StoreError> {
        Ok(lock(&self.data).committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        // Membership changes are always made durable before they count.
        let membership = entries
            .iter()
            .any(|e| matches!(e.payload, EntryPayload::Membership(_)));
        let payload = record::encode_sized(record::JOURNAL, &entries, encoded_guess(&entries))
            .map_err(|e| StoreError::from(StorageIOError::write(&e)))?;
        let last = entries.last().map(|e| e.log_id.index);
        let first = entries.first().map(|e| e.log_id.index);
        let each = payload.len() as u64 / entries.len().max(1) as u64;
        let (over, generation, added) = self.hold(entries, each);
        let now = self.log_bytes.bytes.fetch_add(added, Ordering::Relaxed) + added;
        self.log_bytes.high.fetch_max(now, Ordering::Relaxed);
        let data = self.data.clone();
        let w = wal::Append {
            kind: wal::KIND_ENTRIES,
            group: self.group,
            payload,
            index: last,
            first,
            force_sync: membership,
            done: Some(Box::new(move |r: std::io::Result<()>| {
                if r.is_ok() {
                    written_through(&data, generation, last);
                }
                callback.log_io_completed(r)
            })),
        };
        self.send(w)?;
        if over {
            self.trim();
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        let from = log_id.index;
        self.write_indexed(wal::KIND_TRUNCATE, enc(&from)?, Some(from), false, None)?;
        let last_dropped = {
            let mut d = lock(&self.data);
            self.remove_from(&mut d, from);
            // The log's last entry is always held: when the truncation took every held one,
            // the new last comes back from the journal.
            let last = d.sizes.keys().next_back().copied();
            last.filter(|_| d.entries.is_empty())
        };
        if let Some(last) = last_dropped {
            let back = self.read_back(last, last).await?;
            let Some(e) = back.into_iter().find(|e| e.log_id.index == last) else {
                let e = std::io::Error::other(format!(
                    "group {}: the log's last entry {last} is not in the journal",
                    self.group
                ));
                return Err(StorageIOError::read_logs(&e).into());
            };
            let mut d = lock(&self.data);
            if d.entries.is_empty() && d.sizes.keys().next_back() == Some(&last) {
                d.cached += d.sizes[&last];
                d.entries.insert(last, e);
            }
        }
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        self.write_indexed(
            wal::KIND_PURGE,
            enc(&log_id)?,
            Some(log_id.index),
            false,
            None,
        )?;
        let mut d = lock(&self.data);
        self.remove_before(&mut d, log_id.index + 1);
        d.purged = Some(log_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
