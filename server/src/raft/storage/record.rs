//! The sealed, versioned records the Raft engine persists and ships (docs/durability.md,
//! "Records"):
//!
//! ```text
//! magic [4] | version u8 | len u32 LE | body [len] | crc32 u32 LE
//! ```
//!
//! The CRC32 covers everything before it, so a torn, foreign or damaged record reads as such,
//! never as a value. The body of every version-1 record is the MessagePack encoding of the
//! type its [`Kind`] names; the checked-in fixtures under `server/testdata/` pin those bytes,
//! so a change to any persisted type's layout fails the fixture tests and must come with a new
//! version and a decoder for the old one.
//!
//! Bytes without a magic are read as the unversioned encoding the engine wrote before these
//! records existed (a bare MessagePack value), so a node's existing WAL and snapshots keep
//! working. No record starts like such a value: every magic begins with `U` (`0x55`), which
//! MessagePack reads as the integer 85, and no unversioned payload is a bare integer followed
//! by more bytes.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A kind of record: its magic and the version this build writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub magic: &'static [u8; 4],
    pub version: u8,
    /// The oldest version this build still reads with the same type: a later version that
    /// only appended fields with defaults leaves older bodies decodable as they are.
    pub oldest: u8,
    /// What it holds, for errors.
    pub name: &'static str,
}

/// A journal record's payload (the WAL frame's kind says which value: entries, a vote, a
/// truncation point, a purge point, the commit point).
pub const JOURNAL: Kind = Kind {
    magic: b"URJR",
    version: 1,
    oldest: 1,
    name: "journal payload",
};

/// A group's state as a snapshot carries it: in the snapshot file and in `InstallSnapshot`.
/// Version 2 appended the per-bucket ledger and an import's staged parts; a version 1 body
/// reads with both empty.
pub const GROUP_STATE: Kind = Kind {
    magic: b"URGS",
    version: 2,
    oldest: 1,
    name: "group state",
};

/// A snapshot file, `snapshots/group-<g>.snap`: the snapshot's meta and its group state.
pub const SNAPSHOT_FILE: Kind = Kind {
    magic: b"URSN",
    version: 1,
    oldest: 1,
    name: "snapshot file",
};

/// A reference to a snapshot's group state in the S3 snapshot namespace: what the snapshot
/// file and `InstallSnapshot` carry in place of the state when snapshots live on S3.
pub const SNAPSHOT_REF: Kind = Kind {
    magic: b"URSR",
    version: 1,
    oldest: 1,
    name: "snapshot reference",
};

/// A node's pins in the S3 snapshot namespace, `refs/n<node>`: the snapshot objects it still
/// needs, which no node prunes.
pub const SNAPSHOT_PINS: Kind = Kind {
    magic: b"URSP",
    version: 1,
    oldest: 1,
    name: "snapshot pins",
};

