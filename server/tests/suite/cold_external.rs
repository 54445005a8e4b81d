//! External payloads against a real S3 server (SeaweedFS): an append at or above
//! `runtime.external_payload_min_size` is staged as an object before it is proposed, so only its
//! locator crosses Raft; it reads back whole on every voter and after a restart; a marked
//! refusal or a duplicate deletes its staged object; an object store that is down refuses the
//! append with `503` and commits nothing; appends racing small writes to the same stream all
//! land, in order; a large create is staged the same way; and a body staging hands back to go
//! through Raft is charged against the group's budgets like any other.

use std::path::Path;

use crate::cold_tier::OCTET;
use crate::cold_tier::assert_reads_back;
use crate::harness::cluster::*;
use ursula_cold::testing::ACCESS_KEY_ID;
use ursula_cold::testing::BUCKET;
use ursula_cold::testing::SECRET_ACCESS_KEY;
use ursula_cold::testing::SeaweedFs;

/// A cold tier on `weed` under `root` whose worker never flushes on its own (an hour's tick),
/// so the hot ring stays as the test leaves it, with `runtime` keys first.
fn toml(weed: &SeaweedFs, root: &str, runtime: &str) -> String {
    format!(
        "[runtime]\n{runtime}\n[storage.cold]\nbackend = \"s3\"\nroot = \"{root}\"\n\
         flush_interval = \"1h\"\nflush_max_hot_age = \"0s\"\ngc_grace = \"300ms\"\n\
         [storage.cold.s3]\nbucket = \"{BUCKET}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\
         access_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key = \"{SECRET_ACCESS_KEY}\"\n\
         timeout = \"1s\"\nmax_retries = 0\n",
        weed.endpoint()
    )
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

fn post(base: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Answer) {
    let a = send_url("POST", &format!("{base}{path}"), headers, body).expect("append");
    (a.0, a)
}

/// The staged objects of `bucket` under the store's root.
async fn staged_objects(weed: &SeaweedFs, root: &str, bucket: &str) -> Vec<String> {
    let mut keys = weed
        .store(root)
        .list(&format!("{bucket}/ext/"))
        .await
        .expect("list");
    keys.sort();
    keys
}

fn hot_start_and_tail(base: &str, path: &str) -> (u64, u64) {
    let (status, hs, _) = send_url("HEAD", &format!("{base}{path}"), &[], b"").expect("head");
    assert_eq!(status, 200);
    let num = |k: &str| -> u64 { hs.get(k).and_then(|v| v.parse().ok()).expect(k) };
    (
        num("stream-cold-hot-start-offset"),
        num("stream-next-offset"),
    )
}

fn start_cluster(dir: &Path, toml: &str) -> Vec<Proc> {
    let ports = [free_port(), free_port(), free_port()];
    (0..3)
        .map(|i| start_cluster_node_with(dir, &ports, i, toml))
        .collect()
}

#[tokio::test]
async fn a_large_append_is_staged_so_only_its_locator_crosses_raft_and_every_voter_reads_it() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("external-cluster");
    let mut nodes = start_cluster(&dir, &toml(&weed, "ext", ""));
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    let path = "/large/s";
    wait_for(30, "a leader for the stream", || {
        let (status, _, _) = send_url("PUT", &format!("{}{path}", bases[0]), &[OCTET], b"")?;
        (status == 201).then_some(())
    });
    // The leader answers the append itself; the others redirect (not followed here).
    let leader = wait_for(30, "the leader's answer", || {
        (0..3).find(|&i| {
            let url = format!("{}{path}", bases[i]);
            crate::harness::http::request(&agent(), "POST", &url, &[OCTET], b"head;")
                .is_ok_and(|a| a.0 == 204)
        })
    });
    let big = pattern(3 << 20, 7);
    let (status, a) = post(&bases[leader], path, &[OCTET], &big);
    assert_eq!(status, 204, "{a:?}");
    let mut expected = b"head;".to_vec();
    expected.extend_from_slice(&big);
    assert_eq!(
        hot_start_and_tail(&bases[leader], path),
        (expected.len() as u64, expected.len() as u64),
        "the staged object took the hot ring with it: nothing is hot"
    );
    let m = metrics(&bases[leader]);
    assert_eq!(counter(&m, "cold_external_payloads_staged"), 1, "{m}");
    assert_eq!(counter(&m, "cold_external_payload_bytes"), big.len() as u64);
    assert_eq!(staged_objects(&weed, "ext", "large").await.len(), 1);
    // A small append after it is hot again.
    assert_eq!(post(&bases[leader], path, &[OCTET], b";tail").0, 204);
    expected.extend_from_slice(b";tail");
    for (i, base) in bases.iter().enumerate() {
        wait_for(30, "the voter to apply the appends", || {
            let (status, got) = crate::cold_tier::read_from(base, path, 0);
            (status == 200 && got.len() == expected.len()).then_some(())
        });
        assert_reads_back(base, path, &expected);
        let m = metrics(base);
        assert!(
            counter(&m, "raft_grpc_append_stream_frame_bytes_max") < 256 << 10,
            "node {i} sent a peer message carrying the payload: {m}"
        );
    }
    // Every voter rebuilds the stream from its WAL and the object after a SIGKILL.
    for n in nodes.iter_mut() {
        n.kill9();
    }
    for n in nodes.iter_mut() {
        n.respawn_ready();
    }
    for base in &bases {
        wait_for(30, "the stream after the restart", || {
            let (status, got) = crate::cold_tier::read_from(base, path, 0);
            (status == 200 && got == expected).then_some(())
        });
    }
}

