//! The `/__ursula/metrics` document as types: the server builds a [`NodeMetrics`] and
//! serializes it, `ursulactl` deserializes the same type. Field names are the wire names (the
//! spec's Observability page where it names them). Sections that exist only on some nodes (the
//! Raft engine's snapshot driver, the cold tier's counters) are `Option`s, left out of the
//! document when absent; readers tolerate any field they do not know.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeMetrics {
    /// This process's identity, required on admin mutations (see [`crate::incarnation`]).
    #[serde(default)]
    pub process_incarnation: String,
    #[serde(default)]
    pub node_id: u64,
    /// `memory` or `raft`.
    #[serde(default)]
    pub engine: String,
    #[serde(default)]
    pub core_count: u64,
    #[serde(default)]
    pub group_count: u64,
    /// Streams on this node, every group.
    #[serde(default)]
    pub streams: u64,
    #[serde(default)]
    pub cores: Vec<CoreMetrics>,
    #[serde(default)]
    pub groups: Vec<GroupMetrics>,
    /// Each Raft group as this replica sees it; empty on the in-memory engine.
    #[serde(default)]
    pub raft_groups: Vec<RaftGroupView>,
    #[serde(default)]
    pub recovery_gates: RecoveryGates,
    /// Write admission's budgets in use now.
    #[serde(default)]
    pub admission: AdmissionMetrics,
    /// The snapshot driver and the Raft log; only on the Raft engine.
    #[serde(flatten, default)]
    pub raft_log: Option<RaftLogMetrics>,
    #[serde(flatten, default)]
    pub cold: ColdMetrics,
    /// Config keys this build parses but does not act on yet (named at start as well).
    #[serde(default)]
    pub config_ignored_keys: Vec<String>,
    /// This process's maintenance fence: `null` while unclaimed (every new process starts
    /// so), else the token and `active` or `retired`.
    #[serde(default)]
    pub maintenance_fence: Option<crate::admin::FenceView>,
    /// An activation or retirement is in flight, failed or was cancelled: admin mutations are
    /// refused (`503`) until the same call completes or a higher generation activates.
    #[serde(default)]
    pub maintenance_fence_uncertain: bool,
    /// The node's leadership-shed state (the maintenance drain mark).
    #[serde(default)]
    pub leadership_shed: crate::admin::ShedState,
    /// Leaderships the fair-share balancer handed to a peer that led fewer.
    #[serde(default)]
    pub leadership_balance_moves: u64,
    /// Balancer moves it planned and could not make: no peer that leads fewer may take the
    /// group now (drained, shedding, behind, silent within `peer_timeout`), or the handoff
    /// failed.
    #[serde(default)]
    pub leadership_balance_skips: u64,
    /// What keeps this node or its replicas from full redundancy; absent on the in-memory
    /// engine. Readers treat a missing report as unavailable evidence.
    #[serde(default)]
    pub raft_maintenance: Option<RaftMaintenance>,
    /// The journals' work; only on the Raft engine.
    #[serde(flatten, default)]
    pub wal: Option<WalMetrics>,
    /// WAL free-space admission; on a node with a WAL directory.
    #[serde(flatten, default)]
    pub wal_disk: Option<WalDiskMetrics>,
    /// SSE responses that started (`200`), in all and per core.
    #[serde(default)]
    pub sse_streams_opened: u64,
    #[serde(default)]
    pub per_core_sse_streams_opened: Vec<u64>,
    /// Live reads (long-poll and SSE) waiting for new data, per core: the same counts as
    /// `cores[].live_waiters`, under the name the spec's troubleshooting selector reads.
    #[serde(default)]
    pub per_core_live_read_waiters: Vec<u64>,
    /// `event: error` events written to SSE responses, in all and per core.
    #[serde(default)]
    pub sse_error_events: u64,
    #[serde(default)]
    pub per_core_sse_error_events: Vec<u64>,
    /// What each group's replicated state holds, indexed by group.
    #[serde(default)]
    pub group_state_gauges: Vec<GroupStateGauges>,
}

