//! The blocking HTTP client every request of the extension goes through.
//!
//! One attempt per call, no retries: the callers decide, because what a failure means depends
//! on whether any byte of the request went out. A commit that never left may fail alone; one
//! that left and got no answer may be in the stream. So every failure comes back classified as
//! `NeverSent` or `NoAnswer`, and every status, redirects included, as `Answered`.
//!
//! The classification comes from a transport wrapped around ureq's connections that records
//! the first byte of a request written on it. Bytes of connection setup (a proxy's CONNECT, the
//! TLS handshake) happen below it or are forgotten when the connection is made, so they do not
//! count. The same wrapper enforces the whole-request deadline, which ureq only has per phase.

use std::cell::RefCell;
use std::io::Read;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use ureq::config::Config;
use ureq::http::{self, Uri};
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};
use ureq::unversioned::transport::time::Duration as WaitFor;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, DefaultConnector, NextTimeout, Transport,
};
use ureq::{Agent, Timeout};

use ursula_protocol::headers as h;
use ursula_protocol::incarnation::Incarnation;
use ursula_protocol::offset::Offset;

use crate::dns::{self, CachingResolver, DnsCache, DnsPolicy};
use crate::error::{Kind, VfsError};
use crate::settings::Settings;
use crate::token::{self, Tokens};
use crate::{log, settings};

pub const USER_AGENT: &str = concat!("sqlite-ursula-vfs/", env!("CARGO_PKG_VERSION"));

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Head,
    Get,
    Put,
    Post,
    Delete,
}

impl Method {
    fn http(self) -> http::Method {
        match self {
            Method::Head => http::Method::HEAD,
            Method::Get => http::Method::GET,
            Method::Put => http::Method::PUT,
            Method::Post => http::Method::POST,
            Method::Delete => http::Method::DELETE,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Names in lowercase, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The first value of a header, the name compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        header_in(&self.headers, name)
    }

    /// A header whose value has a form the protocol fixes: `Ok(None)` when it is absent, an
    /// error naming the header and the value when it is there in another form.
    pub fn parsed<T>(
        &self,
        name: &'static str,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, BadHeader> {
        let Some(value) = self.header(name) else {
            return Ok(None);
        };
        parse(value).map(Some).ok_or_else(|| BadHeader {
            name,
            value: value.to_owned(),
            expected,
        })
    }

    /// An offset header (`Stream-Next-Offset`, `Stream-Snapshot-Offset`).
    pub fn offset(&self, name: &'static str) -> Result<Option<Offset>, BadHeader> {
        self.parsed(name, "an offset (20 digits)", Offset::parse)
    }

    /// `Stream-Incarnation`.
    pub fn incarnation(&self) -> Result<Option<Incarnation>, BadHeader> {
        self.parsed(
            h::STREAM_INCARNATION,
            "an incarnation (16 lowercase hex digits)",
            Incarnation::parse,
        )
    }
}

/// A header the server sent in a form the protocol does not allow: the stream's server is not
/// one this extension can follow, so the answer is not acted on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the server sent {name}: {value:?}, which is not {expected}")]
pub struct BadHeader {
    pub name: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl From<BadHeader> for VfsError {
    fn from(e: BadHeader) -> VfsError {
        VfsError::new(Kind::StreamState, e.to_string())
    }
}

/// The first value of a header in a list of (lowercase name, value).
pub fn header_in<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    Answered(Answer),
    /// Failed before any byte of the request went out: host did not resolve, connection timed
    /// out, TLS handshake failed, CA file unusable. Proof that nothing was applied.
    NeverSent(String),
    /// Never sent either, because every address of the host refused the connection: nothing
    /// listens there. Apart from `NeverSent` because a read fails at once on it (docs/sqlite-vfs.md,
    /// "Reads and the retry budget"): a refusal answers in microseconds and rarely clears within
    /// a retry budget, while a commit still retries it like any attempt that never went out.
    Refused(String),
    /// Bytes went out but no complete answer came back (reset, closed, timed out; on a pooled
    /// connection too): the request may have been applied.
    NoAnswer(String),
}

#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: Method,
    pub url: &'a str,
    pub headers: Vec<(&'a str, String)>,
    pub body: &'a [u8],
    /// Snapshot requests: the long request timeout instead of the usual one.
    pub long: bool,
}

impl<'a> Request<'a> {
    pub fn new(method: Method, url: &'a str) -> Request<'a> {
        Request {
            method,
            url,
            headers: Vec::new(),
            body: &[],
            long: false,
        }
    }
}

/// Status, headers (lowercase names) and the body for the caller to read.
pub type Streaming = (u16, Vec<(String, String)>, Box<dyn Read + Send>);

/// What a `Client` is built from; `from_settings` gives the process's, tests shorten timeouts.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub resolve_timeout: Duration,
    /// TCP connect and TLS handshake (and a proxy's CONNECT).
    pub connect_timeout: Duration,
    /// From the first byte of the request to the last byte of the answer.
    pub request_timeout: Duration,
    /// The same for `Request::long` (snapshots).
    pub long_request_timeout: Duration,
    /// How long an idle connection is kept for reuse; zero turns reuse off.
    pub idle: Duration,
    /// A PEM bundle whose CAs are the only ones trusted; `None` trusts the bundled Mozilla roots.
    pub ca_file: Option<PathBuf>,
    /// A CONNECT proxy; `from_settings` takes it from ALL_PROXY, HTTPS_PROXY or HTTP_PROXY
    /// (the first set), with NO_PROXY's exceptions, as ureq reads them.
    pub proxy: Option<ureq::Proxy>,
    pub tokens: Arc<Tokens>,
    pub dns: DnsPolicy,
}

impl ClientConfig {
    /// The process's configuration. The token source is always the process-wide one
    /// (`token::global()`, which `set_token` sets and which reads the token file of
    /// `settings::get()`), so that `ursula_set_token` reaches every request.
    pub fn from_settings(settings: &Settings) -> ClientConfig {
        ClientConfig {
            resolve_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            long_request_timeout: Duration::from_secs(120),
            idle: Duration::from_millis(settings.idle_ms),
            ca_file: settings.ca_file.as_ref().map(PathBuf::from),
            proxy: ureq::Proxy::try_from_env(),
            tokens: token::global(),
            dns: DnsPolicy::default(),
        }
    }
}

/// Shared process-wide (`global`): ureq's agent holds the connection pool.
#[derive(Debug)]
pub struct Client {
    agent: Agent,
    /// Why https requests cannot be made (the CA file is unusable); they fail as never sent.
    tls_unusable: Option<String>,
    request_timeout: Duration,
    long_request_timeout: Duration,
    tokens: Arc<Tokens>,
}

impl Client {
    pub fn new(settings: &Settings) -> Client {
        Client::with_config(ClientConfig::from_settings(settings))
    }

