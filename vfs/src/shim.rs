//! The `ursula` VFS: a shim over SQLite's `unix` VFS. Files of attached databases get the
//! commit interception of [`crate::commit`]; every other file passes straight through.
//!
//! Every callback runs under `catch_unwind`: a panic never crosses into SQLite. A panic in a
//! file method poisons the file; one in xOpen or xClose poisons nothing.

use std::ffi::CStr;
use std::os::raw::c_char;
use std::os::raw::c_int;
use std::os::raw::c_void;
use std::panic::AssertUnwindSafe;
use std::panic::catch_unwind;
use std::ptr;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use rusqlite::ffi;

use crate::commit;
use crate::commit::RealFile;
use crate::db::Db;
use crate::error::Kind;
use crate::log;
use crate::registry;

pub const VFS_NAME: &CStr = c"ursula";

const ROLE_OTHER: u8 = 0;
const ROLE_MAIN: u8 = 1;
const ROLE_WAL: u8 = 2;

/// SQLite's shm lock slots (wal.c).
const WAL_WRITE_LOCK: c_int = 0;
const WAL_READ_LOCK_FIRST: c_int = 3;

#[repr(C)]
struct ShimFile {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    /// `Arc::into_raw` of the attached database, or null.
    db: *const Db,
    role: u8,
    /// Shm lock slots this handle holds (bit n: slot n), kept for a following replica's read
    /// gate: the handle is inside the gate while any is held.
    shm_held: u8,
}

const HEADER: usize = (std::mem::size_of::<ShimFile>() + 15) & !15;

/// A shim file's underlying `unix` file, as the commit code writes to it. Made only from an
/// open [`ShimFile`]'s `real`, inside one of its callbacks, and not kept past it: so the
/// pointer is valid for as long as the handle lives.
struct Real(*mut ffi::sqlite3_file);

impl RealFile for Real {
    fn write(&mut self, data: &[u8], off: u64) -> c_int {
        // SAFETY: see `Real`: an open file of the underlying VFS.
        unsafe { real_write(self.0, data, off) }
    }
}

struct Vfs(*mut ffi::sqlite3_vfs);
// SAFETY: the pointers are to SQLite's registered VFS objects, which live for the process.
unsafe impl Send for Vfs {}
unsafe impl Sync for Vfs {}

static REAL: OnceLock<Vfs> = OnceLock::new();

fn real_vfs() -> *mut ffi::sqlite3_vfs {
    REAL.get().map_or(ptr::null_mut(), |v| v.0)
}

/// Whether this copy of the extension ran its entry point, so its calls into SQLite have the
/// host's API table. Added for `node-binding`, whose napi functions call into the extension
/// directly and must refuse to run before node:sqlite loaded it.
pub fn registered() -> bool {
    REAL.get().is_some()
}

/// Registers the `ursula` VFS once per process as SQLite's default.
pub fn register() -> c_int {
    // SAFETY: calls into the host SQLite through its API table with valid C strings.
    unsafe {
        if !ffi::sqlite3_vfs_find(VFS_NAME.as_ptr()).is_null() {
            return ffi::SQLITE_OK;
        }
        let mut real = ffi::sqlite3_vfs_find(c"unix".as_ptr());
        if real.is_null() {
            real = ffi::sqlite3_vfs_find(ptr::null());
        }
        if real.is_null() {
            return ffi::SQLITE_ERROR;
        }
        let _ = REAL.set(Vfs(real));
        let r = &*real;
        let vfs = Box::new(ffi::sqlite3_vfs {
            iVersion: 2,
            szOsFile: (HEADER as c_int) + r.szOsFile,
            mxPathname: r.mxPathname,
            pNext: ptr::null_mut(),
            zName: VFS_NAME.as_ptr(),
            pAppData: ptr::null_mut(),
            xOpen: Some(x_open),
            xDelete: Some(x_delete),
            xAccess: Some(x_access),
            xFullPathname: Some(x_full_pathname),
            xDlOpen: Some(x_dl_open),
            xDlError: Some(x_dl_error),
            xDlSym: Some(x_dl_sym),
            xDlClose: Some(x_dl_close),
            xRandomness: Some(x_randomness),
            xSleep: Some(x_sleep),
            xCurrentTime: Some(x_current_time),
            xGetLastError: Some(x_get_last_error),
            xCurrentTimeInt64: Some(x_current_time_int64),
            xSetSystemCall: None,
            xGetSystemCall: None,
            xNextSystemCall: None,
        });
        ffi::sqlite3_vfs_register(Box::into_raw(vfs), 1)
    }
}

