//! The Raft engine's settings that are plain values: the snapshot driver's, from `[raft]` and
//! `[storage.snapshot]`. The driver itself is `raft::snapdrive`.

use std::time::Duration;

/// The snapshot driver's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotDriver {
    /// `raft.snapshot_log_budget`.
    pub budget: u64,
    /// `raft.snapshot_build_max_concurrency`.
    pub max_concurrency: u32,
    /// `raft.snapshot_pressure_max_groups_per_tick`.
    pub max_groups_per_tick: u32,
    /// `storage.snapshot.drive_interval`; zero turns the driver off.
    pub interval: Duration,
    /// `raft.snapshot_backstop_logs`: openraft's own entry-count policy.
    pub backstop_logs: u64,
}

impl Default for SnapshotDriver {
    fn default() -> SnapshotDriver {
        SnapshotDriver {
            budget: 1 << 30,
            max_concurrency: 2,
            max_groups_per_tick: 16,
            interval: Duration::from_secs(5),
            backstop_logs: DEFAULT_BACKSTOP_LOGS,
        }
    }
}

/// The spec leaves the backstop's default open: high enough that the byte budget decides for
/// ordinary entries, low enough that a flood of tiny entries still gets snapshotted.
pub const DEFAULT_BACKSTOP_LOGS: u64 = 500_000;
