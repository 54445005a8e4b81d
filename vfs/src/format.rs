//! Byte layouts the extension writes to the stream and to local files. Every layout carries a
//! version tag; a tag of another version stops attach with an error that names it.
//! `docs/sqlite-vfs.md` specifies each one.
//!
//! Stream bytes are not message-delimited and reads may end anywhere, so every frame is
//! self-delimiting: `magic(4) | len u32 LE | crc32 u32 LE | payload(len)`.

use std::io::Read;

use serde::Deserialize;
use serde::Serialize;
use ursula_protocol::incarnation::Incarnation;
use ursula_protocol::offset::Offset;

pub const PAGE_SIZE: usize = 4096;
/// Frame magic: "USQ" plus the format version byte.
pub const FRAME_MAGIC: [u8; 4] = *b"USQ1";
pub const FRAME_HEADER: usize = 12;
/// Snapshot body magic.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"USS1";
/// Sidecar format version.
pub const SIDECAR_VERSION: u32 = 1;

const KIND_COMMIT: u8 = 1;
const KIND_CLAIM: u8 = 2;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error(
        "stream bytes at {at} are not a sqlite-ursula-vfs frame (foreign bytes, e.g. an append without Stream-Seq)"
    )]
    NotAFrame { at: String },
    #[error("frame format {0:?} is not supported by this extension (it reads {1:?})")]
    UnknownVersion(String, String),
    #[error("frame checksum mismatch")]
    Checksum,
    #[error("frame payload is malformed: {0}")]
    Malformed(&'static str),
    #[error("zstd: {0}")]
    Zstd(String),
}

/// What one frame records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A transaction's final page images and the database size after it, in pages.
    Commit {
        db_pages: u32,
        pages: Vec<(u32, Vec<u8>)>,
    },
    /// An owner's claim of the stream.
    Claim { epoch: u64, nonce: [u8; 16] },
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn get_u64(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
}

/// zstd level for commit frames: fast, since the commit waits for it.
const COMMIT_LEVEL: i32 = 1;
/// zstd level for snapshots: built off the commit path.
pub const SNAPSHOT_LEVEL: i32 = 3;

impl Record {
    /// The record's bytes before compression. Public for the fuzz targets (`fuzz/`), which
    /// check that every raw record [`Record::decode_raw`] accepts encodes back to its bytes.
    pub fn encode_raw(&self) -> Vec<u8> {
        match self {
            Record::Commit { db_pages, pages } => {
                let mut out = Vec::with_capacity(9 + pages.len() * (4 + PAGE_SIZE));
                out.push(KIND_COMMIT);
                put_u32(&mut out, *db_pages);
                put_u32(&mut out, pages.len() as u32);
                for (pgno, data) in pages {
                    put_u32(&mut out, *pgno);
                    out.extend_from_slice(data);
                }
                out
            }
            Record::Claim { epoch, nonce } => {
                let mut out = Vec::with_capacity(25);
                out.push(KIND_CLAIM);
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(nonce);
                out
            }
        }
    }

    /// Decodes a frame's decompressed payload. Public for the fuzz targets (`fuzz/`), which
    /// drive it with arbitrary bytes without building a compressed frame around them.
    pub fn decode_raw(raw: &[u8]) -> Result<Record, FormatError> {
        match raw.first() {
            Some(&KIND_COMMIT) => {
                let db_pages = get_u32(raw, 1).ok_or(FormatError::Malformed("short commit"))?;
                let n = get_u32(raw, 5).ok_or(FormatError::Malformed("short commit"))? as usize;
                let need = 9usize
                    .checked_add(
                        n.checked_mul(4 + PAGE_SIZE)
                            .ok_or(FormatError::Malformed("page count"))?,
                    )
                    .ok_or(FormatError::Malformed("page count"))?;
                if raw.len() != need {
                    return Err(FormatError::Malformed("commit length"));
                }
                let mut pages = Vec::with_capacity(n);
                let mut at = 9;
                for _ in 0..n {
                    let pgno = get_u32(raw, at).ok_or(FormatError::Malformed("page number"))?;
                    if pgno == 0 {
                        return Err(FormatError::Malformed("page number 0"));
                    }
                    pages.push((pgno, raw[at + 4..at + 4 + PAGE_SIZE].to_vec()));
                    at += 4 + PAGE_SIZE;
                }
                Ok(Record::Commit { db_pages, pages })
            }
            Some(&KIND_CLAIM) => {
                if raw.len() != 25 {
                    return Err(FormatError::Malformed("claim length"));
                }
                let epoch = get_u64(raw, 1).ok_or(FormatError::Malformed("claim"))?;
                let mut nonce = [0u8; 16];
                nonce.copy_from_slice(&raw[9..25]);
                Ok(Record::Claim { epoch, nonce })
            }
            _ => Err(FormatError::Malformed("unknown record kind")),
        }
    }

