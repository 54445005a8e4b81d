//! Configuration: built-in defaults < preset < TOML file < CLI flags. Unknown keys, keys the
//! spec removed and bad values stop the server at start with a message naming the key; keys
//! this build does not act on load and are listed in [`Config::ignored_keys`]. Every key and
//! rule is in `docs/configuration.md`.
//!
//! A leaf: it imports no subsystem of the server. What a subsystem runs with, resolved from the
//! file, is a plain type here ([`ColdSettings`], [`SnapshotDriver`]), which the subsystem uses.
//!
//! - [`file`]: the TOML schema.
//! - [`units`]: sizes and durations.
//! - [`cold`]: `[storage.cold]` checked and resolved.
//! - [`raft`]: `[raft]` checked; node id, peers and the snapshot driver's settings.
//! - [`ignored`]: the keys this build parses but does not act on.
//! - [`secret`]: the cluster's peer secret.
//! - [`error`]: why a config does not load, naming the key.

pub mod cold;
pub mod error;
pub mod file;
pub mod ignored;
pub mod raft;
pub mod secret;
#[cfg(test)]
mod tests;
pub mod units;

use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use error::invalid;

pub use cold::ColdSettings;
pub use error::ConfigError;
pub use file::FileConfig;
pub use file::FileError;
pub use file::parse_file;
pub use raft::SnapshotDriver;
pub use raft::SnapshotStore;
pub use secret::PeerSecret;
pub use units::Dur;
pub use units::Size;
pub use units::parse_duration;
pub use units::parse_size;

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
        /// `raft.wal.cache_size`: recent entries' journal bytes held in memory, node-wide.
        cache_size: u64,
        /// node id -> URL, this node included; empty for a single node.
        peers: std::collections::BTreeMap<u64, String>,
        /// The secret every peer RPC carries (`raft.peer_secret_file` or
        /// `URSULA_PEER_SECRET`); `None` leaves the peer routes unauthenticated.
        peer_secret: Option<PeerSecret>,
    },
}

/// The resolved configuration the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// `server.admin_listen` (`--admin-listen`): the admin plane's listener, loopback
    /// `127.0.0.1:4438` unless set; `None` when set to `"off"`.
    pub admin_listen: Option<SocketAddr>,
    /// `server.cluster_listen`: a separate listener for Raft and cluster routes; without it
    /// `listen` serves them.
    pub cluster_listen: Option<SocketAddr>,
    /// `server.admin_hosts` (ours): the host names, lowercase, the admin plane answers besides
    /// `localhost` and IP literals; a request naming another is refused (DNS rebinding).
    pub admin_hosts: Vec<String>,
    pub node_id: u64,
    pub core_count: usize,
    /// `runtime.cpu_affinity`: `Some(true)` pins the core threads, `Some(false)` never does,
    /// `None` pins them only when the allowed cpuset has exactly `core_count` CPUs.
    pub cpu_affinity: Option<bool>,
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
    pub snapshot_driver: SnapshotDriver,
    /// `storage.snapshot.backend` resolved: `Some` when Raft snapshots live on S3.
    pub snapshot_store: Option<SnapshotStore>,
    /// `[storage.cold]`; `None` without a cold backend.
    pub cold: Option<ColdSettings>,
    /// `server.shutdown_deadline` (ours): a shutdown not done this long after the first signal
    /// exits without recording a clean run. 20 s, the Operations page's deadline, unless set.
    pub shutdown_deadline: Duration,
    /// `server.request_head_timeout` (ours): a connection that has not sent a whole request
    /// head this long after it opened or after its last answer is closed.
    pub request_head_timeout: Duration,
    /// `server.max_connections` (ours): connections each listener serves at once.
    pub max_connections: usize,
    /// `testing.shutdown_stall`, a test hook: a Raft node's shutdown stalls this long before
    /// it syncs its journals.
    pub shutdown_stall: Option<Duration>,
    /// `testing.apply_panic_on`, a test hook: a committed append whose body holds these bytes
    /// panics while it applies (Raft nodes only).
    pub apply_panic_on: Option<Vec<u8>>,
    /// `testing.producer_forget_after`, a test hook: producers idle this long are forgotten
    /// instead of after 7 days.
    pub producer_forget_after: Option<Duration>,
    /// `runtime.node_memory_abort_cap_size`: the resident memory past which the process aborts.
    pub node_memory_abort_cap: Option<u64>,
    /// The dotted names of the keys the file sets that this build does not act on, sorted:
    /// named in a warning at start and in the metrics, so nobody is misled.
    pub ignored_keys: Vec<String>,
    /// `[governance.leadership_balance]`: the fair-share leadership balancer of a cluster node.
    pub leadership_balance: LeadershipBalance,
}

