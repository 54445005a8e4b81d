//! `backup-create` and `restore` against scripted stand-ins of the nodes' admin plane
//! (`harness::stub`), only for answers a node of this build cannot be made to give: exports of
//! one group at different commit indexes on different nodes at once (which one is kept),
//! a cluster of another backup format, and a group that has no leader for a moment (retried).
//! Everything else runs against real clusters: `ctl/tests/suite/ursulactl_backup.rs` and the
//! drill in `vfs-tests/tests/backup_drill.rs`.

use std::sync::Arc;
use std::sync::Mutex;

use crate::harness::backup::*;
use crate::harness::stub::StubNode;
use crate::harness::stub::group_of;
use crate::harness::stub::info;
use crate::harness::stub::manifest;
use ursula_ctl::location::Location;
use ursula_state::backup::ColdCheck;
use ursula_state::backup::GroupObject;
use ursula_state::backup::Imported;
use ursula_state::backup::MANIFEST;
use ursula_state::backup::Manifest;
use ursula_state::backup::object_key;

/// Group `g`'s export by `node` at `commit`, holding `streams` streams.
fn export(g: u32, count: u32, commit: u64, node: u64, streams: usize) -> Vec<u8> {
    GroupObject::capture(
        g,
        count,
        commit,
        node,
        crate::harness::backup::CAPTURED_MS,
        &state(streams),
    )
    .expect("capture")
    .encode()
    .expect("encode")
}

/// A node of a `count`-group cluster speaking `format`, exporting group `g` at `commits[g]`.
fn exporter(id: u64, format: u32, count: u32, commits: Vec<u64>) -> StubNode {
    StubNode::start(id, move |r| {
        if r.path == "/__ursula/backup/info" {
            return info(format, count, id);
        }
        match (r.method.as_str(), group_of(&r.path)) {
            ("GET", Some(g)) if g < count => (
                200,
                export(g, count, commits[g as usize], id, g as usize + 1),
            ),
            _ => (404, b"no route".to_vec()),
        }
    })
}

fn read_manifest(dir: &std::path::Path) -> Manifest {
    serde_json::from_slice(&std::fs::read(dir.join(MANIFEST)).expect("manifest")).expect("json")
}

