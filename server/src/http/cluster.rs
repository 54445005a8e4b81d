//! The cluster plane: peer RPCs (`POST /__ursula/raft-rpc/{group}/{kind}`,
//! `POST /__ursula/raft-rpc-batch`), the startup protocol probe (`GET /__ursula/raft-protocol`)
//! and the leadership-shed state peers read (`GET /__ursula/leadership-shed`), over the Raft
//! engine's [`PeerService`]. Every answer to an RPC carries the Raft protocol header.

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

use super::reply::plain_text;
use super::reply::uncached;
use crate::raft::engine::peer_service::PeerService;
use crate::raft::engine::peer_service::ServeError;
use crate::raft::engine::peer_service::sender;
use crate::raft::peer::protocol;
use crate::raft::peer::wire::BATCH_PATH;
use crate::raft::peer::wire::RpcKind;

/// A peer RPC's body is at most this large (a snapshot travels in one).
const RPC_BODY_MAX: usize = 1 << 30;

fn json_reply(status: StatusCode, body: serde_json::Value) -> Response {
    uncached(status, body.to_string(), "application/json")
}

/// Every answer to a peer carries the protocol this node speaks.
fn with_protocol(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(h::RAFT_PROTOCOL, HeaderValue::from(protocol::PROTOCOL));
    resp
}

/// The cluster plane's routes.
pub fn router(peers: PeerService) -> Router {
    Router::new()
        .route(protocol::PATH, get(raft_protocol))
        .route("/__ursula/raft-rpc/{group}/{kind}", post(rpc))
        .route(BATCH_PATH, post(rpc_batch))
        .route("/__ursula/leadership-shed", get(shed_state))
        .with_state(peers)
}

/// `GET /__ursula/leadership-shed`: what peers read before they hand this node a group.
async fn shed_state(State(peers): State<PeerService>) -> Response {
    match serde_json::to_string(&peers.shed_state()) {
        Ok(body) => uncached(StatusCode::OK, body, "application/json"),
        Err(e) => plain_text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn raft_protocol() -> Response {
    with_protocol(json_reply(
        StatusCode::OK,
        json!({ "raft_protocol": protocol::PROTOCOL }),
    ))
}

async fn read(body: Body) -> Result<bytes::Bytes, Response> {
    axum::body::to_bytes(body, RPC_BODY_MAX).await.map_err(|e| {
        plain_text(
            StatusCode::BAD_REQUEST,
            format!("cannot read the body: {e}"),
        )
    })
}

fn serve_error(e: ServeError) -> Response {
    let status = match e {
        ServeError::Invalid(_) => StatusCode::BAD_REQUEST,
        ServeError::Refused(_) | ServeError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        ServeError::Forbidden(_) => StatusCode::FORBIDDEN,
    };
    plain_text(status, e.to_string())
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
    State(peers): State<PeerService>,
    Path((group, kind)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return plain_text(StatusCode::NOT_FOUND, "no such route");
    };
    if let Err((status, why)) = peers.admit(&headers) {
        return with_protocol(plain_text(status, why));
    }
    let Some(kind) = RpcKind::parse(&kind) else {
        return with_protocol(plain_text(
            StatusCode::BAD_REQUEST,
            format!("unknown Raft RPC {kind:?}"),
        ));
    };
    let body = match read(body).await {
        Ok(b) => b,
        Err(resp) => return with_protocol(resp),
    };
    let from = sender(&headers);
    with_protocol(match peers.serve(group, kind, &body, from).await {
        Ok(out) => msgpack(out),
        Err(e) => serve_error(e),
    })
}

async fn rpc_batch(State(peers): State<PeerService>, headers: HeaderMap, body: Body) -> Response {
    if let Err((status, why)) = peers.admit(&headers) {
        return with_protocol(plain_text(status, why));
    }
    let body = match read(body).await {
        Ok(b) => b,
        Err(resp) => return with_protocol(resp),
    };
    with_protocol(match peers.serve_batch(&body).await {
        Ok(out) => msgpack(out),
        Err(e) => serve_error(e),
    })
}
