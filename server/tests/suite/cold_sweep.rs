//! The cold tier's orphan sweep against a real S3 server (SeaweedFS): a durable node aborted
//! between a flush's upload and its commit (the `[testing]` hook) leaves an object nothing
//! references; planted objects of the tier's layouts stand in for others. While they are younger
//! than `orphan_min_age` the sweep keeps them; past it, it deletes them and only them, every
//! referenced object stays, and every acknowledged byte reads back from the store. A store that
//! is down ends a pass with a counted error and nothing deleted. In a cluster each group's
//! leader sweeps that group's orphans, and a key of a group the cluster does not have stays.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::cold_tier::*;
use crate::harness::cluster::*;
use crate::harness::process::exit_within;
use ursula_cold::ColdStore;
use ursula_cold::testing::SeaweedFs;

/// Every key under the test's root.
async fn keys(store: &ColdStore) -> BTreeSet<String> {
    store.list("").await.expect("list").into_iter().collect()
}

/// Checks the store after a sweep: each of `gone` was deleted, each of `kept` and every key of
/// `referenced` is still there.
async fn assert_swept(
    store: &ColdStore,
    gone: &[&str],
    kept: &[&str],
    referenced: &BTreeSet<String>,
) {
    let after = keys(store).await;
    for key in gone {
        assert!(!after.contains(*key), "{key} stayed: {after:?}");
    }
    for key in kept {
        assert!(after.contains(*key), "{key} was deleted: {after:?}");
    }
    let lost: Vec<&String> = referenced.difference(&after).collect();
    assert!(lost.is_empty(), "referenced objects were deleted: {lost:?}");
}

