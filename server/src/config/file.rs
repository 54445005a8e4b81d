//! The config file's schema: every section and key `ursula server` reads from TOML. Unknown
//! keys are refused by name (`deny_unknown_fields`), so a typo cannot pass as a setting, and a
//! key the spec removed is refused naming the release that removed it ([`REMOVED`]).

use std::path::PathBuf;

use serde::Deserialize;

use super::units::Dur;
use super::units::Size;

/// Why a config file's text is not a config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// Not TOML, an unknown key, or a value of the wrong shape; toml's message names the key.
    #[error("{0}")]
    Syntax(String),
    /// A key a release of Ursula removed.
    #[error("{key}: removed in Ursula {release} ({why})")]
    Removed {
        key: &'static str,
        release: &'static str,
        why: &'static str,
    },
}

/// A key (or section) the spec's release notes removed: its dotted name, the release, and
/// what replaced it.
pub struct RemovedKey {
    pub key: &'static str,
    pub release: &'static str,
    pub why: &'static str,
}

/// Every key the spec's release notes say "fails to load": the 0.7.0 upgrade steps and release
/// notes (the memory WAL's keys and `raft.rejoin_probe`) and the 0.6.0 release notes (keyed
/// streams and the compatibility-only keys).
pub const REMOVED: &[RemovedKey] = &[
    RemovedKey {
        key: "raft.wal.backend",
        release: "0.7.0",
        why: "the memory WAL is gone; the WAL is always the per-core disk journal",
    },
    RemovedKey {
        key: "raft.wal.allow_volatile_multi_peer",
        release: "0.7.0",
        why: "the memory WAL is gone; set raft.wal.path on every node of a cluster",
    },
    RemovedKey {
        key: "raft.memory_bootstrap_marker_dir",
        release: "0.7.0",
        why: "the memory WAL is gone, and its bootstrap marker with it",
    },
    RemovedKey {
        key: "raft.rejoin_probe",
        release: "0.7.0",
        why: "a voter that lost entries is rebuilt by its group leaders",
    },
    RemovedKey {
        key: "raft.snapshot_pressure_unpurged_logs",
        release: "0.6.0",
        why: "it had no effect; raft.snapshot_log_budget drives snapshots",
    },
    RemovedKey {
        key: "storage.snapshot.drive_flush_concurrency",
        release: "0.6.0",
        why: "it had no effect",
    },
    RemovedKey {
        key: "server.keyed_state_upstream",
        release: "0.6.0",
        why: "keyed streams are gone",
    },
    RemovedKey {
        key: "keyed_state",
        release: "0.6.0",
        why: "keyed streams are gone",
    },
];

/// Parses a config file's text. A removed key is named with its release before anything else
/// is checked, so an old config is told what changed rather than that a key is unknown.
pub fn parse_file(text: &str) -> Result<FileConfig, FileError> {
    // Text that is not TOML has no keys to look at: the typed parse below says where it broke.
    if let Ok(raw) = toml::from_str::<toml::Table>(text)
        && let Some(r) = REMOVED.iter().find(|r| holds(&raw, r.key))
    {
        return Err(FileError::Removed {
            key: r.key,
            release: r.release,
            why: r.why,
        });
    }
    toml::from_str(text).map_err(|e| FileError::Syntax(e.to_string().trim().replace('\n', " ")))
}

