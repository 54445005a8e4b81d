//! Local-file rules: read-only attach, the frame limit, missing streams, refusals decided from
//! the file alone, the lock-out after a failed attach, and which failures the attach retries.

use rusqlite::Connection;
use serde_json::Value;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::proxy::Action;
use ursula_vfs_tests::proxy::Canned;
use ursula_vfs_tests::proxy::Proxy;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::attached_new_file;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::insert;
use ursula_vfs_tests::sqlite::new_file;
use ursula_vfs_tests::sqlite::one;

fn message(e: &rusqlite::Error) -> String {
    e.to_string()
}

#[test]
fn read_only_attach_claims_nothing_and_refuses_writes_with_sqlite_readonly() {
    let (_server, o) = Owner::on_new_server("/demo/ro");
    o.insert("a").expect("insert");
    let r = o.rebuild("reader.db");
    assert_eq!(bodies(&r), vec!["a"]);
    let err = insert(&r, "no").expect_err("read-only");
    assert_eq!(code(&err) & 0xff, 8, "SQLITE_READONLY: {err}");
    o.insert("b").expect("the owner is not fenced");
    assert_eq!(o.status_of("reader.db")["read_only"], true);
}

#[test]
fn read_only_attach_of_a_missing_stream_is_not_found_and_creates_nothing() {
    let server = Server::start();
    let url = server.url("/demo/missing");
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let err = attach_read_only(&ctl, &dir.path().join("x.db"), &url).expect_err("missing");
    assert!(message(&err).contains("ursula_attach: not_found:"), "{err}");
    assert_eq!(
        http("HEAD", &url, &[], b"").0,
        404,
        "a read-only attach never creates the stream"
    );
}

#[test]
fn a_transaction_over_the_frame_limit_is_never_sent_and_fails_alone() {
    unsafe { std::env::set_var("URSULA_VFS_MAX_FRAME_BYTES", "65536") };
    let (_server, o) = Owner::on_new_server("/demo/big");
    let (db, url) = (&o.db, &o.url);
    db.execute("CREATE TABLE blobs(b BLOB)", [])
        .expect("create");
    let tail = || {
        ursula_vfs_tests::server::header(&http("HEAD", url, &[], b"").1, "stream-next-offset")
            .map(str::to_owned)
    };
    let before = tail();
    let err = db
        .execute("INSERT INTO blobs VALUES (randomblob(200000))", [])
        .expect_err("too large");
    assert_eq!(code(&err), 7178, "{err}");
    assert_eq!(tail(), before, "nothing was appended");
    let st = o.status();
    assert_eq!(st["refused_kind"], "too_large", "{st}");
    let reason = st["refused_reason"].as_str().unwrap_or_default().to_owned();
    assert!(
        reason.ends_with("-byte frame over the 65536-byte frame limit"),
        "{reason}"
    );
    assert_eq!(st["poisoned"], false);
    db.execute("INSERT INTO blobs VALUES (x'01')", [])
        .expect("a small commit succeeds");
    assert_eq!(o.status()["writes_refused"], false);
}

#[test]
fn a_missing_stream_over_a_file_with_data_is_not_found_and_the_file_is_kept() {
    let mut server = Server::start();
    let o = Owner::attach(&server.url("/demo/lost"));
    o.insert("precious").expect("insert");
    let Owner {
        db,
        ctl,
        path,
        url,
        dir: _dir,
    } = o;
    // Closed: an open connection would make the attach `in_use`.
    drop(db);
    server.restart();
    let size_before = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let err = attach(&ctl, &path, &url).expect_err("the stream is gone");
    assert!(message(&err).contains("ursula_attach: not_found:"), "{err}");
    // The message names the file it refuses to overwrite, so the user knows what to move.
    assert!(
        message(&err).contains(&format!("the local file {} holds data", path.display())),
        "{err}"
    );
    assert_eq!(
        http("HEAD", &url, &[], b"").0,
        404,
        "no stream was created over the data"
    );
    assert_eq!(
        std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0),
        size_before,
        "the file is kept"
    );
}

#[test]
fn a_plain_file_with_data_is_unreplicated_and_still_opens() {
    let server = Server::start();
    let url = server.url("/demo/plain");
    let (_dir, path) = new_file("plain.db");
    {
        // Written before the extension is loaded, through the bundled SQLite's own VFS.
        let db = Connection::open(&path).expect("open");
        db.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (zeroblob(10000));")
            .expect("write");
    }
    let ctl = control();
    let err = attach(&ctl, &path, &url).expect_err("never attached file with data");
    assert!(message(&err).contains("unreplicated_file"), "{err}");
    let db = Connection::open(&path).expect("still opens as a plain file");
    assert_eq!(one::<i64>(&db, "SELECT count(*) FROM t"), 1);
}

#[test]
fn a_file_attached_to_one_stream_refuses_another() {
    let server = Server::start();
    let (ctl, _dir, path) = attached_new_file(&server.url("/demo/one"));
    let err = attach(&ctl, &path, &server.url("/demo/two")).expect_err("other stream");
    assert!(message(&err).contains("other_stream"), "{err}");
    Connection::open(&path).expect("the file still opens: no lock-out");
}

#[test]
fn an_open_connection_makes_attach_in_use() {
    let (_server, o) = Owner::on_new_server("/demo/inuse");
    let err = attach(&o.ctl, &o.path, &o.url).expect_err("open in this process");
    assert!(message(&err).contains("in_use"), "{err}");
}