fn guarded<F: FnOnce() -> c_int>(entry: &str, on_panic: c_int, f: F) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(rc) => rc,
        Err(p) => {
            log::panic(entry, p.as_ref());
            on_panic
        }
    }
}

/// [`guarded`] for a read or write of file `f`, which the commit path may have left half-done:
/// a panic, or `None` from `op` (the real file lacks the method), answers `on_panic` and
/// poisons the database of `f`.
fn guarded_io<F: FnOnce() -> Option<c_int>>(
    f: *mut ffi::sqlite3_file,
    entry: &str,
    on_panic: c_int,
    op: F,
) -> c_int {
    let mut poison = true;
    let rc = guarded(entry, on_panic, || {
        let rc = op();
        poison = rc.is_none();
        rc.unwrap_or(on_panic)
    });
    if poison {
        poison_after_panic(f);
    }
    rc
}

unsafe fn shim<'a>(f: *mut ffi::sqlite3_file) -> &'a mut ShimFile {
    // SAFETY: SQLite hands back the sqlite3_file we initialized in x_open.
    unsafe { &mut *(f as *mut ShimFile) }
}

unsafe fn real_methods<'a>(s: &ShimFile) -> &'a ffi::sqlite3_io_methods {
    // SAFETY: `real` was opened successfully, so its pMethods is set for its lifetime.
    unsafe { &*(*s.real).pMethods }
}

fn db_of(s: &ShimFile) -> Option<&Db> {
    // SAFETY: `db` is an Arc kept alive until x_close.
    (!s.db.is_null()).then(|| unsafe { &*s.db })
}

