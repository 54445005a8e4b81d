//! Environment variables, read once per process and logged as `setting_adjusted` when a value
//! is out of range or not a number.

use std::sync::OnceLock;

use crate::log;

pub const DEFAULT_RETRY_MS: u64 = 30_000;
pub const DEFAULT_IDLE_MS: u64 = 90_000;
pub const DEFAULT_MAX_FRAME_BYTES: u64 = 32 * 1024 * 1024;
pub const MIN_MAX_FRAME_BYTES: u64 = 64 * 1024;
pub const DEFAULT_SNAPSHOT_MIN_BYTES: u64 = 8 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Settings {
    /// `URSULA_VFS_RETRY_MS`: how long a commit or read keeps trying.
    pub retry_ms: u64,
    /// `URSULA_VFS_IDLE_MS`: how long an idle connection is kept; 0 turns reuse off.
    pub idle_ms: u64,
    /// `URSULA_VFS_MAX_FRAME_BYTES`: the largest compressed commit frame sent.
    pub max_frame_bytes: u64,
    /// `URSULA_VFS_SNAPSHOT_MIN_BYTES`: the smallest log between snapshots.
    pub snapshot_min_bytes: u64,
    /// `URSULA_VFS_TOKEN_FILE`.
    pub token_file: Option<String>,
    /// `URSULA_VFS_CA_FILE`.
    pub ca_file: Option<String>,
}

fn adjusted(name: &str, raw: &str, used: u64) {
    log::event(
        log::Level::Warn,
        "setting_adjusted",
        &[
            ("setting", name),
            ("value", raw),
            ("used", &used.to_string()),
        ],
    );
}

/// A non-negative integer setting: a non-number is ignored (default used), a value outside
/// `[min, max]` is taken to the nearer bound; both are logged.
fn number(name: &str, default: u64, min: u64, max: u64) -> u64 {
    let Ok(raw) = std::env::var(name) else {
        return default;
    };
    match raw.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => n,
        Ok(n) => {
            let used = n.clamp(min, max);
            adjusted(name, &raw, used);
            used
        }
        Err(_) => {
            adjusted(name, &raw, default);
            default
        }
    }
}

fn non_empty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Settings {
    pub fn from_env() -> Settings {
        Settings {
            retry_ms: number("URSULA_VFS_RETRY_MS", DEFAULT_RETRY_MS, 0, 24 * 3_600_000),
            idle_ms: number("URSULA_VFS_IDLE_MS", DEFAULT_IDLE_MS, 0, 24 * 3_600_000),
            max_frame_bytes: number(
                "URSULA_VFS_MAX_FRAME_BYTES",
                DEFAULT_MAX_FRAME_BYTES,
                MIN_MAX_FRAME_BYTES,
                DEFAULT_MAX_FRAME_BYTES,
            ),
            snapshot_min_bytes: number(
                "URSULA_VFS_SNAPSHOT_MIN_BYTES",
                DEFAULT_SNAPSHOT_MIN_BYTES,
                0,
                u64::MAX,
            ),
            token_file: non_empty("URSULA_VFS_TOKEN_FILE"),
            ca_file: non_empty("URSULA_VFS_CA_FILE"),
        }
    }
}

/// The process's settings, read from the environment the first time they are needed.
pub fn get() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(Settings::from_env)
}
