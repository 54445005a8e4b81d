//! Buckets, IDs, routes, create, append, close and JSON mode, in-process against the router. Line refs are to the spec dump
//! (`000_4b3aba8c7a20e2ce.txt`); rule IDs to the checklist in `protocol.md`.

use crate::harness::router::Headers;
use crate::harness::router::Server;
use crate::harness::router::off;
use axum::http::Method;

const OCTET: &str = "application/octet-stream";
const JSON: &str = "application/json";

// ---------------------------------------------------------------------------------------------
// Buckets and IDs (RT-1, ID-1..ID-8)

#[tokio::test]
async fn bucket_put_answers_201_for_a_valid_id_on_every_call() {
    let s = Server::new().await;
    for path in ["/demo", "/demo", "/a_b-9", &format!("/{}", "a".repeat(64))] {
        let r = s.put(path).expect(201).await;
        r.expect_no_header("stream-incarnation");
    }
}

#[tokio::test]
async fn invalid_or_reserved_bucket_ids_are_refused_with_400() {
    let s = Server::new().await;
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
        s.put(bad).refused_with(400, "bucket").await;
    }
    // The same rules hold when the bucket carries a stream.
    for bad in ["/Demo/x", "/snapshots/x", "/__v1/x", "/abc/x"] {
        s.put(bad).refused_with(400, "bucket").await;
        s.get(bad).refused(400).await;
    }
}

#[tokio::test]
async fn a_bucket_answers_405_with_allow_for_methods_other_than_put_and_400_for_an_invalid_id() {
    let s = Server::new().await;
    for m in [Method::GET, Method::POST, Method::DELETE] {
        let r = s.req(m.clone(), "/demo").refused(405).await;
        assert_eq!(r.header("allow"), Some("PUT, OPTIONS"));
        // AMB-14: an invalid ID is a 400 whatever the method.
        s.req(m, "/Demo").refused_with(400, "bucket").await;
    }
}

#[tokio::test]
async fn the_bucket_and_stream_pair_is_capped_at_122_bytes() {
    let s = Server::new().await;
    let bucket = "b".repeat(64);
    // A 4-byte bucket leaves 117 bytes for the stream.
    for (bucket, stream_len, fits) in [
        (bucket.as_str(), 57, true),
        (bucket.as_str(), 58, false),
        ("demo", 117, true),
        ("demo", 118, false),
        ("demo", 5000, false),
    ] {
        let put = s.put(&format!("/{bucket}/{}", "s".repeat(stream_len)));
        if fits {
            put.expect(201).await;
        } else {
            put.refused_with(400, "122").await;
        }
    }
}

#[tokio::test]
async fn reserved_or_forbidden_stream_ids_are_refused_with_400_on_every_method() {
    let s = Server::new().await;
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
            // Every answer but HEAD's says what was wrong.
            s.req(m, path).ctype(OCTET).body("x").answers(400).await;
        }
    }
}

#[tokio::test]
async fn subresource_names_and_percent_encoded_utf8_stay_valid_stream_ids() {
    let s = Server::new().await;
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
        s.put(&path).expect(201).await;
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
    let s = Server::with_stream("/demo/s", OCTET, "").await;
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
        s.req(m, path).refused(404).await;
    }
}

#[tokio::test]
async fn removed_snapshot_routes_answer_405() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    for r in [
        s.get("/demo/s/snapshot"),
        s.put("/demo/s/snapshot?record=1").body("x"),
        s.delete(&format!("/demo/s/snapshot/{}", off(0))),
    ] {
        r.refused(405).await;
    }
}

