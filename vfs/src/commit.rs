//! The commit point. WAL writes of an attached database collect in an in-memory overlay (reads
//! and the file size see it); the write of the commit frame's page turns the transaction's
//! final page images into one frame, appends it to the stream, and only after the stream
//! acknowledged it writes the overlay to the local `-wal`. A refused append fails the write,
//! SQLite rolls the transaction back, and nothing of it reaches the local files.
//!
//! The writes this module lets through go to a [`RealFile`], which the VFS shim implements
//! over SQLite's `unix` file: the FFI, and every `unsafe`, stay in the shim.

use std::collections::BTreeMap;
use std::os::raw::c_int;
use std::time::Instant;

use rusqlite::ffi;

use crate::append;
use crate::db::CommitStat;
use crate::db::Db;
use crate::db::WalClaim;
use crate::error::Kind;
use crate::format::PAGE_SIZE;
use crate::format::Record;
use crate::local;
use crate::log;
use crate::reclaim;
use crate::settings;
use crate::sqlite_wal;
use crate::sqlite_wal::FRAME_HEADER;
use crate::sqlite_wal::FrameHeader;
use crate::sqlite_wal::WalHeader;

/// The underlying file of an attached database or its `-wal`, where a write goes once this
/// module allows it.
pub trait RealFile {
    /// Writes `data` at `off`; SQLite's result code.
    fn write(&mut self, data: &[u8], off: u64) -> c_int;
}

/// The frame header SQLite wrote at `at`, when the overlay's write there is one: at a frame's
/// position and exactly a frame header long (SQLite writes header and page separately).
fn frame_header(at: u64, bytes: &[u8]) -> Option<FrameHeader> {
    sqlite_wal::frame_at(at)?;
    if bytes.len() != FRAME_HEADER as usize {
        return None;
    }
    FrameHeader::parse(bytes)
}

/// Serves a read of the `-wal` from the overlay where it holds the bytes.
pub fn overlay_read(db: &Db, out: &mut [u8], off: u64, rc: c_int) -> c_int {
    let cs = db.commit_state();
    if cs.overlay.is_empty() || cs.passthrough {
        return rc;
    }
    let end = off + out.len() as u64;
    let mut covered_to = off;
    let mut touched = false;
    for (&at, bytes) in cs.overlay.range(..end) {
        let at_end = at + bytes.len() as u64;
        if at_end <= off {
            continue;
        }
        let lo = at.max(off);
        let hi = at_end.min(end);
        out[(lo - off) as usize..(hi - off) as usize]
            .copy_from_slice(&bytes[(lo - at) as usize..(hi - at) as usize]);
        touched = true;
        if lo <= covered_to {
            covered_to = covered_to.max(hi);
        }
    }
    if touched && rc == ffi::SQLITE_IOERR_SHORT_READ && covered_to >= end {
        return ffi::SQLITE_OK;
    }
    rc
}

pub fn overlay_size(db: &Db, real: u64) -> u64 {
    let cs = db.commit_state();
    if cs.passthrough {
        return real;
    }
    cs.overlay
        .iter()
        .next_back()
        .map_or(real, |(at, b)| real.max(at + b.len() as u64))
}

/// SQLite's WAL write lock was taken or released: a transaction starts or ends.
pub fn write_lock_changed(db: &Db, locked: bool) {
    let mut cs = db.commit_state();
    // A rolled-back transaction's spilled frames must never shadow a later one.
    cs.overlay.clear();
    cs.passthrough = false;
    cs.writer_active = locked;
}

/// The reason status gives (kind `unsupported`, action fix) for a write to the database file
/// that is no checkpoint, which only a journal mode other than WAL makes.
pub const JOURNAL_MODE_RULE: &str = "journal_mode must stay WAL: a write to the database file outside a checkpoint would bypass the stream";

/// The code of every commit refused before it reached the stream, the setup refusals
/// (`unsupported`) included: SQLITE_IOERR_AUTH, as the spec gives for writes refused before
/// they reach the stream. The file is not poisoned; `status(file).error.action` says whether
/// to retry (the layers in front of the stream) or to fix the setup or the transaction.
pub const REFUSED: c_int = ffi::SQLITE_IOERR_AUTH;

