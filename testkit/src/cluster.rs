//! Helpers shared by the tests that run real `ursula` processes on the Raft engine: a node
//! process that can be killed, stopped with SIGTERM and started again on the same WAL, config
//! files for a single durable node and for a static cluster, and requests that follow 307s.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::ExitStatus;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

/// The log filter of every node: warnings, and the Raft engine's own decisions.
const RUST_LOG: &str = "warn,ursula::raft=info";

pub use crate::ports::free_port;
pub use crate::scratch::Scratch;

pub use crate::bins::ursula as ursula_bin;
use crate::process::exit_within;

pub fn agent() -> ureq::Agent {
    crate::http::agent(Duration::from_secs(5))
}

/// A test's scratch directory, `ursula-test-raft-{name}-…`, removed when the test ends well.
pub fn tempfile_dir(name: &str) -> Scratch {
    Scratch::new(&format!("raft-{name}"))
}

/// A node process; killed on drop.
pub struct Proc {
    pub child: Option<Child>,
    pub port: u16,
    /// Its admin plane (`--admin-listen`), kept across restarts.
    pub admin_port: u16,
    pub args: Vec<String>,
    /// Extra environment of the process.
    pub env: Vec<(String, String)>,
    pub log: PathBuf,
}

impl Proc {
    pub fn start(port: u16, args: Vec<String>, log: PathBuf) -> Proc {
        Proc::start_with_env(port, args, Vec::new(), log)
    }

    pub fn start_with_env(
        port: u16,
        args: Vec<String>,
        env: Vec<(String, String)>,
        log: PathBuf,
    ) -> Proc {
        let mut p = Proc {
            child: None,
            port,
            admin_port: free_port(),
            args,
            env,
            log,
        };
        p.spawn();
        p
    }

    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        let child = Command::new(ursula_bin())
            .args(&self.args)
            .args(admin_listen(&self.args, self.admin_port))
            .env("RUST_LOG", RUST_LOG)
            // A node whose config names no `raft.wal.path` keeps its WAL in the temp dir and
            // removes it only on a clean stop; killed, it would leave it there. Its log lies in
            // the test's scratch directory, so the WAL goes beside it.
            .envs(self.log.parent().map(|d| ("TMPDIR", d.as_os_str())))
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
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
        panic!("node on {} not ready: {}", self.port, self.log_text());
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn base(&self) -> String {
        self.url("")
    }

    /// A URL of the node's admin plane.
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Asserts the node's log says `text`, showing the log when it does not.
    #[track_caller]
    pub fn assert_log_says(&self, text: &str) {
        let log = self.log_text();
        assert!(log.contains(text), "the log lacks {text:?}: {log}");
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("running")
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the node with SIGTERM and returns how it exited.
    pub fn sigterm(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success());
        exit_within(&mut child, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("no exit within 30 s of SIGTERM: {}", self.log_text()))
    }

    /// `GET path` as JSON, with its status.
    pub fn json(&self, path: &str) -> (u16, serde_json::Value) {
        let mut r = agent().get(&self.url(path)).call().expect("GET");
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().expect("body");
        (status, serde_json::from_str(&text).expect("JSON"))
    }

    /// Starts the stopped node again on its WAL and waits until it answers ready (200).
    pub fn respawn_ready(&mut self) {
        self.spawn();
        self.wait_ready_until(Duration::from_secs(20), |s, _| s == 200);
    }

