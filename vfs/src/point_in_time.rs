//! Point-in-time: the commit points of a stream, the base a point is rebuilt from, and the
//! replay that stops at a point (`docs/sqlite-vfs.md`, "Point-in-time attaches").
//!
//! A commit point is the stream offset right after a commit frame: what `status(file).offset`
//! reports after that commit. The database "at" an offset is the one after the last commit
//! whose point is at or before it. Offsets are byte positions of the stored bytes, so a frame
//! read from position `p` with `len` bytes ends at `p + len`; every read checks that the
//! server's `Stream-Next-Offset` agrees, since nothing here works if it does not.
//!
//! Only the latest snapshot is readable (a publish replaces the previous one, and the owner then
//! moves retention to it), so a point is rebuilt from the latest snapshot when that is at or
//! before it, else from the stream's start while that is still readable. Anything else is below
//! the earliest reachable point and refused with [`Kind::Retained`].

use std::fs::File;

use serde_json::json;
use ursula_protocol::headers as h;
use ursula_protocol::incarnation::Incarnation;
use ursula_protocol::offset::Offset;

use crate::error::Kind;
use crate::error::VfsError;
use crate::format::FrameReader;
use crate::format::Record;
use crate::format::offset_text;
use crate::replay;

/// The listing's page size when the caller names none.
pub const DEFAULT_LIMIT: u64 = 1000;

/// What a HEAD of the stream said, as far as a point needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamView {
    pub incarnation: Incarnation,
    /// The tail; `None` when the server did not say, which counts as an empty stream.
    pub tail: Option<Offset>,
    /// The latest snapshot's offset.
    pub snapshot: Option<Offset>,
}

impl StreamView {
    fn tail_or_start(&self) -> Offset {
        self.tail.unwrap_or_default()
    }
}

/// The phrase the retained error names the earliest point with; the npm package reads the
/// offset after it into the error's `earliest` property.
pub const EARLIEST: &str = "the earliest reachable point is";

/// Refuses an offset past the stream's tail: no commit there exists yet.
pub fn check_within_tail(at: Option<Offset>, view: &StreamView) -> Result<(), VfsError> {
    let tail = view.tail_or_start();
    match at {
        Some(o) if o > tail => Err(VfsError::new(
            Kind::InvalidArgument,
            format!("at {o} is past the stream's tail {tail}: no commit is there yet"),
        )),
        _ => Ok(()),
    }
}

/// The refusal of a point below the earliest reachable one.
fn retained(at: Option<Offset>, earliest: Offset) -> VfsError {
    VfsError::new(
        Kind::Retained,
        format!(
            "at {} is before what the stream can rebuild: retention trimmed the history before its latest snapshot, so {EARLIEST} {earliest}; open at that offset or later",
            offset_text::to_text(at)
        ),
    )
}

/// A stream whose start is trimmed and that has no snapshot: no point can be rebuilt. Retention
/// needs a snapshot at or after it, so only a server that broke that rule gets here.
fn unreachable_history() -> VfsError {
    VfsError::new(
        Kind::StreamState,
        "the stream's start is trimmed and it has no snapshot: no point of it can be rebuilt",
    )
}

/// Whether the stream's start can still be read: `offset=-1` answers 200, not 410.
fn start_readable(url: &str, incarnation: Incarnation) -> Result<bool, VfsError> {
    let a = replay::get(
        &format!("{url}?offset=-1&max_bytes=1&consistency=leader"),
        Some(incarnation),
        false,
    )?;
    match a.status {
        200 => Ok(true),
        410 => Ok(false),
        s => Err(read_failed(s)),
    }
}

fn read_failed(status: u16) -> VfsError {
    match status {
        410 => VfsError::new(
            Kind::StreamState,
            format!("{}: retention passed the offset being read", replay::MOVED),
        ),
        412 => VfsError::new(
            Kind::StreamState,
            "the stream was deleted and recreated while it was read",
        ),
        404 => VfsError::new(Kind::NotFound, "the stream disappeared while it was read"),
        s => VfsError::new(
            Kind::StreamState,
            format!("a read of the stream answered {s}"),
        ),
    }
}

/// One whole frame, and the offset right after it.
struct Framed {
    record: Record,
    end: Offset,
    len: u64,
}

