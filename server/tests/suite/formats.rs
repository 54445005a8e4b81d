//! A node keeps working on data an earlier build wrote. `server/testdata/legacy-wal/` is a WAL
//! directory written by the build before journal payloads and snapshots became sealed records
//! (commit 5927e54): unversioned MessagePack journal payloads and snapshot files, a journal
//! tail past the snapshots, a clean run state. This build starts on a copy of it, serves every
//! stream as that build did, keeps its producers' state, takes new writes, and rewrites what it
//! writes next in the sealed format.

use std::path::Path;

use crate::harness::cluster::*;

fn testdata(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

fn get(base: &str, path: &str) -> (u16, std::collections::BTreeMap<String, String>, Vec<u8>) {
    send_url("GET", &format!("{base}{path}"), &[], b"").expect("GET")
}

#[test]
fn a_wal_written_by_the_previous_format_is_served_whole_and_rewritten_sealed() {
    let dir = tempfile_dir("legacy-wal");
    let wal = dir.join("wal");
    copy_dir(&testdata("legacy-wal"), &wal);
    let mut node = start_single_node(
        &dir,
        // The fixture's producer last wrote when it was made (2026-12-01): it must not be
        // forgotten as idle for seven days whenever this test runs.
        "[runtime]\ncore_count = 1\n[storage.snapshot]\ndrive_interval = \"100ms\"\n\
         [testing]\nproducer_forget_after = \"876000h\"\n\
         [raft]\ngroup_count = 2\nsnapshot_log_budget = \"64KiB\"",
        "segment_size = \"64KiB\"",
    );
    let base = node.base();
    node.wait_ready_until(std::time::Duration::from_secs(20), |s, _| s == 200);

    let octet = std::fs::read(testdata("legacy-wal.octet")).expect("octet");
    // Retention had moved to 50: the read starts there.
    let (s, h, body) = get(&base, "/legacy/octet?offset=00000000000000000050");
    assert_eq!(s, 200);
    assert_eq!(body, octet[50..].to_vec());
    assert_eq!(h["stream-next-offset"], format!("{:020}", octet.len()));
    let (s, _, _) = get(&base, "/legacy/octet?offset=-1");
    assert_eq!(s, 410, "retention survived");
    let (s, _, body) = get(&base, "/legacy/json?offset=-1");
    assert_eq!(s, 200);
    assert_eq!(
        body,
        std::fs::read(testdata("legacy-wal.json")).expect("json")
    );
    let (s, h, body) = get(&base, "/legacy/closed?offset=-1");
    assert_eq!((s, body.as_slice()), (200, b"last words".as_slice()));
    assert_eq!(h["stream-closed"], "true");
    assert_eq!(h["stream-incarnation"], "0006618746dc8bd0");
    let (s, _, body) = get(&base, "/v1/stream/compat?offset=-1");
    assert_eq!((s, body.as_slice()), (200, b"compat bytes".as_slice()));
    let (s, h, body) = get(&base, "/legacy/octet/snapshot/00000000000000000100");
    assert_eq!((s, body.as_slice()), (200, b"snapshot at 100".as_slice()));
    assert_eq!(
        h["stream-snapshot-digest"],
        "sha256:5ce7cb7e863cfdaba9eb59f0b95ed70533f0694f5c0cb2b7c0b4b23334dbd30a"
    );

    // The producer's state came along: its last append again is a duplicate, the next is new.
    let producer = |seq: &str, body: &[u8]| {
        send_url(
            "POST",
            &format!("{base}/legacy/octet"),
            &[
                ("content-type", "application/octet-stream"),
                ("producer-id", "p1"),
                ("producer-epoch", "0"),
                ("producer-seq", seq),
            ],
            body,
        )
        .expect("producer append")
        .0
    };
    assert_eq!(producer("2", b"prod-2;"), 204, "a retry is deduplicated");
    assert_eq!(producer("3", b"prod-3;"), 200);
    // New writes, enough for the snapshot driver to snapshot the group again.
    for i in 0..200 {
        let (s, _, _) = send_url(
            "POST",
            &format!("{base}/legacy/octet"),
            &[("content-type", "application/octet-stream")],
            format!("new-{i};").as_bytes(),
        )
        .expect("append");
        assert_eq!(s, 204);
    }
    let mut expected = octet.clone();
    expected.extend_from_slice(b"prod-3;");
    for i in 0..200 {
        expected.extend_from_slice(format!("new-{i};").as_bytes());
    }
    let snapshots = wal.join("snapshots");
    wait_for(30, "a snapshot file rewritten as a sealed record", || {
        std::fs::read_dir(&snapshots)
            .ok()?
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "snap"))
            .any(|e| std::fs::read(e.path()).is_ok_and(|b| b.starts_with(b"URSN")))
            .then_some(())
    });

    // And after a restart on what this build wrote, everything reads back.
    assert!(node.sigterm().success());
    node.spawn();
    let (s, _, body) = get(&base, "/legacy/octet?offset=00000000000000000050");
    assert_eq!(s, 200);
    assert_eq!(body, expected[50..].to_vec());
    let (s, _, body) = get(&base, "/legacy/closed?offset=-1");
    assert_eq!((s, body.as_slice()), (200, b"last words".as_slice()));
}
