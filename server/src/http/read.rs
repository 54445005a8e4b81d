//! Read routes that answer at once: catch-up reads, HEAD, snapshot reads and bootstrap.

use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::header;
use bytes::BufMut;
use bytes::Bytes;
use bytes::BytesMut;
use ursula_protocol::MAX_READ_BYTES;
use ursula_protocol::content_type;
use ursula_protocol::lifetime::format_expires_at;
use ursula_protocol::offset::Offset;
use ursula_protocol::offset::ReadFrom;

use super::names;
use super::reply::ApiError;
use super::reply::Reply;
use super::reply::incarnation_token;
use super::request;
use super::request::StreamPath;
use super::state::AppState;
use crate::coldtier::index::IndexError;
use crate::engine::LeaderRoute;
use crate::runtime::Group;
use crate::runtime::now_ms;
use ursula_state::stream::Command;
use ursula_state::stream::Lifetime;
use ursula_state::stream::page::Paged;
use ursula_state::stream::read::ReadView;

/// Removed in 0.6.0; a read that still sends one is refused rather than misread.
const REMOVED_PARAMS: [&str; 4] = ["record", "tail_records", "max_records", "record_view"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    No,
    LongPoll,
    Sse,
}

#[derive(Debug, Clone)]
pub struct ReadQuery {
    pub from: ReadFrom,
    pub offset_given: bool,
    pub live: Live,
    pub max_bytes: u64,
    pub timeout_ms: u64,
    pub cursor: Option<String>,
    /// `consistency=leader`.
    pub leader: bool,
}

pub fn parse_read_query(
    query: Option<&str>,
    default_timeout_ms: u64,
) -> Result<ReadQuery, ApiError> {
    let mut q = ReadQuery {
        from: ReadFrom::Start,
        offset_given: false,
        live: Live::No,
        max_bytes: MAX_READ_BYTES,
        timeout_ms: default_timeout_ms,
        cursor: None,
        leader: false,
    };
    let mut leader = false;
    for (k, v) in request::query_pairs(query) {
        match k.as_str() {
            "offset" => {
                q.from = ReadFrom::parse(&v)
                    .ok_or_else(|| ApiError::bad_request(format!("offset {v:?} is not valid")))?;
                q.offset_given = true;
            }
            "live" => {
                q.live = match v.as_str() {
                    "long-poll" => Live::LongPoll,
                    "sse" => Live::Sse,
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "live={v:?} is not long-poll or sse"
                        )));
                    }
                }
            }
            "max_bytes" => {
                // A value that is not a decimal integer is ignored, leaving the 8 MiB cap.
                if let Ok(n) = v.parse::<u64>() {
                    q.max_bytes = n.clamp(1, MAX_READ_BYTES);
                }
            }
            "timeout_ms" => {
                if let Ok(n) = v.parse::<u64>() {
                    q.timeout_ms = n.clamp(1, 60_000);
                }
            }
            "cursor" => q.cursor = Some(v),
            "consistency" => match v.as_str() {
                "local" => {}
                "leader" => leader = true,
                _ => return Err(ApiError::bad_request("consistency must be local or leader")),
            },
            removed if REMOVED_PARAMS.contains(&removed) => {
                return Err(ApiError::bad_request(format!(
                    "query parameter {removed} was removed in 0.6.0"
                )));
            }
            _ => {}
        }
    }
    if leader && q.live != Live::No {
        return Err(ApiError::bad_request(
            "consistency=leader cannot be combined with live",
        ));
    }
    q.leader = leader;
    Ok(q)
}

/// `"<incarnation>:<start>:<end>[:c]"`: changes with new data, a recreate, or a close.
pub fn etag(view: &ReadView) -> String {
    let closed = if view.closed && view.up_to_date() {
        ":c"
    } else {
        ""
    };
    format!(
        "\"{}:{}:{}{}\"",
        incarnation_token(view.incarnation),
        view.start,
        view.next,
        closed
    )
}

