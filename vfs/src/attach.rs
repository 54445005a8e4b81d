//! Attach: check the local files, catch them up from the stream (latest snapshot, then the
//! tail), claim the stream with a new producer epoch, and bind the path to the stream.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use ursula_protocol::offset::Offset;

use crate::db::Db;
use crate::db::WalClaim;
use crate::error::Kind;
use crate::error::VfsError;
use crate::format::Record;
use crate::format::SIDECAR_VERSION;
use crate::format::Sidecar;
use crate::format::offset_text;
use crate::local;
use crate::log;
use crate::mode::Mode;
use crate::registry;
use crate::registry::sibling;
use crate::replay;
use crate::url;

mod point;
mod requests;

pub use point::commits;

use requests::Claimed;
use requests::Head;
use requests::create_stream;
use requests::head_answer;
use requests::send_claim;

/// Rounds of catch-up before giving up when retention or a snapshot keeps moving.
const MAX_ROUNDS: usize = 10;

/// Whether this process has any of the file's names open outside the extension.
fn open_elsewhere(db: &Path) -> bool {
    let names: Vec<PathBuf> = ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|s| sibling(db, s))
        .collect();
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    entries
        .flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|target| names.contains(&target)))
}

/// Folds a trusted local WAL into the database file through SQLite's own `unix` VFS.
fn fold_wal(db: &Path) -> Result<(), VfsError> {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags_and_vfs(db, flags, c"unix")
        .map_err(|e| VfsError::new(Kind::LocalState, format!("cannot open the local file: {e}")))?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .map_err(|e| VfsError::new(Kind::LocalState, format!("cannot fold the local WAL: {e}")))?;
    drop(conn);
    Ok(())
}

/// Makes an empty database a WAL-mode database with 4 KiB pages.
fn init_wal_mode(db: &Path) -> Result<(), VfsError> {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags_and_vfs(db, flags, c"unix").map_err(|e| {
        VfsError::new(
            Kind::LocalSetup,
            format!("cannot create the local file: {e}"),
        )
    })?;
    conn.execute_batch("PRAGMA page_size=4096;")
        .and_then(|_| conn.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(())))
        .map_err(|e| VfsError::new(Kind::LocalSetup, format!("cannot set WAL mode: {e}")))?;
    Ok(())
}

/// `ursula_attach(path, url[, mode])`: the offset the file reflects, as the server wrote it
/// (`"-1"` for an empty stream).
pub fn attach(path: &str, url: &str, mode: Mode) -> Result<String, VfsError> {
    let started = Instant::now();
    let url = url::check_url(url)?;
    let path = url::check_path(path)?;
    let reg = registry::global();
    // Held until the attach has bound the file or failed.
    let Some(_attaching) = reg.begin_attach(&path) else {
        return Err(VfsError::new(
            Kind::InUse,
            format!(
                "{} is being attached in this process already: wait for that attach, and share its database",
                path.display()
            ),
        ));
    };
    if let Some(existing) = reg.attached(&path)
        && existing
            .open_files
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
    {
        return Err(VfsError::new(
            Kind::InUse,
            format!(
                "{} is open in this process: close it before attaching again",
                path.display()
            ),
        ));
    }
    match reg.take_host_lock(&path) {
        Ok(true) => {}
        Ok(false) => {
            return Err(VfsError::new(
                Kind::InUse,
                format!(
                    "another process holds {}: stop it, or use another dir or path",
                    path.display()
                ),
            ));
        }
        Err(e) => {
            return Err(VfsError::new(
                Kind::LocalSetup,
                format!(
                    "cannot create the lock file next to {}: {e}",
                    path.display()
                ),
            ));
        }
    }
    if open_elsewhere(&path) {
        return Err(VfsError::new(
            Kind::InUse,
            format!(
                "{} is open in this process outside the extension: close every such connection, then attach",
                path.display()
            ),
        ));
    }
    let sidecar = match local::read_sidecar(&path) {
        Ok(Some(bytes)) => Some(Sidecar::parse(&bytes).map_err(replay::format_err)?),
        Ok(None) => None,
        Err(e) => {
            return Err(VfsError::new(
                Kind::LocalSetup,
                format!("cannot read the sidecar: {e}"),
            ));
        }
    };
    match &sidecar {
        Some(s) if s.stream != url => {
            return Err(VfsError::new(
                Kind::OtherStream,
                format!(
                    "{} is the cache of {}, not of {url}",
                    path.display(),
                    s.stream
                ),
            ));
        }
        None if local::holds_data(&path) => {
            return Err(VfsError::new(
                Kind::UnreplicatedFile,
                format!(
                    "{} holds data but was never attached: copy its rows into a newly attached file",
                    path.display()
                ),
            ));
        }
        _ => {}
    }
    if let Some(old) = reg.detach(&path) {
        old.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        old.wake_snapshot();
    }
    // From here a failure leaves the file locked out until an attach succeeds.
    let created_sidecar = sidecar.is_none();
    let result = match mode {
        Mode::At(at) => point::run(&path, &url, at, sidecar, started),
        _ => run(&path, &url, mode, sidecar, started),
    };
    match result {
        Ok((db, offset)) => {
            reg.set_attached(db.clone());
            if db.follows {
                crate::follow::start(db.clone());
            }
            crate::snapshot::start(db);
            Ok(offset_text::to_text(offset))
        }
        Err((e, wrote_pages)) => {
            if created_sidecar
                && !wrote_pages
                && let Err(re) = local::remove_sidecar(&path)
            {
                log::event(
                    log::Level::Warn,
                    "attach_restore_failed",
                    &[
                        ("file", &path.display().to_string()),
                        ("reason", &re.to_string()),
                    ],
                );
            }
            reg.set_failed(&path, e.kind, e.message.clone());
            Err(e)
        }
    }
}

