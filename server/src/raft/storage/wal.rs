//! The per-core journal: one append-only, segmented, checksummed log shared by every Raft group
//! of a core. Writes that must be fsynced (every write under `fsync = always`; votes and
//! membership otherwise) go to a thread per core that batches the frames of all its groups into
//! one write and one fsync. Under `never` an ordinary write needs no fsync, so the core's own
//! thread writes it at once: no thread hop on the hot path, where the hop costs a large share
//! of one group's write rate (docs/dev/speed-log.md, "Earlier measurements the code relies on").
//! Order is kept: while a synced write waits in the thread's queue, later writes queue behind
//! it instead of overtaking it.
//!
//! Under `never`, a group's commit point (`KIND_COMMITTED`, which nobody waits for) is held
//! and written in front of the core's next write, whichever group that is for, or by the
//! core's flusher task once the tasks queued ahead of it ran: at saturation one `write` call
//! then carries an entry and the commit points before it, instead of a call for each. A
//! newer commit point of a group replaces its held one. Held records keep their place in the
//! journal's order (nothing is written between a record and the one held before it), and a
//! crash loses at most the held commit points, which only tells a restart less of what was
//! committed: openraft commits those entries again once the group has a leader.
//!
//! The frame's layout is in [`super::frame`]; segments are `NNNNNNNNNNNNNNNN.seg` under
//! `core-<i>/`. The writer indexes each group's entry frames as it writes them
//! ([`super::frame::GroupFrames`]), so a log that keeps only its recent entries in memory reads
//! older ones back ([`Journal::read_entries`]).

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fs::File;
use std::fs::OpenOptions;
use std::io::Read;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Instant;

use super::counters;
use super::counters::JournalCounters;
use super::fatal;
use super::fatal::OnFatal;
use super::flush::FlushAhead;
use super::frame;
use super::frame::GroupFrames;
use super::frame::Loc;
use super::frame::Parsed;
use super::frame::ReadError;
use super::frame::Span;
pub use super::frame::encode;
pub use super::frame::encode_into;
pub use super::frame::segment_name;
use super::reclaim::Reclaimer;
use super::reclaim::Segment;

pub const KIND_ENTRIES: u8 = 1;
pub const KIND_VOTE: u8 = 2;
pub const KIND_TRUNCATE: u8 = 3;
pub const KIND_PURGE: u8 = 4;
pub const KIND_COMMITTED: u8 = 5;
/// Not a record: asks the journal thread to fsync once every write queued before it is
/// written. Never framed.
pub const KIND_SYNC: u8 = 0;

/// Under `never`, a segment is synced in the background after each this many bytes (at most a
/// quarter of a segment): the rotation's sync then finds at most this much dirty.
const FLUSH_EVERY: u64 = 4 << 20;

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
    /// Where the frame is, so recovered entries can be read back once evicted.
    pub loc: Loc,
}

/// What the recovery scan found.
#[derive(Debug, Default)]
pub struct Recovered {
    pub records: Vec<Record>,
    /// A complete frame in the newest segment failed its checksum: the tail was cut there.
    pub damaged_tail: bool,
    /// Bytes of an incomplete or damaged final frame that are cut.
    pub torn_bytes: u64,
    /// Bytes of every segment read.
    pub bytes: u64,
    /// The newest segment and where its verified prefix ends, when bytes follow it.
    cut: Option<(PathBuf, u64)>,
}

impl Recovered {
    /// Cuts the newest segment back to its verified prefix. Separate from the scan so that
    /// what the damage means (a recovery gate) is recorded before the evidence goes.
    pub fn cut_tail(&self) -> Result<(), WalError> {
        let Some((path, at)) = &self.cut else {
            return Ok(());
        };
        OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| {
                f.set_len(*at)?;
                f.sync_all()
            })
            .map_err(io(path))
    }
}