fn if_none_match_hits(headers: &HeaderMap, tag: &str) -> bool {
    let bare = tag.trim_matches('"');
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .map(str::trim)
                .any(|t| t == "*" || t.trim_start_matches("W/").trim_matches('"') == bare)
        })
}

/// The content type a read body is served as: JSON streams read as NDJSON.
pub fn served_type(view_type: &str, json: bool) -> String {
    if json {
        content_type::NDJSON.to_owned()
    } else {
        view_type.to_owned()
    }
}

/// Runs `f` on the stream's group, in its turn, with the stream's key.
pub(super) async fn in_stream_group<R: Send + 'static>(
    st: &AppState,
    sp: &StreamPath,
    f: impl FnOnce(&mut Group, &str) -> R + Send + 'static,
) -> Result<R, ApiError> {
    let key = sp.key.clone();
    let group = st.rt.group_of(&key);
    Ok(st
        .rt
        .with_group(group, move |g| f(g, &key))
        .await
        .map_err(crate::engine::EngineError::from)?)
}

/// Reads once and asks for a TTL renewal when due.
pub async fn read_view(
    st: &AppState,
    sp: &StreamPath,
    from: ReadFrom,
    max: u64,
    incarnation: Option<u64>,
) -> Result<ReadView, ApiError> {
    let view = in_stream_group(st, sp, move |g, key| {
        g.state.read(key, from, max, incarnation, now_ms())
    })
    .await?;
    renew_if_due(st, sp, view.as_ref().is_ok_and(|v| v.renew_due));
    let mut view = view?;
    fill_cold(st, &mut view.paged, &mut view.cold, &mut view.data).await?;
    Ok(view)
}

/// Fetches the cold pieces a read planned (those its paged range names, then its own) and puts
/// them before the hot bytes, with no group lock held. A store that does not answer is a `503`
/// the client retries; an index page that cannot be used is a `500` naming it, never served.
pub async fn fill_cold(
    st: &AppState,
    paged: &mut Option<Paged>,
    cold: &mut Vec<ursula_state::stream::data::ColdPiece>,
    data: &mut Bytes,
) -> Result<(), ApiError> {
    if cold.is_empty() && paged.is_none() {
        return Ok(());
    }
    let Some(tier) = &st.cold else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the range is in the cold tier but this node has no storage.cold backend",
        ));
    };
    if let Some(p) = paged.take() {
        let mut pieces = tier.resolve(&p).await.map_err(|e| match e {
            IndexError::Store(e) => cold_error(e),
            page => {
                tracing::error!(error = %page, "a cold index page was refused");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("cannot read the cold tier: {page}"),
                )
            }
        })?;
        pieces.append(cold);
        *cold = pieces;
    }
    let fetched = tier.fetch(cold).await.map_err(cold_error)?;
    cold.clear();
    if data.is_empty() {
        *data = fetched;
    } else {
        let mut joined = BytesMut::with_capacity(fetched.len() + data.len());
        joined.put_slice(&fetched);
        joined.put_slice(data);
        *data = joined.freeze();
    }
    Ok(())
}

/// A snapshot body that lives in the cold tier, read whole.
async fn cold_body(st: &AppState, object: &std::sync::Arc<str>) -> Result<Bytes, ApiError> {
    let Some(tier) = &st.cold else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the snapshot body is in the cold tier but this node has no storage.cold backend",
        ));
    };
    tier.store.get(object).await.map_err(cold_error)
}

/// A cold read that failed: a store that does not answer is a `503` the client retries, any
/// other store error a `500`; both name the cold tier.
fn cold_error(e: ursula_cold::ColdError) -> ApiError {
    tracing::warn!(error = %e, "cold read failed");
    match e {
        ursula_cold::ColdError::Unavailable { .. } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the cold tier is unavailable: {e}"),
        )
        .header(header::RETRY_AFTER, "1"),
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the cold tier: {other}"),
        ),
    }
}

