//! The admin plane's Raft primitives against a real 3-voter cluster of `ursula` processes:
//! leader transfer (and its refusals), the maintenance drain mark (persisted, followed by the
//! balancer, refused as a target), self-election, the quorum proof, manual snapshot and purge,
//! the voter-set route with the leader restoring the configured voters, and a graceful
//! shutdown that hands its leaderships off before it stops.

use std::time::Duration;
use std::time::Instant;

use crate::harness::cluster::*;

struct Cluster {
    dir: Scratch,
    nodes: Vec<Proc>,
}

impl Cluster {
    fn start(name: &str) -> Cluster {
        let dir = tempfile_dir(name);
        let (_, nodes, _) = start_cluster(&dir, 3, 3);
        let c = Cluster { dir, nodes };
        c.wait_led();
        c
    }

    fn bases(&self) -> Vec<String> {
        self.nodes.iter().map(Proc::base).collect()
    }

    /// Every group has a leader every running node agrees on.
    fn wait_led(&self) -> Vec<u64> {
        wait_for(60, "every group led", || {
            let views: Vec<serde_json::Value> = self
                .nodes
                .iter()
                .filter(|n| n.child.is_some())
                .map(|n| metrics(&n.base()))
                .collect();
            let leaders: Vec<u64> = views[0]["raft_groups"]
                .as_array()?
                .iter()
                .map(|g| g["current_leader"].as_u64())
                .collect::<Option<_>>()?;
            let agree = views.iter().all(|v| {
                v["raft_groups"].as_array().is_some_and(|gs| {
                    gs.iter()
                        .zip(&leaders)
                        .all(|(g, l)| g["current_leader"].as_u64() == Some(*l))
                })
            });
            (agree && leaders.len() == 4).then_some(leaders)
        })
    }

    fn node(&self, id: u64) -> &Proc {
        &self.nodes[id as usize - 1]
    }

    /// An admin-plane POST to node `id` (1-based) with its incarnation; `(status, body)`.
    fn post(&self, id: u64, path: &str) -> (u16, String) {
        admin(self.node(id), "POST", path)
    }

    fn leader_of(&self, group: usize) -> u64 {
        self.wait_led()[group]
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The nodes go before `dir` drops and removes their files.
        for n in &mut self.nodes {
            n.kill9();
        }
    }
}

/// The log without its colour codes.
fn plain(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[test]
fn a_leader_transfer_moves_the_group_to_the_named_voter_and_refuses_what_it_must() {
    let c = Cluster::start("transfer");
    let leader = c.leader_of(0);
    let target = if leader == 1 { 2 } else { 1 };
    let follower = (1..=3)
        .find(|n| *n != leader && *n != target)
        .expect("third");

    let transfer_to = |to: u64| format!("/__ursula/raft/0/leader/transfer/{to}");
    let transfer_to_raw =
        |group: &str, to: &str| format!("/__ursula/raft/{group}/leader/transfer/{to}");
    let (status, body) = c.post(leader, &transfer_to(target));
    assert_eq!(status, 200, "{body}");
    let t = json(&body);
    assert_eq!(
        (t["from"].as_u64(), t["to"].as_u64()),
        (Some(leader), Some(target)),
        "{t}"
    );
    let seen = c.wait_led();
    assert_eq!(seen[0], target, "every node sees the new leader");

    // The old leader no longer leads: 409. A node outside the voters: 400. No group: 404.
    let (status, body) = c.post(leader, &transfer_to(follower));
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains(&format!("node {target}")),
        "names the leader: {body}"
    );
    // Ids that do not parse: the group's 404 names it, the node's 400 says what it is not.
    let refusals = [
        (transfer_to(9), 400, ""),
        (transfer_to(target), 400, ""),
        ("/__ursula/raft/99/leader/transfer/1".to_owned(), 404, ""),
        (transfer_to_raw("x", "1"), 404, "no group \"x\""),
        (transfer_to_raw("0", "abc"), 400, "\"abc\" is not a node id"),
        (
            "/__ursula/raft/g1/snapshot".to_owned(),
            404,
            "no group \"g1\"",
        ),
        (
            "/__ursula/raft/-1/self-election".to_owned(),
            404,
            "no group \"-1\"",
        ),
    ];
    for (path, want, says) in refusals {
        let (status, body) = c.post(target, &path);
        assert_eq!(status, want, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
    // Bound to the process: no incarnation 428, another one 412, and nothing moved.
    for (incarnation, want) in [(None, 428), (Some("00000000deadbeef"), 412)] {
        let (status, body) = admin_with(c.node(target), "POST", &transfer_to(leader), incarnation);
        assert_eq!(status, want, "incarnation {incarnation:?}: {body}");
    }
    assert_eq!(c.leader_of(0), target);

    // Writes go on through the new leader.
    create_when_led(&c.bases(), "/demo/after");
    let (status, _, _) = send_octets(&c.bases(), 0, "/demo/after", b"x").expect("append");
    assert!(status == 200 || status == 204, "{status}");
}

#[test]
fn a_drained_node_sheds_its_leaderships_refuses_new_ones_and_keeps_the_mark_across_a_restart() {
    let mut c = Cluster::start("drain");
    // Node 1 leads group 0 before the drain.
    let leader = c.leader_of(0);
    if leader != 1 {
        let (status, body) = admin(c.node(leader), "POST", "/__ursula/raft/0/leader/transfer/1");
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = admin(c.node(1), "POST", "/__ursula/leadership-shed/maintenance");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        json(&body),
        serde_json::json!({"bits": 1, "state": "maintenance-drain", "should_accept_transfer": false, "should_campaign": false, "should_shed_current_leaders": true})
    );
    // The balancer moves every leadership away, one per tick.
    wait_for(30, "node 1 leads nothing", || {
        c.wait_led().iter().all(|l| *l != 1).then_some(())
    });
    // Peers read the mark on the cluster plane; metrics carry it.
    let (status, _, body) =
        send_url("GET", &c.node(1).url("/__ursula/leadership-shed"), &[], b"").expect("shed");
    assert_eq!(status, 200);
    assert_eq!(
        json(std::str::from_utf8(&body).expect("utf8"))["state"],
        "maintenance-drain"
    );
    assert_eq!(metrics(&c.node(1).base())["leadership_shed"]["bits"], 1);
    // No transfer to it, no self-election by it.
    let leader = c.leader_of(0);
    let (status, body) = admin(c.node(leader), "POST", "/__ursula/raft/0/leader/transfer/1");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("drained"), "{body}");
    let (status, body) = admin(c.node(1), "POST", "/__ursula/raft/0/self-election");
    assert_eq!(status, 409, "{body}");

    // The mark is recorded: a restart keeps the node out of leadership.
    c.nodes[0].sigterm();
    c.nodes[0].spawn();
    c.wait_led();
    assert_eq!(
        metrics(&c.node(1).base())["leadership_shed"]["state"],
        "maintenance-drain"
    );
    let (status, body) = admin(
        c.node(c.leader_of(0)),
        "POST",
        "/__ursula/raft/0/leader/transfer/1",
    );
    assert_eq!(status, 409, "{body}");

    // Undrained, it may lead again.
    let (status, body) = admin(c.node(1), "DELETE", "/__ursula/leadership-shed/maintenance");
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["state"], "none");
    let leader = c.leader_of(0);
    let (status, body) = admin(c.node(leader), "POST", "/__ursula/raft/0/leader/transfer/1");
    assert_eq!(status, 200, "{body}");
    assert_eq!(c.leader_of(0), 1);
}

