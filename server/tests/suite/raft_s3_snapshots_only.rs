//! Raft snapshots on S3 with the cold tier off (`storage.snapshot.backend = "s3"` and no
//! `storage.cold.backend`), against a real SeaweedFS: the snapshot namespace is the only thing
//! the cluster keeps in the bucket, it carries the format-epoch marker itself (a namespace of
//! foreign objects is refused at start), a wiped voter installs from it, and the store health
//! gate watches it.

use std::time::Duration;

use crate::harness::cluster::*;
use bytes::Bytes;
use ursula_cold::ColdStore;
use ursula_cold::testing::ACCESS_KEY_ID;
use ursula_cold::testing::BUCKET;
use ursula_cold::testing::SECRET_ACCESS_KEY;
use ursula_cold::testing::SeaweedFs;

/// `[storage.cold.s3]` on `weed` and S3 snapshots under `prefix`; no `[storage.cold]` at all.
fn snapshots_only_toml(weed: &SeaweedFs, prefix: &str) -> String {
    format!(
        "[storage.cold.s3]\nbucket = \"{BUCKET}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\
         access_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key = \"{SECRET_ACCESS_KEY}\"\n\
         server_side_encryption = \"aes256\"\ntimeout = \"1s\"\nmax_retries = 0\n\
         probe_timeout = \"200ms\"\nunhealthy_ticks = 1000\n\
         [storage.snapshot]\nbackend = \"s3\"\ns3_prefix = \"{prefix}\"\ndrive_interval = \"200ms\"\n",
        weed.endpoint()
    )
}

async fn snapshot_objects(ns: &ColdStore) -> Vec<String> {
    let mut keys: Vec<String> = ns
        .list("")
        .await
        .expect("list")
        .into_iter()
        .filter(|k| k.ends_with(".snap"))
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn a_namespace_of_foreign_objects_is_refused_when_only_snapshots_use_s3() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("s3-snaps-only-foreign");
    weed.store("theirs")
        .put("something.bin", Bytes::from_static(b"not ours"))
        .await
        .expect("plant");
    let args = single_node_args(
        &dir,
        free_port(),
        &format!(
            "[raft]\ngroup_count = 1\n{}",
            snapshots_only_toml(&weed, "theirs")
        ),
        "",
    );
    let stderr = refusal(&args);
    assert!(
        stderr.contains("is not empty and has no URSULA_FORMAT_EPOCH marker"),
        "{stderr}"
    );
    assert!(stderr.contains("/theirs"), "names the namespace: {stderr}");
    assert_eq!(
        weed.store("theirs").list("").await.expect("list"),
        ["something.bin"],
        "nothing written there"
    );
}

#[tokio::test]
async fn with_cold_storage_off_snapshots_live_in_their_own_namespace_and_a_wiped_voter_installs_from_it()
 {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("s3-snaps-only");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let extra = snapshots_only_toml(&weed, "c1snaps");
    let mut nodes: Vec<Proc> = (0..3)
        .map(|i| start_cluster_node_with(&dir, &ports, i, &extra))
        .collect();
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    let path = "/demo/snaps-only";
    create_when_led(&bases, path);
    producer_load(&bases, path, 0, 30, |_| {});
    for n in &nodes {
        for g in 0..4 {
            for verb in ["snapshot", "purge"] {
                let (status, body) = admin(n, "POST", &format!("/__ursula/raft/{g}/{verb}"));
                assert_eq!(status, 200, "{verb} {g}: {body}");
            }
        }
    }

    let ns = weed.store("c1snaps");
    assert!(
        ns.exists("URSULA_FORMAT_EPOCH").await.expect("exists"),
        "the namespace carries the marker itself"
    );
    let keys = snapshot_objects(&ns).await;
    for node in 1..=3 {
        assert!(
            (0..4).all(|g| keys
                .iter()
                .any(|k| k.starts_with(&format!("g{g}/n{node}/")))),
            "node {node} uploaded every group's snapshot: {keys:?}"
        );
        let m = metrics(&bases[node - 1]);
        assert_eq!(
            m["raft_snapshot_store"].as_str(),
            Some(format!("s3://{BUCKET}/c1snaps").as_str()),
            "{m}"
        );
        assert!(counter(&m, "raft_snapshot_s3_uploads") >= 4, "{m}");
    }
    // Only the namespace: no cold tier wrote anything to the bucket.
    let everything = weed.store("").list("").await.expect("list");
    assert!(
        everything.iter().all(|k| k.starts_with("c1snaps/")),
        "{everything:?}"
    );

    // Node 3 comes back wiped: its leaders' logs are purged, so it installs from the namespace.
    let wiped = 2;
    nodes[wiped].kill9();
    std::fs::remove_dir_all(cluster_wal(&dir, wiped)).expect("wipe");
    producer_load(&bases[..wiped], path, 30, 5, |_| {});
    nodes[wiped].spawn();
    let all = expected(35);
    wait_for(90, "node 3 to catch up from the namespace", || {
        (local_prefix(&bases[wiped], path, all.len()).as_deref() == Some(all.as_str()))
            .then_some(())
    });
    let m = metrics(&bases[wiped]);
    assert!(counter(&m, "raft_snapshot_s3_installs") >= 1, "{m}");
    assert_eq!(counter(&m, "raft_snapshot_builds"), 0, "it built none: {m}");

    // The health gate watches this store: frozen, its probes miss their deadline.
    weed.freeze();
    wait_for(30, "a bad health tick on every node", || {
        nodes
            .iter()
            .all(|n| n.log_text().contains("snapshot store health tick is bad"))
            .then_some(())
    });
    weed.thaw();
    std::thread::sleep(Duration::from_millis(500));
    producer_load(&bases, path, 35, 5, |_| {});
    assert_eq!(read_all(&bases, path), expected(40));
    drop(nodes);
}
