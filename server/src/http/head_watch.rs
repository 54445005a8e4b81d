//! `server.request_head_timeout`, kept per connection instead of per request.
//!
//! hyper's own `header_read_timeout` arms a timer every time it starts to read a request head:
//! a boxed sleep, registered in the runtime's timer wheel and taken out again once the head is
//! parsed, for every request of every keep-alive connection: a visible share of the CPU an
//! in-memory append costs (docs/dev/speed-log.md, "Per-request work above hyper, trimmed again").
//! Here each connection has one [`HeadClock`] instead: the service marks it busy when a
//! request's head has arrived ([`Watched`]) and idle again once the answer's body has been
//! handed to the connection in full, and one sleep per connection ([`overdue`]) wakes when the
//! connection could first be overdue and ends it only if it has been idle, without a new head,
//! for the whole timeout. The rule is the one hyper applies: a connection closes when no whole
//! request head arrives within the timeout of its opening or of its last answer; a request
//! being served, however long (a long-poll, an SSE stream, a slow body), never counts against
//! it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::task::Context;
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::body::HttpBody;
use axum::response::Response;
use bytes::Bytes;
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::body::SizeHint;
use tokio::time::Instant;

/// The state value of a connection that is serving a request.
const BUSY: u64 = u64::MAX;

/// Whether a connection is serving a request, or since when it has waited for the next head
/// (in microseconds since it opened).
#[derive(Debug)]
pub struct HeadClock {
    opened: Instant,
    state: AtomicU64,
}

impl HeadClock {
    /// A connection that has just opened: it waits for its first head from now on.
    pub fn opened() -> Arc<HeadClock> {
        Arc::new(HeadClock {
            opened: Instant::now(),
            state: AtomicU64::new(0),
        })
    }

    fn busy(&self) {
        self.state.store(BUSY, Ordering::Relaxed);
    }

    fn idle(&self) {
        // Saturating below `BUSY`: a connection open for half a million years still reads idle.
        let us = u64::try_from(self.opened.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.state.store(us.min(BUSY - 1), Ordering::Relaxed);
    }

    /// When the connection becomes overdue if no head arrives before: `None` while it serves
    /// a request.
    fn overdue_at(&self, timeout: Duration) -> Option<Instant> {
        match self.state.load(Ordering::Relaxed) {
            BUSY => None,
            us => Some(self.opened + Duration::from_micros(us) + timeout),
        }
    }
}

/// Resolves once the connection has gone `timeout` without a whole request head since it
/// opened or since its last answer. It sleeps once per timeout at most, whatever the number
/// of requests in between.
pub async fn overdue(clock: &HeadClock, timeout: Duration) {
    let mut at = clock.opened + timeout;
    loop {
        tokio::time::sleep_until(at).await;
        let now = Instant::now();
        match clock.overdue_at(timeout) {
            Some(due) if due <= now => return,
            Some(due) => at = due,
            // Serving a request: look again one timeout later (an SSE stream may run for days).
            None => at = now + timeout,
        }
    }
}

/// A connection's service, marking its [`HeadClock`] as requests arrive and are answered.
#[derive(Debug, Clone)]
pub struct Watched<S> {
    inner: S,
    clock: Arc<HeadClock>,
}

impl<S> Watched<S> {
    pub fn new(inner: S, clock: Arc<HeadClock>) -> Watched<S> {
        Watched { inner, clock }
    }
}

impl<S> hyper::service::Service<axum::http::Request<Incoming>> for Watched<S>
where
    S: hyper::service::Service<
            axum::http::Request<Incoming>,
            Response = Response,
            Error = Infallible,
        >,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer<S::Future>;

    fn call(&self, req: axum::http::Request<Incoming>) -> Self::Future {
        // hyper calls the service once the whole head is parsed.
        self.clock.busy();
        Answer {
            inner: self.inner.call(req),
            clock: Some(self.clock.clone()),
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of a [`Watched`] service: the inner service's, with the clock attached.
    pub struct Answer<F> {
        #[pin]
        inner: F,
        clock: Option<Arc<HeadClock>>,
    }
}

impl<F> Future for Answer<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(resp) = std::task::ready!(this.inner.poll(cx));
        let Some(clock) = this.clock.take() else {
            return Poll::Ready(Ok(resp));
        };
        if resp.body().is_end_stream() {
            // No body to write (an append's `204`, every `HEAD`): hyper writes the head at once.
            clock.idle();
            return Poll::Ready(Ok(resp));
        }
        Poll::Ready(Ok(resp.map(|body| Body::new(Tracked { body, clock }))))
    }
}

/// An answer's body that marks its connection idle once hyper has taken all of it (hyper drops
/// a body when it has written its end, or when the connection ends).
struct Tracked {
    body: Body,
    clock: Arc<HeadClock>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.clock.idle();
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_is_due_one_timeout_after_it_opened_and_a_busy_one_never() {
        let clock = HeadClock::opened();
        let t = Duration::from_secs(5);
        assert_eq!(clock.overdue_at(t), Some(clock.opened + t));
        clock.busy();
        assert_eq!(clock.overdue_at(t), None);
        tokio::time::sleep(Duration::from_millis(20)).await;
        clock.idle();
        assert_eq!(
            clock.overdue_at(t),
            Some(clock.opened + Duration::from_millis(20) + t),
            "the timeout counts from the answer"
        );
    }

    // Paused time: the runtime's clock moves only when every task waits, so the ticks below are
    // exact whatever the machine's load.
    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_overdue_and_one_that_keeps_answering_is_not() {
        let t = Duration::from_millis(150);
        let idle = HeadClock::opened();
        tokio::time::timeout(Duration::from_secs(10), overdue(&idle, t))
            .await
            .expect("an idle connection is overdue");

        // Answers every 50 ms for 600 ms: never idle for a whole timeout.
        let busy = HeadClock::opened();
        let watch = overdue(&busy, t);
        tokio::pin!(watch);
        for _ in 0..12 {
            busy.busy();
            busy.idle();
            let tick = tokio::time::sleep(Duration::from_millis(50));
            tokio::select! {
                () = &mut watch => panic!("a connection answering every 50 ms was ended"),
                () = tick => {}
            }
        }
        // Then it stops sending heads, and is ended.
        tokio::time::timeout(Duration::from_secs(10), watch)
            .await
            .expect("overdue once the heads stop");
    }
}
