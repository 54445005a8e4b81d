//! Raft snapshots on S3 (`storage.snapshot.backend = "s3"`, or `"auto"` with an S3 cold tier;
//! docs/durability.md, "Raft snapshots on S3").
//!
//! A built snapshot's group state is one object of the snapshot namespace,
//! `g<group>/n<node>/<snapshot id>.snap`, a sealed [`record::GROUP_STATE`]. The snapshot file in
//! the WAL directory and the `InstallSnapshot` RPC carry a [`record::SNAPSHOT_REF`] naming it
//! instead of the state, so neither the disk nor the peer link carries a group's hot window.
//!
//! Which objects stay is decided by the cluster's own references: every node publishes its
//! pins, `refs/n<node>` (a [`record::SNAPSHOT_PINS`]), naming the object each of its groups'
//! snapshot files names, the objects it is about to install, and the ones it let go of within
//! the grace. A group's leader prunes the group's objects that no member of the group pins and
//! that are older than the grace (an hour), so a follower still reading one it was sent, or a
//! node that restarts on one, finds it.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde::Serialize;
use ursula_cold::ColdError;
use ursula_cold::ColdStore;
use ursula_state::stream::GroupState;

use super::record;
use super::record::RecordError;
use crate::runtime::now_ms;

/// The spec's grace before a retired snapshot object is pruned: an hour.
pub const PRUNE_GRACE: Duration = Duration::from_secs(3600);

/// How often a node prunes the groups it leads unless a test says otherwise.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(600);

/// Where the pins of every node live, under the namespace.
const PINS_DIR: &str = "refs";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a snapshot file and `InstallSnapshot` carry in place of the group state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRef {
    /// The object's key, relative to the snapshot namespace.
    pub key: String,
    /// The object's length: a shorter object was torn.
    pub len: u64,
}

impl SnapshotRef {
    /// The reference `data` holds, if it is one: `None` for a group state carried inline.
    pub fn read(data: &[u8]) -> Option<Result<SnapshotRef, RecordError>> {
        data.starts_with(record::SNAPSHOT_REF.magic)
            .then(|| record::decode_sealed(record::SNAPSHOT_REF, data))
    }

    pub fn write(&self) -> Result<Vec<u8>, RecordError> {
        record::encode(record::SNAPSHOT_REF, self)
    }
}

/// One object a node needs: for as long as a snapshot file names it (`until_ms` `None`), or
/// until a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Pin {
    key: String,
    until_ms: Option<u64>,
}

/// A node's pins file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct PinsFile {
    node: u64,
    written_ms: u64,
    groups: BTreeMap<u32, Vec<Pin>>,
}

/// The objects one group of this node needs.
#[derive(Debug, Default)]
struct GroupPins {
    /// What the group's snapshot file names.
    current: Option<String>,
    /// Objects about to be installed, or let go of, each with the time its pin ends.
    held: Vec<(String, u64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapStoreError {
    #[error("snapshot object {key}: {source}")]
    Store { key: String, source: ColdError },
    /// The object is not the state its reference names: torn, damaged or foreign. It is never
    /// installed.
    #[error("snapshot object {key} is refused: {reason}")]
    Corrupt { key: String, reason: String },
    #[error("snapshot reference: {0}")]
    Reference(RecordError),
    /// A leader sent a reference to a node that keeps its snapshots inline.
    #[error(
        "a snapshot reference came to a node without S3 snapshots (storage.snapshot.backend): every voter must keep snapshots on the same store"
    )]
    NoStore,
    #[error("the snapshot store's task ended: {0}")]
    Task(String),
}

/// Counters of `/__ursula/metrics` (docs/observability.md).
#[derive(Debug, Default)]
pub struct SnapStoreCounters {
    pub uploads: AtomicU64,
    pub upload_bytes: AtomicU64,
    pub installs: AtomicU64,
    pub errors: AtomicU64,
    pub refused: AtomicU64,
    pub pruned: AtomicU64,
    pub prune_passes: AtomicU64,
}

