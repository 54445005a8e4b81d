//! The client plane: [`ClientPlane`], the dispatcher hyper calls for stream requests, and
//! [`client_router`] for `/__ursula/*` (Operations, "The admin plane").

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::Method;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use ursula_protocol::MAX_BODY_BYTES;
use ursula_protocol::headers as h;
use ursula_protocol::refusal::NotApplied;

use super::admin;
use super::live;
use super::names;
use super::read;
use super::read::Live;
use super::reply::ApiError;
use super::request;
use super::request::Route;
use super::state::AppState;
use super::tenancy;
use super::write;
use crate::admission::GroupCharge;
use crate::admission::Refused;
use crate::admission::WritePermit;
use crate::engine::EngineError;
use crate::runtime::RuntimeError;

/// The client plane as hyper calls it. A stream request goes straight to [`dispatch`]: an axum
/// router would match each one against its table, store the (empty) path parameters in the
/// request, and box and clone a service, a visible share of the CPU an append costs
/// (docs/dev/speed-log.md, "The client plane's per-request work"). Paths under `/__ursula/`, which
/// the cluster plane's routes may share on this listener, go through `routed`:
/// [`client_router`], merged with those routes when they are served here.
#[derive(Clone)]
pub struct ClientPlane {
    state: Arc<AppState>,
    routed: Router,
}

impl ClientPlane {
    pub fn new(state: Arc<AppState>, routed: Router) -> ClientPlane {
        ClientPlane { state, routed }
    }

    fn serve(&self, req: Request) -> BoxFuture<'static, Result<Response, Infallible>> {
        if req.uri().path().starts_with("/__ursula/") {
            let routed = self.routed.clone();
            return Box::pin(tower::ServiceExt::oneshot(routed, req));
        }
        let st = self.state.clone();
        Box::pin(async move {
            let head = req.method() == Method::HEAD;
            let mut resp = dispatch(State(st), req).await;
            // What the router did to every answer, kept so none changes: a body of known size
            // states its length, and an answer to `HEAD` keeps that length and drops the body.
            // hyper never sends a length with a `204` or `304`, so none is added there (an
            // append's `204` is the commonest answer of all).
            if !matches!(
                resp.status(),
                StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
            ) && !resp.headers().contains_key(header::CONTENT_LENGTH)
                && let Some(n) = axum::body::HttpBody::size_hint(resp.body()).exact()
            {
                resp.headers_mut()
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(n));
            }
            if head {
                *resp.body_mut() = Body::empty();
            }
            Ok(resp)
        })
    }
}

/// What the accept loops call.
impl hyper::service::Service<Request<hyper::body::Incoming>> for ClientPlane {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn call(&self, req: Request<hyper::body::Incoming>) -> Self::Future {
        self.serve(req.map(Body::new))
    }
}

/// What the router suites drive with hand-built requests: the same path as a connection's.
impl tower::Service<Request> for ClientPlane {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        self.serve(req)
    }
}

/// The client plane as a router: `/__ursula/*` on the client listener, and tests.
pub fn client_router(state: AppState) -> Router {
    // Behind an `Arc`: axum clones the state for every request, and a clone of `AppState`
    // copies a `String` and bumps a handful of counters.
    Router::new().fallback(dispatch).with_state(Arc::new(state))
}

async fn dispatch(State(st): State<Arc<AppState>>, req: Request) -> Response {
    // A `Uri` clone shares its bytes: no copy on the path every request takes, and the
    // target is spelled out only for a redirect.
    let uri = req.uri().clone();
    let mut resp = match handle(&st, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    if resp.status() == StatusCode::TEMPORARY_REDIRECT {
        // The engine names the leader's base URL; the redirect is the same request aimed there.
        if let Some(base) = resp
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            && let Ok(v) = HeaderValue::from_str(&format!(
                "{}{}",
                base.trim_end_matches('/'),
                uri.path_and_query()
                    .map_or_else(|| uri.path(), |p| p.as_str())
            ))
        {
            resp.headers_mut().insert(header::LOCATION, v);
        }
    }
    let headers = resp.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        names::CROSS_ORIGIN_RESOURCE_POLICY,
        HeaderValue::from_static("cross-origin"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(h::EXPOSED),
    );
    resp
}

const STREAM_METHODS: &str = "GET, HEAD, PUT, POST, DELETE, OPTIONS";

fn preflight(req_headers: &HeaderMap, allow: &'static str) -> Response {
    let allowed_headers = req_headers
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("*"));
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(allow),
    );
    headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, allowed_headers);
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("86400"),
    );
    headers.insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

