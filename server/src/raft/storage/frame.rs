//! The journal's frame, and where each group's entry frames sit so that entries can be read
//! back from disk.
//!
//! Frame: `len u32 LE | crc32 u32 LE | seq u64 LE | kind u8 | group u32 LE | payload`, where
//! `len` counts from `seq` to the end and the CRC covers the same bytes, so a damaged length
//! reads as corruption. Segments are `NNNNNNNNNNNNNNNN.seg` (docs/durability.md).
//!
//! A group's log keeps only its recent entries in memory (`raft.wal.cache_size`, split evenly
//! between the node's groups). Older ones, such as a lagging follower's catch-up, are read
//! back from the journal through [`GroupFrames`]: the run of a group's entry frames in log
//! order, each with the segment and byte it starts at. The journal's writer keeps it in
//! journal order (entries, truncations, purges), so a frame is indexed once it is written and
//! the index never names entries a later truncation replaced.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::path::PathBuf;

/// The length and checksum before the body.
pub const HEADER: usize = 8;
/// `seq`, `kind` and `group`: the least a body holds.
pub const MIN_BODY: usize = 8 + 1 + 4;
pub const MAX_FRAME: usize = 1 << 30;

pub fn segment_name(n: u64) -> String {
    format!("{n:016}.seg")
}

pub fn encode(seq: u64, kind: u8, group: u32, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_into(&mut buf, seq, kind, group, payload);
    buf
}

/// Appends one frame to `buf`, so a batch of frames is built in one buffer without a copy
/// per frame.
pub fn encode_into(buf: &mut Vec<u8>, seq: u64, kind: u8, group: u32, payload: &[u8]) {
    let start = buf.len();
    let len = MIN_BODY + payload.len();
    buf.reserve(HEADER + len);
    buf.extend_from_slice(&[0u8; HEADER]);
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.push(kind);
    buf.extend_from_slice(&group.to_le_bytes());
    buf.extend_from_slice(payload);
    let crc = crc32fast::hash(&buf[start + HEADER..]);
    buf[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// What the bytes at the start of `rest` hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A whole frame that passed its checksum, `len` bytes long with its header.
    Frame {
        kind: u8,
        group: u32,
        payload: &'a [u8],
        len: usize,
    },
    /// Too few bytes for the frame its length names, or a length no frame has.
    Short,
    /// A whole frame whose checksum fails.
    Damaged,
}

pub fn parse(rest: &[u8]) -> Parsed<'_> {
    if rest.len() < HEADER {
        return Parsed::Short;
    }
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    if !(MIN_BODY..=MAX_FRAME).contains(&len) || rest.len() < HEADER + len {
        return Parsed::Short;
    }
    let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    let body = &rest[HEADER..HEADER + len];
    if crc32fast::hash(body) != crc {
        return Parsed::Damaged;
    }
    Parsed::Frame {
        kind: body[8],
        group: u32::from_le_bytes([body[9], body[10], body[11], body[12]]),
        payload: &body[13..],
        len: HEADER + len,
    }
}

/// Where a frame is: its segment's number, its first byte there, and its length with the
/// header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub seg: u64,
    pub at: u64,
    pub len: u32,
}

/// A frame of a group's entries `first..=last`. A truncation may have cut `last` back: the
/// frame then holds more, and a reader skips them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub first: u64,
    pub last: u64,
    pub loc: Loc,
}

/// A group's entry frames in log order: sorted by `first`, not overlapping.
#[derive(Debug, Default, Clone)]
pub struct GroupFrames {
    spans: VecDeque<Span>,
}

impl GroupFrames {
    /// A frame of `first..=last` was written: it replaces whatever held those indexes or
    /// later ones (openraft truncates before it writes over a conflict; this does not rely
    /// on it).
    pub fn add(&mut self, first: u64, last: u64, loc: Loc) {
        self.truncate(first);
        self.spans.push_back(Span { first, last, loc });
    }

    /// The entries at and after `from` are gone.
    pub fn truncate(&mut self, from: u64) {
        while let Some(s) = self.spans.back_mut() {
            if s.first >= from {
                self.spans.pop_back();
            } else {
                s.last = s.last.min(from.saturating_sub(1));
                break;
            }
        }
    }

    /// The entries up to `upto` are purged: frames that hold nothing later are forgotten.
    pub fn purge(&mut self, upto: u64) {
        while self.spans.front().is_some_and(|s| s.last <= upto) {
            self.spans.pop_front();
        }
    }

    /// The highest index written, as far as the index knows.
    pub fn last(&self) -> Option<u64> {
        self.spans.back().map(|s| s.last)
    }

