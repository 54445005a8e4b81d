//! Work a core thread hands to threads of lower priority, so that appends do not wait behind
//! it: freeing what a log purge removed, and (through [`lower_priority`]) building snapshots,
//! whose files go to the kernel in bounded pieces ([`Bounded`]).
//!
//! Why: a purge after a snapshot removes tens of thousands of entries at once, each owning its
//! payload. Freeing them on the core is a stall every appender of that core's groups sees
//! (measured in docs/dev/speed-log.md, "The segment synced ahead, and purged entries freed off the
//! core").

use std::any::Any;
use std::sync::OnceLock;
use std::sync::mpsc;

/// Lowers the calling thread to the lowest CPU priority: the `SCHED_IDLE` policy, and nice 19
/// where that is refused. Failing to lower it only costs latency: logged, not returned.
///
/// Why `SCHED_IDLE` and not only nice 19: a core thread woken on the CPU where a nice-19
/// thread runs preempts it only when the scheduler finds the core thread eligible, and
/// otherwise waits in the run queue until the next scheduler tick, behind the snapshot writer
/// or the reaper (docs/dev/speed-log.md, "Background threads that a waking core thread preempts at
/// once"). A waking thread of any other policy always preempts a `SCHED_IDLE` one at once.
pub fn lower_priority() {
    use thread_priority::unix::NormalThreadSchedulePolicy;
    use thread_priority::unix::ThreadSchedulePolicy;
    let idle = thread_priority::unix::set_thread_priority_and_policy(
        thread_priority::unix::thread_native_id(),
        thread_priority::ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
    );
    if let Err(e) = idle {
        tracing::debug!(error = %e, "cannot give a background thread the idle policy");
    }
    let me = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(me), 19) {
        tracing::debug!(error = %e, "cannot lower a background thread's priority");
    }
}

/// The most a background thread passes to the kernel in one `write`.
pub const WRITE_CHUNK: usize = 64 << 10;

/// A writer that hands at most [`WRITE_CHUNK`] bytes to each `write` of the one it wraps.
///
/// Why: a kernel built without preemption (`PREEMPT_NONE`) does not switch away from a thread
/// inside a system call. A snapshot handed to the page cache in one large `write` keeps a
/// pinned core thread woken on the same CPU waiting in the run queue for the whole call: a
/// stall in the durable node's append tail (docs/dev/speed-log.md, "Background threads that a
/// waking core thread preempts at once"). Between two pieces the thread is back in user space,
/// where a waiting core thread takes the CPU at once.
#[derive(Debug)]
pub struct Bounded<W>(pub W);

impl<W: std::io::Write> std::io::Write for Bounded<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min(WRITE_CHUNK);
        self.0.write(&buf[..n])
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

type Garbage = Box<dyn Any + Send>;

/// The reaper thread's queue, started on first use. `None` when the thread could not be
/// started: values are then dropped where they are.
fn reaper() -> Option<&'static mpsc::Sender<Garbage>> {
    static REAPER: OnceLock<Option<mpsc::Sender<Garbage>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Garbage>();
            let spawned = std::thread::Builder::new()
                .name("ursula-reaper".into())
                .spawn(move || {
                    lower_priority();
                    // Each value is dropped as it is received.
                    while rx.recv().is_ok() {}
                });
            match spawned {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the reaper thread; frees stay inline");
                    None
                }
            }
        })
        .as_ref()
}

/// Drops `value` on the reaper thread, at nice 19, instead of on the caller's thread.
pub fn drop_later<T: Send + 'static>(value: T) {
    if let Some(tx) = reaper() {
        // A send fails only if the thread is gone; the value then drops here.
        let _ = tx.send(Box::new(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_priority() -> i32 {
        rustix::process::getpriority_process(Some(rustix::thread::gettid()))
            .expect("thread priority")
    }

    /// Tells which thread dropped it, and at what priority.
    struct Witness(mpsc::Sender<(Option<String>, i32)>);

    impl Drop for Witness {
        fn drop(&mut self) {
            let name = std::thread::current().name().map(str::to_owned);
            let _ = self.0.send((name, own_priority()));
        }
    }

    #[test]
    fn a_value_dropped_later_is_freed_on_the_reaper_thread_at_the_lowest_priority() {
        let (tx, rx) = mpsc::channel();
        drop_later(Witness(tx));
        let (on, priority) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("dropped within 10 s");
        assert_eq!(on.as_deref(), Some("ursula-reaper"));
        assert_eq!(priority, 19);
    }

    #[test]
    fn a_background_thread_gets_the_idle_policy_so_a_waking_core_thread_preempts_it() {
        use thread_priority::unix::NormalThreadSchedulePolicy;
        use thread_priority::unix::ThreadSchedulePolicy;
        let policy = || thread_priority::unix::thread_schedule_policy().expect("policy");
        let before = policy();
        let inner = std::thread::spawn(move || {
            lower_priority();
            policy()
        })
        .join()
        .expect("thread");
        assert_eq!(
            inner,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle)
        );
        assert_eq!(policy(), before, "only the background thread is lowered");
    }

    /// Records the length of every `write` it is given.
    #[derive(Default)]
    struct Lengths(Vec<usize>);

    impl std::io::Write for Lengths {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.push(buf.len());
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_large_write_reaches_the_kernel_in_pieces_of_at_most_the_chunk_even_through_a_buffer() {
        use std::io::Write;
        let mut out = std::io::BufWriter::with_capacity(WRITE_CHUNK, Bounded(Lengths::default()));
        // Larger than the buffer: `BufWriter` passes it straight to the writer it wraps.
        out.write_all(&vec![1u8; 5 * WRITE_CHUNK + 17])
            .expect("write");
        out.write_all(b"tail").expect("write");
        let Bounded(Lengths(lengths)) =
            out.into_inner().map_err(|e| e.into_error()).expect("flush");
        assert!(
            lengths.iter().all(|n| *n <= WRITE_CHUNK),
            "every write at most one chunk: {lengths:?}"
        );
        assert_eq!(lengths.iter().sum::<usize>(), 5 * WRITE_CHUNK + 17 + 4);
        // Five whole chunks and the rest of the large write, then the buffered tail.
        assert_eq!(
            lengths,
            [
                WRITE_CHUNK,
                WRITE_CHUNK,
                WRITE_CHUNK,
                WRITE_CHUNK,
                WRITE_CHUNK,
                17,
                4
            ]
        );
    }

    #[test]
    fn a_background_thread_runs_at_the_lowest_priority_and_leaves_its_caller_alone() {
        let before = own_priority();
        let inner = std::thread::spawn(|| {
            lower_priority();
            own_priority()
        })
        .join()
        .expect("thread");
        assert_eq!(inner, 19);
        assert_eq!(
            own_priority(),
            before,
            "only the background thread is lowered"
        );
    }
}
