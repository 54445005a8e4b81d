//! The Node.js addon of `@tonbo/sqlite-ursula`.
//!
//! This crate links `sqlite-ursula-vfs`, so the one shared object it builds is both a napi
//! module and the SQLite extension: `loadUrsulaVfs()` loads the `.node` into node:sqlite with
//! `db.loadExtension(path, 'sqlite3_sqliteursulavfs_init')`, and the functions below read and
//! change the very state the extension's SQL functions do (`ursula_attach`, `ursula_status`,
//! `ursula_stats`, `ursula_set_token`, `ursula_commits`), with no SQL round trip.
//!
//! Every function returns JSON text, `{"ok": ...}` or `{"error": {...}}`, so failures carry the
//! extension's kind and SQLite result code to JavaScript, which builds the Ursula errors. They
//! must run after the extension was loaded into node:sqlite: the extension calls SQLite only
//! through the API table the host hands to its entry point. Before that they fail with kind
//! `not_loaded`.
//!
//! `attachAsync` runs the same attach as napi async work on libuv's thread pool, so the event
//! loop keeps running while a large database is rebuilt. The attach is safe off the main
//! thread: it touches SQLite only through connections of its own, opened and closed on the
//! worker (to fold a trusted WAL, to set WAL mode on a new file), and node:sqlite's SQLite is
//! built with THREADSAFE=1; the process state it changes (the registry, the host locks, the
//! HTTP client) is behind locks, because the snapshot threads already share it. Two attaches
//! of one file at once are refused (`in_use`) by the registry.

use std::ffi::CStr;
use std::panic::AssertUnwindSafe;
use std::panic::catch_unwind;
use std::sync::Arc;

use napi::Env;
use napi::Task;
use napi::bindgen_prelude::AsyncTask;
use napi_derive::napi;
use rusqlite::ffi;
use serde_json::Value;
use serde_json::json;
use sqlite_ursula_vfs::attach;
use sqlite_ursula_vfs::db::Db;
use sqlite_ursula_vfs::error::Kind;
use sqlite_ursula_vfs::error::SQLITE_ERROR;
use sqlite_ursula_vfs::error::VfsError;
use sqlite_ursula_vfs::format::offset_text;
use sqlite_ursula_vfs::mode::Mode;
use sqlite_ursula_vfs::point_in_time;
use sqlite_ursula_vfs::registry;
use sqlite_ursula_vfs::settings;
use sqlite_ursula_vfs::token;

/// The failure of one call, as JavaScript reads it.
struct Failure {
    /// The extension's kind, or `attach_failed` (with `attach_kind`) for a locked-out file.
    kind: String,
    attach_kind: Option<&'static str>,
    /// `<function>: <kind>: <message>`, as the SQL function's error says it.
    message: String,
    code: i32,
}

impl Failure {
    fn of(function: &str, e: &VfsError) -> Failure {
        Failure {
            kind: e.kind.as_str().to_owned(),
            attach_kind: None,
            message: format!("{function}: {}: {}", e.kind.as_str(), e.message),
            code: e.code,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "error": {
                "kind": self.kind,
                "attach_kind": self.attach_kind,
                "message": self.message,
                "code": self.code,
                "errstr": errstr(self.code),
            }
        })
    }
}

