//! `ursulactl backup-create`, `backup-verify` and `restore` against real 3-voter clusters of
//! `ursula` processes: a backup restores into a fresh cluster with every stream as it was, and
//! every refusal `restore` makes before its first import leaves the target empty (a corrupted
//! backup, another group count, nodes of two clusters in one manifest); a second restore stops
//! at the first group that holds data. The cold-store check is in the drill
//! (`vfs-tests/tests/backup_drill.rs`), which runs on the S3 cold tier.

use crate::harness::cluster::*;
use crate::harness::ctl::*;

fn octet() -> [(&'static str, String); 1] {
    [("content-type", "application/octet-stream".to_owned())]
}

/// The usage document's buckets on `base`: empty for a cluster nothing was imported into.
fn buckets(base: &str) -> serde_json::Value {
    let (status, _, body) =
        send_url("GET", &format!("{base}/__ursula/usage"), &[], b"").expect("usage");
    assert_eq!(status, 200);
    serde_json::from_slice::<serde_json::Value>(&body).expect("json")["buckets"].clone()
}

/// A single node of `groups` groups and its manifest.
fn lone_node(dir: &std::path::Path, groups: u32) -> (Proc, String) {
    let port = free_port();
    let d = dir.join(format!("lone-{groups}"));
    std::fs::create_dir_all(&d).expect("dir");
    let node = Proc::start(
        port,
        single_node_args(&d, port, &format!("[raft]\ngroup_count = {groups}\n"), ""),
        d.join("node.log"),
    );
    let manifest = write_manifest(&d, "lone.json", std::slice::from_ref(&node));
    (node, manifest)
}

#[test]
fn a_backup_restores_into_a_fresh_cluster_and_every_refusal_before_the_first_import_leaves_it_empty()
 {
    let source = Cluster::start("ctl-backup-src");
    let bases: Vec<String> = source.nodes.iter().map(Proc::base).collect();
    let mut expected = Vec::new();
    for i in 0..8 {
        let path = format!("/demo/s{i}");
        let body = vec![b'a' + i as u8; 500 + i * 100];
        let (status, _, _) = send(&bases, 0, "PUT", &path, &octet(), &body).expect("create");
        assert_eq!(status, 201, "{path}");
        expected.push((path, body));
    }
    let dir = source.dir.join("backup");
    let location = dir.display().to_string();
    let out = ctl_expect(
        0,
        &[
            "backup-create",
            "--config",
            &source.manifest,
            "--location",
            &location,
        ],
    );
    assert!(out.contains("4 groups"), "{out}");
    ctl_expect(0, &["backup-verify", "--location", &location]);

    // Nodes of two clusters in one manifest: no backup.
    let (_lone, lone_manifest) = lone_node(&source.dir, 2);
    let text = |p: &str| std::fs::read_to_string(p).expect("manifest");
    let mut m: serde_json::Value = serde_json::from_str(&text(&lone_manifest)).expect("json");
    let src: serde_json::Value = serde_json::from_str(&text(&source.manifest)).expect("json");
    let mut first = src["nodes"][0].clone();
    first["id"] = 2.into();
    m["nodes"].as_array_mut().expect("nodes").push(first);
    let mixed = write(&source.dir, "mixed.json", &m.to_string());
    let elsewhere = source.dir.join("mixed-backup").display().to_string();
    // `backup-create` refuses the mixed manifest, and a restore to a target of another group
    // count refuses before the first import.
    for (verb, config, to) in [
        ("backup-create", &mixed, &elsewhere),
        ("restore", &lone_manifest, &location),
    ] {
        let (code, _, err) = ctl(&[verb, "--config", config, "--location", to]);
        assert_eq!(code, Some(1), "{verb}: {err}");
        assert!(
            err.contains('2') && err.contains('4'),
            "{verb} names both counts: {err}"
        );
    }

    let target = Cluster::start("ctl-backup-dst");
    let tbases: Vec<String> = target.nodes.iter().map(Proc::base).collect();
    // A corrupted copy of the backup fails verification, and nothing reaches the target.
    let bad = source.dir.join("corrupted");
    std::fs::create_dir_all(bad.join("groups")).expect("dir");
    std::fs::copy(dir.join("manifest.json"), bad.join("manifest.json")).expect("copy");
    for g in 0..GROUPS {
        let name = format!("groups/group-{g:05}.msgpack");
        let mut bytes = std::fs::read(dir.join(&name)).expect("object");
        if g == 1 {
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x40;
        }
        std::fs::write(bad.join(&name), bytes).expect("write");
    }
    let bad = bad.display().to_string();
    let (code, _, err) = ctl(&["restore", "--config", &target.manifest, "--location", &bad]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("blake3"), "names the check: {err}");
    assert_eq!(
        buckets(&tbases[0]),
        serde_json::json!({}),
        "nothing imported"
    );

    // The restore itself: every stream as it was.
    let out = ctl_expect(
        0,
        &[
            "restore",
            "--config",
            &target.manifest,
            "--location",
            &location,
        ],
    );
    assert!(
        out.contains("8 streams") || out.contains("streams"),
        "{out}"
    );
    for (path, body) in &expected {
        let (status, _, got) =
            send(&tbases, 1, "GET", &format!("{path}?offset=-1"), &[], b"").expect("read");
        assert_eq!(status, 200, "{path}");
        assert_eq!(&got, body, "{path}");
        let a = send(&bases, 0, "HEAD", path, &[], b"").expect("head source");
        let b = send(&tbases, 0, "HEAD", path, &[], b"").expect("head target");
        for k in ["stream-next-offset", "stream-incarnation"] {
            assert_eq!(a.1.get(k), b.1.get(k), "{path} {k}");
        }
    }
    // Appends continue on the restored cluster.
    let (status, _, _) = send(&tbases, 2, "POST", "/demo/s0", &octet(), b"more").expect("append");
    assert_eq!(status, 204);
    // A second restore finds groups holding data and stops there.
    let (code, _, err) = ctl(&[
        "restore",
        "--config",
        &target.manifest,
        "--location",
        &location,
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("409") || err.contains("already holds"),
        "{err}"
    );
}
