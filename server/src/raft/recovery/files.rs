//! The WAL root's own files under `<raft.wal.path>/raft-log/`, next to the per-core journals:
//!
//! - `FORMAT_EPOCH`: the text `3`, written once every startup check passed.
//! - `topology.bin`: the `runtime.core_count` and `raft.group_count` the journals were written
//!   with; groups map to cores and streams to groups through them.
//! - `core-<i>/journal.lock`: an advisory OS lock held for the process's life, holding its PID.
//! - `run-state.bin`: `running` from start until a graceful shutdown records `clean`, with the
//!   host's boot id, so the next start can tell a process crash from a host crash.
//! - `recovery-gates.bin`: the groups whose recovery gate is closed (see [`super::gate`]), each
//!   with whether the replica lost its vote and the vote floor it obtained since.
//!
//! The binary files share one shape: a 4-byte magic, a version byte, the fields, and a CRC32
//! of everything before it, so a torn or foreign file reads as corrupt, never as a value. Each
//! file has its own version.
//! Every replacement is written to a temporary file, fsynced, renamed over the old one and the
//! directory fsynced, so a crash leaves the old file or the new one.

use std::collections::BTreeMap;
use std::fs::File;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;

use super::floor::Floor;

/// The on-disk format this build reads and writes.
pub use ursula_protocol::format::FORMAT_EPOCH;

const EPOCH_FILE: &str = "FORMAT_EPOCH";
const TOPOLOGY_FILE: &str = "topology.bin";
const RUN_STATE_FILE: &str = "run-state.bin";
const GATES_FILE: &str = "recovery-gates.bin";
const SHED_FILE: &str = "leadership-shed.bin";
const LOCK_FILE: &str = "journal.lock";

const TOPOLOGY_MAGIC: &[u8; 4] = b"URST";
const RUN_STATE_MAGIC: &[u8; 4] = b"URSR";
const GATES_MAGIC: &[u8; 4] = b"URSG";
const SHED_MAGIC: &[u8; 4] = b"URSD";
const SHED_VERSION: u8 = 1;
const TOPOLOGY_VERSION: u8 = 1;
const RUN_STATE_VERSION: u8 = 1;
/// Version 1 listed the gated groups only; version 2 adds, per group, whether the replica
/// lost its vote and its vote floor.
const GATES_VERSION: u8 = 2;
const GATES_V1: u8 = 1;
/// A version 2 gate record: group, flags, floor term, floor leader.
const GATE_RECORD_LEN: usize = 4 + 1 + 8 + 8;
const GATE_WIPED: u8 = 1;
const GATE_FLOOR: u8 = 2;

/// Where the host's boot id lives: it changes on every boot, so a run that ended without a
/// clean record under another boot id ended with the host.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{dir} holds journal data but no FORMAT_EPOCH marker: it was not written by a format epoch {FORMAT_EPOCH} node; refusing to start"
    )]
    EpochMissing { dir: PathBuf },
    #[error(
        "{path} records format epoch {found:?}, this build reads format epoch {FORMAT_EPOCH}: refusing to start"
    )]
    EpochMismatch { path: PathBuf, found: String },
    #[error(
        "WAL topology mismatch: {path} records runtime.core_count = {stored_cores} and raft.group_count = {stored_groups}, but this node is configured with runtime.core_count = {cores} and raft.group_count = {groups}; configure the stored counts again: refusing to start"
    )]
    TopologyMismatch {
        path: PathBuf,
        stored_cores: u32,
        stored_groups: u32,
        cores: u32,
        groups: u32,
    },
    #[error(
        "{path} is missing on an existing WAL: the journals cannot be mapped to cores and groups; rebuild this replica on an empty WAL directory: refusing to start"
    )]
    TopologyMissing { path: PathBuf },
    #[error(
        "{path} is corrupt ({why}); rebuild this replica on an empty WAL directory: refusing to start"
    )]
    TopologyCorrupt { path: PathBuf, why: &'static str },
    #[error(
        "{path} is locked by another process (PID {holder}): one ursula process per WAL directory; refusing to start"
    )]
    Locked { path: PathBuf, holder: String },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> FilesError + '_ {
    move |source| FilesError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Seals `fields` behind a magic and version with a trailing CRC32.
