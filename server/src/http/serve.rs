//! Accept loops: every core thread accepts on the shared listener and serves its connections
//! itself, so a request for a group on that core never changes threads.

use std::net::TcpListener as StdListener;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;

use crate::runtime::Runtime;

/// Starts one accept loop per core. `shutdown` flips to `true` to stop accepting.
pub fn spawn_accept_loops(
    rt: &Runtime,
    listener: &StdListener,
    app: Router,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    for core in 0..rt.core_count() {
        let Some(handle) = rt.core_handle(core) else {
            continue;
        };
        let std_listener = listener.try_clone()?;
        let app = app.clone();
        let mut shutdown = shutdown.clone();
        handle.spawn(async move {
            let listener = match tokio::net::TcpListener::from_std(std_listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(core, error = %e, "cannot register the listener on this core");
                    return;
                }
            };
            loop {
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
                let service = TowerToHyperService::new(app.clone());
                tokio::spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
        });
    }
    Ok(())
}
