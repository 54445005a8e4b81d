//! `ursulactl`'s operational verbs against a real 3-voter Raft cluster of `ursula` processes:
//! `wait-ready`, `verify-cluster`, `wait` after a restart, `pin-incarnations` and what a later
//! verb does with a node whose process changed, `drain`/`undrain`, and `verify-quorum`'s JSON
//! proof. Exit codes are the spec's: 0 done, 2 safe abort, 1 anything else.

use std::time::Duration;
use std::time::Instant;

use crate::harness::cluster::*;
use crate::harness::ctl::*;

fn groups_arg() -> String {
    GROUPS.to_string()
}

/// `ursulactl VERB --config <c's manifest> ARGS` on a thread of its own; the thread answers
/// its exit code, stdout and stderr.
fn in_background(
    c: &Cluster,
    verb: &str,
    args: &[&str],
) -> std::thread::JoinHandle<(Option<i32>, String, String)> {
    let mut argv = vec![verb.to_owned(), "--config".to_owned(), c.manifest.clone()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    std::thread::spawn(move || ctl(&argv.iter().map(String::as_str).collect::<Vec<_>>()))
}

#[test]
fn wait_ready_passes_on_a_healthy_cluster_and_aborts_with_2_and_the_findings_when_a_node_is_down() {
    let mut c = Cluster::start("ctl-wait-ready");
    let g = groups_arg();
    let out = c.verb(
        "wait-ready",
        &["--expected-groups", &g, "--timeout-secs", "60"],
    );
    assert!(out.contains("ready: 3 nodes, 4 groups"), "{out}");
    // A wrong group count never becomes ready: a safe abort naming the shortfall.
    let err = c.verb_refused(
        "wait-ready",
        &["--expected-groups", "5", "--timeout-secs", "2"],
    );
    assert!(err.contains("group 4 not initialized"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // A node that does not answer is retried until the timeout, then reported.
    c.nodes[2].kill9();
    let err = c.verb_refused(
        "wait-ready",
        &["--expected-groups", &g, "--timeout-secs", "2"],
    );
    assert!(err.contains("node 3:"), "{err}");
}

#[test]
fn wait_ready_started_while_a_node_restarts_waits_for_it() {
    let mut c = Cluster::start("ctl-wait-ready-restart");
    c.nodes[1].sigterm();
    let waiter = in_background(
        &c,
        "wait-ready",
        &["--expected-groups", "4", "--timeout-secs", "90"],
    );
    // The waiter polls the stopped node a while before it comes back: the restart under test.
    std::thread::sleep(Duration::from_secs(2));
    c.nodes[1].spawn();
    let (code, out, err) = waiter.join().expect("waiter");
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
}

#[test]
fn verify_cluster_passes_on_a_caught_up_cluster_and_aborts_with_2_when_a_voter_is_missing() {
    let mut c = Cluster::start("ctl-verify-cluster");
    let bases: Vec<String> = c.nodes.iter().map(Proc::base).collect();
    create_when_led(&bases, "/demo/ops-verify");
    producer_load(&bases, "/demo/ops-verify", 0, 20, |_| {});
    let out = c.verb("verify-cluster", &["--timeout-secs", "60"]);
    assert!(out.contains("two samples"), "{out}");
    c.nodes[0].kill9();
    let err = c.verb_refused("verify-cluster", &["--timeout-secs", "3"]);
    assert!(err.contains("configured voter 1 is not present"), "{err}");
}

#[test]
fn wait_returns_once_a_restarted_node_is_a_caught_up_voter_again() {
    let mut c = Cluster::start("ctl-wait");
    let bases: Vec<String> = c.nodes.iter().map(Proc::base).collect();
    create_when_led(&bases, "/demo/ops-wait");
    c.nodes[2].sigterm();
    // Writes the stopped node misses: it must apply them before `wait` lets go.
    producer_load(&bases[..2], "/demo/ops-wait", 0, 30, |_| {});
    // Started while the node is down: connection errors are retried, not fatal.
    let waiter = in_background(&c, "wait", &["--node", "3", "--stall-timeout-secs", "60"]);
    // A window in which `wait` must not return while node 3 is down.
    std::thread::sleep(Duration::from_secs(2));
    assert!(!waiter.is_finished(), "wait returned while node 3 was down");
    c.nodes[2].spawn();
    let (code, out, err) = waiter.join().expect("waiter");
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert!(out.contains("node 3: waiting:"), "{out}");
    assert!(
        out.contains("node 3: a caught-up voter of all 4 groups"),
        "{out}"
    );
    // Caught up for real: node 3 serves the records it missed from its own log (a read one
    // byte short of the tail is served locally, by a follower too).
    let want = expected(30);
    let short = &want[..want.len() - 1];
    assert_eq!(
        local_prefix(&c.nodes[2].base(), "/demo/ops-wait", short.len()).as_deref(),
        Some(short)
    );
}

#[test]
fn wait_for_a_node_that_never_comes_back_aborts_with_2_after_the_stall_timeout() {
    let mut c = Cluster::start("ctl-wait-stall");
    c.nodes[2].kill9();
    let started = Instant::now();
    let err = c.verb_refused("wait", &["--node", "3", "--stall-timeout-secs", "2"]);
    assert!(err.contains("no progress for 2s"), "{err}");
    assert!(err.contains("node 3 does not answer"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn pin_incarnations_pins_every_node_and_a_later_verb_refuses_a_restarted_one() {
    let mut c = Cluster::start("ctl-pin");
    let pinned_text = ctl_expect(0, &["pin-incarnations", "--config", &c.manifest]);
    let pinned: serde_json::Value = serde_json::from_str(&pinned_text).expect("pinned JSON");
    for (i, node) in pinned["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .enumerate()
    {
        assert_eq!(
            node["expected_process_incarnation"],
            c.incarnation(i as u64 + 1).as_str(),
            "{pinned_text}"
        );
    }
    let pinned_path = c.dir.join("pinned.json");
    std::fs::write(&pinned_path, &pinned_text).expect("write pinned");
    let pinned_path = pinned_path.display().to_string();
    // The saved plan still matches: a verb runs.
    ctl_expect(
        0,
        &[
            "wait",
            "--config",
            &pinned_path,
            "--node",
            "2",
            "--stall-timeout-secs",
            "30",
        ],
    );

    c.restart(2);
    // Observation: node 2 is another process now, so the verb stops with exit 1.
    let (code, _, err) = ctl(&[
        "wait",
        "--config",
        &pinned_path,
        "--node",
        "1",
        "--stall-timeout-secs",
        "30",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("ursulactl: wait: node 2: process changed"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // pin-incarnations refuses to refresh a changed survivor, and binds only the named one.
    let (code, _, err) = ctl(&["pin-incarnations", "--config", &pinned_path]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("node 2: process changed"), "{err}");
    let rebound = ctl_expect(
        0,
        &[
            "pin-incarnations",
            "--config",
            &pinned_path,
            "--replace-node",
            "2",
        ],
    );
    let rebound: serde_json::Value = serde_json::from_str(&rebound).expect("rebound JSON");
    assert_eq!(
        rebound["nodes"][1]["expected_process_incarnation"],
        c.incarnation(2).as_str()
    );
    assert_eq!(rebound["nodes"][0], pinned["nodes"][0]);
}

#[test]
fn a_mutation_planned_against_a_restarted_process_is_refused_by_its_412() {
    let mut c = Cluster::start("ctl-pin-412");
    let pinned_text = ctl_expect(0, &["pin-incarnations", "--config", &c.manifest]);
    let pinned_path = c.dir.join("pinned.json");
    std::fs::write(&pinned_path, &pinned_text).expect("write pinned");
    c.restart(3);
    // `undrain` sends the saved identity straight away; the new process refuses it with 412
    // before it changes anything.
    let (code, _, err) = ctl(&[
        "undrain",
        "--config",
        &pinned_path.display().to_string(),
        "--node",
        "3",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("node 3: process changed"), "{err}");
    assert!(err.contains("answered 412"), "{err}");
}

/// The node of `c` that leads the most groups.
fn leading_most(c: &Cluster) -> u64 {
    (1..=3u64)
        .max_by_key(|id| c.led_by(*id).len())
        .expect("a node")
}

#[test]
fn drain_moves_every_leadership_away_keeps_it_away_and_undrain_clears_the_mark() {
    let c = Cluster::start("ctl-drain");
    // The cluster elects freely: drain whichever node leads most, so the drain has work.
    let leader = leading_most(&c);
    assert!(!c.led_by(leader).is_empty());
    let node = leader.to_string();
    let plan = c.verb("drain", &["--node", &node, "--dry-run"]);
    assert!(plan.contains("would set the maintenance mark"), "{plan}");
    assert!(plan.contains(&format!("transfer {leader} -> ")), "{plan}");
    // The dry run changed nothing.
    assert!(!c.led_by(leader).is_empty());
    let m = metrics(&c.nodes[(leader - 1) as usize].base());
    assert_eq!(m["leadership_shed"]["bits"], 0, "{m}");

    let out = c.verb("drain", &["--node", &node, "--timeout-secs", "60"]);
    assert!(
        out.contains(&format!("node {leader} leads no group")),
        "{out}"
    );
    assert!(c.led_by(leader).is_empty());
    // The mark holds: for a while, with elections free to happen, the node regains nothing.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        assert!(
            c.led_by(leader).is_empty(),
            "the drained node took a group back"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let m = metrics(&c.nodes[(leader - 1) as usize].base());
    assert_eq!(m["leadership_shed"]["state"], "maintenance-drain", "{m}");
    // Draining again is a no-op that succeeds.
    c.verb("drain", &["--node", &node]);

    let out = c.verb("undrain", &["--node", &node]);
    assert!(out.contains("maintenance mark cleared (none)"), "{out}");
    let m = metrics(&c.nodes[(leader - 1) as usize].base());
    assert_eq!(m["leadership_shed"]["bits"], 0, "{m}");
}

#[test]
fn drain_aborts_with_2_when_no_voter_could_take_the_groups() {
    let c = Cluster::start("ctl-drain-abort");
    // Drain two nodes' worth: the first drain leaves one other voter, the second has none.
    let leader = leading_most(&c);
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for o in &others {
        c.verb("drain", &["--node", &o.to_string()]);
    }
    let err = c.verb_refused("drain", &["--node", &leader.to_string()]);
    assert!(err.contains("no safe transfer target"), "{err}");
    assert!(err.contains("drained"), "{err}");
    // It aborted rather than corner the groups: the leader still leads them.
    assert!(!c.led_by(leader).is_empty());
    for id in 1..=3u64 {
        c.verb("undrain", &["--node", &id.to_string()]);
    }
}

#[test]
fn verify_quorum_prints_a_schema_3_proof_every_replica_applied() {
    let c = Cluster::start("ctl-quorum");
    let bases: Vec<String> = c.nodes.iter().map(Proc::base).collect();
    create_when_led(&bases, "/demo/ops-quorum");
    producer_load(&bases, "/demo/ops-quorum", 0, 10, |_| {});
    let g = groups_arg();
    let out = c.verb(
        "verify-quorum",
        &["--expected-groups", &g, "--timeout-secs", "60"],
    );
    let proof: serde_json::Value = serde_json::from_str(&out).expect("proof JSON");
    assert_eq!(proof["schema"], 3, "{out}");
    assert_eq!(proof["scope"], "full_quorum");
    assert_eq!(proof["maintenance_executor_certified"], false);
    assert!(proof["observation_started_at"].is_string());
    assert!(proof["observation_finished_at"].is_string());
    for id in 1..=3u64 {
        assert_eq!(
            proof["processes"][id.to_string()],
            c.incarnation(id).as_str(),
            "{out}"
        );
    }
    let groups = proof["groups"].as_array().expect("groups");
    assert_eq!(groups.len() as u64, GROUPS);
    for group in groups {
        let prefix = group["prefix"].as_u64().unwrap_or(0);
        for id in 1..=3u64 {
            let applied = group["applied"][id.to_string()].as_u64().expect("applied");
            assert!(applied >= prefix, "{group}");
        }
    }

    // With one voter excluded: the survivors' proof, never full redundancy.
    let mut c = c;
    c.nodes[2].kill9();
    let out = c.verb(
        "verify-survivors",
        &[
            "--excluded-node-id",
            "3",
            "--expected-groups",
            &g,
            "--timeout-secs",
            "60",
        ],
    );
    let proof: serde_json::Value = serde_json::from_str(&out).expect("survivors JSON");
    assert_eq!(proof["scope"], "surviving_quorum", "{out}");
    assert_eq!(proof["full_redundancy_restored"], false);
    assert_eq!(proof["configured_voter_ids"], serde_json::json!([1, 2, 3]));
    assert_eq!(proof["observed_voter_ids"], serde_json::json!([1, 2]));
    // The full proof refuses the same cluster (exit 2 within its deadline).
    c.verb_refused(
        "verify-quorum",
        &["--expected-groups", &g, "--timeout-secs", "3"],
    );
}