/// Why the commit path did not let a write through. [`WriteError::code`] is the one place it
/// becomes SQLite's result code, and [`answer`] the one place it is recorded on the database
/// (`status(file).error`) first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The database was opened read-only.
    #[error("the database is read-only")]
    ReadOnly,
    /// Refused before anything reached the stream: the transaction rolls back, the file stays
    /// usable.
    #[error("{reason}")]
    Refused { kind: Kind, reason: String },
    /// The file may no longer match the stream, or another owner holds it: poisoned now.
    #[error("{reason}")]
    Poisoned { kind: Kind, reason: String },
    /// The local fsync before the `-wal` goes failed: poisoned now, SQLite's fsync code.
    #[error("{0}")]
    Fsync(String),
    /// The file was poisoned before: the poison was logged once, and each later commit fails
    /// the same way.
    #[error("the file was poisoned by an earlier failure")]
    StillPoisoned,
    /// The local file itself answered this SQLite code; the stream was not involved.
    #[error("the local file answered SQLite code {0}")]
    Local(c_int),
}

impl WriteError {
    fn refused(kind: Kind, reason: impl Into<String>) -> WriteError {
        WriteError::Refused {
            kind,
            reason: reason.into(),
        }
    }

    fn poisoned(kind: Kind, reason: impl Into<String>) -> WriteError {
        WriteError::Poisoned {
            kind,
            reason: reason.into(),
        }
    }

    /// SQLite's result code for this failure.
    pub fn code(&self) -> c_int {
        match self {
            WriteError::ReadOnly => ffi::SQLITE_READONLY,
            WriteError::Refused { .. } => REFUSED,
            WriteError::Poisoned { .. } | WriteError::StillPoisoned => ffi::SQLITE_IOERR_WRITE,
            WriteError::Fsync(_) => ffi::SQLITE_IOERR_FSYNC,
            WriteError::Local(rc) => *rc,
        }
    }
}

/// A real file's answer as a result: `SQLITE_OK` or the code it failed with.
fn local(rc: c_int) -> Result<(), WriteError> {
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(WriteError::Local(rc))
    }
}

/// What SQLite gets for `r`: a failure is recorded on `db` first (a refusal or a poison, as
/// `status(file)` reports it).
fn answer(db: &Db, r: Result<(), WriteError>) -> c_int {
    let Err(e) = r else {
        return ffi::SQLITE_OK;
    };
    match &e {
        WriteError::Refused { kind, reason } => db.refuse(*kind, reason),
        WriteError::Poisoned { kind, reason } => db.poison(*kind, reason),
        WriteError::Fsync(reason) => db.poison(Kind::LocalDamage, reason),
        WriteError::ReadOnly | WriteError::StillPoisoned | WriteError::Local(_) => {}
    }
    e.code()
}

/// The backstop for a write to the database file that is no checkpoint: `PRAGMA
/// journal_mode` is refused up front (see the shim's `SQLITE_FCNTL_PRAGMA`), but a spelling
/// that never reaches this file's pragma hook, such as an unqualified one on a connection where
/// the file is an ATTACHed schema, ends here.
fn refuse_db_write(db: &Db) -> WriteError {
    if db.read_only {
        return WriteError::ReadOnly;
    }
    WriteError::refused(Kind::Unsupported, JOURNAL_MODE_RULE)
}

/// Whether `data` is the image of page `pgno` in a committed frame of the current WAL.
fn matches_wal_frame(db: &Db, cs: &mut crate::db::CommitState, pgno: u32, data: &[u8]) -> bool {
    use std::os::unix::fs::FileExt;
    if !cs.wal_pages.contains_key(&pgno) {
        return false;
    }
    if cs.wal_reader.is_none() {
        cs.wal_reader = std::fs::File::open(crate::registry::sibling(&db.path, "-wal")).ok();
    }
    let (Some(offsets), Some(wal)) = (cs.wal_pages.get(&pgno), cs.wal_reader.as_ref()) else {
        return false;
    };
    let mut buf = vec![0u8; PAGE_SIZE];
    offsets
        .iter()
        .rev()
        .any(|&at| wal.read_exact_at(&mut buf, at).is_ok() && buf == data)
}

