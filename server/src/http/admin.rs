//! Operational endpoints: `/__ursula/metrics` (JSON), `/__ursula/ready`, and the admin
//! mutation `POST /__ursula/raft/{group}/recovery/accept-unsynced-loss`. They share the client
//! listener: this build has no separate admin plane.

use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::header;
use serde_json::json;

use crate::raft::gate::AcceptError;
use crate::raft::gate::Accepted;

use super::AppState;
use super::reply::ApiError;
use super::reply::Reply;

pub async fn metrics(st: &AppState) -> Result<Reply, ApiError> {
    let mut cores = Vec::new();
    let mut groups = Vec::new();
    let mut total_streams = 0usize;
    for core in 0..st.rt.core_count() {
        let snapshot: Vec<_> = st
            .rt
            .groups_of(core)
            .filter_map(|id| {
                st.rt.with_group_now(id, |g| {
                    (
                        id,
                        g.state.len(),
                        g.appends,
                        g.applied_index,
                        g.state.held_bytes(),
                    )
                })
            })
            .collect();
        let stats = st.rt.stats(core);
        let live = stats.map_or(0, |s| {
            s.live_waiters.load(std::sync::atomic::Ordering::Relaxed)
        });
        let streams: usize = snapshot.iter().map(|g| g.1).sum();
        let appends: u64 = snapshot.iter().map(|g| g.2).sum();
        let hot: u64 = snapshot.iter().map(|g| g.4).sum();
        total_streams += streams;
        cores.push(json!({
            "core": core, "groups": snapshot.len(), "streams": streams, "appends_accepted": appends,
            "hot_bytes": hot, "live_waiters": live,
        }));
        for (id, streams, appends, applied, hot) in snapshot {
            // In memory the node leads every group; under Raft, each group's own view.
            let (leader, term, applied) = match st.raft.as_ref().and_then(|r| r.raft(id)) {
                Some(raft) => {
                    let m = raft.metrics().borrow().clone();
                    (
                        m.current_leader,
                        m.current_term,
                        m.last_applied.map_or(0, |l| l.index),
                    )
                }
                None => (Some(st.node_id), 0, applied),
            };
            groups.push(json!({
                "group": id, "core": core, "streams": streams, "appends_accepted": appends,
                "leader": leader, "term": term, "applied_index": applied, "hot_bytes": hot,
            }));
        }
    }
    let (raft_groups, recovery_gates) = match &st.raft {
        Some(raft) => raft_view(st, raft),
        None => (
            Vec::new(),
            json!({ "gated": {}, "stalled": [], "wiped": {} }),
        ),
    };
    let mut body = json!({
        "process_incarnation": st.process_incarnation,
        "node_id": st.node_id,
        "engine": st.engine.name(),
        "core_count": st.rt.core_count(),
        "group_count": st.rt.group_count(),
        "streams": total_streams,
        "cores": cores,
        "groups": groups,
        "raft_groups": raft_groups,
        "recovery_gates": recovery_gates,
        "admission": admission_view(st),
    });
    if let Some(raft) = &st.raft {
        raft.snapshot_metrics_into(&mut body);
    }
    crate::coldtier::metrics_into(st, &mut body);
    Ok(Reply::new(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(body.to_string()))
}

/// Budgets write admission holds now: zero when nothing is in flight.
fn admission_view(st: &AppState) -> serde_json::Value {
    let held = st.admission.held();
    json!({
        "inflight_body_bytes": held.inflight_body_bytes,
        "uncommitted_bytes": held.per_group_uncommitted_bytes.iter().sum::<u64>(),
        "per_group_uncommitted_bytes": held.per_group_uncommitted_bytes,
    })
}

/// Each Raft group as this replica sees it, and its closed recovery gates.
fn raft_view(
    st: &AppState,
    raft: &crate::raft::RaftEngine,
) -> (Vec<serde_json::Value>, serde_json::Value) {
    let groups = (0..st.rt.group_count())
        .filter_map(|id| {
            let v = raft.group_view(id)?;
            Some(json!({
                "raft_group_id": id, "node_id": st.node_id, "current_leader": v.current_leader,
                "current_term": v.current_term, "last_applied_index": v.last_applied_index,
                "committed_index": v.committed_index, "last_log_index": v.last_log_index,
                "last_log_term": v.last_log_term, "voter_ids": v.voter_ids,
            }))
        })
        .collect();
    let closed = raft.gates.closed();
    let gated: serde_json::Map<String, serde_json::Value> = closed
        .iter()
        .map(|(g, s)| (g.to_string(), json!(s.as_str())))
        .collect();
    // A replica that lost its vote: `vote_floor` stays null until the leader's barrier.
    let wiped: serde_json::Map<String, serde_json::Value> = raft
        .gates
        .wiped()
        .into_iter()
        .map(|(g, floor)| {
            let floor = floor.map(|f| json!({ "term": f.term, "leader": f.leader }));
            (g.to_string(), json!({ "vote_floor": floor }))
        })
        .collect();
    (
        groups,
        json!({ "gated": gated, "stalled": raft.gates.stalled(), "wiped": wiped }),
    )
}

/// `200` when the node may serve, else `503` with the first reason that applies, in the
/// order the Troubleshooting page lists them.
pub fn ready(st: &AppState) -> Reply {
    let mut body = json!({ "ready": true });
    if st.raft.as_ref().is_some_and(|r| r.peers.mismatch.seen()) {
        body = json!({ "ready": false, "reason": "format_epoch_mismatch" });
    } else if st.admission.disk_pressure() {
        body = json!({ "ready": false, "reason": "wal_disk_pressure" });
    } else if let Some(raft) = &st.raft {
        let stalled = raft.gates.stalled();
        let leaderless: Vec<u32> = (0..st.rt.group_count())
            .filter(|g| raft.leader_of(*g).is_none())
            .collect();
        if !stalled.is_empty() {
            body = json!({
                "ready": false,
                "reason": "recovery_stalled",
                "recovery_stalled_groups": stalled,
            });
        } else if !raft.gates.closed().is_empty() {
            body = json!({ "ready": false, "reason": "recovery_gate_closed" });
        } else if !leaderless.is_empty() {
            let issues: Vec<_> = leaderless
                .iter()
                .map(|g| json!({ "group": g, "issue": "leader_unknown" }))
                .collect();
            body = json!({
                "ready": false,
                "reason": "raft_replica_unready",
                "raft_maintenance": { "group_issues": issues },
            });
        }
    }
    let status = if body["ready"] == true {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Reply::new(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(body.to_string())
}

/// The header that binds an admin mutation to the process the operator observed.
pub const PROCESS_INCARNATION: &str = "x-ursula-process-incarnation";

/// Refuses an admin mutation without the header (`428`) or planned against another process
/// (`412`), before anything changes.
pub fn require_incarnation(st: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(seen) = super::request::single(headers, PROCESS_INCARNATION)? else {
        return Err(ApiError::new(
            StatusCode::PRECONDITION_REQUIRED,
            format!(
                "admin mutations need {PROCESS_INCARNATION}: the process_incarnation that GET /__ursula/metrics reported"
            ),
        ));
    };
    if seen != st.process_incarnation {
        return Err(ApiError::new(
            StatusCode::PRECONDITION_FAILED,
            format!(
                "{PROCESS_INCARNATION} names process {seen}, this is process {}: observe the node again; nothing changed",
                st.process_incarnation
            ),
        ));
    }
    Ok(())
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AcceptBody {
    /// `null` for an empty log, as `raft_groups[].last_log_index` reports it.
    expected_last_log_index: Option<u64>,
    expected_current_term: u64,
}

/// `POST /__ursula/raft/{group}/recovery/accept-unsynced-loss`: opens a stalled gate.
pub fn accept_unsynced_loss(st: &AppState, group: u32, body: &[u8]) -> Result<Reply, ApiError> {
    let Some(raft) = &st.raft else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "this node runs no Raft",
        ));
    };
    let want: AcceptBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"expected_last_log_index\", \"expected_current_term\"}}: {e}"
        ))
    })?;
    let (outcome, view) = raft
        .accept_unsynced_loss(
            group,
            want.expected_last_log_index,
            want.expected_current_term,
        )
        .map_err(|e| {
            let status = match e {
                AcceptError::NoGroup(_) => StatusCode::NOT_FOUND,
                AcceptError::LostVote(_)
                | AcceptError::NotStalled(_)
                | AcceptError::Moved { .. } => StatusCode::CONFLICT,
                AcceptError::Persist(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            ApiError::new(status, e.to_string())
        })?;
    let body = json!({
        "raft_group_id": group,
        "node_id": st.node_id,
        "outcome": match outcome {
            Accepted::GateOpened => "gate_opened",
            Accepted::AlreadyOpen => "already_open",
        },
        "last_log_index": view.last_log_index,
        "current_term": view.current_term,
    });
    Ok(Reply::new(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(body.to_string()))
}
