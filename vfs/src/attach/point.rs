//! Point-in-time attaches (`at:<offset>`) and the commit listing (`ursula_commits`): the HEAD,
//! the local files and the binding of the rebuilt file. The rebuild and the listing themselves
//! are [`crate::point_in_time`]; this part lives under [`super`] for the HEAD and the file
//! setup it shares with the other attaches.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ursula_protocol::offset::Offset;

use super::MAX_ROUNDS;
use super::RunError;
use super::init_wal_mode;
use super::requests::Head;
use super::requests::head_answer;
use super::retry_head;
use crate::db::Db;
use crate::error::Kind;
use crate::error::VfsError;
use crate::format::SIDECAR_VERSION;
use crate::format::Sidecar;
use crate::local;
use crate::point_in_time;
use crate::point_in_time::StreamView;
use crate::replay;
use crate::url;

fn view(head: &Head) -> StreamView {
    StreamView {
        incarnation: head.incarnation,
        tail: head.tail,
        snapshot: head.snapshot,
    }
}

fn missing(url: &str) -> VfsError {
    VfsError::new(
        Kind::NotFound,
        format!("the stream {url} does not exist; a point-in-time attach never creates it"),
    )
}

/// Whether a failed rebuild may pass with a fresh HEAD: retention or the snapshot moved.
fn moved(e: &VfsError) -> bool {
    e.message.starts_with(replay::MOVED)
}

/// The attach of `Mode::At(at)`, after [`super::attach`]'s checks of the path, the locks and the
/// sidecar. It never trusts the local files: they may hold another point (or the stream's
/// latest state), and nothing records which, so the file is rebuilt every time. Claims nothing;
/// the `Db` is read-only, so every write fails with SQLITE_READONLY and no snapshot thread runs.
pub(super) fn run(
    path: &Path,
    url: &str,
    at: Option<Offset>,
    sidecar: Option<Sidecar>,
    started: Instant,
) -> Result<(Arc<Db>, Option<Offset>), RunError> {
    let no_pages = |e: VfsError| (e, false);
    let mut head = head_answer(url)
        .map_err(no_pages)?
        .ok_or_else(|| no_pages(missing(url)))?;
    // Before the local files change: an offset past the tail changes nothing.
    point_in_time::check_within_tail(at, &view(&head)).map_err(no_pages)?;
    if sidecar.is_some() || path.exists() {
        local::discard(path).map_err(|e| {
            no_pages(VfsError::new(
                Kind::LocalSetup,
                format!("cannot remove the local files of another point: {e}"),
            ))
        })?;
    }
    let file = replay::open_db(path).map_err(no_pages)?;
    let mut sc = Sidecar {
        version: SIDECAR_VERSION,
        stream: url.to_owned(),
        incarnation: head.incarnation,
        offset: None,
        epoch: 0,
        log_bytes: 0,
        boot_id: local::boot_id(),
        inode: local::inode(path),
        wal: ":0".into(),
    };
    // The sidecar exists from here, so a crash mid-rebuild is never mistaken for a plain file.
    let sidecar_err = |e: std::io::Error| {
        VfsError::new(Kind::LocalSetup, format!("cannot write the sidecar: {e}"))
    };
    local::write_sidecar(path, &sc).map_err(|e| no_pages(sidecar_err(e)))?;
    let mut rounds = 0;
    let built = loop {
        rounds += 1;
        match point_in_time::build(&file, url, &view(&head), at) {
            Ok(b) => break b,
            Err(e) if moved(&e) && rounds < MAX_ROUNDS => head = retry_head(path, url, &e)?,
            // Refusals come before any page is written.
            Err(e) if matches!(e.kind, Kind::Retained | Kind::InvalidArgument) => {
                return Err(no_pages(e));
            }
            Err(e) => return Err((e, true)),
        }
    };
    drop(file);
    if std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) == 0 {
        // Before the first commit: an empty database, in WAL mode as every attached file is.
        init_wal_mode(path).map_err(|e| (e, true))?;
    }
    local::fsync(path).map_err(|e| {
        (
            VfsError::new(Kind::LocalDamage, format!("fsync failed: {e}")),
            true,
        )
    })?;
    // The file is the stream up to the commit point built: a later plain attach may trust it
    // and replay on from there.
    sc.offset = built.offset;
    sc.epoch = built.epoch;
    sc.log_bytes = built.frame_bytes;
    sc.inode = local::inode(path);
    local::write_sidecar(path, &sc).map_err(|e| (sidecar_err(e), true))?;
    let db = Arc::new(Db::new(
        path.to_path_buf(),
        url.to_owned(),
        true,
        sc.clone(),
    ));
    let _ = db.at.set(at);
    {
        let mut h = db.health();
        h.offset = built.offset;
        h.epoch = built.epoch;
        h.snapshot = head.snapshot;
        h.installed = built.installed;
        h.attach_ms = started.elapsed().as_millis() as u64;
        h.log_bytes = built.frame_bytes;
        h.db_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    }
    Ok((db, built.offset))
}

/// `ursula_commits(url[, from[, limit]])`: the commit points after `from` an `at:` attach can
/// open, as JSON ([`point_in_time::Listing::to_json`]).
pub fn commits(url: &str, from: Option<Offset>, limit: u64) -> Result<serde_json::Value, VfsError> {
    let url = url::check_url(url)?;
    if limit == 0 {
        return Err(VfsError::new(
            Kind::InvalidArgument,
            "limit must be a positive number of commits",
        ));
    }
    let mut rounds = 0;
    loop {
        rounds += 1;
        let head = head_answer(&url)?.ok_or_else(|| {
            VfsError::new(Kind::NotFound, format!("the stream {url} does not exist"))
        })?;
        match point_in_time::list(&url, &view(&head), from, limit) {
            Ok(l) => return Ok(l.to_json()),
            Err(e) if moved(&e) && rounds < MAX_ROUNDS => {}
            Err(e) => return Err(e),
        }
    }
}
