//! The read gate of a following replica: the follower applies a batch of whole commits to the
//! local file only while no connection of this process is inside a read transaction, and no
//! read transaction starts while it applies. So a reader sees the file as of a commit boundary,
//! never half of a commit, and keeps that view for its whole transaction.
//!
//! SQLite marks a WAL read transaction by holding one of the shm read-mark locks for its whole
//! length, and takes the write and recovery locks through the same call: the shim counts a
//! handle as inside the gate from the first shm lock it takes to the release of its last.

use std::sync::Condvar;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::time::Duration;
use std::time::Instant;

/// How long a new reader holds back for a follower waiting to apply. Bounded, because a
/// thread may start a read on a second connection while its first one is inside a read
/// transaction: that read must not wait for an apply that waits for the first one to end.
const YIELD_TO_APPLY: Duration = Duration::from_millis(20);

#[derive(Debug, Default)]
struct State {
    /// Handles inside the gate.
    readers: usize,
    /// The follower is writing the local file.
    applying: bool,
    /// The follower waits for the readers to leave.
    waiting: bool,
}

#[derive(Debug, Default)]
pub struct ReadGate {
    state: Mutex<State>,
    changed: Condvar,
}

/// Held while the follower writes the local file; readers enter again once it is dropped.
pub struct Applying<'a> {
    gate: &'a ReadGate,
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        self.gate.lock().applying = false;
        self.gate.changed.notify_all();
    }
}

impl ReadGate {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a pair of counters a panic cannot leave half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle enters: waits out an apply in progress, and briefly one about to start.
    pub fn enter(&self) {
        let deadline = Instant::now() + YIELD_TO_APPLY;
        let mut s = self.lock();
        loop {
            let now = Instant::now();
            let hold_back = s.waiting && now < deadline;
            if !s.applying && !hold_back {
                break;
            }
            let wait = if s.applying {
                Duration::from_millis(50)
            } else {
                deadline - now
            };
            s = self
                .changed
                .wait_timeout(s, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        s.readers += 1;
    }

    /// A handle leaves (its last shm lock is released, or it closed).
    pub fn leave(&self) {
        let mut s = self.lock();
        s.readers = s.readers.saturating_sub(1);
        if s.readers == 0 {
            self.changed.notify_all();
        }
    }

    /// Waits until no handle is inside, and keeps new ones out until the guard is dropped.
    pub fn apply(&self) -> Applying<'_> {
        let mut s = self.lock();
        s.waiting = true;
        while s.readers > 0 || s.applying {
            s = self
                .changed
                .wait_timeout(s, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        s.waiting = false;
        s.applying = true;
        Applying { gate: self }
    }

    /// One `xShmLock` call of a replica's handle, whose held slots are `held` (bit n: slot n):
    /// enters the gate before the handle's first lock, and leaves it once the handle holds
    /// none (after releasing its last, or when its first lock failed). `lock` returns SQLite's
    /// result code; 0 is `SQLITE_OK`.
    pub fn around_lock(
        &self,
        held: &mut u8,
        ofst: i32,
        n: i32,
        locking: bool,
        lock: impl FnOnce() -> i32,
    ) -> i32 {
        let entering = locking && *held == 0;
        if entering {
            self.enter();
        }
        let rc = lock();
        let before = *held;
        if rc == 0 {
            let slots = slot_bits(ofst, n);
            *held = if locking {
                before | slots
            } else {
                before & !slots
            };
        }
        if (entering || before != 0) && *held == 0 {
            self.leave();
        }
        rc
    }

    /// Handles inside the gate now (for tests and status).
    pub fn readers(&self) -> usize {
        self.lock().readers
    }
}

/// The bits of shm lock slots `ofst..ofst + n` (SQLite has 8).
fn slot_bits(ofst: i32, n: i32) -> u8 {
    (ofst.max(0)..(ofst + n).min(8)).fold(0u8, |bits, slot| bits | (1 << slot))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn an_apply_waits_for_the_reader_inside_and_keeps_new_ones_out() {
        let gate = Arc::new(ReadGate::default());
        gate.enter();
        let applied = Arc::new(AtomicBool::new(false));
        let ending = Arc::new(AtomicBool::new(false));
        let (g, a, e) = (gate.clone(), applied.clone(), ending.clone());
        let t = std::thread::spawn(move || {
            let apply = g.apply();
            a.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
            e.store(true, Ordering::SeqCst);
            drop(apply);
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!applied.load(Ordering::SeqCst), "applied under a reader");
        gate.leave();
        while !applied.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The apply holds the file for 100 ms: a reader entering now waits for its end. The
        // flag is set just before the apply lets go, so a reader let in earlier finds it unset
        // (the thread itself may still be winding down when the reader enters).
        gate.enter();
        assert!(
            ending.load(Ordering::SeqCst),
            "a reader entered during an apply"
        );
        gate.leave();
        t.join().expect("apply thread");
    }

    #[test]
    fn a_handle_is_inside_from_its_first_shm_lock_to_the_release_of_its_last() {
        let gate = ReadGate::default();
        let mut held = 0u8;
        // A read mark (slot 3), then the write lock (slot 0) beside it.
        assert_eq!(gate.around_lock(&mut held, 3, 1, true, || 0), 0);
        assert_eq!((held, gate.readers()), (0b1000, 1));
        gate.around_lock(&mut held, 0, 1, true, || 0);
        assert_eq!(
            (held, gate.readers()),
            (0b1001, 1),
            "one handle counts once"
        );
        gate.around_lock(&mut held, 3, 1, false, || 0);
        assert_eq!(gate.readers(), 1, "still holds slot 0");
        gate.around_lock(&mut held, 0, 1, false, || 0);
        assert_eq!((held, gate.readers()), (0, 0));
        // A first lock that fails (SQLITE_BUSY) leaves nothing behind.
        assert_eq!(gate.around_lock(&mut held, 1, 7, true, || 5), 5);
        assert_eq!((held, gate.readers()), (0, 0));
        // Recovery's range lock: slots 1 to 7.
        gate.around_lock(&mut held, 1, 7, true, || 0);
        assert_eq!(held, 0b1111_1110);
        gate.around_lock(&mut held, 1, 7, false, || 0);
        assert_eq!((held, gate.readers()), (0, 0));
    }

    #[test]
    fn a_second_reader_of_a_thread_inside_is_not_held_by_a_waiting_apply() {
        let gate = Arc::new(ReadGate::default());
        gate.enter();
        let g = gate.clone();
        let t = std::thread::spawn(move || drop(g.apply()));
        while !gate.lock().waiting {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Would deadlock if a waiting apply kept every new reader out.
        gate.enter();
        assert_eq!(gate.readers(), 2);
        gate.leave();
        gate.leave();
        t.join().expect("apply thread");
        assert_eq!(gate.readers(), 0);
    }
}