/// Whether a `413` for a declared oversized body carries the refusal marker. Snapshot PUTs
/// never do (the spec's rule): repeating one is harmless, so clients need no marker to retry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marking {
    Marked,
    Unmarked,
}

/// Reads a whole request body, refusing one over `limit` before reading it when
/// `Content-Length` already says so, and once its bytes pass it otherwise. Every byte read is
/// held in `permit` as it arrives, so a body without a declared length (chunked) counts
/// against `server.http_inflight_body_size` like any other.
async fn read_body(
    headers: &HeaderMap,
    mut body: Body,
    limit: u64,
    marking: Marking,
    permit: &mut WritePermit,
) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;
    let declared = match headers.get(header::CONTENT_LENGTH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| ApiError::bad_request("Content-Length is not a number"))?,
        ),
    };
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large(limit, marking));
    }
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("could not read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len() as u64);
        if total > limit {
            return Err(too_large(limit, marking));
        }
        permit.grow(total).map_err(refused)?;
        chunks.push(data);
    }
    let bytes = match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => {
            let mut all = bytes::BytesMut::with_capacity(total as usize);
            for c in &chunks {
                all.extend_from_slice(c);
            }
            all.freeze()
        }
    };
    // A one-chunk body is a view into the connection's read buffer; a Raft log entry that kept
    // the view would pin the whole buffer (kilobytes per 100-byte append) until the log is
    // purged. Small bodies are copied out; large ones were already gathered into their own.
    if bytes.len() <= OWN_COPY_MAX {
        return Ok(Bytes::copy_from_slice(&bytes));
    }
    Ok(bytes)
}

/// The `413` for a body over `limit`, declared or counted, marked as the route marks it.
fn too_large(limit: u64, marking: Marking) -> ApiError {
    let msg = format!("the body is over the {limit}-byte limit");
    match marking {
        Marking::Unmarked => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, msg),
        Marking::Marked => ApiError::not_applied(
            StatusCode::PAYLOAD_TOO_LARGE,
            NotApplied::RequestBodyTooLarge,
            &msg,
        ),
    }
}

/// Bodies up to this size are copied out of the connection's read buffer (see `read_body`).
const OWN_COPY_MAX: usize = 64 * 1024;

/// Write admission from the request head, before its body is read (see [`crate::admission`]):
/// a declared length is held at once, a chunked body as [`read_body`] counts it.
fn admit(st: &AppState, headers: &HeaderMap) -> Result<WritePermit, ApiError> {
    let chunked = headers.contains_key(header::TRANSFER_ENCODING);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let log = st.engine.log_bytes();
    match declared {
        None if chunked => st.admission.admit_streamed(log),
        d => st.admission.admit(d.unwrap_or(0), log),
    }
    .map_err(refused)
}

/// Admission into the stream's group once the body is read: cold backpressure and the group's
/// uncommitted budget. The charge goes to the engine with the proposal.
fn charge(
    st: &AppState,
    permit: &mut WritePermit,
    sp: &request::StreamPath,
    len: u64,
) -> Result<Option<GroupCharge>, ApiError> {
    let group = st.rt.group_of(&sp.key);
    let hot = || {
        st.rt
            .with_group_now(group, |g| g.state.hot_bytes())
            .unwrap_or(0)
    };
    permit.charge(group, len, hot).map_err(refused)?;
    Ok(permit.take_charge())
}

