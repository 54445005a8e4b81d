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
//! bodies are buffered, since every hop resends them. The refusals around a body and the drain
//! of a body that is not forwarded are in `forward/refusals.rs`.
//!
//! With `--cors-allowed-origin`, a CORS preflight is answered before all of this ([`cors`]);
//! every answer, with or without the flag, loses the upstream's `Access-Control-*` headers.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
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
use crate::auth::Access;
use crate::auth::Admitted;
use crate::auth::Auth;
use crate::body;
use crate::body::BodyError;
use crate::body::Pace;
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
pub use crate::reply::METRICS_PATH;

mod refusals;
use crate::reply::Mark;
use crate::reply::error_chain;
use crate::tenant::Tenants;
use crate::untrusted::AddressSlots;
use crate::untrusted::ClientAddr;
use crate::uploads::Budget;
use crate::uploads::Reservation;
use crate::uploads::UploadCounters;
use crate::upstreams::Counters;
use crate::upstreams::Taken;
use crate::upstreams::Upstreams;
use crate::upstreams::route_key;

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
    /// The request bodies buffered at once, across requests.
    budget: Budget,
    upload_counters: UploadCounters,
    /// Untrusted bodies being read now, per client address.
    address_slots: AddressSlots,
    /// Quotas and usage; both off without their flags.
    tenants: Tenants,
    /// Stops the usage log's writer, which then writes its last batch.
    usage_stop: std::sync::Mutex<Option<UsageTask>>,
    /// Client connections open now, counted by [`ConnectionHold`]s.
    connections_open: AtomicU64,
}

/// One client connection's place in `connections_open`, given back when dropped, however the
/// connection ended.
#[derive(Debug)]
pub struct ConnectionHold {
    gateway: Gateway,
}

