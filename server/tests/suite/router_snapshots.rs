//! Snapshots, retention and bootstrap (SN-*, RET-*, BS-* in `protocol.md`), including parsing
//! the bootstrap `multipart/mixed` body.

use crate::harness::router::Resp;
use crate::harness::router::Server;
use crate::harness::router::off;

const OCTET: &str = "application/octet-stream";
const JSON: &str = "application/json";

fn snap(offset: u64) -> String {
    format!("/demo/s/snapshot/{}", off(offset))
}

fn retain(offset: u64) -> String {
    format!("/demo/s/retention/{}", off(offset))
}

/// Asserts that HEAD on `/demo/s` reports `header` at the byte offset `at`.
async fn head_reports(s: &Server, header: &str, at: u64) {
    s.head("/demo/s")
        .expect(200)
        .await
        .expect_header(header, &off(at));
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One part of a bootstrap body: its `Content-Type` and bytes.
#[derive(Debug, PartialEq, Eq)]
struct Part {
    ctype: String,
    body: Vec<u8>,
}

/// Parses an RFC 2046 `multipart/mixed` body, checking its framing on the way.
fn parse_multipart(r: &Resp) -> (String, Vec<Part>) {
    let ctype = r
        .header("content-type")
        .expect("bootstrap has a Content-Type");
    let boundary = ctype
        .strip_prefix("multipart/mixed; boundary=")
        .unwrap_or_else(|| panic!("not multipart: {ctype}"));
    assert!(
        !boundary.is_empty() && boundary.len() <= 70,
        "boundary {boundary:?}"
    );
    let body = &r.body[..];
    let open = format!("--{boundary}");
    assert!(
        body.starts_with(open.as_bytes()),
        "the body starts with the first delimiter"
    );
    let delimiter = format!("\r\n--{boundary}");
    let mut rest = &body[open.len()..];
    let mut parts = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix(b"--") {
            assert!(
                after == b"\r\n" || after.is_empty(),
                "nothing follows the close delimiter: {after:?}"
            );
            break;
        }
        rest = rest
            .strip_prefix(b"\r\n")
            .expect("a delimiter line ends in CRLF");
        let end = find(rest, delimiter.as_bytes()).expect("every part ends at a delimiter");
        let part = &rest[..end];
        let head_end = find(part, b"\r\n\r\n").expect("part headers end in a blank line");
        let head = std::str::from_utf8(&part[..head_end]).expect("part headers are ASCII");
        let ctype = head
            .split("\r\n")
            .find_map(|l| l.strip_prefix("Content-Type: "))
            .unwrap_or_else(|| panic!("part without Content-Type: {head:?}"))
            .to_owned();
        parts.push(Part {
            ctype,
            body: part[head_end + 4..].to_vec(),
        });
        rest = &rest[end + delimiter.len()..];
    }
    (boundary.to_owned(), parts)
}

fn part(ctype: &str, body: &[u8]) -> Part {
    Part {
        ctype: ctype.to_owned(),
        body: body.to_vec(),
    }
}

// ---------------------------------------------------------------------------------------------
// Snapshots