#[test]
fn backup_create_keeps_the_freshest_export_of_each_group_and_writes_a_verifiable_backup() {
    let a = exporter(1, 3, 2, vec![5, 8]);
    let b = exporter(2, 3, 2, vec![9, 2]);
    let c = exporter(3, 3, 2, vec![7, 8]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = manifest(tmp.path(), &[&a, &b, &c]);
    let dir = tmp.path().join("backup");
    let spec = dir.display().to_string();
    let (code, out, err) = ctl(
        &[
            "backup-create",
            "--config",
            &config,
            "--location",
            &spec,
            "--created-unix-ms",
            "1234",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    let m = read_manifest(&dir);
    assert_eq!(
        (m.format_version, m.created_unix_ms, m.raft_group_count),
        (3, 1234, 2)
    );
    // Group 0: node 2's (commit 9). Group 1: a tie at 8, the first in manifest order.
    let picked: Vec<(u32, u64, u64, u64)> = m
        .groups
        .iter()
        .map(|g| {
            (
                g.raft_group_id,
                g.commit_index,
                g.source_node_id,
                g.stream_count,
            )
        })
        .collect();
    assert_eq!(picked, vec![(0, 9, 2, 1), (1, 8, 1, 2)]);
    // The chosen node's bytes, verbatim.
    let written = std::fs::read(dir.join(object_key(0))).expect("object");
    let obj = GroupObject::decode(&written).expect("decode");
    assert_eq!((obj.source_node_id, obj.commit_index), (2, 9));
    assert_eq!(
        m.groups[0].blake3,
        blake3::hash(&written).to_hex().to_string()
    );
    let bytes: u64 = m.groups.iter().map(|g| g.size).sum();
    assert_eq!(
        out.trim(),
        format!("backup-create: 2 groups, {bytes} bytes, 3 streams written to {spec}")
    );
    // Every request carried the process the stub's metrics named.
    for n in [&a, &b, &c] {
        for r in n
            .requests()
            .iter()
            .filter(|r| r.path != "/__ursula/metrics")
        {
            assert_eq!(
                r.header("x-ursula-process-incarnation"),
                Some(n.incarnation.as_str())
            );
        }
    }
    let (code, out, err) = ctl(&["backup-verify", "--location", &spec], &[]);
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
}

#[test]
fn backup_create_refuses_a_cluster_of_another_backup_format_and_writes_nothing() {
    let a = exporter(1, 3, 2, vec![1, 1]);
    let b = exporter(2, 4, 2, vec![1, 1]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = manifest(tmp.path(), &[&a, &b]);
    let dir = tmp.path().join("backup");
    let (code, _, err) = ctl(
        &[
            "backup-create",
            "--config",
            &config,
            "--location",
            &dir.display().to_string(),
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("target cluster speaks backup format 4"),
        "{err}"
    );
    assert!(!dir.exists());
    assert!(a.calls().iter().all(|c| c == "GET /__ursula/backup/info"));
}

/// What a restore target answers.
struct Target {
    format: u32,
    count: u32,
    /// Missing cold keys per group.
    missing: Vec<Vec<String>>,
    /// The import status of each group (200 unless listed).
    import_status: Vec<(u32, u16)>,
}

fn target(id: u64, t: Target) -> StubNode {
    let t = Arc::new(t);
    StubNode::start(id, move |r| {
        if r.path == "/__ursula/backup/info" {
            return info(t.format, t.count, id);
        }
        let Some(g) = group_of(&r.path) else {
            return (404, b"no route".to_vec());
        };
        // The body is the group's object, as the server reads it.
        let obj = GroupObject::decode(&r.body).expect("a group object body");
        assert_eq!(obj.raft_group_id, g);
        if r.path.ends_with("/cold-check") {
            let missing = t.missing.get(g as usize).cloned().unwrap_or_default();
            let c = ColdCheck {
                raft_group_id: g,
                checked: 4,
                missing_count: missing.len() as u64,
                missing,
            };
            return (200, serde_json::to_vec(&c).expect("json"));
        }
        if r.path.ends_with("/import") {
            let status = t
                .import_status
                .iter()
                .find(|(x, _)| *x == g)
                .map_or(200, |(_, s)| *s);
            if status != 200 {
                return (status, b"group already holds streams".to_vec());
            }
            let streams = obj.open(g, t.count).expect("open").len() as u64;
            let i = Imported {
                raft_group_id: g,
                streams,
            };
            return (200, serde_json::to_vec(&i).expect("json"));
        }
        (404, b"no route".to_vec())
    })
}

fn plain(count: u32) -> Target {
    Target {
        format: 3,
        count,
        missing: Vec::new(),
        import_status: Vec::new(),
    }
}

/// A good 3-group backup in a fresh directory, and a manifest of `nodes`.
fn setup(nodes: &[&StubNode]) -> (tempfile::TempDir, String, String) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let spec = tmp.path().join("backup").display().to_string();
    write_backup(&Location::open(&spec).expect("location"), 3);
    let config = manifest(tmp.path(), nodes);
    (tmp, spec, config)
}

fn restore(config: &str, spec: &str) -> (Option<i32>, String, String) {
    ctl(&["restore", "--config", config, "--location", spec], &[])
}

fn posts(n: &StubNode) -> Vec<String> {
    n.calls()
        .into_iter()
        .filter(|c| c.starts_with("POST"))
        .collect()
}

#[test]
fn restore_refuses_a_target_of_another_backup_format_before_any_import() {
    let a = target(
        1,
        Target {
            format: 2,
            ..plain(3)
        },
    );
    let (_tmp, spec, config) = setup(&[&a]);
    let (code, _, err) = restore(&config, &spec);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("target cluster speaks backup format 2"),
        "{err}"
    );
    assert!(posts(&a).is_empty());
}

#[test]
fn restore_retries_a_group_without_a_leader_then_imports_it() {
    let tries = Arc::new(Mutex::new(0u32));
    let t = tries.clone();
    // Group 0's import answers 503 twice before it is taken.
    let a = StubNode::start(1, move |r| {
        if r.path == "/__ursula/backup/info" {
            return info(3, 3, 1);
        }
        let g = group_of(&r.path).unwrap_or(99);
        if r.path.ends_with("/cold-check") {
            let c = ColdCheck {
                raft_group_id: g,
                checked: 0,
                missing_count: 0,
                missing: Vec::new(),
            };
            return (200, serde_json::to_vec(&c).expect("json"));
        }
        if g == 0 {
            let mut n = t.lock().expect("tries");
            *n += 1;
            if *n <= 2 {
                return (503, b"no leader known".to_vec());
            }
        }
        let i = Imported {
            raft_group_id: g,
            streams: 1,
        };
        (200, serde_json::to_vec(&i).expect("json"))
    });
    let (_tmp, spec, config) = setup(&[&a]);
    let (code, out, err) = restore(&config, &spec);
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert_eq!(*tries.lock().expect("tries"), 3);
    assert!(out.contains(" 3 streams imported"), "{out}");
}