/// Whether `table` sets the dotted `key`.
fn holds(table: &toml::Table, key: &str) -> bool {
    let mut at = table;
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        match at.get(part) {
            None => return false,
            Some(_) if parts.peek().is_none() => return true,
            Some(toml::Value::Table(t)) => at = t,
            Some(_) => return false,
        }
    }
    false
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub runtime: RuntimeSection,
    #[serde(default)]
    pub raft: RaftSection,
    #[serde(default)]
    pub storage: StorageSection,
    #[serde(default)]
    pub observability: ObservabilitySection,
    #[serde(default)]
    pub governance: GovernanceSection,
    #[serde(default)]
    pub testing: TestingSection,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub listen: Option<String>,
    pub cluster_listen: Option<String>,
    pub admin_listen: Option<String>,
    pub http_inflight_body_size: Option<Size>,
    /// Ours, beyond the spec: how long a graceful shutdown may take from the first signal.
    pub shutdown_deadline: Option<Dur>,
    /// Ours: how long a connection may take to send a whole request head, idle keep-alive
    /// time before it included.
    pub request_head_timeout: Option<Dur>,
    /// Ours: open connections per listener; more wait in the kernel's backlog.
    pub max_connections: Option<u32>,
    /// Ours: host names the admin plane answers besides `localhost` and IP literals.
    pub admin_hosts: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSection {
    pub cpu_affinity: Option<bool>,
    pub core_count: Option<usize>,
    pub live_read_max_waiters_per_core: Option<usize>,
    pub external_payload_min_size: Option<Size>,
    pub node_memory_abort_cap_size: Option<Size>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservabilitySection {
    pub tokio_console: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    pub node_id: u64,
    pub url: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RaftSection {
    pub node_id: Option<u64>,
    pub append_transport_budget_bytes: Option<u64>,
    pub group_count: Option<u32>,
    #[serde(default)]
    pub wal: WalSection,
    #[serde(default)]
    pub peers: Vec<Peer>,
    pub init_membership_per_group: Option<bool>,
    /// The spec's other spelling of `init_membership_per_group` (Troubleshooting).
    pub init_membership: Option<bool>,
    pub snapshot_log_budget: Option<Size>,
    pub snapshot_build_max_concurrency: Option<u32>,
    pub snapshot_pressure_max_groups_per_tick: Option<u32>,
    pub snapshot_backstop_logs: Option<u64>,
    pub max_uncommitted_size_per_group: Option<Size>,
    /// Ours: a file holding the secret every peer RPC carries (docs/security.md).
    pub peer_secret_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalSection {
    pub path: Option<PathBuf>,
    pub fsync: Option<String>,
    pub segment_size: Option<Size>,
    pub cache_size: Option<Size>,
    pub min_available_size: Option<Size>,
    pub resume_available_size: Option<Size>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSection {
    #[serde(default)]
    pub cold: ColdSection,
    #[serde(default)]
    pub snapshot: SnapshotSection,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColdSection {
    pub backend: Option<String>,
    pub root: Option<String>,
    pub s3: Option<S3Section>,
    pub flush_interval: Option<Dur>,
    pub flush_size: Option<Size>,
    pub flush_min_hot_size: Option<Size>,
    pub flush_max_size: Option<Size>,
    pub flush_max_concurrency: Option<u32>,
    pub max_hot_size_per_group: Option<Size>,
    pub flush_max_hot_age: Option<Dur>,
    pub compaction_enabled: Option<bool>,
    /// Ours, beyond the spec: how long a released object stays before it is deleted.
    pub gc_grace: Option<Dur>,
    /// Ours, naming the presets' "cold cache": the bytes of cold ranges kept in memory; 0 off.
    pub cache_size: Option<Size>,
    /// Ours: an object under the cold root that nothing references is deleted by the orphan
    /// sweep once it is this old (the spec's day unless set).
    pub orphan_min_age: Option<Dur>,
    /// Ours: how often the orphan sweep lists the store (an hour unless set).
    pub orphan_sweep_interval: Option<Dur>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Section {
    pub bucket: Option<String>,
    pub region: Option<String>,
    pub endpoint: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub server_side_encryption: Option<String>,
    pub kms_key_id: Option<String>,
    pub probe_timeout: Option<Dur>,
    pub unhealthy_ticks: Option<u32>,
    pub heal_ticks: Option<u32>,
    pub timeout: Option<Dur>,
    pub max_retries: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotSection {
    pub backend: Option<String>,
    pub drive_interval: Option<Dur>,
    /// The S3 snapshot namespace, for S3 snapshots without an S3 cold tier.
    pub s3_prefix: Option<String>,
}

/// Test hooks: settings that make the node misbehave on purpose, so process tests can reach
/// states a healthy node does not (documented as such in docs/configuration.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestingSection {
    /// A Raft node's shutdown waits this long before it stops its groups and syncs its
    /// journals, as a shutdown stuck on a slow disk would: what `server.shutdown_deadline` cuts.
    pub shutdown_stall: Option<Dur>,
    /// A producer idle this long is forgotten, instead of 7 days: lets a test reach the state
    /// of an owner idle for a week without waiting one.
    pub producer_forget_after: Option<Dur>,
    /// The cold flush uploads its object, then aborts the process before it proposes the
    /// commit: the crash between upload and commit that leaves an object nothing references.
    pub cold_abort_after_upload: Option<bool>,
    /// The offset span of a cold-index page, so tests reach page edges with little data.
    pub cold_index_page_bytes: Option<Size>,
    /// How long a retired Raft snapshot object on S3 stays before it is pruned, instead of an
    /// hour.
    pub snapshot_prune_grace: Option<Dur>,
    /// How often a node publishes its snapshot pins and prunes, instead of every 10 minutes.
    pub snapshot_prune_interval: Option<Dur>,
    /// The leadership balancer's tick, instead of every 2 seconds.
    pub leadership_balance_interval: Option<Dur>,
    /// A committed append whose body holds these bytes panics while it applies, on every
    /// replica with the key: the deterministic bug of the apply-failure drill. The same node
    /// started without it is the corrected binary.
    pub apply_panic_on: Option<String>,
}

/// `[governance]`, as far as the spec names it: the leadership balancer
/// (`leadership_balance.peer_timeout`, `max_per_tick`), the cold-health gate (`cold_health`) and
/// the cluster-egress gate (`cluster_probe`). The spec names no keys of the two gates, so their
/// sections load only empty. This build acts on `leadership_balance` and `cluster_probe` (on
/// every Raft node with peers, its settings fixed: docs/operations.md), and not yet on
/// `cold_health` (`Config::ignored_keys`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GovernanceSection {
    pub leadership_balance: Option<LeadershipBalanceSection>,
    pub cold_health: Option<GateSection>,
    pub cluster_probe: Option<GateSection>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeadershipBalanceSection {
    /// How long a gate or the balancer waits for a peer's leadership-shed state; non-zero.
    pub peer_timeout: Option<Dur>,
    /// Leaderships the balancer moves per tick.
    pub max_per_tick: Option<u32>,
}

/// A governance gate's section whose keys the spec does not name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateSection {}
