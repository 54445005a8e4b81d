//! The admin plane's operator routes of the Raft engine (the process-incarnation check runs
//! before them, in the plane's middleware): the maintenance drain mark, leader transfer,
//! self-election, the quorum proof, manual snapshot and purge, learners and the voter set.
//! Shapes and statuses: [`ursula_protocol::admin`].

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::Router;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use axum::routing::post;
use serde::Serialize;

use super::handoff;
use super::handoff::HandoffError;
use super::logops;
use super::logops::LogOpError;
use super::membership;
use super::membership::MembershipError;
use super::replicas::Replicas;

fn reply(status: StatusCode, body: String, content_type: &'static str) -> Response {
    let mut resp = (status, body).into_response();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn ok<T: Serialize>(value: &T) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => reply(StatusCode::OK, body, "application/json"),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn refuse(status: StatusCode, why: String) -> Response {
    reply(status, why, "text/plain; charset=utf-8")
}

fn no_group(raw: &str) -> Response {
    refuse(StatusCode::NOT_FOUND, format!("no group {raw:?}"))
}

/// The operator routes.
pub fn router(node: Arc<Replicas>) -> Router {
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
        .with_state(node)
}

/// `GET /__ursula/leadership-shed` on the cluster plane: what peers read.
pub async fn shed_state(State(node): State<Arc<Replicas>>) -> Response {
    ok(&node.shed.state())
}

async fn drain(State(node): State<Arc<Replicas>>) -> Response {
    set_drain(&node, true)
}

async fn undrain(State(node): State<Arc<Replicas>>) -> Response {
    set_drain(&node, false)
}

fn set_drain(node: &Replicas, on: bool) -> Response {
    match node.shed.set_maintenance(on) {
        Ok(state) => {
            for group in 0..node.group_count() {
                if on {
                    if let Some(raft) = node.raft(group) {
                        raft.runtime_config().elect(false);
                    }
                } else {
                    node.resume_elections(group);
                }
            }
            tracing::info!(
                drained = on,
                "maintenance drain mark {}",
                if on { "set" } else { "cleared" }
            );
            ok(&state)
        }
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

async fn transfer(
    State(node): State<Arc<Replicas>>,
    Path((group, target)): Path<(String, String)>,
) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return no_group(&group);
    };
    let Ok(target) = target.parse::<u64>() else {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!("{target:?} is not a node id"),
        );
    };
    match handoff::transfer(&node, group, target).await {
        Ok(t) => ok(&t),
        Err(e) => refuse(handoff_status(&e), e.to_string()),
    }
}

async fn self_election(State(node): State<Arc<Replicas>>, Path(group): Path<String>) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return no_group(&group);
    };
    match handoff::self_elect(&node, group).await {
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

async fn quorum(State(node): State<Arc<Replicas>>, Path(group): Path<String>) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return no_group(&group);
    };
    match logops::quorum(&node, group).await {
        Ok(p) => ok(&p),
        Err(e) => logop_refusal(&e),
    }
}

async fn snapshot(State(node): State<Arc<Replicas>>, Path(group): Path<String>) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return no_group(&group);
    };
    match logops::snapshot(&node, group).await {
        Ok(a) => ok(&a),
        Err(e) => logop_refusal(&e),
    }
}

async fn purge(State(node): State<Arc<Replicas>>, Path(group): Path<String>) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return no_group(&group);
    };
    match logops::purge(&node, group).await {
        Ok(a) => ok(&a),
        Err(e) => logop_refusal(&e),
    }
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
        return reply(status, body.to_string(), "application/json");
    }
    refuse(status, e.to_string())
}

#[derive(Debug, serde::Deserialize)]
struct LearnerQuery {
    addr: Option<String>,
    blocking: Option<bool>,
}

async fn learner(
    State(node): State<Arc<Replicas>>,
    Path((group, learner)): Path<(String, String)>,
    Query(q): Query<LearnerQuery>,
) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return no_group(&group);
    };
    let Ok(learner) = learner.parse::<u64>() else {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!("{learner:?} is not a node id"),
        );
    };
    let blocking = q.blocking.unwrap_or(true);
    match membership::add_learner(&node, group, learner, q.addr, blocking).await {
        Ok(c) => ok(&c),
        Err(e) => membership_refusal(e),
    }
}

#[derive(Debug, serde::Deserialize)]
struct VotersQuery {
    voters: Option<String>,
}

async fn voters(
    State(node): State<Arc<Replicas>>,
    Path(group): Path<String>,
    Query(q): Query<VotersQuery>,
) -> Response {
    let Ok(group) = group.parse::<u32>() else {
        return no_group(&group);
    };
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
    match membership::set_voters(&node, group, voters).await {
        Ok(c) => ok(&c),
        Err(e) => membership_refusal(e),
    }
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