/// SQLite's text for a result code, as node:sqlite's `errstr` has it.
fn errstr(code: i32) -> Option<String> {
    if !sqlite_ursula_vfs::shim::registered() {
        return None;
    }
    // SAFETY: the extension was initialised, so the API table is set; sqlite3_errstr returns a
    // static string for any code.
    unsafe {
        let p = ffi::sqlite3_errstr(code);
        (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// Runs `f` once the extension is loaded, with panics turned into `internal` failures.
fn call<T: serde::Serialize>(function: &str, f: impl FnOnce() -> Result<T, Failure>) -> String {
    if !sqlite_ursula_vfs::shim::registered() {
        return Failure {
            kind: "not_loaded".into(),
            attach_kind: None,
            message: format!(
                "{function}: not_loaded: the extension is not loaded into node:sqlite in this process: call loadUrsulaVfs() first"
            ),
            code: SQLITE_ERROR,
        }
        .to_json()
        .to_string();
    }
    let result = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        sqlite_ursula_vfs::log::panic(function, p.as_ref());
        Err(Failure::of(
            function,
            &VfsError::new(
                Kind::Internal,
                "the extension panicked; see the panic event on stderr",
            ),
        ))
    });
    // The value is written as it is, so an ordered object keeps its keys' order.
    let ok = result.and_then(|v| {
        serde_json::to_string(&v).map_err(|e| {
            Failure::of(
                function,
                &VfsError::new(Kind::Internal, format!("cannot encode the answer: {e}")),
            )
        })
    });
    match ok {
        Ok(v) => format!("{{\"ok\":{v}}}"),
        Err(f) => f.to_json().to_string(),
    }
}

/// The attached database at `path`, or why there is none: the same lookup and messages as the
/// SQL functions `ursula_status` and `ursula_stats`.
fn attached(function: &str, path: &str) -> Result<Arc<Db>, Failure> {
    let canon = registry::canonical(path);
    let reg = registry::global();
    if let Some(db) = reg.attached(&canon) {
        return Ok(db);
    }
    Err(match reg.failed(&canon) {
        Some((kind, reason)) => Failure {
            kind: "attach_failed".into(),
            attach_kind: Some(kind.as_str()),
            message: format!(
                "{function}: attach_failed: {}: {} is not attached: its last attach failed ({reason})",
                kind.as_str(),
                canon.display()
            ),
            code: SQLITE_ERROR,
        },
        None => Failure::of(
            function,
            &VfsError::new(
                Kind::NotAttached,
                format!("{} is not attached in this process", canon.display()),
            ),
        ),
    })
}

/// The file reader `n` (0: the owner) of the stream at `url` is named after, with the URL's
/// normal forms: `{"ok": {"identity", "url", "file"}}` or `{"error": {"message"}}`. Needs no
/// loaded extension: the naming is the library's own code.
#[napi(js_name = "fileName")]
pub fn file_name(url: String, n: u32) -> String {
    sqlite_ursula_vfs::naming::file_name_json(&url, n)
}

/// `ursula_attach(path, url, mode)`: `{"ok": "<offset>"}`. `mode` is the SQL function's third
/// argument (`''` for the owner), parsed by the extension so both forms accept the same modes.
#[napi]
pub fn attach(path: String, url: String, mode: String) -> String {
    attach_json(&path, &url, &mode)
}

fn attach_json(path: &str, url: &str, mode: &str) -> String {
    call("ursula_attach", || {
        let mode = Mode::parse(mode).map_err(|e| Failure::of("ursula_attach", &e))?;
        attach::attach(path, url, mode)
            .map(Value::String)
            .map_err(|e| Failure::of("ursula_attach", &e))
    })
}

/// One attach on libuv's thread pool.
pub struct AttachTask {
    path: String,
    url: String,
    mode: String,
}

impl Task for AttachTask {
    type Output = String;
    type JsValue = String;

    /// On a pool thread. Every failure, a panic included, is in the JSON, as for `attach`, so
    /// the promise always resolves and JavaScript builds the one kind of error either way.
    fn compute(&mut self) -> napi::Result<String> {
        Ok(attach_json(&self.path, &self.url, &self.mode))
    }

    fn resolve(&mut self, _env: Env, output: String) -> napi::Result<String> {
        Ok(output)
    }
}

/// `attach` off the event loop: a promise of the same JSON.
#[napi(js_name = "attachAsync")]
pub fn attach_async(path: String, url: String, mode: String) -> AsyncTask<AttachTask> {
    AsyncTask::new(AttachTask { path, url, mode })
}

/// `ursula_status(path)`: `{"ok": {...status}}`.
#[napi]
pub fn status(path: String) -> String {
    call("ursula_status", || {
        let db = attached("ursula_status", &path)?;
        Ok(db.status_json(settings::get().snapshot_min_bytes))
    })
}

/// `ursula_stats(path)`: drains the file's measurements, `{"ok": {...stats}}`.
#[napi(js_name = "drainStats")]
pub fn drain_stats(path: String) -> String {
    call("ursula_stats", || {
        let db = attached("ursula_stats", &path)?;
        Ok(db.drain_stats_json())
    })
}

/// `ursula_commits(url, from, limit)`: `{"ok": {earliest, tail, snapshot, commits, more}}`.
/// `from` is an offset as text (`null` or `"-1"`: from the start), `limit` a positive count
/// (`null`: the extension's default); JavaScript checks their types first.
#[napi]
pub fn commits(url: String, from: Option<String>, limit: Option<u32>) -> String {
    call("ursula_commits", || {
        let fail = |e: VfsError| Failure::of("ursula_commits", &e);
        let from = match from {
            None => None,
            Some(t) => offset_text::parse(&t).ok_or_else(|| {
                fail(VfsError::new(
                    Kind::InvalidArgument,
                    format!("from must be a stream offset (20 digits) or -1, not {t:?}"),
                ))
            })?,
        };
        let limit = limit.map_or(point_in_time::DEFAULT_LIMIT, u64::from);
        attach::commits(&url, from, limit).map_err(fail)
    })
}

/// `ursula_set_token(token)`: `null` or `""` returns to the token file.
#[napi(js_name = "setToken")]
pub fn set_token(token: Option<String>) -> String {
    call("ursula_set_token", || {
        token::set_token(token.filter(|t| !t.is_empty()));
        Ok(Value::Bool(true))
    })
}

/// Whether this object's extension entry point ran in this process.
#[napi]
pub fn loaded() -> bool {
    sqlite_ursula_vfs::shim::registered()
}

/// The version of the addon and of the extension it links.
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
