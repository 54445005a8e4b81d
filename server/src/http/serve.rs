//! Accept loops: every core thread accepts on the shared listener, and each connection is
//! served by the core with the fewest open ones, so both cores share the requests' HTTP work. Each listener serves
//! at most `max_connections` at once (the rest wait in the kernel's backlog), and closes a
//! connection that does not send a whole request head within `head_timeout` of opening or of
//! its last answer (`head_watch`): a client that sends half a head and then nothing holds no
//! slot for long.
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
use tokio::sync::Semaphore;
use tokio::sync::watch;

use super::head_watch::HeadClock;
use super::head_watch::Watched;
use super::head_watch::overdue;
use super::woken::Woken;
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
    /// Connections being served, per core: the slots count the accept loops' waiting slots too.
    open: Vec<Arc<AtomicUsize>>,
}

impl Drain {
    /// How many connections are open now.
    pub fn open(&self) -> usize {
        self.open.iter().map(|o| o.load(Ordering::Relaxed)).sum()
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
///
/// Whichever core accepts, the connection is served by the core with the fewest open
/// connections of this listener (the accepting core on a tie). Both cores wake for a new
/// connection and the one that runs first takes it, so left to itself one core takes most of a
/// client's connections and runs at its limit while the other idles (docs/dev/speed-log.md,
/// "Connections spread over the cores by open count").
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
    let cores: Arc<[Core]> = (0..rt.core_count())
        .filter_map(|c| rt.core_handle(c).cloned())
        .map(|handle| Core {
            handle,
            open: Arc::new(AtomicUsize::new(0)),
        })
        .collect();
    for me in 0..cores.len() {
        let std_listener = listener.try_clone()?;
        let app = app.clone();
        let mut shutdown = shutdown.clone();
        let slots = slots.clone();
        let all = cores.clone();
        let Some(handle) = cores.get(me).map(|c| c.handle.clone()) else {
            continue;
        };
        handle.spawn(async move {
            let Some(mine) = all.get(me) else { return };
            let listener = match tokio::net::TcpListener::from_std(std_listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(core = me, error = %e, "cannot register the listener on this core");
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
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of descriptors and similar: back off instead of spinning.
                        tracing::warn!(core = me, error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (core, stream) = match fewest_open(&all, mine) {
                    Some(other) => match stream.into_std() {
                        // Handed over unregistered: a socket belongs to one core's reactor.
                        Ok(s) => (other, Accepted::Moved(s)),
                        Err(e) => {
                            tracing::warn!(core = me, error = %e, "cannot hand over a connection");
                            continue;
                        }
                    },
                    None => (mine, Accepted::Here(stream)),
                };
                let counted = Open::count(&core.open);
                let clock = HeadClock::opened();
                let service = Watched::new(app.clone(), clock.clone());
                let stop = shutdown.clone();
                core.handle.spawn(async move {
                    let stream = match stream {
                        Accepted::Here(s) => s,
                        Accepted::Moved(s) => match tokio::net::TcpStream::from_std(s) {
                            Ok(s) => s,
                            Err(e) => {
                                tracing::warn!(error = %e, "cannot register a handed-over connection");
                                return;
                            }
                        },
                    };
                    // No timer for hyper: the head timeout is the connection's (`head_watch`).
                    let conn = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .header_read_timeout(None)
                        .serve_connection(TokioIo::new(stream), service);
                    let mut conn = std::pin::pin!(conn);
                    let ended = tokio::select! {
                        biased;
                        r = conn.as_mut() => r,
                        // Both side branches are polled only when they woke the task: the
                        // connection wakes it several times per request (`woken`).
                        () = Woken::new(until_stopping(stop)) => {
                            // The answer in flight is still written; then the connection closes.
                            conn.as_mut().graceful_shutdown();
                            conn.await
                        }
                        () = Woken::new(overdue(&clock, limits.head_timeout)) => {
                            // As hyper's own head timeout did: closed without an answer.
                            tracing::debug!("closing a connection that sent no request head in time");
                            Ok(())
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
    let open = cores.iter().map(|c| c.open.clone()).collect();
    Ok(Drain { slots, max, open })
}

/// A core thread that serves connections, and how many of this listener's it has open.
struct Core {
    handle: tokio::runtime::Handle,
    open: Arc<AtomicUsize>,
}

/// Another core with fewer open connections than `mine`, the accepting core, if there is one
/// (the fewest of them).
fn fewest_open<'a>(cores: &'a [Core], mine: &Core) -> Option<&'a Core> {
    let load = |c: &Core| c.open.load(Ordering::Relaxed);
    cores
        .iter()
        .min_by_key(|c| load(c))
        .filter(|c| load(c) < load(mine))
}

/// An accepted connection: still registered on the accepting core, or moved to another.
enum Accepted {
    Here(tokio::net::TcpStream),
    Moved(std::net::TcpStream),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Read;
    use std::io::Write;
    use std::net::TcpStream;

    use super::*;

    /// Opens a keep-alive connection, sends one request and returns it with the name of the
    /// thread that answered it.
    fn connect(addr: std::net::SocketAddr) -> (TcpStream, String) {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n")
            .expect("send");
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).expect("read");
            assert!(n > 0, "the connection closed before its answer");
            got.extend_from_slice(&buf[..n]);
        }
        let head = String::from_utf8(got).expect("utf-8 head");
        let core = head
            .lines()
            .find_map(|l| l.strip_prefix("x-core: "))
            .unwrap_or_else(|| panic!("no x-core header in {head}"))
            .to_owned();
        (s, core)
    }

    fn tally(conns: &[(TcpStream, String)]) -> BTreeMap<String, usize> {
        let mut t = BTreeMap::new();
        for (_, core) in conns {
            *t.entry(core.clone()).or_insert(0) += 1;
        }
        t
    }

    /// Reads until `end` has arrived; `None` when the server closed the connection first.
    fn read_until(s: &mut TcpStream, end: &[u8]) -> Option<Vec<u8>> {
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !got.windows(end.len()).any(|w| w == end) {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return None,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        Some(got)
    }

    /// Whether the server closed `s` (an end of stream or a reset) within `within`.
    fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        s.set_read_timeout(Some(within)).expect("timeout");
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => true,
            Ok(n) => panic!("unexpected bytes: {:?}", String::from_utf8_lossy(&buf[..n])),
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }

    #[test]
    fn the_head_timeout_runs_from_the_last_answer_and_never_cuts_a_slow_one() {
        let rt = Runtime::start(2, 4, 16).expect("cores");
        let listener = StdListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        // `/slow` answers after 0.8 s with a body streamed over another 0.8 s: both longer
        // than the 300 ms head timeout.
        let app = hyper::service::service_fn(|req: axum::http::Request<Incoming>| async move {
            if req.uri().path() != "/slow" {
                return Ok::<_, std::convert::Infallible>(Response::new(axum::body::Body::from(
                    "fast",
                )));
            }
            tokio::time::sleep(Duration::from_millis(800)).await;
            let chunks = futures_util::stream::unfold(0u8, |i| async move {
                if i == 4 {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                Some((
                    Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'a' + i; 3])),
                    i + 1,
                ))
            });
            Ok(Response::new(axum::body::Body::from_stream(chunks)))
        });
        let (_stop_tx, stop) = watch::channel(false);
        let limits = ConnectionLimits {
            head_timeout: Duration::from_millis(300),
            max_connections: 100,
        };
        let _drain = spawn_accept_loops(&rt, &listener, app, stop, limits).expect("loops");

        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n")
            .expect("send");
        let slow = read_until(&mut s, b"0\r\n\r\n").expect("the slow answer, whole");
        let slow = String::from_utf8_lossy(&slow);
        assert!(slow.contains("aaa") && slow.contains("ddd"), "{slow}");
        // The same connection still serves the next request.
        s.write_all(b"GET /fast HTTP/1.1\r\nhost: t\r\n\r\n")
            .expect("send");
        let fast = read_until(&mut s, b"fast").expect("the next answer");
        assert!(fast.starts_with(b"HTTP/1.1 200"));
        // Then no head: closed one timeout later (a generous bound, not a measurement).
        assert!(closed_within(&mut s, Duration::from_secs(10)));

        // Half a head, then nothing: closed too.
        let mut half = TcpStream::connect(addr).expect("connect");
        half.write_all(b"GET /fast HTTP/1.1\r\nho").expect("send");
        assert!(closed_within(&mut half, Duration::from_secs(10)));
    }

    #[test]
    fn connections_go_to_the_core_with_the_fewest_open_whichever_core_accepts() {
        let rt = Runtime::start(2, 4, 16).expect("cores");
        let listener = StdListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = hyper::service::service_fn(|_req| async {
            let name = std::thread::current().name().unwrap_or("?").to_owned();
            let mut r = Response::new(axum::body::Body::empty());
            r.headers_mut().insert(
                "x-core",
                axum::http::HeaderValue::from_str(&name).expect("name"),
            );
            Ok::<_, std::convert::Infallible>(r)
        });
        let (_stop_tx, stop) = watch::channel(false);
        let limits = ConnectionLimits {
            head_timeout: Duration::from_secs(10),
            max_connections: 100,
        };
        let drain = spawn_accept_loops(&rt, &listener, app, stop, limits).expect("loops");

        // One at a time, each served before the next opens: the counts alternate exactly.
        let mut conns: Vec<_> = (0..8).map(|_| connect(addr)).collect();
        let want = BTreeMap::from([
            ("ursula-core-0".to_owned(), 4),
            ("ursula-core-1".to_owned(), 4),
        ]);
        assert_eq!(tally(&conns), want);

        // Close core 0's four; once they are gone, every new connection goes to core 0.
        conns.retain(|(_, core)| core != "ursula-core-0");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while drain.open() != 4 {
            assert!(
                std::time::Instant::now() < deadline,
                "open: {}",
                drain.open()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let more: Vec<_> = (0..4).map(|_| connect(addr)).collect();
        assert_eq!(
            tally(&more),
            BTreeMap::from([("ursula-core-0".to_owned(), 4)])
        );
        assert_eq!(drain.open(), 8);
    }
}
