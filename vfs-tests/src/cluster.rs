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
        let dir = tempfile::tempdir().expect("tempdir");
        let ports: Vec<u16> = (0..3).map(|_| crate::free_port()).collect();
        let mut c = Cluster {
            gateway_port: crate::free_port(),
            ports,
            dir,
            nodes: vec![None, None, None],
            gateway: None,
        };
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
            assert!(Instant::now() < deadline, "the cluster never became ready");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn spawn_node(&mut self, i: usize) {
        let mut t = String::from("[raft]\ngroup_count = 4\ninit_membership_per_group = true\n");
        t.push_str(&format!(
            "[raft.wal]\npath = \"{}\"\n",
            self.dir.path().join(format!("wal{}", i + 1)).display()
        ));
        for (j, p) in self.ports.iter().enumerate() {
            t.push_str(&format!(
                "[[raft.peers]]\nnode_id = {}\nurl = \"http://127.0.0.1:{p}\"\n",
                j + 1
            ));
        }
        let config = self.dir.path().join(format!("n{}.toml", i + 1));
        std::fs::write(&config, t).expect("toml");
        let child = Command::new(bin())
            .args(["server", "--config"])
            .arg(&config)
            .args([
                "--node-id",
                &(i + 1).to_string(),
                "--listen",
                &format!("127.0.0.1:{}", self.ports[i]),
                // Nodes of one host need admin planes apart; these tests use none.
                "--admin-listen",
                "off",
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
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

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
        if let Some(mut g) = self.gateway.take() {
            let _ = g.kill();
            let _ = g.wait();
        }
    }
}
