//! Each test runs a tiny HTTP/1.1 server on 127.0.0.1 in a thread, scripted per request.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::token::tests::TempFile;

/// What the server saw: the heads of the requests (lowercase), and connections accepted.
#[derive(Default)]
struct Seen {
    heads: Vec<String>,
    bodies: Vec<Vec<u8>>,
    connections: usize,
}

/// What the script does with a request: answer these bytes and keep the connection, answer and
/// close (an empty answer: close without answering), or write these bytes and then hold the
/// connection open without another byte for a while.
enum Reply {
    Keep(Vec<u8>),
    Close(Vec<u8>),
    Hang(Vec<u8>, Duration),
}

fn answer(status: &str, headers: &[&str], body: &str) -> Vec<u8> {
    let mut s = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for h in headers {
        s.push_str(h);
        s.push_str("\r\n");
    }
    s.push_str("\r\n");
    s.push_str(body);
    s.into_bytes()
}

/// `http://127.0.0.1:<port>` of a port that was free a moment ago and that nothing listens on.
fn closed_base() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind loopback")
        .local_addr()
        .expect("local addr")
        .port();
    format!("http://127.0.0.1:{port}")
}

/// Serves each connection on a thread of its own; `script(n, head)` decides the reply to the
/// server's request `n` (counted across connections).
fn server(
    script: impl Fn(usize, &str) -> Reply + Send + Sync + 'static,
) -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let base = format!("http://{}", listener.local_addr().expect("local addr"));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen2 = Arc::clone(&seen);
    let script = Arc::new(script);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            seen2.lock().expect("seen lock").connections += 1;
            let (script, seen) = (Arc::clone(&script), Arc::clone(&seen2));
            thread::spawn(move || serve_connection(stream, &*script, &seen));
        }
    });
    (base, seen)
}

fn serve_connection(stream: TcpStream, script: &dyn Fn(usize, &str) -> Reply, seen: &Mutex<Seen>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut out = stream;
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line.to_ascii_lowercase());
        }
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse::<usize>().expect("content-length"));
        let mut body = vec![0; len];
        std::io::Read::read_exact(&mut reader, &mut body).expect("request body");
        let n = {
            let mut s = seen.lock().expect("seen lock");
            s.heads.push(head.clone());
            s.bodies.push(body);
            s.heads.len() - 1
        };
        match script(n, &head) {
            Reply::Keep(bytes) => {
                if out.write_all(&bytes).is_err() {
                    return;
                }
            }
            Reply::Close(bytes) => {
                let _ = out.write_all(&bytes);
                return;
            }
            Reply::Hang(bytes, d) => {
                let _ = out.write_all(&bytes);
                thread::sleep(d);
                return;
            }
        }
    }
}

fn config() -> ClientConfig {
    ClientConfig {
        resolve_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_millis(300),
        long_request_timeout: Duration::from_secs(2),
        idle: Duration::from_secs(5),
        ca_file: None,
        proxy: None,
        tokens: Arc::new(Tokens::new(None)),
        dns: DnsPolicy::default(),
    }
}

fn client() -> Client {
    Client::with_config(config())
}

fn get(url: &str) -> Request<'_> {
    Request::new(Method::Get, url)
}

fn answered(a: Attempt) -> Answer {
    match a {
        Attempt::Answered(a) => a,
        other => panic!("expected an answer, got {other:?}"),
    }
}

#[test]
fn redirect_is_returned_not_followed() {
    let (base, seen) = server(|_, _| {
        Reply::Keep(answer(
            "307 Temporary Redirect",
            &["location: /elsewhere"],
            "moved",
        ))
    });
    let url = format!("{base}/s");
    let a = answered(client().send(&Request {
        body: b"frame",
        ..Request::new(Method::Post, &url)
    }));
    assert_eq!(a.status, 307);
    assert_eq!(a.header("Location"), Some("/elsewhere"));
    assert_eq!(a.body, b"moved");
    let seen = seen.lock().expect("seen lock");
    assert_eq!(seen.heads.len(), 1);
    assert!(seen.heads[0].starts_with("post /s "));
    assert_eq!(seen.bodies[0], b"frame");
}

#[test]
fn bodyless_redirect_is_returned() {
    let (base, _) = server(|_, _| {
        Reply::Keep(answer(
            "308 Permanent Redirect",
            &["location: https://x/"],
            "",
        ))
    });
    let a = answered(client().send(&get(&base)));
    assert_eq!((a.status, a.header("location")), (308, Some("https://x/")));
}