    pub fn with_config(cfg: ClientConfig) -> Client {
        let (roots, tls_unusable) = match &cfg.ca_file {
            None => (RootCerts::WebPki, None),
            Some(path) => match load_ca_file(path) {
                Ok(certs) => (RootCerts::new_with_certs(&certs), None),
                // Never fall back to the bundled roots: the file says which CAs to trust.
                Err(reason) => (RootCerts::Specific(Arc::new(Vec::new())), Some(reason)),
            },
        };
        let reuse = !cfg.idle.is_zero();
        let config = Config::builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .save_redirect_history(false)
            .user_agent(USER_AGENT)
            .timeout_resolve(Some(cfg.resolve_timeout))
            .timeout_connect(Some(cfg.connect_timeout))
            .proxy(cfg.proxy)
            .max_idle_age(cfg.idle)
            .max_idle_connections(if reuse { 16 } else { 0 })
            .max_idle_connections_per_host(if reuse { 4 } else { 0 })
            .tls_config(TlsConfig::builder().root_certs(roots).build())
            .build();
        let dns = Arc::new(DnsCache::new(cfg.dns));
        let connector = Tracking {
            inner: DefaultConnector::new(),
            dns: Arc::clone(&dns),
        };
        Client {
            agent: Agent::with_parts(config, connector, CachingResolver::new(dns)),
            tls_unusable,
            request_timeout: cfg.request_timeout,
            long_request_timeout: cfg.long_request_timeout,
            tokens: cfg.tokens,
        }
    }

    /// The process's client, built from its settings on first use.
    pub fn global() -> &'static Client {
        static CLIENT: OnceLock<Client> = OnceLock::new();
        CLIENT.get_or_init(|| Client::new(settings::get()))
    }

    /// One attempt, the answer's body read whole.
    pub fn send(&self, req: &Request) -> Attempt {
        let call = match self.begin(req) {
            Ok(call) => call,
            Err(never) => return never,
        };
        let _current = CurrentCall::enter(&call);
        let response = match self.run(req) {
            Ok(r) => r,
            Err(e) => return call.failed(&e),
        };
        let (parts, body) = response.into_parts();
        let mut bytes = Vec::new();
        if let Err(e) = body.into_reader().read_to_end(&mut bytes) {
            return Attempt::NoAnswer(reason(&ureq::Error::from(e)));
        }
        Attempt::Answered(Answer {
            status: parts.status.as_u16(),
            headers: headers(&parts.headers),
            body: bytes,
        })
    }