#[test]
fn sigterm_hands_the_nodes_leaderships_to_the_other_voters_before_it_stops() {
    let mut c = Cluster::start("sigterm-handoff");
    for g in 0..4 {
        let leader = c.leader_of(g);
        if leader != 2 {
            let (status, body) = admin(
                c.node(leader),
                "POST",
                &format!("/__ursula/raft/{g}/leader/transfer/2"),
            );
            assert_eq!(status, 200, "{body}");
        }
    }
    assert!(c.wait_led().iter().all(|l| *l == 2));
    let stopped = Instant::now();
    let status = c.nodes[1].sigterm();
    assert!(status.success(), "{status:?}");
    let log = plain(&c.nodes[1].log_text());
    assert!(log.contains("leadership handed off"), "{log}");
    assert!(
        log.contains("still_led=0"),
        "every leadership moved before the stop: {log}"
    );
    // The survivors lead every group at once: no election timeout had to pass.
    let survivors = [c.node(1).base(), c.node(3).base()];
    let views: Vec<serde_json::Value> = survivors.iter().map(|b| metrics(b)).collect();
    for v in &views {
        for g in v["raft_groups"].as_array().expect("groups") {
            let l = g["current_leader"].as_u64();
            assert!(
                l == Some(1) || l == Some(3),
                "{g} ({:?} after the signal)",
                stopped.elapsed()
            );
        }
    }
}

#[test]
fn the_quorum_proof_snapshot_and_purge_answer_on_the_leader() {
    let c = Cluster::start("logops");
    let bases = c.bases();
    create_when_led(&bases, "/demo/ops");
    for i in 0..20 {
        let (status, _, _) = send_octets(&bases, i, "/demo/ops", b"y").expect("append");
        assert!(status == 200 || status == 204, "{status}");
    }
    let leader = c.leader_of(0);
    let other = if leader == 1 { 2 } else { 1 };
    let (status, body) = admin(c.node(leader), "GET", "/__ursula/raft/0/quorum");
    assert_eq!(status, 200, "{body}");
    let p = json(&body);
    assert_eq!(p["leader"].as_u64(), Some(leader));
    assert_eq!(p["voter_ids"], serde_json::json!([1, 2, 3]));
    assert!(p["read_index"].as_u64().is_some_and(|i| i >= 1), "{p}");
    let (status, _) = admin(c.node(other), "GET", "/__ursula/raft/0/quorum");
    assert_eq!(status, 409);
    let (status, _) = admin_with(c.node(leader), "GET", "/__ursula/raft/0/quorum", None);
    assert_eq!(status, 428, "the proof is bound to the process");

    let (status, body) = admin(c.node(other), "POST", "/__ursula/raft/0/snapshot");
    assert_eq!(status, 200, "{body}");
    let snap = json(&body)["snapshot_index"].as_u64().expect("a snapshot");
    let (status, body) = admin(c.node(other), "POST", "/__ursula/raft/0/purge");
    assert_eq!(status, 200, "{body}");
    assert!(
        json(&body)["purged_index"]
            .as_u64()
            .is_some_and(|p| p >= snap.min(1)),
        "{body}"
    );
}

