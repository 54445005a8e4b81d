//! Apply-failure isolation, the spec's three-replica drill on real processes: every replica
//! runs the same faulty code (`[testing] apply_panic_on`), a committed append panics as it
//! applies, and its group stops on every replica while the others keep serving; a restart with
//! the faulty code stops it again; the corrected code replays the record exactly once.

use std::time::Duration;

use serde_json::Value;

use crate::harness::cluster::*;

const FAULTY: &str = "[testing]\napply_panic_on = \"POISON\"\n";
const GROUPS: u64 = 4;

/// The group a stream path's key hashes to (the server's FNV-1a over `bucket/stream`).
fn group_of(path: &str) -> u64 {
    let key = path.trim_start_matches('/');
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % GROUPS
}

fn failure(base: &str, group: u64) -> Value {
    metrics(base)["raft_groups"][group as usize]["apply_failure"].clone()
}

fn has_issue(base: &str, group: u64, issue: &str) -> bool {
    metrics(base)["raft_maintenance"]["group_issues"]
        .as_array()
        .is_some_and(|is| {
            is.iter()
                .any(|i| i["raft_group_id"].as_u64() == Some(group) && i["issue"] == issue)
        })
}

/// A request straight to one node, no redirect followed.
fn direct(method: &str, url: &str, body: &[u8]) -> Answer {
    let octet = [("content-type", "application/octet-stream")];
    let (status, hs, bytes) =
        crate::harness::http::request(&agent(), method, url, &octet, body).expect("answer");
    (status, hs.into_iter().collect(), bytes)
}

#[test]
fn a_poison_record_stops_its_group_alone_until_corrected_code_replays_it_once() {
    let dir = tempfile_dir("apply-failure");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes: Vec<Proc> = (0..3)
        .map(|i| start_cluster_node_with(&dir, &ports, i, FAULTY))
        .collect();
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    let bad = "/demo/poisoned";
    let group = group_of(bad);
    let good = (0..)
        .map(|i| format!("/demo/s{i}"))
        .find(|p| group_of(p) != group)
        .expect("a stream of another group");
    for p in [bad, good.as_str()] {
        create_when_led(&bases, p);
        producer_load(&bases, p, 0, 5, |_| {});
    }

    // The poison commits and fails to apply on every replica: its writer gets no success.
    let answer = send_octets(&bases, 0, bad, b"POISON|");
    assert!(
        !matches!(answer, Some((200 | 204, _, _))),
        "the failed command got a success: {answer:?}"
    );
    // A replica stops once it learns the record committed: the leader at once, and the
    // followers its commit index reached before its Raft stopped. A majority learned it.
    let stopped: Vec<(usize, Value)> = wait_for(30, "the group to stop on a majority", || {
        let s: Vec<(usize, Value)> = bases
            .iter()
            .enumerate()
            .map(|(i, b)| (i, failure(b, group)))
            .filter(|(_, f)| !f.is_null())
            .collect();
        (s.len() >= 2).then_some(s)
    });
    let failures: Vec<Value> = stopped.iter().map(|(_, f)| f.clone()).collect();
    for f in &failures {
        assert_eq!(f["kind"], "panic", "{f}");
        assert!(
            f["message"]
                .as_str()
                .is_some_and(|m| m.contains("apply_panic_on")),
            "{f}"
        );
        assert_eq!(
            (&f["term"], &f["index"]),
            (&failures[0]["term"], &failures[0]["index"]),
            "the same committed record on every replica"
        );
    }
    for (i, _) in &stopped {
        let (n, b) = (&nodes[*i], &bases[*i]);
        let m = metrics(b);
        let g = &m["raft_groups"][group as usize];
        assert_eq!(g["maintenance"]["running"], false, "{g}");
        assert!(
            g["last_applied_index"].as_u64() < failures[0]["index"].as_u64(),
            "the applied index stays below the record: {g}"
        );
        assert!(has_issue(b, group, "apply_stopped"));
        let (status, body) = n.json("/__ursula/ready");
        assert_eq!(status, 200, "the node stays ready: {body}");
        // Reads and writes of the stopped group: a typed 503 that says nothing was applied.
        for (method, url) in [
            ("GET", format!("{b}{bad}?offset=-1")),
            ("POST", format!("{b}{bad}")),
        ] {
            let (status, hs, body) = direct(method, &url, b"x");
            assert_eq!(status, 503, "{method} {url}");
            assert_eq!(
                hs.get("x-ursula-not-applied").map(String::as_str),
                Some("ApplyStopped")
            );
            assert!(hs.contains_key("retry-after"));
            let json: Value = serde_json::from_slice(&body).expect("JSON error");
            assert_eq!(json["error"], "ApplyStopped", "{json}");
        }
        // Nothing stopped elsewhere on the node.
        let other = m["raft_groups"]
            .as_array()
            .expect("groups")
            .iter()
            .filter(|g| g["raft_group_id"].as_u64() != Some(group))
            .all(|g| g["apply_failure"].is_null() && g["maintenance"]["running"] == true);
        assert!(other, "{m}");
    }
    // The other groups keep serving, reads and writes.
    producer_load(&bases, &good, 5, 5, |_| {});
    assert_eq!(read_all(&bases, &good), expected(10));

    // The same faulty code restarted stops at the same record as it replays its log, and the
    // node serves its other groups.
    let first = stopped[0].0;
    nodes[first].sigterm();
    nodes[first].respawn_ready();
    let again = failure(&bases[first], group);
    assert_eq!(again["index"], failures[0]["index"], "{again}");
    assert!(has_issue(&bases[first], group, "apply_stopped"));
    // It may not lead the group: its Raft, started again without replaying, refuses to
    // campaign (409) or has already met the entry again and stopped (503).
    let (status, body) = admin(
        &nodes[first],
        "POST",
        &format!("/__ursula/raft/{group}/self-election"),
    );
    assert!(matches!(status, 409 | 503), "{status} {body}");
    assert!(body.contains("failed to apply"), "{body}");
    let (status, hs, _) = direct("GET", &format!("{}{bad}?offset=-1", bases[first]), b"");
    assert_eq!(
        (status, hs.get("x-ursula-not-applied").map(String::as_str)),
        (503, Some("ApplyStopped"))
    );
    producer_load(&bases, &good, 10, 2, |_| {});
    assert_eq!(read_all(&bases, &good), expected(12));

    // Corrected code on every replica's original WAL: the record applies, exactly once.
    for n in &mut nodes {
        n.sigterm();
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        cluster_node_args_with(&dir, &ports, i, "");
        n.spawn();
    }
    for n in &nodes {
        n.wait_ready_until(Duration::from_secs(60), |s, _| s == 200);
    }
    for b in &bases {
        wait_for(30, "no apply failure after the corrected replay", || {
            failure(b, group).is_null().then_some(())
        });
    }
    let want = format!("{}POISON|", expected(5));
    assert_eq!(read_all(&bases, bad), want);
    producer_load(&bases, bad, 5, 1, |_| {});
    assert_eq!(read_all(&bases, bad), format!("{want}p000005|"));
    assert_eq!(read_all(&bases, &good), expected(12));
    drop(nodes);
}
