//! Live read replicas (`ursula_attach(path, url, 'follow')`): a follower applies the owner's
//! commits as they reach the stream, readers see whole commits only, and a stream that is
//! deleted, recreated or retained past it either is followed (a snapshot) or stops it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use rusqlite::Connection;
use rusqlite::OpenFlags;
use ursula_vfs_tests::proxy::Action;
use ursula_vfs_tests::proxy::Canned;
use ursula_vfs_tests::proxy::Proxy;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::status;

fn follow(ctl: &Connection, path: &Path, url: &str) -> rusqlite::Result<String> {
    ctl.query_row(
        "SELECT ursula_attach(?1, ?2, 'follow')",
        (path.to_str().expect("utf8 path"), url),
        |r| r.get(0),
    )
}

fn read_only(path: &Path) -> Connection {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open replica")
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting for {what}");
}

fn count(conn: &Connection) -> Option<i64> {
    conn.query_row("SELECT count(*) FROM notes", [], |r| r.get(0))
        .ok()
}

#[test]
fn a_follower_applies_the_owners_commits_as_they_reach_the_stream_without_fencing_it() {
    let server = Server::start();
    let url = format!("{}/demo/follow", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let owner_path = dir.path().join("owner.db");
    attach(&ctl, &owner_path, &url).expect("attach owner");
    let owner = Connection::open(&owner_path).expect("open owner");
    owner
        .execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    owner
        .execute("INSERT INTO notes(body) VALUES ('before')", [])
        .expect("insert");
    let replica_path = dir.path().join("replica.db");
    follow(&ctl, &replica_path, &url).expect("follow");
    let replica = read_only(&replica_path);
    assert_eq!(bodies(&replica), vec!["before"]);
    for i in 0..20 {
        owner
            .execute("INSERT INTO notes(body) VALUES (?1)", [format!("n{i}")])
            .expect("the owner is not fenced");
        wait_for("the commit on the replica", || {
            count(&replica) == Some(i + 2)
        });
    }
    let mut want = vec!["before".to_owned()];
    want.extend((0..20).map(|i| format!("n{i}")));
    assert_eq!(bodies(&replica), want);
    let owner_offset = status(&ctl, &owner_path)["offset"].clone();
    wait_for("the replica's status at the owner's offset", || {
        status(&ctl, &replica_path)["offset"] == owner_offset
    });
    let s = status(&ctl, &replica_path);
    assert_eq!(s["read_only"], true, "{s}");
    assert_eq!(s["following"], true, "{s}");
    assert_eq!(s["tail"], owner_offset, "{s}");
    assert_eq!(s["lag_bytes"], 0, "{s}");
    assert!(s["error"].is_null(), "{s}");
    let err = replica
        .execute("INSERT INTO notes(body) VALUES ('no')", [])
        .expect_err("a replica is read-only");
    assert_eq!(code(&err) & 0xff, 8, "SQLITE_READONLY: {err}");
    let rw = Connection::open(&replica_path).expect("open replica read-write");
    let err = rw
        .execute("INSERT INTO notes(body) VALUES ('no')", [])
        .expect_err("a replica is read-only through any connection");
    assert_eq!(code(&err) & 0xff, 8, "SQLITE_READONLY: {err}");
    assert_eq!(status(&ctl, &owner_path)["error"], serde_json::Value::Null);
}

/// Every commit moves an amount between two accounts and logs it with a multi-page row, so a
/// read that saw part of a commit sees a sum other than zero or a log that disagrees with the
/// counter. The reader holds each transaction across a pause and checks it does not move.
#[test]
fn a_read_transaction_on_a_follower_sees_whole_commits_and_keeps_its_snapshot() {
    let server = Server::start();
    let url = format!("{}/demo/torn", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let owner_path = dir.path().join("owner.db");
    attach(&ctl, &owner_path, &url).expect("attach owner");
    let owner = Connection::open(&owner_path).expect("open owner");
    owner
        .execute_batch(
            "CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER);
             INSERT INTO acct VALUES (1, 0), (2, 0);
             CREATE TABLE log(id INTEGER PRIMARY KEY, blob BLOB);
             CREATE TABLE counter(n INTEGER); INSERT INTO counter VALUES (0);",
        )
        .expect("schema");
    let replica_path = dir.path().join("replica.db");
    follow(&ctl, &replica_path, &url).expect("follow");
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let done = done.clone();
        let path = replica_path.clone();
        std::thread::spawn(move || {
            let conn = read_only(&path);
            let read = |conn: &Connection| -> (i64, i64, i64) {
                conn.query_row(
                    "SELECT (SELECT sum(bal) FROM acct), (SELECT count(*) FROM log), (SELECT n FROM counter)",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .expect("read")
            };
            let mut seen = std::collections::BTreeSet::new();
            let mut checks = 0;
            while !done.load(Ordering::SeqCst) {
                conn.execute_batch("BEGIN").expect("begin");
                let first = read(&conn);
                std::thread::sleep(Duration::from_millis(3));
                let again = read(&conn);
                conn.execute_batch("COMMIT").expect("end");
                assert_eq!(first.0, 0, "a transfer seen half-applied: {first:?}");
                assert_eq!(
                    first.1, first.2,
                    "the log and its counter disagree: {first:?}"
                );
                assert_eq!(first, again, "a read transaction's view moved");
                seen.insert(first.2);
                checks += 1;
            }
            (checks, seen.len())
        })
    };
    let blob = vec![7u8; 12_000];
    for i in 0..150 {
        let tx = owner.unchecked_transaction().expect("tx");
        tx.execute("UPDATE acct SET bal = bal - ?1 WHERE id = 1", [i])
            .expect("debit");
        tx.execute("INSERT INTO log(blob) VALUES (?1)", [&blob])
            .expect("log");
        tx.execute("UPDATE acct SET bal = bal + ?1 WHERE id = 2", [i])
            .expect("credit");
        tx.execute("UPDATE counter SET n = n + 1", [])
            .expect("count");
        tx.commit().expect("commit");
    }
    let check = read_only(&replica_path);
    wait_for("the last commit on the replica", || {
        check
            .query_row("SELECT n FROM counter", [], |r| r.get::<_, i64>(0))
            .is_ok_and(|n| n == 150)
    });
    done.store(true, Ordering::SeqCst);
    let (checks, distinct) = reader.join().expect("the reader saw only whole commits");
    assert!(
        distinct > 5,
        "the reader saw {distinct} states in {checks} reads: the follower did not apply while it read"
    );
    let integrity: String = check
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity");
    assert_eq!(integrity, "ok");
}

#[test]
fn several_followers_and_the_owner_work_together_in_one_process() {
    let server = Server::start();
    let url = format!("{}/demo/many", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let owner_path = dir.path().join("owner.db");
    attach(&ctl, &owner_path, &url).expect("attach owner");
    let owner = Connection::open(&owner_path).expect("open owner");
    owner
        .execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let replicas: Vec<_> = (1..=3)
        .map(|n| {
            let p = dir.path().join(format!("replica{n}.db"));
            follow(&ctl, &p, &url).expect("follow");
            (p.clone(), read_only(&p), read_only(&p))
        })
        .collect();
    for i in 0..30 {
        owner
            .execute("INSERT INTO notes(body) VALUES (?1)", [format!("n{i}")])
            .expect("insert");
    }
    for (p, a, b) in &replicas {
        wait_for("every replica at the last commit", || {
            count(a) == Some(30) && count(b) == Some(30)
        });
        assert_eq!(status(&ctl, p)["following"], true);
    }
    assert_eq!(bodies(&owner).len(), 30);
}

#[test]
fn deleting_the_stream_stops_the_follower_with_not_found_and_new_reads_fail() {
    let server = Server::start();
    let url = format!("{}/demo/gone", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let owner_path = dir.path().join("owner.db");
    attach(&ctl, &owner_path, &url).expect("attach owner");
    let owner = Connection::open(&owner_path).expect("open owner");
    owner
        .execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let replica_path = dir.path().join("replica.db");
    follow(&ctl, &replica_path, &url).expect("follow");
    let replica = read_only(&replica_path);
    assert_eq!(count(&replica), Some(0));
    assert_eq!(http("DELETE", &url, &[], b"").0, 204);
    wait_for("the follower to stop", || {
        status(&ctl, &replica_path)["following"] == false
    });
    let s = status(&ctl, &replica_path);
    assert_eq!(s["error"]["kind"], "not_found", "{s}");
    assert_eq!(s["error"]["action"], "reattach", "{s}");
    let err = replica
        .query_row("SELECT count(*) FROM notes", [], |r| r.get::<_, i64>(0))
        .expect_err("reads of a stopped replica fail");
    assert_eq!(code(&err), 266, "SQLITE_IOERR_READ: {err}");
}

#[test]
fn a_stream_recreated_while_the_follower_was_away_stops_it_with_stream_state() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let direct = format!("{}/demo/again", server.base());
    let via_proxy = format!("{}/demo/again", proxy.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let owner_path = dir.path().join("owner.db");
    attach(&ctl, &owner_path, &direct).expect("attach owner");
    let owner = Connection::open(&owner_path).expect("open owner");
    owner
        .execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let replica_path = dir.path().join("replica.db");
    follow(&ctl, &replica_path, &via_proxy).expect("follow");
    // The follower's reads fail while the stream is deleted and created again.
    proxy.add(
        "GET",
        "/demo/again",
        Action::Respond(Canned::new(503, &[], "")),
        None,
    );
    std::thread::sleep(Duration::from_millis(6_000));
    assert_eq!(http("DELETE", &direct, &[], b"").0, 204);
    let created = http(
        "PUT",
        &direct,
        &[("content-type", "application/octet-stream")],
        b"",
    );
    assert_eq!(created.0, 201);
    proxy.clear();
    wait_for("the follower to stop", || {
        status(&ctl, &replica_path)["following"] == false
    });
    let s = status(&ctl, &replica_path);
    assert_eq!(s["error"]["kind"], "stream_state", "{s}");
    assert!(
        s["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("recreated")),
        "{s}"
    );
}

#[test]
fn a_follower_behind_retention_installs_the_latest_snapshot_and_goes_on() {
    // SAFETY: set before the extension reads its settings, in this test's own process.
    unsafe { std::env::set_var("URSULA_VFS_SNAPSHOT_MIN_BYTES", "65536") };
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let direct = format!("{}/demo/behind", server.base());
    let via_proxy = format!("{}/demo/behind", proxy.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let owner_path = dir.path().join("owner.db");
    attach(&ctl, &owner_path, &direct).expect("attach owner");
    let owner = Connection::open(&owner_path).expect("open owner");
    owner
        .execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let replica_path = dir.path().join("replica.db");
    follow(&ctl, &replica_path, &via_proxy).expect("follow");
    let away_at = status(&ctl, &replica_path)["offset"].clone();
    proxy.add(
        "GET",
        "/demo/behind",
        Action::Respond(Canned::new(503, &[], "")),
        None,
    );
    // The owner writes until retention passes the offset the follower stopped at.
    let retained = || {
        status(&ctl, &owner_path)["retained"]
            .as_str()
            .unwrap_or("-1")
            .to_owned()
    };
    let mut rows = 0;
    while retained() == "-1" || retained().as_str() <= away_at.as_str().unwrap_or("-1") {
        assert!(
            rows < 4_000,
            "retention never moved: {}",
            status(&ctl, &owner_path)
        );
        for _ in 0..20 {
            owner
                .execute("INSERT INTO notes(body) VALUES (hex(randomblob(1500)))", [])
                .expect("insert");
            rows += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy.clear();
    let replica = read_only(&replica_path);
    wait_for("the replica at the owner's rows", || {
        count(&replica) == Some(rows)
    });
    let s = status(&ctl, &replica_path);
    assert_eq!(s["following"], true, "{s}");
    assert_ne!(
        s["installed"], "-1",
        "the follower installed no snapshot: {s}"
    );
    owner
        .execute("INSERT INTO notes(body) VALUES ('after')", [])
        .expect("insert");
    wait_for("a commit after the snapshot", || {
        count(&replica) == Some(rows + 1)
    });
}

#[test]
fn a_follower_whose_reads_are_cut_off_resumes_from_its_offset_and_catches_up() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let direct = format!("{}/demo/cut", server.base());
    let via_proxy = format!("{}/demo/cut", proxy.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let owner_path = dir.path().join("owner.db");
    attach(&ctl, &owner_path, &direct).expect("attach owner");
    let owner = Connection::open(&owner_path).expect("open owner");
    owner
        .execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let replica_path = dir.path().join("replica.db");
    follow(&ctl, &replica_path, &via_proxy).expect("follow");
    let replica = read_only(&replica_path);
    // Connections reset without an answer, the long-poll in flight included once it ends.
    proxy.add("GET", "/demo/cut", Action::Reset, None);
    for i in 0..40 {
        owner
            .execute("INSERT INTO notes(body) VALUES (?1)", [format!("n{i}")])
            .expect("insert");
    }
    std::thread::sleep(Duration::from_millis(6_000));
    let stalled = count(&replica);
    assert!(
        stalled < Some(40),
        "the replica read through the cut: {stalled:?}"
    );
    assert_eq!(status(&ctl, &replica_path)["following"], true);
    proxy.clear();
    wait_for("the replica to catch up", || count(&replica) == Some(40));
    let want: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
    assert_eq!(bodies(&replica), want, "each commit once, in order");
    assert_eq!(
        status(&ctl, &replica_path)["offset"],
        status(&ctl, &owner_path)["offset"]
    );
}

#[test]
fn retention_past_a_follower_onto_a_snapshot_that_is_no_database_stops_it_with_stream_state() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let direct = format!("{}/demo/trimmed", server.base());
    let via_proxy = format!("{}/demo/trimmed", proxy.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let owner_path = dir.path().join("owner.db");
    attach(&ctl, &owner_path, &direct).expect("attach owner");
    let owner = Connection::open(&owner_path).expect("open owner");
    owner
        .execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let replica_path = dir.path().join("replica.db");
    follow(&ctl, &replica_path, &via_proxy).expect("follow");
    proxy.add(
        "GET",
        "/demo/trimmed",
        Action::Respond(Canned::new(503, &[], "")),
        None,
    );
    std::thread::sleep(Duration::from_millis(6_000));
    for i in 0..5 {
        owner
            .execute("INSERT INTO notes(body) VALUES (?1)", [format!("n{i}")])
            .expect("insert");
    }
    // Another client publishes a snapshot that is not one of ours and trims the stream to it,
    // past the replica (the server keeps retention at or below the latest snapshot).
    let tail = status(&ctl, &owner_path)["offset"]
        .as_str()
        .expect("offset")
        .to_owned();
    let published = http(
        "PUT",
        &format!("{direct}/snapshot/{tail}"),
        &[("content-type", "application/octet-stream")],
        b"not a database",
    );
    assert!(published.0 < 300, "snapshot refused: {}", published.0);
    let trimmed = http("PUT", &format!("{direct}/retention/{tail}"), &[], b"");
    assert!(trimmed.0 < 300, "retention refused: {}", trimmed.0);
    proxy.clear();
    wait_for("the follower to stop", || {
        status(&ctl, &replica_path)["following"] == false
    });
    let s = status(&ctl, &replica_path);
    assert_eq!(s["error"]["kind"], "stream_state", "{s}");
    assert_eq!(s["error"]["action"], "reattach", "{s}");
    let replica = read_only(&replica_path);
    let err = replica
        .query_row("SELECT count(*) FROM notes", [], |r| r.get::<_, i64>(0))
        .expect_err("reads of a stopped replica fail");
    assert_eq!(code(&err), 266, "SQLITE_IOERR_READ: {err}");
}
