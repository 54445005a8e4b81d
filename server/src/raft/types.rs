//! The Raft type configuration every room of the engine shares: what an entry carries
//! ([`Writes`]), what applying it answers ([`Outcome`]), openraft's [`TypeConfig`] and a
//! group's [`GroupRaft`].

use std::io::Cursor;

use openraft::Raft;

use ursula_state::stream::Applied;
use ursula_state::stream::Command;
use ursula_state::stream::Refusal;

/// A replicated entry: the writes batched into it, in order, and the leader's clock when it
/// was proposed, so every replica applies them identically.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Writes {
    pub now_ms: u64,
    pub cmds: Vec<Command>,
}

/// What applying an entry answered, one answer per write; empty for Raft's own entries.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Outcome(pub Vec<Result<Applied, Refusal>>);

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Writes,
        R = Outcome,
);

pub type GroupRaft = Raft<TypeConfig>;
