//! `Stream-Seq`, `Stream-Incarnation`, catch-up reads, HEAD and DELETE, request bodies and TTL
//! renewal, in-process against the router. Line refs are to the spec dump
//! (`000_4b3aba8c7a20e2ce.txt`); rule IDs to the checklist in `protocol.md`.

use crate::harness::router::Server;
use crate::harness::router::off;
use axum::http::Method;

const OCTET: &str = "application/octet-stream";
const JSON: &str = "application/json";

// ---------------------------------------------------------------------------------------------
// Stream-Seq (SQ-*)

#[tokio::test]
async fn stream_seq_must_be_bytewise_greater_and_a_conflict_carries_only_the_tail() {
    let s = Server::new().await;
    s.create("/demo/s", OCTET).await;
    let seq = |v: &str| {
        s.post("/demo/s")
            .ctype(OCTET)
            .header("stream-seq", v)
            .body(format!("[{v}]"))
    };
    seq("").send().await.expect(204); // anything beats nothing stored (AMB-21)
    seq("9").send().await.expect(204);
    let r = seq("10").send().await.refused(409); // "10" < "9" bytewise
    r.expect_header("stream-next-offset", &off(5));
    r.expect_no_header("stream-closed")
        .expect_no_header("producer-expected-seq");
    seq("9").send().await.refused(409);
    seq("90").send().await.expect(204);
    // No header: not checked, and the stored value stays.
    s.append("/demo/s", OCTET, "-").await;
    seq("9").send().await.refused(409);
    seq("91").send().await.expect(204);
    assert_eq!(s.read_all("/demo/s").await, b"[][9][90]-[91]");
}

#[tokio::test]
async fn a_non_printable_stream_seq_is_ignored_and_not_stored() {
    let s = Server::new().await;
    s.create("/demo/s", OCTET).await;
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-seq", "m")
        .body("a")
        .send()
        .await
        .expect(204);
    for v in [&b"a\xff"[..], b"\x80", b"z\tz"] {
        s.post("/demo/s")
            .ctype(OCTET)
            .header_bytes("stream-seq", v)
            .body("b")
            .send()
            .await
            .expect(204);
    }
    // "n" beats "m": nothing from the ignored values was stored.
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-seq", "n")
        .body("c")
        .send()
        .await
        .expect(204);
    assert_eq!(s.read_all("/demo/s").await, b"abbbc");
}

#[tokio::test]
async fn a_stream_seq_over_256_bytes_answers_400_on_every_write_path() {
    let s = Server::new().await;
    let long = "a".repeat(257);
    s.put("/demo/s")
        .header("stream-seq", &long)
        .send()
        .await
        .refused_with(400, "stream-seq");
    s.head("/demo/s").send().await.expect(404);
    s.create("/demo/s", OCTET).await;
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-seq", &long)
        .body("x")
        .send()
        .await
        .refused_with(400, "stream-seq");
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-seq", &long[..256])
        .body("x")
        .send()
        .await
        .expect(204);
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-seq", "b")
        .header("stream-seq", "c")
        .body("x")
        .send()
        .await
        .refused(400);
    assert_eq!(s.read_all("/demo/s").await, b"x");
}

#[tokio::test]
async fn a_creating_put_seeds_stream_seq_without_checking_it() {
    let s = Server::new().await;
    s.put("/demo/s")
        .header("stream-seq", "5")
        .send()
        .await
        .expect(201);
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-seq", "4")
        .body("x")
        .send()
        .await
        .refused(409);
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-seq", "5")
        .body("x")
        .send()
        .await
        .refused(409);
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-seq", "6")
        .body("x")
        .send()
        .await
        .expect(204);
}

#[tokio::test]
async fn a_stream_seq_conflict_on_a_closed_stream_is_reported_as_closed() {
    let s = Server::new().await;
    s.put("/demo/s")
        .header("stream-seq", "5")
        .send()
        .await
        .expect(201);
    s.post("/demo/s")
        .header("stream-closed", "true")
        .send()
        .await
        .expect(204);
    let r = s
        .post("/demo/s")
        .ctype(OCTET)
        .header("stream-seq", "1")
        .body("x")
        .send()
        .await
        .refused(409);
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
        s.get("/demo/s?offset=-1").send().await.expect(200),
        s.get("/demo/s?offset=now").send().await.expect(200),
        s.head("/demo/s").send().await.expect(200),
        s.put("/demo/s").send().await.expect(200),
        s.get("/demo/s/bootstrap").send().await.expect(200),
        s.put(&format!("/demo/s/snapshot/{}", off(1)))
            .body("snap")
            .send()
            .await
            .expect(204),
        s.get(&format!("/demo/s/snapshot/{}", off(1)))
            .send()
            .await
            .expect(200),
        s.put(&format!("/demo/s/retention/{}", off(1)))
            .send()
            .await
            .expect(204),
    ];
    seen.push(
        s.get(&format!(
            "/demo/s?offset={}&live=long-poll&timeout_ms=1",
            off(1)
        ))
        .send()
        .await
        .expect(204),
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
        .send()
        .await
        .expect(204)
        .expect_no_header("stream-incarnation");
}

