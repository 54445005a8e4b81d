//! Tokens, env settings, stream formats of another version, and a simulated reboot.

use rusqlite::Connection;
use ursula_vfs_tests::child;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::proxy::Proxy;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attached_control;
use ursula_vfs_tests::sqlite::attached_new_file;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::new_file;
use ursula_vfs_tests::sqlite::stats;
use ursula_vfs_tests::sqlite::status;

const OCTET: (&str, &str) = ("Content-Type", "application/octet-stream");

fn set_token(ctl: &Connection, token: &str) {
    ctl.query_row("SELECT ursula_set_token(?1)", [token], |_| Ok(()))
        .expect("set token");
}

#[test]
fn a_refused_token_fails_alone_and_set_token_lets_the_next_commit_through() {
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", "300") };
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let ctl = control();
    set_token(&ctl, "good");
    proxy.require_bearer(Some("good"));
    let o = Owner::attach_with(ctl, &format!("{}/demo/token", proxy.base()));
    set_token(&o.ctl, "stale");
    let err = o.insert("x").expect_err("401");
    assert_eq!(code(&err), 7178);
    let st = o.status();
    assert_eq!(st["refused_kind"], "unauthorized", "{st}");
    assert_eq!(st["poisoned"], false);
    set_token(&o.ctl, "good");
    o.insert("y").expect("accepted without reattach");
    assert_eq!(bodies(&o.db), vec!["y"]);
}

#[test]
fn a_token_file_rewritten_during_the_retries_rescues_the_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "good").expect("token");
    unsafe {
        std::env::set_var("URSULA_VFS_RETRY_MS", "5000");
        std::env::set_var("URSULA_VFS_TOKEN_FILE", &token_file);
    }
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    proxy.require_bearer(Some("good"));
    let o = Owner::attach(&format!("{}/demo/tokenfile", proxy.base()));
    proxy.require_bearer(Some("rotated"));
    let writer = {
        let f = token_file.clone();
        std::thread::spawn(move || {
            // The rotation lands while the commit below is being retried.
            std::thread::sleep(std::time::Duration::from_millis(400));
            std::fs::write(f, "rotated").expect("rotate");
        })
    };
    o.insert("x").expect("the retry reads the new token");
    writer.join().expect("writer");
    assert!(o.status()["append_retries"].as_u64().unwrap_or(0) > 0);
}

/// Child side of the settings test: reads the settings once, as the extension does.
#[test]
fn child_probe_settings() {
    if !child::selected("child_probe_settings") {
        return;
    }
    let (_server, o) = Owner::on_new_server("/demo/probe");
    o.db.execute("CREATE TABLE t(b BLOB)", []).expect("create");
    let err =
        o.db.execute("INSERT INTO t VALUES (randomblob(100000))", [])
            .expect_err("over 64 KiB");
    eprintln!("refused_reason={}", o.status()["refused_reason"]);
    drop(err);
}

#[test]
fn frame_limits_outside_the_range_are_clamped_and_logged_once() {
    let probe = |limit: &str| {
        child::stderr(
            "child_probe_settings",
            &[("URSULA_VFS_MAX_FRAME_BYTES", limit)],
        )
    };
    let low = probe("1000");
    assert_eq!(low.matches("event=setting_adjusted").count(), 1, "{low}");
    assert!(low.contains("used=65536"), "{low}");
    assert!(
        low.contains("-byte frame over the 65536-byte frame limit"),
        "{low}"
    );
    let junk = probe("abc");
    assert_eq!(junk.matches("event=setting_adjusted").count(), 1, "{junk}");
    assert!(junk.contains("used=33554432"), "{junk}");
}

#[test]
fn a_frame_of_another_format_version_stops_attach_naming_it() {
    let server = Server::start();
    let url = server.url("/demo/future");
    assert_eq!(http("PUT", &url, &[OCTET], b"").0, 201);
    let mut frame = b"USQ9".to_vec();
    frame.extend_from_slice(&4u32.to_le_bytes());
    frame.extend_from_slice(&0u32.to_le_bytes());
    frame.extend_from_slice(b"abcd");
    assert_eq!(http("POST", &url, &[OCTET], &frame).0, 204);
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let err = attach(&ctl, &dir.path().join("a.db"), &url).expect_err("unknown version");
    let msg = err.to_string();
    assert!(msg.contains("USQ9") && msg.contains("USQ1"), "{msg}");
}

#[test]
fn a_reboot_discards_the_local_files_and_rebuilds_from_the_stream() {
    let server = Server::start();
    let url = server.url("/demo/reboot");
    let (_dir, path) = new_file("a.db");
    // Written under one boot id ...
    let written = child::owner_command("child_writes_two_rows", &path, &url)
        .env("URSULA_VFS_TEST_BOOT_ID", "boot-before")
        .status()
        .expect("child");
    assert!(written.success());
    // ... and attached again under another.
    unsafe { std::env::set_var("URSULA_VFS_TEST_BOOT_ID", "boot-after") };
    let ctl = attached_control(&path, &url);
    assert_eq!(
        status(&ctl, &path)["local"],
        "-1",
        "nothing local was trusted"
    );
    assert_eq!(
        bodies(&Connection::open(&path).expect("open")),
        vec!["one", "two"]
    );
}

#[test]
fn child_writes_two_rows() {
    let Some((_ctl, db)) = child::attached("child_writes_two_rows") else {
        return;
    };
    db.execute_batch(
        "INSERT INTO notes(body) VALUES ('one'); INSERT INTO notes(body) VALUES ('two');",
    )
    .expect("write");
}

#[test]
fn stats_drain_the_measurements_once() {
    let server = Server::start();
    let (ctl, _dir, path) = attached_new_file(&server.url("/demo/stats"));
    let db = Connection::open(&path).expect("open");
    db.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1); INSERT INTO t VALUES (2);")
        .expect("write");
    let first = stats(&ctl, &path);
    let commits = first["commits"].as_array().expect("commits");
    assert_eq!(commits.len(), 3, "{first}");
    assert!(
        commits.iter().all(|c| c["bytes"].as_u64() > Some(0)
            && c["attempts"] == 1
            && c["append_us"].is_u64())
    );
    assert_eq!(first["dropped"]["commits"], 0);
    assert_eq!(
        stats(&ctl, &path)["commits"].as_array().map(Vec::len),
        Some(0),
        "drained"
    );
}
