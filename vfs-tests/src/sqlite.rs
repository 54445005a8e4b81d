//! Connections to a bundled SQLite that has loaded the extension.

use std::path::Path;
use std::path::PathBuf;

use rusqlite::Connection;
use rusqlite::LoadExtensionGuard;

pub fn extension_path() -> PathBuf {
    crate::target_dir().join("libsqlite_ursula_vfs.so")
}

/// An in-memory control connection with the extension loaded; its VFS is then the default
/// for every later connection in the process.
pub fn control() -> Connection {
    let conn = Connection::open_in_memory().expect("open control connection");
    // SAFETY: loading our own extension into a connection this test owns.
    unsafe {
        let _guard = LoadExtensionGuard::new(&conn).expect("enable extension loading");
        conn.load_extension(extension_path(), None::<&str>)
            .expect("load the extension");
    }
    conn
}

pub fn attach(ctl: &Connection, path: &Path, url: &str) -> rusqlite::Result<String> {
    ctl.query_row(
        "SELECT ursula_attach(?1, ?2)",
        (path.to_str().expect("utf8 path"), url),
        |r| r.get(0),
    )
}

pub fn attach_read_only(ctl: &Connection, path: &Path, url: &str) -> rusqlite::Result<String> {
    attach_mode(ctl, path, url, "read_only")
}

/// A live read replica of the stream (`'follow'`).
pub fn follow(ctl: &Connection, path: &Path, url: &str) -> rusqlite::Result<String> {
    attach_mode(ctl, path, url, "follow")
}

/// `ursula_attach(path, url, mode)`.
pub fn attach_mode(
    ctl: &Connection,
    path: &Path,
    url: &str,
    mode: &str,
) -> rusqlite::Result<String> {
    ctl.query_row(
        "SELECT ursula_attach(?1, ?2, ?3)",
        (path.to_str().expect("utf8 path"), url, mode),
        |r| r.get(0),
    )
}

/// A new directory, removed on drop, and the path of a file `name` in it that does not exist
/// yet.
pub fn new_file(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    (dir, path)
}

/// A new control connection that attached `path` to `url`.
#[track_caller]
pub fn attached_control(path: &Path, url: &str) -> Connection {
    let ctl = control();
    attach(&ctl, path, url).expect("attach");
    ctl
}

/// [`new_file`] `a.db`, attached to `url` through a new control connection: the connection,
/// the directory and the path.
#[track_caller]
pub fn attached_new_file(url: &str) -> (Connection, tempfile::TempDir, PathBuf) {
    let (dir, path) = new_file("a.db");
    let ctl = attached_control(&path, url);
    (ctl, dir, path)
}

/// Attaches `path` as the owner of `url` and opens it, with the `notes` table (created once per
/// stream).
pub fn open_owner(ctl: &Connection, path: &Path, url: &str) -> Connection {
    attach(ctl, path, url).expect("attach");
    let db = Connection::open(path).expect("open");
    db.execute(
        "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT)",
        [],
    )
    .expect("create");
    db
}

/// Commits one row of `notes`.
pub fn insert(db: &Connection, body: &str) -> rusqlite::Result<usize> {
    db.execute("INSERT INTO notes(body) VALUES (?1)", [body])
}

/// `ursula_status(path)`.
pub fn status(ctl: &Connection, path: &Path) -> serde_json::Value {
    json_of(ctl, "ursula_status", path)
}

/// The `error.message` of an `ursula_status`; empty when it has none.
pub fn error_message(status: &serde_json::Value) -> &str {
    status["error"]["message"].as_str().unwrap_or_default()
}

/// `ursula_stats(path)`: the measurements since the last call.
pub fn stats(ctl: &Connection, path: &Path) -> serde_json::Value {
    json_of(ctl, "ursula_stats", path)
}

fn json_of(ctl: &Connection, function: &str, path: &Path) -> serde_json::Value {
    let s: String = ctl
        .query_row(
            &format!("SELECT {function}(?1)"),
            [path.to_str().expect("utf8 path")],
            |r| r.get(0),
        )
        .expect(function);
    serde_json::from_str(&s).expect("JSON")
}

/// The one value `sql` selects.
pub fn one<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str) -> T {
    conn.query_row(sql, [], |r| r.get(0)).expect(sql)
}

/// The extended result code of a failed call, or 0.
pub fn code(e: &rusqlite::Error) -> i32 {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => f.extended_code,
        _ => 0,
    }
}

/// All rows of `notes(body)` in id order.
pub fn bodies(conn: &Connection) -> Vec<String> {
    let mut st = conn
        .prepare("SELECT body FROM notes ORDER BY id")
        .expect("prepare");
    st.query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

pub fn integrity_ok(conn: &Connection) -> bool {
    conn.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
        .is_ok_and(|s| s == "ok")
}
