//! Live reads: long-poll and SSE (LP-*, SSE-*, CUR-*, INC-7, RD-13 in `protocol.md`). SSE bodies
//! are read as a stream, one frame at a time, each under a bounded wait.

use std::time::Duration;
use std::time::Instant;

use crate::harness::router::Req;
use crate::harness::router::Resp;
use crate::harness::router::Server;
use crate::harness::router::off;
use axum::body::Body;
use axum::http::response::Parts;
use base64::Engine as _;
use http_body_util::BodyExt;
use serde_json::Value;

const OCTET: &str = "application/octet-stream";
const TEXT: &str = "text/plain";
const JSON: &str = "application/json";

/// Longest wait for something that should happen now.
const SOON: Duration = Duration::from_secs(5);

/// Waits until `n` live readers hold a slot, so a test acts only once its reader is waiting.
async fn wait_for_live_readers(s: &Server, n: usize) {
    let deadline = Instant::now() + SOON;
    loop {
        let held: usize = (0..s.state.rt.core_count())
            .filter_map(|c| s.state.rt.stats(c))
            .map(|st| st.live_waiters.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        if held >= n {
            // The slot is taken just before the reader subscribes; give that turn a moment.
            tokio::time::sleep(Duration::from_millis(20)).await;
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} live readers did not register in {SOON:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn spawn_send(req: Req) -> tokio::task::JoinHandle<Resp> {
    tokio::spawn(async move { req.send().await })
}

async fn joined(h: tokio::task::JoinHandle<Resp>) -> Resp {
    tokio::time::timeout(SOON, h)
        .await
        .expect("the live read answers in time")
        .expect("the reader task did not panic")
}

/// The decimal `Stream-Cursor` of a live answer.
fn cursor_of(r: &Resp) -> u64 {
    r.header("stream-cursor")
        .expect("cursor")
        .parse()
        .expect("decimal cursor")
}

// ---------------------------------------------------------------------------------------------
// Long-poll

#[tokio::test]
async fn a_long_poll_without_offset_answers_400() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    for live in ["long-poll", "sse"] {
        s.get(&format!("/demo/s?live={live}"))
            .refused_with(400, "offset")
            .await;
    }
}

#[tokio::test]
async fn a_long_poll_with_data_answers_200_at_once_with_a_cursor() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    let started = Instant::now();
    let r = s
        .get("/demo/s?offset=-1&live=long-poll&timeout_ms=60000")
        .expect(200)
        .await;
    assert!(started.elapsed() < SOON);
    assert_eq!(&r.body[..], b"abc");
    r.expect_header("stream-next-offset", &off(3))
        .expect_header("stream-up-to-date", "true");
    assert!(
        r.header("stream-cursor")
            .is_some_and(|c| c.parse::<u64>().is_ok()),
        "{:?}",
        r.header("stream-cursor")
    );
    assert!(r.header("etag").is_some() && r.header("stream-incarnation").is_some());
}

#[tokio::test]
async fn a_long_poll_timeout_answers_204_at_the_requested_offset_with_cursor_and_incarnation() {
    let s = Server::new().await;
    let inc = s.create("/demo/s", OCTET).await.incarnation();
    s.append("/demo/s", OCTET, "abc").await;
    let started = Instant::now();
    let r = s
        .get(&format!(
            "/demo/s?offset={}&live=long-poll&timeout_ms=50",
            off(3)
        ))
        .expect(204)
        .await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(40) && waited < SOON,
        "waited {waited:?}"
    );
    r.expect_header("stream-next-offset", &off(3))
        .expect_header("stream-up-to-date", "true");
    r.expect_header("stream-incarnation", &inc)
        .expect_no_header("stream-closed")
        .expect_no_header("etag");
    assert!(r.has("stream-cursor"));
    assert!(r.body.is_empty());
}

#[tokio::test]
async fn a_long_poll_at_now_returns_no_existing_data() {
    let s = Server::with_stream("/demo/s", OCTET, "old").await;
    let r = s
        .get("/demo/s?offset=now&live=long-poll&timeout_ms=20")
        .expect(204)
        .await;
    r.expect_header("stream-next-offset", &off(3))
        .expect_header("stream-up-to-date", "true");
}

#[tokio::test]
async fn a_waiting_long_poll_wakes_with_the_appended_data() {
    let s = Server::with_stream("/demo/s", TEXT, "ab").await;
    let waiting = spawn_send(s.get(&format!(
        "/demo/s?offset={}&live=long-poll&timeout_ms=20000",
        off(2)
    )));
    wait_for_live_readers(&s, 1).await;
    s.append("/demo/s", TEXT, "cd").await;
    let r = joined(waiting).await.expect(200);
    assert_eq!(&r.body[..], b"cd");
    r.expect_header("stream-next-offset", &off(4))
        .expect_header("content-type", TEXT);
    assert!(r.has("stream-cursor"));
}

#[tokio::test]
async fn a_long_poll_on_a_closed_stream_at_its_tail_answers_204_closed_without_waiting() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    s.close_with("/demo/s", OCTET, "x").await;
    for offset in [off(1), "now".to_owned()] {
        let started = Instant::now();
        let r = s
            .get(&format!(
                "/demo/s?offset={offset}&live=long-poll&timeout_ms=60000"
            ))
            .expect(204)
            .await;
        assert!(started.elapsed() < SOON);
        r.expect_header("stream-closed", "true")
            .expect_header("stream-up-to-date", "true");
        r.expect_header("stream-next-offset", &off(1));
    }
}