/// This node's side of the snapshot namespace.
#[derive(Debug)]
pub struct SnapStore {
    store: ColdStore,
    node: u64,
    /// Where the store's requests run: the node's main runtime, whose connections outlive any
    /// one core's tasks.
    handle: tokio::runtime::Handle,
    grace: Duration,
    pins: Mutex<BTreeMap<u32, GroupPins>>,
    /// Publishes one after another, so an older set never lands after a newer one.
    publishing: tokio::sync::Mutex<()>,
    /// The pins changed since the last publish that succeeded.
    unpublished: std::sync::atomic::AtomicBool,
    /// A state the peer service fetched and checked before handing `InstallSnapshot` to the
    /// group: the group installs it without a second read, and a store that fails fails the
    /// RPC (which the leader sends again), never the group's state machine.
    prefetched: Mutex<BTreeMap<u32, (String, GroupState)>>,
    pub counters: SnapStoreCounters,
}

impl SnapStore {
    pub fn new(
        store: ColdStore,
        node: u64,
        handle: tokio::runtime::Handle,
        grace: Duration,
    ) -> SnapStore {
        SnapStore {
            store,
            node,
            handle,
            grace,
            pins: Mutex::new(BTreeMap::new()),
            publishing: tokio::sync::Mutex::new(()),
            unpublished: std::sync::atomic::AtomicBool::new(false),
            prefetched: Mutex::new(BTreeMap::new()),
            counters: SnapStoreCounters::default(),
        }
    }

    /// The metrics' part of the namespace.
    pub fn report(&self) -> ursula_protocol::metrics::RaftSnapshotS3Metrics {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ursula_protocol::metrics::RaftSnapshotS3Metrics {
            raft_snapshot_store: self.describe(),
            raft_snapshot_s3_uploads: load(&c.uploads),
            raft_snapshot_s3_upload_bytes: load(&c.upload_bytes),
            raft_snapshot_s3_installs: load(&c.installs),
            raft_snapshot_s3_errors: load(&c.errors),
            raft_snapshot_s3_refused: load(&c.refused),
            raft_snapshot_s3_pruned: load(&c.pruned),
            raft_snapshot_s3_prune_passes: load(&c.prune_passes),
        }
    }

    /// Runs `f` on the node's runtime, detached.
    pub fn spawn(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.handle.spawn(f);
    }

    /// Where the namespace is, e.g. `s3://bucket/cold/snapshots`.
    pub fn describe(&self) -> String {
        self.store.describe()
    }

    /// Runs one store request about `key` on the node's runtime, counting a failure.
    async fn request<T, F>(
        &self,
        key: &str,
        op: impl FnOnce(ColdStore, String) -> F,
    ) -> Result<T, SnapStoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, ColdError>> + Send + 'static,
    {
        let done = self
            .handle
            .spawn(op(self.store.clone(), key.to_owned()))
            .await
            .map_err(|e| SnapStoreError::Task(e.to_string()))
            .and_then(|r| {
                r.map_err(|source| SnapStoreError::Store {
                    key: key.to_owned(),
                    source,
                })
            });
        self.count_error(done)
    }

