//! The leader's keeper, which holds every group at its configured voters (this node and
//! `[[raft.peers]]`):
//!
//! - a voter that reported lost entries (it asked for a barrier behind a closed recovery gate)
//!   is removed, kept as a learner, when a quorum of voters that kept their log and
//!   acknowledged the leader within 1.5 s (the leader counted) remains without it; otherwise
//!   the leader only resends its log to it;
//! - a configured node that is not a voter is added as a learner, and promoted once it holds
//!   every committed entry and acknowledged the leader within 1.5 s.
//!
//! Each step reads the current membership, so a leader change or another restart of the node
//! converge. Membership changes are for repair, never for shrinking a group: a voter the
//! membership route drops stays a learner and is promoted again.

use std::collections::BTreeSet;
use std::sync::Weak;
use std::time::Duration;

use openraft::BasicNode;
use openraft::ChangeMembers;

use crate::raft::ops::handoff::ACK_WINDOW;
use crate::raft::ops::membership::MembershipError;
use crate::raft::ops::membership::failed;
use crate::raft::ops::membership::leader_raft;
use crate::raft::replicas::Replicas;

/// How often the keeper looks at the groups this node leads.
const KEEP_EVERY: Duration = Duration::from_millis(500);

/// The voters every group is kept at.
fn configured(node: &Replicas) -> BTreeSet<u64> {
    let mut all: BTreeSet<u64> = node.peers.urls.keys().copied().collect();
    all.insert(node.node_id);
    all
}

/// The leader's keeper: runs for the node's life.
pub async fn keep(node: Weak<Replicas>) {
    let mut tick = tokio::time::interval(KEEP_EVERY);
    loop {
        tick.tick().await;
        let Some(node) = super::running(&node) else {
            return;
        };
        let mut lost = node.lost.take();
        for group in 0..node.group_count() {
            if !node.is_leader(group) {
                continue;
            }
            let reported: BTreeSet<u64> = lost
                .iter()
                .filter(|(g, _)| *g == group)
                .map(|(_, n)| *n)
                .collect();
            lost.retain(|(g, _)| *g != group);
            if let Err(e) = keep_group(&node, group, &reported).await {
                tracing::info!(group, error = %e, "membership keeper: the step did not commit; it is read again next tick");
            }
        }
    }
}

/// One step for one group this node leads: at most one membership change.
async fn keep_group(
    node: &Replicas,
    group: u32,
    reported: &BTreeSet<u64>,
) -> Result<(), MembershipError> {
    let raft = leader_raft(node, group)?;
    let m = raft.metrics().borrow().clone();
    let membership = m.membership_config.membership().clone();
    if membership.get_joint_config().len() > 1 {
        return Ok(());
    }
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    let learners: BTreeSet<u64> = membership.learner_ids().collect();
    for lost in reported
        .iter()
        .filter(|n| voters.contains(n) && **n != node.node_id)
    {
        // A quorum of voters that kept their log and answered lately, this leader counted.
        let healthy = 1 + voters
            .iter()
            .filter(|v| **v != node.node_id && !reported.contains(v))
            .filter(|v| {
                node.peers
                    .acks
                    .since(**v, group)
                    .is_some_and(|d| d <= ACK_WINDOW)
            })
            .count();
        if healthy < voters.len() / 2 + 1 {
            tracing::info!(
                group,
                node = lost,
                healthy,
                "a voter lost entries, but no healthy quorum remains without it: resending the log instead of rebuilding"
            );
            continue;
        }
        tracing::warn!(
            group,
            node = lost,
            "rebuilding a voter that lost entries: removed from the voters, kept as a learner until it caught up"
        );
        raft.change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([*lost])), true)
            .await
            .map_err(failed(group))?;
        return Ok(());
    }
    let committed = node.log_view(group).committed.map(|l| l.index);
    for missing in configured(node).difference(&voters) {
        if !learners.contains(missing) {
            let Some(url) = node.peers.urls.get(missing) else {
                continue;
            };
            tracing::info!(
                group,
                node = missing,
                "adding a configured voter back as a learner"
            );
            raft.add_learner(*missing, BasicNode::new(url.clone()), false)
                .await
                .map_err(failed(group))?;
            return Ok(());
        }
        let matched = m
            .replication
            .as_ref()
            .and_then(|r| r.get(missing).copied().flatten())
            .map(|l| l.index);
        let fresh = node
            .peers
            .acks
            .since(*missing, group)
            .is_some_and(|d| d <= ACK_WINDOW);
        if fresh && matched.is_some() && matched >= committed {
            tracing::info!(
                group,
                node = missing,
                "promoting a caught-up learner back to voter"
            );
            raft.change_membership(
                ChangeMembers::AddVoterIds(BTreeSet::from([*missing])),
                false,
            )
            .await
            .map_err(failed(group))?;
            return Ok(());
        }
    }
    Ok(())
}