#[tokio::test]
async fn closing_a_stream_ends_a_waiting_long_poll_with_204_closed() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let waiting = spawn_send(s.get("/demo/s?offset=now&live=long-poll&timeout_ms=20000"));
    wait_for_live_readers(&s, 1).await;
    s.close("/demo/s").await;
    let r = joined(waiting).await.expect(204);
    r.expect_header("stream-closed", "true")
        .expect_header("stream-next-offset", &off(0));
}

#[tokio::test]
async fn a_long_poll_past_the_tail_answers_416_with_the_tail() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let r = s
        .get(&format!("/demo/s?offset={}&live=long-poll", off(1)))
        .refused(416)
        .await;
    r.expect_header("stream-next-offset", &off(0));
    s.get("/demo/missing?offset=-1&live=long-poll")
        .refused(404)
        .await;
}

#[tokio::test]
async fn deleting_the_stream_ends_a_waiting_long_poll_with_404() {
    let s = Server::new().await;
    let inc = s.create("/demo/s", OCTET).await.incarnation();
    let plain = spawn_send(s.get("/demo/s?offset=now&live=long-poll&timeout_ms=20000"));
    let with = spawn_send(
        s.get("/demo/s?offset=now&live=long-poll&timeout_ms=20000")
            .header("stream-incarnation", &inc),
    );
    wait_for_live_readers(&s, 2).await;
    s.delete("/demo/s").expect(204).await;
    joined(plain).await.refused(404);
    joined(with).await.refused(404);
}

#[tokio::test]
async fn a_delete_and_recreate_ends_a_waiting_long_poll_with_404_or_the_recreated_status() {
    // The reader may see the gap between the delete and the create (404) or the new stream.
    let s = Server::new().await;
    let inc = s.create("/demo/s", OCTET).await.incarnation();
    s.append("/demo/s", OCTET, "abc").await;
    let uri = format!("/demo/s?offset={}&live=long-poll&timeout_ms=20000", off(3));
    let plain = spawn_send(s.get(&uri));
    let guarded = spawn_send(s.get(&uri).header("stream-incarnation", &inc));
    wait_for_live_readers(&s, 2).await;
    s.delete("/demo/s").expect(204).await;
    s.create("/demo/s", OCTET).await;
    let r = joined(plain).await;
    assert!(
        matches!(r.status.as_u16(), 404 | 416),
        "a plain long-poll ended with {}",
        r.status
    );
    let r = joined(guarded).await;
    assert!(
        matches!(r.status.as_u16(), 404 | 412),
        "a guarded long-poll ended with {}",
        r.status
    );
}

