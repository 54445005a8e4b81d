//! Accept loops: every core thread accepts on the shared listener and serves its connections
//! itself, so a request for a group on that core never changes threads. Each listener serves
//! at most `max_connections` at once (the rest wait in the kernel's backlog), and closes a
//! connection that does not send a whole request head within `head_timeout` of opening or of
//! its last answer: a client that sends half a head and then nothing holds no slot for long.
//!
//! When the node stops, the loops stop accepting and every connection is told to close once
//! its answer in flight is written (an idle keep-alive connection closes at once); the
//! [`Drain`] the loops return waits for the last one, within a deadline (Operations, "Graceful
//! voter shutdown": up to ten seconds, then what is still open is abandoned).

use std::net::TcpListener as StdListener;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::rt::TokioTimer;
use tokio::sync::Semaphore;
use tokio::sync::watch;

use crate::runtime::Runtime;

/// What bounds one listener's connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub head_timeout: Duration,
    pub max_connections: usize,
}

/// Waits until `stop` holds `true`. A sender that is gone never stops anything: it pends.
pub async fn until_stopping(mut stop: watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The open connections of one listener's accept loops, for a stopping node to wait on.
#[derive(Debug, Clone)]
pub struct Drain {
    slots: Arc<Semaphore>,
    max: u32,
    /// Connections being served: the slots count the accept loops' waiting slots too.
    open: Arc<AtomicUsize>,
}

impl Drain {
    /// How many connections are open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Waits, up to `within`, until every connection has closed; `true` when they all did.
    /// Call it after the loops were told to stop: an accept loop holds a slot while it waits.
    pub async fn wait(&self, within: Duration) -> bool {
        let all = self.slots.acquire_many(self.max);
        matches!(tokio::time::timeout(within, all).await, Ok(Ok(_)))
    }
}

/// Starts one accept loop per core. `shutdown` flips to `true` to stop accepting and to close
/// every connection once its answer in flight is written.
pub fn spawn_accept_loops<S>(
    rt: &Runtime,
    listener: &StdListener,
    app: S,
    shutdown: watch::Receiver<bool>,
    limits: ConnectionLimits,
) -> std::io::Result<Drain>
where
    S: hyper::service::Service<
            axum::http::Request<Incoming>,
            Response = Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    listener.set_nonblocking(true)?;
    // One count for the listener, whichever core accepts. The config keeps it within u32.
    let max = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let slots = Arc::new(Semaphore::new(max as usize));
    let open = Arc::new(AtomicUsize::new(0));
    for core in 0..rt.core_count() {
        let Some(handle) = rt.core_handle(core) else {
            continue;
        };
        let std_listener = listener.try_clone()?;
        let app = app.clone();
        let mut shutdown = shutdown.clone();
        let slots = slots.clone();
        let open = open.clone();
        handle.spawn(async move {
            let listener = match tokio::net::TcpListener::from_std(std_listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(core, error = %e, "cannot register the listener on this core");
                    return;
                }
            };
            loop {
                // A slot before the accept: at the cap, connections wait in the backlog.
                let slot = tokio::select! {
                    s = slots.clone().acquire_owned() => s,
                    _ = shutdown.changed() => return,
                };
                let Ok(slot) = slot else { return };
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = shutdown.changed() => return,
                };
                let (stream, _) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        // Out of descriptors and similar: back off instead of spinning.
                        tracing::warn!(core, error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let service = app.clone();
                let stop = shutdown.clone();
                let counted = Open::count(&open);
                tokio::spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .timer(TokioTimer::new())
                        .header_read_timeout(limits.head_timeout)
                        .serve_connection(TokioIo::new(stream), service);
                    let mut conn = std::pin::pin!(conn);
                    let ended = tokio::select! {
                        r = conn.as_mut() => r,
                        () = until_stopping(stop) => {
                            // The answer in flight is still written; then the connection closes.
                            conn.as_mut().graceful_shutdown();
                            conn.await
                        }
                    };
                    if let Err(e) = ended {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    // The slot is free once the connection is gone, however it ended.
                    drop(slot);
                    drop(counted);
                });
            }
        });
    }
    Ok(Drain { slots, max, open })
}

/// One connection in the count, until it is dropped.
struct Open(Arc<AtomicUsize>);

impl Open {
    fn count(open: &Arc<AtomicUsize>) -> Open {
        open.fetch_add(1, Ordering::Relaxed);
        Open(open.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