fn poison_after_panic(f: *mut ffi::sqlite3_file) {
    // SAFETY: see shim(); only reads our own header.
    let s = unsafe { shim(f) };
    if let Some(db) = db_of(s) {
        db.poison(Kind::Internal, "the extension panicked in a file method");
    }
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let _ = vfs;
    guarded("xOpen", ffi::SQLITE_CANTOPEN, || unsafe {
        (*file).pMethods = ptr::null();
        let s = file as *mut ShimFile;
        let real_file = (file as *mut u8).add(HEADER) as *mut ffi::sqlite3_file;
        let mut role = ROLE_OTHER;
        let mut db: Option<Arc<Db>> = None;
        if !name.is_null() {
            let path = CStr::from_ptr(name).to_string_lossy().into_owned();
            if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
                let canon = registry::canonical(&path);
                let reg = registry::global();
                if let Some(d) = reg.attached(&canon) {
                    role = ROLE_MAIN;
                    db = Some(d);
                } else if let Some((kind, reason)) = reg.failed(&canon) {
                    let file_s = canon.display().to_string();
                    log::event(
                        log::Level::Warn,
                        "open_refused",
                        &[
                            ("file", &file_s),
                            ("kind", kind.as_str()),
                            ("reason", &reason),
                        ],
                    );
                    return ffi::SQLITE_CANTOPEN;
                } else if registry::sibling(&canon, "-ursula").exists() {
                    let file_s = canon.display().to_string();
                    log::event(
                        log::Level::Warn,
                        "open_refused",
                        &[
                            ("file", &file_s),
                            (
                                "reason",
                                "the file has a sidecar but is not attached in this process",
                            ),
                        ],
                    );
                    return ffi::SQLITE_CANTOPEN;
                }
            } else if flags & ffi::SQLITE_OPEN_WAL != 0
                && let Some(base) = path.strip_suffix("-wal")
                && let Some(d) = registry::global().attached(&registry::canonical(base))
            {
                role = ROLE_WAL;
                db = Some(d);
            }
        }
        let real = real_vfs();
        let Some(open) = (*real).xOpen else {
            return ffi::SQLITE_CANTOPEN;
        };
        let rc = open(real, name, real_file, flags, out_flags);
        if rc != ffi::SQLITE_OK || (*real_file).pMethods.is_null() {
            return if rc == ffi::SQLITE_OK {
                ffi::SQLITE_CANTOPEN
            } else {
                rc
            };
        }
        if role == ROLE_MAIN
            && let Some(d) = &db
        {
            d.open_files.fetch_add(1, Ordering::SeqCst);
        }
        ptr::write(
            s,
            ShimFile {
                base: ffi::sqlite3_file { pMethods: &METHODS },
                real: real_file,
                db: db.map_or(ptr::null(), Arc::into_raw),
                role,
                shm_held: 0,
            },
        );
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_close(f: *mut ffi::sqlite3_file) -> c_int {
    guarded("xClose", ffi::SQLITE_IOERR_CLOSE, || unsafe {
        let s = shim(f);
        let m = real_methods(s);
        let rc = m.xClose.map_or(ffi::SQLITE_OK, |c| c(s.real));
        if !s.db.is_null() {
            let db = Arc::from_raw(s.db);
            if s.shm_held != 0 {
                s.shm_held = 0;
                db.gate.leave();
            }
            if s.role == ROLE_MAIN {
                db.open_files.fetch_sub(1, Ordering::SeqCst);
            }
            s.db = ptr::null();
        }
        rc
    })
}

unsafe extern "C" fn x_read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    off: i64,
) -> c_int {
    guarded_io(f, "xRead", ffi::SQLITE_IOERR_READ, || unsafe {
        let s = shim(f);
        let m = real_methods(s);
        let read = m.xRead?;
        let rc = read(s.real, buf, amt, off);
        Some(match (s.role, db_of(s)) {
            (ROLE_WAL, Some(db)) => {
                let out = std::slice::from_raw_parts_mut(buf as *mut u8, amt.max(0) as usize);
                commit::overlay_read(db, out, off as u64, rc)
            }
            _ => rc,
        })
    })
}

unsafe extern "C" fn x_write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    off: i64,
) -> c_int {
    guarded_io(f, "xWrite", ffi::SQLITE_IOERR_WRITE, || unsafe {
        let s = shim(f);
        let data = std::slice::from_raw_parts(buf as *const u8, amt.max(0) as usize);
        Some(match (s.role, db_of(s)) {
            (ROLE_WAL, Some(db)) => commit::wal_write(db, &mut Real(s.real), data, off as u64),
            (ROLE_MAIN, Some(db)) => commit::db_write(db, &mut Real(s.real), data, off as u64),
            _ => real_write(s.real, data, off as u64),
        })
    })
}

/// Writes through to the underlying file.
///
/// # Safety
/// `real` must be an open file of the underlying VFS.
unsafe fn real_write(real: *mut ffi::sqlite3_file, data: &[u8], off: u64) -> c_int {
    // SAFETY: `real` is an open unix file (caller's contract); `data` outlives the call.
    unsafe {
        match (*(*real).pMethods).xWrite {
            Some(w) => w(
                real,
                data.as_ptr() as *const c_void,
                data.len() as c_int,
                off as i64,
            ),
            None => ffi::SQLITE_IOERR_WRITE,
        }
    }
}

/// The underlying file's size.
///
/// # Safety
/// `real` must be an open file of the underlying VFS.
unsafe fn real_size(real: *mut ffi::sqlite3_file) -> Result<u64, c_int> {
    let mut size: i64 = 0;
    // SAFETY: `real` is an open unix file.
    let rc = unsafe {
        match (*(*real).pMethods).xFileSize {
            Some(fs) => fs(real, &mut size),
            None => ffi::SQLITE_IOERR_FSTAT,
        }
    };
    if rc == ffi::SQLITE_OK {
        Ok(size.max(0) as u64)
    } else {
        Err(rc)
    }
}

