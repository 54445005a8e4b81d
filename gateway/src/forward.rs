//! One request through the gateway ([`Gateway::handle`]): read the body within the limit,
//! send it to the first upstream, follow leader redirects, and return the answer with the
//! marker kept or dropped by the redirect rule and the vouch set.
//!
//! The rule (API overview, "Redirects and retries"):
//! - a `307` whose `Location` is an absolute URL is a leader redirect; the gateway follows it
//!   itself, at most `max_redirect_hops` hops after the first answer, none started later than
//!   `redirect_window` after the first redirect;
//! - a redirect to an upstream not tried yet goes there; a redirect to any other address, or
//!   to an upstream already tried, goes to the next untried, non-ejected upstream in configured
//!   order after the one that redirected;
//! - the final answer keeps its `x-ursula-not-applied` only if every redirect carried one;
//! - no answer without a redirect: `503` + `Retry-After: 1`, marked `LeaderNotFound` only if
//!   every redirect was marked;
//! - a connect failure on the first upstream: `503` marked `UpstreamUnreachable`; on a later
//!   hop, marked only if every redirect was; an exchange that broke after sending: unmarked `502`.
//!
//! Response bodies are streamed through as they arrive (SSE and long-poll included); request
//! bodies are buffered, since every hop resends them.
//!
//! With `--cors-allowed-origin`, a CORS preflight is answered before all of this ([`cors`]);
//! every answer, with or without the flag, loses the upstream's `Access-Control-*` headers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use bytes::BytesMut;
use http::HeaderMap;
use http::HeaderValue;
use http::Method;
use http::Request;
use http::Response;
use http::StatusCode;
use http::Uri;
use http::header;
use http_body_util::BodyExt;
use http_body_util::Full;
use hyper::body::Body;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use hyper_util::rt::TokioTimer;
use ursula_protocol::headers as h;

use crate::GatewayError;
use crate::auth::Admitted;
use crate::auth::Auth;
use crate::config::GatewayConfig;
use crate::cors;
use crate::expiry;
use crate::guard;
use crate::guard::AuthCounters;
use crate::guard::Gate;
use crate::reply;
use crate::reply::BoxError;
use crate::reply::GatewayBody;
use crate::reply::GatewayRefusal;
use crate::reply::Mark;
use crate::upstreams::Counters;
use crate::upstreams::Upstreams;
use crate::upstreams::route_key;

/// The gateway's own metrics path.
pub const METRICS_PATH: &str = "/__ursula/gateway/metrics";

/// The nodes' internal paths the gateway forwards, for `GET` and `HEAD` only: the read-only
/// views the nodes serve on their client plane too. Every other `/__ursula/*` path (peer RPCs,
/// admin mutations, anything a later release adds) answers `404` here and is never forwarded:
/// a client of the gateway must not reach a node's cluster or admin surface.
const FORWARDED_INTERNAL: [&str; 3] = ["/__ursula/metrics", "/__ursula/ready", "/__ursula/usage"];

/// Whether a request for an internal path may go upstream.
fn internal_forwarded(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD) && FORWARDED_INTERNAL.contains(&path)
}

/// A gateway: cheap to clone, shared by every connection.
#[derive(Debug, Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: GatewayConfig,
    upstreams: Upstreams,
    client: Client<HttpConnector, Full<Bytes>>,
    /// `None` without `--auth-issuer`: every request is forwarded as it came.
    auth: Option<Arc<Auth>>,
    auth_counters: AuthCounters,
}

/// The outcome of one exchange with one upstream.
enum Attempt {
    Answer(Response<Incoming>),
    /// The connection could not be made: nothing of the request reached the node.
    ConnectFailed(String),
    /// The request went out (or may have) and the exchange then failed.
    Broken(String),
}

/// The request as every hop resends it.
struct Outgoing {
    method: Method,
    /// Path and query of the client's request.
    target: String,
    headers: HeaderMap,
    body: Bytes,
}

enum BodyError {
    TooLarge,
    TooSlow,
    Unreadable(String),
}

