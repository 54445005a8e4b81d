//! A 3-voter Raft cluster of the real `ursula` binary on loopback ports, with `ursula gateway`
//! in front of it: the stream URL a SQLite owner uses reaches the stream's leader by itself,
//! whichever node leads. The nodes, the gateway, the peer list and the manifest are the
//! workspace harness's (`ursula_testkit`); this adds a node config of the test's own (a durable
//! journal, a cold tier) and the log tails a failing test prints.

use std::path::PathBuf;
use std::time::Duration;

use ursula_testkit::cluster::Proc;
use ursula_testkit::cluster::cluster_node_args;
use ursula_testkit::cluster::cluster_wal;
use ursula_testkit::cluster::leaders;
use ursula_testkit::cluster::wait_for;
use ursula_testkit::scratch::Scratch;

/// Fields drop in order: the processes are gone before their directory.
pub struct Cluster {
    nodes: Vec<Proc>,
    gateway: ursula_testkit::gateway::Proc,
    dir: Scratch,
}

/// How [`Cluster::start_with`] runs the nodes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `raft.wal.fsync = "always"`.
    pub fsync_always: bool,
    /// More of each node's TOML (a `[storage.cold]` section, say).
    pub extra_toml: String,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_with(Options::default())
    }

    /// A cluster an operator drains and restarts: durable journals.
    pub fn start_operable() -> Cluster {
        Cluster::start_with(Options {
            fsync_always: true,
            extra_toml: String::new(),
        })
    }

    /// Every node has an admin plane of its own and logs to the cluster's directory.
    pub fn start_with(opts: Options) -> Cluster {
        let dir = Scratch::new("vfs-cluster");
        let ports: Vec<u16> = (0..3).map(|_| crate::free_port()).collect();
        let nodes: Vec<Proc> = (0..3)
            .map(|i| {
                // The harness's node: the shared peer list and peer secret (without it a
                // follower cannot forward operator commands, purge and restore, to the leader)
                // and a WAL of its own.
                let args = cluster_node_args(&dir, &ports, i);
                add_to_config(&args, &opts);
                let env = vec![("NO_COLOR".to_owned(), "1".to_owned())];
                Proc::start_with_env(ports[i], args, env, dir.join(format!("n{}.log", i + 1)))
            })
            .collect();
        let upstreams: Vec<String> = nodes.iter().map(Proc::base).collect();
        let gateway = ursula_testkit::gateway::gateway(&dir, "gateway", &upstreams, &[]);
        let c = Cluster {
            nodes,
            gateway,
            dir,
        };
        // Ready once every group of the first node has a leader.
        c.nodes[0].wait_ready_until(Duration::from_secs(30), |status, _| status == 200);
        c
    }

    /// Node `i` (0-based).
    pub fn node(&self, i: usize) -> &Proc {
        &self.nodes[i]
    }

    /// Node `i`'s WAL directory (0-based).
    pub fn wal_dir(&self, i: usize) -> PathBuf {
        cluster_wal(&self.dir, i)
    }

    /// Node `i`'s log.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.nodes[i].log.clone()
    }

    /// The node's own client URL (not the gateway).
    pub fn node_base(&self, i: usize) -> String {
        self.nodes[i].base()
    }

    /// An `ursulactl` manifest of the cluster (JSON): metrics from the client planes,
    /// mutations on the admin planes.
    pub fn manifest(&self) -> String {
        ursula_testkit::ctl::write_manifest(&self.dir, "manifest.json", &self.nodes)
    }

    /// Starts node `i` again on its WAL.
    pub fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].child.is_none(), "node {} still runs", i + 1);
        self.nodes[i].spawn();
    }

    /// Stops node `i` with SIGTERM and waits for it to exit; `true` for a clean exit.
    pub fn sigterm(&mut self, i: usize) -> bool {
        self.nodes[i].sigterm().success()
    }

    /// The base URL clients use: the gateway.
    pub fn base(&self) -> String {
        self.gateway.base()
    }

    /// The node that leads the most groups (after start, the initializing node leads them all),
    /// once every node names the same leader for every group.
    pub fn leader(&self) -> Option<usize> {
        let led = wait_for(30, "every group led", || leaders(&self.nodes));
        let most = (1..=3u64).max_by_key(|id| led.iter().filter(|l| **l == *id).count())?;
        Some(most as usize - 1)
    }

    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill9();
    }
}

/// Adds `opts` to the config file the node's `args` name: `fsync` in its `[raft.wal]` table,
/// and the extra tables at its end.
fn add_to_config(args: &[String], opts: &Options) {
    if !opts.fsync_always && opts.extra_toml.is_empty() {
        return;
    }
    let config = args
        .iter()
        .skip_while(|a| *a != "--config")
        .nth(1)
        .expect("a node config");
    let toml = std::fs::read_to_string(config).expect("node config");
    assert!(toml.contains("[raft.wal]\n"), "no [raft.wal] in {toml}");
    let fsync = if opts.fsync_always {
        "[raft.wal]\nfsync = \"always\"\n"
    } else {
        "[raft.wal]\n"
    };
    let toml = toml.replacen("[raft.wal]\n", fsync, 1);
    std::fs::write(config, format!("{toml}{}", opts.extra_toml)).expect("node config");
}

/// Lines of each node's log a failing test prints: enough to cover a drain, a stop and a
/// restart, so a failure seen once in CI can be read afterwards (the whole logs stay in the
/// scratch directory, kept when the test fails).
const LOG_TAIL_ON_FAILURE: usize = 150;

impl Drop for Cluster {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let log = node.log_text();
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
