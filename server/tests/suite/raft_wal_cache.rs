//! `raft.wal.cache_size` with real processes: a node holds only its groups' recent Raft
//! entries in memory and reads older ones back from its journal, when a restart replays its
//! log into the state machine and when a follower that was down catches up. What it serves
//! stays every acknowledged byte, once.

use std::ops::RangeBounds;

use crate::harness::cluster::*;

const PATH: &str = "/demo/cached";
/// 4 KiB over the test's groups: a few entries each.
const WAL: &str = "fsync = \"never\"\ncache_size = \"4KiB\"";

fn num(m: &serde_json::Value, key: &str) -> u64 {
    m[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key}: {}", m[key]))
}

/// Asserts the metric `key` of `m` lies in `range`.
fn assert_within(m: &serde_json::Value, key: &str, range: impl RangeBounds<u64>) {
    assert!(range.contains(&num(m, key)), "{key}: {}", m[key]);
}

/// The sum of the per-group or per-core metric `key` of `m`.
fn sum(m: &serde_json::Value, key: &str) -> u64 {
    m[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key}: {}", m[key]))
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .sum()
}

#[test]
fn a_node_over_its_wal_cache_keeps_recent_entries_and_replays_the_rest_from_disk_after_a_crash() {
    let toml = "[raft]\ngroup_count = 2";
    let (_dir, mut node, bases) = loaded_single_node("wal-cache", toml, WAL, PATH, 300);
    assert_eq!(read_all(&bases, PATH), expected(300));

    let m = metrics(&bases[0]);
    // 300 entries of one group are indexed; what is held stays within the cache, give or
    // take the one last entry each group always holds.
    assert_within(&m, "wal_indexed_entries", 300..);
    assert_within(&m, "wal_cache_bytes", ..=4096 + 2 * 512);
    assert_eq!(
        m["config_ignored_keys"],
        serde_json::json!([]),
        "cache_size acts"
    );

    // A process crash: the restart replays the committed log into the state machine, and
    // all but the last entries of it come from the journal.
    node.kill9();
    node.respawn_ready();
    assert_eq!(read_all(&bases, PATH), expected(300));
    let m = metrics(&bases[0]);
    assert_within(&m, "wal_cache_misses", 290..);
    let (misses, reads) = (num(&m, "wal_cache_misses"), num(&m, "wal_disk_reads"));
    assert!(reads > 0 && num(&m, "wal_disk_read_bytes") > 0);
    assert_eq!(sum(&m, "per_group_wal_cache_misses"), misses);
    assert_eq!(sum(&m, "per_core_wal_disk_reads"), reads);

    // And it goes on: the producer continues where it was acknowledged.
    producer_load(&bases, PATH, 300, 50, |_| {});
    assert_eq!(read_all(&bases, PATH), expected(350));
    drop(node);
}

/// Cluster node `i`'s arguments with the small cache.
fn cached_node_args(dir: &std::path::Path, ports: &[u16], i: usize) -> Vec<String> {
    let args = cluster_node_args(dir, ports, i);
    let own = dir.join(format!("n{}.toml", i + 1));
    let text = std::fs::read_to_string(&own).expect("own toml");
    std::fs::write(&own, format!("{text}{WAL}\n")).expect("toml");
    args
}

#[test]
fn a_follower_that_was_down_catches_up_from_the_leaders_journal_and_serves_every_byte_once() {
    let dir = tempfile_dir("wal-cache-catch-up");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes: Vec<Proc> = (0..3)
        .map(|i| {
            let args = cached_node_args(&dir, &ports, i);
            Proc::start(ports[i], args, dir.join(format!("n{}.log", i + 1)))
        })
        .collect();
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    create_when_led(&bases, PATH);
    let leader = wait_for(30, "a leader of the stream", || {
        bases.iter().position(|b| agent_raw(b, PATH).0 == 200)
    });
    let down = (leader + 1) % 3;
    producer_load(&bases, PATH, 0, 20, |_| {});
    nodes[down].kill9();
    // The two left keep a quorum; the entries the stopped one misses outgrow the cache.
    let up: Vec<String> = (0..3)
        .filter(|i| *i != down)
        .map(|i| bases[i].clone())
        .collect();
    producer_load(&up, PATH, 20, 280, |_| {});
    // The cache misses of the two that stayed up.
    let misses = || -> u64 {
        up.iter()
            .map(|b| num(&metrics(b), "wal_cache_misses"))
            .sum()
    };
    let misses_before = misses();

    nodes[down].spawn();
    let want = expected(300);
    wait_for(60, "the restarted follower to hold every byte", || {
        (local_prefix(&bases[down], PATH, want.len()).as_deref() == Some(want.as_str()))
            .then_some(())
    });
    let misses_after = misses();
    assert!(
        misses_after >= misses_before + 250,
        "the catch-up was read from the journal: {misses_before} -> {misses_after}"
    );
    assert_eq!(read_all(&bases, PATH), want);
}
