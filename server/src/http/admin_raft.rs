//! The admin plane's Raft routes (the process-incarnation check runs before them, in the
//! plane's middleware): the maintenance drain mark, leader transfer, self-election, the quorum
//! proof, manual snapshot and purge, learners, the voter set and `accept-unsynced-loss`. Each
//! calls the engine's typed operations API ([`Operator`]) and maps its refusal to a status
//! here. Shapes and statuses: [`ursula_protocol::admin`].

use std::collections::BTreeSet;

use axum::Router;
use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use axum::routing::post;
use serde::Serialize;
use serde_json::json;

use super::reply::plain_text;
use super::reply::uncached;
use crate::raft::ops::Operator;
use crate::raft::ops::accept_loss::AcceptError;
use crate::raft::ops::accept_loss::Accepted;
use crate::raft::ops::handoff::HandoffError;
use crate::raft::ops::log_actions::LogOpError;
use crate::raft::ops::membership::MembershipError;

/// The accept-unsynced-loss body is a small JSON object.
const ADMIN_BODY_MAX: usize = 64 << 10;

fn ok<T: Serialize>(value: &T) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => uncached(StatusCode::OK, body, "application/json"),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn refuse(status: StatusCode, why: String) -> Response {
    plain_text(status, why)
}

fn no_group(raw: &str) -> Response {
    refuse(StatusCode::NOT_FOUND, format!("no group {raw:?}"))
}

/// The `{group}` of a route: a group id, or a `404` naming what was asked for.
struct Group(u32);

impl<S: Send + Sync> FromRequestParts<S> for Group {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        raw.parse().map(Group).map_err(|_| no_group(&raw))
    }
}

/// The `{group}` and `{node}` of a route: a `404` for a bad group, a `400` for a bad node.
struct GroupNode(u32, u64);

impl<S: Send + Sync> FromRequestParts<S> for GroupNode {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Path((group, node)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let group = group.parse().map_err(|_| no_group(&group))?;
        let node = node.parse().map_err(|_| {
            refuse(
                StatusCode::BAD_REQUEST,
                format!("{node:?} is not a node id"),
            )
        })?;
        Ok(GroupNode(group, node))
    }
}

/// A log operation's answer: its JSON, or its refusal.
fn logop_answer<T: Serialize>(r: Result<T, LogOpError>) -> Response {
    match r {
        Ok(a) => ok(&a),
        Err(e) => logop_refusal(&e),
    }
}

/// The admin plane's Raft routes.
pub fn routes(op: Operator) -> Router {
    Router::new()
        .route(
            "/__ursula/leadership-shed/maintenance",
            post(drain).delete(undrain),
        )
        .route(
            "/__ursula/raft/{group}/leader/transfer/{node}",
            post(transfer),
        )
        .route("/__ursula/raft/{group}/self-election", post(self_election))
        .route("/__ursula/raft/{group}/quorum", get(quorum))
        .route("/__ursula/raft/{group}/snapshot", post(snapshot))
        .route("/__ursula/raft/{group}/purge", post(purge))
        .route("/__ursula/raft/{group}/learners/{node}", post(learner))
        .route("/__ursula/raft/{group}/membership", post(voters))
        .route(
            "/__ursula/raft/{group}/recovery/accept-unsynced-loss",
            post(accept_unsynced_loss),
        )
        .with_state(op)
}

async fn drain(State(op): State<Operator>) -> Response {
    set_drain(&op, true)
}

async fn undrain(State(op): State<Operator>) -> Response {
    set_drain(&op, false)
}