#[tokio::test]
async fn a_stale_incarnation_answers_412_with_the_current_token_and_applies_nothing() {
    let s = Server::new().await;
    let old = s.create("/demo/s", OCTET).await.incarnation();
    s.append("/demo/s", OCTET, "old").await;
    s.delete("/demo/s").send().await.expect(204);
    let cur = s.create("/demo/s", OCTET).await.incarnation();
    assert_ne!(old, cur, "a recreated stream gets a new incarnation");
    s.append("/demo/s", OCTET, "new").await;
    let with = |r: crate::harness::router::Req| r.header("stream-incarnation", &old);
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
    let h = s.head("/demo/s").send().await.expect(200);
    h.expect_no_header("stream-closed")
        .expect_no_header("stream-snapshot-offset");
    // The current token passes.
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-incarnation", &cur)
        .body("!")
        .send()
        .await
        .expect(204);
}

#[tokio::test]
async fn a_put_with_an_incarnation_for_a_missing_stream_answers_412_and_creates_nothing() {
    let s = Server::new().await;
    s.put("/demo/s")
        .header("stream-incarnation", "0000000000000001")
        .send()
        .await
        .refused(412);
    s.head("/demo/s").send().await.expect(404);
    let inc = s.create("/demo/s", OCTET).await.incarnation();
    s.put("/demo/s")
        .header("stream-incarnation", &inc)
        .send()
        .await
        .expect(200);
    s.put("/demo/s")
        .header("stream-incarnation", &inc)
        .ctype(JSON)
        .send()
        .await
        .refused(409);
}

#[tokio::test]
async fn not_found_gone_and_beyond_tail_take_precedence_over_412() {
    let s = Server::new().await;
    let bogus = "00000000000000aa";
    s.get("/demo/none?offset=-1")
        .header("stream-incarnation", bogus)
        .send()
        .await
        .refused(404);
    s.post("/demo/none")
        .ctype(OCTET)
        .header("stream-incarnation", bogus)
        .body("x")
        .send()
        .await
        .refused(404);
    s.head("/demo/none")
        .header("stream-incarnation", bogus)
        .send()
        .await
        .expect(404);
    s.delete("/demo/none")
        .header("stream-incarnation", bogus)
        .send()
        .await
        .refused(404);
    s.create("/demo/s", OCTET).await;
    s.append("/demo/s", OCTET, "abcd").await;
    s.put(&format!("/demo/s/snapshot/{}", off(2)))
        .body("x")
        .send()
        .await
        .expect(204);
    s.put(&format!("/demo/s/retention/{}", off(2)))
        .send()
        .await
        .expect(204);
    s.get("/demo/s?offset=-1")
        .header("stream-incarnation", bogus)
        .send()
        .await
        .refused(410);
    s.get(&format!("/demo/s?offset={}", off(9)))
        .header("stream-incarnation", bogus)
        .send()
        .await
        .refused(416);
    s.get(&format!("/demo/s?offset={}", off(2)))
        .header("stream-incarnation", bogus)
        .send()
        .await
        .refused(412);
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
            r.send().await.refused(412);
        } else {
            r.send().await.refused_with(400, "stream-incarnation");
        }
    }
    s.get("/demo/s?offset=-1")
        .header("stream-incarnation", &inc)
        .header("stream-incarnation", &inc)
        .send()
        .await
        .refused(400);
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-incarnation", "nope")
        .body("x")
        .send()
        .await
        .refused(400);
    s.delete("/demo/s")
        .header("stream-incarnation", "nope")
        .send()
        .await
        .refused(400);
    s.head("/demo/s").send().await.expect(200);
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
        s.delete("/demo/s").send().await.expect(204);
    }
}

// ---------------------------------------------------------------------------------------------
// Catch-up reads (RD-*, OFF-*, CA-*)