/// magic, version, length.
const HEAD: usize = 4 + 1 + 4;
const CRC: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{0}: not a record of this kind")]
    Foreign(&'static str),
    #[error("{0}: too short for a record")]
    Short(&'static str),
    #[error("{0}: checksum mismatch")]
    Checksum(&'static str),
    #[error("{kind}: length {len} does not match the {have} bytes present")]
    Length {
        kind: &'static str,
        len: u64,
        have: u64,
    },
    #[error("{kind}: version {found}, this build reads version {known}")]
    Version {
        kind: &'static str,
        found: u8,
        known: u8,
    },
    #[error("{kind}: cannot encode: {source}")]
    Encode {
        kind: &'static str,
        source: rmp_serde::encode::Error,
    },
    #[error("{kind}: cannot write: {source}")]
    Write {
        kind: &'static str,
        source: std::io::Error,
    },
    #[error("{kind}: cannot decode: {source}")]
    Decode {
        kind: &'static str,
        source: rmp_serde::decode::Error,
    },
}

/// Encodes `value` as a sealed record of `kind`, in one buffer.
pub fn encode<T: Serialize + ?Sized>(kind: Kind, value: &T) -> Result<Vec<u8>, RecordError> {
    encode_sized(kind, value, 64)
}

/// [`encode`] into a buffer sized for a body of about `guess` bytes: growing a buffer of many
/// megabytes by doubling costs more than the encoding itself.
pub fn encode_sized<T: Serialize + ?Sized>(
    kind: Kind,
    value: &T,
    guess: usize,
) -> Result<Vec<u8>, RecordError> {
    let mut out = Vec::with_capacity(HEAD + guess + CRC);
    start(kind, &mut out);
    rmp_serde::encode::write(&mut out, value).map_err(|source| RecordError::Encode {
        kind: kind.name,
        source,
    })?;
    finish(&mut out)?;
    Ok(out)
}

/// Seals `body` (an encoded value) as a record of `kind`.
pub fn seal(kind: Kind, body: &[u8]) -> Result<Vec<u8>, RecordError> {
    let mut out = Vec::with_capacity(HEAD + body.len() + CRC);
    start(kind, &mut out);
    out.extend_from_slice(body);
    finish(&mut out)?;
    Ok(out)
}

/// Writes `value` to `out` as a sealed record of `kind`: the bytes [`encode`] returns, without
/// holding them in memory. A snapshot file wraps a group state of tens of MiB, and building
/// the file in a buffer first copied all of it once more. A first pass only counts the body,
/// whose length the header carries; the second writes it through the CRC.
pub fn write_to<T: Serialize + ?Sized, W: std::io::Write>(
    kind: Kind,
    value: &T,
    out: W,
) -> Result<(), RecordError> {
    let encode = |source| RecordError::Encode {
        kind: kind.name,
        source,
    };
    let mut counted = Sealing::new(std::io::sink());
    rmp_serde::encode::write(&mut counted, value).map_err(encode)?;
    let len = body_len(kind.name, counted.written)?;
    let mut sealed = Sealing::new(out);
    let write = |source| RecordError::Write {
        kind: kind.name,
        source,
    };
    std::io::Write::write_all(&mut sealed, &head(kind, len)).map_err(write)?;
    let encoded = rmp_serde::encode::write(&mut sealed, value);
    // MessagePack's error for a failed write does not say why; the writer kept the reason.
    encoded.map_err(|e| sealed.failed.take().map_or_else(|| encode(e), write))?;
    if sealed.written != HEAD as u64 + u64::from(len) {
        // The value encoded to other bytes the second time: its encoding is not deterministic.
        return Err(RecordError::Length {
            kind: kind.name,
            len: u64::from(len),
            have: sealed.written - HEAD as u64,
        });
    }
    let crc = sealed.crc.finalize();
    std::io::Write::write_all(&mut sealed.out, &crc.to_le_bytes()).map_err(write)?;
    Ok(())
}

/// A writer that counts and checksums what passes through it.
struct Sealing<W> {
    out: W,
    crc: crc32fast::Hasher,
    written: u64,
    /// Why the last write failed.
    failed: Option<std::io::Error>,
}

impl<W> Sealing<W> {
    fn new(out: W) -> Sealing<W> {
        Sealing {
            out,
            crc: crc32fast::Hasher::new(),
            written: 0,
            failed: None,
        }
    }
}

impl<W: std::io::Write> std::io::Write for Sealing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf).inspect_err(|e| {
            self.failed = Some(std::io::Error::new(e.kind(), e.to_string()));
        })?;
        self.crc.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// A record's header; the length is filled in once the body is known.
fn head(kind: Kind, len: u32) -> [u8; HEAD] {
    let mut h = [0; HEAD];
    h[..4].copy_from_slice(kind.magic);
    h[4] = kind.version;
    h[5..].copy_from_slice(&len.to_le_bytes());
    h
}

/// A body's length as the header carries it: a record body is at most `u32::MAX` bytes.
fn body_len(kind: &'static str, len: u64) -> Result<u32, RecordError> {
    u32::try_from(len).map_err(|_| RecordError::Length {
        kind,
        len,
        have: u64::from(u32::MAX),
    })
}

fn start(kind: Kind, out: &mut Vec<u8>) {
    out.extend_from_slice(&head(kind, 0));
}

/// Fills in the length and appends the CRC.
fn finish(out: &mut Vec<u8>) -> Result<(), RecordError> {
    let len = body_len("record", (out.len() - HEAD) as u64)?;
    out[5..9].copy_from_slice(&len.to_le_bytes());
    let crc = crc32fast::hash(out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// What a stored value turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub enum Body<'a> {
    /// A sealed record of the kind asked for: its version and body.
    Sealed { version: u8, body: &'a [u8] },
    /// Bytes without the kind's magic: the unversioned encoding of earlier builds.
    Unversioned(&'a [u8]),
}

/// Opens `bytes` as a record of `kind`, checking its length and CRC.
pub fn open(kind: Kind, bytes: &[u8]) -> Result<Body<'_>, RecordError> {
    if !bytes.starts_with(kind.magic) {
        return Ok(Body::Unversioned(bytes));
    }
    if bytes.len() < HEAD + CRC {
        return Err(RecordError::Short(kind.name));
    }
    let (sealed, crc) = bytes.split_at(bytes.len() - CRC);
    let crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32fast::hash(sealed) != crc {
        return Err(RecordError::Checksum(kind.name));
    }
    let len = u32::from_le_bytes([sealed[5], sealed[6], sealed[7], sealed[8]]);
    let body = &sealed[HEAD..];
    if body.len() as u64 != u64::from(len) {
        return Err(RecordError::Length {
            kind: kind.name,
            len: u64::from(len),
            have: body.len() as u64,
        });
    }
    Ok(Body::Sealed {
        version: sealed[4],
        body,
    })
}

/// Decodes a stored value of `kind`: a sealed record of this build's version, or the
/// unversioned encoding of earlier builds.
pub fn decode<T: DeserializeOwned>(kind: Kind, bytes: &[u8]) -> Result<T, RecordError> {
    let body = match open(kind, bytes)? {
        Body::Sealed { version, body } if (kind.oldest..=kind.version).contains(&version) => body,
        Body::Sealed { version, .. } => {
            return Err(RecordError::Version {
                kind: kind.name,
                found: version,
                known: kind.version,
            });
        }
        Body::Unversioned(b) => b,
    };
    rmp_serde::from_slice(body).map_err(|source| RecordError::Decode {
        kind: kind.name,
        source,
    })
}

/// [`decode`] for bytes that must be a sealed record: objects of the S3 snapshot namespace
/// have no unversioned past, so bytes without the kind's magic are foreign or damaged.
pub fn decode_sealed<T: DeserializeOwned>(kind: Kind, bytes: &[u8]) -> Result<T, RecordError> {
    if !bytes.starts_with(kind.magic) {
        return Err(RecordError::Foreign(kind.name));
    }
    decode(kind, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes at most three bytes per call, then fails after `fail_after` bytes if set.
    struct Dribble {
        got: Vec<u8>,
        fail_after: Option<usize>,
    }

    impl std::io::Write for Dribble {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.fail_after.is_some_and(|n| self.got.len() >= n) {
                return Err(std::io::Error::other("disk gone"));
            }
            let n = buf.len().min(3);
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_record_written_piece_by_piece_is_the_encoded_record_and_a_failed_write_is_an_error() {
        let value = (9u64, serde_bytes::ByteBuf::from(vec![7u8; 100_000]), "tail");
        let whole = encode(SNAPSHOT_FILE, &value).expect("encode");
        let mut out = Dribble {
            got: Vec::new(),
            fail_after: None,
        };
        write_to(SNAPSHOT_FILE, &value, &mut out).expect("write");
        assert_eq!(out.got, whole);
        let mut failing = Dribble {
            got: Vec::new(),
            fail_after: Some(50),
        };
        let e = write_to(SNAPSHOT_FILE, &value, &mut failing).expect_err("fails");
        assert!(e.to_string().contains("disk gone"), "{e}");
    }

    #[test]
    fn a_record_round_trips_and_lays_out_magic_version_length_body_crc() {
        let bytes = encode(JOURNAL, &(7u64, "x")).expect("encode");
        assert_eq!(&bytes[..4], b"URJR");
        assert_eq!(bytes[4], 1);
        let len = u32::from_le_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) as usize;
        assert_eq!(bytes.len(), 9 + len + 4);
        let back: (u64, String) = decode(JOURNAL, &bytes).expect("decode");
        assert_eq!(back, (7, "x".to_owned()));
    }

    #[test]
    fn a_flipped_bit_a_cut_tail_or_another_version_is_refused_by_name() {
        let bytes = encode(GROUP_STATE, &vec![1u8, 2, 3]).expect("encode");
        let mut flipped = bytes.clone();
        flipped[10] ^= 1;
        assert!(matches!(
            decode::<Vec<u8>>(GROUP_STATE, &flipped),
            Err(RecordError::Checksum("group state"))
        ));
        assert!(decode::<Vec<u8>>(GROUP_STATE, &bytes[..bytes.len() - 1]).is_err());
        let newer = seal(
            Kind {
                version: 3,
                ..GROUP_STATE
            },
            &rmp_serde::to_vec(&vec![1u8]).expect("body"),
        )
        .expect("seal");
        let e = decode::<Vec<u8>>(GROUP_STATE, &newer).expect_err("version 3");
        assert_eq!(
            e.to_string(),
            "group state: version 3, this build reads version 2"
        );
        let older = seal(
            Kind {
                version: 1,
                ..GROUP_STATE
            },
            &rmp_serde::to_vec(&vec![1u8]).expect("body"),
        )
        .expect("seal");
        assert_eq!(
            decode::<Vec<u8>>(GROUP_STATE, &older).expect("version 1"),
            vec![1u8]
        );
    }

    #[test]
    fn unversioned_bytes_of_earlier_builds_still_decode() {
        let old = rmp_serde::to_vec(&(3u64, 4u64)).expect("old");
        let back: (u64, u64) = decode(JOURNAL, &old).expect("unversioned");
        assert_eq!(back, (3, 4));
        // A bare integer 85 (0x55) is one byte: never mistaken for a record's magic.
        let n = rmp_serde::to_vec(&85u64).expect("85");
        assert_eq!(decode::<u64>(JOURNAL, &n).expect("85"), 85);
    }
}
