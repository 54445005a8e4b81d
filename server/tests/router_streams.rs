//! Buckets, IDs, routes, create, append, close, `Stream-Seq`, `Stream-Incarnation`, reads, HEAD
//! and DELETE, in-process against the router. Line refs are to the spec dump
//! (`000_4b3aba8c7a20e2ce.txt`); rule IDs to the checklist in `protocol.md`.

mod router_common;

use axum::http::Method;
use router_common::Server;
use router_common::off;

const OCTET: &str = "application/octet-stream";
const JSON: &str = "application/json";

// ---------------------------------------------------------------------------------------------
// Buckets and IDs (RT-1, ID-1..ID-8)

#[tokio::test]
async fn bucket_put_answers_201_for_a_valid_id_on_every_call() {
    let s = Server::new();
    for path in ["/demo", "/demo", "/a_b-9", &format!("/{}", "a".repeat(64))] {
        let r = s.put(path).send().await.expect(201);
        r.expect_no_header("stream-incarnation");
    }
}

#[tokio::test]
async fn invalid_or_reserved_bucket_ids_are_refused_with_400() {
    let s = Server::new();
    let long = format!("/{}", "a".repeat(65));
    for bad in [
        "/abc",
        "/Demo",
        "/de.mo",
        "/de%2Fmo",
        "/d%C3%A9mo",
        "/de%20mo",
        &long,
        "/snapshots",
        "/__internal",
        "/__v1",
    ] {
        s.put(bad).send().await.refused_with(400, "bucket");
    }
    // The same rules hold when the bucket carries a stream.
    for bad in ["/Demo/x", "/snapshots/x", "/__v1/x", "/abc/x"] {
        s.put(bad).send().await.refused_with(400, "bucket");
        s.get(bad).send().await.refused(400);
    }
}

#[tokio::test]
async fn a_bucket_answers_405_with_allow_for_methods_other_than_put_and_400_for_an_invalid_id() {
    let s = Server::new();
    for m in [Method::GET, Method::POST, Method::DELETE] {
        let r = s.req(m.clone(), "/demo").send().await.refused(405);
        assert_eq!(r.header("allow"), Some("PUT, OPTIONS"));
        // AMB-14: an invalid ID is a 400 whatever the method.
        s.req(m, "/Demo").send().await.refused_with(400, "bucket");
    }
}

#[tokio::test]
async fn the_bucket_and_stream_pair_is_capped_at_122_bytes() {
    let s = Server::new();
    let bucket = "b".repeat(64);
    s.put(&format!("/{bucket}/{}", "s".repeat(57)))
        .send()
        .await
        .expect(201);
    s.put(&format!("/{bucket}/{}", "s".repeat(58)))
        .send()
        .await
        .refused_with(400, "122");
    // A 4-byte bucket leaves 117 bytes for the stream.
    s.put(&format!("/demo/{}", "s".repeat(117)))
        .send()
        .await
        .expect(201);
    s.put(&format!("/demo/{}", "s".repeat(118)))
        .send()
        .await
        .refused_with(400, "122");
    s.put(&format!("/demo/{}", "s".repeat(5000)))
        .send()
        .await
        .refused_with(400, "122");
}

#[tokio::test]
async fn reserved_or_forbidden_stream_ids_are_refused_with_400_on_every_method() {
    let s = Server::new();
    let bad = [
        "/demo/streams",
        "/demo/$x",
        "/demo/%24x",
        "/demo/a..b",
        "/demo/..",
        "/demo/a%2Fb",
        "/demo/a%00b",
        "/demo/%FF",
        "/demo/%C3",
    ];
    for path in bad {
        for m in [
            Method::PUT,
            Method::POST,
            Method::GET,
            Method::HEAD,
            Method::DELETE,
        ] {
            let r = s
                .req(m.clone(), path)
                .ctype(OCTET)
                .body("x")
                .send()
                .await
                .expect(400);
            if m != Method::HEAD {
                assert!(!r.body.is_empty(), "{m} {path}: empty 400 body");
            }
        }
    }
}