/// The core a journal directory (`core-<i>`) belongs to, for its threads' names.
fn core_no(dir: &Path) -> String {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    name.unwrap_or_default()
        .trim_start_matches("core-")
        .to_owned()
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

/// Reads every frame of the journal in `dir`, then cuts a torn or damaged tail of the newest
/// segment.
#[cfg(test)]
pub fn recover(dir: &Path) -> Result<Recovered, WalError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let r = scan(dir)?;
    r.cut_tail()?;
    Ok(r)
}

/// Reads every frame of the journal in `dir` without changing anything; a missing directory
/// is an empty journal. A torn or damaged tail of the newest segment is reported for
/// [`Recovered::cut_tail`]. Damage in an older segment refuses recovery: it cannot be told
/// from lost data.
pub fn scan(dir: &Path) -> Result<Recovered, WalError> {
    if !dir.exists() {
        return Ok(Recovered::default());
    }
    let segs = segments(dir)?;
    let mut out = Recovered::default();
    for (i, (seg, path)) in segs.iter().enumerate() {
        let newest = i + 1 == segs.len();
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(io(path))?;
        out.bytes += bytes.len() as u64;
        let parsed = parse_segment(*seg, &bytes);
        out.records.extend(parsed.records);
        if parsed.end < bytes.len() {
            if !newest {
                return Err(WalError::SealedDamage {
                    path: path.clone(),
                    at: parsed.end as u64,
                });
            }
            out.damaged_tail = parsed.damaged;
            out.torn_bytes = (bytes.len() - parsed.end) as u64;
            out.cut = Some((path.clone(), parsed.end as u64));
        }
    }
    Ok(out)
}

/// The frames read from the start of one segment's bytes.
#[derive(Debug, Default)]
pub struct SegmentScan {
    pub records: Vec<Record>,
    /// Where the verified prefix ends: the first byte that does not start a whole frame
    /// with a good checksum, or the segment's length.
    pub end: usize,
    /// The frame at `end` is whole but fails its checksum (rather than torn or no frame).
    pub damaged: bool,
}

/// Reads the frames of segment number `seg` from the start of its `bytes`, up to the first
/// that is torn, damaged or no frame at all. Public for the fuzz targets (`fuzz/`), which feed
/// it arbitrary bytes without a journal directory.
pub fn parse_segment(seg: u64, bytes: &[u8]) -> SegmentScan {
    let mut out = SegmentScan::default();
    while out.end < bytes.len() {
        match frame::parse(&bytes[out.end..]) {
            Parsed::Frame {
                kind,
                group,
                payload,
                len,
            } => {
                out.records.push(Record {
                    kind,
                    group,
                    payload: payload.to_vec(),
                    loc: Loc {
                        seg,
                        at: out.end as u64,
                        len: len as u32,
                    },
                });
                out.end += len;
            }
            bad => {
                out.damaged = bad == Parsed::Damaged;
                break;
            }
        }
    }
    out
}

pub type Done = Box<dyn FnOnce(std::io::Result<()>) + Send>;

/// A write for the journal thread.
pub struct Append {
    pub kind: u8,
    pub group: u32,
    pub payload: Vec<u8>,
    /// Entries: the highest log index written. Purge: the index purged up to. Truncate: the
    /// first index removed.
    pub index: Option<u64>,
    /// Entries: the lowest log index written.
    pub first: Option<u64>,
    /// fsync before completing, whatever the policy (votes, membership).
    pub force_sync: bool,
    pub done: Option<Done>,
}

/// Handle to a core's journal.
#[derive(Clone)]
pub struct Journal {
    shared: std::sync::Arc<Shared>,
}

struct Shared {
    writer: std::sync::Mutex<Writer>,
    tx: mpsc::Sender<Append>,
    fsync_always: bool,
    counters: Arc<JournalCounters>,
    /// Wakes the core's flusher task when a commit point is held; unset (nothing is held)
    /// until [`Journal::hold_commit_points`] starts it.
    flusher: OnceLock<Arc<tokio::sync::Notify>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").finish_non_exhaustive()
    }
}