fn seal(magic: &[u8; 4], version: u8, fields: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 1 + fields.len() + 4);
    out.extend_from_slice(magic);
    out.push(version);
    out.extend_from_slice(fields);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The version and fields of a sealed file, or why it is not one.
fn unseal_any<'a>(magic: &[u8; 4], bytes: &'a [u8]) -> Result<(u8, &'a [u8]), &'static str> {
    if bytes.len() < 9 {
        return Err("too short");
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32fast::hash(body) != crc {
        return Err("checksum mismatch");
    }
    if &body[..4] != magic {
        return Err("not this kind of file");
    }
    Ok((body[4], &body[5..]))
}

/// The fields of a sealed file of exactly `version`, or why it is not one.
fn unseal<'a>(magic: &[u8; 4], version: u8, bytes: &'a [u8]) -> Result<&'a [u8], &'static str> {
    match unseal_any(magic, bytes)? {
        (v, fields) if v == version => Ok(fields),
        _ => Err("unknown version"),
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(s))
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new content.
fn replace(path: &Path, bytes: &[u8]) -> Result<(), FilesError> {
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(io(path))
}

/// Reads `path`, `None` when it does not exist.
fn read_opt(path: &Path) -> Result<Option<Vec<u8>>, FilesError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

/// The WAL root's files.
#[derive(Debug, Clone)]
pub struct Root {
    /// `<raft.wal.path>/raft-log`.
    pub log_dir: PathBuf,
    /// `<raft.wal.path>/snapshots`.
    pub snap_dir: PathBuf,
}

/// What an earlier run recorded about how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviousRun {
    /// No run state: a fresh WAL, or one whose run state was lost.
    Missing,
    /// The file exists but cannot be read as a run state.
    Corrupt,
    /// The run ended with a graceful shutdown that synced every journal.
    Clean,
    /// The run never recorded a clean end: the process or the host stopped under it.
    Unclean {
        boot_id: Option<String>,
        fsync_always: bool,
    },
    /// The run stopped because a journal write or sync failed: what it had written may not be
    /// on disk, whatever the boot id says.
    IoError,
}

const STATE_RUNNING: u8 = 1;
const STATE_CLEAN: u8 = 2;
const STATE_IO_ERROR: u8 = 3;

impl Root {
    pub fn new(wal_dir: &Path) -> Root {
        Root {
            log_dir: wal_dir.join("raft-log"),
            snap_dir: wal_dir.join("snapshots"),
        }
    }

    pub fn core_dir(&self, core: usize) -> PathBuf {
        self.log_dir.join(format!("core-{core}"))
    }

    /// Whether anything a node wrote to hold data is here: a journal segment with frames or a
    /// Raft snapshot. The root's own files do not count, so a first start that stopped between
    /// writing them is still a first start.
    pub fn holds_data(&self) -> Result<bool, FilesError> {
        let non_empty_file =
            |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() > 0);
        for dir in [&self.log_dir, &self.snap_dir] {
            let entries = match std::fs::read_dir(dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(dir)(e)),
            };
            for entry in entries {
                let path = entry.map_err(io(dir))?.path();
                if dir == &self.snap_dir && non_empty_file(&path) {
                    return Ok(true);
                }
                if path.is_dir() {
                    for seg in std::fs::read_dir(&path).map_err(io(&path))? {
                        let seg = seg.map_err(io(&path))?.path();
                        if seg.extension().is_some_and(|e| e == "seg") && non_empty_file(&seg) {
                            return Ok(true);
                        }
                    }
                }
            }
        }
        Ok(false)
    }

    /// Refuses a WAL of another format epoch, or data without a marker. Reads only.
    /// Returns whether the marker is present.
    pub fn check_epoch(&self, holds_data: bool) -> Result<bool, FilesError> {
        let path = self.log_dir.join(EPOCH_FILE);
        match read_opt(&path)? {
            None if holds_data => Err(FilesError::EpochMissing {
                dir: self.log_dir.clone(),
            }),
            None => Ok(false),
            Some(bytes) => {
                let text = String::from_utf8_lossy(&bytes).trim().to_owned();
                if text.parse::<u32>().ok() == Some(FORMAT_EPOCH) {
                    Ok(true)
                } else {
                    Err(FilesError::EpochMismatch { path, found: text })
                }
            }
        }
    }

    /// Refuses a WAL written with other routing counts, or an existing one without a readable
    /// record of them. Reads only. Returns whether the record is present.
    pub fn check_topology(
        &self,
        existing: bool,
        cores: u32,
        groups: u32,
    ) -> Result<bool, FilesError> {
        let path = self.log_dir.join(TOPOLOGY_FILE);
        let Some(bytes) = read_opt(&path)? else {
            return if existing {
                Err(FilesError::TopologyMissing { path })
            } else {
                Ok(false)
            };
        };
        let fields = unseal(TOPOLOGY_MAGIC, TOPOLOGY_VERSION, &bytes).map_err(|why| {
            FilesError::TopologyCorrupt {
                path: path.clone(),
                why,
            }
        })?;
        let (Some(stored_cores), Some(stored_groups), 8) =
            (u32_at(fields, 0), u32_at(fields, 4), fields.len())
        else {
            return Err(FilesError::TopologyCorrupt {
                path,
                why: "wrong length",
            });
        };
        if (stored_cores, stored_groups) != (cores, groups) {
            return Err(FilesError::TopologyMismatch {
                path,
                stored_cores,
                stored_groups,
                cores,
                groups,
            });
        }
        Ok(true)
    }

    /// Records the routing counts, then the format epoch: the marker last, so a marker always
    /// comes with a topology record. Called once every check passed.
    pub fn write_markers(
        &self,
        cores: u32,
        groups: u32,
        has_topology: bool,
        has_epoch: bool,
    ) -> Result<(), FilesError> {
        std::fs::create_dir_all(&self.log_dir).map_err(io(&self.log_dir))?;
        if !has_topology {
            let mut fields = cores.to_le_bytes().to_vec();
            fields.extend_from_slice(&groups.to_le_bytes());
            replace(
                &self.log_dir.join(TOPOLOGY_FILE),
                &seal(TOPOLOGY_MAGIC, TOPOLOGY_VERSION, &fields),
            )?;
        }
        if !has_epoch {
            replace(
                &self.log_dir.join(EPOCH_FILE),
                format!("{FORMAT_EPOCH}\n").as_bytes(),
            )?;
        }
        Ok(())
    }

    /// Takes every core journal's lock, so a second process on the same WAL stops here.
    pub fn lock_cores(&self, cores: usize) -> Result<Vec<File>, FilesError> {
        (0..cores)
            .map(|core| {
                let dir = self.core_dir(core);
                std::fs::create_dir_all(&dir).map_err(io(&dir))?;
                lock(&dir.join(LOCK_FILE))
            })
            .collect()
    }

    /// What the previous run recorded. Reads only.
    pub fn previous_run(&self) -> Result<PreviousRun, FilesError> {
        let Some(bytes) = read_opt(&self.log_dir.join(RUN_STATE_FILE))? else {
            return Ok(PreviousRun::Missing);
        };
        let Ok(fields) = unseal(RUN_STATE_MAGIC, RUN_STATE_VERSION, &bytes) else {
            return Ok(PreviousRun::Corrupt);
        };
        let parse = || -> Option<PreviousRun> {
            let (&state, rest) = fields.split_first()?;
            let (&fsync_always, rest) = rest.split_first()?;
            let len = u16::from_le_bytes([*rest.first()?, *rest.get(1)?]) as usize;
            let boot = rest.get(2..2 + len)?;
            let boot_id = (!boot.is_empty()).then(|| String::from_utf8_lossy(boot).into_owned());
            match state {
                STATE_CLEAN => Some(PreviousRun::Clean),
                STATE_IO_ERROR => Some(PreviousRun::IoError),
                STATE_RUNNING => Some(PreviousRun::Unclean {
                    boot_id,
                    fsync_always: fsync_always == 1,
                }),
                _ => None,
            }
        };
        Ok(parse().unwrap_or(PreviousRun::Corrupt))
    }

    /// Records this run as `running` (until [`Root::record_clean`]), with the host's boot id.
    pub fn record_running(&self, fsync_always: bool) -> Result<(), FilesError> {
        self.write_run_state(STATE_RUNNING, fsync_always)
    }

    /// Records that every journal was synced and the run ended gracefully.
    pub fn record_clean(&self, fsync_always: bool) -> Result<(), FilesError> {
        self.write_run_state(STATE_CLEAN, fsync_always)
    }

    /// Records that the run stops on a journal I/O error, so the next start gates the groups.
    pub fn record_io_error(&self, fsync_always: bool) -> Result<(), FilesError> {
        self.write_run_state(STATE_IO_ERROR, fsync_always)
    }

    fn write_run_state(&self, state: u8, fsync_always: bool) -> Result<(), FilesError> {
        let boot = boot_id().unwrap_or_default();
        let boot = &boot.as_bytes()[..boot.len().min(u16::MAX as usize)];
        let mut fields = vec![state, u8::from(fsync_always)];
        fields.extend_from_slice(&(boot.len() as u16).to_le_bytes());
        fields.extend_from_slice(boot);
        fields.extend_from_slice(&std::process::id().to_le_bytes());
        replace(
            &self.log_dir.join(RUN_STATE_FILE),
            &seal(RUN_STATE_MAGIC, RUN_STATE_VERSION, &fields),
        )
    }

    /// The groups recorded behind a closed recovery gate; `Err(())` when the record is corrupt.
    /// A version 1 record knew nothing of lost votes: its groups read as gated, not wiped.
    pub fn read_gates(&self) -> Result<Result<BTreeMap<u32, GateRecord>, ()>, FilesError> {
        let Some(bytes) = read_opt(&self.log_dir.join(GATES_FILE))? else {
            return Ok(Ok(BTreeMap::new()));
        };
        Ok(match unseal_any(GATES_MAGIC, &bytes) {
            Ok((GATES_V1, fields)) => gates_v1(fields),
            Ok((GATES_VERSION, fields)) => gates_v2(fields),
            _ => Err(()),
        })
    }

    /// Records the closed gates, replacing the previous record.
    pub fn write_gates(&self, gates: &BTreeMap<u32, GateRecord>) -> Result<(), FilesError> {
        let mut fields = Vec::with_capacity(gates.len() * GATE_RECORD_LEN);
        for (group, r) in gates {
            let flags = if r.wiped { GATE_WIPED } else { 0 }
                | if r.floor.is_some() { GATE_FLOOR } else { 0 };
            let floor = r.floor.unwrap_or(Floor { term: 0, leader: 0 });
            fields.extend_from_slice(&group.to_le_bytes());
            fields.push(flags);
            fields.extend_from_slice(&floor.term.to_le_bytes());
            fields.extend_from_slice(&floor.leader.to_le_bytes());
        }
        replace(
            &self.log_dir.join(GATES_FILE),
            &seal(GATES_MAGIC, GATES_VERSION, &fields),
        )
    }
}