#[tokio::test]
async fn an_unknown_method_on_a_stream_answers_405_with_allow() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let r = s.req(Method::PATCH, "/demo/s").refused(405).await;
    let allow = r.header("allow").expect("405 carries Allow");
    for m in ["GET", "HEAD", "PUT", "POST", "DELETE"] {
        assert!(allow.contains(m), "Allow {allow:?} lacks {m}");
    }
    for (m, path) in [
        (Method::POST, "/__ursula/metrics".to_owned()),
        (Method::DELETE, "/demo/s/bootstrap".to_owned()),
        (Method::GET, format!("/demo/s/retention/{}", off(0))),
    ] {
        s.req(m, &path).refused(405).await;
    }
}

#[tokio::test]
async fn every_response_carries_cors_and_nosniff_and_options_answers_204() {
    let s = Server::new().await;
    let r = s
        .req(Method::OPTIONS, "/demo/s")
        .header("access-control-request-headers", "stream-seq")
        .expect(204)
        .await;
    r.expect_header("access-control-allow-headers", "stream-seq");
    assert!(
        r.header("access-control-allow-methods")
            .is_some_and(|m| m.contains("POST"))
    );
    for r in [
        r,
        s.get("/demo/missing").expect(404).await,
        s.put("/demo/s").expect(201).await,
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
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    let r = s.get("/__ursula/ready").expect(200).await;
    let ready: serde_json::Value = serde_json::from_slice(&r.body).expect("ready is JSON");
    assert_eq!(ready["ready"], true);
    let r = s.get("/__ursula/metrics").expect(200).await;
    let m: serde_json::Value = serde_json::from_slice(&r.body).expect("metrics is JSON");
    assert_eq!(m["streams"], 1);
    let engine = if crate::harness::router::raft_engine() {
        "raft"
    } else {
        "memory"
    };
    assert_eq!(m["engine"], engine);
    assert_eq!(m["core_count"], 2);
}

// ---------------------------------------------------------------------------------------------
// Create (CR-*)

#[tokio::test]
async fn create_answers_201_with_location_type_offset_and_incarnation_but_no_etag() {
    let s = Server::new().await;
    let r = s
        .put("/demo/s")
        .ctype("Text/Plain ; Charset=UTF-8")
        .body("hello")
        .expect(201)
        .await;
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
        .expect(201)
        .await;
    r.expect_header("location", "http://example.test:4437/demo/t");
    // An empty create defaults to octet-stream.
    let h = s.head("/demo/t").expect(200).await;
    h.expect_header("content-type", OCTET);
}

#[tokio::test]
async fn repeating_a_create_with_the_same_config_answers_200_and_ignores_body_and_stream_seq() {
    let s = Server::new().await;
    let first = s
        .put("/demo/s")
        .ctype(JSON)
        .header("stream-ttl", "600")
        .body("[1,2]")
        .expect(201)
        .await;
    let again = s
        .put("/demo/s")
        .ctype("application/JSON")
        .header("stream-ttl", "600")
        .header("stream-seq", "zzz")
        .header("stream-attrs", "ignored=1")
        .body("[3]")
        .expect(200)
        .await;
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
        .expect(204)
        .await;
}

#[tokio::test]
async fn create_of_an_existing_stream_with_another_config_answers_409() {
    let s = Server::with_stream("/demo/j", JSON, "").await;
    const TTL: &str = "stream-ttl";
    const AT: &str = "stream-expires-at";
    const CT: &str = "content-type";
    let puts: [(&str, Headers, u16); 10] = [
        ("/demo/j", &[], 409), // no Content-Type means octet-stream (AMB-22)
        ("/demo/j", &[(CT, "application/json; charset=utf-8")], 409),
        ("/demo/j", &[(CT, JSON), (TTL, "60")], 409),
        ("/demo/ttl", &[(TTL, "60")], 201),
        ("/demo/ttl", &[], 409),
        ("/demo/ttl", &[(TTL, "61")], 409),
        ("/demo/ttl", &[(AT, "2099-01-01T00:00:00Z")], 409),
        ("/demo/at", &[(AT, "2099-01-01T00:00:00Z")], 201),
        ("/demo/at", &[(AT, "2099-01-01T01:00:00+01:00")], 200),
        ("/demo/at", &[(AT, "2099-01-01T00:00:01Z")], 409),
    ];
    for (path, headers, status) in puts {
        s.put(path).headers(headers).answers(status).await;
    }
}

#[tokio::test]
async fn closed_state_must_match_on_an_existing_stream() {
    let s = Server::new().await;
    for status in [201, 200] {
        s.put("/demo/open").expect(status).await;
    }
    s.put("/demo/open")
        .header("stream-closed", "true")
        .refused(409)
        .await;
    let r = s
        .put("/demo/closed")
        .header("stream-closed", "true")
        .body("final")
        .expect(201)
        .await;
    r.expect_header("stream-closed", "true");
    r.expect_header("stream-next-offset", &off(5));
    s.put("/demo/closed").refused(409).await;
    s.put("/demo/closed")
        .header("stream-closed", "TRUE")
        .expect(200)
        .await
        .expect_header("stream-closed", "true");
    assert_eq!(s.read_all("/demo/closed").await, b"final");
}

#[tokio::test]
async fn stream_closed_counts_only_as_true_in_any_case() {
    let s = Server::new().await;
    for (i, v) in ["false", "yes", "1", "", "true-ish"].iter().enumerate() {
        let path = format!("/demo/s{i}");
        s.put(&path)
            .header("stream-closed", v)
            .expect(201)
            .await
            .expect_no_header("stream-closed");
        // A POST with an empty body and a non-true value is an empty append.
        s.post(&path).header("stream-closed", v).refused(400).await;
        s.append(&path, OCTET, "still open").await;
    }
    s.put("/demo/t").expect(201).await;
    s.post("/demo/t")
        .header("stream-closed", "True")
        .expect(204)
        .await
        .expect_header("stream-closed", "true");
}

#[tokio::test]
async fn a_json_create_flattens_an_initial_array_and_accepts_an_empty_one() {
    let s = Server::new().await;
    let r = s
        .put("/demo/j")
        .ctype(JSON)
        .body(r#"[ {"a" : 1}, [2, 3] ]"#)
        .expect(201)
        .await;
    r.expect_header("stream-next-offset", &off(14));
    assert_eq!(s.read_all("/demo/j").await, b"{\"a\":1}\n[2,3]\n");
    s.put("/demo/e")
        .ctype(JSON)
        .body("[]")
        .expect(201)
        .await
        .expect_header("stream-next-offset", &off(0));
}

#[tokio::test]
async fn a_create_with_invalid_json_answers_400_and_creates_nothing() {
    let s = Server::new().await;
    for bad in ["{", "{} {}", "[1,]", "\u{1}", "nul"] {
        s.put("/demo/j")
            .ctype(JSON)
            .body(bad)
            .refused_with(400, "json")
            .await;
        s.head("/demo/j").expect(404).await;
    }
    s.put("/demo/j")
        .ctype(JSON)
        .body(&b"\"\xff\""[..])
        .refused(400)
        .await;
    s.head("/demo/j").expect(404).await;
}

#[tokio::test]
async fn a_create_with_a_producer_seq_other_than_zero_answers_409() {
    let s = Server::new().await;
    s.put("/demo/s").producer("p", 0, 1).refused(409).await;
    s.head("/demo/s").expect(404).await;
    let r = s
        .put("/demo/s")
        .producer("p", 0, 0)
        .body("a")
        .expect(201)
        .await;
    r.expect_header("producer-epoch", "0")
        .expect_header("producer-seq", "0");
    // The create was seq 0: repeating it as an append is a duplicate, seq 1 is next.
    let append = |seq: u64, body: &'static str| {
        s.post("/demo/s")
            .ctype(OCTET)
            .producer("p", 0, seq)
            .body(body)
    };
    append(0, "a").expect(204).await;
    append(1, "b").expect(200).await;
    assert_eq!(s.read_all("/demo/s").await, b"ab");
}

#[tokio::test]
async fn lifetime_headers_are_validated_and_exclusive() {
    let s = Server::new().await;
    s.put("/demo/s")
        .header("stream-ttl", "60")
        .header("stream-expires-at", "2099-01-01T00:00:00Z")
        .refused(400)
        .await;
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
            .refused_with(400, "stream-ttl")
            .await;
    }
    for bad in ["tomorrow", "2099-01-01", "2099-01-01 00:00:00"] {
        s.put("/demo/s")
            .header("stream-expires-at", bad)
            .refused_with(400, "stream-expires-at")
            .await;
    }
    s.put("/demo/s")
        .header("stream-ttl", "1")
        .header("stream-ttl", "1")
        .refused(400)
        .await;
    s.head("/demo/s").expect(404).await;
    for r in [
        s.put("/demo/s")
            .header("stream-ttl", "3600")
            .expect(201)
            .await,
        s.head("/demo/s").expect(200).await,
    ] {
        r.expect_header("stream-ttl", "3600")
            .expect_no_header("stream-expires-at");
    }
    let r = s
        .put("/demo/e")
        .header("stream-expires-at", "2099-01-01T00:00:00+00:00")
        .expect(201)
        .await;
    r.expect_header("stream-expires-at", "2099-01-01T00:00:00Z");
    let h = s.head("/demo/e").expect(200).await;
    h.expect_header("stream-expires-at", "2099-01-01T00:00:00Z")
        .expect_no_header("stream-ttl");
}

