//! The extension through `ursula gateway` with access control and quotas on, tokens from
//! `URSULA_VFS_TOKEN_FILE` and `ursula_set_token`: an owner commits while its token file is
//! rotated; an expired token fails a commit alone as `unauthorized` and a fresh one rescues the
//! next; a stranger's token meets the concealing `404` (`not_applied`, `NotFound`); a bucket
//! past its request rate fails a commit alone as `rate_limited` with the spec's reason. The
//! gateway never answers a marked `403` (its policy conceals with `404`); the `forbidden` row is
//! shown against the fault proxy in `refusals.rs`.

use std::path::PathBuf;

use rusqlite::Connection;
use ursula_vfs_tests::access::AccessGateway;
use ursula_vfs_tests::access::BUCKET;
use ursula_vfs_tests::access::OWNER;
use ursula_vfs_tests::access::STRANGER;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::status;

const IOERR_AUTH: i32 = 7178;

/// A gateway with `quotas`, and the owner's token for `ttl_secs` in a file the extension reads
/// its tokens from (`URSULA_VFS_TOKEN_FILE`) with a retry budget of `retry_ms`.
fn with_token_file(
    quotas: &str,
    retry_ms: u64,
    dir: &tempfile::TempDir,
) -> (AccessGateway, PathBuf) {
    let gw = AccessGateway::start(quotas);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, gw.token(OWNER, 600)).expect("token");
    // SAFETY of set_var: each nextest test is its own process, set before any thread reads it.
    unsafe {
        std::env::set_var("URSULA_VFS_RETRY_MS", retry_ms.to_string());
        std::env::set_var("URSULA_VFS_TOKEN_FILE", &token_file);
    }
    (gw, token_file)
}

#[test]
fn an_owner_commits_through_the_gateway_while_its_token_file_rotates_and_expiry_fails_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (gw, token_file) = with_token_file("", 1500, &dir);
    let o = Owner::attach(&format!("{}/{BUCKET}/notes", gw.base()));
    o.insert("one").expect("first token");

    // Rotated: another token of the owner, read for the next request.
    std::fs::write(&token_file, gw.token(OWNER, 900)).expect("rotate");
    o.insert("two").expect("rotated token");

    // Expired: 401 for the whole retry budget, the commit fails alone.
    std::fs::write(&token_file, gw.token(OWNER, -60)).expect("expire");
    let e = o.insert("lost").expect_err("an expired token");
    assert_eq!(code(&e), IOERR_AUTH, "{e}");
    let st = o.status();
    assert_eq!(st["refused_kind"], "unauthorized", "{st}");
    assert_eq!(st["writes_refused"], true);

    // A fresh token: the next commit goes through with no new attach.
    std::fs::write(&token_file, gw.token(OWNER, 600)).expect("fresh");
    o.insert("three").expect("fresh token");
    assert_eq!(bodies(&o.db), vec!["one", "two", "three"]);

    // What reached the stream rebuilds elsewhere, read through the gateway.
    assert_eq!(bodies(&o.rebuild("copy.db")), vec!["one", "two", "three"]);
}

#[test]
fn ursula_set_token_switches_between_owner_and_stranger_and_the_stranger_meets_the_concealing_404()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = AccessGateway::start("");
    // SAFETY of set_var: each nextest test is its own process, set before any thread reads it.
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", "1500") };
    let ctl = control();
    let set = |t: &str| {
        ctl.query_row("SELECT ursula_set_token(?1)", [t], |_| Ok(()))
            .expect("set token");
    };
    let url = format!("{}/{BUCKET}/settoken", gw.base());
    let path = dir.path().join("b.db");

    // No token: the bucket does not exist for an anonymous caller.
    assert!(
        attach(&ctl, &path, &url).is_err(),
        "attached without a token"
    );

    set(&gw.token(OWNER, 600));
    attach(&ctl, &path, &url).expect("attach as the owner");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let insert = |body: &str| ursula_vfs_tests::sqlite::insert(&db, body);
    insert("mine").expect("owner commit");

    set(&gw.token(STRANGER, 600));
    let e = insert("theirs").expect_err("a stranger's commit");
    assert_eq!(code(&e), IOERR_AUTH, "{e}");
    let st = status(&ctl, &path);
    assert_eq!(st["refused_kind"], "not_applied", "{st}");
    assert_eq!(st["refused_reason"], "NotFound", "{st}");

    set(&gw.token(OWNER, 600));
    insert("mine again").expect("owner again, no reattach");
    assert_eq!(bodies(&db), vec!["mine", "mine again"]);
}

#[test]
fn a_bucket_past_its_request_rate_fails_a_commit_alone_as_rate_limited_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A budget shorter than the 1 s Retry-After: the refusal surfaces instead of waiting.
    let (gw, _token_file) = with_token_file(
        &format!("[[bucket]]\nid = \"{BUCKET}\"\nrequests_per_sec = 6\n"),
        300,
        &dir,
    );
    let url = format!("{}/{BUCKET}/rated", gw.base());
    let ctl = control();
    let path = dir.path().join("c.db");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // The attach itself takes several requests; retry it past the rate.
    while attach(&ctl, &path, &url).is_err() {
        assert!(std::time::Instant::now() < deadline, "never attached");
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let db = Connection::open(&path).expect("open");
    let mut refused = None;
    for i in 0..60 {
        match db.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES ({i})"
        )) {
            Ok(()) => {}
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("60 commits at once stayed within 6 requests a second");
    assert_eq!(code(&e), IOERR_AUTH, "{e}");
    let st = status(&ctl, &path);
    assert_eq!(st["refused_kind"], "rate_limited", "{st}");
    assert_eq!(
        st["refused_reason"], "tenant request rate limit exceeded",
        "{st}"
    );
    // Not poisoned: once the rate allows (a second later), commits go on.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    db.execute_batch("CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES (100)")
        .expect("the next commit once the rate allows");
}