impl Root {
    /// The operator's leadership-shed bits (the maintenance drain mark), `0` when none were
    /// recorded. A corrupt record reads as drained: a node that cannot tell keeps away from
    /// leadership until the operator clears the mark.
    pub fn read_shed(&self) -> Result<u64, FilesError> {
        let Some(bytes) = read_opt(&self.log_dir.join(SHED_FILE))? else {
            return Ok(0);
        };
        Ok(match unseal_any(SHED_MAGIC, &bytes) {
            Ok((SHED_VERSION, fields)) => u64_at(fields, 0).unwrap_or(1),
            _ => 1,
        })
    }

    /// Records the operator's leadership-shed bits, replacing the previous record.
    pub fn write_shed(&self, bits: u64) -> Result<(), FilesError> {
        std::fs::create_dir_all(&self.log_dir).map_err(io(&self.log_dir))?;
        replace(
            &self.log_dir.join(SHED_FILE),
            &seal(SHED_MAGIC, SHED_VERSION, &bits.to_le_bytes()),
        )
    }
}

/// What `recovery-gates.bin` keeps of one closed gate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateRecord {
    /// The replica lost its vote with its WAL (see [`super::floor`]).
    pub wiped: bool,
    /// The vote floor a wiped replica obtained from the leader's barrier.
    pub floor: Option<Floor>,
}

