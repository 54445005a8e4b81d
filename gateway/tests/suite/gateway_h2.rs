//! `ursula gateway` speaks h2c (HTTP/2 with prior knowledge) beside HTTP/1.1 on one listener:
//! a client drives streams and holds fifty live tails over one connection; each HTTP/2 stream
//! meets the refusals, body limits and access control an HTTP/1.1 request meets; a connection
//! that never finishes its preface is closed at the head timeout; an `Upgrade: h2c` request
//! switches its connection to HTTP/2 unless it carries a body.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::Full;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::TokioExecutor;
use hyper_util::rt::TokioIo;

use crate::harness::auth::*;
use crate::harness::calls::owner_and_stranger;
use crate::harness::conn::closed_by_peer;
use crate::harness::gateway::*;

struct H2 {
    port: u16,
    send: SendRequest<Full<Bytes>>,
}

struct Reply {
    status: u16,
    version: hyper::Version,
    headers: hyper::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl H2 {
    /// One HTTP/2 connection to `port`, opened with prior knowledge.
    async fn connect(port: u16) -> H2 {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .expect("an HTTP/2 handshake");
        tokio::spawn(conn);
        H2 { port, send }
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> hyper::Request<Full<Bytes>> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("http://127.0.0.1:{}{path}", self.port));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(Full::new(Bytes::copy_from_slice(body)))
            .expect("request")
    }

    async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        let req = self.request(method, path, headers, body);
        let resp = self
            .send
            .send_request(req)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes().to_vec();
        Reply {
            status: parts.status.as_u16(),
            version: parts.version,
            headers: parts.headers,
            body,
        }
    }

    /// The whole of the stream at `path`, read with `auth` as the `authorization` header.
    async fn read_as(&mut self, path: &str, auth: &str) -> Reply {
        let path = format!("{path}?offset=-1");
        self.send("GET", &path, &[("authorization", auth)], b"")
            .await
    }

    /// Appends `body` as text to the stream at `path` with `auth` as the `authorization` header.
    async fn append_as(&mut self, path: &str, auth: &str, body: &[u8]) -> Reply {
        self.send("POST", path, &[TEXT, ("authorization", auth)], body)
            .await
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn one_h2c_connection_writes_reads_and_holds_fifty_live_tails_that_each_get_the_next_append() {
    let f = fronted("h2-tails", &[]);
    let gw = &f.gw;
    runtime().block_on(async {
        let mut c = H2::connect(gw.port).await;
        let a = c.send("PUT", "/demo", &[], b"").await;
        assert!(matches!(a.status, 200 | 201 | 204), "bucket: {}", a.status);
        assert_eq!(a.version, hyper::Version::HTTP_2);
        let a = c.send("PUT", "/demo/s", &[TEXT], b"").await;
        assert_eq!(a.status, 201);
        // The node names the stream by the host the client asked for, as over HTTP/1.1.
        let location = a.header("location").expect("a Location").to_owned();
        assert_eq!(location, format!("http://127.0.0.1:{}/demo/s", gw.port));
        assert_eq!(a.header(VOUCH), Some("1"));
        let a = c.send("POST", "/demo/s", &[TEXT], b"first|").await;
        assert!(matches!(a.status, 200 | 204), "{}", a.status);
        let a = c.send("GET", "/demo/s?offset=-1", &[], b"").await;
        assert_eq!((a.status, a.body.as_slice()), (200, &b"first|"[..]));

        // Fifty SSE tails at the tail, all on this one connection.
        let mut tails = Vec::new();
        for _ in 0..50 {
            let req = c.request("GET", "/demo/s?offset=now&live=sse", &[], b"");
            let resp = c.send.send_request(req).await.expect("a tail");
            assert_eq!(resp.status().as_u16(), 200);
            assert_eq!(resp.version(), hyper::Version::HTTP_2);
            tails.push(resp.into_body());
        }
        let a = c.send("POST", "/demo/s", &[TEXT], b"second|").await;
        assert!(matches!(a.status, 200 | 204), "{}", a.status);
        let mut got = 0;
        for mut body in tails {
            let mut seen = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(20), async {
                while let Some(frame) = body.frame().await {
                    if let Ok(data) = frame.expect("a frame").into_data() {
                        seen.extend_from_slice(&data);
                    }
                    if String::from_utf8_lossy(&seen).contains("data:second|") {
                        return true;
                    }
                }
                false
            })
            .await;
            assert_eq!(read, Ok(true), "{}", String::from_utf8_lossy(&seen));
            got += 1;
        }
        assert_eq!(got, 50);
    });
}

