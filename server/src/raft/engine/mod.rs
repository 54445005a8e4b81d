//! `RaftEngine`: the [`GroupEngine`] of a node that runs Raft, and what the node's planes call.
//! Writes go through the group commit ([`group_commit`]) into the group's log; leadership,
//! readiness and metrics are read from this node's replicas ([`super::replicas`]), readiness
//! and the maintenance report through the same assessment ([`maintenance`]); shutdown syncs
//! the journals and records a clean run.
//!
//! - [`group_commit`]: group commit of client writes into log entries.
//! - [`maintenance`]: the maintenance report and the replica readiness read from it.
//! - [`wal_metrics`]: the `wal_*` metrics: journal counters, logs in memory, the opening.
//! - [`peer_service`]: admitting and answering a peer's RPCs.

pub mod group_commit;
pub mod maintenance;
pub mod peer_service;
pub mod wal_metrics;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use ursula_protocol::metrics;
use ursula_protocol::metrics::NodeMetrics;

use self::group_commit::Batcher;
use super::recovery::files::Root;
use super::replicas::Replicas;
use super::storage::wal::Journal;
use crate::admission::GroupCharge;
use crate::engine::ConfirmError;
use crate::engine::EngineError;
use crate::engine::GroupEngine;
use crate::engine::LeaderRoute;
use crate::engine::NotReady;
use crate::engine::Pending;
use crate::runtime::GroupId;
use ursula_state::stream::Command;

/// How long a follower waits to apply a leader's read index before it gives the read to the
/// leader instead: longer means a lagging follower answers late, shorter that it hands off
/// reads it could have answered.
const READ_BARRIER_APPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

pub struct RaftEngine {
    node: Arc<Replicas>,
    batcher: Arc<Batcher>,
    journals: Vec<Journal>,
    root: Root,
    fsync_always: bool,
    /// A test hook: how long a shutdown stalls before it syncs the journals (the deadline test).
    shutdown_stall: Option<std::time::Duration>,
    /// The cores' `journal.lock`s, held until the process ends.
    _locks: Vec<std::fs::File>,
    /// How the WAL opened at start.
    opening: wal_metrics::Opening,
}

/// What [`RaftEngine::new`] takes: the parts [`super::start()`] built.
pub struct EngineParts {
    pub node: Arc<Replicas>,
    pub batcher: Arc<Batcher>,
    pub journals: Vec<Journal>,
    pub root: Root,
    pub fsync_always: bool,
    pub shutdown_stall: Option<std::time::Duration>,
    pub locks: Vec<std::fs::File>,
    pub opening: wal_metrics::Opening,
}

impl std::fmt::Debug for RaftEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftEngine")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl RaftEngine {
    pub fn new(p: EngineParts) -> RaftEngine {
        RaftEngine {
            node: p.node,
            batcher: p.batcher,
            journals: p.journals,
            root: p.root,
            fsync_always: p.fsync_always,
            shutdown_stall: p.shutdown_stall,
            _locks: p.locks,
            opening: p.opening,
        }
    }
}

