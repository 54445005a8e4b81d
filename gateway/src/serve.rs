//! The listener: [`run`] for `ursula gateway` (its own Tokio runtime, stops on SIGINT or
//! SIGTERM), and [`serve`] for programs that embed the gateway on a listener of their own.
//! It serves at most `--max-connections` connections at once (the rest wait in the kernel's
//! backlog), and closes a connection that sends no whole request head within
//! `--request-head-timeout` of opening or of its last answer: a client that sends half a head
//! and then nothing holds no slot for long.
//!
//! Each connection speaks HTTP/1.1 or, when it opens with the HTTP/2 preface, h2c (HTTP/2 in
//! clear text with prior knowledge; TLS, and with it `h2` by ALPN, is a proxy's job in front);
//! an HTTP/1.1 request may also upgrade its connection to h2c ([`h2c`]).
//! Either way every request goes through the same [`Gateway::handle`]: the same refusals, body
//! limits, timeouts and access control, per request, so per HTTP/2 stream.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use http::HeaderValue;
use http::header;
use hyper::server::conn::http1;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioExecutor;
use hyper_util::rt::TokioIo;
use hyper_util::rt::TokioTimer;
use tokio::net::TcpListener;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::GatewayError;
use crate::config::GatewayArgs;
use crate::config::GatewayConfig;
use crate::forward::Gateway;
use crate::h2c;
use crate::reply::GatewayBody;
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
        let hold = gateway.connection_opened();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, peer, gw, head_timeout).await {
                tracing::debug!(%peer, error = %e, "client connection ended with an error");
            }
            // The slot is free once the connection is gone, however it ended.
            drop(hold);
            drop(slot);
        });
    }
}

type ConnError = Box<dyn std::error::Error + Send + Sync>;

/// An upgrade hyper will hand over after its `101`, and the upgraded request's frame.
type Switched = (OnUpgrade, Vec<u8>);

/// One client connection, HTTP/1.1 or HTTP/2 by its first bytes, to its end.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    gw: Gateway,
    head_timeout: Duration,
) -> Result<(), ConnError> {
    let Some(protocol) = sniff(&stream, head_timeout).await else {
        tracing::debug!(%peer, "no request began in time: connection closed");
        return Ok(());
    };
    let io = TokioIo::new(stream);
    if protocol == Protocol::Http2 {
        return serve_h2(io, gw, peer).await;
    }
    // An `Upgrade: h2c` request leaves its frame and the upgrade here; the connection goes on
    // as HTTP/2 once hyper has sent the `101`.
    let upgrade: Arc<Mutex<Option<Switched>>> = Arc::default();
    let pending = upgrade.clone();
    let gw1 = gw.clone();
    let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let switch = h2c::upgrade_frame(&req).map(|frame| {
            let on = hyper::upgrade::on(&mut req);
            if let Ok(mut p) = pending.lock() {
                *p = Some((on, frame));
            }
        });
        let gw = gw1.clone();
        async move {
            if switch.is_some() {
                return Ok::<_, Infallible>(h2c::switching(GatewayBody::default()));
            }
            req.extensions_mut().insert(ClientAddr(peer.ip()));
            Ok(gw.handle(req).await)
        }
    });
    http1::Builder::new()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .serve_connection(io, service)
        .with_upgrades()
        .await?;
    let switched = upgrade.lock().ok().and_then(|mut p| p.take());
    let Some((on, frame)) = switched else {
        return Ok(());
    };
    let upgraded = on.await?;
    let io = h2c::resume(TokioIo::new(upgraded), frame, head_timeout).await?;
    serve_h2(TokioIo::new(io), gw, peer).await
}

/// An HTTP/2 connection (prior knowledge or upgraded), each stream a request to `gw`.
async fn serve_h2<I>(io: I, gw: Gateway, peer: SocketAddr) -> Result<(), ConnError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ClientAddr(peer.ip()));
        host_from_authority(&mut req);
        let gw = gw.clone();
        async move { Ok::<_, Infallible>(gw.handle(req).await) }
    });
    http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .keep_alive_interval(H2_PING_EVERY)
        .keep_alive_timeout(H2_PING_TIMEOUT)
        .serve_connection(io, service)
        .await?;
    Ok(())
}

/// Streams one HTTP/2 connection may have open at once: a page's live tails share one
/// connection (a browser opens one per origin), and each is a request the admission limits
/// count like any other.
const H2_MAX_STREAMS: u32 = 256;

/// An HTTP/2 connection is pinged after this long without a frame from the client, and closed
/// when the ping goes unanswered for [`H2_PING_TIMEOUT`]: a peer gone without a FIN frees its
/// slot and its streams' permits.
const H2_PING_EVERY: Duration = Duration::from_secs(30);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// The protocol a connection speaks, from its first bytes (peeked, left for the server to
/// read). `None` when the peer closed, or sent too little to tell within `within` (the request
/// head timeout): a connection that says nothing holds its slot no longer than a half-sent
/// HTTP/1 head does.
async fn sniff(stream: &TcpStream, within: Duration) -> Option<Protocol> {
    let look = async {
        let mut buf = [0u8; h2c::PREFACE.len()];
        loop {
            let n = stream.peek(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            if buf[..n] != h2c::PREFACE[..n] {
                return Some(Protocol::Http1);
            }
            if n == h2c::PREFACE.len() {
                return Some(Protocol::Http2);
            }
            // A part of the preface so far: `peek` answers at once while those bytes wait, so
            // look again a moment later. Rare: a client sends the preface in one segment.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(within, look).await.ok().flatten()
}

/// An HTTP/2 request names its host in `:authority` (the URI), not in `Host`; the nodes build
/// `Location` from `Host`, so the gateway gives it one as an HTTP/1.1 client would have.
fn host_from_authority<B>(req: &mut hyper::Request<B>) {
    if req.headers().contains_key(header::HOST) {
        return;
    }
    let Some(host) = req
        .uri()
        .authority()
        .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    else {
        return;
    };
    req.headers_mut().insert(header::HOST, host);
}

/// Waits for Ctrl-C or, on Unix, SIGTERM: the signals that stop the gateway and the node.
pub async fn wait_for_signal() {
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
