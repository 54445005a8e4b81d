//! The Raft engine: one openraft group per `raft.group_count`, each run on its core's runtime,
//! its log in the core's journal ([`wal`]), its state machine the same stream state machine the
//! in-memory engine drives ([`store`]), its peer traffic multiplexed over HTTP ([`network`]).

pub mod batch;
mod bootstrap;
pub mod files;
pub mod floor;
pub mod gate;
mod lanes;
pub mod network;
pub mod protocol;
pub mod snapdrive;
pub mod store;
pub mod wal;

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use openraft::BasicNode;
use openraft::Config;
use openraft::Raft;

use crate::engine::EngineError;
use crate::engine::GroupEngine;
use crate::engine::Proposal as ProposalFuture;
use crate::runtime::GroupId;
use crate::runtime::Runtime;
use crate::stream::Applied;
use crate::stream::Command;
use crate::stream::Refusal;
use ursula_protocol::refusal::NotApplied;

/// A replicated entry: the writes batched into it, in order, and the leader's clock when it
/// was proposed, so every replica applies them identically.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Proposal {
    pub now_ms: u64,
    pub cmds: Vec<Command>,
}

/// What applying an entry answered, one answer per write; empty for Raft's own entries.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Outcome(pub Vec<Result<Applied, Refusal>>);

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Proposal,
        R = Outcome,
);

pub type GroupRaft = Raft<TypeConfig>;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Wal(#[from] wal::WalError),
    #[error(transparent)]
    Files(#[from] files::FilesError),
    #[error("journal of core {core}: {message}")]
    Recover { core: usize, message: String },
    #[error("group {group}: {message}")]
    Group { group: u32, message: String },
    /// A peer answered the startup probe with another Raft protocol.
    #[error("{0}")]
    Protocol(String),
}

/// How the engine is configured.
#[derive(Debug, Clone)]
pub struct RaftOptions {
    pub node_id: u64,
    pub dir: PathBuf,
    pub fsync_always: bool,
    pub segment_size: u64,
    /// node id -> URL, this node included; empty for a single node.
    pub peers: BTreeMap<u64, String>,
    pub max_uncommitted: u64,
    pub snapshot: snapdrive::Settings,
    /// `testing.shutdown_stall`, a test hook: [`RaftEngine::shutdown`] waits this long before
    /// it stops the groups and syncs the journals, as one stuck on a slow disk would.
    pub shutdown_stall: Option<std::time::Duration>,
}

pub struct RaftEngine {
    pub rafts: Vec<GroupRaft>,
    /// The node's unsnapshotted Raft log bytes and the most it held.
    pub log_bytes: Arc<store::NodeLog>,
    /// The snapshot driver's counters and each group's last snapshot size.
    pub snap_stats: Arc<snapdrive::Stats>,
    /// Proposed but not yet applied write bytes, per group.
    uncommitted: Arc<Vec<std::sync::atomic::AtomicU64>>,
    /// `raft.max_uncommitted_size_per_group`.
    max_uncommitted: u64,
    pub node_id: u64,
    pub peers: network::Peers,
    batcher: Arc<batch::Batcher>,
    /// Each group's log, shared with its Raft: what metrics, probes and refused votes report.
    logs: Vec<store::LogStore>,
    journals: Vec<wal::Journal>,
    pub gates: gate::Gates,
    /// Groups this replica held nothing of at start, until their first probe round decided.
    pub vote_hold: bootstrap::VoteHold,
    root: files::Root,
    fsync_always: bool,
    shutdown_stall: Option<std::time::Duration>,
    stopping: AtomicBool,
    rt: Runtime,
    /// The cores' `journal.lock`s, held until the process ends.
    _locks: Vec<std::fs::File>,
}

/// A group as this replica sees it, for `raft_groups` in the metrics.
#[derive(Debug, Clone)]
pub struct GroupView {
    pub current_leader: Option<u64>,
    pub current_term: u64,
    pub last_applied_index: Option<u64>,
    pub committed_index: Option<u64>,
    pub last_log_index: Option<u64>,
    pub last_log_term: Option<u64>,
    pub voter_ids: Vec<u64>,
}

impl std::fmt::Debug for RaftEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftEngine")
            .field("groups", &self.rafts.len())
            .field("node_id", &self.node_id)
            .finish()
    }
}

