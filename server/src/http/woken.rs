//! A future that is polled only after it woke its task.
//!
//! A connection's task races its hyper connection against the node's stop and the head
//! timeout. `select!` polls every branch each time the task runs, and the connection wakes the
//! task several times for every request: the stop's `watch` receiver takes the lock its waiters
//! share across the cores on each of those polls, and the timeout's sleep registers its waker
//! again, together a visible share of an in-memory append's CPU (docs/dev/speed-log.md,
//! "Per-request work above hyper, trimmed again"). Wrapped in [`Woken`], a branch is polled
//! once, to register, and then only when its own waker fired.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::task::Context;
use std::task::Poll;
use std::task::Wake;
use std::task::Waker;

/// See the module docs.
pub struct Woken<F> {
    fut: Pin<Box<F>>,
    signal: Arc<Signal>,
    /// The waker the inner future is polled with: it marks `signal` and wakes the task.
    inner: Waker,
    /// The task's waker as last handed to `signal`, to notice when it changes.
    outer: Option<Waker>,
}

/// Set by the inner future's waker (and set at the start, so the first poll reaches the inner
/// future); holds the task's waker to pass the wake on to.
struct Signal {
    woke: AtomicBool,
    outer: Mutex<Option<Waker>>,
}

impl Signal {
    fn outer(&self) -> std::sync::MutexGuard<'_, Option<Waker>> {
        // Only a waker is stored here: a panic elsewhere leaves nothing half-written.
        self.outer.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woke.store(true, Ordering::Release);
        if let Some(w) = self.outer().as_ref() {
            w.wake_by_ref();
        }
    }
}

impl<F: Future> Woken<F> {
    pub fn new(fut: F) -> Woken<F> {
        let signal = Arc::new(Signal {
            woke: AtomicBool::new(true),
            outer: Mutex::new(None),
        });
        Woken {
            fut: Box::pin(fut),
            inner: Waker::from(signal.clone()),
            signal,
            outer: None,
        }
    }
}

impl<F: Future> Future for Woken<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // A task's waker rarely changes; when it does, the signal passes wakes to the new one.
        if !this.outer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            let w = cx.waker().clone();
            *this.signal.outer() = Some(w.clone());
            this.outer = Some(w);
        }
        if !this.signal.woke.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        // Cleared before the poll: a wake during it sets the flag again and is not lost.
        this.signal.woke.store(false, Ordering::Release);
        this.fut
            .as_mut()
            .poll(&mut Context::from_waker(&this.inner))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_inner_future_is_polled_once_and_then_only_after_it_woke_the_task() {
        let polls = Arc::new(AtomicUsize::new(0));
        let (tx, mut rx) = tokio::sync::oneshot::channel::<u8>();
        let counted = polls.clone();
        let inner = std::future::poll_fn(move |cx| {
            counted.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut rx).poll(cx).map(|r| r.ok())
        });
        let mut w = std::pin::pin!(Woken::new(inner));
        let task = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        for _ in 0..100 {
            assert!(w.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "polled again without a wake"
        );
        assert_eq!(task.0.load(Ordering::SeqCst), 0);

        // The task's waker changes, then the inner future's event fires on another thread:
        // the new waker hears of it, and the next poll reaches the inner future.
        let task2 = Arc::new(Count(AtomicUsize::new(0)));
        let waker2 = Waker::from(task2.clone());
        let mut cx2 = Context::from_waker(&waker2);
        assert!(w.as_mut().poll(&mut cx2).is_pending());
        std::thread::spawn(move || tx.send(7))
            .join()
            .expect("sender thread")
            .expect("send");
        assert_eq!(
            task2.0.load(Ordering::SeqCst),
            1,
            "the current waker is woken"
        );
        assert_eq!(task.0.load(Ordering::SeqCst), 0, "not the old one");
        assert_eq!(w.as_mut().poll(&mut cx2), Poll::Ready(Some(7)));
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }
}