/// Reads on from `start` until `updates` holds a whole JSON message (or all `available`
/// bytes): in the paged history the state does not know where the first message ends.
async fn read_to_message_end(
    st: &AppState,
    sp: &StreamPath,
    start: u64,
    mut updates: Bytes,
    available: u64,
    incarnation: Option<u64>,
) -> Result<Bytes, ApiError> {
    while !updates.contains(&b'\n') && (updates.len() as u64) < available {
        let window = (updates.len() as u64 * 2)
            .max(MAX_READ_BYTES)
            .min(available);
        let at = ReadFrom::At(Offset(start));
        let view = read_view(st, sp, at, window, incarnation).await?;
        if view.data.len() <= updates.len() {
            break;
        }
        updates = view.data;
    }
    Ok(updates)
}

/// Cuts cold-assembled bootstrap updates by the rules the hot path applies: everything when it
/// fits, else up to the last JSON message boundary within `max` (at least one message), and
/// for a binary stream nothing.
fn cut_updates(updates: Bytes, available: u64, max: u64, json: bool) -> Bytes {
    if available <= max && updates.len() as u64 == available {
        return updates;
    }
    if !json {
        return Bytes::new();
    }
    let window = &updates[..updates.len().min(max as usize)];
    match window.iter().rposition(|b| *b == b'\n') {
        Some(lf) => updates.slice(..=lf),
        None => {
            let end = updates
                .iter()
                .position(|b| *b == b'\n')
                .map_or(updates.len(), |p| p + 1);
            updates.slice(..end)
        }
    }
}

pub fn renew_if_due(st: &AppState, sp: &StreamPath, due: bool) {
    if due {
        let group = st.rt.group_of(&sp.key);
        let proposal = st.engine.propose(
            group,
            Command::Renew {
                key: sp.key.clone(),
            },
        );
        tokio::spawn(proposal);
    }
}

/// The headers of a `200` read carrying `view`.
pub fn data_reply(view: &ReadView, status: StatusCode) -> Reply {
    partial_reply(view, status)
        .header_if(view.up_to_date(), names::STREAM_UP_TO_DATE, "true")
        .header_if(
            view.closed && view.up_to_date(),
            names::STREAM_CLOSED,
            "true",
        )
}

/// A follower's answer that reaches its local tail: the bytes without `Stream-Up-To-Date`
/// (and so without `Stream-Closed`, which it only sends once it applied the close).
pub fn partial_reply(view: &ReadView, status: StatusCode) -> Reply {
    Reply::new(status)
        .header(
            header::CONTENT_TYPE,
            served_type(&view.content_type, view.json),
        )
        .offset(names::STREAM_NEXT_OFFSET, view.next)
        .incarnation(view.incarnation)
}

/// Under Raft, what only the group's leader may answer (HEAD, live reads, tails of open
/// streams, `consistency=leader`) is sent there: `307` to the leader, `503` while none is known.
pub fn leader_only(st: &AppState, sp: &StreamPath) -> Result<(), ApiError> {
    match st.engine.leader_route(st.rt.group_of(&sp.key)) {
        LeaderRoute::Here => Ok(()),
        LeaderRoute::Elsewhere(url) => Err(ApiError::new(
            StatusCode::TEMPORARY_REDIRECT,
            "this node does not lead the stream's group",
        )
        .header(header::LOCATION, url)),
        LeaderRoute::Unknown => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no leader is known for the stream's group",
        )
        .header(header::RETRY_AFTER, "1")),
    }
}

/// A leader confirms it still leads (a ReadIndex round) before a linearizable read.
async fn confirm_leadership(st: &AppState, sp: &StreamPath) -> Result<(), ApiError> {
    leader_only(st, sp)?;
    st.engine
        .confirm_leadership(st.rt.group_of(&sp.key))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot confirm leadership: {e}"),
            )
            .header(header::RETRY_AFTER, "1")
        })
}