#[tokio::test]
async fn a_stream_with_a_past_expiry_is_gone_at_once_and_can_be_created_again() {
    let s = Server::new().await;
    let first = s
        .put("/demo/s")
        .header("stream-expires-at", "2000-01-01T00:00:00Z")
        .expect(201)
        .await;
    s.head("/demo/s").expect(404).await;
    s.get("/demo/s?offset=-1").refused(404).await;
    s.post("/demo/s").ctype(OCTET).body("x").refused(404).await;
    let second = s.put("/demo/s").expect(201).await;
    assert_ne!(
        first.header("stream-incarnation"),
        second.header("stream-incarnation")
    );
}

// ---------------------------------------------------------------------------------------------
// Append and close (AP-*, CL-*)

#[tokio::test]
async fn post_never_creates_a_stream() {
    let s = Server::new().await;
    s.post("/demo/s").ctype(OCTET).body("x").refused(404).await;
    s.post("/demo/s")
        .header("stream-closed", "true")
        .refused(404)
        .await;
    s.head("/demo/s").expect(404).await;
}

#[tokio::test]
async fn an_append_answers_204_with_the_new_tail_and_incarnation_and_no_etag() {
    let s = Server::new().await;
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
    let minimal = [("prefer", "return=minimal")];
    s.append_with("/demo/s", OCTET, &minimal, "d")
        .expect(204)
        .await;
    assert_eq!(s.read_all("/demo/s").await, b"abcd");
}

