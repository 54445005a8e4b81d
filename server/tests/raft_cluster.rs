//! The Raft engine with real processes on loopback ports: a durable single node that survives
//! SIGKILL, and a 3-voter cluster from one TOML file that keeps every acknowledged append
//! exactly once through the SIGKILL of its leader.

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into()
}

struct Proc {
    child: Option<Child>,
    port: u16,
    args: Vec<String>,
    log: PathBuf,
}

impl Proc {
    fn start(port: u16, args: Vec<String>, log: PathBuf) -> Proc {
        let mut p = Proc {
            child: None,
            port,
            args,
            log,
        };
        p.spawn();
        p
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_ursula"))
            .args(&self.args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn ursula");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            // Answering is enough: a fresh cluster node stays unready until its peers are up.
            if agent().get(&self.url("/__ursula/ready")).call().is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "node on {} not ready: {}",
            self.port,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Sends a request to `base`, following 307s to the leader by hand (at most a few hops).
fn send(
    bases: &[String],
    start: usize,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Option<(u16, BTreeMap<String, String>, Vec<u8>)> {
    let mut url = format!("{}{path}", bases[start % bases.len()]);
    for _ in 0..4 {
        let mut req = ureq::http::Request::builder().method(method).uri(&url);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let mut resp = agent().run(req.body(body.to_vec()).ok()?).ok()?;
        let status = resp.status().as_u16();
        let hs: BTreeMap<String, String> = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let bytes = resp.body_mut().read_to_vec().unwrap_or_default();
        if status == 307 {
            url = hs.get("location")?.clone();
            continue;
        }
        return Some((status, hs, bytes));
    }
    None
}

fn cluster_toml(dir: &Path, ports: &[u16]) -> PathBuf {
    let mut t = String::from("[raft]\ngroup_count = 4\ninit_membership_per_group = true\n");
    for (i, p) in ports.iter().enumerate() {
        t.push_str(&format!(
            "[[raft.peers]]\nnode_id = {}\nurl = \"http://127.0.0.1:{p}\"\n",
            i + 1
        ));
    }
    let path = dir.join("cluster.toml");
    std::fs::write(&path, t).expect("toml");
    path
}

/// Appends `count` producer-numbered records, retrying each seq until acknowledged, against
/// whichever node answers. Returns how many were acknowledged.
fn producer_load(
    bases: &[String],
    path: &str,
    from: u64,
    count: u64,
    mut after_each: impl FnMut(u64),
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for seq in from..from + count {
        let body = format!("p{seq:06}|");
        let mut node = seq as usize;
        loop {
            assert!(
                Instant::now() < deadline,
                "seq {seq} was never acknowledged"
            );
            let headers = [
                ("content-type", "application/octet-stream".to_owned()),
                ("producer-id", "load".to_owned()),
                ("producer-epoch", "0".to_owned()),
                ("producer-seq", seq.to_string()),
            ];
            match send(bases, node, "POST", path, &headers, body.as_bytes()) {
                Some((200 | 204, _, _)) => break,
                _ => {
                    node += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        after_each(seq);
    }
}

fn expected(count: u64) -> String {
    (0..count).map(|s| format!("p{s:06}|")).collect()
}

fn read_all(bases: &[String], path: &str) -> String {
    let (status, _, body) =
        send(bases, 0, "GET", &format!("{path}?offset=-1"), &[], b"").expect("read");
    assert_eq!(status, 200);
    String::from_utf8(body).expect("utf8")
}

#[test]
fn a_durable_single_node_keeps_every_acknowledged_append_through_sigkill() {
    let dir = tempfile_dir("durable");
    let port = free_port();
    let config = dir.join("node.toml");
    std::fs::write(
        &config,
        format!(
            "[raft]\ngroup_count = 4\n[raft.wal]\npath = \"{}\"\nfsync = \"always\"\n",
            dir.join("wal").display()
        ),
    )
    .expect("toml");
    let args = vec![
        "server".into(),
        "--config".into(),
        config.display().to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    let mut node = Proc::start(port, args, dir.join("node.log"));
    let bases = vec![node.url("")];
    assert_eq!(
        send(&bases, 0, "PUT", "/demo/durable", &[], b"").map(|r| r.0),
        Some(201)
    );
    producer_load(&bases, "/demo/durable", 0, 200, |_| {});
    node.kill9();
    node.spawn();
    assert_eq!(
        read_all(&bases, "/demo/durable"),
        expected(200),
        "every acknowledged append, once"
    );
    producer_load(&bases, "/demo/durable", 200, 10, |_| {});
    assert_eq!(read_all(&bases, "/demo/durable"), expected(210));
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "ursula-raft-{name}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&d).expect("dir");
    d
}

#[test]
fn a_three_voter_cluster_keeps_acknowledged_appends_exactly_once_through_leader_sigkill() {
    let dir = tempfile_dir("cluster");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let config = cluster_toml(&dir, &ports);
    let mut nodes: Vec<Proc> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let args = vec![
                "server".into(),
                "--config".into(),
                config.display().to_string(),
                "--node-id".into(),
                (i + 1).to_string(),
                "--listen".into(),
                format!("127.0.0.1:{p}"),
            ];
            let mut cfg_dir = dir.join(format!("n{}", i + 1));
            std::fs::create_dir_all(&cfg_dir).expect("node dir");
            cfg_dir = cfg_dir.join("wal");
            // Each node gets its own WAL through an override file layered on the shared one.
            let own = dir.join(format!("n{}.toml", i + 1));
            let shared = std::fs::read_to_string(&config).expect("shared");
            std::fs::write(
                &own,
                format!("{shared}[raft.wal]\npath = \"{}\"\n", cfg_dir.display()),
            )
            .expect("toml");
            let mut args = args;
            args[2] = own.display().to_string();
            Proc::start(*p, args, dir.join(format!("n{}.log", i + 1)))
        })
        .collect();
    let bases: Vec<String> = nodes.iter().map(|n| n.url("")).collect();
    // Appends through any node: followers redirect writes to the leader.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if send(&bases, 1, "PUT", "/demo/load", &[], b"").is_some_and(|r| r.0 == 201 || r.0 == 200)
        {
            break;
        }
        assert!(Instant::now() < deadline, "the cluster never took a create");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (status, hs, _) = agent_raw(&bases[0], "/demo/load");
    let leader = match status {
        307 => hs,
        200 => bases[0].clone(),
        other => panic!("a repeated create answered {other}"),
    };
    let leader_idx = bases
        .iter()
        .position(|b| leader.starts_with(b.as_str()))
        .expect("leader is a node");
    let mut killed = false;
    producer_load(&bases, "/demo/load", 0, 300, |seq| {
        if seq == 150 && !killed {
            nodes[leader_idx].kill9();
            killed = true;
        }
    });
    let survivors: Vec<String> = bases
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader_idx)
        .map(|(_, b)| b.clone())
        .collect();
    assert_eq!(
        read_all(&survivors, "/demo/load"),
        expected(300),
        "every acknowledged append exactly once"
    );
    // Followers serve history themselves, and send HEAD and tails to the leader.
    let follower = survivors
        .iter()
        .find(|b| agent_raw(b, "/demo/load").0 == 307)
        .expect("one survivor follows")
        .clone();
    let head = agent()
        .run(
            ureq::http::Request::builder()
                .method("HEAD")
                .uri(format!("{follower}/demo/load"))
                .body(Vec::new())
                .expect("req"),
        )
        .expect("head");
    assert_eq!(
        head.status().as_u16(),
        307,
        "HEAD is linearizable: the leader answers it"
    );
    let loc = head
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        loc.ends_with("/demo/load") && !loc.starts_with(&follower),
        "{loc}"
    );
    let mut part = agent()
        .get(&format!("{follower}/demo/load?offset=-1&max_bytes=8"))
        .call()
        .expect("partial read");
    assert_eq!(
        part.status().as_u16(),
        200,
        "a follower serves replicated history"
    );
    assert_eq!(part.body_mut().read_to_string().expect("body"), "p000000|");
    // The killed node restarts, catches up, and serves the same bytes.
    nodes[leader_idx].spawn();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _, body) = send(
            &[bases[leader_idx].clone()],
            0,
            "GET",
            "/demo/load?offset=-1",
            &[],
            b"",
        )
        .unwrap_or_default();
        if status == 200 && body == expected(300).as_bytes() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted node never caught up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(nodes);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A repeated create, to learn who leads: a follower answers 307 with the leader's URL, the
/// leader 200 (the create is idempotent).
fn agent_raw(base: &str, path: &str) -> (u16, String, ()) {
    let req = ureq::http::Request::builder()
        .method("PUT")
        .uri(format!("{base}{path}"))
        .body(Vec::new())
        .expect("request");
    match agent().run(req) {
        Ok(r) => {
            let loc = r
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            (r.status().as_u16(), loc, ())
        }
        Err(_) => (0, String::new(), ()),
    }
}

#[test]
fn a_wal_filesystem_below_its_minimum_refuses_writes_marked_and_the_node_is_unready() {
    let dir = tempfile_dir("pressure");
    let port = free_port();
    let config = dir.join("node.toml");
    let toml = format!(
        "[raft]\ngroup_count = 2\n[raft.wal]\npath = \"{}\"\nmin_available_size = \"1000000GiB\"\nresume_available_size = \"2000000GiB\"\n",
        dir.join("wal").display()
    );
    std::fs::write(&config, toml).expect("toml");
    let args = vec![
        "server".into(),
        "--config".into(),
        config.display().to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    let node = Proc::start(port, args, dir.join("node.log"));
    let resp = agent()
        .put(&node.url("/demo/full"))
        .send_empty()
        .expect("put");
    assert_eq!(resp.status().as_u16(), 503);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        header("x-ursula-not-applied").as_deref(),
        Some("WalDiskPressure")
    );
    assert_eq!(header("retry-after").as_deref(), Some("1"));
    let mut ready = agent()
        .get(&node.url("/__ursula/ready"))
        .call()
        .expect("ready");
    assert_eq!(ready.status().as_u16(), 503);
    let body = ready.body_mut().read_to_string().expect("body");
    assert!(body.contains("wal_disk_pressure"), "{body}");
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_raft_log_past_twice_its_budget_refuses_bodies_but_not_closes() {
    let dir = tempfile_dir("logpressure");
    let port = free_port();
    let config = dir.join("node.toml");
    let toml = format!(
        "[raft]\ngroup_count = 1\nsnapshot_log_budget = \"1KiB\"\n[raft.wal]\npath = \"{}\"\n",
        dir.join("wal").display()
    );
    std::fs::write(&config, toml).expect("toml");
    let args = vec![
        "server".into(),
        "--config".into(),
        config.display().to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    let node = Proc::start(port, args, dir.join("node.log"));
    let bases = vec![node.url("")];
    assert_eq!(
        send(&bases, 0, "PUT", "/demo/log", &[], b"").map(|r| r.0),
        Some(201)
    );
    let body = vec![b'x'; 600];
    let mut refused = None;
    for _ in 0..20 {
        let r = send(
            &bases,
            0,
            "POST",
            "/demo/log",
            &[("content-type", "application/octet-stream".to_owned())],
            &body,
        )
        .expect("post");
        if r.0 == 503 {
            refused = Some(r);
            break;
        }
        assert_eq!(r.0, 204);
    }
    let (status, headers, _) =
        refused.expect("the log passed twice the budget and writes with a body were refused");
    assert_eq!(status, 503);
    assert_eq!(
        headers.get("x-ursula-not-applied").map(String::as_str),
        Some("RaftLogPressure")
    );
    assert_eq!(headers.get("retry-after").map(String::as_str), Some("1"));
    let close = send(
        &bases,
        0,
        "POST",
        "/demo/log",
        &[("stream-closed", "true".to_owned())],
        b"",
    )
    .expect("close");
    assert_eq!(close.0, 204, "a write without a body still passes");
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
}
