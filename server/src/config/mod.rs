//! Configuration: built-in defaults < preset < TOML file < CLI flags. Unknown keys and bad
//! values stop the server at start with a message naming the key.

use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{key}: {message}")]
    Invalid { key: &'static str, message: String },
    #[error("unknown preset {0:?}; expected default, dev, tiny, small, standard or large")]
    Preset(String),
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

/// A byte size: an integer, or a string such as `"64MiB"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SizeRepr")]
pub struct Size(pub u64);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Int(u64),
    Text(String),
}

impl TryFrom<SizeRepr> for Size {
    type Error = String;
    fn try_from(r: SizeRepr) -> Result<Size, String> {
        match r {
            SizeRepr::Int(n) => Ok(Size(n)),
            SizeRepr::Text(s) => parse_size(&s)
                .map(Size)
                .ok_or_else(|| format!("{s:?} is not a size like \"64MiB\"")),
        }
    }
}

pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// A duration: a string such as `"500ms"`, `"5s"`, `"5m"`, `"1h"`, or `"0"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Dur(pub std::time::Duration);

impl TryFrom<String> for Dur {
    type Error = String;
    fn try_from(s: String) -> Result<Dur, String> {
        parse_duration(&s)
            .map(Dur)
            .ok_or_else(|| format!("{s:?} is not a duration like \"5s\""))
    }
}

pub fn parse_duration(s: &str) -> Option<std::time::Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let ms = match unit {
        "ms" => n,
        "s" | "" if unit == "s" || n == 0 => n.checked_mul(1000)?,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(std::time::Duration::from_millis(ms))
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
    pub governance: toml::Table,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub listen: Option<String>,
    pub cluster_listen: Option<String>,
    pub admin_listen: Option<String>,
    pub http_inflight_body_size: Option<Size>,
    pub keyed_state_upstream: Option<String>,
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
    pub snapshot_log_budget: Option<Size>,
    pub snapshot_build_max_concurrency: Option<u32>,
    pub snapshot_pressure_max_groups_per_tick: Option<u32>,
    pub snapshot_pressure_unpurged_logs: Option<u64>,
    pub snapshot_backstop_logs: Option<u64>,
    pub max_uncommitted_size_per_group: Option<Size>,
    pub rejoin_probe: Option<toml::Value>,
    pub memory_bootstrap_marker_dir: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalSection {
    pub path: Option<PathBuf>,
    pub backend: Option<String>,
    pub fsync: Option<String>,
    pub segment_size: Option<Size>,
    pub cache_size: Option<Size>,
    pub min_available_size: Option<Size>,
    pub resume_available_size: Option<Size>,
    pub allow_volatile_multi_peer: Option<bool>,
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
    pub drive_flush_concurrency: Option<u32>,
}

/// Which engine runs the groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineChoice {
    /// The `default`/`dev` preset: single node, in memory, no Raft.
    Memory,
    /// Raft over the disk WAL. `wal_dir: None` runs it in a temporary directory.
    Raft {
        wal_dir: Option<PathBuf>,
        fsync_always: bool,
        segment_size: u64,
        /// node id -> URL, this node included; empty for a single node.
        peers: std::collections::BTreeMap<u64, String>,
    },
}

/// The resolved configuration the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub node_id: u64,
    pub core_count: usize,
    pub group_count: u32,
    pub live_read_max_waiters_per_core: usize,
    pub engine: EngineChoice,
    pub preset: String,
    /// `server.http_inflight_body_size`.
    pub http_inflight_body_size: u64,
    /// `raft.wal.min_available_size` / `resume_available_size`.
    pub wal_min_available: u64,
    pub wal_resume_available: u64,
    /// `raft.max_uncommitted_size_per_group`.
    pub max_uncommitted_per_group: u64,
    /// `raft.snapshot_log_budget`.
    pub snapshot_log_budget: u64,
    /// The snapshot driver: the budget above, `raft.snapshot_*` and
    /// `storage.snapshot.drive_interval`.
    pub snapshot_driver: crate::raft::snapdrive::Settings,
    /// `[storage.cold]`; `None` without a cold backend.
    pub cold: Option<crate::coldtier::ColdSettings>,
}

