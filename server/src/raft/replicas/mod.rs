//! This node's replicas of its groups: each group's Raft handle and log, the recovery gates,
//! the peers, and the counters the snapshot driver keeps. What the engine, the background tasks
//! (gate watchers, bootstrap, snapshot driver) and the peer server share, and nothing of how
//! writes are proposed or the journals are run.

//!
//! The node-wide state the registry carries, each its own cell:
//! - [`leadership_shed`]: the leadership-shed state (drain mark, stopping, WAL disk, store gate).
//! - [`write_holds`]: a group's client writes held during a handoff.
//! - [`lost_reports`]: replicas that told this leader they lost entries.
//! - [`snapshot_builds`]: the snapshot builds in flight.

pub mod leadership_shed;
pub mod lost_reports;
pub mod snapshot_builds;
pub mod write_holds;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use self::leadership_shed::Shed;
use self::lost_reports::LostReports;
use self::snapshot_builds::Builds;
use self::write_holds::WriteHolds;
use super::peer::client::Peers;
use super::recovery::gates::Gates;
use super::recovery::vote_hold::VoteHold;
use super::storage::log_counters::NodeLog;
use super::storage::log_counters::SnapStats;
use super::storage::log_store::CacheView;
use super::storage::log_store::LogStore;
use super::storage::log_store::LogView;
use super::storage::snapstore::SnapStore;
use super::types::GroupRaft;
use crate::runtime::GroupId;
use crate::runtime::Runtime;

pub struct Replicas {
    pub node_id: u64,
    rafts: Vec<GroupRaft>,
    /// Each group's log, shared with its Raft: what metrics, probes and refused votes report.
    logs: Vec<LogStore>,
    pub peers: Peers,
    pub gates: Gates,
    /// Groups this replica held nothing of at start, until their first probe round decided.
    pub vote_hold: VoteHold,
    /// The node's unsnapshotted Raft log bytes and the most it held.
    pub log_bytes: Arc<NodeLog>,
    /// The snapshot driver's counters and each group's last snapshot size.
    pub snap_stats: Arc<SnapStats>,
    /// The S3 snapshot namespace, with S3 snapshots.
    pub snaps: Option<Arc<SnapStore>>,
    /// Snapshot builds in flight, the driver's and the operator's.
    pub builds: Builds,
    /// The maintenance drain mark.
    pub shed: Shed,
    /// Groups whose client writes wait for a handoff to end (shared with the batcher).
    pub holds: Arc<WriteHolds>,
    /// Replicas that asked this node, as their leader, for a barrier: they may have lost
    /// entries and are rebuilt.
    pub lost: LostReports,
    /// For each group this node led when it stopped: the term it was restored to leadership
    /// in, and its last log index then ([`Replicas::read_floor`]).
    read_floors: Vec<Option<(u64, u64)>>,
    stopping: AtomicBool,
    /// With S3 snapshots: the store gate's last tick was bad, so the snapshot driver holds
    /// routine builds back (a log-pressure pass still runs).
    pub snapshot_store_bad: AtomicBool,
    /// The fair-share balancer's counters.
    pub balance: crate::raft::drivers::fair_share::BalanceCounters,
    /// `governance.leadership_balance.peer_timeout`: how long a peer's answer on whether it
    /// may campaign is waited for, by the balancers and the gates.
    pub peer_timeout: std::time::Duration,
    rt: Runtime,
}

/// What [`Replicas::new`] takes.
pub struct Parts {
    pub node_id: u64,
    pub rafts: Vec<GroupRaft>,
    pub logs: Vec<LogStore>,
    pub peers: Peers,
    pub gates: Gates,
    pub vote_hold: VoteHold,
    pub log_bytes: Arc<NodeLog>,
    pub snap_stats: Arc<SnapStats>,
    pub snaps: Option<Arc<SnapStore>>,
    pub builds: Builds,
    pub shed: Shed,
    pub holds: Arc<WriteHolds>,
    pub peer_timeout: std::time::Duration,
    pub rt: Runtime,
}

