//! A group's Raft log over its core's journal: what openraft's `RaftLogStorage` asks of it, the
//! log rebuilt from the journal at start, and the byte counts the snapshot driver weighs.

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
use super::record;
use super::record::RecordError;
use super::wal;
use crate::raft::TypeConfig;
use crate::raft::stats::NodeLog;

type StoreError = StorageError<u64>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A journal payload: a sealed record ([`record::JOURNAL`]).
fn enc<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    record::encode(record::JOURNAL, v).map_err(|e| StorageIOError::write(&e).into())
}

/// About the encoded size of `entries`, so their buffer is allocated once: grown from the
/// default guess it was reallocated twice for a single 100-byte append.
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
    pub entries: BTreeMap<u64, Entry<TypeConfig>>,
    /// Journal bytes of each entry still held (the batch's size spread over its entries).
    pub sizes: BTreeMap<u64, u64>,
    /// The sum of `sizes`: what the snapshot driver weighs this group by.
    pub bytes: u64,
    pub vote: Option<Vote<u64>>,
    pub committed: Option<LogId<u64>>,
    pub purged: Option<LogId<u64>>,
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
                    for e in entries {
                        d.entries.insert(e.log_id.index, e);
                    }
                }
                wal::KIND_VOTE => d.vote = Some(record::decode(kind, &r.payload)?),
                wal::KIND_TRUNCATE => {
                    let from: u64 = record::decode(kind, &r.payload)?;
                    d.entries.split_off(&from);
                }
                wal::KIND_PURGE => {
                    let upto: LogId<u64> = record::decode(kind, &r.payload)?;
                    d.entries = d.entries.split_off(&(upto.index + 1));
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

/// What a group's log holds in memory now and what Raft read of it (the `wal_cache_*`
/// metrics): every entry is held in memory, so every read is served from there.
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheView {
    pub bytes: u64,
    pub entries: u64,
    /// Entries served to Raft (replication, apply) since the process started.
    pub hits: u64,
}

#[derive(Debug, Clone)]
pub struct LogStore {
    group: u32,
    journal: wal::Journal,
    data: Arc<Mutex<LogData>>,
    /// The node's unsnapshotted Raft log, shared by every group (`RaftLogPressure`).
    log_bytes: Arc<NodeLog>,
    /// Entries served to readers; an atomic, so counting costs the read path no lock.
    served: Arc<AtomicU64>,
}

impl LogStore {
    pub fn new(
        group: u32,
        journal: wal::Journal,
        mut data: LogData,
        log_bytes: Arc<NodeLog>,
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
        let now = log_bytes.bytes.fetch_add(total, Ordering::Relaxed) + total;
        log_bytes.high.fetch_max(now, Ordering::Relaxed);
        LogStore::assemble(group, journal, data, log_bytes)
    }

    fn assemble(
        group: u32,
        journal: wal::Journal,
        data: LogData,
        log_bytes: Arc<NodeLog>,
    ) -> LogStore {
        LogStore {
            group,
            journal,
            data: Arc::new(Mutex::new(data)),
            log_bytes,
            served: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The group's log in memory and the reads it served.
    pub fn cache_view(&self) -> CacheView {
        let d = lock(&self.data);
        CacheView {
            bytes: d.bytes,
            entries: d.entries.len() as u64,
            hits: self.served.load(Ordering::Relaxed),
        }
    }

    /// The journal bytes of the entries this group's log still holds.
    pub fn bytes(&self) -> u64 {
        lock(&self.data).bytes
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
        let w = wal::Append {
            kind,
            group: self.group,
            payload,
            index,
            force_sync,
            done,
        };
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

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StoreError> {
        let out: Vec<_> = lock(&self.data)
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect();
        self.served.fetch_add(out.len() as u64, Ordering::Relaxed);
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
        {
            let each = payload.len() as u64 / entries.len().max(1) as u64;
            let mut d = lock(&self.data);
            let mut replaced = 0;
            for e in entries {
                replaced += d.sizes.insert(e.log_id.index, each).unwrap_or(0);
                d.bytes += each;
                d.entries.insert(e.log_id.index, e);
            }
            d.bytes = d.bytes.saturating_sub(replaced);
            let added = payload.len() as u64;
            let now = self.log_bytes.bytes.fetch_add(added, Ordering::Relaxed) + added;
            self.log_bytes.high.fetch_max(now, Ordering::Relaxed);
        }
        self.write_indexed(
            wal::KIND_ENTRIES,
            payload,
            last,
            membership,
            Some(Box::new(move |r| callback.log_io_completed(r))),
        )
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        self.write(wal::KIND_TRUNCATE, enc(&log_id.index)?, false, None)?;
        let mut d = lock(&self.data);
        self.remove_from(&mut d, log_id.index);
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
mod tests {
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
        let mut store = LogStore::new(3, journal, data, node.clone());
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
}
