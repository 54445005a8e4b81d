//! The extension against a 3-voter Raft cluster behind `ursula gateway`: replication and
//! rebuild, fencing, and the loss of the leader while an owner commits.

use rusqlite::Connection;
use ursula_vfs_tests::cluster::Cluster;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::follow;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::wait_until;

#[test]
fn commits_replicate_through_the_cluster_and_a_rebuild_is_identical() {
    let cluster = Cluster::start();
    let o = Owner::attach(&format!("{}/demo/cluster", cluster.base()));
    for i in 0..30 {
        o.insert(&format!("n{i}")).expect("insert");
    }
    let c = o.rebuild("copy.db");
    assert_eq!(bodies(&c), bodies(&o.db));
    assert!(integrity_ok(&c));
    // A second owner fences the first, through the cluster too.
    attach(&o.ctl, &o.file("b.db"), &o.url).expect("takeover");
    let err = o.insert("lost").expect_err("fenced");
    assert_eq!(code(&err), 778);
    assert_eq!(o.status()["fenced"], true);
}

#[test]
fn an_owner_keeps_every_acknowledged_commit_when_the_leader_dies() {
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", "20000") };
    let mut cluster = Cluster::start();
    let o = Owner::attach(&format!("{}/demo/failover", cluster.base()));
    let mut acked = Vec::new();
    for i in 0..60 {
        if i == 30 {
            let leader = cluster.leader().expect("one node leads every group");
            cluster.kill(leader);
        }
        match o.insert(&format!("n{i}")) {
            Ok(_) => acked.push(format!("n{i}")),
            Err(e) => panic!("commit {i} failed across the failover: {e} {}", o.status()),
        }
    }
    assert_eq!(bodies(&o.db), acked);
    assert_eq!(
        bodies(&o.rebuild("copy.db")),
        acked,
        "every acknowledged commit, once"
    );
}

#[test]
fn a_live_replica_through_the_gateway_keeps_up_with_the_owner() {
    let cluster = Cluster::start();
    let o = Owner::attach(&format!("{}/demo/replica", cluster.base()));
    let replica = o.file("replica.db");
    follow(&o.ctl, &replica, &o.url).expect("follow through the gateway");
    let r = Connection::open(&replica).expect("open replica");
    for i in 0..20 {
        o.insert(&format!("n{i}")).expect("insert");
    }
    wait_until("the replica to catch up", || bodies(&r).len() >= 20);
    assert_eq!(bodies(&r), bodies(&o.db));
    let st = ursula_vfs_tests::sqlite::status(&o.ctl, &replica);
    assert_eq!(st["following"], true, "{st}");
}
