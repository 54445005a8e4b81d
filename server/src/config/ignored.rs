//! The keys this build parses but does not act on. A config written for the spec still loads,
//! and the node names these keys in a warning at start (and `Config::ignored_keys` in the
//! metrics), so nobody takes such a setting for one that works.
//!
//! A key is listed when its value asks for something this build does not do. A value that
//! asks for what the build does anyway is not: `raft.init_membership_per_group = true` (groups
//! always bootstrap per group).

use super::file::FileConfig;

/// The dotted names of the keys in `file` that change nothing here, sorted. `raft` says whether
/// the Raft engine runs: the in-memory node reads none of the Raft keys.
pub fn ignored_keys(file: &FileConfig, raft: bool) -> Vec<String> {
    let (r, cold, snap) = (&file.raft, &file.storage.cold, &file.storage.snapshot);
    let s3 = cold.s3.clone().unwrap_or_default();
    let cold_on_s3 = cold.backend.as_deref() == Some("s3");
    let snaps_on_s3 = match snap.backend.as_deref() {
        Some("s3") => true,
        Some("inline") => false,
        _ => cold_on_s3,
    };
    // The store health gate watches the cold tier on S3, or the snapshots' own store.
    let gated = raft && (cold_on_s3 || snaps_on_s3);
    let gov = &file.governance;
    let mut keys: Vec<&str> = [
        (
            "observability.tokio_console",
            file.observability.tokio_console == Some(true),
        ),
        (
            "raft.append_transport_budget_bytes",
            r.append_transport_budget_bytes.is_some(),
        ),
        (
            "raft.init_membership_per_group",
            r.init_membership_per_group == Some(false)
                || (!raft && r.init_membership_per_group.is_some()),
        ),
        (
            "raft.init_membership",
            r.init_membership == Some(false) || (!raft && r.init_membership.is_some()),
        ),
        (
            "storage.cold.s3.probe_timeout",
            s3.probe_timeout.is_some() && !gated,
        ),
        (
            "storage.cold.s3.unhealthy_ticks",
            s3.unhealthy_ticks.is_some() && !gated,
        ),
        (
            "storage.cold.s3.heal_ticks",
            s3.heal_ticks.is_some() && !gated,
        ),
        // The in-memory node takes no snapshots.
        ("storage.snapshot.backend", snap.backend.is_some() && !raft),
        (
            "storage.snapshot.s3_prefix",
            snap.s3_prefix.is_some() && !(raft && snaps_on_s3),
        ),
        // The balancer runs on a Raft node; peer_timeout also bounds its questions to peers.
        (
            "governance.leadership_balance.peer_timeout",
            !raft
                && gov
                    .leadership_balance
                    .as_ref()
                    .is_some_and(|l| l.peer_timeout.is_some()),
        ),
        (
            "governance.leadership_balance.max_per_tick",
            !raft
                && gov
                    .leadership_balance
                    .as_ref()
                    .is_some_and(|l| l.max_per_tick.is_some()),
        ),
        ("governance.cold_health", gov.cold_health.is_some()),
        // The egress gate probes peers: a node without any has none to reach.
        (
            "governance.cluster_probe",
            gov.cluster_probe.is_some() && (!raft || file.raft.peers.is_empty()),
        ),
    ]
    .into_iter()
    .filter_map(|(k, on)| on.then_some(k))
    .collect();
    if !raft {
        keys.extend(raft_only(file));
    }
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter().map(str::to_owned).collect()
}

/// The keys only the Raft engine reads, present in `file`.
fn raft_only(file: &FileConfig) -> Vec<&'static str> {
    let (r, w) = (&file.raft, &file.raft.wal);
    [
        ("raft.wal.path", w.path.is_some()),
        ("raft.wal.fsync", w.fsync.is_some()),
        ("raft.wal.segment_size", w.segment_size.is_some()),
        (
            "raft.wal.min_available_size",
            w.min_available_size.is_some(),
        ),
        (
            "raft.wal.resume_available_size",
            w.resume_available_size.is_some(),
        ),
        (
            "raft.max_uncommitted_size_per_group",
            r.max_uncommitted_size_per_group.is_some(),
        ),
        ("raft.snapshot_log_budget", r.snapshot_log_budget.is_some()),
        (
            "raft.snapshot_build_max_concurrency",
            r.snapshot_build_max_concurrency.is_some(),
        ),
        (
            "raft.snapshot_pressure_max_groups_per_tick",
            r.snapshot_pressure_max_groups_per_tick.is_some(),
        ),
        (
            "raft.snapshot_backstop_logs",
            r.snapshot_backstop_logs.is_some(),
        ),
        (
            "storage.snapshot.drive_interval",
            file.storage.snapshot.drive_interval.is_some(),
        ),
        (
            "testing.shutdown_stall",
            file.testing.shutdown_stall.is_some(),
        ),
        (
            "testing.apply_panic_on",
            file.testing.apply_panic_on.is_some(),
        ),
    ]
    .into_iter()
    .filter_map(|(k, on)| on.then_some(k))
    .collect()
}