#[tokio::test]
async fn a_staged_append_that_applies_nothing_deletes_its_object() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("external-refused");
    // A lowered threshold: 64 KiB bodies are staged.
    let node = start_single_node(
        &dir,
        &toml(&weed, "refused", "external_payload_min_size = \"64KiB\""),
        "",
    );
    let base = node.base();
    let path = "/refused/s";
    let (status, _, _) = send_url("PUT", &format!("{base}{path}"), &[OCTET], b"").expect("create");
    assert_eq!(status, 201);
    let body = pattern(100 << 10, 3);
    // A content type the stream does not have: 409 after staging, object deleted.
    let (status, _) = post(&base, path, &[("content-type", "text/plain")], &body);
    assert_eq!(status, 409);
    // A producer's first append lands; its retry is a duplicate whose copy is deleted.
    let producer = [
        OCTET,
        ("producer-id", "p"),
        ("producer-epoch", "0"),
        ("producer-seq", "0"),
    ];
    assert_eq!(post(&base, path, &producer, &body).0, 200);
    assert_eq!(post(&base, path, &producer, &body).0, 204);
    // A sequence gap: refused, deleted.
    let gap = [
        OCTET,
        ("producer-id", "p"),
        ("producer-epoch", "0"),
        ("producer-seq", "5"),
    ];
    assert_eq!(post(&base, path, &gap, &body).0, 409);
    let m = metrics(&base);
    assert_eq!(counter(&m, "cold_external_payloads_staged"), 4, "{m}");
    assert_eq!(counter(&m, "cold_external_payloads_deleted"), 3, "{m}");
    let left = staged_objects(&weed, "refused", "refused").await;
    assert_eq!(
        left.len(),
        1,
        "only the applied append's object stays: {left:?}"
    );
    assert_reads_back(&base, path, &body);
    // Below the threshold nothing is staged.
    assert_eq!(post(&base, path, &[OCTET], &body[..1000]).0, 204);
    assert_eq!(counter(&metrics(&base), "cold_external_payloads_staged"), 4);
}

