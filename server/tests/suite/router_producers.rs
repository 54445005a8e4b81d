//! Producer idempotency (`Producer-Id`, `Producer-Epoch`, `Producer-Seq`): the validation table,
//! duplicates and their receipts, the receipt window, the producer cap, and how dedup orders
//! against closing and `Stream-Seq` (PR-*, CL-6, SQ-8 in `protocol.md`).

use crate::harness::router::Headers;
use crate::harness::router::Req;
use crate::harness::router::Resp;
use crate::harness::router::Server;
use crate::harness::router::off;

const OCTET: &str = "application/octet-stream";

const ID: &str = "producer-id";
const EPOCH: &str = "producer-epoch";
const SEQ: &str = "producer-seq";

/// A producer append of `body` to `path`, not yet sent.
fn append(s: &Server, path: &str, id: &str, epoch: u64, seq: u64, body: &str) -> Req {
    s.post(path)
        .ctype(OCTET)
        .producer(id, epoch, seq)
        .body(body.to_owned())
}

async fn send(s: &Server, id: &str, epoch: u64, seq: u64, body: &str) -> Resp {
    append(s, "/demo/s", id, epoch, seq, body).send().await
}

#[tokio::test]
async fn an_accepted_producer_append_answers_200_with_the_ack_and_an_empty_body() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let r = send(&s, "p", 7, 0, "abc").await.expect(200);
    r.expect_header("producer-epoch", "7")
        .expect_header("producer-seq", "0");
    r.expect_header("stream-next-offset", &off(3));
    assert!(r.header("stream-incarnation").is_some());
    assert!(r.body.is_empty());
    let r = send(&s, "p", 7, 1, "de").await.expect(200);
    r.expect_header("producer-seq", "1")
        .expect_header("stream-next-offset", &off(5));
}

#[tokio::test]
async fn a_duplicate_answers_204_with_its_original_offset_and_the_highest_seq() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    send(&s, "p", 0, 0, "aa").await.expect(200);
    send(&s, "p", 0, 1, "bbb").await.expect(200);
    send(&s, "p", 0, 2, "c").await.expect(200);
    let r = send(&s, "p", 0, 0, "aa").await.expect(204);
    r.expect_header("stream-next-offset", &off(2))
        .expect_header("producer-epoch", "0")
        .expect_header("producer-seq", "2");
    let r = send(&s, "p", 0, 2, "c").await.expect(204);
    r.expect_header("stream-next-offset", &off(6));
    // A duplicate is recognised by its tuple alone: another body or type changes nothing.
    let text = s.append_with("/demo/s", "text/plain", &[], "zzz");
    text.producer("p", 0, 1).expect(204).await;
    assert_eq!(s.read_all("/demo/s").await, b"aabbbc");
}

#[tokio::test]
async fn a_seq_gap_answers_409_with_expected_and_received_and_uses_up_nothing() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    send(&s, "p", 0, 0, "a").await.expect(200);
    let r = send(&s, "p", 0, 5, "x").await.refused(409);
    r.expect_header("producer-expected-seq", "1")
        .expect_header("producer-received-seq", "5");
    r.expect_no_header("stream-closed")
        .expect_no_header("stream-next-offset");
    send(&s, "p", 0, 1, "b").await.expect(200);
    assert_eq!(s.read_all("/demo/s").await, b"ab");
}

#[tokio::test]
async fn an_older_epoch_answers_403_with_the_current_epoch() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    send(&s, "p", 5, 0, "a").await.expect(200);
    let r = send(&s, "p", 4, 1, "x").await.refused(403);
    r.expect_header("producer-epoch", "5");
    send(&s, "p", 4, 0, "x").await.refused(403);
    assert_eq!(s.read_all("/demo/s").await, b"a");
}