#[tokio::test]
async fn a_recreate_after_expiry_ends_a_waiting_long_poll_with_416_or_412_with_the_header() {
    // The spec's rule: with the header a long-poll ends with 404 or 412; without it, usually 416.
    // An expired stream recreated in place: no delete, so no moment without a stream.
    let s = Server::new().await;
    let soon = ursula::runtime::now_ms() + 250;
    let expires = ursula_protocol::lifetime::format_expires_at(soon);
    let r = s
        .put("/demo/s")
        .header("stream-expires-at", &expires)
        .expect(201)
        .await;
    let inc = r.header("stream-incarnation").expect("token").to_owned();
    s.append("/demo/s", OCTET, "abc").await;
    let uri = |o: u64| format!("/demo/s?offset={}&live=long-poll&timeout_ms=20000", off(o));
    let plain = spawn_send(s.get(&uri(3)));
    let guarded = spawn_send(s.get(&uri(3)).header("stream-incarnation", &inc));
    wait_for_live_readers(&s, 2).await;
    let deadline = Instant::now() + SOON;
    let new = loop {
        let r = s.put("/demo/s").ctype(OCTET).body("x").send().await;
        if r.status.as_u16() == 201 {
            break r.header("stream-incarnation").expect("token").to_owned();
        }
        assert!(Instant::now() < deadline, "the stream did not expire");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_ne!(new, inc);
    let r = joined(plain).await.refused(416);
    r.expect_header("stream-next-offset", &off(1));
    joined(guarded)
        .await
        .refused(412)
        .expect_header("stream-incarnation", &new);
}

#[tokio::test]
async fn a_live_cursor_moves_past_the_clients_cursor() {
    let s = Server::with_stream("/demo/s", OCTET, "x").await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let current = ursula_protocol::cursor::current_interval(now_ms);
    for client in [current, current + 500] {
        let r = s
            .get(&format!("/demo/s?offset=-1&live=long-poll&cursor={client}"))
            .expect(200)
            .await;
        let cursor = cursor_of(&r);
        assert!(
            cursor > client,
            "cursor {cursor} is not past the client's {client}"
        );
    }
    // An old or junk client cursor gets the current interval.
    let r = s
        .get("/demo/s?offset=-1&live=long-poll&cursor=junk")
        .expect(200)
        .await;
    let cursor = cursor_of(&r);
    assert!(cursor >= current && cursor <= current + 1);
}

#[tokio::test]
async fn timeout_ms_is_clamped_up_to_1_and_an_unparseable_one_means_the_default() {
    let s = Server::with_state(crate::harness::router::config(), |st| {
        st.long_poll_default_ms = 30
    })
    .await;
    s.create("/demo/s", OCTET).await;
    for q in [
        "timeout_ms=0",
        "timeout_ms=abc",
        "timeout_ms=-5",
        "timeout_ms=",
    ] {
        let started = Instant::now();
        s.get(&format!("/demo/s?offset=now&live=long-poll&{q}"))
            .expect(204)
            .await;
        assert!(started.elapsed() < SOON, "{q}");
    }
}

#[tokio::test]
async fn the_live_reader_cap_answers_503_with_retry_after_and_no_marker() {
    let mut c = crate::harness::router::config();
    c.core_count = 1;
    c.live_read_max_waiters_per_core = 1;
    let s = Server::with_config(c).await;
    s.create("/demo/s", OCTET).await;
    let waiting = spawn_send(s.get("/demo/s?offset=now&live=long-poll&timeout_ms=20000"));
    wait_for_live_readers(&s, 1).await;
    for q in ["offset=now&live=long-poll", "offset=now&live=sse"] {
        let r = s.get(&format!("/demo/s?{q}")).refused(503).await;
        r.expect_header("retry-after", "1")
            .expect_no_header("x-ursula-not-applied");
    }
    // Catch-up reads do not count against the cap.
    s.get("/demo/s?offset=-1").expect(200).await;
    s.append("/demo/s", OCTET, "x").await;
    joined(waiting).await.expect(200);
    // The slot is free again.
    s.get("/demo/s?offset=now&live=long-poll&timeout_ms=1")
        .expect(204)
        .await;
}

// ---------------------------------------------------------------------------------------------
// SSE

#[derive(Debug, Clone, PartialEq)]
struct Event {
    kind: String,
    /// The `data:` lines, each with the one leading space a client strips removed.
    data: Vec<String>,
}

impl Event {
    /// The payload a client following the HTML standard hands the application: the `data:`
    /// values joined by LF (each line's LF, less the last).
    fn payload(&self) -> String {
        self.data.join("\n")
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.data.join("\n"))
            .unwrap_or_else(|e| panic!("{self:?} is not JSON: {e}"))
    }
}

