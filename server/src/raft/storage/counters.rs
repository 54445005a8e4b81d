//! The journal's counters: what a core's journal did since the process started, written by
//! the journal (under its own lock, on the write path) and read by the metrics without any
//! lock, so a metrics request never waits behind a write.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

/// One core's journal.
#[derive(Debug, Default)]
pub struct JournalCounters {
    /// Bytes of every segment file the journal keeps, written or recovered.
    pub physical_bytes: AtomicU64,
    pub segments: AtomicU64,
    pub rotations: AtomicU64,
    /// Time the rotations spent syncing the sealed segment and the new one's head, on the
    /// thread that wrote (a core thread under `never`).
    pub rotation_sync_ns: AtomicU64,
    /// Flush-ahead syncs under `never` (`flush.rs`), and their time on that thread.
    pub background_syncs: AtomicU64,
    pub background_sync_ns: AtomicU64,
    /// Sealed segments deleted, and their bytes.
    pub reclaims: AtomicU64,
    pub reclaimed_bytes: AtomicU64,
    /// Time spent in reclaim passes.
    pub reclaim_ns: AtomicU64,
    /// Segment deletions that failed (the segment stays and the next pass tries again).
    pub reclaim_failures: AtomicU64,
    /// Vote, purge and commit records restated at the head of each new segment.
    pub restated_bytes: AtomicU64,
    /// As of the last reclaim pass: the groups whose unpurged entries keep a sealed segment,
    /// and the sealed segments kept.
    pub lagging_groups: AtomicU64,
    pub pinned_segments: AtomicU64,
    /// Those groups by id, ascending: the snapshot driver releases the idle ones.
    pub lagging: Mutex<Vec<u32>>,
}

impl JournalCounters {
    /// Whether `group`'s unpurged entries kept a sealed segment at the last reclaim pass.
    pub fn is_lagging(&self, group: u32) -> bool {
        self.lagging
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .binary_search(&group)
            .is_ok()
    }
}

/// A value of a counter, for the metrics.
pub fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Adds to a counter.
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Sets a gauge.
pub fn set(c: &AtomicU64, n: u64) {
    c.store(n, Ordering::Relaxed);
}

/// What the startup scan of one core's journal did.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScanWork {
    pub ns: u64,
    pub records: u64,
    pub bytes: u64,
    /// Entries the core's groups hold once the scan's truncates and purges were applied.
    pub live_entries: u64,
}

/// Polls `done` every 5 ms for up to 10 s; whether it became true (tests: the journal's
/// background threads move their counters a moment after they are asked).
#[cfg(test)]
pub fn eventually(done: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    done()
}
