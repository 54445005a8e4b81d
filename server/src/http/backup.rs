//! The admin plane's backup routes ([`ursula_state::backup`] holds the format):
//!
//! - `GET /__ursula/backup/info`: the backup format and the group count.
//! - `GET /__ursula/backup/group/{g}`: this replica's state of group `g` as a group object,
//!   captured at its applied point while writes continue; `backup-create` keeps the answer
//!   with the highest `commit_index` across nodes.
//! - `POST /__ursula/backup/group/{g}/cold-check`: whether this cluster's cold store holds
//!   every object a group object references, 32 lookups at a time.
//! - `POST /__ursula/backup/group/{g}/import`: the group object's state becomes group `g`'s
//!   (any node takes it; the group's leader proposes): staged in 2 MiB parts, one Raft entry
//!   each, then made the group's state by one replicated commit. `409` when the group already
//!   holds streams (or another import interleaved), `400` for another format epoch, group or
//!   write unit.

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use axum::routing::post;
use bytes::Bytes;
use futures_util::StreamExt;

use super::reply::ApiError;
use super::reply::Reply;
use super::reply::json_reply;
use super::state::AppState;
use super::tenancy::unavailable;
use crate::coldtier::index::IndexError;
use ursula_state::backup::BackupInfo;
use ursula_state::backup::ColdCheck;
use ursula_state::backup::FORMAT_VERSION;
use ursula_state::backup::GroupObject;
use ursula_state::backup::Imported;
use ursula_state::backup::MISSING_SHOWN;
use ursula_state::backup::cold_references;
use ursula_state::stream::Applied;
use ursula_state::stream::Command;
use ursula_state::stream::GroupState;

/// The largest group object an import or a cold check takes: a peer RPC carries it to the
/// leader, and those are bounded at 1 GiB.
const GROUP_OBJECT_MAX: usize = 1 << 30;
/// The size of each staged part of an import: one Raft entry each, well inside what a follower
/// takes within openraft's AppendEntries deadline (one heartbeat interval).
const IMPORT_PART_BYTES: usize = 2 << 20;
/// Cold lookups in flight at once per cold check.
const LOOKUPS_AT_ONCE: usize = 32;
/// The commit index of an exported group object, also in its body.
pub const COMMIT_INDEX_HEADER: &str = "x-ursula-backup-commit-index";

/// The backup routes, for the admin plane's router (behind its incarnation check).
pub fn routes(state: AppState) -> Router {
    Router::new()
        .route("/__ursula/backup/info", get(info))
        .route("/__ursula/backup/group/{group}", get(export))
        .route(
            "/__ursula/backup/group/{group}/cold-check",
            post(cold_check),
        )
        .route("/__ursula/backup/group/{group}/import", post(import))
        .with_state(state)
}

fn reply(r: Result<Reply, ApiError>) -> Response {
    match r {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<Reply, ApiError> {
    let body = serde_json::to_string(v)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(json_reply(StatusCode::OK, body))
}

fn group_id(st: &AppState, raw: &str) -> Result<u32, ApiError> {
    raw.parse::<u32>()
        .ok()
        .filter(|g| *g < st.rt.group_count())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "no Raft group {raw}: this cluster has groups 0 to {}",
                    st.rt.group_count().saturating_sub(1)
                ),
            )
        })
}

async fn info(State(st): State<AppState>) -> Response {
    reply(json(&BackupInfo {
        format_version: FORMAT_VERSION,
        raft_group_count: st.rt.group_count(),
        node_id: st.node_id,
    }))
}

async fn export(State(st): State<AppState>, Path(raw): Path<String>) -> Response {
    reply(export_group(&st, &raw).await)
}

async fn export_group(st: &AppState, raw: &str) -> Result<Reply, ApiError> {
    let g = group_id(st, raw)?;
    let internal = |e: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e);
    // A clone shares the stream bytes, so the group's core is held only for the clone.
    let (state, index) = st
        .rt
        .with_group(g, |grp| (grp.state.clone(), grp.log_index))
        .await
        .map_err(|e| internal(e.to_string()))?;
    let (count, node) = (st.rt.group_count(), st.node_id);
    let bytes = tokio::task::spawn_blocking(move || {
        GroupObject::capture(g, count, index, node, crate::runtime::now_ms(), &state)
            .and_then(|o| o.encode())
    })
    .await
    .map_err(|e| internal(e.to_string()))?
    .map_err(|e| internal(e.to_string()))?;
    Ok(Reply::new(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CACHE_CONTROL, "no-store")
        .header(COMMIT_INDEX_HEADER, index.to_string())
        .body(bytes))
}