    /// One attempt whose body the caller reads (snapshot bodies up to 1 GiB). The request's
    /// deadline still bounds the reading; a failure while reading is an I/O error of the reader.
    pub fn send_streaming(&self, req: &Request) -> Result<Streaming, Attempt> {
        let call = self.begin(req)?;
        let _current = CurrentCall::enter(&call);
        let response = self.run(req).map_err(|e| call.failed(&e))?;
        let (parts, body) = response.into_parts();
        Ok((
            parts.status.as_u16(),
            headers(&parts.headers),
            Box::new(body.into_reader()),
        ))
    }

    fn begin(&self, req: &Request) -> Result<Arc<CallState>, Attempt> {
        if let Some(why) = &self.tls_unusable
            && req
                .url
                .get(..8)
                .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        {
            return Err(Attempt::NeverSent(why.clone()));
        }
        let budget = if req.long {
            self.long_request_timeout
        } else {
            self.request_timeout
        };
        Ok(Arc::new(CallState {
            budget,
            progress: Mutex::new(Progress::default()),
        }))
    }

    fn run(&self, req: &Request) -> Result<http::Response<ureq::Body>, ureq::Error> {
        let mut builder = http::Request::builder()
            .method(req.method.http())
            .uri(req.url);
        for (name, value) in &req.headers {
            builder = builder.header(*name, value.as_str());
        }
        let has_auth = req
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(h::AUTHORIZATION));
        if !has_auth && let Some(token) = self.tokens.current() {
            warn_if_in_clear(req.url);
            builder = builder.header(h::AUTHORIZATION, format!("Bearer {token}"));
        }
        // A GET, HEAD or DELETE without a body goes without Content-Length; PUT and POST always
        // carry one, even for an empty body.
        let bodyless = req.body.is_empty()
            && matches!(req.method, Method::Get | Method::Head | Method::Delete);
        if bodyless {
            self.agent.run(builder.body(())?)
        } else {
            self.agent.run(builder.body(req.body)?)
        }
    }
}

fn headers(map: &http::HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The failure as the events and `refused_reason` show it, e.g. `io: Connection refused (os
/// error 111)`, `timeout: resolve`, `io: invalid peer certificate: UnknownIssuer`.
fn reason(e: &ureq::Error) -> String {
    match e {
        // Only our own deadline reports Global: ureq's global timeout is never set.
        ureq::Error::Timeout(Timeout::Global) => "timeout: request".to_owned(),
        e if answered_in_plain_http(e) => format!(
            "{e} (the server answered the TLS handshake with something else, most likely plain \
             HTTP: use an http:// URL for a server without TLS)"
        ),
        e => e.to_string(),
    }
}

/// Whether a TLS handshake failed because the peer's first bytes were no TLS record, which is
/// what an `https://` URL pointed at a plain-HTTP server gets. rustls reports it as an invalid
/// content type, directly or inside the I/O error of the stream it wraps.
fn answered_in_plain_http(e: &ureq::Error) -> bool {
    let plain = |r: &rustls::Error| {
        matches!(
            r,
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
        )
    };
    match e {
        ureq::Error::Rustls(r) => plain(r),
        ureq::Error::Io(io) => io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .is_some_and(plain),
        _ => false,
    }
}

/// Why reading a `send_streaming` body failed, in the same words as `Attempt`'s reasons (a
/// bytes-went-out failure: the caller treats it as no answer).
pub fn read_failure(e: std::io::Error) -> String {
    reason(&ureq::Error::from(e))
}

/// The client is shared by every thread of the process.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Client>()
};

/// Reads the CA bundle, logging why it cannot serve (once: the process builds one client).
fn load_ca_file(path: &std::path::Path) -> Result<Vec<Certificate<'static>>, String> {
    let file = path.to_string_lossy();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            log::event(
                log::Level::Error,
                "ca_file_unreadable",
                &[("file", &file), ("reason", &e.to_string())],
            );
            return Err(format!("ca file unreadable: {file}: {e}"));
        }
    };
    let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(&bytes)
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    // Count what rustls will take as a trust anchor, not just PEM sections that decode.
    let mut store = rustls::RootCertStore::empty();
    let (usable, _) = store.add_parsable_certificates(
        certs
            .iter()
            .map(|c| rustls_pki_types::CertificateDer::from(c.der().to_vec())),
    );
    if usable == 0 {
        log::event(
            log::Level::Error,
            "ca_file_without_certificates",
            &[("file", &file)],
        );
        return Err(format!("ca file without certificates: {file}"));
    }
    Ok(certs)
}

