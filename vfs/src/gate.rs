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

    /// Handles inside the gate now (for tests and status).
    pub fn readers(&self) -> usize {
        self.lock().readers
    }
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
        let (g, a) = (gate.clone(), applied.clone());
        let t = std::thread::spawn(move || {
            let _apply = g.apply();
            a.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!applied.load(Ordering::SeqCst), "applied under a reader");
        gate.leave();
        while !applied.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The apply holds the file for 100 ms: a reader entering now waits for its end.
        gate.enter();
        assert!(t.is_finished(), "a reader entered during an apply");
        gate.leave();
        t.join().expect("apply thread");
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