#[test]
fn status_503_is_answered_with_headers_and_body() {
    let (base, _) = server(|_, _| {
        Reply::Keep(answer(
            "503 Service Unavailable",
            &[
                "Retry-After: 2",
                "X-Ursula-Not-Applied: RaftLogPressure",
                "x-ursula-not-applied-checked: 1",
            ],
            "busy",
        ))
    });
    let a = answered(client().send(&get(&base)));
    assert_eq!(a.status, 503);
    assert_eq!(a.header("retry-after"), Some("2"));
    assert_eq!(a.header("X-URSULA-NOT-APPLIED"), Some("RaftLogPressure"));
    assert!(
        a.headers
            .iter()
            .any(|(n, _)| n == "x-ursula-not-applied-checked")
    );
    assert_eq!(a.body, b"busy");
}

#[test]
fn refused_connection_is_refused_not_just_never_sent() {
    let url = format!("{}/s", closed_base());
    match client().send(&get(&url)) {
        Attempt::Refused(why) => assert!(why.contains("refused"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unresolvable_host_is_never_sent() {
    match client().send(&get("http://no-such-host.invalid/s")) {
        Attempt::NeverSent(_) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn close_without_answer_is_no_answer() {
    let (base, _) = server(|_, _| Reply::Close(Vec::new()));
    match client().send(&Request {
        body: b"x",
        ..Request::new(Method::Put, &base)
    }) {
        Attempt::NoAnswer(_) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn half_answer_is_no_answer() {
    let (base, _) =
        server(|_, _| Reply::Close(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc".to_vec()));
    match client().send(&get(&base)) {
        Attempt::NoAnswer(_) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn silent_server_times_out_as_no_answer() {
    let (base, _) = server(|_, _| Reply::Hang(Vec::new(), Duration::from_secs(3)));
    let t = Instant::now();
    match client().send(&get(&base)) {
        Attempt::NoAnswer(why) => assert_eq!(why, "timeout: request"),
        other => panic!("{other:?}"),
    }
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(1500),
        "{took:?}"
    );
}

#[test]
fn long_requests_get_the_long_timeout() {
    let (base, _) = server(|_, _| {
        thread::sleep(Duration::from_millis(500));
        Reply::Keep(answer("200 OK", &[], "late"))
    });
    let c = client();
    assert!(matches!(c.send(&get(&base)), Attempt::NoAnswer(_)));
    let a = answered(c.send(&Request {
        long: true,
        ..get(&base)
    }));
    assert_eq!(a.body, b"late");
}

#[test]
fn stalled_body_times_out() {
    let (base, _) = server(|_, _| {
        Reply::Hang(
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nabc".to_vec(),
            Duration::from_secs(2),
        )
    });
    match client().send(&get(&base)) {
        Attempt::NoAnswer(why) => assert_eq!(why, "timeout: request"),
        other => panic!("{other:?}"),
    }
    // Streamed, the same stall fails the caller's read, in the same words.
    let (status, _, mut reader) = client().send_streaming(&get(&base)).expect("answered");
    assert_eq!(status, 200);
    let mut v = Vec::new();
    let e = reader.read_to_end(&mut v).expect_err("stalled body");
    assert_eq!(read_failure(e), "timeout: request");
}

#[test]
fn pooled_connection_is_reused_and_a_dead_one_gives_no_answer() {
    let (base, seen) = server(|n, _| match n {
        0 => Reply::Keep(answer("200 OK", &[], "a")),
        _ => Reply::Close(Vec::new()),
    });
    let c = client();
    assert_eq!(answered(c.send(&get(&base))).body, b"a");
    // Same connection: the server reads the request, then closes it without an answer.
    assert!(matches!(c.send(&get(&base)), Attempt::NoAnswer(_)));
    assert_eq!(seen.lock().expect("seen lock").connections, 1);
}

#[test]
fn idle_zero_opens_a_connection_per_request() {
    let (base, seen) = server(|_, _| Reply::Keep(answer("204 No Content", &[], "")));
    let c = Client::with_config(ClientConfig {
        idle: Duration::ZERO,
        ..config()
    });
    for _ in 0..3 {
        assert_eq!(answered(c.send(&get(&base))).status, 204);
    }
    assert_eq!(seen.lock().expect("seen lock").connections, 3);
}

#[test]
fn user_agent_is_sent() {
    let (base, seen) = server(|_, _| Reply::Keep(answer("200 OK", &[], "")));
    answered(client().send(&Request::new(Method::Head, &base)));
    let head = seen.lock().expect("seen lock").heads[0].clone();
    assert!(
        head.contains(&format!(
            "user-agent: sqlite-ursula-vfs/{}\r\n",
            env!("CARGO_PKG_VERSION")
        )),
        "{head}"
    );
}

#[test]
fn bearer_token_is_sent_until_unset() {
    let (base, seen) = server(|_, _| Reply::Keep(answer("200 OK", &[], "")));
    let tokens = Arc::new(Tokens::new(None));
    let c = Client::with_config(ClientConfig {
        tokens: Arc::clone(&tokens),
        ..config()
    });
    answered(c.send(&get(&base)));
    tokens.set(Some("s3cret".into()));
    answered(c.send(&get(&base)));
    tokens.set(None);
    answered(c.send(&get(&base)));
    let heads = seen.lock().expect("seen lock").heads.clone();
    assert!(!heads[0].contains("authorization"));
    assert!(
        heads[1].contains("authorization: bearer s3cret\r\n"),
        "{}",
        heads[1]
    );
    assert!(!heads[2].contains("authorization"));
}

#[test]
fn token_file_is_read_again_after_it_changes() {
    let (base, seen) = server(|_, _| Reply::Keep(answer("200 OK", &[], "")));
    let f = TempFile::new("client-tok");
    f.write("first\n");
    let c = Client::with_config(ClientConfig {
        tokens: Arc::new(Tokens::new(Some(f.0.clone()))),
        ..config()
    });
    answered(c.send(&get(&base)));
    f.write("second-token\n");
    answered(c.send(&get(&base)));
    let heads = seen.lock().expect("seen lock").heads.clone();
    assert!(heads[0].contains("authorization: bearer first\r\n"));
    assert!(heads[1].contains("authorization: bearer second-token\r\n"));
}

#[test]
fn unreadable_ca_file_fails_https_as_never_sent() {
    let (base, seen) = server(|_, _| Reply::Keep(answer("200 OK", &[], "")));
    let missing = TempFile::new("no-ca");
    let c = Client::with_config(ClientConfig {
        ca_file: Some(missing.0.clone()),
        ..config()
    });
    let https = base.replace("http://", "https://");
    match c.send(&get(&https)) {
        Attempt::NeverSent(why) => assert!(why.starts_with("ca file unreadable"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(seen.lock().expect("seen lock").connections, 0);
    // Plain http does not need the CAs.
    answered(c.send(&get(&base)));
}

#[test]
fn ca_file_without_certificates_fails_https_as_never_sent() {
    let f = TempFile::new("empty-ca");
    f.write("not a certificate\n");
    let c = Client::with_config(ClientConfig {
        ca_file: Some(f.0.clone()),
        ..config()
    });
    match c.send(&get("https://127.0.0.1:9/")) {
        Attempt::NeverSent(why) => {
            assert!(why.starts_with("ca file without certificates"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn failed_tls_handshake_is_never_sent() {
    // A plain HTTP server: it answers the ClientHello with garbage, or closes.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("local addr").port();
    thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    match client().send(&get(&format!("https://127.0.0.1:{port}/"))) {
        Attempt::NeverSent(why) => assert!(why.starts_with("io:"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn streaming_body_is_read_by_the_caller() {
    let body = "x".repeat(200_000);
    let b2 = body.clone();
    let (base, _) =
        server(move |_, _| Reply::Keep(answer("200 OK", &["stream-next-offset: 7"], &b2)));
    let (status, headers, mut reader) = client()
        .send_streaming(&Request {
            long: true,
            ..get(&base)
        })
        .expect("answered");
    assert_eq!(status, 200);
    assert_eq!(header_in(&headers, "Stream-Next-Offset"), Some("7"));
    // Read on another thread: the request's deadline goes with the connection.
    let got = thread::spawn(move || {
        let mut v = Vec::new();
        reader.read_to_end(&mut v).expect("body");
        v
    })
    .join()
    .expect("reader thread");
    assert_eq!(got.len(), body.len());
}

#[test]
fn streaming_refused_is_refused() {
    let url = format!("{}/", closed_base());
    assert!(matches!(
        client().send_streaming(&get(&url)),
        Err(Attempt::Refused(_))
    ));
}

#[test]
fn loopback_hosts() {
    assert!(is_loopback("127.0.0.1") && is_loopback("127.9.9.9") && is_loopback("[::1]"));
    assert!(is_loopback("localhost") && is_loopback("[::ffff:127.0.0.1]"));
    assert!(!is_loopback("10.0.0.1") && !is_loopback("example.com"));
}

#[test]
fn connection_the_server_closed_while_idle_is_replaced() {
    let (base, seen) = server(|_, _| Reply::Close(answer("200 OK", &[], "ok")));
    let c = client();
    assert_eq!(answered(c.send(&get(&base))).body, b"ok");
    thread::sleep(Duration::from_millis(50));
    // The pooled connection is closed: a new one carries the request, which is answered.
    assert_eq!(answered(c.send(&get(&base))).body, b"ok");
    assert_eq!(seen.lock().expect("seen lock").connections, 2);
}

/// What the CONNECT proxy does after reading a CONNECT.
#[derive(Clone, Copy)]
enum Tunnel {
    Refuse,
    /// Says 200, reads what comes through, then closes.
    AcceptThenDrop,
    Forward,
}

/// A one-connection-at-a-time CONNECT proxy; returns its URL and the CONNECT heads it read.
fn proxy(mode: Tunnel) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("local addr"));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let heads2 = Arc::clone(&heads);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut client) = stream else { return };
            let mut reader = BufReader::new(client.try_clone().expect("clone stream"));
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line.to_ascii_lowercase());
            }
            heads2.lock().expect("heads lock").push(head.clone());
            match mode {
                Tunnel::Refuse => {
                    let _ =
                        client.write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");
                }
                Tunnel::AcceptThenDrop => {
                    let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                    let mut line = String::new();
                    let _ = reader.read_line(&mut line);
                }
                Tunnel::Forward => {
                    let target = head
                        .split_whitespace()
                        .nth(1)
                        .expect("CONNECT target")
                        .to_owned();
                    let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                    let upstream = TcpStream::connect(target).expect("connect upstream");
                    let mut up_w = upstream.try_clone().expect("clone stream");
                    let mut up_r = upstream;
                    // The reader may hold bytes already; the request follows the CONNECT.
                    thread::spawn(move || {
                        let _ = std::io::copy(&mut reader, &mut up_w);
                    });
                    let _ = std::io::copy(&mut up_r, &mut client);
                }
            }
        }
    });
    (url, heads)
}

fn via(proxy_url: &str) -> Client {
    let p = ureq::Proxy::new(proxy_url).expect("proxy url");
    Client::with_config(ClientConfig {
        proxy: Some(p),
        ..config()
    })
}

#[test]
fn refused_connect_is_never_sent() {
    let (proxy_url, heads) = proxy(Tunnel::Refuse);
    match via(&proxy_url).send(&get("http://stream.example:8080/s")) {
        Attempt::NeverSent(why) => assert!(why.contains("403"), "{why}"),
        other => panic!("{other:?}"),
    }
    let heads = heads.lock().expect("heads lock");
    assert!(
        heads[0].starts_with("connect stream.example:8080 "),
        "{}",
        heads[0]
    );
    assert!(
        heads[0].contains("user-agent: sqlite-ursula-vfs/"),
        "{}",
        heads[0]
    );
}

#[test]
fn request_lost_in_the_tunnel_is_no_answer() {
    let (proxy_url, _) = proxy(Tunnel::AcceptThenDrop);
    // The CONNECT's bytes do not count as the request's: only the request lost in the tunnel
    // makes this no answer.
    match via(&proxy_url).send(&get("http://stream.example:8080/s")) {
        Attempt::NoAnswer(_) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn request_through_the_tunnel_is_answered() {
    let (base, seen) = server(|_, _| Reply::Keep(answer("200 OK", &[], "through")));
    let (proxy_url, heads) = proxy(Tunnel::Forward);
    let a = answered(via(&proxy_url).send(&get(&format!("{base}/s"))));
    assert_eq!(a.body, b"through");
    assert_eq!(heads.lock().expect("heads lock").len(), 1);
    assert!(seen.lock().expect("seen lock").heads[0].starts_with("get /s "));
}

#[test]
fn offset_headers_are_absent_an_offset_or_an_error_naming_the_value() {
    let answer = |value: &str| Answer {
        status: 200,
        headers: vec![("stream-next-offset".to_owned(), value.to_owned())],
        body: Vec::new(),
    };
    let name = ursula_protocol::headers::STREAM_NEXT_OFFSET;
    assert_eq!(
        answer("00000000000000000042").offset(name),
        Ok(Some(Offset(42)))
    );
    let none = Answer {
        headers: Vec::new(),
        ..answer("")
    };
    assert_eq!(none.offset(name), Ok(None));
    for bad in ["42", "-1", "now", "0000000000000000004x", ""] {
        let e = answer(bad).offset(name).expect_err(bad);
        assert_eq!(e.value, bad);
        assert!(
            e.to_string()
                .starts_with("the server sent stream-next-offset: "),
            "{e}"
        );
    }
}