#[tokio::test]
async fn subresource_names_and_percent_encoded_utf8_stay_valid_stream_ids() {
    let s = Server::new();
    for name in [
        "snapshot",
        "bootstrap",
        "retention",
        "attrs",
        "append-batch",
        "keyed-state",
        "a.b",
        "%E2%9C%93",
        "a%20b",
        "%2E",
    ] {
        let path = format!("/demo/{name}");
        s.put(&path).send().await.expect(201);
        s.append(&path, OCTET, "x").await;
        assert_eq!(s.read_all(&path).await, b"x", "{path}");
    }
    // Percent-encodings that decode to the same ID name the same stream.
    s.append("/demo/%e2%9c%93", OCTET, "y").await;
    assert_eq!(s.read_all("/demo/%E2%9C%93").await, b"xy");
}

// ---------------------------------------------------------------------------------------------
// Routes (RT-11, RT-12, AMB-20)

#[tokio::test]
async fn unknown_subresources_and_three_segment_paths_answer_404() {
    let s = Server::new();
    s.create("/demo/s", OCTET).await;
    for (m, path) in [
        (Method::GET, "/demo/s/x"),
        (Method::PUT, "/demo/aff/s"),
        (Method::GET, "/demo/aff/s/bootstrap"),
        (Method::POST, "/demo/aff/$transaction"),
        (Method::GET, "/demo/s/attrs"),
        (Method::PUT, "/demo/s/attrs"),
        (Method::GET, "/demo/s/keyed-state"),
        (Method::POST, "/demo/s/append-batch"),
        (Method::PUT, "/demo/s/retention?record=1"),
        (Method::GET, "/demo/s/snapshot/a/b"),
        (Method::GET, "/demo/s/"),
        (Method::GET, "/demo//s"),
        (Method::GET, "/"),
        (Method::GET, "/__ursula/nope"),
    ] {
        s.req(m, path).send().await.refused(404);
    }
}

#[tokio::test]
async fn removed_snapshot_routes_answer_405() {
    let s = Server::new();
    s.create("/demo/s", OCTET).await;
    s.get("/demo/s/snapshot").send().await.refused(405);
    s.put("/demo/s/snapshot?record=1")
        .body("x")
        .send()
        .await
        .refused(405);
    s.delete(&format!("/demo/s/snapshot/{}", off(0)))
        .send()
        .await
        .refused(405);
}

#[tokio::test]
async fn an_unknown_method_on_a_stream_answers_405_with_allow() {
    let s = Server::new();
    s.create("/demo/s", OCTET).await;
    let r = s.req(Method::PATCH, "/demo/s").send().await.refused(405);
    let allow = r.header("allow").expect("405 carries Allow");
    for m in ["GET", "HEAD", "PUT", "POST", "DELETE"] {
        assert!(allow.contains(m), "Allow {allow:?} lacks {m}");
    }
    s.req(Method::POST, "/__ursula/metrics")
        .send()
        .await
        .refused(405);
    s.req(Method::DELETE, "/demo/s/bootstrap")
        .send()
        .await
        .refused(405);
    s.req(Method::GET, &format!("/demo/s/retention/{}", off(0)))
        .send()
        .await
        .refused(405);
}

#[tokio::test]
async fn every_response_carries_cors_and_nosniff_and_options_answers_204() {
    let s = Server::new();
    let r = s
        .req(Method::OPTIONS, "/demo/s")
        .header("access-control-request-headers", "stream-seq")
        .send()
        .await
        .expect(204);
    r.expect_header("access-control-allow-headers", "stream-seq");
    assert!(
        r.header("access-control-allow-methods")
            .is_some_and(|m| m.contains("POST"))
    );
    for r in [
        r,
        s.get("/demo/missing").send().await.expect(404),
        s.put("/demo/s").send().await.expect(201),
    ] {
        r.expect_header("access-control-allow-origin", "*");
        r.expect_header("x-content-type-options", "nosniff");
        let exposed = r
            .header("access-control-expose-headers")
            .expect("Expose-Headers");
        for h in [
            "stream-next-offset",
            "stream-cursor",
            "stream-incarnation",
            "producer-epoch",
            "etag",
        ] {
            assert!(exposed.contains(h), "{exposed} lacks {h}");
        }
    }
}