/// Reads whole frames from `from` (`None`: the stream's start, position 0) up to `until`, and
/// hands each to `visit` until it returns `false`. Bytes of a frame that ends after `until` are
/// not read to its end: that frame is past the point.
fn scan(
    url: &str,
    incarnation: Incarnation,
    from: Option<Offset>,
    until: Offset,
    mut visit: impl FnMut(Framed) -> Result<bool, VfsError>,
) -> Result<(), VfsError> {
    let mut read_at = from.unwrap_or_default().0;
    let mut frame_start = read_at;
    let mut frames = FrameReader::default();
    while read_at < until.0 {
        let offset = if from.is_none() && read_at == 0 {
            offset_text::NONE.to_owned()
        } else {
            Offset(read_at).to_string()
        };
        // max_bytes keeps the read from going past the point.
        let a = replay::get(
            &format!(
                "{url}?offset={offset}&max_bytes={}&consistency=leader",
                until.0 - read_at
            ),
            Some(incarnation),
            false,
        )?;
        if a.status != 200 {
            return Err(read_failed(a.status));
        }
        let next = a.offset(h::STREAM_NEXT_OFFSET)?.ok_or_else(|| {
            VfsError::new(
                Kind::StreamState,
                "a read answered without Stream-Next-Offset",
            )
        })?;
        let len = a.body.len() as u64;
        if next.0 != read_at + len {
            return Err(VfsError::new(
                Kind::StreamState,
                format!(
                    "a read from {} answered {len} bytes and Stream-Next-Offset {next}: offsets are not byte positions here, which point-in-time attaches rely on",
                    Offset(read_at)
                ),
            ));
        }
        if len == 0 {
            return Err(VfsError::new(
                Kind::StreamState,
                format!(
                    "the stream ended at {next}, before {until} that its HEAD named as reachable"
                ),
            ));
        }
        frames.push(&a.body);
        read_at = next.0;
        while let Some((record, flen)) = frames
            .next(&Offset(frame_start).to_string())
            .map_err(replay::format_err)?
        {
            frame_start += flen as u64;
            let framed = Framed {
                record,
                end: Offset(frame_start),
                len: flen as u64,
            };
            if !visit(framed)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// What a rebuild to a point produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Built {
    /// The commit point the file now holds: the last commit replayed, else the snapshot's
    /// offset, else `None` (the empty database before the first commit).
    pub offset: Option<Offset>,
    /// The snapshot installed, if the rebuild started from one.
    pub installed: Option<Offset>,
    /// The highest epoch claimed before the point (the snapshot's, then the claims replayed).
    pub epoch: u64,
    /// Frame bytes replayed after the base.
    pub frame_bytes: u64,
}

/// Rebuilds `file` as the database was after the last commit at or before `at` (`None`: before
/// any commit). An error that starts with [`replay::MOVED`] may pass with a fresh HEAD.
pub fn build(
    file: &File,
    url: &str,
    view: &StreamView,
    at: Option<Offset>,
) -> Result<Built, VfsError> {
    check_within_tail(at, view)?;
    // Every round starts from an empty file: a round a moved stream cut short left pages.
    file.set_len(0).map_err(|e| {
        VfsError::new(
            Kind::LocalDamage,
            format!("cannot empty the local file: {e}"),
        )
    })?;
    let mut built = Built::default();
    let from = match view.snapshot.filter(|s| Some(*s) <= at) {
        Some(snap) => {
            let head = replay::install_snapshot(file, url, view.incarnation, snap)?;
            built.offset = Some(snap);
            built.installed = Some(snap);
            built.epoch = head.epoch;
            Some(snap)
        }
        None if start_readable(url, view.incarnation)? => None,
        None => {
            return Err(view
                .snapshot
                .map_or_else(unreachable_history, |s| retained(at, s)));
        }
    };
    let until = at.unwrap_or_default();
    scan(url, view.incarnation, from, until, |f| {
        built.frame_bytes += f.len;
        match f.record {
            Record::Commit { db_pages, pages } => {
                replay::apply_commit(file, db_pages, &pages)?;
                built.offset = Some(f.end);
            }
            Record::Claim { epoch, .. } => built.epoch = built.epoch.max(epoch),
        }
        Ok(true)
    })?;
    Ok(built)
}

/// One commit point of the listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPoint {
    pub offset: Offset,
    /// The epoch of the claim before it; `None` when the listing began at a snapshot and no
    /// claim came between it and this commit.
    pub epoch: Option<u64>,
    /// Pages the commit wrote.
    pub pages: u32,
    /// The database's size in pages after it.
    pub db_pages: u32,
    /// The frame's size on the stream.
    pub bytes: u64,
}

/// `ursula_commits`: the reachable commit points after `from`, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The earliest point an attach can rebuild: `None` (the stream's start) while it is
    /// readable, else the latest snapshot.
    pub earliest: Option<Offset>,
    pub tail: Offset,
    pub snapshot: Option<Offset>,
    pub commits: Vec<CommitPoint>,
    /// Commit points after the last one listed exist up to `tail`.
    pub more: bool,
}

