//! The Raft engine: one openraft group per `raft.group_count`, each run on its core's runtime,
//! its log in the core's journal ([`wal`]), its state machine the same stream state machine the
//! in-memory engine drives ([`store`]), its peer traffic multiplexed over HTTP ([`network`]).

pub mod batch;
pub mod network;
pub mod store;
pub mod wal;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;

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
    #[error("journal of core {core}: {message}")]
    Recover { core: usize, message: String },
    #[error("group {group}: {message}")]
    Group { group: u32, message: String },
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
}

pub struct RaftEngine {
    pub rafts: Vec<GroupRaft>,
    /// The node's unsnapshotted Raft log bytes.
    pub log_bytes: Arc<std::sync::atomic::AtomicU64>,
    /// Proposed but not yet applied write bytes, per group.
    uncommitted: Arc<Vec<std::sync::atomic::AtomicU64>>,
    /// `raft.max_uncommitted_size_per_group`.
    max_uncommitted: u64,
    pub node_id: u64,
    pub peers: network::Peers,
    batcher: Arc<batch::Batcher>,
}

impl std::fmt::Debug for RaftEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftEngine")
            .field("groups", &self.rafts.len())
            .field("node_id", &self.node_id)
            .finish()
    }
}

fn raft_config() -> Result<Arc<Config>, String> {
    let c = Config {
        heartbeat_interval: 250,
        election_timeout_min: 1500,
        election_timeout_max: 3000,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(5000),
        max_in_snapshot_log_to_keep: 1000,
        ..Config::default()
    };
    c.validate().map(Arc::new).map_err(|e| e.to_string())
}

impl RaftEngine {
    /// Recovers every core's journal and starts every group on its core.
    pub async fn start(rt: &Runtime, opts: RaftOptions) -> Result<Arc<RaftEngine>, StartError> {
        let log_dir = opts.dir.join("raft-log");
        let snap_dir = opts.dir.join("snapshots");
        std::fs::create_dir_all(&snap_dir).map_err(|e| {
            StartError::Wal(wal::WalError::Io {
                path: snap_dir.clone(),
                source: e,
            })
        })?;
        let config = raft_config().map_err(|message| StartError::Group { group: 0, message })?;
        let peers = network::Peers::new(opts.peers.clone());
        // Recover every core's journal, rebuild each group's log from it, then start the
        // journal threads with what a new segment must restate.
        let mut logs: Vec<Option<store::LogData>> = (0..rt.group_count()).map(|_| None).collect();
        let mut journals = Vec::new();
        for core in 0..rt.core_count() {
            let dir = log_dir.join(format!("core-{core}"));
            let r = wal::recover(&dir)?;
            if r.damaged_tail {
                tracing::warn!(
                    core,
                    cut_bytes = r.torn_bytes,
                    "journal tail failed verification and was cut"
                );
            }
            let mut by_group = wal::by_group(r.records);
            let mut restate = Vec::new();
            let mut recovered_max = std::collections::HashMap::new();
            for group in (0..rt.group_count()).filter(|g| rt.core_of(*g) == core) {
                let records = by_group.remove(&group).unwrap_or_default();
                let data = store::LogData::recover(&records).map_err(|e| StartError::Recover {
                    core,
                    message: e.to_string(),
                })?;
                for (kind, payload) in data.restate().map_err(|e| StartError::Recover {
                    core,
                    message: e.to_string(),
                })? {
                    restate.push((kind, group, payload));
                }
                if let Some(last) = data.last_index() {
                    recovered_max.insert(group, last);
                }
                logs[group as usize] = Some(data);
            }
            let opts = wal::Options {
                fsync_always: opts.fsync_always,
                segment_size: opts.segment_size,
            };
            journals.push(wal::Journal::start(dir, opts, restate, recovered_max)?);
        }
        let log_bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut rafts = Vec::with_capacity(rt.group_count() as usize);
        for group in 0..rt.group_count() {
            let core = rt.core_of(group);
            let data = logs[group as usize].take().unwrap_or_default();
            let fresh = data.vote.is_none() && data.entries.is_empty() && data.purged.is_none();
            let log = store::LogStore::new(group, journals[core].clone(), data, log_bytes.clone());
            let net = network::Factory {
                peers: peers.clone(),
                group,
            };
            let (config, snap_dir, node_id, rt2) =
                (config.clone(), snap_dir.clone(), opts.node_id, rt.clone());
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
                    let sm = store::StateMachine::open(rt2, group, snap_dir)
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
            let lowest = opts.peers.keys().next().copied().unwrap_or(opts.node_id);
            if fresh && lowest == opts.node_id {
                let members: BTreeMap<u64, BasicNode> = if opts.peers.is_empty() {
                    BTreeMap::from([(opts.node_id, BasicNode::default())])
                } else {
                    opts.peers
                        .iter()
                        .map(|(id, url)| (*id, BasicNode::new(url)))
                        .collect()
                };
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
        Ok(Arc::new(RaftEngine {
            batcher,
            rafts,
            log_bytes,
            uncommitted,
            max_uncommitted: opts.max_uncommitted,
            node_id: opts.node_id,
            peers,
        }))
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

    pub async fn shutdown(&self) {
        for r in &self.rafts {
            let _ = r.shutdown().await;
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
        Box::pin(async move {
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
