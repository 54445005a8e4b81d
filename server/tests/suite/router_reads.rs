//! `Stream-Seq`, `Stream-Incarnation`, catch-up reads, HEAD and DELETE, request bodies and TTL
//! renewal, in-process against the router. Line refs are to the spec dump
//! (`000_4b3aba8c7a20e2ce.txt`); rule IDs to the checklist in `protocol.md`.

use crate::harness::router::Req;
use crate::harness::router::Server;
use crate::harness::router::off;
use axum::http::Method;

const OCTET: &str = "application/octet-stream";
const JSON: &str = "application/json";

/// An append of `body` to `/demo/s` carrying `Stream-Seq: v`, not yet sent.
fn seq(s: &Server, v: &str, body: impl Into<bytes::Bytes>) -> Req {
    s.append_with("/demo/s", OCTET, &[("stream-seq", v)], body)
}

// ---------------------------------------------------------------------------------------------
// Stream-Seq (SQ-*)

#[tokio::test]
async fn stream_seq_must_be_bytewise_greater_and_a_conflict_carries_only_the_tail() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let bracketed = |v: &str| seq(&s, v, format!("[{v}]"));
    bracketed("").expect(204).await; // anything beats nothing stored (AMB-21)
    bracketed("9").expect(204).await;
    let r = bracketed("10").refused(409).await; // "10" < "9" bytewise
    r.expect_header("stream-next-offset", &off(5));
    r.expect_no_header("stream-closed")
        .expect_no_header("producer-expected-seq");
    bracketed("9").refused(409).await;
    bracketed("90").expect(204).await;
    // No header: not checked, and the stored value stays.
    s.append("/demo/s", OCTET, "-").await;
    bracketed("9").refused(409).await;
    bracketed("91").expect(204).await;
    assert_eq!(s.read_all("/demo/s").await, b"[][9][90]-[91]");
}

#[tokio::test]
async fn a_non_printable_stream_seq_is_ignored_and_not_stored() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    seq(&s, "m", "a").expect(204).await;
    for v in [&b"a\xff"[..], b"\x80", b"z\tz"] {
        s.post("/demo/s")
            .ctype(OCTET)
            .header_bytes("stream-seq", v)
            .body("b")
            .expect(204)
            .await;
    }
    // "n" beats "m": nothing from the ignored values was stored.
    seq(&s, "n", "c").expect(204).await;
    assert_eq!(s.read_all("/demo/s").await, b"abbbc");
}

#[tokio::test]
async fn a_stream_seq_over_256_bytes_answers_400_on_every_write_path() {
    let s = Server::new().await;
    let long = "a".repeat(257);
    s.put("/demo/s")
        .header("stream-seq", &long)
        .refused_with(400, "stream-seq")
        .await;
    s.head("/demo/s").expect(404).await;
    s.create("/demo/s", OCTET).await;
    seq(&s, &long, "x").refused_with(400, "stream-seq").await;
    seq(&s, &long[..256], "x").expect(204).await;
    let twice = [("stream-seq", "b"), ("stream-seq", "c")];
    s.append_with("/demo/s", OCTET, &twice, "x")
        .refused(400)
        .await;
    assert_eq!(s.read_all("/demo/s").await, b"x");
}

#[tokio::test]
async fn a_creating_put_seeds_stream_seq_without_checking_it() {
    let s = Server::new().await;
    s.put("/demo/s").header("stream-seq", "5").expect(201).await;
    for (v, status) in [("4", 409), ("5", 409), ("6", 204)] {
        seq(&s, v, "x").answers(status).await;
    }
}

#[tokio::test]
async fn a_stream_seq_conflict_on_a_closed_stream_is_reported_as_closed() {
    let s = Server::new().await;
    s.put("/demo/s").header("stream-seq", "5").expect(201).await;
    s.close("/demo/s").await;
    let r = seq(&s, "1", "x").refused(409).await;
    r.expect_header("stream-closed", "true");
}

// ---------------------------------------------------------------------------------------------
// Stream-Incarnation (INC-*)

