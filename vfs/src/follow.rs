//! The follower of a live read replica (`Mode::Follow`): after the attach caught the file up,
//! a thread long-polls the stream from the offset the file reflects and applies each whole
//! commit it reads, a batch at a time, inside the read gate ([`crate::gate`]): readers see the
//! file at commit boundaries only. It claims nothing and never writes the stream.
//!
//! A read the stream cannot answer now (no answer, 5xx, 429, 307, a refused connection) is
//! tried again with a backoff, from the same offset and with the bytes of a frame it holds
//! half of, for as long as the file stays attached. Retention past its offset installs the
//! latest snapshot, when there is one past that offset, and goes on from it. A stream deleted
//! or recreated, retention with no snapshot to go on from, or bytes that are not frames stop
//! the follower: the file is poisoned with the kind, and new read transactions fail.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use ursula_protocol::headers as h;
use ursula_protocol::incarnation::Incarnation;
use ursula_protocol::offset::Offset;

use crate::client::Answer;
use crate::client::Attempt;
use crate::client::Client;
use crate::client::Method;
use crate::client::Request;
use crate::db::Db;
use crate::error::Kind;
use crate::error::VfsError;
use crate::format::FrameReader;
use crate::format::Record;
use crate::format::offset_text;
use crate::local;
use crate::log;
use crate::registry::sibling;
use crate::replay;
use crate::sqlite_wal;

/// How long one long-poll waits at the tail. Short enough that a detached file's follower
/// notices within it and ends.
const POLL_MS: u64 = 5_000;

/// The longest pause between attempts while the stream cannot be read.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Bytes of one of the two copies of the WAL-index header at the start of the `-shm` file.
const WAL_INDEX_HEADER: usize = sqlite_wal::INDEX_HEADER_BYTES;

/// Starts the follower of an attached replica. Its state is the file's: it reads on from the
/// offset the attach left in `status`.
pub fn start(db: Arc<Db>) {
    db.health().following = true;
    let own = db.clone();
    let spawned = std::thread::Builder::new()
        .name("ursula-follow".into())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&own)));
            if let Err(p) = result {
                let message = log::panic_message(p.as_ref());
                log::panic("follower", p.as_ref());
                stop(
                    &own,
                    &VfsError::new(Kind::Internal, format!("the follower panicked: {message}")),
                );
            }
        });
    if let Err(e) = spawned {
        stop(
            &db,
            &VfsError::new(Kind::Internal, format!("cannot start the follower: {e}")),
        );
    }
}

/// Ends following with `e`: the file is poisoned, so new read transactions fail and `status`
/// names the kind.
fn stop(db: &Db, e: &VfsError) {
    db.health().following = false;
    db.poison(e.kind, &e.message);
}

struct Follower<'a> {
    db: &'a Db,
    file: File,
    incarnation: Incarnation,
    /// Where the next read starts: the end of the bytes read so far.
    read_at: Option<Offset>,
    frames: FrameReader,
}

