//! The extension against a 3-voter Raft cluster behind `ursula gateway`: replication and
//! rebuild, fencing, and the loss of the leader while an owner commits.

use rusqlite::Connection;
use ursula_vfs_tests::cluster::Cluster;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::sqlite::status;

#[test]
fn commits_replicate_through_the_cluster_and_a_rebuild_is_identical() {
    let cluster = Cluster::start();
    let url = format!("{}/demo/cluster", cluster.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &url).expect("attach");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    for i in 0..30 {
        db.execute("INSERT INTO notes(body) VALUES (?1)", [format!("n{i}")])
            .expect("insert");
    }
    let copy = dir.path().join("copy.db");
    attach_read_only(&ctl, &copy, &url).expect("rebuild");
    let c = Connection::open(&copy).expect("open copy");
    assert_eq!(bodies(&c), bodies(&db));
    assert!(integrity_ok(&c));
    // A second owner fences the first, through the cluster too.
    let b = dir.path().join("b.db");
    attach(&ctl, &b, &url).expect("takeover");
    let err = db
        .execute("INSERT INTO notes(body) VALUES ('lost')", [])
        .expect_err("fenced");
    assert_eq!(code(&err), 778);
    assert_eq!(status(&ctl, &path)["fenced"], true);
}

#[test]
fn an_owner_keeps_every_acknowledged_commit_when_the_leader_dies() {
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", "20000") };
    let mut cluster = Cluster::start();
    let url = format!("{}/demo/failover", cluster.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &url).expect("attach");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let mut acked = Vec::new();
    for i in 0..60 {
        if i == 30 {
            let leader = cluster.leader().expect("one node leads every group");
            cluster.kill(leader);
        }
        match db.execute("INSERT INTO notes(body) VALUES (?1)", [format!("n{i}")]) {
            Ok(_) => acked.push(format!("n{i}")),
            Err(e) => panic!(
                "commit {i} failed across the failover: {e} {}",
                status(&ctl, &path)
            ),
        }
    }
    assert_eq!(bodies(&db), acked);
    let copy = dir.path().join("copy.db");
    attach_read_only(&ctl, &copy, &url).expect("rebuild after the failover");
    assert_eq!(
        bodies(&Connection::open(&copy).expect("open copy")),
        acked,
        "every acknowledged commit, once"
    );
}

#[test]
fn a_live_replica_through_the_gateway_keeps_up_with_the_owner() {
    let cluster = Cluster::start();
    let url = format!("{}/demo/replica", cluster.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &url).expect("attach");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let replica = dir.path().join("replica.db");
    ctl.query_row(
        "SELECT ursula_attach(?1, ?2, 'follow')",
        (replica.to_str().expect("utf8"), url.as_str()),
        |r| r.get::<_, String>(0),
    )
    .expect("follow through the gateway");
    let r = Connection::open(&replica).expect("open replica");
    for i in 0..20 {
        db.execute("INSERT INTO notes(body) VALUES (?1)", [format!("n{i}")])
            .expect("insert");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while bodies(&r).len() < 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica did not catch up: {}",
            status(&ctl, &replica)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(bodies(&r), bodies(&db));
    assert_eq!(status(&ctl, &replica)["following"], true);
}