#[test]
fn a_voter_dropped_by_the_membership_route_is_restored_by_its_leader() {
    let c = Cluster::start("membership");
    let leader = c.leader_of(0);
    let dropped = (1..=3).find(|n| *n != leader).expect("a follower");
    let keep: Vec<String> = (1..=3)
        .filter(|n| *n != dropped)
        .map(|n| n.to_string())
        .collect();
    let voters = format!("/__ursula/raft/0/membership?voters={}", keep.join(","));
    let (status, body) = c.post(dropped, &voters);
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        json(&body)["leader"].as_u64(),
        Some(leader),
        "names the leader"
    );
    let (status, _) = c.post(leader, "/__ursula/raft/0/membership?voters=");
    assert_eq!(status, 400);
    let (status, body) = c.post(leader, &voters);
    assert_eq!(status, 200, "{body}");
    let changed = json(&body);
    assert!(
        changed["log_index"].as_u64().is_some_and(|i| i > 0),
        "{changed}"
    );
    assert!(
        !changed["voter_ids"]
            .as_array()
            .expect("voters")
            .contains(&dropped.into()),
        "{changed}"
    );
    // The keeper adds it back as a learner and promotes it.
    wait_for(30, "the dropped voter promoted again", || {
        let v = metrics(&c.node(leader).base());
        let g = &v["raft_groups"][0];
        (g["voter_ids"] == serde_json::json!([1, 2, 3])
            && g["learner_ids"] == serde_json::json!([]))
        .then_some(())
    });
    assert!(
        plain(&c.node(leader).log_text()).contains("promoting a caught-up learner back to voter")
    );
}

#[test]
fn a_wiped_voter_is_removed_re_added_as_a_learner_and_promoted_by_its_leaders() {
    let mut c = Cluster::start("rebuild");
    let bases = c.bases();
    create_when_led(&bases, "/demo/rebuild");
    producer_load(&bases, "/demo/rebuild", 0, 30, |_| {});
    c.nodes[2].kill9();
    std::fs::remove_dir_all(cluster_wal(&c.dir, 2)).expect("wipe");
    producer_load(&bases[..2], "/demo/rebuild", 30, 10, |_| {});
    c.nodes[2].spawn();
    // Every group of the survivors went through the rebuild: the wiped voter was removed and
    // promoted again, and the voter set is whole on every node.
    wait_for(90, "every group whole again on every node", || {
        c.nodes
            .iter()
            .all(|n| {
                metrics(&n.base())["raft_groups"]
                    .as_array()
                    .is_some_and(|gs| {
                        gs.len() == 4
                            && gs.iter().all(|g| {
                                g["voter_ids"] == serde_json::json!([1, 2, 3])
                                    && g["learner_ids"] == serde_json::json!([])
                            })
                    })
            })
            .then_some(())
    });
    let logs: String = c.nodes[..2].iter().map(|n| plain(&n.log_text())).collect();
    assert!(
        logs.contains("rebuilding a voter that lost entries") && logs.contains("node=3"),
        "{logs}"
    );
    assert!(
        logs.contains("promoting a caught-up learner back to voter"),
        "{logs}"
    );
    c.nodes[2].wait_ready_until(Duration::from_secs(60), |s, _| s == 200);
    producer_load(&bases, "/demo/rebuild", 40, 5, |_| {});
    let all = expected(45);
    assert_eq!(read_all(&bases, "/demo/rebuild"), all);
    // A read short of the tail is served by the replica itself.
    let short = &all[..all.len() - 1];
    wait_for(30, "the rebuilt voter holds every write", || {
        (local_prefix(&bases[2], "/demo/rebuild", short.len()).as_deref() == Some(short))
            .then_some(())
    });
}

#[test]
fn a_second_signal_exits_at_once_without_recording_a_clean_run() {
    // The shutdown stalls far past the test: only the second signal can end it early.
    let toml = "[raft]\ngroup_count = 2\n[server]\nshutdown_deadline = \"60s\"\n\
                [testing]\nshutdown_stall = \"60s\"";
    let (_dir, mut node) = single_node("second-signal", toml, "");
    let mut child = node.child.take().expect("running");
    let kill = |pid: u32| {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
    };
    kill(child.id());
    // Time an unstalled shutdown would take to end: the first signal's must not.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().expect("wait").is_none(),
        "the first signal's shutdown stalls"
    );
    let second = Instant::now();
    kill(child.id());
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            second.elapsed() < Duration::from_secs(10),
            "no exit after the second signal"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "{status:?}");
    let log = plain(&node.log_text());
    assert!(log.contains("a second signal: exiting at once"), "{log}");
    assert!(!log.contains("clean shutdown recorded"), "{log}");
}