impl Gateway {
    pub fn new(config: GatewayConfig) -> Result<Gateway, GatewayError> {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        let user_timeout = config.upstream_tcp_user_timeout;
        connector.set_keepalive(Some((user_timeout * 2 / 5).max(Duration::from_secs(1))));
        connector.set_keepalive_interval(Some((user_timeout / 5).max(Duration::from_secs(1))));
        connector.set_tcp_user_timeout(Some(user_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let probe_span = config.connect_timeout + config.upstream_tcp_user_timeout;
        let upstreams = Upstreams::new(config.upstreams.clone(), probe_span);
        let auth = match &config.auth {
            Some(a) => Some(Auth::new(a.clone())?),
            None => None,
        };
        Ok(Gateway {
            inner: Arc::new(Inner {
                config,
                upstreams,
                client,
                auth,
                auth_counters: AuthCounters::default(),
            }),
        })
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.inner.config
    }

    /// Answers one client request. Every answer carries the vouch, and no upstream CORS header.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<GatewayBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        Counters::bump(&self.inner.upstreams.counters.requests);
        let cors = self.inner.config.cors.as_ref();
        let mut resp = match cors {
            // Before access control and without the body: one answer for every path.
            Some(c) if cors::is_preflight(req.method(), req.headers()) => {
                close_if_body(req.headers(), c.preflight(req.headers()))
            }
            _ => {
                let allowance = cors.map(|c| c.allowance(req.headers()));
                let mut resp = self.inner.answer(req).await;
                cors::finish(cors.zip(allowance.as_ref()), resp.headers_mut());
                resp
            }
        };
        reply::vouch(resp.headers_mut());
        resp
    }
}

impl Inner {
    async fn answer<B>(&self, req: Request<B>) -> Response<GatewayBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let (parts, body) = req.into_parts();
        let mut admitted: Option<Admitted> = None;
        let mut conceal = false;
        if let Some(auth) = &self.auth {
            match guard::admit(auth, &self.auth_counters, &parts).await {
                Gate::Metrics => return self.metrics(&parts.method),
                Gate::Forward(a) => admitted = Some(a),
                Gate::Conceal => conceal = true,
                Gate::Answer(resp) => return close_if_body(&parts.headers, resp),
            }
        } else {
            if parts.uri.path() == METRICS_PATH {
                return self.metrics(&parts.method);
            }
            if parts.uri.path().starts_with("/__ursula/")
                && !internal_forwarded(&parts.method, parts.uri.path())
            {
                return close_if_body(
                    &parts.headers,
                    reply::not_found("no such route on the gateway"),
                );
            }
        }
        let limit = self.config.max_request_body_bytes;
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let body = match read_body(body, declared, limit, self.config.body_stall_timeout).await {
            Ok(b) => b,
            Err(e) => return self.body_refusal(e, limit),
        };
        if conceal {
            return reply::concealed_not_found();
        }
        let target = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned());
        let mut headers = parts.headers;
        let had_body_framing = headers.contains_key(header::CONTENT_LENGTH)
            || headers.contains_key(header::TRANSFER_ENCODING);
        reply::strip_hop_by_hop(&mut headers);
        if self.auth.is_some() {
            // Credential termination: the nodes never see end-user credentials.
            headers.remove(header::AUTHORIZATION);
        }
        headers.remove(header::EXPECT);
        headers.remove(header::CONTENT_LENGTH);
        if had_body_framing || !body.is_empty() {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let out = Outgoing {
            method: parts.method,
            target,
            headers,
            body,
        };
        let mut resp = self.forward(&out).await;
        if self.auth.is_some() && resp.status() == StatusCode::NOT_FOUND {
            // Marked like the concealment 404, which must not stand out from a real one.
            reply::mark_not_found(resp.headers_mut());
        }
        match admitted.and_then(|a| a.expires_at) {
            Some(exp) => expiry::bound_by_expiry(resp, exp),
            None => resp,
        }
    }

    fn body_refusal(&self, e: BodyError, limit: u64) -> Response<GatewayBody> {
        let mut resp = match e {
            BodyError::TooLarge => {
                Counters::bump(&self.upstreams.counters.body_too_large);
                reply::refusal(
                    GatewayRefusal::RequestBodyTooLarge,
                    Mark::Marked,
                    &format!("the request body is over the gateway's {limit}-byte limit"),
                )
            }
            BodyError::TooSlow => reply::refusal(
                GatewayRefusal::RequestBodyTooSlow,
                Mark::Marked,
                "the request body stopped arriving",
            ),
            BodyError::Unreadable(why) => reply::refusal(
                GatewayRefusal::RequestBodyUnreadable,
                Mark::Marked,
                &format!("could not read the request body: {why}"),
            ),
        };
        // The rest of the body stays unread: the connection cannot carry another request.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        resp
    }