#[tokio::test]
async fn with_the_object_store_down_a_large_append_is_refused_and_commits_nothing() {
    let mut weed = SeaweedFs::start().await;
    let dir = tempfile_dir("external-down");
    let node = start_single_node(&dir, &toml(&weed, "down", ""), "");
    let base = node.base();
    let path = "/down/s";
    let (status, _, _) = send_url("PUT", &format!("{base}{path}"), &[OCTET], b"").expect("create");
    assert_eq!(status, 201);
    assert_eq!(post(&base, path, &[OCTET], b"before;").0, 204);
    weed.kill();
    let big = pattern(2 << 20, 9);
    let (status, a) = post(&base, path, &[OCTET], &big);
    assert_eq!(status, 503, "{a:?}");
    assert_eq!(a.1.get("retry-after").map(String::as_str), Some("1"));
    assert_eq!(
        hot_start_and_tail(&base, path).1,
        7,
        "nothing was committed"
    );
    assert!(counter(&metrics(&base), "cold_external_payload_errors") >= 1);
    // Small appends still commit through Raft while the store is down.
    assert_eq!(post(&base, path, &[OCTET], b"after;").0, 204);
    weed.restart().await;
    let (status, a) = post(&base, path, &[OCTET], &big);
    assert_eq!(status, 204, "{a:?}");
    let mut expected = b"before;after;".to_vec();
    expected.extend_from_slice(&big);
    assert_reads_back(&base, path, &expected);
}

#[tokio::test]
async fn large_appends_racing_small_writes_to_the_same_stream_all_land_in_order() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("external-race");
    let node = start_single_node(
        &dir,
        &toml(&weed, "race", "external_payload_min_size = \"64KiB\""),
        "",
    );
    let base = node.base();
    let path = "/race/s";
    let (status, _, _) = send_url("PUT", &format!("{base}{path}"), &[OCTET], b"").expect("create");
    assert_eq!(status, 201);
    // Producers make each writer's order checkable: small ones from one, large from another.
    let small_writer = {
        let base = base.clone();
        std::thread::spawn(move || {
            for seq in 0..400u32 {
                let s = seq.to_string();
                let h = [
                    OCTET,
                    ("producer-id", "small"),
                    ("producer-epoch", "0"),
                    ("producer-seq", s.as_str()),
                ];
                let body = format!("<s{seq:04}>");
                assert_eq!(post(&base, path, &h, body.as_bytes()).0, 200);
            }
        })
    };
    let larges: Vec<Vec<u8>> = (0..8u8)
        .map(|i| pattern((64 << 10) + 977 * i as usize, i))
        .collect();
    for (seq, body) in larges.iter().enumerate() {
        let s = seq.to_string();
        let h = [
            OCTET,
            ("producer-id", "large"),
            ("producer-epoch", "0"),
            ("producer-seq", s.as_str()),
        ];
        assert_eq!(post(&base, path, &h, body).0, 200);
    }
    small_writer.join().expect("small writer");
    let (status, got) = crate::cold_tier::read_from(&base, path, 0);
    assert_eq!(status, 200);
    let total = 400 * 7 + larges.iter().map(Vec::len).sum::<usize>();
    assert_eq!(got.len(), total);
    // Every large body is there whole, in order; the small ones in order around them.
    let mut at = 0;
    let mut next_small = 0u32;
    let mut next_large = 0usize;
    while at < got.len() {
        if got[at] == b'<' && got.get(at + 1) == Some(&b's') {
            assert_eq!(&got[at..at + 7], format!("<s{next_small:04}>").as_bytes());
            next_small += 1;
            at += 7;
        } else {
            let body = &larges[next_large];
            assert!(
                got[at..].starts_with(body),
                "large body {next_large} is not whole at {at}"
            );
            next_large += 1;
            at += body.len();
        }
    }
    assert_eq!((next_small, next_large), (400, larges.len()));
    let m = metrics(&base);
    // Each attempt uploads once; an attempt the stream outran is staged again, and an append
    // that lost every attempt went through Raft.
    assert_eq!(
        counter(&m, "cold_external_payloads_staged") + counter(&m, "cold_external_payload_inline"),
        larges.len() as u64 + counter(&m, "cold_external_payload_restaged"),
        "{m}"
    );
}

