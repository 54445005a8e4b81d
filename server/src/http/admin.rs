//! Operational endpoints and the admin plane.
//!
//! `/__ursula/metrics` (the [`NodeMetrics`] document) and `/__ursula/ready` are served on
//! every plane, and so is `/__ursula/usage` ([`super::tenancy`]). The admin plane ([`router`], `server.admin_listen`) also serves the admin
//! mutations: `POST /__ursula/flush-cold/{bucket}/{stream}` and the engine's own
//! (`accept-unsynced-loss`, and the operator routes of [`super::admin_raft`]). Every mutation there first needs `x-ursula-process-incarnation`,
//! the `process_incarnation` the metrics reported: `428` without it, `412` when it names
//! another process, before anything changes. While a maintenance fence is active (see
//! [`crate::fence`]) they and the quorum proof also need `x-ursula-maintenance-fence`, the
//! active token: `428` without it, `412` for another, again before anything changes; while a
//! fence lifecycle call is uncertain every mutation is refused `503` (`Retry-After: 1`).
//! The fence's own routes, `POST /__ursula/maintenance-fence` (activate the token in the
//! header) and `POST /__ursula/maintenance-fence/retire`, need only the incarnation.
//!
//! Every admin-plane request must name the plane by an IP literal, `localhost` or a name in
//! `server.admin_hosts` ([`host_allowed`]): a web page that rebinds its own domain name to a
//! forwarded admin port cannot reach it (`403`).

use axum::Router;
use axum::extract::Path;
use axum::extract::Request;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::Method;
use axum::http::StatusCode;
use axum::http::header;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use axum::routing::post;
use std::sync::atomic::Ordering::Relaxed;

use serde_json::json;
use ursula_protocol::admin::FenceToken;
use ursula_protocol::headers::MAINTENANCE_FENCE;
use ursula_protocol::headers::PROCESS_INCARNATION;
use ursula_protocol::ids;
use ursula_protocol::metrics;
use ursula_protocol::metrics::NodeMetrics;

use super::reply::ApiError;
use super::reply::Reply;
use super::reply::json_reply;
use super::request::StreamPath;
use super::state::AppState;
use crate::engine::LeaderRoute;
use crate::engine::NotReady;
use crate::fence::FenceError;
use crate::fence::Lifecycle;

/// The metrics document of this node now.
pub fn snapshot(st: &AppState) -> NodeMetrics {
    let mut m = NodeMetrics {
        process_incarnation: st.process_incarnation.clone(),
        node_id: st.node_id,
        engine: st.engine.name().to_owned(),
        core_count: st.rt.core_count() as u64,
        group_count: u64::from(st.rt.group_count()),
        config_ignored_keys: st.ignored_keys.to_vec(),
        ..NodeMetrics::default()
    };
    (m.maintenance_fence, m.maintenance_fence_uncertain) = st.fence.view();
    let mut hot_per_group = vec![0u64; st.rt.group_count() as usize];
    for core in 0..st.rt.core_count() {
        let groups: Vec<_> = st
            .rt
            .groups_of(core)
            .filter_map(|id| {
                st.rt.with_group_now(id, |g| {
                    m.group_state_gauges.push(state_gauges(id, &g.state));
                    (
                        id,
                        g.state.len() as u64,
                        g.appends,
                        g.applied_index,
                        g.state.held_bytes(),
                        g.state.hot_bytes(),
                    )
                })
            })
            .collect();
        let stats = st.rt.stats(core);
        let load = |f: fn(&crate::runtime::CoreStats) -> u64| stats.map_or(0, f);
        let live = load(|s| s.live_waiters.load(Relaxed) as u64);
        m.per_core_live_read_waiters.push(live);
        m.per_core_sse_streams_opened
            .push(load(|s| s.sse_streams_opened.load(Relaxed)));
        m.per_core_sse_error_events
            .push(load(|s| s.sse_error_events.load(Relaxed)));
        let mut c = metrics::CoreMetrics {
            core: core as u64,
            groups: groups.len() as u64,
            live_waiters: live,
            ..metrics::CoreMetrics::default()
        };
        for (id, streams, appends, applied, held, hot) in groups {
            c.streams += streams;
            c.appends_accepted += appends;
            c.hot_bytes += held;
            if let Some(h) = hot_per_group.get_mut(id as usize) {
                *h = hot;
            }
            // In memory the node leads every group; the engine's report overrides under Raft.
            m.groups.push(metrics::GroupMetrics {
                group: id,
                core: core as u64,
                streams,
                appends_accepted: appends,
                leader: Some(st.node_id),
                term: 0,
                applied_index: applied,
                hot_bytes: held,
            });
        }
        m.streams += c.streams;
        m.cores.push(c);
    }
    m.group_state_gauges.sort_by_key(|g| g.group);
    m.sse_streams_opened = m.per_core_sse_streams_opened.iter().sum();
    m.sse_error_events = m.per_core_sse_error_events.iter().sum();
    // Before the engine's part: its maintenance report reads the disk pressure from here.
    m.wal_disk = st.admission.wal_disk();
    let held = st.admission.held();
    m.admission = metrics::AdmissionMetrics {
        inflight_body_bytes: held.inflight_body_bytes,
        uncommitted_bytes: held.per_group_uncommitted_bytes.iter().sum(),
        per_group_uncommitted_bytes: held.per_group_uncommitted_bytes,
    };
    m.cold.cold_hot_bytes = hot_per_group.iter().sum();
    m.cold.per_group_cold_hot_bytes = hot_per_group;
    if let Some(tier) = &st.cold {
        let s = tier.stats();
        let (refusals, per_group) = st.admission.cold_refusals();
        m.cold.cold_backend = Some(s.backend);
        m.cold.cold_backpressure_events = refusals;
        m.cold.cold_flush_write_errors = s.flush_write_errors;
        m.cold.tier = Some(metrics::ColdTierMetrics {
            per_group_cold_backpressure_events: per_group,
            cold_flushes: s.flushes,
            cold_flushed_bytes: s.flushed_bytes,
            cold_reads: s.reads,
            cold_read_bytes: s.read_bytes,
            cold_read_errors: s.read_errors,
            cold_deleted_objects: s.deleted_objects,
            cold_cache_capacity_bytes: s.cache.capacity,
            cold_cache_bytes: s.cache.bytes,
            cold_cache_hits: s.cache.hits,
            cold_cache_misses: s.cache.misses,
            sweep: s.sweep,
            index: s.index,
            external: s.external,
        });
    }
    st.engine.report(&mut m);
    m
}