#[tokio::test]
async fn a_new_epoch_must_start_at_seq_zero_and_drops_the_old_epochs_receipts() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    send(&s, "p", 1, 0, "a").await.expect(200);
    send(&s, "p", 1, 1, "b").await.expect(200);
    send(&s, "p", 2, 1, "x").await.refused(400);
    let r = send(&s, "p", 2, 0, "c").await.expect(200);
    r.expect_header("producer-epoch", "2")
        .expect_header("producer-seq", "0");
    // The old epoch is fenced now.
    send(&s, "p", 1, 1, "b").await.refused(403);
    send(&s, "p", 1, 2, "x").await.refused(403);
    assert_eq!(s.read_all("/demo/s").await, b"abc");
}

#[tokio::test]
async fn an_unknown_producer_must_start_at_seq_zero_or_gets_409_expecting_zero() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let r = send(&s, "fresh", 3, 4, "x").await.refused(409);
    r.expect_header("producer-expected-seq", "0")
        .expect_header("producer-received-seq", "4");
    send(&s, "fresh", 3, 0, "a").await.expect(200);
    assert_eq!(s.read_all("/demo/s").await, b"a");
}

#[tokio::test]
async fn malformed_producer_headers_answer_400_and_append_nothing() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let post = || s.post("/demo/s").ctype(OCTET).body("x");
    let long_id = "p".repeat(257);
    let cases: [Headers; 14] = [
        &[(ID, "p")],
        &[(ID, "p"), (EPOCH, "0")],
        &[(EPOCH, "0"), (SEQ, "0")],
        &[(SEQ, "0")],
        &[(ID, ""), (EPOCH, "0"), (SEQ, "0")],
        &[(ID, &long_id), (EPOCH, "0"), (SEQ, "0")],
        &[(ID, "p"), (EPOCH, "9007199254740992"), (SEQ, "0")],
        &[(ID, "p"), (EPOCH, "0"), (SEQ, "9007199254740992")],
        &[(ID, "p"), (EPOCH, "-1"), (SEQ, "0")],
        &[(ID, "p"), (EPOCH, "+1"), (SEQ, "0")],
        &[(ID, "p"), (EPOCH, "0"), (SEQ, "1.0")],
        &[(ID, "p"), (EPOCH, "0"), (SEQ, "0x1")],
        &[(ID, "p"), (EPOCH, "0"), (SEQ, "")],
        &[(ID, "p"), (EPOCH, "0"), (SEQ, "0"), (SEQ, "1")],
    ];
    for headers in cases {
        post().headers(headers).refused_with(400, "producer").await;
    }
    post()
        .header_bytes(ID, b"\xffp")
        .headers(&[(EPOCH, "0"), (SEQ, "0")])
        .refused_with(400, "producer")
        .await;
    assert_eq!(s.tail("/demo/s").await, off(0));
    // The limits themselves are accepted.
    send(&s, &"p".repeat(256), 9007199254740991, 0, "a")
        .await
        .expect(200);
}

#[tokio::test]
async fn producer_state_is_kept_per_stream() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    s.create("/demo/t", OCTET).await;
    send(&s, "p", 4, 0, "a").await.expect(200);
    send(&s, "p", 4, 1, "b").await.expect(200);
    // The same producer on another stream starts from nothing, even with an older epoch.
    append(&s, "/demo/t", "p", 1, 0, "c").expect(200).await;
    append(&s, "/demo/t", "p", 1, 5, "c").refused(409).await;
}

#[tokio::test]
async fn a_refused_409_uses_up_no_producer_seq() {
    let s = Server::new().await;
    s.put("/demo/s").header("stream-seq", "5").expect(201).await;
    send(&s, "p", 0, 0, "a").await.expect(200);
    append(&s, "/demo/s", "p", 0, 1, "x")
        .header("stream-seq", "1")
        .refused(409)
        .await;
    let text = s.append_with("/demo/s", "text/plain", &[], "x");
    text.producer("p", 0, 1).refused(409).await;
    // Seq 1 is still the next one, and it is not a duplicate.
    let r = send(&s, "p", 0, 1, "b").await.expect(200);
    r.expect_header("stream-next-offset", &off(2));
    assert_eq!(s.read_all("/demo/s").await, b"ab");
}

