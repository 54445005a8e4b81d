//! Accept loops: every core thread accepts on the shared listener and serves its connections
//! itself, so a request for a group on that core never changes threads. Each listener serves
//! at most `max_connections` at once (the rest wait in the kernel's backlog), and closes a
//! connection that does not send a whole request head within `head_timeout` of opening or of
//! its last answer: a client that sends half a head and then nothing holds no slot for long.

use std::net::TcpListener as StdListener;
use std::sync::Arc;
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

/// Starts one accept loop per core. `shutdown` flips to `true` to stop accepting.
pub fn spawn_accept_loops<S>(
    rt: &Runtime,
    listener: &StdListener,
    app: S,
    shutdown: watch::Receiver<bool>,
    limits: ConnectionLimits,
) -> std::io::Result<()>
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
    // One count for the listener, whichever core accepts.
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    for core in 0..rt.core_count() {
        let Some(handle) = rt.core_handle(core) else {
            continue;
        };
        let std_listener = listener.try_clone()?;
        let app = app.clone();
        let mut shutdown = shutdown.clone();
        let slots = slots.clone();
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
                tokio::spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .timer(TokioTimer::new())
                        .header_read_timeout(limits.head_timeout)
                        .serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    // The slot is free once the connection is gone, however it ended.
                    drop(slot);
                });
            }
        });
    }
    Ok(())
}