#[tokio::test]
async fn every_success_but_delete_carries_the_same_incarnation() {
    let s = Server::new().await;
    let inc = s.create("/demo/s", OCTET).await.incarnation();
    let mut seen = vec![
        s.append("/demo/s", OCTET, "x").await,
        s.get("/demo/s?offset=-1").expect(200).await,
        s.get("/demo/s?offset=now").expect(200).await,
        s.head("/demo/s").expect(200).await,
        s.put("/demo/s").expect(200).await,
        s.get("/demo/s/bootstrap").expect(200).await,
        s.put(&format!("/demo/s/snapshot/{}", off(1)))
            .body("snap")
            .expect(204)
            .await,
        s.get(&format!("/demo/s/snapshot/{}", off(1)))
            .expect(200)
            .await,
        s.put(&format!("/demo/s/retention/{}", off(1)))
            .expect(204)
            .await,
    ];
    seen.push(
        s.get(&format!(
            "/demo/s?offset={}&live=long-poll&timeout_ms=1",
            off(1)
        ))
        .expect(204)
        .await,
    );
    for r in &seen {
        assert_eq!(
            r.header("stream-incarnation"),
            Some(inc.as_str()),
            "{}",
            r.what
        );
    }
    s.delete("/demo/s")
        .expect(204)
        .await
        .expect_no_header("stream-incarnation");
}

#[tokio::test]
async fn a_stale_incarnation_answers_412_with_the_current_token_and_applies_nothing() {
    let s = Server::new().await;
    let old = s.create("/demo/s", OCTET).await.incarnation();
    s.append("/demo/s", OCTET, "old").await;
    s.delete("/demo/s").expect(204).await;
    let cur = s.create("/demo/s", OCTET).await.incarnation();
    assert_ne!(old, cur, "a recreated stream gets a new incarnation");
    s.append("/demo/s", OCTET, "new").await;
    let with = |r: Req| r.header("stream-incarnation", &old);
    let refusals = vec![
        with(s.post("/demo/s").ctype(OCTET)).body("x").send().await,
        with(s.post("/demo/s"))
            .header("stream-closed", "true")
            .send()
            .await,
        with(s.get("/demo/s?offset=-1")).send().await,
        with(s.get("/demo/s?offset=-1&live=long-poll")).send().await,
        with(s.head("/demo/s")).send().await,
        with(s.put("/demo/s")).send().await,
        with(s.delete("/demo/s")).send().await,
        with(s.get("/demo/s/bootstrap")).send().await,
        with(s.put(&format!("/demo/s/snapshot/{}", off(3))))
            .body("x")
            .send()
            .await,
        with(s.put(&format!("/demo/s/retention/{}", off(0))))
            .send()
            .await,
    ];
    for r in refusals {
        let r = r.expect(412);
        r.expect_header("stream-incarnation", &cur);
    }
    // Nothing was applied: not appended, not closed, not deleted, no snapshot.
    assert_eq!(s.read_all("/demo/s").await, b"new");
    let h = s.head("/demo/s").expect(200).await;
    h.expect_no_header("stream-closed")
        .expect_no_header("stream-snapshot-offset");
    // The current token passes.
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-incarnation", &cur)
        .body("!")
        .expect(204)
        .await;
}

#[tokio::test]
async fn a_put_with_an_incarnation_for_a_missing_stream_answers_412_and_creates_nothing() {
    let s = Server::new().await;
    s.put("/demo/s")
        .header("stream-incarnation", "0000000000000001")
        .refused(412)
        .await;
    s.head("/demo/s").expect(404).await;
    let inc = s.create("/demo/s", OCTET).await.incarnation();
    s.put("/demo/s")
        .header("stream-incarnation", &inc)
        .expect(200)
        .await;
    s.put("/demo/s")
        .header("stream-incarnation", &inc)
        .ctype(JSON)
        .refused(409)
        .await;
}

