//! Write routes: create, append and close, delete, snapshot publish, retention.

use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::header;
use bytes::Bytes;
use ursula_protocol::content_type;
use ursula_protocol::headers as h;
use ursula_protocol::ids;
use ursula_protocol::lifetime::format_expires_at;
use ursula_protocol::offset::Offset;
use ursula_protocol::offset::ReadFrom;

use super::names;
use super::reply::ApiError;
use super::reply::Reply;
use super::request;
use super::request::StreamPath;
use super::request::WriteHeaders;
use super::state::AppState;
use crate::admission::GroupCharge;
use crate::coldtier::stage::Staged;
use crate::engine::EngineError;
use crate::runtime::now_ms;
use ursula_state::stream::Append;
use ursula_state::stream::Applied;
use ursula_state::stream::Body;
use ursula_state::stream::Command;
use ursula_state::stream::Create;
use ursula_state::stream::Lifetime;
use ursula_state::stream::PublishSnapshot;
use ursula_state::stream::Refusal;
use ursula_state::stream::json;

pub fn create_bucket(bucket: &str) -> Result<Reply, ApiError> {
    ids::validate_bucket(bucket).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Reply::new(StatusCode::CREATED))
}

fn lifetime_headers(reply: Reply, lifetime: Option<Lifetime>) -> Reply {
    match lifetime {
        Some(Lifetime::Ttl(secs)) => reply.header(names::STREAM_TTL, secs.to_string()),
        Some(Lifetime::ExpiresAt(ms)) => {
            reply.header(names::STREAM_EXPIRES_AT, format_expires_at(ms))
        }
        None => reply,
    }
}

/// A body in the form the state machine takes: JSON-mode types are validated here, off the
/// group's core, and reach the state machine already flattened.
fn body_for(ctype: Option<&str>, bytes: Bytes, allow_empty_array: bool) -> Body {
    if ctype.is_some_and(content_type::is_json) && !bytes.is_empty() {
        Body::Json(json::to_messages(&bytes, allow_empty_array).map(|m| Bytes::from(m.text)))
    } else {
        Body::Raw(bytes)
    }
}

pub async fn create_stream(
    st: &AppState,
    sp: &StreamPath,
    headers: &HeaderMap,
    location: String,
    body: Bytes,
    budget: Budget<'_>,
) -> Result<Reply, ApiError> {
    let sent = WriteHeaders::scan(headers);
    let ctype = sent
        .content_type()?
        .unwrap_or_else(|| content_type::OCTET_STREAM.to_owned());
    let lifetime = request::lifetime(headers)?;
    let stream_seq = sent.stream_seq()?;
    let producer = sent.producer()?;
    let incarnation = sent.incarnation()?;
    let closed = sent.closed();
    let had_body = !body.is_empty();
    let body = had_body.then(|| body_for(Some(&ctype), body, true));
    let echo = producer.as_ref().map(|p| (p.epoch, p.seq));
    let cmd = Command::Create(Create {
        key: sp.key.clone(),
        content_type: ctype,
        lifetime,
        closed,
        stream_seq,
        producer,
        incarnation,
        body,
    });
    match submit_write(st, &sp.key, cmd, budget).await? {
        Applied::Created { meta, fresh } => {
            let mut reply = Reply::new(if fresh {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            })
            .header(header::CONTENT_TYPE, &meta.content_type)
            .offset(names::STREAM_NEXT_OFFSET, meta.tail)
            .incarnation(meta.incarnation)
            .header_if(meta.closed, names::STREAM_CLOSED, "true");
            reply = lifetime_headers(reply, meta.lifetime);
            if fresh {
                reply = reply.header(header::LOCATION, location).producer(echo);
            }
            Ok(reply)
        }
        other => Err(unexpected(other)),
    }
}

/// Whether a create or append body of `len` bytes to `sp` is staged in the cold tier before
/// it is proposed (docs/cold-tier.md, "External payloads"): with a cold tier, at or above
/// `runtime.external_payload_min_size`, on the group's leader (elsewhere the write is
/// redirected, marked, before anything is uploaded). A staged body takes no share of the
/// group's uncommitted or hot budgets: it never passes through Raft or the hot ring.
pub fn stages(st: &AppState, sp: &StreamPath, len: usize) -> bool {
    st.cold
        .as_ref()
        .is_some_and(|t| len as u64 >= t.settings.external_min)
        && st.engine.leads(st.rt.group_of(&sp.key))
}