/// A write to the main database file. Only a checkpoint may write it, copying committed WAL
/// images: each write is checked to be one, so nothing reaches the file that the stream does
/// not hold (a rollback journal, `journal_mode=MEMORY` or `OFF` would bypass the stream).
pub fn db_write(db: &Db, real: &mut dyn RealFile, data: &[u8], off: u64) -> c_int {
    answer_write(db, || checkpoint_write(db, real, data, off))
}

/// What became of a write: `Ok` when it went through.
type Written = Result<(), WriteError>;

/// Answers a write of `db`'s files: [`WriteError::ReadOnly`] on a read-only attach, where
/// `write` is not called, else what `write` gave.
fn answer_write(db: &Db, write: impl FnOnce() -> Written) -> c_int {
    let r = if db.read_only {
        Err(WriteError::ReadOnly)
    } else {
        write()
    };
    answer(db, r)
}

fn checkpoint_write(db: &Db, real: &mut dyn RealFile, data: &[u8], off: u64) -> Written {
    // Held so a snapshot copy never sees half a checkpoint.
    let mut cs = db.commit_state();
    let whole_page = data.len() == PAGE_SIZE && off.is_multiple_of(PAGE_SIZE as u64);
    if !whole_page || !matches_wal_frame(db, &mut cs, (off / PAGE_SIZE as u64 + 1) as u32, data) {
        drop(cs);
        return Err(refuse_db_write(db));
    }
    let start = Instant::now();
    let rc = real.write(data, off);
    db.record_checkpoint(start.elapsed().as_micros() as u64);
    local(rc)
}

/// A truncation of the main database file: only to a size some commit in the WAL had.
pub fn db_truncate(db: &Db, size: u64, op: impl FnOnce() -> c_int) -> c_int {
    if db.read_only {
        return answer(db, Err(WriteError::ReadOnly));
    }
    let cs = db.commit_state();
    let legal = size.is_multiple_of(PAGE_SIZE as u64)
        && cs.wal_sizes.contains(&((size / PAGE_SIZE as u64) as u32));
    if !legal {
        drop(cs);
        return answer(db, Err(refuse_db_write(db)));
    }
    op()
}

/// The `-wal` is truncated or deleted: everything it held is in the database file.
pub fn wal_truncate(db: &Db, size: u64, op: impl FnOnce() -> c_int) -> c_int {
    let mut cs = db.commit_state();
    if size == 0
        && let Err(e) = local::fsync(&db.path)
    {
        drop(cs);
        let e = WriteError::Fsync(format!("fsync of the database file failed: {e}"));
        return answer(db, Err(e));
    }
    let rc = op();
    if rc == ffi::SQLITE_OK && size == 0 {
        cs.wal_pages.clear();
        cs.wal_sizes.clear();
        cs.wal_reader = None;
        cs.wal = WalClaim::default();
        cs.sidecar.wal = cs.wal.encode();
        if let Err(e) = local::write_sidecar(&db.path, &cs.sidecar) {
            db.poison(Kind::LocalDamage, &format!("cannot write the sidecar: {e}"));
        }
    }
    rc
}

/// A write to the `-wal` of an attached database.
pub fn wal_write(db: &Db, real: &mut dyn RealFile, data: &[u8], off: u64) -> c_int {
    answer_write(db, || intercept_wal_write(db, real, data, off))
}