#[tokio::test]
async fn a_snapshot_publish_answers_204_and_head_and_reads_report_it() {
    let s = Server::with_stream("/demo/s", JSON, r#"[{"a":1},{"b":2}]"#).await;
    let inc = s.incarnation("/demo/s").await;
    let r = s
        .put(&snap(8))
        .ctype("Application/CBOR")
        .body(&b"\x01\x02state"[..])
        .expect(204)
        .await;
    r.expect_header("stream-snapshot-offset", &off(8))
        .expect_header("stream-next-offset", &off(16));
    r.expect_header("stream-incarnation", &inc)
        .expect_no_header("x-ursula-not-applied");
    let digest = r
        .header("stream-snapshot-digest")
        .expect("publish returns the digest")
        .to_owned();
    let h = s.head("/demo/s").expect(200).await;
    h.expect_header("stream-snapshot-offset", &off(8))
        .expect_header("stream-snapshot-digest", &digest);
    h.expect_header("stream-retained-offset", &off(0));
    let r = s.get(&snap(8)).expect(200).await;
    assert_eq!(&r.body[..], b"\x01\x02state");
    r.expect_header("content-type", "application/cbor")
        .expect_header("stream-snapshot-offset", &off(8));
    r.expect_header("stream-snapshot-digest", &digest)
        .expect_header("stream-next-offset", &off(8));
    r.expect_header("stream-incarnation", &inc)
        .expect_no_header("stream-up-to-date");
    // Publishing moved nothing: the whole stream is still readable, without snapshot bytes.
    assert_eq!(s.read_all("/demo/s").await, b"{\"a\":1}\n{\"b\":2}\n");
}

#[tokio::test]
async fn a_snapshot_at_the_tail_reads_as_up_to_date_and_defaults_to_octet_stream() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    s.put(&snap(3)).body("st").expect(204).await;
    let r = s.get(&snap(3)).expect(200).await;
    r.expect_header("content-type", OCTET)
        .expect_header("stream-up-to-date", "true");
    s.append("/demo/s", OCTET, "d").await;
    s.get(&snap(3))
        .expect(200)
        .await
        .expect_no_header("stream-up-to-date");
}

#[tokio::test]
async fn republishing_the_same_snapshot_is_idempotent_and_different_content_answers_409() {
    let s = Server::with_stream("/demo/s", OCTET, "abcdef").await;
    let publish = |ctype: &str, body: &'static str| s.put(&snap(3)).ctype(ctype).body(body);
    let first = publish("text/plain", "S").expect(204).await;
    let again = publish("TEXT/PLAIN", "S").expect(204).await;
    assert_eq!(
        first.header("stream-snapshot-digest"),
        again.header("stream-snapshot-digest")
    );
    publish("text/plain", "T").refused(409).await;
    publish(OCTET, "S").refused(409).await;
    assert_eq!(&s.get(&snap(3)).expect(200).await.body[..], b"S");
}

#[tokio::test]
async fn a_newer_snapshot_replaces_the_old_one_and_stale_or_future_publishes_answer_409() {
    let s = Server::with_stream("/demo/s", OCTET, "abcdef").await;
    s.put(&snap(2)).body("two").expect(204).await;
    s.put(&snap(4)).body("four").expect(204).await;
    s.get(&snap(2)).refused(404).await;
    s.put(&snap(3)).body("three").refused(409).await;
    s.put(&snap(7)).body("seven").refused(409).await;
    head_reports(&s, "stream-snapshot-offset", 4).await;
}

#[tokio::test]
async fn a_json_snapshot_must_sit_on_a_message_boundary() {
    let s = Server::with_stream("/demo/s", JSON, r#"[{"a":1},{"b":2}]"#).await;
    for inside in [1, 5, 7, 9, 15] {
        s.put(&snap(inside))
            .body("x")
            .refused_with(400, "boundary")
            .await;
    }
    for boundary in [0, 8, 16] {
        s.put(&snap(boundary)).body("x").expect(204).await;
    }
}

#[tokio::test]
async fn malformed_snapshot_publishes_answer_400_and_missing_streams_404() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    for bad in ["42", "-1", "now", "0000000000000000000x", "%FF"] {
        s.put(&format!("/demo/s/snapshot/{bad}"))
            .body("x")
            .refused(400)
            .await;
    }
    // Each bad header, and what the refusal names when it names anything.
    for (header, value, names) in [
        ("stream-snapshot-match", "x", Some("stream-snapshot-match")),
        ("content-type", "not a type", Some("content-type")),
        ("stream-incarnation", "bad", None),
    ] {
        let req = s.put(&snap(1)).header(header, value).body("x");
        match names {
            Some(needle) => req.refused_with(400, needle).await,
            None => req.refused(400).await,
        };
    }
    s.head("/demo/s")
        .expect(200)
        .await
        .expect_no_header("stream-snapshot-offset");
    s.put("/demo/missing/snapshot/00000000000000000000")
        .body("x")
        .refused(404)
        .await;
    // A percent-encoded offset is decoded first.
    let encoded = "/demo/s/snapshot/0000000000000000000%31";
    s.put(encoded).body("x").expect(204).await;
}