fn run(db: &Db) {
    let incarnation = db.commit_state().sidecar.incarnation;
    let read_at = db.health().offset;
    let file = match replay::open_db(&db.path) {
        Ok(f) => f,
        Err(e) => return stop(db, &e),
    };
    let mut f = Follower {
        db,
        file,
        incarnation,
        read_at,
        frames: FrameReader::default(),
    };
    let mut backoff = Duration::from_millis(50);
    while !db.closed.load(Ordering::SeqCst) {
        match f.poll() {
            Ok(true) => backoff = Duration::from_millis(50),
            Ok(false) => {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => return stop(db, &e),
        }
    }
    db.health().following = false;
}

impl Follower<'_> {
    /// One long-poll. `Ok(false)`: the stream could not be read this time.
    fn poll(&mut self) -> Result<bool, VfsError> {
        let url = format!(
            "{}?live=long-poll&offset={}&timeout_ms={POLL_MS}",
            self.db.url,
            offset_text::to_text(self.read_at)
        );
        let req = Request {
            headers: vec![(h::STREAM_INCARNATION, self.incarnation.to_string())],
            long: true,
            ..Request::new(Method::Get, &url)
        };
        let a = match Client::global().send(&req) {
            Attempt::Answered(a) => a,
            Attempt::NeverSent(_) | Attempt::Refused(_) | Attempt::NoAnswer(_) => {
                return Ok(false);
            }
        };
        match a.status {
            200 => self.apply(&a).map(|()| true),
            204 => {
                let tail = a.offset(h::STREAM_NEXT_OFFSET)?;
                self.record_read(tail.or(self.read_at), true);
                Ok(true)
            }
            404 => Err(VfsError::new(
                Kind::NotFound,
                format!(
                    "the stream {} was deleted: this replica stopped following it at {}",
                    self.db.url,
                    offset_text::to_text(self.db.health().offset)
                ),
            )),
            412 => Err(recreated(&self.db.url)),
            // Past the tail: the stream was recreated (LP-9), or lost what it acknowledged.
            416 if self.recreated() => Err(recreated(&self.db.url)),
            416 => Err(VfsError::new(
                Kind::StreamState,
                format!(
                    "the stream {} ends before {}, which this replica applied: the stream lost commits",
                    self.db.url,
                    offset_text::to_text(self.read_at)
                ),
            )),
            410 => self.skip_to_snapshot(&a).map(|()| true),
            _ => Ok(false),
        }
    }

    /// Whether the stream now has another incarnation than the one this replica follows.
    fn recreated(&self) -> bool {
        matches!(stream_state(&self.db.url), Ok(Some(s)) if s.incarnation != Some(self.incarnation))
    }

    /// Applies the whole commits of a read, in one pass of the gate.
    fn apply(&mut self, a: &Answer) -> Result<(), VfsError> {
        let next = replay::next_offset(a)?;
        let up_to_date = a.header(h::STREAM_UP_TO_DATE).is_some();
        self.frames.push(&a.body);
        let mut commits = Vec::new();
        let mut epoch = None;
        let at = offset_text::to_text(self.read_at);
        while let Some((record, _)) = self.frames.next(&at).map_err(replay::format_err)? {
            match record {
                Record::Commit { db_pages, pages } => commits.push((db_pages, pages)),
                Record::Claim { epoch: e, .. } => epoch = epoch.max(Some(e)),
            }
        }
        // The gate stays shut until `status` names the offset too: a reader that sees these
        // commits' rows then never reads an older offset from `ursula_status`.
        let applying = if commits.is_empty() {
            None
        } else {
            let gate = self.db.gate.apply();
            for (db_pages, pages) in &commits {
                replay::apply_commit(&self.file, *db_pages, pages)?;
            }
            invalidate_wal_index(self.db)?;
            Some(gate)
        };
        self.read_at = Some(next);
        // The offset after a whole frame is known where a read ends between frames.
        let whole = self.frames.pending() == 0;
        {
            let mut h = self.db.health();
            if whole {
                h.offset = Some(next);
            }
            if let Some(e) = epoch {
                h.epoch = h.epoch.max(e);
            }
            h.db_bytes = self.file.metadata().map(|m| m.len()).unwrap_or(h.db_bytes);
        }
        drop(applying);
        self.record_read(Some(next), up_to_date && whole);
        if whole {
            self.save_offset();
        }
        Ok(())
    }

    /// Notes the tail a read saw, and whether everything up to it is applied.
    fn record_read(&self, tail: Option<Offset>, caught_up: bool) {
        let mut h = self.db.health();
        h.tail = h.tail.max(tail);
        h.caught_up = caught_up;
        // The first read starts the clock too, so a replica that never caught up shows lag.
        if caught_up || h.caught_up_at.is_none() {
            h.caught_up_at = Some(Instant::now());
        }
    }

    /// The sidecar names the offset the file reflects, so the next attach starts from there.
    fn save_offset(&self) {
        let (offset, epoch) = {
            let h = self.db.health();
            (h.offset, h.epoch)
        };
        let mut cs = self.db.commit_state();
        cs.sidecar.offset = offset;
        cs.sidecar.epoch = epoch;
        if let Err(e) = local::write_sidecar(&self.db.path, &cs.sidecar) {
            log::event(
                log::Level::Debug,
                "follower_sidecar_failed",
                &[("file", &self.db.file()), ("reason", &e.to_string())],
            );
        }
    }

    /// Retention passed the offset: go on from the latest snapshot, when it is past it.
    fn skip_to_snapshot(&mut self, gone: &Answer) -> Result<(), VfsError> {
        let earliest = gone.offset(h::STREAM_NEXT_OFFSET)?;
        let snapshot = stream_state(&self.db.url)?.and_then(|s| s.snapshot);
        let Some(snap) = snapshot.filter(|s| Some(*s) >= earliest && Some(*s) > self.read_at)
        else {
            return Err(VfsError::new(
                Kind::StreamState,
                format!(
                    "retention of {} passed {}, which this replica reached, and no snapshot after it is readable (earliest readable offset: {})",
                    self.db.url,
                    offset_text::to_text(self.read_at),
                    offset_text::to_text(earliest)
                ),
            ));
        };
        let body = match replay::fetch_snapshot(&self.db.url, self.incarnation, snap) {
            Ok(b) => b,
            // Replaced by a newer one while we asked: the next read answers 410 again.
            Err(e) if e.message.starts_with(replay::MOVED) => return Ok(()),
            Err(e) => return Err(e),
        };
        replay::check_snapshot(&body)?;
        // As in `apply`: `status` names the snapshot before a reader can see its rows.
        let applying = self.db.gate.apply();
        let header = replay::write_snapshot(&self.file, &body)?;
        invalidate_wal_index(self.db)?;
        self.frames = FrameReader::default();
        self.read_at = Some(snap);
        {
            let mut h = self.db.health();
            h.offset = Some(snap);
            h.installed = Some(snap);
            h.snapshot = Some(snap);
            h.epoch = h.epoch.max(header.epoch);
        }
        drop(applying);
        self.save_offset();
        self.db.event(
            log::Level::Info,
            "attach_rebuilding",
            &[("snapshot", &snap.to_string())],
        );
        Ok(())
    }
}

