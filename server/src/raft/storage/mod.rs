//! Where a group's Raft state lives on disk and in memory.
//!
//! - [`wal`]: the per-core journal every group of a core shares (segments, frames, fsync).
//! - [`frame`]: the journal's frame layout, and where each group's entry frames sit, to read
//!   entries back that a log no longer keeps in memory.
//! - [`log_store`]: a group's Raft log over its core's journal (openraft's `RaftLogStorage`).
//! - [`state_machine`]: a group's state machine over its streams, and its snapshot files.
//! - [`apply_guard`]: a panic while an entry applies stops that group alone.
//! - [`snapstore`]: Raft snapshots on S3: the objects, the references files and
//!   `InstallSnapshot` carry, each node's pins and the leader's pruning.
//! - [`record`]: the sealed, versioned envelope of journal payloads and snapshots.
//! - [`background`]: the lowest-priority threads the cores hand work to (frees, snapshot builds).
//! - [`flush`]: flush-ahead of a journal segment under `fsync = "never"`, off the core.
//! - [`reclaim`]: deleting sealed journal segments on a thread of their own.
//! - [`counters`]: the journal's counters, written on the write path, read by the metrics.
//! - [`log_counters`]: the log and snapshot counters the log store, the snapshot driver and the
//!   metrics share.
//! - [`fatal`]: how the journal stops the process when the disk fails it.

pub mod apply_guard;
pub mod background;
pub mod counters;
pub mod fatal;
pub mod flush;
pub mod frame;
pub mod log_counters;
pub mod log_store;
pub mod reclaim;
pub mod record;
pub mod snapstore;
pub mod state_machine;
pub mod wal;

#[cfg(test)]
mod fixtures;