fn set_drain(op: &Operator, on: bool) -> Response {
    match op.set_drain(on) {
        Ok(state) => ok(&state),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn handoff_status(e: &HandoffError) -> StatusCode {
    match e {
        HandoffError::NoGroup(_) => StatusCode::NOT_FOUND,
        HandoffError::Stopped { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        HandoffError::NotVoter { .. } | HandoffError::ToSelf(_) => StatusCode::BAD_REQUEST,
        HandoffError::NotLeader { .. }
        | HandoffError::Ineligible { .. }
        | HandoffError::Abandoned { .. }
        | HandoffError::MayNotCampaign { .. } => StatusCode::CONFLICT,
    }
}

async fn transfer(State(op): State<Operator>, GroupNode(group, target): GroupNode) -> Response {
    match op.transfer(group, target).await {
        Ok(t) => ok(&t),
        Err(e) => refuse(handoff_status(&e), e.to_string()),
    }
}

async fn self_election(State(op): State<Operator>, Group(group): Group) -> Response {
    match op.self_elect(group).await {
        Ok(e) => ok(&e),
        Err(HandoffError::Stopped { group, why }) => refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("group {group}'s Raft is stopped: {why}"),
        ),
        Err(e) => refuse(handoff_status(&e), e.to_string()),
    }
}

fn logop_status(e: &LogOpError) -> StatusCode {
    match e {
        LogOpError::NoGroup(_) => StatusCode::NOT_FOUND,
        LogOpError::NotLeader { .. } | LogOpError::NoSnapshot { .. } => StatusCode::CONFLICT,
        LogOpError::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
        LogOpError::Failed { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A refused log operation; `503`s say when to ask again.
fn logop_refusal(e: &LogOpError) -> Response {
    let status = logop_status(e);
    let mut r = refuse(status, e.to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    r
}

async fn quorum(State(op): State<Operator>, Group(group): Group) -> Response {
    logop_answer(op.quorum(group).await)
}

async fn snapshot(State(op): State<Operator>, Group(group): Group) -> Response {
    logop_answer(op.snapshot(group).await)
}

async fn purge(State(op): State<Operator>, Group(group): Group) -> Response {
    logop_answer(op.purge(group).await)
}

fn membership_status(e: &MembershipError) -> StatusCode {
    match e {
        MembershipError::NoGroup(_) => StatusCode::NOT_FOUND,
        MembershipError::NotLeader { .. } => StatusCode::CONFLICT,
        MembershipError::Invalid(_) => StatusCode::BAD_REQUEST,
        MembershipError::Failed { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A refused membership call names the leader as a JSON body tooling can read.
fn membership_refusal(e: MembershipError) -> Response {
    let status = membership_status(&e);
    if let MembershipError::NotLeader { group, leader } = &e {
        let body = serde_json::json!({
            "raft_group_id": group,
            "leader": leader,
            "error": e.to_string(),
        });
        return uncached(status, body.to_string(), "application/json");
    }
    refuse(status, e.to_string())
}

#[derive(Debug, serde::Deserialize)]
struct LearnerQuery {
    addr: Option<String>,
    blocking: Option<bool>,
}

async fn learner(
    State(op): State<Operator>,
    GroupNode(group, learner): GroupNode,
    Query(q): Query<LearnerQuery>,
) -> Response {
    let blocking = q.blocking.unwrap_or(true);
    match op.add_learner(group, learner, q.addr, blocking).await {
        Ok(c) => ok(&c),
        Err(e) => membership_refusal(e),
    }
}

#[derive(Debug, serde::Deserialize)]
struct VotersQuery {
    voters: Option<String>,
}

async fn voters(
    State(op): State<Operator>,
    Group(group): Group,
    Query(q): Query<VotersQuery>,
) -> Response {
    let parsed: Result<BTreeSet<u64>, _> = q
        .voters
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<u64>())
        .collect();
    let voters = match parsed {
        Ok(v) if !v.is_empty() => v,
        _ => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "?voters= must list the node ids of the new voter set, comma-separated".into(),
            );
        }
    };
    match op.set_voters(group, voters).await {
        Ok(c) => ok(&c),
        Err(e) => membership_refusal(e),
    }
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
    State(op): State<Operator>,
    Path(group): Path<String>,
    body: Body,
) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return refuse(StatusCode::NOT_FOUND, "no such route".into());
    };
    let body = match axum::body::to_bytes(body, ADMIN_BODY_MAX).await {
        Ok(b) => b,
        Err(e) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("cannot read the body: {e}"),
            );
        }
    };
    let want: AcceptBody = match serde_json::from_slice(&body) {
        Ok(w) => w,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "the body must be {{\"expected_last_log_index\", \"expected_current_term\"}}: {e}"
                ),
            );
        }
    };
    let result = op.accept_unsynced_loss(
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
            return refuse(status, e.to_string());
        }
    };
    ok(&json!({
            "raft_group_id": group,
            "node_id": op.node_id(),
            "outcome": match outcome {
                Accepted::GateOpened => "gate_opened",
                Accepted::AlreadyOpen => "already_open",
            },
            "last_log_index": view.last_log_index,
            "current_term": view.current_term,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_no_build_could_start_for_is_a_503_that_says_to_ask_again_in_a_second() {
        let r = logop_refusal(&LogOpError::Busy { group: 7 });
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            r.headers()
                .get(axum::http::header::RETRY_AFTER)
                .map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
        let failed = logop_refusal(&LogOpError::Failed {
            group: 7,
            why: "the snapshot did not finish".to_owned(),
        });
        assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            failed
                .headers()
                .get(axum::http::header::RETRY_AFTER)
                .is_none()
        );
    }
}
