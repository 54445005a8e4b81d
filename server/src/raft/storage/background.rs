//! Work a core thread hands to threads of lower priority, so that appends do not wait behind
//! it: freeing what a log purge removed, and (through [`lower_priority`]) building snapshots.
//!
//! Why: a purge after a snapshot removes tens of thousands of entries at once. Freeing them
//! on the core took 17-38 ms at 20-55k appends/s on a durable node (each entry owns its
//! payload), a stall every appender of that core's groups saw (docs/benchmarks.md, "Speed:
//! what was tried").

use std::any::Any;
use std::sync::OnceLock;
use std::sync::mpsc;

/// Lowers the calling thread to the lowest CPU priority (nice 19). Failing to lower it only
/// costs latency: logged, not returned.
pub fn lower_priority() {
    let me = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(me), 19) {
        tracing::debug!(error = %e, "cannot lower a background thread's priority");
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
