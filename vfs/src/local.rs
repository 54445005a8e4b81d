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

pub const WAL_HEADER: u64 = 32;
pub const FRAME: u64 = 24 + PAGE_SIZE as u64;

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

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
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
    let mut header = [0u8; 32];
    if f.read_exact(&mut header).is_err()
        || be32(&header, 16) != claim.salt1
        || be32(&header, 20) != claim.salt2
    {
        return false;
    }
    let at = WAL_HEADER + (u64::from(claim.frame) - 1) * FRAME;
    let mut fh = [0u8; 24];
    if f.seek(SeekFrom::Start(at)).is_err() || f.read_exact(&mut fh).is_err() {
        return false;
    }
    be32(&fh, 4) != 0 && be32(&fh, 8) == claim.salt1 && be32(&fh, 12) == claim.salt2
}

/// Whether a plain SQLite file holds any data (a page beyond an empty header counts).
pub fn holds_data(db: &Path) -> bool {
    let size = std::fs::metadata(db).map(|m| m.len()).unwrap_or(0);
    let wal = std::fs::metadata(sibling(db, "-wal"))
        .map(|m| m.len())
        .unwrap_or(0);
    size > PAGE_SIZE as u64 || wal > WAL_HEADER
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