/// A header of an SSE response, if it is visible ASCII.
fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

/// An SSE response body read incrementally.
struct Sse {
    body: Body,
    buf: String,
    ended: bool,
}

impl Sse {
    async fn open(s: &Server, uri: &str) -> (Parts, Sse) {
        Sse::open_req(s.get(uri)).await
    }

    /// Sends `req`, a live SSE read, and reads its body as it comes.
    async fn open_req(req: Req) -> (Parts, Sse) {
        let (parts, body) = req.send_streaming().await.into_parts();
        (
            parts,
            Sse {
                body,
                buf: String::new(),
                ended: false,
            },
        )
    }

    /// The next event, or `None` once the body has ended. Fails if nothing comes within `SOON`.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut ev = Event {
                    kind: "message".into(),
                    data: Vec::new(),
                };
                for line in block.lines().filter(|l| !l.is_empty()) {
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match field {
                        "event" => ev.kind = value.to_owned(),
                        "data" => ev.data.push(value.to_owned()),
                        other => panic!("unexpected SSE field {other:?} in {block:?}"),
                    }
                }
                return Some(ev);
            }
            if self.ended {
                assert!(
                    self.buf.is_empty(),
                    "the body ended inside an event: {:?}",
                    self.buf
                );
                return None;
            }
            match tokio::time::timeout(SOON, self.body.frame())
                .await
                .expect("an SSE event arrives in time")
            {
                None => self.ended = true,
                Some(frame) => {
                    let frame = frame.expect("the SSE body does not fail");
                    if let Ok(data) = frame.into_data() {
                        self.buf
                            .push_str(std::str::from_utf8(&data).expect("SSE is UTF-8"));
                    }
                }
            }
        }
    }

    async fn expect_event(&mut self, kind: &str) -> Event {
        let ev = self
            .next()
            .await
            .unwrap_or_else(|| panic!("the SSE body ended before an {kind} event"));
        assert_eq!(ev.kind, kind, "{ev:?}");
        ev
    }

    async fn expect_control(&mut self) -> Value {
        self.expect_event("control").await.json()
    }

    /// Expects a control event that says the reader is up to date at the byte offset `tail`.
    async fn expect_up_to_date_at(&mut self, tail: u64) -> Value {
        let c = self.expect_control().await;
        assert_eq!(c["streamNextOffset"], off(tail), "{c}");
        assert_eq!(c["upToDate"], true, "{c}");
        c
    }

    /// Asserts that nothing arrives for a short while.
    async fn expect_quiet(&mut self) {
        assert!(self.buf.is_empty(), "unread SSE bytes: {:?}", self.buf);
        let got = tokio::time::timeout(Duration::from_millis(100), self.body.frame()).await;
        assert!(got.is_err(), "expected no SSE event, got {got:?}");
    }

    async fn expect_end(&mut self) {
        assert_eq!(self.next().await, None, "the SSE body should have ended");
    }
}

