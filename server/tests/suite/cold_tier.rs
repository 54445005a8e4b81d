//! The S3 cold tier against a real S3 server (SeaweedFS on loopback ports of its own): bytes
//! flushed to objects read back identical at every offset split, reads during flushes, the
//! store going away (writes until ColdBackpressure, cold reads 503, then recovery), a follower
//! serving ranges its leader flushed, a restart with cold chunks, and garbage collection.

use std::path::Path;

use crate::harness::cluster::*;
use crate::harness::http::sse_through_control;
use ursula_cold::testing::ACCESS_KEY_ID;
use ursula_cold::testing::BUCKET;
use ursula_cold::testing::SECRET_ACCESS_KEY;
use ursula_cold::testing::SeaweedFs;

pub(crate) const OCTET: (&str, &str) = ("content-type", "application/octet-stream");

/// `[storage.cold]` on `weed` under `root`, flushing everything every 50 ms, plus `extra`.
pub(crate) fn cold_toml(weed: &SeaweedFs, root: &str, extra: &str) -> String {
    format!(
        "[storage.cold]\nbackend = \"s3\"\nroot = \"{root}\"\nflush_size = 1\nflush_interval = \"50ms\"\n{extra}\n\
         [storage.cold.s3]\nbucket = \"{BUCKET}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\
         access_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key = \"{SECRET_ACCESS_KEY}\"\n\
         server_side_encryption = \"aes256\"\ntimeout = \"1s\"\nmax_retries = 0\n",
        weed.endpoint()
    )
}

pub(crate) fn start_node(dir: &Path, toml: &str, env: Vec<(String, String)>) -> Proc {
    let path = dir.join("node.toml");
    std::fs::write(&path, toml).expect("toml");
    let port = free_port();
    Proc::start_with_env(port, server_args(&path, port), env, dir.join("node.log"))
}

fn create(base: &str, path: &str) {
    let (status, _, _) = send_url("PUT", &format!("{base}{path}"), &[OCTET], b"").expect("create");
    assert_eq!(status, 201);
}

pub(crate) fn append(base: &str, path: &str, body: &[u8]) -> u16 {
    send_url("POST", &format!("{base}{path}"), &[OCTET], body).map_or(0, |a| a.0)
}

fn head(base: &str, path: &str) -> (u64, u64) {
    let (status, hs, _) = send_url("HEAD", &format!("{base}{path}"), &[], b"").expect("head");
    assert_eq!(status, 200);
    let num = |k: &str| -> u64 { hs.get(k).and_then(|v| v.parse().ok()).expect(k) };
    (
        num("stream-cold-hot-start-offset"),
        num("stream-next-offset"),
    )
}

pub(crate) fn read_from(base: &str, path: &str, offset: u64) -> (u16, Vec<u8>) {
    let url = format!("{base}{path}?offset={offset:020}");
    let (status, _, body) = send_url("GET", &url, &[], b"").expect("read");
    (status, body)
}

/// A 3-voter cluster in `dir` with `cold` as its `[storage.cold]`, and the stream `path`
/// created on it once a leader is known.
pub(crate) fn cold_cluster(dir: &Path, cold: &str, path: &str) -> Vec<Proc> {
    let ports = [free_port(), free_port(), free_port()];
    let nodes: Vec<Proc> = (0..3)
        .map(|i| start_cluster_node_with(dir, &ports, i, cold))
        .collect();
    let url = format!("{}{path}", nodes[0].base());
    wait_for(30, "a leader for the stream", || {
        let (status, _, _) = send_url("PUT", &url, &[OCTET], b"")?;
        (status == 201).then_some(())
    });
    nodes
}

/// Reads `path` on `base` whole and checks it is `expected`.
pub(crate) fn assert_reads_back(base: &str, path: &str, expected: &[u8]) {
    let (status, got) = read_from(base, path, 0);
    assert_eq!(status, 200, "{path}");
    assert!(
        got == expected,
        "{path}: read back {} bytes, expected {}",
        got.len(),
        expected.len()
    );
}

/// Waits until every byte of `path` on `base` is in the cold tier.
pub(crate) fn wait_all_cold(base: &str, path: &str) -> u64 {
    wait_for(30, "the stream to flush whole", || {
        let (hot_start, tail) = head(base, path);
        (hot_start == tail && tail > 0).then_some(tail)
    })
}