    async fn forward(&self, out: &Outgoing) -> Response<GatewayBody> {
        let ups = &self.upstreams;
        let route = route_key(out.target.split('?').next().unwrap_or_default());
        // The hold gives a probe slot back if this future is dropped before an outcome.
        let held = ups.first(route.as_deref(), Instant::now());
        let first = held.i;
        let resp = match self.send(first, &out.target, out).await {
            Attempt::Answer(r) => r,
            Attempt::ConnectFailed(why) => {
                Counters::bump(&ups.counters.upstream_unreachable);
                ups.failed(first, Instant::now());
                let base = &ups.list[first].url.base;
                tracing::warn!(upstream = %base, error = %why, "cannot connect to the upstream");
                return reply::refusal(
                    GatewayRefusal::UpstreamUnreachable,
                    Mark::Marked,
                    &format!("cannot connect to {base}: {why}"),
                );
            }
            Attempt::Broken(why) => return self.broken(first, &why),
        };
        ups.answered(first);
        drop(held);
        let Some(location) = leader_location(&resp) else {
            return pass_through(resp, true);
        };
        Counters::bump(&ups.counters.leader_searches);
        let first_redirect = Instant::now();
        let mut all_marked = resp.headers().contains_key(h::NOT_APPLIED);
        drop(resp);
        let mut tried = vec![false; ups.list.len()];
        tried[first] = true;
        let mut from = first;
        let mut location = location;
        for _ in 0..self.config.max_redirect_hops {
            let now = Instant::now();
            if now.duration_since(first_redirect) > self.config.redirect_window {
                break;
            }
            let named = ups
                .named_by(&location)
                .filter(|&i| !tried[i])
                .and_then(|i| ups.try_take(i, now));
            let (held, target) = match named {
                Some(t) => (
                    t,
                    location
                        .path_and_query()
                        .map_or_else(|| out.target.clone(), |pq| pq.as_str().to_owned()),
                ),
                None => match ups.next_untried(from, &tried, now) {
                    Some(t) => (t, out.target.clone()),
                    None => break,
                },
            };
            let next = held.i;
            tried[next] = true;
            Counters::bump(&ups.counters.leader_redirects);
            let resp = match self.send(next, &target, out).await {
                Attempt::Answer(r) => r,
                Attempt::ConnectFailed(why) => {
                    Counters::bump(&ups.counters.upstream_unreachable);
                    ups.failed(next, Instant::now());
                    let base = &ups.list[next].url.base;
                    tracing::warn!(upstream = %base, error = %why, "cannot connect to the redirect target");
                    return reply::refusal(
                        GatewayRefusal::UpstreamUnreachable,
                        mark_if(all_marked),
                        &format!("cannot connect to {base} after a leader redirect: {why}"),
                    );
                }
                Attempt::Broken(why) => return self.broken(next, &why),
            };
            ups.answered(next);
            drop(held);
            match leader_location(&resp) {
                Some(loc) => {
                    all_marked &= resp.headers().contains_key(h::NOT_APPLIED);
                    location = loc;
                    from = next;
                }
                None => {
                    if resp.status().is_success()
                        && let Some(r) = &route
                    {
                        ups.learn(r, next);
                    }
                    return pass_through(resp, all_marked);
                }
            }
        }
        Counters::bump(&ups.counters.leader_not_found);
        reply::refusal(
            GatewayRefusal::LeaderNotFound,
            mark_if(all_marked),
            "no upstream answered without a leader redirect",
        )
    }

    fn broken(&self, i: usize, why: &str) -> Response<GatewayBody> {
        Counters::bump(&self.upstreams.counters.upstream_broken);
        self.upstreams.failed(i, Instant::now());
        let base = &self.upstreams.list[i].url.base;
        tracing::warn!(upstream = %base, error = %why, "the exchange with the upstream failed");
        reply::bad_gateway(&format!("the exchange with {base} failed: {why}"))
    }

