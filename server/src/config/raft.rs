//! `[raft]` and `[storage.snapshot]` checked, and the Raft engine's settings that are plain
//! values: the node id and peers, and the snapshot driver's (the driver itself is
//! `raft::drivers::snapshots`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::error::ConfigError;
use super::error::invalid;
use super::file::FileConfig;
use super::file::Peer;

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

/// Refuses `[raft]` and `[storage.snapshot]` values the engine could not run with.
pub(super) fn check(file: &FileConfig) -> Result<(), ConfigError> {
    let (r, w) = (&file.raft, &file.raft.wal);
    if let Some(c) = r.snapshot_build_max_concurrency
        && !(1..=16).contains(&c)
    {
        return Err(invalid(
            "raft.snapshot_build_max_concurrency",
            format!("({c}) must be between 1 and 16"),
        ));
    }
    if r.snapshot_pressure_max_groups_per_tick == Some(0) {
        return Err(invalid(
            "raft.snapshot_pressure_max_groups_per_tick",
            "must be at least 1",
        ));
    }
    if r.snapshot_backstop_logs == Some(0) {
        return Err(invalid("raft.snapshot_backstop_logs", "must be at least 1"));
    }
    if let Some(f) = &w.fsync
        && f != "never"
        && f != "always"
    {
        return Err(invalid(
            "raft.wal.fsync",
            format!("{f:?} is not never or always"),
        ));
    }
    if let Some(s) = w.segment_size
        && s.0 < 4096
    {
        return Err(invalid("raft.wal.segment_size", "must be at least 4KiB"));
    }
    if let (Some(min), Some(resume)) = (w.min_available_size, w.resume_available_size)
        && resume.0 <= min.0
        && min.0 != 0
    {
        return Err(invalid(
            "raft.wal.resume_available_size",
            "must exceed raft.wal.min_available_size",
        ));
    }
    if let Some(b) = &file.storage.snapshot.backend
        && !["auto", "inline", "s3"].contains(&b.as_str())
    {
        return Err(invalid(
            "storage.snapshot.backend",
            format!("{b:?} is not auto, inline or s3"),
        ));
    }
    if let (Some(a), Some(b)) = (r.init_membership_per_group, r.init_membership)
        && a != b
    {
        return Err(invalid(
            "raft.init_membership",
            "is another spelling of raft.init_membership_per_group, which is set otherwise",
        ));
    }
    if !r.peers.is_empty() && w.path.is_none() {
        return Err(invalid(
            "raft.wal.path",
            "is required when raft.peers is set",
        ));
    }
    Ok(())
}

/// This node's id (`--node-id`, else `raft.node_id`) and the peer list, node id -> URL. A single
/// node without an id is node 1; a node of a static cluster must be told which one it is.
pub(super) fn node_and_peers(
    node_id: Option<u64>,
    list: &[Peer],
) -> Result<(u64, BTreeMap<u64, String>), ConfigError> {
    if node_id == Some(0) {
        return Err(invalid("raft.node_id", "must be non-zero"));
    }
    let mut peers = BTreeMap::new();
    for p in list {
        if p.node_id == 0 {
            return Err(invalid("raft.peers", "node_id must be non-zero"));
        }
        if peers
            .insert(p.node_id, p.url.trim_end_matches('/').to_owned())
            .is_some()
        {
            return Err(invalid(
                "raft.peers",
                format!("node_id {} appears twice", p.node_id),
            ));
        }
    }
    let node_id = match node_id {
        Some(id) => id,
        None if peers.is_empty() => 1,
        None => {
            return Err(invalid(
                "raft.node_id",
                "is required when raft.peers is set (set it, or pass --node-id)",
            ));
        }
    };
    if !peers.is_empty() && !peers.contains_key(&node_id) {
        return Err(invalid(
            "raft.node_id",
            format!("node {node_id} is not one of raft.peers"),
        ));
    }
    Ok((node_id, peers))
}

/// The snapshot driver's settings; [`check`] refused the values it could not run with.
pub(super) fn snapshot_driver(file: &FileConfig) -> SnapshotDriver {
    let (d, r) = (SnapshotDriver::default(), &file.raft);
    SnapshotDriver {
        budget: r.snapshot_log_budget.map_or(d.budget, |s| s.0),
        max_concurrency: r
            .snapshot_build_max_concurrency
            .unwrap_or(d.max_concurrency),
        max_groups_per_tick: r
            .snapshot_pressure_max_groups_per_tick
            .unwrap_or(d.max_groups_per_tick),
        interval: file
            .storage
            .snapshot
            .drive_interval
            .map_or(d.interval, |i| i.0),
        backstop_logs: r.snapshot_backstop_logs.unwrap_or(d.backstop_logs),
    }
}

