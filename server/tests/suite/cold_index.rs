//! Cold-index pages on a durable node with the development (`fs`) cold store, pages of 4 KiB
//! (`testing.cold_index_page_bytes`) so edges come with little data: a long cold history moves
//! into pages and reads back byte for byte at every split; retention collects whole pages;
//! a deleted stream's pages and objects go; a torn page is refused, never served; and the
//! checked-in cold history of the build before pages (`tests/fixtures/cold-v0`) migrates on
//! start and reads back byte for byte.

use std::path::Path;
use std::path::PathBuf;

use sha2::Digest;

use crate::cold_tier::OCTET;
use crate::cold_tier::append;
use crate::cold_tier::read_from;
use crate::cold_tier::wait_all_cold;
use crate::harness::cluster::*;
use ursula_testkit::ctl::ctl_expect;
use ursula_testkit::ctl::write_manifest;

const PAGE: u64 = 4096;

/// A lone durable node of 4 groups whose cold tier is the directory `cold`, flushing every
/// 50 ms, plus `extra` (in `[storage.cold]`, or sections after it).
fn lone(dir: &Path, cold: &Path, extra: &str) -> Proc {
    let port = free_port();
    let toml = format!(
        "[raft]\ngroup_count = 4\n[storage.cold]\nbackend = \"fs\"\nroot = \"{}\"\n\
         flush_size = 1\nflush_interval = \"50ms\"\ngc_grace = \"1s\"\n{extra}",
        cold.display()
    );
    let node = Proc::start(
        port,
        single_node_args(dir, port, &toml, ""),
        dir.join("node.log"),
    );
    wait_for(30, "the node to be ready", || {
        let (status, _, _) = send_url("GET", &format!("{}/__ursula/ready", node.base()), &[], b"")?;
        (status == 200).then_some(())
    });
    node
}

/// 4 KiB pages, and the read cache off, so every read goes to the store.
fn paged_toml() -> String {
    format!("cache_size = 0\n{}", pages_toml())
}

fn pages_toml() -> String {
    format!("[testing]\ncold_index_page_bytes = {PAGE}\n")
}

/// A scratch directory `name`, and a lone node with 4 KiB pages whose cold tier is its `cold`.
fn paged_node(name: &str) -> (Scratch, PathBuf, Proc) {
    let dir = tempfile_dir(name);
    let cold = dir.path().join("cold");
    let node = lone(dir.path(), &cold, &paged_toml());
    (dir, cold, node)
}

/// Copies every file under `from` to the same key under `to`, but those `skip` names.
fn copy_tree(from: &Path, to: &Path, skip: &[&str]) {
    for k in keys(from) {
        if skip.contains(&k.as_str()) {
            continue;
        }
        let dest = to.join(&k);
        std::fs::create_dir_all(dest.parent().expect("parent")).expect("dir");
        std::fs::copy(from.join(&k), dest).expect("copy");
    }
}

fn create(base: &str, path: &str, ctype: &str) {
    let (status, _, _) = send_url(
        "PUT",
        &format!("{base}{path}"),
        &[("content-type", ctype)],
        b"",
    )
    .expect("create");
    assert_eq!(status, 201, "{path}");
}

/// Reads `path` from `offset` to its tail, following `Stream-Next-Offset`.
fn read_all(base: &str, path: &str, mut offset: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let url = format!("{base}{path}?offset={offset:020}");
        let (status, hs, body) = send_url("GET", &url, &[], b"").expect("read");
        assert_eq!(
            status,
            200,
            "{path} at {offset}: {}",
            String::from_utf8_lossy(&body)
        );
        out.extend_from_slice(&body);
        offset = hs
            .get("stream-next-offset")
            .and_then(|v| v.parse().ok())
            .expect("next offset");
        if hs.contains_key("stream-up-to-date") {
            return out;
        }
    }
}

/// The group gauges summed over the node's groups: (unindexed chunks, packed chunks, pages).
fn gauges(base: &str) -> (u64, u64, u64) {
    let m = metrics(base);
    let sum = |k: &str| -> u64 {
        m["group_state_gauges"]
            .as_array()
            .map(|gs| gs.iter().filter_map(|g| g[k].as_u64()).sum())
            .unwrap_or(0)
    };
    (
        sum("cold_chunks"),
        sum("cold_packed_chunks"),
        sum("cold_index_pages"),
    )
}