fn raft_config(enable_elect: bool, backstop_logs: u64) -> Result<Arc<Config>, String> {
    let c = Config {
        enable_elect,
        heartbeat_interval: 250,
        election_timeout_min: 1500,
        election_timeout_max: 3000,
        // The driver (`snapdrive`) snapshots by log bytes; the entry count is only a backstop.
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(backstop_logs),
        // Entries kept past a snapshot let a follower a little behind catch up from the log;
        // they still count against the budget, so a few hundred, not thousands of large ones.
        max_in_snapshot_log_to_keep: 256,
        ..Config::default()
    };
    c.validate().map(Arc::new).map_err(|e| e.to_string())
}

/// What the journals of every core held at start.
struct Scanned {
    logs: Vec<store::LogData>,
    scans: Vec<wal::Recovered>,
    /// Groups that hold anything.
    held: BTreeSet<u32>,
    /// Groups of cores whose newest segment holds a complete frame that failed verification.
    damaged: BTreeSet<u32>,
}

/// Reads every core's journal without changing it, and rebuilds each group's log.
fn scan(rt: &Runtime, root: &files::Root) -> Result<Scanned, StartError> {
    let mut logs: Vec<store::LogData> = (0..rt.group_count())
        .map(|_| store::LogData::default())
        .collect();
    let mut scans = Vec::new();
    let mut damaged = BTreeSet::new();
    for core in 0..rt.core_count() {
        let mut r = wal::scan(&root.core_dir(core))?;
        let mut by_group = wal::by_group(std::mem::take(&mut r.records));
        for group in (0..rt.group_count()).filter(|g| rt.core_of(*g) == core) {
            let records = by_group.remove(&group).unwrap_or_default();
            logs[group as usize] =
                store::LogData::recover(&records).map_err(|e| StartError::Recover {
                    core,
                    message: e.to_string(),
                })?;
            if r.damaged_tail {
                damaged.insert(group);
            }
        }
        scans.push(r);
    }
    let held = (0..rt.group_count())
        .filter(|g| logs[*g as usize].holds())
        .collect();
    Ok(Scanned {
        logs,
        scans,
        held,
        damaged,
    })
}

