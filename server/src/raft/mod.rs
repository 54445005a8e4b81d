//! The Raft engine: one openraft group per `raft.group_count`, each run on its core's runtime,
//! its log in the core's journal, its state machine the same stream state machine the in-memory
//! engine drives, its peer traffic multiplexed over HTTP.
//!
//! Each folder holds one kind of thing, and imports only the folders on the floors below it
//! (top first; two rooms on one floor import nothing of each other). Raft knows nothing of
//! HTTP: the node's planes (`crate::http::admin_raft`, `crate::http::cluster`) call the two
//! typed faces [`start()`] hands back, [`ops::Operator`] and
//! [`engine::peer_service::PeerService`].
//!
//! 1. [`start()`]: checks the WAL root, recovers the journals, decides the recovery gates and
//!    starts every group and background task, as a sequence of steps with typed results.
//! 2. [`engine`]: what the node's planes call: `RaftEngine` (the
//!    [`GroupEngine`](crate::engine::GroupEngine)), group commit, the maintenance report, the
//!    `wal_*` metrics, and the peer service that answers peer RPCs.
//!    [`drivers`]: the background tasks (snapshot driver, store health gate, gate watchers,
//!    bootstrap, the voter keeper, the drain balancer).
//! 3. [`ops`]: operator actions, typed: handoff, membership, log actions, the drain mark,
//!    `accept-unsynced-loss`.
//! 4. [`replicas`]: this node's replicas of its groups and the node-wide cells they carry
//!    (leadership shed, write holds, lost reports, snapshot builds).
//! 5. [`peer`]: the peer transport's client side: wire format, protocol version, lanes, acks.
//!    [`storage`]: the per-core journal, a group's log store and state machine, their counters.
//! 6. [`recovery`]: the WAL root's files, recovery gates, vote floors, the vote hold.
//!    [`types`]: the Raft type configuration every room shares.

pub mod drivers;
pub mod engine;
pub mod ops;
pub mod peer;
pub mod recovery;
pub mod replicas;
mod start;
pub mod storage;
pub mod types;

pub use start::RaftOptions;
pub use start::StartError;
pub use start::Started;
pub use start::start;
