//! The maintenance and health view with real processes: the Troubleshooting page's `jq`
//! selectors read values (not nulls) from `/__ursula/metrics`, through the real `jq`; the WAL
//! family says how the WAL opened after a crash and what the startup scan read; a wiped voter
//! reports `recovery_gate_closed` while gated and is not a healthy voter, while its survivors
//! stay ready; a healthy voter whose groups lack a configured voter reports
//! `incomplete_voter_set` and stays ready.

use std::process::Command;
use std::process::Stdio;
use std::time::Duration;

use crate::harness::cluster::*;
use serde_json::Value;
use serde_json::json;

/// The Troubleshooting page's selectors this build serves, verbatim.
const SELECTORS: &[&str] = &[
    ".raft_groups[] | {raft_group_id, current_leader, current_term, last_applied_index}",
    "[.raft_groups[] | select(.current_leader == null) | .raft_group_id]",
    ".per_group_cold_hot_bytes",
    "{opened: .sse_streams_opened, errors: .sse_error_events}",
    "{available: .wal_available_bytes, minimum: .wal_min_available_bytes, pressure: .wal_disk_pressure}",
    "{physical: .wal_physical_bytes, segments: .wal_segments, reclaims: .wal_reclaims, lagging: .wal_lagging_groups, recovered_bytes: .wal_recovery_bytes, recovery_ns: .wal_recovery_ns}",
    "{opening: .wal_recovery, gates: .recovery_gates}",
    ".raft_maintenance | {node_issues, group_issues}",
];

/// Runs `jq -c <selector>` over `doc`; every output line parsed as JSON.
fn jq(selector: &str, doc: &Value) -> Vec<Value> {
    let mut child = Command::new("jq")
        .args(["-c", selector])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("jq on PATH (.ci/run installs it)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(doc.to_string().as_bytes())
            .expect("write to jq");
    }
    let out = child.wait_with_output().expect("jq");
    assert!(
        out.status.success(),
        "jq {selector}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("jq output is JSON"))
        .collect()
}

/// The paths of every null inside `v`.
fn nulls(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Null => out.push(at),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| nulls(x, format!("{at}[{i}]"), out)),
        Value::Object(o) => o
            .iter()
            .for_each(|(k, x)| nulls(x, format!("{at}.{k}"), out)),
        _ => {}
    }
}

fn sse_status(url: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(2)))
        .build()
        .into();
    let mut r = agent.get(url).call().expect("SSE");
    let status = r.status().as_u16();
    // A live stream never ends: the first events are enough, the timeout ends the read.
    let mut body = Vec::new();
    let _ = std::io::Read::read_to_end(&mut r.body_mut().as_reader(), &mut body);
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn the_troubleshooting_selectors_read_values_and_the_wal_family_tells_a_crash_restart() {
    let toml = "[raft]\ngroup_count = 2";
    let wal = "fsync = \"never\"\nsegment_size = \"64KiB\"";
    let (_dir, mut node, bases) = loaded_single_node("selectors", toml, wal, "/demo/health", 200);
    // Bodies large enough to fill several 64 KiB segments.
    let big = vec![b'x'; 24 << 10];
    for _ in 0..8 {
        let r = send_octets(&bases, 0, "/demo/health", &big);
        assert!(matches!(r, Some((200 | 204, _, _))), "{r:?}");
    }
    let m = metrics(&bases[0]);
    assert_eq!(
        m["wal_recovery"]["previous_run"], "fresh",
        "{}",
        m["wal_recovery"]
    );
    assert!(
        m["wal_rotations"].as_u64() > Some(0),
        "64 KiB segments rotated"
    );
    assert!(m["wal_cache_hits"].as_u64() > Some(0), "Raft read its log");

    // A process crash: the run state says the run did not end, on this boot.
    node.kill9();
    node.respawn_ready();
    let opened = "/demo/health?offset=-1&live=sse";
    let (status, events) = sse_status(&node.url(opened));
    assert_eq!(status, 200);
    assert!(events.contains("event: data"), "{events}");
    let beyond = format!("/demo/health?offset={:020}&live=sse", 1u64 << 40);
    let (status, events) = sse_status(&node.url(&beyond));
    assert_eq!(status, 200);
    assert!(events.contains("event: error"), "{events}");

    let m = metrics(&bases[0]);
    let opening = &m["wal_recovery"];
    assert_eq!(opening["previous_run"], "process_crash", "{opening}");
    assert_eq!(
        opening["recovering"], false,
        "under never a process crash gates nothing"
    );
    for key in [
        "wal_recovery_records",
        "wal_recovery_bytes",
        "wal_recovery_live_entries",
        "wal_physical_bytes",
        "wal_segments",
        "wal_available_bytes",
        "wal_min_available_bytes",
    ] {
        assert!(m[key].as_u64() > Some(0), "{key}: {}", m[key]);
    }
    assert_eq!(m["sse_streams_opened"], 2);
    assert_eq!(m["sse_error_events"], 1);
    assert_eq!(m["wal_disk_pressure"], false);
    assert_eq!(
        m["per_core_wal_physical_bytes"].as_array().map(Vec::len),
        m["core_count"].as_u64().map(|n| n as usize)
    );
    let gauges = m["group_state_gauges"].as_array().expect("gauges");
    assert_eq!(gauges.len(), 2);
    let streams: u64 = gauges.iter().filter_map(|g| g["streams"].as_u64()).sum();
    let producers: u64 = gauges.iter().filter_map(|g| g["producers"].as_u64()).sum();
    assert_eq!((streams, producers), (1, 1), "{gauges:?}");
    for g in m["raft_groups"].as_array().expect("raft_groups") {
        assert_eq!(g["apply_failure"], Value::Null);
        assert_eq!(
            g["maintenance"],
            json!({"running": true, "recovery_ready": true})
        );
    }
    assert_eq!(
        m["raft_maintenance"],
        json!({"node_issues": [], "group_issues": [], "configured_voter_ids": [1]})
    );

    for selector in SELECTORS {
        let out = jq(selector, &m);
        assert!(!out.is_empty(), "{selector} printed nothing");
        let mut found = Vec::new();
        for v in &out {
            nulls(v, String::new(), &mut found);
        }
        assert!(
            found.is_empty(),
            "{selector} read nulls at {found:?}: {out:?}"
        );
    }
    drop(node);
}