impl RaftEngine {
    /// Checks the WAL root, recovers every core's journal, decides the recovery gates and
    /// starts every group on its core. Every refusal comes before the first write.
    pub async fn start(rt: &Runtime, opts: RaftOptions) -> Result<Arc<RaftEngine>, StartError> {
        let root = files::Root::new(&opts.dir);
        let (cores, groups) = (rt.core_count() as u32, rt.group_count());
        let holds_data = root.holds_data()?;
        let has_epoch = root.check_epoch(holds_data)?;
        let has_topology = root.check_topology(holds_data || has_epoch, cores, groups)?;
        let locks = root.lock_cores(rt.core_count())?;
        let previous = root.previous_run()?;
        let recorded = root.read_gates()?;
        let Scanned {
            mut logs,
            scans,
            held,
            damaged,
        } = scan(rt, &root)?;
        let boot_id = files::boot_id();
        let recorded_groups = recorded
            .as_ref()
            .ok()
            .map(|r| r.keys().copied().collect::<BTreeSet<u32>>());
        let gated = gate::decide(&gate::Evidence {
            previous: &previous,
            boot_id: boot_id.as_deref(),
            held: &held,
            damaged: &damaged,
            recorded: recorded_groups.as_ref(),
        });

        // Every check passed: from here on the node writes.
        // Before the markers: a node that joins a cluster of another release writes nothing.
        if !opts.peers.is_empty() {
            protocol::probe_peers(opts.node_id, &opts.peers)
                .await
                .map_err(StartError::Protocol)?;
        }
        root.write_markers(cores, groups, has_topology, has_epoch)?;
        std::fs::create_dir_all(&root.snap_dir).map_err(|e| {
            StartError::Wal(wal::WalError::Io {
                path: root.snap_dir.clone(),
                source: e,
            })
        })?;
        let gated_set: BTreeSet<u32> = gated.keys().copied().collect();
        // A gate recorded closed keeps what it knew of a lost vote and its floor.
        let gate_records: BTreeMap<u32, files::GateRecord> = gated_set
            .iter()
            .map(|g| {
                let r = recorded.as_ref().ok().and_then(|r| r.get(g)).copied();
                (*g, r.unwrap_or_default())
            })
            .collect();
        if recorded.as_ref().ok() != Some(&gate_records) {
            root.write_gates(&gate_records)?;
        }
        for (group, why) in &gated {
            let r = gate_records.get(group).copied().unwrap_or_default();
            let floor = r.floor.map(|f| f.to_string());
            tracing::warn!(
                group,
                reason = why,
                lost_vote = r.wiped,
                vote_floor = floor.as_deref(),
                "recovery gate closed"
            );
        }
        // The damage was recorded as closed gates: now the frames after it can go.
        for (core, r) in scans.iter().enumerate() {
            if r.damaged_tail {
                tracing::warn!(
                    core,
                    cut_bytes = r.torn_bytes,
                    "journal tail failed verification and was cut"
                );
            } else if r.torn_bytes > 0 {
                tracing::info!(
                    core,
                    cut_bytes = r.torn_bytes,
                    "an incomplete final journal frame was cut"
                );
            }
            r.cut_tail()?;
        }
        root.record_running(opts.fsync_always)?;

        for g in &gated_set {
            // A replica that led the group must not resume as its leader on start: its log
            // may lack what it acknowledged. An uncommitted vote keeps the term but makes it
            // campaign like anyone else, once the gate opens. The new segment restates it.
            if let Some(v) = logs[*g as usize].vote.as_mut()
                && v.leader_id.voted_for() == Some(opts.node_id)
            {
                v.committed = false;
            }
        }
        let mut journals = Vec::new();
        for core in 0..rt.core_count() {
            let mut restate = Vec::new();
            let mut recovered_max = std::collections::HashMap::new();
            for group in (0..groups).filter(|g| rt.core_of(*g) == core) {
                let data = &logs[group as usize];
                for (kind, payload) in data.restate().map_err(|e| StartError::Recover {
                    core,
                    message: e.to_string(),
                })? {
                    restate.push((kind, group, payload));
                }
                if let Some(last) = data.last_index() {
                    recovered_max.insert(group, last);
                }
            }
            let fatal_root = root.clone();
            let fsync_always = opts.fsync_always;
            let wal_opts = wal::Options {
                fsync_always: opts.fsync_always,
                segment_size: opts.segment_size,
                on_fatal: Some(Arc::new(move || {
                    if let Err(e) = fatal_root.record_io_error(fsync_always) {
                        tracing::error!(error = %e, "cannot record the journal I/O error in run-state.bin");
                    }
                })),
            };
            journals.push(wal::Journal::start(
                root.core_dir(core),
                wal_opts,
                restate,
                recovered_max,
            )?);
        }

        let backstop = opts.snapshot.backstop_logs;
        let config = raft_config(true, backstop)
            .map_err(|message| StartError::Group { group: 0, message })?;
        let gated_config = raft_config(false, backstop)
            .map_err(|message| StartError::Group { group: 0, message })?;
        let peers = network::Peers::new(opts.peers.clone(), opts.node_id);
        let log_bytes = Arc::new(store::NodeLog::default());
        let snap_stats = Arc::new(snapdrive::Stats::new(groups));
        let mut rafts = Vec::with_capacity(groups as usize);
        let mut stores = Vec::with_capacity(groups as usize);
        let mut fresh = BTreeSet::new();
        for group in 0..groups {
            let core = rt.core_of(group);
            let data = std::mem::take(&mut logs[group as usize]);
            if !data.holds() {
                fresh.insert(group);
            }
            let log = store::LogStore::new(group, journals[core].clone(), data, log_bytes.clone());
            stores.push(log.clone());
            let net = network::Factory {
                peers: peers.clone(),
                group,
            };
            let config = if gated_set.contains(&group) {
                gated_config.clone()
            } else {
                config.clone()
            };
            let (snap_dir, node_id, rt2) = (root.snap_dir.clone(), opts.node_id, rt.clone());
            let stats = snap_stats.clone();
            let handle = rt
                .core_handle(core)
                .ok_or(StartError::Group {
                    group,
                    message: "no core".into(),
                })?
                .clone();
            // The group's Raft is created on its core, so its tasks (and its state machine's
            // calls) run there, next to the group's streams.
            let raft = handle
                .spawn(async move {
                    let sm = store::StateMachine::open(rt2, group, snap_dir, stats)
                        .map_err(|e| e.to_string())?;
                    Raft::new(node_id, config, net, log, sm)
                        .await
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| StartError::Group {
                    group,
                    message: e.to_string(),
                })?
                .map_err(|message| StartError::Group { group, message })?;
            // A single node has nobody to ask: an empty group is new.
            if opts.peers.is_empty() && fresh.contains(&group) {
                let members = BTreeMap::from([(opts.node_id, BasicNode::default())]);
                if let Err(e) = raft.initialize(members).await {
                    tracing::debug!(group, error = %e, "group already initialized");
                }
            }
            rafts.push(raft);
        }
        let uncommitted = Arc::new(
            (0..rafts.len())
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
        );
        let batcher = batch::Batcher::new(rafts.len(), peers.urls.clone());
        let engine = Arc::new(RaftEngine {
            batcher,
            rafts,
            log_bytes,
            snap_stats,
            uncommitted,
            max_uncommitted: opts.max_uncommitted,
            node_id: opts.node_id,
            peers,
            logs: stores,
            journals,
            gates: gate::Gates::new(root.clone(), &gate_records),
            vote_hold: if opts.peers.is_empty() {
                bootstrap::VoteHold::default()
            } else {
                bootstrap::VoteHold::new(&fresh)
            },
            root,
            fsync_always: opts.fsync_always,
            shutdown_stall: opts.shutdown_stall,
            stopping: AtomicBool::new(false),
            rt: rt.clone(),
            _locks: locks,
        });
        for group in &gated_set {
            engine.spawn_on_core(*group, gate::watch(Arc::downgrade(&engine), *group));
        }
        if !opts.snapshot.interval.is_zero() {
            tokio::spawn(snapdrive::run(Arc::downgrade(&engine), opts.snapshot));
        }
        if !opts.peers.is_empty() && !fresh.is_empty() {
            tokio::spawn(bootstrap::run(Arc::downgrade(&engine), fresh));
        }
        Ok(engine)
    }

    /// Runs `task` on `group`'s core, next to the group's Raft.
    fn spawn_on_core(
        &self,
        group: GroupId,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        match self.rt.core_handle(self.rt.core_of(group)) {
            Some(h) => drop(h.spawn(task)),
            None => drop(tokio::spawn(task)),
        }
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// What `group`'s log holds now.
    pub fn log_view(&self, group: GroupId) -> store::LogView {
        self.logs
            .get(group as usize)
            .map(store::LogStore::view)
            .unwrap_or_default()
    }

    pub fn group_view(&self, group: GroupId) -> Option<GroupView> {
        let m = self.raft(group)?.metrics().borrow().clone();
        let log = self.log_view(group);
        Some(GroupView {
            current_leader: m.current_leader,
            current_term: m.current_term,
            last_applied_index: m.last_applied.map(|l| l.index),
            committed_index: log.committed.map(|l| l.index),
            last_log_index: log.last.map(|l| l.index),
            last_log_term: log.last.map(|l| l.leader_id.term),
            voter_ids: m.membership_config.voter_ids().collect(),
        })
    }

    pub fn raft(&self, group: GroupId) -> Option<&GroupRaft> {
        self.rafts.get(group as usize)
    }

    /// The base URL of the group's leader, if known and not this node.
    pub fn leader_url(&self, group: GroupId) -> Option<String> {
        let leader = self.raft(group)?.metrics().borrow().current_leader?;
        (leader != self.node_id)
            .then(|| self.peers.urls.get(&leader).cloned())
            .flatten()
    }

    pub fn leader_of(&self, group: GroupId) -> Option<u64> {
        self.raft(group)?.metrics().borrow().current_leader
    }

    pub fn is_leader(&self, group: GroupId) -> bool {
        self.raft(group)
            .is_some_and(|r| r.metrics().borrow().current_leader == Some(self.node_id))
    }

    /// Stops every group, syncs every journal and records a clean run, so the next start
    /// knows nothing unsynced was lost.
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        // Drained: a node on its way out must not win an election it could not serve.
        for r in &self.rafts {
            r.runtime_config().elect(false);
        }
        if let Some(stall) = self.shutdown_stall {
            // The test hook: a shutdown stuck before its journals are synced, for the deadline.
            tokio::time::sleep(stall).await;
        }
        for r in &self.rafts {
            let _ = r.shutdown().await;
        }
        let mut synced = true;
        for (core, j) in self.journals.iter().enumerate() {
            if let Err(e) = j.sync().await {
                tracing::error!(core, error = %e, "cannot sync a journal: the run is not recorded as clean");
                synced = false;
            }
        }
        if synced {
            match self.root.record_clean(self.fsync_always) {
                Ok(()) => tracing::info!("journals synced, clean shutdown recorded"),
                Err(e) => tracing::error!(error = %e, "cannot record a clean shutdown"),
            }
        }
    }
}

/// Bytes of a write's body, charged against the group's uncommitted budget.
fn body_bytes(cmd: &Command) -> u64 {
    use crate::stream::Body;
    let len = |b: &Body| match b {
        Body::Raw(b) | Body::Json(Ok(b)) => b.len() as u64,
        Body::Json(Err(_)) => 0,
    };
    match cmd {
        Command::Create(c) => c.body.as_ref().map_or(0, len),
        Command::Append(a) => len(&a.body),
        Command::PublishSnapshot(p) => p.body.len() as u64,
        _ => 0,
    }
}

impl GroupEngine for RaftEngine {
    fn propose(&self, group: GroupId, cmd: Command) -> ProposalFuture {
        use std::sync::atomic::Ordering;
        let raft = self.raft(group).cloned();
        let single = self.peers.urls.is_empty();
        let bytes = body_bytes(&cmd);
        let uncommitted = self.uncommitted.clone();
        let max = self.max_uncommitted;
        let batcher = self.batcher.clone();
        // A gated group elects no leader here, even on a single node: refused as unavailable
        // (503), not as the single node's 500, and before anything is proposed.
        let gated = self.gates.is_closed(group) && !self.is_leader(group);
        let leader = gated.then(|| self.leader_url(group)).flatten();
        Box::pin(async move {
            if gated {
                return Err(EngineError::NotLeader {
                    leader,
                    single: false,
                });
            }
            let raft = raft.ok_or(EngineError::NotLeader {
                leader: None,
                single,
            })?;
            let budget = uncommitted.get(group as usize);
            if let Some(b) = budget.filter(|_| bytes > 0) {
                let before = b.fetch_add(bytes, Ordering::AcqRel);
                if before > 0 && before + bytes > max {
                    b.fetch_sub(bytes, Ordering::AcqRel);
                    return Err(EngineError::Backpressure(
                        NotApplied::RaftUncommittedBackpressure,
                    ));
                }
            }
            let result = batcher.submit(raft, group, cmd, bytes).await;
            if let Some(b) = budget.filter(|_| bytes > 0) {
                b.fetch_sub(bytes, Ordering::AcqRel);
            }
            result
        })
    }

    fn name(&self) -> &'static str {
        "raft"
    }
}
