//! The snapshot driver against a real durable node: snapshots are taken by log bytes against
//! `raft.snapshot_log_budget`, the log is purged below them, the metrics the Observability page
//! names report it, a restart rebuilds the stream from the snapshot plus the log's tail, and a
//! wiped follower catches up from a snapshot its leader reads back from disk, and idle groups
//! neither take empty sweeps nor keep journal segments.

use std::time::Duration;

use crate::harness::cluster::*;

#[test]
fn the_driver_snapshots_by_log_bytes_keeps_the_log_under_its_budget_and_a_restart_reads_it_all() {
    let dir = tempfile_dir("snapdrive");
    let port = free_port();
    let budget: u64 = 1 << 20;
    let args = single_node_args(
        &dir,
        port,
        "[raft]\ngroup_count = 1\nsnapshot_log_budget = \"1MiB\"\n[storage.snapshot]\ndrive_interval = \"100ms\"",
        "",
    );
    let mut node = Proc::start(port, args, dir.join("node.log"));
    let bases = vec![node.base()];
    assert_eq!(
        send(&bases, 0, "PUT", "/demo/log", &[], b"").map(|r| r.0),
        Some(201)
    );
    let before = metrics(&bases[0]);
    assert_eq!(counter(&before, "raft_snapshot_builds"), 0);
    // 3 MiB of appends in 512-byte bodies: three budgets' worth, so the log must be cut.
    let body = vec![b'a'; 512];
    let mut expected = Vec::new();
    let mut pressure = 0;
    for i in 0..6144u32 {
        let mut b = body.clone();
        b[..4].copy_from_slice(&i.to_be_bytes());
        loop {
            let r = send_octets(&bases, 0, "/demo/log", &b).expect("append");
            if r.0 == 503 {
                // RaftLogPressure is allowed while the driver catches up; nothing applied.
                assert_eq!(
                    r.1.get("x-ursula-not-applied").map(String::as_str),
                    Some("RaftLogPressure")
                );
                pressure += 1;
                assert!(
                    pressure < 200,
                    "the log stayed past twice its budget: no snapshots"
                );
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            assert_eq!(r.0, 204, "append {i}");
            break;
        }
        expected.extend_from_slice(&b);
    }
    let m = wait_for(20, "the log back under the budget", || {
        let m = metrics(&bases[0]);
        (counter(&m, "raft_log_bytes") < budget).then_some(m)
    });
    assert!(counter(&m, "raft_snapshot_builds") >= 1, "{m}");
    assert!(counter(&m, "raft_snapshot_build_ns") > 0, "{m}");
    assert!(
        counter(&m, "raft_log_bytes_high_watermark") >= budget * 3 / 4,
        "the driver let the log reach its pressure level before cutting it: {m}"
    );
    assert!(
        counter(&m, "raft_log_bytes_high_watermark") < 2 * budget,
        "the log never reached the hard limit: {m}"
    );
    assert!(counter(&m, "raft_snapshot_pressure_passes") >= 1, "{m}");
    // Each counted pass is logged as the spec's event, with what it planned and started.
    let passes: Vec<String> = node
        .log_text()
        .lines()
        .filter(|l| l.contains("raft snapshot pressure pass completed"))
        .map(str::to_owned)
        .collect();
    assert!(!passes.is_empty(), "{}", node.log_text());
    assert!(
        passes
            .iter()
            .all(|l| l.contains("planned=") && l.contains("started=") && l.contains("busy=")),
        "{passes:?}"
    );
    assert!(
        counter(&m, "raft_snapshot_builds_in_flight_max") >= 1,
        "{m}"
    );
    assert!(m["raft_snapshot_pressure_level"].is_u64(), "{m}");
    assert!(m["raft_snapshot_pressure_builds"].is_u64(), "{m}");
    // Catch-up reads answer a bounded chunk each: follow Stream-Next-Offset to the tail.
    let read = |bases: &[String]| {
        let (mut out, mut offset) = (Vec::new(), "-1".to_owned());
        loop {
            let path = format!("/demo/log?offset={offset}");
            let (status, headers, bytes) = send(bases, 0, "GET", &path, &[], b"").expect("read");
            assert_eq!(status, 200);
            out.extend_from_slice(&bytes);
            let next = headers
                .get("stream-next-offset")
                .expect("next offset")
                .clone();
            if bytes.is_empty()
                || headers.get("stream-up-to-date").map(String::as_str) == Some("true")
            {
                return out;
            }
            offset = next;
        }
    };
    assert!(read(&bases) == expected, "every append reads back in order");
    node.sigterm();
    node.spawn();
    wait_for(20, "the node back", || {
        send(&bases, 0, "GET", "/__ursula/ready", &[], b"").filter(|r| r.0 == 200)
    });
    assert!(
        read(&bases) == expected,
        "the restarted node rebuilt the stream from its snapshot and log tail"
    );
    eprintln!("RaftLogPressure refusals while the driver caught up: {pressure}");
    drop(node);
}

/// A snapshot's bytes live only in its file: a leader whose log no longer holds what a wiped
/// follower lacks sends it the snapshot read back from disk, and the follower serves the whole
/// stream from it.
#[test]
fn a_wiped_follower_catches_up_from_a_snapshot_its_leader_reads_back_from_disk() {
    let path = "/demo/snapfile";
    let (dir, mut nodes, bases) = loaded_cluster("snapfile", path, 30);
    // Every node snapshots and purges every group, so no log holds the stream's start.
    for n in &nodes {
        for g in 0..4 {
            let (status, body) = admin(n, "POST", &format!("/__ursula/raft/{g}/snapshot"));
            assert_eq!(status, 200, "{body}");
            let (status, body) = admin(n, "POST", &format!("/__ursula/raft/{g}/purge"));
            assert_eq!(status, 200, "{body}");
        }
    }
    let wiped = 2;
    nodes[wiped].kill9();
    std::fs::remove_dir_all(cluster_wal(&dir, wiped)).expect("wipe");
    producer_load(&bases[..wiped], path, 30, 5, |_| {});
    nodes[wiped].spawn();
    nodes[wiped].wait_ready_until(Duration::from_secs(60), |s, _| s == 200);

    let all = expected(35);
    // The last append may still be on its way to the follower; all before it is not.
    let want = &all[..all.len() - 1];
    wait_for(60, "the wiped follower caught up", || {
        (local_prefix(&bases[wiped], path, want.len()).as_deref() == Some(want)).then_some(())
    });
    let m = metrics(&bases[wiped]);
    assert_eq!(
        counter(&m, "raft_snapshot_builds"),
        0,
        "the follower built no snapshot of its own"
    );
    let installed = std::fs::read_dir(cluster_wal(&dir, wiped).join("snapshots"))
        .expect("snapshot dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".snap"))
        .count();
    assert!(
        installed >= 1,
        "the follower installed its leader's snapshot"
    );
    producer_load(&bases, path, 35, 5, |_| {});
    assert_eq!(read_all(&bases, path), expected(40));
    drop(nodes);
}

/// The sum of every group's applied index: what the groups' logs took in.
fn applied_total(base: &str) -> u64 {
    metrics(base)["raft_groups"]
        .as_array()
        .expect("raft_groups")
        .iter()
        .map(|g| g["last_applied_index"].as_u64().unwrap_or(0))
        .sum()
}

/// Idle groups neither grow their logs nor keep journal segments: the node proposes a sweep
/// only to a group holding an expired stream (an empty one was a log entry of every group
/// every 2 s), and the driver purges a group whose few entries keep a sealed segment (every
/// group's first entries are in its core's first segment, which was never deleted).
#[test]
fn idle_groups_add_no_entries_and_keep_no_journal_segment_while_one_stream_fills_many() {
    let toml = "[storage.snapshot]\ndrive_interval = \"100ms\"";
    let wal = "fsync = \"never\"\nsegment_size = \"1MiB\"";
    let (dir, node) = single_node("idlepins", toml, wal);
    let bases = vec![node.base()];
    let put = |path: &str, headers: &[(&str, String)]| {
        send(&bases, 0, "PUT", path, headers, b"").map(|r| r.0)
    };
    assert_eq!(put("/demo/busy", &[]), Some(201));

    // Quiet: no stream can expire, so no group takes an entry over two sweep intervals.
    let before = applied_total(&bases[0]);
    std::thread::sleep(Duration::from_millis(4500));
    assert_eq!(applied_total(&bases[0]), before, "no empty sweeps");

    // One stream fills segment after segment, until its core's first segment is gone and only
    // its own group still pins a sealed one (40 MiB at most).
    let first_segments: Vec<std::path::PathBuf> = std::fs::read_dir(dir.join("wal/raft-log"))
        .expect("journal dirs")
        .map(|d| d.expect("journal entry").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("core-"))
        })
        .map(|core| core.join("0000000000000001.seg"))
        .collect();
    assert!(
        !first_segments.is_empty() && first_segments.iter().all(|p| p.exists()),
        "{first_segments:?}"
    );
    let body = vec![b'b'; 4096];
    let mut appended: u64 = 0;
    let released = loop {
        for _ in 0..64 {
            let r = send_octets(&bases, 0, "/demo/busy", &body).expect("append");
            if r.0 == 503 {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            assert_eq!(r.0, 204);
            appended += body.len() as u64;
        }
        let m = metrics(&bases[0]);
        let gone = first_segments.iter().any(|p| !p.exists());
        if gone && counter(&m, "wal_lagging_groups") <= 1 && counter(&m, "wal_reclaims") >= 1 {
            break m;
        }
        assert!(
            appended < 40 << 20,
            "after {appended} bytes, idle groups still pin segments: {m}"
        );
    };
    // What stays pinned is the busy group's own log, however far its next snapshot is: the
    // segments its entries span (partial ones at both ends), not one per idle group.
    let busy_span = counter(&released, "raft_log_bytes").div_ceil(1 << 20) + 2;
    assert!(
        counter(&released, "wal_pinned_segments") <= busy_span,
        "the sealed segments left are the busy group's ({busy_span} at most): {released}"
    );

    // A stream that expires is still swept: its group takes a sweep after the create.
    let before = applied_total(&bases[0]);
    assert_eq!(
        put("/demo/brief", &[("stream-ttl", "1".to_owned())]),
        Some(201)
    );
    wait_for(10, "the expired stream swept", || {
        (applied_total(&bases[0]) >= before + 2).then_some(())
    });
    drop(node);
}

/// Entries of 64 KiB against a 1 MiB budget: the 256 entries openraft keeps after each
/// snapshot for lagging followers hold 16 MiB, eight budgets. Counted as log, they kept the
/// node past twice its budget for good, refusing every write; only the log above the latest
/// snapshot counts, so the writes pass once each snapshot lands.
#[test]
fn the_tail_kept_after_a_snapshot_does_not_hold_the_node_over_its_log_budget() {
    let dir = tempfile_dir("snap-kept-tail");
    let node = start_single_node(
        &dir,
        "[raft]\ngroup_count = 1\nsnapshot_log_budget = \"1MiB\"\n\
         [storage.snapshot]\ndrive_interval = \"100ms\"\n",
        "",
    );
    let bases = vec![node.base()];
    assert_eq!(
        send(&bases, 0, "PUT", "/demo/kept", &[], b"").map(|r| r.0),
        Some(201)
    );
    let body = vec![b'k'; 64 << 10];
    let mut refused = 0;
    for i in 0..128u32 {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let r = send_octets(&bases, 0, "/demo/kept", &body).expect("append");
            if r.0 == 204 {
                break;
            }
            assert_eq!(r.0, 503, "append {i}: {r:?}");
            assert_eq!(
                r.1.get("x-ursula-not-applied").map(String::as_str),
                Some("RaftLogPressure")
            );
            refused += 1;
            assert!(
                std::time::Instant::now() < deadline,
                "append {i} refused for 20 s: the kept tail holds the node over its budget"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // The pressure pass brings the unsnapshotted log under the budget, the kept tail aside.
    let m = wait_for(20, "the log under the budget", || {
        let m = metrics(&bases[0]);
        (counter(&m, "raft_log_bytes") < 1 << 20).then_some(m)
    });
    assert!(counter(&m, "raft_snapshot_builds") >= 1, "{m}");
    // 8 MiB went in, all of it is there.
    let (status, got) = crate::cold_tier::read_from(&bases[0], "/demo/kept", 0);
    assert_eq!(status, 200);
    assert_eq!(got.len(), 128 * (64 << 10), "after {refused} refusals");
    drop(node);
}