#[tokio::test]
async fn sse_on_a_text_stream_sends_headers_data_then_control_and_then_live_appends() {
    let s = Server::new().await;
    let inc = s.create("/demo/s", TEXT).await.incarnation();
    s.append("/demo/s", TEXT, "hello").await;
    let (parts, mut sse) = Sse::open(&s, "/demo/s?offset=-1&live=sse").await;
    assert_eq!(parts.status, 200);
    let h = |n: &str| header(&parts, n);
    assert_eq!(h("content-type"), Some("text/event-stream"));
    assert_eq!(h("stream-data-content-type"), Some(TEXT));
    assert_eq!(h("stream-incarnation"), Some(inc.as_str()));
    assert!(h("cache-control").is_some_and(|c| c.contains("no-cache")));
    assert_eq!(h("stream-sse-data-encoding"), None);
    assert_eq!(sse.expect_event("data").await.data, vec!["hello"]);
    let c = sse.expect_up_to_date_at(5).await;
    assert!(c["streamCursor"].is_string());
    assert!(c.get("streamClosed").is_none());
    sse.expect_quiet().await;
    s.append("/demo/s", TEXT, " world").await;
    assert_eq!(sse.expect_event("data").await.data, vec![" world"]);
    assert_eq!(sse.expect_control().await["streamNextOffset"], off(11));
}

#[tokio::test]
async fn sse_on_an_empty_stream_sends_a_control_event_at_once() {
    let s = Server::with_stream("/demo/s", TEXT, "").await;
    let (_, mut sse) = Sse::open(&s, "/demo/s?offset=-1&live=sse").await;
    sse.expect_up_to_date_at(0).await;
    sse.expect_quiet().await;
}

#[tokio::test]
async fn sse_at_now_sends_no_history() {
    let s = Server::with_stream("/demo/s", TEXT, "old").await;
    let (_, mut sse) = Sse::open(&s, "/demo/s?offset=now&live=sse").await;
    sse.expect_up_to_date_at(3).await;
    s.append("/demo/s", TEXT, "new").await;
    assert_eq!(sse.expect_event("data").await.data, vec!["new"]);
}

#[tokio::test]
async fn sse_on_a_binary_stream_sends_base64() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let bytes: Vec<u8> = vec![0, 1, 2, 0xff, b'\n', b'\r', 0x80];
    s.append("/demo/s", OCTET, bytes.clone()).await;
    let (parts, mut sse) = Sse::open(&s, "/demo/s?offset=-1&live=sse").await;
    assert_eq!(header(&parts, "stream-sse-data-encoding"), Some("base64"));
    assert_eq!(header(&parts, "stream-data-content-type"), Some(OCTET));
    let data = sse.expect_event("data").await.data.concat();
    assert_eq!(data.len() % 4, 0);
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("valid base64"),
        bytes
    );
    assert_eq!(sse.expect_control().await["streamNextOffset"], off(7));
}

