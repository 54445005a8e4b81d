//! SQLite's own on-disk layouts that the extension reads: the `-wal` file (a 32-byte header,
//! then frames of a 24-byte header and one page) and the few bytes of the database header that
//! say whether a database is in WAL mode. Big-endian throughout, as SQLite writes them
//! (<https://www.sqlite.org/fileformat2.html#walformat>). Kept in one place so the commit
//! interception, the trust check of the local files and the snapshot copy read them alike.

use crate::format::PAGE_SIZE;

/// Bytes of the WAL header.
pub const HEADER: u64 = 32;
/// Bytes of a frame header.
pub const FRAME_HEADER: u64 = 24;
/// Bytes of a frame with the only page size the extension supports.
pub const FRAME: u64 = FRAME_HEADER + PAGE_SIZE as u64;

fn be32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Defines a header of big-endian `u32` fields at fixed offsets, with `parse` reading the first
/// `$len` bytes of a buffer (`None` when it is shorter).
macro_rules! be32_header {
    ($(#[$doc:meta])* $name:ident, $len:ident { $($(#[$fdoc:meta])* $field:ident: $at:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: u32,)+
        }

        impl $name {
            #[doc = concat!("Reads the first [`", stringify!($len), "`] bytes of `b`; `None` when it is shorter.")]
            pub fn parse(b: &[u8]) -> Option<$name> {
                if b.len() < $len as usize {
                    return None;
                }
                Some($name {
                    $($field: be32(b, $at)?,)+
                })
            }
        }
    };
}

be32_header! {
    /// The fields of the WAL header the extension uses.
    WalHeader, HEADER {
        page_size: 8,
        /// The salts of the current WAL generation: every valid frame header repeats them.
        salt1: 16,
        salt2: 20,
    }
}

be32_header! {
    /// The fields of a frame header the extension uses.
    FrameHeader, FRAME_HEADER {
        /// The page the frame holds an image of (1-based).
        pgno: 0,
        /// The database size in pages after the commit this frame ends; 0 for a frame that does
        /// not end a commit.
        commit_size: 4,
        salt1: 8,
        salt2: 12,
    }
}

impl FrameHeader {
    /// Whether the frame ends a commit.
    pub fn is_commit(&self) -> bool {
        self.commit_size != 0
    }

    /// Whether the frame belongs to the WAL generation of `salts`.
    pub fn has_salts(&self, salt1: u32, salt2: u32) -> bool {
        self.salt1 == salt1 && self.salt2 == salt2
    }
}

/// File offset of the header of frame `index` (1-based, as SQLite counts frames).
pub fn frame_offset(index: u32) -> u64 {
    HEADER + u64::from(index.saturating_sub(1)) * FRAME
}

/// The 1-based index of the frame whose header starts at `off`, or `None` when no frame header
/// starts there.
pub fn frame_at(off: u64) -> Option<u32> {
    let rel = off.checked_sub(HEADER)?;
    rel.is_multiple_of(FRAME)
        .then(|| u32::try_from(rel / FRAME + 1).ok())
        .flatten()
}

/// The 1-based index of the frame whose page a write at `off` of `len` bytes is, or `None` when
/// it is no frame's page (SQLite writes a frame's header and its page as two writes).
pub fn frame_of_page(off: u64, len: usize) -> Option<u32> {
    if len != PAGE_SIZE {
        return None;
    }
    frame_at(off.checked_sub(FRAME_HEADER)?)
}

/// Whether page 1 of a database keeps it in WAL mode with 4 KiB pages: the database header's
/// page size (bytes 16-17) is 4096 and its file format write and read versions (bytes 18, 19)
/// are 2, SQLite's mark of WAL mode. A page too short to hold the header does not.
pub fn keeps_wal_and_4k(page1: &[u8]) -> bool {
    page1.get(16..20).is_some_and(|h| {
        let page_size = u16::from_be_bytes([h[0], h[1]]);
        usize::from(page_size) == PAGE_SIZE && h[2] == 2 && h[3] == 2
    })
}

