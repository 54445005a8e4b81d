//! The machine's ceiling for an HTTP/1.1 server: hyper on Tokio (one worker per core, the
//! runtime's default), reading each request's body and answering `204 No Content` with no
//! other work. `scripts/bench-speed.sh` drives it with the same clients as ursula in the same
//! run, so ursula's figures read as a fraction of what any server on this stack reaches here.
//!
//! It also serves the SSE fan-out's ceiling: a `GET` whose query has `live=sse` is held open
//! as an event stream, and every `POST` is sent to all of them as one `data` event (base64)
//! and one `control` event, built once and shared. That is the least a server can do per
//! delivery with this client, so the fan-out's latency reads beside it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::task::Context;
use std::task::Poll;

use base64::Engine;
use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::Either;
use http_body_util::Empty;
use hyper::Request;
use hyper::Response;
use hyper::StatusCode;
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

use crate::BoxError;

/// The open event streams; a `POST` sends its event to each and drops the closed ones.
type Subscribers = Arc<Mutex<Vec<mpsc::UnboundedSender<Bytes>>>>;

/// An event stream's body: the events sent to it, until the server drops its sender.
struct Events(mpsc::UnboundedReceiver<Bytes>);

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|e| e.map(|b| Ok(Frame::data(b))))
    }
}

/// The events a `POST` of `body` becomes, in the shape ursula sends them (base64 data).
fn event(body: &[u8]) -> Bytes {
    let data = base64::engine::general_purpose::STANDARD.encode(body);
    Bytes::from(format!(
        "event: data\ndata:{data}\n\nevent: control\ndata:{{\"streamNextOffset\":\"0\",\"upToDate\":true}}\n\n"
    ))
}

/// Holds an SSE `GET` open; fans every other request's body out to those, then answers 204
/// (reading the body first, so the connection stays reusable, as a real server's would).
async fn answer(
    req: Request<Incoming>,
    subs: Subscribers,
) -> Result<Response<Either<Empty<Bytes>, Events>>, Infallible> {
    if req.method() == hyper::Method::GET
        && req.uri().query().is_some_and(|q| q.contains("live=sse"))
    {
        let (tx, rx) = mpsc::unbounded_channel();
        subs.lock().unwrap_or_else(|p| p.into_inner()).push(tx);
        let resp = Response::builder()
            .header("content-type", "text/event-stream")
            .header("stream-sse-data-encoding", "base64")
            .body(Either::Right(Events(rx)));
        return Ok(resp.unwrap_or_else(|_| Response::new(Either::Left(Empty::new()))));
    }
    // A body that fails to arrive ends the connection; the answer does not matter then.
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    if let Ok(body) = body
        && !body.is_empty()
    {
        let ev = event(&body);
        let mut subs = subs.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|tx| tx.send(ev.clone()).is_ok());
    }
    let mut resp = Response::new(Either::Left(Empty::new()));
    *resp.status_mut() = StatusCode::NO_CONTENT;
    Ok(resp)
}

/// Serves until the process is killed. `listen` must be a loopback address.
pub async fn serve(listen: SocketAddr) -> Result<(), BoxError> {
    if !listen.ip().is_loopback() {
        return Err(format!("{listen}: the ceiling server listens on loopback only").into());
    }
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!(
        "ursula-bench: hyper 204 server on {}",
        listener.local_addr()?
    );
    serve_on(listener).await
}

async fn serve_on(listener: tokio::net::TcpListener) -> Result<(), BoxError> {
    let subs = Subscribers::default();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                eprintln!("ursula-bench: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let subs = Arc::clone(&subs);
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(
                    TokioIo::new(stream),
                    service_fn(move |req| answer(req, Arc::clone(&subs))),
                );
            // A client that goes away mid-request is the normal end of a benchmark.
            let _ = conn.await;
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::http::Target;
    use crate::sse;

    #[tokio::test]
    async fn every_post_reaches_every_held_event_stream_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(serve_on(listener));
        let target = Target::parse(&format!("http://{addr}")).expect("target");
        let spec = sse::FanOut {
            path: "/v1/stream/ceiling-fanout".into(),
            subscribers: 5,
            rate_per_s: 20.0,
            duration: Duration::from_millis(300),
            grace: Duration::from_millis(300),
        };
        let out = sse::fan_out(&target, &spec).await.expect("fan-out");
        server.abort();
        assert!(out.sent > 0, "the writer sent nothing");
        assert_eq!(out.failed_subscribers, 0, "{:?}", out.first_failure);
        assert_eq!(out.delivered, out.sent * 5);
    }
}