impl Config {
    /// The listener (its key and address) that serves a cluster node's peer routes to other
    /// hosts without a peer secret: `None` for a single node, with a secret, or on loopback.
    pub fn unauthenticated_peer_listener(&self) -> Option<(&'static str, SocketAddr)> {
        let EngineChoice::Raft {
            peers, peer_secret, ..
        } = &self.engine
        else {
            return None;
        };
        let (key, addr) = match self.cluster_listen {
            Some(a) => ("server.cluster_listen", a),
            None => ("server.listen", self.listen),
        };
        (!peers.is_empty() && peer_secret.is_none() && !addr.ip().is_loopback())
            .then_some((key, addr))
    }
}

/// The Operations page's deadline for a graceful shutdown, from the first signal.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(20);

/// `raft.wal.cache_size`'s default: the journal bytes of recent Raft entries a node holds in
/// memory, split evenly between its groups.
pub const DEFAULT_WAL_CACHE: u64 = 256 << 20;

/// What the command line supplies.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub preset: Option<String>,
    pub node_id: Option<u64>,
    pub listen: Option<String>,
    /// `--admin-listen ADDR|off`.
    pub admin_listen: Option<String>,
    /// `URSULA_PEER_SECRET`, read by `main`.
    pub peer_secret: Option<String>,
}

/// `server.admin_listen`'s default: the admin plane on loopback only.
pub const ADMIN_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    4438,
));

/// The value of `server.admin_listen` (and `--admin-listen`) that turns the admin plane off.
pub const OFF: &str = "off";

struct PresetDefaults {
    groups_per_core: Option<u32>,
    group_count: Option<u32>,
    /// `server.http_inflight_body_size`.
    inflight_body: u64,
    /// `storage.cold.flush_size`, `flush_max_concurrency` and `max_hot_size_per_group`.
    cold: cold::PresetDefaults,
    /// `raft.max_uncommitted_size_per_group`: the preset table's admission cap, the same
    /// figure as its hot cap.
    max_uncommitted: u64,
}

fn preset(name: &str) -> Result<PresetDefaults, ConfigError> {
    // The Configuration page's preset table: groups, cold flush size, cold writes in flight,
    // the hot and admission caps (one figure for both), the HTTP in-flight body budget, and its
    // cold cache (`storage.cold.cache_size`, a key of ours: docs/configuration.md).
    let fixed =
        |groups, flush_mib: u64, writes, cap_mib: u64, inflight_mib: u64, cache_mib: u64| {
            PresetDefaults {
                groups_per_core: None,
                group_count: Some(groups),
                inflight_body: inflight_mib << 20,
                cold: cold::PresetDefaults {
                    flush_size: flush_mib << 20,
                    flush_max_concurrency: writes,
                    max_hot_per_group: cap_mib << 20,
                    cache_size: cache_mib << 20,
                },
                max_uncommitted: cap_mib << 20,
            }
        };
    Ok(match name {
        // The in-memory node: the keys' own defaults, which are `standard`'s.
        "default" | "dev" => PresetDefaults {
            groups_per_core: Some(16),
            group_count: None,
            inflight_body: 256 << 20,
            cold: cold::PresetDefaults::default(),
            max_uncommitted: 64 << 20,
        },
        "tiny" => fixed(64, 4, 2, 8, 64, 64),
        "small" => fixed(128, 4, 2, 16, 64, 64),
        "standard" => fixed(256, 8, 4, 64, 256, 256),
        "large" => fixed(512, 16, 8, 128, 512, 512),
        other => return Err(ConfigError::Preset(other.to_owned())),
    })
}