pub async fn catch_up(
    st: &AppState,
    sp: &StreamPath,
    q: &ReadQuery,
    headers: &HeaderMap,
) -> Result<Reply, ApiError> {
    let incarnation = request::incarnation(headers)?;
    if q.leader || q.from == ReadFrom::Now {
        confirm_leadership(st, sp).await?;
    }
    let view = match read_view(st, sp, q.from, q.max_bytes, incarnation).await {
        // This node may be behind an acknowledged append (a follower, or a leader that has not
        // applied its predecessor's last entries): a cursor past its local tail is read again
        // once it holds every write committed before, and only then answered `416`. When that
        // barrier fails, a follower sends the read to the leader (307, or 503 without one).
        Err(e) if e.status == StatusCode::RANGE_NOT_SATISFIABLE => {
            if let Err(why) = st.engine.read_barrier(st.rt.group_of(&sp.key)).await {
                leader_only(st, sp)?;
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("cannot confirm the stream's tail: {why}"),
                )
                .header(header::RETRY_AFTER, "1"));
            }
            read_view(st, sp, q.from, q.max_bytes, incarnation).await?
        }
        other => other?,
    };
    let mut partial = false;
    if view.up_to_date() && !view.closed {
        // A follower cannot tell that it holds the tail: it serves the replicated bytes it
        // has, without `Stream-Up-To-Date`, and only a read with nothing to serve goes to
        // the leader, which says whether the tail moved.
        if view.data.is_empty() {
            leader_only(st, sp)?;
        } else {
            partial = leader_only(st, sp).is_err();
        }
    }
    let mut reply = if partial {
        partial_reply(&view, StatusCode::OK)
    } else {
        data_reply(&view, StatusCode::OK)
    };
    if q.from == ReadFrom::Now {
        return Ok(reply.header(header::CACHE_CONTROL, "no-store"));
    }
    let tag = etag(&view);
    if if_none_match_hits(headers, &tag) {
        return Ok(Reply::new(StatusCode::NOT_MODIFIED)
            .header(header::ETAG, tag)
            .offset(names::STREAM_NEXT_OFFSET, view.next)
            .incarnation(view.incarnation));
    }
    reply = reply.header(header::ETAG, tag).header(
        header::CACHE_CONTROL,
        "public, max-age=60, stale-while-revalidate=300",
    );
    Ok(reply.body(view.data))
}

pub async fn head(st: &AppState, sp: &StreamPath, headers: &HeaderMap) -> Result<Reply, ApiError> {
    let incarnation = request::incarnation(headers)?;
    confirm_leadership(st, sp).await?;
    let v = in_stream_group(st, sp, move |g, key| {
        g.state.head(key, incarnation, now_ms())
    })
    .await??;
    let mut reply = Reply::new(StatusCode::OK)
        .header(header::CONTENT_TYPE, &v.content_type)
        .offset(names::STREAM_NEXT_OFFSET, v.tail)
        .offset(names::STREAM_RETAINED_OFFSET, v.retained)
        .offset(names::STREAM_COLD_HOT_START_OFFSET, v.hot_start)
        .incarnation(v.incarnation)
        .header_if(v.closed, names::STREAM_CLOSED, "true")
        .header(header::CACHE_CONTROL, "no-store");
    if let Some((offset, digest)) = &v.snapshot {
        reply = reply
            .offset(names::STREAM_SNAPSHOT_OFFSET, *offset)
            .header(names::STREAM_SNAPSHOT_DIGEST, digest);
    }
    reply = match v.lifetime {
        Some(Lifetime::Ttl(secs)) => reply.header(names::STREAM_TTL, secs.to_string()),
        Some(Lifetime::ExpiresAt(ms)) => {
            reply.header(names::STREAM_EXPIRES_AT, format_expires_at(ms))
        }
        None => reply,
    };
    Ok(reply)
}