fn gates_v1(fields: &[u8]) -> Result<BTreeMap<u32, GateRecord>, ()> {
    if !fields.len().is_multiple_of(4) {
        return Err(());
    }
    Ok(fields
        .chunks_exact(4)
        .map(|c| {
            (
                u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                GateRecord::default(),
            )
        })
        .collect())
}

fn gates_v2(fields: &[u8]) -> Result<BTreeMap<u32, GateRecord>, ()> {
    if !fields.len().is_multiple_of(GATE_RECORD_LEN) {
        return Err(());
    }
    let mut out = BTreeMap::new();
    for c in fields.chunks_exact(GATE_RECORD_LEN) {
        let (Some(group), Some(term), Some(leader)) = (u32_at(c, 0), u64_at(c, 5), u64_at(c, 13))
        else {
            return Err(());
        };
        // A floor belongs to a wiped replica only; any other flag was not written by us.
        let floor = match c[4] {
            0 | GATE_WIPED => None,
            f if f == GATE_WIPED | GATE_FLOOR => Some(Floor { term, leader }),
            _ => return Err(()),
        };
        let record = GateRecord {
            wiped: c[4] & GATE_WIPED != 0,
            floor,
        };
        if out.insert(group, record).is_some() {
            return Err(());
        }
    }
    Ok(out)
}

