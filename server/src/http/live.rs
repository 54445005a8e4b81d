//! Live reads: long-poll and SSE. A live reader subscribes to its stream in the same group
//! turn that read it, so no append can slip between the read and the wait.

use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::header;
use base64::Engine as _;
use bytes::Bytes;
use tokio::sync::watch;
use ursula_protocol::content_type;
use ursula_protocol::cursor::next_cursor;
use ursula_protocol::headers as h;
use ursula_protocol::offset::Offset;
use ursula_protocol::offset::ReadFrom;

use super::names;
use super::read::ReadQuery;
use super::read::data_reply;
use super::read::in_stream_group;
use super::read::renew_if_due;
use super::reply::ApiError;
use super::reply::Reply;
use super::request;
use super::request::StreamPath;
use super::state::AppState;
use crate::relay;
use crate::runtime::Group;
use crate::runtime::Tick;
use crate::runtime::WaiterSlot;
use crate::runtime::now_ms;
use ursula_state::stream::Refusal;
use ursula_state::stream::read::ReadView;

fn cursor_for(client: Option<&str>) -> String {
    let jitter = rand::random_range(1..=3600u64);
    next_cursor(now_ms(), client, jitter).to_string()
}

type Subscribed = (ReadView, Option<watch::Receiver<Tick>>);

/// Subscribes to `key` through this core's relay; in the group turn, like the read before it.
fn subscribe(g: &mut Group, key: &str, now: u64) -> Option<watch::Receiver<Tick>> {
    g.subscribe(key, now).map(|rx| relay::local(key, rx))
}

/// Reads at `from`; subscribes in the same turn when the read found nothing to send.
async fn read_and_subscribe(
    st: &AppState,
    sp: &StreamPath,
    from: ReadFrom,
    max: u64,
    incarnation: Option<u64>,
) -> Result<Subscribed, ApiError> {
    let (view, rx) = in_stream_group(st, sp, move |g, key| {
        let now = now_ms();
        let view = g.state.read(key, from, max, incarnation, now)?;
        let rx = if view.data.is_empty() && !view.closed {
            subscribe(g, key, now)
        } else {
            None
        };
        Ok::<_, Refusal>((view, rx))
    })
    .await??;
    let mut view = view;
    super::read::fill_cold(st, &mut view.paged, &mut view.cold, &mut view.data).await?;
    Ok((view, rx))
}

/// What every live read checks before it waits: an offset to start from (`mode` names the read
/// in the refusal), a well-formed incarnation, this node leading the stream, and a waiter slot
/// on its core.
fn admit(
    st: &AppState,
    sp: &StreamPath,
    q: &ReadQuery,
    headers: &HeaderMap,
    mode: &str,
) -> Result<(Option<u64>, WaiterSlot), ApiError> {
    if !q.offset_given {
        return Err(ApiError::bad_request(format!("{mode} needs offset")));
    }
    let incarnation = request::incarnation(headers)?;
    super::read::leader_only(st, sp)?;
    Ok((incarnation, reserve(st, sp)?))
}

fn reserve(st: &AppState, sp: &StreamPath) -> Result<WaiterSlot, ApiError> {
    st.rt
        .reserve_waiter(st.rt.group_of(&sp.key))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "this core holds the most live readers it may",
            )
            .header(header::RETRY_AFTER, "1")
        })
}

/// What a long-poll ended by a delete or recreate answers: `404` when the stream is gone; for a
/// recreated stream, `412` with the current token when the client named the incarnation, else
/// `416`, as the spec says (docs/conformance.md, "Spec rules the code cites").
async fn ended(
    st: &AppState,
    sp: &StreamPath,
    at: u64,
    registered: u64,
    sent_header: bool,
) -> ApiError {
    let current = in_stream_group(st, sp, move |g, key| {
        g.state.get(key, now_ms()).map(|s| s.incarnation)
    })
    .await;
    match current {
        Err(e) => e,
        Ok(None) => ApiError::not_found(),
        Ok(Some(inc)) if sent_header => Refusal::IncarnationMismatch { current: Some(inc) }.into(),
        Ok(Some(_)) => {
            match super::read::read_view(st, sp, ReadFrom::At(Offset(at)), 1, Some(registered))
                .await
            {
                // Beyond the new incarnation's tail: an ordinary 416 that carries that tail.
                Err(e)
                    if e.status == StatusCode::RANGE_NOT_SATISFIABLE
                        || e.status == StatusCode::NOT_FOUND =>
                {
                    e
                }
                _ => ApiError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "the stream was recreated",
                ),
            }
        }
    }
}

