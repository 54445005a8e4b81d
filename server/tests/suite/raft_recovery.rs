//! The WAL root's guards and the recovery gate with real processes: startup refusals (a second
//! process, another topology, another format epoch), the run state a SIGTERM records, a
//! single node whose lost run state gates its groups until the operator accepts the loss, a
//! follower whose gate opens through the leader's barrier, a wiped voter that rejoins without
//! initializing its groups again and refuses replication until it obtains a vote floor, one
//! that restarts during an election and withholds its vote, and a cluster that bootstraps only
//! once every voter is up.

use std::path::Path;
use std::time::Duration;
use std::time::Instant;

use crate::harness::cluster::*;
use serde_json::Value;
use serde_json::json;

/// `run-state.bin`: magic `URSR`, version, then the state byte (1 running, 2 clean).
fn run_state(wal: &Path) -> u8 {
    let bytes = std::fs::read(wal.join("raft-log/run-state.bin")).expect("run-state.bin");
    assert_eq!(&bytes[..4], b"URSR");
    bytes[5]
}

fn accept(node: &Proc, group: u64, incarnation: Option<&str>, body: &Value) -> (u16, String) {
    let mut req = ureq::http::Request::builder()
        .method("POST")
        .uri(node.admin_url(&format!(
            "/__ursula/raft/{group}/recovery/accept-unsynced-loss"
        )))
        .header("content-type", "application/json");
    if let Some(i) = incarnation {
        req = req.header("x-ursula-process-incarnation", i);
    }
    let mut resp = agent()
        .run(req.body(body.to_string().into_bytes()).expect("request"))
        .expect("accept-unsynced-loss");
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

fn append(base: &str, path: &str, body: &str) -> u16 {
    agent()
        .post(&format!("{base}{path}"))
        .header("content-type", "application/octet-stream")
        .send(body.as_bytes())
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[test]
fn a_second_process_on_the_same_wal_refuses_to_start_naming_the_lock_holder() {
    let dir = tempfile_dir("lock");
    let port = free_port();
    let args = single_node_args(&dir, port, "[runtime]\ncore_count = 2", "");
    let node = Proc::start(port, args.clone(), dir.join("node.log"));
    let mut second = args.clone();
    second[4] = format!("127.0.0.1:{}", free_port());
    let stderr = refusal(&second);
    assert!(
        stderr.contains("journal.lock") && stderr.contains(&format!("PID {}", node.pid())),
        "{stderr}"
    );
    assert_eq!(
        node.json("/__ursula/ready").0,
        200,
        "the first still serves"
    );
    drop(node);
}

#[test]
fn a_wal_refuses_another_topology_naming_both_counts_and_a_missing_or_corrupt_record() {
    let dir = tempfile_dir("topology");
    let port = free_port();
    let counts = |cores: u32, groups: u32| {
        single_node_args(
            &dir,
            port,
            &format!("[runtime]\ncore_count = {cores}\n[raft]\ngroup_count = {groups}"),
            "",
        )
    };
    let mut node = Proc::start(port, counts(2, 4), dir.join("node.log"));
    create_when_led(&[node.url("")], "/demo/t");
    assert!(node.sigterm().success());
    let wal = dir.join("wal");
    let run_state_before = std::fs::read(wal.join("raft-log/run-state.bin")).expect("run state");

    let stderr = refusal(&counts(2, 8));
    assert!(
        stderr.contains("raft.group_count = 4") && stderr.contains("raft.group_count = 8"),
        "{stderr}"
    );
    let stderr = refusal(&counts(3, 4));
    assert!(
        stderr.contains("runtime.core_count = 2") && stderr.contains("runtime.core_count = 3"),
        "{stderr}"
    );
    // Refused before anything was written: no journal for a third core, the run state as it was.
    assert!(!wal.join("raft-log/core-2").exists());
    assert_eq!(
        std::fs::read(wal.join("raft-log/run-state.bin")).expect("run state"),
        run_state_before
    );

    let topology = wal.join("raft-log/topology.bin");
    let stored = std::fs::read(&topology).expect("topology");
    let mut corrupt = stored.clone();
    corrupt[5] ^= 0xff;
    std::fs::write(&topology, &corrupt).expect("corrupt");
    let stderr = refusal(&counts(2, 4));
    assert!(stderr.contains("topology.bin is corrupt"), "{stderr}");
    std::fs::remove_file(&topology).expect("remove");
    let stderr = refusal(&counts(2, 4));
    assert!(stderr.contains("topology.bin is missing"), "{stderr}");

    std::fs::write(&topology, &stored).expect("restore");
    node.respawn_ready();
    drop(node);
}

#[test]
fn a_wal_of_another_format_epoch_or_with_data_but_no_marker_refuses_to_start() {
    let dir = tempfile_dir("epoch");
    let port = free_port();
    let args = single_node_args(&dir, port, "[raft]\ngroup_count = 2", "");
    let mut node = Proc::start(port, args.clone(), dir.join("node.log"));
    let marker = dir.join("wal/raft-log/FORMAT_EPOCH");
    assert_eq!(
        std::fs::read_to_string(&marker).expect("marker").trim(),
        "3"
    );
    assert!(node.sigterm().success());

    std::fs::write(&marker, "2\n").expect("write");
    let stderr = refusal(&args);
    assert!(
        stderr.contains("format epoch \"2\"") && stderr.contains("refusing to start"),
        "{stderr}"
    );
    std::fs::remove_file(&marker).expect("remove");
    let stderr = refusal(&args);
    assert!(stderr.contains("no FORMAT_EPOCH marker"), "{stderr}");
    assert!(!marker.exists(), "a refused start writes no marker");

    std::fs::write(&marker, "3\n").expect("restore");
    node.respawn_ready();
    drop(node);
}

#[test]
fn sigterm_records_a_clean_run_state_and_neither_it_nor_a_process_crash_gates_the_restart() {
    let toml = "[raft]\ngroup_count = 2";
    let (dir, mut node, bases) =
        loaded_single_node("runstate", toml, "fsync = \"never\"", "/demo/clean", 5);
    let wal = dir.join("wal");
    assert_eq!(run_state(&wal), 1, "running");
    // Restarted, the node gates no group and serves all five records.
    let restart_ungated = |node: &mut Proc| {
        node.respawn_ready();
        assert_eq!(
            node.json("/__ursula/metrics").1["recovery_gates"]["gated"],
            json!({})
        );
        assert_eq!(read_all(&bases, "/demo/clean"), expected(5));
    };

    assert!(node.sigterm().success());
    assert_eq!(run_state(&wal), 2, "a graceful shutdown records clean");
    restart_ungated(&mut node);

    // Under `never` a process crash loses nothing: the page cache outlived the process.
    node.kill9();
    assert_eq!(run_state(&wal), 1, "a killed process records nothing");
    restart_ungated(&mut node);
    assert!(!node.log_text().contains("recovery gate closed"));
    drop(node);
}

#[test]
fn a_shutdown_past_its_deadline_exits_without_recording_a_clean_run() {
    // The test hook stalls the shutdown for a minute, far past the 3 s deadline: the deadline,
    // not the machine's speed, decides how the process ends.
    let toml = "[raft]\ngroup_count = 2\n[server]\nshutdown_deadline = \"3s\"\n\
                [testing]\nshutdown_stall = \"60s\"";
    let wal = "fsync = \"never\"";
    let (dir, mut node, _) = loaded_single_node("deadline", toml, wal, "/demo/deadline", 5);
    let wal = dir.join("wal");
    let started = Instant::now();
    let status = node.sigterm();
    let took = started.elapsed();
    assert!(!status.success(), "a shutdown cut by its deadline fails");
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(13),
        "the process exited at the deadline, 3 s after the signal: {took:?}"
    );
    assert_eq!(run_state(&wal), 1, "no clean shutdown recorded");
    node.assert_log_says("shutdown did not finish within 3s of the signal");
    drop(node);
}

#[test]
fn a_single_node_without_its_run_state_stays_gated_until_the_operator_accepts_the_loss() {
    let toml = "[raft]\ngroup_count = 2";
    let (dir, mut node, bases) = loaded_single_node("single-gate", toml, "", "/demo/gated", 20);
    let old_incarnation = node.json("/__ursula/metrics").1["process_incarnation"]
        .as_str()
        .expect("process_incarnation")
        .to_owned();
    assert!(node.sigterm().success());
    std::fs::remove_file(dir.join("wal/raft-log/run-state.bin")).expect("remove run state");
    node.spawn();

    let (status, ready) = node.json("/__ursula/ready");
    assert_eq!(
        (status, &ready["reason"]),
        (503, &json!("recovery_gate_closed"))
    );
    let m = node.json("/__ursula/metrics").1;
    assert_eq!(
        m["recovery_gates"]["gated"],
        json!({"0": "gated", "1": "gated"})
    );
    let incarnation = m["process_incarnation"]
        .as_str()
        .expect("incarnation")
        .to_owned();
    assert_ne!(incarnation, old_incarnation);
    assert_eq!(
        append(&node.url(""), "/demo/gated", "refused"),
        503,
        "a gated group takes no write"
    );
    let expect = |g: u64| {
        let m = node.json("/__ursula/metrics").1;
        let group = m["raft_groups"]
            .as_array()
            .expect("raft_groups")
            .iter()
            .find(|x| x["raft_group_id"] == g)
            .expect("group")
            .clone();
        json!({
            "expected_last_log_index": group["last_log_index"],
            "expected_current_term": group["current_term"],
        })
    };
    assert_eq!(accept(&node, 0, None, &expect(0)).0, 428);
    assert_eq!(accept(&node, 0, Some(&old_incarnation), &expect(0)).0, 412);
    let (status, text) = accept(&node, 0, Some(&incarnation), &expect(0));
    assert_eq!(status, 409, "closed but not stalled yet: {text}");

    // Each gate stalls on its own poll: wait for both.
    node.wait_ready_until(Duration::from_secs(60), |s, b| {
        s == 503
            && b["reason"] == "recovery_stalled"
            && b["recovery_stalled_groups"] == json!([0, 1])
    });
    let m = node.json("/__ursula/metrics").1;
    assert_eq!(
        m["recovery_gates"],
        json!({"gated": {"0": "stalled", "1": "stalled"}, "stalled": [0, 1], "wiped": {}})
    );
    assert!(node.log_text().contains("recovery gate stalled"));

    for g in [0u64, 1] {
        let right = expect(g);
        let index = right["expected_last_log_index"].as_u64().expect("a log");
        let wrong = json!({
            "expected_last_log_index": index + 1,
            "expected_current_term": right["expected_current_term"],
        });
        let (status, text) = accept(&node, g, Some(&incarnation), &wrong);
        assert_eq!(status, 409, "{text}");
        let (status, text) = accept(&node, g, Some(&incarnation), &right);
        assert_eq!(status, 200, "{text}");
        let answer: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(answer["outcome"], "gate_opened");
        assert_eq!(answer["raft_group_id"], g);
        assert_eq!(answer["node_id"], 1);
        assert_eq!(answer["last_log_index"], index);
        let (status, text) = accept(&node, g, Some(&incarnation), &right);
        assert_eq!(status, 200);
        assert!(text.contains("already_open"), "{text}");
    }
    node.wait_ready_until(Duration::from_secs(20), |s, _| s == 200);
    assert_eq!(read_all(&bases, "/demo/gated"), expected(20));
    producer_load(&bases, "/demo/gated", 20, 5, |_| {});
    assert_eq!(read_all(&bases, "/demo/gated"), expected(25));
    // The open gates were recorded: a restart does not close them again.
    assert!(node.sigterm().success());
    node.respawn_ready();
    drop(node);
}

/// Which node leads the groups of `/demo/...` streams, by a repeated create.
fn follower_of(bases: &[String], path: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(i) = bases.iter().position(|b| agent_raw(b, path).0 == 307) {
            return i;
        }
        assert!(Instant::now() < deadline, "no follower answered");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Appends `count` more after `from` through any node, reads the whole stream back, and waits
/// until every replica holds all of it locally (but the framing's last byte).
fn load_and_read_back_everywhere(bases: &[String], path: &str, from: u64, count: u64) {
    producer_load(bases, path, from, count, |_| {});
    let all = expected(from + count);
    assert_eq!(read_all(bases, path), all);
    for base in bases {
        wait_for_local_prefix(base, path, &all[..all.len() - 1]);
    }
}

fn wait_for_local_prefix(base: &str, path: &str, want: &str) {
    wait_for(30, &format!("{base} to catch up"), || {
        (local_prefix(base, path, want.len()).as_deref() == Some(want)).then_some(())
    });
}

/// Waits until `node` is ready, then asserts its log says `said` and that its gates opened
/// through the leader's barrier, never says `unsaid`, and that it gates nothing any more.
fn assert_gates_opened_by_the_barrier(node: &Proc, said: &str, unsaid: &str) {
    node.wait_ready_until(Duration::from_secs(60), |s, _| s == 200);
    let log = node.log_text();
    assert!(log.contains(said), "{log}");
    assert!(
        log.contains("recovery gate opened: applied the leader's barrier"),
        "{log}"
    );
    assert!(!log.contains(unsaid), "{log}");
    assert_eq!(
        node.json("/__ursula/metrics").1["recovery_gates"],
        json!({"gated": {}, "stalled": [], "wiped": {}})
    );
}

#[test]
fn a_follower_restarted_without_its_run_state_opens_its_gate_through_the_leaders_barrier() {
    let (dir, mut nodes, bases) = loaded_cluster("follower-gate", "/demo/barrier", 30);
    let f = follower_of(&bases, "/demo/barrier");
    assert!(nodes[f].sigterm().success());
    std::fs::remove_file(cluster_wal(&dir, f).join("raft-log/run-state.bin")).expect("remove");
    producer_load(&bases, "/demo/barrier", 30, 10, |_| {});
    nodes[f].spawn();

    let (closed, accepted) = ("recovery gate closed", "accept-unsynced-loss");
    assert_gates_opened_by_the_barrier(&nodes[f], closed, accepted);
    let all = expected(40);
    wait_for_local_prefix(&bases[f], "/demo/barrier", &all[..all.len() - 1]);
    drop(nodes);
}

#[test]
fn a_wiped_lowest_voter_rejoins_without_initializing_its_groups_and_catches_up() {
    let (dir, mut nodes, bases) = loaded_cluster("wiped", "/demo/wiped", 30);
    let initialized = |n: &Proc| {
        n.log_text()
            .matches("initialized: every voter was empty")
            .count()
    };
    assert_eq!(initialized(&nodes[0]), 4, "node 1 bootstrapped every group");

    nodes[0].kill9();
    std::fs::remove_dir_all(cluster_wal(&dir, 0)).expect("wipe");
    producer_load(&bases[1..], "/demo/wiped", 30, 10, |_| {});
    nodes[0].spawn();

    nodes[0].wait_ready_until(Duration::from_secs(60), |s, _| s == 200);
    let all = expected(40);
    wait_for_local_prefix(&bases[0], "/demo/wiped", &all[..all.len() - 1]);
    assert_eq!(
        initialized(&nodes[0]),
        4,
        "the wiped node initialized nothing again"
    );
    nodes[0].assert_log_says("holds nothing of a group another voter holds");
    producer_load(&bases, "/demo/wiped", 40, 5, |_| {});
    assert_eq!(read_all(&bases, "/demo/wiped"), expected(45));
    drop(nodes);
}

/// Each group's `key` under `raft_groups` in `base`'s metrics.
fn raft_groups(base: &str, key: &str) -> Vec<Value> {
    metrics(base)["raft_groups"]
        .as_array()
        .expect("raft_groups")
        .iter()
        .map(|g| g[key].clone())
        .collect()
}

/// A 3-voter cluster with `path` created and 20 producer records acknowledged, once node 1
/// (which initialized every group and campaigned at once) leads every group.
fn cluster_led_by_node_1(name: &str, path: &str) -> (Scratch, Vec<Proc>, Vec<String>) {
    let (dir, nodes, bases) = loaded_cluster(name, path, 20);
    wait_for(20, "node 1 leading every group", || {
        raft_groups(&bases[0], "current_leader")
            .iter()
            .all(|l| *l == json!(1))
            .then_some(())
    });
    (dir, nodes, bases)
}

/// `v` for each of the 4 groups, as the recovery gates' maps name them.
fn every_group(v: Value) -> Value {
    (0..4).map(|g| (g.to_string(), v.clone())).collect()
}

/// Producer record 30, sent through `bases[start]` (following redirects), is not acknowledged.
fn assert_seq_30_not_acknowledged(bases: &[String], start: usize, path: &str, how: &str) {
    let headers = [
        ("content-type", "application/octet-stream".to_owned()),
        ("producer-id", "load".to_owned()),
        ("producer-epoch", "0".to_owned()),
        ("producer-seq", "30".to_owned()),
    ];
    let answer = send(bases, start, "POST", path, &headers, b"p000030|");
    assert!(
        !matches!(answer, Some((200 | 204, _, _))),
        "a write was acknowledged {how}: {answer:?}"
    );
}

#[test]
fn a_wiped_voter_refuses_replication_until_the_leader_proves_a_quorum_without_it() {
    let path = "/demo/floor";
    // Node 1 leads every group: it is the leader that stays up alone below.
    let (dir, mut nodes, bases) = cluster_led_by_node_1("floor", path);

    // Node 3 loses its disk while the others keep committing.
    nodes[2].kill9();
    std::fs::remove_dir_all(cluster_wal(&dir, 2)).expect("wipe");
    producer_load(&bases[..2], path, 20, 10, |_| {});
    // Node 2 goes down too: node 1 still leads, but no quorum can confirm it without node 3.
    nodes[1].kill9();
    nodes[2].spawn();

    let gates = wait_for(20, "node 3 gating every group as wiped", || {
        let g = metrics(&bases[2])["recovery_gates"].clone();
        // A group is named wiped a moment before its gate reads gated: wait for both.
        let all = |k: &str| g[k].as_object().map(|w| w.len()) == Some(4);
        (all("wiped") && all("gated")).then_some(g)
    });
    assert_eq!(gates["wiped"], every_group(json!({"vote_floor": null})));
    assert_eq!(gates["gated"], every_group(json!("gated")));
    let (status, ready) = nodes[2].json("/__ursula/ready");
    assert_eq!(
        (status, &ready["reason"]),
        (503, &json!("recovery_gate_closed"))
    );

    // No write commits: node 1 alone is no quorum, and node 3 refuses its appends.
    for _ in 0..2 {
        assert_seq_30_not_acknowledged(&bases, 0, path, "without a quorum");
    }
    let m = metrics(&bases[2]);
    assert_eq!(
        m["recovery_gates"]["wiped"],
        every_group(json!({"vote_floor": null})),
        "no floor while node 2 is down"
    );
    for g in m["raft_groups"].as_array().expect("raft_groups") {
        assert_eq!(g["last_log_index"], Value::Null, "node 3 took nothing: {g}");
        assert_eq!(g["current_term"], json!(0), "node 3 took no vote: {g}");
    }
    // The operator cannot accept a loss in place of the lost vote.
    let incarnation = m["process_incarnation"].as_str().expect("incarnation");
    let (status, text) = accept(
        &nodes[2],
        0,
        Some(incarnation),
        &json!({"expected_last_log_index": null, "expected_current_term": 0}),
    );
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("durable vote floor"), "{text}");
    assert!(!nodes[2].log_text().contains("vote floor recorded"));
    // A restart without a floor keeps the replica wiped: the record says so before any probe.
    nodes[2].kill9();
    nodes[2].spawn();
    assert_eq!(
        metrics(&bases[2])["recovery_gates"]["wiped"],
        every_group(json!({"vote_floor": null}))
    );
    nodes[2].assert_log_says("lost_vote");

    // Node 2 is back: node 1 proves its leadership with it, node 3 takes node 1's vote as its
    // floor, catches up and opens its gates.
    nodes[1].spawn();
    let (floored, initialized) = ("vote floor recorded", "initialized: every voter was empty");
    assert_gates_opened_by_the_barrier(&nodes[2], floored, initialized);
    load_and_read_back_everywhere(&bases, path, 30, 10);
    drop(nodes);
}

#[test]
fn a_wiped_voter_restarting_without_a_leader_in_sight_withholds_its_vote_from_a_lagging_candidate()
{
    let path = "/demo/lagging";
    let (dir, mut nodes, bases) = cluster_led_by_node_1("no-leader", path);
    // Node 3 misses ten acknowledged writes; nodes 1 and 2 hold them.
    nodes[2].kill9();
    producer_load(&bases[..2], path, 20, 10, |_| {});
    // The leader dies and node 2 loses its disk: node 3, the only voter up that holds the group,
    // lacks those writes, and node 2's empty log would grant it a vote.
    nodes[0].kill9();
    nodes[1].kill9();
    std::fs::remove_dir_all(cluster_wal(&dir, 1)).expect("wipe");
    nodes[2].spawn();
    // Node 3 restarts following its old leader's vote, then campaigns: no voter reports a
    // leader by the time node 2 comes back.
    wait_for(20, "node 3 campaigning in every group", || {
        raft_groups(&bases[2], "current_leader")
            .iter()
            .all(Value::is_null)
            .then_some(())
    });
    nodes[1].spawn();

    wait_for(20, "node 2 gating every group as wiped", || {
        let g = metrics(&bases[1])["recovery_gates"].clone();
        (g["wiped"] == every_group(json!({"vote_floor": null}))).then_some(())
    });
    nodes[1].assert_log_says("holds nothing of a group another voter holds");
    // Several election timeouts (1.5-3 s each): node 3 campaigns and is never elected, so
    // nothing is acknowledged either.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        for base in &bases[1..] {
            let leaders = raft_groups(base, "current_leader");
            assert!(
                leaders.iter().all(Value::is_null),
                "a leader was elected without the writes nodes 1 and 2 acknowledged: {leaders:?} at {base}"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_seq_30_not_acknowledged(&bases, 2, path, "by a leader missing acknowledged writes");

    // Node 1 is back: it leads with node 3's vote, node 2 takes its floor and catches up, and
    // every acknowledged write is there exactly once.
    nodes[0].spawn();
    nodes[1].wait_ready_until(Duration::from_secs(60), |s, _| s == 200);
    assert_eq!(read_all(&bases, path), expected(30));
    load_and_read_back_everywhere(&bases, path, 30, 5);
    drop(nodes);
}

#[test]
fn a_cluster_whose_third_voter_starts_late_bootstraps_only_once_every_voter_is_up() {
    let dir = tempfile_dir("late");
    let (ports, mut nodes, _) = start_cluster(&dir, 3, 2);
    // A window in which a premature bootstrap would show: nothing may happen while a voter
    // is missing, so there is no condition to wait for.
    std::thread::sleep(Duration::from_secs(3));
    let m = nodes[0].json("/__ursula/metrics").1;
    for g in m["raft_groups"].as_array().expect("raft_groups") {
        assert_eq!(
            g["voter_ids"],
            json!([]),
            "initialized without every voter: {g}"
        );
        assert_eq!(g["current_leader"], Value::Null);
    }
    nodes[0].assert_log_says("waits for every voter before initializing");
    nodes.push(start_cluster_node(&dir, &ports, 2));
    let bases: Vec<String> = nodes.iter().map(|n| n.url("")).collect();
    create_when_led(&bases, "/demo/late");
    producer_load(&bases, "/demo/late", 0, 10, |_| {});
    assert_eq!(read_all(&bases, "/demo/late"), expected(10));
    let m = nodes[2].json("/__ursula/metrics").1;
    for g in m["raft_groups"].as_array().expect("raft_groups") {
        assert_eq!(g["voter_ids"], json!([1, 2, 3]), "{g}");
    }
    drop(nodes);
}

#[test]
fn a_damaged_complete_frame_at_the_journal_tail_gates_every_group_of_its_core_before_the_cut() {
    let toml = "[runtime]\ncore_count = 2\n[raft]\ngroup_count = 4";
    let wal = "fsync = \"always\"";
    let (dir, mut node, _) = loaded_single_node("damaged", toml, wal, "/demo/damaged", 10);
    assert!(node.sigterm().success());
    // A complete frame (`len | crc | seq, kind, group | payload`) whose checksum is wrong,
    // appended to core 0's newest segment.
    let core0 = dir.join("wal/raft-log/core-0");
    let newest = std::fs::read_dir(&core0)
        .expect("core-0")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .max()
        .expect("a segment");
    let good_len = std::fs::metadata(&newest).expect("segment").len();
    let mut frame = 17u32.to_le_bytes().to_vec();
    frame.extend_from_slice(&0xdead_beef_u32.to_le_bytes());
    frame.extend_from_slice(&[7u8; 17]);
    let mut bytes = std::fs::read(&newest).expect("read");
    bytes.extend_from_slice(&frame);
    std::fs::write(&newest, &bytes).expect("damage");
    node.spawn();

    let (status, ready) = node.json("/__ursula/ready");
    assert_eq!(
        (status, &ready["reason"]),
        (503, &json!("recovery_gate_closed"))
    );
    // Groups map to cores by `group % core_count`: core 0 holds groups 0 and 2.
    assert_eq!(
        node.json("/__ursula/metrics").1["recovery_gates"]["gated"],
        json!({"0": "gated", "2": "gated"})
    );
    assert_eq!(
        std::fs::metadata(&newest).expect("segment").len(),
        good_len,
        "the damaged frame was cut after the gates were recorded"
    );
    assert!(
        dir.join("wal/raft-log/recovery-gates.bin").exists(),
        "the gates are recorded"
    );
    node.assert_log_says("journal tail failed verification and was cut");
    // The gates survive a restart until they open.
    assert!(node.sigterm().success());
    node.spawn();
    assert_eq!(
        node.json("/__ursula/metrics").1["recovery_gates"]["gated"],
        json!({"0": "gated", "2": "gated"})
    );
    drop(node);
}