fn intercept_wal_write(db: &Db, real: &mut dyn RealFile, data: &[u8], off: u64) -> Written {
    let mut cs = db.commit_state();
    if cs.passthrough {
        return local(real.write(data, off));
    }
    if !cs.writer_active {
        // locking_mode=EXCLUSIVE keeps the WAL lock out of shared memory, where the
        // interception sees transactions begin and end.
        return Err(WriteError::refused(
            Kind::Unsupported,
            "locking_mode=EXCLUSIVE is not supported: set PRAGMA locking_mode=NORMAL",
        ));
    }
    if off == 0 && WalHeader::parse(data).is_some_and(|h| h.page_size != PAGE_SIZE as u32) {
        return Err(WriteError::refused(
            Kind::Unsupported,
            "the page size must be 4096 bytes",
        ));
    }
    cs.overlay.insert(off, data.to_vec());
    let Some(frame) = sqlite_wal::frame_of_page(off, data.len()) else {
        return Ok(());
    };
    let hdr_off = sqlite_wal::frame_offset(frame);
    // The header was written before its page, so it is in the overlay.
    let Some(hdr) = cs
        .overlay
        .get(&hdr_off)
        .and_then(|b| frame_header(hdr_off, b))
        .filter(FrameHeader::is_commit)
    else {
        return Ok(());
    };
    commit(db, &mut cs, real, frame, hdr)
}

/// The transaction's last image of each page, from the overlay's frames up to the commit frame.
fn final_pages(overlay: &BTreeMap<u64, Vec<u8>>, commit_hdr: u64) -> BTreeMap<u32, &[u8]> {
    let mut pages = BTreeMap::new();
    for (&at, bytes) in overlay.range(sqlite_wal::HEADER..=commit_hdr) {
        let Some(hdr) = frame_header(at, bytes) else {
            continue;
        };
        if let Some(page) = overlay
            .get(&(at + FRAME_HEADER))
            .filter(|p| p.len() == PAGE_SIZE)
        {
            pages.insert(hdr.pgno, page.as_slice());
        }
    }
    pages
}

fn commit(
    db: &Db,
    cs: &mut crate::db::CommitState,
    real: &mut dyn RealFile,
    wal_frame: u32,
    hdr: FrameHeader,
) -> Result<(), WriteError> {
    let start = Instant::now();
    let hdr_off = sqlite_wal::frame_offset(wal_frame);
    let db_pages = hdr.commit_size;
    if let Some(p) = db.health().poison.clone() {
        // Not one of the spec's events: the poison was logged once as `poisoned`, and each
        // later commit fails the same way.
        log::event(
            log::Level::Debug,
            "commit_refused",
            &[("file", &db.file()), ("reason", &p.reason)],
        );
        return Err(WriteError::StillPoisoned);
    }
    let pages = final_pages(&cs.overlay, hdr_off);
    if let Some(p1) = pages.get(&1)
        && !sqlite_wal::keeps_wal_and_4k(p1)
    {
        return Err(WriteError::refused(
            Kind::Unsupported,
            "journal_mode must stay WAL and the page size 4096: the commit would leave them",
        ));
    }
    let record = Record::Commit {
        db_pages,
        pages: pages.iter().map(|(n, p)| (*n, p.to_vec())).collect(),
    };
    let raw = (pages.len() * (PAGE_SIZE + 4) + 9) as u64;
    let page_count = pages.len() as u64;
    drop(pages);
    let frame = record.to_frame().map_err(|e| {
        WriteError::poisoned(Kind::Internal, format!("cannot encode the commit: {e}"))
    })?;
    let limit = settings::get().max_frame_bytes;
    if frame.len() as u64 > limit {
        return Err(WriteError::refused(
            Kind::TooLarge,
            format!(
                "{}-byte frame over the {limit}-byte frame limit",
                frame.len()
            ),
        ));
    }
    let append_start = Instant::now();
    let (result, seq) = append_frame(db, cs, &frame);
    let append_us = append_start.elapsed().as_micros() as u64;
    match result.outcome {
        append::Outcome::Acked { next_offset } => {
            if cs.overlay.contains_key(&0) {
                // A new WAL header: SQLite restarted the log, every earlier frame is checkpointed.
                cs.wal_pages.clear();
                cs.wal_sizes.clear();
            }
            let frames: Vec<(u32, u64)> = cs
                .overlay
                .range(sqlite_wal::HEADER..=hdr_off)
                .filter_map(|(&at, b)| frame_header(at, b).map(|h| (h.pgno, at + FRAME_HEADER)))
                .collect();
            for (pgno, at) in frames {
                cs.wal_pages.entry(pgno).or_default().push(at);
            }
            cs.wal_sizes.insert(db_pages);
            // The stream holds it: now the local WAL may.
            for (&at, bytes) in &cs.overlay {
                if real.write(bytes, at) != ffi::SQLITE_OK {
                    return Err(WriteError::poisoned(
                        Kind::LocalDamage,
                        "a write to the local -wal failed after the stream acknowledged the commit",
                    ));
                }
            }
            cs.overlay.clear();
            cs.passthrough = true;
            cs.seq = seq;
            cs.refused_seq = None;
            cs.wal = WalClaim {
                salt1: hdr.salt1,
                salt2: hdr.salt2,
                frame: wal_frame,
            };
            cs.sidecar.wal = cs.wal.encode();
            cs.sidecar.offset = Some(next_offset);
            cs.sidecar.log_bytes += frame.len() as u64;
            if let Err(e) = local::write_sidecar(&db.path, &cs.sidecar) {
                db.poison(Kind::LocalDamage, &format!("cannot write the sidecar: {e}"));
            }
            db.health().db_bytes = u64::from(db_pages) * PAGE_SIZE as u64;
            let stat = CommitStat {
                bytes: frame.len() as u64,
                raw,
                pages: page_count,
                attempts: result.attempts,
                append_us,
                vfs_us: start.elapsed().as_micros() as u64,
            };
            db.record_commit(
                next_offset,
                frame.len() as u64,
                stat,
                result.attempts.saturating_sub(1),
            );
            db.wake_snapshot();
            Ok(())
        }
        append::Outcome::Refused { kind, reason } => {
            db.health().append_retries += result.attempts.saturating_sub(1);
            cs.refused_seq = Some(seq);
            Err(WriteError::Refused { kind, reason })
        }
        append::Outcome::Poisoned { kind, reason } => {
            db.health().append_retries += result.attempts.saturating_sub(1);
            Err(WriteError::Poisoned { kind, reason })
        }
        append::Outcome::Forgotten => {
            db.health().append_retries += result.attempts.saturating_sub(1);
            Err(WriteError::poisoned(
                Kind::Fenced,
                "the stream forgot this owner's producer again right after it claimed the stream back",
            ))
        }
    }
}

