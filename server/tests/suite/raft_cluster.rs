//! The Raft engine with real processes on loopback ports: a durable single node that survives
//! SIGKILL, and a 3-voter cluster from one TOML file that keeps every acknowledged append
//! exactly once through the SIGKILL of its leader, and peer RPCs that reach the wrong node.

use std::time::Duration;
use std::time::Instant;

use crate::harness::cluster::*;

#[test]
fn a_durable_single_node_keeps_every_acknowledged_append_through_sigkill() {
    let dir = tempfile_dir("durable");
    let mut node = start_single_node(&dir, "[raft]\ngroup_count = 4", "fsync = \"always\"");
    let bases = vec![node.url("")];
    assert_eq!(
        send(&bases, 0, "PUT", "/demo/durable", &[], b"").map(|r| r.0),
        Some(201)
    );
    producer_load(&bases, "/demo/durable", 0, 200, |_| {});
    node.kill9();
    node.spawn();
    assert_eq!(
        read_all(&bases, "/demo/durable"),
        expected(200),
        "every acknowledged append, once"
    );
    producer_load(&bases, "/demo/durable", 200, 10, |_| {});
    assert_eq!(read_all(&bases, "/demo/durable"), expected(210));
}

/// Under `fsync = "never"` a group's commit point is held for the core's next journal write
/// (docs/architecture.md): a SIGKILL in the middle of a load may take the newest ones with it,
/// and the restarted node must still serve every acknowledged append, once.
#[test]
fn a_never_fsync_node_killed_amid_appends_keeps_each_acknowledged_one_once() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering;
    let dir = tempfile_dir("durable-never");
    let mut node = start_single_node(&dir, "[raft]\ngroup_count = 4", "fsync = \"never\"");
    let bases = vec![node.url("")];
    let paths: Vec<String> = (0..8).map(|i| format!("/demo/never-{i}")).collect();
    for p in &paths {
        assert_eq!(send(&bases, 0, "PUT", p, &[], b"").map(|r| r.0), Some(201));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = paths
        .iter()
        .map(|path| {
            let (stop, bases, path) = (stop.clone(), bases.clone(), path.clone());
            let acked = Arc::new(AtomicU64::new(0));
            let counted = acked.clone();
            let t = std::thread::spawn(move || {
                let mut seq = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let headers = [
                        ("content-type", "application/octet-stream".to_owned()),
                        ("producer-id", "load".to_owned()),
                        ("producer-epoch", "0".to_owned()),
                        ("producer-seq", seq.to_string()),
                    ];
                    let body = format!("p{seq:06}|");
                    match send(&bases, 0, "POST", &path, &headers, body.as_bytes()) {
                        Some((200 | 204, _, _)) => {
                            seq += 1;
                            counted.store(seq, Ordering::SeqCst);
                        }
                        // The node is gone: this append may or may not have been kept.
                        _ => break,
                    }
                }
            });
            (t, acked)
        })
        .collect();
    // The load's length before the kill: a workload, not a wait.
    std::thread::sleep(Duration::from_millis(1_500));
    node.kill9();
    stop.store(true, Ordering::SeqCst);
    let acked: Vec<u64> = writers
        .into_iter()
        .map(|(t, acked)| {
            t.join().expect("writer");
            acked.load(Ordering::SeqCst)
        })
        .collect();
    assert!(acked.iter().all(|&n| n > 10), "the load ran: {acked:?}");
    node.spawn();
    for (path, &n) in paths.iter().zip(&acked) {
        let got = read_all(&bases, path);
        assert!(
            got == expected(n) || got == expected(n + 1),
            "{path}: {n} appends were acknowledged, and the restarted node holds {} bytes that are not them once each",
            got.len()
        );
    }
    // And it goes on taking appends where the stream ends.
    let have = read_all(&bases, &paths[0]).len() as u64 / 8;
    producer_load(&bases, &paths[0], have, 5, |_| {});
    assert_eq!(read_all(&bases, &paths[0]), expected(have + 5));
}

