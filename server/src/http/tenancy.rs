//! Tenant routes: `GET /__ursula/usage` (both planes) and the admin plane's bucket purge,
//! `DELETE /__ursula/purge/{bucket}`.
//!
//! A purge runs in three steps, each repeatable, so an interrupted purge converges on re-run:
//! a replicated `Purge` in every group (streams gone, the bucket fenced, the group's queue of
//! the bucket's released objects reported), the recursive delete of the bucket's `{bucket}/`
//! object prefix, then a second replicated `Purge` that forgets the released objects the
//! delete reclaimed, and a listing that proves the prefix empty. Any node takes it: each group's
//! command goes to that group's leader, and a group without a known leader answers `503` with
//! `Retry-After` (never a redirect).

use std::collections::BTreeMap;

use axum::extract::Path;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::json;

use super::reply::ApiError;
use super::reply::Reply;
use super::reply::json_reply;
use super::state::AppState;
use crate::engine::EngineError;
use crate::runtime::GroupId;
use crate::runtime::now_ms;
use ursula_state::stream::Applied;
use ursula_state::stream::Command;
use ursula_state::stream::Refusal;
use ursula_state::stream::ledger::BucketReport;
use ursula_state::stream::ledger::WRITE_UNIT_BYTES;

/// `GET /__ursula/usage`: the committed counters and current gauges of this node's replicas,
/// by bucket.
pub async fn usage(st: &AppState) -> Result<Reply, ApiError> {
    let now = now_ms();
    let mut buckets: BTreeMap<String, BucketReport> = BTreeMap::new();
    for g in 0..st.rt.group_count() {
        let part = st
            .rt
            .with_group(g, move |grp| {
                let mut m = BTreeMap::new();
                grp.state.usage_into(&mut m, now);
                m
            })
            .await
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        for (b, r) in part {
            let out = buckets.entry(b).or_default();
            out.committed_append_bytes += r.committed_append_bytes;
            out.committed_records += r.committed_records;
            out.committed_write_units += r.committed_write_units;
            out.retained_bytes += r.retained_bytes;
            out.stream_count += r.stream_count;
        }
    }
    let body = json!({
        "version": 1,
        "write_unit_bytes": WRITE_UNIT_BYTES,
        "buckets": buckets,
    });
    Ok(json_reply(StatusCode::OK, body.to_string()))
}

pub async fn usage_route(State(st): State<AppState>) -> Response {
    match usage(&st).await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    }
}

/// Why a whole-group command of an operator did not apply: no leader known, or the leader
/// could not be reached or refused to propose. The command is idempotent, so `503` says to
/// retry the same request.
pub fn unavailable(group: GroupId, e: EngineError) -> ApiError {
    let why = match e {
        EngineError::NotLeader { .. } => format!("group {group} has no known leader now"),
        other => format!("group {group}: {other}"),
    };
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("{why}; retry"))
        .header(header::RETRY_AFTER, "1")
}

/// What one round of replicated purges answered, summed over the groups.
#[derive(Default)]
struct Round {
    removed_streams: u64,
    groups_with_streams: Vec<GroupId>,
    pending_cold: u64,
    reclaimed_cold: u64,
}

async fn purge_round(st: &AppState, bucket: &str, forget_cold: bool) -> Result<Round, ApiError> {
    let runs = (0..st.rt.group_count()).map(|g| {
        let cmd = Command::Purge {
            bucket: bucket.to_owned(),
            forget_cold,
        };
        let pending = st.engine.forward(g, cmd);
        async move {
            // A leader cut off from its voters never commits: answer 503, as for no leader.
            let answer = tokio::time::timeout(PURGE_COMMIT_TIMEOUT, pending)
                .await
                .unwrap_or_else(|_| {
                    Err(EngineError::Unavailable(format!(
                        "the purge did not commit within {} s",
                        PURGE_COMMIT_TIMEOUT.as_secs()
                    )))
                });
            (g, answer)
        }
    });
    let mut round = Round::default();
    for (g, answer) in futures_util::future::join_all(runs).await {
        match answer {
            Ok(Ok(Applied::Purged {
                removed_streams,
                pending_cold,
                reclaimed_cold,
            })) => {
                if removed_streams > 0 {
                    round.groups_with_streams.push(g);
                }
                round.removed_streams += removed_streams;
                round.pending_cold += pending_cold;
                round.reclaimed_cold += reclaimed_cold;
            }
            Ok(Ok(other)) => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("group {g} answered the purge with {other:?}"),
                ));
            }
            Ok(Err(r)) => return Err(refusal(g, r)),
            Err(e) => return Err(unavailable(g, e)),
        }
    }
    Ok(round)
}

fn refusal(g: GroupId, r: Refusal) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("group {g} refused the purge: {r}"),
    )
}

/// How long each group's purge command may take to commit before the purge answers `503`.
const PURGE_COMMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Object deletes in flight at once during a purge.
const DELETES_AT_ONCE: usize = 16;

/// Deletes every object under `{bucket}/`: `Err` is the first failure.
async fn erase_prefix(
    store: &ursula_cold::ColdStore,
    bucket: &str,
) -> Result<(), ursula_cold::ColdError> {
    let keys = store.list(bucket).await?;
    let failures: Vec<ursula_cold::ColdError> = futures_util::stream::iter(keys)
        .map(|k| {
            let store = store.clone();
            async move { store.delete(&k).await }
        })
        .buffer_unordered(DELETES_AT_ONCE)
        .filter_map(|r| async move { r.err() })
        .collect()
        .await;
    match failures.into_iter().next() {
        Some(first) => Err(first),
        None => Ok(()),
    }
}

/// `DELETE /__ursula/purge/{bucket}` (admin plane; the incarnation check ran before).
pub async fn purge_route(State(st): State<AppState>, Path(bucket): Path<String>) -> Response {
    match purge(&st, &bucket).await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn purge(st: &AppState, bucket: &str) -> Result<Reply, ApiError> {
    ursula_protocol::ids::validate_bucket(bucket)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let first = purge_round(st, bucket, false).await?;
    let mut error: Option<String> = None;
    let mut pending = first.pending_cold;
    let mut reclaimed = 0;
    let mut absent = true;
    if let Some(cold) = &st.cold {
        if let Some(cache) = &cold.cache {
            cache.forget_prefix(&format!("{bucket}/"));
        }
        match erase_prefix(&cold.store, bucket).await {
            Ok(()) => {
                // The prefix is gone, so every released object of the bucket is too.
                let second = purge_round(st, bucket, true).await?;
                pending = second.pending_cold;
                reclaimed = second.reclaimed_cold;
            }
            Err(e) => error = Some(e.to_string()),
        }
        match cold.store.list(bucket).await {
            Ok(left) => absent = left.is_empty(),
            Err(e) => {
                absent = false;
                error.get_or_insert(e.to_string());
            }
        }
    }
    let complete = error.is_none() && pending == 0 && absent;
    tracing::info!(
        bucket,
        removed_streams = first.removed_streams,
        cold_gc_entries_reclaimed = reclaimed,
        cold_gc_pending_entries = pending,
        cold_gc_complete = complete,
        bucket_prefix_absent = absent,
        "bucket purged"
    );
    let body = json!({
        "bucket": bucket,
        "removed_streams": first.removed_streams,
        "groups_with_streams": first.groups_with_streams,
        "cold_gc_entries_reclaimed": reclaimed,
        "cold_gc_pending_entries": pending,
        "cold_gc_complete": complete,
        "cold_gc_error": error,
        "bucket_prefix_absent": absent,
    });
    Ok(json_reply(StatusCode::OK, body.to_string()))
}