#[tokio::test]
async fn a_catch_up_read_returns_data_up_to_the_tail_with_cache_headers() {
    let s = Server::new().await;
    s.create("/demo/s", "text/plain").await;
    s.append("/demo/s", "text/plain", "hello").await;
    for uri in [
        "/demo/s",
        "/demo/s?offset=-1",
        "/demo/s?cursor=5&offset=-1&unknown=1",
    ] {
        let r = s.get(uri).send().await.expect(200);
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
    let r = s
        .get(&format!("/demo/s?offset={}", off(2)))
        .send()
        .await
        .expect(200);
    assert_eq!(&r.body[..], b"llo");
}

#[tokio::test]
async fn a_read_at_the_tail_is_200_empty_and_up_to_date() {
    let s = Server::new().await;
    s.create("/demo/s", OCTET).await;
    s.append("/demo/s", OCTET, "abc").await;
    let r = s
        .get(&format!("/demo/s?offset={}", off(3)))
        .send()
        .await
        .expect(200);
    assert!(r.body.is_empty());
    r.expect_header("stream-next-offset", &off(3))
        .expect_header("stream-up-to-date", "true");
}

#[tokio::test]
async fn offset_now_reads_nothing_with_no_store_and_no_etag() {
    let s = Server::new().await;
    s.create("/demo/s", OCTET).await;
    s.append("/demo/s", OCTET, "abc").await;
    let r = s.get("/demo/s?offset=now").send().await.expect(200);
    assert!(r.body.is_empty());
    r.expect_header("stream-next-offset", &off(3))
        .expect_header("stream-up-to-date", "true");
    r.expect_header("cache-control", "no-store")
        .expect_no_header("etag");
    s.post("/demo/s")
        .header("stream-closed", "true")
        .send()
        .await
        .expect(204);
    s.get("/demo/s?offset=now")
        .send()
        .await
        .expect(200)
        .expect_header("stream-closed", "true");
}

#[tokio::test]
async fn malformed_offsets_answer_400_and_offsets_past_the_tail_answer_416_with_the_tail() {
    let s = Server::new().await;
    s.create("/demo/s", OCTET).await;
    s.append("/demo/s", OCTET, "abc").await;
    for bad in [
        "42",
        "",
        "-2",
        "NOW",
        "0000000000000000000a",
        "000000000000000000003",
        "99999999999999999999",
        "%00",
    ] {
        s.get(&format!("/demo/s?offset={bad}"))
            .send()
            .await
            .refused_with(400, "offset");
    }
    let r = s
        .get(&format!("/demo/s?offset={}", off(4)))
        .send()
        .await
        .refused(416);
    r.expect_header("stream-next-offset", &off(3));
    s.get("/demo/missing?offset=42").send().await.refused(400);
}

#[tokio::test]
async fn removed_and_invalid_read_parameters_answer_400() {
    let s = Server::new().await;
    s.create("/demo/s", OCTET).await;
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
        s.get(&format!("/demo/s?{q}")).send().await.refused(400);
    }
    s.get("/demo/s?consistency=leader").send().await.expect(200);
    s.get("/demo/s?consistency=local&offset=-1")
        .send()
        .await
        .expect(200);
    // stream-cursor is not an alias for cursor, and unknown parameters are ignored.
    s.get("/demo/s?stream-cursor=x&offset=-1")
        .send()
        .await
        .expect(200)
        .expect_no_header("stream-cursor");
}