fn lock_writer(m: &std::sync::Mutex<Writer>) -> std::sync::MutexGuard<'_, Writer> {
    // The writer aborts the process on an I/O error, so a poisoned lock means a panic in
    // plain bookkeeping; its state is still the file's.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct Options {
    pub fsync_always: bool,
    pub segment_size: u64,
    /// Called once before the process stops on a journal I/O error: it records the run state
    /// that gates the groups at the next start.
    pub on_fatal: Option<OnFatal>,
}

/// A record the journal restates at the start of a segment so that older segments are needed
/// only for their entries: each group's latest vote, purge point and commit point. A purge
/// record carries the index it purged up to, so the journal knows it without decoding it.
#[derive(Debug)]
pub struct Restated {
    pub kind: u8,
    pub group: u32,
    pub payload: Vec<u8>,
    pub purged_to: Option<u64>,
}

pub type Restate = Vec<Restated>;

/// The journal thread's state.
struct Writer {
    dir: PathBuf,
    opts: Options,
    /// Shared with the flush-ahead thread, which syncs it while the core writes on.
    file: Arc<File>,
    /// Under `never`: syncs the segment in the background as it grows, so the rotation's sync
    /// finds little left.
    flush: Option<FlushAhead>,
    /// Deletes reclaimed segments off the thread that writes.
    reclaimer: Reclaimer,
    size: u64,
    seq: u64,
    seg_no: u64,
    current: Segment,
    sealed: Vec<Segment>,
    purged: HashMap<u32, u64>,
    /// Latest vote, purge and committed records per group, restated at each rotation.
    state: BTreeMap<(u32, u8), Vec<u8>>,
    /// Writes sent to the sync thread and not yet written: later writes must queue behind.
    queued: usize,
    /// Commit points held for the next write, at most one per group (see the module docs).
    held: Vec<Append>,
    /// Each group's entry frames, for reading entries back.
    frames: HashMap<u32, GroupFrames>,
    buf: Vec<u8>,
    counters: Arc<JournalCounters>,
}

impl Writer {
    /// Frames a record into `buf`, which the current segment's `self.size` bytes precede;
    /// returns where the frame will be.
    fn frame(&mut self, kind: u8, group: u32, payload: &[u8], buf: &mut Vec<u8>) -> Loc {
        self.seq += 1;
        let at = buf.len();
        encode_into(buf, self.seq, kind, group, payload);
        Loc {
            seg: self.seg_no,
            at: self.size + at as u64,
            len: (buf.len() - at) as u32,
        }
    }

    fn note(&mut self, w: &Append, loc: Loc) {
        match w.kind {
            KIND_ENTRIES => {
                if let Some(i) = w.index {
                    let m = self.current.max_index.entry(w.group).or_insert(0);
                    *m = (*m).max(i);
                    let frames = self.frames.entry(w.group).or_default();
                    frames.add(w.first.unwrap_or(i), i, loc);
                }
            }
            KIND_TRUNCATE => {
                if let (Some(from), Some(f)) = (w.index, self.frames.get_mut(&w.group)) {
                    f.truncate(from);
                }
            }
            KIND_VOTE | KIND_COMMITTED => {
                self.state.insert((w.group, w.kind), w.payload.clone());
            }
            KIND_PURGE => {
                self.state.insert((w.group, w.kind), w.payload.clone());
                if let Some(i) = w.index {
                    self.purged.insert(w.group, i);
                    if let Some(f) = self.frames.get_mut(&w.group) {
                        f.purge(i);
                    }
                }
            }
            _ => {}
        }
    }