#[test]
fn a_three_voter_cluster_keeps_acknowledged_appends_exactly_once_through_leader_sigkill() {
    let dir = tempfile_dir("cluster");
    let (_, mut nodes, bases) = start_cluster(&dir, 3, 3);
    // Appends through any node: followers redirect writes to the leader.
    create_when_led(&bases, "/demo/load");
    let (status, hs, _) = agent_raw(&bases[0], "/demo/load");
    let leader = match status {
        307 => hs,
        200 => bases[0].clone(),
        other => panic!("a repeated create answered {other}"),
    };
    let leader_idx = bases
        .iter()
        .position(|b| leader.starts_with(b.as_str()))
        .expect("leader is a node");
    let mut killed = false;
    producer_load(&bases, "/demo/load", 0, 300, |seq| {
        if seq == 150 && !killed {
            nodes[leader_idx].kill9();
            killed = true;
        }
    });
    let survivors: Vec<String> = bases
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader_idx)
        .map(|(_, b)| b.clone())
        .collect();
    assert_eq!(
        read_all(&survivors, "/demo/load"),
        expected(300),
        "every acknowledged append exactly once"
    );
    // Followers serve history themselves, and send HEAD and tails to the leader.
    let follower = survivors
        .iter()
        .find(|b| agent_raw(b, "/demo/load").0 == 307)
        .expect("one survivor follows")
        .clone();
    let head = agent()
        .run(
            ureq::http::Request::builder()
                .method("HEAD")
                .uri(format!("{follower}/demo/load"))
                .body(Vec::new())
                .expect("req"),
        )
        .expect("head");
    assert_eq!(
        head.status().as_u16(),
        307,
        "HEAD is linearizable: the leader answers it"
    );
    let loc = head
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        loc.ends_with("/demo/load") && !loc.starts_with(&follower),
        "{loc}"
    );
    let mut part = agent()
        .get(&format!("{follower}/demo/load?offset=-1&max_bytes=8"))
        .call()
        .expect("partial read");
    assert_eq!(
        part.status().as_u16(),
        200,
        "a follower serves replicated history"
    );
    assert_eq!(part.body_mut().read_to_string().expect("body"), "p000000|");
    // The killed node restarts, catches up, and serves the same bytes.
    nodes[leader_idx].spawn();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _, body) = send(
            &[bases[leader_idx].clone()],
            0,
            "GET",
            "/demo/load?offset=-1",
            &[],
            b"",
        )
        .unwrap_or_default();
        if status == 200 && body == expected(300).as_bytes() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted node never caught up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(nodes);
}

#[test]
fn a_wal_filesystem_below_its_minimum_refuses_writes_marked_and_the_node_is_unready() {
    let wal = "min_available_size = \"1000000GiB\"\nresume_available_size = \"2000000GiB\"";
    let (_dir, node) = single_node("pressure", "[raft]\ngroup_count = 2", wal);
    let resp = agent()
        .put(&node.url("/demo/full"))
        .send_empty()
        .expect("put");
    assert_eq!(resp.status().as_u16(), 503);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        header("x-ursula-not-applied").as_deref(),
        Some("WalDiskPressure")
    );
    assert_eq!(header("retry-after").as_deref(), Some("1"));
    let mut ready = agent()
        .get(&node.url("/__ursula/ready"))
        .call()
        .expect("ready");
    assert_eq!(ready.status().as_u16(), 503);
    let body = ready.body_mut().read_to_string().expect("body");
    assert!(body.contains("wal_disk_pressure"), "{body}");
    drop(node);
}

#[test]
fn a_raft_log_past_twice_its_budget_refuses_bodies_but_not_closes() {
    let toml = "[raft]\ngroup_count = 1\nsnapshot_log_budget = \"1KiB\"";
    let (_dir, node) = single_node("logpressure", toml, "");
    let bases = vec![node.url("")];
    assert_eq!(
        send(&bases, 0, "PUT", "/demo/log", &[], b"").map(|r| r.0),
        Some(201)
    );
    let body = vec![b'x'; 600];
    let mut refused = None;
    for _ in 0..20 {
        let r = send_octets(&bases, 0, "/demo/log", &body).expect("post");
        if r.0 == 503 {
            refused = Some(r);
            break;
        }
        assert_eq!(r.0, 204);
    }
    let (status, headers, _) =
        refused.expect("the log passed twice the budget and writes with a body were refused");
    assert_eq!(status, 503);
    assert_eq!(
        headers.get("x-ursula-not-applied").map(String::as_str),
        Some("RaftLogPressure")
    );
    assert_eq!(headers.get("retry-after").map(String::as_str), Some("1"));
    let close = send(
        &bases,
        0,
        "POST",
        "/demo/log",
        &[("stream-closed", "true".to_owned())],
        b"",
    )
    .expect("close");
    assert_eq!(close.0, 204, "a write without a body still passes");
    drop(node);
}

