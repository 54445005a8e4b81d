//! `accept-unsynced-loss`: an operator's word that a stalled recovery gate's unsynced tail is
//! gone, which opens the gate.

use crate::raft::recovery::files::FilesError;
use crate::raft::recovery::gates::GateStatus;
use crate::raft::replicas::GroupView;
use crate::raft::replicas::Replicas;

/// What `accept-unsynced-loss` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    GateOpened,
    AlreadyOpen,
}

#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("this node does not host group {0}")]
    NoGroup(u32),
    #[error(
        "the replica of group {0} lost its vote and has not established a durable vote floor: restore connectivity to an intact quorum so the group's leader can confirm a fresh barrier; accepting unsynced data loss cannot authorize a replica to acknowledge an unknown leader"
    )]
    LostVote(u32),
    #[error(
        "the recovery gate of group {0} is closed but not stalled: it may still open through a leader's barrier without losing anything; wait for recovery_stalled"
    )]
    NotStalled(u32),
    #[error(
        "group {group} moved since it was observed: it now has last_log_index {last_log_index:?} and current_term {current_term}; read /__ursula/metrics again and decide again"
    )]
    Moved {
        group: u32,
        last_log_index: Option<u64>,
        current_term: u64,
    },
    #[error("cannot record the open gate: {0}")]
    Persist(#[from] FilesError),
}

/// Opens a stalled gate on an operator's word that the unsynced tail is gone, if the replica
/// still holds the log the operator saw. Answers what it did and the log it found: once open
/// the group may elect this replica and its log moves on at once.
pub fn accept_unsynced_loss(
    node: &Replicas,
    group: u32,
    expected_last_log_index: Option<u64>,
    expected_current_term: u64,
) -> Result<(Accepted, GroupView), AcceptError> {
    let this = node;
    {
        this.raft(group).ok_or(AcceptError::NoGroup(group))?;
        let view = this.group_view(group).ok_or(AcceptError::NoGroup(group))?;
        let status = this.gates.status(group);
        if status == GateStatus::Open {
            return Ok((Accepted::AlreadyOpen, view));
        }
        // Opening clears the floor's record, so the replica's own vote must hold it by then.
        if let Some(floor) = this.gates.lost_vote(group)
            && !floor.is_some_and(|f| this.log_view(group).vote.is_some_and(|v| f.admits(&v)))
        {
            return Err(AcceptError::LostVote(group));
        }
        if status == GateStatus::Gated {
            return Err(AcceptError::NotStalled(group));
        }
        if (view.last_log_index, view.current_term)
            != (expected_last_log_index, expected_current_term)
        {
            return Err(AcceptError::Moved {
                group,
                last_log_index: view.last_log_index,
                current_term: view.current_term,
            });
        }
        if !this.gates.open(group)? {
            return Ok((Accepted::AlreadyOpen, view));
        }
        this.resume_elections(group);
        tracing::warn!(
            group,
            last_log_index = ?view.last_log_index,
            current_term = view.current_term,
            "recovery gate opened by accept-unsynced-loss"
        );
        Ok((Accepted::GateOpened, view))
    }
}
