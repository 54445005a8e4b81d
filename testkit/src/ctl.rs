//! What the tests that run the real `ursulactl` against a real 3-voter cluster share: finding
//! and running the binary, and the cluster with its manifest.
//!
//! `ursulactl` belongs to another package: it is looked up beside the test binary
//! (`target/<profile>/ursulactl`), which `cargo build -p ursula-ctl` puts there.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::process::Stdio;

use crate::cluster::*;

/// The groups every test cluster runs (`cluster::cluster_toml`).
pub const GROUPS: u64 = 4;

pub use crate::bins::ursulactl;

/// Runs `ursulactl`; exit code, stdout, stderr.
pub fn ctl(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(ursulactl())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ursulactl");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `ursulactl`, requiring `code`; returns stdout.
pub fn ctl_expect(code: i32, args: &[&str]) -> String {
    let (got, out, err) = ctl(args);
    assert_eq!(
        got,
        Some(code),
        "ursulactl {args:?}\nstdout: {out}\nstderr: {err}"
    );
    out
}

/// Runs `ursulactl`, requiring the safe abort (exit code 2); returns stderr.
pub fn ctl_refused(args: &[&str]) -> String {
    let (got, out, err) = ctl(args);
    assert_eq!(
        got,
        Some(2),
        "ursulactl {args:?}\nstdout: {out}\nstderr: {err}"
    );
    err
}

/// Writes `text` as `dir/name` and answers its path.
pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("manifest");
    path.display().to_string()
}

/// A manifest of `nodes`: metrics from the client plane, mutations on the admin plane.
pub fn write_manifest(dir: &Path, name: &str, nodes: &[Proc]) -> String {
    let entries: Vec<String> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!(
                r#"{{"id": {}, "http_url": "{}", "admin_url": "http://127.0.0.1:{}"}}"#,
                i + 1,
                n.base(),
                n.admin_port
            )
        })
        .collect();
    write(
        dir,
        name,
        &format!(r#"{{"nodes": [{}]}}"#, entries.join(", ")),
    )
}

/// A running 3-voter cluster and its manifest. Fields drop in order: the nodes are killed
/// before their directory goes.
pub struct Cluster {
    pub nodes: Vec<Proc>,
    pub manifest: String,
    pub dir: Scratch,
}

impl Cluster {
    pub fn start(name: &str) -> Cluster {
        let dir = tempfile_dir(name);
        let (_, nodes, _) = start_cluster(&dir, 3, 3);
        let manifest = write_manifest(&dir, "cluster.json", &nodes);
        let c = Cluster {
            nodes,
            manifest,
            dir,
        };
        c.wait_led();
        c
    }

    /// `ursulactl VERB --config <manifest> ARGS`, requiring exit code 0; returns stdout.
    pub fn verb(&self, verb: &str, args: &[&str]) -> String {
        ctl_expect(0, &self.verb_args(verb, args))
    }

    /// `ursulactl VERB --config <manifest> ARGS`, requiring the safe abort (exit code 2);
    /// returns stderr.
    pub fn verb_refused(&self, verb: &str, args: &[&str]) -> String {
        ctl_refused(&self.verb_args(verb, args))
    }

    fn verb_args<'a>(&'a self, verb: &'a str, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec![verb, "--config", &self.manifest];
        all.extend_from_slice(args);
        all
    }

    /// Node `id`'s metrics.
    pub fn metrics(&self, id: u64) -> serde_json::Value {
        metrics(&self.nodes[(id - 1) as usize].base())
    }

    /// Waits until every node names a leader for every group.
    pub fn wait_led(&self) {
        wait_for(60, "every group led on every node", || {
            self.nodes
                .iter()
                .all(|n| {
                    let m = metrics(&n.base());
                    let groups = m["raft_groups"].as_array().cloned().unwrap_or_default();
                    groups.len() as u64 == GROUPS
                        && groups.iter().all(|g| g["current_leader"].is_u64())
                })
                .then_some(())
        });
    }

    /// The groups node `id` leads by its own metrics.
    pub fn led_by(&self, id: u64) -> Vec<u64> {
        self.metrics(id)["raft_groups"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter(|g| g["current_leader"] == id)
            .filter_map(|g| g["raft_group_id"].as_u64())
            .collect()
    }

    pub fn incarnation(&self, id: u64) -> String {
        self.metrics(id)["process_incarnation"]
            .as_str()
            .expect("process_incarnation")
            .to_owned()
    }

    /// Restarts node `id` (SIGTERM, then the same WAL and ports).
    pub fn restart(&mut self, id: u64) {
        let n = &mut self.nodes[(id - 1) as usize];
        n.sigterm();
        n.spawn();
    }
}
