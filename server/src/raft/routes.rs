//! The engine's own HTTP surface, as routers the node mounts on its planes:
//!
//! - [`peer_router`]: the cluster plane. Peer RPCs (`POST /__ursula/raft-rpc/{group}/{kind}`,
//!   `POST /__ursula/raft-rpc-batch`) and the startup protocol probe
//!   (`GET /__ursula/raft-protocol`). Every answer carries the Raft protocol header.
//! - [`admin_router`]: the admin plane's Raft mutation
//!   `POST /__ursula/raft/{group}/recovery/accept-unsynced-loss`. The plane checks
//!   `x-ursula-process-incarnation` before it reaches this router.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use axum::routing::post;
use serde_json::json;
use ursula_protocol::headers as h;

use super::peer::protocol;
use super::peer::server;
use super::peer::server::ServeError;
use super::peer::wire::BATCH_PATH;
use super::peer::wire::RpcKind;
use super::recovery::watch;
use super::recovery::watch::AcceptError;
use super::recovery::watch::Accepted;
use super::replicas::Replicas;

/// A peer RPC's body is at most this large (a snapshot travels in one).
const RPC_BODY_MAX: usize = 1 << 30;
/// The accept-unsynced-loss body is a small JSON object.
const ADMIN_BODY_MAX: usize = 64 << 10;

/// A plain-text answer, as the node's other refusals are written.
fn text(status: StatusCode, body: impl Into<String>) -> Response {
    let mut resp = (status, body.into()).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn json_reply(status: StatusCode, body: serde_json::Value) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Every answer to a peer carries the protocol this node speaks.
fn with_protocol(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(h::RAFT_PROTOCOL, HeaderValue::from(protocol::PROTOCOL));
    resp
}

/// The cluster plane's routes.
pub fn peer_router(node: Arc<Replicas>) -> Router {
    Router::new()
        .route(protocol::PATH, get(raft_protocol))
        .route("/__ursula/raft-rpc/{group}/{kind}", post(rpc))
        .route(BATCH_PATH, post(rpc_batch))
        .route("/__ursula/leadership-shed", get(super::operate::shed_state))
        .with_state(node)
}

async fn raft_protocol() -> Response {
    with_protocol(json_reply(
        StatusCode::OK,
        json!({ "raft_protocol": protocol::PROTOCOL }),
    ))
}

async fn read(body: Body) -> Result<bytes::Bytes, Response> {
    axum::body::to_bytes(body, RPC_BODY_MAX).await.map_err(|e| {
        text(
            StatusCode::BAD_REQUEST,
            format!("cannot read the body: {e}"),
        )
    })
}

fn serve_error(e: ServeError) -> Response {
    let status = match e {
        ServeError::Invalid(_) => StatusCode::BAD_REQUEST,
        ServeError::Refused(_) => StatusCode::SERVICE_UNAVAILABLE,
        ServeError::Forbidden(_) => StatusCode::FORBIDDEN,
    };
    text(status, e.to_string())
}

fn msgpack(out: Vec<u8>) -> Response {
    let mut resp = (StatusCode::OK, out).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/msgpack"),
    );
    resp
}

async fn rpc(
    State(node): State<Arc<Replicas>>,
    Path((group, kind)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return text(StatusCode::NOT_FOUND, "no such route");
    };
    if let Err((status, why)) = server::admit(&node, &headers) {
        return with_protocol(text(status, why));
    }
    let Some(kind) = RpcKind::parse(&kind) else {
        return with_protocol(text(
            StatusCode::BAD_REQUEST,
            format!("unknown Raft RPC {kind:?}"),
        ));
    };
    let body = match read(body).await {
        Ok(b) => b,
        Err(resp) => return with_protocol(resp),
    };
    let from = server::sender(&headers);
    with_protocol(match server::serve(&node, group, kind, &body, from).await {
        Ok(out) => msgpack(out),
        Err(e) => serve_error(e),
    })
}

async fn rpc_batch(State(node): State<Arc<Replicas>>, headers: HeaderMap, body: Body) -> Response {
    if let Err((status, why)) = server::admit(&node, &headers) {
        return with_protocol(text(status, why));
    }
    let body = match read(body).await {
        Ok(b) => b,
        Err(resp) => return with_protocol(resp),
    };
    with_protocol(match server::serve_batch(&node, &body).await {
        Ok(out) => msgpack(out),
        Err(e) => serve_error(e),
    })
}

/// The admin plane's Raft routes.
pub fn admin_router(node: Arc<Replicas>) -> Router {
    Router::new()
        .route(
            "/__ursula/raft/{group}/recovery/accept-unsynced-loss",
            post(accept_unsynced_loss),
        )
        .with_state(node.clone())
        .merge(super::operate::router(node))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AcceptBody {
    /// `null` for an empty log, as `raft_groups[].last_log_index` reports it.
    expected_last_log_index: Option<u64>,
    expected_current_term: u64,
}

/// `POST /__ursula/raft/{group}/recovery/accept-unsynced-loss`: opens a stalled gate.
async fn accept_unsynced_loss(
    State(node): State<Arc<Replicas>>,
    Path(group): Path<String>,
    body: Body,
) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return text(StatusCode::NOT_FOUND, "no such route");
    };
    let body = match axum::body::to_bytes(body, ADMIN_BODY_MAX).await {
        Ok(b) => b,
        Err(e) => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("cannot read the body: {e}"),
            );
        }
    };
    let want: AcceptBody = match serde_json::from_slice(&body) {
        Ok(w) => w,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!(
                    "the body must be {{\"expected_last_log_index\", \"expected_current_term\"}}: {e}"
                ),
            );
        }
    };
    let result = watch::accept_unsynced_loss(
        &node,
        group,
        want.expected_last_log_index,
        want.expected_current_term,
    );
    let (outcome, view) = match result {
        Ok(r) => r,
        Err(e) => {
            let status = match e {
                AcceptError::NoGroup(_) => StatusCode::NOT_FOUND,
                AcceptError::LostVote(_)
                | AcceptError::NotStalled(_)
                | AcceptError::Moved { .. } => StatusCode::CONFLICT,
                AcceptError::Persist(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            return text(status, e.to_string());
        }
    };
    json_reply(
        StatusCode::OK,
        json!({
            "raft_group_id": group,
            "node_id": node.node_id,
            "outcome": match outcome {
                Accepted::GateOpened => "gate_opened",
                Accepted::AlreadyOpen => "already_open",
            },
            "last_log_index": view.last_log_index,
            "current_term": view.current_term,
        }),
    )
}