pub async fn long_poll(
    st: &AppState,
    sp: &StreamPath,
    q: &ReadQuery,
    headers: &HeaderMap,
) -> Result<Reply, ApiError> {
    let (incarnation, _slot) = admit(st, sp, q, headers, "a long-poll read")?;
    let (view, rx) = read_and_subscribe(st, sp, q.from, q.max_bytes, incarnation).await?;
    renew_if_due(st, sp, view.renew_due);
    let cursor = cursor_for(q.cursor.as_deref());
    if !view.data.is_empty() {
        return Ok(with_data(view, &cursor));
    }
    let at = view.start;
    let registered = view.incarnation;
    if view.closed {
        return Ok(timeout_reply(at, registered, true, &cursor));
    }
    let Some(mut rx) = rx else {
        return Err(ApiError::not_found());
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(q.timeout_ms);
    loop {
        let changed = tokio::select! {
            changed = tokio::time::timeout_at(deadline, rx.changed()) => changed,
            // A stopping node answers as if the wait had timed out: the client asks again
            // from the same offset, here once the node is back or at another replica.
            () = st.stopping() => return Ok(timeout_reply(at, registered, false, &cursor)),
        };
        match changed {
            Err(_) => return Ok(timeout_reply(at, registered, false, &cursor)),
            Ok(Err(_)) => return Err(ended(st, sp, at, registered, incarnation.is_some()).await),
            Ok(Ok(())) => {
                let tick = rx.borrow_and_update().clone();
                if tick.tail == at && !tick.closed {
                    continue;
                }
                let read = super::read::read_view(
                    st,
                    sp,
                    ReadFrom::At(Offset(at)),
                    q.max_bytes,
                    Some(registered),
                );
                let view = match read.await {
                    Ok(view) => view,
                    // Retention can pass a waiting reader: that 410 stands as it is.
                    Err(e) if e.status == StatusCode::GONE => return Err(e),
                    // Anything else means the stream was deleted or recreated since the tick.
                    Err(_) => {
                        return Err(ended(st, sp, at, registered, incarnation.is_some()).await);
                    }
                };
                if !view.data.is_empty() {
                    return Ok(with_data(view, &cursor));
                }
                if view.closed {
                    return Ok(timeout_reply(at, registered, true, &cursor));
                }
            }
        }
    }
}

fn with_data(view: ReadView, cursor: &str) -> Reply {
    let open = !view.closed;
    let reply = data_reply(&view, StatusCode::OK)
        .header(header::ETAG, super::read::etag(&view))
        .header(header::CACHE_CONTROL, "no-store")
        .header_if(open, names::STREAM_CURSOR, cursor);
    reply.body(view.data)
}

fn timeout_reply(at: u64, incarnation: u64, closed: bool, cursor: &str) -> Reply {
    Reply::new(StatusCode::NO_CONTENT)
        .offset(names::STREAM_NEXT_OFFSET, at)
        .header(names::STREAM_UP_TO_DATE, "true")
        .incarnation(incarnation)
        .header_if(closed, names::STREAM_CLOSED, "true")
        .header_if(!closed, names::STREAM_CURSOR, cursor)
        .header(header::CACHE_CONTROL, "no-store")
}

/// State of one SSE session between events.
/// What one batch of events is made of: from a read, or from a tick that carried the bytes.
struct Batch {
    start: u64,
    data: Bytes,
    /// Offset after `data`.
    next: u64,
    tail: u64,
    closed: bool,
}

impl Batch {
    fn up_to_date(&self) -> bool {
        self.next == self.tail
    }
}

impl From<ReadView> for Batch {
    fn from(v: ReadView) -> Batch {
        Batch {
            start: v.start,
            data: v.data,
            next: v.next,
            tail: v.tail,
            closed: v.closed,
        }
    }
}

struct Session {
    st: AppState,
    sp: StreamPath,
    at: u64,
    max: u64,
    incarnation: u64,
    text: bool,
    json: bool,
    cursor: Option<String>,
    rx: Option<watch::Receiver<Tick>>,
    /// Resolves when the node starts to stop. Made once per session: a fresh one per wait
    /// joined and left the stop signal's waiter list (a lock shared by every core) on every
    /// delivery of a fan-out.
    stop: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    /// A wake-up that carried exactly the bytes after `at`.
    fresh: Option<Tick>,
    first: bool,
    /// The last batch reached the tail the reader knew of: only a change can bring more, so
    /// the next call waits for one instead of reading the group again.
    caught_up: bool,
    done: bool,
    _slot: WaiterSlot,
}

pub async fn sse(
    st: &AppState,
    sp: &StreamPath,
    q: &ReadQuery,
    headers: &HeaderMap,
) -> Result<Reply, ApiError> {
    let (incarnation, slot) = admit(st, sp, q, headers, "an SSE read")?;
    // Registration: the stream must exist and match; where to start is settled now.
    let group = st.rt.group_of(&sp.key);
    let from = q.from;
    let (head, start, rx) = in_stream_group(st, sp, move |g, key| {
        let now = now_ms();
        let head = g.state.head(key, incarnation, now)?;
        let start = match g.state.resolve(key, from, now) {
            Ok(at) => Ok(at),
            Err(Refusal::BeyondTail { tail }) => Err(tail),
            Err(other) => return Err(other),
        };
        let rx = subscribe(g, key, now);
        Ok((head, start, rx))
    })
    .await??;
    renew_if_due(st, sp, true);
    let text = content_type::is_sse_text(&head.content_type);
    let json = content_type::is_json(&head.content_type);
    let data_type = if json {
        content_type::NDJSON.to_owned()
    } else {
        head.content_type.clone()
    };
    let mut reply = Reply::new(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache, no-store")
        .header(h::STREAM_DATA_CONTENT_TYPE, data_type)
        .incarnation(head.incarnation);
    if !text {
        reply = reply.header(h::STREAM_SSE_DATA_ENCODING, "base64");
    }
    let max = if text {
        q.max_bytes.max(4)
    } else {
        q.max_bytes
    };
    let mut session = Session {
        st: st.clone(),
        sp: sp.clone(),
        at: start.unwrap_or(0),
        max,
        incarnation: head.incarnation,
        text,
        json,
        cursor: q.cursor.clone(),
        rx,
        stop: Box::pin(super::serve::until_stopping(st.stopping.clone())),
        fresh: None,
        first: true,
        caught_up: false,
        done: false,
        _slot: slot,
    };
    count(st, group, |c| &c.sse_streams_opened);
    if let Err(tail) = start {
        // Past the tail: reported from the first read as an error event, not a status.
        session.done = true;
        count(st, group, |c| &c.sse_error_events);
        let event = error_event(416, "OffsetBeyondTail", tail);
        return Ok(reply.body(Body::from(event)));
    }
    let events = futures_util::stream::unfold(session, |mut s| async move {
        let chunk = s.next_events().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(chunk), s))
    });
    Ok(reply.body(Body::from_stream(events)))
}

