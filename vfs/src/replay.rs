//! Catching a local file up with the stream: install the latest snapshot, then apply the
//! tail's commit frames page by page, reading at most 8 MiB at a time so memory stays bounded.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;

use ursula_protocol::headers as h;
use ursula_protocol::incarnation::Incarnation;
use ursula_protocol::offset::Offset;

use crate::client::Answer;
use crate::client::Attempt;
use crate::client::Client;
use crate::client::Method;
use crate::client::Request;
use crate::error::Kind;
use crate::error::VfsError;
use crate::format;
use crate::format::FrameReader;
use crate::format::PAGE_SIZE;
use crate::format::Record;
use crate::format::offset_text;
use crate::retry::Retry;

/// Prefix of errors that a fresh HEAD may cure: retention moved, or the snapshot was replaced.
pub const MOVED: &str = "the stream moved on during catch-up";

/// What a catch-up saw on the way.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Offset after the last frame applied; `None` before the stream's first frame.
    pub offset: Option<Offset>,
    pub max_epoch: u64,
    /// The last claim read: its epoch, nonce, and the offset after it (`None` until the read
    /// that holds it ended).
    pub last_claim: Option<(u64, [u8; 16], Option<Offset>)>,
    pub frame_bytes: u64,
    pub db_pages: Option<u32>,
}

pub fn open_db(path: &Path) -> Result<File, VfsError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| {
            VfsError::new(
                Kind::LocalSetup,
                format!("cannot open {}: {e}", path.display()),
            )
        })
}

fn local_err(e: std::io::Error) -> VfsError {
    VfsError::new(
        Kind::LocalDamage,
        format!("writing the local file failed: {e}"),
    )
}

/// Applies one commit's page images and size.
pub fn apply_commit(f: &File, db_pages: u32, pages: &[(u32, Vec<u8>)]) -> Result<(), VfsError> {
    for (pgno, data) in pages {
        if *pgno <= db_pages {
            f.write_all_at(data, u64::from(pgno - 1) * PAGE_SIZE as u64)
                .map_err(local_err)?;
        }
    }
    f.set_len(u64::from(db_pages) * PAGE_SIZE as u64)
        .map_err(local_err)
}

/// One read request, retried within the budget for answers that may clear (no answer, 429,
/// 5xx, 307); a refused connection fails at once.
pub fn get(url: &str, incarnation: Option<Incarnation>, long: bool) -> Result<Answer, VfsError> {
    let mut retry = Retry::start();
    let mut headers = Vec::new();
    if let Some(inc) = incarnation {
        headers.push((h::STREAM_INCARNATION, inc.to_string()));
    }
    loop {
        let req = Request {
            headers: headers.clone(),
            long,
            ..Request::new(Method::Get, url)
        };
        let why = match Client::global().send(&req) {
            Attempt::Answered(a) if !(a.status == 429 || a.status == 307 || a.status >= 500) => {
                return Ok(a);
            }
            Attempt::Answered(a) => format!("HTTP {}", a.status),
            Attempt::NeverSent(r) | Attempt::Refused(r) => {
                return Err(VfsError::new(
                    Kind::Unreachable,
                    format!("cannot reach the stream: {r}"),
                ));
            }
            Attempt::NoAnswer(r) => r,
        };
        if retry.spent() {
            return Err(VfsError::new(
                Kind::Unavailable,
                format!("the stream did not answer a read: {why}"),
            ));
        }
        retry.back_off();
    }
}

/// A read from after `from`, or from the stream's start (`offset=-1`) for `None`.
fn with_offset(url: &str, from: Option<Offset>) -> String {
    let offset = offset_text::to_text(from);
    format!("{url}?offset={offset}&consistency=leader")
}

