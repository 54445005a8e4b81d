//! `sqlite-ursula-vfs`: a SQLite loadable extension that replicates a database to an Ursula
//! stream. Every commit is appended to the stream before it reaches the local file.
//!
//! Module map, each module importing only those below it (no two import each other):
//! - [`entry`]: the loadable-extension entry points and the host version check.
//! - [`sql`]: `ursula_attach`, `ursula_status`, `ursula_stats`, `ursula_set_token`,
//!   `ursula_commits`, `ursula_file_name`.
//! - [`shim`]: the `ursula` VFS, a shim over `unix`: the FFI with SQLite, and the only place
//!   besides [`entry`] with `unsafe`. It hands attached files' writes to [`commit`] through
//!   the [`commit::RealFile`] trait.
//! - [`attach`]: local-file checks, catch-up, claim; its `point` part runs `at:` attaches and
//!   the commit listing over [`point_in_time`]; [`url`]: its checks of the URL and path;
//!   [`mode`]: owner or one of the read-only modes.
//! - [`commit`]: the commit point: WAL overlay, commit frames, local write after the ack.
//! - [`snapshot`]: the per-database snapshot thread.
//! - [`follow`]: the follower thread of a live read replica; [`gate`]: the read gate that
//!   keeps its writes and read transactions apart.
//! - [`reclaim`]: claiming the stream back when it forgot an idle owner's producer.
//! - [`append`]: appending frames and the refusal table.
//! - [`point_in_time`]: commit points, the base a point is rebuilt from, the replay that
//!   stops at a point, the listing.
//! - [`replay`]: snapshot install and tail replay.
//! - [`local`]: sidecar, boot id, WAL checks.
//! - [`registry`], [`db`]: process-wide and per-database state.
//! - [`client`], [`token`], [`dns`]: the HTTP client, bearer tokens, name resolution.
//! - [`sqlite_wal`]: SQLite's `-wal` layout (header, frame headers) and WAL mode on page 1.
//! - [`format`]: frame, snapshot and sidecar layouts (see `docs/sqlite-vfs.md`).
//! - [`pragma`]: PRAGMAs refused before they run (`journal_mode` away from WAL).
//! - [`naming`]: the local file a stream URL names (`<label>-<hash>.db`), for the packages.
//! - [`retry`]: the retry budget and backoff of the requests to the stream.
//! - [`settings`], [`log`], [`error`]: env vars, logfmt events, failure kinds.
//! - [`ordered`]: JSON objects whose keys keep the order written (`ursula_status`).
//! - [`package_errors`]: the error table the npm and Python packages classify failures by.

pub mod append;
pub mod attach;
pub mod client;
pub mod commit;
pub mod db;
pub mod dns;
#[allow(unsafe_code)]
pub mod entry;
pub mod error;
pub mod follow;
pub mod format;
#[cfg(test)]
mod format_fixtures;
pub mod gate;
pub mod local;
pub mod log;
pub mod mode;
pub mod naming;
pub mod ordered;
pub mod package_errors;
pub mod point_in_time;
pub mod pragma;
pub mod reclaim;
pub mod registry;
pub mod replay;
pub mod retry;
pub mod settings;
#[allow(unsafe_code)]
pub mod shim;
pub mod snapshot;
pub mod sql;
pub mod sqlite_wal;
pub mod token;
pub mod url;

use std::os::raw::c_char;
use std::os::raw::c_int;

/// Defines `extern "C"` entry points of the extension, each handing over to [`entry::init`].
macro_rules! entry_points {
    ($($(#[$doc:meta])* $name:ident;)+) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// Called by SQLite's extension loader.
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            db: *mut rusqlite::ffi::sqlite3,
            pz_err: *mut *mut c_char,
            p_api: *mut rusqlite::ffi::sqlite3_api_routines,
        ) -> c_int {
            unsafe { entry::init(db, pz_err, p_api) }
        }
    )+};
}

entry_points! {
    /// Entry point SQLite derives from the file name `libsqlite_ursula_vfs.so`.
    sqlite3_sqliteursulavfs_init;
    /// The generic entry point SQLite tries first.
    sqlite3_extension_init;
}

/// The file name of reader `n` (0: the owner) of the stream at `url`, for a host that calls
/// the library without SQLite (the Python package, through ctypes): a JSON text as
/// [`naming::file_name_json`] says, which the caller frees with
/// [`sqlite_ursula_free_text`]. NULL when `url` is NULL or not UTF-8.
///
/// # Safety
/// `url` is NULL or a NUL-terminated string that stays valid during the call.
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sqlite_ursula_file_name(url: *const c_char, n: u32) -> *mut c_char {
    if url.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller passes a NUL-terminated string valid for the call.
    let text = unsafe { std::ffi::CStr::from_ptr(url) };
    let Ok(text) = text.to_str() else {
        return std::ptr::null_mut();
    };
    let answer = std::panic::catch_unwind(|| naming::file_name_json(text, n));
    match answer.ok().and_then(|a| std::ffi::CString::new(a).ok()) {
        Some(c) => c.into_raw(),
        None => std::ptr::null_mut(),
    }
}

/// Frees a text [`sqlite_ursula_file_name`] returned; NULL is ignored.
///
/// # Safety
/// `text` is NULL or a pointer [`sqlite_ursula_file_name`] returned, freed once.
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sqlite_ursula_free_text(text: *mut c_char) {
    if !text.is_null() {
        // SAFETY: the pointer came from CString::into_raw in sqlite_ursula_file_name.
        drop(unsafe { std::ffi::CString::from_raw(text) });
    }
}
