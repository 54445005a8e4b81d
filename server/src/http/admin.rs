//! Operational endpoints: `/__ursula/metrics` (JSON) and `/__ursula/ready`.

use axum::http::StatusCode;
use axum::http::header;
use serde_json::json;

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
    let mut body = json!({
        "node_id": st.node_id,
        "engine": st.engine.name(),
        "core_count": st.rt.core_count(),
        "group_count": st.rt.group_count(),
        "streams": total_streams,
        "cores": cores,
        "groups": groups,
    });
    crate::coldtier::metrics_into(st, &mut body);
    Ok(Reply::new(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(body.to_string()))
}

/// `200` when the node may serve, else `503` with the first reason that applies.
pub fn ready(st: &AppState) -> Reply {
    let mut body = json!({ "ready": true });
    if st.admission.disk_pressure() {
        body = json!({ "ready": false, "reason": "wal_disk_pressure" });
    } else if let Some(raft) = &st.raft {
        let leaderless: Vec<u32> = (0..st.rt.group_count())
            .filter(|g| raft.leader_of(*g).is_none())
            .collect();
        if !leaderless.is_empty() {
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