fn sweep_metric(base: &str, name: &str) -> u64 {
    metrics(base)[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

#[tokio::test]
async fn orphans_past_the_minimum_age_are_swept_and_every_referenced_object_stays() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-sweep");
    let store = weed.store("sweep");
    let wal = dir.join("wal");
    // Reads go to the store, so a referenced object the sweep deleted would fail them.
    let toml = |min_age: &str, testing: &str| {
        let cold = format!(
            "cache_size = 0\norphan_sweep_interval = \"200ms\"\norphan_min_age = \"{min_age}\""
        );
        format!(
            "[raft.wal]\npath = \"{}\"\n{}{testing}",
            wal.display(),
            cold_toml(&weed, "sweep", &cold)
        )
    };
    let restart_with = |node: &mut Proc, toml: String| {
        node.kill9();
        std::fs::write(dir.join("node.toml"), toml).expect("toml");
        node.spawn();
    };
    let mut node = start_node(&dir, &toml("24h", ""), vec![]);
    let base = node.base();
    let expected = fill_cold(&base, "/sweep/s", 10);
    // A snapshot body of 1 MiB lives in the store too, referenced by the stream.
    let snapshot_url = format!("{base}/sweep/s/snapshot/{:020}", expected.len());
    let snapshot = vec![b's'; 1 << 20];
    let (status, _, _) = send_url("PUT", &snapshot_url, &[OCTET], &snapshot).expect("snapshot");
    assert_eq!(status, 204);
    let referenced = keys(&store).await;
    assert!(
        referenced.iter().any(|k| k.starts_with("sweep/snap/g")),
        "the snapshot body's key names its group: {referenced:?}"
    );

    // The crash: the next flush uploads, then the process aborts before it proposes.
    restart_with(
        &mut node,
        toml("24h", "[testing]\ncold_abort_after_upload = true\n"),
    );
    // The flush may abort the node before the answer leaves: then the append is unknown.
    let tail = b"appended before the crash";
    let acked = append(&base, "/sweep/s", tail) == 204;
    let child = node.child.as_mut().expect("running");
    let status = exit_within(child, Duration::from_secs(30)).expect("the hook aborts the node");
    assert!(!status.success(), "{status}");
    node.child = None;
    let crashed = keys(&store).await;
    let leaked: Vec<&String> = crashed.difference(&referenced).collect();
    assert_eq!(leaked.len(), 1, "one uncommitted upload: {leaked:?}");
    let leaked = leaked[0].clone();

    // Planted: an object of group 0's layout, a snapshot body of the old layout (no group), a
    // staged append body no append committed, and a key of no layout of the tier's, which the
    // sweep must never touch.
    let planted = [
        "sweep/g0/0000000000001-00000000000000aa",
        "sweep/snap/0000000000001-00000000000000bb",
        "sweep/ext/g0/0000000000001-00000000000000cc",
    ];
    let foreign = "elsewhere/notes.txt";
    for key in planted.iter().chain([&foreign]) {
        store
            .put(key, bytes::Bytes::from_static(b"x"))
            .await
            .expect("plant");
    }

    // Restarted with the spec's day: passes run and find nothing old enough.
    restart_with(&mut node, toml("24h", ""));
    wait_for(30, "two sweep passes", || {
        (sweep_metric(&base, "cold_orphan_sweep_passes") >= 2).then_some(())
    });
    assert_eq!(sweep_metric(&base, "cold_orphans_deleted"), 0);
    assert_eq!(sweep_metric(&base, "cold_orphans_found"), 0);
    assert!(
        sweep_metric(&base, "cold_orphan_oldest_age_ms") > 0,
        "the unreferenced objects are seen"
    );
    assert_eq!(sweep_metric(&base, "cold_orphan_min_age_ms"), 86_400_000);

    // Restarted with a second: the four orphans go.
    restart_with(&mut node, toml("1s", ""));
    wait_for(30, "the orphans to be swept", || {
        (sweep_metric(&base, "cold_orphans_deleted") == 4).then_some(())
    });
    assert!(sweep_metric(&base, "cold_orphan_deleted_bytes") >= 3);
    let gone = [leaked.as_str(), planted[0], planted[1], planted[2]];
    assert_swept(&store, &gone, &[foreign], &referenced).await;

    // Every acknowledged byte, the one appended before the crash when it was acknowledged,
    // reads back once it is cold again, and the snapshot body with it.
    wait_all_cold(&base, "/sweep/s");
    let (status, got) = read_from(&base, "/sweep/s", 0);
    assert_eq!(status, 200);
    let with_tail = [expected.as_slice(), tail.as_slice()].concat();
    assert!(
        got == with_tail || (!acked && got == expected),
        "read back {} bytes, acknowledged {}",
        got.len(),
        expected.len() + if acked { tail.len() } else { 0 }
    );
    let (status, _, body) = send_url("GET", &snapshot_url, &[], b"").expect("snapshot read");
    assert_eq!(status, 200);
    assert!(body == snapshot, "the snapshot body read back differs");
    assert_eq!(
        sweep_metric(&base, "cold_orphans_deleted"),
        4,
        "nothing else was swept"
    );
}

#[tokio::test]
async fn a_store_that_is_down_ends_the_sweep_with_an_error_and_deletes_nothing_until_it_is_back() {
    let mut weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-sweep-down");
    let store = weed.store("down");
    let cold = "cache_size = 0\norphan_sweep_interval = \"200ms\"\norphan_min_age = \"1s\"";
    let node = start_node(&dir, &cold_toml(&weed, "down", cold), vec![]);
    let base = node.base();
    let expected = fill_cold(&base, "/down/s", 5);
    let referenced = keys(&store).await;
    let orphan = "down/g0/0000000000001-00000000000000cc";
    store
        .put(orphan, bytes::Bytes::from_static(b"x"))
        .await
        .expect("plant");

    weed.kill();
    let errors = sweep_metric(&base, "cold_orphan_sweep_errors");
    wait_for(30, "a sweep pass to fail on the store", || {
        (sweep_metric(&base, "cold_orphan_sweep_errors") > errors).then_some(())
    });
    assert_eq!(sweep_metric(&base, "cold_orphans_deleted"), 0);

    weed.restart().await;
    wait_for(30, "the orphan to be swept once the store is back", || {
        (sweep_metric(&base, "cold_orphans_deleted") == 1).then_some(())
    });
    assert_swept(&store, &[orphan], &[], &referenced).await;
    assert_reads_back(&base, "/down/s", &expected);
}

#[tokio::test]
async fn in_a_cluster_each_group_leader_sweeps_its_own_groups_orphans_and_no_other_key() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-sweep-cluster");
    let store = weed.store("clus");
    let cold = "cache_size = 0\norphan_sweep_interval = \"200ms\"\norphan_min_age = \"1s\"";
    let nodes = cold_cluster(&dir, &cold_toml(&weed, "clus", cold), "/clus/c");
    let base = nodes[0].base();
    let mut expected = Vec::new();
    for i in 0..10u8 {
        let b = vec![b'a' + i; 100];
        let (status, _, _) =
            send_url("POST", &format!("{base}/clus/c"), &[OCTET], &b).expect("append");
        assert_eq!(status, 204);
        expected.extend_from_slice(&b);
    }
    wait_all_cold(&base, "/clus/c");
    let referenced = keys(&store).await;

    // One orphan in each of the four groups, and one of a group the cluster does not have.
    let orphans: Vec<String> = (0..4)
        .map(|g| format!("clus/g{g}/0000000000001-00000000000000d{g}"))
        .collect();
    let no_group = "clus/g9/0000000000001-00000000000000ee";
    for key in orphans.iter().map(String::as_str).chain([no_group]) {
        store
            .put(key, bytes::Bytes::from_static(b"x"))
            .await
            .expect("plant");
    }
    let deleted = || -> u64 {
        nodes
            .iter()
            .map(|n| sweep_metric(&n.base(), "cold_orphans_deleted"))
            .sum()
    };
    wait_for(30, "every group's orphan to be swept", || {
        (deleted() == 4).then_some(())
    });
    let gone: Vec<&str> = orphans.iter().map(String::as_str).collect();
    assert_swept(&store, &gone, &[no_group], &referenced).await;
    // Every node serves every byte (a follower after its read barrier), from the store.
    let served = nodes.iter().filter(|n| {
        let url = format!("{}/clus/c?offset={:020}&consistency=leader", n.base(), 0);
        let (status, _, got) = send_url("GET", &url, &[], b"").expect("read");
        status == 200 && got == expected
    });
    assert_eq!(
        served.count(),
        nodes.len(),
        "every node serves the whole stream"
    );
    assert_eq!(deleted(), 4, "nothing else was swept");
}
