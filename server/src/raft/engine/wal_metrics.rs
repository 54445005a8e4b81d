//! The `wal_*` family of `/__ursula/metrics`: each core's journal counters, each group's log
//! in memory, and how the WAL opened at start, summed into node totals.
//!
//! What our journal has no use for is reported as 0 rather than invented (see
//! docs/observability.md): reclaim deletes whole segments and never copies live entries
//! forward; apply-failure archives are not built.

use ursula_protocol::metrics::WalMetrics;
use ursula_protocol::metrics::WalRecovery;

use crate::raft::recovery::files::PreviousRun;
use crate::raft::replicas::Replicas;
use crate::raft::storage::counters;
use crate::raft::storage::counters::ScanWork;
use crate::raft::storage::log_store::CacheView;
use crate::raft::storage::wal::Journal;

/// How the WAL opened at this start, fixed for the process's life.
#[derive(Debug, Clone, Default)]
pub struct Opening {
    pub recovery: WalRecovery,
    /// Per core.
    pub scans: Vec<ScanWork>,
}

/// `wal_recovery.previous_run`: how the previous run ended, as its run state says and as the
/// gate decision reads it (a run that did not end cleanly on this boot was a process crash).
pub fn previous_run(previous: &PreviousRun, boot_id: Option<&str>, held: bool) -> &'static str {
    match previous {
        PreviousRun::Missing if !held => "fresh",
        PreviousRun::Missing => "run_state_missing",
        PreviousRun::Corrupt => "run_state_corrupt",
        PreviousRun::Clean => "clean",
        PreviousRun::IoError => "io_error",
        PreviousRun::Unclean { boot_id: was, .. } if was.is_some() && was.as_deref() == boot_id => {
            "process_crash"
        }
        PreviousRun::Unclean { .. } => "host_crash",
    }
}

/// A per-core series and its sum.
fn series(per_core: Vec<u64>) -> (u64, Vec<u64>) {
    (per_core.iter().sum(), per_core)
}