/// What the command line supplies.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub preset: Option<String>,
    pub node_id: Option<u64>,
    pub listen: Option<String>,
}

struct PresetDefaults {
    groups_per_core: Option<u32>,
    group_count: Option<u32>,
    /// `server.http_inflight_body_size`.
    inflight_body: u64,
}

fn preset(name: &str) -> Result<PresetDefaults, ConfigError> {
    // Groups and the HTTP in-flight body budget of the Configuration page's preset table.
    let fixed = |groups, inflight_mib: u64| PresetDefaults {
        groups_per_core: None,
        group_count: Some(groups),
        inflight_body: inflight_mib << 20,
    };
    Ok(match name {
        "default" | "dev" => PresetDefaults {
            groups_per_core: Some(16),
            group_count: None,
            inflight_body: 256 << 20,
        },
        "tiny" => fixed(64, 64),
        "small" => fixed(128, 64),
        "standard" => fixed(256, 256),
        "large" => fixed(512, 512),
        other => return Err(ConfigError::Preset(other.to_owned())),
    })
}

pub fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_file(&text).map_err(|message| ConfigError::Parse {
        path: path.to_owned(),
        message,
    })
}

pub fn parse_file(text: &str) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string().trim().replace('\n', " "))
}

/// The config file to use: the flag, else the first of the standard places that exists.
fn find_config(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_owned());
    }
    let mut candidates = vec![
        PathBuf::from("ursula.toml"),
        PathBuf::from("/etc/ursula/ursula.toml"),
    ];
    if let Some(home) = std::env::var_os("XDG_CONFIG_HOME").or_else(|| {
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config").into_os_string())
    }) {
        candidates.push(PathBuf::from(home).join("ursula").join("ursula.toml"));
    }
    candidates.into_iter().find(|p| p.is_file())
}

pub fn resolve(o: &Overrides) -> Result<Config, ConfigError> {
    let path = find_config(o.config.as_deref());
    let file = match &path {
        Some(p) => load_file(p)?,
        None => FileConfig::default(),
    };
    let preset_name = o.preset.clone().unwrap_or_else(|| "default".to_owned());
    // A config file runs Raft unless `--preset default` (or `dev`) asks for the in-memory node.
    let memory_preset = matches!(preset_name.as_str(), "default" | "dev");
    let raft = (path.is_some() && o.preset.is_none()) || !memory_preset;
    resolve_engine(&file, &preset_name, o, raft)
}

/// Resolves a config without looking for files: Raft only when the file asks for a WAL or peers.
pub fn resolve_with(
    file: &FileConfig,
    preset_name: &str,
    o: &Overrides,
) -> Result<Config, ConfigError> {
    let raft = file.raft.wal.path.is_some() || !file.raft.peers.is_empty();
    resolve_engine(file, preset_name, o, raft)
}