/// Deterministic bodies of varied sizes, so chunk edges fall at irregular offsets.
fn body(i: usize) -> Vec<u8> {
    (0..(i * 37 % 113 + 1))
        .map(|k| b'a' + ((i + k) % 26) as u8)
        .collect()
}

#[tokio::test]
async fn flushed_bytes_read_back_identical_at_every_offset_split() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-splits");
    let node = start_node(&dir, &cold_toml(&weed, "splits", ""), vec![]);
    let base = node.base();
    create(&base, "/cold/s");
    let mut expected = Vec::new();
    for i in 0..30 {
        let b = body(i);
        assert_eq!(append(&base, "/cold/s", &b), 204);
        expected.extend_from_slice(&b);
    }
    let tail = wait_all_cold(&base, "/cold/s");
    assert_eq!(tail, expected.len() as u64);
    // A hot tail after the cold part: appended after the flush, read before the next one
    // may have moved it; either way every split must read the same bytes.
    for i in 30..33 {
        let b = body(i);
        assert_eq!(append(&base, "/cold/s", &b), 204);
        expected.extend_from_slice(&b);
    }
    for offset in 0..=expected.len() as u64 {
        let (status, got) = read_from(&base, "/cold/s", offset);
        assert_eq!(status, 200, "read at {offset}");
        assert_eq!(
            got,
            expected[offset as usize..],
            "bytes from offset {offset}"
        );
    }
    let m = metrics(&base);
    assert!(m["cold_reads"].as_u64().unwrap_or(0) > 0, "{m}");
    assert!(m["cold_flushed_bytes"].as_u64().unwrap_or(0) >= tail, "{m}");
    // Objects live under the root and the stream's bucket prefix.
    let objects = weed.store("splits").list("cold").await.expect("list");
    assert!(!objects.is_empty());
}

#[tokio::test]
async fn reads_while_flushes_are_in_flight_always_see_a_prefix_of_the_stream() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-inflight");
    let node = start_node(&dir, &cold_toml(&weed, "inflight", ""), vec![]);
    let base = node.base();
    create(&base, "/cold/live");
    let writer_base = base.clone();
    let writer = std::thread::spawn(move || {
        let mut all = Vec::new();
        for i in 0..200 {
            let b = body(i);
            assert_eq!(append(&writer_base, "/cold/live", &b), 204);
            all.extend_from_slice(&b);
        }
        all
    });
    let mut reads = 0;
    while !writer.is_finished() {
        let (status, got) = read_from(&base, "/cold/live", 0);
        assert_eq!(status, 200);
        // Rebuild what the writer has appended so far and compare the prefix.
        let expected: Vec<u8> = (0..200).flat_map(body).collect();
        assert_eq!(
            got,
            expected[..got.len()],
            "a read returned bytes out of order"
        );
        reads += 1;
    }
    let all = writer.join().expect("writer");
    wait_all_cold(&base, "/cold/live");
    assert_reads_back(&base, "/cold/live", &all);
    assert!(reads > 0);
}

#[tokio::test]
async fn without_the_object_store_writes_commit_until_cold_backpressure_and_cold_reads_recover() {
    let mut weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-outage");
    let toml = cold_toml(&weed, "outage", "max_hot_size_per_group = 2048");
    let node = start_node(&dir, &toml, vec![]);
    let base = node.base();
    create(&base, "/cold/o");
    let first = vec![b'x'; 500];
    assert_eq!(append(&base, "/cold/o", &first), 204);
    wait_all_cold(&base, "/cold/o");

    weed.kill();
    // Writes keep committing into the hot ring until the group passes its cap.
    let mut accepted = 0;
    let refusal = loop {
        let url = format!("{base}/cold/o");
        let (status, hs, _) = send_url("POST", &url, &[OCTET], &[b'y'; 300]).expect("append");
        if status == 204 {
            accepted += 1;
            assert!(accepted < 100, "the hot cap never refused a write");
            continue;
        }
        break (status, hs);
    };
    assert!(accepted >= 1, "no write committed while the store was away");
    assert_eq!(refusal.0, 503);
    assert_eq!(
        refusal.1.get("x-ursula-not-applied").map(String::as_str),
        Some("ColdBackpressure")
    );
    assert_eq!(refusal.1.get("retry-after").map(String::as_str), Some("1"));
    // A cold range cannot be read: a clear 5xx, not wrong bytes.
    let (status, body) = read_from(&base, "/cold/o", 0);
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("cold tier"));
    let m = metrics(&base);
    assert!(m["cold_backpressure_events"].as_u64().unwrap_or(0) >= 1);
    wait_for(30, "a failed flush upload to be counted", || {
        (metrics(&base)["cold_flush_write_errors"]
            .as_u64()
            .unwrap_or(0)
            >= 1)
            .then_some(())
    });

    weed.restart().await;
    // The flush catches up, writes pass again and the cold range reads back.
    wait_for(30, "writes to pass again", || {
        (append(&base, "/cold/o", b"z") == 204).then_some(())
    });
    let mut expected = first.clone();
    expected.extend(std::iter::repeat_n(b'y', 300 * accepted));
    expected.push(b'z');
    wait_all_cold(&base, "/cold/o");
    assert_reads_back(&base, "/cold/o", &expected);
}