/// One group's replicated state, as sizes (Operations: "Memory without retention").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupStateGauges {
    pub group: u32,
    /// Streams, expired ones not yet swept included.
    #[serde(default)]
    pub streams: u64,
    /// Producers with state kept, across the group's streams.
    #[serde(default)]
    pub producers: u64,
    /// Streams with a published snapshot.
    #[serde(default)]
    pub snapshots: u64,
    /// Stream payload bytes held in memory.
    #[serde(default)]
    pub held_bytes: u64,
    /// Payload bytes not yet flushed to the cold tier.
    #[serde(default)]
    pub hot_bytes: u64,
    /// Cold objects released and waiting out their grace before deletion.
    #[serde(default)]
    pub cold_garbage_objects: u64,
    /// Cold chunks the state holds (not yet in index pages), the packed ones among them, and
    /// the most one stream holds.
    #[serde(default)]
    pub cold_chunks: u64,
    #[serde(default)]
    pub cold_packed_chunks: u64,
    #[serde(default)]
    pub cold_max_stream_chunks: u64,
    /// Index pages the state names: the live streams' and the retired ones still collected.
    #[serde(default)]
    pub cold_index_pages: u64,
    /// The largest and the 99th-percentile replicated state of one stream, beyond its
    /// unflushed payload (Operations: "Memory without retention", about 32 KiB at most).
    #[serde(default)]
    pub stream_state_bytes_max: u64,
    #[serde(default)]
    pub stream_state_bytes_p99: u64,
}

/// The per-core journals (Observability: "WAL operations"). Node totals at the top level,
/// `per_core_*` indexed by core, `per_group_*` by group. Counters count since the process
/// started; gauges are now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WalMetrics {
    /// Segment files' bytes on disk.
    pub wal_physical_bytes: u64,
    pub per_core_wal_physical_bytes: Vec<u64>,
    pub wal_segments: u64,
    pub per_core_wal_segments: Vec<u64>,
    pub wal_rotations: u64,
    pub per_core_wal_rotations: Vec<u64>,
    /// Time rotations spent syncing the sealed segment and the new one's head.
    #[serde(default)]
    pub wal_rotation_sync_ns: u64,
    #[serde(default)]
    pub per_core_wal_rotation_sync_ns: Vec<u64>,
    /// Under `fsync = "never"`: syncs of the current segment off the write path as it grows.
    #[serde(default)]
    pub wal_background_syncs: u64,
    #[serde(default)]
    pub per_core_wal_background_syncs: Vec<u64>,
    #[serde(default)]
    pub wal_background_sync_ns: u64,
    #[serde(default)]
    pub per_core_wal_background_sync_ns: Vec<u64>,
    /// Segments deleted, their bytes, the time reclaim passes took, deletions that failed.
    pub wal_reclaims: u64,
    pub per_core_wal_reclaims: Vec<u64>,
    pub wal_reclaimed_bytes: u64,
    pub per_core_wal_reclaimed_bytes: Vec<u64>,
    pub wal_reclaim_ns: u64,
    pub per_core_wal_reclaim_ns: Vec<u64>,
    pub wal_reclaim_failures: u64,
    pub per_core_wal_reclaim_failures: Vec<u64>,
    /// Live entry bytes copied out of old segments: always 0 here (see docs/observability.md).
    pub wal_rewritten_bytes: u64,
    pub per_core_wal_rewritten_bytes: Vec<u64>,
    /// Vote, purge and commit records restated at the start of each new segment.
    pub wal_restated_bytes: u64,
    pub per_core_wal_restated_bytes: Vec<u64>,
    /// Groups whose unpurged entries keep a sealed segment, and those segments, as of the
    /// last reclaim pass.
    pub wal_lagging_groups: u64,
    pub per_core_wal_lagging_groups: Vec<u64>,
    pub wal_pinned_segments: u64,
    pub per_core_wal_pinned_segments: Vec<u64>,
    /// Entries served to Raft from memory, and from disk (none: see docs/observability.md).
    pub wal_cache_hits: u64,
    pub per_core_wal_cache_hits: Vec<u64>,
    pub per_group_wal_cache_hits: Vec<u64>,
    pub wal_cache_misses: u64,
    pub per_core_wal_cache_misses: Vec<u64>,
    pub per_group_wal_cache_misses: Vec<u64>,
    pub wal_disk_reads: u64,
    pub per_core_wal_disk_reads: Vec<u64>,
    pub per_group_wal_disk_reads: Vec<u64>,
    pub wal_disk_read_bytes: u64,
    pub per_core_wal_disk_read_bytes: Vec<u64>,
    pub per_group_wal_disk_read_bytes: Vec<u64>,
    /// Bytes and entries of each group's log held in memory now.
    pub wal_cache_bytes: u64,
    pub per_group_wal_cache_bytes: Vec<u64>,
    pub wal_indexed_entries: u64,
    pub per_group_wal_indexed_entries: Vec<u64>,
    /// How the WAL opened at this start.
    pub wal_recovery: WalRecovery,
    /// The startup scan: its time, the frames and bytes it read, the entries left live.
    pub wal_recovery_ns: u64,
    pub per_core_wal_recovery_ns: Vec<u64>,
    pub wal_recovery_records: u64,
    pub per_core_wal_recovery_records: Vec<u64>,
    pub wal_recovery_bytes: u64,
    pub per_core_wal_recovery_bytes: Vec<u64>,
    pub wal_recovery_live_entries: u64,
    pub per_core_wal_recovery_live_entries: Vec<u64>,
    /// Apply-failure archives (not built: always 0).
    pub wal_stopped_rewritten_bytes: u64,
    pub wal_frozen_reference_rewritten_bytes: u64,
}

