//! The SQLite client of a run: `chaos-sqlite` (a binary of ursula-vfs-tests, which hosts the
//! extension in a bundled SQLite) owns a database replicated to a stream through the gateway
//! and follows it live, until the run tells it to stop; then it rebuilds the database from the
//! stream and checks owner, follower and rebuild against each other and against what its
//! commits were told. Its anomalies join the run's.

use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use thiserror::Error;

use crate::cluster;

/// The stream the SQLite database replicates to.
pub const PATH: &str = "/chaos/db";

/// A running `chaos-sqlite`.
pub struct Client {
    child: Child,
    dir: PathBuf,
}

/// What it found.
pub struct Outcome {
    pub anomalies: Vec<String>,
    pub report: serde_json::Value,
}

#[derive(Debug, Error)]
pub enum SqliteError {
    #[error("chaos-sqlite: {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("chaos-sqlite did not finish within 180 s of the stop")]
    Stuck,
    #[error("chaos-sqlite ended ({0}) without a report; see sqlite.log")]
    NoReport(String),
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> SqliteError + '_ {
    move |source| SqliteError::Io {
        what: what.to_owned(),
        source,
    }
}

impl Client {
    pub fn start(bin: &Path, run_dir: &Path) -> Result<Client, SqliteError> {
        let dir = run_dir.join("sqlite");
        std::fs::create_dir_all(&dir).map_err(io("sqlite dir"))?;
        let log = std::fs::File::create(run_dir.join("sqlite.log")).map_err(io("sqlite log"))?;
        let child = Command::new(bin)
            .arg(format!("{}{PATH}", cluster::gateway_base()))
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io("spawn chaos-sqlite"))?;
        Ok(Client { child, dir })
    }

    /// Tells it to stop and waits for its checks (at most three minutes).
    pub fn finish(mut self) -> Result<Outcome, SqliteError> {
        std::fs::write(self.dir.join("stop"), b"").map_err(io("sqlite stop file"))?;
        let deadline = Instant::now() + Duration::from_secs(180);
        let status = loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(SqliteError::Stuck);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let report: serde_json::Value = std::fs::read(self.dir.join("sqlite.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| SqliteError::NoReport(status.to_string()))?;
        let anomalies = report["anomalies"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Outcome { anomalies, report })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