#[tokio::test]
async fn not_found_gone_and_beyond_tail_take_precedence_over_412() {
    let s = Server::new().await;
    let bogus = "00000000000000aa";
    for r in [
        s.get("/demo/none?offset=-1"),
        s.post("/demo/none").ctype(OCTET).body("x"),
        s.head("/demo/none"),
        s.delete("/demo/none"),
    ] {
        r.header("stream-incarnation", bogus).answers(404).await;
    }
    s.create("/demo/s", OCTET).await;
    s.append("/demo/s", OCTET, "abcd").await;
    s.put(&format!("/demo/s/snapshot/{}", off(2)))
        .body("x")
        .expect(204)
        .await;
    s.put(&format!("/demo/s/retention/{}", off(2)))
        .expect(204)
        .await;
    for (offset, status) in [("-1".to_owned(), 410), (off(9), 416), (off(2), 412)] {
        s.get(&format!("/demo/s?offset={offset}"))
            .header("stream-incarnation", bogus)
            .refused(status)
            .await;
    }
}

#[tokio::test]
async fn a_malformed_or_repeated_incarnation_answers_400() {
    let s = Server::new().await;
    let inc = s.create("/demo/s", OCTET).await.incarnation();
    for bad in [
        "",
        "xyz",
        "0000000000000001 ",
        "000000000000000G",
        "00000000000000001",
        "0x00000000000001",
        "000000000000000A",
    ] {
        let r = s.get("/demo/s?offset=-1").header("stream-incarnation", bad);
        // A trailing space is trimmed like any header value; everything else is not a token.
        if bad.trim() == "0000000000000001" {
            r.refused(412).await;
        } else {
            r.refused_with(400, "stream-incarnation").await;
        }
    }
    for r in [
        s.get("/demo/s?offset=-1")
            .header("stream-incarnation", &inc)
            .header("stream-incarnation", &inc),
        s.post("/demo/s")
            .ctype(OCTET)
            .header("stream-incarnation", "nope")
            .body("x"),
        s.delete("/demo/s").header("stream-incarnation", "nope"),
    ] {
        r.refused(400).await;
    }
    s.head("/demo/s").expect(200).await;
}

#[tokio::test]
async fn incarnations_are_unique_across_many_recreations() {
    let s = Server::new().await;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..50 {
        let inc = s.create("/demo/s", OCTET).await.incarnation();
        assert!(
            seen.insert(inc.clone()),
            "incarnation {inc} was issued twice"
        );
        s.delete("/demo/s").expect(204).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Catch-up reads (RD-*, OFF-*, CA-*)

#[tokio::test]
async fn a_catch_up_read_returns_data_up_to_the_tail_with_cache_headers() {
    let s = Server::with_stream("/demo/s", "text/plain", "hello").await;
    for uri in [
        "/demo/s",
        "/demo/s?offset=-1",
        "/demo/s?cursor=5&offset=-1&unknown=1",
    ] {
        let r = s.get(uri).expect(200).await;
        assert_eq!(&r.body[..], b"hello");
        r.expect_header("content-type", "text/plain");
        r.expect_header("stream-next-offset", &off(5))
            .expect_header("stream-up-to-date", "true");
        r.expect_no_header("stream-closed")
            .expect_no_header("stream-cursor");
        assert!(r.header("etag").is_some_and(|t| t.starts_with('"')));
        assert!(
            r.header("cache-control")
                .is_some_and(|c| c.contains("max-age"))
        );
    }
    let r = s.get_at("/demo/s", 2).expect(200).await;
    assert_eq!(&r.body[..], b"llo");
}

#[tokio::test]
async fn a_read_at_the_tail_is_200_empty_and_up_to_date() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    let r = s.get_at("/demo/s", 3).expect(200).await;
    assert!(r.body.is_empty());
    r.expect_header("stream-next-offset", &off(3))
        .expect_header("stream-up-to-date", "true");
}

#[tokio::test]
async fn offset_now_reads_nothing_with_no_store_and_no_etag() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    let r = s.get("/demo/s?offset=now").expect(200).await;
    assert!(r.body.is_empty());
    r.expect_header("stream-next-offset", &off(3))
        .expect_header("stream-up-to-date", "true");
    r.expect_header("cache-control", "no-store")
        .expect_no_header("etag");
    s.close("/demo/s").await;
    s.get("/demo/s?offset=now")
        .expect(200)
        .await
        .expect_header("stream-closed", "true");
}

