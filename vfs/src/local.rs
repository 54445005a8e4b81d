//! Local files next to the database: the sidecar, the boot id and inode that decide whether
//! they can be trusted, and the check that the `-wal` still holds what the sidecar records.

use std::io::Read;
use std::io::Seek;
use std::io::SeekFrom;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::db::WalClaim;
use crate::format::PAGE_SIZE;
use crate::format::Sidecar;
use crate::registry::sibling;
use crate::sqlite_wal;
use crate::sqlite_wal::FrameHeader;
use crate::sqlite_wal::WalHeader;

/// The kernel's boot id; `"unknown"` never matches a recorded one.
pub fn boot_id() -> String {
    if let Ok(id) = std::env::var("URSULA_VFS_TEST_BOOT_ID") {
        // Lets tests simulate a reboot without one.
        return id;
    }
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

pub fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.ino()).unwrap_or(0)
}

pub fn read_sidecar(db: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(sibling(db, "-ursula")) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces the sidecar through a temporary file and a rename, so a crash leaves the old or
/// the new one, never half of either. No fsync: after a reboot the files are rebuilt anyway.
pub fn write_sidecar(db: &Path, s: &Sidecar) -> std::io::Result<()> {
    let path = sibling(db, "-ursula");
    let tmp = sibling(db, "-ursula.tmp");
    std::fs::write(&tmp, s.to_bytes())?;
    std::fs::rename(&tmp, &path)
}

pub fn remove_sidecar(db: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(sibling(db, "-ursula")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Whether the `-wal` next to `db` still holds the commit frame `claim` names.
pub fn wal_holds(db: &Path, claim: &WalClaim) -> bool {
    let path = sibling(db, "-wal");
    if claim.frame == 0 {
        return true;
    }
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut header = [0u8; sqlite_wal::HEADER as usize];
    let same_generation = f.read_exact(&mut header).is_ok()
        && WalHeader::parse(&header)
            .is_some_and(|h| (h.salt1, h.salt2) == (claim.salt1, claim.salt2));
    if !same_generation {
        return false;
    }
    let at = sqlite_wal::frame_offset(claim.frame);
    let mut fh = [0u8; sqlite_wal::FRAME_HEADER as usize];
    if f.seek(SeekFrom::Start(at)).is_err() || f.read_exact(&mut fh).is_err() {
        return false;
    }
    FrameHeader::parse(&fh).is_some_and(|h| h.is_commit() && h.has_salts(claim.salt1, claim.salt2))
}

/// Whether a plain SQLite file holds any data (a page beyond an empty header counts).
pub fn holds_data(db: &Path) -> bool {
    let size = std::fs::metadata(db).map(|m| m.len()).unwrap_or(0);
    let wal = std::fs::metadata(sibling(db, "-wal"))
        .map(|m| m.len())
        .unwrap_or(0);
    size > PAGE_SIZE as u64 || wal > sqlite_wal::HEADER
}

/// Removes the database and every local file next to it except the lock file.
pub fn discard(db: &Path) -> std::io::Result<()> {
    for suffix in ["", "-wal", "-shm", "-journal", "-ursula"] {
        match std::fs::remove_file(sibling(db, suffix)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

pub fn fsync(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .read(true)
        .open(path)?
        .sync_all()
}
