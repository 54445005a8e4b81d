//! Flush-ahead of a journal segment under `fsync = "never"`.
//!
//! Under `never` nothing is fsynced on the write path, but a segment is synced when the next
//! one starts: a later segment must not survive a crash that loses the end of an earlier one,
//! or the next start could not tell that gap from damage. That sync runs on the core thread,
//! and a segment nothing synced before is dirty as a whole: a stall every appender of the core
//! would see (measured in docs/dev/speed-log.md, "The segment synced ahead, and purged entries
//! freed off the core"). So a thread per core syncs the segment each time another
//! [`Options::every`] bytes are written, and the rotation finds only the last stretch dirty.
//! The order on disk is kept: the rotation still syncs the old segment before the new one
//! takes a write.
//!
//! A failed background sync stops the process like a failed journal write: the kernel may have
//! dropped the pages it could not write, and a later sync would not report them again.

use std::fs::File;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use super::counters;
use super::counters::JournalCounters;
use super::fatal;
use super::fatal::OnFatal;

/// The flush-ahead of one core's journal: the write path tells it how far the segment has
/// grown, and it hands the segment to its thread at each `every` bytes.
pub struct FlushAhead {
    tx: mpsc::Sender<Arc<File>>,
    every: u64,
    /// The segment size at which the next background sync is asked for.
    next_at: u64,
}

/// What a flush-ahead thread needs.
pub struct Options {
    /// Bytes written between background syncs.
    pub every: u64,
    /// Names the thread (`ursula-flush-<core>`).
    pub name: String,
    pub counters: Arc<JournalCounters>,
    /// Records why the process stops before it does (the journal's own hook).
    pub on_fatal: Option<OnFatal>,
}

impl FlushAhead {
    /// Starts the thread. It ends when the [`FlushAhead`] is dropped.
    pub fn start(opts: Options) -> std::io::Result<FlushAhead> {
        let (tx, rx) = mpsc::channel::<Arc<File>>();
        let every = opts.every.max(1);
        let counters = opts.counters;
        let on_fatal = opts.on_fatal;
        std::thread::Builder::new()
            .name(opts.name)
            .spawn(move || run(rx, &counters, on_fatal))?;
        Ok(FlushAhead {
            tx,
            every,
            next_at: every,
        })
    }

    /// The segment `file` has grown to `size` bytes: past the next mark, its thread syncs it.
    pub fn wrote(&mut self, file: &Arc<File>, size: u64) {
        if size < self.next_at {
            return;
        }
        self.next_at = size + self.every;
        // A send fails only when the thread is gone; the rotation's own sync still holds.
        let _ = self.tx.send(file.clone());
    }

    /// A new segment starts at `size` bytes (its restated records).
    pub fn rotated(&mut self, size: u64) {
        self.next_at = size + self.every;
    }
}

fn run(rx: mpsc::Receiver<Arc<File>>, counters: &JournalCounters, on_fatal: Option<OnFatal>) {
    while let Ok(mut file) = rx.recv() {
        // Syncs asked for while the last one ran: the newest covers them when it is the same
        // segment, and an older segment was synced by the rotation that replaced it.
        while let Ok(newer) = rx.try_recv() {
            file = newer;
        }
        let started = Instant::now();
        if let Err(e) = file.sync_data() {
            tracing::error!(error = %e, "journal background sync failed; the process stops");
            fatal::stop(on_fatal.as_ref());
        }
        counters::add(&counters.background_syncs, 1);
        counters::add(
            &counters.background_sync_ns,
            started.elapsed().as_nanos() as u64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn syncs(c: &JournalCounters) -> u64 {
        counters::get(&c.background_syncs)
    }

    /// Waits up to 10 s for the thread to have synced `n` times.
    fn until(c: &JournalCounters, n: u64) -> u64 {
        counters::eventually(|| syncs(c) >= n);
        syncs(c)
    }

    #[test]
    fn the_segment_is_synced_in_the_background_each_time_it_grows_by_the_step() {
        let path = std::env::temp_dir().join(format!("ursula-flush-{}.seg", std::process::id()));
        let file = Arc::new(File::create(&path).expect("file"));
        let counters = Arc::new(JournalCounters::default());
        let mut flush = FlushAhead::start(Options {
            every: 1000,
            name: "ursula-flush-t".into(),
            counters: counters.clone(),
            on_fatal: None,
        })
        .expect("start");
        let write = |n: usize| file.as_ref().write_all(&vec![7u8; n]).expect("write");

        write(999);
        flush.wrote(&file, 999);
        write(1);
        flush.wrote(&file, 1000);
        assert_eq!(until(&counters, 1), 1, "the first step asks for a sync");
        write(500);
        flush.wrote(&file, 1500);
        write(499);
        flush.wrote(&file, 1999);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(syncs(&counters), 1, "no sync before the next step");
        write(1);
        flush.wrote(&file, 2000);
        assert_eq!(until(&counters, 2), 2);
        // A new segment counts its steps from its own head.
        flush.rotated(100);
        flush.wrote(&file, 1099);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(syncs(&counters), 2);
        flush.wrote(&file, 1100);
        assert_eq!(until(&counters, 3), 3);
        assert!(counters::get(&counters.background_sync_ns) > 0);
        let _ = std::fs::remove_file(&path);
    }
}
