//! The extension's entry point: refuse a host SQLite older than the bindings, register the VFS
//! and the SQL functions, and stay loaded for the process.

use std::ffi::CString;
use std::os::raw::c_char;
use std::os::raw::c_int;

use rusqlite::Connection;
use rusqlite::ffi;

use crate::log;

fn version_text(v: c_int) -> String {
    format!("{}.{}.{}", v / 1_000_000, (v / 1000) % 1000, v % 1000)
}

/// Copies `msg` into memory from the host's own allocator, as SQLite frees it.
unsafe fn set_error(p_api: *mut ffi::sqlite3_api_routines, pz_err: *mut *mut c_char, msg: &str) {
    unsafe {
        if pz_err.is_null() || p_api.is_null() {
            return;
        }
        let Some(malloc) = (*p_api).malloc else {
            return;
        };
        let Ok(c) = CString::new(msg) else { return };
        let bytes = c.as_bytes_with_nul();
        let p = malloc(bytes.len() as c_int) as *mut u8;
        if p.is_null() {
            return;
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
        *pz_err = p as *mut c_char;
    }
}

fn init_connection(conn: Connection) -> rusqlite::Result<bool> {
    let rc = crate::shim::register();
    if rc != ffi::SQLITE_OK {
        return Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(rc),
            Some("cannot register the ursula VFS".into()),
        ));
    }
    crate::sql::register(&conn)?;
    Ok(true)
}

/// # Safety
/// Called by SQLite's extension loader with its own arguments.
pub unsafe fn init(
    db: *mut ffi::sqlite3,
    pz_err: *mut *mut c_char,
    p_api: *mut ffi::sqlite3_api_routines,
) -> c_int {
    let result = std::panic::catch_unwind(|| unsafe {
        if p_api.is_null() {
            return ffi::SQLITE_ERROR;
        }
        // Checked here, before anything calls through the API table: on an older host the
        // table lacks entries the bindings call.
        let runtime = (*p_api).libversion_number.map_or(0, |f| f());
        let needed = ffi::SQLITE_VERSION_NUMBER;
        if runtime < needed {
            let msg = format!(
                "sqlite-ursula-vfs needs SQLite {} or later; this host runs SQLite {}",
                version_text(needed),
                version_text(runtime)
            );
            set_error(p_api, pz_err, &msg);
            return ffi::SQLITE_ERROR;
        }
        Connection::extension_init2(db, pz_err, p_api, init_connection)
    });
    match result {
        Ok(rc) => rc,
        Err(p) => {
            log::panic("sqlite3_extension_init", p.as_ref());
            ffi::SQLITE_ERROR
        }
    }
}