fn refused(r: Refused) -> ApiError {
    let (token, why) = match r {
        Refused::WalDiskPressure => (
            NotApplied::WalDiskPressure,
            "the WAL filesystem is low on space",
        ),
        Refused::RaftLogPressure => (
            NotApplied::RaftLogPressure,
            "the node's unsnapshotted Raft log is over twice raft.snapshot_log_budget",
        ),
        Refused::IngressBodyBytesLimitReached => (
            NotApplied::IngressBodyBytesLimitReached,
            "write bodies in flight leave no room for this one",
        ),
        Refused::ColdBackpressure => (
            NotApplied::ColdBackpressure,
            "the stream's group holds more unflushed bytes than storage.cold.max_hot_size_per_group; \
             writes pass again once the cold flush catches up",
        ),
        Refused::RaftUncommittedBackpressure => (
            NotApplied::RaftUncommittedBackpressure,
            "the stream's group has too many proposed but unapplied write bytes",
        ),
    };
    ApiError::not_applied(StatusCode::SERVICE_UNAVAILABLE, token, why)
}

fn location(headers: &HeaderMap, path: &str) -> String {
    match headers.get(header::HOST).and_then(|v| v.to_str().ok()) {
        Some(host) => format!("http://{host}{path}"),
        None => path.to_owned(),
    }
}

/// A stream whose group stopped applying on this replica answers nothing from its state:
/// every request to it is refused before it is read or proposed (`503 ApplyStopped`).
fn refuse_stopped_group(st: &AppState, route: &Route) -> Result<(), ApiError> {
    // The common case costs one load, not a hash of the key.
    if !st.rt.any_apply_stop() {
        return Ok(());
    }
    let sp = match route {
        Route::Stream(sp)
        | Route::Bootstrap(sp)
        | Route::Snapshot(sp, _)
        | Route::SnapshotBare(sp)
        | Route::Retention(sp, _) => sp,
        Route::Metrics
        | Route::Ready
        | Route::Usage
        | Route::ClusterProbe
        | Route::Bucket(_)
        | Route::NotFound => {
            return Ok(());
        }
    };
    let group = st.rt.group_of(&sp.key);
    match st.rt.apply_stop(group) {
        Some(_) => Err(EngineError::Runtime(RuntimeError::ApplyStopped(group)).into()),
        None => Ok(()),
    }
}

/// The largest body `POST /__ursula/cluster-probe` reads: a heartbeat's size, with room.
pub const CLUSTER_PROBE_MAX: usize = 1024;

