//! Raft snapshots on S3 (a real SeaweedFS): with the cold tier on S3 a snapshot's state is an
//! object of the snapshot namespace and the WAL directory keeps only a reference; a wiped voter
//! installs from the namespace; a restarted node reads its state back from it; a damaged
//! object or a store that is down refuses the install (never served) until a good one comes;
//! the leader prunes what no member pins after the grace while the orphan sweep leaves the
//! namespace alone; and a namespace of its own carries a format-epoch marker.

use std::path::Path;
use std::time::Duration;

use crate::cold_tier::cold_toml;
use crate::harness::cluster::*;
use bytes::Bytes;
use ursula_cold::ColdStore;
use ursula_cold::testing::SeaweedFs;

/// A single durable node from `toml` in `dir`, with the stream `path` created.
fn node_with_stream(dir: &Path, toml: &str, path: &str) -> (Proc, Vec<String>) {
    let node = start_single_node(dir, toml, "");
    let bases = vec![node.base()];
    assert_eq!(
        send(&bases, 0, "PUT", path, &[], b"").map(|r| r.0),
        Some(201)
    );
    (node, bases)
}

/// Snapshots and purges every group on every node, so no log holds what came before.
fn snapshot_everything(nodes: &[Proc], groups: u32) {
    for n in nodes {
        for g in 0..groups {
            let (status, body) = admin(n, "POST", &format!("/__ursula/raft/{g}/snapshot"));
            assert_eq!(status, 200, "{body}");
            let (status, body) = admin(n, "POST", &format!("/__ursula/raft/{g}/purge"));
            assert_eq!(status, 200, "{body}");
        }
    }
}