fn recreated(url: &str) -> VfsError {
    VfsError::new(
        Kind::StreamState,
        format!("the stream {url} was deleted and recreated: attach again to follow the new one"),
    )
}

/// What a HEAD says of the stream (`None`: it does not exist).
struct StreamState {
    incarnation: Option<Incarnation>,
    snapshot: Option<Offset>,
}

fn stream_state(url: &str) -> Result<Option<StreamState>, VfsError> {
    let req = Request::new(Method::Head, url);
    match Client::global().send(&req) {
        Attempt::Answered(a) if a.status == 404 => Ok(None),
        Attempt::Answered(a) if a.status == 200 => Ok(Some(StreamState {
            incarnation: a.incarnation()?,
            snapshot: a.offset(h::STREAM_SNAPSHOT_OFFSET)?,
        })),
        Attempt::Answered(a) => Err(VfsError::new(
            Kind::StreamState,
            format!("reading the stream's state answered {}", a.status),
        )),
        Attempt::NeverSent(r) | Attempt::Refused(r) | Attempt::NoAnswer(r) => Err(VfsError::new(
            Kind::Unreachable,
            format!("cannot read the stream's state: {r}"),
        )),
    }
}

/// Makes every connection of this process drop what it cached of the file. SQLite keeps a
/// connection's page cache while the WAL-index header in shared memory is the one it read
/// last, and the follower wrote the database file, not the WAL: so the header gets a new
/// change counter (`iChange`), with its checksum, in both copies, written in SQLite's order
/// (the second copy first). Zeroing it instead would not do: the first reader would rebuild
/// the same header from the empty `-wal`, and every other connection would take it for the
/// one it cached. Called inside the gate, so no connection holds a WAL lock meanwhile; one
/// that read the header before is sent back by SQLite's own check after it takes its lock.
/// The `-shm` mapping is shared, so a write to the file is what every mapping sees.
fn invalidate_wal_index(db: &Db) -> Result<(), VfsError> {
    let path = sibling(&db.path, "-shm");
    let damage = |e: std::io::Error| {
        VfsError::new(
            Kind::LocalDamage,
            format!("cannot update {}: {e}", path.display()),
        )
    };
    let shm = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
    {
        Ok(f) => f,
        // No connection has opened the file yet: nothing is cached.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(damage(e)),
    };
    let mut hdr = [0u8; WAL_INDEX_HEADER];
    match shm.read_exact_at(&mut hdr, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
        Err(e) => return Err(damage(e)),
    }
    let Some(bumped) = sqlite_wal::bump_index_header(&hdr) else {
        // Not initialized: whoever reads next rebuilds it and drops its cache.
        return Ok(());
    };
    shm.write_all_at(&bumped, WAL_INDEX_HEADER as u64)
        .and_then(|()| shm.write_all_at(&bumped, 0))
        .map_err(damage)
}