    /// Starts a new segment that opens with the restated state, then deletes sealed segments
    /// whose every entry has been purged by its group.
    fn rotate(&mut self) -> std::io::Result<()> {
        let started = Instant::now();
        self.file.sync_all()?;
        let mut synced = started.elapsed();
        self.seg_no += 1;
        let path = self.dir.join(segment_name(self.seg_no));
        self.file = Arc::new(OpenOptions::new().create(true).append(true).open(&path)?);
        let mut old = std::mem::replace(
            &mut self.current,
            Segment {
                path,
                bytes: 0,
                max_index: HashMap::new(),
            },
        );
        old.bytes = self.size;
        self.sealed.push(old);
        self.size = 0;
        let mut buf = Vec::new();
        let state: Vec<_> = self
            .state
            .iter()
            .map(|((g, k), p)| (*k, *g, p.clone()))
            .collect();
        for (kind, group, payload) in state {
            self.frame(kind, group, &payload, &mut buf);
        }
        self.file.as_ref().write_all(&buf)?;
        let head = Instant::now();
        self.file.sync_all()?;
        synced += head.elapsed();
        self.size = buf.len() as u64;
        if let Some(f) = &mut self.flush {
            f.rotated(self.size);
        }
        let c = &self.counters;
        counters::add(&c.rotations, 1);
        counters::add(&c.rotation_sync_ns, synced.as_nanos() as u64);
        counters::add(&c.restated_bytes, self.size);
        counters::add(&c.physical_bytes, self.size);
        self.reclaim();
        Ok(())
    }

    /// Hands the sealed segments every group purged past to the reclaimer. A segment that
    /// cannot be deleted comes back and stays sealed, so the next pass tries again and the
    /// metrics still count its bytes.
    fn reclaim(&mut self) {
        let started = Instant::now();
        let c = self.counters.clone();
        self.sealed.extend(self.reclaimer.failed());
        let purged = &self.purged;
        let behind = |g: &u32, max: &u64| purged.get(g).is_none_or(|p| p < max);
        let (gone, mut keep): (Vec<_>, Vec<_>) = self
            .sealed
            .drain(..)
            .partition(|seg| !seg.max_index.iter().any(|(g, m)| behind(g, m)));
        for seg in gone {
            if let Err(seg) = self.reclaimer.delete(seg) {
                keep.push(seg);
            }
        }
        keep.sort_by(|a, b| a.path.cmp(&b.path));
        let lagging: std::collections::BTreeSet<u32> = keep
            .iter()
            .flat_map(|seg| seg.max_index.iter())
            .filter(|(g, m)| behind(g, m))
            .map(|(g, _)| *g)
            .collect();
        counters::set(&c.lagging_groups, lagging.len() as u64);
        *c.lagging.lock().unwrap_or_else(|p| p.into_inner()) = lagging.into_iter().collect();
        counters::set(&c.pinned_segments, keep.len() as u64);
        counters::set(&c.segments, keep.len() as u64 + 1);
        self.sealed = keep;
        counters::add(&c.reclaim_ns, started.elapsed().as_nanos() as u64);
    }

    /// Writes `batch` as one write (and one fsync when the policy or a record asks for it).
    /// A journal that cannot write must not acknowledge anything, and nothing is retried: the
    /// process stops and the next start keeps the verified prefix.
    /// Held commit points go first.
    fn write_batch<'a>(&mut self, batch: impl IntoIterator<Item = &'a Append>) {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut sync = self.opts.fsync_always;
        let mut held = std::mem::take(&mut self.held);
        for w in &held {
            let loc = self.frame(w.kind, w.group, &w.payload, &mut buf);
            self.note(w, loc);
        }
        held.clear();
        self.held = held;
        for w in batch {
            if w.kind != KIND_SYNC {
                let loc = self.frame(w.kind, w.group, &w.payload, &mut buf);
                self.note(w, loc);
            }
            sync |= w.force_sync;
        }
        let mut result = self.file.as_ref().write_all(&buf);
        if result.is_ok() && sync {
            result = self.file.sync_data();
        }
        self.size += buf.len() as u64;
        if let Some(f) = &mut self.flush
            && result.is_ok()
        {
            f.wrote(&self.file, self.size);
        }
        counters::add(&self.counters.physical_bytes, buf.len() as u64);
        if buf.capacity() <= 1 << 20 {
            self.buf = buf;
        }
        if let Err(e) = &result {
            tracing::error!(error = %e, "journal write failed; the process stops");
            self.fatal();
        }
        if self.size >= self.opts.segment_size
            && let Err(e) = self.rotate()
        {
            tracing::error!(error = %e, "cannot start a journal segment; the process stops");
            self.fatal();
        }
    }

    /// Holds `w`, a commit point, for the next write; true when nothing was held before.
    fn hold(&mut self, w: Append) -> bool {
        let first = self.held.is_empty();
        match self.held.iter_mut().find(|h| h.group == w.group) {
            Some(h) => *h = w,
            None => self.held.push(w),
        }
        first
    }

    /// Stops the process after recording why, so the next start does not trust the journal's
    /// tail to the page cache.
    fn fatal(&self) -> ! {
        fatal::stop(self.opts.on_fatal.as_ref())
    }
}