/// The snapshot files of a WAL directory.
fn snapshot_files(wal: &Path) -> Vec<Vec<u8>> {
    std::fs::read_dir(wal.join("snapshots"))
        .expect("snapshot dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".snap"))
        .map(|e| std::fs::read(e.path()).expect("read"))
        .collect()
}

/// The snapshot objects of the namespace (keys relative to it).
async fn objects(ns: &ColdStore) -> Vec<String> {
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

/// Waits until the pruning left one snapshot object in the namespace, or panics after 30 s.
async fn wait_pruned_to_one(ns: &ColdStore) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while objects(ns).await.len() > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "retired objects stayed: {:?}",
            objects(ns).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Flips one byte in the middle of every snapshot object: the length stays, the checksum fails.
async fn damage_every_object(ns: &ColdStore) -> usize {
    let keys = objects(ns).await;
    for k in &keys {
        let mut body = ns.get(k).await.expect("get").to_vec();
        let mid = body.len() / 2;
        body[mid] ^= 0x5a;
        ns.put(k, Bytes::from(body)).await.expect("put");
    }
    keys.len()
}

#[tokio::test]
async fn a_wiped_voter_installs_from_the_namespace_and_a_damaged_or_unreachable_object_is_refused()
{
    let mut weed = SeaweedFs::start().await;
    let dir = tempfile_dir("s3-snapshots");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let cold = cold_toml(&weed, "s3snaps", "");
    let mut nodes: Vec<Proc> = (0..3)
        .map(|i| start_cluster_node_with(&dir, &ports, i, &cold))
        .collect();
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    let path = "/demo/s3snap";
    create_when_led(&bases, path);
    producer_load(&bases, path, 0, 30, |_| {});
    snapshot_everything(&nodes, 4);

    let ns = weed.store("s3snaps/snapshots");
    let keys = objects(&ns).await;
    for node in 1..=3 {
        for g in 0..4 {
            let prefix = format!("g{g}/n{node}/");
            assert!(
                keys.iter().any(|k| k.starts_with(&prefix)),
                "node {node} uploaded group {g}'s snapshot: {keys:?}"
            );
        }
        assert!(
            ns.exists(&format!("refs/n{node}")).await.expect("exists"),
            "node {node} published its pins"
        );
        let m = metrics(&bases[node - 1]);
        assert!(counter(&m, "raft_snapshot_s3_uploads") >= 4, "{m}");
        assert_eq!(
            m["raft_snapshot_store"].as_str(),
            Some(format!("s3://{}/s3snaps/snapshots", ursula_cold::testing::BUCKET).as_str()),
            "{m}"
        );
        // The WAL directory keeps references, not states.
        for file in snapshot_files(&cluster_wal(&dir, node - 1)) {
            assert!(file.len() < 1024, "a snapshot file of {} bytes", file.len());
            assert!(file.windows(4).any(|w| w == b"URSR"), "a reference inside");
        }
    }

    // Node 3 comes back wiped while every object its leaders name is damaged: it refuses each
    // install and serves nothing of the stream.
    let wiped = 2;
    nodes[wiped].kill9();
    std::fs::remove_dir_all(cluster_wal(&dir, wiped)).expect("wipe");
    producer_load(&bases[..wiped], path, 30, 5, |_| {});
    assert!(damage_every_object(&ns).await >= 8);
    nodes[wiped].spawn();
    wait_for(60, "node 3 to refuse a damaged snapshot object", || {
        (counter(&metrics(&bases[wiped]), "raft_snapshot_s3_refused") >= 1).then_some(())
    });
    nodes[wiped]
        .assert_log_says("refusing an InstallSnapshot whose snapshot object cannot be taken");
    nodes[wiped].assert_log_says("checksum mismatch");
    assert_eq!(
        counter(&metrics(&bases[wiped]), "raft_snapshot_s3_installs"),
        0
    );
    assert_eq!(local_prefix(&bases[wiped], path, 1), None, "nothing served");

    // The store goes away: the installs keep failing, now as store errors.
    weed.kill();
    let errors = counter(&metrics(&bases[wiped]), "raft_snapshot_s3_errors");
    wait_for(60, "node 3 to fail on the store", || {
        (counter(&metrics(&bases[wiped]), "raft_snapshot_s3_errors") > errors).then_some(())
    });
    assert_eq!(
        counter(&metrics(&bases[wiped]), "raft_snapshot_s3_installs"),
        0
    );
    assert_eq!(local_prefix(&bases[wiped], path, 1), None, "nothing served");

    // Back, with fresh snapshots of the leaders: node 3 installs one and catches up.
    weed.restart().await;
    snapshot_everything(&nodes[..wiped], 4);
    let all = expected(35);
    wait_for(90, "node 3 to catch up from the namespace", || {
        (local_prefix(&bases[wiped], path, all.len()).as_deref() == Some(all.as_str()))
            .then_some(())
    });
    let m = metrics(&bases[wiped]);
    assert!(counter(&m, "raft_snapshot_s3_installs") >= 1, "{m}");
    assert_eq!(
        counter(&m, "raft_snapshot_builds"),
        0,
        "it built none of its own"
    );
    producer_load(&bases, path, 35, 5, |_| {});
    assert_eq!(read_all(&bases, path), expected(40));
    drop(nodes);
}

#[tokio::test]
async fn a_restart_reads_its_state_from_the_namespace_and_refuses_a_torn_object_by_name() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("s3-snap-restart");
    let toml = format!(
        "[raft]\ngroup_count = 1\n{}",
        cold_toml(&weed, "s3restart", "")
    );
    let (mut node, bases) = node_with_stream(&dir, &toml, "/demo/restart");
    producer_load(&bases, "/demo/restart", 0, 20, |_| {});
    snapshot_everything(std::slice::from_ref(&node), 1);
    let ns = weed.store("s3restart/snapshots");
    let keys = objects(&ns).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    node.sigterm();

    // Torn: the object lost its tail. The node refuses to start and names it.
    let whole = ns.get(&keys[0]).await.expect("get");
    ns.put(&keys[0], whole.slice(..whole.len() / 2))
        .await
        .expect("put");
    let stderr = refusal(&node.args);
    assert!(stderr.contains(&keys[0]), "{stderr}");
    assert!(stderr.contains("is refused"), "{stderr}");

    // Whole again: the node starts on it, with the log's tail after it.
    ns.put(&keys[0], whole).await.expect("put");
    node.respawn_ready();
    assert_eq!(read_all(&bases, "/demo/restart"), expected(20));
    producer_load(&bases, "/demo/restart", 20, 5, |_| {});
    assert_eq!(read_all(&bases, "/demo/restart"), expected(25));
    drop(node);
}

#[tokio::test]
async fn the_leader_prunes_what_no_member_pins_after_the_grace_and_the_orphan_sweep_never_judges_it()
 {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("s3-snap-prune");
    let toml = format!(
        "[raft]\ngroup_count = 1\n{}[testing]\nsnapshot_prune_grace = \"1s\"\nsnapshot_prune_interval = \"200ms\"\n",
        cold_toml(
            &weed,
            "s3prune",
            "orphan_min_age = \"1s\"\norphan_sweep_interval = \"200ms\""
        )
    );
    let (node, bases) = node_with_stream(&dir, &toml, "/demo/prune");
    let ns = weed.store("s3prune/snapshots");
    // A snapshot object of a node that is no member of the group, and a key of no layout.
    ns.put("g0/n9/1-1.snap", Bytes::from_static(b"URGS planted"))
        .await
        .expect("plant");
    ns.put("notes.txt", Bytes::from_static(b"keep"))
        .await
        .expect("plant");
    for round in 0..3 {
        producer_load(&bases, "/demo/prune", round * 5, 5, |_| {});
        snapshot_everything(std::slice::from_ref(&node), 1);
    }
    wait_pruned_to_one(&ns).await;
    let m = metrics(&bases[0]);
    assert!(counter(&m, "raft_snapshot_s3_pruned") >= 3, "{m}");
    assert!(counter(&m, "raft_snapshot_s3_prune_passes") >= 1, "{m}");
    node.assert_log_says("pruned a retired Raft snapshot object");
    let kept = objects(&ns).await;
    assert!(kept[0].starts_with("g0/n1/"), "{kept:?}");
    let file = &snapshot_files(&dir.join("wal"))[0];
    assert!(
        file.windows(kept[0].len()).any(|w| w == kept[0].as_bytes()),
        "the one kept is the one the snapshot file names"
    );
    assert!(
        ns.exists("notes.txt").await.expect("exists"),
        "no layout of ours: untouched"
    );
    // The orphan sweep, a day shortened to a second, ran and left the namespace alone.
    wait_for(30, "two sweep passes", || {
        (counter(&metrics(&bases[0]), "cold_orphan_sweep_passes") >= 2).then_some(())
    });
    assert_eq!(objects(&ns).await, kept);
    assert_eq!(read_all(&bases, "/demo/prune"), expected(15));
    drop(node);
}

#[tokio::test]
async fn a_namespace_outside_the_cold_root_needs_its_own_marker_and_gets_one_when_empty() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("s3-snap-marker");
    let foreign = weed.store("theirs");
    foreign
        .put("something.bin", Bytes::from_static(b"not ours"))
        .await
        .expect("plant");
    let port = free_port();
    let with_prefix = |prefix: &str| {
        single_node_args(
            &dir,
            port,
            &format!(
                "[raft]\ngroup_count = 1\n{}[storage.snapshot]\ns3_prefix = \"{prefix}\"\n",
                cold_toml(&weed, "markercold", "")
            ),
            "",
        )
    };
    let stderr = refusal(&with_prefix("theirs"));
    assert!(stderr.contains("URSULA_FORMAT_EPOCH"), "{stderr}");
    let node = Proc::start(port, with_prefix("oursnaps"), dir.join("node.log"));
    assert!(
        weed.store("oursnaps")
            .exists("URSULA_FORMAT_EPOCH")
            .await
            .expect("exists"),
        "the namespace got its marker"
    );
    assert_eq!(
        metrics(&node.base())["raft_snapshot_store"].as_str(),
        Some(format!("s3://{}/oursnaps", ursula_cold::testing::BUCKET).as_str())
    );
    drop(node);
}