#[test]
fn a_failed_attach_locks_the_file_out_until_an_attach_succeeds() {
    let server = Server::start();
    let ctl = control();
    let (_dir, path) = new_file("a.db");
    let dead = format!("http://127.0.0.1:{}/demo/x", ursula_vfs_tests::free_port());
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", "200") };
    let err = attach(&ctl, &path, &dead).expect_err("nothing listens");
    assert!(message(&err).contains("unreachable"), "{err}");
    let open =
        Connection::open(&path).and_then(|c| c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)));
    let open_err = open.expect_err("locked out");
    assert_eq!(code(&open_err), 14, "SQLITE_CANTOPEN: {open_err}");
    let st = ctl.query_row(
        "SELECT ursula_status(?1)",
        [path.to_str().expect("utf8")],
        |r| r.get::<_, String>(0),
    );
    let st_err = st.expect_err("status names the failed attach");
    assert!(
        message(&st_err).contains("ursula_status: attach_failed: unreachable:"),
        "{st_err}"
    );
    attach(&ctl, &path, &server.url("/demo/x")).expect("a good attach");
    Connection::open(&path)
        .and_then(|c| c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)))
        .expect("opens again");
}

#[test]
fn urls_with_a_query_or_fragment_are_refused_before_any_request() {
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    for url in [
        "http://127.0.0.1:1/demo/x?a=1",
        "http://127.0.0.1:1/demo/x#f",
        "ftp://h/demo/x",
    ] {
        let err = attach(&ctl, &dir.path().join("a.db"), url).expect_err("bad url");
        assert!(
            message(&err).contains("ursula_attach: invalid_url:"),
            "{url}: {err}"
        );
    }
    for path in [":memory:", "", "file:x.db"] {
        let err = ctl
            .query_row(
                "SELECT ursula_attach(?1, 'http://127.0.0.1:1/demo/x')",
                [path],
                |r| r.get::<_, String>(0),
            )
            .expect_err("bad path");
        assert!(message(&err).contains("invalid_argument"), "{path}: {err}");
    }
}

#[test]
fn a_refused_connection_fails_the_attach_at_once_not_after_the_retry_budget() {
    // SAFETY of set_var: each nextest test is its own process, set before any thread reads it.
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", "20000") };
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let dead = format!("http://127.0.0.1:{}/demo/x", ursula_vfs_tests::free_port());
    let started = std::time::Instant::now();
    let err = attach(&ctl, &dir.path().join("a.db"), &dead).expect_err("nothing listens");
    let took = started.elapsed();
    assert!(
        message(&err).contains("unreachable: cannot reach the stream"),
        "{err}"
    );
    // Generous: the old rule spent the whole 20 s budget; the new one returns in milliseconds.
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
}

#[test]
fn a_stream_answering_503_is_retried_within_the_budget_and_the_attach_succeeds() {
    // SAFETY of set_var: each nextest test is its own process, set before any thread reads it.
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", "20000") };
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    proxy.add(
        "HEAD",
        "/demo/busy",
        Action::Respond(Canned::new(503, &[], "busy")),
        Some(3),
    );
    let ctl = control();
    let (_dir, path) = new_file("a.db");
    attach(&ctl, &path, &format!("{}/demo/busy", proxy.base())).expect("attach after the 503s");
    // Three 503s, the HEAD that found no stream, and the one after creating it.
    assert_eq!(proxy.count("HEAD"), 5);
}

fn file_name(
    ctl: &Connection,
    url: &str,
    reader: rusqlite::types::Value,
) -> rusqlite::Result<Value> {
    let text: String = ctl.query_row("SELECT ursula_file_name(?1, ?2)", (url, reader), |r| {
        r.get(0)
    })?;
    Ok(serde_json::from_str(&text).expect("file name JSON"))
}

#[test]
fn ursula_file_name_names_the_owner_and_each_reader_and_refuses_what_is_not_an_index() {
    use rusqlite::types::Value as Sql;
    let ctl = control();
    let url = "HTTP://user:pw@Example.COM:80/demo/./notes";
    let owner: String = ctl
        .query_row("SELECT ursula_file_name(?1)", [url], |r| r.get(0))
        .expect("one argument");
    let owner: Value = serde_json::from_str(&owner).expect("JSON");
    assert_eq!(owner["identity"], "http://example.com/demo/notes");
    assert_eq!(owner["url"], "http://user:pw@example.com/demo/notes");
    let file = owner["file"].as_str().expect("file");
    assert!(
        file.starts_with("demo-notes-") && file.ends_with(".db"),
        "{file}"
    );
    // node:sqlite binds every JavaScript number as a REAL: a whole one is an index too.
    for reader in [Sql::Integer(3), Sql::Real(3.0)] {
        let ro = file_name(&ctl, url, reader).expect("reader 3");
        assert_eq!(ro["file"], file.replace(".db", "-ro3.db"), "{ro}");
    }
    for bad in [
        Sql::Real(2.5),
        Sql::Integer(-1),
        Sql::Text("1".into()),
        Sql::Null,
    ] {
        let err = file_name(&ctl, url, bad.clone()).expect_err("not an index");
        assert!(
            err.to_string()
                .contains("ursula_file_name: invalid_argument:"),
            "{bad:?}: {err}"
        );
    }
    let err = file_name(&ctl, "http://h/a/b?x=1", Sql::Integer(0)).expect_err("query");
    assert!(
        err.to_string().contains("ursula_file_name: invalid_url:"),
        "{err}"
    );
}
