//! Commits reach the stream before the local file, and any directory rebuilds the same database.

use rusqlite::Connection;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::header;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::sqlite::status;

fn insert(db: &Connection, body: &str) {
    db.execute("INSERT INTO notes(body) VALUES (?1)", [body])
        .expect("insert");
}

#[test]
fn commits_replicate_and_a_rebuild_elsewhere_is_identical() {
    let server = Server::start();
    let url = format!("{}/demo/notes", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &url).expect("attach");
    let db = Connection::open(&path).expect("open");
    let mode: String = db
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode, "wal");
    let page: i64 = db
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .expect("page_size");
    assert_eq!(page, 4096);
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    for i in 0..40 {
        insert(&db, &format!("note {i}"));
    }
    db.execute_batch("BEGIN; INSERT INTO notes(body) VALUES ('x'); INSERT INTO notes(body) VALUES ('y'); COMMIT;")
        .expect("explicit transaction");
    let st = status(&ctl, &path);
    assert_eq!(st["commits"], 42, "one append per transaction: {st}");
    assert_eq!(st["poisoned"], false);
    assert_eq!(st["local"], "-1", "first attach rebuilt from nothing");
    let (code, hs, _) = http("HEAD", &url, &[], b"");
    assert_eq!(code, 200);
    assert_eq!(
        st["offset"].as_str(),
        header(&hs, "stream-next-offset"),
        "status offset is the stream's tail"
    );
    assert!(st["offset"].is_string());

    let dir2 = tempfile::tempdir().expect("tempdir");
    let copy = dir2.path().join("b.db");
    attach_read_only(&ctl, &copy, &url).expect("read-only attach elsewhere");
    let other = Connection::open(&copy).expect("open copy");
    assert_eq!(bodies(&other), bodies(&db));
    assert_eq!(bodies(&other).len(), 42);
    assert!(integrity_ok(&other));
    let st2 = status(&ctl, &copy);
    assert_eq!(st2["read_only"], true);
    assert_eq!(st2["epoch"], st["epoch"]);
}

#[test]
fn a_second_owner_fences_the_first() {
    let server = Server::start();
    let url = format!("{}/demo/fence", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.db");
    let b = dir.path().join("b.db");
    attach(&ctl, &a, &url).expect("attach a");
    let da = Connection::open(&a).expect("open a");
    da.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    insert(&da, "from a");
    attach(&ctl, &b, &url).expect("attach b takes over");
    let db_b = Connection::open(&b).expect("open b");
    assert_eq!(bodies(&db_b), vec!["from a"]);
    let err = da
        .execute("INSERT INTO notes(body) VALUES ('lost')", [])
        .expect_err("a is fenced");
    assert_eq!(ursula_vfs_tests::sqlite::code(&err), 778, "{err}");
    let st = status(&ctl, &a);
    assert_eq!(st["fenced"], true, "{st}");
    assert_eq!(st["poisoned"], true);
    assert_eq!(st["error"]["action"], "stop");
    // New read transactions of the fenced file fail.
    let read = Connection::open(&a).expect("open a again").query_row(
        "SELECT count(*) FROM notes",
        [],
        |r| r.get::<_, i64>(0),
    );
    assert!(read.is_err(), "reads of a fenced file fail");
    insert(&db_b, "from b");
    assert_eq!(bodies(&db_b), vec!["from a", "from b"]);
}

#[test]
fn reattach_after_a_process_restart_resumes_from_the_local_file() {
    let server = Server::start();
    let url = format!("{}/demo/resume", server.base());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    {
        let ctl = control();
        attach(&ctl, &path, &url).expect("attach");
        let db = Connection::open(&path).expect("open");
        db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
            .expect("create");
        insert(&db, "one");
        insert(&db, "two");
    }
    assert!(
        path.with_file_name("a.db-ursula").exists(),
        "sidecar next to the file"
    );
}
