//! The cold index on a real S3 server (SeaweedFS) that goes away while flushes, compactions,
//! page seals and orphan sweeps are under way: reads of the paged history answer `503` (never
//! wrong bytes), nothing a state or a page names is deleted, and once the store is back the
//! work catches up and every acknowledged byte reads back.

use crate::cold_tier::OCTET;
use crate::cold_tier::append;
use crate::cold_tier::cold_toml;
use crate::cold_tier::read_from;
use crate::cold_tier::start_node;
use crate::cold_tier::wait_all_cold;
use crate::harness::cluster::*;
use ursula_cold::testing::SeaweedFs;

/// Appends round `round` to every stream: a small body, so the flushes pack them.
fn round(base: &str, streams: &[String], round: usize, all: &mut [Vec<u8>]) -> usize {
    let mut accepted = 0;
    for (i, path) in streams.iter().enumerate() {
        let body: Vec<u8> = (0..(150 + (round * 31 + i * 17) % 400))
            .map(|k| b'a' + ((round + i + k) % 26) as u8)
            .collect();
        if append(base, path, &body) == 204 {
            all[i].extend_from_slice(&body);
            accepted += 1;
        }
    }
    accepted
}

fn gauge(base: &str, key: &str) -> u64 {
    metrics(base)["group_state_gauges"]
        .as_array()
        .map(|gs| gs.iter().filter_map(|g| g[key].as_u64()).sum())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_store_that_goes_away_mid_compaction_and_sealing_loses_and_deletes_nothing() {
    let mut weed = SeaweedFs::start().await;
    let dir = tempfile_dir("cold-index-s3-outage");
    // Two groups for six streams: flushes pack several streams' slices into one object.
    let toml = format!(
        "[raft]\ngroup_count = 2\n{}[testing]\ncold_index_page_bytes = 4096\n",
        cold_toml(
            &weed,
            "ixoutage",
            "flush_max_size = 65536\ngc_grace = \"1s\"\ncache_size = 0\n\
             orphan_min_age = \"1s\"\norphan_sweep_interval = \"200ms\"",
        )
    );
    let node = start_node(&dir, &toml, vec![]);
    let base = node.base();
    let streams: Vec<String> = (0..6).map(|i| format!("/outage/s{i}")).collect();
    for p in &streams {
        let (status, _, _) = send_url("PUT", &format!("{base}{p}"), &[OCTET], b"").expect("create");
        assert_eq!(status, 201);
    }
    let mut all = vec![Vec::new(); streams.len()];
    for r in 0..20 {
        round(&base, &streams, r, &mut all);
        for p in &streams {
            wait_all_cold(&base, p);
        }
    }
    wait_for(30, "pages of every stream", || {
        (gauge(&base, "cold_index_pages") >= 6).then_some(())
    });

    weed.kill();
    // Writes go on into the hot ring while the store is away.
    for r in 20..30 {
        assert_eq!(
            round(&base, &streams, r, &mut all),
            streams.len(),
            "round {r}"
        );
    }
    let (status, body) = read_from(&base, &streams[0], 0);
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("cold tier"));
    wait_for(30, "the sweep and the flush to count the outage", || {
        let m = metrics(&base);
        (m["cold_orphan_sweep_errors"].as_u64().unwrap_or(0) >= 1
            && m["cold_flush_write_errors"].as_u64().unwrap_or(0) >= 1)
            .then_some(())
    });

    weed.restart().await;
    for r in 30..40 {
        round(&base, &streams, r, &mut all);
    }
    for p in &streams {
        wait_all_cold(&base, p);
    }
    let pages = wait_for(60, "the pages to catch up", || {
        let sealed: u64 = all.iter().map(|b| b.len() as u64 / 4096).sum();
        let now = gauge(&base, "cold_index_pages");
        (now >= sealed).then_some(now)
    });
    // Sweeps, compactions and collections ran meanwhile: every byte is still there.
    wait_for(30, "a sweep pass after the store came back", || {
        let m = metrics(&base);
        (m["cold_orphan_sweep_passes"].as_u64().unwrap_or(0) >= 2).then_some(())
    });
    for (p, expected) in streams.iter().zip(&all) {
        let (status, got) = read_from(&base, p, 0);
        assert_eq!(status, 200, "{p}");
        assert!(
            got == *expected,
            "{p}: {} bytes, expected {}",
            got.len(),
            expected.len()
        );
    }
    let m = metrics(&base);
    assert_eq!(m["cold_index_page_errors"].as_u64(), Some(0), "{m}");
    assert!(
        m["cold_compactions"].as_u64().unwrap_or(0) > 0,
        "packed slices were rewritten: {m}"
    );
    assert!(pages >= 6);
}