/// A write's share of its group's budgets (the uncommitted bytes and the hot cap).
pub struct Budget<'a> {
    /// From [`stages`]: the body goes through the cold tier, and is charged only if staging
    /// hands it back to go through Raft with its body.
    pub staged: bool,
    /// Takes the charge, or refuses with the admission's `503`.
    pub charge: &'a mut (dyn FnMut() -> Result<Option<GroupCharge>, ApiError> + Send),
}

/// Proposes a create or an append under `budget`: staged first when it says so.
async fn submit_write(
    st: &AppState,
    key: &str,
    cmd: Command,
    budget: Budget<'_>,
) -> Result<Applied, ApiError> {
    let cmd = match st.cold.as_ref().filter(|_| budget.staged) {
        Some(tier) => {
            let group = st.rt.group_of(key);
            match tier
                .stage_write(st.rt.clone(), st.engine.clone(), group, cmd)
                .await
            {
                Staged::Done(answer) => return Ok(answer??),
                Staged::Inline(cmd) => cmd,
            }
        }
        None => cmd,
    };
    let charge = (budget.charge)()?;
    submit(st, key, cmd, charge).await
}

/// Appends `body` under `budget`.
pub async fn append(
    st: &AppState,
    sp: &StreamPath,
    headers: &HeaderMap,
    body: Bytes,
    budget: Budget<'_>,
) -> Result<Reply, ApiError> {
    let sent = WriteHeaders::scan(headers);
    if sent.record_match {
        return Err(ApiError::bad_request(
            "Stream-Record-Match was removed in 0.6.0",
        ));
    }
    // With an empty body the server must not reject over Content-Type, even a malformed one (a
    // MUST of the spec): a close-only request stays valid whatever type a client library attached.
    let ctype = match sent.content_type() {
        Ok(ctype) => ctype,
        Err(_) if body.is_empty() => None,
        Err(e) => return Err(e),
    };
    let close = sent.closed();
    let stream_seq = sent.stream_seq()?;
    let producer = sent.producer()?;
    let incarnation = sent.incarnation()?;
    if body.is_empty() && !close {
        return Err(ApiError::bad_request(
            "an append needs a body or Stream-Closed: true",
        ));
    }
    if !body.is_empty() && ctype.is_none() {
        return Err(ApiError::bad_request(
            "an append with a body needs Content-Type",
        ));
    }
    let had_body = !body.is_empty();
    let body = body_for(ctype.as_deref(), body, false);
    let append = Append {
        key: sp.key.clone(),
        content_type: ctype,
        close,
        stream_seq,
        producer,
        incarnation,
        body,
    };
    let applied = submit_write(st, &sp.key, Command::Append(append), budget).await?;
    match applied {
        Applied::Appended {
            incarnation,
            next_offset,
            closed,
            producer_ack,
            duplicate,
        } => {
            // A producer append that stored bytes answers 200; a close-only request and a
            // duplicate answer 204, echoing the producer state either way.
            let status = if producer_ack.is_some() && !duplicate && had_body {
                StatusCode::OK
            } else {
                StatusCode::NO_CONTENT
            };
            let mut reply = Reply::new(status).incarnation(incarnation).header_if(
                closed,
                names::STREAM_CLOSED,
                "true",
            );
            if let Some(next) = next_offset {
                reply = reply.offset(names::STREAM_NEXT_OFFSET, next);
            }
            Ok(reply.producer(producer_ack))
        }
        other => Err(unexpected(other)),
    }
}

pub async fn delete(
    st: &AppState,
    sp: &StreamPath,
    headers: &HeaderMap,
) -> Result<Reply, ApiError> {
    let incarnation = request::incarnation(headers)?;
    let cmd = Command::Delete {
        key: sp.key.clone(),
        incarnation,
    };
    match propose(st, &sp.key, cmd).await? {
        Applied::Deleted => Ok(Reply::new(StatusCode::NO_CONTENT)),
        other => Err(unexpected(other)),
    }
}