#[tokio::test]
async fn reading_a_snapshot_that_does_not_exist_answers_404() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    s.get(&snap(0)).refused(404).await;
    s.put(&snap(2)).body("x").expect(204).await;
    for path in [
        snap(1),
        "/demo/s/snapshot/2".to_owned(),
        "/demo/missing/snapshot/00000000000000000000".to_owned(),
    ] {
        s.get(&path).refused(404).await;
    }
    s.get(&snap(2))
        .header("stream-incarnation", "0000000000000001")
        .refused(412)
        .await;
}

#[tokio::test]
async fn a_snapshot_over_32_mib_answers_413_without_a_refusal_marker() {
    // The spec: snapshot and retention PUTs carry no marker.
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    let r = s
        .put(&snap(3))
        .header("content-length", "33554433")
        .body("x")
        .refused(413)
        .await;
    r.expect_no_header("x-ursula-not-applied");
    s.put(&snap(3)).body(vec![7u8; 32 << 20]).expect(204).await;
}

// ---------------------------------------------------------------------------------------------
// Retention

#[tokio::test]
async fn retention_answers_204_with_the_requested_offset_and_reads_below_it_answer_410() {
    let s = Server::with_stream("/demo/s", OCTET, "abcdef").await;
    let inc = s.incarnation("/demo/s").await;
    s.put(&snap(4)).body("x").expect(204).await;
    let r = s.put(&retain(3)).expect(204).await;
    r.expect_header("stream-retained-offset", &off(3))
        .expect_header("stream-incarnation", &inc);
    assert!(r.body.is_empty());
    for q in [
        "",
        "?offset=-1",
        "?offset=00000000000000000002",
        "?offset=-1&live=long-poll",
    ] {
        let r = s.get(&format!("/demo/s{q}")).refused(410).await;
        r.expect_header("stream-next-offset", &off(3));
    }
    head_reports(&s, "stream-retained-offset", 3).await;
    let r = s.get_at("/demo/s", 3).expect(200).await;
    assert_eq!(&r.body[..], b"def");
    s.get("/demo/s?offset=now").expect(200).await;
}

#[tokio::test]
async fn retention_past_latest_snapshot_is_refused_with_400() {
    let s = Server::with_stream("/demo/s", OCTET, "abcdef").await;
    s.put(&retain(1)).refused_with(400, "snapshot").await; // no snapshot at all
    s.put(&snap(2)).body("x").expect(204).await;
    s.put(&retain(3)).refused_with(400, "snapshot").await;
    s.put(&retain(2)).expect(204).await;
    head_reports(&s, "stream-retained-offset", 2).await;
}

#[tokio::test]
async fn retention_never_moves_backward_and_repeating_it_is_harmless() {
    let s = Server::with_stream("/demo/s", OCTET, "abcdef").await;
    s.put(&snap(6)).body("x").expect(204).await;
    s.put(&retain(4)).expect(204).await;
    s.put(&retain(4))
        .expect(204)
        .await
        .expect_header("stream-retained-offset", &off(4));
    s.put(&retain(3)).refused_with(400, "backward").await;
    s.put(&retain(9)).refused(400).await;
    head_reports(&s, "stream-retained-offset", 4).await;
}

#[tokio::test]
async fn json_retention_must_sit_on_a_message_boundary() {
    let s = Server::with_stream("/demo/s", JSON, r#"[{"a":1},{"b":2}]"#).await;
    s.put(&snap(16)).body("x").expect(204).await;
    s.put(&retain(5)).refused_with(400, "boundary").await;
    s.put(&retain(8)).expect(204).await;
    assert_eq!(s.read_all_from("/demo/s", 8).await, b"{\"b\":2}\n");
}

#[tokio::test]
async fn malformed_retention_requests_answer_400_and_missing_streams_404() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    for bad in ["3", "-1", "now", "+0000000000000000003"] {
        s.put(&format!("/demo/s/retention/{bad}"))
            .refused(400)
            .await;
    }
    s.put("/demo/missing/retention/00000000000000000000")
        .refused(404)
        .await;
}

