//! The fair-share leadership balancer on a real 3-voter cluster (4 groups): after an undrain
//! and after a restart the leaderships even out until the nodes are within one of each other
//! (2, 1, 1), a drained voter is passed over (and counted as a skip) while the others even
//! out between themselves, and writes keep landing throughout. On 5 voters, where a handoff
//! needs votes from voters the leader still heartbeats, drains, the balancer and a named
//! transfer all land.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::harness::cluster::*;

const BALANCED: &str = "[governance.leadership_balance]\nmax_per_tick = 1\n\
                        [testing]\nleadership_balance_interval = \"200ms\"\n";

/// Each of nodes `1..=nodes` leaderships as node `from` sees them (every node gets an entry).
fn leader_counts_of(from: &str, nodes: u64) -> BTreeMap<u64, usize> {
    let m = metrics(from);
    let mut counts: BTreeMap<u64, usize> = (1..=nodes).map(|n| (n, 0)).collect();
    for g in m["raft_groups"].as_array().expect("raft_groups") {
        if let Some(l) = g["current_leader"].as_u64() {
            *counts.entry(l).or_insert(0) += 1;
        }
    }
    counts
}

fn leader_counts(from: &str) -> BTreeMap<u64, usize> {
    leader_counts_of(from, 3)
}

fn wait_counts(from: &str, what: &str, ok: impl Fn(&BTreeMap<u64, usize>) -> bool) {
    wait_counts_of(from, 3, what, ok);
}

fn wait_counts_of(from: &str, nodes: u64, what: &str, ok: impl Fn(&BTreeMap<u64, usize>) -> bool) {
    wait_for(90, what, || {
        let c = leader_counts_of(from, nodes);
        (c.values().sum::<usize>() == 4 && ok(&c)).then_some(())
    });
}

fn within_one(c: &BTreeMap<u64, usize>) -> bool {
    let (lo, hi) = (c.values().min(), c.values().max());
    matches!((lo, hi), (Some(lo), Some(hi)) if hi - lo <= 1)
}

fn set_drained(n: &Proc, on: bool) {
    let method = if on { "POST" } else { "DELETE" };
    let (status, body) = admin(n, method, "/__ursula/leadership-shed/maintenance");
    assert_eq!(status, 200, "{body}");
}

#[test]
fn leaderships_even_out_after_an_undrain_and_a_restart_passing_over_a_drained_voter() {
    let dir = tempfile_dir("balance");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes: Vec<Proc> = (0..3)
        .map(|i| start_cluster_node_with(&dir, &ports, i, BALANCED))
        .collect();
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    let path = "/demo/balance";
    create_when_led(&bases, path);
    producer_load(&bases, path, 0, 10, |_| {});

    // Nodes 2 and 3 drained: node 1 leads everything.
    set_drained(&nodes[1], true);
    set_drained(&nodes[2], true);
    wait_counts(&bases[0], "node 1 to lead every group", |c| c[&1] == 4);

    // Node 2 undrained, node 3 still drained: 2 and 2, and node 3 is passed over.
    set_drained(&nodes[1], false);
    wait_counts(&bases[0], "nodes 1 and 2 to share the groups", |c| {
        c[&1] == 2 && c[&2] == 2
    });
    let skips = wait_for(30, "a move passed over for the drained voter", || {
        let s: u64 = bases
            .iter()
            .map(|b| counter(&metrics(b), "leadership_balance_skips"))
            .sum();
        (s >= 1).then_some(s)
    });
    assert!(skips >= 1);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        leader_counts(&bases[0])[&3],
        0,
        "the drained voter got none"
    );
    producer_load(&bases, path, 10, 5, |_| {});

    // Node 3 undrained: within one of each other (2, 1, 1).
    set_drained(&nodes[2], false);
    wait_counts(
        &bases[0],
        "leaderships within one of each other",
        within_one,
    );
    let moves: u64 = bases
        .iter()
        .map(|b| counter(&metrics(b), "leadership_balance_moves"))
        .sum();
    // Three leaderships moved in all; under load an election may have made one of them.
    assert!(moves >= 1, "the balancer moved leaderships: {moves}");

    // Node 1 restarts: its leaderships move away, then come back to within one.
    nodes[0].sigterm();
    wait_counts(&bases[1], "nodes 2 and 3 to lead everything", |c| {
        c[&1] == 0
    });
    nodes[0].respawn_ready();
    wait_counts(&bases[1], "leaderships within one after the restart", |c| {
        within_one(c) && c[&1] >= 1
    });
    producer_load(&bases, path, 15, 5, |_| {});
    assert_eq!(read_all(&bases, path), expected(20));
    drop(nodes);
}

#[test]
fn with_five_voters_drains_the_balancer_and_a_transfer_all_hand_leaderships_off() {
    let dir = tempfile_dir("balance-five");
    let ports: Vec<u16> = (0..5).map(|_| free_port()).collect();
    let nodes: Vec<Proc> = (0..5)
        .map(|i| start_cluster_node_with(&dir, &ports, i, BALANCED))
        .collect();
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    let path = "/demo/five";
    create_when_led(&bases, path);
    producer_load(&bases, path, 0, 10, |_| {});

    // Four of five drained: their leaderships can only go to node 1, each handoff needing a
    // third vote from a drained voter the leader was heartbeating.
    for n in &nodes[1..] {
        set_drained(n, true);
    }
    wait_counts_of(&bases[0], 5, "node 1 to lead every group", |c| c[&1] == 4);

    // Undrained: node 1 gives three of its four away, one to each of three voters.
    for n in &nodes[1..] {
        set_drained(n, false);
    }
    wait_counts_of(&bases[0], 5, "at most one leadership per node", |c| {
        c.values().all(|n| *n <= 1)
    });
    let moves = counter(&metrics(&bases[0]), "leadership_balance_moves");
    assert!(moves >= 1, "node 1's balancer moved leaderships: {moves}");

    // A named transfer to a voter that leads nothing lands too.
    let counts = leader_counts_of(&bases[0], 5);
    let idle = *counts
        .iter()
        .find(|(_, n)| **n == 0)
        .expect("a voter leading nothing")
        .0;
    let m = metrics(&bases[0]);
    let (group, leader) = m["raft_groups"]
        .as_array()
        .expect("raft_groups")
        .iter()
        .enumerate()
        .find_map(|(g, v)| Some((g, v["current_leader"].as_u64()?)))
        .expect("a led group");
    let (status, body) = admin(
        &nodes[leader as usize - 1],
        "POST",
        &format!("/__ursula/raft/{group}/leader/transfer/{idle}"),
    );
    assert_eq!(status, 200, "{body}");
    wait_for(30, "every node to see the new leader", || {
        bases
            .iter()
            .all(|b| metrics(b)["raft_groups"][group]["current_leader"].as_u64() == Some(idle))
            .then_some(())
    });
    producer_load(&bases, path, 10, 5, |_| {});
    assert_eq!(read_all(&bases, path), expected(15));
    drop(nodes);
}