impl Drop for ConnectionHold {
    fn drop(&mut self) {
        self.gateway
            .inner
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct UsageTask {
    stop: tokio::sync::oneshot::Sender<()>,
    done: tokio::task::JoinHandle<()>,
}

/// The outcome of one exchange with one upstream.
enum Attempt {
    Answer(Response<Incoming>),
    /// The connection could not be made: nothing of the request reached the node.
    ConnectFailed(String),
    /// The request went out (or may have) and the exchange then failed.
    Broken(String),
    /// The request went out and no response headers came within `--response-header-timeout`.
    TimedOut,
}

/// How one hop ended: the upstream's answer, or the reply that ends the forward and whether
/// the request reached any node.
enum Hop {
    Answer(Response<Incoming>),
    End(Response<GatewayBody>, bool),
}

/// The request as every hop resends it.
struct Outgoing {
    method: Method,
    /// Path and query of the client's request.
    target: String,
    headers: HeaderMap,
    body: Bytes,
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
        let budget = Budget::new(&config.uploads);
        let address_slots = AddressSlots::new(config.uploads.untrusted_bodies_per_address());
        let tenants = Tenants::new(
            config.tenants.clone(),
            config.uploads.small_body_max_bytes(),
        );
        let usage_stop = match &tenants.usage {
            Some(usage) => {
                let rt = tokio::runtime::Handle::try_current()
                    .map_err(|_| GatewayError::NoRuntime("--usage-log"))?;
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let done = rt.spawn(usage.clone().run(async move {
                    let _ = stopped.await;
                }));
                Some(UsageTask { stop, done })
            }
            None => None,
        };
        Ok(Gateway {
            inner: Arc::new(Inner {
                config,
                upstreams,
                client,
                auth,
                auth_counters: AuthCounters::default(),
                tenants,
                usage_stop: std::sync::Mutex::new(usage_stop),
                budget,
                upload_counters: UploadCounters::default(),
                address_slots,
                connections_open: AtomicU64::new(0),
            }),
        })
    }

    /// Counts one client connection as open until the hold is dropped.
    pub fn connection_opened(&self) -> ConnectionHold {
        self.inner.connections_open.fetch_add(1, Ordering::Relaxed);
        ConnectionHold {
            gateway: self.clone(),
        }
    }

    /// Ends what runs beside the requests: the usage log writes its last batch. Requests
    /// still open keep counting, but nothing reports them after this.
    pub async fn shutdown(&self) {
        let task = self
            .inner
            .usage_stop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(t) = task {
            let _ = t.stop.send(());
            let _ = t.done.await;
        }
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
        reply::harden(resp.headers_mut());
        resp
    }
}

impl Inner {
    async fn answer<B>(&self, req: Request<B>) -> Response<GatewayBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let (parts, incoming) = req.into_parts();
        let mut incoming = std::pin::pin!(incoming);
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let addr = parts.extensions.get::<ClientAddr>().map(|c| c.0);
        let mut admitted: Option<Admitted> = None;
        let mut conceal = false;
        // A refusal from the head, and the client address its body's reading counts against.
        let refused = if let Some(auth) = &self.auth {
            match guard::admit(auth, &self.auth_counters, &parts).await {
                Gate::Metrics => return self.metrics(&parts.method),
                Gate::Forward(a) => {
                    admitted = Some(a);
                    None
                }
                Gate::Conceal => {
                    conceal = true;
                    None
                }
                // Refused from its head, so admitted for no principal: untrusted.
                Gate::Answer(resp) => Some((resp, addr)),
            }
        } else if parts.uri.path() == METRICS_PATH {
            return self.metrics(&parts.method);
        } else if parts.uri.path().starts_with("/__ursula/")
            && !internal_forwarded(&parts.method, parts.uri.path())
        {
            Some((reply::not_found("no such route on the gateway"), None))
        } else {
            None
        };
        if let Some((resp, untrusted)) = refused {
            return self
                .refuse_from_head(incoming.as_mut(), declared, resp, untrusted)
                .await;
        }
        // With access control, a request admitted for no principal is untrusted: its body is
        // never buffered, and its reading counts against its client address.
        let untrusted = match (&self.auth, &admitted) {
            (None, _) => None,
            (Some(_), Some(a)) if a.principal.is_some() => None,
            _ => addr,
        };
        let limits = &self.config.uploads;
        // A body declared over the gateway's limit gets its final 413 before any tenant share
        // is taken: a retryable 429 would have the client send it again for ever. A concealed
        // request gets it too, as a forwarded one would.
        if declared.is_some_and(|n| n > limits.max_request_body_bytes()) {
            return self
                .body_refusal(BodyError::TooLarge, incoming.as_mut(), declared)
                .await;
        }
        if conceal {
            // Drained like a refusal's body, never buffered: a request that will be refused
            // holds none of the budget, and its reading ends within the drain's bounds.
            let resp = reply::concealed_not_found();
            return self
                .refuse_from_head(incoming.as_mut(), declared, resp, untrusted)
                .await;
        }
        let ticket = match self.tenants.admit(&parts, admitted.as_ref(), addr) {
            Ok(t) => t,
            Err(r) => {
                return self
                    .tenant_refusal(r, incoming.as_mut(), declared, untrusted)
                    .await;
            }
        };
        // With access control a read's body is drained and never forwarded (the nodes give a
        // read's body no meaning): reads are what anonymous callers are admitted for, and a
        // read that a stranger could make hold the budget would undo the concealment's
        // bound. The drain's rules are the concealed request's, so the two stay alike.
        let read_only =
            self.auth.is_some() && admitted.as_ref().is_some_and(|a| a.access == Access::Read);
        let (body, share, read_whole) = if read_only {
            let whole = incoming.is_end_stream()
                || self
                    .drain_body(
                        incoming.as_mut(),
                        declared,
                        0,
                        Pace::HEAD_REFUSAL,
                        untrusted,
                    )
                    .await
                    .complete;
            (Bytes::new(), Reservation::default(), whole)
        } else {
            let upload = match ticket.admit_upload(&self.tenants, declared) {
                Ok(u) => u,
                Err(r) => {
                    return self
                        .tenant_refusal(r, incoming.as_mut(), declared, None)
                        .await;
                }
            };
            // `share` holds the body's part of the budget until the body was forwarded.
            let read = body::read_body(incoming.as_mut(), declared, limits, &self.budget).await;
            // A body stops counting toward its bucket's uploads once it is buffered, or
            // refused: a refused body's drain must not hold the bucket's upload slot.
            drop(upload);
            match read {
                Ok((b, share)) => (b, share, true),
                Err(e) => return self.body_refusal(e, incoming.as_mut(), declared).await,
            }
        };
        self.upload_counters
            .body_bytes_buffered
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        let target = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned());
        let mut headers = parts.headers;
        let had_body_framing = !read_only
            && (headers.contains_key(header::CONTENT_LENGTH)
                || headers.contains_key(header::TRANSFER_ENCODING));
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
        // Armed before the request goes out: a request dropped mid-forward (client gone) may
        // have been applied, and is counted.
        let mut ticket = ticket.sending(&self.tenants, out.body.len() as u64);
        let (mut resp, sent) = self.forward(&out).await;
        if !sent {
            ticket.not_sent();
        }
        drop(out);
        drop(share);
        if !read_whole {
            // The rest of the body is unread: the connection cannot carry another request.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if self.auth.is_some() && resp.status() == StatusCode::NOT_FOUND {
            // Marked like the concealment 404, which must not stand out from a real one.
            reply::mark_not_found(resp.headers_mut());
        }
        let resp = match admitted.and_then(|a| a.expires_at) {
            Some(exp) => expiry::bound_by_expiry(resp, exp),
            None => resp,
        };
        // Outermost, so egress counts every byte the client is sent, the expiry frame too.
        ticket.forwarded(resp)
    }

    /// The answer, and whether the request reached any node: only a failed connect to the
    /// first upstream sent nothing anywhere.
    async fn forward(&self, out: &Outgoing) -> (Response<GatewayBody>, bool) {
        let ups = &self.upstreams;
        let route = route_key(out.target.split('?').next().unwrap_or_default());
        // The hold gives a probe slot back if this future is dropped before an outcome.
        let held = ups.first(route.as_deref(), Instant::now());
        let first = held.i;
        let resp = match self.hop(held, &out.target, out, None).await {
            Hop::Answer(r) => r,
            Hop::End(resp, sent) => return (resp, sent),
        };
        let Some(location) = leader_location(&resp) else {
            return (pass_through(resp, true), true);
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
            let resp = match self
                .hop(held, &target, out, Some(mark_if(all_marked)))
                .await
            {
                Hop::Answer(r) => r,
                Hop::End(resp, sent) => return (resp, sent),
            };
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
                    return (pass_through(resp, all_marked), true);
                }
            }
        }
        Counters::bump(&ups.counters.leader_not_found);
        let resp = reply::refusal(
            GatewayRefusal::LeaderNotFound,
            mark_if(all_marked),
            "no upstream answered without a leader redirect",
        );
        (resp, true)
    }

    /// One exchange with the upstream `held` names, held until its outcome is recorded.
    /// `redirect`: `None` on the first hop; after a leader redirect, the mark a failed connect
    /// gets (an earlier hop reached a node then, so the request counts as sent).
    async fn hop(
        &self,
        held: Taken<'_>,
        target: &str,
        out: &Outgoing,
        redirect: Option<Mark>,
    ) -> Hop {
        let i = held.i;
        let hop = match self.send(i, target, out).await {
            Attempt::Answer(r) => {
                self.upstreams.answered(i);
                Hop::Answer(r)
            }
            Attempt::ConnectFailed(why) => {
                Hop::End(self.unreachable(i, &why, redirect), redirect.is_some())
            }
            Attempt::Broken(why) => Hop::End(self.broken(i, &why), true),
            Attempt::TimedOut => Hop::End(self.timed_out(i), true),
        };
        drop(held);
        hop
    }

    /// No connection to upstream `i`: it is ejected, and the refusal is marked as
    /// [`Gateway::hop`]'s `redirect` says.
    fn unreachable(&self, i: usize, why: &str, redirect: Option<Mark>) -> Response<GatewayBody> {
        Counters::bump(&self.upstreams.counters.upstream_unreachable);
        self.upstreams.failed(i, Instant::now());
        let base = &self.upstreams.list[i].url.base;
        let (mark, detail) = match redirect {
            None => {
                tracing::warn!(upstream = %base, error = %why, "cannot connect to the upstream");
                (Mark::Marked, format!("cannot connect to {base}: {why}"))
            }
            Some(mark) => {
                tracing::warn!(upstream = %base, error = %why, "cannot connect to the redirect target");
                let detail = format!("cannot connect to {base} after a leader redirect: {why}");
                (mark, detail)
            }
        };
        reply::refusal(GatewayRefusal::UpstreamUnreachable, mark, &detail)
    }

    fn broken(&self, i: usize, why: &str) -> Response<GatewayBody> {
        Counters::bump(&self.upstreams.counters.upstream_broken);
        self.upstreams.failed(i, Instant::now());
        let base = &self.upstreams.list[i].url.base;
        tracing::warn!(upstream = %base, error = %why, "the exchange with the upstream failed");
        reply::bad_gateway(&format!("the exchange with {base} failed: {why}"))
    }

    /// No response headers in time. Not a failure of the upstream: one slow Raft group on a
    /// live node causes it too, so it counts toward no ejection (the hold just gives back a
    /// probe slot). Unmarked: the request went out and may have been applied.
    fn timed_out(&self, i: usize) -> Response<GatewayBody> {
        let base = &self.upstreams.list[i].url.base;
        let after = self.config.response_header_timeout;
        tracing::warn!(upstream = %base, ?after, "no response headers from the upstream in time");
        reply::gateway_timeout(&format!("{base} sent no response headers within {after:?}"))
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
        let wait = self.config.response_header_timeout;
        match tokio::time::timeout(wait, self.client.request(req)).await {
            Err(_) => Attempt::TimedOut,
            Ok(Ok(r)) => Attempt::Answer(r),
            Ok(Err(e)) if e.is_connect() => Attempt::ConnectFailed(error_chain(&e)),
            Ok(Err(e)) => Attempt::Broken(error_chain(&e)),
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
        let u = &self.upload_counters;
        let now = Instant::now();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let upstreams: Vec<_> = self
            .upstreams
            .list
            .iter()
            .map(|u| serde_json::json!({ "url": u.url.base, "ejected": u.is_ejected(now) }))
            .collect();
        let text = serde_json::json!({
            "requests": load(&c.requests),
            "connections_open": load(&self.connections_open),
            "max_connections": self.config.max_connections,
            "leader_redirects": load(&c.leader_redirects),
            "leader_searches": load(&c.leader_searches),
            "leader_not_found": load(&c.leader_not_found),
            "upstream_ejections": load(&c.upstream_ejections),
            "upstream_ejected": self.upstreams.ejected_count(now),
            "upstream_unreachable": load(&c.upstream_unreachable),
            "upstream_broken": load(&c.upstream_broken),
            "body_too_large": load(&c.body_too_large),
            "max_request_body_bytes": self.config.uploads.max_request_body_bytes(),
            "upload_refusals_budget": load(&u.refusals_budget),
            "upload_refusals_tenant_uploads": load(&u.refusals_tenant_uploads),
            "upload_refusals_tenant_bytes": load(&u.refusals_tenant_bytes),
            "upload_refusals_too_slow": load(&u.refusals_too_slow),
            "upload_budget_bytes": self.config.uploads.budget_bytes(),
            "upload_reserved_bytes": self.budget.reserved_bytes(),
            // Buckets with a large body under way under an upload limit.
            "upload_tenants": self.tenants.admission.as_ref().map_or(0, |a| a.upload_tenants()),
            "body_bytes_buffered": load(&u.body_bytes_buffered),
            "refusal_drains": load(&u.refusal_drains),
            "refusal_drains_cut": load(&u.refusal_drains_cut),
            "refusal_drain_bytes": load(&u.refusal_drain_bytes),
            "untrusted_bodies_unread": load(&u.untrusted_bodies_unread),
            "untrusted_addresses": self.address_slots.addresses(),
            "upstreams": upstreams,
        });
        let text = match (self.tenants.metrics(), text) {
            (Some(t), serde_json::Value::Object(mut m)) => {
                m.insert("tenants".into(), t);
                serde_json::Value::Object(m)
            }
            (_, v) => v,
        };
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

/// A preflight answered without reading its body (a preflight carries none in practice): the
/// connection cannot carry another request after it, so it is closed.
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