    async fn send(&self, i: usize, target: &str, out: &Outgoing) -> Attempt {
        let Some(up) = self.upstreams.list.get(i) else {
            return Attempt::ConnectFailed(format!("no upstream #{i}"));
        };
        let uri = match format!("{}{target}", up.url.base).parse::<Uri>() {
            Ok(u) => u,
            Err(e) => return Attempt::ConnectFailed(format!("bad request target: {e}")),
        };
        let mut req = Request::new(Full::new(out.body.clone()));
        *req.method_mut() = out.method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = out.headers.clone();
        match self.client.request(req).await {
            Ok(r) => Attempt::Answer(r),
            Err(e) if e.is_connect() => Attempt::ConnectFailed(error_chain(&e)),
            Err(e) => Attempt::Broken(error_chain(&e)),
        }
    }

    fn metrics(&self, method: &Method) -> Response<GatewayBody> {
        if method != Method::GET && method != Method::HEAD {
            let mut resp = Response::new(reply::body("method not allowed"));
            *resp.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return resp;
        }
        let c = &self.upstreams.counters;
        let now = Instant::now();
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let upstreams: Vec<_> = self
            .upstreams
            .list
            .iter()
            .map(|u| serde_json::json!({ "url": u.url.base, "ejected": u.is_ejected(now) }))
            .collect();
        let text = serde_json::json!({
            "requests": load(&c.requests),
            "leader_redirects": load(&c.leader_redirects),
            "leader_searches": load(&c.leader_searches),
            "leader_not_found": load(&c.leader_not_found),
            "upstream_ejections": load(&c.upstream_ejections),
            "upstream_ejected": self.upstreams.ejected_count(now),
            "upstream_unreachable": load(&c.upstream_unreachable),
            "upstream_broken": load(&c.upstream_broken),
            "body_too_large": load(&c.body_too_large),
            "max_request_body_bytes": self.config.max_request_body_bytes,
            "upstreams": upstreams,
        });
        let text = match (&self.auth, text) {
            (Some(auth), serde_json::Value::Object(mut m)) => {
                let a = &self.auth_counters;
                m.insert(
                    "auth".into(),
                    serde_json::json!({
                        "admitted": load(&a.admitted),
                        "concealed": load(&a.concealed),
                        "invalid_token": load(&a.invalid_token),
                        "unavailable": load(&a.unavailable),
                        "jwks_fetches": auth.jwks().fetches(),
                    }),
                );
                serde_json::Value::Object(m).to_string()
            }
            (_, v) => v.to_string(),
        };
        let mut resp = Response::new(reply::body(text));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        resp
    }
}

/// An answer given before the request body was read: the connection cannot carry another
/// request after it, so it is closed.
fn close_if_body(req: &HeaderMap, mut resp: Response<GatewayBody>) -> Response<GatewayBody> {
    if req.contains_key(header::CONTENT_LENGTH) || req.contains_key(header::TRANSFER_ENCODING) {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

fn mark_if(all_marked: bool) -> Mark {
    if all_marked {
        Mark::Marked
    } else {
        Mark::Unmarked
    }
}

/// A leader redirect: a `307` whose `Location` is an absolute URL.
fn leader_location<B>(resp: &Response<B>) -> Option<Uri> {
    if resp.status() != StatusCode::TEMPORARY_REDIRECT {
        return None;
    }
    let uri: Uri = resp
        .headers()
        .get(header::LOCATION)?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    uri.authority()?;
    Some(uri)
}

/// An upstream's answer on its way to the client, its body streamed as it arrives.
fn pass_through(resp: Response<Incoming>, keep_marker: bool) -> Response<GatewayBody> {
    let (mut parts, body) = resp.into_parts();
    reply::strip_hop_by_hop(&mut parts.headers);
    if !keep_marker {
        parts.headers.remove(h::NOT_APPLIED);
    }
    let body = body.map_err(|e| Box::new(e) as BoxError).boxed_unsync();
    Response::from_parts(parts, body)
}

/// Reads a whole request body, refusing one over `limit` as soon as it is known to be.
async fn read_body<B>(
    body: B,
    declared: Option<u64>,
    limit: u64,
    stall: Duration,
) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if declared.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    let mut body = std::pin::pin!(body);
    let reserve = declared.unwrap_or(0).min(limit).min(1 << 20);
    let mut buf = BytesMut::with_capacity(usize::try_from(reserve).unwrap_or(0));
    loop {
        let frame = match tokio::time::timeout(stall, body.frame()).await {
            Err(_) => return Err(BodyError::TooSlow),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(BodyError::Unreadable(error_chain(&*e.into()))),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if buf.len() as u64 + data.len() as u64 > limit {
                return Err(BodyError::TooLarge);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

/// An error and its sources, on one line.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