#[tokio::test]
async fn ready_and_metrics_answer_json() {
    let s = Server::new();
    s.create("/demo/s", OCTET).await;
    s.append("/demo/s", OCTET, "abc").await;
    let r = s.get("/__ursula/ready").send().await.expect(200);
    let ready: serde_json::Value = serde_json::from_slice(&r.body).expect("ready is JSON");
    assert_eq!(ready["ready"], true);
    let r = s.get("/__ursula/metrics").send().await.expect(200);
    let m: serde_json::Value = serde_json::from_slice(&r.body).expect("metrics is JSON");
    assert_eq!(m["streams"], 1);
    assert_eq!(m["engine"], "memory");
    assert_eq!(m["core_count"], 2);
}

// ---------------------------------------------------------------------------------------------
// Create (CR-*)

#[tokio::test]
async fn create_answers_201_with_location_type_offset_and_incarnation_but_no_etag() {
    let s = Server::new();
    let r = s
        .put("/demo/s")
        .ctype("Text/Plain ; Charset=UTF-8")
        .body("hello")
        .send()
        .await
        .expect(201);
    r.expect_header("content-type", "text/plain; charset=utf-8");
    r.expect_header("stream-next-offset", &off(5));
    r.expect_no_header("etag").expect_no_header("stream-closed");
    assert_eq!(r.header("location"), Some("/demo/s"));
    let inc = r.header("stream-incarnation").expect("incarnation");
    assert!(
        inc.len() == 16 && inc.bytes().all(|b| b.is_ascii_hexdigit()),
        "{inc}"
    );
    // With a Host header, Location is the absolute URL.
    let r = s
        .put("/demo/t")
        .header("host", "example.test:4437")
        .send()
        .await
        .expect(201);
    r.expect_header("location", "http://example.test:4437/demo/t");
    // An empty create defaults to octet-stream.
    s.head("/demo/t")
        .send()
        .await
        .expect(200)
        .expect_header("content-type", OCTET);
}

#[tokio::test]
async fn repeating_a_create_with_the_same_config_answers_200_and_ignores_body_and_stream_seq() {
    let s = Server::new();
    let first = s
        .put("/demo/s")
        .ctype(JSON)
        .header("stream-ttl", "600")
        .body("[1,2]")
        .send()
        .await
        .expect(201);
    let again = s
        .put("/demo/s")
        .ctype("application/JSON")
        .header("stream-ttl", "600")
        .header("stream-seq", "zzz")
        .header("stream-attrs", "ignored=1")
        .body("[3]")
        .send()
        .await
        .expect(200);
    again.expect_no_header("location");
    again.expect_header("stream-next-offset", &off(4));
    again.expect_header("stream-ttl", "600");
    assert_eq!(
        again.header("stream-incarnation"),
        first.header("stream-incarnation")
    );
    assert_eq!(s.read_all("/demo/s").await, b"1\n2\n");
    // The ignored Stream-Seq was not stored: "a" still passes.
    s.post("/demo/s")
        .ctype(JSON)
        .header("stream-seq", "a")
        .body("3")
        .send()
        .await
        .expect(204);
}

#[tokio::test]
async fn create_of_an_existing_stream_with_another_config_answers_409() {
    let s = Server::new();
    s.create("/demo/j", JSON).await;
    s.put("/demo/j").send().await.refused(409); // no Content-Type means octet-stream (AMB-22)
    s.put("/demo/j")
        .ctype("application/json; charset=utf-8")
        .send()
        .await
        .refused(409);
    s.put("/demo/j")
        .ctype(JSON)
        .header("stream-ttl", "60")
        .send()
        .await
        .refused(409);
    s.put("/demo/ttl")
        .header("stream-ttl", "60")
        .send()
        .await
        .expect(201);
    s.put("/demo/ttl").send().await.refused(409);
    s.put("/demo/ttl")
        .header("stream-ttl", "61")
        .send()
        .await
        .refused(409);
    s.put("/demo/ttl")
        .header("stream-expires-at", "2099-01-01T00:00:00Z")
        .send()
        .await
        .refused(409);
    s.put("/demo/at")
        .header("stream-expires-at", "2099-01-01T00:00:00Z")
        .send()
        .await
        .expect(201);
    s.put("/demo/at")
        .header("stream-expires-at", "2099-01-01T01:00:00+01:00")
        .send()
        .await
        .expect(200);
    s.put("/demo/at")
        .header("stream-expires-at", "2099-01-01T00:00:01Z")
        .send()
        .await
        .refused(409);
}