/// How the WAL opened: what the run state said of the previous run, and what this start did
/// about it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WalRecovery {
    /// `fresh` (nothing held), `clean` (graceful shutdown), `process_crash` (no clean end,
    /// same host boot), `host_crash` (no clean end, another boot), `io_error` (a journal write
    /// failed), `run_state_missing` or `run_state_corrupt` (journals hold records).
    pub previous_run: String,
    /// Whether a group entered its recovery gate at this start (the `ursula.wal.recovering`
    /// condition): the journals may have lost an unsynced tail, or a gate was still closed.
    pub recovering: bool,
    /// The groups gated at start.
    #[serde(default)]
    pub gated_groups: Vec<u32>,
    /// Cores whose newest segment ended in a complete frame that failed verification.
    #[serde(default)]
    pub damaged_tail_cores: Vec<u64>,
    /// Bytes cut from the newest segments' tails.
    #[serde(default)]
    pub cut_bytes: u64,
}

/// Free-space admission of the WAL filesystem (`raft.wal.min_available_size` and
/// `raft.wal.resume_available_size`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WalDiskMetrics {
    /// Free bytes at the last check; `None` before the first successful check.
    pub wal_available_bytes: Option<u64>,
    /// Below this, writes are refused (0: the guard is off).
    pub wal_min_available_bytes: u64,
    /// Refused writes pass again at or above this.
    pub wal_resume_available_bytes: u64,
    pub wal_disk_pressure: bool,
    /// Free-space checks that failed (each counts as pressure).
    pub wal_disk_stat_errors: u64,
}

/// The spec's `raft_maintenance` report: empty lists mean every local replica is a healthy
/// voter of a complete voter set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RaftMaintenance {
    /// Node-wide issues (`format_epoch_mismatch`, `wal_disk_pressure`, `recovery_stalled`,
    /// `recovery_gate_closed`).
    #[serde(default)]
    pub node_issues: Vec<String>,
    /// One entry per group and issue (`incomplete_voter_set`, `joint_membership`,
    /// `local_replica_not_voter`, `membership_not_applied`, `not_applied`, `apply_lag`,
    /// `leader_unknown`).
    #[serde(default)]
    pub group_issues: Vec<GroupIssue>,
    /// The voters `[[raft.peers]]` configures for every group.
    #[serde(default)]
    pub configured_voter_ids: Vec<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupIssue {
    pub raft_group_id: u32,
    pub issue: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CoreMetrics {
    pub core: u64,
    #[serde(default)]
    pub groups: u64,
    #[serde(default)]
    pub streams: u64,
    #[serde(default)]
    pub appends_accepted: u64,
    #[serde(default)]
    pub hot_bytes: u64,
    #[serde(default)]
    pub live_waiters: u64,
}

/// One group as this node holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupMetrics {
    pub group: u32,
    #[serde(default)]
    pub core: u64,
    #[serde(default)]
    pub streams: u64,
    #[serde(default)]
    pub appends_accepted: u64,
    /// The leader this node knows of, `None` while it knows none. In memory, the node itself.
    #[serde(default)]
    pub leader: Option<u64>,
    #[serde(default)]
    pub term: u64,
    /// The Raft log index last applied; in memory, the commands applied.
    #[serde(default)]
    pub applied_index: u64,
    #[serde(default)]
    pub hot_bytes: u64,
}

