//! Crashes, snapshots and retention, and the ways an owner gets fenced.

use std::io::BufRead;
use std::io::BufReader;
use std::process::Stdio;
use std::time::Duration;

use rusqlite::Connection;
use ursula_vfs_tests::child;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::proxy::Action;
use ursula_vfs_tests::proxy::Canned;
use ursula_vfs_tests::proxy::Proxy;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::header;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::server::recreate;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::attached_control;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::sqlite::new_file;
use ursula_vfs_tests::sqlite::one;
use ursula_vfs_tests::sqlite::status;
use ursula_vfs_tests::wait_until;

/// Not a test on its own: the child process of the SIGKILL test. It commits rows and prints
/// `ack N` after each commit returns, until killed.
#[test]
fn child_writer_process() {
    let Some((_ctl, db)) = child::attached("child_writer_process") else {
        return;
    };
    for i in 0.. {
        // Some transactions are large, so the kill can land mid-commit.
        db.execute("INSERT INTO notes(body) VALUES (?1)", [&child_row(i)])
            .expect("child insert");
        println!("ack {i}");
    }
}

/// The `i`th row the child writes.
fn child_row(i: usize) -> String {
    if i.is_multiple_of(7) {
        "x".repeat(20_000)
    } else {
        format!("row {i}")
    }
}

#[test]
fn sigkill_mid_load_loses_no_acknowledged_commit_and_resumes_from_the_local_file() {
    let server = Server::start();
    let url = server.url("/demo/crash");
    let (dir, path) = new_file("a.db");
    let mut child = child::owner_command("child_writer_process", &path, &url)
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
    let ctl = attached_control(&path, &url);
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
        assert_eq!(row, &child_row(i));
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

/// Commits rows of 3 KB, 20 at a time with a pause between (the snapshot is taken in the
/// background), until `done` holds; fails after `rounds` rounds.
fn write_until(o: &Owner, rounds: usize, what: &str, mut done: impl FnMut() -> bool) {
    let mut round = 0;
    while !done() {
        round += 1;
        assert!(
            round < rounds,
            "{what} after {} rows: {}",
            round * 20,
            o.status()
        );
        for _ in 0..20 {
            o.db.execute("INSERT INTO notes(body) VALUES (hex(randomblob(1500)))", [])
                .expect("insert");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The owner's latest snapshot offset (`-1`: none).
fn snapshot_of(o: &Owner) -> String {
    o.status()["snapshot"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn snapshots_are_published_retention_follows_and_a_new_host_starts_from_the_snapshot() {
    unsafe { std::env::set_var("URSULA_VFS_SNAPSHOT_MIN_BYTES", "65536") };
    let (_server, o) = Owner::on_new_server("/demo/snap");
    let url = &o.url;
    // Write until the log outgrows the database (and the 64 KiB minimum): a snapshot follows.
    write_until(&o, 200, "no snapshot", || snapshot_of(&o) != "-1");
    let first = snapshot_of(&o);
    let (code_head, hs, _) = http("HEAD", url, &[], b"");
    assert_eq!(code_head, 200);
    assert_eq!(header(&hs, "stream-snapshot-offset"), Some(first.as_str()));
    assert!(o.status()["snapshot_age_ms"].is_u64());
    write_until(&o, 400, "no second snapshot", || snapshot_of(&o) != first);
    wait_until("retention at the first snapshot", || {
        header(&http("HEAD", url, &[], b"").1, "stream-retained-offset") == Some(first.as_str())
    });
    assert_eq!(
        http("GET", &format!("{url}?offset=-1"), &[], b"").0,
        410,
        "history before retention is gone"
    );
    let c = o.rebuild("copy.db");
    let st = o.status_of("copy.db");
    assert_ne!(st["installed"], "-1", "{st}");
    assert_eq!(bodies(&c), bodies(&o.db));
    assert!(integrity_ok(&c));
}

#[test]
fn a_foreign_append_with_a_higher_stream_seq_fences_the_owner() {
    let (_server, o) = Owner::on_new_server("/demo/foreign");
    let seq = "9".repeat(40);
    let (c, _, _) = http(
        "POST",
        &o.url,
        &[
            ("Content-Type", "application/octet-stream"),
            ("Stream-Seq", &seq),
        ],
        b"junk",
    );
    assert_eq!(c, 204);
    let err = o.insert("x").expect_err("fenced");
    assert_eq!(code(&err), 778);
    assert_eq!(o.status()["fenced"], true);
}

#[test]
fn a_deleted_and_recreated_stream_fences_the_owner_and_reattach_rebuilds_from_the_new_one() {
    let (_server, o) = Owner::on_new_server("/demo/recreated");
    let url = &o.url;
    recreate(url);
    let err = o.insert("x").expect_err("fenced by 412");
    assert_eq!(code(&err), 778);
    let st = o.status();
    assert_eq!(st["fenced"], true, "{st}");
    let (_, hs, body) = http("GET", &format!("{url}?offset=-1"), &[], b"");
    assert!(body.is_empty() || header(&hs, "stream-next-offset").is_some());
    drop(o.db);
    attach(&o.ctl, &o.path, url).expect("attach to the new stream");
    let fresh = Connection::open(&o.path).expect("open");
    let tables: i64 = one(&fresh, "SELECT count(*) FROM sqlite_master");
    assert_eq!(tables, 0, "rebuilt from the new, empty stream");
}

#[test]
fn a_snapshot_replaced_during_catch_up_makes_attach_retry_from_a_fresh_head() {
    unsafe { std::env::set_var("URSULA_VFS_SNAPSHOT_MIN_BYTES", "65536") };
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let o = Owner::attach(&format!("{}/demo/moving", proxy.base()));
    write_until(&o, 200, "no snapshot", || snapshot_of(&o) != "-1");
    let gets_before = proxy.count("GET");
    let gone = Canned::new(404, &[], "no such snapshot");
    proxy.add("GET", "/snapshot/", Action::Respond(gone), Some(1));
    let copy = o.rebuild("copy.db");
    assert_ne!(o.status_of("copy.db")["installed"], "-1");
    assert!(
        proxy.count("GET") >= gets_before + 2,
        "the snapshot was fetched again"
    );
    assert_eq!(bodies(&copy), bodies(&o.db));
}
