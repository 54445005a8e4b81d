//! Commits reach the stream before the local file, and any directory rebuilds the same database.

use rusqlite::Connection;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::header;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::attached_new_file;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::insert;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::sqlite::new_file;
use ursula_vfs_tests::sqlite::one;
use ursula_vfs_tests::sqlite::open_owner;
use ursula_vfs_tests::sqlite::status;

#[test]
fn commits_replicate_and_a_rebuild_elsewhere_is_identical() {
    let server = Server::start();
    let url = server.url("/demo/notes");
    let (ctl, _dir, path) = attached_new_file(&url);
    let db = Connection::open(&path).expect("open");
    assert_eq!(one::<String>(&db, "PRAGMA journal_mode"), "wal");
    assert_eq!(one::<i64>(&db, "PRAGMA page_size"), 4096);
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    for i in 0..40 {
        insert(&db, &format!("note {i}")).expect("insert");
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
    let (_server, a) = Owner::on_new_server("/demo/fence");
    a.insert("from a").expect("insert");
    let b = a.file("b.db");
    attach(&a.ctl, &b, &a.url).expect("attach b takes over");
    let db_b = Connection::open(&b).expect("open b");
    assert_eq!(bodies(&db_b), vec!["from a"]);
    let err = a.insert("lost").expect_err("a is fenced");
    assert_eq!(ursula_vfs_tests::sqlite::code(&err), 778, "{err}");
    let st = a.status();
    assert_eq!(st["fenced"], true, "{st}");
    assert_eq!(st["poisoned"], true);
    assert_eq!(st["error"]["action"], "stop");
    // New read transactions of the fenced file fail.
    let read = Connection::open(&a.path).expect("open a again").query_row(
        "SELECT count(*) FROM notes",
        [],
        |r| r.get::<_, i64>(0),
    );
    assert!(read.is_err(), "reads of a fenced file fail");
    insert(&db_b, "from b").expect("insert");
    assert_eq!(bodies(&db_b), vec!["from a", "from b"]);
}

#[test]
fn reattach_after_a_process_restart_resumes_from_the_local_file() {
    let server = Server::start();
    let (_dir, path) = new_file("a.db");
    {
        let ctl = control();
        let db = open_owner(&ctl, &path, &server.url("/demo/resume"));
        insert(&db, "one").expect("insert");
        insert(&db, "two").expect("insert");
    }
    assert!(
        path.with_file_name("a.db-ursula").exists(),
        "sidecar next to the file"
    );
}