/// A Raft group as this replica sees it (the spec's `raft_groups[]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RaftGroupView {
    pub raft_group_id: u32,
    #[serde(default)]
    pub node_id: u64,
    #[serde(default)]
    pub current_leader: Option<u64>,
    #[serde(default)]
    pub current_term: u64,
    #[serde(default)]
    pub last_applied_index: Option<u64>,
    #[serde(default)]
    pub committed_index: Option<u64>,
    #[serde(default)]
    pub last_log_index: Option<u64>,
    #[serde(default)]
    pub last_log_term: Option<u64>,
    #[serde(default)]
    pub voter_ids: Vec<u64>,
    /// Non-voting members (a replica being rebuilt, or one added by the learners route).
    #[serde(default)]
    pub learner_ids: Vec<u64>,
    /// A committed command that failed to apply and stopped the group on this replica;
    /// `null` while the group applies.
    #[serde(default)]
    pub apply_failure: Option<ApplyFailure>,
    #[serde(default)]
    pub maintenance: GroupMaintenance,
}

/// The spec's `raft_groups[].apply_failure` shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyFailure {
    pub term: u64,
    pub index: u64,
    pub kind: String,
    pub message: String,
}

/// Whether the group runs on this replica (`maintenance.running`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupMaintenance {
    /// The group's Raft runs: it did not stop on a fatal error.
    #[serde(default)]
    pub running: bool,
    /// The group's recovery gate on this replica is open.
    #[serde(default)]
    pub recovery_ready: bool,
}

/// Closed recovery gates, by group id (as text: JSON object keys).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoveryGates {
    /// Group -> `recovering` or `stalled`.
    #[serde(default)]
    pub gated: BTreeMap<String, String>,
    #[serde(default)]
    pub stalled: Vec<u32>,
    /// Groups whose replica lost its vote, with the floor it waits for.
    #[serde(default)]
    pub wiped: BTreeMap<String, Wiped>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Wiped {
    /// `None` until the leader's barrier set it.
    #[serde(default)]
    pub vote_floor: Option<VoteFloor>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoteFloor {
    pub term: u64,
    pub leader: u64,
}

/// Budgets write admission holds for requests in progress. Each returns to zero when nothing
/// is in flight, however the requests ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdmissionMetrics {
    /// Write body bytes admitted and not yet answered, against `server.http_inflight_body_size`.
    #[serde(default)]
    pub inflight_body_bytes: u64,
    /// Proposed and not yet applied write bytes, every group, against
    /// `raft.max_uncommitted_size_per_group` each.
    #[serde(default)]
    pub uncommitted_bytes: u64,
    #[serde(default)]
    pub per_group_uncommitted_bytes: Vec<u64>,
}

/// The Raft log and the snapshot driver (Observability: "Metrics").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RaftLogMetrics {
    pub raft_log_bytes: u64,
    pub raft_log_bytes_high_watermark: u64,
    pub raft_snapshot_pressure_level: u64,
    pub raft_snapshot_pressure_builds: u64,
    pub raft_snapshot_builds_in_flight: u64,
    pub raft_snapshot_builds_in_flight_max: u64,
    pub raft_snapshot_pressure_passes: u64,
    pub raft_snapshot_pressure_groups: u64,
    pub raft_snapshot_pressure_pass_ns: u64,
    pub raft_snapshot_builds: u64,
    pub raft_snapshot_build_ns: u64,
    /// The largest message this node sent a peer over Raft's transport (the spec's name; here
    /// an HTTP body: a batch of append RPCs, or a lone RPC such as a snapshot chunk).
    #[serde(default)]
    pub raft_grpc_append_stream_frame_bytes_max: u64,
    /// With S3 snapshots (`storage.snapshot.backend`); absent with inline snapshots.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<RaftSnapshotS3Metrics>,
}