/// Applies frames from `from` (`None`: the stream's start) until the stream says the reader is
/// up to date. `until`: stop once this offset is reached (used after a claim).
pub fn replay(
    db: &File,
    url: &str,
    incarnation: Incarnation,
    from: Option<Offset>,
    until: Option<Offset>,
) -> Result<Seen, VfsError> {
    let mut seen = Seen {
        offset: from,
        ..Seen::default()
    };
    let mut frames = FrameReader::default();
    let mut read_at = from;
    loop {
        let a = get(&with_offset(url, read_at), Some(incarnation), false)?;
        match a.status {
            200 => {}
            410 => {
                return Err(VfsError::new(
                    Kind::StreamState,
                    format!("{MOVED}: retention passed the offset being replayed"),
                ));
            }
            412 => {
                return Err(VfsError::new(
                    Kind::StreamState,
                    "the stream was deleted and recreated during attach",
                ));
            }
            404 => {
                return Err(VfsError::new(
                    Kind::NotFound,
                    "the stream disappeared during attach",
                ));
            }
            s => {
                return Err(VfsError::new(
                    Kind::StreamState,
                    format!("a read of the stream answered {s}"),
                ));
            }
        }
        let next = next_offset(&a)?;
        let up_to_date = a.header(h::STREAM_UP_TO_DATE).is_some();
        frames.push(&a.body);
        while let Some((record, len)) = frames
            .next(&offset_text::to_text(seen.offset))
            .map_err(format_err)?
        {
            seen.frame_bytes += len as u64;
            match record {
                Record::Commit { db_pages, pages } => {
                    apply_commit(db, db_pages, &pages)?;
                    seen.db_pages = Some(db_pages);
                }
                Record::Claim { epoch, nonce } => {
                    seen.max_epoch = seen.max_epoch.max(epoch);
                    seen.last_claim = Some((epoch, nonce, None));
                }
            }
            if frames.pending() == 0 {
                // Frame boundary at a known offset: the end of this read.
                seen.offset = Some(next);
                if let Some(c) = seen.last_claim.as_mut()
                    && c.2.is_none()
                {
                    c.2 = Some(next);
                }
            }
        }
        read_at = Some(next);
        let reached = until.is_some_and(|u| next >= u);
        if (up_to_date || reached) && frames.pending() == 0 {
            seen.offset = Some(next);
            return Ok(seen);
        }
        if up_to_date && frames.pending() > 0 {
            return Err(VfsError::new(
                Kind::StreamState,
                "the stream ends inside a frame",
            ));
        }
    }
}

/// A read's `Stream-Next-Offset`, which every read answer carries.
pub fn next_offset(a: &Answer) -> Result<Offset, VfsError> {
    a.offset(h::STREAM_NEXT_OFFSET)?.ok_or_else(|| {
        VfsError::new(
            Kind::StreamState,
            "a read answered without Stream-Next-Offset",
        )
    })
}

pub fn format_err(e: format::FormatError) -> VfsError {
    match e {
        format::FormatError::UnknownVersion(..) => VfsError::new(Kind::Unsupported, e.to_string()),
        _ => VfsError::new(Kind::StreamState, e.to_string()),
    }
}

/// Downloads and writes the snapshot at `offset` over the file; returns its header.
pub fn install_snapshot(
    db: &File,
    url: &str,
    incarnation: Incarnation,
    offset: Offset,
) -> Result<format::SnapshotHeader, VfsError> {
    let body = fetch_snapshot(url, incarnation, offset)?;
    write_snapshot(db, &body)
}

/// The body of the snapshot at `offset`.
pub fn fetch_snapshot(
    url: &str,
    incarnation: Incarnation,
    offset: Offset,
) -> Result<Vec<u8>, VfsError> {
    let a = get(&format!("{url}/snapshot/{offset}"), Some(incarnation), true)?;
    if a.status == 404 {
        // A newer publish replaced it.
        return Err(VfsError::new(
            Kind::StreamState,
            format!("{MOVED}: snapshot {offset} was replaced"),
        ));
    }
    if a.status != 200 {
        return Err(VfsError::new(
            Kind::StreamState,
            format!("reading snapshot {offset} answered {}", a.status),
        ));
    }
    Ok(a.body)
}

/// Checks a snapshot body whole (header, image size and checksum) without writing anything:
/// a replica that is read from checks before it overwrites.
pub fn check_snapshot(body: &[u8]) -> Result<(), VfsError> {
    each_snapshot_page(body, |_, _| Ok(())).map(|_| ())
}

/// Writes a snapshot body's image over the file; returns its header.
pub fn write_snapshot(db: &File, body: &[u8]) -> Result<format::SnapshotHeader, VfsError> {
    let h = each_snapshot_page(body, |pgno, page| {
        db.write_all_at(page, u64::from(pgno) * PAGE_SIZE as u64)
            .map_err(local_err)
    })?;
    db.set_len(u64::from(h.pages) * PAGE_SIZE as u64)
        .map_err(local_err)?;
    Ok(h)
}

/// Decodes a snapshot body's image page by page, handing each to `page` with its index, and
/// checks the image's size and checksum; returns the body's header.
fn each_snapshot_page(
    body: &[u8],
    mut page: impl FnMut(u32, &[u8]) -> Result<(), VfsError>,
) -> Result<format::SnapshotHeader, VfsError> {
    let mut r = body;
    let h = format::read_snapshot_header(&mut r).map_err(format_err)?;
    let mut dec = zstd::stream::read::Decoder::new(r)
        .map_err(|e| VfsError::new(Kind::StreamState, format!("snapshot: {e}")))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; PAGE_SIZE];
    for pgno in 0..h.pages {
        dec.read_exact(&mut buf).map_err(|e| {
            VfsError::new(Kind::StreamState, format!("snapshot image is short: {e}"))
        })?;
        hasher.update(&buf);
        page(pgno, &buf)?;
    }
    if hasher.finalize() != h.crc {
        return Err(VfsError::new(
            Kind::StreamState,
            "snapshot image checksum mismatch",
        ));
    }
    Ok(h)
}
