//! The per-core journal: one append-only, segmented, checksummed log shared by every Raft group
//! of a core. A writer thread per core batches frames from all its groups into one write and,
//! when the fsync policy or the record asks for it, one fsync, then completes the callbacks.
//!
//! Frame: `len u32 LE | crc32 u32 LE | seq u64 LE | kind u8 | group u32 LE | payload`, where
//! `len` counts from `seq` to the end and the CRC covers the same bytes, so a damaged length
//! reads as corruption. Segments are `NNNNNNNNNNNNNNNN.seg` under `core-<i>/`.

use std::collections::BTreeMap;
use std::fs::File;
use std::fs::OpenOptions;
use std::io::Read;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::sync::mpsc;

pub const KIND_ENTRIES: u8 = 1;
pub const KIND_VOTE: u8 = 2;
pub const KIND_TRUNCATE: u8 = 3;
pub const KIND_PURGE: u8 = 4;
pub const KIND_COMMITTED: u8 = 5;

const HEADER: usize = 8;
const MIN_BODY: usize = 8 + 1 + 4;
const MAX_FRAME: usize = 1 << 30;

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("journal {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "journal segment {path} is damaged at byte {at} and is not the newest: refusing to start"
    )]
    SealedDamage { path: PathBuf, at: u64 },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> WalError + '_ {
    move |source| WalError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One record as recovered from disk.
#[derive(Debug, Clone)]
pub struct Record {
    pub kind: u8,
    pub group: u32,
    pub payload: Vec<u8>,
}

/// What the recovery scan found.
#[derive(Debug, Default)]
pub struct Recovered {
    pub records: Vec<Record>,
    /// A complete frame in the newest segment failed its checksum: the tail was cut there.
    pub damaged_tail: bool,
    /// Bytes of an incomplete final frame that were cut.
    pub torn_bytes: u64,
}

fn segment_name(n: u64) -> String {
    format!("{n:016}.seg")
}

fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, WalError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(n) = name
            .strip_suffix(".seg")
            .and_then(|s| s.parse::<u64>().ok())
        {
            out.push((n, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads every frame of the journal in `dir`, cutting a torn or damaged tail of the newest
/// segment. Damage in an older segment refuses recovery: it cannot be told from lost data.
pub fn recover(dir: &Path) -> Result<Recovered, WalError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let segs = segments(dir)?;
    let mut out = Recovered::default();
    for (i, (_, path)) in segs.iter().enumerate() {
        let newest = i + 1 == segs.len();
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(io(path))?;
        let mut at = 0usize;
        while at < bytes.len() {
            let rest = &bytes[at..];
            let whole = rest.len() >= HEADER && {
                let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                (MIN_BODY..=MAX_FRAME).contains(&len) && rest.len() >= HEADER + len
            };
            if !whole {
                if !newest {
                    return Err(WalError::SealedDamage {
                        path: path.clone(),
                        at: at as u64,
                    });
                }
                out.torn_bytes = rest.len() as u64;
                break;
            }
            let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
            let body = &rest[HEADER..HEADER + len];
            if crc32fast::hash(body) != crc {
                if !newest {
                    return Err(WalError::SealedDamage {
                        path: path.clone(),
                        at: at as u64,
                    });
                }
                out.damaged_tail = true;
                out.torn_bytes = rest.len() as u64;
                break;
            }
            out.records.push(Record {
                kind: body[8],
                group: u32::from_le_bytes([body[9], body[10], body[11], body[12]]),
                payload: body[13..].to_vec(),
            });
            at += HEADER + len;
        }
        if newest && at < bytes.len() {
            OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| {
                    f.set_len(at as u64)?;
                    f.sync_all()
                })
                .map_err(io(path))?;
        }
    }
    Ok(out)
}

pub fn encode(seq: u64, kind: u8, group: u32, payload: &[u8]) -> Vec<u8> {
    let len = MIN_BODY + payload.len();
    let mut body = Vec::with_capacity(HEADER + len);
    body.extend_from_slice(&[0u8; HEADER]);
    body.extend_from_slice(&seq.to_le_bytes());
    body.push(kind);
    body.extend_from_slice(&group.to_le_bytes());
    body.extend_from_slice(payload);
    let crc = crc32fast::hash(&body[HEADER..]);
    body[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    body[4..8].copy_from_slice(&crc.to_le_bytes());
    body
}

pub type Done = Box<dyn FnOnce(std::io::Result<()>) + Send>;

/// A write for the journal thread.
pub struct Write_ {
    pub kind: u8,
    pub group: u32,
    pub payload: Vec<u8>,
    /// fsync before completing, whatever the policy (votes, membership).
    pub force_sync: bool,
    pub done: Option<Done>,
}

/// Handle to a core's journal thread.
#[derive(Debug, Clone)]
pub struct Journal {
    tx: mpsc::Sender<Write_>,
}

pub struct Options {
    pub fsync_always: bool,
    pub segment_size: u64,
}

impl Journal {
    /// Starts the journal thread for `dir`, appending after what `recover` left.
    pub fn start(dir: PathBuf, opts: Options) -> Result<Journal, WalError> {
        let segs = segments(&dir)?;
        let (mut seg_no, path) = match segs.last() {
            Some((n, p)) => (*n, p.clone()),
            None => (1, dir.join(segment_name(1))),
        };
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        let mut size = file.metadata().map_err(io(&path))?.len();
        let (tx, rx) = mpsc::channel::<Write_>();
        let thread_dir = dir.clone();
        std::thread::Builder::new()
            .name("ursula-journal".into())
            .spawn(move || {
                let mut seq: u64 = 0;
                let mut buf = Vec::with_capacity(1 << 16);
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    while let Ok(more) = rx.try_recv() {
                        batch.push(more);
                        if batch.len() >= 1024 {
                            break;
                        }
                    }
                    buf.clear();
                    let mut sync = opts.fsync_always;
                    for w in &batch {
                        seq += 1;
                        buf.extend_from_slice(&encode(seq, w.kind, w.group, &w.payload));
                        sync |= w.force_sync;
                    }
                    let mut result = file.write_all(&buf);
                    if result.is_ok() && sync {
                        result = file.sync_data();
                    }
                    size += buf.len() as u64;
                    if let Err(e) = &result {
                        // Nothing is retried: a journal that cannot write must not acknowledge.
                        tracing::error!(error = %e, "journal write failed; the process stops");
                        std::process::abort();
                    }
                    for w in batch {
                        if let Some(done) = w.done {
                            done(Ok(()));
                        }
                    }
                    if size >= opts.segment_size {
                        let _ = file.sync_all();
                        seg_no += 1;
                        let path = thread_dir.join(segment_name(seg_no));
                        match OpenOptions::new().create(true).append(true).open(&path) {
                            Ok(f) => {
                                file = f;
                                size = 0;
                            }
                            Err(e) => {
                                tracing::error!(error = %e, "cannot start a journal segment; the process stops");
                                std::process::abort();
                            }
                        }
                    }
                }
                let _ = file.sync_all();
            })
            .map_err(io(&dir))?;
        Ok(Journal { tx })
    }

    pub fn write(&self, w: Write_) -> Result<(), Write_> {
        self.tx.send(w).map_err(|e| e.0)
    }
}

/// Per-group view of recovered records, in journal order.
pub fn by_group(records: Vec<Record>) -> BTreeMap<u32, Vec<Record>> {
    let mut out: BTreeMap<u32, Vec<Record>> = BTreeMap::new();
    for r in records {
        out.entry(r.group).or_default().push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_a_torn_tail_and_damage_in_the_newest_segment_is_cut() {
        let dir = std::env::temp_dir().join(format!("ursula-wal-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let mut bytes = encode(1, KIND_VOTE, 3, b"vote");
        bytes.extend(encode(2, KIND_ENTRIES, 3, b"entries"));
        let good = bytes.len();
        bytes.extend(&encode(3, KIND_ENTRIES, 3, b"torn")[..10]);
        std::fs::write(dir.join(segment_name(1)), &bytes).expect("write");
        let r = recover(&dir).expect("recover");
        assert_eq!(r.records.len(), 2);
        assert_eq!(r.records[1].payload, b"entries");
        assert!(!r.damaged_tail);
        assert_eq!(
            std::fs::metadata(dir.join(segment_name(1)))
                .map(|m| m.len() as usize)
                .ok(),
            Some(good)
        );
        // A complete frame with a bad checksum is damage, not a tear.
        let mut damaged = encode(4, KIND_ENTRIES, 1, b"x");
        damaged[9] ^= 0xff;
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.join(segment_name(1)))
            .expect("open");
        f.write_all(&damaged).expect("append");
        let r = recover(&dir).expect("recover");
        assert!(r.damaged_tail);
        assert_eq!(r.records.len(), 2);
        // The same damage in an older segment refuses to start.
        std::fs::write(dir.join(segment_name(2)), encode(5, KIND_VOTE, 1, b"v")).expect("write");
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.join(segment_name(1)))
            .expect("open");
        f.write_all(&damaged).expect("append");
        assert!(matches!(recover(&dir), Err(WalError::SealedDamage { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