unsafe extern "C" fn x_truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    guarded("xTruncate", ffi::SQLITE_IOERR_TRUNCATE, || unsafe {
        let s = shim(f);
        let m = real_methods(s);
        let Some(trunc) = m.xTruncate else {
            return ffi::SQLITE_IOERR_TRUNCATE;
        };
        match (s.role, db_of(s)) {
            (ROLE_WAL, Some(db)) => {
                commit::wal_truncate(db, size.max(0) as u64, || trunc(s.real, size))
            }
            (ROLE_MAIN, Some(db)) => {
                commit::db_truncate(db, size.max(0) as u64, || trunc(s.real, size))
            }
            _ => trunc(s.real, size),
        }
    })
}

unsafe extern "C" fn x_sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    guarded("xSync", ffi::SQLITE_IOERR_FSYNC, || unsafe {
        let s = shim(f);
        if db_of(s).is_some() {
            // Durability is the stream's acknowledgement; after a reboot the files are rebuilt.
            return ffi::SQLITE_OK;
        }
        real_methods(s)
            .xSync
            .map_or(ffi::SQLITE_OK, |x| x(s.real, flags))
    })
}

unsafe extern "C" fn x_file_size(f: *mut ffi::sqlite3_file, out: *mut i64) -> c_int {
    guarded("xFileSize", ffi::SQLITE_IOERR_FSTAT, || unsafe {
        let s = shim(f);
        let size = match real_size(s.real) {
            Ok(n) => n,
            Err(rc) => return rc,
        };
        let size = match (s.role, db_of(s)) {
            (ROLE_WAL, Some(db)) => commit::overlay_size(db, size),
            _ => size,
        };
        *out = size as i64;
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_lock(f: *mut ffi::sqlite3_file, lvl: c_int) -> c_int {
    guarded("xLock", ffi::SQLITE_IOERR_LOCK, || unsafe {
        let s = shim(f);
        real_methods(s)
            .xLock
            .map_or(ffi::SQLITE_OK, |x| x(s.real, lvl))
    })
}

unsafe extern "C" fn x_unlock(f: *mut ffi::sqlite3_file, lvl: c_int) -> c_int {
    guarded("xUnlock", ffi::SQLITE_IOERR_UNLOCK, || unsafe {
        let s = shim(f);
        real_methods(s)
            .xUnlock
            .map_or(ffi::SQLITE_OK, |x| x(s.real, lvl))
    })
}

unsafe extern "C" fn x_check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    guarded(
        "xCheckReservedLock",
        ffi::SQLITE_IOERR_CHECKRESERVEDLOCK,
        || unsafe {
            let s = shim(f);
            real_methods(s)
                .xCheckReservedLock
                .map_or(ffi::SQLITE_OK, |x| x(s.real, out))
        },
    )
}

unsafe extern "C" fn x_file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    guarded("xFileControl", ffi::SQLITE_ERROR, || unsafe {
        let s = shim(f);
        if op == ffi::SQLITE_FCNTL_PRAGMA
            && let (ROLE_MAIN, Some(db)) = (s.role, db_of(s))
            && let Some(rc) = refuse_pragma(db, arg as *mut *mut c_char)
        {
            return rc;
        }
        real_methods(s)
            .xFileControl
            .map_or(ffi::SQLITE_NOTFOUND, |x| x(s.real, op, arg))
    })
}

/// `SQLITE_FCNTL_PRAGMA` on an attached file: `argv` is SQLite's `[out, name, value]`. A
/// refused PRAGMA gets its message in `argv[0]` (SQLite frees it) and fails the statement
/// with SQLITE_ERROR while it is prepared, before it changed anything: the same code SQLite
/// gives its own refusal of a journal mode change inside a transaction. `None` passes the
/// PRAGMA on.
///
/// # Safety
/// `argv` must be the array SQLite passes with `SQLITE_FCNTL_PRAGMA`.
unsafe fn refuse_pragma(db: &Db, argv: *mut *mut c_char) -> Option<c_int> {
    if argv.is_null() {
        return None;
    }
    // SAFETY: SQLite's array has three entries; the name is set, the value may be null.
    let (name, value) = unsafe { (*argv.add(1), *argv.add(2)) };
    let text = |p: *mut c_char| {
        // SAFETY: non-null entries are NUL-terminated strings SQLite owns for the call.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let name = text(name)?;
    let message = crate::pragma::refusal(&name, text(value).as_deref())?;
    db.event(
        log::Level::Warn,
        "journal_refused",
        &[
            // The message without its `sqlite-ursula-vfs: <kind>: `, which the line says already.
            ("reason", message.splitn(3, ": ").nth(2).unwrap_or(&message)),
        ],
    );
    // SAFETY: argv[0] is SQLite's out slot; the copy comes from SQLite's allocator, which
    // frees it.
    unsafe { *argv = sqlite_string(&message) };
    Some(ffi::SQLITE_ERROR)
}

/// `text` copied into memory from SQLite's allocator, NUL-terminated; null when out of memory.
fn sqlite_string(text: &str) -> *mut c_char {
    let bytes = text.replace('\0', " ");
    let len = bytes.len() + 1;
    let Ok(n) = c_int::try_from(len) else {
        return ptr::null_mut();
    };
    // SAFETY: a fresh allocation of `len` bytes, filled with the text and a NUL.
    unsafe {
        let p = ffi::sqlite3_malloc(n) as *mut u8;
        if !p.is_null() {
            ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
            *p.add(bytes.len()) = 0;
        }
        p as *mut c_char
    }
}

unsafe extern "C" fn x_sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    guarded("xSectorSize", 4096, || unsafe {
        let s = shim(f);
        real_methods(s).xSectorSize.map_or(4096, |x| x(s.real))
    })
}

unsafe extern "C" fn x_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    guarded("xDeviceCharacteristics", 0, || unsafe {
        let s = shim(f);
        let dc = real_methods(s)
            .xDeviceCharacteristics
            .map_or(0, |x| x(s.real));
        if db_of(s).is_some() {
            // No WAL padding frames after a commit frame: the commit frame is the last write
            // of a transaction the interception has to see.
            dc | ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE
        } else {
            dc
        }
    })
}