pub async fn read_snapshot(
    st: &AppState,
    sp: &StreamPath,
    raw: &str,
    headers: &HeaderMap,
) -> Result<Reply, ApiError> {
    let offset = request::path_offset(raw)
        .map_err(|_| ApiError::new(StatusCode::NOT_FOUND, "no such snapshot"))?;
    let incarnation = request::incarnation(headers)?;
    confirm_leadership(st, sp).await?;
    let v = in_stream_group(st, sp, move |g, key| {
        g.state.read_snapshot(key, offset, incarnation, now_ms())
    })
    .await??;
    renew_if_due(st, sp, v.renew_due);
    let mut v = v;
    if let Some(object) = v.cold.take() {
        v.body = cold_body(st, &object).await?;
    }
    Ok(Reply::new(StatusCode::OK)
        .header(header::CONTENT_TYPE, &v.content_type)
        .offset(names::STREAM_SNAPSHOT_OFFSET, v.offset)
        .header(names::STREAM_SNAPSHOT_DIGEST, &v.digest)
        .offset(names::STREAM_NEXT_OFFSET, v.offset)
        .incarnation(v.incarnation)
        .header_if(v.offset == v.tail, names::STREAM_UP_TO_DATE, "true")
        .body(v.body))
}

pub async fn bootstrap(
    st: &AppState,
    sp: &StreamPath,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<Reply, ApiError> {
    if request::query_pairs(query).iter().any(|(k, _)| k == "live") {
        return Err(ApiError::bad_request("bootstrap takes no live parameter"));
    }
    let incarnation = request::incarnation(headers)?;
    confirm_leadership(st, sp).await?;
    let v = in_stream_group(st, sp, move |g, key| {
        g.state
            .bootstrap(key, MAX_READ_BYTES, incarnation, now_ms())
    })
    .await??;
    renew_if_due(st, sp, v.renew_due);
    let mut v = v;
    if let (Some(object), Some(snap)) = (v.snapshot_cold.take(), v.snapshot.as_mut()) {
        snap.2 = cold_body(st, &object).await?;
    }
    if !v.cold.is_empty() || v.paged.is_some() {
        let paged_history = v.paged.is_some();
        fill_cold(st, &mut v.paged, &mut v.cold, &mut v.updates).await?;
        if paged_history && v.json {
            let available = v.tail - v.start;
            v.updates =
                read_to_message_end(st, sp, v.start, v.updates, available, incarnation).await?;
        }
        v.updates = cut_updates(
            std::mem::take(&mut v.updates),
            v.tail - v.start,
            v.max,
            v.json,
        );
    }
    let boundary = format!("{:032x}", rand::random::<u128>());
    let mut body = BytesMut::new();
    let mut part = |ctype: &str, bytes: &[u8]| {
        body.put_slice(format!("--{boundary}\r\nContent-Type: {ctype}\r\n\r\n").as_bytes());
        body.put_slice(bytes);
        body.put_slice(b"\r\n");
    };
    match &v.snapshot {
        Some((_, ctype, snap)) => part(ctype, snap),
        None => part(content_type::OCTET_STREAM, b""),
    }
    if v.json {
        for msg in v.updates.split_inclusive(|b| *b == b'\n') {
            part(&v.content_type, msg);
        }
    } else if !v.updates.is_empty() {
        part(&v.content_type, &v.updates);
    }
    body.put_slice(format!("--{boundary}--\r\n").as_bytes());
    let next = v.start + v.updates.len() as u64;
    let complete = next == v.tail;
    let snapshot_offset = v
        .snapshot
        .as_ref()
        .map_or_else(|| "-1".to_owned(), |(o, _, _)| Offset(*o).to_string());
    Ok(Reply::new(StatusCode::OK)
        .header(
            header::CONTENT_TYPE,
            format!("multipart/mixed; boundary={boundary}"),
        )
        .header(names::STREAM_SNAPSHOT_OFFSET, snapshot_offset)
        .offset(names::STREAM_NEXT_OFFSET, next)
        .header_if(complete, names::STREAM_UP_TO_DATE, "true")
        .header_if(complete && v.closed, names::STREAM_CLOSED, "true")
        .incarnation(v.incarnation)
        .header(header::CACHE_CONTROL, "no-store")
        .body(Bytes::from(body)))
}
