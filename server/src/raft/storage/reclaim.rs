//! Deleting sealed journal segments off the write path.
//!
//! The journal decides which sealed segments can go (every group purged past their entries)
//! on the thread that writes, a core thread under `fsync = "never"`. Deleting one is not
//! free: unlinking a synced segment makes the filesystem free its extents (and, with
//! `discard`, tell the device), a stall every appender of the core would see once per rotation
//! (measured in docs/dev/speed-log.md, "The segment synced ahead, and purged entries freed off the
//! core"). A thread per core (`ursula-unlink-<core>`, at the lowest priority) deletes them
//! instead. A deletion that fails comes back to the journal, which keeps the segment and tries
//! again at its next pass. A segment whose deletion is still pending when the process stops is
//! found at the next start and reclaimed then.
//!
//! It is not the flush-ahead's thread (`flush.rs`) with a second kind of job: that one must
//! run at normal priority, since the rotation waits for whatever it has not synced yet, while a
//! deletion waits for nobody and yields to everything (`background::lower_priority`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use super::background;
use super::counters;
use super::counters::JournalCounters;

/// A segment, its bytes and the highest entry index of each group it holds.
#[derive(Debug)]
pub struct Segment {
    pub path: PathBuf,
    pub bytes: u64,
    pub max_index: HashMap<u32, u64>,
}

/// The deleting thread of one core's journal. It ends when this is dropped.
pub struct Reclaimer {
    tx: mpsc::Sender<Segment>,
    failed: mpsc::Receiver<Segment>,
}

impl Reclaimer {
    /// Starts the thread, named `name`; it counts into `counters`.
    pub fn start(name: String, counters: Arc<JournalCounters>) -> std::io::Result<Reclaimer> {
        let (tx, rx) = mpsc::channel::<Segment>();
        let (failed_tx, failed) = mpsc::channel::<Segment>();
        std::thread::Builder::new().name(name).spawn(move || {
            background::lower_priority();
            run(rx, failed_tx, &counters);
        })?;
        Ok(Reclaimer { tx, failed })
    }

    /// Hands `seg` to the thread to delete. Gives it back when the thread is gone, for the
    /// caller to keep.
    pub fn delete(&self, seg: Segment) -> Result<(), Segment> {
        self.tx.send(seg).map_err(|e| e.0)
    }

    /// The segments whose deletion failed since the last call: still on disk.
    pub fn failed(&self) -> impl Iterator<Item = Segment> + '_ {
        self.failed.try_iter()
    }
}

fn run(rx: mpsc::Receiver<Segment>, failed: mpsc::Sender<Segment>, c: &JournalCounters) {
    for seg in rx {
        let started = Instant::now();
        match std::fs::remove_file(&seg.path) {
            Ok(()) => {
                tracing::debug!(path = %seg.path.display(), "journal segment reclaimed");
                counters::add(&c.reclaims, 1);
                counters::add(&c.reclaimed_bytes, seg.bytes);
                c.physical_bytes.fetch_sub(
                    seg.bytes.min(counters::get(&c.physical_bytes)),
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
            Err(e) => {
                tracing::warn!(path = %seg.path.display(), error = %e, "cannot remove a journal segment");
                counters::add(&c.reclaim_failures, 1);
                // The journal is gone when this fails; the segment then waits for the next start.
                let _ = failed.send(seg);
            }
        }
        counters::add(&c.reclaim_ns, started.elapsed().as_nanos() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_is_deleted_on_the_thread_and_one_that_cannot_be_comes_back() {
        let dir = std::env::temp_dir().join(format!("ursula-reclaim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("0000000000000001.seg");
        std::fs::write(&path, vec![1u8; 4096]).expect("segment");
        let c = Arc::new(JournalCounters::default());
        counters::set(&c.physical_bytes, 4096);
        let r = Reclaimer::start("ursula-unlink-t".into(), c.clone()).expect("start");
        let seg = |path: PathBuf| Segment {
            path,
            bytes: 4096,
            max_index: HashMap::from([(1, 9)]),
        };

        assert!(r.delete(seg(path.clone())).is_ok());
        assert!(counters::eventually(|| counters::get(&c.reclaims) == 1));
        assert!(!path.exists());
        assert_eq!(counters::get(&c.reclaimed_bytes), 4096);
        assert_eq!(counters::get(&c.physical_bytes), 0);
        assert_eq!(r.failed().count(), 0);

        // A directory in the segment's place cannot be removed as a file.
        let stuck = dir.join("0000000000000002.seg");
        std::fs::create_dir_all(&stuck).expect("stuck");
        assert!(r.delete(seg(stuck.clone())).is_ok());
        assert!(counters::eventually(
            || counters::get(&c.reclaim_failures) == 1
        ));
        let back = std::cell::RefCell::new(Vec::<Segment>::new());
        counters::eventually(|| {
            back.borrow_mut().extend(r.failed());
            !back.borrow().is_empty()
        });
        let back = back.into_inner();
        assert_eq!(back.len(), 1, "the failed segment comes back to be kept");
        assert_eq!(back[0].path, stuck);
        assert_eq!(back[0].max_index.get(&1), Some(&9));
        assert!(stuck.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