fn run_sync_thread(shared: std::sync::Arc<Shared>, rx: mpsc::Receiver<Append>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
            if batch.len() >= 1024 {
                break;
            }
        }
        {
            let mut w = lock_writer(&shared.writer);
            w.write_batch(&batch);
            // Under `always` nothing is written inline, so nothing was counted.
            if !shared.fsync_always {
                w.queued -= batch.len();
            }
        }
        for w in batch {
            if let Some(done) = w.done {
                done(Ok(()));
            }
        }
    }
    let _ = lock_writer(&shared.writer).file.sync_all();
}

impl Journal {
    /// Starts the journal thread for `dir`. Every segment already there is sealed: a new one
    /// opens with `restate`, and the old ones go once every group purged past `recovered_max`
    /// (each group's highest recovered entry). `frames` are the recovered groups' entry frames.
    pub fn start(
        dir: PathBuf,
        opts: Options,
        restate: Restate,
        recovered_max: HashMap<u32, u64>,
        frames: HashMap<u32, GroupFrames>,
    ) -> Result<Journal, WalError> {
        let segs = segments(&dir)?;
        let seg_no = segs.last().map_or(0, |(n, _)| *n) + 1;
        let path = dir.join(segment_name(seg_no));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        let counters = Arc::new(JournalCounters::default());
        let flush = if opts.fsync_always {
            None
        } else {
            Some(
                FlushAhead::start(super::flush::Options {
                    every: FLUSH_EVERY.min(opts.segment_size / 4),
                    name: format!("ursula-flush-{}", core_no(&dir)),
                    counters: counters.clone(),
                    on_fatal: opts.on_fatal.clone(),
                })
                .map_err(io(&dir))?,
            )
        };
        let reclaimer =
            Reclaimer::start(format!("ursula-unlink-{}", core_no(&dir)), counters.clone())
                .map_err(io(&dir))?;
        let sealed: Vec<Segment> = segs
            .into_iter()
            .map(|(_, path)| Segment {
                bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
                path,
                max_index: recovered_max.clone(),
            })
            .collect();
        counters::set(
            &counters.physical_bytes,
            sealed.iter().map(|s| s.bytes).sum(),
        );
        let mut w = Writer {
            dir: dir.clone(),
            opts,
            file: Arc::new(file),
            flush,
            reclaimer,
            size: 0,
            seq: 0,
            seg_no,
            current: Segment {
                path: path.clone(),
                bytes: 0,
                max_index: HashMap::new(),
            },
            sealed,
            purged: HashMap::new(),
            state: BTreeMap::new(),
            queued: 0,
            held: Vec::new(),
            frames,
            buf: Vec::with_capacity(1 << 16),
            counters: counters.clone(),
        };
        let mut buf = Vec::new();
        for r in restate {
            if let Some(upto) = r.purged_to {
                w.purged.insert(r.group, upto);
            }
            w.state.insert((r.group, r.kind), r.payload.clone());
            w.frame(r.kind, r.group, &r.payload, &mut buf);
        }
        w.file
            .as_ref()
            .write_all(&buf)
            .and_then(|_| w.file.sync_all())
            .map_err(io(&path))?;
        w.size = buf.len() as u64;
        counters::add(&counters.physical_bytes, w.size);
        counters::add(&counters.restated_bytes, w.size);
        w.reclaim();
        let (tx, rx) = mpsc::channel::<Append>();
        let fsync_always = w.opts.fsync_always;
        let shared = std::sync::Arc::new(Shared {
            writer: std::sync::Mutex::new(w),
            tx,
            fsync_always,
            counters,
            flusher: OnceLock::new(),
        });
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("ursula-journal".into())
            .spawn(move || run_sync_thread(thread_shared, rx))
            .map_err(io(&dir))?;
        Ok(Journal { shared })
    }