    fn count_error<T>(&self, r: Result<T, SnapStoreError>) -> Result<T, SnapStoreError> {
        if let Err(e) = &r {
            let c = match e {
                SnapStoreError::Corrupt { .. } | SnapStoreError::Reference(_) => {
                    &self.counters.refused
                }
                _ => &self.counters.errors,
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Uploads a built snapshot's group state (a sealed [`record::GROUP_STATE`]) and returns the
    /// reference its snapshot file will carry.
    pub async fn upload(
        &self,
        group: u32,
        snapshot_id: &str,
        state: Bytes,
    ) -> Result<SnapshotRef, SnapStoreError> {
        let key = format!("g{group}/n{}/{snapshot_id}.snap", self.node);
        let len = state.len() as u64;
        self.request(&key, |s, k| async move { s.put(&k, state).await })
            .await?;
        self.counters.uploads.fetch_add(1, Ordering::Relaxed);
        self.counters.upload_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(SnapshotRef { key, len })
    }

    /// Reads and checks the state `r` names. A short, damaged or foreign object is refused.
    pub async fn fetch(&self, r: &SnapshotRef) -> Result<GroupState, SnapStoreError> {
        let bytes = self
            .request(&r.key, |s, k| async move { s.get(&k).await })
            .await?;
        let state = if bytes.len() as u64 != r.len {
            Err(SnapStoreError::Corrupt {
                key: r.key.clone(),
                reason: format!("{} bytes where its reference says {}", bytes.len(), r.len),
            })
        } else {
            record::decode_sealed(record::GROUP_STATE, &bytes).map_err(|e| {
                SnapStoreError::Corrupt {
                    key: r.key.clone(),
                    reason: e.to_string(),
                }
            })
        };
        self.count_error(state)
    }

    /// Before `InstallSnapshot` reaches the group: pins the object the leader names, then
    /// fetches and checks it. An error refuses the RPC; the leader sends it again later.
    pub async fn prefetch(&self, group: u32, data: &[u8]) -> Result<(), SnapStoreError> {
        let Some(r) = SnapshotRef::read(data) else {
            return Ok(());
        };
        let r = self.count_error(r.map_err(SnapStoreError::Reference))?;
        // A leader resends the RPC while the install fails: the pins file is written again
        // only when the hold is new or half spent, or an earlier write failed.
        if self.hold(group, &r.key) || self.unpublished.load(Ordering::Acquire) {
            self.publish().await?;
        }
        let state = self.fetch(&r).await?;
        lock(&self.prefetched).insert(group, (r.key, state));
        Ok(())
    }

    /// The state [`SnapStore::prefetch`] checked for this reference, else read now.
    pub async fn take(&self, group: u32, r: &SnapshotRef) -> Result<GroupState, SnapStoreError> {
        let ready = lock(&self.prefetched).remove(&group);
        if let Some((key, state)) = ready
            && key == r.key
        {
            return Ok(state);
        }
        // Not prefetched (a later RPC of the group replaced it): read it now. A failure here
        // fails the group's state machine, so a store that blinks gets a few tries.
        let mut wait = Duration::from_millis(200);
        loop {
            match self.fetch(r).await {
                Err(SnapStoreError::Store { .. }) if wait < Duration::from_secs(10) => {
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                other => return other,
            }
        }
    }

    /// The group's snapshot file names `key` now (`None`: a state carried inline). The object
    /// it named before stays pinned for the grace.
    pub fn adopt(&self, group: u32, key: Option<&str>) {
        let until = now_ms() + self.grace.as_millis() as u64;
        let mut pins = lock(&self.pins);
        let g = pins.entry(group).or_default();
        if let Some(old) = g.current.take()
            && Some(old.as_str()) != key
        {
            g.held.push((old, until));
        }
        g.current = key.map(str::to_owned);
        if let Some(k) = key {
            g.held.retain(|(h, _)| h != k);
        }
    }

    /// Pins `key` for the grace: an object this node is about to install. Returns whether the
    /// pins changed: `false` when `key` was held already with more than half the grace left.
    fn hold(&self, group: u32, key: &str) -> bool {
        let now = now_ms();
        let grace = self.grace.as_millis() as u64;
        let mut pins = lock(&self.pins);
        let g = pins.entry(group).or_default();
        if g.held
            .iter()
            .any(|(h, until)| h == key && *until > now + grace / 2)
        {
            return false;
        }
        g.held.retain(|(h, _)| h != key);
        g.held.push((key.to_owned(), now + grace));
        true
    }

    /// Writes this node's pins file from what it pins now; pins whose time ended are dropped.
    pub async fn publish(&self) -> Result<(), SnapStoreError> {
        let _one = self.publishing.lock().await;
        // Cleared before the file is built: a pin taken meanwhile sets it again.
        self.unpublished.store(false, Ordering::Release);
        let now = now_ms();
        let file = {
            let mut pins = lock(&self.pins);
            let groups = pins
                .iter_mut()
                .map(|(g, p)| {
                    p.held.retain(|(_, until)| *until > now);
                    let mut list: Vec<Pin> = p
                        .current
                        .iter()
                        .map(|k| Pin {
                            key: k.clone(),
                            until_ms: None,
                        })
                        .collect();
                    list.extend(p.held.iter().map(|(k, u)| Pin {
                        key: k.clone(),
                        until_ms: Some(*u),
                    }));
                    (*g, list)
                })
                .collect();
            PinsFile {
                node: self.node,
                written_ms: now,
                groups,
            }
        };
        let key = format!("{PINS_DIR}/n{}", self.node);
        let body =
            record::encode(record::SNAPSHOT_PINS, &file).map_err(SnapStoreError::Reference)?;
        let written = self
            .request(
                &key,
                |s, k| async move { s.put(&k, Bytes::from(body)).await },
            )
            .await;
        if written.is_err() {
            self.unpublished.store(true, Ordering::Release);
        }
        written
    }

    /// One prune pass over the groups this node leads (`members` gives each one's voters and
    /// learners): deletes the group's objects that no member pins and that are older than the
    /// grace. Returns how many it deleted. Any doubt (a pins file it cannot read) ends the pass
    /// without deleting.
    pub async fn prune(
        &self,
        members: &BTreeMap<u32, BTreeSet<u64>>,
    ) -> Result<u64, SnapStoreError> {
        if members.is_empty() {
            return Ok(0);
        }
        let listed = self
            .request("", |s, _| async move { s.list_objects("").await })
            .await?;
        let now = now_ms();
        let mut pinned: BTreeSet<String> = BTreeSet::new();
        let pins_dir = format!("{PINS_DIR}/");
        for o in listed.iter().filter(|o| o.key.starts_with(&pins_dir)) {
            let bytes = self
                .request(&o.key, |s, k| async move { s.get(&k).await })
                .await?;
            let file: PinsFile = self.count_error(
                record::decode_sealed(record::SNAPSHOT_PINS, &bytes).map_err(|e| {
                    SnapStoreError::Corrupt {
                        key: o.key.clone(),
                        reason: e.to_string(),
                    }
                }),
            )?;
            for (g, list) in &file.groups {
                // A node no longer in the group pins nothing of it: a voter removed for good
                // does not keep its last snapshot forever.
                if !members.get(g).is_some_and(|m| m.contains(&file.node)) {
                    continue;
                }
                pinned.extend(
                    list.iter()
                        .filter(|p| p.until_ms.is_none_or(|u| u > now))
                        .map(|p| p.key.clone()),
                );
            }
        }
        let grace = self.grace.as_millis() as u64;
        let mut deleted = 0;
        for o in &listed {
            let Some(group) = group_of(&o.key) else {
                continue;
            };
            if !members.contains_key(&group)
                || pinned.contains(&o.key)
                || o.modified_ms.saturating_add(grace) > now
            {
                continue;
            }
            self.request(&o.key, |s, k| async move { s.delete(&k).await })
                .await?;
            tracing::info!(key = %o.key, group, "pruned a retired Raft snapshot object");
            deleted += 1;
        }
        self.counters.pruned.fetch_add(deleted, Ordering::Relaxed);
        self.counters.prune_passes.fetch_add(1, Ordering::Relaxed);
        Ok(deleted)
    }
}

/// The group of a snapshot object's key, `g<group>/n<node>/<id>.snap`; `None` for any other key.
fn group_of(key: &str) -> Option<u32> {
    let mut parts = key.split('/');
    let group = parts.next()?.strip_prefix('g')?.parse().ok()?;
    let node = parts.next()?.strip_prefix('n')?;
    let name = parts.next()?;
    (node.parse::<u64>().is_ok() && name.ends_with(".snap") && parts.next().is_none())
        .then_some(group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_snapshot_object_keys_name_a_group() {
        assert_eq!(group_of("g3/n1/10-20.snap"), Some(3));
        for other in [
            "refs/n1",
            "g3/n1/10-20.tmp",
            "g3/x1/10.snap",
            "g3/n1/a/b.snap",
            "URSULA_FORMAT_EPOCH",
        ] {
            assert_eq!(group_of(other), None, "{other}");
        }
    }

    #[test]
    fn a_reference_reads_back_and_a_damaged_one_is_refused() {
        let r = SnapshotRef {
            key: "g0/n1/5-6.snap".into(),
            len: 42,
        };
        let bytes = r.write().expect("write");
        assert_eq!(SnapshotRef::read(&bytes).map(Result::ok), Some(Some(r)));
        let mut bad = bytes.clone();
        let last = bad.len() - 5;
        bad[last] ^= 0xff;
        assert!(matches!(SnapshotRef::read(&bad), Some(Err(_))));
        // A group state carried inline is not a reference.
        assert!(SnapshotRef::read(b"URGS\x02....").is_none());
    }

    #[tokio::test]
    async fn a_resent_install_rewrites_the_pins_file_only_when_its_pin_is_new_or_a_write_failed() {
        let dir = tempfile::tempdir().expect("dir");
        let cfg = ursula_cold::ColdConfig {
            backend: ursula_cold::BackendConfig::Fs {
                dir: dir.path().to_path_buf(),
            },
            root: "ns".into(),
        };
        let store = ColdStore::new(&cfg).expect("store");
        let one = SnapStore::new(
            store.clone(),
            1,
            tokio::runtime::Handle::current(),
            Duration::from_secs(60),
        );
        let state = Bytes::from(
            record::encode(record::GROUP_STATE, &GroupState::default()).expect("state"),
        );
        let first = one.upload(0, "1-1", state.clone()).await.expect("upload");
        let reference = first.write().expect("reference");
        one.prefetch(0, &reference).await.expect("prefetch");
        let written = store.get("refs/n1").await.expect("pins");
        tokio::time::sleep(Duration::from_millis(5)).await;
        one.prefetch(0, &reference).await.expect("resent");
        assert_eq!(
            store.get("refs/n1").await.expect("pins"),
            written,
            "the same pin again: not rewritten"
        );
        // The pins file cannot be written (a file stands where its directory goes).
        let refs = dir.path().join("ns").join("refs");
        std::fs::remove_dir_all(&refs).expect("clear");
        std::fs::write(&refs, b"in the way").expect("block");
        let second = one.upload(0, "2-2", state).await.expect("upload");
        let reference = second.write().expect("reference");
        assert!(one.prefetch(0, &reference).await.is_err(), "refused");
        std::fs::remove_file(&refs).expect("unblock");
        // Resent: the pin is held already, but its write failed, so it is written now.
        one.prefetch(0, &reference).await.expect("resent");
        let pins = store.get("refs/n1").await.expect("pins");
        assert!(
            pins.windows(second.key.len())
                .any(|w| w == second.key.as_bytes()),
            "the pins file names the object being installed"
        );
    }

    #[tokio::test]
    async fn pins_hold_what_a_node_needs_and_the_leader_prunes_only_the_rest_after_the_grace() {
        let dir = tempfile::tempdir().expect("dir");
        let cfg = ursula_cold::ColdConfig {
            backend: ursula_cold::BackendConfig::Fs {
                dir: dir.path().to_path_buf(),
            },
            root: "ns".into(),
        };
        let store = ColdStore::new(&cfg).expect("store");
        let handle = tokio::runtime::Handle::current();
        let grace = Duration::from_millis(300);
        let one = SnapStore::new(store.clone(), 1, handle.clone(), grace);
        let two = SnapStore::new(store, 2, handle, grace);
        let state = Bytes::from(
            record::encode(record::GROUP_STATE, &GroupState::default()).expect("state"),
        );
        let old = one.upload(0, "1-1", state.clone()).await.expect("upload");
        one.adopt(0, Some(&old.key));
        let new = one.upload(0, "2-2", state.clone()).await.expect("upload");
        one.adopt(0, Some(&new.key));
        one.publish().await.expect("publish");
        // Node 2 installed the old one: its pin keeps it past node 1's grace.
        two.adopt(0, Some(&old.key));
        two.publish().await.expect("publish");
        let stray = one.upload(0, "0-0", state).await.expect("upload");
        let members = BTreeMap::from([(0, BTreeSet::from([1, 2]))]);
        assert_eq!(
            one.prune(&members).await.expect("prune"),
            0,
            "within the grace"
        );
        tokio::time::sleep(grace * 2).await;
        assert_eq!(
            one.prune(&members).await.expect("prune"),
            1,
            "the stray one"
        );
        assert!(matches!(
            one.fetch(&stray).await,
            Err(SnapStoreError::Store { .. })
        ));
        assert!(one.fetch(&old).await.is_ok(), "node 2 pins it");
        assert!(
            one.fetch(&new).await.is_ok(),
            "node 1's snapshot file names it"
        );
        // Once node 2 leaves the group, its pins count no longer.
        let without_two = BTreeMap::from([(0, BTreeSet::from([1]))]);
        tokio::time::sleep(grace * 2).await;
        assert_eq!(one.prune(&without_two).await.expect("prune"), 1);
        assert!(one.fetch(&old).await.is_err());
        assert!(one.fetch(&new).await.is_ok());
    }
}
