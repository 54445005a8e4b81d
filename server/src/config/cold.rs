//! `[storage.cold]` and `[storage.cold.s3]`: checked, then resolved into what the cold tier
//! (`coldtier`) runs with.

use std::path::PathBuf;
use std::time::Duration;

use ursula_cold::BackendConfig;
use ursula_cold::ColdConfig;
use ursula_cold::S3Config;
use ursula_cold::Sse;

use super::error::ConfigError;
use super::error::invalid;
use super::file::ColdSection;

/// `runtime.external_payload_min_size`'s default (the spec's 1 MiB).
pub const EXTERNAL_PAYLOAD_MIN: u64 = 1 << 20;

/// The cold tier's settings, resolved.
#[derive(Debug, Clone)]
pub struct ColdSettings {
    pub store: ColdConfig,
    /// `flush_interval`: the worker's tick.
    pub flush_interval: Duration,
    /// `flush_min_hot_size` (else `flush_size`): a group flushes once its hot bytes reach it.
    pub flush_min_hot: u64,
    /// `flush_max_size` (else `flush_size`): bytes packed into one object.
    pub flush_max: u64,
    pub flush_max_concurrency: usize,
    /// `max_hot_size_per_group`; 0 turns the cap off.
    pub max_hot_per_group: u64,
    /// `flush_max_hot_age`; zero turns age flushes off.
    pub flush_max_hot_age: Duration,
    /// `gc_grace` (ours): how long a released object stays before deletion; 5 minutes, the
    /// spec's grace, unless set.
    pub gc_grace: Duration,
    /// The store's health gate, on S3 only: `storage.cold.s3.probe_timeout`, `unhealthy_ticks`,
    /// `heal_ticks`, and how long a failed write weighs.
    pub gate: Option<StoreGate>,
    /// `cache_size` (ours; the presets' cold cache): bytes of cold ranges kept in memory, 0 off.
    pub cache_size: u64,
    /// `orphan_min_age` (ours): how old an unreferenced object must be for the orphan sweep to
    /// delete it; a day unless set.
    pub orphan_min_age: Duration,
    /// `orphan_sweep_interval` (ours): the sweep's period; an hour unless set.
    pub orphan_sweep_interval: Duration,
    /// `testing.cold_abort_after_upload`, a test hook: the flush aborts the process between
    /// its upload and its commit.
    pub abort_after_upload: bool,
    /// `compaction_enabled` (the spec's default `true`): background compaction of packed
    /// slices and small chunks. Off, packed slices stay in replicated state.
    pub compaction: bool,
    /// `testing.cold_index_page_bytes` (a test hook; the spec's 64 MiB otherwise): the offset
    /// span of one cold-index page of a stream indexed from now on.
    pub index_page_bytes: u64,
    /// With S3 snapshots under the cold root: their namespace's keys, relative to the root and
    /// ending in `/`. The orphan sweep never judges them; the snapshot pruning does.
    pub snapshot_prefix: Option<String>,
    /// `runtime.external_payload_min_size` (the spec's 1 MiB by default): an append body or a
    /// snapshot body at least this large is staged as an object before it is proposed.
    pub external_min: u64,
}

/// The snapshot-store health gate's settings (Configuration, "Cold storage").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreGate {
    /// `storage.cold.s3.probe_timeout`: the probe's deadline, its one retry included.
    pub probe_timeout: Duration,
    /// `storage.cold.s3.unhealthy_ticks`: bad ticks, with no good one between them, to shed.
    pub unhealthy_ticks: u32,
    /// `storage.cold.s3.heal_ticks`: good ticks in a row for a shed node to lead again.
    pub heal_ticks: u32,
    /// The flush window: how long a failed cold-flush write makes a tick bad while no write
    /// has succeeded since (the S3 client's longest give-up plus the flush worker's pause).
    pub write_window: Duration,
}

/// The spec's grace before a released cold object is deleted.
const GC_GRACE: Duration = Duration::from_secs(300);

/// The spec's age past which an unreferenced object is an orphan: a day.
const ORPHAN_MIN_AGE: Duration = Duration::from_secs(24 * 3600);

/// How often the orphan sweep lists the store unless `orphan_sweep_interval` says otherwise.
const ORPHAN_SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// Refuses a `[storage.cold]` the cold tier could not run with, naming the key.
pub(super) fn check(c: &ColdSection) -> Result<(), ConfigError> {
    if let Some(b) = &c.backend {
        if !["none", "memory", "s3", "fs"].contains(&b.as_str()) {
            return Err(invalid(
                "storage.cold.backend",
                format!("{b:?} is not none, memory, fs or s3"),
            ));
        }
        if b == "s3" && c.s3.as_ref().and_then(|s| s.bucket.as_ref()).is_none() {
            return Err(invalid(
                "storage.cold.s3.bucket",
                "is required when storage.cold.backend = \"s3\"",
            ));
        }
    }
    if let Some(s3) = &c.s3 {
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
        // The spec (0.7.3) refuses zero for the health gate's settings, even where a build
        // has no health gate, so a config that loads here loads on one that has.
        let zero_probe = s3.probe_timeout.is_some_and(|d| d.0.is_zero());
        for (key, zero) in [
            ("storage.cold.s3.probe_timeout", zero_probe),
            (
                "storage.cold.s3.unhealthy_ticks",
                s3.unhealthy_ticks == Some(0),
            ),
            ("storage.cold.s3.heal_ticks", s3.heal_ticks == Some(0)),
        ] {
            if zero {
                return Err(invalid(key, "must be non-zero"));
            }
        }
    }
    if c.gc_grace.is_some_and(|d| d.0.is_zero()) {
        // A read that resolved the object just before its release still fetches it.
        return Err(invalid("storage.cold.gc_grace", "must be non-zero"));
    }
    // An upload is committed within seconds; an age under a second would race commits.
    if c.orphan_min_age
        .is_some_and(|d| d.0 < Duration::from_secs(1))
    {
        return Err(invalid(
            "storage.cold.orphan_min_age",
            "must be at least 1s",
        ));
    }
    if c.orphan_sweep_interval.is_some_and(|d| d.0.is_zero()) {
        return Err(invalid(
            "storage.cold.orphan_sweep_interval",
            "must be non-zero",
        ));
    }
    Ok(())
}