pub fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_file(&text).map_err(|source| ConfigError::File {
        path: path.to_owned(),
        source,
    })
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

/// Whether the Raft engine runs: the Configuration page's rule, decided here only. Without a
/// `--preset`, a config file means Raft (over a temporary WAL when `raft.wal.path` is unset) and
/// no file means the in-memory node; `--preset default` or `dev` always means the in-memory node,
/// and any other preset Raft.
pub fn runs_raft(file_found: bool, preset: Option<&str>) -> bool {
    match preset {
        None => file_found,
        Some(p) => !matches!(p, "default" | "dev"),
    }
}

/// The configuration of `ursula server`: the config file the flags or the standard places name,
/// resolved with the flags.
pub fn resolve(o: &Overrides) -> Result<Config, ConfigError> {
    let file = match find_config(o.config.as_deref()) {
        Some(p) => Some(load_file(&p)?),
        None => None,
    };
    resolve_from(file.as_ref(), o)
}

/// Resolves a parsed config file (`None`: no file was found) with the flags, without looking
/// for files. The engine follows [`runs_raft`].
pub fn resolve_from(file: Option<&FileConfig>, o: &Overrides) -> Result<Config, ConfigError> {
    let preset_name = o.preset.as_deref().unwrap_or("default");
    let raft = runs_raft(file.is_some(), o.preset.as_deref());
    let empty = FileConfig::default();
    resolve_engine(file.unwrap_or(&empty), preset_name, o, raft)
}

fn resolve_engine(
    file: &FileConfig,
    preset_name: &str,
    o: &Overrides,
    raft: bool,
) -> Result<Config, ConfigError> {
    let p = preset(preset_name)?;
    let (listen, admin_listen, cluster_listen) = listeners(file, o)?;
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
    raft::check(file)?;
    let node_id = o.node_id.or(file.raft.node_id);
    let (node_id, peers) = raft::node_and_peers(node_id, &file.raft.peers)?;
    if !raft && !peers.is_empty() {
        // A node told it is a voter must not serve alone from memory.
        return Err(invalid(
            "raft.peers",
            format!("needs the Raft engine, but --preset {preset_name} runs the in-memory node"),
        ));
    }
    check_governance(&file.governance)?;
    let snapshot_store = raft::snapshot_store(file, raft)?;
    let external_min = match file.runtime.external_payload_min_size {
        None => cold::EXTERNAL_PAYLOAD_MIN,
        Some(s) if s.0 > 0 => s.0,
        Some(_) => {
            return Err(ConfigError::Invalid {
                key: "runtime.external_payload_min_size",
                message: "must be at least 1 byte".into(),
            });
        }
    };
    let engine = if raft {
        EngineChoice::Raft {
            wal_dir: file.raft.wal.path.clone(),
            fsync_always: file.raft.wal.fsync.as_deref() == Some("always"),
            segment_size: file.raft.wal.segment_size.map_or(64 << 20, |s| s.0),
            cache_size: file.raft.wal.cache_size.map_or(DEFAULT_WAL_CACHE, |s| s.0),
            peers,
            peer_secret: secret::resolve(
                file.raft.peer_secret_file.as_deref(),
                o.peer_secret.as_deref(),
            )?,
        }
    } else {
        EngineChoice::Memory
    };
    Ok(Config {
        listen,
        admin_listen,
        cluster_listen,
        admin_hosts: admin_hosts(file)?,
        node_id,
        core_count,
        cpu_affinity: file.runtime.cpu_affinity,
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
            .map_or(p.max_uncommitted, |s| s.0),
        snapshot_log_budget: file.raft.snapshot_log_budget.map_or(1 << 30, |s| s.0),
        snapshot_driver: raft::snapshot_driver(file),
        snapshot_store: snapshot_store.clone(),
        cold: cold::resolve(&file.storage.cold, &p.cold)?.map(|c| ColdSettings {
            abort_after_upload: file.testing.cold_abort_after_upload.unwrap_or(false),
            index_page_bytes: file
                .testing
                .cold_index_page_bytes
                .map_or(c.index_page_bytes, |s| s.0.max(1)),
            snapshot_prefix: snapshot_store
                .as_ref()
                .filter(|s| s.inside_cold_root)
                .map(|s| {
                    let root = c.store.root.trim_matches('/');
                    let rel = s.namespace.strip_prefix(root).unwrap_or(&s.namespace);
                    format!("{}/", rel.trim_matches('/'))
                }),
            external_min,
            ..c
        }),
        shutdown_deadline: shutdown_deadline(file)?,
        request_head_timeout: request_head_timeout(file)?,
        max_connections: max_connections(file)?,
        // Only the Raft engine's shutdown has journals to stall before.
        shutdown_stall: file.testing.shutdown_stall.filter(|_| raft).map(|d| d.0),
        apply_panic_on: file
            .testing
            .apply_panic_on
            .clone()
            .filter(|m| raft && !m.is_empty())
            .map(String::into_bytes),
        producer_forget_after: match file.testing.producer_forget_after {
            Some(d) if d.0.is_zero() => {
                return Err(invalid(
                    "testing.producer_forget_after",
                    "must be more than 0 (leave it unset for 7 days)",
                ));
            }
            d => d.map(|d| d.0),
        },
        node_memory_abort_cap: match file.runtime.node_memory_abort_cap_size {
            Some(s) if s.0 == 0 => {
                return Err(invalid(
                    "runtime.node_memory_abort_cap_size",
                    "must be more than 0 (leave it unset for no cap)",
                ));
            }
            s => s.map(|s| s.0),
        },
        ignored_keys: ignored::ignored_keys(file, raft),
        leadership_balance: leadership_balance(file)?,
    })
}