/// This host's boot id, `None` where the kernel does not tell it.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string(BOOT_ID)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Takes the advisory lock on `path` and writes this process's PID into it. The file may stay
/// after the process ends: ownership is the OS lock, which ends with the process, not the file.
fn lock(path: &Path) -> Result<File, FilesError> {
    // Not truncated before the lock is ours: the holder's PID stays readable for the error.
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(io(path))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(path)
                .map(|s| s.trim().to_owned())
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "unknown".into());
            return Err(FilesError::Locked {
                path: path.to_owned(),
                holder,
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(path)(e)),
    }
    f.set_len(0)
        .and_then(|()| f.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .and_then(|()| f.sync_all())
        .map_err(io(path))?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(name: &str) -> Root {
        let dir = std::env::temp_dir().join(format!("ursula-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        Root::new(&dir)
    }

    #[test]
    fn a_torn_or_foreign_record_reads_as_corrupt_never_as_a_value() {
        let r = root("seal");
        r.write_markers(2, 8, false, false).expect("markers");
        assert!(r.check_topology(true, 2, 8).expect("same counts"));
        let path = r.log_dir.join(TOPOLOGY_FILE);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[6] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        assert!(matches!(
            r.check_topology(true, 2, 8),
            Err(FilesError::TopologyCorrupt { .. })
        ));
        std::fs::write(&path, b"").expect("write");
        assert!(matches!(
            r.check_topology(true, 2, 8),
            Err(FilesError::TopologyCorrupt { .. })
        ));
        std::fs::write(
            r.log_dir.join(RUN_STATE_FILE),
            seal(GATES_MAGIC, GATES_VERSION, &[]),
        )
        .expect("write");
        assert_eq!(r.previous_run().expect("read"), PreviousRun::Corrupt);
        let _ = std::fs::remove_dir_all(r.log_dir.parent().expect("parent"));
    }

    #[test]
    fn run_state_and_gates_read_back_what_was_written() {
        let r = root("state");
        assert_eq!(r.previous_run().expect("read"), PreviousRun::Missing);
        r.write_markers(1, 1, false, false).expect("markers");
        r.record_running(false).expect("running");
        assert!(matches!(
            r.previous_run().expect("read"),
            PreviousRun::Unclean {
                fsync_always: false,
                ..
            }
        ));
        r.record_clean(true).expect("clean");
        assert_eq!(r.previous_run().expect("read"), PreviousRun::Clean);
        r.record_io_error(false).expect("io error");
        assert_eq!(r.previous_run().expect("read"), PreviousRun::IoError);
        let gated = BTreeMap::from([
            (0, GateRecord::default()),
            (
                3,
                GateRecord {
                    wiped: true,
                    floor: None,
                },
            ),
            (
                7,
                GateRecord {
                    wiped: true,
                    floor: Some(Floor {
                        term: 9,
                        leader: u64::MAX,
                    }),
                },
            ),
        ]);
        r.write_gates(&gated).expect("gates");
        assert_eq!(r.read_gates().expect("read"), Ok(gated));
        let bytes = std::fs::read(r.log_dir.join(GATES_FILE)).expect("read");
        assert_eq!(bytes[4], GATES_VERSION, "written in the new format");
        let _ = std::fs::remove_dir_all(r.log_dir.parent().expect("parent"));
    }

    #[test]
    fn an_old_gates_record_reads_as_gated_not_wiped_and_a_bad_one_as_corrupt() {
        let r = root("gates-v1");
        let path = r.log_dir.join(GATES_FILE);
        std::fs::create_dir_all(&r.log_dir).expect("dir");
        let v1: Vec<u8> = [2u32, 5].iter().flat_map(|g| g.to_le_bytes()).collect();
        std::fs::write(&path, seal(GATES_MAGIC, GATES_V1, &v1)).expect("write");
        assert_eq!(
            r.read_gates().expect("read"),
            Ok(BTreeMap::from([
                (2, GateRecord::default()),
                (5, GateRecord::default())
            ]))
        );
        std::fs::write(&path, seal(GATES_MAGIC, GATES_V1, &[1, 2, 3])).expect("write");
        assert_eq!(r.read_gates().expect("read"), Err(()));
        // A floor without the wiped flag, an unknown version, a torn record.
        let mut bad = 4u32.to_le_bytes().to_vec();
        bad.push(GATE_FLOOR);
        bad.extend_from_slice(&[0; 16]);
        std::fs::write(&path, seal(GATES_MAGIC, GATES_VERSION, &bad)).expect("write");
        assert_eq!(r.read_gates().expect("read"), Err(()));
        std::fs::write(&path, seal(GATES_MAGIC, 3, &[])).expect("write");
        assert_eq!(r.read_gates().expect("read"), Err(()));
        r.write_gates(&BTreeMap::from([(1, GateRecord::default())]))
            .expect("gates");
        let mut bytes = std::fs::read(&path).expect("read");
        bytes.truncate(bytes.len() - 1);
        std::fs::write(&path, &bytes).expect("write");
        assert_eq!(r.read_gates().expect("read"), Err(()));
        let _ = std::fs::remove_dir_all(r.log_dir.parent().expect("parent"));
    }
}