impl GroupEngine for RaftEngine {
    fn name(&self) -> &'static str {
        "raft"
    }

    fn submit(&self, group: GroupId, cmd: Command, charge: Option<GroupCharge>) -> Pending {
        let node = &self.node;
        let raft = node.raft(group).cloned();
        let single = node.peers.urls.is_empty();
        let bytes = cmd.body_bytes();
        let batcher = self.batcher.clone();
        // A gated group elects no leader here, even on a single node: refused as unavailable
        // (503), not as the single node's 500, and before anything is proposed.
        let gated = node.gates.is_closed(group) && !node.is_leader(group);
        let leader = gated.then(|| node.leader_url(group)).flatten();
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
            batcher.submit(raft, group, cmd, bytes, charge).await
        })
    }

    fn forward(&self, group: GroupId, cmd: Command) -> Pending {
        let node = self.node.clone();
        if node.is_leader(group) {
            return self.submit(group, cmd, None);
        }
        Box::pin(async move {
            let Some(leader) = node.leader_of(group).filter(|l| *l != node.node_id) else {
                return Err(EngineError::NotLeader {
                    leader: None,
                    single: false,
                });
            };
            match node.peers.propose(leader, group, &cmd).await {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(why)) => Err(EngineError::Unavailable(format!(
                    "node {leader}, the leader of group {group}, did not take the command: {why}"
                ))),
                Err(e) => Err(EngineError::Unavailable(format!(
                    "the leader of group {group}, node {leader}: {e}"
                ))),
            }
        })
    }

    fn log_bytes(&self) -> Option<u64> {
        Some(self.node.log_bytes.bytes())
    }

    fn leads(&self, group: GroupId) -> bool {
        self.node.is_leader(group)
    }

    fn leader_route(&self, group: GroupId) -> LeaderRoute {
        if self.node.is_leader(group) {
            return LeaderRoute::Here;
        }
        match self.node.leader_url(group) {
            Some(url) => LeaderRoute::Elsewhere(url),
            None => LeaderRoute::Unknown,
        }
    }

    fn confirm_leadership(&self, group: GroupId) -> BoxFuture<'static, Result<(), ConfirmError>> {
        let raft = self.node.raft(group).cloned();
        let floor = self.node.read_floor(group);
        Box::pin(async move {
            let Some(raft) = raft else {
                return Err(ConfirmError::NoGroup(group));
            };
            raft.ensure_linearizable()
                .await
                .map_err(|e| ConfirmError::Quorum(e.to_string()))?;
            // A leader restored at start may read below entries it acknowledged before.
            if floor.is_some() {
                raft.wait(Some(READ_BARRIER_APPLY_WAIT))
                    .applied_index_at_least(floor, "the read floor of a restarted leader")
                    .await
                    .map_err(|e| ConfirmError::Apply(e.to_string()))?;
            }
            Ok(())
        })
    }

    fn read_barrier(&self, group: GroupId) -> BoxFuture<'static, Result<(), ConfirmError>> {
        if self.node.is_leader(group) {
            return self.confirm_leadership(group);
        }
        let node = self.node.clone();
        Box::pin(async move {
            let raft = node
                .raft(group)
                .cloned()
                .ok_or(ConfirmError::NoGroup(group))?;
            let leader = node
                .leader_of(group)
                .filter(|l| *l != node.node_id)
                .ok_or(ConfirmError::NoLeader(group))?;
            let confirmed = node
                .peers
                .read_index(leader, group)
                .await
                .map_err(|e| ConfirmError::Leader(e.to_string()))?
                .map_err(|declined| ConfirmError::Leader(declined.to_string()))?;
            raft.wait(Some(READ_BARRIER_APPLY_WAIT))
                .applied_index_at_least(confirmed.index, "a follower's read barrier")
                .await
                .map(|_| ())
                .map_err(|e| ConfirmError::Apply(e.to_string()))
        })
    }

    fn not_ready(&self) -> Vec<NotReady> {
        let node = &self.node;
        let mut out = Vec::new();
        if node.peers.mismatch.seen() {
            out.push(NotReady::FormatEpochMismatch);
        }
        let stalled = node.gates.stalled();
        if !stalled.is_empty() {
            out.push(NotReady::RecoveryStalled(stalled));
        }
        if !node.gates.closed().is_empty() {
            out.push(NotReady::RecoveryGateClosed);
        }
        // Disk pressure is admission's to report; only the group issues are read here.
        let unready = maintenance::unready(&maintenance::gather(node, false));
        if !unready.is_empty() {
            out.push(NotReady::ReplicaUnready(unready));
        }
        out
    }

    fn report(&self, out: &mut NodeMetrics) {
        let node = &self.node;
        out.leadership_shed = node.shed.state();
        out.leadership_balance_moves = node
            .balance
            .moves
            .load(std::sync::atomic::Ordering::Relaxed);
        out.leadership_balance_skips = node
            .balance
            .skips
            .load(std::sync::atomic::Ordering::Relaxed);
        for g in &mut out.groups {
            if let Some(raft) = node.raft(g.group) {
                let m = raft.metrics().borrow().clone();
                g.leader = m.current_leader;
                g.term = m.current_term;
                g.applied_index = m.last_applied.map_or(0, |l| l.index);
            }
        }
        out.raft_groups = (0..node.group_count())
            .filter_map(|id| {
                let v = node.group_view(id)?;
                Some(metrics::RaftGroupView {
                    raft_group_id: id,
                    node_id: node.node_id,
                    current_leader: v.current_leader,
                    current_term: v.current_term,
                    last_applied_index: v.last_applied_index,
                    committed_index: v.committed_index,
                    last_log_index: v.last_log_index,
                    last_log_term: v.last_log_term,
                    voter_ids: v.voter_ids,
                    learner_ids: v.learner_ids,
                    apply_failure: node.apply_stop(id).map(|s| metrics::ApplyFailure {
                        term: s.term,
                        index: s.index,
                        kind: s.kind.to_owned(),
                        message: s.message,
                    }),
                    maintenance: metrics::GroupMaintenance {
                        running: v.running,
                        recovery_ready: !node.gates.is_closed(id),
                    },
                })
            })
            .collect();
        let gated: BTreeMap<String, String> = node
            .gates
            .closed()
            .into_iter()
            .map(|(g, s)| (g.to_string(), s.as_str().to_owned()))
            .collect();
        // A replica that lost its vote: `vote_floor` stays null until the leader's barrier.
        let wiped = node
            .gates
            .wiped()
            .into_iter()
            .map(|(g, floor)| {
                let vote_floor = floor.map(|f| metrics::VoteFloor {
                    term: f.term,
                    leader: f.leader,
                });
                (g.to_string(), metrics::Wiped { vote_floor })
            })
            .collect();
        out.recovery_gates = metrics::RecoveryGates {
            gated,
            stalled: node.gates.stalled(),
            wiped,
        };
        let mut raft_log = node.snap_stats.report(&node.log_bytes);
        raft_log.raft_grpc_append_stream_frame_bytes_max = node
            .peers
            .sent_max
            .load(std::sync::atomic::Ordering::Relaxed);
        if let Some(s) = &node.snaps {
            raft_log.s3 = Some(s.report());
        }
        out.raft_log = Some(raft_log);
        // Admission filled `wal_disk` before the engine's part.
        let pressure = out.wal_disk.as_ref().is_some_and(|d| d.wal_disk_pressure);
        out.raft_maintenance = Some(maintenance::gather(node, pressure));
        out.wal = Some(wal_metrics::report(&self.journals, node, &self.opening));
    }

    fn confirm_api_queues(&self) -> BoxFuture<'_, Result<(), ConfirmError>> {
        Box::pin(async move {
            // A query through each group's API channel is answered only after every message
            // queued before it was processed.
            for (g, r) in self.node.rafts().iter().enumerate() {
                r.with_raft_state(|_| ())
                    .await
                    .map_err(|e| ConfirmError::Queue {
                        group: g as GroupId,
                        detail: e.to_string(),
                    })?;
            }
            Ok(())
        })
    }

    fn hand_off(&self, within: std::time::Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let node = &self.node;
            node.shed.mark_stopping();
            for r in node.rafts() {
                r.runtime_config().elect(false);
            }
            let led = (0..node.group_count())
                .filter(|g| node.is_leader(*g))
                .count();
            if led == 0 || node.peers.urls.is_empty() {
                return;
            }
            let started = std::time::Instant::now();
            let kept = super::ops::handoff::shed_all(node, within).await;
            tracing::info!(
                handed_off = led - kept.len(),
                still_led = kept.len(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "shutdown: leaderships handed off"
            );
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.stop())
    }
}

impl RaftEngine {
    /// Stops every group, syncs every journal and records a clean run, so the next start
    /// knows nothing unsynced was lost.
    async fn stop(&self) {
        self.node.stop();
        // Drained: a node on its way out must not win an election it could not serve.
        for r in self.node.rafts() {
            r.runtime_config().elect(false);
        }
        if let Some(stall) = self.shutdown_stall {
            tokio::time::sleep(stall).await;
        }
        for r in self.node.rafts() {
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
