//! Counters the storage, the snapshot driver and the metrics share: the node's unsnapshotted
//! Raft log and what the snapshot driver did. A leaf, so the log store and the driver that
//! weighs it need not know each other.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The node's unsnapshotted Raft log bytes, over every group, and the most it held.
#[derive(Debug, Default)]
pub struct NodeLog {
    pub bytes: AtomicU64,
    pub high: AtomicU64,
}

impl NodeLog {
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// What `/__ursula/metrics` reports of the snapshot driver, and each group's last snapshot
/// size.
#[derive(Debug)]
pub struct SnapStats {
    snap_sizes: Vec<AtomicU64>,
    pub pressure_level: AtomicU64,
    pub pressure_builds: AtomicU64,
    pub in_flight: AtomicU64,
    pub in_flight_max: AtomicU64,
    pub pressure_passes: AtomicU64,
    pub pressure_groups: AtomicU64,
    pub pressure_pass_ns: AtomicU64,
    pub builds: AtomicU64,
    pub build_ns: AtomicU64,
}

impl SnapStats {
    pub fn new(groups: u32) -> SnapStats {
        SnapStats {
            snap_sizes: (0..groups).map(|_| AtomicU64::new(0)).collect(),
            pressure_level: AtomicU64::new(0),
            pressure_builds: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            in_flight_max: AtomicU64::new(0),
            pressure_passes: AtomicU64::new(0),
            pressure_groups: AtomicU64::new(0),
            pressure_pass_ns: AtomicU64::new(0),
            builds: AtomicU64::new(0),
            build_ns: AtomicU64::new(0),
        }
    }

    /// Records a snapshot the group built (`took`) or loaded or installed (`None`).
    pub fn built(&self, group: u32, size: u64, took: Option<Duration>) {
        if let Some(s) = self.snap_sizes.get(group as usize) {
            s.store(size, Ordering::Relaxed);
        }
        if let Some(t) = took {
            self.builds.fetch_add(1, Ordering::Relaxed);
            let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            self.build_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// The size of the group's last snapshot.
    pub fn snap_size(&self, group: u32) -> u64 {
        self.snap_sizes
            .get(group as usize)
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }

    /// The driver's part of the metrics document.
    pub fn report(&self, log: &NodeLog) -> ursula_protocol::metrics::RaftLogMetrics {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ursula_protocol::metrics::RaftLogMetrics {
            raft_log_bytes: load(&log.bytes),
            raft_log_bytes_high_watermark: load(&log.high),
            raft_snapshot_pressure_level: load(&self.pressure_level),
            raft_snapshot_pressure_builds: load(&self.pressure_builds),
            raft_snapshot_builds_in_flight: load(&self.in_flight),
            raft_snapshot_builds_in_flight_max: load(&self.in_flight_max),
            raft_snapshot_pressure_passes: load(&self.pressure_passes),
            raft_snapshot_pressure_groups: load(&self.pressure_groups),
            raft_snapshot_pressure_pass_ns: load(&self.pressure_pass_ns),
            raft_snapshot_builds: load(&self.builds),
            raft_snapshot_build_ns: load(&self.build_ns),
            raft_grpc_append_stream_frame_bytes_max: 0,
            s3: None,
        }
    }
}