unsafe extern "C" fn x_shm_map(
    f: *mut ffi::sqlite3_file,
    pg: c_int,
    sz: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    guarded("xShmMap", ffi::SQLITE_IOERR_SHMMAP, || unsafe {
        let s = shim(f);
        let m = real_methods(s);
        if m.iVersion < 2 {
            return ffi::SQLITE_IOERR_SHMMAP;
        }
        m.xShmMap
            .map_or(ffi::SQLITE_IOERR_SHMMAP, |x| x(s.real, pg, sz, extend, out))
    })
}

fn covers(ofst: c_int, n: c_int, slot: c_int) -> bool {
    ofst <= slot && slot < ofst + n
}

unsafe extern "C" fn x_shm_lock(
    f: *mut ffi::sqlite3_file,
    ofst: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    guarded("xShmLock", ffi::SQLITE_IOERR_SHMLOCK, || unsafe {
        let s = shim(f);
        let m = real_methods(s);
        let Some(lock) = m.xShmLock else {
            return ffi::SQLITE_IOERR_SHMLOCK;
        };
        let locking = flags & ffi::SQLITE_SHM_LOCK != 0;
        let exclusive = flags & ffi::SQLITE_SHM_EXCLUSIVE != 0;
        let follower = match (s.role, db_of(s)) {
            (ROLE_MAIN, Some(db)) => {
                // A fenced file no longer holds what the stream does, nor a replica that
                // stopped following: new read transactions fail, one already open keeps its
                // snapshot.
                if locking && !exclusive && ofst >= WAL_READ_LOCK_FIRST && db.refuses_reads() {
                    return ffi::SQLITE_IOERR_READ;
                }
                db.follows
            }
            _ => false,
        };
        let real = s.real;
        let rc = if follower {
            // SAFETY: a follower's handle holds its Arc<Db> until x_close (see db_of); read
            // through the pointer so the handle's own lock bits can be borrowed beside it.
            let db = &*s.db;
            db.gate.around_lock(&mut s.shm_held, ofst, n, locking, || {
                lock(real, ofst, n, flags)
            })
        } else {
            lock(real, ofst, n, flags)
        };
        if rc == ffi::SQLITE_OK
            && exclusive
            && let (ROLE_MAIN, Some(db)) = (s.role, db_of(s))
            && covers(ofst, n, WAL_WRITE_LOCK)
        {
            commit::write_lock_changed(db, locking);
        }
        rc
    })
}

