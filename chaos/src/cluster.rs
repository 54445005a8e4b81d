//! The processes of one run: `ursula server` nodes, each inside its host's namespace, and the
//! gateway in the clients' namespace. Runs inside the clients' namespace (`ip netns exec` both
//! enters a node's namespace and execs the binary, so the child is the node itself and signals
//! reach it). Every process is killed when the cluster drops.

use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use thiserror::Error;

use crate::net;

/// Every node's client port; each node has an address of its own.
pub const PORT: u16 = 4437;
/// Every node's admin port.
pub const ADMIN_PORT: u16 = 4438;
/// The gateway's port on the clients' loopback.
pub const GATEWAY_PORT: u16 = 4500;
/// The size of a node's WAL disk when the schedule fills it.
pub const SMALL_DISK_MIB: u64 = 96;

#[derive(Debug, Error)]
pub enum ClusterError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Net(#[from] net::NetError),
    #[error("{0} did not answer within {1:?}")]
    NotUp(String, Duration),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let what = what.into();
    move |source| ClusterError::Io { what, source }
}

/// How the cluster is made.
#[derive(Clone, Debug)]
pub struct Shape {
    pub nodes: usize,
    /// `raft.wal.fsync`: `always` or `never`.
    pub fsync: String,
    /// Whether each WAL sits on a small tmpfs of its own (for the full-disk fault).
    pub small_disks: bool,
    /// The S3 store of the cold tier and snapshots (for the S3-outage fault), on the clients'
    /// host; none keeps everything in the WAL.
    pub s3: Option<S3>,
}

/// Where the nodes reach S3.
#[derive(Clone, Debug)]
pub struct S3 {
    pub endpoint: String,
    pub port: u16,
}

/// A node's cold tier and snapshots on the run's SeaweedFS, with timeouts short enough that
/// an outage is judged within seconds and a healed one as quickly (docs/reliability.md).
fn s3_toml(endpoint: &str) -> String {
    use ursula_cold::testing::ACCESS_KEY_ID;
    use ursula_cold::testing::BUCKET;
    use ursula_cold::testing::SECRET_ACCESS_KEY;
    format!(
        "[storage.cold]\nbackend = \"s3\"\nroot = \"chaos\"\nflush_size = \"4KiB\"\n\
         flush_interval = \"500ms\"\n\
         [storage.cold.s3]\nbucket = \"{BUCKET}\"\nendpoint = \"{endpoint}\"\nregion = \"us-east-1\"\n\
         access_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key = \"{SECRET_ACCESS_KEY}\"\n\
         timeout = \"2s\"\nmax_retries = 0\nprobe_timeout = \"1s\"\n\
         [storage.snapshot]\ndrive_interval = \"1s\"\n"
    )
}

/// One node process.
pub struct Node {
    pub id: usize,
    child: Option<Child>,
    args: Vec<String>,
    log: PathBuf,
    pub paused: bool,
    /// The directory on the node's disk (the tmpfs when disks are small).
    pub disk: PathBuf,
}