#[tokio::test]
async fn a_snapshot_below_the_retained_offset_answers_410() {
    let s = Server::with_stream("/demo/s", OCTET, "abcdef").await;
    s.put(&snap(4)).body("x").expect(204).await;
    s.put(&retain(4)).expect(204).await;
    s.put(&snap(2)).body("y").refused(410).await;
    s.put(&snap(5)).body("y").expect(204).await;
}

#[tokio::test]
async fn retention_frees_whole_segments_and_keeps_every_retained_byte_readable() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let mut all = Vec::new();
    for i in 0..4u8 {
        let chunk = vec![b'a' + i; 600 * 1024];
        all.extend_from_slice(&chunk);
        s.append("/demo/s", OCTET, chunk).await;
    }
    let cut = 1_300_000u64;
    s.put(&snap(cut)).body("x").expect(204).await;
    s.put(&retain(cut)).expect(204).await;
    s.get_at("/demo/s", cut - 1).refused(410).await;
    assert_eq!(s.read_all_from("/demo/s", cut).await, &all[cut as usize..]);
}

// ---------------------------------------------------------------------------------------------
// Bootstrap

#[tokio::test]
async fn bootstrap_without_a_snapshot_sends_an_empty_first_part_and_the_updates_as_one_part() {
    let s = Server::with_stream("/demo/s", "text/plain", "line one\nline two\n").await;
    s.append("/demo/s", "text/plain", "three").await;
    let inc = s.incarnation("/demo/s").await;
    let r = s.get("/demo/s/bootstrap").expect(200).await;
    r.expect_header("stream-snapshot-offset", "-1")
        .expect_header("stream-next-offset", &off(23));
    r.expect_header("stream-up-to-date", "true")
        .expect_header("cache-control", "no-store");
    r.expect_header("stream-incarnation", &inc)
        .expect_no_header("stream-closed");
    let (_, parts) = parse_multipart(&r);
    assert_eq!(
        parts,
        vec![
            part(OCTET, b""),
            part("text/plain", b"line one\nline two\nthree")
        ]
    );
}

#[tokio::test]
async fn bootstrap_of_a_json_stream_sends_one_part_per_message_after_the_snapshot() {
    let s = Server::with_stream("/demo/s", JSON, r#"[{"a":1},{"b":2}]"#).await;
    s.append("/demo/s", JSON, r#"[{"c":3},[4]]"#).await;
    s.put(&snap(8))
        .ctype("application/cbor")
        .body(&b"\x00snap\r\n--x"[..])
        .expect(204)
        .await;
    let r = s.get("/demo/s/bootstrap").expect(200).await;
    r.expect_header("stream-snapshot-offset", &off(8))
        .expect_header("stream-next-offset", &off(28));
    r.expect_header("stream-up-to-date", "true");
    let (_, parts) = parse_multipart(&r);
    assert_eq!(
        parts,
        vec![
            part("application/cbor", b"\x00snap\r\n--x"),
            part(JSON, b"{\"b\":2}\n"),
            part(JSON, b"{\"c\":3}\n"),
            part(JSON, b"[4]\n"),
        ]
    );
}

#[tokio::test]
async fn bootstrap_with_a_snapshot_at_the_tail_of_a_closed_stream_is_complete_and_closed() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    s.post("/demo/s")
        .header("stream-closed", "true")
        .expect(204)
        .await;
    s.put(&snap(3)).body("S").expect(204).await;
    let r = s.get("/demo/s/bootstrap").expect(200).await;
    r.expect_header("stream-next-offset", &off(3))
        .expect_header("stream-up-to-date", "true");
    r.expect_header("stream-closed", "true");
    let (_, parts) = parse_multipart(&r);
    assert_eq!(parts, vec![part(OCTET, b"S")]);
}

#[tokio::test]
async fn bootstrap_after_retention_starts_its_updates_at_the_snapshot() {
    let s = Server::with_stream("/demo/s", OCTET, "abcdef").await;
    s.put(&snap(4)).body("S").expect(204).await;
    s.put(&retain(2)).expect(204).await;
    let r = s.get("/demo/s/bootstrap").expect(200).await;
    let (_, parts) = parse_multipart(&r);
    assert_eq!(parts, vec![part(OCTET, b"S"), part(OCTET, b"ef")]);
    r.expect_header("stream-next-offset", &off(6));
}

#[tokio::test]
async fn every_bootstrap_uses_a_fresh_128_bit_boundary() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20 {
        let r = s.get("/demo/s/bootstrap").expect(200).await;
        let (boundary, _) = parse_multipart(&r);
        assert!(
            boundary.len() >= 32,
            "boundary {boundary:?} is shorter than 128 bits of hex"
        );
        assert!(seen.insert(boundary), "a boundary was reused");
    }
}

