//! The rough edges a new user meets, through a real SQLite and server: a journal_mode change,
//! EXCLUSIVE locking, URLs that name no stream, and which log lines print by default.

use rusqlite::Connection;
use ursula_vfs_tests::child;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::error_message;
use ursula_vfs_tests::sqlite::one;

const SQLITE_ERROR: i32 = 1;
const IOERR_AUTH: i32 = 7178;

#[test]
fn leaving_wal_is_refused_before_it_runs_and_the_connection_stays_usable() {
    let (_server, o) = Owner::on_new_server("/demo/journal");
    let db = &o.db;
    for mode in ["DELETE", "MEMORY", "OFF", "TRUNCATE", "PERSIST"] {
        let err = db
            .execute_batch(&format!("PRAGMA journal_mode={mode}"))
            .expect_err("refused");
        assert_eq!(code(&err), SQLITE_ERROR, "{mode}: {err}");
        assert!(
            err.to_string().starts_with(&format!(
                "sqlite-ursula-vfs: unsupported: PRAGMA journal_mode={} refused: journal_mode must stay WAL",
                mode.to_lowercase()
            )),
            "{mode}: {err}"
        );
        // The connection is as it was: it reads, it commits, and it is in WAL mode.
        assert_eq!(one::<String>(db, "PRAGMA journal_mode"), "wal", "{mode}");
        o.insert(mode).expect("a commit after the refusal");
    }
    assert_eq!(
        bodies(db),
        vec!["DELETE", "MEMORY", "OFF", "TRUNCATE", "PERSIST"]
    );
    let st = o.status();
    assert_eq!(st["error"], serde_json::Value::Null, "{st}");
    assert_eq!(st["commits"], 6, "{st}");
    // The rows are in the stream: a rebuild elsewhere holds them.
    let other = o.file("b.db");
    attach(&o.ctl, &other, &o.url).expect("rebuild");
    assert_eq!(bodies(&Connection::open(&other).expect("open b")).len(), 5);
}

#[test]
fn exclusive_locking_is_unsupported_with_action_fix_and_no_refused_kind() {
    let (_server, o) = Owner::on_new_server("/demo/exclusive");
    let db = &o.db;
    db.execute_batch("PRAGMA locking_mode=EXCLUSIVE")
        .expect("pragma");
    let err = o.insert("x").expect_err("refused");
    assert_eq!(code(&err), IOERR_AUTH, "{err}");
    let st = o.status();
    assert_eq!(st["error"]["kind"], "unsupported", "{st}");
    assert_eq!(st["error"]["action"], "fix", "{st}");
    assert!(
        error_message(&st).starts_with("locking_mode=EXCLUSIVE is not supported"),
        "{st}"
    );
    assert_eq!(st["writes_refused"], false, "{st}");
    assert_eq!(st["refused_kind"], serde_json::Value::Null, "{st}");
    assert_eq!(st["poisoned"], false, "{st}");
    assert!(bodies(db).is_empty(), "reads work, the row was rolled back");
}

#[test]
fn urls_that_name_no_stream_are_refused_before_any_request_naming_the_rule() {
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    // Nothing listens on port 1: a request would fail as unreachable, not as these kinds.
    for (url, kind, says) in [
        (
            "http://127.0.0.1:1/demo",
            "invalid_url",
            "names only the bucket \"demo\"",
        ),
        (
            "http://127.0.0.1:1/demo/a/b",
            "invalid_url",
            "has 3 segments, which the server reads as the stream demo/a and its subresource b",
        ),
        (
            "http://127.0.0.1:1/De/notes",
            "invalid_name",
            "bucket ID must be 4-64 bytes of a-z, 0-9, '_' or '-'",
        ),
        (
            "http://127.0.0.1:1/ab/notes",
            "invalid_name",
            "bucket ID must be 4-64 bytes of a-z, 0-9, '_' or '-'",
        ),
    ] {
        let started = std::time::Instant::now();
        let err = attach(&ctl, &dir.path().join("a.db"), url).expect_err(url);
        let m = err.to_string();
        assert!(
            m.starts_with(&format!("ursula_attach: {kind}: ")),
            "{url}: {m}"
        );
        assert!(m.contains(says), "{url}: {m}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{url}"
        );
    }
}

/// Child side of the log test: one writable attach and a commit.
#[test]
fn child_attaches() {
    if !child::selected("child_attaches") {
        return;
    }
    let (_server, _owner) = Owner::on_new_server("/demo/logs");
    eprintln!("child done");
}

#[test]
fn events_outside_the_specs_list_print_only_at_debug() {
    let child_stderr = |env: &[(&str, &str)]| child::stderr("child_attaches", env);
    let quiet = child_stderr(&[]);
    assert!(quiet.contains("child done"), "{quiet}");
    assert!(!quiet.contains("sqlite-ursula-vfs"), "{quiet}");
    let loud = child_stderr(&[("URSULA_VFS_LOG", "debug")]);
    assert!(
        loud.contains("sqlite-ursula-vfs level=debug event=attach_claimed"),
        "{loud}"
    );
    let junk = child_stderr(&[("URSULA_VFS_LOG", "loud")]);
    assert!(
        junk.contains("event=setting_adjusted setting=URSULA_VFS_LOG value=loud used=info"),
        "{junk}"
    );
    assert!(!junk.contains("attach_claimed"), "{junk}");
}
