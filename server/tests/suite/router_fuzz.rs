//! Bad input never panics or 500s. A proptest barrage of random requests (methods, paths with
//! percent-encoded junk, non-UTF-8 and overlong IDs, random header sets with invalid bytes,
//! random bodies) hits the router, aimed mostly at a few fuzz streams so the state machine is
//! exercised too. After every request:
//! - the status is below 500, or a documented `503` with `Retry-After`;
//! - a 4xx has a body that says what was wrong (except for HEAD), a 405 has `Allow`;
//! - a control stream created before the barrage, which no generated path can name, is
//!   byte-identical and reports the same metadata;
//! - the fuzz streams stay append-only: while a stream keeps its incarnation, every byte that
//!   was committed and is still retained reads back unchanged.

use std::time::Duration;

use crate::harness::router::Server;
use crate::harness::router::off;
use axum::body::Body;
use axum::http::HeaderName;
use axum::http::HeaderValue;
use axum::http::Method;
use axum::http::Request;
use axum::http::StatusCode;
use axum::http::Uri;
use bytes::Bytes;
use http_body_util::BodyExt;
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use proptest::test_runner::TestCaseError;
use proptest::test_runner::TestRunner;
use tower::ServiceExt;

const CONTROL: &str = "/ctrlbkt/control";
const CONTROL_BUCKET: &[u8] = b"ctrlbkt";
const TARGETS: [&str; 3] = ["/fuzz/s1", "/fuzz/j1", "/v1/stream/s1"];

