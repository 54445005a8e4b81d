//! Tokens, env settings, stream formats of another version, and a simulated reboot.

use std::process::Command;

use rusqlite::Connection;
use ursula_vfs_tests::proxy::Proxy;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::status;

#[test]
fn a_refused_token_fails_alone_and_set_token_lets_the_next_commit_through() {
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", "300") };
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let url = format!("{}/demo/token", proxy.base());
    let ctl = control();
    ctl.query_row("SELECT ursula_set_token('good')", [], |_| Ok(()))
        .expect("set token");
    proxy.require_bearer(Some("good"));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &url).expect("attach with the token");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    ctl.query_row("SELECT ursula_set_token('stale')", [], |_| Ok(()))
        .expect("set token");
    let err = db
        .execute("INSERT INTO notes(body) VALUES ('x')", [])
        .expect_err("401");
    assert_eq!(code(&err), 7178);
    let st = status(&ctl, &path);
    assert_eq!(st["refused_kind"], "unauthorized", "{st}");
    assert_eq!(st["poisoned"], false);
    ctl.query_row("SELECT ursula_set_token('good')", [], |_| Ok(()))
        .expect("set token");
    db.execute("INSERT INTO notes(body) VALUES ('y')", [])
        .expect("accepted without reattach");
    assert_eq!(bodies(&db), vec!["y"]);
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
    let url = format!("{}/demo/tokenfile", proxy.base());
    let ctl = control();
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &url).expect("attach with the file's token");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create");
    proxy.require_bearer(Some("rotated"));
    let writer = {
        let f = token_file.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(400));
            std::fs::write(f, "rotated").expect("rotate");
        })
    };
    db.execute("INSERT INTO notes(body) VALUES ('x')", [])
        .expect("the retry reads the new token");
    writer.join().expect("writer");
    assert!(status(&ctl, &path)["append_retries"].as_u64().unwrap_or(0) > 0);
}

/// Runs this test binary's `child_probe_settings` with `env`, returning its stderr.
fn child_stderr(env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", "child_probe_settings", "--nocapture"])
        .env("URSULA_CHILD_PROBE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run child");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Child side of the settings test: reads the settings once, as the extension does.
#[test]
fn child_probe_settings() {
    if std::env::var("URSULA_CHILD_PROBE").is_err() {
        return;
    }
    let server = Server::start();
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &format!("{}/demo/probe", server.base())).expect("attach");
    let db = Connection::open(&path).expect("open");
    db.execute("CREATE TABLE t(b BLOB)", []).expect("create");
    let err = db
        .execute("INSERT INTO t VALUES (randomblob(100000))", [])
        .expect_err("over 64 KiB");
    eprintln!("refused_reason={}", status(&ctl, &path)["refused_reason"]);
    drop(err);
}

#[test]
fn frame_limits_outside_the_range_are_clamped_and_logged_once() {
    let low = child_stderr(&[("URSULA_VFS_MAX_FRAME_BYTES", "1000")]);
    assert_eq!(low.matches("event=setting_adjusted").count(), 1, "{low}");
    assert!(low.contains("used=65536"), "{low}");
    assert!(
        low.contains("-byte frame over the 65536-byte frame limit"),
        "{low}"
    );
    let junk = child_stderr(&[("URSULA_VFS_MAX_FRAME_BYTES", "abc")]);
    assert_eq!(junk.matches("event=setting_adjusted").count(), 1, "{junk}");
    assert!(junk.contains("used=33554432"), "{junk}");
}

#[test]
fn a_frame_of_another_format_version_stops_attach_naming_it() {
    let server = Server::start();
    let url = format!("{}/demo/future", server.base());
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
    let mut frame = b"USQ9".to_vec();
    frame.extend_from_slice(&4u32.to_le_bytes());
    frame.extend_from_slice(&0u32.to_le_bytes());
    frame.extend_from_slice(b"abcd");
    assert_eq!(
        http(
            "POST",
            &url,
            &[("Content-Type", "application/octet-stream")],
            &frame
        )
        .0,
        204
    );
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let err = attach(&ctl, &dir.path().join("a.db"), &url).expect_err("unknown version");
    let msg = err.to_string();
    assert!(msg.contains("USQ9") && msg.contains("USQ1"), "{msg}");
}

#[test]
fn a_reboot_discards_the_local_files_and_rebuilds_from_the_stream() {
    let server = Server::start();
    let url = format!("{}/demo/reboot", server.base());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    // Written under one boot id ...
    let mut child = Command::new(std::env::current_exe().expect("test binary"));
    child
        .args(["--exact", "child_writes_two_rows", "--nocapture"])
        .env("URSULA_CHILD_DB", &path)
        .env("URSULA_CHILD_URL", &url)
        .env("URSULA_VFS_TEST_BOOT_ID", "boot-before");
    assert!(child.status().expect("child").success());
    // ... and attached again under another.
    unsafe { std::env::set_var("URSULA_VFS_TEST_BOOT_ID", "boot-after") };
    let ctl = control();
    attach(&ctl, &path, &url).expect("attach after the reboot");
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
    let (Ok(path), Ok(url)) = (
        std::env::var("URSULA_CHILD_DB"),
        std::env::var("URSULA_CHILD_URL"),
    ) else {
        return;
    };
    let ctl = control();
    attach(&ctl, std::path::Path::new(&path), &url).expect("attach");
    let db = Connection::open(&path).expect("open");
    db.execute_batch("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes(body) VALUES ('one'); INSERT INTO notes(body) VALUES ('two');")
        .expect("write");
}

#[test]
fn stats_drain_the_measurements_once() {
    let server = Server::start();
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    attach(&ctl, &path, &format!("{}/demo/stats", server.base())).expect("attach");
    let db = Connection::open(&path).expect("open");
    db.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1); INSERT INTO t VALUES (2);")
        .expect("write");
    let drain = || -> serde_json::Value {
        let s: String = ctl
            .query_row(
                "SELECT ursula_stats(?1)",
                [path.to_str().expect("utf8")],
                |r| r.get(0),
            )
            .expect("stats");
        serde_json::from_str(&s).expect("json")
    };
    let first = drain();
    let commits = first["commits"].as_array().expect("commits");
    assert_eq!(commits.len(), 3, "{first}");
    assert!(
        commits.iter().all(|c| c["bytes"].as_u64() > Some(0)
            && c["attempts"] == 1
            && c["append_us"].is_u64())
    );
    assert_eq!(first["dropped"]["commits"], 0);
    assert_eq!(
        drain()["commits"].as_array().map(Vec::len),
        Some(0),
        "drained"
    );
}