/// Bytes of one copy of the WAL-index header; the `-shm` file starts with two copies.
pub const INDEX_HEADER_BYTES: usize = 48;

/// The WAL-index header (wal.c's `WalIndexHdr`, in the host's byte order) with its change
/// counter moved on and its checksum made again, or `None` when it is not initialized or its
/// checksum does not hold (SQLite rebuilds such a header itself). Layout: iVersion u32,
/// unused u32, iChange u32, isInit u8, bigEndCksum u8, szPage u16, mxFrame u32, nPage u32,
/// aFrameCksum 2×u32, aSalt 2×u32, aCksum 2×u32 over the first 40 bytes.
///
/// With an empty WAL (`mxFrame` 0) `nPage` is set to 0, which tells SQLite to take the size
/// of the database from the file: the caller changed the file.
pub fn bump_index_header(hdr: &[u8; INDEX_HEADER_BYTES]) -> Option<[u8; INDEX_HEADER_BYTES]> {
    let word = |h: &[u8; INDEX_HEADER_BYTES], at: usize| {
        u32::from_ne_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])
    };
    if hdr[12] == 0 || index_checksum(hdr) != (word(hdr, 40), word(hdr, 44)) {
        return None;
    }
    let mut out = *hdr;
    let change = word(hdr, 8).wrapping_add(1);
    out[8..12].copy_from_slice(&change.to_ne_bytes());
    if word(hdr, 16) == 0 {
        out[20..24].copy_from_slice(&0u32.to_ne_bytes());
    }
    let (c0, c1) = index_checksum(&out);
    out[40..44].copy_from_slice(&c0.to_ne_bytes());
    out[44..48].copy_from_slice(&c1.to_ne_bytes());
    Some(out)
}