#[tokio::test]
async fn malformed_offsets_answer_400_and_offsets_past_the_tail_answer_416_with_the_tail() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    // Not an offset token, and tokens of an offset's shape that name none (a letter, 21
    // digits, past `u64`).
    let not_tokens = ["42", "", "-2", "NOW", "%00"];
    let not_offsets = [
        "0000000000000000000a",
        "000000000000000000003",
        "99999999999999999999",
    ];
    for bad in not_tokens.into_iter().chain(not_offsets) {
        s.get(&format!("/demo/s?offset={bad}"))
            .refused_with(400, "offset")
            .await;
    }
    let r = s.get_at("/demo/s", 4).refused(416).await;
    r.expect_header("stream-next-offset", &off(3));
    s.get("/demo/missing?offset=42").refused(400).await;
}

#[tokio::test]
async fn removed_and_invalid_read_parameters_answer_400() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    for q in [
        "record=0",
        "record=now",
        "tail_records=1",
        "max_records=1",
        "record_view=1",
        "live=poll",
        "live=",
        "consistency=strong",
        "consistency=leader&live=sse&offset=-1",
        "consistency=leader&live=long-poll&offset=-1",
        "offset=-1&live=long-poll&record=1",
    ] {
        s.get(&format!("/demo/s?{q}")).refused(400).await;
    }
    s.get("/demo/s?consistency=leader").expect(200).await;
    s.get("/demo/s?consistency=local&offset=-1")
        .expect(200)
        .await;
    // stream-cursor is not an alias for cursor, and unknown parameters are ignored.
    s.get("/demo/s?stream-cursor=x&offset=-1")
        .expect(200)
        .await
        .expect_no_header("stream-cursor");
}

#[tokio::test]
async fn max_bytes_cuts_a_read_short_without_up_to_date_even_inside_a_json_message() {
    let s = Server::with_stream("/demo/j", JSON, r#"[{"a":1},{"b":2}]"#).await;
    let r = s.get("/demo/j?offset=-1&max_bytes=5").expect(200).await;
    assert_eq!(&r.body[..], b"{\"a\":");
    r.expect_header("stream-next-offset", &off(5))
        .expect_no_header("stream-up-to-date");
    // The mid-message offset is a valid read position.
    let r = s.get_at("/demo/j", 5).expect(200).await;
    assert_eq!(&r.body[..], b"1}\n{\"b\":2}\n");
    // Zero is raised to one byte; a value that is not an integer is ignored.
    let r = s.get("/demo/j?offset=-1&max_bytes=0").expect(200).await;
    assert_eq!(r.body.len(), 1);
    for ignored in ["abc", "-1", "1.5", "99999999999999999999999"] {
        let r = s
            .get(&format!("/demo/j?offset=-1&max_bytes={ignored}"))
            .expect(200)
            .await;
        assert_eq!(r.body.len(), 16, "max_bytes={ignored}");
    }
}

#[tokio::test]
async fn a_read_response_is_capped_at_8_mib() {
    const CAP: usize = 8 * 1024 * 1024;
    let s = Server::with_stream("/demo/big", OCTET, "").await;
    let body: Vec<u8> = (0..CAP + 1000).map(|i| (i % 251) as u8).collect();
    s.append("/demo/big", OCTET, body.clone()).await;
    for uri in [
        "/demo/big?offset=-1",
        "/demo/big?offset=-1&max_bytes=20000000",
    ] {
        let r = s.get(uri).expect(200).await;
        assert_eq!(r.body.len(), CAP);
        r.expect_header("stream-next-offset", &off(CAP as u64))
            .expect_no_header("stream-up-to-date");
    }
    assert_eq!(s.read_all("/demo/big").await, body);
}

#[tokio::test]
async fn the_etag_changes_with_new_data_and_with_a_close_and_if_none_match_answers_304() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    let first = s.get("/demo/s?offset=-1").expect(200).await;
    let tag = first.header("etag").expect("etag").to_owned();
    let read_if = |none_match: &str| {
        s.get("/demo/s?offset=-1")
            .header("if-none-match", none_match)
    };
    let r = read_if(&tag).expect(304).await;
    assert!(r.body.is_empty());
    read_if("\"other\", *").expect(304).await;
    read_if("\"other\"").expect(200).await;
    s.close("/demo/s").await;
    let closed = s.get("/demo/s?offset=-1").expect(200).await;
    assert_ne!(
        closed.header("etag"),
        Some(tag.as_str()),
        "closing must change the ETag"
    );
    read_if(&tag).expect(200).await;
}

