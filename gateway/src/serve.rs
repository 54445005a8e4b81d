//! The listener: [`run`] for `ursula gateway` (its own Tokio runtime, stops on SIGINT or
//! SIGTERM), and [`serve`] for programs that embed the gateway on a listener of their own.
//! It serves at most `--max-connections` connections at once (the rest wait in the kernel's
//! backlog), and closes a connection that sends no whole request head within
//! `--request-head-timeout` of opening or of its last answer: a client that sends half a head
//! and then nothing holds no slot for long.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::rt::TokioTimer;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::GatewayError;
use crate::config::GatewayArgs;
use crate::config::GatewayConfig;
use crate::forward::Gateway;
use crate::untrusted::ClientAddr;

/// Runs `ursula gateway` until SIGINT or SIGTERM.
pub fn run(args: GatewayArgs) -> Result<(), GatewayError> {
    let config = GatewayConfig::from_args(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(GatewayError::Runtime)?;
    rt.block_on(async move {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| GatewayError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let upstreams: Vec<&str> = config.upstreams.iter().map(|u| u.base.as_str()).collect();
        tracing::info!(
            listen = %config.listen,
            upstreams = ?upstreams,
            max_request_body_bytes = config.uploads.max_request_body_bytes(),
            body_budget_bytes = config.uploads.budget_bytes(),
            "ursula gateway listening"
        );
        config.uploads.warn_at_startup();
        let auth = config
            .auth
            .as_ref()
            .map(|a| (a.issuer.clone(), a.policy.len()));
        if let Some(cors) = &config.cors {
            tracing::info!(allowed_origins = ?cors, "cross-origin reads (CORS) are on");
        }
        let gateway = Gateway::new(config)?;
        if let Some((issuer, buckets)) = auth {
            tracing::info!(%issuer, buckets, "access control is on");
        }
        let served = serve(listener, gateway.clone(), wait_for_signal()).await;
        gateway.shutdown().await;
        served
    })
}

/// Accepts connections on `listener` and answers them with `gateway` until `shutdown`
/// completes. Connections already open are left to finish on the runtime.
pub async fn serve(
    listener: TcpListener,
    gateway: Gateway,
    shutdown: impl Future<Output = ()>,
) -> Result<(), GatewayError> {
    let mut shutdown = std::pin::pin!(shutdown);
    let head_timeout = gateway.config().request_head_timeout;
    let slots = Arc::new(Semaphore::new(gateway.config().max_connections));
    loop {
        // A slot before the accept: at the cap, connections wait in the backlog.
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s,
            () = &mut shutdown => return Ok(()),
        };
        let Ok(slot) = slot else { return Ok(()) };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => return Ok(()),
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of descriptors and similar: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let gw = gateway.clone();
        tokio::spawn(async move {
            let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ClientAddr(peer.ip()));
                let gw = gw.clone();
                async move { Ok::<_, Infallible>(gw.handle(req).await) }
            });
            let conn = http1::Builder::new()
                .keep_alive(true)
                .timer(TokioTimer::new())
                .header_read_timeout(head_timeout)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "client connection ended with an error");
            }
            // The slot is free once the connection is gone, however it ended.
            drop(slot);
        });
    }
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::SignalKind;
        use tokio::signal::unix::signal;
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            let _ = ctrl_c.await;
            return;
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