/// What one group's replicated state holds (`group_state_gauges`).
fn state_gauges(group: u32, state: &ursula_state::stream::GroupState) -> metrics::GroupStateGauges {
    let mut g = metrics::GroupStateGauges {
        group,
        streams: state.len() as u64,
        held_bytes: state.held_bytes(),
        hot_bytes: state.hot_bytes(),
        cold_garbage_objects: state.cold_garbage().len() as u64,
        ..metrics::GroupStateGauges::default()
    };
    let mut sizes: Vec<u64> = Vec::with_capacity(state.len());
    for (_, s) in state.streams() {
        sizes.push(s.state_bytes());
        g.producers += s.producers.as_ref().map_or(0, |p| p.len() as u64);
        g.snapshots += u64::from(s.snapshot.is_some());
        let chunks = s.data.cold_chunks();
        g.cold_chunks += chunks.len() as u64;
        g.cold_packed_chunks += chunks.iter().filter(|c| !c.owned).count() as u64;
        g.cold_max_stream_chunks = g.cold_max_stream_chunks.max(chunks.len() as u64);
    }
    g.cold_index_pages = state.cold_indexes().map(|ix| ix.sealed - ix.first).sum();
    sizes.sort_unstable();
    g.stream_state_bytes_max = sizes.last().copied().unwrap_or(0);
    g.stream_state_bytes_p99 = sizes
        .get((sizes.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or(0);
    g
}

pub async fn metrics(st: &AppState) -> Result<Reply, ApiError> {
    let body = serde_json::to_string(&snapshot(st))
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(json_reply(StatusCode::OK, body))
}

/// `200` when the node may serve, else `503` with the first reason that applies, in the
/// order the Troubleshooting page lists them.
pub fn ready(st: &AppState) -> Reply {
    let reasons = st.engine.not_ready();
    let body = if reasons.contains(&NotReady::FormatEpochMismatch) {
        json!({ "ready": false, "reason": "format_epoch_mismatch" })
    } else if st.admission.disk_pressure() {
        json!({ "ready": false, "reason": "wal_disk_pressure" })
    } else {
        match reasons.into_iter().next() {
            None | Some(NotReady::FormatEpochMismatch) => json!({ "ready": true }),
            Some(NotReady::RecoveryStalled(groups)) => json!({
                "ready": false,
                "reason": "recovery_stalled",
                "recovery_stalled_groups": groups,
            }),
            Some(NotReady::RecoveryGateClosed) => {
                json!({ "ready": false, "reason": "recovery_gate_closed" })
            }
            Some(NotReady::ReplicaUnready(issues)) => {
                json!({
                    "ready": false,
                    "reason": "raft_replica_unready",
                    "raft_maintenance": { "group_issues": issues },
                })
            }
        }
    };
    let status = if body["ready"] == true {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_reply(status, body.to_string())
}

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

/// Whether a request's `Host` names the admin plane: absent (no browser sends that), an IP
/// literal, `localhost`, or one of `names` (lowercase), with any port. A browser fooled by DNS
/// rebinding sends the attacker's domain name, which none of these is.
pub fn host_allowed(host: Option<&axum::http::HeaderValue>, names: &[String]) -> bool {
    let Some(host) = host else {
        return true;
    };
    let Ok(authority) = host
        .to_str()
        .unwrap_or_default()
        .parse::<axum::http::uri::Authority>()
    else {
        return false;
    };
    let name = authority.host().to_ascii_lowercase();
    let literal = name.trim_start_matches('[').trim_end_matches(']');
    literal.parse::<std::net::IpAddr>().is_ok() || name == "localhost" || names.contains(&name)
}

/// The admin plane: metrics, readiness, and the admin mutations (this node's and the
/// engine's `engine_routes`), every mutation behind the incarnation check, and every route
/// behind the `Host` check ([`host_allowed`]) with `server.admin_hosts`' `names`.
pub fn router(state: AppState, engine_routes: Option<Router>, names: Vec<String>) -> Router {
    let mutations = Router::new()
        .route(
            "/__ursula/flush-cold/{bucket}/{stream}",
            post(flush_cold).with_state(state.clone()),
        )
        .merge(engine_routes.unwrap_or_default())
        .merge(super::backup::routes(state.clone()))
        .route(
            "/__ursula/purge/{bucket}",
            axum::routing::delete(super::tenancy::purge_route).with_state(state.clone()),
        )
        .route(FENCE_ROUTE, post(activate_fence).with_state(state.clone()))
        .route(
            FENCE_RETIRE_ROUTE,
            post(retire_fence).with_state(state.clone()),
        )
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            incarnation_layer,
        ));
    Router::new()
        .route("/__ursula/metrics", get(metrics_route))
        .route("/__ursula/ready", get(ready_route))
        .route("/__ursula/usage", get(super::tenancy::usage_route))
        .with_state(state)
        .merge(mutations)
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(axum::middleware::from_fn(move |req: Request, next: Next| {
            let allowed = host_allowed(req.headers().get(header::HOST), &names);
            async move {
                if allowed {
                    next.run(req).await
                } else {
                    ApiError::new(
                        StatusCode::FORBIDDEN,
                        "the admin plane answers requests to an IP address, localhost or a name in server.admin_hosts only",
                    )
                    .into_response()
                }
            }
        }))
}

async fn metrics_route(State(st): State<AppState>) -> Response {
    match metrics(&st).await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn ready_route(State(st): State<AppState>) -> Response {
    ready(&st).into_response()
}

/// Every admin mutation is bound to the process the operator observed, and so is the quorum
/// proof (a `GET`), whose answer certifies that process. Once a maintenance fence is active
/// both also need its token; an admitted mutation holds the fence's read guard until its
/// handler returns, which is what a fence activation waits for.
async fn incarnation_layer(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let mutation = req.method() != Method::GET && req.method() != Method::HEAD;
    let proof = req.uri().path().ends_with("/quorum");
    if !(mutation || proof) {
        return next.run(req).await;
    }
    if let Err(e) = require_incarnation(&st, req.headers()) {
        return e.into_response();
    }
    // The lifecycle routes judge the token themselves: it is the one being installed.
    let path = req.uri().path();
    if path == FENCE_ROUTE || path == FENCE_RETIRE_ROUTE {
        return next.run(req).await;
    }
    let seen = match super::request::single(req.headers(), MAINTENANCE_FENCE) {
        Ok(seen) => seen.map(str::to_owned),
        Err(e) => return e.into_response(),
    };
    if !mutation {
        return match st.fence.check_read(seen.as_deref()) {
            Ok(()) => next.run(req).await,
            Err(e) => fence_refusal(e).into_response(),
        };
    }
    let _admitted = match st.fence.admit_mutation(seen.as_deref()).await {
        Ok(g) => g,
        Err(e) => return fence_refusal(e).into_response(),
    };
    next.run(req).await
}

const FENCE_ROUTE: &str = "/__ursula/maintenance-fence";
const FENCE_RETIRE_ROUTE: &str = "/__ursula/maintenance-fence/retire";

/// The status each fence refusal answers with.
fn fence_refusal(e: FenceError) -> ApiError {
    let status = match &e {
        FenceError::Stale { .. }
        | FenceError::Reopen(_)
        | FenceError::NotActive(_)
        | FenceError::Pending { .. } => StatusCode::CONFLICT,
        FenceError::Missing(_) => StatusCode::PRECONDITION_REQUIRED,
        FenceError::Other { .. } => StatusCode::PRECONDITION_FAILED,
        FenceError::Uncertain(_) | FenceError::Queue { .. } => StatusCode::SERVICE_UNAVAILABLE,
    };
    let err = ApiError::new(status, e.to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        err.header(header::RETRY_AFTER, "1")
    } else {
        err
    }
}

/// `POST /__ursula/maintenance-fence`: activates the token in `x-ursula-maintenance-fence`.
async fn activate_fence(State(st): State<AppState>, headers: HeaderMap) -> Response {
    fence_lifecycle(&st, &headers, Lifecycle::Activate).await
}

/// `POST /__ursula/maintenance-fence/retire`: retires the active token, named in the header.
async fn retire_fence(State(st): State<AppState>, headers: HeaderMap) -> Response {
    fence_lifecycle(&st, &headers, Lifecycle::Retire).await
}

async fn fence_lifecycle(st: &AppState, headers: &HeaderMap, op: Lifecycle) -> Response {
    let run = async {
        let Some(raw) = super::request::single(headers, MAINTENANCE_FENCE)? else {
            return Err(ApiError::new(
                StatusCode::PRECONDITION_REQUIRED,
                format!("the fence {op} needs the token in {MAINTENANCE_FENCE}"),
            ));
        };
        let token = FenceToken::parse(raw).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let view = st
            .fence
            .run(op, token, st.engine.confirm_api_queues())
            .await
            .map_err(fence_refusal)?;
        let body = serde_json::to_string(&view)
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        Ok(json_reply(StatusCode::OK, body))
    };
    match run.await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /__ursula/flush-cold/{bucket}/{stream}`: flushes every hot byte of one stream now,
/// whatever the thresholds, and answers what moved and where the hot ring starts.
async fn flush_cold(
    State(st): State<AppState>,
    Path((bucket, stream)): Path<(String, String)>,
) -> Response {
    let run = async {
        ids::validate_bucket(&bucket).map_err(|e| ApiError::bad_request(e.to_string()))?;
        ids::validate_stream(&stream).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let sp = StreamPath {
            key: format!("{bucket}/{stream}"),
        };
        // Each admin call is local to one node: a follower names the leader instead of
        // redirecting to its client plane, which serves no admin route.
        match st.engine.leader_route(st.rt.group_of(&sp.key)) {
            LeaderRoute::Here => {}
            LeaderRoute::Elsewhere(url) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!(
                        "this node does not lead the stream's group; its leader is {url}: send the flush to that node's admin plane"
                    ),
                ));
            }
            LeaderRoute::Unknown => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no leader is known for the stream's group",
                )
                .header(header::RETRY_AFTER, "1"));
            }
        }
        let Some(tier) = &st.cold else {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "this node has no storage.cold backend: there is nothing to flush to",
            ));
        };
        let flushed =
            crate::coldtier::flush::flush_stream(&st.rt, st.engine.clone(), tier, &sp.key)
                .await
                .ok_or_else(ApiError::not_found)?;
        let body = json!({
            "stream": sp.key,
            "flushed_bytes": flushed.moved,
            "cold_hot_start_offset": flushed.hot_start,
        });
        Ok(Reply::new(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.to_string()))
    };
    match run.await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::host_allowed;
    use axum::http::HeaderValue;

    #[test]
    fn the_admin_plane_answers_ip_literals_localhost_and_configured_names_only() {
        let names = vec!["ursula-0.admin.internal".to_owned()];
        let ok = |h: &'static str| host_allowed(Some(&HeaderValue::from_static(h)), &names);
        for h in [
            "127.0.0.1:4438",
            "10.1.2.3",
            "[::1]:4438",
            "localhost:4438",
            "LOCALHOST",
            "ursula-0.admin.internal:4438",
        ] {
            assert!(ok(h), "{h}");
        }
        for h in [
            "evil.example:4438",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "ursula-0.admin.internal.evil",
            "",
            "a b",
        ] {
            assert!(!ok(h), "{h}");
        }
        assert!(host_allowed(None, &[]), "no Host: not a browser");
    }
}
