//! Operator actions on this node's Raft groups, typed, with no HTTP in them: [`Operator`] is
//! what the admin plane (`crate::http::admin_raft`) calls, and each action's refusal is its own
//! error type, which the plane maps to a status.
//!
//! - [`accept_loss`]: `accept-unsynced-loss`, which opens a stalled recovery gate.
//! - [`drain`]: the maintenance drain mark.
//! - [`handoff`]: leader transfer, self-election, shedding leaderships, and which voters may take a group.
//! - [`membership`]: learners and the voter set.
//! - [`log_actions`]: the manual snapshot, the log purge, the quorum proof.

pub mod accept_loss;
pub mod drain;
pub mod handoff;
pub mod log_actions;
pub mod membership;

use std::collections::BTreeSet;
use std::sync::Arc;

use ursula_protocol::admin::Elected;
use ursula_protocol::admin::LogAction;
use ursula_protocol::admin::MembershipChanged;
use ursula_protocol::admin::QuorumProof;
use ursula_protocol::admin::ShedState;
use ursula_protocol::admin::Transferred;

use self::accept_loss::AcceptError;
use self::accept_loss::Accepted;
use self::handoff::HandoffError;
use self::log_actions::LogOpError;
use self::membership::MembershipError;
use crate::raft::recovery::files::FilesError;
use crate::raft::replicas::GroupView;
use crate::raft::replicas::Replicas;

/// The typed operations API of this node's Raft groups: a cheap handle the admin plane holds.
#[derive(Clone)]
pub struct Operator(Arc<Replicas>);

impl Operator {
    pub fn new(node: Arc<Replicas>) -> Operator {
        Operator(node)
    }

    pub fn node_id(&self) -> u64 {
        self.0.node_id
    }

    /// The leadership-shed state peers and operators read.
    pub fn shed_state(&self) -> ShedState {
        self.0.shed.state()
    }

    /// Sets (`on`) or clears the maintenance drain mark.
    pub fn set_drain(&self, on: bool) -> Result<ShedState, FilesError> {
        drain::set_drain(&self.0, on)
    }

    /// Hands `group`'s leadership to `target`.
    pub async fn transfer(&self, group: u32, target: u64) -> Result<Transferred, HandoffError> {
        handoff::transfer(&self.0, group, target).await
    }

    /// Campaigns for `group` now.
    pub async fn self_elect(&self, group: u32) -> Result<Elected, HandoffError> {
        handoff::self_elect(&self.0, group).await
    }

    /// Proves with a quorum round that this node leads `group`.
    pub async fn quorum(&self, group: u32) -> Result<QuorumProof, LogOpError> {
        log_actions::quorum(&self.0, group).await
    }

    /// Builds a snapshot of `group` now.
    pub async fn snapshot(&self, group: u32) -> Result<LogAction, LogOpError> {
        log_actions::snapshot(&self.0, group).await
    }

    /// Purges `group`'s log up to its snapshot.
    pub async fn purge(&self, group: u32) -> Result<LogAction, LogOpError> {
        log_actions::purge(&self.0, group).await
    }

    /// Adds `learner` to `group`; with `blocking`, answers once it caught up.
    pub async fn add_learner(
        &self,
        group: u32,
        learner: u64,
        addr: Option<String>,
        blocking: bool,
    ) -> Result<MembershipChanged, MembershipError> {
        membership::add_learner(&self.0, group, learner, addr, blocking).await
    }

    /// Replaces `group`'s voter set.
    pub async fn set_voters(
        &self,
        group: u32,
        voters: BTreeSet<u64>,
    ) -> Result<MembershipChanged, MembershipError> {
        membership::set_voters(&self.0, group, voters).await
    }

    /// Opens `group`'s stalled recovery gate if the replica still holds the log the operator
    /// saw; answers what it did and the log it found.
    pub fn accept_unsynced_loss(
        &self,
        group: u32,
        expected_last_log_index: Option<u64>,
        expected_current_term: u64,
    ) -> Result<(Accepted, GroupView), AcceptError> {
        accept_loss::accept_unsynced_loss(
            &self.0,
            group,
            expected_last_log_index,
            expected_current_term,
        )
    }
}