#[test]
fn a_peer_rpc_addressed_to_another_node_or_sent_by_an_unknown_one_is_refused_as_misdirected() {
    let dir = tempfile_dir("misdirected");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    // Node 1 alone: the others need not run for its peer endpoint to answer.
    let node = start_cluster_node(&dir, &ports, 0);
    // Each RPC carries the cluster's secret: what is checked here is who it claims to be.
    let probe = |headers: &[(&str, &str)]| {
        let url = node.url("/__ursula/raft-rpc/0/probe");
        let mut all = vec![(SECRET_HEADER, PEER_SECRET)];
        all.extend_from_slice(headers);
        let (status, _, body) = send_url("POST", &url, &all, b"").expect("answer");
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    let from = "x-ursula-raft-from";
    let to = "x-ursula-raft-to";
    assert_eq!(probe(&[(from, "2"), (to, "1")]).0, 200);
    let (status, text) = probe(&[]);
    assert_eq!(status, 421, "an RPC that names no sender: {text}");
    assert!(text.contains("names no sender"), "{text}");
    let (status, text) = probe(&[(from, "2"), (to, "3")]);
    assert_eq!(status, 421, "{text}");
    assert!(
        text.contains("addressed to node 3, but this is node 1"),
        "{text}"
    );
    for sender in ["1", "9"] {
        let (status, text) = probe(&[(from, sender), (to, "1")]);
        assert_eq!(status, 421, "{text}");
        assert!(
            text.contains(&format!("comes from node {sender}")),
            "{text}"
        );
    }
    assert_eq!(probe(&[(from, "two"), (to, "1")]).0, 421);
    let batch = node.url("/__ursula/raft-rpc-batch");
    let headers = [(SECRET_HEADER, PEER_SECRET), (from, "3"), (to, "2")];
    let (status, _, _) = send_url("POST", &batch, &headers, b"\x90").expect("answer");
    assert_eq!(status, 421, "a batch is checked like a single RPC");
    drop(node);
}

#[test]
fn a_peer_list_pointing_at_the_wrong_node_is_refused_and_the_others_keep_a_quorum() {
    let dir = tempfile_dir("wrong-peer");
    let (ports, mut nodes, _) = start_cluster(&dir, 3, 2);
    // Node 3's own copy of the peer list names node 1's address for node 2 too: without the
    // check, node 1's answers would count as node 2's votes and acknowledgements.
    let mut args = cluster_node_args(&dir, &ports, 2);
    let own = std::path::PathBuf::from(&args[2]);
    let text = std::fs::read_to_string(&own).expect("toml");
    let wrong = text.replace(
        &format!("url = \"http://127.0.0.1:{}\"", ports[1]),
        &format!("url = \"http://127.0.0.1:{}\"", ports[0]),
    );
    assert_ne!(text, wrong);
    let bad = dir.join("n3-wrong.toml");
    std::fs::write(&bad, wrong).expect("toml");
    args[2] = bad.display().to_string();
    nodes.push(Proc::start(ports[2], args, dir.join("n3.log")));
    let bases: Vec<String> = nodes.iter().map(|n| n.url("")).collect();
    create_when_led(&bases[..2], "/demo/wrong");
    producer_load(&bases[..2], "/demo/wrong", 0, 20, |_| {});
    wait_for(30, "node 1 refusing node 3's RPCs meant for node 2", || {
        nodes[0]
            .log_text()
            .contains(
                "misdirected Raft RPC refused: this RPC is addressed to node 2, but this is node 1",
            )
            .then_some(())
    });
    assert_eq!(read_all(&bases[..2], "/demo/wrong"), expected(20));
    drop(nodes);
}

#[test]
fn a_peer_rpc_of_another_raft_protocol_is_refused_and_leaves_the_node_unready_until_it_restarts() {
    let dir = tempfile_dir("protocol");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut node = start_cluster_node(&dir, &ports, 0);
    let (status, _, body) =
        send_url("GET", &node.url("/__ursula/raft-protocol"), &[], b"").expect("answer");
    assert_eq!(
        (status, String::from_utf8_lossy(&body).into_owned()),
        (200, r#"{"raft_protocol":3}"#.to_owned())
    );
    let reason = |node: &Proc| node.json("/__ursula/ready").1["reason"].clone();
    assert_ne!(reason(&node), "format_epoch_mismatch");

    let rpc = node.url("/__ursula/raft-rpc/0/probe");
    // Without the cluster's secret, nobody can make the node record a mismatch.
    let (status, _, _) =
        send_url("POST", &rpc, &[("x-ursula-raft-protocol", "2")], b"").expect("answer");
    assert_eq!(status, 401);
    assert_ne!(reason(&node), "format_epoch_mismatch");
    let peer = |protocol| {
        [
            (SECRET_HEADER, PEER_SECRET),
            ("x-ursula-raft-protocol", protocol),
            ("x-ursula-raft-from", "2"),
            ("x-ursula-raft-to", "1"),
        ]
    };
    let (status, headers, body) = send_url("POST", &rpc, &peer("2"), b"").expect("answer");
    let text = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("speaks Raft protocol \"2\""), "{text}");
    assert_eq!(
        headers.get("x-ursula-raft-protocol").map(String::as_str),
        Some("3")
    );
    assert_eq!(node.json("/__ursula/ready").0, 503);
    assert_eq!(reason(&node), "format_epoch_mismatch");
    assert!(node.log_text().contains("Raft protocol mismatch"));
    // Protocol 3 RPCs are still served; readiness waits for a restart.
    let (status, _, _) = send_url("POST", &rpc, &peer("3"), b"").expect("answer");
    assert_eq!(status, 200);
    assert_eq!(reason(&node), "format_epoch_mismatch");

    node.kill9();
    node.spawn();
    assert_ne!(reason(&node), "format_epoch_mismatch");
    drop(node);
}

/// A peer of another release: every request gets `{"raft_protocol": 2}`.
fn protocol_2_peer() -> u16 {
    use std::io::Read;
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let body = r#"{"raft_protocol":2}"#;
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn a_node_whose_peer_speaks_another_raft_protocol_refuses_to_start_before_writing_anything() {
    let dir = tempfile_dir("protocol-start");
    // Node 2 runs another release; node 3 is down, which the probe skips.
    let ports = vec![free_port(), protocol_2_peer(), free_port()];
    let args = cluster_node_args(&dir, &ports, 0);
    let (code, stderr) = refused_start(&args);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "peer 2 (http://127.0.0.1:{}) refused Raft protocol 3: it speaks protocol 2",
            ports[1]
        )),
        "{stderr}"
    );
    assert!(
        !cluster_wal(&dir, 0).join("raft-log/FORMAT_EPOCH").exists(),
        "nothing written before the refusal"
    );
}