    /// Writes `w`, completing its callback once the fsync policy is met: at once for an
    /// ordinary write under `never`, after the sync thread's fsync otherwise.
    pub fn write(&self, mut w: Append) -> Result<(), Append> {
        let sh = &self.shared;
        if sh.fsync_always {
            return sh.tx.send(w).map_err(|e| e.0);
        }
        let mut g = lock_writer(&sh.writer);
        if w.force_sync || g.queued > 0 {
            // Sent under the lock, so the thread's queue keeps the order writes arrived in.
            g.queued += 1;
            return sh.tx.send(w).map_err(|e| {
                g.queued -= 1;
                e.0
            });
        }
        if w.kind == KIND_COMMITTED
            && w.done.is_none()
            && let Some(flusher) = sh.flusher.get()
        {
            if g.hold(w) {
                drop(g);
                flusher.notify_one();
            }
            return Ok(());
        }
        g.write_batch(std::iter::once(&w));
        drop(g);
        if let Some(done) = w.done.take() {
            done(Ok(()));
        }
        Ok(())
    }

    /// Under `never`, holds commit points for the next write from here on, with a flusher task
    /// on `core` (the runtime whose tasks write this journal) that writes what is still held
    /// once the tasks queued ahead of it ran. Does nothing under `always` or when called again.
    pub fn hold_commit_points(&self, core: &tokio::runtime::Handle) {
        let sh = &self.shared;
        let wake = Arc::new(tokio::sync::Notify::new());
        if sh.fsync_always || sh.flusher.set(wake.clone()).is_err() {
            return;
        }
        // Weak: the task must not keep the journal alive (the sync thread holds it for the
        // process's life today; this does not rely on that).
        let shared = Arc::downgrade(sh);
        core.spawn(async move {
            loop {
                wake.notified().await;
                let Some(sh) = shared.upgrade() else {
                    return;
                };
                let mut g = lock_writer(&sh.writer);
                // With writes queued for the sync thread, its next batch takes them.
                if !g.held.is_empty() && g.queued == 0 {
                    g.write_batch(std::iter::empty());
                }
            }
        });
    }
}

impl Journal {
    /// Reads back the frames that hold `group`'s entries `from..=to` and returns each with
    /// what it holds of the log, in log order. The lock is held only to find them; a frame
    /// whose segment is gone is left out (its entries were purged meanwhile).
    pub fn read_entries(
        &self,
        group: u32,
        from: u64,
        to: u64,
    ) -> Result<Vec<(Span, Vec<u8>)>, ReadError> {
        let (dir, spans) = {
            let w = lock_writer(&self.shared.writer);
            let spans = w
                .frames
                .get(&group)
                .map(|f| f.covering(from, to))
                .unwrap_or_default();
            (w.dir.clone(), spans)
        };
        let mut out = Vec::with_capacity(spans.len());
        for s in spans {
            match frame::read_entries(&dir, group, s.loc, KIND_ENTRIES) {
                Ok(p) => out.push((s, p)),
                // Reclaim deletes a segment only once every entry in it is purged: what it
                // held was purged while this read ran.
                Err(ReadError::Gone(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// What this journal did since the process started.
    pub fn counters(&self) -> &JournalCounters {
        &self.shared.counters
    }

    /// Returns once every write handed over before it is on stable storage: for a graceful
    /// shutdown, after which the run may be recorded as clean.
    pub async fn sync(&self) -> std::io::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let w = Append {
            kind: KIND_SYNC,
            group: 0,
            payload: Vec::new(),
            index: None,
            first: None,
            force_sync: true,
            done: Some(Box::new(move |r| drop(tx.send(r)))),
        };
        self.write(w)
            .map_err(|_| std::io::Error::other("the journal thread stopped"))?;
        rx.await
            .map_err(|_| std::io::Error::other("the journal thread stopped"))?
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
mod tests;