    /// The frames that hold any of `from..=to`, in log order.
    pub fn covering(&self, from: u64, to: u64) -> Vec<Span> {
        let start = self.spans.partition_point(|s| s.last < from);
        self.spans
            .range(start..)
            .take_while(|s| s.first <= to)
            .copied()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The segment was deleted: every entry in it had been purged.
    #[error("journal segment {0} is gone")]
    Gone(PathBuf),
    #[error("journal segment {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("journal segment {path}: the frame at byte {at} is not group {group}'s entries")]
    Mismatch { path: PathBuf, at: u64, group: u32 },
}

/// Reads back the payload of the entry frame of `group` at `loc` in the journal directory
/// `dir`, checked against its checksum, kind and group.
pub fn read_entries(dir: &Path, group: u32, loc: Loc, kind: u8) -> Result<Vec<u8>, ReadError> {
    let path = dir.join(segment_name(loc.seg));
    let io = |source: std::io::Error| ReadError::Io {
        path: path.clone(),
        source,
    };
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReadError::Gone(path));
        }
        Err(e) => return Err(io(e)),
    };
    let mut buf = vec![0u8; loc.len as usize];
    file.read_exact_at(&mut buf, loc.at).map_err(io)?;
    match parse(&buf) {
        Parsed::Frame {
            kind: k,
            group: g,
            payload,
            len,
        } if k == kind && g == group && len == buf.len() => Ok(payload.to_vec()),
        _ => Err(ReadError::Mismatch {
            path,
            at: loc.at,
            group,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(seg: u64) -> Loc {
        Loc {
            seg,
            at: seg * 100,
            len: 10,
        }
    }

    fn spans(f: &GroupFrames) -> Vec<(u64, u64, u64)> {
        f.spans
            .iter()
            .map(|s| (s.first, s.last, s.loc.seg))
            .collect()
    }

    #[test]
    fn frames_follow_writes_truncations_and_purges_in_log_order() {
        let mut f = GroupFrames::default();
        f.add(1, 3, loc(1));
        f.add(4, 4, loc(2));
        f.add(5, 9, loc(3));
        assert_eq!(spans(&f), vec![(1, 3, 1), (4, 4, 2), (5, 9, 3)]);
        assert_eq!(
            f.covering(3, 5)
                .iter()
                .map(|s| s.loc.seg)
                .collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(f.covering(10, 12), Vec::new());

        // A truncation inside a frame keeps the frame for what precedes it.
        f.truncate(7);
        assert_eq!(spans(&f), vec![(1, 3, 1), (4, 4, 2), (5, 6, 3)]);
        assert_eq!(f.last(), Some(6));
        // A frame written over indexes already held replaces them.
        f.add(4, 8, loc(4));
        assert_eq!(spans(&f), vec![(1, 3, 1), (4, 8, 4)]);

        f.purge(2);
        assert_eq!(spans(&f), vec![(1, 3, 1), (4, 8, 4)]);
        f.purge(3);
        assert_eq!(spans(&f), vec![(4, 8, 4)]);
        f.truncate(1);
        assert!(f.is_empty() && f.last().is_none());
    }

    #[test]
    fn a_frame_reads_back_and_one_that_is_not_the_groups_entries_is_refused() {
        let dir = std::env::temp_dir().join(format!("ursula-frame-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let mut bytes = encode(1, 2, 7, b"vote");
        let at = bytes.len() as u64;
        encode_into(&mut bytes, 2, 1, 7, b"entries");
        std::fs::write(dir.join(segment_name(3)), &bytes).expect("write");
        let entries = Loc {
            seg: 3,
            at,
            len: (bytes.len() as u64 - at) as u32,
        };
        assert_eq!(
            read_entries(&dir, 7, entries, 1).expect("read"),
            b"entries".to_vec()
        );
        // Another group, another kind, a wrong length: refused, not misread.
        assert!(matches!(
            read_entries(&dir, 8, entries, 1),
            Err(ReadError::Mismatch { .. })
        ));
        let vote = Loc {
            seg: 3,
            at: 0,
            len: at as u32,
        };
        assert!(matches!(
            read_entries(&dir, 7, vote, 1),
            Err(ReadError::Mismatch { .. })
        ));
        let short = Loc { len: 12, ..entries };
        assert!(matches!(
            read_entries(&dir, 7, short, 1),
            Err(ReadError::Mismatch { .. })
        ));
        // A damaged byte fails the checksum.
        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        std::fs::write(dir.join(segment_name(3)), &damaged).expect("write");
        assert!(matches!(
            read_entries(&dir, 7, entries, 1),
            Err(ReadError::Mismatch { .. })
        ));
        assert!(matches!(
            read_entries(&dir, 7, Loc { seg: 4, ..entries }, 1),
            Err(ReadError::Gone(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
