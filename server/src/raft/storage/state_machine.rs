//! A group's state machine: the group's streams, applied from the log on the group's core;
//! its snapshots captured on the core and encoded and written off it.

// openraft's traits fix the error type, StorageError, which is large.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;

use openraft::Entry;
use openraft::EntryPayload;
use openraft::LogId;
use openraft::RaftSnapshotBuilder;
use openraft::Snapshot;
use openraft::SnapshotMeta;
use openraft::StorageError;
use openraft::StorageIOError;
use openraft::StoredMembership;
use openraft::storage::RaftStateMachine;

use super::apply_guard;
use super::background;
use super::log_counters::SnapStats;
use super::record;
use super::record::RecordError;
use super::snapstore::SnapStore;
use super::snapstore::SnapStoreError;
use super::snapstore::SnapshotRef;
use crate::raft::types::Outcome;
use crate::raft::types::TypeConfig;
use crate::runtime;
use ursula_state::stream::GroupState;

type StoreError = StorageError<u64>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stored snapshot: its meta and the group state, as the snapshot file holds it (a sealed
/// [`record::SNAPSHOT_FILE`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta<u64, openraft::BasicNode>,
    /// The group state, a sealed [`record::GROUP_STATE`]: what `InstallSnapshot` ships. One
    /// MessagePack binary (serde's default wrote an integer per byte); older files with
    /// integer arrays still read.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// Reads a snapshot file's bytes.
pub fn read_snapshot_file(bytes: &[u8]) -> Result<StoredSnapshot, RecordError> {
    record::decode(record::SNAPSHOT_FILE, bytes)
}

/// Reads a snapshot's group state, as a file or a leader's `InstallSnapshot` carries it.
pub fn read_group_state(data: &[u8]) -> Result<GroupState, RecordError> {
    record::decode(record::GROUP_STATE, data)
}

/// A snapshot file's bytes in one buffer, as the fixtures pin them; the node writes the file
/// with [`write_snapshot_file_to`].
#[cfg(test)]
pub fn write_snapshot_file(snap: &StoredSnapshot) -> Result<Vec<u8>, RecordError> {
    record::encode_sized(record::SNAPSHOT_FILE, snap, snap.data.len() + 256)
}

/// Writes a snapshot file's bytes ([`write_snapshot_file`]) to `out` without a copy of them in
/// memory.
pub fn write_snapshot_file_to(
    snap: &StoredSnapshot,
    out: impl std::io::Write,
) -> Result<(), RecordError> {
    record::write_to(record::SNAPSHOT_FILE, snap, out)
}

/// A group state as a snapshot carries it.
pub fn write_group_state(state: &GroupState) -> Result<Vec<u8>, RecordError> {
    // Sized up front: the stream bytes plus some per-stream metadata.
    let guess = state.held_bytes() as usize + 1024 * (state.len() + 64);
    record::encode_sized(record::GROUP_STATE, state, guess)
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
    /// The snapshot read at start, until openraft's start-up asks for it once: read again from
    /// the file instead, it would be read twice for every group.
    loaded: Option<StoredSnapshot>,
    /// Where the snapshot driver learns each build's size and time.
    stats: Arc<SnapStats>,
    /// The S3 snapshot namespace, with S3 snapshots: the file then holds a reference.
    snaps: Option<Arc<SnapStore>>,
    /// `testing.apply_panic_on`: appends holding these bytes panic as they apply.
    panic_on: Option<Arc<[u8]>>,
}

/// A group's newest snapshot and its file, shared by the state machine and the builders that
/// write it from a blocking thread: writing and syncing a large snapshot on the core stalled
/// every group of the core for its duration.
///
/// Only the snapshot's metadata stays in memory. Its bytes are as large as the group's hot
/// window, which the group's state already holds; keeping them too doubled what a durable node
/// held for its streams. openraft asks for them only to send a lagging follower the snapshot,
/// and gets them read back from the file.
#[derive(Debug, Clone)]
struct Shelf {
    path: PathBuf,
    meta: Arc<Mutex<Option<SnapshotMeta<u64, openraft::BasicNode>>>>,
    /// Held while the file is written, so an older snapshot never overwrites a newer one.
    file: Arc<Mutex<()>>,
}

impl Shelf {
    /// Reads the newest snapshot back from its file; `None` before the first one.
    fn load(&self) -> Result<Option<StoredSnapshot>, StoreError> {
        // The file lock keeps a store from replacing the file between the check and the read.
        let _file = lock(&self.file);
        if lock(&self.meta).is_none() {
            return Ok(None);
        }
        let bytes =
            std::fs::read(&self.path).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        let snap =
            read_snapshot_file(&bytes).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        Ok(Some(snap))
    }

    /// Writes `snap` and makes it current unless a newer one already is. Returns whether it did.
    fn store(&self, snap: &StoredSnapshot) -> Result<bool, StoreError> {
        let _file = lock(&self.file);
        let newer = lock(&self.meta)
            .as_ref()
            .is_some_and(|c| c.last_log_id > snap.meta.last_log_id);
        if newer {
            return Ok(false);
        }
        let tmp = self.path.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            // In pieces: a thread inside one large `write` keeps its CPU (`Bounded`).
            let mut f = std::io::BufWriter::with_capacity(
                background::WRITE_CHUNK,
                background::Bounded(std::fs::File::create(&tmp)?),
            );
            write_snapshot_file_to(snap, &mut f).map_err(std::io::Error::other)?;
            let background::Bounded(f) = f.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            if let Some(dir) = self.path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        *lock(&self.meta) = Some(snap.meta.clone());
        Ok(true)
    }
}

fn snap_error(e: SnapStoreError) -> StoreError {
    StorageIOError::read_snapshot(None, &std::io::Error::other(e)).into()
}

/// The group state a snapshot's data holds or, with S3 snapshots, names; and its size.
async fn state_of(
    snaps: Option<&SnapStore>,
    group: u32,
    data: &[u8],
) -> Result<(GroupState, u64, Option<String>), StoreError> {
    match SnapshotRef::read(data) {
        None => {
            let state =
                read_group_state(data).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
            Ok((state, data.len() as u64, None))
        }
        Some(r) => {
            let r = r.map_err(|e| snap_error(SnapStoreError::Reference(e)))?;
            let snaps = snaps.ok_or_else(|| snap_error(SnapStoreError::NoStore))?;
            let state = snaps.take(group, &r).await.map_err(snap_error)?;
            Ok((state, r.len, Some(r.key)))
        }
    }
}

/// Publishes the node's pins off the caller's path; a failure is retried by the next prune
/// pass, well within the grace that keeps a fresh object.
fn publish_later(snaps: &Arc<SnapStore>) {
    let s = snaps.clone();
    snaps.spawn(async move {
        if let Err(e) = s.publish().await {
            tracing::warn!(error = %e, "cannot publish this node's snapshot pins; the next prune pass tries again");
        }
    });
}

fn on_group<R>(
    rt: &runtime::Runtime,
    group: u32,
    f: impl FnOnce(&mut runtime::Group) -> R,
) -> Result<R, StoreError> {
    if let Some(stop) = rt.apply_stop(group) {
        return Err(stopped(stop));
    }
    rt.with_group_now(group, f).ok_or_else(|| {
        StorageIOError::write_state_machine(&std::io::Error::other("no such group")).into()
    })
}

fn stopped(stop: &runtime::ApplyStop) -> StoreError {
    let e = std::io::Error::other(format!(
        "the group stopped: the committed entry at term {} index {} failed to apply ({}: {})",
        stop.term, stop.index, stop.kind, stop.message
    ));
    StorageIOError::apply(
        LogId::new(openraft::CommittedLeaderId::new(stop.term, 0), stop.index),
        &e,
    )
    .into()
}

impl StateMachine {
    /// Loads the group's last snapshot from disk (and, with S3 snapshots, the state its file
    /// names from the store), if any, into the group's state.
    pub async fn open(
        rt: runtime::Runtime,
        group: u32,
        dir: PathBuf,
        stats: Arc<SnapStats>,
        snaps: Option<Arc<SnapStore>>,
    ) -> Result<StateMachine, StoreError> {
        let path = dir.join(format!("group-{group}.snap"));
        let mut sm = StateMachine {
            group,
            rt: rt.clone(),
            applied: None,
            membership: StoredMembership::default(),
            current: Shelf {
                path,
                meta: Arc::new(Mutex::new(None)),
                file: Arc::new(Mutex::new(())),
            },
            loaded: None,
            stats,
            snaps,
            panic_on: None,
        };
        match std::fs::read(&sm.current.path) {
            Ok(bytes) => {
                let snap = read_snapshot_file(&bytes)
                    .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
                let (state, len, key) = state_of(sm.snaps.as_deref(), group, &snap.data).await?;
                if let Some(s) = &sm.snaps {
                    s.adopt(group, key.as_deref());
                }
                let index = snap.meta.last_log_id.map_or(0, |l| l.index);
                // A group whose apply stopped in this process keeps its Raft without state:
                // it starts again only to stop at the same entry (`raft::start`).
                if rt.apply_stop(group).is_none() {
                    on_group(&rt, group, move |g| {
                        g.replace_state(state);
                        g.log_index = index;
                    })?;
                }
                sm.applied = snap.meta.last_log_id;
                sm.membership = snap.meta.last_membership.clone();
                sm.stats.built(group, len, None);
                *lock(&sm.current.meta) = Some(snap.meta.clone());
                sm.loaded = Some(snap);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageIOError::read_snapshot(None, &e).into()),
        }
        Ok(sm)
    }

    /// `testing.apply_panic_on`: appends whose bytes hold `marker` panic as they apply.
    pub fn with_apply_panic_on(mut self, marker: Option<Arc<[u8]>>) -> StateMachine {
        self.panic_on = marker;
        self
    }

    /// Captures the group's state at the applied point, on the core: a clone that shares the
    /// stream bytes, encoded later by the builder.
    fn capture(&self) -> Result<Captured, StoreError> {
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
    fn encode(self) -> Result<StoredSnapshot, StoreError> {
        let data =
            write_group_state(&self.state).map_err(|e| StorageIOError::read_state_machine(&e))?;
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
    captured: Option<Result<Captured, StoreError>>,
    shelf: Shelf,
    group: u32,
    stats: Arc<SnapStats>,
    started: std::time::Instant,
    snaps: Option<Arc<SnapStore>>,
}

impl Builder {
    /// Uploads the built state and writes the snapshot file with its reference. A store that
    /// fails keeps this snapshot inline, in the file: a failed build would stop the group's
    /// Raft, and the next build tries the store again.
    async fn store_on_s3(
        &self,
        snaps: &Arc<SnapStore>,
        snap: StoredSnapshot,
    ) -> Result<StoredSnapshot, StoreError> {
        let StoredSnapshot { meta, data } = snap;
        let data = bytes::Bytes::from(data);
        let stored = match snaps
            .upload(self.group, &meta.snapshot_id, data.clone())
            .await
        {
            Ok(r) => {
                let refd = r
                    .write()
                    .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
                (StoredSnapshot { meta, data: refd }, Some(r.key))
            }
            Err(e) => {
                tracing::warn!(group = self.group, error = %e, "cannot upload a Raft snapshot to the snapshot namespace; this one stays inline in the WAL directory");
                (
                    StoredSnapshot {
                        meta,
                        data: data.to_vec(),
                    },
                    None,
                )
            }
        };
        let (file, key) = stored;
        let shelf = self.shelf.clone();
        let (file, kept) = tokio::task::spawn_blocking(move || {
            let kept = shelf.store(&file);
            (file, kept)
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e)))?;
        if kept? {
            snaps.adopt(self.group, key.as_deref());
            publish_later(snaps);
        }
        Ok(file)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StoreError> {
        let captured = match self.captured.take() {
            Some(Ok(c)) => c,
            Some(Err(e)) => return Err(e),
            None => {
                let again = std::io::Error::other("the snapshot was already built");
                return Err(StorageIOError::read_state_machine(&again).into());
            }
        };
        let shelf = self.shelf.clone();
        let inline = self.snaps.is_none();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("snapshot-{}", self.group))
            .spawn(move || {
                // A snapshot of a group holding tens of MiB of stream bytes takes a long stretch
                // of CPU to encode, copy and write; at normal priority it takes its share of a
                // small machine from the core threads in that window, and appends queue behind
                // it. The lowest priority and bounded writes shorten the durable node's append
                // tail (docs/dev/speed-log.md, "The snapshot thread at nice 19" and "Background
                // threads that a waking core thread preempts at once").
                background::lower_priority();
                let built = captured.encode().and_then(|snap| {
                    if inline {
                        shelf.store(&snap)?;
                    }
                    Ok(snap)
                });
                let _ = tx.send(built);
            });
        if let Err(e) = spawned {
            return Err(StorageIOError::write_snapshot(None, &e).into());
        }
        let snap = rx
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e)))??;
        let size = snap.data.len() as u64;
        let snap = match &self.snaps {
            Some(snaps) => self.store_on_s3(snaps, snap).await?,
            None => snap,
        };
        self.stats
            .built(self.group, size, Some(self.started.elapsed()));
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
        StoreError,
    > {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StoreError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut out = Vec::new();
        for e in entries {
            let (log_id, index) = (e.log_id, e.log_id.index);
            match e.payload {
                EntryPayload::Blank => {
                    on_group(&self.rt, self.group, |g| g.log_index = index)?;
                    out.push(Outcome(Vec::new()));
                }
                EntryPayload::Membership(m) => {
                    on_group(&self.rt, self.group, |g| g.log_index = index)?;
                    self.membership = StoredMembership::new(Some(log_id), m);
                    out.push(Outcome(Vec::new()));
                }
                EntryPayload::Normal(p) => {
                    let (now, rt, group) = (p.now_ms, self.rt.clone(), self.group);
                    let marker = self.panic_on.clone();
                    let r = on_group(&self.rt, self.group, move |g| {
                        apply_guard::guarded(&rt, group, log_id, || {
                            g.log_index = index;
                            p.cmds
                                .into_iter()
                                .map(|c| {
                                    apply_guard::panic_if_poisoned(marker.as_deref(), &c);
                                    g.apply(c, now)
                                })
                                .collect()
                        })
                    })?;
                    // The applied index stays below the failed entry: openraft stops the
                    // group's Raft on this error and answers the entry's writer with it.
                    let r = r.map_err(|stop| stopped(&stop))?;
                    out.push(Outcome(r));
                }
            }
            self.applied = Some(log_id);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Captured here, on the core, at the applied point; the builder writes it elsewhere.
        let started = std::time::Instant::now();
        let captured = self.capture();
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
            snaps: self.snaps.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StoreError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StoreError> {
        let data = snapshot.into_inner();
        let (state, len, key) = state_of(self.snaps.as_deref(), self.group, &data).await?;
        let index = meta.last_log_id.map_or(0, |l| l.index);
        on_group(&self.rt, self.group, move |g| {
            g.replace_state(state);
            g.log_index = index;
        })?;
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        let snap = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        self.current.store(&snap)?;
        if let Some(s) = &self.snaps {
            if key.is_some() {
                s.counters
                    .installs
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            s.adopt(self.group, key.as_deref());
            publish_later(s);
        }
        self.stats.built(self.group, len, None);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StoreError> {
        let current = lock(&self.current.meta).clone();
        let snap = match self.loaded.take() {
            Some(s) if current.as_ref() == Some(&s.meta) => Some(s),
            _ => {
                // Off the core: a snapshot file can be tens of MiB.
                let shelf = self.current.clone();
                tokio::task::spawn_blocking(move || shelf.load())
                    .await
                    .map_err(|e| StorageIOError::read_snapshot(None, &std::io::Error::other(e)))??
            }
        };
        Ok(snap.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}

#[cfg(test)]
mod shelf_tests {
    use openraft::RaftSnapshotBuilder;
    use openraft::storage::RaftStateMachine;

    use super::*;

    async fn open(rt: &runtime::Runtime, dir: &std::path::Path) -> StateMachine {
        StateMachine::open(
            rt.clone(),
            0,
            dir.to_path_buf(),
            Arc::new(SnapStats::new(1)),
            None,
        )
        .await
        .expect("open")
    }

    async fn current(
        sm: &mut StateMachine,
    ) -> Option<(SnapshotMeta<u64, openraft::BasicNode>, Vec<u8>)> {
        sm.get_current_snapshot()
            .await
            .expect("current snapshot")
            .map(|s| (s.meta, s.snapshot.into_inner()))
    }

    #[tokio::test]
    async fn a_built_snapshot_is_served_from_its_file_and_after_a_restart_too() {
        let dir = tempfile::tempdir().expect("dir");
        let rt = runtime::Runtime::start(1, 1, 16).expect("runtime");
        let mut sm = open(&rt, dir.path()).await;
        assert!(current(&mut sm).await.is_none(), "no snapshot yet");

        let built = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("build");
        let built = (built.meta, built.snapshot.into_inner());
        assert!(!built.1.is_empty());
        assert!(dir.path().join("group-0.snap").exists());
        assert_eq!(
            current(&mut sm).await,
            Some(built.clone()),
            "read back from the file"
        );

        // A restart reads the file once and hands that copy to openraft's first ask; later
        // asks read the file again.
        drop(sm);
        let mut again = open(&rt, dir.path()).await;
        assert_eq!(current(&mut again).await, Some(built.clone()));
        assert_eq!(current(&mut again).await, Some(built));

        // A missing file is an error, not an empty answer: the metadata says one was written.
        std::fs::remove_file(dir.path().join("group-0.snap")).expect("remove");
        assert!(again.get_current_snapshot().await.is_err());
    }
}