pub fn report(journals: &[Journal], node: &Replicas, opening: &Opening) -> WalMetrics {
    let of = |f: fn(&counters::JournalCounters) -> u64| -> (u64, Vec<u64>) {
        series(journals.iter().map(|j| f(j.counters())).collect())
    };
    let cores = journals.len();
    let groups = node.group_count();
    let caches: Vec<_> = (0..groups).map(|g| node.cache_view(g)).collect();
    // A per-group series, its per-core sums and its node total.
    let of_groups = |f: fn(&CacheView) -> u64| -> (u64, Vec<u64>, Vec<u64>) {
        let per_group: Vec<u64> = caches.iter().map(f).collect();
        let mut per_core = vec![0u64; cores];
        for (g, n) in per_group.iter().enumerate() {
            if let Some(c) = per_core.get_mut(node.core_of(g as u32)) {
                *c += n;
            }
        }
        (per_group.iter().sum(), per_core, per_group)
    };
    let (wal_cache_hits, per_core_wal_cache_hits, per_group_wal_cache_hits) = of_groups(|c| c.hits);
    let (wal_cache_misses, per_core_wal_cache_misses, per_group_wal_cache_misses) =
        of_groups(|c| c.misses);
    let (wal_disk_reads, per_core_wal_disk_reads, per_group_wal_disk_reads) =
        of_groups(|c| c.disk_reads);
    let (wal_disk_read_bytes, per_core_wal_disk_read_bytes, per_group_wal_disk_read_bytes) =
        of_groups(|c| c.disk_read_bytes);
    let zeros_core = vec![0u64; cores];
    let scan = |f: fn(&ScanWork) -> u64| series(opening.scans.iter().map(f).collect());

    let (wal_physical_bytes, per_core_wal_physical_bytes) =
        of(|c| counters::get(&c.physical_bytes));
    let (wal_segments, per_core_wal_segments) = of(|c| counters::get(&c.segments));
    let (wal_rotations, per_core_wal_rotations) = of(|c| counters::get(&c.rotations));
    let (wal_rotation_sync_ns, per_core_wal_rotation_sync_ns) =
        of(|c| counters::get(&c.rotation_sync_ns));
    let (wal_background_syncs, per_core_wal_background_syncs) =
        of(|c| counters::get(&c.background_syncs));
    let (wal_background_sync_ns, per_core_wal_background_sync_ns) =
        of(|c| counters::get(&c.background_sync_ns));
    let (wal_reclaims, per_core_wal_reclaims) = of(|c| counters::get(&c.reclaims));
    let (wal_reclaimed_bytes, per_core_wal_reclaimed_bytes) =
        of(|c| counters::get(&c.reclaimed_bytes));
    let (wal_reclaim_ns, per_core_wal_reclaim_ns) = of(|c| counters::get(&c.reclaim_ns));
    let (wal_reclaim_failures, per_core_wal_reclaim_failures) =
        of(|c| counters::get(&c.reclaim_failures));
    let (wal_restated_bytes, per_core_wal_restated_bytes) =
        of(|c| counters::get(&c.restated_bytes));
    let (wal_lagging_groups, per_core_wal_lagging_groups) =
        of(|c| counters::get(&c.lagging_groups));
    let (wal_pinned_segments, per_core_wal_pinned_segments) =
        of(|c| counters::get(&c.pinned_segments));
    let (wal_recovery_ns, per_core_wal_recovery_ns) = scan(|s| s.ns);
    let (wal_recovery_records, per_core_wal_recovery_records) = scan(|s| s.records);
    let (wal_recovery_bytes, per_core_wal_recovery_bytes) = scan(|s| s.bytes);
    let (wal_recovery_live_entries, per_core_wal_recovery_live_entries) = scan(|s| s.live_entries);
    let per_group_wal_cache_bytes: Vec<u64> = caches.iter().map(|c| c.bytes).collect();
    let per_group_wal_indexed_entries: Vec<u64> = caches.iter().map(|c| c.entries).collect();
    WalMetrics {
        wal_physical_bytes,
        per_core_wal_physical_bytes,
        wal_segments,
        per_core_wal_segments,
        wal_rotations,
        per_core_wal_rotations,
        wal_rotation_sync_ns,
        per_core_wal_rotation_sync_ns,
        wal_background_syncs,
        per_core_wal_background_syncs,
        wal_background_sync_ns,
        per_core_wal_background_sync_ns,
        wal_reclaims,
        per_core_wal_reclaims,
        wal_reclaimed_bytes,
        per_core_wal_reclaimed_bytes,
        wal_reclaim_ns,
        per_core_wal_reclaim_ns,
        wal_reclaim_failures,
        per_core_wal_reclaim_failures,
        wal_rewritten_bytes: 0,
        per_core_wal_rewritten_bytes: zeros_core,
        wal_restated_bytes,
        per_core_wal_restated_bytes,
        wal_lagging_groups,
        per_core_wal_lagging_groups,
        wal_pinned_segments,
        per_core_wal_pinned_segments,
        wal_cache_hits,
        per_core_wal_cache_hits,
        per_group_wal_cache_hits,
        wal_cache_misses,
        per_core_wal_cache_misses,
        per_group_wal_cache_misses,
        wal_disk_reads,
        per_core_wal_disk_reads,
        per_group_wal_disk_reads,
        wal_disk_read_bytes,
        per_core_wal_disk_read_bytes,
        per_group_wal_disk_read_bytes,
        wal_cache_bytes: per_group_wal_cache_bytes.iter().sum(),
        per_group_wal_cache_bytes,
        wal_indexed_entries: per_group_wal_indexed_entries.iter().sum(),
        per_group_wal_indexed_entries,
        wal_recovery: opening.recovery.clone(),
        wal_recovery_ns,
        per_core_wal_recovery_ns,
        wal_recovery_records,
        per_core_wal_recovery_records,
        wal_recovery_bytes,
        per_core_wal_recovery_bytes,
        wal_recovery_live_entries,
        per_core_wal_recovery_live_entries,
        wal_stopped_rewritten_bytes: 0,
        wal_frozen_reference_rewritten_bytes: 0,
    }
}