/// Appends the commit frame at the next producer seq. When the stream forgot the producer, the
/// owner claims the stream back first and sends the frame again, as the first commit of its
/// new epoch. The seq the frame went out with comes back with the answer.
fn append_frame(db: &Db, cs: &mut crate::db::CommitState, frame: &[u8]) -> (append::Result, u64) {
    let seq = cs.seq + 1;
    let first = append::commit(db, &cs.sidecar, seq, cs.refused_seq, frame);
    if first.outcome != append::Outcome::Forgotten {
        return (first, seq);
    }
    let claimed = match reclaim::reclaim(db, &cs.sidecar) {
        Ok(c) => c,
        Err((outcome, attempts)) => {
            let result = append::Result {
                outcome,
                attempts: first.attempts + attempts,
            };
            return (result, seq);
        }
    };
    cs.sidecar.epoch = claimed.epoch;
    cs.sidecar.offset = Some(claimed.next_offset);
    cs.sidecar.log_bytes += claimed.frame_bytes;
    cs.seq = 0;
    cs.refused_seq = None;
    if let Err(e) = local::write_sidecar(&db.path, &cs.sidecar) {
        let result = append::Result {
            outcome: append::Outcome::Poisoned {
                kind: Kind::LocalDamage,
                reason: format!("cannot write the sidecar: {e}"),
            },
            attempts: first.attempts,
        };
        return (result, seq);
    }
    {
        let mut h = db.health();
        h.epoch = claimed.epoch;
        h.offset = Some(claimed.next_offset);
        h.log_bytes += claimed.frame_bytes;
    }
    let again = append::commit(db, &cs.sidecar, 1, None, frame);
    let result = append::Result {
        outcome: again.outcome,
        attempts: first.attempts + again.attempts,
    };
    (result, 1)
}