// ---------------------------------------------------------------------------------------------
// HEAD and DELETE (HD-*, DL-*)

#[tokio::test]
async fn head_reports_metadata_with_no_store_and_no_etag_or_body() {
    let s = Server::with_stream("/demo/s", JSON, "[1,2]").await;
    let r = s.head("/demo/s").expect(200).await;
    r.expect_header("content-type", JSON)
        .expect_header("stream-next-offset", &off(4));
    r.expect_header("stream-retained-offset", &off(0))
        .expect_header("cache-control", "no-store");
    r.expect_no_header("etag")
        .expect_no_header("stream-closed")
        .expect_no_header("stream-snapshot-offset");
    r.expect_no_header("stream-snapshot-digest")
        .expect_no_header("stream-ttl");
    assert!(r.body.is_empty());
    s.head("/demo/missing").expect(404).await;
}

#[tokio::test]
async fn delete_answers_204_then_404_and_a_recreate_starts_fresh() {
    let s = Server::new().await;
    s.put("/demo/s").header("stream-seq", "5").expect(201).await;
    let p = |seq: u64, body: &'static str| {
        s.post("/demo/s")
            .ctype(OCTET)
            .producer("p", 3, seq)
            .body(body)
    };
    p(0, "old").expect(200).await;
    let r = s.delete("/demo/s").expect(204).await;
    assert!(r.body.is_empty());
    for r in [
        s.delete("/demo/s"),
        s.get("/demo/s?offset=-1"),
        s.head("/demo/s"),
    ] {
        r.answers(404).await;
    }
    s.create("/demo/s", OCTET)
        .await
        .expect_header("stream-next-offset", &off(0));
    // No Stream-Seq and no producer state survive.
    seq(&s, "1", "a").expect(204).await;
    p(0, "b").expect(200).await;
    p(5, "c").refused(409).await;
    assert_eq!(s.read_all("/demo/s").await, b"ab");
}

// ---------------------------------------------------------------------------------------------
// Request bodies (AP-9, RF-2)

#[tokio::test]
async fn a_declared_body_over_32_mib_answers_413_marked_request_body_too_large() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    for (m, path) in [(Method::POST, "/demo/s"), (Method::PUT, "/demo/t")] {
        let r = s
            .req(m, path)
            .ctype(OCTET)
            .header("content-length", "33554433")
            .body("x")
            .refused(413)
            .await;
        r.expect_header("x-ursula-not-applied", "RequestBodyTooLarge");
        r.expect_no_header("x-ursula-not-applied-checked");
        let body: serde_json::Value =
            serde_json::from_slice(&r.body).expect("the marked 413 body is JSON");
        assert_eq!(body["error"], "RequestBodyTooLarge");
    }
    s.head("/demo/t").expect(404).await;
    assert_eq!(s.tail("/demo/s").await, off(0));
}

#[tokio::test]
async fn an_undeclared_body_over_32_mib_answers_413_and_stores_nothing() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let chunk = bytes::Bytes::from(vec![b'x'; 1 << 20]);
    let chunks = (0..33).map(move |_| Ok::<_, std::io::Error>(chunk.clone()));
    let body = axum::body::Body::from_stream(futures_util::stream::iter(chunks));
    s.post("/demo/s")
        .ctype(OCTET)
        .raw_body(body)
        .refused(413)
        .await;
    assert_eq!(s.tail("/demo/s").await, off(0));
    // Exactly 32 MiB is accepted.
    s.append("/demo/s", OCTET, vec![b'y'; 32 << 20]).await;
    assert_eq!(s.tail("/demo/s").await, off(32 << 20));
}

