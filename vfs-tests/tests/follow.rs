//! Live read replicas (`ursula_attach(path, url, 'follow')`): a follower applies the owner's
//! commits as they reach the stream, readers see whole commits only, and a stream that is
//! deleted, recreated or retained past it either is followed (a snapshot) or stops it.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::OpenFlags;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::proxy::Action;
use ursula_vfs_tests::proxy::Canned;
use ursula_vfs_tests::proxy::Proxy;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::server::recreate;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::error_message;
use ursula_vfs_tests::sqlite::follow;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::sqlite::status;
use ursula_vfs_tests::wait_until;

/// An owner of `/demo/{name}` on a node of its own, attached straight to the node; its
/// followers read straight from the node too, or through a fault proxy.
struct Stream {
    owner: Owner,
    /// `/demo/{name}`.
    path: String,
    proxy: Option<Proxy>,
    _server: Server,
}

impl Stream {
    fn direct(name: &str) -> Stream {
        Stream::start(name, false)
    }

    fn proxied(name: &str) -> Stream {
        Stream::start(name, true)
    }

    fn start(name: &str, proxied: bool) -> Stream {
        let server = Server::start();
        let proxy = proxied.then(|| Proxy::start(server.port));
        let path = format!("/demo/{name}");
        Stream {
            owner: Owner::attach(&server.url(&path)),
            path,
            proxy,
            _server: server,
        }
    }

    fn proxy(&self) -> &Proxy {
        self.proxy.as_ref().expect("a proxied stream")
    }

    /// Attaches the file `name` beside the owner's as a follower; returns its path.
    fn follow(&self, name: &str) -> PathBuf {
        let url = match &self.proxy {
            Some(proxy) => format!("{}{}", proxy.base(), self.path),
            None => self.owner.url.clone(),
        };
        let path = self.owner.file(name);
        follow(&self.owner.ctl, &path, &url).expect("follow");
        path
    }

    fn status(&self, path: &Path) -> serde_json::Value {
        status(&self.owner.ctl, path)
    }

    /// From now on the proxy answers the followers' reads with 503.
    fn refuse_reads(&self) {
        let refused = Canned::new(503, &[], "");
        self.proxy()
            .add("GET", &self.path, Action::Respond(refused), None);
    }

    /// [`Stream::refuse_reads`], then waits until a read was refused: the long-poll that was
    /// in flight has ended, and the follower sees nothing of the stream until the proxy clears.
    fn refuse_reads_and_wait_for_one(&self) {
        self.refuse_reads();
        // The proxy counts a request and picks its rule at once: every GET after this count
        // met the 503.
        let before = self.proxy().count("GET");
        wait_until("a follower's read refused", || {
            self.proxy().count("GET") > before
        });
    }

    fn wait_until_stopped(&self, replica: &Path) -> serde_json::Value {
        wait_until("the follower to stop", || {
            self.status(replica)["following"] == false
        });
        self.status(replica)
    }
}

fn read_only(path: &Path) -> Connection {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open replica")
}

fn count(conn: &Connection) -> Option<i64> {
    conn.query_row("SELECT count(*) FROM notes", [], |r| r.get(0))
        .ok()
}

/// Reads of a stopped replica fail.
fn assert_reads_fail(replica: &Connection) {
    let err = replica
        .query_row("SELECT count(*) FROM notes", [], |r| r.get::<_, i64>(0))
        .expect_err("reads of a stopped replica fail");
    assert_eq!(code(&err), 266, "SQLITE_IOERR_READ: {err}");
}

