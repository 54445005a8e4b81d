//! Helpers shared by the in-process router tests: a server built from a small config, a tiny
//! request builder driven through `tower::ServiceExt::oneshot`, and assertions on the answer.
//!
//! The suite runs against either engine: the in-memory one, or with `URSULA_TEST_ENGINE=raft`
//! a single Raft node over a disk WAL in a scratch directory (`scripts/test.sh` runs both), so
//! the claim that both engines drive the same state machine the same way is tested.

#![allow(dead_code)]

use std::fmt::Display;
use std::future::Future;
use std::panic::Location;
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::HeaderName;
use axum::http::HeaderValue;
use axum::http::Method;
use axum::http::Request;
use axum::http::Response;
use axum::http::StatusCode;
use axum::http::Uri;
use bytes::Bytes;
use http_body_util::BodyExt;
use tower::ServiceExt;
use ursula::config::Config;
use ursula::config::EngineChoice;
use ursula::config::Overrides;
use ursula::config::resolve_from;
use ursula::http::AppState;
use ursula::http::ClientPlane;

/// A list of request headers, `(name, value)`, for tables of cases.
pub type Headers<'a> = &'a [(&'a str, &'a str)];

/// How long any single non-live request may take before the test fails.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// A small in-memory config (no config file): two cores, eight groups, the default live-reader
/// cap.
pub fn config() -> Config {
    let mut c = resolve_from(None, &Overrides::default()).expect("the default config resolves");
    c.core_count = 2;
    c.group_count = 8;
    c
}

/// The 20-character token of a byte offset.
pub fn off(n: u64) -> String {
    format!("{n:020}")
}

#[derive(Clone)]
pub struct Server {
    pub state: AppState,
    app: ClientPlane,
    /// The Raft engine's WAL directory, removed with the last clone.
    _wal: Option<std::sync::Arc<tempfile::TempDir>>,
}

/// Whether this run drives the suite through a single Raft node (`URSULA_TEST_ENGINE=raft`).
pub fn raft_engine() -> bool {
    std::env::var("URSULA_TEST_ENGINE").is_ok_and(|e| e == "raft")
}

impl Server {
    pub async fn new() -> Server {
        Server::with_config(config()).await
    }

    pub async fn with_config(c: Config) -> Server {
        Server::with_state(c, |_| {}).await
    }

    /// A server holding one stream, `path` of `ctype`, with `body` appended unless it is empty.
    pub async fn with_stream(path: &str, ctype: &str, body: impl Into<Bytes>) -> Server {
        let s = Server::new().await;
        s.create(path, ctype).await;
        let body = body.into();
        if !body.is_empty() {
            s.append(path, ctype, body).await;
        }
        s
    }

