//! Membership changes an operator asks for on the admin plane: a learner added, the voter set
//! replaced. The leader's keeper of the configured voters is [`crate::raft::drivers::voter_keeper`].

use std::collections::BTreeSet;

use openraft::BasicNode;
use openraft::ChangeMembers;
use openraft::error::ClientWriteError;
use openraft::error::RaftError;
use ursula_protocol::admin::MembershipChanged;

use crate::raft::replicas::Replicas;
use crate::raft::types::GroupRaft;

#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("this node hosts no group {0}")]
    NoGroup(u32),
    #[error("this node does not lead group {group}; its leader is {}", leader.map_or("unknown".to_owned(), |l| format!("node {l}")))]
    NotLeader { group: u32, leader: Option<u64> },
    #[error("{0}")]
    Invalid(String),
    #[error("group {group}'s membership change failed: {why}")]
    Failed { group: u32, why: String },
}

pub(crate) fn leader_raft(node: &Replicas, group: u32) -> Result<&GroupRaft, MembershipError> {
    let raft = node.raft(group).ok_or(MembershipError::NoGroup(group))?;
    let leader = raft.metrics().borrow().current_leader;
    if leader != Some(node.node_id) {
        return Err(MembershipError::NotLeader { group, leader });
    }
    Ok(raft)
}

pub(crate) fn failed(
    group: u32,
) -> impl Fn(RaftError<u64, ClientWriteError<u64, BasicNode>>) -> MembershipError {
    move |e| match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => MembershipError::NotLeader {
            group,
            leader: f.leader_id,
        },
        other => MembershipError::Failed {
            group,
            why: other.to_string(),
        },
    }
}

fn changed(raft: &GroupRaft, group: u32, log_index: u64) -> MembershipChanged {
    let m = raft.metrics().borrow().membership_config.clone();
    MembershipChanged {
        raft_group_id: group,
        log_index,
        voter_ids: m.voter_ids().collect(),
        learner_ids: m.membership().learner_ids().collect(),
    }
}

/// Adds `learner` to `group` as a non-voting member at `addr` (its `[[raft.peers]]` URL when
/// `None`); with `blocking`, answers once it caught up.
pub async fn add_learner(
    node: &Replicas,
    group: u32,
    learner: u64,
    addr: Option<String>,
    blocking: bool,
) -> Result<MembershipChanged, MembershipError> {
    let raft = leader_raft(node, group)?;
    let addr = addr
        .or_else(|| node.peers.urls.get(&learner).cloned())
        .ok_or_else(|| {
            MembershipError::Invalid(format!(
                "node {learner} is not in [[raft.peers]]: name its address with ?addr="
            ))
        })?;
    let resp = raft
        .add_learner(learner, BasicNode::new(addr), blocking)
        .await
        .map_err(failed(group))?;
    Ok(changed(raft, group, resp.log_id.index))
}

/// Replaces `group`'s voter set with `voters`; voters left out stay learners.
pub async fn set_voters(
    node: &Replicas,
    group: u32,
    voters: BTreeSet<u64>,
) -> Result<MembershipChanged, MembershipError> {
    if voters.is_empty() {
        return Err(MembershipError::Invalid(
            "?voters= must name at least one voter".into(),
        ));
    }
    let raft = leader_raft(node, group)?;
    let resp = raft
        .change_membership(ChangeMembers::ReplaceAllVoters(voters), true)
        .await
        .map_err(failed(group))?;
    Ok(changed(raft, group, resp.log_id.index))
}