#[tokio::test]
async fn sse_on_a_json_stream_sends_each_record_with_its_line_feed() {
    let s = Server::with_stream("/demo/s", JSON, r#"[{"a":1},{"b":"x\ny"}]"#).await;
    let (parts, mut sse) = Sse::open(&s, "/demo/s?offset=-1&live=sse").await;
    assert_eq!(
        header(&parts, "stream-data-content-type"),
        Some("application/x-ndjson")
    );
    assert!(parts.headers.get("stream-sse-data-encoding").is_none());
    let ev = sse.expect_event("data").await;
    assert_eq!(ev.data, vec![r#"{"a":1}"#, r#"{"b":"x\ny"}"#, ""]);
    // Exactly the NDJSON bytes the event covers, the last record's line feed included.
    assert_eq!(ev.payload(), "{\"a\":1}\n{\"b\":\"x\\ny\"}\n");
    assert_eq!(sse.expect_control().await["streamNextOffset"], off(21));
}

#[tokio::test]
async fn a_live_json_tail_delivers_each_append_as_whole_records_ending_in_a_line_feed() {
    // The browser's rule in the spec: buffer until a newline, then parse. Without the last
    // record's LF a live tail would glue the next append's first record onto it.
    let s = Server::with_stream("/demo/s", JSON, "").await;
    let (_, mut sse) = Sse::open(&s, "/demo/s?offset=now&live=sse").await;
    sse.expect_control().await;
    s.append("/demo/s", JSON, r#"{"msg":"hello"}"#).await;
    assert_eq!(
        sse.expect_event("data").await.payload(),
        "{\"msg\":\"hello\"}\n"
    );
    sse.expect_control().await;
    s.append("/demo/s", JSON, r#"[{"msg":"world"},{"n":2}]"#)
        .await;
    assert_eq!(
        sse.expect_event("data").await.payload(),
        "{\"msg\":\"world\"}\n{\"n\":2}\n"
    );
}

#[tokio::test]
async fn sse_on_a_text_stream_keeps_every_line_feed_the_writer_sent() {
    let s = Server::with_stream("/demo/s", TEXT, "one\ntwo\n").await;
    let (_, mut sse) = Sse::open(&s, "/demo/s?offset=-1&live=sse").await;
    assert_eq!(sse.expect_event("data").await.payload(), "one\ntwo\n");
    sse.expect_control().await;
    s.append("/demo/s", TEXT, "\n\nthree").await;
    assert_eq!(sse.expect_event("data").await.payload(), "\n\nthree");
}

#[tokio::test]
async fn sse_text_line_breaks_cannot_inject_sse_fields() {
    let s = Server::with_stream("/demo/s", TEXT, "").await;
    s.append("/demo/s", TEXT, "a\r\nevent: control\rdata: x\n\nb")
        .await;
    let (_, mut sse) = Sse::open(&s, "/demo/s?offset=-1&live=sse").await;
    let ev = sse.expect_event("data").await;
    assert_eq!(ev.data, vec!["a", "event: control", "data: x", "", "b"]);
    sse.expect_control().await;
}

#[tokio::test]
async fn sse_data_events_respect_max_bytes_and_never_split_a_utf8_character() {
    let s = Server::with_stream("/demo/s", TEXT, "").await;
    s.append("/demo/s", TEXT, "ab\u{20ac}cd").await; // the euro sign is 3 bytes
    let (_, mut sse) = Sse::open(&s, "/demo/s?offset=-1&live=sse&max_bytes=4").await;
    let mut text = String::new();
    let mut offsets = Vec::new();
    loop {
        let ev = sse.expect_event("data").await;
        let joined = ev.data.join("\n");
        assert!(joined.len() <= 4, "{joined:?} is over max_bytes");
        text.push_str(&joined);
        let c = sse.expect_control().await;
        offsets.push(c["streamNextOffset"].as_str().expect("offset").to_owned());
        if c.get("upToDate").is_some() {
            break;
        }
    }
    assert_eq!(text, "ab\u{20ac}cd");
    assert_eq!(
        offsets.first().map(String::as_str),
        Some(off(2).as_str()),
        "the first batch stops before the euro sign"
    );
    assert_eq!(offsets.last().map(String::as_str), Some(off(7).as_str()));
}

#[tokio::test]
async fn sse_on_a_closed_stream_at_its_tail_sends_one_closing_control_and_ends() {
    let s = Server::with_stream("/demo/s", TEXT, "").await;
    s.close_with("/demo/s", TEXT, "fin").await;
    let (_, mut sse) = Sse::open(&s, &format!("/demo/s?offset={}&live=sse", off(3))).await;
    let c = sse.expect_control().await;
    assert_eq!(c["streamClosed"], true);
    assert_eq!(c["upToDate"], true);
    assert_eq!(c["streamNextOffset"], off(3));
    assert!(c.get("streamCursor").is_none());
    sse.expect_end().await;
}

#[tokio::test]
async fn closing_the_stream_ends_an_open_sse_read_after_the_final_data() {
    let s = Server::with_stream("/demo/s", TEXT, "").await;
    let (_, mut sse) = Sse::open(&s, "/demo/s?offset=-1&live=sse").await;
    sse.expect_control().await;
    s.close_with("/demo/s", TEXT, "last").await;
    assert_eq!(sse.expect_event("data").await.data, vec!["last"]);
    let c = sse.expect_control().await;
    assert_eq!(c["streamClosed"], true);
    assert_eq!(c["streamNextOffset"], off(4));
    sse.expect_end().await;
}

#[tokio::test]
async fn sse_past_the_tail_reports_an_error_event_not_a_status() {
    let s = Server::with_stream("/demo/s", TEXT, "").await;
    let (parts, mut sse) = Sse::open(&s, &format!("/demo/s?offset={}&live=sse", off(9))).await;
    assert_eq!(parts.status, 200);
    let e = sse.expect_event("error").await.json();
    assert_eq!(e["status"], 416);
    assert_eq!(e["streamNextOffset"], off(0));
    sse.expect_end().await;
}

#[tokio::test]
async fn deleting_the_stream_ends_an_sse_read_with_an_error_event() {
    let s = Server::new().await;
    let inc = s.create("/demo/s", TEXT).await.incarnation();
    let (_, mut sse) = Sse::open_req(
        s.get("/demo/s?offset=-1&live=sse")
            .header("stream-incarnation", &inc),
    )
    .await;
    sse.expect_control().await;
    s.delete("/demo/s").expect(204).await;
    let e = sse.expect_event("error").await.json();
    assert_eq!(e["status"], 404);
    sse.expect_end().await;
}

#[tokio::test]
async fn sse_refusals_before_the_stream_opens_are_statuses() {
    let s = Server::new().await;
    s.get("/demo/missing?offset=-1&live=sse").refused(404).await;
    s.create("/demo/s", TEXT).await;
    for (offset, incarnation, status) in [
        ("-1", Some("0000000000000001"), 412),
        ("-1", Some("zzz"), 400),
        ("bad", None, 400),
    ] {
        let req = s.get(&format!("/demo/s?offset={offset}&live=sse"));
        match incarnation {
            Some(token) => req.header("stream-incarnation", token),
            None => req,
        }
        .refused(status)
        .await;
    }
}

#[tokio::test]
async fn sse_on_a_json_stream_prefers_to_end_an_event_at_a_complete_record() {
    // The spec: NDJSON SSE payloads SHOULD end at the last complete record when there is one.
    let s = Server::with_stream("/demo/s", JSON, "").await;
    s.append(
        "/demo/s",
        JSON,
        r#"[{"a":1},{"b":2},{"long":"0123456789"}]"#,
    )
    .await;
    let (_, mut sse) = Sse::open(&s, "/demo/s?offset=-1&live=sse&max_bytes=12").await;
    assert_eq!(sse.expect_event("data").await.payload(), "{\"a\":1}\n");
    assert_eq!(sse.expect_control().await["streamNextOffset"], off(8));
    assert_eq!(sse.expect_event("data").await.payload(), "{\"b\":2}\n");
    assert_eq!(sse.expect_control().await["streamNextOffset"], off(16));
    // A record longer than the window still makes progress, in pieces: the events before its
    // end carry no line feed, and the next one continues the record.
    let mut pieces = Vec::new();
    loop {
        pieces.push(sse.expect_event("data").await.payload());
        if sse.expect_control().await.get("upToDate").is_some() {
            break;
        }
    }
    assert!(pieces.len() > 1, "{pieces:?}");
    for p in &pieces[..pieces.len() - 1] {
        assert!(
            !p.contains('\n'),
            "a piece ends the record early: {pieces:?}"
        );
    }
    assert_eq!(pieces.concat(), "{\"long\":\"0123456789\"}\n");
}

#[tokio::test]
async fn sse_data_events_are_capped_at_8_mib() {
    const CAP: usize = 8 * 1024 * 1024;
    let s = Server::with_stream("/demo/s", TEXT, "a".repeat(CAP + 10)).await;
    let (_, mut sse) = Sse::open(&s, "/demo/s?offset=-1&live=sse&max_bytes=99999999").await;
    assert_eq!(sse.expect_event("data").await.data.concat().len(), CAP);
    let c = sse.expect_control().await;
    assert_eq!(c["streamNextOffset"], off(CAP as u64));
    assert!(c.get("upToDate").is_none());
    assert_eq!(sse.expect_event("data").await.data.concat().len(), 10);
    assert_eq!(sse.expect_control().await["upToDate"], true);
}