/// Every file under `dir`, as keys relative to it.
fn keys(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if let Ok(rel) = p.strip_prefix(root) {
                out.push(rel.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Deterministic bodies of varied sizes, so flush edges fall at irregular offsets.
fn body(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| b'a' + ((i * 7 + k) % 26) as u8).collect()
}

/// Appends `n` bodies to `path`, each flushed before the next, and returns the stream's bytes.
fn cold_history(base: &str, path: &str, n: usize) -> Vec<u8> {
    let mut all = Vec::new();
    for i in 0..n {
        let b = body(i, 300 + i * 53 % 700);
        assert_eq!(append(base, path, &b), 204);
        all.extend_from_slice(&b);
        wait_all_cold(base, path);
    }
    all
}

#[test]
fn a_long_cold_history_moves_into_index_pages_and_reads_back_at_every_split() {
    let (dir, cold, node) = paged_node("cold-index-long");
    let base = node.base();
    create(&base, "/ixlong/s", OCTET.1);
    let all = cold_history(&base, "/ixlong/s", 40);
    let pages = (all.len() as u64 / PAGE) as usize;
    assert!(pages >= 4, "{} bytes", all.len());
    let (chunks, packed, sealed) = wait_for(30, "the full pages to be sealed", || {
        let g = gauges(&base);
        (g.2 as usize >= pages).then_some(g)
    });
    assert_eq!(packed, 0, "every chunk is the stream's own");
    assert!(chunks <= 6, "{chunks} chunks stay in the state");
    // What the stream's replicated state holds beyond hot bytes: 40 flushes in, a few hundred
    // bytes; without pages each chunk would add its entry (an object key and three offsets).
    let state_max = metrics(&base)["group_state_gauges"]
        .as_array()
        .and_then(|gs| {
            gs.iter()
                .filter_map(|g| g["stream_state_bytes_max"].as_u64())
                .max()
        })
        .unwrap_or(u64::MAX);
    assert!(
        state_max < 1024,
        "{state_max} bytes of state for one stream"
    );
    let page_files: Vec<String> = keys(&cold)
        .into_iter()
        .filter(|k| k.starts_with("ixlong/cold-index/"))
        .collect();
    assert_eq!(page_files.len() as u64, sealed, "{page_files:?}");
    // Every start offset across page edges and chunk edges reads the same bytes.
    for from in (0..all.len())
        .step_by(97)
        .chain([4095, 4096, 4097, 8191, 8192])
    {
        let got = read_all(&base, "/ixlong/s", from as u64);
        assert!(got == all[from..], "from {from}: {} bytes", got.len());
    }
    // A restart reads the same from its WAL's state and the pages.
    drop(node);
    let node = lone(dir.path(), &cold, &paged_toml());
    assert!(read_all(&node.base(), "/ixlong/s", 0) == all);
    let m = metrics(&node.base());
    assert_eq!(m["cold_index_page_errors"].as_u64(), Some(0), "{m}");
}

#[test]
fn retention_collects_whole_pages_and_a_deleted_stream_leaves_no_object() {
    let (_dir, cold, node) = paged_node("cold-index-gc");
    let base = node.base();
    create(&base, "/ixgc/r", OCTET.1);
    let all = cold_history(&base, "/ixgc/r", 30);
    let pages_of = |bucket: &str| -> Vec<String> {
        let prefix = format!("{bucket}/cold-index/");
        keys(&cold)
            .into_iter()
            .filter(|k| k.starts_with(&prefix))
            .collect()
    };
    let sealed = wait_for(30, "three pages", || {
        let p = pages_of("ixgc");
        (p.len() >= 3).then_some(p)
    });
    let objects = || {
        keys(&cold)
            .into_iter()
            .filter(|k| k.starts_with("ixgc/g"))
            .count()
    };
    let objects_before = objects();
    // Retention at a message edge past two pages: snapshot, then retain.
    let mut at = 0u64;
    for i in 0..30 {
        at += 300 + (i * 53 % 700) as u64;
        if at > 2 * PAGE + 100 {
            break;
        }
    }
    let snap = format!("{base}/ixgc/r/snapshot/{at:020}");
    let (status, _, _) = send_url("PUT", &snap, &[OCTET], b"state").expect("snapshot");
    assert!(status == 200 || status == 204, "publish: {status}");
    let retain = format!("{base}/ixgc/r/retention/{at:020}");
    let (status, _, _) = send_url("PUT", &retain, &[], b"").expect("retention");
    assert!(status == 200 || status == 204, "retention: {status}");
    let left = wait_for(30, "retention to collect the first two pages", || {
        let p = pages_of("ixgc");
        (p.len() == sealed.len() - 2).then_some(p)
    });
    assert_eq!(
        left[..],
        sealed[2..],
        "whole pages below the retained offset go, in order"
    );
    assert!(
        objects() < objects_before,
        "the objects the two pages listed go with them"
    );
    let (status, _) = read_from(&base, "/ixgc/r", 0);
    assert_eq!(status, 410, "below retention");
    assert!(read_all(&base, "/ixgc/r", at) == all[at as usize..]);
    // A deleted stream: its pages and every object they listed go.
    let before = keys(&cold);
    create(&base, "/ixdel/d", OCTET.1);
    cold_history(&base, "/ixdel/d", 20);
    wait_for(30, "pages of the second stream", || {
        (pages_of("ixdel").len() >= 2).then_some(())
    });
    let (status, _, _) = send_url("DELETE", &format!("{base}/ixdel/d"), &[], b"").expect("delete");
    assert_eq!(status, 204);
    wait_for(30, "every object of the deleted stream to go", || {
        let now = keys(&cold);
        (!now.iter().any(|k| k.starts_with("ixdel/"))).then_some(())
    });
    assert_eq!(keys(&cold), before, "the other stream's objects all stay");
    assert!(
        read_all(&base, "/ixgc/r", at) == all[at as usize..],
        "the other stream reads on"
    );
}

#[test]
fn a_torn_or_corrupt_index_page_is_refused_with_a_classified_error_never_served() {
    // The read cache on: a page refused once must not be kept.
    let dir = tempfile_dir("cold-index-torn");
    let cold = dir.path().join("cold");
    let node = lone(dir.path(), &cold, &pages_toml());
    let base = node.base();
    create(&base, "/ixtorn/s", OCTET.1);
    let all = cold_history(&base, "/ixtorn/s", 16);
    let page: PathBuf = wait_for(30, "a sealed page", || {
        keys(&cold)
            .into_iter()
            .find(|k| k.starts_with("ixtorn/cold-index/") && k.ends_with("0000000000"))
            .map(|k| cold.join(k))
    });
    let good = std::fs::read(&page).expect("page");
    let damaged: [(&str, Vec<u8>); 3] = [
        ("torn", good[..good.len() / 2].to_vec()),
        ("flipped", {
            let mut b = good.clone();
            b[40] ^= 0x20;
            b
        }),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in damaged {
        std::fs::write(&page, &bytes).expect("damage");
        let url = format!("{base}/ixtorn/s?offset={:020}", 10);
        let (status, _, body) = send_url("GET", &url, &[], b"").expect("read");
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 500, "{what}: {text}");
        assert!(
            text.contains("cold index page") && text.contains("cold-index/"),
            "{what}: {text}"
        );
        assert!(
            !body.windows(8).any(|w| all.windows(8).next() == Some(w)),
            "{what}: served bytes"
        );
    }
    let m = metrics(&base);
    assert!(
        m["cold_index_page_errors"].as_u64().unwrap_or(0) >= 3,
        "{m}"
    );
    std::fs::write(&page, &good).expect("repair");
    assert!(
        read_all(&base, "/ixtorn/s", 0) == all,
        "the repaired page serves again"
    );
}

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cold-v0")
}

/// What the fixture holds: each stream's path, content type and appended bodies.
fn fixture_streams() -> Vec<(&'static str, &'static str, Vec<Vec<u8>>)> {
    let json = (0..12)
        .map(|i| format!("[{{\"n\":{i},\"pad\":\"{}\"}}]", "x".repeat(40 + i * 31)).into_bytes())
        .collect();
    vec![
        (
            "/legacy/bin",
            OCTET.1,
            (0..16).map(|i| body(i, 200 + i * 41)).collect(),
        ),
        ("/legacy/json", "application/json", json),
        (
            "/legacy/big",
            OCTET.1,
            vec![body(1, 1_200_000), body(2, 100)],
        ),
    ]
}

#[test]
#[ignore = "writes tests/fixtures/cold-v0; run once with URSULA_TEST_BIN naming a build from before cold-index pages"]
fn write_the_cold_v0_fixture() {
    let out = fixture();
    let dir = tempfile_dir("cold-v0-make");
    let cold = dir.path().join("cold");
    // Slices of one tick pack together up to 64 KiB.
    let node = lone(dir.path(), &cold, "flush_max_size = 65536\n");
    let base = node.base();
    let mut expected = Vec::new();
    for (path, ctype, bodies) in fixture_streams() {
        create(&base, path, ctype);
        for b in &bodies {
            let (status, _, _) = send_url(
                "POST",
                &format!("{base}{path}"),
                &[("content-type", ctype)],
                b,
            )
            .expect("append");
            assert_eq!(status, 204);
            wait_all_cold(&base, path);
        }
        let all = read_all(&base, path, 0);
        expected.push(format!(
            "{path} {} {:x}",
            all.len(),
            sha2::Sha256::digest(&all)
        ));
    }
    // Six streams over four groups, flushed by the same ticks: some share packed objects.
    let packed: Vec<String> = (0..6).map(|i| format!("/legacy/p{i}")).collect();
    for p in &packed {
        create(&base, p, OCTET.1);
    }
    for i in 0..3 {
        for p in &packed {
            assert_eq!(append(&base, p, &body(i + 5, 90)), 204);
        }
        for p in &packed {
            wait_all_cold(&base, p);
        }
    }
    for p in &packed {
        let all = read_all(&base, p, 0);
        expected.push(format!(
            "{p} {} {:x}",
            all.len(),
            sha2::Sha256::digest(&all)
        ));
    }
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("fixture dir");
    let manifest = write_manifest(dir.path(), "lone.json", std::slice::from_ref(&node));
    let location = out.join("backup").display().to_string();
    ctl_expect(
        0,
        &[
            "backup-create",
            "--config",
            &manifest,
            "--location",
            &location,
        ],
    );
    copy_tree(&cold, &out.join("cold"), &[]);
    std::fs::write(out.join("expected.txt"), expected.join("\n") + "\n").expect("expected");
}

#[test]
fn a_cold_history_written_before_index_pages_migrates_on_start_and_reads_back_byte_for_byte() {
    let fx = fixture();
    let expected = std::fs::read_to_string(fx.join("expected.txt")).expect("expected.txt");
    let dir = tempfile_dir("cold-v0-migrate");
    let cold = dir.path().join("cold");
    copy_tree(&fx.join("cold"), &cold, &[]);
    let node = lone(dir.path(), &cold, &paged_toml());
    let base = node.base();
    let manifest = write_manifest(dir.path(), "lone.json", std::slice::from_ref(&node));
    let location = fx.join("backup").display().to_string();
    let out = ctl_expect(
        0,
        &["restore", "--config", &manifest, "--location", &location],
    );
    assert!(out.contains("restore:"), "{out}");
    let check = |when: &str| {
        for line in expected.lines() {
            let mut f = line.split(' ');
            let (path, len, sha) = (
                f.next().expect("path"),
                f.next().and_then(|n| n.parse::<usize>().ok()).expect("len"),
                f.next().expect("sha"),
            );
            let got = read_all(&base, path, 0);
            assert_eq!(got.len(), len, "{when}: {path}");
            assert_eq!(
                format!("{:x}", sha2::Sha256::digest(&got)),
                sha,
                "{when}: {path}"
            );
        }
    };
    check("as restored");
    let (_, packed, _) = gauges(&base);
    assert!(packed > 0, "the fixture's chunks decode as packed");
    // The migration: compaction adopts or rewrites the old objects of every full page, then
    // the full pages seal. A stream's open page keeps its packed slices (fewer than 64).
    let full_pages: u64 = expected
        .lines()
        .filter_map(|l| l.split(' ').nth(1).and_then(|n| n.parse::<u64>().ok()))
        .map(|len| len / PAGE)
        .sum();
    let (chunks, _, pages) = wait_for(60, "the old chunks to be compacted and indexed", || {
        let g = gauges(&base);
        (g.2 >= full_pages).then_some(g)
    });
    assert_eq!(pages, full_pages);
    assert!(chunks < 40, "{chunks} chunks left in the state");
    check("after the migration");
    let m = metrics(&base);
    assert!(
        m["cold_compactions"].as_u64().unwrap_or(0)
            + m["cold_compaction_adoptions"].as_u64().unwrap_or(0)
            > 0,
        "{m}"
    );
}

#[test]
fn a_restore_checks_what_index_pages_list_and_names_a_missing_page_and_object() {
    use ursula_state::stream::page::Page;
    use ursula_state::stream::page::PageId;
    let (dir, cold, src) = paged_node("cold-index-restore");
    create(&src.base(), "/ixbak/s", OCTET.1);
    cold_history(&src.base(), "/ixbak/s", 30);
    let pages = wait_for(30, "three pages", || {
        let p: Vec<String> = keys(&cold)
            .into_iter()
            .filter(|k| k.starts_with("ixbak/cold-index/"))
            .collect();
        (p.len() >= 3).then_some(p)
    });
    let manifest = write_manifest(dir.path(), "src.json", std::slice::from_ref(&src));
    let location = dir.path().join("backup").display().to_string();
    ctl_expect(
        0,
        &[
            "backup-create",
            "--config",
            &manifest,
            "--location",
            &location,
        ],
    );
    // The target's store: a copy without page 0, and without an object only page 1 lists.
    let target_dir = dir.path().join("target");
    std::fs::create_dir_all(&target_dir).expect("dir");
    let target_cold = target_dir.join("cold");
    let decode = |key: &str, page: u64| {
        let bytes = std::fs::read(cold.join(key)).expect("page");
        let incarnation = key.split('/').nth(3).expect("incarnation");
        let id = PageId {
            incarnation: u64::from_str_radix(incarnation, 16).expect("hex"),
            page,
            page_bytes: PAGE,
        };
        Page::decode(&bytes, id).expect("a good page")
    };
    let first = decode(&pages[0], 0).objects();
    let only_second = decode(&pages[1], 1)
        .objects()
        .into_iter()
        .find(|o| !first.contains(o))
        .expect("an object only page 1 lists");
    copy_tree(&cold, &target_cold, &[&pages[0], &only_second]);
    let target = lone(&target_dir, &target_cold, &paged_toml());
    let manifest = write_manifest(&target_dir, "target.json", std::slice::from_ref(&target));
    let (code, out, err) =
        ursula_testkit::ctl::ctl(&["restore", "--config", &manifest, "--location", &location]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("2 cold objects"), "{err}");
    assert!(
        err.contains(&pages[0]) && err.contains(&*only_second),
        "{err}"
    );
    let m = metrics(&target.base());
    let streams: u64 = m["group_state_gauges"]
        .as_array()
        .map(|gs| gs.iter().filter_map(|g| g["streams"].as_u64()).sum())
        .unwrap_or(0);
    assert_eq!(streams, 0, "nothing was imported");
}

#[test]
fn json_snapshots_retention_and_bootstrap_work_at_message_edges_inside_the_paged_history() {
    let (_dir, _cold, node) = paged_node("cold-index-bootstrap");
    let base = node.base();
    create(&base, "/ixjson/s", "application/json");
    let msg = |i: usize| {
        format!(
            "{{\"n\":{i},\"pad\":\"{}\"}}",
            "y".repeat(100 + i * 37 % 300)
        )
    };
    let json = [("content-type", "application/json")];
    let snapshot = |at: u64| {
        let url = format!("{base}/ixjson/s/snapshot/{at:020}");
        send_url("PUT", &url, &[OCTET], b"snap")
            .expect("snapshot")
            .0
    };
    let mut ends = Vec::new();
    for i in 0..60 {
        let (status, hs, _) = send_url(
            "POST",
            &format!("{base}/ixjson/s"),
            &json,
            msg(i).as_bytes(),
        )
        .expect("append");
        assert_eq!(status, 204);
        ends.push(
            hs.get("stream-next-offset")
                .and_then(|v| v.parse::<u64>().ok())
                .expect("next offset"),
        );
        wait_all_cold(&base, "/ixjson/s");
        if i == 2 {
            // While its edge is still a chunk of the state's own.
            assert_eq!(snapshot(ends[2]), 204);
        }
    }
    wait_for(30, "message 10 to be inside the pages", || {
        let (_, _, pages) = gauges(&base);
        (pages * PAGE > ends[10] + PAGE).then_some(())
    });
    // The state no longer knows these edges: the node reads the byte before the offset.
    assert_eq!(snapshot(ends[10] + 1), 400, "inside a message");
    assert_eq!(snapshot(ends[10]), 204, "a message edge inside the pages");
    let retain = format!("{base}/ixjson/s/retention/{:020}", ends[10]);
    let (status, _, body) = send_url("PUT", &retain, &[], b"").expect("retention");
    assert_eq!(status, 204, "{}", String::from_utf8_lossy(&body));
    let (status, _, body) =
        send_url("GET", &format!("{base}/ixjson/s/bootstrap"), &[], b"").expect("bootstrap");
    assert_eq!(status, 200);
    let text = String::from_utf8_lossy(&body);
    for i in 0..60 {
        assert_eq!(text.contains(&msg(i)), i > 10, "message {i}");
    }
}