unsafe extern "C" fn x_shm_barrier(f: *mut ffi::sqlite3_file) {
    let _ = guarded("xShmBarrier", 0, || unsafe {
        let s = shim(f);
        if let Some(b) = real_methods(s).xShmBarrier {
            b(s.real);
        }
        0
    });
}

unsafe extern "C" fn x_shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    guarded("xShmUnmap", ffi::SQLITE_IOERR_SHMMAP, || unsafe {
        let s = shim(f);
        // Unmapping releases every shm lock the handle held.
        if s.shm_held != 0 {
            s.shm_held = 0;
            if let Some(db) = db_of(s) {
                db.gate.leave();
            }
        }
        real_methods(s)
            .xShmUnmap
            .map_or(ffi::SQLITE_OK, |x| x(s.real, delete))
    })
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

unsafe extern "C" fn x_delete(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    guarded("xDelete", ffi::SQLITE_IOERR_DELETE, || unsafe {
        let real = real_vfs();
        if !name.is_null() {
            let path = CStr::from_ptr(name).to_string_lossy().into_owned();
            if let Some(base) = path.strip_suffix("-wal")
                && let Some(db) = registry::global().attached(&registry::canonical(base))
            {
                let del = (*real).xDelete;
                return commit::wal_truncate(&db, 0, || {
                    del.map_or(ffi::SQLITE_OK, |d| d(real, name, sync_dir))
                });
            }
        }
        (*real)
            .xDelete
            .map_or(ffi::SQLITE_IOERR_DELETE, |d| d(real, name, sync_dir))
    })
}

/// VFS methods that only pass the call to the same method of the `unix` VFS, or answer
/// `absent` when it has none.
macro_rules! pass_to_real {
    ($(fn $name:ident => $method:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty, absent $absent:expr)?;)*) => {$(
        unsafe extern "C" fn $name(_vfs: *mut ffi::sqlite3_vfs, $($arg: $ty),*) $(-> $ret)? {
            // SAFETY: SQLite calls the shim only after `register` found the real VFS, which
            // lives for the process; the arguments are SQLite's own, passed on unchanged.
            unsafe {
                let real = real_vfs();
                match (*real).$method {
                    Some(x) => x(real, $($arg),*),
                    None => { $($absent)? }
                }
            }
        }
    )*};
}

pass_to_real! {
    fn x_access => xAccess(name: *const c_char, flags: c_int, out: *mut c_int)
        -> c_int, absent ffi::SQLITE_IOERR_ACCESS;
    fn x_full_pathname => xFullPathname(name: *const c_char, n: c_int, out: *mut c_char)
        -> c_int, absent ffi::SQLITE_ERROR;
    fn x_dl_open => xDlOpen(name: *const c_char) -> *mut c_void, absent ptr::null_mut();
    fn x_dl_error => xDlError(n: c_int, out: *mut c_char);
    fn x_dl_sym => xDlSym(handle: *mut c_void, name: *const c_char)
        -> Option<unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char)>,
        absent None;
    fn x_dl_close => xDlClose(handle: *mut c_void);
    fn x_randomness => xRandomness(n: c_int, out: *mut c_char) -> c_int, absent 0;
    fn x_sleep => xSleep(us: c_int) -> c_int, absent 0;
    fn x_current_time => xCurrentTime(out: *mut f64) -> c_int, absent ffi::SQLITE_ERROR;
    fn x_get_last_error => xGetLastError(n: c_int, out: *mut c_char) -> c_int, absent 0;
    fn x_current_time_int64 => xCurrentTimeInt64(out: *mut ffi::sqlite3_int64)
        -> c_int, absent ffi::SQLITE_ERROR;
}