/// `POST /__ursula/cluster-probe`: a peer's cluster-egress gate checks that its packets reach
/// this node (Operations, "The admin plane"). It bypasses ingress admission, so a node under
/// load still answers, and it reads a heartbeat-sized body and nothing else: it changes no
/// state and tells the caller nothing but that its bytes arrived, so any caller may send one.
async fn cluster_probe(body: Body) -> Result<Response, ApiError> {
    axum::body::to_bytes(body, CLUSTER_PROBE_MAX)
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("a cluster probe carries at most {CLUSTER_PROBE_MAX} bytes"),
            )
        })?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn handle(st: &AppState, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let method = parts.method;
    let headers = parts.headers;
    let uri = parts.uri;
    let path = uri.path();
    let query = uri.query();
    let route = request::route(path)?;
    refuse_stopped_group(st, &route)?;
    let reply = match (route, &method) {
        (Route::Metrics, &Method::GET) => admin::metrics(st).await?,
        (Route::Ready, &Method::GET) => admin::ready(st),
        (Route::Usage, &Method::GET) => tenancy::usage(st).await?,
        (Route::Metrics | Route::Ready | Route::Usage, _) => {
            return Err(ApiError::method_not_allowed("GET"));
        }
        (Route::ClusterProbe, &Method::POST) => return cluster_probe(body).await,
        (Route::ClusterProbe, _) => return Err(ApiError::method_not_allowed("POST")),
        (Route::NotFound, _) => return Err(ApiError::new(StatusCode::NOT_FOUND, "no such route")),
        (Route::Bucket(_), &Method::OPTIONS) => return Ok(preflight(&headers, "PUT, OPTIONS")),
        (Route::Bucket(b), &Method::PUT) => write::create_bucket(&b)?,
        (Route::Bucket(b), _) => {
            // An invalid ID is a 400 on every method (AMB-14), before the method is judged.
            ursula_protocol::ids::validate_bucket(&b)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            return Err(ApiError::method_not_allowed("PUT, OPTIONS"));
        }
        (Route::Stream(_), &Method::OPTIONS) => return Ok(preflight(&headers, STREAM_METHODS)),
        (Route::Stream(sp), &Method::PUT) => {
            let mut permit = admit(st, &headers)?;
            let body =
                read_body(&headers, body, MAX_BODY_BYTES, Marking::Marked, &mut permit).await?;
            let (staged, len) = (write::stages(st, &sp, body.len()), body.len() as u64);
            let mut take = || charge(st, &mut permit, &sp, len);
            let budget = write::Budget {
                staged,
                charge: &mut take,
            };
            let at = location(&headers, path);
            write::create_stream(st, &sp, &headers, at, body, budget).await?
        }
        (Route::Stream(sp), &Method::POST) => {
            let mut permit = admit(st, &headers)?;
            let body =
                read_body(&headers, body, MAX_BODY_BYTES, Marking::Marked, &mut permit).await?;
            let (staged, len) = (write::stages(st, &sp, body.len()), body.len() as u64);
            let mut take = || charge(st, &mut permit, &sp, len);
            let budget = write::Budget {
                staged,
                charge: &mut take,
            };
            write::append(st, &sp, &headers, body, budget).await?
        }
        (Route::Stream(sp), &Method::DELETE) => write::delete(st, &sp, &headers).await?,
        (Route::Stream(sp), &Method::HEAD) => read::head(st, &sp, &headers).await?,
        (Route::Stream(sp), &Method::GET) => {
            let q = read::parse_read_query(query, st.long_poll_default_ms)?;
            match q.live {
                Live::No => read::catch_up(st, &sp, &q, &headers).await?,
                Live::LongPoll => live::long_poll(st, &sp, &q, &headers).await?,
                Live::Sse => live::sse(st, &sp, &q, &headers).await?,
            }
        }
        (Route::Stream(_), _) => return Err(ApiError::method_not_allowed(STREAM_METHODS)),
        (Route::Bootstrap(_), &Method::OPTIONS) => return Ok(preflight(&headers, "GET, OPTIONS")),
        (Route::Bootstrap(sp), &Method::GET) => read::bootstrap(st, &sp, query, &headers).await?,
        (Route::Bootstrap(_), _) => return Err(ApiError::method_not_allowed("GET, OPTIONS")),
        (Route::Snapshot(..), &Method::OPTIONS) => {
            return Ok(preflight(&headers, "GET, PUT, OPTIONS"));
        }
        (Route::Snapshot(sp, off), &Method::PUT) => {
            let limit = if st.cold.is_some() {
                write::COLD_SNAPSHOT_MAX
            } else {
                MAX_BODY_BYTES
            };
            // A snapshot body is held in the in-flight budget like a write's, until published.
            let mut permit = admit(st, &headers)?;
            let body = read_body(&headers, body, limit, Marking::Unmarked, &mut permit).await?;
            let published = write::publish_snapshot(st, &sp, &off, &headers, body).await?;
            drop(permit);
            published
        }
        (Route::Snapshot(sp, off), &Method::GET) => {
            read::read_snapshot(st, &sp, &off, &headers).await?
        }
        (Route::Snapshot(..), _) => return Err(ApiError::method_not_allowed("GET, PUT, OPTIONS")),
        (Route::SnapshotBare(_), _) => {
            // The latest-snapshot route was removed: nothing is allowed here.
            return Err(ApiError::method_not_allowed(""));
        }
        (Route::Retention(_, _), &Method::OPTIONS) => {
            return Ok(preflight(&headers, "PUT, OPTIONS"));
        }
        (Route::Retention(sp, off), &Method::PUT) => write::retain(st, &sp, &off, &headers).await?,
        (Route::Retention(..), _) => return Err(ApiError::method_not_allowed("PUT, OPTIONS")),
    };
    Ok(reply.into_response())
}