#[tokio::test]
async fn max_bytes_cuts_a_read_short_without_up_to_date_even_inside_a_json_message() {
    let s = Server::new().await;
    s.create("/demo/j", JSON).await;
    s.append("/demo/j", JSON, r#"[{"a":1},{"b":2}]"#).await;
    let r = s
        .get("/demo/j?offset=-1&max_bytes=5")
        .send()
        .await
        .expect(200);
    assert_eq!(&r.body[..], b"{\"a\":");
    r.expect_header("stream-next-offset", &off(5))
        .expect_no_header("stream-up-to-date");
    // The mid-message offset is a valid read position.
    let r = s
        .get(&format!("/demo/j?offset={}", off(5)))
        .send()
        .await
        .expect(200);
    assert_eq!(&r.body[..], b"1}\n{\"b\":2}\n");
    // Zero is raised to one byte; a value that is not an integer is ignored.
    let r = s
        .get("/demo/j?offset=-1&max_bytes=0")
        .send()
        .await
        .expect(200);
    assert_eq!(r.body.len(), 1);
    for ignored in ["abc", "-1", "1.5", "99999999999999999999999"] {
        let r = s
            .get(&format!("/demo/j?offset=-1&max_bytes={ignored}"))
            .send()
            .await
            .expect(200);
        assert_eq!(r.body.len(), 16, "max_bytes={ignored}");
    }
}

#[tokio::test]
async fn a_read_response_is_capped_at_8_mib() {
    const CAP: usize = 8 * 1024 * 1024;
    let s = Server::new().await;
    s.create("/demo/big", OCTET).await;
    let body: Vec<u8> = (0..CAP + 1000).map(|i| (i % 251) as u8).collect();
    s.append("/demo/big", OCTET, body.clone()).await;
    for uri in [
        "/demo/big?offset=-1",
        "/demo/big?offset=-1&max_bytes=20000000",
    ] {
        let r = s.get(uri).send().await.expect(200);
        assert_eq!(r.body.len(), CAP);
        r.expect_header("stream-next-offset", &off(CAP as u64))
            .expect_no_header("stream-up-to-date");
    }
    assert_eq!(s.read_all("/demo/big").await, body);
}

#[tokio::test]
async fn the_etag_changes_with_new_data_and_with_a_close_and_if_none_match_answers_304() {
    let s = Server::new().await;
    s.create("/demo/s", OCTET).await;
    s.append("/demo/s", OCTET, "abc").await;
    let first = s.get("/demo/s?offset=-1").send().await.expect(200);
    let tag = first.header("etag").expect("etag").to_owned();
    let r = s
        .get("/demo/s?offset=-1")
        .header("if-none-match", &tag)
        .send()
        .await
        .expect(304);
    assert!(r.body.is_empty());
    s.get("/demo/s?offset=-1")
        .header("if-none-match", "\"other\", *")
        .send()
        .await
        .expect(304);
    s.get("/demo/s?offset=-1")
        .header("if-none-match", "\"other\"")
        .send()
        .await
        .expect(200);
    s.post("/demo/s")
        .header("stream-closed", "true")
        .send()
        .await
        .expect(204);
    let closed = s.get("/demo/s?offset=-1").send().await.expect(200);
    assert_ne!(
        closed.header("etag"),
        Some(tag.as_str()),
        "closing must change the ETag"
    );
    s.get("/demo/s?offset=-1")
        .header("if-none-match", &tag)
        .send()
        .await
        .expect(200);
}

// ---------------------------------------------------------------------------------------------
// HEAD and DELETE (HD-*, DL-*)

#[tokio::test]
async fn head_reports_metadata_with_no_store_and_no_etag_or_body() {
    let s = Server::new().await;
    s.create("/demo/s", JSON).await;
    s.append("/demo/s", JSON, "[1,2]").await;
    let r = s.head("/demo/s").send().await.expect(200);
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
    s.head("/demo/missing").send().await.expect(404);
}

#[tokio::test]
async fn delete_answers_204_then_404_and_a_recreate_starts_fresh() {
    let s = Server::new().await;
    s.put("/demo/s")
        .header("stream-seq", "5")
        .send()
        .await
        .expect(201);
    let p = |r: crate::harness::router::Req, seq: &str| {
        r.header("producer-id", "p")
            .header("producer-epoch", "3")
            .header("producer-seq", seq)
    };
    p(s.post("/demo/s").ctype(OCTET), "0")
        .body("old")
        .send()
        .await
        .expect(200);
    let r = s.delete("/demo/s").send().await.expect(204);
    assert!(r.body.is_empty());
    s.delete("/demo/s").send().await.refused(404);
    s.get("/demo/s?offset=-1").send().await.refused(404);
    s.head("/demo/s").send().await.expect(404);
    s.create("/demo/s", OCTET)
        .await
        .expect_header("stream-next-offset", &off(0));
    // No Stream-Seq and no producer state survive.
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-seq", "1")
        .body("a")
        .send()
        .await
        .expect(204);
    p(s.post("/demo/s").ctype(OCTET), "0")
        .body("b")
        .send()
        .await
        .expect(200);
    p(s.post("/demo/s").ctype(OCTET), "5")
        .body("c")
        .send()
        .await
        .refused(409);
    assert_eq!(s.read_all("/demo/s").await, b"ab");
}

// ---------------------------------------------------------------------------------------------
// Request bodies (AP-9, RF-2)

#[tokio::test]
async fn a_declared_body_over_32_mib_answers_413_marked_request_body_too_large() {
    let s = Server::new().await;
    s.create("/demo/s", OCTET).await;
    for (m, path) in [(Method::POST, "/demo/s"), (Method::PUT, "/demo/t")] {
        let r = s
            .req(m, path)
            .ctype(OCTET)
            .header("content-length", "33554433")
            .body("x")
            .send()
            .await
            .refused(413);
        r.expect_header("x-ursula-not-applied", "RequestBodyTooLarge");
        r.expect_no_header("x-ursula-not-applied-checked");
        let body: serde_json::Value =
            serde_json::from_slice(&r.body).expect("the marked 413 body is JSON");
        assert_eq!(body["error"], "RequestBodyTooLarge");
    }
    s.head("/demo/t").send().await.expect(404);
    assert_eq!(s.tail("/demo/s").await, off(0));
}

#[tokio::test]
async fn an_undeclared_body_over_32_mib_answers_413_and_stores_nothing() {
    let s = Server::new().await;
    s.create("/demo/s", OCTET).await;
    let chunk = bytes::Bytes::from(vec![b'x'; 1 << 20]);
    let chunks = (0..33).map(move |_| Ok::<_, std::io::Error>(chunk.clone()));
    let body = axum::body::Body::from_stream(futures_util::stream::iter(chunks));
    s.post("/demo/s")
        .ctype(OCTET)
        .raw_body(body)
        .send()
        .await
        .refused(413);
    assert_eq!(s.tail("/demo/s").await, off(0));
    // Exactly 32 MiB is accepted.
    s.append("/demo/s", OCTET, vec![b'y'; 32 << 20]).await;
    assert_eq!(s.tail("/demo/s").await, off(32 << 20));
}

#[tokio::test]
async fn a_body_that_fails_midway_answers_400_and_stores_nothing() {
    let s = Server::new().await;
    s.create("/demo/s", OCTET).await;
    let parts = vec![
        Ok(bytes::Bytes::from_static(b"half")),
        Err(std::io::Error::other("connection reset")),
    ];
    let body = axum::body::Body::from_stream(futures_util::stream::iter(parts));
    s.post("/demo/s")
        .ctype(OCTET)
        .raw_body(body)
        .send()
        .await
        .refused_with(400, "body");
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
    s.put("/demo/s")
        .header("stream-ttl", "2")
        .send()
        .await
        .expect(201);
    let created = expires_ms(&s, "demo/s").await.expect("the stream is alive");
    tokio::time::sleep(std::time::Duration::from_millis(550)).await;
    for _ in 0..3 {
        s.head("/demo/s").send().await.expect(200);
    }
    assert_eq!(
        expiry_change(&s, "demo/s", created, 150).await,
        Some(created),
        "HEAD renewed the TTL"
    );
    s.get("/demo/s?offset=-1").send().await.expect(200);
    let renewed = expiry_change(&s, "demo/s", created, 2000)
        .await
        .expect("alive");
    assert!(
        renewed >= created + 500,
        "a read past a quarter of the TTL renews it: {created} -> {renewed}"
    );
    // Within the next quarter, reads do not renew again.
    s.get("/demo/s?offset=-1").send().await.expect(200);
    s.get("/demo/s/bootstrap").send().await.expect(200);
    assert_eq!(
        expiry_change(&s, "demo/s", renewed, 150).await,
        Some(renewed)
    );
    // An append always renews; its duplicate does not.
    let p = |r: crate::harness::router::Req| {
        r.header("producer-id", "p")
            .header("producer-epoch", "0")
            .header("producer-seq", "0")
    };
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    p(s.post("/demo/s").ctype(OCTET))
        .body("x")
        .send()
        .await
        .expect(200);
    let appended = expires_ms(&s, "demo/s").await.expect("alive");
    assert!(appended > renewed);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    p(s.post("/demo/s").ctype(OCTET))
        .body("x")
        .send()
        .await
        .expect(204);
    assert_eq!(expires_ms(&s, "demo/s").await, Some(appended));
}

#[tokio::test]
async fn a_partial_read_of_a_closed_stream_does_not_claim_closed() {
    let s = Server::new().await;
    s.put("/demo/s")
        .header("stream-closed", "true")
        .body("abc")
        .send()
        .await
        .expect(201);
    let r = s
        .get("/demo/s?offset=-1&max_bytes=2")
        .send()
        .await
        .expect(200);
    assert_eq!(&r.body[..], b"ab");
    r.expect_no_header("stream-closed")
        .expect_no_header("stream-up-to-date");
    let r = s
        .get(&format!("/demo/s?offset={}", off(2)))
        .send()
        .await
        .expect(200);
    r.expect_header("stream-closed", "true")
        .expect_header("stream-up-to-date", "true");
}