/// A group as this replica sees it.
#[derive(Debug, Clone)]
pub struct GroupView {
    pub current_leader: Option<u64>,
    pub current_term: u64,
    pub last_applied_index: Option<u64>,
    pub committed_index: Option<u64>,
    pub last_log_index: Option<u64>,
    pub last_log_term: Option<u64>,
    pub voter_ids: Vec<u64>,
    pub learner_ids: Vec<u64>,
    /// Each voter configuration of the effective membership: two while it is joint.
    pub configs: Vec<BTreeSet<u64>>,
    /// The log index of the entry that holds the effective membership.
    pub membership_index: Option<u64>,
    /// The group's Raft runs: it did not stop on a fatal error.
    pub running: bool,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("groups", &self.rafts.len())
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl Replicas {
    pub fn new(p: Parts) -> Replicas {
        let read_floors = p
            .logs
            .iter()
            .map(|l| {
                let view = l.view();
                let vote = view.vote?;
                let restored = vote.is_committed() && vote.leader_id.node_id == p.node_id;
                restored.then_some((vote.leader_id.term, view.last?.index))
            })
            .collect();
        Replicas {
            read_floors,
            node_id: p.node_id,
            rafts: p.rafts,
            logs: p.logs,
            peers: p.peers,
            gates: p.gates,
            vote_hold: p.vote_hold,
            log_bytes: p.log_bytes,
            snap_stats: p.snap_stats,
            snaps: p.snaps,
            builds: p.builds,
            shed: p.shed,
            holds: p.holds,
            lost: LostReports::default(),
            stopping: AtomicBool::new(false),
            snapshot_store_bad: AtomicBool::new(false),
            balance: Default::default(),
            peer_timeout: p.peer_timeout,
            rt: p.rt,
        }
    }

    pub fn group_count(&self) -> u32 {
        self.rafts.len() as u32
    }

    pub fn rafts(&self) -> &[GroupRaft] {
        &self.rafts
    }

    /// Why `group` stopped applying on this replica, if it did.
    pub fn apply_stop(&self, group: GroupId) -> Option<crate::runtime::ApplyStop> {
        self.rt.apply_stop(group).cloned()
    }

    pub fn raft(&self, group: GroupId) -> Option<&GroupRaft> {
        self.rafts.get(group as usize)
    }

    /// The journal bytes `group`'s log still holds.
    /// Tells each group's log where its latest snapshot ends, so the entries openraft keeps
    /// below it for lagging followers leave the unsnapshotted log (`RaftLogPressure` and the
    /// snapshot driver's weights): otherwise a budget below what the kept tails hold refuses
    /// writes for good, since no snapshot can shrink them.
    pub fn note_snapshots(&self) {
        for (raft, log) in self.rafts.iter().zip(&self.logs) {
            let snapshot = raft.metrics().borrow().snapshot;
            if let Some(s) = snapshot {
                log.mark_snapshotted(s.index);
            }
        }
    }

    pub fn log_bytes_of(&self, group: GroupId) -> u64 {
        self.logs.get(group as usize).map_or(0, LogStore::bytes)
    }

    /// Whether `group`'s unpurged entries keep a sealed journal segment on disk.
    pub fn pins_sealed_segment(&self, group: GroupId) -> bool {
        self.logs
            .get(group as usize)
            .is_some_and(LogStore::pins_sealed_segment)
    }

    /// The lowest read index this node may give for `group` as its leader. openraft restores a
    /// node whose committed vote names itself as leader at once, in the same term, and its read
    /// index is then the commit index it had persisted, which can lag entries it acknowledged
    /// before the restart: a read it confirmed would miss them (found by the fault runs, seed
    /// 1001 of docs/reliability.md). While it leads in that term, its read index is at least
    /// its last log index at start; those entries are its own log, so they commit and apply in
    /// turn. A later election appends a new term's first entry above them, and the floor ends.
    pub fn read_floor(&self, group: GroupId) -> Option<u64> {
        let (term, index) = self.read_floors.get(group as usize).copied().flatten()?;
        let current = self.raft(group)?.metrics().borrow().current_term;
        (current == term).then_some(index)
    }

    /// What `group`'s log holds now.
    pub fn log_view(&self, group: GroupId) -> LogView {
        self.logs
            .get(group as usize)
            .map(LogStore::view)
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
            learner_ids: m.membership_config.membership().learner_ids().collect(),
            configs: m.membership_config.membership().get_joint_config().clone(),
            membership_index: m.membership_config.log_id().map(|l| l.index),
            running: m.running_state.is_ok(),
        })
    }

    /// What `group`'s log holds in memory and the reads it served.
    pub fn cache_view(&self, group: GroupId) -> CacheView {
        self.logs
            .get(group as usize)
            .map(LogStore::cache_view)
            .unwrap_or_default()
    }

    /// The core `group` runs on.
    pub fn core_of(&self, group: GroupId) -> usize {
        self.rt.core_of(group)
    }

    /// The voters `[[raft.peers]]` configures for every group: this node and its peers.
    pub fn configured_voters(&self) -> BTreeSet<u64> {
        let mut out: BTreeSet<u64> = self.peers.urls.keys().copied().collect();
        out.insert(self.node_id);
        out
    }

    /// The base URL of the group's leader, if known and not this node.
    pub fn leader_url(&self, group: GroupId) -> Option<String> {
        let leader = self.leader_of(group)?;
        (leader != self.node_id)
            .then(|| self.peers.urls.get(&leader).cloned())
            .flatten()
    }

    pub fn leader_of(&self, group: GroupId) -> Option<u64> {
        self.raft(group)?.metrics().borrow().current_leader
    }

    /// `group`'s unflushed (hot) payload bytes on this node.
    pub fn hot_bytes(&self, group: GroupId) -> u64 {
        self.rt
            .with_group_now(group, |g| g.state.hot_bytes())
            .unwrap_or(0)
    }

    pub fn is_leader(&self, group: GroupId) -> bool {
        self.leader_of(group) == Some(self.node_id)
    }

    /// Lets `group`'s replica campaign again, unless the node is drained, the group's gate
    /// is closed or its apply stopped: each keeps it from taking leadership.
    pub fn resume_elections(&self, group: GroupId) {
        if let Some(raft) = self.raft(group)
            && !self.shed.sheds()
            && !self.gates.is_closed(group)
            && self.rt.apply_stop(group).is_none()
        {
            raft.runtime_config().elect(true);
        }
    }

    /// Set once the node began to stop: background tasks end.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Runs `task` on `group`'s core, next to the group's Raft.
    pub fn spawn_on_core(
        &self,
        group: GroupId,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        match self.rt.core_handle(self.rt.core_of(group)) {
            Some(h) => drop(h.spawn(task)),
            None => drop(tokio::spawn(task)),
        }
    }
}
