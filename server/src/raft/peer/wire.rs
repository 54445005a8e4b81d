//! What travels between peers: the RPC kinds and their paths, the batch envelope of `append`
//! RPCs, Ursula's own RPCs' answers (`barrier`, `probe`), and how an exchange can fail. Bodies
//! are MessagePack; every request and answer carries the Raft protocol header
//! ([`super::protocol`]) and every request names its sender and addressee.

use crate::raft::recovery::floor::Floor;

/// The path of one RPC: `POST /__ursula/raft-rpc/{group}/{kind}`.
pub const RPC_PREFIX: &str = "/__ursula/raft-rpc";
/// The path of a batch of `append` RPCs of many groups ([`super::lanes`]).
pub const BATCH_PATH: &str = "/__ursula/raft-rpc-batch";

/// A peer RPC: openraft's three, and two of Ursula's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcKind {
    /// openraft's AppendEntries (heartbeats included).
    Append,
    Vote,
    /// openraft's InstallSnapshot.
    Snapshot,
    /// A gated replica asks the leader for a fresh ReadIndex barrier and the leader's vote.
    Barrier,
    /// The bootstrap asks a voter whether it holds the group and sees a leader.
    Probe,
    /// A leader handing the group off asks its target to campaign now ([`ElectRequest`]).
    Elect,
    /// A node that took an operator's whole-group command (a bucket purge, a backup import)
    /// hands it to the group's leader: the body is the command, the answer a [`ProposeAnswer`].
    Propose,
    /// A follower asks the leader for a quorum-confirmed read index before it answers a read
    /// from its own state (a cursor past its local tail): a [`Barrier`], without the
    /// rebuild report a gated replica's `barrier` makes.
    ReadIndex,
}

impl RpcKind {
    /// The path segment that names the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            RpcKind::Append => "append",
            RpcKind::Vote => "vote",
            RpcKind::Snapshot => "snapshot",
            RpcKind::Barrier => "barrier",
            RpcKind::Probe => "probe",
            RpcKind::Elect => "elect",
            RpcKind::Propose => "propose",
            RpcKind::ReadIndex => "read-index",
        }
    }

    /// Every kind, in declaration order.
    pub const ALL: [RpcKind; 8] = [
        RpcKind::Append,
        RpcKind::Vote,
        RpcKind::Snapshot,
        RpcKind::Barrier,
        RpcKind::Probe,
        RpcKind::Elect,
        RpcKind::Propose,
        RpcKind::ReadIndex,
    ];

    pub fn parse(s: &str) -> Option<RpcKind> {
        RpcKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A leader's request that the addressee campaign for a group now: the leader stopped
/// proposing and the addressee holds its whole log, so it wins unless another node's lease
/// or log says otherwise.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ElectRequest {
    /// The leader that asks, and its term.
    pub leader: u64,
    pub term: u64,
    /// Only say whether the addressee would campaign (not drained, gate open).
    pub dry_run: bool,
}

/// Why a peer declined a request, in its own words. It crosses the wire as a plain string
/// (`serde(transparent)`), so the encoding is the one a bare `String` had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
#[error("{0}")]
pub struct Declined(pub String);

impl From<String> for Declined {
    fn from(why: String) -> Declined {
        Declined(why)
    }
}

impl From<&str> for Declined {
    fn from(why: &str) -> Declined {
        Declined(why.to_owned())
    }
}

/// `Err` names why the addressee will not campaign.
pub type ElectAnswer = Result<(), Declined>;

/// The leader's answer to a forwarded operator command: what the state machine answered, or
/// why the addressee did not propose it (not the leader, the group stopped).
pub type ProposeAnswer =
    Result<Result<ursula_state::stream::Applied, ursula_state::stream::Refusal>, Declined>;

/// One RPC in a batch request: its group and its MessagePack body.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Item {
    pub group: u32,
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
}

/// One answer in a batch response, in request order: the status a lone RPC would have had.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Answer {
    pub status: u16,
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
}

/// Why an exchange with a peer failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    #[error("peer unreachable: {0}")]
    Unreachable(String),
    #[error("peer exchange failed: {0}")]
    Network(String),
    /// An operator command is handed to a peer only with the cluster's peer secret.
    #[error(
        "forwarding an operator command to the group's leader needs the cluster's peer secret (raft.peer_secret_file or URSULA_PEER_SECRET on every node); set it, or send the command to the leader's own admin plane"
    )]
    NoSecret,
}

/// A leader's answer to `barrier`, or why it gave none (not the leader, no quorum, its own
/// gate closed, its vote moved meanwhile).
pub type Barrier = Result<Confirmed, Declined>;

/// A barrier a quorum confirmed.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Confirmed {
    /// The barrier's log index, `None` for an empty log.
    pub index: Option<u64>,
    /// The leader's vote a quorum of voters acknowledged for the barrier: a wiped replica's
    /// vote floor.
    pub vote: Floor,
}

/// A voter's answer to `probe`.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    /// It holds a vote, entries or a purge point of the group.
    pub holds: bool,
    pub leader: Option<u64>,
    /// Its last log index (the purge point once every entry is purged). Past `0`, the initial
    /// membership, the group had a leader. Absent from a node of an older build.
    #[serde(default)]
    pub last_log_index: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_kinds_round_trip_through_their_path_segment() {
        for k in RpcKind::ALL {
            assert_eq!(RpcKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(RpcKind::parse("install"), None);
    }
}
