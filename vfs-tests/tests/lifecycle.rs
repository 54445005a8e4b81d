//! Crashes, snapshots and retention, and the ways an owner gets fenced.

use std::io::BufRead;
use std::io::BufReader;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use rusqlite::Connection;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::header;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::sqlite::status;

/// Not a test on its own: the child process of the SIGKILL test. It commits rows and prints
/// `ack N` after each commit returns, until killed.
#[test]
fn child_writer_process() {
    let (Ok(path), Ok(url)) = (
        std::env::var("URSULA_CHILD_DB"),
        std::env::var("URSULA_CHILD_URL"),
    ) else {
        return;
    };
    let ctl = control();
    attach(&ctl, std::path::Path::new(&path), &url).expect("child attach");
    let db = Connection::open(&path).expect("child open");
    db.execute(
        "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT)",
        [],
    )
    .expect("create");
    for i in 0.. {
        // Some transactions are large, so the kill can land mid-commit.
        let body = if i % 7 == 0 {
            "x".repeat(20_000)
        } else {
            format!("row {i}")
        };
        db.execute("INSERT INTO notes(body) VALUES (?1)", [&body])
            .expect("child insert");
        println!("ack {i}");
    }
}

#[test]
fn sigkill_mid_load_loses_no_acknowledged_commit_and_resumes_from_the_local_file() {
    let server = Server::start();
    let url = format!("{}/demo/crash", server.base());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "child_writer_process", "--nocapture"])
        .env("URSULA_CHILD_DB", &path)
        .env("URSULA_CHILD_URL", &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let out = child.stdout.take().expect("child stdout");
    let mut acked = 0;
    for line in BufReader::new(out).lines() {
        let line = line.expect("child line");
        if let Some(n) = line.strip_prefix("ack ") {
            acked = n.trim().parse::<usize>().expect("ack number") + 1;
            if acked >= 60 {
                break;
            }
        }
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    assert!(acked >= 60, "the child acknowledged {acked} commits");
    let ctl = control();
    attach(&ctl, &path, &url).expect("reattach after the crash");
    assert_ne!(
        status(&ctl, &path)["local"],
        "-1",
        "resumed from the local file, not rebuilt"
    );
    let db = Connection::open(&path).expect("open");
    let rows = bodies(&db);
    assert!(
        rows.len() >= acked,
        "{} rows, {acked} acknowledged",
        rows.len()
    );
    for (i, row) in rows.iter().take(acked).enumerate() {
        let want = if i % 7 == 0 {
            "x".repeat(20_000)
        } else {
            format!("row {i}")
        };
        assert_eq!(row, &want);
    }
    assert!(integrity_ok(&db));
    let fresh = dir.path().join("fresh.db");
    attach_read_only(&ctl, &fresh, &url).expect("fresh rebuild");
    assert_eq!(
        bodies(&Connection::open(&fresh).expect("open fresh")),
        rows,
        "the file equals a fresh rebuild"
    );
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

#[test]
fn snapshots_are_published_retention_follows_and_a_new_host_starts_from_the_snapshot() {
    unsafe { std::env::set_var("URSULA_VFS_SNAPSHOT_MIN_BYTES", "65536") };
    let server = Server::start();
    let url = format!("{}/demo/snap", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &url).expect("attach");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let write = |count: usize| {
        for _ in 0..count {
            db.execute("INSERT INTO notes(body) VALUES (hex(randomblob(1500)))", [])
                .expect("insert");
        }
    };
    // Write until the log outgrows the database (and the 64 KiB minimum): a snapshot follows.
    let snapshot_of = || {
        status(&ctl, &path)["snapshot"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let mut rounds = 0;
    while snapshot_of() == "-1" {
        rounds += 1;
        assert!(
            rounds < 200,
            "no snapshot after {} rows: {}",
            rounds * 20,
            status(&ctl, &path)
        );
        write(20);
        std::thread::sleep(Duration::from_millis(20));
    }
    let first = snapshot_of();
    let (code_head, hs, _) = http("HEAD", &url, &[], b"");
    assert_eq!(code_head, 200);
    assert_eq!(header(&hs, "stream-snapshot-offset"), Some(first.as_str()));
    assert!(status(&ctl, &path)["snapshot_age_ms"].is_u64());
    let mut rounds = 0;
    while snapshot_of() == first {
        rounds += 1;
        assert!(rounds < 400, "no second snapshot: {}", status(&ctl, &path));
        write(20);
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_for("retention at the first snapshot", || {
        header(&http("HEAD", &url, &[], b"").1, "stream-retained-offset") == Some(first.as_str())
    });
    assert_eq!(
        http("GET", &format!("{url}?offset=-1"), &[], b"").0,
        410,
        "history before retention is gone"
    );
    let copy = dir.path().join("copy.db");
    attach_read_only(&ctl, &copy, &url).expect("rebuild from the snapshot");
    let st = status(&ctl, &copy);
    assert_ne!(st["installed"], "-1", "{st}");
    let c = Connection::open(&copy).expect("open copy");
    assert_eq!(bodies(&c), bodies(&db));
    assert!(integrity_ok(&c));
}

#[test]
fn a_foreign_append_with_a_higher_stream_seq_fences_the_owner() {
    let server = Server::start();
    let url = format!("{}/demo/foreign", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &url).expect("attach");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let seq = "9".repeat(40);
    let (c, _, _) = http(
        "POST",
        &url,
        &[
            ("Content-Type", "application/octet-stream"),
            ("Stream-Seq", &seq),
        ],
        b"junk",
    );
    assert_eq!(c, 204);
    let err = db
        .execute("INSERT INTO notes(body) VALUES ('x')", [])
        .expect_err("fenced");
    assert_eq!(code(&err), 778);
    assert_eq!(status(&ctl, &path)["fenced"], true);
}

#[test]
fn a_deleted_and_recreated_stream_fences_the_owner_and_reattach_rebuilds_from_the_new_one() {
    let server = Server::start();
    let url = format!("{}/demo/recreated", server.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &url).expect("attach");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    assert_eq!(http("DELETE", &url, &[], b"").0, 204);
    assert_eq!(
        http(
            "PUT",
            &url,
            &[("Content-Type", "application/octet-stream")],
            b""
        )
        .0,
        201
    );
    let err = db
        .execute("INSERT INTO notes(body) VALUES ('x')", [])
        .expect_err("fenced by 412");
    assert_eq!(code(&err), 778);
    let st = status(&ctl, &path);
    assert_eq!(st["fenced"], true, "{st}");
    let (_, hs, body) = http("GET", &format!("{url}?offset=-1"), &[], b"");
    assert!(body.is_empty() || header(&hs, "stream-next-offset").is_some());
    drop(db);
    attach(&ctl, &path, &url).expect("attach to the new stream");
    let fresh = Connection::open(&path).expect("open");
    let tables: i64 = fresh
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .expect("read");
    assert_eq!(tables, 0, "rebuilt from the new, empty stream");
}

#[test]
fn a_snapshot_replaced_during_catch_up_makes_attach_retry_from_a_fresh_head() {
    unsafe { std::env::set_var("URSULA_VFS_SNAPSHOT_MIN_BYTES", "65536") };
    let server = Server::start();
    let proxy = ursula_vfs_tests::proxy::Proxy::start(server.port);
    let url = format!("{}/demo/moving", proxy.base());
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &url).expect("attach");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    let mut rounds = 0;
    while status(&ctl, &path)["snapshot"] == "-1" {
        rounds += 1;
        assert!(rounds < 200, "no snapshot");
        for _ in 0..20 {
            db.execute("INSERT INTO notes(body) VALUES (hex(randomblob(1500)))", [])
                .expect("insert");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let gets_before = proxy.count("GET");
    let gone = ursula_vfs_tests::proxy::Canned::new(404, &[], "no such snapshot");
    proxy.add(
        "GET",
        "/snapshot/",
        ursula_vfs_tests::proxy::Action::Respond(gone),
        Some(1),
    );
    let copy = dir.path().join("copy.db");
    attach_read_only(&ctl, &copy, &url).expect("the second round succeeds");
    assert_ne!(status(&ctl, &copy)["installed"], "-1");
    assert!(
        proxy.count("GET") >= gets_before + 2,
        "the snapshot was fetched again"
    );
    assert_eq!(
        bodies(&Connection::open(&copy).expect("open copy")),
        bodies(&db)
    );
}
