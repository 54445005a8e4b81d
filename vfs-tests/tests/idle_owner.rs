//! An owner idle past the stream's producer forget window (7 days; shortened here with the
//! server's `testing.producer_forget_after` hook) claims the stream back at its next commit,
//! and keeps it only when nobody else wrote meanwhile.

use std::time::Duration;

use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::proxy::Action;
use ursula_vfs_tests::proxy::Canned;
use ursula_vfs_tests::proxy::Proxy;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::insert;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::sqlite::open_owner;
use ursula_vfs_tests::sqlite::status;

/// The forget window the server runs with, in place of 7 days.
const FORGET: Duration = Duration::from_millis(800);
const IOERR_WRITE: i32 = 778;
const IOERR_AUTH: i32 = 7178;

/// A node that forgets idle producers after [`FORGET`].
fn forgetful_server() -> Server {
    Server::start_with_config("[testing]\nproducer_forget_after = \"800ms\"\n")
}

/// An owner of `/demo/{name}` on a [`forgetful_server`].
fn idle_owner(name: &str) -> (Server, Owner) {
    let server = forgetful_server();
    let owner = Owner::attach(&server.url(&format!("/demo/{name}")));
    (server, owner)
}

/// Lets the stream forget every producer: the owners stay idle past the window.
fn idle() {
    std::thread::sleep(FORGET + Duration::from_millis(400));
}

/// A read-only rebuild of the stream in a new file of `o`'s directory.
fn rebuilt(o: &Owner) -> Vec<String> {
    let copy = o.file(&format!("copy-{}.db", rand_suffix()));
    attach_read_only(&o.ctl, &copy, &o.url).expect("read-only attach");
    let c = rusqlite::Connection::open(&copy).expect("open copy");
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
    let (_server, o) = idle_owner("idle");
    o.insert("before the idle week").expect("insert");
    let epoch = o.status()["epoch"].as_u64().expect("epoch");

    idle();
    o.insert("after the idle week")
        .expect("the idle owner commits");
    let st = o.status();
    assert_eq!(st["fenced"], false, "{st}");
    assert_eq!(st["poisoned"], false, "{st}");
    assert_eq!(st["epoch"], epoch + 1, "the owner claimed again: {st}");
    let (code_, hs, _) = http("HEAD", &o.url, &[], b"");
    assert_eq!(code_, 200);
    assert_eq!(
        st["offset"].as_str(),
        ursula_vfs_tests::server::header(&hs, "stream-next-offset"),
        "status offset is the stream's tail after the claim and the commit"
    );
    o.insert("and the next one")
        .expect("commits go on in the new epoch");

    idle();
    o.insert("after a second idle week").expect("claims again");
    assert_eq!(o.status()["epoch"], epoch + 2);

    let want = [
        "before the idle week",
        "after the idle week",
        "and the next one",
        "after a second idle week",
    ];
    assert_eq!(bodies(&o.db), want);
    assert_eq!(rebuilt(&o), want);

    // The claim is in the stream, so a restart of the owner resumes from its local file.
    drop(o.db);
    let st = status(&o.ctl, &o.path);
    attach(&o.ctl, &o.path, &o.url).expect("attach again");
    let again = status(&o.ctl, &o.path);
    assert_ne!(
        again["local"], "-1",
        "resumed, not rebuilt: {again} after {st}"
    );
    let db = rusqlite::Connection::open(&o.path).expect("open");
    insert(&db, "after the restart").expect("insert");
    assert_eq!(bodies(&db).len(), 5);
}

#[test]
fn an_idle_owner_stays_fenced_when_another_owner_claimed_and_wrote_in_the_gap() {
    let (_server, a) = idle_owner("taken");
    a.insert("from a").expect("insert");
    idle();
    // B takes the stream over while A is idle, writes, and then idles long enough for the
    // stream to forget B too: nothing but the stream's order tells A that B was there.
    let b = open_owner(&a.ctl, &a.file("b.db"), &a.url);
    insert(&b, "from b").expect("b commits");
    idle();

    let err = a.insert("lost").expect_err("a is fenced");
    assert_eq!(code(&err), IOERR_WRITE, "{err}");
    let st = a.status();
    assert_eq!(st["fenced"], true, "{st}");
    assert_eq!(st["error"]["action"], "stop", "{st}");

    insert(&b, "b goes on").expect("b claims back and commits");
    let want = ["from a", "from b", "b goes on"];
    assert_eq!(bodies(&b), want);
    assert_eq!(rebuilt(&a), want);
}

#[test]
fn an_idle_owner_is_fenced_when_a_foreign_append_landed_in_the_gap() {
    let (_server, o) = idle_owner("foreign");
    o.insert("mine").expect("insert");
    idle();
    // No producer and no Stream-Seq: only the stream's tail shows it.
    let (st, _, _) = http(
        "POST",
        &o.url,
        &[("content-type", "application/octet-stream")],
        b"not a frame",
    );
    assert_eq!(st, 204);

    let err = o.insert("lost").expect_err("fenced");
    assert_eq!(code(&err), IOERR_WRITE, "{err}");
    let st = o.status();
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
    let o = Owner::attach(&format!("{}/demo/ghost", proxy.base()));
    proxy.add(
        "POST",
        "/",
        Action::ForwardThenRespond(Canned::new(429, &[], "lying layer")),
        None,
    );
    let err = o.insert("ghost").expect_err("refused");
    assert_eq!(code(&err), IOERR_AUTH, "{err}");
    proxy.clear();
    idle();

    // The spec's documented edge: the refused commit is in the stream before the claim, so the
    // owner cannot tell it from another writer's and reports a fence.
    let err = o.insert("next").expect_err("fenced");
    assert_eq!(code(&err), IOERR_WRITE, "{err}");
    assert_eq!(o.status()["fenced"], true, "{}", o.status());
}
