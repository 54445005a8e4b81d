//! A group's Raft log over its core's journal, and its state machine over the group's streams.

// openraft's traits fix the error type, StorageError, which is large.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::path::PathBuf;
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
use openraft::RaftSnapshotBuilder;
use openraft::Snapshot;
use openraft::SnapshotMeta;
use openraft::StorageError;
use openraft::StorageIOError;
use openraft::StoredMembership;
use openraft::Vote;
use openraft::storage::LogFlushed;
use openraft::storage::RaftLogStorage;
use openraft::storage::RaftStateMachine;

use super::Outcome;
use super::TypeConfig;
use super::snapdrive;
use super::wal;
use crate::runtime;
use crate::stream::GroupState;

type Se = StorageError<u64>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn enc<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, Se> {
    rmp_serde::to_vec(v).map_err(|e| StorageIOError::write(&e).into())
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
    /// The records a new journal segment restates for this group: vote, purge point, commit.
    pub fn restate(&self) -> Result<Vec<(u8, Vec<u8>)>, rmp_serde::encode::Error> {
        let mut out = Vec::new();
        if let Some(v) = &self.vote {
            out.push((wal::KIND_VOTE, rmp_serde::to_vec(v)?));
        }
        if let Some(p) = &self.purged {
            out.push((wal::KIND_PURGE, rmp_serde::to_vec(p)?));
        }
        if self.committed.is_some() {
            out.push((wal::KIND_COMMITTED, rmp_serde::to_vec(&self.committed)?));
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
    pub fn recover(records: &[wal::Record]) -> Result<LogData, rmp_serde::decode::Error> {
        let mut d = LogData::default();
        for r in records {
            match r.kind {
                wal::KIND_ENTRIES => {
                    let entries: Vec<Entry<TypeConfig>> = rmp_serde::from_slice(&r.payload)?;
                    for e in entries {
                        d.entries.insert(e.log_id.index, e);
                    }
                }
                wal::KIND_VOTE => d.vote = Some(rmp_serde::from_slice(&r.payload)?),
                wal::KIND_TRUNCATE => {
                    let from: u64 = rmp_serde::from_slice(&r.payload)?;
                    d.entries.split_off(&from);
                }
                wal::KIND_PURGE => {
                    let upto: LogId<u64> = rmp_serde::from_slice(&r.payload)?;
                    d.entries = d.entries.split_off(&(upto.index + 1));
                    d.purged = Some(upto);
                }
                wal::KIND_COMMITTED => d.committed = rmp_serde::from_slice(&r.payload)?,
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

#[derive(Debug, Clone)]
pub struct LogStore {
    group: u32,
    journal: wal::Journal,
    data: Arc<Mutex<LogData>>,
    /// The node's unsnapshotted Raft log, shared by every group (`RaftLogPressure`).
    log_bytes: Arc<NodeLog>,
}

/// The node's unsnapshotted Raft log bytes, over every group, and the most it held.
#[derive(Debug, Default)]
pub struct NodeLog {
    pub bytes: AtomicU64,
    pub high: AtomicU64,
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
        }
    }

    /// The journal bytes of the entries this group's log still holds.
    pub fn bytes(&self) -> u64 {
        lock(&self.data).bytes
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

    /// Forgets the sizes of entries `keep` rejects, and their bytes from the node's count.
    fn forget(&self, d: &mut LogData, keep: impl Fn(u64) -> bool) {
        let gone: Vec<u64> = d.sizes.keys().copied().filter(|i| !keep(*i)).collect();
        let mut freed = 0;
        for i in gone {
            freed += d.sizes.remove(&i).unwrap_or(0);
        }
        d.bytes = d.bytes.saturating_sub(freed);
        // Saturating: the spread per-entry sizes may round below what was added.
        let _ = self
            .log_bytes
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(freed))
            });
    }

    fn write(
        &self,
        kind: u8,
        payload: Vec<u8>,
        force_sync: bool,
        done: Option<wal::Done>,
    ) -> Result<(), Se> {
        self.write_indexed(kind, payload, None, force_sync, done)
    }

    fn write_indexed(
        &self,
        kind: u8,
        payload: Vec<u8>,
        index: Option<u64>,
        force_sync: bool,
        done: Option<wal::Done>,
    ) -> Result<(), Se> {
        let w = wal::Write_ {
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
    async fn write_durable(&self, kind: u8, payload: Vec<u8>) -> Result<(), Se> {
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
    ) -> Result<Vec<Entry<TypeConfig>>, Se> {
        Ok(lock(&self.data)
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, Se> {
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

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), Se> {
        self.write_durable(wal::KIND_VOTE, enc(vote)?).await?;
        lock(&self.data).vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, Se> {
        Ok(lock(&self.data).vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), Se> {
        self.write(wal::KIND_COMMITTED, enc(&committed)?, false, None)?;
        lock(&self.data).committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, Se> {
        Ok(lock(&self.data).committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), Se>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        // Membership changes are always made durable before they count.
        let membership = entries
            .iter()
            .any(|e| matches!(e.payload, EntryPayload::Membership(_)));
        let payload = enc(&entries)?;
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

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), Se> {
        self.write(wal::KIND_TRUNCATE, enc(&log_id.index)?, false, None)?;
        let mut d = lock(&self.data);
        d.entries.split_off(&log_id.index);
        self.forget(&mut d, |i| i < log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), Se> {
        self.write_indexed(
            wal::KIND_PURGE,
            enc(&log_id)?,
            Some(log_id.index),
            false,
            None,
        )?;
        let mut d = lock(&self.data);
        d.entries = d.entries.split_off(&(log_id.index + 1));
        d.purged = Some(log_id);
        self.forget(&mut d, |i| i > log_id.index);
        Ok(())
    }
}

/// A stored snapshot: its meta and the serialized group state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta<u64, openraft::BasicNode>,
    /// One MessagePack binary (serde's default wrote an integer per byte); older files with
    /// integer arrays still read.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// The state machine of one group. Its stream state lives on the group's core; every call
/// here runs on that core (the group's Raft runs on the core's runtime).
#[derive(Debug)]
pub struct StateMachine {
    group: u32,
    rt: runtime::Runtime,
    applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    current: Shelf,
    /// Where the snapshot driver learns each build's size and time.
    stats: Arc<snapdrive::Stats>,
}

/// A group's newest snapshot and its file, shared by the state machine and the builders that
/// write it from a blocking thread: writing and syncing a large snapshot on the core stalled
/// every group of the core for its duration.
#[derive(Debug, Clone)]
struct Shelf {
    path: PathBuf,
    snap: Arc<Mutex<Option<StoredSnapshot>>>,
    /// Held while the file is written, so an older snapshot never overwrites a newer one.
    file: Arc<Mutex<()>>,
}

impl Shelf {
    fn get(&self) -> Option<StoredSnapshot> {
        lock(&self.snap).clone()
    }

    /// Writes `snap` and makes it current unless a newer one already is. Returns whether it did.
    fn store(&self, snap: StoredSnapshot) -> Result<bool, Se> {
        let _file = lock(&self.file);
        let newer = lock(&self.snap)
            .as_ref()
            .is_some_and(|c| c.meta.last_log_id > snap.meta.last_log_id);
        if newer {
            return Ok(false);
        }
        let bytes = enc(&snap)?;
        let tmp = self.path.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            if let Some(dir) = self.path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        *lock(&self.snap) = Some(snap);
        Ok(true)
    }
}

fn on_group<R>(
    rt: &runtime::Runtime,
    group: u32,
    f: impl FnOnce(&mut runtime::Group) -> R,
) -> Result<R, Se> {
    rt.with_group_now(group, f).ok_or_else(|| {
        StorageIOError::write_state_machine(&std::io::Error::other("no such group")).into()
    })
}

impl StateMachine {
    /// Loads the group's last snapshot from disk, if any, into the group's state.
    pub fn open(
        rt: runtime::Runtime,
        group: u32,
        dir: PathBuf,
        stats: Arc<snapdrive::Stats>,
    ) -> Result<StateMachine, Se> {
        let path = dir.join(format!("group-{group}.snap"));
        let mut sm = StateMachine {
            group,
            rt: rt.clone(),
            applied: None,
            membership: StoredMembership::default(),
            current: Shelf {
                path,
                snap: Arc::new(Mutex::new(None)),
                file: Arc::new(Mutex::new(())),
            },
            stats,
        };
        match std::fs::read(&sm.current.path) {
            Ok(bytes) => {
                let snap: StoredSnapshot = rmp_serde::from_slice(&bytes)
                    .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
                let state: GroupState = rmp_serde::from_slice(&snap.data)
                    .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
                on_group(&rt, group, move |g| g.replace_state(state))?;
                sm.applied = snap.meta.last_log_id;
                sm.membership = snap.meta.last_membership.clone();
                sm.stats.built(group, snap.data.len() as u64, None);
                *lock(&sm.current.snap) = Some(snap);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageIOError::read_snapshot(None, &e).into()),
        }
        Ok(sm)
    }

    /// Captures the group's state at the applied point, on the core: a clone that shares the
    /// stream bytes, encoded later by the builder.
    fn capture(&self) -> Result<Captured, Se> {
        let state = on_group(&self.rt, self.group, |g| g.state.clone())?;
        let id = format!(
            "{}-{}",
            self.applied.map_or(0, |l| l.index),
            crate::runtime::now_ms()
        );
        let meta = SnapshotMeta {
            last_log_id: self.applied,
            last_membership: self.membership.clone(),
            snapshot_id: id,
        };
        Ok(Captured { meta, state })
    }
}

/// A group's state as a snapshot captured it, not yet encoded.
#[derive(Debug)]
struct Captured {
    meta: SnapshotMeta<u64, openraft::BasicNode>,
    state: GroupState,
}

impl Captured {
    fn encode(self) -> Result<StoredSnapshot, Se> {
        // Sized up front: growing a buffer of many megabytes by doubling cost more than the
        // encoding itself.
        let guess = self.state.held_bytes() as usize + 1024 * (self.state.len() + 64);
        let mut data = Vec::with_capacity(guess);
        rmp_serde::encode::write(&mut data, &self.state)
            .map_err(|e| StorageIOError::read_state_machine(&e))?;
        Ok(StoredSnapshot {
            meta: self.meta,
            data,
        })
    }
}

/// Encodes and writes a captured snapshot off the core; openraft purges the log only after it
/// returns.
#[derive(Debug)]
pub struct Builder {
    captured: Option<Result<Captured, String>>,
    shelf: Shelf,
    group: u32,
    stats: Arc<snapdrive::Stats>,
    started: std::time::Instant,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, Se> {
        let failed = |m: String| -> Se {
            StorageIOError::read_state_machine(&std::io::Error::other(m)).into()
        };
        let captured = match self.captured.take() {
            Some(Ok(c)) => c,
            Some(Err(e)) => return Err(failed(e)),
            None => return Err(failed("the snapshot was already built".into())),
        };
        let shelf = self.shelf.clone();
        let snap = tokio::task::spawn_blocking(move || -> Result<StoredSnapshot, Se> {
            let snap = captured.encode()?;
            shelf.store(snap.clone())?;
            Ok(snap)
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e)))??;
        self.stats.built(
            self.group,
            snap.data.len() as u64,
            Some(self.started.elapsed()),
        );
        Ok(Snapshot {
            meta: snap.meta,
            snapshot: Box::new(Cursor::new(snap.data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Builder;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<u64>>,
            StoredMembership<u64, openraft::BasicNode>,
        ),
        Se,
    > {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, Se>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut out = Vec::new();
        for e in entries {
            self.applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => out.push(Outcome(Vec::new())),
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(e.log_id), m);
                    out.push(Outcome(Vec::new()));
                }
                EntryPayload::Normal(p) => {
                    let now = p.now_ms;
                    let r = on_group(&self.rt, self.group, move |g| {
                        p.cmds.into_iter().map(|c| g.apply(c, now)).collect()
                    })?;
                    out.push(Outcome(r));
                }
            }
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Captured here, on the core, at the applied point; the builder writes it elsewhere.
        let started = std::time::Instant::now();
        let captured = self.capture().map_err(|e| e.to_string());
        tracing::debug!(
            group = self.group,
            took_us = started.elapsed().as_micros() as u64,
            "snapshot captured on the core"
        );
        Builder {
            captured: Some(captured),
            shelf: self.current.clone(),
            group: self.group,
            stats: self.stats.clone(),
            started,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, Se> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), Se> {
        let data = snapshot.into_inner();
        let state: GroupState =
            rmp_serde::from_slice(&data).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        on_group(&self.rt, self.group, move |g| g.replace_state(state))?;
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        let snap = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        let len = snap.data.len() as u64;
        self.current.store(snap)?;
        self.stats.built(self.group, len, None);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, Se> {
        Ok(self.current.get().map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