/// What a preset sets of the cold tier, under the config file's own keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PresetDefaults {
    pub flush_size: u64,
    pub flush_max_concurrency: u32,
    pub max_hot_per_group: u64,
    /// The preset table's cold cache (`cache_size`).
    pub cache_size: u64,
}

impl Default for PresetDefaults {
    /// The keys' own defaults (the Configuration page's tables): `standard`'s figures.
    fn default() -> PresetDefaults {
        PresetDefaults {
            flush_size: 8 << 20,
            flush_max_concurrency: 4,
            max_hot_per_group: 64 << 20,
            cache_size: 256 << 20,
        }
    }
}

/// The S3 client `[storage.cold.s3]` describes: the cold tier's, or the snapshot namespace's
/// when only Raft snapshots use S3. Call after [`check`].
pub(super) fn s3_backend(c: &ColdSection) -> BackendConfig {
    let s3 = c.s3.clone().unwrap_or_default();
    let sse = match s3.server_side_encryption.as_deref() {
        Some("none") => Sse::None,
        Some("aws-kms") => Sse::AwsKms {
            key_id: s3.kms_key_id.clone(),
        },
        _ => Sse::Aes256,
    };
    BackendConfig::S3(S3Config {
        bucket: s3.bucket.clone().unwrap_or_default(),
        region: s3.region.clone(),
        endpoint: s3.endpoint.clone(),
        access_key_id: s3.access_key_id.clone(),
        secret_access_key: s3.secret_access_key.clone(),
        session_token: s3.session_token.clone(),
        sse,
        timeout: s3.timeout.map(|d| d.0),
        max_retries: s3.max_retries,
    })
}

/// The store health gate's settings for a store on `backend` (none off S3). `pause`: how long
/// the flush worker waits between passes, which a failed write's window includes.
pub(super) fn gate(c: &ColdSection, backend: &BackendConfig, pause: Duration) -> Option<StoreGate> {
    backend.write_give_up_after().map(|give_up| {
        let s3 = c.s3.clone().unwrap_or_default();
        StoreGate {
            probe_timeout: s3.probe_timeout.map_or(Duration::from_secs(5), |d| d.0),
            unhealthy_ticks: s3.unhealthy_ticks.unwrap_or(3),
            heal_ticks: s3.heal_ticks.unwrap_or(2),
            write_window: give_up.saturating_add(pause),
        }
    })
}

/// `None` when `storage.cold.backend` is `none` or absent.
pub fn resolve(
    c: &ColdSection,
    preset: &PresetDefaults,
) -> Result<Option<ColdSettings>, ConfigError> {
    check(c)?;
    let root = c.root.clone().unwrap_or_default();
    let (backend, root) = match c.backend.as_deref() {
        None | Some("none") => return Ok(None),
        Some("memory") => (BackendConfig::Memory, root),
        // The development backend keeps objects in the directory `root` names.
        Some("fs") => (
            BackendConfig::Fs {
                dir: PathBuf::from(if root.is_empty() {
                    "ursula-cold"
                } else {
                    &root
                }),
            },
            String::new(),
        ),
        Some(_) => (s3_backend(c), root),
    };
    let flush_size = c.flush_size.map_or(preset.flush_size, |s| s.0);
    let flush_interval = c
        .flush_interval
        .map_or(Duration::from_secs(1), |d| d.0)
        .max(Duration::from_millis(10));
    let gate = gate(c, &backend, flush_interval);
    Ok(Some(ColdSettings {
        store: ColdConfig {
            backend,
            root: root.trim_matches('/').to_owned(),
        },
        flush_interval,
        flush_min_hot: c.flush_min_hot_size.map_or(flush_size, |s| s.0).max(1),
        flush_max: c.flush_max_size.map_or(flush_size, |s| s.0).max(1),
        flush_max_concurrency: c
            .flush_max_concurrency
            .unwrap_or(preset.flush_max_concurrency)
            .max(1) as usize,
        max_hot_per_group: c
            .max_hot_size_per_group
            .map_or(preset.max_hot_per_group, |s| s.0),
        flush_max_hot_age: c
            .flush_max_hot_age
            .map_or(Duration::from_secs(300), |d| d.0),
        gc_grace: c.gc_grace.map_or(GC_GRACE, |d| d.0),
        gate,
        cache_size: c.cache_size.map_or(preset.cache_size, |s| s.0),
        orphan_min_age: c.orphan_min_age.map_or(ORPHAN_MIN_AGE, |d| d.0),
        orphan_sweep_interval: c
            .orphan_sweep_interval
            .map_or(ORPHAN_SWEEP_INTERVAL, |d| d.0),
        abort_after_upload: false,
        compaction: c.compaction_enabled.unwrap_or(true),
        index_page_bytes: ursula_state::stream::page::PAGE_BYTES,
        snapshot_prefix: None,
        external_min: EXTERNAL_PAYLOAD_MIN,
    }))
}