    /// Polls `/__ursula/ready` until `want` accepts its status and body; returns the body.
    pub fn wait_ready_until(
        &self,
        within: Duration,
        want: impl Fn(u16, &serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + within;
        loop {
            let (status, body) = self.json("/__ursula/ready");
            if want(status, &body) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "readiness stayed {status} {body}: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `--admin-listen` on `port` unless `args` name one: tests run many nodes on one host, and
/// the default admin port (4438) would let only one of them start.
pub fn admin_listen(args: &[String], port: u16) -> Vec<String> {
    if args.iter().any(|a| a == "--admin-listen") {
        return Vec::new();
    }
    vec!["--admin-listen".into(), format!("127.0.0.1:{port}")]
}

/// Runs `ursula` with `args`, asserting it refuses to start (a non-zero exit); returns its
/// stderr.
pub fn refusal(args: &[String]) -> String {
    let (code, stderr) = refused_start(args);
    assert_ne!(code, Some(0), "{stderr}");
    stderr
}

/// Runs `ursula` with `args` expecting it to refuse to start; returns its exit code and stderr.
pub fn refused_start(args: &[String]) -> (Option<i32>, String) {
    let out_path = std::env::temp_dir().join(format!("ursula-refused-{}", free_port()));
    let out = std::fs::File::create(&out_path).expect("stderr file");
    let mut child = Command::new(crate::bins::ursula())
        .args(args)
        .args(admin_listen(args, free_port()))
        .env("RUST_LOG", RUST_LOG)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(out)
        .spawn()
        .expect("spawn ursula");
    let status = exit_within(&mut child, Duration::from_secs(20)).unwrap_or_else(|| {
        panic!(
            "ursula did not refuse to start: {}",
            std::fs::read_to_string(&out_path).unwrap_or_default()
        )
    });
    let stderr = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    (status.code(), stderr)
}

/// Writes a single durable node's config under `dir` (`toml`, then `wal` in `[raft.wal]` next
/// to its path `dir/wal`) and returns the `ursula` arguments.
pub fn single_node_args(dir: &Path, port: u16, toml: &str, wal: &str) -> Vec<String> {
    let config = dir.join("node.toml");
    std::fs::write(
        &config,
        format!(
            "{toml}\n[raft.wal]\npath = \"{}\"\n{wal}\n",
            dir.join("wal").display()
        ),
    )
    .expect("toml");
    server_args(&config, port)
}

/// The `ursula` arguments that start a node from `config` on `port`.
pub fn server_args(config: &Path, port: u16) -> Vec<String> {
    vec![
        "server".into(),
        "--config".into(),
        config.display().to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ]
}

/// Starts a single durable node from [`single_node_args`] on a free port, logging to
/// `dir/node.log`.
pub fn start_single_node(dir: &Path, toml: &str, wal: &str) -> Proc {
    let port = free_port();
    Proc::start(
        port,
        single_node_args(dir, port, toml, wal),
        dir.join("node.log"),
    )
}

/// A scratch directory `name` ([`tempfile_dir`]) with a single durable node started in it
/// ([`start_single_node`]).
pub fn single_node(name: &str, toml: &str, wal: &str) -> (Scratch, Proc) {
    let dir = tempfile_dir(name);
    let node = start_single_node(&dir, toml, wal);
    (dir, node)
}

/// [`single_node`] holding the stream `path` with `count` producer records ([`producer_load`]);
/// returns the node's base URL as the one-element list the request helpers take.
pub fn loaded_single_node(
    name: &str,
    toml: &str,
    wal: &str,
    path: &str,
    count: u64,
) -> (Scratch, Proc, Vec<String>) {
    let (dir, node) = single_node(name, toml, wal);
    let bases = vec![node.base()];
    create_when_led(&bases, path);
    producer_load(&bases, path, 0, count, |_| {});
    (dir, node, bases)
}

/// The peer secret of the test clusters, as `[raft]`'s line naming its file under `dir`
/// (written there): every cluster the harness starts authenticates its peers, as the
/// multi-node examples do.
pub fn peer_secret_line(dir: &Path) -> String {
    let path = dir.join("peer-secret");
    // Called once per node while earlier nodes may already read the file: a plain write
    // truncates it first, and a node reading then finds it empty. A rename replaces it whole.
    let staged = dir.join(format!("peer-secret.{}", std::process::id()));
    std::fs::write(&staged, format!("{PEER_SECRET}\n")).expect("peer secret");
    std::fs::rename(&staged, &path).expect("peer secret");
    format!("peer_secret_file = \"{}\"\n", path.display())
}

/// The header a peer RPC carries the secret in.
pub const SECRET_HEADER: &str = "x-ursula-raft-secret";

/// What [`peer_secret_line`] writes.
pub const PEER_SECRET: &str = "test-cluster-peer-secret-0123456789abcdef";

pub fn cluster_toml(dir: &Path, ports: &[u16]) -> PathBuf {
    let t = format!(
        "[raft]\ngroup_count = 4\ninit_membership_per_group = true\n{}{}",
        peer_secret_line(dir),
        peer_entries(ports)
    );
    let path = dir.join("cluster.toml");
    std::fs::write(&path, t).expect("toml");
    path
}

/// The WAL directory of cluster node `i` (0-based) under `dir`.
pub fn cluster_wal(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("n{}", i + 1)).join("wal")
}

/// The arguments of cluster node `i` (0-based): the shared peer list with a WAL of its own.
pub fn cluster_node_args(dir: &Path, ports: &[u16], i: usize) -> Vec<String> {
    cluster_node_args_with(dir, ports, i, "")
}

/// [`cluster_node_args`] with `extra` TOML at the end of the node's config.
pub fn cluster_node_args_with(dir: &Path, ports: &[u16], i: usize, extra: &str) -> Vec<String> {
    let shared = std::fs::read_to_string(cluster_toml(dir, ports)).expect("shared");
    let wal = cluster_wal(dir, i);
    std::fs::create_dir_all(wal.parent().expect("node dir")).expect("node dir");
    let own = dir.join(format!("n{}.toml", i + 1));
    // Tests place leaderships where they assert them: the fair-share balancer stays off unless
    // a test configures it.
    let balance = if extra.contains("[governance.leadership_balance]") {
        ""
    } else {
        "[governance.leadership_balance]\nmax_per_tick = 0\n"
    };
    // `[raft.wal]` stays last before `extra`: tests append keys of that table to the file.
    std::fs::write(
        &own,
        format!(
            "{shared}{balance}[raft.wal]\npath = \"{}\"\n{extra}",
            wal.display()
        ),
    )
    .expect("toml");
    node_args(&own, i, ports[i])
}

/// `[[raft.peers]]` entries naming node `i + 1` at `127.0.0.1:ports[i]`.
pub fn peer_entries(ports: &[u16]) -> String {
    ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!(
                "[[raft.peers]]\nnode_id = {}\nurl = \"http://127.0.0.1:{p}\"\n",
                i + 1
            )
        })
        .collect()
}

/// The `ursula` arguments that start node `i + 1` (`i` 0-based) from `config` on `port`.
pub fn node_args(config: &Path, i: usize, port: u16) -> Vec<String> {
    let mut args = server_args(config, port);
    args.extend(["--node-id".into(), (i + 1).to_string()]);
    args
}

/// Starts cluster node `i` (0-based).
pub fn start_cluster_node(dir: &Path, ports: &[u16], i: usize) -> Proc {
    start_cluster_node_with(dir, ports, i, "")
}

/// Starts cluster node `i` (0-based) with `extra` TOML in its config.
pub fn start_cluster_node_with(dir: &Path, ports: &[u16], i: usize, extra: &str) -> Proc {
    Proc::start(
        ports[i],
        cluster_node_args_with(dir, ports, i, extra),
        dir.join(format!("n{}.log", i + 1)),
    )
}

/// Starts nodes `0..running` of a static cluster of `size` under `dir`
/// ([`start_cluster_node`]); returns every node's port, the running nodes and their base URLs.
pub fn start_cluster(
    dir: &Path,
    size: usize,
    running: usize,
) -> (Vec<u16>, Vec<Proc>, Vec<String>) {
    let ports: Vec<u16> = (0..size).map(|_| free_port()).collect();
    let nodes: Vec<Proc> = (0..running)
        .map(|i| start_cluster_node(dir, &ports, i))
        .collect();
    let bases = nodes.iter().map(Proc::base).collect();
    (ports, nodes, bases)
}

/// A 3-voter cluster ([`start_cluster`]) in the scratch directory `name`, holding the stream
/// `path` with `count` producer records ([`producer_load`]).
pub fn loaded_cluster(name: &str, path: &str, count: u64) -> (Scratch, Vec<Proc>, Vec<String>) {
    let dir = tempfile_dir(name);
    let (_, nodes, bases) = start_cluster(&dir, 3, 3);
    create_when_led(&bases, path);
    producer_load(&bases, path, 0, count, |_| {});
    (dir, nodes, bases)
}

pub type Answer = (u16, BTreeMap<String, String>, Vec<u8>);

/// Sends a request to `base`, following 307s to the leader by hand (at most a few hops).
pub fn send(
    bases: &[String],
    start: usize,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Option<Answer> {
    let url = format!("{}{path}", bases[start % bases.len()]);
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    send_url(method, &url, &headers, body)
}

/// Appends `body` to `path` as `application/octet-stream` through `bases[start]`, following
/// 307s ([`send`]).
pub fn send_octets(bases: &[String], start: usize, path: &str, body: &[u8]) -> Option<Answer> {
    let octet = [("content-type", "application/octet-stream".to_owned())];
    send(bases, start, "POST", path, &octet, body)
}

/// Sends a request to `url`, following 307s by hand (at most a few hops).
pub fn send_url(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Option<Answer> {
    let mut url = url.to_owned();
    for _ in 0..4 {
        let (status, hs, bytes) =
            crate::http::request(&agent(), method, &url, headers, body).ok()?;
        let hs: BTreeMap<String, String> = hs.into_iter().collect();
        if status == 307 {
            url = hs.get("location")?.clone();
            continue;
        }
        return Some((status, hs, bytes));
    }
    None
}

/// Polls `f` every 50 ms until it returns `Some`, or panics with `what` after `secs`.
pub fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The node's metrics as JSON.
pub fn metrics(base: &str) -> serde_json::Value {
    let (status, _, body) =
        send_url("GET", &format!("{base}/__ursula/metrics"), &[], b"").expect("metrics");
    assert_eq!(status, 200);
    serde_json::from_slice(&body).expect("metrics json")
}

/// The number `key` of a node's metrics JSON, or a panic that shows the metrics.
#[track_caller]
pub fn counter(m: &serde_json::Value, key: &str) -> u64 {
    m[key]
        .as_u64()
        .unwrap_or_else(|| panic!("metrics lack {key}: {m}"))
}

/// Creates `path` through any node, retrying until a leader takes it.
pub fn create_when_led(bases: &[String], path: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if send(bases, 1, "PUT", path, &[], b"").is_some_and(|r| r.0 == 201 || r.0 == 200) {
            return;
        }
        assert!(Instant::now() < deadline, "no leader ever took the create");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Appends `count` producer-numbered records, retrying each seq until acknowledged, against
/// whichever node answers.
pub fn producer_load(
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

pub fn expected(count: u64) -> String {
    (0..count).map(|s| format!("p{s:06}|")).collect()
}

/// The whole stream as a client reads it: on from `Stream-Next-Offset` until a response says
/// `Stream-Up-To-Date` (a follower serves the bytes it holds without it; the leader says it).
pub fn read_all(bases: &[String], path: &str) -> String {
    let mut out = Vec::new();
    let mut offset = "-1".to_owned();
    for _ in 0..1000 {
        let (status, hs, body) = send(
            bases,
            0,
            "GET",
            &format!("{path}?offset={offset}"),
            &[],
            b"",
        )
        .expect("read");
        assert_eq!(status, 200);
        out.extend_from_slice(&body);
        if hs.get("stream-up-to-date").is_some_and(|v| v == "true") {
            return String::from_utf8(out).expect("utf8");
        }
        offset = hs.get("stream-next-offset").expect("next offset").clone();
    }
    panic!("{path} never read up to date");
}

/// A repeated create, to learn who leads: a follower answers 307 with the leader's URL, the
/// leader 200 (the create is idempotent).
pub fn agent_raw(base: &str, path: &str) -> (u16, String, ()) {
    match crate::http::request(&agent(), "PUT", &format!("{base}{path}"), &[], b"") {
        Ok((status, hs, _)) => {
            let loc = hs
                .into_iter()
                .find_map(|(k, v)| (k == "location").then_some(v))
                .unwrap_or_default();
            (status, loc, ())
        }
        Err(_) => (0, String::new(), ()),
    }
}

/// The bytes `base` holds itself of `path`: a read short of the tail is served locally, also
/// by a follower.
pub fn local_prefix(base: &str, path: &str, len: usize) -> Option<String> {
    let mut r = agent()
        .get(&format!("{base}{path}?offset=-1&max_bytes={len}"))
        .call()
        .ok()?;
    (r.status() == 200)
        .then(|| r.body_mut().read_to_string().ok())
        .flatten()
}

pub fn incarnation(n: &Proc) -> String {
    metrics(&n.base())["process_incarnation"]
        .as_str()
        .expect("incarnation")
        .to_owned()
}

/// An admin-plane call with the node's process incarnation; `(status, body)`.
pub fn admin(n: &Proc, method: &str, path: &str) -> (u16, String) {
    let inc = incarnation(n);
    admin_with(n, method, path, Some(&inc))
}

pub fn admin_with(n: &Proc, method: &str, path: &str, inc: Option<&str>) -> (u16, String) {
    let headers: Vec<(&str, &str)> = inc
        .map(|i| ("x-ursula-process-incarnation", i))
        .into_iter()
        .collect();
    let agent = crate::http::agent(Duration::from_secs(30));
    let (status, _, body) = crate::http::request(&agent, method, &n.admin_url(path), &headers, b"")
        .expect("admin call");
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Each group's leader, once every node sees every group led by the same node (4 groups, as
/// [`cluster_toml`] sets).
pub fn leaders(nodes: &[Proc]) -> Option<Vec<u64>> {
    let views: Vec<Vec<u64>> = nodes
        .iter()
        .map(|n| {
            metrics(&n.base())["raft_groups"]
                .as_array()?
                .iter()
                .map(|g| g["current_leader"].as_u64())
                .collect::<Option<Vec<u64>>>()
        })
        .collect::<Option<_>>()?;
    (views.iter().all(|v| v == &views[0]) && views[0].len() == 4).then(|| views[0].clone())
}

/// The node's leadership-shed state (`GET /__ursula/leadership-shed`).
pub fn shed_state(node: &Proc) -> serde_json::Value {
    let (status, v) = node.json("/__ursula/leadership-shed");
    assert_eq!(status, 200, "{v}");
    v
}

/// Asserts node 3 (`nodes[2]`) sheds with shed bits `bits`: it neither campaigns nor takes a
/// transfer, and a transfer of group 0 to it from node `leader` (1-based) is refused naming
/// `reason`.
pub fn assert_third_node_sheds(nodes: &[Proc], leader: u64, bits: u64, reason: &str) {
    let state = shed_state(&nodes[2]);
    assert_eq!(state["bits"], bits, "{state}");
    assert_eq!(state["should_campaign"], false, "{state}");
    assert_eq!(state["should_accept_transfer"], false, "{state}");
    let (status, body) = transfer_group_0_to_the_third(nodes, leader);
    assert_ne!(status, 200, "{body}");
    assert!(body.contains(reason), "{body}");
}

/// Waits until every group is led, then asserts node 3 (`nodes[2]`) takes a transfer of group
/// 0's leadership: it no longer sheds.
pub fn assert_third_node_takes_a_transfer(nodes: &[Proc]) {
    let leader = wait_for(30, "every group led", || leaders(nodes))[0];
    let (status, body) = transfer_group_0_to_the_third(nodes, leader);
    assert_eq!(status, 200, "{body}");
}

/// Asks node `leader` (1-based) to transfer group 0's leadership to node 3; `(status, body)`.
fn transfer_group_0_to_the_third(nodes: &[Proc], leader: u64) -> (u16, String) {
    admin(
        &nodes[leader as usize - 1],
        "POST",
        "/__ursula/raft/0/leader/transfer/3",
    )
}

/// Asserts the cluster takes a write to `path` through nodes 1 and 2.
pub fn assert_writable_through_the_first_two(nodes: &[Proc], path: &str) {
    let bases: Vec<String> = nodes.iter().take(2).map(Proc::base).collect();
    create_when_led(&bases, path);
    let answer = send_octets(&bases, 0, path, b"still writable");
    assert!(
        answer.as_ref().is_some_and(|a| a.0 == 200 || a.0 == 204),
        "{answer:?}"
    );
}

/// Transfers every group's leadership to node `to` (1-based) and waits until it leads them all.
pub fn lead_all_on(nodes: &[Proc], to: u64) {
    let led = wait_for(60, "every group led", || leaders(nodes));
    for (g, leader) in led.iter().enumerate() {
        if *leader != to {
            let (status, body) = admin(
                &nodes[*leader as usize - 1],
                "POST",
                &format!("/__ursula/raft/{g}/leader/transfer/{to}"),
            );
            assert_eq!(status, 200, "{body}");
        }
    }
    wait_for(30, "one node to lead every group", || {
        leaders(nodes).filter(|l| l.iter().all(|l| *l == to))
    });
}