/// Parses a listener address, naming `key` when it is not one.
fn address(key: &'static str, raw: &str, example: &str) -> Result<SocketAddr, ConfigError> {
    raw.parse()
        .map_err(|_| invalid(key, format!("{raw:?} is not an address like {example}")))
}

type Listeners = (SocketAddr, Option<SocketAddr>, Option<SocketAddr>);

/// `server.listen`, `server.admin_listen` and `server.cluster_listen`, flags first. Two planes
/// on one fixed address would fail at bind; here the message names the keys.
/// `server.admin_hosts`: names as a `Host` header carries them, without a port.
fn admin_hosts(file: &FileConfig) -> Result<Vec<String>, ConfigError> {
    let names = file.server.admin_hosts.clone().unwrap_or_default();
    for n in &names {
        let ok = !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        if !ok {
            return Err(invalid(
                "server.admin_hosts",
                format!("{n:?} is not a host name (letters, digits, dots and dashes, no port)"),
            ));
        }
    }
    Ok(names.iter().map(|n| n.to_ascii_lowercase()).collect())
}

fn listeners(file: &FileConfig, o: &Overrides) -> Result<Listeners, ConfigError> {
    let server = &file.server;
    let raw = o.listen.as_deref().or(server.listen.as_deref());
    let listen = address(
        "server.listen",
        raw.unwrap_or("127.0.0.1:4437"),
        "127.0.0.1:4437",
    )?;
    let admin = match o.admin_listen.as_deref().or(server.admin_listen.as_deref()) {
        None => Some(ADMIN_LISTEN),
        Some(OFF) => None,
        Some(raw) => Some(address(
            "server.admin_listen",
            raw,
            "127.0.0.1:4438 (or \"off\")",
        )?),
    };
    let cluster = match server.cluster_listen.as_deref() {
        None => None,
        Some(raw) => Some(address("server.cluster_listen", raw, "0.0.0.0:4439")?),
    };
    for (key, other, a, b) in [
        ("server.admin_listen", "server.listen", admin, Some(listen)),
        (
            "server.cluster_listen",
            "server.listen",
            cluster,
            Some(listen),
        ),
        (
            "server.cluster_listen",
            "server.admin_listen",
            cluster,
            admin,
        ),
    ] {
        if let (Some(a), Some(b)) = (a, b)
            && overlaps(a, b)
        {
            return Err(invalid(
                key,
                format!("{a} takes the port of {other} ({b}); each listener needs its own"),
            ));
        }
    }
    Ok((listen, admin, cluster))
}