/// SQLite's WAL checksum over the header's first 40 bytes, read in the host's byte order (the
/// "native" form wal.c uses for the index header).
fn index_checksum(hdr: &[u8; INDEX_HEADER_BYTES]) -> (u32, u32) {
    let (mut s1, mut s2) = (0u32, 0u32);
    for pair in hdr[..40].chunks_exact(8) {
        let a = u32::from_ne_bytes([pair[0], pair[1], pair[2], pair[3]]);
        let b = u32::from_ne_bytes([pair[4], pair[5], pair[6], pair[7]]);
        s1 = s1.wrapping_add(a).wrapping_add(s2);
        s2 = s2.wrapping_add(b).wrapping_add(s1);
    }
    (s1, s2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    // The first bytes of a `-wal` SQLite 3 wrote for `PRAGMA page_size=4096; PRAGMA
    // journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES ('hello')`: the header, and
    // the headers of its three frames (page 1, then page 2 ending the CREATE TABLE's commit,
    // then page 2 ending the INSERT's).
    const WAL_HEADER_BYTES: &str =
        "377f0682002de21800001000000000002043d33a1cd177940fba46335c19eef4";
    const FRAME_HEADERS: [&str; 3] = [
        "00000001000000002043d33a1cd177941be4c847277b8214",
        "00000002000000022043d33a1cd1779404c153650e86ad8b",
        "00000002000000022043d33a1cd1779456d8c21480a0dfbd",
    ];

    #[test]
    fn a_real_wal_header_reads_back() {
        let h = WalHeader::parse(&hex(WAL_HEADER_BYTES)).expect("32 bytes");
        assert_eq!(
            h,
            WalHeader {
                page_size: 4096,
                salt1: 0x2043_d33a,
                salt2: 0x1cd1_7794,
            }
        );
        assert_eq!(WalHeader::parse(&hex(WAL_HEADER_BYTES)[..31]), None);
    }

    #[test]
    fn real_frame_headers_read_back_with_their_generation_and_commits() {
        let h = WalHeader::parse(&hex(WAL_HEADER_BYTES)).expect("32 bytes");
        let frames: Vec<FrameHeader> = FRAME_HEADERS
            .iter()
            .map(|f| FrameHeader::parse(&hex(f)).expect("24 bytes"))
            .collect();
        assert_eq!(
            frames
                .iter()
                .map(|f| (f.pgno, f.commit_size))
                .collect::<Vec<_>>(),
            vec![(1, 0), (2, 2), (2, 2)]
        );
        assert!(frames.iter().all(|f| f.has_salts(h.salt1, h.salt2)));
        assert!(!frames[0].is_commit() && frames[1].is_commit());
        assert_eq!(FrameHeader::parse(&hex(FRAME_HEADERS[0])[..23]), None);
    }

    // The first copy of the WAL-index header in the `-shm` of the database above, as SQLite
    // 3.40 on x86-64 wrote it (host byte order: little-endian).
    const INDEX_HEADER: &str = "18e22d0000000000020000000100001003000000020000008f1516885075dee5c7dbd7077ca0773f9c83fa83113b2a85";

    #[cfg(target_endian = "little")]
    #[test]
    fn a_real_wal_index_header_gets_a_new_change_counter_and_a_checksum_that_holds() {
        let mut h = [0u8; INDEX_HEADER_BYTES];
        h.copy_from_slice(&hex(INDEX_HEADER));
        assert_eq!(
            index_checksum(&h),
            (0x83fa_839c, 0x852a_3b11),
            "the checksum SQLite wrote"
        );
        let b = bump_index_header(&h).expect("initialized");
        assert_eq!(&b[8..12], &3u32.to_le_bytes(), "iChange 2 -> 3");
        assert_eq!(
            &b[20..24],
            &2u32.to_le_bytes(),
            "nPage kept: the WAL has frames"
        );
        assert_eq!(&b[..8], &h[..8]);
        assert_eq!(&b[12..20], &h[12..40][..8]);
        assert_eq!(
            bump_index_header(&b).map(|c| c[8]),
            Some(4),
            "its checksum holds"
        );
        let mut broken = h;
        broken[30] ^= 1;
        assert_eq!(
            bump_index_header(&broken),
            None,
            "a bad checksum is left alone"
        );
        let mut empty = h;
        empty[12] = 0;
        assert_eq!(bump_index_header(&empty), None, "not initialized");
        let mut no_frames = h;
        no_frames[16..20].copy_from_slice(&[0; 4]);
        let (c0, c1) = index_checksum(&no_frames);
        no_frames[40..44].copy_from_slice(&c0.to_ne_bytes());
        no_frames[44..48].copy_from_slice(&c1.to_ne_bytes());
        let b = bump_index_header(&no_frames).expect("initialized");
        assert_eq!(
            &b[20..24],
            &[0; 4],
            "an empty WAL takes the size from the file"
        );
    }

    #[test]
    fn frame_positions() {
        assert_eq!(frame_offset(1), 32);
        assert_eq!(frame_offset(3), 32 + 2 * 4120);
        assert_eq!(frame_at(32), Some(1));
        assert_eq!(frame_at(32 + 2 * 4120), Some(3));
        assert_eq!(frame_at(0), None);
        assert_eq!(frame_at(56), None);
        assert_eq!(frame_of_page(56, 4096), Some(1));
        assert_eq!(frame_of_page(56 + 4120, 4096), Some(2));
        assert_eq!(frame_of_page(56, 24), None);
        assert_eq!(frame_of_page(32, 4096), None);
        assert_eq!(frame_of_page(0, 4096), None);
        assert_eq!(frame_of_page(8, 4096), None);
    }

    #[test]
    fn page_one_says_whether_the_database_stays_in_wal_mode() {
        let mut p1 = vec![0u8; 100];
        p1[..16].copy_from_slice(b"SQLite format 3\0");
        p1[16..20].copy_from_slice(&[0x10, 0x00, 2, 2]);
        assert!(keeps_wal_and_4k(&p1));
        assert!(!keeps_wal_and_4k(&p1[..19]), "too short to say");
        p1[18] = 1;
        assert!(!keeps_wal_and_4k(&p1), "rollback journal");
        p1[16..20].copy_from_slice(&[0x20, 0x00, 2, 2]);
        assert!(!keeps_wal_and_4k(&p1), "8 KiB pages");
    }
}