/// Whether `m`'s maintenance report lists `issue` for every one of the 4 groups.
fn every_group_has(m: &Value, issue: &str) -> bool {
    let groups: std::collections::BTreeSet<u64> = m["raft_maintenance"]["group_issues"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["issue"] == issue)
        .filter_map(|i| i["raft_group_id"].as_u64())
        .collect();
    groups.len() == 4
}

#[test]
fn a_wiped_voter_reports_recovery_gate_closed_while_gated_and_its_survivors_stay_ready() {
    let path = "/demo/wipe";
    let (dir, mut nodes, bases) = loaded_cluster("maint-wipe", path, 20);
    for n in &nodes {
        n.wait_ready_until(Duration::from_secs(30), |s, _| s == 200);
    }

    // Node 3 loses its disk. While it is down the survivors serve: same voter set, a leader,
    // applied, so no issue and no unreadiness.
    nodes[2].kill9();
    std::fs::remove_dir_all(cluster_wal(&dir, 2)).expect("wipe");
    producer_load(&bases[..2], path, 20, 10, |_| {});
    for n in &nodes[..2] {
        let body = n.wait_ready_until(Duration::from_secs(30), |s, _| s == 200);
        assert_eq!(body, json!({"ready": true}));
        let m = metrics(&n.base());
        assert_eq!(
            m["raft_maintenance"]["group_issues"],
            json!([]),
            "{}",
            m["raft_groups"]
        );
        assert_eq!(m["raft_maintenance"]["node_issues"], json!([]));
        assert_eq!(
            m["raft_maintenance"]["configured_voter_ids"],
            json!([1, 2, 3])
        );
    }

    // Node 2 goes down too, so no leader can prove a quorum to node 3: it stays gated.
    nodes[1].kill9();
    nodes[2].spawn();
    let m = wait_for(30, "node 3 reporting its closed gate", || {
        let m = metrics(&bases[2]);
        (m["raft_maintenance"]["node_issues"] == json!(["recovery_gate_closed"])).then_some(m)
    });
    // A wiped replica holds no membership: it is no voter and applied nothing.
    assert!(
        every_group_has(&m, "local_replica_not_voter"),
        "{}",
        m["raft_maintenance"]
    );
    assert!(
        every_group_has(&m, "not_applied"),
        "{}",
        m["raft_maintenance"]
    );
    for g in m["raft_groups"].as_array().expect("raft_groups") {
        assert_eq!(g["maintenance"]["recovery_ready"], false, "{g}");
    }
    let (status, ready) = nodes[2].json("/__ursula/ready");
    assert_eq!(
        (status, &ready["reason"]),
        (503, &json!("recovery_gate_closed"))
    );

    // Node 2 is back: node 3 obtains its floor, catches up and opens its gates; every node is
    // ready with an empty report.
    nodes[1].spawn();
    for n in &nodes {
        n.wait_ready_until(Duration::from_secs(60), |s, _| s == 200);
    }
    let m = wait_for(30, "node 3's report emptying", || {
        let m = metrics(&bases[2]);
        (m["raft_maintenance"]["group_issues"] == json!([])).then_some(m)
    });
    assert_eq!(m["raft_maintenance"]["node_issues"], json!([]));
    assert_eq!(
        m["wal_recovery"]["previous_run"], "fresh",
        "the wiped WAL started empty"
    );
    drop(nodes);
}

#[test]
fn a_healthy_voter_whose_groups_lack_a_configured_voter_reports_it_and_stays_ready() {
    let toml = "[raft]\ngroup_count = 2";
    let (dir, mut node, bases) = loaded_single_node("maint-incomplete", toml, "", "/demo/alone", 5);
    let port = node.port;
    assert!(node.sigterm().success());

    // The same WAL, now configured with a second voter that no group has: lost redundancy,
    // not an unhealthy replica.
    let absent = free_port();
    let peers = format!(
        "[raft]\ngroup_count = 2\n[[raft.peers]]\nnode_id = 1\nurl = \"http://127.0.0.1:{port}\"\n\
         [[raft.peers]]\nnode_id = 2\nurl = \"http://127.0.0.1:{absent}\"\n"
    );
    node.args = single_node_args(&dir, port, &peers, "");
    node.args.extend(["--node-id".to_owned(), "1".to_owned()]);
    node.spawn();
    let body = node.wait_ready_until(Duration::from_secs(30), |s, _| s == 200);
    assert_eq!(body, json!({"ready": true}));
    let m = metrics(&bases[0]);
    assert_eq!(
        m["raft_maintenance"],
        json!({
            "node_issues": [],
            "group_issues": [
                {"raft_group_id": 0, "issue": "incomplete_voter_set"},
                {"raft_group_id": 1, "issue": "incomplete_voter_set"},
            ],
            "configured_voter_ids": [1, 2],
        })
    );
    assert_eq!(m["wal_recovery"]["previous_run"], "clean");
    assert_eq!(read_all(&bases, "/demo/alone"), expected(5));
    drop(node);
}