type RunError = (VfsError, bool);

/// Logs `attach_retrying` and reads the stream's state again.
fn retry_head(path: &Path, url: &str, why: &VfsError) -> Result<Head, RunError> {
    log::file_event(
        log::Level::Info,
        "attach_retrying",
        &path.display().to_string(),
        url,
        &[("reason", &why.message)],
    );
    match head_answer(url) {
        Ok(Some(h)) => Ok(h),
        Ok(None) => Err((
            VfsError::new(Kind::NotFound, "the stream disappeared during attach"),
            true,
        )),
        Err(e) => Err((e, true)),
    }
}

fn run(
    path: &Path,
    url: &str,
    mode: Mode,
    sidecar: Option<Sidecar>,
    started: Instant,
) -> Result<(Arc<Db>, Option<Offset>), RunError> {
    let read_only = !mode.writes();
    let no_pages = |e: VfsError| (e, false);
    // An event about this attach: see [`log::file_event`].
    let event = |level: log::Level, name: &str, fields: &[(&str, &str)]| {
        log::file_event(level, name, &path.display().to_string(), url, fields)
    };
    let head = match head_answer(url).map_err(no_pages)? {
        Some(h) => h,
        None => {
            let has_data =
                sidecar.as_ref().is_some_and(|s| s.offset.is_some()) || local::holds_data(path);
            if has_data || read_only {
                // Name the file: with `open(url)` it sits in a cache directory the user never chose.
                let why = if read_only {
                    "a read-only attach never creates it".to_owned()
                } else {
                    format!(
                        "the local file {} holds data, which may be the only copy left: move it \
                         away, or delete it and its -ursula sidecar, to start over",
                        path.display()
                    )
                };
                return Err(no_pages(VfsError::new(
                    Kind::NotFound,
                    format!("the stream {url} does not exist; {why}"),
                )));
            }
            create_stream(url).map_err(no_pages)?;
            head_answer(url).map_err(no_pages)?.ok_or_else(|| {
                no_pages(VfsError::new(
                    Kind::NotFound,
                    "the stream vanished after it was created",
                ))
            })?
        }
    };
    let boot = local::boot_id();
    let trusted = sidecar.as_ref().is_some_and(|s| {
        s.incarnation == head.incarnation
            && s.boot_id == boot
            && s.inode == local::inode(path)
            && WalClaim::decode(&s.wal).is_some_and(|c| local::wal_holds(path, &c))
    });
    // A stream that does not say where it ends counts as empty.
    if let Some(local) = sidecar.as_ref().and_then(|s| s.offset)
        && trusted
        && Some(local) > head.tail
    {
        return Err(no_pages(VfsError::new(
            Kind::StreamState,
            format!(
                "the stream ends at {} but the local file reflects {local}: the stream lost acknowledged commits; the file is kept",
                offset_text::to_text(head.tail)
            ),
        )));
    }
    let mut local_offset = None;
    let mut epoch = 0;
    if trusted {
        if let Some(s) = &sidecar {
            fold_wal(path).map_err(no_pages)?;
            local_offset = s.offset;
            epoch = s.epoch;
        }
    } else if sidecar.is_some() || path.exists() {
        if sidecar.is_some() {
            event(log::Level::Info, "local_files_discarded", &[]);
        }
        local::discard(path).map_err(|e| {
            no_pages(VfsError::new(
                Kind::LocalSetup,
                format!("cannot remove stale local files: {e}"),
            ))
        })?;
    }
    let mut sc = Sidecar {
        version: SIDECAR_VERSION,
        stream: url.to_owned(),
        incarnation: head.incarnation,
        offset: local_offset,
        epoch,
        log_bytes: sidecar
            .as_ref()
            .filter(|_| trusted)
            .map_or(0, |s| s.log_bytes),
        boot_id: boot,
        inode: 0,
        wal: ":0".into(),
    };
    let file = replay::open_db(path).map_err(no_pages)?;
    sc.inode = local::inode(path);
    // The sidecar exists from here, so a crash mid-replay is never mistaken for a plain file.
    local::write_sidecar(path, &sc).map_err(|e| {
        no_pages(VfsError::new(
            Kind::LocalSetup,
            format!("cannot write the sidecar: {e}"),
        ))
    })?;
    let mut installed: Option<Offset> = None;
    let mut head = head;
    let mut rounds = 0;
    // Retention or a newer snapshot can move while the file catches up: start over from a
    // fresh HEAD, a bounded number of times.
    let mut seen = loop {
        rounds += 1;
        let mut from = local_offset;
        // No local offset is behind any snapshot.
        let behind = head.snapshot.is_some_and(|snap| from < Some(snap));
        if installed.is_some() && head.snapshot == installed {
            from = installed;
        } else if let Some(snap) = head.snapshot.filter(|_| behind) {
            event(
                log::Level::Info,
                "attach_rebuilding",
                &[("snapshot", &snap.to_string())],
            );
            match replay::install_snapshot(&file, url, head.incarnation, snap) {
                Ok(h) => {
                    epoch = epoch.max(h.epoch);
                    installed = Some(snap);
                    from = Some(snap);
                    sc.log_bytes = 0;
                }
                Err(e) if e.message.starts_with(replay::MOVED) && rounds < MAX_ROUNDS => {
                    head = retry_head(path, url, &e)?;
                    continue;
                }
                Err(e) => return Err((e, true)),
            }
        }
        match replay::replay(&file, url, head.incarnation, from, None) {
            Ok(seen) => break seen,
            Err(e) if e.message.starts_with(replay::MOVED) && rounds < MAX_ROUNDS => {
                head = retry_head(path, url, &e)?;
            }
            Err(e) => return Err((e, true)),
        }
    };
    epoch = epoch.max(seen.max_epoch);
    sc.log_bytes += seen.frame_bytes;
    let mut offset = seen.offset;
    if std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) == 0 {
        drop(file);
        init_wal_mode(path).map_err(|e| (e, true))?;
    } else {
        drop(file);
    }
    let mut seq = 0;
    if !read_only {
        let mut rounds = 0;
        let mut next_epoch = epoch + 1;
        loop {
            rounds += 1;
            if rounds > MAX_ROUNDS {
                return Err((
                    VfsError::new(
                        Kind::StreamState,
                        "could not claim the stream: other owners kept claiming it",
                    ),
                    true,
                ));
            }
            let nonce: [u8; 16] = rand::random();
            let frame = Record::Claim {
                epoch: next_epoch,
                nonce,
            }
            .to_frame()
            .map_err(|e| (VfsError::new(Kind::Internal, e.to_string()), true))?;
            let claimed = send_claim(url, &sc, next_epoch, &frame).map_err(|e| (e, true))?;
            let f = replay::open_db(path).map_err(|e| (e, true))?;
            match claimed {
                Claimed::NewerEpoch(e) => next_epoch = next_epoch.max(e + 1),
                Claimed::Lost | Claimed::Ours(_) => {
                    let until = if let Claimed::Ours(n) = claimed {
                        Some(n)
                    } else {
                        None
                    };
                    seen = replay::replay(&f, url, head.incarnation, offset, until)
                        .map_err(|e| (e, true))?;
                    sc.log_bytes += seen.frame_bytes;
                    offset = seen.offset;
                    match seen.last_claim {
                        Some((e, n, _)) if e == next_epoch && n == nonce => {
                            epoch = next_epoch;
                            break;
                        }
                        _ => next_epoch = next_epoch.max(seen.max_epoch) + 1,
                    }
                }
            }
        }
        seq = 0;
        // Not one of the spec's events: every writable attach claims, so at info every open
        // would print a line.
        event(
            log::Level::Debug,
            "attach_claimed",
            &[("epoch", &epoch.to_string())],
        );
    }
    local::fsync(path).map_err(|e| {
        (
            VfsError::new(Kind::LocalDamage, format!("fsync failed: {e}")),
            true,
        )
    })?;
    sc.offset = offset;
    sc.epoch = epoch;
    sc.inode = local::inode(path);
    local::write_sidecar(path, &sc).map_err(|e| {
        (
            VfsError::new(Kind::LocalSetup, format!("cannot write the sidecar: {e}")),
            true,
        )
    })?;
    let db = Db::new(path.to_path_buf(), url.to_owned(), read_only, sc.clone());
    let db = Arc::new(if mode == Mode::Follow {
        db.following()
    } else {
        db
    });
    {
        let mut cs = db.commit_state();
        cs.seq = seq;
    }
    {
        let mut h = db.health();
        h.offset = offset;
        h.epoch = epoch;
        h.snapshot = head.snapshot;
        h.local = local_offset;
        h.installed = installed;
        h.attach_ms = started.elapsed().as_millis() as u64;
        h.log_bytes = sc.log_bytes;
        h.db_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    }
    Ok((db, offset))
}