/// Raft snapshots on S3 (docs/durability.md, "Raft snapshots on S3").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RaftSnapshotS3Metrics {
    /// The snapshot namespace, e.g. `s3://bucket/cold/snapshots`.
    pub raft_snapshot_store: String,
    /// Snapshots uploaded, and their bytes.
    pub raft_snapshot_s3_uploads: u64,
    pub raft_snapshot_s3_upload_bytes: u64,
    /// Snapshots installed from the namespace (a leader sent their reference).
    pub raft_snapshot_s3_installs: u64,
    /// Requests to the namespace that failed (uploads, reads, pins, listings, deletes).
    pub raft_snapshot_s3_errors: u64,
    /// Objects refused as torn, damaged or foreign, never installed.
    pub raft_snapshot_s3_refused: u64,
    /// Retired snapshot objects pruned, and the prune passes that completed.
    pub raft_snapshot_s3_pruned: u64,
    pub raft_snapshot_s3_prune_passes: u64,
}

/// Hot bytes (with or without a cold backend) and the cold tier's counters (with one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ColdMetrics {
    #[serde(default)]
    pub cold_hot_bytes: u64,
    #[serde(default)]
    pub per_group_cold_hot_bytes: Vec<u64>,
    /// The store, e.g. `s3://bucket/root`; `None` without a cold backend.
    #[serde(default)]
    pub cold_backend: Option<String>,
    #[serde(default)]
    pub cold_backpressure_events: u64,
    #[serde(default)]
    pub cold_flush_write_errors: u64,
    #[serde(flatten, default)]
    pub tier: Option<ColdTierMetrics>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ColdTierMetrics {
    pub per_group_cold_backpressure_events: Vec<u64>,
    pub cold_flushes: u64,
    pub cold_flushed_bytes: u64,
    pub cold_reads: u64,
    pub cold_read_bytes: u64,
    pub cold_read_errors: u64,
    pub cold_deleted_objects: u64,
    /// The read cache (`storage.cold.cache_size`): its capacity (0: off), the bytes it holds,
    /// and the cold pieces reads found in it and fetched.
    pub cold_cache_capacity_bytes: u64,
    pub cold_cache_bytes: u64,
    pub cold_cache_hits: u64,
    pub cold_cache_misses: u64,
    #[serde(flatten)]
    pub sweep: ColdSweepMetrics,
    #[serde(flatten)]
    pub index: ColdIndexMetrics,
    #[serde(flatten, default)]
    pub external: ColdExternalMetrics,
}

/// Bodies staged in the cold tier before their write was proposed (docs/cold-tier.md,
/// "External payloads").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdExternalMetrics {
    /// Append bodies at or above `runtime.external_payload_min_size` uploaded, and their bytes.
    #[serde(default)]
    pub cold_external_payloads_staged: u64,
    #[serde(default)]
    pub cold_external_payload_bytes: u64,
    /// Staged appends whose stream moved before they applied, staged again.
    #[serde(default)]
    pub cold_external_payload_restaged: u64,
    /// Appends sent through Raft after staging kept losing to their stream's other writes.
    #[serde(default)]
    pub cold_external_payload_inline: u64,
    /// Uploads that failed (the append was answered `503`), and staged objects deleted after
    /// a marked refusal.
    #[serde(default)]
    pub cold_external_payload_errors: u64,
    #[serde(default)]
    pub cold_external_payloads_deleted: u64,
}

/// The cold index and compaction (docs/cold-tier.md): the page size new indexes use, and what
/// this node's leaderships compacted, sealed and collected.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdIndexMetrics {
    pub cold_index_page_bytes: u64,
    /// Runs rewritten into one object, packed objects adopted as they were, bytes rewritten.
    pub cold_compactions: u64,
    pub cold_compaction_adoptions: u64,
    pub cold_compacted_bytes: u64,
    pub cold_index_pages_sealed: u64,
    pub cold_index_pages_dropped: u64,
    /// Pages refused when read: torn, corrupt, under the wrong key, or of a newer layout.
    pub cold_index_page_errors: u64,
    /// Reads and uploads of the index work that failed and are retried.
    pub cold_index_errors: u64,
}