#[tokio::test]
async fn bootstrap_refuses_any_live_parameter_with_400_and_ignores_others() {
    let s = Server::with_stream("/demo/s", OCTET, "abc").await;
    for q in ["live=sse", "live=long-poll", "live=", "offset=-1&live=sse"] {
        s.get(&format!("/demo/s/bootstrap?{q}"))
            .refused_with(400, "live")
            .await;
    }
    s.get("/demo/s/bootstrap?offset=00000000000000000002&max_bytes=1")
        .expect(200)
        .await;
    s.get("/demo/missing/bootstrap").refused(404).await;
}

#[tokio::test]
async fn bootstrap_of_more_than_8_mib_of_binary_updates_returns_the_snapshot_part_alone() {
    let s = Server::with_stream("/demo/s", OCTET, vec![b'x'; 100]).await;
    s.put(&snap(100)).body("S").expect(204).await;
    s.append("/demo/s", OCTET, vec![b'y'; (8 << 20) + 1]).await;
    let r = s.get("/demo/s/bootstrap").expect(200).await;
    r.expect_header("stream-next-offset", &off(100))
        .expect_no_header("stream-up-to-date");
    let (_, parts) = parse_multipart(&r);
    assert_eq!(parts, vec![part(OCTET, b"S")]);
    // Exactly 8 MiB fits in one part.
    let t = Server::new().await;
    t.create("/demo/s", OCTET).await;
    t.append("/demo/s", OCTET, vec![b'y'; 8 << 20]).await;
    let r = t.get("/demo/s/bootstrap").expect(200).await;
    r.expect_header("stream-up-to-date", "true");
    assert_eq!(parse_multipart(&r).1.len(), 2);
}

#[tokio::test]
async fn bootstrap_of_more_than_8_mib_of_json_stops_at_the_last_boundary_that_fits() {
    let s = Server::with_stream("/demo/s", JSON, "").await;
    let msg = format!("\"{}\"", "m".repeat(999_998)); // one million bytes, plus the LF
    let body = format!("[{}]", [msg.as_str(); 9].join(","));
    s.append("/demo/s", JSON, body).await;
    let r = s.get("/demo/s/bootstrap").expect(200).await;
    let per = 1_000_001u64;
    r.expect_header("stream-next-offset", &off(8 * per))
        .expect_no_header("stream-up-to-date");
    let (_, parts) = parse_multipart(&r);
    assert_eq!(parts.len(), 1 + 8);
    assert!(
        parts[1..]
            .iter()
            .all(|p| p.ctype == JSON && p.body.len() == per as usize && p.body.ends_with(b"\"\n"))
    );
    // Ordinary reads carry on from there to the tail.
    assert_eq!(s.read_all_from("/demo/s", 8 * per).await.len() as u64, per);
}

#[tokio::test]
async fn bootstrap_always_includes_one_json_message_even_over_8_mib() {
    let s = Server::with_stream("/demo/s", JSON, "").await;
    let big = format!("\"{}\"", "b".repeat(9 << 20));
    s.append("/demo/s", JSON, format!("[{big},1]")).await;
    let r = s.get("/demo/s/bootstrap").expect(200).await;
    let first = big.len() as u64 + 1;
    r.expect_header("stream-next-offset", &off(first))
        .expect_no_header("stream-up-to-date");
    let (_, parts) = parse_multipart(&r);
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[1].body.len() as u64, first);
}