/// Logs `token_in_clear` once per process when a token goes over http:// to a host that is not
/// a loopback address.
fn warn_if_in_clear(url: &str) {
    static LOGGED: AtomicBool = AtomicBool::new(false);
    if LOGGED.load(Ordering::Relaxed) {
        return;
    }
    let Ok(uri) = url.parse::<Uri>() else { return };
    if !uri
        .scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("http"))
    {
        return;
    }
    let host = uri.host().unwrap_or("");
    if is_loopback(host) || LOGGED.swap(true, Ordering::Relaxed) {
        return;
    }
    log::event(log::Level::Warn, "token_in_clear", &[("host", host)]);
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip.to_canonical().is_loopback(),
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

// ---- One request's progress, seen by the transport ----

#[derive(Debug, Default)]
struct Progress {
    /// A byte of the request may have gone out.
    sent: bool,
    /// When the request's first byte was handed to the connection: the deadline runs from here.
    started: Option<Instant>,
}

#[derive(Debug)]
struct CallState {
    budget: Duration,
    progress: Mutex<Progress>,
}

impl CallState {
    fn lock(&self) -> MutexGuard<'_, Progress> {
        // Two plain fields, always consistent: a poisoned lock is still right.
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn failed(&self, e: &ureq::Error) -> Attempt {
        if self.lock().sent {
            Attempt::NoAnswer(reason(e))
        } else if matches!(e, ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            // ureq reports the last address's failure when every address failed, so a host
            // with one refusing and one timing out address is a timeout, retried as before.
            Attempt::Refused(reason(e))
        } else {
            Attempt::NeverSent(reason(e))
        }
    }

    /// Limits a wait to what is left of the request's deadline, starting the clock at the first
    /// byte. `sending` marks the request as gone out: conservatively before the write, since a
    /// failed write may still have put bytes on the wire.
    fn limit(&self, mut timeout: NextTimeout, sending: bool) -> Result<NextTimeout, ureq::Error> {
        let mut p = self.lock();
        p.sent |= sending;
        let started = *p.started.get_or_insert_with(Instant::now);
        let left = self.budget.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(ureq::Error::Timeout(Timeout::Global));
        }
        if WaitFor::Exact(left) < timeout.after {
            timeout.after = WaitFor::Exact(left);
            timeout.reason = Timeout::Global;
        }
        Ok(timeout)
    }

    /// Connection setup wrote bytes through a tracked transport (a proxy's CONNECT): none of it
    /// was the request.
    fn forget_setup(&self) {
        *self.lock() = Progress::default();
    }
}

thread_local! {
    /// The request this thread is making. ureq runs a request on the calling thread, so the
    /// transport finds it here; the transport keeps it for a body read later on another thread.
    static CURRENT: RefCell<Option<Arc<CallState>>> = const { RefCell::new(None) };
}

struct CurrentCall;

impl CurrentCall {
    fn enter(call: &Arc<CallState>) -> CurrentCall {
        CURRENT.with(|c| *c.borrow_mut() = Some(Arc::clone(call)));
        CurrentCall
    }
}

impl Drop for CurrentCall {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

fn current_call() -> Option<Arc<CallState>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// The connector: ureq's own chain (proxy, TCP, TLS), its transport wrapped in `Tracked`.
#[derive(Debug)]
struct Tracking {
    inner: DefaultConnector,
    dns: Arc<DnsCache>,
}

impl Connector<()> for Tracking {
    type Out = Tracked;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<()>,
    ) -> Result<Option<Tracked>, ureq::Error> {
        let made = self.inner.connect(details, chained);
        if let Some(call) = current_call() {
            call.forget_setup();
        }
        match made {
            Ok(t) => Ok(t.map(|inner| Tracked { inner, call: None })),
            Err(e) => {
                if matches!(
                    e,
                    ureq::Error::Io(_) | ureq::Error::Timeout(_) | ureq::Error::ConnectionFailed
                ) && let Some(key) = dns::host_key(details.uri)
                {
                    self.dns.connect_failed(&key);
                }
                Err(e)
            }
        }
    }
}

#[derive(Debug)]
struct Tracked {
    inner: Box<dyn Transport>,
    /// The request using the connection now (a pooled connection serves one after another).
    call: Option<Arc<CallState>>,
}

impl Tracked {
    fn adopt(&mut self) {
        if let Some(now) = current_call()
            && !self.call.as_ref().is_some_and(|c| Arc::ptr_eq(c, &now))
        {
            self.call = Some(now);
        }
    }

    fn limit(&mut self, timeout: NextTimeout, sending: bool) -> Result<NextTimeout, ureq::Error> {
        self.adopt();
        match &self.call {
            Some(call) => call.limit(timeout, sending),
            None => Ok(timeout),
        }
    }
}

impl Transport for Tracked {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let timeout = self.limit(timeout, true)?;
        self.inner.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let timeout = self.limit(timeout, false)?;
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