#[test]
fn a_follower_applies_the_owners_commits_as_they_reach_the_stream_without_fencing_it() {
    let s = Stream::direct("follow");
    let owner = &s.owner;
    owner.insert("before").expect("insert");
    let replica_path = s.follow("replica.db");
    let replica = read_only(&replica_path);
    assert_eq!(bodies(&replica), vec!["before"]);
    for i in 0..20 {
        owner
            .insert(&format!("n{i}"))
            .expect("the owner is not fenced");
        wait_until("the commit on the replica", || {
            count(&replica) == Some(i + 2)
        });
    }
    let mut want = vec!["before".to_owned()];
    want.extend((0..20).map(|i| format!("n{i}")));
    assert_eq!(bodies(&replica), want);
    let owner_offset = owner.status()["offset"].clone();
    wait_until("the replica's status at the owner's offset", || {
        s.status(&replica_path)["offset"] == owner_offset
    });
    let st = s.status(&replica_path);
    assert_eq!(st["read_only"], true, "{st}");
    assert_eq!(st["following"], true, "{st}");
    assert_eq!(st["tail"], owner_offset, "{st}");
    assert_eq!(st["lag_bytes"], 0, "{st}");
    assert!(st["error"].is_null(), "{st}");
    let err = replica
        .execute("INSERT INTO notes(body) VALUES ('no')", [])
        .expect_err("a replica is read-only");
    assert_eq!(code(&err) & 0xff, 8, "SQLITE_READONLY: {err}");
    let rw = Connection::open(&replica_path).expect("open replica read-write");
    let err = rw
        .execute("INSERT INTO notes(body) VALUES ('no')", [])
        .expect_err("a replica is read-only through any connection");
    assert_eq!(code(&err) & 0xff, 8, "SQLITE_READONLY: {err}");
    assert_eq!(owner.status()["error"], serde_json::Value::Null);
}