    /// The framed, compressed bytes appended to the stream.
    pub fn to_frame(&self) -> Result<Vec<u8>, FormatError> {
        let payload = zstd::bulk::compress(&self.encode_raw(), COMMIT_LEVEL)
            .map_err(|e| FormatError::Zstd(e.to_string()))?;
        let mut out = Vec::with_capacity(FRAME_HEADER + payload.len());
        out.extend_from_slice(&FRAME_MAGIC);
        put_u32(&mut out, payload.len() as u32);
        put_u32(&mut out, crc32fast::hash(&payload));
        out.extend_from_slice(&payload);
        Ok(out)
    }
}

/// Splits stream bytes into frames. `at` names the position for errors.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held that do not yet form a whole frame.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next whole frame's record and its length in stream bytes, if one is buffered.
    pub fn next(&mut self, at: &str) -> Result<Option<(Record, usize)>, FormatError> {
        if self.buf.len() < FRAME_HEADER {
            return Ok(None);
        }
        check_magic(&self.buf[..4], &FRAME_MAGIC, at)?;
        let len = get_u32(&self.buf, 4).unwrap_or(0) as usize;
        let crc = get_u32(&self.buf, 8).unwrap_or(0);
        if self.buf.len() < FRAME_HEADER + len {
            return Ok(None);
        }
        let payload = &self.buf[FRAME_HEADER..FRAME_HEADER + len];
        if crc32fast::hash(payload) != crc {
            return Err(FormatError::Checksum);
        }
        let raw =
            zstd::stream::decode_all(payload).map_err(|e| FormatError::Zstd(e.to_string()))?;
        let record = Record::decode_raw(&raw)?;
        self.buf.drain(..FRAME_HEADER + len);
        Ok(Some((record, FRAME_HEADER + len)))
    }
}

fn check_magic(got: &[u8], want: &[u8; 4], at: &str) -> Result<(), FormatError> {
    if got == want {
        return Ok(());
    }
    if got.len() == 4 && got[..3] == want[..3] {
        return Err(FormatError::UnknownVersion(
            String::from_utf8_lossy(got).into_owned(),
            String::from_utf8_lossy(want).into_owned(),
        ));
    }
    Err(FormatError::NotAFrame { at: at.to_owned() })
}

/// A snapshot body: `"USS1" | epoch u64 | pages u32 | crc32(image) u32 | offset_len u16 |
/// offset | zstd(image)`. `offset` is the stream offset the image reflects, in the server's
/// text form (so `offset_len` is 20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// Highest epoch claimed before the snapshot offset, so fencing survives retention.
    pub epoch: u64,
    pub pages: u32,
    pub crc: u32,
    pub offset: Offset,
}

pub fn encode_snapshot(h: &SnapshotHeader, compressed_image: &[u8]) -> Vec<u8> {
    let offset = h.offset.to_string();
    let mut out = Vec::with_capacity(24 + offset.len() + compressed_image.len());
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&h.epoch.to_le_bytes());
    put_u32(&mut out, h.pages);
    put_u32(&mut out, h.crc);
    out.extend_from_slice(&(offset.len() as u16).to_le_bytes());
    out.extend_from_slice(offset.as_bytes());
    out.extend_from_slice(compressed_image);
    out
}

/// Reads a snapshot header from the start of a body; the rest of `r` is the zstd image.
pub fn read_snapshot_header(r: &mut impl Read) -> Result<SnapshotHeader, FormatError> {
    let mut fixed = [0u8; 22];
    r.read_exact(&mut fixed)
        .map_err(|_| FormatError::Malformed("short snapshot header"))?;
    check_magic(&fixed[..4], &SNAPSHOT_MAGIC, "snapshot")?;
    let epoch = get_u64(&fixed, 4).unwrap_or(0);
    let pages = get_u32(&fixed, 12).unwrap_or(0);
    let crc = get_u32(&fixed, 16).unwrap_or(0);
    let olen = u16::from_le_bytes([fixed[20], fixed[21]]) as usize;
    let mut offset = vec![0u8; olen];
    r.read_exact(&mut offset)
        .map_err(|_| FormatError::Malformed("short snapshot offset"))?;
    let offset = std::str::from_utf8(&offset)
        .ok()
        .and_then(Offset::parse)
        .ok_or(FormatError::Malformed("snapshot offset"))?;
    Ok(SnapshotHeader {
        epoch,
        pages,
        crc,
        offset,
    })
}

