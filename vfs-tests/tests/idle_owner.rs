//! An owner idle past the stream's producer forget window (7 days; shortened here with the
//! server's `testing.producer_forget_after` hook) claims the stream back at its next commit,
//! and keeps it only when nobody else wrote meanwhile.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use rusqlite::Connection;
use ursula_vfs_tests::proxy::Action;
use ursula_vfs_tests::proxy::Canned;
use ursula_vfs_tests::proxy::Proxy;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::sqlite::status;

/// The forget window the server runs with, in place of 7 days.
const FORGET: Duration = Duration::from_millis(800);
const IOERR_WRITE: i32 = 778;
const IOERR_AUTH: i32 = 7178;

fn forgetful_server() -> Server {
    Server::start_with_config("[testing]\nproducer_forget_after = \"800ms\"\n")
}

/// Lets the stream forget every producer: the owners stay idle past the window.
fn idle() {
    std::thread::sleep(FORGET + Duration::from_millis(400));
}

/// Attaches `path` as the stream's owner, with the notes table (created once per stream).
fn owner(ctl: &Connection, path: &Path, url: &str) -> Connection {
    attach(ctl, path, url).expect("attach");
    let db = Connection::open(path).expect("open");
    db.execute(
        "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT)",
        [],
    )
    .expect("create");
    db
}

fn insert(db: &Connection, body: &str) -> rusqlite::Result<usize> {
    db.execute("INSERT INTO notes(body) VALUES (?1)", [body])
}

fn rebuilt(ctl: &Connection, dir: &Path, url: &str) -> Vec<String> {
    let copy: PathBuf = dir.join(format!("copy-{}.db", rand_suffix()));
    attach_read_only(ctl, &copy, url).expect("read-only attach");
    let c = Connection::open(&copy).expect("open copy");
    assert!(integrity_ok(&c));
    bodies(&c)
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[test]
fn an_owner_idle_past_the_forget_window_claims_the_stream_back_and_keeps_committing() {
    let server = forgetful_server();
    let url = format!("{}/demo/idle", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    let db = owner(&ctl, &path, &url);
    insert(&db, "before the idle week").expect("insert");
    let epoch = status(&ctl, &path)["epoch"].as_u64().expect("epoch");

    idle();
    insert(&db, "after the idle week").expect("the idle owner commits");
    let st = status(&ctl, &path);
    assert_eq!(st["fenced"], false, "{st}");
    assert_eq!(st["poisoned"], false, "{st}");
    assert_eq!(st["epoch"], epoch + 1, "the owner claimed again: {st}");
    let (code_, hs, _) = http("HEAD", &url, &[], b"");
    assert_eq!(code_, 200);
    assert_eq!(
        st["offset"].as_str(),
        ursula_vfs_tests::server::header(&hs, "stream-next-offset"),
        "status offset is the stream's tail after the claim and the commit"
    );
    insert(&db, "and the next one").expect("commits go on in the new epoch");

    idle();
    insert(&db, "after a second idle week").expect("claims again");
    assert_eq!(status(&ctl, &path)["epoch"], epoch + 2);

    let want = [
        "before the idle week",
        "after the idle week",
        "and the next one",
        "after a second idle week",
    ];
    assert_eq!(bodies(&db), want);
    assert_eq!(rebuilt(&ctl, dir.path(), &url), want);

    // The claim is in the stream, so a restart of the owner resumes from its local file.
    drop(db);
    let st = status(&ctl, &path);
    attach(&ctl, &path, &url).expect("attach again");
    let again = status(&ctl, &path);
    assert_ne!(
        again["local"], "-1",
        "resumed, not rebuilt: {again} after {st}"
    );
    let db = Connection::open(&path).expect("open");
    insert(&db, "after the restart").expect("insert");
    assert_eq!(bodies(&db).len(), 5);
}

#[test]
fn an_idle_owner_stays_fenced_when_another_owner_claimed_and_wrote_in_the_gap() {
    let server = forgetful_server();
    let url = format!("{}/demo/taken", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let a_path = dir.path().join("a.db");
    let b_path = dir.path().join("b.db");
    let a = owner(&ctl, &a_path, &url);
    insert(&a, "from a").expect("insert");
    idle();
    // B takes the stream over while A is idle, writes, and then idles long enough for the
    // stream to forget B too: nothing but the stream's order tells A that B was there.
    let b = owner(&ctl, &b_path, &url);
    insert(&b, "from b").expect("b commits");
    idle();

    let err = insert(&a, "lost").expect_err("a is fenced");
    assert_eq!(code(&err), IOERR_WRITE, "{err}");
    let st = status(&ctl, &a_path);
    assert_eq!(st["fenced"], true, "{st}");
    assert_eq!(st["error"]["action"], "stop", "{st}");

    insert(&b, "b goes on").expect("b claims back and commits");
    let want = ["from a", "from b", "b goes on"];
    assert_eq!(bodies(&b), want);
    assert_eq!(rebuilt(&ctl, dir.path(), &url), want);
}

#[test]
fn an_idle_owner_is_fenced_when_a_foreign_append_landed_in_the_gap() {
    let server = forgetful_server();
    let url = format!("{}/demo/foreign", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    let db = owner(&ctl, &path, &url);
    insert(&db, "mine").expect("insert");
    idle();
    // No producer and no Stream-Seq: only the stream's tail shows it.
    let (st, _, _) = http(
        "POST",
        &url,
        &[("content-type", "application/octet-stream")],
        b"not a frame",
    );
    assert_eq!(st, 204);

    let err = insert(&db, "lost").expect_err("fenced");
    assert_eq!(code(&err), IOERR_WRITE, "{err}");
    let st = status(&ctl, &path);
    assert_eq!(st["fenced"], true, "{st}");
    assert!(
        st["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("something else was written after its last commit"),
        "{st}"
    );
}

#[test]
fn a_refusal_that_applied_before_the_gap_makes_the_next_commit_report_a_fence() {
    // SAFETY of set_var: each nextest test is its own process, set before any thread reads it.
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", "300") };
    let server = forgetful_server();
    let proxy = Proxy::start(server.port);
    let url = format!("{}/demo/ghost", proxy.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    let db = owner(&ctl, &path, &url);
    proxy.add(
        "POST",
        "/",
        Action::ForwardThenRespond(Canned::new(429, &[], "lying layer")),
        None,
    );
    let err = insert(&db, "ghost").expect_err("refused");
    assert_eq!(code(&err), IOERR_AUTH, "{err}");
    proxy.clear();
    idle();

    // The spec's documented edge: the refused commit is in the stream before the claim, so the
    // owner cannot tell it from another writer's and reports a fence.
    let err = insert(&db, "next").expect_err("fenced");
    assert_eq!(code(&err), IOERR_WRITE, "{err}");
    let st = status(&ctl, &path);
    assert_eq!(st["fenced"], true, "{st}");
}