/// Every commit moves an amount between two accounts and logs it with a multi-page row, so a
/// read that saw part of a commit sees a sum other than zero or a log that disagrees with the
/// counter. The reader holds each transaction across a pause and checks it does not move.
#[test]
fn a_read_transaction_on_a_follower_sees_whole_commits_and_keeps_its_snapshot() {
    let s = Stream::direct("torn");
    let owner = &s.owner.db;
    owner
        .execute_batch(
            "CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER);
             INSERT INTO acct VALUES (1, 0), (2, 0);
             CREATE TABLE log(id INTEGER PRIMARY KEY, blob BLOB);
             CREATE TABLE counter(n INTEGER); INSERT INTO counter VALUES (0);",
        )
        .expect("schema");
    let replica_path = s.follow("replica.db");
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
    wait_until("the last commit on the replica", || {
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
    assert!(integrity_ok(&check));
}

#[test]
fn several_followers_and_the_owner_work_together_in_one_process() {
    let s = Stream::direct("many");
    let replicas: Vec<_> = (1..=3)
        .map(|n| {
            let p = s.follow(&format!("replica{n}.db"));
            (p.clone(), read_only(&p), read_only(&p))
        })
        .collect();
    for i in 0..30 {
        s.owner.insert(&format!("n{i}")).expect("insert");
    }
    for (p, a, b) in &replicas {
        wait_until("every replica at the last commit", || {
            count(a) == Some(30) && count(b) == Some(30)
        });
        assert_eq!(s.status(p)["following"], true);
    }
    assert_eq!(bodies(&s.owner.db).len(), 30);
}

#[test]
fn deleting_the_stream_stops_the_follower_with_not_found_and_new_reads_fail() {
    let s = Stream::direct("gone");
    let replica_path = s.follow("replica.db");
    let replica = read_only(&replica_path);
    assert_eq!(count(&replica), Some(0));
    assert_eq!(http("DELETE", &s.owner.url, &[], b"").0, 204);
    let st = s.wait_until_stopped(&replica_path);
    assert_eq!(st["error"]["kind"], "not_found", "{st}");
    assert_eq!(st["error"]["action"], "reattach", "{st}");
    assert_reads_fail(&replica);
}

#[test]
fn a_stream_recreated_while_the_follower_was_away_stops_it_with_stream_state() {
    let s = Stream::proxied("again");
    let replica_path = s.follow("replica.db");
    // The follower's reads fail while the stream is deleted and created again.
    s.refuse_reads_and_wait_for_one();
    recreate(&s.owner.url);
    s.proxy().clear();
    let st = s.wait_until_stopped(&replica_path);
    assert_eq!(st["error"]["kind"], "stream_state", "{st}");
    assert!(error_message(&st).contains("recreated"), "{st}");
}

#[test]
fn a_follower_behind_retention_installs_the_latest_snapshot_and_goes_on() {
    // SAFETY: set before the extension reads its settings, in this test's own process.
    unsafe { std::env::set_var("URSULA_VFS_SNAPSHOT_MIN_BYTES", "65536") };
    let s = Stream::proxied("behind");
    let owner = &s.owner;
    let replica_path = s.follow("replica.db");
    let away_at = s.status(&replica_path)["offset"].clone();
    s.refuse_reads();
    // The owner writes until retention passes the offset the follower stopped at.
    let retained = || {
        owner.status()["retained"]
            .as_str()
            .unwrap_or("-1")
            .to_owned()
    };
    let mut rows = 0;
    while retained() == "-1" || retained().as_str() <= away_at.as_str().unwrap_or("-1") {
        assert!(rows < 4_000, "retention never moved: {}", owner.status());
        for _ in 0..20 {
            owner
                .db
                .execute("INSERT INTO notes(body) VALUES (hex(randomblob(1500)))", [])
                .expect("insert");
            rows += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    s.proxy().clear();
    let replica = read_only(&replica_path);
    wait_until("the replica at the owner's rows", || {
        count(&replica) == Some(rows)
    });
    let st = s.status(&replica_path);
    assert_eq!(st["following"], true, "{st}");
    assert_ne!(
        st["installed"], "-1",
        "the follower installed no snapshot: {st}"
    );
    owner.insert("after").expect("insert");
    wait_until("a commit after the snapshot", || {
        count(&replica) == Some(rows + 1)
    });
}

#[test]
fn a_follower_whose_reads_are_cut_off_resumes_from_its_offset_and_catches_up() {
    let s = Stream::proxied("cut");
    let replica_path = s.follow("replica.db");
    let replica = read_only(&replica_path);
    // Connections reset without an answer, the long-poll in flight included once it ends.
    s.proxy().add("GET", &s.path, Action::Reset, None);
    for i in 0..40 {
        s.owner.insert(&format!("n{i}")).expect("insert");
    }
    // The cut lasts: the replica stays behind for as long as it does.
    std::thread::sleep(Duration::from_millis(6_000));
    let stalled = count(&replica);
    assert!(
        stalled < Some(40),
        "the replica read through the cut: {stalled:?}"
    );
    assert_eq!(s.status(&replica_path)["following"], true);
    s.proxy().clear();
    wait_until("the replica to catch up", || count(&replica) == Some(40));
    let want: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
    assert_eq!(bodies(&replica), want, "each commit once, in order");
    assert_eq!(
        s.status(&replica_path)["offset"],
        s.owner.status()["offset"]
    );
}

#[test]
fn retention_past_a_follower_onto_a_snapshot_that_is_no_database_stops_it_with_stream_state() {
    let s = Stream::proxied("trimmed");
    let direct = &s.owner.url;
    let replica_path = s.follow("replica.db");
    s.refuse_reads_and_wait_for_one();
    for i in 0..5 {
        s.owner.insert(&format!("n{i}")).expect("insert");
    }
    // Another client publishes a snapshot that is not one of ours and trims the stream to it,
    // past the replica (the server keeps retention at or below the latest snapshot).
    let tail = s.owner.status()["offset"]
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
    s.proxy().clear();
    let st = s.wait_until_stopped(&replica_path);
    assert_eq!(st["error"]["kind"], "stream_state", "{st}");
    assert_eq!(st["error"]["action"], "reattach", "{st}");
    assert_reads_fail(&read_only(&replica_path));
}