/// The sidecar `<db>-ursula`: what the local files reflect, and whether they can be trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    pub version: u32,
    /// The stream URL as attached.
    pub stream: String,
    #[serde(with = "incarnation_text")]
    pub incarnation: Incarnation,
    /// Stream offset after the last frame the local files reflect; `"-1"` for none.
    #[serde(with = "offset_text")]
    pub offset: Option<Offset>,
    pub epoch: u64,
    /// Frame bytes since the latest snapshot the owner knows.
    pub log_bytes: u64,
    /// Kernel boot id at the last write; local files are trusted only on the same boot.
    pub boot_id: String,
    pub inode: u64,
    /// What the `-wal` holds: `"<salt1>:<salt2>:<last commit frame>"`, or `":0"` for nothing.
    pub wal: String,
}

impl Sidecar {
    pub fn parse(bytes: &[u8]) -> Result<Sidecar, FormatError> {
        #[derive(Deserialize)]
        struct Probe {
            version: u32,
        }
        let probe: Probe = serde_json::from_slice(bytes)
            .map_err(|_| FormatError::Malformed("sidecar is not JSON"))?;
        if probe.version != SIDECAR_VERSION {
            return Err(FormatError::UnknownVersion(
                format!("sidecar v{}", probe.version),
                format!("sidecar v{SIDECAR_VERSION}"),
            ));
        }
        serde_json::from_slice(bytes).map_err(|_| FormatError::Malformed("sidecar fields"))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }
}

/// Offsets as text, where users and the sidecar see them: the server's 20-digit token, or
/// `"-1"` (the protocol's "from the start") for none. Inside the extension an offset is an
/// `Option<Offset>`; only here does it become text, so the sidecar's bytes and what
/// `ursula_attach`, `ursula_status` and `ursula_stats` return stay as the server wrote them.
pub mod offset_text {
    use serde::Deserialize;
    use serde::Deserializer;
    use serde::Serializer;
    use ursula_protocol::offset::Offset;
    use ursula_protocol::offset::ReadFrom;

    pub const NONE: &str = "-1";

    pub fn to_text(offset: Option<Offset>) -> String {
        offset.map_or_else(|| NONE.to_owned(), |o| o.to_string())
    }

    /// The offset `text` names: `Some(None)` for `"-1"`, `None` for anything that is neither
    /// that nor a 20-digit token.
    pub fn parse(text: &str) -> Option<Option<Offset>> {
        match ReadFrom::parse(text)? {
            ReadFrom::Start => Some(None),
            ReadFrom::At(o) => Some(Some(o)),
            ReadFrom::Now => None,
        }
    }

    pub fn serialize<S: Serializer>(offset: &Option<Offset>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&to_text(*offset))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Offset>, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("{text:?} is neither an offset nor \"-1\""))
        })
    }
}

/// The stream's incarnation as the sidecar stores it: the server's 16-hex-digit token.
mod incarnation_text {
    use serde::Deserialize;
    use serde::Deserializer;
    use serde::Serializer;
    use ursula_protocol::incarnation::Incarnation;