pub async fn publish_snapshot(
    st: &AppState,
    sp: &StreamPath,
    raw_offset: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Reply, ApiError> {
    if headers.contains_key(h::STREAM_SNAPSHOT_MATCH) {
        return Err(ApiError::bad_request(
            "Stream-Snapshot-Match is not supported: publishes are unconditional",
        ));
    }
    let offset = request::path_offset(raw_offset)?;
    let ctype =
        request::content_type(headers)?.unwrap_or_else(|| content_type::OCTET_STREAM.to_owned());
    let incarnation = request::incarnation(headers)?;
    let group = st.rt.group_of(&sp.key);
    let boundary = read_boundary(st, sp, offset).await?;
    let template = PublishSnapshot {
        key: sp.key.clone(),
        offset,
        content_type: ctype.clone(),
        body: Bytes::new(),
        incarnation,
        cold: None,
        boundary,
    };
    // With a cold tier, a large body is staged as an object first and only its reference is
    // replicated (the spec: bodies of at least runtime.external_payload_min_size).
    let result = match &st.cold {
        Some(tier) if body.len() as u64 >= tier.settings.external_min => {
            let bucket = sp.key.split('/').next().unwrap_or_default();
            let publish = move |cold| {
                Command::PublishSnapshot(PublishSnapshot {
                    cold: Some(cold),
                    ..template
                })
            };
            tier.stage_and_publish(st.engine.clone(), group, bucket, &ctype, body, publish)
                .await
                .map_err(|e| {
                    ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("cannot stage the snapshot body in the cold tier: {e}"),
                    )
                    .header(header::RETRY_AFTER, "1")
                })?
        }
        _ => {
            let cmd = Command::PublishSnapshot(PublishSnapshot { body, ..template });
            st.engine.propose(group, cmd).await
        }
    };
    match unmarked(result)?? {
        Applied::SnapshotPublished {
            incarnation,
            offset,
            digest,
            tail,
        } => Ok(Reply::new(StatusCode::NO_CONTENT)
            .offset(names::STREAM_NEXT_OFFSET, tail)
            .offset(names::STREAM_SNAPSHOT_OFFSET, offset)
            .header(names::STREAM_SNAPSHOT_DIGEST, digest)
            .incarnation(incarnation)),
        other => Err(unexpected(other)),
    }
}

/// On a JSON stream whose byte before `offset` is cold (so the state cannot check the message
/// boundary), reads that byte: whether it is a newline goes into the command. The spec's `503`
/// stays for when it cannot be read. `None` when the state can check it itself.
async fn read_boundary(
    st: &AppState,
    sp: &StreamPath,
    offset: u64,
) -> Result<Option<bool>, ApiError> {
    let unknown = super::read::in_stream_group(st, sp, move |g, key| {
        g.state
            .get(key, now_ms())
            .is_some_and(|s| matches!(s.is_boundary(offset, None), Err(Refusal::BoundaryUnknown)))
    })
    .await?;
    if !unknown || offset == 0 {
        return Ok(None);
    }
    let before = ReadFrom::At(Offset(offset - 1));
    let view = super::read::read_view(st, sp, before, 1, None).await?;
    Ok(view.data.first().map(|b| *b == b'\n'))
}

/// The largest snapshot body a node with a cold tier takes (the spec: up to 1 GiB).
pub const COLD_SNAPSHOT_MAX: u64 = 1 << 30;

pub async fn retain(
    st: &AppState,
    sp: &StreamPath,
    raw_offset: &str,
    headers: &HeaderMap,
) -> Result<Reply, ApiError> {
    let offset = request::path_offset(raw_offset)?;
    let incarnation = request::incarnation(headers)?;
    let boundary = read_boundary(st, sp, offset).await?;
    let cmd = Command::Retain {
        key: sp.key.clone(),
        offset,
        incarnation,
        boundary,
    };
    match propose(st, &sp.key, cmd).await? {
        Applied::Retained {
            incarnation,
            offset,
        } => Ok(Reply::new(StatusCode::NO_CONTENT)
            .offset(names::STREAM_RETAINED_OFFSET, offset)
            .incarnation(incarnation)),
        other => Err(unexpected(other)),
    }
}

/// Submits a client write of the stream `key` under admission's `charge`, to the group that
/// holds the stream.
async fn submit(
    st: &AppState,
    key: &str,
    cmd: Command,
    charge: Option<GroupCharge>,
) -> Result<Applied, ApiError> {
    let group = st.rt.group_of(key);
    Ok(st.engine.submit(group, cmd, charge).await??)
}

/// Proposes a delete or a retention move of the stream `key`, outside admission.
async fn propose(st: &AppState, key: &str, cmd: Command) -> Result<Applied, ApiError> {
    let group = st.rt.group_of(key);
    Ok(unmarked(st.engine.propose(group, cmd).await)??)
}

/// Deletes, snapshot publishes and retention moves go to Raft without a leadership check of
/// their own, so a redirect or 503 they get cannot prove nothing was proposed: no marker.
fn unmarked<T>(r: Result<T, EngineError>) -> Result<T, ApiError> {
    r.map_err(|e| {
        let mut e = ApiError::from(e);
        e.headers.remove(h::NOT_APPLIED);
        if e.status == StatusCode::INTERNAL_SERVER_ERROR {
            e.status = StatusCode::SERVICE_UNAVAILABLE;
        }
        e
    })
}

fn unexpected(applied: Applied) -> ApiError {
    tracing::error!(
        ?applied,
        "state machine answered a command with another command's result"
    );
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
}