#[tokio::test]
async fn a_durable_node_restarted_after_sigkill_serves_its_cold_chunks() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-restart");
    let wal = dir.join("wal");
    let toml = format!(
        "[raft.wal]\npath = \"{}\"\n{}",
        wal.display(),
        cold_toml(&weed, "restart", "")
    );
    let mut node = start_node(&dir, &toml, vec![]);
    let base = node.base();
    create(&base, "/cold/r");
    let mut expected = Vec::new();
    for i in 0..20 {
        let b = body(i);
        assert_eq!(append(&base, "/cold/r", &b), 204);
        expected.extend_from_slice(&b);
    }
    wait_all_cold(&base, "/cold/r");
    node.kill9();
    node.spawn();
    let (hot_start, tail) = wait_for(30, "the restarted node to answer HEAD", || {
        send_url("HEAD", &format!("{base}/cold/r"), &[], b"")
            .filter(|a| a.0 == 200)
            .map(|_| head(&base, "/cold/r"))
    });
    assert_eq!(tail, expected.len() as u64);
    assert!(hot_start > 0, "the restart lost the cold chunk references");
    assert_reads_back(&base, "/cold/r", &expected);
}

#[tokio::test]
async fn a_deleted_stream_and_retention_release_their_cold_objects_after_the_grace() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-gc");
    // A grace tests can wait out; the default is the spec's five minutes.
    let grace = "gc_grace = \"300ms\"";
    let node = start_node(&dir, &cold_toml(&weed, "gc", grace), vec![]);
    let base = node.base();
    let store = weed.store("gc");

    create(&base, "/gone/d");
    assert_eq!(append(&base, "/gone/d", &[b'd'; 1000]), 204);
    wait_all_cold(&base, "/gone/d");
    assert!(!store.list("gone").await.expect("list").is_empty());
    let (status, _, _) = send_url("DELETE", &format!("{base}/gone/d"), &[], b"").expect("delete");
    assert_eq!(status, 204);
    let start = std::time::Instant::now();
    loop {
        if store.list("gone").await.expect("list").is_empty() {
            break;
        }
        assert!(
            start.elapsed().as_secs() < 30,
            "the deleted stream's objects stayed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // Retention past a whole chunk releases that chunk's object; later chunks stay readable.
    create(&base, "/kept/r");
    assert_eq!(append(&base, "/kept/r", &[b'1'; 100]), 204);
    wait_all_cold(&base, "/kept/r");
    let first_objects = store.list("kept").await.expect("list");
    assert_eq!(first_objects.len(), 1);
    assert_eq!(append(&base, "/kept/r", &[b'2'; 100]), 204);
    wait_all_cold(&base, "/kept/r");
    let url = format!("{base}/kept/r/snapshot/{:020}", 100);
    let (status, _, _) = send_url("PUT", &url, &[OCTET], b"state").expect("snapshot");
    assert_eq!(status, 204, "snapshot publish");
    let url = format!("{base}/kept/r/retention/{:020}", 100);
    let (status, _, _) = send_url("PUT", &url, &[], b"").expect("retention");
    assert!(status == 200 || status == 204, "retention: {status}");
    let start = std::time::Instant::now();
    loop {
        let now = store.list("kept").await.expect("list");
        if !now.contains(&first_objects[0]) {
            assert_eq!(now.len(), 1, "the second chunk's object must stay");
            break;
        }
        assert!(
            start.elapsed().as_secs() < 30,
            "the retained-away object stayed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (status, got) = read_from(&base, "/kept/r", 100);
    assert_eq!(status, 200);
    assert_eq!(got, vec![b'2'; 100]);
}

#[tokio::test]
async fn a_follower_serves_cold_ranges_its_leader_flushed() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-cluster");
    let nodes = cold_cluster(&dir, &cold_toml(&weed, "cluster", ""), "/clus/c");
    let base = nodes[0].base();
    let mut expected = Vec::new();
    for i in 0..20 {
        let b = body(i);
        let (status, _, _) =
            send_url("POST", &format!("{base}/clus/c"), &[OCTET], &b).expect("append");
        assert_eq!(status, 204);
        expected.extend_from_slice(&b);
    }
    // Close it, so that followers may serve every byte (an open tail belongs to the leader).
    let close = [OCTET, ("stream-closed", "true")];
    let (status, _, _) = send_url("POST", &format!("{base}/clus/c"), &close, b"").expect("close");
    assert_eq!(status, 204);
    wait_all_cold(&base, "/clus/c");
    // Only the group's leader answers HEAD itself; followers redirect.
    let leader_port = {
        nodes
            .iter()
            .find(|n| {
                agent()
                    .head(n.url("/clus/c"))
                    .call()
                    .is_ok_and(|r| r.status().as_u16() == 200)
            })
            .map(|n| n.port)
            .expect("a leader")
    };
    let mut follower_reads = 0;
    for n in nodes.iter().filter(|n| n.port != leader_port) {
        // Wait until the follower applied the flush, then read it there, without redirects.
        wait_for(30, "the follower to apply the flush", || {
            let m = metrics(&n.base());
            (m["cold_hot_bytes"].as_u64() == Some(0)).then_some(())
        });
        let mut resp = agent()
            .get(n.url("/clus/c?offset=-1"))
            .call()
            .expect("follower read");
        assert_eq!(resp.status().as_u16(), 200, "follower on {}", n.port);
        let got = resp.body_mut().read_to_vec().expect("body");
        assert_eq!(got, expected);
        let m = metrics(&n.base());
        assert!(
            m["cold_reads"].as_u64().unwrap_or(0) > 0,
            "follower did not read cold: {m}"
        );
        follower_reads += 1;
    }
    assert_eq!(follower_reads, 2);
}

#[tokio::test]
async fn a_large_snapshot_body_lives_in_the_cold_tier_and_reads_back_whole() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-snapshot");
    // A grace tests can wait out; the default is the spec's five minutes.
    let grace = "gc_grace = \"300ms\"";
    let node = start_node(&dir, &cold_toml(&weed, "snap", grace), vec![]);
    let base = node.base();
    let store = weed.store("snap");
    create(&base, "/snaps/s");
    assert_eq!(append(&base, "/snaps/s", b"one"), 204);
    assert_eq!(append(&base, "/snaps/s", b"two"), 204);
    // 2 MiB: over the 1 MiB external-payload threshold, so only a reference is replicated.
    let big: Vec<u8> = (0..2u32 << 20).map(|i| (i % 251) as u8).collect();
    let url = format!("{base}/snaps/s/snapshot/{:020}", 3);
    let (status, hs, _) = send_url("PUT", &url, &[OCTET], &big).expect("publish");
    assert_eq!(status, 204);
    let digest = hs.get("stream-snapshot-digest").cloned().expect("digest");
    let staged = store.list("snaps/snap").await.expect("list");
    assert_eq!(staged.len(), 1, "{staged:?}");
    // Retrying the same publish answers the same digest and leaves one live body.
    let (status, hs, _) = send_url("PUT", &url, &[OCTET], &big).expect("retry");
    assert_eq!(status, 204);
    assert_eq!(hs.get("stream-snapshot-digest"), Some(&digest));

    let (status, hs, got) = send_url("GET", &url, &[], b"").expect("read snapshot");
    assert_eq!(status, 200);
    assert_eq!(hs.get("stream-snapshot-digest"), Some(&digest));
    assert!(got == big, "the snapshot body read back differs");
    let (status, _, boot) =
        send_url("GET", &format!("{base}/snaps/s/bootstrap"), &[], b"").expect("bootstrap");
    assert_eq!(status, 200);
    assert!(
        boot.windows(big.len()).any(|w| w == big.as_slice()),
        "bootstrap did not carry the cold snapshot body"
    );
    // A different body at the same offset is refused, and its staged copy is deleted.
    let mut other = big.clone();
    other[0] ^= 1;
    let (status, _, _) = send_url("PUT", &url, &[OCTET], &other).expect("conflict");
    assert_eq!(status, 409);
    // A newer snapshot supersedes the body; after the grace only the newer one's object is left.
    let url6 = format!("{base}/snaps/s/snapshot/{:020}", 6);
    let (status, _, _) = send_url("PUT", &url6, &[OCTET], &big).expect("publish 6");
    assert_eq!(status, 204);
    let start = std::time::Instant::now();
    loop {
        let now = store.list("snaps/snap").await.expect("list");
        if now.len() == 1 && !now.contains(&staged[0]) {
            break;
        }
        assert!(
            start.elapsed().as_secs() < 30,
            "superseded or refused bodies stayed: {now:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (status, _, got) = send_url("GET", &url6, &[], b"").expect("read 6");
    assert_eq!(status, 200);
    assert!(got == big);
}

#[tokio::test]
async fn long_polls_and_sse_that_start_in_the_cold_part_deliver_it_then_follow_the_tail() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-live");
    let node = start_node(&dir, &cold_toml(&weed, "live", ""), vec![]);
    let base = node.base();
    let text = [("content-type", "text/plain")];
    let (status, _, _) = send_url("PUT", &format!("{base}/live/t"), &text, b"").expect("create");
    assert_eq!(status, 201);
    let mut expected = String::new();
    for i in 0..8 {
        let part = format!("part-{i};");
        let (status, _, _) =
            send_url("POST", &format!("{base}/live/t"), &text, part.as_bytes()).expect("append");
        assert_eq!(status, 204);
        expected.push_str(&part);
    }
    wait_all_cold(&base, "/live/t");
    let before = metrics(&base)["cold_reads"].as_u64().unwrap_or(0);

    let url = format!(
        "{base}/live/t?offset={:020}&live=long-poll&timeout_ms=2000",
        0
    );
    let (status, _, body) = send_url("GET", &url, &[], b"").expect("long-poll");
    assert_eq!(status, 200);
    assert_eq!(String::from_utf8_lossy(&body), expected);

    let resp = agent()
        .get(format!("{base}/live/t?offset={:020}&live=sse", 0))
        .call()
        .expect("SSE");
    assert_eq!(resp.status().as_u16(), 200);
    let events = sse_through_control(&mut resp.into_body().into_reader());
    let data: String = events
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter(|l| !l.starts_with('{'))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    assert_eq!(data, expected, "{events}");
    let after = metrics(&base)["cold_reads"].as_u64().unwrap_or(0);
    assert!(
        after >= before + 2,
        "the live reads did not read the cold tier: {before} -> {after}"
    );
}

#[tokio::test]
async fn the_admin_flush_cold_route_flushes_one_stream_now_and_needs_the_process_incarnation() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-admin-flush");
    // Thresholds the test never reaches, and no age flush: only the route moves bytes.
    let toml = cold_toml(&weed, "adminflush", "").replace(
        "flush_size = 1\n",
        "flush_size = \"1GiB\"\nflush_max_hot_age = \"0s\"\n",
    );
    let node = start_node(&dir, &toml, vec![]);
    let base = node.base();
    create(&base, "/admin/f");
    create(&base, "/admin/other");
    assert_eq!(append(&base, "/admin/f", b"flush me;"), 204);
    assert_eq!(append(&base, "/admin/other", b"stay hot;"), 204);
    let incarnation = metrics(&base)["process_incarnation"]
        .as_str()
        .expect("process_incarnation")
        .to_owned();
    // The client plane serves no admin mutation, whatever the headers.
    let (status, _, _) = send_url(
        "POST",
        &format!("{base}/__ursula/flush-cold/admin/f"),
        &[("x-ursula-process-incarnation", incarnation.as_str())],
        b"",
    )
    .expect("client plane");
    assert_eq!(status, 404);
    let route = node.admin_url("/__ursula/flush-cold/admin/f");
    let (status, _, _) = send_url("POST", &route, &[], b"").expect("no header");
    assert_eq!(status, 428);
    let (status, _, _) = send_url(
        "POST",
        &route,
        &[("x-ursula-process-incarnation", "0000000000000000")],
        b"",
    )
    .expect("stale header");
    assert_eq!(status, 412);
    assert_eq!(head(&base, "/admin/f"), (0, 9), "a refused call flushed");
    let (status, _, body) = send_url(
        "POST",
        &route,
        &[("x-ursula-process-incarnation", incarnation.as_str())],
        b"",
    )
    .expect("flush");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(answer["flushed_bytes"], 9);
    assert_eq!(answer["cold_hot_start_offset"], 9);
    assert_eq!(head(&base, "/admin/f"), (9, 9));
    assert_eq!(
        head(&base, "/admin/other"),
        (0, 9),
        "only the named stream flushes"
    );
    assert_eq!(
        read_from(&base, "/admin/f", 0),
        (200, b"flush me;".to_vec())
    );
    let missing = node.admin_url("/__ursula/flush-cold/admin/nope");
    let (status, _, _) = send_url(
        "POST",
        &missing,
        &[("x-ursula-process-incarnation", incarnation.as_str())],
        b"",
    )
    .expect("missing");
    assert_eq!(status, 404);
}

/// Writes `count` bodies to `path`, waits until all of it is cold, and returns its bytes.
pub(crate) fn fill_cold(base: &str, path: &str, count: usize) -> Vec<u8> {
    create(base, path);
    let mut expected = Vec::new();
    for i in 0..count {
        let b = body(i);
        assert_eq!(append(base, path, &b), 204);
        expected.extend_from_slice(&b);
    }
    assert_eq!(wait_all_cold(base, path), expected.len() as u64);
    expected
}

#[tokio::test]
async fn a_cold_range_read_once_is_served_from_the_read_cache_while_the_store_is_down() {
    let mut weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-cache");
    let cached_dir = dir.join("cached");
    let uncached_dir = dir.join("uncached");
    std::fs::create_dir_all(&cached_dir).expect("dir");
    std::fs::create_dir_all(&uncached_dir).expect("dir");
    // The default preset's cache (256 MiB), and one turned off.
    let cached = start_node(&cached_dir, &cold_toml(&weed, "cached", ""), vec![]);
    let uncached = start_node(
        &uncached_dir,
        &cold_toml(&weed, "uncached", "cache_size = 0"),
        vec![],
    );
    let mut expected = Vec::new();
    for node in [&cached, &uncached] {
        expected = fill_cold(&node.base(), "/cache/s", 20);
        let (status, got) = read_from(&node.base(), "/cache/s", 0);
        assert_eq!((status, got.as_slice()), (200, expected.as_slice()));
    }
    let before = metrics(&cached.base());
    assert_eq!(
        before["cold_cache_capacity_bytes"],
        256u64 << 20,
        "{before}"
    );
    assert!(before["cold_cache_misses"].as_u64() > Some(0), "{before}");
    assert!(before["cold_cache_bytes"].as_u64() > Some(0), "{before}");
    let off = metrics(&uncached.base());
    assert_eq!(off["cold_cache_capacity_bytes"], 0, "{off}");
    assert_eq!(off["cold_cache_hits"], 0, "{off}");

    // The store goes away: the node that cached the ranges still serves them, byte for byte;
    // the one without a cache cannot.
    weed.kill();
    let (status, got) = read_from(&cached.base(), "/cache/s", 0);
    assert_eq!((status, got.as_slice()), (200, expected.as_slice()));
    let after = metrics(&cached.base());
    assert!(
        after["cold_cache_hits"].as_u64() > before["cold_cache_hits"].as_u64(),
        "{after}"
    );
    assert_eq!(
        after["cold_cache_misses"], before["cold_cache_misses"],
        "{after}"
    );
    let (status, _) = read_from(&uncached.base(), "/cache/s", 0);
    assert_ne!(status, 200, "a read with no cache needs the store");
}

#[tokio::test]
async fn the_read_cache_holds_no_more_than_its_size() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-cache-size");
    let node = start_node(
        &dir,
        &cold_toml(&weed, "small-cache", "cache_size = \"1KiB\""),
        vec![],
    );
    let base = node.base();
    let expected = fill_cold(&base, "/cache/s", 60);
    assert!(
        expected.len() > 2048,
        "more cold bytes than the cache holds"
    );
    for offset in [0, 500, 1000, 2000] {
        let (status, got) = read_from(&base, "/cache/s", offset);
        assert_eq!(
            (status, got.as_slice()),
            (200, &expected[offset as usize..])
        );
    }
    let m = metrics(&base);
    assert_eq!(m["cold_cache_capacity_bytes"], 1024, "{m}");
    assert!(m["cold_cache_bytes"].as_u64() <= Some(1024), "{m}");
}