    pub fn serialize<S: Serializer>(i: &Incarnation, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(i)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Incarnation, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_across_split_reads() {
        let commit = Record::Commit {
            db_pages: 3,
            pages: vec![(1, vec![7u8; PAGE_SIZE]), (3, vec![9u8; PAGE_SIZE])],
        };
        let claim = Record::Claim {
            epoch: 5,
            nonce: [1; 16],
        };
        let mut bytes = commit.to_frame().expect("encode");
        bytes.extend(claim.to_frame().expect("encode"));
        let mut r = FrameReader::default();
        let mut got = Vec::new();
        for chunk in bytes.chunks(7) {
            r.push(chunk);
            while let Some((rec, _)) = r.next("x").expect("decode") {
                got.push(rec);
            }
        }
        assert_eq!(got, vec![commit, claim]);
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn foreign_bytes_and_other_versions_are_named() {
        let mut r = FrameReader::default();
        r.push(b"hello world, not a frame");
        assert!(matches!(
            r.next("00000000000000000000"),
            Err(FormatError::NotAFrame { .. })
        ));
        let mut frame = Record::Claim {
            epoch: 1,
            nonce: [0; 16],
        }
        .to_frame()
        .expect("encode");
        frame[3] = b'9';
        let mut r = FrameReader::default();
        r.push(&frame);
        assert_eq!(
            r.next("x"),
            Err(FormatError::UnknownVersion("USQ9".into(), "USQ1".into()))
        );
    }

    #[test]
    fn sidecar_versions_are_checked() {
        let s = Sidecar {
            version: SIDECAR_VERSION,
            stream: "http://h/b/s".into(),
            incarnation: Incarnation(0x75b_cd15),
            offset: None,
            epoch: 0,
            log_bytes: 0,
            boot_id: "b".into(),
            inode: 1,
            wal: ":0".into(),
        };
        assert_eq!(Sidecar::parse(&s.to_bytes()), Ok(s));
        assert!(matches!(
            Sidecar::parse(br#"{"version":7}"#),
            Err(FormatError::UnknownVersion(..))
        ));
    }

    #[test]
    fn snapshot_header_round_trips() {
        let h = SnapshotHeader {
            epoch: 4,
            pages: 10,
            crc: 99,
            offset: Offset(42),
        };
        let body = encode_snapshot(&h, b"zz");
        assert_eq!(&body[20..42], b"\x14\x0000000000000000000042");
        let mut r = &body[..];
        assert_eq!(read_snapshot_header(&mut r), Ok(h));
        assert_eq!(r, b"zz");
        let mut other = body.clone();
        other[22..24].copy_from_slice(b"-1");
        assert_eq!(
            read_snapshot_header(&mut &other[..]),
            Err(FormatError::Malformed("snapshot offset"))
        );
    }

    /// A sidecar as the extension wrote it before offsets were typed: it reads, and writes back
    /// byte for byte.
    #[test]
    fn sidecar_bytes_are_kept() {
        for offset in ["\"-1\"", "\"00000000000000004242\""] {
            let bytes = format!(
                "{{\n  \"version\": 1,\n  \"stream\": \"http://h/b/s\",\n  \"incarnation\": \"00000000075bcd15\",\n  \"offset\": {offset},\n  \"epoch\": 3,\n  \"log_bytes\": 7,\n  \"boot_id\": \"b\",\n  \"inode\": 1,\n  \"wal\": \":0\"\n}}"
            );
            let s = Sidecar::parse(bytes.as_bytes()).expect("parses");
            assert_eq!(String::from_utf8(s.to_bytes()).expect("utf-8"), bytes);
        }
        let s = Sidecar::parse(
            br#"{"version":1,"stream":"","incarnation":"00000000075bcd15","offset":"00000000000000004242","epoch":0,"log_bytes":0,"boot_id":"","inode":0,"wal":":0"}"#,
        )
        .expect("parses");
        assert_eq!(s.offset, Some(Offset(4242)));
        assert_eq!(s.incarnation, Incarnation(123_456_789));
        let other_spelling = br#"{"version":1,"stream":"","incarnation":"00000000075BCD15","offset":"-1","epoch":0,"log_bytes":0,"boot_id":"","inode":0,"wal":":0"}"#;
        assert_eq!(
            Sidecar::parse(other_spelling),
            Err(FormatError::Malformed("sidecar fields"))
        );
        for bad in ["now", "42", ""] {
            let text = format!(
                r#"{{"version":1,"stream":"","incarnation":"00000000075bcd15","offset":"{bad}","epoch":0,"log_bytes":0,"boot_id":"","inode":0,"wal":":0"}}"#
            );
            assert_eq!(
                Sidecar::parse(text.as_bytes()),
                Err(FormatError::Malformed("sidecar fields")),
                "{bad}"
            );
        }
    }

    #[test]
    fn offsets_as_text() {
        assert_eq!(offset_text::to_text(None), "-1");
        assert_eq!(
            offset_text::to_text(Some(Offset(7))),
            "00000000000000000007"
        );
        assert_eq!(offset_text::parse("-1"), Some(None));
        assert_eq!(
            offset_text::parse("00000000000000000007"),
            Some(Some(Offset(7)))
        );
        assert_eq!(offset_text::parse("now"), None);
        assert_eq!(offset_text::parse("7"), None);
    }
}