#[derive(Debug, Clone)]
struct Case {
    method: Method,
    uri: String,
    headers: Vec<(&'static str, Vec<u8>)>,
    body: Vec<u8>,
}

fn percent_junk() -> BoxedStrategy<String> {
    proptest::collection::vec(any::<u8>(), 1..10)
        .prop_map(|b| b.iter().map(|x| format!("%{x:02X}")).collect())
        .boxed()
}

fn segment() -> BoxedStrategy<String> {
    prop_oneof![
        3 => Just("fuzz".to_owned()),
        3 => Just("s1".to_owned()),
        2 => "[a-z0-9_-]{1,12}",
        2 => "[a-zA-Z0-9._~$!*'()+,;=:@-]{0,16}",
        2 => percent_junk(),
        1 => (1usize..700).prop_map(|n| "x".repeat(n)),
        1 => (1usize..60).prop_map(|n| "%C3%A9".repeat(n)),
        1 => prop::sample::select(vec![
            "é", "✓", "%C3%A9", "..", "%2e%2e", "a..b", "streams", "$x", "%24x", "__v1", "snapshots", "%00", "a%2Fb",
            "%FF", "%C3", "%ED%A0%80", "%", "%G1", "v1", "stream", "__ursula", "bootstrap", "snapshot", "retention",
        ])
        .prop_map(str::to_owned),
    ]
    .boxed()
}

fn offsetish() -> BoxedStrategy<String> {
    prop_oneof![
        (0u64..40).prop_map(off),
        any::<u64>().prop_map(off),
        Just("-1".to_owned()),
        Just("now".to_owned()),
        Just("99999999999999999999".to_owned()),
        Just("00000000000000000001%30".to_owned()),
        segment(),
    ]
    .boxed()
}

fn suffix() -> BoxedStrategy<String> {
    prop_oneof![
        4 => Just(String::new()),
        1 => Just("/bootstrap".to_owned()),
        1 => Just("/snapshot".to_owned()),
        2 => offsetish().prop_map(|o| format!("/snapshot/{o}")),
        2 => offsetish().prop_map(|o| format!("/retention/{o}")),
        1 => segment().prop_map(|s| format!("/{s}")),
        1 => (segment(), segment()).prop_map(|(a, b)| format!("/{a}/{b}")),
        1 => Just("/".to_owned()),
    ]
    .boxed()
}

fn path() -> BoxedStrategy<String> {
    prop_oneof![
        6 => (prop::sample::select(TARGETS.to_vec()), suffix()).prop_map(|(t, s)| format!("{t}{s}")),
        3 => (segment(), segment(), suffix()).prop_map(|(b, s, x)| format!("/{b}/{s}{x}")),
        1 => segment().prop_map(|b| format!("/{b}")),
        1 => (segment(), suffix()).prop_map(|(s, x)| format!("/v1/stream/{s}{x}")),
        1 => segment().prop_map(|s| format!("/__ursula/{s}")),
        1 => prop::sample::select(vec!["/", "//", "/__ursula/metrics", "/__ursula/ready", "/fuzz//s1", "/fuzz/s1/"])
            .prop_map(str::to_owned),
        1 => "/[a-zA-Z0-9/%._~-]{0,40}",
    ]
    .boxed()
}

fn query_value() -> BoxedStrategy<String> {
    prop_oneof![
        offsetish(),
        prop::sample::select(vec![
            "sse",
            "long-poll",
            "poll",
            "",
            "local",
            "leader",
            "0",
            "1",
            "5",
            "abc",
            "-5",
            "1.5"
        ])
        .prop_map(str::to_owned),
        (0u64..20_000_000).prop_map(|n| n.to_string()),
        percent_junk(),
    ]
    .boxed()
}

fn query_pair() -> BoxedStrategy<String> {
    let keys = vec![
        "offset",
        "live",
        "max_bytes",
        "cursor",
        "consistency",
        "record",
        "tail_records",
        "max_records",
        "record_view",
        "stream-cursor",
        "junk",
    ];
    prop_oneof![
        8 => (prop::sample::select(keys), query_value()).prop_map(|(k, v)| format!("{k}={v}")),
        // Long-polls may wait: keep their waits short.
        1 => prop::sample::select(vec!["0", "1", "7", "x", ""]).prop_map(|v| format!("timeout_ms={v}")),
        1 => percent_junk(),
        1 => "[a-z=&%]{0,12}",
    ]
    .boxed()
}

fn uri() -> BoxedStrategy<String> {
    (
        path(),
        proptest::option::of(proptest::collection::vec(query_pair(), 0..5)),
    )
        .prop_map(|(p, q)| match q {
            Some(pairs) => format!("{p}?{}", pairs.join("&")),
            None => p,
        })
        .boxed()
}

/// Bytes a header value may hold: visible ASCII, tab and obs-text.
fn header_bytes() -> BoxedStrategy<Vec<u8>> {
    proptest::collection::vec(prop_oneof![0x20u8..0x7f, 0x80u8..=0xff, Just(b'\t')], 0..40).boxed()
}

fn header() -> BoxedStrategy<(&'static str, Vec<u8>)> {
    let names = vec![
        "content-type",
        "stream-closed",
        "stream-seq",
        "stream-ttl",
        "stream-expires-at",
        "producer-id",
        "producer-epoch",
        "producer-seq",
        "stream-incarnation",
        "content-length",
        "if-none-match",
        "stream-record-match",
        "stream-snapshot-match",
        "host",
        "x-junk",
        "prefer",
        "access-control-request-headers",
    ];
    let good = vec![
        "application/octet-stream",
        "application/json",
        "text/plain",
        "application/json; charset=utf-8",
        "true",
        "TRUE",
        "false",
        "0",
        "1",
        "5",
        "-1",
        "9007199254740991",
        "9007199254740992",
        "p1",
        "0000000000000001",
        "",
        "2099-01-01T00:00:00Z",
        "2000-01-01T00:00:00Z",
        "*",
        "\"x\"",
        "40000000",
        "3",
        "1000",
    ];
    (
        prop::sample::select(names),
        prop_oneof![3 => prop::sample::select(good).prop_map(|v| v.as_bytes().to_vec()), 1 => header_bytes()],
    )
    .boxed()
}

fn body() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        3 => Just(Vec::new()),
        3 => proptest::collection::vec(any::<u8>(), 1..200),
        3 => prop::sample::select(vec![
            "[1,2]", "{\"a\":1}", "[]", "[", "{\"a\":", "\"\\ud800\"", "1e400", "{} {}", "[[1],[2]]", "null", "x",
            "\"\u{e9}\"",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        1 => (1usize..300).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes()),
    ]
    .boxed()
}

fn method() -> BoxedStrategy<Method> {
    prop_oneof![
        3 => Just(Method::GET),
        3 => Just(Method::POST),
        3 => Just(Method::PUT),
        1 => Just(Method::HEAD),
        1 => Just(Method::DELETE),
        1 => Just(Method::OPTIONS),
        1 => Just(Method::PATCH),
        1 => Just(Method::from_bytes(b"BREW").expect("a valid extension method")),
    ]
    .boxed()
}

/// Anything at all.
fn hostile_case() -> BoxedStrategy<Case> {
    (
        method(),
        uri(),
        proptest::collection::vec(header(), 0..7),
        body(),
    )
        .prop_map(|(method, uri, headers, body)| Case {
            method,
            uri,
            headers,
            body,
        })
        .boxed()
}

