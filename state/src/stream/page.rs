//! The cold-index page: the byte layout of one page of a stream's cold history in the object
//! store (docs/cold-tier.md, "Cold-index pages", layout version 1). A page lists which object
//! ranges hold the stream bytes of its fixed offset range; it is checked whole (magic, version,
//! checksum, identity, tiling) before any entry is used, so a torn or corrupt page is refused
//! rather than served.

use std::ops::Range;
use std::sync::Arc;

/// A piece of a read that must be fetched from the object store: `object`'s bytes `range`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdPiece {
    pub object: Arc<str>,
    pub range: Range<u64>,
}

/// What replicated state keeps of a stream's paged cold history: pages `[first, sealed)`,
/// page `p` covering stream offsets `[p * page_bytes, (p + 1) * page_bytes)` and stored at
/// [`key`](Self::key). Its size does not depend on how long the history is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ColdIndex {
    /// Key prefix of the pages: `{bucket}/cold-index/g{group}/{incarnation:016x}/`.
    pub prefix: Arc<str>,
    pub incarnation: u64,
    pub page_bytes: u64,
    /// The first page not yet collected by retention.
    pub first: u64,
    /// Pages below this one are sealed in the object store.
    pub sealed: u64,
    /// Whether the chunk crossing [`end`](Self::end) was split there, so that offset is not an
    /// append boundary.
    pub split: bool,
}

impl ColdIndex {
    /// The offset where the paged history ends and the state's own chunks begin.
    pub fn end(&self) -> u64 {
        self.sealed * self.page_bytes
    }

    pub fn key(&self, page: u64) -> String {
        format!("{}{page:010}", self.prefix)
    }

    pub fn id(&self, page: u64) -> PageId {
        PageId {
            incarnation: self.incarnation,
            page,
            page_bytes: self.page_bytes,
        }
    }

    /// The keys of the pages still kept: `[first, sealed)`.
    pub fn keys(&self) -> impl Iterator<Item = String> + '_ {
        (self.first..self.sealed).map(|p| self.key(p))
    }
}

/// The paged part of a read plan: `range` is in the pages of the index whose `prefix` this is;
/// the server fetches the pages and turns them into [`ColdPiece`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paged {
    pub prefix: Arc<str>,
    pub id_incarnation: u64,
    pub page_bytes: u64,
    pub range: Range<u64>,
}

impl Paged {
    pub fn key(&self, page: u64) -> String {
        format!("{}{page:010}", self.prefix)
    }

    pub fn id(&self, page: u64) -> PageId {
        PageId {
            incarnation: self.id_incarnation,
            page,
            page_bytes: self.page_bytes,
        }
    }
}

/// The spec's page: 64 MiB of stream offsets.
pub const PAGE_BYTES: u64 = 64 << 20;

const MAGIC: &[u8; 4] = b"UCIP";
/// The layout this build writes and reads.
pub const PAGE_VERSION: u16 = 1;
const HEADER: usize = 36;
const TRAILER: usize = 4;
/// Bit 0: the first entry continues a chunk of the page before (its start is not an append
/// boundary). Bit 1: the last entry continues into the page after.
const FIRST_CONTINUES: u16 = 1;
const LAST_CONTINUES: u16 = 2;

/// One range of a page: stream bytes `[start, end)` are `object`'s bytes `[at, at + end - start)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageEntry {
    pub start: u64,
    pub end: u64,
    pub object: Arc<str>,
    pub at: u64,
}

/// A decoded (or to-be-encoded) page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub incarnation: u64,
    pub page: u64,
    pub page_bytes: u64,
    pub first_continues: bool,
    pub last_continues: bool,
    pub entries: Vec<PageEntry>,
}

/// What a page must be to be used: the identity its key promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageId {
    pub incarnation: u64,
    pub page: u64,
    pub page_bytes: u64,
}

/// A page that cannot be used. Never served: a read that needs it fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("{len} bytes is too short for a cold-index page")]
    Truncated { len: usize },
    #[error("not a cold-index page (bad magic)")]
    Magic,
    #[error(
        "cold-index page layout version {0} is not one this build reads (it reads {PAGE_VERSION})"
    )]
    Version(u16),
    #[error("cold-index page checksum mismatch (torn or corrupt)")]
    Checksum,
    #[error("cold-index page entries do not decode: {0}")]
    Entries(&'static str),
    #[error("cold-index page is for {found:?}, its key says {want:?}")]
    Identity { found: PageId, want: PageId },
    #[error("cold-index page entries do not tile its range: {0}")]
    Tiling(String),
}

impl Page {
    pub fn id(&self) -> PageId {
        PageId {
            incarnation: self.incarnation,
            page: self.page,
            page_bytes: self.page_bytes,
        }
    }

    /// Stream offsets the page covers: its first entry's start to the page's end.
    pub fn covered(&self) -> Range<u64> {
        let end = (self.page + 1) * self.page_bytes;
        self.entries.first().map_or(end..end, |e| e.start..end)
    }