#[tokio::test]
async fn append_refusals_of_malformed_requests_answer_400_and_store_nothing() {
    let s = Server::with_stream("/demo/s", OCTET, "keep").await;
    let post = || s.post("/demo/s");
    // Each refusal, and what its body names when it names anything.
    for (req, names) in [
        (post().body("x"), Some("content-type")),
        (post().ctype(OCTET), None),
        (post().ctype("not a type").body("x"), Some("content-type")),
        (post().ctype(OCTET).ctype(OCTET).body("x"), None),
        (
            post()
                .ctype(OCTET)
                .header("stream-record-match", "1")
                .body("x"),
            Some("stream-record-match"),
        ),
        (
            post()
                .ctype(OCTET)
                .header("content-length", "ten")
                .body("x"),
            Some("content-length"),
        ),
    ] {
        match names {
            Some(needle) => req.refused_with(400, needle).await,
            None => req.refused(400).await,
        };
    }
    assert_eq!(s.read_all("/demo/s").await, b"keep");
}

#[tokio::test]
async fn a_content_type_mismatch_answers_409_with_the_tail_and_no_closed_or_producer_headers() {
    let s = Server::with_stream("/demo/j", JSON, "1").await;
    for other in ["application/json; charset=utf-8", "text/plain", OCTET] {
        let r = s.post("/demo/j").ctype(other).body("2").refused(409).await;
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
    // The spec: with an empty body servers MUST NOT reject based on Content-Type.
    let s = Server::with_stream("/demo/s", JSON, "").await;
    let close_as =
        |path: &str, ctype: &str| s.post(path).ctype(ctype).header("stream-closed", "true");
    let r = close_as("/demo/s", "garbage").expect(204).await;
    r.expect_header("stream-closed", "true");
    s.create("/demo/t", JSON).await;
    close_as("/demo/t", "text/plain").expect(204).await;
}

#[tokio::test]
async fn closing_is_idempotent_and_later_appends_answer_409_with_the_final_offset() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let r = s
        .post("/demo/s")
        .ctype(OCTET)
        .header("stream-closed", "true")
        .body("last")
        .expect(204)
        .await;
    r.expect_header("stream-closed", "true")
        .expect_header("stream-next-offset", &off(4));
    for _ in 0..2 {
        let r = s.close("/demo/s").await;
        r.expect_header("stream-closed", "true")
            .expect_header("stream-next-offset", &off(4));
    }
    let r = s
        .post("/demo/s")
        .ctype(OCTET)
        .body("more")
        .refused(409)
        .await;
    r.expect_header("stream-closed", "true")
        .expect_header("stream-next-offset", &off(4));
    let r = s
        .post("/demo/s")
        .ctype(OCTET)
        .header("stream-closed", "true")
        .body("more")
        .refused(409)
        .await;
    r.expect_header("stream-closed", "true");
    // Reads see EOF at the tail; the data stays readable.
    let r = s.get_at("/demo/s", 4).expect(200).await;
    r.expect_header("stream-closed", "true")
        .expect_header("stream-up-to-date", "true");
    assert!(r.body.is_empty());
    assert_eq!(s.read_all("/demo/s").await, b"last");
    s.head("/demo/s")
        .expect(200)
        .await
        .expect_header("stream-closed", "true");
}