/// Whether two listeners would fight for one port: the same fixed port on the same address, or
/// on any address when either is a wildcard. Port 0 asks for a free port and never collides.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.port() != 0
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

fn shutdown_deadline(file: &FileConfig) -> Result<Duration, ConfigError> {
    match file.server.shutdown_deadline {
        // A zero deadline would exit on the signal itself, never recording a clean run.
        Some(d) if d.0.is_zero() => Err(invalid("server.shutdown_deadline", "must be non-zero")),
        Some(d) => Ok(d.0),
        None => Ok(SHUTDOWN_DEADLINE),
    }
}

/// `server.request_head_timeout`'s default. Longer than the idle time of the clients we ship
/// keep connections for (the extension: 90 s, `URSULA_VFS_IDLE_MS`; the gateway: 30 s), since
/// it also closes a kept-alive connection that sent nothing: a shorter one would close
/// connections those clients are about to reuse.
pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(120);

/// `server.max_connections`' default.
pub const MAX_CONNECTIONS: usize = 16_384;

fn request_head_timeout(file: &FileConfig) -> Result<Duration, ConfigError> {
    match file.server.request_head_timeout {
        // Zero would close every connection before it could send anything.
        Some(d) if d.0.is_zero() => Err(invalid("server.request_head_timeout", "must be non-zero")),
        Some(d) => Ok(d.0),
        None => Ok(REQUEST_HEAD_TIMEOUT),
    }
}

fn max_connections(file: &FileConfig) -> Result<usize, ConfigError> {
    match file.server.max_connections {
        Some(0) => Err(invalid("server.max_connections", "must be at least 1")),
        Some(n) => Ok(n as usize),
        None => Ok(MAX_CONNECTIONS),
    }
}

/// `[governance]`: the gates are not acted on yet, but a value the spec forbids still fails,
/// so a config that loads here loads on a build that acts on it.
fn check_governance(g: &file::GovernanceSection) -> Result<(), ConfigError> {
    if let Some(l) = &g.leadership_balance
        && l.peer_timeout.is_some_and(|d| d.0.is_zero())
    {
        return Err(invalid(
            "governance.leadership_balance.peer_timeout",
            "must be non-zero",
        ));
    }
    Ok(())
}

/// The leadership balancer's settings (docs/operations.md, "The leadership balancer").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeadershipBalance {
    /// `max_per_tick`: leaderships this node hands away per tick at most; 0 turns it off.
    pub max_per_tick: u32,
    /// `peer_timeout`: how long a peer's answer on whether it may campaign is waited for.
    pub peer_timeout: Duration,
    /// The tick: 2 seconds unless `testing.leadership_balance_interval` says otherwise.
    pub interval: Duration,
}

/// `max_per_tick`'s default, where the spec names none: two handoffs a tick, so 64 groups
/// that landed on one of three voters even out within a minute (docs/operations.md).
pub const BALANCE_MAX_PER_TICK: u32 = 2;

fn leadership_balance(file: &FileConfig) -> Result<LeadershipBalance, ConfigError> {
    let l = file
        .governance
        .leadership_balance
        .clone()
        .unwrap_or_default();
    let interval = match file.testing.leadership_balance_interval {
        Some(d) if d.0.is_zero() => {
            return Err(invalid(
                "testing.leadership_balance_interval",
                "must be more than 0",
            ));
        }
        Some(d) => d.0,
        None => Duration::from_secs(2),
    };
    Ok(LeadershipBalance {
        max_per_tick: l.max_per_tick.unwrap_or(BALANCE_MAX_PER_TICK),
        peer_timeout: l.peer_timeout.map_or(Duration::from_millis(500), |d| d.0),
        interval,
    })
}