#[tokio::test]
async fn producer_dedup_runs_before_the_stream_seq_check() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    let req = || append(&s, "/demo/s", "p", 0, 0, "a").header("stream-seq", "1");
    let first = req().expect(200).await;
    let retry = req().expect(204).await;
    assert_eq!(
        retry.header("stream-next-offset"),
        first.header("stream-next-offset")
    );
    assert_eq!(s.read_all("/demo/s").await, b"a");
}

#[tokio::test]
async fn on_a_closed_stream_only_the_closing_tuple_is_a_duplicate() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    send(&s, "p", 0, 0, "a").await.expect(200);
    let close = || append(&s, "/demo/s", "p", 0, 1, "z").header("stream-closed", "true");
    let r = close().expect(200).await;
    r.expect_header("stream-closed", "true")
        .expect_header("producer-seq", "1");
    let r = close().expect(204).await;
    r.expect_header("stream-closed", "true")
        .expect_header("stream-next-offset", &off(2));
    let r = send(&s, "p", 0, 2, "x").await.refused(409);
    r.expect_header("stream-closed", "true");
    let r = send(&s, "q", 0, 0, "x").await.refused(409);
    r.expect_header("stream-closed", "true");
    s.post("/demo/s")
        .producer("q", 0, 0)
        .header("stream-closed", "true")
        .refused(409)
        .await;
    assert_eq!(s.read_all("/demo/s").await, b"az");
}

#[tokio::test]
async fn a_close_only_request_with_producer_headers_answers_204_with_the_ack() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    send(&s, "p", 2, 0, "a").await.expect(200);
    let close = || {
        s.post("/demo/s")
            .producer("p", 2, 1)
            .header("stream-closed", "true")
    };
    let r = close().expect(204).await;
    r.expect_header("stream-closed", "true")
        .expect_header("producer-epoch", "2")
        .expect_header("producer-seq", "1");
    r.expect_header("stream-next-offset", &off(1));
    close()
        .expect(204)
        .await
        .expect_header("stream-closed", "true");
}

#[tokio::test]
async fn a_duplicate_whose_receipt_left_the_window_answers_204_without_an_offset() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    // Producer q's only receipt is its newest, which the window always keeps.
    send(&s, "q", 0, 0, "q").await.expect(200);
    for seq in 0..1030u64 {
        send(&s, "p", 0, seq, "p").await.expect(200);
    }
    let r = send(&s, "p", 0, 0, "p").await.expect(204);
    r.expect_no_header("stream-next-offset");
    r.expect_header("producer-epoch", "0")
        .expect_header("producer-seq", "1029");
    assert!(r.header("stream-incarnation").is_some());
    // A receipt still in the window keeps its original offset.
    let r = send(&s, "p", 0, 1000, "p").await.expect(204);
    r.expect_header("stream-next-offset", &off(1002));
    let r = send(&s, "q", 0, 0, "q").await.expect(204);
    r.expect_header("stream-next-offset", &off(1));
    assert_eq!(s.tail("/demo/s").await, off(1031));
}

#[tokio::test]
async fn the_4097th_active_producer_answers_429_producer_limit_and_applies_nothing() {
    let s = Server::with_stream("/demo/s", OCTET, "").await;
    for i in 0..4096 {
        send(&s, &format!("p{i}"), 0, 0, "x").await.expect(200);
    }
    let r = send(&s, "one-too-many", 0, 0, "y").await.refused(429);
    assert!(
        r.text().starts_with("producer_limit"),
        "429 body {:?}",
        r.text()
    );
    r.expect_no_header("x-ursula-not-applied");
    assert_eq!(s.tail("/demo/s").await, off(4096));
    // Known producers keep writing; their duplicates are still answered.
    send(&s, "p7", 0, 1, "z").await.expect(200);
    send(&s, "p8", 0, 0, "x").await.expect(204);
}