/// Reads and opens a group object posted for group `raw`: `400` naming the failed check.
async fn posted(
    st: &AppState,
    raw: &str,
    body: Body,
) -> Result<(u32, GroupObject, GroupState), ApiError> {
    let g = group_id(st, raw)?;
    let bytes: Bytes = axum::body::to_bytes(body, GROUP_OBJECT_MAX)
        .await
        .map_err(|e| ApiError::bad_request(format!("could not read the group object: {e}")))?;
    let count = st.rt.group_count();
    let opened = tokio::task::spawn_blocking(move || {
        let obj = GroupObject::decode(&bytes)?;
        let state = obj.open(g, count)?;
        Ok::<_, ursula_state::backup::BackupError>((obj, state))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((g, opened.0, opened.1))
}

async fn cold_check(State(st): State<AppState>, Path(raw): Path<String>, body: Body) -> Response {
    reply(check_cold(&st, &raw, body).await)
}

async fn check_cold(st: &AppState, raw: &str, body: Body) -> Result<Reply, ApiError> {
    let (g, _, state) = posted(st, raw, body).await?;
    let mut refs = cold_references(&state);
    let Some(cold) = &st.cold else {
        // Without a cold store no referenced object can be read here.
        let missing: Vec<String> = refs.iter().map(|k| k.to_string()).collect();
        return cold_check_reply(g, refs.len() as u64, missing);
    };
    // What the index pages list is checked too; a page that is missing or unusable stands for
    // everything it lists (its key is reported).
    let mut missing = Vec::new();
    // Pages wholly below a stream's retained offset are on their way out: what they list may
    // be gone already, and no read needs it.
    let indexes: Vec<_> = state
        .streams()
        .filter_map(|(_, s)| s.data.index().map(|ix| (ix.clone(), s.retained)))
        .collect();
    for (ix, retained) in indexes {
        for p in ix.first.max(retained / ix.page_bytes.max(1))..ix.sealed {
            match cold.page(&ix.key(p), ix.id(p)).await {
                Ok(page) => refs.extend(page.objects()),
                Err(IndexError::Store(ursula_cold::ColdError::NotFound { .. })) => {}
                Err(IndexError::Page { key, .. }) => missing.push(key),
                Err(IndexError::Store(e)) => return Err(store_unavailable(&ix.key(p), &e)),
            }
        }
    }
    refs.sort_unstable();
    refs.dedup();
    let checked = refs.len() as u64;
    let lookups = futures_util::stream::iter(refs)
        .map(|key| {
            let store = cold.store.clone();
            async move { (store.exists(&key).await, key) }
        })
        .buffer_unordered(LOOKUPS_AT_ONCE)
        .collect::<Vec<_>>()
        .await;
    for (found, key) in lookups {
        match found {
            Ok(true) => {}
            Ok(false) => missing.push(key.to_string()),
            Err(e) => return Err(store_unavailable(&key, &e)),
        }
    }
    cold_check_reply(g, checked, missing)
}

fn store_unavailable(key: &str, e: &dyn std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("the cold store could not be asked for {key}: {e}"),
    )
    .header(header::RETRY_AFTER, "1")
}

fn cold_check_reply(g: u32, checked: u64, mut missing: Vec<String>) -> Result<Reply, ApiError> {
    missing.sort_unstable();
    let missing_count = missing.len() as u64;
    missing.truncate(MISSING_SHOWN);
    json(&ColdCheck {
        raft_group_id: g,
        checked,
        missing_count,
        missing,
    })
}

async fn import(State(st): State<AppState>, Path(raw): Path<String>, body: Body) -> Response {
    reply(import_group(&st, &raw, body).await)
}

async fn import_group(st: &AppState, raw: &str, body: Body) -> Result<Reply, ApiError> {
    let (g, obj, _) = posted(st, raw, body).await?;
    let state = Bytes::from(obj.state);
    let import = rand::random::<u64>();
    let parts: Vec<Bytes> = (0..state.len().div_ceil(IMPORT_PART_BYTES).max(1))
        .map(|i| state.slice(i * IMPORT_PART_BYTES..((i + 1) * IMPORT_PART_BYTES).min(state.len())))
        .collect();
    let count = parts.len() as u32;
    for (index, bytes) in parts.into_iter().enumerate() {
        let cmd = Command::ImportPart {
            import,
            index: index as u32,
            bytes,
        };
        match st.engine.forward(g, cmd).await {
            Ok(Ok(Applied::ImportStaged { .. })) => {}
            Ok(Ok(other)) => return Err(unexpected(g, &other)),
            Ok(Err(refusal)) => return Err(refusal.into()),
            Err(e) => return Err(unavailable(g, e)),
        }
    }
    let commit = Command::ImportCommit {
        import,
        parts: count,
    };
    match st.engine.forward(g, commit).await {
        Ok(Ok(Applied::Imported { streams })) => {
            tracing::info!(group = g, streams, parts = count, "backup group imported");
            json(&Imported {
                raft_group_id: g,
                streams,
            })
        }
        Ok(Ok(other)) => Err(unexpected(g, &other)),
        Ok(Err(refusal)) => Err(refusal.into()),
        Err(e) => Err(unavailable(g, e)),
    }
}

fn unexpected(g: u32, other: &Applied) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("group {g} answered the import with {other:?}"),
    )
}