#[tokio::test]
async fn closed_state_must_match_on_an_existing_stream() {
    let s = Server::new();
    s.put("/demo/open").send().await.expect(201);
    s.put("/demo/open").send().await.expect(200);
    s.put("/demo/open")
        .header("stream-closed", "true")
        .send()
        .await
        .refused(409);
    let r = s
        .put("/demo/closed")
        .header("stream-closed", "true")
        .body("final")
        .send()
        .await
        .expect(201);
    r.expect_header("stream-closed", "true");
    r.expect_header("stream-next-offset", &off(5));
    s.put("/demo/closed").send().await.refused(409);
    s.put("/demo/closed")
        .header("stream-closed", "TRUE")
        .send()
        .await
        .expect(200)
        .expect_header("stream-closed", "true");
    assert_eq!(s.read_all("/demo/closed").await, b"final");
}

#[tokio::test]
async fn stream_closed_counts_only_as_true_in_any_case() {
    let s = Server::new();
    for (i, v) in ["false", "yes", "1", "", "true-ish"].iter().enumerate() {
        let path = format!("/demo/s{i}");
        s.put(&path)
            .header("stream-closed", v)
            .send()
            .await
            .expect(201)
            .expect_no_header("stream-closed");
        // A POST with an empty body and a non-true value is an empty append.
        s.post(&path)
            .header("stream-closed", v)
            .send()
            .await
            .refused(400);
        s.append(&path, OCTET, "still open").await;
    }
    s.put("/demo/t").send().await.expect(201);
    s.post("/demo/t")
        .header("stream-closed", "True")
        .send()
        .await
        .expect(204)
        .expect_header("stream-closed", "true");
}

