//! The admin plane's log primitives for one group: a manual snapshot, a purge of the log below
//! the snapshot, and the quorum proof (a fresh ReadIndex round of the leader).

use std::time::Duration;
use std::time::Instant;

use ursula_protocol::admin::LogAction;
use ursula_protocol::admin::QuorumProof;

use crate::raft::replicas::Replicas;
use crate::raft::types::GroupRaft;

/// How long a manual snapshot or purge may take before the route answers `500`.
const ACTION_WAIT: Duration = Duration::from_secs(20);
/// How long a manual snapshot waits for a build of its group to be able to start: none of
/// the group's running and one of the node's build permits free (the spec's 10 seconds).
const PERMIT_WAIT: Duration = Duration::from_secs(10);
/// How long the quorum proof waits for a quorum's answer.
const QUORUM_WAIT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum LogOpError {
    #[error("this node hosts no group {0}")]
    NoGroup(u32),
    #[error("this node does not lead group {group}; its leader is {}", leader.map_or("unknown".to_owned(), |l| format!("node {l}")))]
    NotLeader { group: u32, leader: Option<u64> },
    #[error(
        "group {group} has no snapshot to purge below: POST /__ursula/raft/{group}/snapshot first"
    )]
    NoSnapshot { group: u32 },
    #[error(
        "group {group}: no snapshot build of it could start within {PERMIT_WAIT:?} (a build of it ran, or other builds held all of this node's raft.snapshot_build_max_concurrency permits); send it again"
    )]
    Busy { group: u32 },
    #[error("group {group}: {why}")]
    Failed { group: u32, why: String },
}

fn raft_of(node: &Replicas, group: u32) -> Result<&GroupRaft, LogOpError> {
    node.raft(group).ok_or(LogOpError::NoGroup(group))
}

fn action(raft: &GroupRaft, group: u32) -> LogAction {
    let m = raft.metrics().borrow().clone();
    LogAction {
        raft_group_id: group,
        snapshot_index: m.snapshot.map(|l| l.index),
        purged_index: m.purged.map(|l| l.index),
    }
}

/// Waits until `done` holds of the group's metrics, at most [`ACTION_WAIT`].
async fn wait_for(
    raft: &GroupRaft,
    group: u32,
    what: &str,
    done: impl Fn(&openraft::RaftMetrics<u64, openraft::BasicNode>) -> bool,
) -> Result<(), LogOpError> {
    let started = Instant::now();
    loop {
        if done(&raft.metrics().borrow()) {
            return Ok(());
        }
        if started.elapsed() >= ACTION_WAIT {
            return Err(LogOpError::Failed {
                group,
                why: format!("the {what} did not finish within {ACTION_WAIT:?}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Builds a snapshot of everything `group` had applied when called, and answers once it
/// exists.
pub async fn snapshot(node: &Replicas, group: u32) -> Result<LogAction, LogOpError> {
    let raft = raft_of(node, group)?;
    let applied = raft.metrics().borrow().last_applied.map(|l| l.index);
    let covered = || raft.metrics().borrow().snapshot.map(|l| l.index) >= applied;
    let snapshot_of = |g: u32| {
        node.raft(g)
            .and_then(|r| r.metrics().borrow().snapshot.map(|l| l.index))
    };
    // A build of the group that runs now, or one begun since, may cover the request: wait for
    // it, and for a permit, rather than trigger a build openraft would drop.
    let start = node
        .builds
        .permit(group, PERMIT_WAIT, snapshot_of, covered)
        .await
        .map_err(|_| LogOpError::Busy { group })?;
    if start {
        let before = raft.metrics().borrow().snapshot.map(|l| l.index);
        if !node.builds.start(raft, group, before).await {
            return Err(LogOpError::Failed {
                group,
                why: "the group is stopping: openraft refused the snapshot trigger".to_owned(),
            });
        }
    }
    wait_for(raft, group, "snapshot", |m| {
        m.snapshot.map(|l| l.index) >= applied
    })
    .await?;
    Ok(action(raft, group))
}

/// Purges `group`'s log up to its snapshot.
pub async fn purge(node: &Replicas, group: u32) -> Result<LogAction, LogOpError> {
    let raft = raft_of(node, group)?;
    let Some(upto) = raft.metrics().borrow().snapshot else {
        return Err(LogOpError::NoSnapshot { group });
    };
    raft.trigger()
        .purge_log(upto.index)
        .await
        .map_err(|e| LogOpError::Failed {
            group,
            why: e.to_string(),
        })?;
    wait_for(raft, group, "purge", |m| {
        m.purged.map(|l| l.index) >= Some(upto.index)
    })
    .await?;
    Ok(action(raft, group))
}

/// A fresh ReadIndex round as `group`'s leader: the prefix a quorum confirmed under this
/// leader's term.
pub async fn quorum(node: &Replicas, group: u32) -> Result<QuorumProof, LogOpError> {
    let raft = raft_of(node, group)?;
    let not_leader = |leader| LogOpError::NotLeader { group, leader };
    let before = raft.metrics().borrow().clone();
    if before.current_leader != Some(node.node_id) {
        return Err(not_leader(before.current_leader));
    }
    let read = match tokio::time::timeout(QUORUM_WAIT, raft.get_read_log_id()).await {
        Ok(Ok((read, _applied))) => read.map(|l| l.index),
        Ok(Err(e)) => {
            return Err(LogOpError::Failed {
                group,
                why: e.to_string(),
            });
        }
        Err(_) => {
            return Err(LogOpError::Failed {
                group,
                why: "no quorum confirmed the leadership in time".into(),
            });
        }
    };
    let after = raft.metrics().borrow().clone();
    if after.current_term != before.current_term || after.current_leader != Some(node.node_id) {
        return Err(not_leader(after.current_leader));
    }
    let membership = after.membership_config.membership();
    Ok(QuorumProof {
        raft_group_id: group,
        leader: node.node_id,
        term: after.current_term,
        read_index: read,
        voter_ids: membership.voter_ids().collect(),
        learner_ids: membership.learner_ids().collect(),
    })
}