    /// Objects whose bytes this page lists, in order, each once.
    pub fn objects(&self) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = Vec::new();
        for e in &self.entries {
            if out.last() != Some(&e.object) {
                out.push(e.object.clone());
            }
        }
        out
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            HEADER
                + TRAILER
                + self
                    .entries
                    .iter()
                    .map(|e| 26 + e.object.len())
                    .sum::<usize>(),
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&PAGE_VERSION.to_le_bytes());
        let flags = if self.first_continues {
            FIRST_CONTINUES
        } else {
            0
        } | if self.last_continues {
            LAST_CONTINUES
        } else {
            0
        };
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.incarnation.to_le_bytes());
        out.extend_from_slice(&self.page.to_le_bytes());
        out.extend_from_slice(&self.page_bytes.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.start.to_le_bytes());
            out.extend_from_slice(&e.end.to_le_bytes());
            out.extend_from_slice(&e.at.to_le_bytes());
            let key = e.object.as_bytes();
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(key);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and checks a page against the identity its key promises.
    pub fn decode(bytes: &[u8], want: PageId) -> Result<Page, PageError> {
        if bytes.len() < HEADER + TRAILER {
            return Err(PageError::Truncated { len: bytes.len() });
        }
        if &bytes[..4] != MAGIC {
            return Err(PageError::Magic);
        }
        let (body, trailer) = bytes.split_at(bytes.len() - TRAILER);
        let mut r = Reader { b: body, at: 4 };
        let version = r.u16()?;
        if version != PAGE_VERSION {
            return Err(PageError::Version(version));
        }
        let crc = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
        if crc32fast::hash(body) != crc {
            return Err(PageError::Checksum);
        }
        let flags = r.u16()?;
        let found = PageId {
            incarnation: r.u64()?,
            page: r.u64()?,
            page_bytes: r.u64()?,
        };
        if found != want {
            return Err(PageError::Identity { found, want });
        }
        let count = r.u32()? as usize;
        let mut entries = Vec::with_capacity(count.min(body.len() / 26));
        for _ in 0..count {
            let start = r.u64()?;
            let end = r.u64()?;
            let at = r.u64()?;
            let len = r.u16()? as usize;
            let key = std::str::from_utf8(r.take(len)?)
                .map_err(|_| PageError::Entries("an object key is not UTF-8"))?;
            entries.push(PageEntry {
                start,
                end,
                object: Arc::from(key),
                at,
            });
        }
        if r.at != body.len() {
            return Err(PageError::Entries("bytes after the last entry"));
        }
        let page = Page {
            incarnation: found.incarnation,
            page: found.page,
            page_bytes: found.page_bytes,
            first_continues: flags & FIRST_CONTINUES != 0,
            last_continues: flags & LAST_CONTINUES != 0,
            entries,
        };
        page.check_tiling()?;
        Ok(page)
    }

    /// Entries are non-empty, contiguous, inside the page's range, and end at its end.
    fn check_tiling(&self) -> Result<(), PageError> {
        let lo = self.page * self.page_bytes;
        let hi = lo + self.page_bytes;
        let Some(first) = self.entries.first() else {
            return Err(PageError::Tiling("no entries".into()));
        };
        let mut at = first.start;
        if at < lo {
            return Err(PageError::Tiling(format!(
                "entry starts at {at}, before {lo}"
            )));
        }
        for e in &self.entries {
            if e.start != at || e.end <= e.start {
                return Err(PageError::Tiling(format!(
                    "entry [{}, {}) where [{at}, ...) was due",
                    e.start, e.end
                )));
            }
            at = e.end;
        }
        if at != hi {
            return Err(PageError::Tiling(format!("entries end at {at}, not {hi}")));
        }
        Ok(())
    }

    /// The object ranges holding `range` (which must lie within [`covered`](Self::covered)),
    /// in order.
    pub fn pieces(&self, range: Range<u64>) -> Vec<ColdPiece> {
        let mut out = Vec::new();
        for e in &self.entries {
            if e.end <= range.start || e.start >= range.end {
                continue;
            }
            let lo = range.start.max(e.start);
            let hi = range.end.min(e.end);
            out.push(ColdPiece {
                object: e.object.clone(),
                range: e.at + (lo - e.start)..e.at + (hi - e.start),
            });
        }
        out
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PageError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.b.len())
            .ok_or(PageError::Entries("an entry runs past the end"))?;
        let out = &self.b[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16, PageError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, PageError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, PageError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Page {
        Page {
            incarnation: 7,
            page: 2,
            page_bytes: 100,
            first_continues: true,
            last_continues: true,
            entries: vec![
                PageEntry {
                    start: 200,
                    end: 230,
                    object: Arc::from("b/g1/x"),
                    at: 70,
                },
                PageEntry {
                    start: 230,
                    end: 300,
                    object: Arc::from("b/g1/y"),
                    at: 0,
                },
            ],
        }
    }

    #[test]
    fn a_page_round_trips_and_answers_ranges() {
        let p = sample();
        let bytes = p.encode();
        let back = Page::decode(&bytes, p.id()).expect("decode");
        assert_eq!(back, p);
        assert_eq!(back.covered(), 200..300);
        let pieces = back.pieces(220..240);
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].range, 90..100);
        assert_eq!(pieces[1].range, 0..10);
    }

    #[test]
    fn a_torn_corrupt_misplaced_or_newer_page_is_refused() {
        let p = sample();
        let bytes = p.encode();
        for cut in [0, 10, bytes.len() - 1] {
            assert!(Page::decode(&bytes[..cut], p.id()).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[HEADER + 3] ^= 1;
        assert_eq!(Page::decode(&flipped, p.id()), Err(PageError::Checksum));
        let mut other = p.id();
        other.page = 3;
        assert!(matches!(
            Page::decode(&bytes, other),
            Err(PageError::Identity { .. })
        ));
        let mut newer = bytes.clone();
        newer[4] = 2;
        assert_eq!(Page::decode(&newer, p.id()), Err(PageError::Version(2)));
        let mut gap = p.clone();
        gap.entries[1].start = 231;
        assert!(matches!(
            Page::decode(&gap.encode(), p.id()),
            Err(PageError::Tiling(_))
        ));
    }
}