#[tokio::test]
async fn a_build_while_the_store_is_down_stays_inline_and_the_next_one_goes_to_the_namespace() {
    let mut weed = SeaweedFs::start().await;
    let dir = tempfile_dir("s3-snap-inline");
    let toml = format!(
        "[raft]\ngroup_count = 1\n{}",
        cold_toml(&weed, "s3inline", "")
    );
    let (mut node, bases) = node_with_stream(&dir, &toml, "/demo/inline");
    producer_load(&bases, "/demo/inline", 0, 20, |_| {});
    weed.kill();
    snapshot_everything(std::slice::from_ref(&node), 1);
    node.assert_log_says("this one stays inline in the WAL directory");
    let m = metrics(&bases[0]);
    assert!(counter(&m, "raft_snapshot_s3_errors") >= 1, "{m}");
    assert_eq!(counter(&m, "raft_snapshot_s3_uploads"), 0, "{m}");
    let file = &snapshot_files(&dir.join("wal"))[0];
    assert!(!file.windows(4).any(|w| w == b"URSR"), "the state, inline");
    assert!(file.windows(4).any(|w| w == b"URGS"), "the state, inline");

    // The store is back: a restart reads the inline snapshot, and the next build uploads.
    weed.restart().await;
    node.sigterm();
    node.respawn_ready();
    assert_eq!(read_all(&bases, "/demo/inline"), expected(20));
    producer_load(&bases, "/demo/inline", 20, 5, |_| {});
    snapshot_everything(std::slice::from_ref(&node), 1);
    let file = &snapshot_files(&dir.join("wal"))[0];
    assert!(file.windows(4).any(|w| w == b"URSR"), "a reference again");
    assert_eq!(counter(&metrics(&bases[0]), "raft_snapshot_s3_uploads"), 1);
    drop(node);
}