/// Raft snapshots on S3: where and how the node keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotStore {
    /// The namespace's root inside the bucket: `storage.snapshot.s3_prefix`, else
    /// `snapshots` under `storage.cold.root`.
    pub namespace: String,
    /// Whether the namespace lies under the cold root, whose format-epoch marker then covers
    /// it; outside, it carries a marker of its own.
    pub inside_cold_root: bool,
    /// `Some` when the cold tier is not on S3 and only snapshots use it: the namespace's own
    /// client, from `[storage.cold.s3]`, rooted at the bucket (the namespace lies under it).
    pub client: Option<ursula_cold::ColdConfig>,
    /// With [`Self::client`]: the store health gate's settings, which then watch this store.
    pub gate: Option<super::cold::StoreGate>,
    /// `testing.snapshot_prune_grace` (a test hook; an hour otherwise).
    pub grace: Duration,
    /// `testing.snapshot_prune_interval` (a test hook; ten minutes otherwise).
    pub prune_interval: Duration,
}

/// Resolves `storage.snapshot.backend`: `auto` (the default) means S3 when the cold backend is
/// S3. `"s3"` with the cold tier elsewhere (or off) keeps only the snapshots on S3, with the
/// bucket and client settings of `[storage.cold.s3]`. The in-memory node takes no snapshots.
pub(super) fn snapshot_store(
    file: &FileConfig,
    raft: bool,
) -> Result<Option<SnapshotStore>, ConfigError> {
    let snap = &file.storage.snapshot;
    let cold = &file.storage.cold;
    let cold_on_s3 = cold.backend.as_deref() == Some("s3");
    let on_s3 = match snap.backend.as_deref().unwrap_or("auto") {
        "inline" => false,
        "s3" => true,
        _ => cold_on_s3,
    };
    if !(raft && on_s3) {
        return Ok(None);
    }
    let (client, gate) = if cold_on_s3 {
        (None, None)
    } else {
        super::cold::check(cold)?;
        if cold.s3.as_ref().and_then(|s| s.bucket.as_ref()).is_none() {
            return Err(invalid(
                "storage.cold.s3.bucket",
                "is required when storage.snapshot.backend = \"s3\": Raft snapshots use the bucket and client of [storage.cold.s3]",
            ));
        }
        let backend = super::cold::s3_backend(cold);
        // No cold flush writes to this store, so only the probe judges a tick.
        let gate = super::cold::gate(cold, &backend, Duration::ZERO);
        let client = ursula_cold::ColdConfig {
            backend,
            root: String::new(),
        };
        (Some(client), gate)
    };
    let root = if cold_on_s3 {
        cold.root.as_deref().unwrap_or("").trim_matches('/')
    } else {
        ""
    };
    let namespace = match snap.s3_prefix.as_deref().map(|p| p.trim_matches('/')) {
        Some("") => {
            return Err(invalid(
                "storage.snapshot.s3_prefix",
                "must name a prefix (leave it unset for the default namespace, snapshots)",
            ));
        }
        Some(p) if cold_on_s3 && p == root => {
            return Err(invalid(
                "storage.snapshot.s3_prefix",
                "must not be storage.cold.root itself: use a prefix of its own",
            ));
        }
        Some(p) => p.to_owned(),
        None if root.is_empty() => "snapshots".to_owned(),
        None => format!("{root}/snapshots"),
    };
    let inside_cold_root =
        cold_on_s3 && (root.is_empty() || namespace.starts_with(&format!("{root}/")));
    let t = &file.testing;
    let positive = |key: &'static str, d: Option<super::Dur>, default: Duration| match d {
        Some(d) if d.0.is_zero() => Err(invalid(key, "must be more than 0")),
        Some(d) => Ok(d.0),
        None => Ok(default),
    };
    Ok(Some(SnapshotStore {
        namespace,
        inside_cold_root,
        client,
        gate,
        grace: positive(
            "testing.snapshot_prune_grace",
            t.snapshot_prune_grace,
            Duration::from_secs(3600),
        )?,
        prune_interval: positive(
            "testing.snapshot_prune_interval",
            t.snapshot_prune_interval,
            Duration::from_secs(600),
        )?,
    }))
}
