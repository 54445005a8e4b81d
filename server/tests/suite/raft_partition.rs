//! A 3-voter cluster whose peer links run through proxies the test controls: a follower cut off
//! from its peers misses writes the other two commit, then catches up when the links heal; a
//! follower whose WAL was wiped rejoins and catches up from the leader.

use std::io::Read;
use std::io::Write;
use std::net::Shutdown;
use std::net::TcpListener;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use crate::harness::ports::free_port;
use crate::harness::scratch::Scratch;

/// A TCP forwarder that can be switched off, which also cuts its open connections.
struct Link {
    port: u16,
    up: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Link {
    fn new(target: u16) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind link");
        let port = listener.local_addr().expect("addr").port();
        let up = Arc::new(AtomicBool::new(true));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
        let (u, o) = (up.clone(), open.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                if !u.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                for s in [&client, &server] {
                    if let Ok(c) = s.try_clone() {
                        o.lock().expect("links").push(c);
                    }
                }
                pipe(
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                pipe(server, client);
            }
        });
        Link { port, up, open }
    }

    fn set(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            for s in self.open.lock().expect("links").drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16384];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into()
}

struct Node {
    id: usize,
    port: u16,
    config: PathBuf,
    wal: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_ursula"))
                .args(["server", "--config"])
                .arg(&self.config)
                .args([
                    "--node-id",
                    &self.id.to_string(),
                    "--listen",
                    &format!("127.0.0.1:{}", self.port),
                    "--admin-listen",
                    "off",
                ])
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn"),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while agent().get(&self.url("/__ursula/ready")).call().is_err() {
            assert!(Instant::now() < deadline, "node {} never answered", self.id);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The bytes this node holds itself: a read short of the tail is served locally.
    fn local_prefix(&self, len: usize) -> Option<String> {
        let mut r = agent()
            .get(&self.url(&format!("/demo/part?offset=-1&max_bytes={len}")))
            .call()
            .ok()?;
        (r.status() == 200)
            .then(|| r.body_mut().read_to_string().ok())
            .flatten()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn payload(i: usize) -> String {
    format!("r{i:05}|")
}

/// Appends rows `range` through `node`, following redirects to the leader.
fn append(nodes: &[Node], via: usize, range: std::ops::Range<usize>) {
    for i in range {
        let mut url = nodes[via].url("/demo/part");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(Instant::now() < deadline, "row {i} never appended");
            let resp = agent()
                .post(&url)
                .header("content-type", "application/octet-stream")
                .header("producer-id", "t")
                .header("producer-epoch", "0")
                .header("producer-seq", &i.to_string())
                .send(payload(i).as_bytes());
            match resp {
                Ok(r) if r.status() == 307 => {
                    url = r
                        .headers()
                        .get("location")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                }
                Ok(r) if r.status() == 200 || r.status() == 204 => break,
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

fn wait_for_prefix(node: &Node, rows: usize) {
    let want: String = (0..rows).map(payload).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.local_prefix(want.len()).as_deref() != Some(want.as_str()) {
        assert!(
            Instant::now() < deadline,
            "node {} never caught up to {rows} rows",
            node.id
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_cut_off_follower_catches_up_after_healing_and_a_wiped_one_rejoins() {
    // Declared first, so it drops after the nodes: kept with their logs if the test panics.
    let dir = Scratch::new("partition");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    // links[i][j]: node i's link to node j.
    let links: Vec<Vec<Link>> = (0..3)
        .map(|_| (0..3).map(|j| Link::new(ports[j])).collect())
        .collect();
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| {
            let mut t = String::from("[raft]\ngroup_count = 2\ninit_membership_per_group = true\n");
            let wal = dir.join(format!("wal{}", i + 1));
            t.push_str(&format!("[raft.wal]\npath = \"{}\"\n", wal.display()));
            for (j, link) in links[i].iter().enumerate() {
                let port = if i == j { ports[j] } else { link.port };
                t.push_str(&format!(
                    "[[raft.peers]]\nnode_id = {}\nurl = \"http://127.0.0.1:{port}\"\n",
                    j + 1
                ));
            }
            let config = dir.join(format!("n{}.toml", i + 1));
            std::fs::write(&config, t).expect("toml");
            Node {
                id: i + 1,
                port: ports[i],
                config,
                wal,
                log: dir.join(format!("n{}.log", i + 1)),
                child: None,
            }
        })
        .collect();
    for n in &mut nodes {
        n.spawn();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while agent()
        .put(&nodes[0].url("/demo/part"))
        .send_empty()
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
        >= 300
    {
        assert!(Instant::now() < deadline, "no leader for the create");
        std::thread::sleep(Duration::from_millis(200));
    }
    append(&nodes, 0, 0..40);
    // Node 3 is cut off from both peers, both ways.
    let follower = 2;
    for (i, row) in links.iter().enumerate() {
        for (j, link) in row.iter().enumerate() {
            if (i == follower) != (j == follower) {
                link.set(false);
            }
        }
    }
    let leader_side = if follower == 0 { 1 } else { 0 };
    append(&nodes, leader_side, 40..100);
    // The cut-off follower still holds only what it had.
    let full: String = (0..100).map(payload).collect();
    assert_ne!(
        nodes[follower].local_prefix(full.len() - 1).as_deref(),
        Some(&full[..full.len() - 1])
    );
    for row in &links {
        for link in row {
            link.set(true);
        }
    }
    wait_for_prefix(&nodes[follower], 99);
    // A wiped follower rejoins and catches up from the leader.
    nodes[follower].kill();
    std::fs::remove_dir_all(&nodes[follower].wal).expect("wipe");
    append(&nodes, leader_side, 100..120);
    nodes[follower].spawn();
    wait_for_prefix(&nodes[follower], 119);
    drop(nodes);
}