#[tokio::test]
async fn a_large_create_is_staged_and_a_repeat_of_it_on_the_existing_stream_stages_nothing() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("external-create");
    let node = start_single_node(
        &dir,
        &toml(&weed, "create", "external_payload_min_size = \"64KiB\""),
        "",
    );
    let base = node.base();
    let path = "/create/s";
    let body = pattern(100 << 10, 5);
    let put = |headers: &[(&str, &str)], body: &[u8]| {
        send_url("PUT", &format!("{base}{path}"), headers, body).expect("create")
    };
    let (status, hs, _) = put(&[OCTET], &body);
    assert_eq!(status, 201, "{hs:?}");
    let next: Option<u64> = hs.get("stream-next-offset").and_then(|v| v.parse().ok());
    assert_eq!(next, Some(100 << 10), "{hs:?}");
    assert_eq!(
        hot_start_and_tail(&base, path),
        (100 << 10, 100 << 10),
        "nothing of the initial body is hot"
    );
    assert_reads_back(&base, path, &body);
    let m = metrics(&base);
    assert_eq!(counter(&m, "cold_external_payloads_staged"), 1, "{m}");
    assert_eq!(counter(&m, "cold_external_payloads_deleted"), 0, "{m}");
    // The stream exists now: the same create answers 200 and another content type 409, and
    // neither uploads a copy of a body the stream would not keep.
    assert_eq!(put(&[OCTET], &body).0, 200);
    assert_eq!(put(&[("content-type", "text/plain")], &body).0, 409);
    let m = metrics(&base);
    assert_eq!(counter(&m, "cold_external_payloads_staged"), 1, "{m}");
    assert_eq!(counter(&m, "cold_external_payloads_deleted"), 0, "{m}");
    let left = staged_objects(&weed, "create", "create").await;
    assert_eq!(left.len(), 1, "only the first create's object: {left:?}");
    assert_reads_back(&base, path, &body);
    // Appends after it land above the staged chunk.
    assert_eq!(post(&base, path, &[OCTET], b"tail").0, 204);
    let mut all = body.clone();
    all.extend_from_slice(b"tail");
    assert_reads_back(&base, path, &all);
    // Below the threshold a create is not staged.
    let small = send_url("PUT", &format!("{base}/create/small"), &[OCTET], b"abc").expect("put");
    assert_eq!(small.0, 201);
    assert_eq!(counter(&metrics(&base), "cold_external_payloads_staged"), 1);
}

#[tokio::test]
async fn a_staged_body_handed_back_to_go_through_raft_is_charged_like_any_write() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("external-charge");
    // The hot cap is below the body: a staged body passes it, one through Raft cannot.
    let text = toml(&weed, "charge", "external_payload_min_size = \"64KiB\"").replace(
        "[storage.cold]\n",
        "[storage.cold]\nmax_hot_size_per_group = \"96KiB\"\n",
    );
    let node = start_single_node(&dir, &text, "");
    let base = node.base();
    let path = "/charge/s";
    let json = ("content-type", "application/json");
    let (status, _, _) = send_url("PUT", &format!("{base}{path}"), &[json], b"").expect("create");
    assert_eq!(status, 201);
    let valid = format!("[\"{}\"]", "v".repeat(100 << 10));
    assert_eq!(post(&base, path, &[json], valid.as_bytes()).0, 204);
    assert_eq!(counter(&metrics(&base), "cold_external_payloads_staged"), 1);
    // Not valid JSON: staging hands it back, and through Raft it meets the hot cap first.
    let invalid = format!("[\"{}\"", "x".repeat(100 << 10));
    let (status, a) = post(&base, path, &[json], invalid.as_bytes());
    assert_eq!(status, 503, "{a:?}");
    let text = String::from_utf8_lossy(&a.2);
    assert!(text.contains("max_hot_size_per_group"), "{text}");
    let m = metrics(&base);
    assert_eq!(counter(&m, "cold_external_payloads_staged"), 1, "{m}");
    // Below the cap, the same invalid body reaches the state machine and is refused as JSON.
    let (status, a) = post(&base, path, &[json], b"[\"x\"");
    assert_eq!(status, 400, "{a:?}");
}