#[test]
fn h2c_streams_meet_the_same_access_control_and_body_limit_as_http1_requests() {
    let g = guarded("h2-refusals", &["--max-request-body-bytes", "1024"]);
    let (issuer, node, gw) = (&g.issuer, &g.node, &g.gw);
    let (owner, stranger) = owner_and_stranger(&issuer.url);
    // The HTTP/1.1 answers to compare with.
    let missing1 = send("GET", &gw.url("/private/nothing-here?offset=-1"), &[], b"");
    assert_eq!(missing1.status, 404);
    runtime().block_on(async {
        let mut c = H2::connect(gw.port).await;
        let a = c.read_as("/private/s", &owner).await;
        assert_eq!((a.status, a.body.as_slice()), (200, &b"hello|"[..]));
        // A stranger and an anonymous caller meet the very 404 of a missing stream.
        for auth in [Some(stranger.as_str()), None] {
            let headers: Vec<(&str, &str)> =
                auth.map(|v| ("authorization", v)).into_iter().collect();
            let a = c.send("GET", "/private/s?offset=-1", &headers, b"").await;
            assert_eq!(a.status, 404, "{auth:?}");
            assert_eq!(String::from_utf8_lossy(&a.body), missing1.body, "{auth:?}");
            let a = c
                .send(
                    "POST",
                    "/private/s",
                    &[TEXT]
                        .iter()
                        .copied()
                        .chain(headers.iter().copied())
                        .collect::<Vec<_>>(),
                    b"theirs|",
                )
                .await;
            assert_eq!(a.status, 404, "{auth:?}");
        }
        // A token that does not verify is a 401, as over HTTP/1.1.
        let a = c.read_as("/private/s", "Bearer not.a.token").await;
        assert_eq!(a.status, 401);
        assert!(
            a.header("www-authenticate")
                .is_some_and(|v| v.starts_with("Bearer"))
        );
        // A body over the limit is refused, marked; one at the limit goes through.
        let a = c.append_as("/private/s", &owner, &[b'a'; 4096]).await;
        assert_eq!(a.status, 413);
        assert_eq!(a.header(MARKER), Some("RequestBodyTooLarge"));
        let a = c.append_as("/private/s", &owner, &[b'b'; 1024]).await;
        assert!(matches!(a.status, 200 | 204), "{}", a.status);
        // The connection survived every refusal.
        let a = c.read_as("/private/s", &owner).await;
        assert_eq!(a.status, 200);
        assert_eq!(a.body.len(), "hello|".len() + 1024);
    });
    assert_eq!(contents(node, "/private/s").len(), "hello|".len() + 1024);
}

#[test]
fn a_connection_silent_or_stopped_inside_the_preface_is_closed_at_the_head_timeout() {
    let f = fronted("h2-silent", &["--request-head-timeout", "1s"]);
    let gw = &f.gw;
    let silent = TcpStream::connect(("127.0.0.1", gw.port)).expect("connect");
    let mut half = TcpStream::connect(("127.0.0.1", gw.port)).expect("connect");
    half.write_all(b"PRI * HTTP/2.0\r\n").expect("write");
    assert!(
        closed_by_peer(&silent, Duration::from_secs(15)),
        "a silent connection stayed open"
    );
    assert!(
        closed_by_peer(&half, Duration::from_secs(15)),
        "half a preface kept the connection open"
    );
    // The listener still serves both protocols.
    assert_eq!(
        send("GET", &gw.url("/demo/none?offset=-1"), &[], b"").status,
        404
    );
    runtime().block_on(async {
        let mut c = H2::connect(gw.port).await;
        assert_eq!(
            c.send("GET", "/demo/none?offset=-1", &[], b"").await.status,
            404
        );
    });
}

#[test]
fn an_upgrade_to_h2c_answers_on_stream_1_and_the_connection_goes_on_in_http2() {
    let f = fronted("h2-upgrade", &[]);
    let gw = &f.gw;
    assert!(matches!(
        send("PUT", &gw.url("/demo"), &[], b"").status,
        200 | 201 | 204
    ));
    assert_eq!(send("PUT", &gw.url("/demo/s"), &[TEXT], b"up|").status, 201);
    // curl's --http2 on an http:// URL asks for the upgrade on its first request and reuses the
    // connection, now HTTP/2, for the second.
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--http2",
            "-w",
            "\n%{http_version} %{num_connects}\n",
        ])
        .arg(gw.url("/demo/s?offset=-1"))
        .arg(gw.url("/demo/none?offset=-1"))
        .output()
        .expect("curl (apt-get install -y curl)");
    let (text, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{text} {stderr}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "up|", "{text}");
    assert_eq!(
        lines[1], "2 1",
        "the upgraded request was not answered in HTTP/2: {text}"
    );
    assert_eq!(
        lines.last().copied(),
        Some("2 0"),
        "the second request: {text}"
    );

    // With a body the request is answered in HTTP/1.1, the upgrade ignored.
    let mut s = TcpStream::connect(("127.0.0.1", gw.port)).expect("connect");
    let req = format!(
        "POST /demo/s HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: Upgrade, HTTP2-Settings\r\n\
         Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nContent-Type: text/plain\r\n\
         Content-Length: 4\r\n\r\nmore",
        gw.port
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut seen = String::new();
    read_until(&mut s, &mut seen, "\r\n\r\n");
    assert!(seen.starts_with("HTTP/1.1 20"), "{seen}");
    assert_eq!(
        send("GET", &gw.url("/demo/s?offset=-1"), &[], b"").body,
        "up|more"
    );
}
