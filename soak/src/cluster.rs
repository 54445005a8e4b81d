//! The cluster under soak: SeaweedFS and three durable voters whose cold tier and Raft
//! snapshots live in it, with every wait the spec measures in hours or days shortened so a
//! month of collection happens within the run; their faults; and what can be measured of them
//! from outside (metrics, resident memory, the bucket's objects).

use std::time::Duration;

use ursula_cold::testing::ACCESS_KEY_ID;
use ursula_cold::testing::BUCKET;
use ursula_cold::testing::SECRET_ACCESS_KEY;
use ursula_cold::testing::SeaweedFs;
use ursula_testkit::cluster::Proc;
use ursula_testkit::cluster::admin;
use ursula_testkit::cluster::cluster_wal;
use ursula_testkit::cluster::metrics;
use ursula_testkit::cluster::node_args;
use ursula_testkit::cluster::peer_entries;
use ursula_testkit::cluster::peer_secret_line;
use ursula_testkit::ports::free_port;
use ursula_testkit::scratch::Scratch;

/// The cold root in the bucket; S3 snapshots go under `{ROOT}/snapshots`.
pub const ROOT: &str = "soak";

pub struct SoakCluster {
    pub weed: SeaweedFs,
    pub nodes: Vec<Proc>,
    pub dir: Scratch,
}

/// One node's figures at a sample.
#[derive(Debug, Clone, Default)]
pub struct NodeSample {
    pub rss_bytes: u64,
    pub state_max: u64,
    pub state_p99: u64,
    pub orphans_found: u64,
    pub orphans_deleted: u64,
    pub staged: u64,
}

/// The bucket at a sample: stream data (chunks, pages, staged payloads, snapshot bodies) and
/// the Raft snapshot namespace apart.
#[derive(Debug, Clone, Default)]
pub struct BucketSample {
    pub objects: u64,
    pub bytes: u64,
    pub raft_snapshots: u64,
    pub raft_snapshot_max: u64,
}

impl SoakCluster {
    pub async fn start(dir: Scratch, log_budget: &str) -> SoakCluster {
        let weed = SeaweedFs::start().await;
        let toml = format!(
            "[storage.cold]\nbackend = \"s3\"\nroot = \"{ROOT}\"\nflush_interval = \"200ms\"\n\
             gc_grace = \"5s\"\norphan_min_age = \"60s\"\norphan_sweep_interval = \"20s\"\n\
             [storage.cold.s3]\nbucket = \"{BUCKET}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\
             access_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key = \"{SECRET_ACCESS_KEY}\"\n\
             [testing]\nsnapshot_prune_grace = \"10s\"\nsnapshot_prune_interval = \"5s\"\n",
            weed.endpoint()
        );
        let ports = [free_port(), free_port(), free_port()];
        let shared = format!(
            "[raft]\ngroup_count = 8\ninit_membership_per_group = true\n\
             snapshot_log_budget = \"{log_budget}\"\n{}{}",
            peer_secret_line(dir.path()),
            peer_entries(&ports)
        );
        let nodes = (0..3)
            .map(|i| {
                let wal = cluster_wal(dir.path(), i);
                let own = dir.path().join(format!("n{}.toml", i + 1));
                let text = format!("{shared}[raft.wal]\npath = \"{}\"\n{toml}", wal.display());
                std::fs::create_dir_all(&wal).expect("the node's WAL directory");
                std::fs::write(&own, text).expect("the node's config");
                let log = dir.path().join(format!("n{}.log", i + 1));
                Proc::start(ports[i], node_args(&own, i, ports[i]), log)
            })
            .collect();
        SoakCluster { weed, nodes, dir }
    }

    pub fn bases(&self) -> Vec<String> {
        self.nodes.iter().map(Proc::base).collect()
    }

    /// SIGKILLs node `i` and starts it again on its WAL after `down`.
    pub fn kill(&mut self, i: usize, down: Duration) {
        self.nodes[i].kill9();
        std::thread::sleep(down);
        self.nodes[i].respawn_ready();
    }

    /// Stops node `i` gracefully (it hands its leaderships off) and starts it again.
    pub fn restart(&mut self, i: usize) {
        let _ = self.nodes[i].sigterm();
        self.nodes[i].respawn_ready();
    }

    /// Purges `bucket` through node `i`'s admin listener; the status and body.
    pub fn purge(&self, i: usize, bucket: &str) -> (u16, String) {
        admin(
            &self.nodes[i],
            "DELETE",
            &format!("/__ursula/purge/{bucket}"),
        )
    }

    pub fn sample_nodes(&self) -> Vec<NodeSample> {
        self.nodes
            .iter()
            .map(|n| {
                let m = metrics(&n.base());
                let gauges = m["group_state_gauges"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let most = |k: &str| {
                    gauges
                        .iter()
                        .filter_map(|g| g[k].as_u64())
                        .max()
                        .unwrap_or(0)
                };
                let int = |k: &str| m[k].as_u64().unwrap_or(0);
                NodeSample {
                    rss_bytes: rss_bytes(n.pid()),
                    state_max: most("stream_state_bytes_max"),
                    state_p99: most("stream_state_bytes_p99"),
                    orphans_found: int("cold_orphans_found"),
                    orphans_deleted: int("cold_orphans_deleted"),
                    staged: int("cold_external_payloads_staged"),
                }
            })
            .collect()
    }

    pub async fn sample_bucket(&self) -> BucketSample {
        let listed = self
            .weed
            .store(ROOT)
            .list_objects("")
            .await
            .unwrap_or_default();
        let mut s = BucketSample::default();
        for o in listed {
            if o.key.starts_with("snapshots/") {
                if o.key.ends_with(".snap") {
                    s.raft_snapshots += 1;
                    s.raft_snapshot_max = s.raft_snapshot_max.max(o.size);
                }
            } else if o.key != "URSULA_FORMAT_EPOCH" {
                s.objects += 1;
                s.bytes += o.size;
            }
        }
        s
    }
}

/// The resident set of process `pid` (`VmRSS` of `/proc/<pid>/status`); 0 when unreadable.
fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