// ---------------------------------------------------------------------------------------------
// JSON mode (JS-*)

#[tokio::test]
async fn json_appends_are_validated_flattened_and_stored_as_written_minus_whitespace() {
    let s = Server::with_stream("/demo/j", JSON, "").await;
    s.append("/demo/j", JSON, r#" { "b" : 1 , "a" : 2 , "a" : 1.50e3 } "#)
        .await;
    s.append("/demo/j", JSON, r#"[[1,2],"\ud800",1e400]"#).await;
    s.append("/demo/j", JSON, "[[[1]]]").await;
    let body = s.read_all("/demo/j").await;
    assert_eq!(
        String::from_utf8_lossy(&body),
        "{\"b\":1,\"a\":2,\"a\":1.50e3}\n[1,2]\n\"\\ud800\"\n1e400\n[[1]]\n"
    );
    let r = s.get("/demo/j?offset=-1").expect(200).await;
    r.expect_header("content-type", "application/x-ndjson");
    s.head("/demo/j")
        .expect(200)
        .await
        .expect_header("content-type", JSON);
}

#[tokio::test]
async fn invalid_json_an_empty_array_or_a_too_deep_message_answer_400_and_commit_nothing() {
    let s = Server::with_stream("/demo/j", JSON, "[1]").await;
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
            .refused(400)
            .await;
    }
    // 128 levels as one body is an array of 127-deep messages.
    s.append("/demo/j", JSON, deep(128)).await;
    let body = s.read_all("/demo/j").await;
    assert_eq!(body, format!("1\n{}\n", deep(127)).as_bytes());
}
