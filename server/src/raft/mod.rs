//! The Raft engine: one openraft group per `raft.group_count`, each run on its core's runtime,
//! its log in the core's journal, its state machine the same stream state machine the in-memory
//! engine drives, its peer traffic multiplexed over HTTP.
//!
//! Module map (dependencies point down the list's tree, never back up):
//! - [`start()`]: checks the WAL root, recovers the journals, decides the recovery gates and
//!   starts every group, as a sequence of steps with typed results.
//! - [`engine`]: `RaftEngine`, the [`GroupEngine`](crate::engine::GroupEngine) the node runs.
//! - [`batch`]: group commit of client writes into log entries.
//! - [`operate`]: the admin plane's operator routes (drain mark, transfer, self-election,
//!   quorum proof, snapshot, purge, learners, voter set), over the modules below.
//! - [`handoff`]: leader transfer, self-election, shedding leaderships, the drain balancer.
//! - [`membership`]: learners, the voter set, and the leader's keeper of configured voters
//!   (the rebuild of a voter that lost entries).
//! - [`logops`]: manual snapshot and purge, the quorum proof.
//! - [`routes`]: the engine's own HTTP surface: peer RPCs (the cluster plane) and the admin
//!   mutation `accept-unsynced-loss`.
//! - [`maintenance`]: the maintenance report and the replica readiness read from it.
//! - [`walmetrics`]: the `wal_*` metrics: journal counters, logs in memory, the opening.
//! - [`replicas`]: this node's replicas of its groups, shared by everything below.
//! - [`shed`]: the leadership-shed state (the maintenance drain mark).
//! - [`pause`]: holds on a group's client writes while it is handed off.
//! - [`rebuilds`]: replicas that reported lost entries to their leader.
//! - [`snapdrive`]: snapshots by log bytes against `raft.snapshot_log_budget`.
//! - [`storegate`]: the snapshot-store health gate: S3 probes and cold-flush writes, shedding.
//! - [`builds`]: the snapshot builds in flight that the driver and `logops` share.
//! - [`recovery`]: the WAL root's files, recovery gates, vote floors, the bootstrap.
//! - [`peer`]: peer traffic: wire format, protocol version, lanes, client and server.
//! - [`storage`]: the per-core journal, a group's log store and its state machine.
//! - [`stats`]: the log and snapshot counters storage, driver and metrics share.

pub mod batch;
pub mod builds;
pub mod engine;
pub mod handoff;
pub mod logops;
pub mod maintenance;
pub mod membership;
pub mod operate;
pub mod pause;
pub mod peer;
pub mod rebuilds;
pub mod recovery;
pub mod replicas;
pub mod routes;
pub mod shed;
pub mod snapdrive;
mod start;
pub mod stats;
pub mod storage;
pub mod storegate;
pub mod walmetrics;

pub use start::RaftOptions;
pub use start::StartError;
pub use start::Started;
pub use start::start;

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
