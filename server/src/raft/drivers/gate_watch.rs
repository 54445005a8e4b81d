//! How a closed recovery gate ([`crate::raft::recovery::gates`]) opens by itself: through a
//! fresh barrier of the group's leader that the replica applied ([`watch`]). An operator's word
//! that the unsynced tail is gone, for a stalled gate, is [`crate::raft::ops::accept_loss`].

use std::collections::BTreeSet;
use std::sync::Weak;
use std::time::Duration;

use crate::raft::replicas::Replicas;
use crate::raft::types::GroupRaft;

/// How often a closed gate looks for a leader.
const POLL: Duration = Duration::from_millis(500);
/// How long a replica waits to apply up to a barrier before it asks for a fresh one.
const APPLY_WAIT: Duration = Duration::from_secs(10);

/// Watches `group`'s closed gate until it opens: through the leader's barrier, or through an
/// operator's `accept-unsynced-loss`, after which elections resume.
pub async fn watch(engine: Weak<Replicas>, group: u32) {
    loop {
        tokio::time::sleep(POLL).await;
        let Some(e) = super::running(&engine) else {
            return;
        };
        let Some(raft) = e.raft(group).cloned() else {
            return;
        };
        if !e.gates.is_closed(group) {
            e.resume_elections(group);
            return;
        }
        for leader in leaders(&e, &raft, group).await {
            if barrier_opens(&e, &raft, group, leader).await {
                return;
            }
        }
        let applied = raft.metrics().borrow().last_applied.map(|l| l.index);
        if e.gates.observe(group, applied) {
            tracing::error!(
                group,
                "recovery gate stalled: no leader barrier and nothing applied for 30s; writes acknowledged after the last fsync may be lost, and only POST /__ursula/raft/{group}/recovery/accept-unsynced-loss on the voters with the most up-to-date logs can open it"
            );
        }
    }
}

/// Whom to ask for a barrier: the leader this replica follows. A wiped replica without a
/// floor follows nobody, since it refuses every leader's appends, so it asks the leaders the
/// other voters report.
async fn leaders(e: &Replicas, raft: &GroupRaft, group: u32) -> Vec<u64> {
    let own = raft
        .metrics()
        .borrow()
        .current_leader
        .filter(|l| *l != e.node_id);
    if e.gates.lost_vote(group) != Some(None) {
        return own.into_iter().collect();
    }
    let asks = e
        .peers
        .urls
        .keys()
        .filter(|id| **id != e.node_id)
        .map(|node| e.peers.probe(*node, group));
    let mut out: BTreeSet<u64> = futures_util::future::join_all(asks)
        .await
        .into_iter()
        .filter_map(|p| p.ok()?.leader)
        .filter(|l| *l != e.node_id)
        .collect();
    out.extend(own);
    out.into_iter().collect()
}

/// Asks `leader` for a fresh barrier; a wiped replica records the leader's vote as its floor
/// first. Opens the gate once the replica applied the barrier. Returns whether it opened.
async fn barrier_opens(e: &Replicas, raft: &GroupRaft, group: u32, leader: u64) -> bool {
    let confirmed = match e.peers.barrier(leader, group).await {
        Ok(Ok(c)) => c,
        Ok(Err(why)) => {
            tracing::debug!(group, leader, %why, "no recovery barrier");
            return false;
        }
        Err(err) => {
            tracing::debug!(group, leader, error = %err, "no recovery barrier");
            return false;
        }
    };
    e.gates.progressed(group);
    if e.gates.lost_vote(group) == Some(None) {
        match e.gates.set_floor(group, confirmed.vote) {
            Ok(true) => tracing::info!(
                group,
                leader,
                floor = %confirmed.vote,
                barrier = confirmed.index,
                "vote floor recorded: the leader confirmed a fresh barrier with a quorum of the other voters; replication from it is accepted"
            ),
            Ok(false) => {}
            Err(err) => {
                tracing::error!(group, error = %err, "cannot record the vote floor: replication stays refused");
                return false;
            }
        }
    }
    let applied = match confirmed.index {
        None => true,
        Some(i) => raft
            .wait(Some(APPLY_WAIT))
            .applied_index_at_least(Some(i), "recovery barrier")
            .await
            .is_ok(),
    };
    if !applied {
        return false;
    }
    // The floor's record goes with the gate: before that, the replica's own Raft vote must
    // hold it, so openraft keeps refusing the leaders the floor refused.
    if let Some(Some(floor)) = e.gates.lost_vote(group)
        && !e.log_view(group).vote.is_some_and(|v| floor.admits(&v))
    {
        tracing::debug!(group, %floor, "the replica's vote does not hold its vote floor yet");
        return false;
    }
    match e.gates.open(group) {
        Ok(_) => {
            e.resume_elections(group);
            tracing::info!(
                group,
                leader,
                barrier = confirmed.index,
                "recovery gate opened: applied the leader's barrier"
            );
            true
        }
        Err(err) => {
            tracing::error!(group, error = %err, "cannot record an open recovery gate");
            false
        }
    }
}