/// A follower's catch-up read that reaches its local tail serves the bytes it holds, without
/// `Stream-Up-To-Date`, rather than answering `307` and dropping them (docs/reliability.md,
/// "What the runs found"); only a read with nothing to serve at its tail, and a cursor past its
/// tail (the leader alone says whether that is `416`), go to the leader.
#[test]
fn a_follower_serves_its_replicated_tail_without_up_to_date_and_judges_cursors_past_it_by_the_leaders_read_index()
 {
    let dir = tempfile_dir("follower-reads");
    let (_, nodes, bases) = start_cluster(&dir, 3, 3);
    create_when_led(&bases, "/demo/tail");
    // Appends `m{i}|` for each `i` of `records` through `bases`.
    let append = |bases: &[String], records: std::ops::Range<u32>| {
        for i in records {
            let answer = send_octets(bases, 0, "/demo/tail", format!("m{i}|").as_bytes());
            assert_eq!(answer.map(|a| a.0), Some(204), "append m{i}");
        }
    };
    append(&bases, 0..5);
    let follower = bases
        .iter()
        .find(|b| agent_raw(b, "/demo/tail").0 == 307)
        .expect("a follower")
        .clone();
    let get = |offset: &str| {
        send_url(
            "GET",
            &format!("{follower}/demo/tail?offset={offset}"),
            &[],
            b"",
        )
        .map(|a| a.0)
        .unwrap_or(0)
    };
    let raw = |offset: &str| {
        let r = agent()
            .get(&format!("{follower}/demo/tail?offset={offset}"))
            .call()
            .expect("follower read");
        let status = r.status().as_u16();
        let hs = r.headers().clone();
        (status, hs, r)
    };
    // Wait until the follower applied every append, then read its whole tail there.
    let tail = wait_for(20, "the follower to apply the appends", || {
        let (status, hs, mut r) = raw("-1");
        let body = r.body_mut().read_to_string().ok()?;
        (status == 200 && body == "m0|m1|m2|m3|m4|").then(|| {
            hs.get("stream-next-offset")
                .and_then(|v| v.to_str().ok())
                .expect("next offset")
                .to_owned()
        })
    });
    let (status, hs, _) = raw("-1");
    assert_eq!(status, 200, "the follower serves its replicated tail");
    assert!(hs.get("stream-up-to-date").is_none(), "{hs:?}");
    // Nothing to serve at its tail: the leader answers, and says up to date.
    let (status, hs, _) = raw(&tail);
    assert_eq!(status, 307, "{hs:?}");
    let (status, hs, _) = send(
        &bases,
        0,
        "GET",
        &format!("/demo/tail?offset={tail}"),
        &[],
        b"",
    )
    .expect("read at the tail");
    assert_eq!(status, 200);
    assert_eq!(
        hs.get("stream-up-to-date").map(String::as_str),
        Some("true")
    );
    // A cursor past the follower's tail: it asks the leader for a quorum-confirmed read
    // index, applies up to it, and only then answers 416 itself.
    let past = format!("{:020}", tail.parse::<u64>().expect("offset") + 100);
    let (status, hs, _) = raw(&past);
    assert_eq!(
        status, 416,
        "the follower refuses a cursor past the real tail: {hs:?}"
    );
    assert_eq!(get(&past), 416);
    // A follower that missed appends (stopped while the other two committed them) serves a
    // cursor past its stale tail once it applied the leader's read index: never a 416 for
    // bytes that exist.
    let stopped = nodes
        .iter()
        .find(|n| n.base() == follower)
        .expect("the follower's process");
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &stopped.pid().to_string()])
            .status()
            .expect("kill");
        assert!(ok.success());
    };
    signal("-STOP");
    let others: Vec<String> = bases.iter().filter(|b| **b != follower).cloned().collect();
    // Appended while the follower is stopped.
    append(&others, 5..8);
    signal("-CONT");
    let inside = format!("{:020}", tail.parse::<u64>().expect("offset") + 3);
    // A barrier the resumed follower cannot finish (its own election timer may have fired
    // and moved the term) sends the read to the leader instead: a 307, followed here.
    let (status, hs, body) = send_url(
        "GET",
        &format!("{follower}/demo/tail?offset={inside}"),
        &[],
        b"",
    )
    .expect("read past the stale tail");
    assert_eq!(status, 200, "{hs:?}");
    // It may have caught up part of the way on its own, and serves what it holds then.
    let body = String::from_utf8(body).expect("utf8");
    assert!(body == "m6|" || body == "m6|m7|", "{body:?}");
}

/// `raft_grpc_append_stream_frame_bytes_max` reports the largest message a node sent its
/// peers: after one 300 KiB append, the leader's is that append's batch, not a sum of them.
#[test]
fn the_largest_peer_message_a_leader_sent_is_reported() {
    let dir = tempfile_dir("frame-max");
    let (_, _nodes, bases) = start_cluster(&dir, 3, 3);
    create_when_led(&bases, "/demo/frames");
    let body = vec![b'f'; 300 << 10];
    for _ in 0..3 {
        assert_eq!(
            send_octets(&bases, 0, "/demo/frames", &body).map(|a| a.0),
            Some(204)
        );
    }
    let largest = bases
        .iter()
        .map(|b| {
            metrics(b)["raft_grpc_append_stream_frame_bytes_max"]
                .as_u64()
                .expect("the metric")
        })
        .max()
        .expect("nodes");
    assert!(
        (300 << 10..600 << 10).contains(&largest),
        "one append's batch, not a sum: {largest}"
    );
}
