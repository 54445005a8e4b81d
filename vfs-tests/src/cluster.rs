//! A 3-voter Raft cluster of the real `ursula` binary on loopback ports, with `ursula gateway`
//! in front of it: the stream URL a SQLite owner uses reaches the stream's leader by itself,
//! whichever node leads.

use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

pub struct Cluster {
    pub ports: Vec<u16>,
    pub gateway_port: u16,
    dir: tempfile::TempDir,
    nodes: Vec<Option<Child>>,
    gateway: Option<Child>,
    /// Set by [`Cluster::start_operable`]: each node's admin plane port; `None` runs none.
    admin_ports: Option<Vec<u16>>,
    /// `raft.wal.fsync = "always"`.
    fsync_always: bool,
    extra_toml: String,
}

/// How [`Cluster::start_with`] runs the nodes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Admin planes on ports of their own, and logs kept in the cluster's directory.
    pub operable: bool,
    pub fsync_always: bool,
    /// More of each node's TOML (a `[storage.cold]` section, say).
    pub extra_toml: String,
}

fn bin() -> PathBuf {
    let b = crate::target_dir().join("ursula");
    assert!(
        b.exists(),
        "build the server first: {} is missing",
        b.display()
    );
    b
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_with(Options::default())
    }

    /// A cluster an operator can drain and restart: admin planes, durable journals, logs.
    pub fn start_operable() -> Cluster {
        Cluster::start_with(Options {
            operable: true,
            fsync_always: true,
            extra_toml: String::new(),
        })
    }

    pub fn start_with(opts: Options) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports: Vec<u16> = (0..3).map(|_| crate::free_port()).collect();
        let mut c = Cluster {
            gateway_port: crate::free_port(),
            ports,
            dir,
            nodes: vec![None, None, None],
            gateway: None,
            admin_ports: opts
                .operable
                .then(|| (0..3).map(|_| crate::free_port()).collect()),
            fsync_always: opts.fsync_always,
            extra_toml: opts.extra_toml,
        };
        // Peers prove membership with a shared secret; without one a follower cannot forward
        // operator commands (purge, restore) to the leader. Written once, before any node
        // starts: a node reading it while another spawn rewrote it would find it empty.
        std::fs::write(
            c.peer_secret_path(),
            "vfs-tests-cluster-peer-secret-0123456789\n",
        )
        .expect("secret");
        for i in 0..3 {
            c.spawn_node(i);
        }
        let mut gw = Command::new(bin());
        gw.args([
            "gateway",
            "--listen",
            &format!("127.0.0.1:{}", c.gateway_port),
        ]);
        for p in &c.ports {
            gw.args(["--upstream", &format!("http://127.0.0.1:{p}")]);
        }
        c.gateway = Some(
            gw.env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("gateway"),
        );
        // Ready once every group of the first node has a leader and the gateway answers.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let url = format!("http://127.0.0.1:{}/__ursula/ready", c.ports[0]);
            let ready = crate::server::try_http("GET", &url, &[], b"").is_some_and(|r| r.0 == 200);
            let gw = std::net::TcpStream::connect(("127.0.0.1", c.gateway_port)).is_ok();
            if ready && gw {
                return c;
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = (0..3)
                    .map(|i| std::fs::read_to_string(c.log_path(i)).unwrap_or_default())
                    .map(|l| l.lines().rev().take(20).collect::<Vec<_>>().join("\n"))
                    .collect();
                panic!("the cluster never became ready; last log lines: {logs:#?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Node `i`'s WAL directory (0-based).
    pub fn wal_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("wal{}", i + 1))
    }

    fn peer_secret_path(&self) -> PathBuf {
        self.dir.path().join("peer-secret")
    }

    /// Node `i`'s log.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("n{}.log", i + 1))
    }

    /// The node's own client URL (not the gateway).
    pub fn node_base(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    /// An `ursulactl` manifest of the cluster (JSON), for an operable cluster.
    pub fn manifest(&self) -> PathBuf {
        let admin = self.admin_ports.as_ref().expect("an operable cluster");
        let nodes: Vec<serde_json::Value> = (0..3)
            .map(|i| {
                serde_json::json!({
                    "id": i + 1,
                    "admin_url": format!("http://127.0.0.1:{}", admin[i]),
                    "http_url": self.node_base(i),
                })
            })
            .collect();
        let path = self.dir.path().join("manifest.json");
        std::fs::write(&path, serde_json::json!({ "nodes": nodes }).to_string()).expect("manifest");
        path
    }

    /// Starts node `i` again on its WAL.
    pub fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].is_none(), "node {} still runs", i + 1);
        self.spawn_node(i);
    }

    /// Stops node `i` with SIGTERM and waits for it to exit; `true` for a clean exit.
    pub fn sigterm(&mut self, i: usize) -> bool {
        let Some(mut child) = self.nodes[i].take() else {
            return false;
        };
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn spawn_node(&mut self, i: usize) {
        let mut t = String::from("[raft]\ngroup_count = 4\ninit_membership_per_group = true\n");
        let secret = self.peer_secret_path();
        t.push_str(&format!("peer_secret_file = \"{}\"\n", secret.display()));
        t.push_str(&format!(
            "[raft.wal]\npath = \"{}\"\n",
            self.wal_dir(i).display()
        ));
        if self.fsync_always {
            t.push_str("fsync = \"always\"\n");
        }
        for (j, p) in self.ports.iter().enumerate() {
            t.push_str(&format!(
                "[[raft.peers]]\nnode_id = {}\nurl = \"http://127.0.0.1:{p}\"\n",
                j + 1
            ));
        }
        t.push_str(&self.extra_toml);
        let config = self.dir.path().join(format!("n{}.toml", i + 1));
        std::fs::write(&config, t).expect("toml");
        // Nodes of one host need admin planes apart; most tests use none.
        let admin = match &self.admin_ports {
            Some(ports) => format!("127.0.0.1:{}", ports[i]),
            None => "off".to_owned(),
        };
        // Every node logs to the cluster's directory, so a start that never becomes ready
        // can say why.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .expect("log");
        let (out, err) = (Stdio::from(log.try_clone().expect("log")), Stdio::from(log));
        let child = Command::new(bin())
            .args(["server", "--config"])
            .arg(&config)
            .args([
                "--node-id",
                &(i + 1).to_string(),
                "--listen",
                &format!("127.0.0.1:{}", self.ports[i]),
                "--admin-listen",
                &admin,
            ])
            .env("RUST_LOG", "warn,ursula::raft=info")
            .env("NO_COLOR", "1")
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn node");
        self.nodes[i] = Some(child);
    }

    /// The base URL clients use: the gateway.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.gateway_port)
    }

    /// The node that leads the most groups (after start, the initializing node leads them all).
    pub fn leader(&self) -> Option<usize> {
        let url = format!("http://127.0.0.1:{}/__ursula/metrics", self.ports[0]);
        let (status, _, body) = crate::server::try_http("GET", &url, &[], b"")?;
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
        let leaders: Vec<u64> = v["groups"]
            .as_array()?
            .iter()
            .filter_map(|g| g["leader"].as_u64())
            .collect();
        let most = (1..=3u64).max_by_key(|id| leaders.iter().filter(|l| **l == *id).count())?;
        leaders.contains(&most).then(|| most as usize - 1)
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Lines of each node's log a failing test prints: enough to cover a drain, a stop and a
/// restart, so a failure seen once in CI can be read afterwards.
const LOG_TAIL_ON_FAILURE: usize = 150;

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
        if let Some(mut g) = self.gateway.take() {
            let _ = g.kill();
            let _ = g.wait();
        }
        // The logs live in the cluster's temporary directory, gone after this: a failing test
        // prints their tails, and copies them whole under `URSULA_TEST_KEEP_LOGS/<pid>/` when
        // that is set (to chase a failure seen once in a loop of runs).
        if std::thread::panicking() {
            if let Ok(keep) = std::env::var("URSULA_TEST_KEEP_LOGS") {
                let d = std::path::Path::new(&keep).join(std::process::id().to_string());
                let _ = std::fs::create_dir_all(&d);
                for i in 0..3 {
                    let _ = std::fs::copy(self.log_path(i), d.join(format!("n{}.log", i + 1)));
                }
            }
            for i in 0..3 {
                let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = &lines[lines.len().saturating_sub(LOG_TAIL_ON_FAILURE)..];
                eprintln!(
                    "--- node {} log, last {} lines ---\n{}",
                    i + 1,
                    tail.len(),
                    tail.join("\n")
                );
            }
        }
    }
}