#[tokio::test]
async fn a_json_create_flattens_an_initial_array_and_accepts_an_empty_one() {
    let s = Server::new();
    let r = s
        .put("/demo/j")
        .ctype(JSON)
        .body(r#"[ {"a" : 1}, [2, 3] ]"#)
        .send()
        .await
        .expect(201);
    r.expect_header("stream-next-offset", &off(14));
    assert_eq!(s.read_all("/demo/j").await, b"{\"a\":1}\n[2,3]\n");
    s.put("/demo/e")
        .ctype(JSON)
        .body("[]")
        .send()
        .await
        .expect(201)
        .expect_header("stream-next-offset", &off(0));
}

#[tokio::test]
async fn a_create_with_invalid_json_answers_400_and_creates_nothing() {
    let s = Server::new();
    for bad in ["{", "{} {}", "[1,]", "\u{1}", "nul"] {
        s.put("/demo/j")
            .ctype(JSON)
            .body(bad)
            .send()
            .await
            .refused_with(400, "json");
        s.head("/demo/j").send().await.expect(404);
    }
    s.put("/demo/j")
        .ctype(JSON)
        .body(&b"\"\xff\""[..])
        .send()
        .await
        .refused(400);
    s.head("/demo/j").send().await.expect(404);
}

#[tokio::test]
async fn a_create_with_a_producer_seq_other_than_zero_answers_409() {
    let s = Server::new();
    let p = |r: router_common::Req, seq: &str| {
        r.header("producer-id", "p")
            .header("producer-epoch", "0")
            .header("producer-seq", seq)
    };
    p(s.put("/demo/s"), "1").send().await.refused(409);
    s.head("/demo/s").send().await.expect(404);
    let r = p(s.put("/demo/s"), "0").body("a").send().await.expect(201);
    r.expect_header("producer-epoch", "0")
        .expect_header("producer-seq", "0");
    // The create was seq 0: repeating it as an append is a duplicate, seq 1 is next.
    p(s.post("/demo/s").ctype(OCTET), "0")
        .body("a")
        .send()
        .await
        .expect(204);
    p(s.post("/demo/s").ctype(OCTET), "1")
        .body("b")
        .send()
        .await
        .expect(200);
    assert_eq!(s.read_all("/demo/s").await, b"ab");
}

#[tokio::test]
async fn lifetime_headers_are_validated_and_exclusive() {
    let s = Server::new();
    s.put("/demo/s")
        .header("stream-ttl", "60")
        .header("stream-expires-at", "2099-01-01T00:00:00Z")
        .send()
        .await
        .refused(400);
    for bad in [
        "+60",
        "060",
        "60.0",
        "6e1",
        "-1",
        "",
        "sixty",
        "99999999999999999999999",
    ] {
        s.put("/demo/s")
            .header("stream-ttl", bad)
            .send()
            .await
            .refused_with(400, "stream-ttl");
    }
    for bad in ["tomorrow", "2099-01-01", "2099-01-01 00:00:00"] {
        s.put("/demo/s")
            .header("stream-expires-at", bad)
            .send()
            .await
            .refused_with(400, "stream-expires-at");
    }
    s.put("/demo/s")
        .header("stream-ttl", "1")
        .header("stream-ttl", "1")
        .send()
        .await
        .refused(400);
    s.head("/demo/s").send().await.expect(404);
    let r = s
        .put("/demo/s")
        .header("stream-ttl", "3600")
        .send()
        .await
        .expect(201);
    r.expect_header("stream-ttl", "3600")
        .expect_no_header("stream-expires-at");
    let r = s.head("/demo/s").send().await.expect(200);
    r.expect_header("stream-ttl", "3600")
        .expect_no_header("stream-expires-at");
    let r = s
        .put("/demo/e")
        .header("stream-expires-at", "2099-01-01T00:00:00+00:00")
        .send()
        .await
        .expect(201);
    r.expect_header("stream-expires-at", "2099-01-01T00:00:00Z");
    s.head("/demo/e")
        .send()
        .await
        .expect(200)
        .expect_header("stream-expires-at", "2099-01-01T00:00:00Z")
        .expect_no_header("stream-ttl");
}

#[tokio::test]
async fn a_stream_with_a_past_expiry_is_gone_at_once_and_can_be_created_again() {
    let s = Server::new();
    let first = s
        .put("/demo/s")
        .header("stream-expires-at", "2000-01-01T00:00:00Z")
        .send()
        .await
        .expect(201);
    s.head("/demo/s").send().await.expect(404);
    s.get("/demo/s?offset=-1").send().await.refused(404);
    s.post("/demo/s")
        .ctype(OCTET)
        .body("x")
        .send()
        .await
        .refused(404);
    let second = s.put("/demo/s").send().await.expect(201);
    assert_ne!(
        first.header("stream-incarnation"),
        second.header("stream-incarnation")
    );
}

// ---------------------------------------------------------------------------------------------
// Append and close (AP-*, CL-*)

#[tokio::test]
async fn post_never_creates_a_stream() {
    let s = Server::new();
    s.post("/demo/s")
        .ctype(OCTET)
        .body("x")
        .send()
        .await
        .refused(404);
    s.post("/demo/s")
        .header("stream-closed", "true")
        .send()
        .await
        .refused(404);
    s.head("/demo/s").send().await.expect(404);
}

#[tokio::test]
async fn an_append_answers_204_with_the_new_tail_and_incarnation_and_no_etag() {
    let s = Server::new();
    let inc = s
        .create("/demo/s", OCTET)
        .await
        .header("stream-incarnation")
        .map(str::to_owned);
    let r = s.append("/demo/s", OCTET, "abc").await;
    r.expect_header("stream-next-offset", &off(3));
    r.expect_no_header("etag")
        .expect_no_header("stream-closed")
        .expect_no_header("producer-epoch");
    assert_eq!(r.header("stream-incarnation"), inc.as_deref());
    assert!(r.body.is_empty());
    // Prefer: return=minimal is ignored.
    s.post("/demo/s")
        .ctype(OCTET)
        .header("prefer", "return=minimal")
        .body("d")
        .send()
        .await
        .expect(204);
    assert_eq!(s.read_all("/demo/s").await, b"abcd");
}

#[tokio::test]
async fn append_refusals_of_malformed_requests_answer_400_and_store_nothing() {
    let s = Server::new();
    s.create("/demo/s", OCTET).await;
    s.append("/demo/s", OCTET, "keep").await;
    s.post("/demo/s")
        .body("x")
        .send()
        .await
        .refused_with(400, "content-type");
    s.post("/demo/s").ctype(OCTET).send().await.refused(400);
    s.post("/demo/s")
        .ctype("not a type")
        .body("x")
        .send()
        .await
        .refused_with(400, "content-type");
    s.post("/demo/s")
        .ctype(OCTET)
        .ctype(OCTET)
        .body("x")
        .send()
        .await
        .refused(400);
    s.post("/demo/s")
        .ctype(OCTET)
        .header("stream-record-match", "1")
        .body("x")
        .send()
        .await
        .refused_with(400, "stream-record-match");
    s.post("/demo/s")
        .ctype(OCTET)
        .header("content-length", "ten")
        .body("x")
        .send()
        .await
        .refused_with(400, "content-length");
    assert_eq!(s.read_all("/demo/s").await, b"keep");
}

#[tokio::test]
async fn a_content_type_mismatch_answers_409_with_the_tail_and_no_closed_or_producer_headers() {
    let s = Server::new();
    s.create("/demo/j", JSON).await;
    s.append("/demo/j", JSON, "1").await;
    for other in ["application/json; charset=utf-8", "text/plain", OCTET] {
        let r = s
            .post("/demo/j")
            .ctype(other)
            .body("2")
            .send()
            .await
            .refused(409);
        r.expect_header("stream-next-offset", &off(2));
        r.expect_no_header("stream-closed")
            .expect_no_header("producer-expected-seq");
    }
    // Normalization: case and spacing do not matter, parameters do.
    s.create("/demo/t", "text/plain; charset=utf-8").await;
    s.append("/demo/t", "TEXT/PLAIN;CHARSET=UTF-8", "x").await;
    assert_eq!(s.read_all("/demo/j").await, b"1\n");
}

#[tokio::test]
async fn a_close_only_post_ignores_its_content_type_even_a_malformed_one() {
    // L4579: with an empty body servers MUST NOT reject based on Content-Type.
    let s = Server::new();
    s.create("/demo/s", JSON).await;
    let r = s
        .post("/demo/s")
        .ctype("garbage")
        .header("stream-closed", "true")
        .send()
        .await
        .expect(204);
    r.expect_header("stream-closed", "true");
    s.create("/demo/t", JSON).await;
    s.post("/demo/t")
        .ctype("text/plain")
        .header("stream-closed", "true")
        .send()
        .await
        .expect(204);
}

#[tokio::test]
async fn closing_is_idempotent_and_later_appends_answer_409_with_the_final_offset() {
    let s = Server::new();
    s.create("/demo/s", OCTET).await;
    let r = s
        .post("/demo/s")
        .ctype(OCTET)
        .header("stream-closed", "true")
        .body("last")
        .send()
        .await
        .expect(204);
    r.expect_header("stream-closed", "true")
        .expect_header("stream-next-offset", &off(4));
    for _ in 0..2 {
        let r = s
            .post("/demo/s")
            .header("stream-closed", "true")
            .send()
            .await
            .expect(204);
        r.expect_header("stream-closed", "true")
            .expect_header("stream-next-offset", &off(4));
    }
    let r = s
        .post("/demo/s")
        .ctype(OCTET)
        .body("more")
        .send()
        .await
        .refused(409);
    r.expect_header("stream-closed", "true")
        .expect_header("stream-next-offset", &off(4));
    let r = s
        .post("/demo/s")
        .ctype(OCTET)
        .header("stream-closed", "true")
        .body("more")
        .send()
        .await
        .refused(409);
    r.expect_header("stream-closed", "true");
    // Reads see EOF at the tail; the data stays readable.
    let r = s
        .get(&format!("/demo/s?offset={}", off(4)))
        .send()
        .await
        .expect(200);
    r.expect_header("stream-closed", "true")
        .expect_header("stream-up-to-date", "true");
    assert!(r.body.is_empty());
    assert_eq!(s.read_all("/demo/s").await, b"last");
    s.head("/demo/s")
        .send()
        .await
        .expect(200)
        .expect_header("stream-closed", "true");
}

// ---------------------------------------------------------------------------------------------
// JSON mode (JS-*)

#[tokio::test]
async fn json_appends_are_validated_flattened_and_stored_as_written_minus_whitespace() {
    let s = Server::new();
    s.create("/demo/j", JSON).await;
    s.append("/demo/j", JSON, r#" { "b" : 1 , "a" : 2 , "a" : 1.50e3 } "#)
        .await;
    s.append("/demo/j", JSON, r#"[[1,2],"\ud800",1e400]"#).await;
    s.append("/demo/j", JSON, "[[[1]]]").await;
    let body = s.read_all("/demo/j").await;
    assert_eq!(
        String::from_utf8_lossy(&body),
        "{\"b\":1,\"a\":2,\"a\":1.50e3}\n[1,2]\n\"\\ud800\"\n1e400\n[[1]]\n"
    );
    let r = s.get("/demo/j?offset=-1").send().await.expect(200);
    r.expect_header("content-type", "application/x-ndjson");
    s.head("/demo/j")
        .send()
        .await
        .expect(200)
        .expect_header("content-type", JSON);
}

#[tokio::test]
async fn invalid_json_an_empty_array_or_a_too_deep_message_answer_400_and_commit_nothing() {
    let s = Server::new();
    s.create("/demo/j", JSON).await;
    s.append("/demo/j", JSON, "[1]").await;
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let too_deep = format!("{{\"a\":{}}}", deep(127));
    let bad: Vec<&[u8]> = vec![
        b"[]",
        b"{} {}",
        b"[1,2",
        b"{\"a\" 1}",
        b"\"\xff\"",
        b"01",
        too_deep.as_bytes(),
        b"[2, oops]",
    ];
    for body in bad {
        s.post("/demo/j")
            .ctype(JSON)
            .body(body.to_vec())
            .send()
            .await
            .refused(400);
    }
    // 128 levels as one body is an array of 127-deep messages.
    s.append("/demo/j", JSON, deep(128)).await;
    let body = s.read_all("/demo/j").await;
    assert_eq!(body, format!("1\n{}\n", deep(127)).as_bytes());
}

// ---------------------------------------------------------------------------------------------
// Stream-Seq (SQ-*)

#[tokio::test]
async fn stream_seq_must_be_bytewise_greater_and_a_conflict_carries_only_the_tail() {
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
    let inc = s
        .create("/demo/s", OCTET)
        .await
        .header("stream-incarnation")
        .expect("create")
        .to_owned();
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
    let s = Server::new();
    let old = s
        .create("/demo/s", OCTET)
        .await
        .header("stream-incarnation")
        .expect("token")
        .to_owned();
    s.append("/demo/s", OCTET, "old").await;
    s.delete("/demo/s").send().await.expect(204);
    let cur = s
        .create("/demo/s", OCTET)
        .await
        .header("stream-incarnation")
        .expect("token")
        .to_owned();
    assert_ne!(old, cur, "a recreated stream gets a new incarnation");
    s.append("/demo/s", OCTET, "new").await;
    let with = |r: router_common::Req| r.header("stream-incarnation", &old);
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
    let s = Server::new();
    s.put("/demo/s")
        .header("stream-incarnation", "0000000000000001")
        .send()
        .await
        .refused(412);
    s.head("/demo/s").send().await.expect(404);
    let inc = s
        .create("/demo/s", OCTET)
        .await
        .header("stream-incarnation")
        .expect("token")
        .to_owned();
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
    let s = Server::new();
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
    let s = Server::new();
    let inc = s
        .create("/demo/s", OCTET)
        .await
        .header("stream-incarnation")
        .expect("token")
        .to_owned();
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
    let s = Server::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..50 {
        let inc = s
            .create("/demo/s", OCTET)
            .await
            .header("stream-incarnation")
            .expect("token")
            .to_owned();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
    s.put("/demo/s")
        .header("stream-seq", "5")
        .send()
        .await
        .expect(201);
    let p = |r: router_common::Req, seq: &str| {
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let s = Server::new();
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
    let p = |r: router_common::Req| {
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
    let s = Server::new();
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