    /// A server whose `AppState` is adjusted before the router is built.
    pub async fn with_state(mut c: Config, adjust: impl FnOnce(&mut AppState)) -> Server {
        let wal = raft_engine().then(|| {
            let dir = tempfile::tempdir().expect("a WAL directory");
            c.engine = EngineChoice::Raft {
                wal_dir: Some(dir.path().to_owned()),
                fsync_always: false,
                segment_size: 64 << 20,
                cache_size: 256 << 20,
                peers: Default::default(),
                peer_secret: None,
            };
            std::sync::Arc::new(dir)
        });
        let node = ursula::node::start_state(&c)
            .await
            .expect("the node state builds");
        let mut state = node.state;
        adjust(&mut state);
        // A single Raft node elects itself in every group; the suite starts once it did.
        let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
        while !(0..state.rt.group_count()).all(|g| state.engine.leads(g)) {
            assert!(
                std::time::Instant::now() < deadline,
                "the single Raft node did not lead every group"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let app = ursula::http::ClientPlane::new(
            std::sync::Arc::new(state.clone()),
            ursula::http::client_router(state.clone()),
        );
        Server {
            state,
            app,
            _wal: wal,
        }
    }

    /// The router itself, to drive with hand-built requests.
    pub fn app(&self) -> ClientPlane {
        self.app.clone()
    }

    pub fn req(&self, method: Method, uri: &str) -> Req {
        let uri: Uri = uri
            .parse()
            .unwrap_or_else(|e| panic!("test URI {uri:?} does not parse: {e}"));
        Req {
            app: self.app.clone(),
            method,
            uri,
            headers: Vec::new(),
            body: Body::empty(),
        }
    }

    pub fn get(&self, uri: &str) -> Req {
        self.req(Method::GET, uri)
    }

    pub fn head(&self, uri: &str) -> Req {
        self.req(Method::HEAD, uri)
    }

    pub fn put(&self, uri: &str) -> Req {
        self.req(Method::PUT, uri)
    }

    pub fn post(&self, uri: &str) -> Req {
        self.req(Method::POST, uri)
    }

    pub fn delete(&self, uri: &str) -> Req {
        self.req(Method::DELETE, uri)
    }

    /// A catch-up read of `path` from the byte offset `offset`.
    pub fn get_at(&self, path: &str, offset: u64) -> Req {
        self.get(&format!("{path}?offset={}", off(offset)))
    }

    /// Creates a stream of `ctype` and returns the `201`.
    pub async fn create(&self, path: &str, ctype: &str) -> Resp {
        self.put(path)
            .header("content-type", ctype)
            .send()
            .await
            .expect(201)
    }

    /// Closes the stream with an empty-body `Stream-Closed: true` POST and returns the `204`.
    pub async fn close(&self, path: &str) -> Resp {
        self.post(path)
            .header("stream-closed", "true")
            .send()
            .await
            .expect(204)
    }

    /// Appends `body` and closes the stream in one POST, and returns the `204`.
    pub async fn close_with(&self, path: &str, ctype: &str, body: impl Into<Bytes>) -> Resp {
        self.post(path)
            .ctype(ctype)
            .header("stream-closed", "true")
            .body(body)
            .send()
            .await
            .expect(204)
    }

    /// Appends `body` without producer headers and returns the `204`.
    pub async fn append(&self, path: &str, ctype: &str, body: impl Into<Bytes>) -> Resp {
        self.post(path)
            .header("content-type", ctype)
            .body(body)
            .send()
            .await
            .expect(204)
    }

    /// An append of `body` to `path` as `ctype` with the `headers`, not yet sent.
    pub fn append_with(
        &self,
        path: &str,
        ctype: &str,
        headers: Headers<'_>,
        body: impl Into<Bytes>,
    ) -> Req {
        self.post(path).ctype(ctype).headers(headers).body(body)
    }

    /// Every byte readable from `offset=-1`, following `Stream-Next-Offset` to the tail.
    pub async fn read_all(&self, path: &str) -> Vec<u8> {
        self.read_from(path, "-1").await
    }

    /// Every byte from the byte offset `offset` to the tail.
    pub async fn read_all_from(&self, path: &str, offset: u64) -> Vec<u8> {
        self.read_from(path, &off(offset)).await
    }

    /// Every byte from the offset token `at` to the tail, following `Stream-Next-Offset`.
    pub async fn read_from(&self, path: &str, at: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at = at.to_owned();
        loop {
            let r = self
                .get(&format!("{path}?offset={at}"))
                .send()
                .await
                .expect(200);
            out.extend_from_slice(&r.body);
            let next = r
                .header("stream-next-offset")
                .expect("a read carries Stream-Next-Offset")
                .to_owned();
            if r.has("stream-up-to-date") {
                return out;
            }
            assert_ne!(next, at, "a partial read must advance");
            at = next;
        }
    }

    /// The stream's tail as HEAD reports it.
    pub async fn tail(&self, path: &str) -> String {
        let r = self.head(path).send().await.expect(200);
        r.header("stream-next-offset")
            .expect("HEAD carries Stream-Next-Offset")
            .to_owned()
    }

    /// The stream's incarnation token as HEAD reports it.
    pub async fn incarnation(&self, path: &str) -> String {
        let r = self.head(path).send().await.expect(200);
        r.header("stream-incarnation")
            .expect("HEAD carries Stream-Incarnation")
            .to_owned()
    }
}

pub struct Req {
    app: ClientPlane,
    method: Method,
    uri: Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Body,
}

impl Req {
    pub fn header(self, name: &str, value: &str) -> Req {
        self.header_bytes(name, value.as_bytes())
    }

    /// A header value given as bytes, for values outside visible ASCII.
    pub fn header_bytes(mut self, name: &str, value: &[u8]) -> Req {
        let name = HeaderName::from_bytes(name.as_bytes())
            .unwrap_or_else(|e| panic!("header name {name:?}: {e}"));
        let value = HeaderValue::from_bytes(value)
            .unwrap_or_else(|e| panic!("header value {value:?}: {e}"));
        self.headers.push((name, value));
        self
    }

    /// Every `(name, value)` pair as a header, in order.
    pub fn headers(self, pairs: Headers<'_>) -> Req {
        pairs
            .iter()
            .fold(self, |r, (name, value)| r.header(name, value))
    }

    /// The three producer headers: `Producer-Id`, `Producer-Epoch` and `Producer-Seq`.
    pub fn producer(self, id: &str, epoch: impl Display, seq: impl Display) -> Req {
        self.header("producer-id", id)
            .header("producer-epoch", &epoch.to_string())
            .header("producer-seq", &seq.to_string())
    }

    pub fn ctype(self, value: &str) -> Req {
        self.header("content-type", value)
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Req {
        self.body = Body::from(body.into());
        self
    }

    pub fn raw_body(mut self, body: Body) -> Req {
        self.body = body;
        self
    }

    fn build(self) -> (ClientPlane, Request<Body>) {
        let mut req = Request::new(self.body);
        *req.method_mut() = self.method;
        *req.uri_mut() = self.uri;
        for (name, value) in self.headers {
            req.headers_mut().append(name, value);
        }
        (self.app, req)
    }

    /// Sends the request and asserts the status: `send().await.expect(status)`. A failure names
    /// the line that sent the request.
    #[track_caller]
    pub fn expect(self, status: u16) -> impl Future<Output = Resp> {
        let at = Location::caller();
        async move { self.send().await.sent_at(at).expect(status) }
    }

    /// Sends the request and asserts a refusal: `send().await.refused(status)`.
    #[track_caller]
    pub fn refused(self, status: u16) -> impl Future<Output = Resp> {
        let at = Location::caller();
        async move { self.send().await.sent_at(at).refused(status) }
    }

    /// Sends the request and asserts a refusal mentioning `needle`:
    /// `send().await.refused_with(status, needle)`.
    #[track_caller]
    pub fn refused_with(self, status: u16, needle: &str) -> impl Future<Output = Resp> {
        let at = Location::caller();
        let needle = needle.to_owned();
        async move { self.send().await.sent_at(at).refused_with(status, &needle) }
    }

    /// [`Req::refused`] for a 4xx or 5xx `status` (but for a HEAD, whose answer has no body),
    /// else [`Req::expect`]: for tables whose cases end in either.
    #[track_caller]
    pub fn answers(self, status: u16) -> impl Future<Output = Resp> {
        let at = Location::caller();
        let head = self.method == Method::HEAD;
        async move {
            let r = self.send().await.sent_at(at);
            if status >= 400 && !head {
                r.refused(status)
            } else {
                r.expect(status)
            }
        }
    }

    /// Sends the request and returns the response with its body still streaming.
    pub async fn send_streaming(self) -> Response<Body> {
        let (app, req) = self.build();
        let what = format!("{} {}", req.method(), req.uri());
        tokio::time::timeout(REQUEST_TIMEOUT, app.oneshot(req))
            .await
            .unwrap_or_else(|_| panic!("{what} did not answer within {REQUEST_TIMEOUT:?}"))
            .unwrap_or_else(|never| match never {})
    }

    /// Sends the request and reads the whole body.
    pub async fn send(self) -> Resp {
        let mut what = format!("{} {}", self.method, self.uri);
        if !self.headers.is_empty() {
            let headers: Vec<String> = self
                .headers
                .iter()
                .map(|(name, value)| format!("{name}: {value:?}"))
                .collect();
            what = format!("{what} [{}]", headers.join(", "));
        }
        let resp = self.send_streaming().await;
        let (parts, body) = resp.into_parts();
        let body = tokio::time::timeout(REQUEST_TIMEOUT, body.collect())
            .await
            .unwrap_or_else(|_| panic!("the body of {what} did not end within {REQUEST_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("the body of {what} failed: {e}"))
            .to_bytes();
        Resp {
            what,
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }
}

#[derive(Debug)]
pub struct Resp {
    pub what: String,
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// Names the test line that sent the request in every message about the answer.
    fn sent_at(mut self, at: &Location<'_>) -> Resp {
        self.what = format!("{} (sent at {at})", self.what);
        self
    }

    /// Asserts the status, showing the request and body when it differs.
    #[track_caller]
    pub fn expect(self, status: u16) -> Resp {
        assert_eq!(
            self.status.as_u16(),
            status,
            "{} answered {} with headers {:?} and body {:?}",
            self.what,
            self.status,
            self.headers,
            self.text()
        );
        self
    }

    /// Asserts a refusal: the status, and a body that says what was wrong.
    #[track_caller]
    pub fn refused(self, status: u16) -> Resp {
        let r = self.expect(status);
        assert!(
            !r.body.is_empty(),
            "{} answered {status} with an empty body",
            r.what
        );
        r
    }

    /// Asserts a refusal whose body mentions `needle` (case-insensitively).
    #[track_caller]
    pub fn refused_with(self, status: u16, needle: &str) -> Resp {
        let r = self.refused(status);
        assert!(
            r.text().to_lowercase().contains(&needle.to_lowercase()),
            "{} answered {status} with body {:?}, which does not mention {needle:?}",
            r.what,
            r.text()
        );
        r
    }

    /// The `Stream-Incarnation` token the answer carries.
    pub fn incarnation(&self) -> String {
        self.header("stream-incarnation")
            .expect("the answer carries Stream-Incarnation")
            .to_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap_or("<not visible ASCII>"))
    }

    pub fn has(&self, name: &str) -> bool {
        self.headers.contains_key(name)
    }

    #[track_caller]
    pub fn expect_header(&self, name: &str, value: &str) -> &Resp {
        assert_eq!(
            self.header(name),
            Some(value),
            "{}: header {name} (all headers {:?})",
            self.what,
            self.headers
        );
        self
    }

    #[track_caller]
    pub fn expect_no_header(&self, name: &str) -> &Resp {
        assert!(
            !self.has(name),
            "{}: header {name} must be absent, got {:?}",
            self.what,
            self.header(name)
        );
        self
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}