#[tokio::test]
async fn routine_builds_wait_while_the_snapshot_store_fails_its_health_ticks() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("s3-snap-gate");
    // One group against a 1 MiB budget: a routine build is due at 512 KiB of log, and the
    // log-pressure level starts at 768 KiB.
    let toml = format!(
        "[raft]\ngroup_count = 1\nsnapshot_log_budget = \"1MiB\"\n{}probe_timeout = \"200ms\"\n\
         [storage.snapshot]\ndrive_interval = \"100ms\"\n",
        cold_toml(&weed, "s3gate", "")
    );
    let (node, bases) = node_with_stream(&dir, &toml, "/demo/gate");
    weed.freeze();
    wait_for(30, "a bad health tick", || {
        node.log_text()
            .contains("snapshot store health tick is bad")
            .then_some(())
    });
    let body = vec![b'g'; 60 << 10];
    for _ in 0..10 {
        assert_eq!(
            send_octets(&bases, 0, "/demo/gate", &body).map(|r| r.0),
            Some(204)
        );
    }
    let log = counter(&metrics(&bases[0]), "raft_log_bytes");
    assert!(
        (512 << 10..768 << 10).contains(&log),
        "a routine build is due: {log}"
    );
    // Ten driver passes: each would have started the due build (which, against a frozen
    // store, would still hang in its upload: the builds started are what shows it).
    std::thread::sleep(Duration::from_secs(1));
    let m = metrics(&bases[0]);
    assert_eq!(counter(&m, "raft_snapshot_builds_in_flight_max"), 0, "{m}");
    assert_eq!(counter(&m, "raft_snapshot_builds"), 0, "{m}");

    weed.thaw();
    let m = wait_for(30, "the held build once the store answers", || {
        let m = metrics(&bases[0]);
        (counter(&m, "raft_snapshot_s3_uploads") >= 1).then_some(m)
    });
    assert!(counter(&m, "raft_snapshot_builds") >= 1, "{m}");
    drop(node);
}

#[tokio::test]
async fn a_damaged_pins_file_stops_every_prune_pass_until_it_is_gone() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("s3-snap-pins");
    let toml = format!(
        "[raft]\ngroup_count = 1\n{}[testing]\nsnapshot_prune_grace = \"1s\"\nsnapshot_prune_interval = \"200ms\"\n",
        cold_toml(&weed, "s3pins", "")
    );
    let (node, bases) = node_with_stream(&dir, &toml, "/demo/pins");
    let ns = weed.store("s3pins/snapshots");
    // Another node's pins file, damaged: its pins cannot be known, so nothing may go. A key
    // that only begins like the pins folder is no pins file and changes nothing.
    ns.put("refs/n7", Bytes::from_static(b"URSP\x01 torn"))
        .await
        .expect("plant");
    ns.put("refs-notes", Bytes::from_static(b"not a pins file"))
        .await
        .expect("plant");
    for round in 0..3 {
        producer_load(&bases, "/demo/pins", round * 5, 5, |_| {});
        snapshot_everything(std::slice::from_ref(&node), 1);
    }
    let built = objects(&ns).await;
    assert!(built.len() >= 3, "{built:?}");
    // Well past the grace, several passes, each refused: every object stays.
    wait_for(30, "prune passes refused by the pins file", || {
        (counter(&metrics(&bases[0]), "raft_snapshot_s3_refused") >= 5).then_some(())
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let m = metrics(&bases[0]);
    assert_eq!(counter(&m, "raft_snapshot_s3_pruned"), 0, "{m}");
    assert_eq!(objects(&ns).await, built);
    node.assert_log_says("failed to prune retired OpenRaft snapshots");
    // Gone, the passes delete again: only the object the snapshot file names stays.
    ns.delete("refs/n7").await.expect("remove");
    wait_pruned_to_one(&ns).await;
    assert!(ns.exists("refs-notes").await.expect("exists"));
    assert_eq!(read_all(&bases, "/demo/pins"), expected(15));
    drop(node);
}
