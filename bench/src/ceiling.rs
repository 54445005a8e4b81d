//! The machine's ceiling for an HTTP/1.1 server: hyper on Tokio (one worker per core, the
//! runtime's default), reading each request's body and answering `204 No Content` with no
//! other work. `scripts/bench-speed.sh` drives it with the same clients as ursula in the same
//! run, so ursula's figures read as a fraction of what any server on this stack reaches here.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::Empty;
use hyper::Request;
use hyper::Response;
use hyper::StatusCode;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

use crate::BoxError;

/// Reads the body (so the connection stays reusable, as a real server's would) and answers 204.
async fn answer(req: Request<Incoming>) -> Result<Response<Empty<Bytes>>, Infallible> {
    // A body that fails to arrive ends the connection; the answer does not matter then.
    let _ = req.into_body().collect().await;
    let mut resp = Response::new(Empty::new());
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
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service_fn(answer));
            // A client that goes away mid-request is the normal end of a benchmark.
            let _ = conn.await;
        });
    }
}