impl Listing {
    pub fn to_json(&self) -> serde_json::Value {
        let commits: Vec<_> = self
            .commits
            .iter()
            .map(|c| {
                json!({
                    "offset": c.offset.to_string(),
                    "epoch": c.epoch,
                    "pages": c.pages,
                    "db_pages": c.db_pages,
                    "bytes": c.bytes,
                })
            })
            .collect();
        json!({
            "earliest": offset_text::to_text(self.earliest),
            "tail": self.tail.to_string(),
            "snapshot": offset_text::to_text(self.snapshot),
            "commits": commits,
            "more": self.more,
        })
    }
}

/// The reachable commit points whose offset is after `from`, up to the tail the HEAD named, at
/// most `limit` of them. An error that starts with [`replay::MOVED`] may pass with a fresh HEAD.
pub fn list(
    url: &str,
    view: &StreamView,
    from: Option<Offset>,
    limit: u64,
) -> Result<Listing, VfsError> {
    let readable = start_readable(url, view.incarnation)?;
    let earliest = match (readable, view.snapshot) {
        (true, _) => None,
        (false, Some(snap)) => Some(snap),
        (false, None) => return Err(unreachable_history()),
    };
    // From the snapshot when the history before it is trimmed, or when `from` is past it (a
    // snapshot's offset is a frame boundary); else from the start, the only other boundary known.
    let scan_from = view.snapshot.filter(|s| !readable || from >= Some(*s));
    let mut listing = Listing {
        earliest,
        tail: view.tail_or_start(),
        snapshot: view.snapshot,
        commits: Vec::new(),
        more: false,
    };
    let mut epoch = None;
    scan(
        url,
        view.incarnation,
        scan_from,
        listing.tail,
        |f| match f.record {
            Record::Claim { epoch: e, .. } => {
                epoch = Some(e);
                Ok(true)
            }
            Record::Commit { .. } if Some(f.end) <= from => Ok(true),
            Record::Commit { .. } if listing.commits.len() as u64 >= limit => {
                listing.more = true;
                Ok(false)
            }
            Record::Commit { db_pages, pages } => {
                listing.commits.push(CommitPoint {
                    offset: f.end,
                    epoch,
                    pages: pages.len() as u32,
                    db_pages,
                    bytes: f.len,
                });
                Ok(true)
            }
        },
    )?;
    Ok(listing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(tail: u64, snapshot: Option<u64>) -> StreamView {
        StreamView {
            incarnation: Incarnation::parse("0000000000000001").expect("incarnation"),
            tail: Some(Offset(tail)),
            snapshot: snapshot.map(Offset),
        }
    }

    #[test]
    fn an_offset_past_the_tail_is_refused_naming_the_tail() {
        let e = check_within_tail(Some(Offset(101)), &view(100, None)).expect_err("past");
        assert_eq!(e.kind, Kind::InvalidArgument);
        assert!(e.message.contains("00000000000000000100"), "{}", e.message);
        assert!(check_within_tail(Some(Offset(100)), &view(100, None)).is_ok());
        assert!(check_within_tail(None, &view(0, None)).is_ok());
    }

    #[test]
    fn the_retained_refusal_names_the_earliest_point_after_the_phrase() {
        let e = retained(Some(Offset(5)), Offset(4096));
        assert_eq!(e.kind, Kind::Retained);
        assert!(
            e.message
                .contains(&format!("{EARLIEST} 00000000000000004096;")),
            "{}",
            e.message
        );
    }

    #[test]
    fn the_listing_json_spells_offsets_as_the_server_does() {
        let l = Listing {
            earliest: None,
            tail: Offset(90),
            snapshot: None,
            commits: vec![CommitPoint {
                offset: Offset(90),
                epoch: Some(1),
                pages: 2,
                db_pages: 3,
                bytes: 60,
            }],
            more: false,
        };
        let j = l.to_json();
        assert_eq!(j["earliest"], "-1");
        assert_eq!(j["snapshot"], "-1");
        assert_eq!(j["tail"], "00000000000000000090");
        assert_eq!(j["commits"][0]["offset"], "00000000000000000090");
        assert_eq!(j["commits"][0]["epoch"], 1);
    }
}