/// Adds one to a counter of the core that runs `group`: a relaxed atomic, no lock.
fn count(
    st: &AppState,
    group: crate::runtime::GroupId,
    which: impl Fn(&crate::runtime::CoreStats) -> &std::sync::atomic::AtomicU64,
) {
    if let Some(c) = st.rt.group_stats(group) {
        which(c).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn error_event(status: u16, error: &str, next: u64) -> String {
    let data = serde_json::json!({ "status": status, "error": error, "streamNextOffset": Offset(next).to_string() });
    format!("event: error\ndata:{data}\n\n")
}

impl Session {
    fn count_error(&self) {
        count(&self.st, self.st.rt.group_of(&self.sp.key), |c| {
            &c.sse_error_events
        });
    }

    /// The next batch of events to write; `None` ends the response.
    async fn next_events(&mut self) -> Option<Bytes> {
        // A stopping node ends even a session that never waits (its stream keeps changing).
        if self.done || *self.st.stopping.borrow() {
            return None;
        }
        loop {
            if self.caught_up {
                self.caught_up = false;
                if let Err(last) = self.wait_for_change().await {
                    return last;
                }
            }
            let fast = self.fresh.take().and_then(|t| self.batch_from_tick(t));
            let read = match fast {
                Some(b) => Ok(b),
                None => super::read::read_view(
                    &self.st,
                    &self.sp,
                    ReadFrom::At(Offset(self.at)),
                    self.max,
                    Some(self.incarnation),
                )
                .await
                .map(Batch::from),
            };
            let view = match read {
                Ok(v) => v,
                Err(e) => {
                    self.done = true;
                    let token = if e.status == StatusCode::NOT_FOUND {
                        "StreamNotFound"
                    } else {
                        "StreamRecreated"
                    };
                    self.count_error();
                    return Some(Bytes::from(error_event(e.status.as_u16(), token, self.at)));
                }
            };
            // Room for a base64 body and a control event, so the event is built in one go.
            let mut out = String::with_capacity(view.data.len() * 4 / 3 + 192);
            let mut view = view;
            if self.text && !view.data.is_empty() {
                // Never split a UTF-8 sequence: stop before an incomplete trailing one.
                let valid = match std::str::from_utf8(&view.data) {
                    Ok(_) => view.data.len(),
                    Err(e) if e.error_len().is_none() => e.valid_up_to(),
                    Err(_) => view.data.len(),
                };
                if valid > 0 && valid < view.data.len() {
                    view.data = view.data.slice(..valid);
                    view.next = view.start + valid as u64;
                }
            }
            if self.json && view.data.last().is_some_and(|b| *b != b'\n') {
                // The window cut a record: end at the last complete one when there is one (a
                // SHOULD of the spec). A record longer than the window still goes out in pieces.
                if let Some(lf) = view.data.iter().rposition(|b| *b == b'\n') {
                    view.data = view.data.slice(..=lf);
                    view.next = view.start + lf as u64 + 1;
                }
            }
            if !view.data.is_empty() {
                out.push_str("event: data\n");
                if self.text {
                    // The whole text, its final line feed included: a JSON event ends with the
                    // LF of its last record (or inside a record the next event continues).
                    push_data_lines(&mut out, &String::from_utf8_lossy(&view.data));
                } else {
                    out.push_str("data:");
                    base64::engine::general_purpose::STANDARD.encode_string(&view.data, &mut out);
                    out.push('\n');
                }
                out.push('\n');
            }
            let caught_up = view.up_to_date();
            let closed_end = view.closed && caught_up;
            if !view.data.is_empty() || self.first || closed_end {
                self.push_control(&mut out, view.next, caught_up, closed_end);
            }
            self.first = false;
            self.at = view.next;
            if closed_end {
                self.done = true;
            }
            if !out.is_empty() {
                self.caught_up = caught_up && !self.done;
                return Some(Bytes::from(out));
            }
            // Caught up: wait for the next change.
            if let Err(last) = self.wait_for_change().await {
                return last;
            }
        }
    }

    /// Waits for the stream's next change and keeps its tick in `fresh`. When the stream is
    /// gone instead, the session ends: `Err` holds its last chunk (the error event), or `None`
    /// for a session that never subscribed.
    async fn wait_for_change(&mut self) -> Result<(), Option<Bytes>> {
        let Some(rx) = self.rx.as_mut() else {
            self.done = true;
            return Err(None);
        };
        let changed = tokio::select! {
            changed = rx.changed() => changed,
            () = self.stop.as_mut() => {
                // A stopping node ends the response after the last whole event: the client
                // reconnects from the offset of the last control event it read.
                self.done = true;
                return Err(None);
            }
        };
        if changed.is_ok() {
            self.fresh = Some(rx.borrow_and_update().clone());
            return Ok(());
        }
        self.done = true;
        let ended = super::read::read_view(&self.st, &self.sp, ReadFrom::Now, 1, None).await;
        let (status, token) = match ended {
            Err(e) if e.status == StatusCode::NOT_FOUND => (404, "StreamNotFound"),
            _ => (412, "StreamRecreated"),
        };
        self.count_error();
        Err(Some(Bytes::from(error_event(status, token, self.at))))
    }

    /// The fast path of a fan-out: a tick that carries the bytes right after `at`.
    fn batch_from_tick(&self, t: Tick) -> Option<Batch> {
        let (start, bytes) = t.appended?;
        if t.incarnation != self.incarnation || start != self.at {
            return None;
        }
        let data = if bytes.len() as u64 > self.max {
            bytes.slice(..self.max as usize)
        } else {
            bytes
        };
        let next = start + data.len() as u64;
        Some(Batch {
            start,
            data,
            next,
            tail: t.tail,
            closed: t.closed,
        })
    }

    fn push_control(&mut self, out: &mut String, next: u64, up_to_date: bool, closed: bool) {
        if let Some(sent) = write_control(out, self.cursor.as_deref(), next, up_to_date, closed) {
            self.cursor = Some(sent);
        }
    }
}

/// Writes a control event, by hand: it goes to every reader after every append, and building
/// a JSON map for it cost more than the rest of the event. Its values are digits and literals,
/// with nothing to escape, and the keys keep the sorted order a JSON map gave them. Returns the
/// cursor it sent (none once the stream is closed).
fn write_control(
    out: &mut String,
    cursor: Option<&str>,
    next: u64,
    up_to_date: bool,
    closed: bool,
) -> Option<String> {
    use std::fmt::Write as _;
    out.push_str("event: control\ndata:{");
    let sent = if closed {
        out.push_str("\"streamClosed\":true,");
        None
    } else {
        let cursor = cursor_for(cursor);
        let _ = write!(out, "\"streamCursor\":\"{cursor}\",");
        Some(cursor)
    };
    let _ = write!(out, "\"streamNextOffset\":\"{}\"", Offset(next));
    if up_to_date {
        out.push_str(",\"upToDate\":true");
    }
    out.push_str("}\n\n");
    sent
}

/// Writes `text` as `data:` lines. A client joins an event's lines with LF and drops the LF
/// after the last one, so text ending in a line break gets one more, empty, `data:` line and
/// reaches the client with its final LF. CR, LF and CRLF all end an SSE line, so each becomes a
/// line break the client turns back into LF; a line starting with a space gets one extra,
/// because the client strips one.
fn push_data_lines(out: &mut String, text: &str) {
    let mut rest = text;
    loop {
        let end = rest.find(['\r', '\n']).unwrap_or(rest.len());
        let line = &rest[..end];
        out.push_str(if line.starts_with(' ') {
            "data: "
        } else {
            "data:"
        });
        out.push_str(line);
        out.push('\n');
        if end == rest.len() {
            break;
        }
        let skip = if rest[end..].starts_with("\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + skip..];
    }
}

#[cfg(test)]
mod tests {
    use super::push_data_lines;
    use super::write_control;

    fn control_json(out: &str) -> serde_json::Value {
        let data = out
            .strip_prefix("event: control\ndata:")
            .and_then(|d| d.strip_suffix("\n\n"))
            .expect("one control event");
        serde_json::from_str(data).expect("the control event's data is JSON")
    }

    #[test]
    fn a_control_event_is_the_json_a_map_would_give_with_a_cursor_past_the_clients() {
        let mut out = String::new();
        let sent = write_control(&mut out, Some("99999999999"), 21, true, false).expect("a cursor");
        let value = control_json(&out);
        let keys: Vec<&str> = value
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["streamCursor", "streamNextOffset", "upToDate"]);
        assert_eq!(value["streamNextOffset"], "00000000000000000021");
        assert_eq!(value["upToDate"], true);
        assert_eq!(value["streamCursor"], sent.as_str());
        assert!(sent.parse::<u64>().expect("digits") > 99_999_999_999);
        // serde_json writes the same text back: same keys, same order, no spaces.
        assert_eq!(
            value.to_string(),
            out["event: control\ndata:".len()..out.len() - 2]
        );
    }

    #[test]
    fn a_closed_streams_control_event_has_no_cursor_and_says_closed() {
        let mut out = String::new();
        assert_eq!(write_control(&mut out, None, 6, true, true), None);
        assert_eq!(
            out,
            "event: control\ndata:{\"streamClosed\":true,\"streamNextOffset\":\"00000000000000000006\",\"upToDate\":true}\n\n"
        );
        let mut out = String::new();
        assert!(write_control(&mut out, None, 6, false, false).is_some());
        let value = control_json(&out);
        assert!(value.get("upToDate").is_none() && value.get("streamClosed").is_none());
    }

    /// What a client following the HTML standard hands the application: the `data:` values
    /// (one leading space removed), each followed by LF, less the last LF.
    fn decoded(event: &str) -> String {
        let mut buf = String::new();
        for line in event.lines() {
            let value = line.strip_prefix("data:").expect("a data line");
            buf.push_str(value.strip_prefix(' ').unwrap_or(value));
            buf.push('\n');
        }
        buf.pop();
        buf
    }

    #[test]
    fn a_client_decodes_exactly_the_text_written_final_line_feed_included() {
        for text in [
            "{\"a\":1}\n{\"a\":2}\n",
            "{\"a\":1}\n{\"partial\":",
            "no line feed",
            "two\n\n",
            "\n",
            " leading space\n",
        ] {
            let mut out = String::new();
            push_data_lines(&mut out, text);
            assert_eq!(decoded(&out), text, "{out:?}");
        }
    }

    #[test]
    fn every_line_ending_starts_a_data_line() {
        let mut out = String::new();
        push_data_lines(&mut out, "a\r\nb\rc\n d\n");
        assert_eq!(out, "data:a\ndata:b\ndata:c\ndata:  d\ndata:\n");
    }
}