#[tokio::test]
async fn a_body_that_fails_midway_answers_400_and_stores_nothing() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let parts = vec![
        Ok(bytes::Bytes::from_static(b"half")),
        Err(std::io::Error::other("connection reset")),
    ];
    let body = axum::body::Body::from_stream(futures_util::stream::iter(parts));
    s.post("/demo/s")
        .ctype(OCTET)
        .raw_body(body)
        .refused_with(400, "body")
        .await;
    assert_eq!(s.tail("/demo/s").await, off(0));
}

// ---------------------------------------------------------------------------------------------
// TTL renewal through the HTTP layer (TTL-3). The arithmetic is tested on the state machine with
// fake clocks (src/stream/tests.rs); this checks which requests ask for a renewal at all.

async fn expires_ms(s: &Server, key: &str) -> Option<u64> {
    let key = key.to_owned();
    let group = s.state.rt.group_of(&key);
    s.state
        .rt
        .with_group(group, move |g| {
            g.state.expires_ms(&key, ursula::runtime::now_ms())
        })
        .await
        .expect("the group's core answers")
}

/// Waits up to `wait_ms` until the expiry differs from `from`, and returns it.
async fn expiry_change(s: &Server, key: &str, from: u64, wait_ms: u64) -> Option<u64> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(wait_ms);
    loop {
        let now = expires_ms(s, key).await;
        if now != Some(from) || std::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn head_never_renews_a_sliding_ttl_but_a_read_after_a_quarter_of_it_does() {
    let s = Server::new().await;
    s.put("/demo/s").header("stream-ttl", "2").expect(201).await;
    let created = expires_ms(&s, "demo/s").await.expect("the stream is alive");
    // Past a quarter of the 2 s TTL, when a read renews: the timer under test.
    tokio::time::sleep(std::time::Duration::from_millis(550)).await;
    for _ in 0..3 {
        s.head("/demo/s").expect(200).await;
    }
    assert_eq!(
        expiry_change(&s, "demo/s", created, 150).await,
        Some(created),
        "HEAD renewed the TTL"
    );
    s.get("/demo/s?offset=-1").expect(200).await;
    let renewed = expiry_change(&s, "demo/s", created, 2000)
        .await
        .expect("alive");
    assert!(
        renewed >= created + 500,
        "a read past a quarter of the TTL renews it: {created} -> {renewed}"
    );
    // Within the next quarter, reads do not renew again.
    s.get("/demo/s?offset=-1").expect(200).await;
    s.get("/demo/s/bootstrap").expect(200).await;
    assert_eq!(
        expiry_change(&s, "demo/s", renewed, 150).await,
        Some(renewed)
    );
    // An append always renews; its duplicate does not.
    let p = || s.post("/demo/s").ctype(OCTET).producer("p", 0, 0).body("x");
    // The clock moves on, so a renewal shows as a later expiry.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    p().expect(200).await;
    let appended = expires_ms(&s, "demo/s").await.expect("alive");
    assert!(appended > renewed);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    p().expect(204).await;
    assert_eq!(expires_ms(&s, "demo/s").await, Some(appended));
}

#[tokio::test]
async fn a_partial_read_of_a_closed_stream_does_not_claim_closed() {
    let s = Server::new().await;
    s.put("/demo/s")
        .header("stream-closed", "true")
        .body("abc")
        .expect(201)
        .await;
    let r = s.get("/demo/s?offset=-1&max_bytes=2").expect(200).await;
    assert_eq!(&r.body[..], b"ab");
    r.expect_no_header("stream-closed")
        .expect_no_header("stream-up-to-date");
    let r = s.get_at("/demo/s", 2).expect(200).await;
    r.expect_header("stream-closed", "true")
        .expect_header("stream-up-to-date", "true");
}