impl Node {
    pub fn base(&self) -> String {
        format!("http://{}:{PORT}", net::node_addr(self.id))
    }

    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn spawn(&mut self, ursula: &Path) -> Result<(), ClusterError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io(format!("open {}", self.log.display())))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &net::node_ns(self.id)])
            .arg(ursula)
            .args(&self.args)
            .env("RUST_LOG", "warn,ursula::raft=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.child = Some(cmd.spawn().map_err(io("spawn ursula"))?);
        self.paused = false;
        Ok(())
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = self.child.as_ref() {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    /// How the node ended if it exited without being killed here (a crash), clearing it.
    pub fn exited_by_itself(&mut self) -> Option<String> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(format!("n{} exited by itself ({status})", self.id))
    }

    pub fn kill9(&mut self) {
        if self.paused {
            self.signal("-CONT");
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    pub fn pause(&mut self) {
        self.signal("-STOP");
        self.paused = true;
    }

    pub fn resume(&mut self) {
        self.signal("-CONT");
        self.paused = false;
    }

    /// The last lines of the node's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// The running cluster and gateway.
pub struct Cluster {
    pub nodes: Vec<Node>,
    gateway: Option<Child>,
    ursula: PathBuf,
    pub dir: PathBuf,
    /// The port of the S3 store the nodes use, if any.
    pub s3_port: Option<u16>,
}

impl Cluster {
    /// Writes the configs, mounts the small disks if asked, and starts every node and the
    /// gateway; returns once each answers.
    pub fn start(ursula: &Path, dir: &Path, shape: &Shape) -> Result<Cluster, ClusterError> {
        // The cluster authenticates its peers, as every multi-node deployment should: its
        // nodes listen on addresses other hosts reach.
        let secret = dir.join("peer-secret");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::fs::write(
            &secret,
            format!("{nanos:032x}{:032x}\n", std::process::id()),
        )
        .map_err(io("peer secret"))?;
        let mut peers = format!("peer_secret_file = \"{}\"\n", secret.display());
        for i in 1..=shape.nodes {
            peers.push_str(&format!(
                "[[raft.peers]]\nnode_id = {i}\nurl = \"http://{}:{PORT}\"\n",
                net::node_addr(i)
            ));
        }
        let mut nodes = Vec::new();
        for i in 1..=shape.nodes {
            let disk = dir.join(format!("n{i}"));
            std::fs::create_dir_all(&disk).map_err(io("node dir"))?;
            if shape.small_disks {
                net::run(
                    "mount",
                    &[
                        "-t",
                        "tmpfs",
                        "-o",
                        &format!("size={SMALL_DISK_MIB}m"),
                        "tmpfs",
                        &disk.display().to_string(),
                    ],
                )?;
            }
            // A small disk gets small segments and guard levels that fit it, so the guard
            // (and not only ENOSPC) is what a filling disk meets first.
            let wal_extra = if shape.small_disks {
                "segment_size = \"4MiB\"\nmin_available_size = \"16MiB\"\nresume_available_size = \"24MiB\"\n"
            } else {
                ""
            };
            let config = dir.join(format!("n{i}.toml"));
            let mut text = format!(
                "[raft]\ngroup_count = 4\n{peers}[raft.wal]\npath = \"{}\"\nfsync = \"{}\"\n{wal_extra}",
                disk.join("wal").display(),
                shape.fsync
            );
            if let Some(s3) = &shape.s3 {
                text.push_str(&s3_toml(&s3.endpoint));
            }
            std::fs::write(&config, text).map_err(io("node config"))?;
            let addr = net::node_addr(i);
            let mut node = Node {
                id: i,
                child: None,
                args: vec![
                    "server".into(),
                    "--config".into(),
                    config.display().to_string(),
                    "--node-id".into(),
                    i.to_string(),
                    "--listen".into(),
                    format!("{addr}:{PORT}"),
                    "--admin-listen".into(),
                    format!("{addr}:{ADMIN_PORT}"),
                ],
                log: dir.join(format!("n{i}.log")),
                paused: false,
                disk,
            };
            node.spawn(ursula)?;
            nodes.push(node);
        }
        let mut cluster = Cluster {
            nodes,
            gateway: None,
            ursula: ursula.to_owned(),
            dir: dir.to_owned(),
            s3_port: shape.s3.as_ref().map(|s| s.port),
        };
        for n in &cluster.nodes {
            wait_answering(&format!("{}/__ursula/ready", n.base()))?;
        }
        let mut args = vec!["gateway".to_owned()];
        for n in &cluster.nodes {
            args.push("--upstream".into());
            args.push(n.base());
        }
        args.extend(["--listen".into(), format!("127.0.0.1:{GATEWAY_PORT}")]);
        let log = std::fs::File::create(dir.join("gateway.log")).map_err(io("gateway log"))?;
        cluster.gateway = Some(
            Command::new(ursula)
                .args(&args)
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(io("spawn gateway"))?,
        );
        wait_answering(&format!("{}/__ursula/gateway/metrics", gateway_base()))?;
        Ok(cluster)
    }

    /// Starts node `i` (1-based) again on its WAL.
    pub fn restart(&mut self, i: usize) -> Result<(), ClusterError> {
        let ursula = self.ursula.clone();
        let node = &mut self.nodes[i - 1];
        node.kill9();
        node.spawn(&ursula)
    }

    pub fn node(&mut self, i: usize) -> &mut Node {
        &mut self.nodes[i - 1]
    }

    pub fn bases(&self) -> Vec<String> {
        self.nodes.iter().map(Node::base).collect()
    }

    /// Fills node `i`'s disk with a file beside its WAL until `leave_mib` MiB are left.
    pub fn fill_disk(&self, i: usize, leave_mib: u64) -> Result<(), ClusterError> {
        let disk = &self.nodes[i - 1].disk;
        let mut f = std::fs::File::create(disk.join("filler")).map_err(io("filler"))?;
        let chunk = vec![0u8; 1 << 20];
        // The filler is the disk's only other user, so what it may take is what is free now
        // less what must stay free; with nothing to leave, ENOSPC ends the loop.
        let mut budget = match free_mib(disk) {
            Some(free) if leave_mib > 0 => free.saturating_sub(leave_mib),
            _ => u64::MAX,
        };
        while budget > 0 && f.write_all(&chunk).is_ok() {
            budget -= 1;
        }
        let _ = f.sync_all();
        Ok(())
    }

    pub fn free_disk(&self, i: usize) {
        let _ = std::fs::remove_file(self.nodes[i - 1].disk.join("filler"));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill9();
        }
        if let Some(mut g) = self.gateway.take() {
            let _ = g.kill();
            let _ = g.wait();
        }
    }
}

/// The free space of the file system holding `dir`, in MiB, as `df` reports it.
fn free_mib(dir: &Path) -> Option<u64> {
    let out = Command::new("df")
        .args(["--output=avail", "-m"])
        .arg(dir)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

pub fn gateway_base() -> String {
    format!("http://127.0.0.1:{GATEWAY_PORT}")
}

/// Waits until `url` answers anything at all.
fn wait_answering(url: &str) -> Result<(), ClusterError> {
    let within = Duration::from_secs(30);
    let deadline = Instant::now() + within;
    let agent = crate::client::agent(Duration::from_secs(2));
    while Instant::now() < deadline {
        if agent.get(url).call().is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(ClusterError::NotUp(url.to_owned(), within))
}
