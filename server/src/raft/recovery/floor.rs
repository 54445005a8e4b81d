//! The vote floor of a replica that lost its vote with its WAL. Raft's election safety rests on
//! every voter remembering its vote: a wiped replica no longer knows which leaders it helped
//! elect, so it cannot tell the current leader from a stale one. Until the group's leader has
//! confirmed a fresh ReadIndex barrier with a quorum of the other voters, the replica refuses
//! every append, heartbeat, snapshot and vote. That leader's vote then becomes the replica's
//! floor: a leader below it was already deposed by that quorum.
//!
//! openraft (without `single-term-leader`) orders leaders by `(term, node id)`, a total order,
//! and a follower takes an append only from a leader at or above its own vote. The floor uses
//! the same order, so it refuses exactly what openraft would refuse had the replica kept the
//! floor's vote.

use openraft::Vote;

/// A leader's vote as the floor keeps it: its term and its node id.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Floor {
    pub term: u64,
    pub leader: u64,
}

impl Floor {
    pub fn of(vote: &Vote<u64>) -> Floor {
        Floor {
            term: vote.leader_id.term,
            leader: vote.leader_id.node_id,
        }
    }

    /// Whether a leader holding `vote` may replicate to a replica with this floor: the term
    /// first, then the node id within a term.
    pub fn admits(&self, vote: &Vote<u64>) -> bool {
        Floor::of(vote) >= *self
    }
}

impl std::fmt::Display for Floor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "term {} leader {}", self.term, self.leader)
    }
}

/// The peer RPC a recovering replica is asked to serve, as far as the floor cares.
#[derive(Debug, Clone, Copy)]
pub enum Rpc<'a> {
    /// An append (also a heartbeat) or a snapshot chunk, from a leader holding this vote.
    Replicate(&'a Vote<u64>),
    Vote,
}

/// Why a replica refuses a peer RPC. The leader sees the refusal as an unavailable peer and
/// retries after its backoff, as it does for a node that is down.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "group {group}: this replica lost its vote with its WAL and has no vote floor yet; it waits for the leader to confirm a fresh barrier with a quorum of the other voters"
    )]
    NoFloor { group: u32 },
    #[error("group {group}: leader vote {vote} is below this replica's vote floor ({floor})")]
    BelowFloor {
        group: u32,
        vote: Floor,
        floor: Floor,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(term: u64, node: u64, committed: bool) -> Vote<u64> {
        if committed {
            Vote::new_committed(term, node)
        } else {
            Vote::new(term, node)
        }
    }

    #[test]
    fn the_floor_admits_its_leader_and_later_ones_and_refuses_a_lower_term_first() {
        let floor = Floor { term: 5, leader: 2 };
        assert!(floor.admits(&vote(5, 2, true)));
        assert!(floor.admits(&vote(5, 2, false)));
        assert!(floor.admits(&vote(6, 1, true)));
        assert!(floor.admits(&vote(5, 3, true)));
        // The term decides before the node id: a higher node id cannot lift a lower term.
        assert!(!floor.admits(&vote(4, 9, true)));
        assert!(!floor.admits(&vote(5, 1, true)));
        assert!(!floor.admits(&vote(0, 0, false)));
        assert_eq!(Floor::of(&vote(7, 3, true)), Floor { term: 7, leader: 3 });
    }
}