/// A request a client could mean, aimed at a fuzz stream with its own content type, so that
/// most of them reach the state machine: appends with and without producers and `Stream-Seq`,
/// closes, reads in every mode, snapshots, retention, deletes and re-creates.
fn plausible_case() -> BoxedStrategy<Case> {
    let target = prop::sample::select(vec![
        ("/fuzz/s1", "application/octet-stream"),
        ("/fuzz/j1", "application/json"),
        ("/v1/stream/s1", "text/plain"),
    ]);
    let method = prop_oneof![
        8 => Just(Method::POST),
        4 => Just(Method::GET),
        1 => Just(Method::PUT),
        1 => Just(Method::HEAD),
    ];
    let read_query = prop_oneof![
        Just(String::new()),
        (0u64..60).prop_map(|o| format!("?offset={}", off(o))),
        Just("?offset=-1".to_owned()),
        Just("?offset=now".to_owned()),
        (0u64..60, 0u64..20).prop_map(|(o, m)| format!("?offset={}&max_bytes={m}", off(o))),
        (0u64..60, 0u64..5)
            .prop_map(|(o, t)| format!("?offset={}&live=long-poll&timeout_ms={t}", off(o))),
        Just("?offset=-1&live=sse".to_owned()),
        Just("?offset=now&live=long-poll&timeout_ms=1".to_owned()),
    ];
    let suffix = prop_oneof![
        12 => Just(String::new()),
        1 => Just("/bootstrap".to_owned()),
        1 => (0u64..60).prop_map(|o| format!("/snapshot/{}", off(o))),
        1 => (0u64..60).prop_map(|o| format!("/retention/{}", off(o))),
    ];
    let producer = proptest::option::weighted(0.4, (0u8..3, 0u64..3, 0u64..6));
    let stream_seq = proptest::option::weighted(
        0.2,
        prop::sample::select(vec!["a", "b", "c", "m", "z", "10", "9", ""]),
    );
    let closed = proptest::option::weighted(0.03, Just("true"));
    let body = prop_oneof![
        4 => prop::sample::select(vec!["[1,2]", "{\"a\":1}", "\"x\"", "[[1],[2]]", "7", "[]", "{", "abc"])
            .prop_map(|s| s.as_bytes().to_vec()),
        2 => proptest::collection::vec(any::<u8>(), 1..40),
        1 => Just(Vec::new()),
    ];
    let delete = proptest::bool::weighted(0.02);
    (
        target, method, read_query, suffix, producer, stream_seq, closed, body, delete,
    )
        .prop_map(
            |((path, ctype), method, query, suffix, producer, seq, closed, body, delete)| {
                let method = if delete { Method::DELETE } else { method };
                let mut headers: Vec<(&'static str, Vec<u8>)> =
                    vec![("content-type", ctype.as_bytes().to_vec())];
                if let Some((id, epoch, seq)) = producer {
                    headers.push(("producer-id", format!("p{id}").into_bytes()));
                    headers.push(("producer-epoch", epoch.to_string().into_bytes()));
                    headers.push(("producer-seq", seq.to_string().into_bytes()));
                }
                if let Some(v) = seq {
                    headers.push(("stream-seq", v.as_bytes().to_vec()));
                }
                if let Some(v) = closed {
                    headers.push(("stream-closed", v.as_bytes().to_vec()));
                }
                let uri = match method {
                    Method::GET if suffix.is_empty() => format!("{path}{query}"),
                    _ => format!("{path}{suffix}"),
                };
                Case {
                    method,
                    uri,
                    headers,
                    body,
                }
            },
        )
        .boxed()
}

fn case() -> BoxedStrategy<Case> {
    prop_oneof![hostile_case(), plausible_case()].boxed()
}

fn percent_decode(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if raw[i] == b'%'
            && i + 2 < raw.len()
            && let (Some(h), Some(l)) = (hex(raw[i + 1]), hex(raw[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

fn names_control(uri: &str) -> bool {
    let decoded = percent_decode(uri.as_bytes());
    decoded
        .windows(CONTROL_BUCKET.len())
        .any(|w| w == CONTROL_BUCKET)
}

fn header_str(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// Sends one request and checks the answer; `Ok(None)` when `http` cannot even express it.
async fn fire(s: &Server, c: &Case) -> Result<Option<StatusCode>, TestCaseError> {
    let Ok(uri) = Uri::try_from(c.uri.as_str()) else {
        return Ok(None);
    };
    let mut req = Request::new(Body::from(c.body.clone()));
    *req.method_mut() = c.method.clone();
    *req.uri_mut() = uri;
    for (name, value) in &c.headers {
        let Ok(value) = HeaderValue::from_bytes(value) else {
            continue;
        };
        req.headers_mut()
            .append(HeaderName::from_static(name), value);
    }
    let resp = tokio::time::timeout(Duration::from_secs(10), s.app().oneshot(req))
        .await
        .map_err(|_| TestCaseError::fail("no answer within 10 s"))?
        .unwrap_or_else(|never| match never {});
    let (parts, body) = resp.into_parts();
    let sse = header_str(&parts.headers, "content-type").as_deref() == Some("text/event-stream");
    let body: Bytes = if sse {
        // A live SSE body never ends: take what arrives first and hang up.
        let mut body = body;
        match tokio::time::timeout(Duration::from_millis(300), body.frame()).await {
            Ok(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
            Ok(Some(Err(e))) => return Err(TestCaseError::fail(format!("SSE body failed: {e}"))),
            Ok(None) | Err(_) => Bytes::new(),
        }
    } else {
        tokio::time::timeout(Duration::from_secs(10), body.collect())
            .await
            .map_err(|_| TestCaseError::fail("the body did not end within 10 s"))?
            .map_err(|e| TestCaseError::fail(format!("the body failed: {e}")))?
            .to_bytes()
    };
    let status = parts.status;
    let shown = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    prop_assert!(
        status.as_u16() < 500
            || (status == StatusCode::SERVICE_UNAVAILABLE
                && parts.headers.contains_key("retry-after")),
        "answered {status} with body {shown:?}"
    );
    if status.is_client_error() {
        prop_assert!(
            c.method == Method::HEAD || !body.is_empty(),
            "{status} with an empty body"
        );
        prop_assert!(
            parts.headers.contains_key("content-type"),
            "{status} without Content-Type"
        );
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        prop_assert!(parts.headers.contains_key("allow"), "405 without Allow");
    }
    prop_assert!(
        !parts.headers.contains_key("x-ursula-not-applied-checked"),
        "a node never sends the vouch"
    );
    Ok(Some(status))
}

/// What the control stream looks like: its bytes and the metadata HEAD reports.
async fn control_state(s: &Server) -> (Vec<u8>, Vec<Option<String>>) {
    let bytes = s.read_all(CONTROL).await;
    let h = s.head(CONTROL).expect(200).await;
    let meta = [
        "content-type",
        "stream-next-offset",
        "stream-incarnation",
        "stream-retained-offset",
        "stream-snapshot-offset",
        "stream-snapshot-digest",
        "stream-closed",
        "stream-ttl",
    ]
    .iter()
    .map(|n| h.header(n).map(str::to_owned))
    .collect();
    (bytes, meta)
}

/// A fuzz stream's incarnation, retained offset and retained bytes, when it exists.
#[derive(Debug, Clone)]
struct Seen {
    incarnation: String,
    retained: u64,
    bytes: Vec<u8>,
}

async fn observe(s: &Server, path: &str) -> Result<Option<Seen>, TestCaseError> {
    let h = s.head(path).send().await;
    if h.status != StatusCode::OK {
        prop_assert_eq!(
            h.status,
            StatusCode::NOT_FOUND,
            "HEAD {} answered {}",
            path,
            h.status
        );
        return Ok(None);
    }
    let incarnation = h
        .header("stream-incarnation")
        .unwrap_or_default()
        .to_owned();
    let retained_token = h
        .header("stream-retained-offset")
        .unwrap_or_default()
        .to_owned();
    let retained: u64 = retained_token
        .parse()
        .map_err(|_| TestCaseError::fail("bad retained offset"))?;
    let bytes = s.read_from(path, &retained_token).await;
    Ok(Some(Seen {
        incarnation,
        retained,
        bytes,
    }))
}

fn still_append_only(path: &str, before: &Seen, after: &Seen) -> Result<(), TestCaseError> {
    if before.incarnation != after.incarnation {
        return Ok(());
    }
    prop_assert!(
        after.retained >= before.retained,
        "{path}: retention moved back"
    );
    let from = after.retained;
    let old_end = before.retained + before.bytes.len() as u64;
    if from >= old_end {
        return Ok(());
    }
    let old = &before.bytes[(from - before.retained) as usize..];
    let new = &after.bytes[..];
    prop_assert!(
        new.len() >= old.len() && new[..old.len()] == *old,
        "{path}: committed bytes changed"
    );
    Ok(())
}

#[test]
fn random_requests_never_5xx_always_explain_4xx_and_leave_committed_data_alone() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let s = rt.block_on(Server::with_state(crate::harness::router::config(), |st| {
        st.long_poll_default_ms = 10
    }));
    let before = rt.block_on(async {
        s.put(CONTROL)
            .ctype("application/json")
            .header("stream-ttl", "3600")
            .body(r#"[{"n":1},{"n":2}]"#)
            .expect(201)
            .await;
        s.post(CONTROL)
            .ctype("application/json")
            .header("producer-id", "c")
            .header("producer-epoch", "1")
            .header("producer-seq", "0")
            .header("stream-seq", "m")
            .body("3")
            .expect(200)
            .await;
        s.put(&format!("{CONTROL}/snapshot/{}", off(8)))
            .body("snap")
            .expect(204)
            .await;
        s.put("/fuzz/s1").expect(201).await;
        s.append("/fuzz/s1", "application/octet-stream", "seed")
            .await;
        s.put("/fuzz/j1")
            .ctype("application/json")
            .body("[1,2,3]")
            .expect(201)
            .await;
        s.put("/v1/stream/s1")
            .ctype("text/plain")
            .body("compat")
            .expect(201)
            .await;
        control_state(&s).await
    });
    let config = ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let seen = std::cell::RefCell::new(std::collections::HashMap::new());
    let statuses = std::cell::RefCell::new(std::collections::BTreeMap::<u16, usize>::new());
    let result = runner.run(&case(), |c| {
        if names_control(&c.uri) {
            return Ok(());
        }
        rt.block_on(async {
            if let Some(status) = fire(&s, &c).await? {
                *statuses.borrow_mut().entry(status.as_u16()).or_default() += 1;
            }
            prop_assert!(
                control_state(&s).await == before,
                "the control stream changed after {c:?}"
            );
            for path in TARGETS {
                let now = observe(&s, path).await?;
                let mut seen = seen.borrow_mut();
                if let (Some(prev), Some(cur)) = (seen.get(path), &now) {
                    still_append_only(path, prev, cur)?;
                }
                match now {
                    Some(cur) => seen.insert(path, cur),
                    None => seen.remove(path),
                };
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The barrage must reach past the request parser into the state machine, or it proves little.
    let statuses = statuses.into_inner();
    eprintln!("statuses: {statuses:?}");
    let count = |range: std::ops::Range<u16>| statuses.range(range).map(|(_, n)| n).sum::<usize>();
    assert!(count(200..300) >= 200, "too few successes: {statuses:?}");
    assert!(count(400..500) >= 200, "too few refusals: {statuses:?}");
    for status in [201, 204, 400, 404, 405, 409] {
        assert!(
            statuses.contains_key(&status),
            "no {status} in {statuses:?}"
        );
    }
}

#[test]
fn truncated_and_oversized_bodies_are_refused_and_store_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let s = rt.block_on(Server::new());
    rt.block_on(async {
        s.create("/fuzz/s1", "application/octet-stream").await;
        s.append("/fuzz/s1", "application/octet-stream", "keep")
            .await;
    });
    let config = ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = (
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..6),
        any::<bool>(),
        0u8..3,
    );
    let result = runner.run(&strategy, |(chunks, json, how)| {
        rt.block_on(async {
            let ctype = if json {
                "application/json"
            } else {
                "application/octet-stream"
            };
            let mut parts: Vec<Result<Bytes, std::io::Error>> =
                chunks.into_iter().map(|c| Ok(Bytes::from(c))).collect();
            let req = s.post("/fuzz/s1").ctype(ctype);
            let (req, want) = match how {
                // The connection fails midway through the body.
                0 => {
                    parts.push(Err(std::io::Error::other("reset")));
                    (req, 400)
                }
                // Content-Length declares more than the limit.
                1 => (req.header("content-length", "33554433"), 413),
                // Content-Length is not a number.
                _ => (req.header("content-length", "12x"), 400),
            };
            let body = Body::from_stream(futures_util::stream::iter(parts));
            let r = req.raw_body(body).send().await;
            prop_assert_eq!(r.status.as_u16(), want, "body {:?}", r.text());
            prop_assert!(!r.body.is_empty());
            prop_assert_eq!(s.read_all("/fuzz/s1").await, b"keep".to_vec());
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