fn resolve_engine(
    file: &FileConfig,
    preset_name: &str,
    o: &Overrides,
    raft: bool,
) -> Result<Config, ConfigError> {
    let p = preset(preset_name)?;
    let listen_raw = o
        .listen
        .clone()
        .or_else(|| file.server.listen.clone())
        .unwrap_or_else(|| "127.0.0.1:4437".into());
    let listen: SocketAddr = listen_raw.parse().map_err(|_| {
        invalid(
            "server.listen",
            format!("{listen_raw:?} is not an address like 127.0.0.1:4437"),
        )
    })?;
    let core_count = match file.runtime.core_count {
        Some(0) => return Err(invalid("runtime.core_count", "must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let group_count = match file.raft.group_count {
        Some(0) => return Err(invalid("raft.group_count", "must be at least 1")),
        Some(n) => n,
        None => p
            .group_count
            .unwrap_or_else(|| p.groups_per_core.unwrap_or(16) * core_count as u32),
    };
    if let Some(c) = file.raft.snapshot_build_max_concurrency
        && (c == 0 || c > 16)
    {
        return Err(invalid(
            "raft.snapshot_build_max_concurrency",
            "must be between 1 and 16",
        ));
    }
    if let Some(f) = &file.raft.wal.fsync
        && f != "never"
        && f != "always"
    {
        return Err(invalid(
            "raft.wal.fsync",
            format!("{f:?} is not never or always"),
        ));
    }
    if let Some(s) = file.raft.wal.segment_size
        && s.0 < 4096
    {
        return Err(invalid("raft.wal.segment_size", "must be at least 4KiB"));
    }
    if let (Some(min), Some(resume)) = (
        file.raft.wal.min_available_size,
        file.raft.wal.resume_available_size,
    ) && resume.0 <= min.0
        && min.0 != 0
    {
        return Err(invalid(
            "raft.wal.resume_available_size",
            "must exceed raft.wal.min_available_size",
        ));
    }
    if let Some(b) = &file.storage.cold.backend {
        if !["none", "memory", "s3", "fs"].contains(&b.as_str()) {
            return Err(invalid(
                "storage.cold.backend",
                format!("{b:?} is not none, memory, fs or s3"),
            ));
        }
        if b == "s3"
            && file
                .storage
                .cold
                .s3
                .as_ref()
                .and_then(|s| s.bucket.as_ref())
                .is_none()
        {
            return Err(invalid(
                "storage.cold.s3.bucket",
                "is required when storage.cold.backend = \"s3\"",
            ));
        }
    }
    if let Some(s3) = &file.storage.cold.s3 {
        if let Some(sse) = &s3.server_side_encryption
            && !["aes256", "aws-kms", "none"].contains(&sse.as_str())
        {
            return Err(invalid(
                "storage.cold.s3.server_side_encryption",
                format!("{sse:?} is not aes256, aws-kms or none"),
            ));
        }
        if s3.kms_key_id.is_some() && s3.server_side_encryption.as_deref() != Some("aws-kms") {
            return Err(invalid(
                "storage.cold.s3.kms_key_id",
                "is only valid with server_side_encryption = \"aws-kms\"",
            ));
        }
        for (key, v) in [
            ("storage.cold.s3.unhealthy_ticks", s3.unhealthy_ticks),
            ("storage.cold.s3.heal_ticks", s3.heal_ticks),
        ] {
            if v == Some(0) {
                return Err(invalid(key, "must be non-zero"));
            }
        }
    }
    if let Some(b) = &file.storage.snapshot.backend
        && !["auto", "inline", "s3"].contains(&b.as_str())
    {
        return Err(invalid(
            "storage.snapshot.backend",
            format!("{b:?} is not auto, inline or s3"),
        ));
    }
    if !file.raft.peers.is_empty() && file.raft.wal.path.is_none() {
        return Err(invalid(
            "raft.wal.path",
            "is required when raft.peers is set",
        ));
    }
    let node_id = o.node_id.or(file.raft.node_id).unwrap_or(1);
    let mut peers = std::collections::BTreeMap::new();
    for p in &file.raft.peers {
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
    if !peers.is_empty() && !peers.contains_key(&node_id) {
        return Err(invalid(
            "raft.node_id",
            format!("node {node_id} is not one of raft.peers"),
        ));
    }
    let engine = if raft {
        EngineChoice::Raft {
            wal_dir: file.raft.wal.path.clone(),
            fsync_always: file.raft.wal.fsync.as_deref() == Some("always"),
            segment_size: file.raft.wal.segment_size.map_or(64 << 20, |s| s.0),
            peers,
        }
    } else {
        EngineChoice::Memory
    };
    Ok(Config {
        listen,
        node_id,
        core_count,
        group_count,
        live_read_max_waiters_per_core: file
            .runtime
            .live_read_max_waiters_per_core
            .unwrap_or(65_536),
        engine,
        preset: preset_name.to_owned(),
        http_inflight_body_size: file
            .server
            .http_inflight_body_size
            .map_or(p.inflight_body, |s| s.0),
        wal_min_available: file.raft.wal.min_available_size.map_or(512 << 20, |s| s.0),
        wal_resume_available: file.raft.wal.resume_available_size.map_or(1 << 30, |s| s.0),
        max_uncommitted_per_group: file
            .raft
            .max_uncommitted_size_per_group
            .map_or(64 << 20, |s| s.0),
        snapshot_log_budget: file.raft.snapshot_log_budget.map_or(1 << 30, |s| s.0),
        snapshot_driver: snapshot_driver(file)?,
        cold: crate::coldtier::settings::resolve(&file.storage.cold),
    })
}

fn snapshot_driver(file: &FileConfig) -> Result<crate::raft::snapdrive::Settings, ConfigError> {
    let d = crate::raft::snapdrive::Settings::default();
    if file.raft.snapshot_pressure_max_groups_per_tick == Some(0) {
        return Err(invalid(
            "raft.snapshot_pressure_max_groups_per_tick",
            "must be at least 1",
        ));
    }
    if file.raft.snapshot_backstop_logs == Some(0) {
        return Err(invalid("raft.snapshot_backstop_logs", "must be at least 1"));
    }
    Ok(crate::raft::snapdrive::Settings {
        budget: file.raft.snapshot_log_budget.map_or(d.budget, |s| s.0),
        max_concurrency: file
            .raft
            .snapshot_build_max_concurrency
            .unwrap_or(d.max_concurrency),
        max_groups_per_tick: file
            .raft
            .snapshot_pressure_max_groups_per_tick
            .unwrap_or(d.max_groups_per_tick),
        interval: file
            .storage
            .snapshot
            .drive_interval
            .map_or(d.interval, |i| i.0),
        backstop_logs: file.raft.snapshot_backstop_logs.unwrap_or(d.backstop_logs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_text(text: &str) -> Result<Config, String> {
        let file = parse_file(text)?;
        resolve_with(&file, "default", &Overrides::default()).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_listen_on_4437() {
        let c = resolve_text("").expect("empty config is valid");
        assert_eq!(c.listen.to_string(), "127.0.0.1:4437");
        assert_eq!(c.group_count, 16 * c.core_count as u32);
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let err = resolve_text("[server]\nlisen = \"x\"\n").expect_err("typo must fail");
        assert!(err.contains("lisen"), "{err}");
        let err =
            resolve_text("[raft.wal]\nfsync = \"sometimes\"\n").expect_err("bad value must fail");
        assert!(err.contains("raft.wal.fsync"), "{err}");
        let err = resolve_text("[runtime]\ncore_count = 0\n").expect_err("zero cores");
        assert!(err.contains("runtime.core_count"), "{err}");
        let err =
            resolve_text("[storage.cold]\nflush_size = \"8 parsecs\"\n").expect_err("bad size");
        assert!(err.contains("flush_size"), "{err}");
    }

    #[test]
    fn documented_examples_parse() {
        let c = resolve_text(
            "[server]\nlisten = \"127.0.0.1:9000\"\n[raft]\nnode_id = 3\ngroup_count = 16\n",
        )
        .expect("valid");
        assert_eq!((c.listen.port(), c.node_id, c.group_count), (9000, 3, 16));
        assert!(parse_file("[storage.cold]\nbackend = \"s3\"\nroot = \"r\"\nflush_interval = \"200ms\"\n[storage.cold.s3]\nbucket = \"b\"\nregion = \"us-east-1\"\n").is_ok());
        assert_eq!(parse_size("64MiB"), Some(64 << 20));
        assert_eq!(
            parse_duration("5m"),
            Some(std::time::Duration::from_secs(300))
        );
        assert_eq!(parse_duration("0"), Some(std::time::Duration::ZERO));
    }
}