/// The orphan sweep (`storage.cold.orphan_min_age`, `orphan_sweep_interval`): the age past
/// which an unreferenced object goes, and what the passes found and deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdSweepMetrics {
    pub cold_orphan_min_age_ms: u64,
    /// Passes completed, and when the last one ended (unix ms; 0 before the first).
    pub cold_orphan_sweep_passes: u64,
    pub cold_orphan_sweep_last_pass_ms: u64,
    /// Objects the last pass listed under the cold root.
    pub cold_orphan_sweep_listed_objects: u64,
    /// Of those, the ones the last pass found unreferenced and past the minimum age.
    pub cold_orphans_found: u64,
    /// The oldest unreferenced object the last pass judged, whatever its age (ms).
    pub cold_orphan_oldest_age_ms: u64,
    pub cold_orphans_deleted: u64,
    pub cold_orphan_deleted_bytes: u64,
    /// Listings and deletions of the sweep that failed.
    pub cold_orphan_sweep_errors: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_sections_are_left_out_and_read_back_as_absent() {
        let m = NodeMetrics {
            node_id: 1,
            engine: "memory".into(),
            ..NodeMetrics::default()
        };
        let text = serde_json::to_string(&m).expect("encode");
        assert!(!text.contains("raft_log_bytes"), "{text}");
        assert!(!text.contains("cold_flushes"), "{text}");
        assert!(text.contains("\"cold_backend\":null"), "{text}");
        let back: NodeMetrics = serde_json::from_str(&text).expect("decode");
        assert_eq!(back, m);
    }

    #[test]
    fn present_sections_flatten_into_the_top_level_and_read_back() {
        let m = NodeMetrics {
            engine: "raft".into(),
            raft_log: Some(RaftLogMetrics {
                raft_log_bytes: 7,
                ..RaftLogMetrics::default()
            }),
            cold: ColdMetrics {
                cold_backend: Some("memory".into()),
                tier: Some(ColdTierMetrics {
                    cold_flushes: 3,
                    ..ColdTierMetrics::default()
                }),
                ..ColdMetrics::default()
            },
            ..NodeMetrics::default()
        };
        let v: serde_json::Value = serde_json::to_value(&m).expect("encode");
        assert_eq!(v["raft_log_bytes"], 7);
        assert_eq!(v["cold_flushes"], 3);
        let back: NodeMetrics = serde_json::from_value(v).expect("decode");
        assert_eq!(back, m);
    }

    #[test]
    fn the_wal_sections_flatten_under_the_spec_names_and_read_back() {
        let m = NodeMetrics {
            engine: "raft".into(),
            wal: Some(WalMetrics {
                wal_physical_bytes: 9,
                wal_recovery: WalRecovery {
                    previous_run: "clean".into(),
                    ..WalRecovery::default()
                },
                ..WalMetrics::default()
            }),
            wal_disk: Some(WalDiskMetrics {
                wal_available_bytes: Some(5),
                ..WalDiskMetrics::default()
            }),
            ..NodeMetrics::default()
        };
        let v: serde_json::Value = serde_json::to_value(&m).expect("encode");
        assert_eq!(v["wal_physical_bytes"], 9);
        assert_eq!(v["wal_recovery"]["previous_run"], "clean");
        assert_eq!(v["wal_available_bytes"], 5);
        assert_eq!(v["wal_disk_pressure"], false);
        let back: NodeMetrics = serde_json::from_value(v).expect("decode");
        assert_eq!(back, m);
        let empty = serde_json::to_string(&NodeMetrics::default()).expect("encode");
        assert!(!empty.contains("wal_"), "{empty}");
        let back: NodeMetrics = serde_json::from_str(&empty).expect("decode");
        assert_eq!((back.wal, back.wal_disk), (None, None));
    }

    #[test]
    fn a_document_with_unknown_fields_still_reads() {
        let m: NodeMetrics = serde_json::from_str(
            r#"{"node_id":2,"engine":"raft","future_field":{"x":1},
                "groups":[{"group":0,"leader":null,"term":3}]}"#,
        )
        .expect("decode");
        assert_eq!(m.node_id, 2);
        assert_eq!(m.groups[0].leader, None);
    }
}
