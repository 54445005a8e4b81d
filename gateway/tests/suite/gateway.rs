//! `ursula gateway` in front of real `ursula server` processes on loopback ports: creates,
//! appends, reads, long-polls and SSE pass through; a 3-voter Raft cluster takes writes sent to
//! the gateway whichever node leads; a node that is down gives a marked `503`, an oversized
//! body a marked `413`; every answer carries the vouch.

use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;
use std::time::Instant;

use crate::harness::cluster::node_args;
use crate::harness::cluster::peer_entries;
use crate::harness::cluster::server_args;
use crate::harness::cluster::wait_for;
use crate::harness::gateway::*;

#[test]
fn the_gateway_forwards_create_append_read_long_poll_and_sse() {
    let f = fronted("forward", &[]);
    let (node, gw) = (&f.node, &f.gw);

    let a = send("PUT", &gw.url("/demo"), &[], b"");
    assert!(matches!(a.status, 200 | 201 | 204), "bucket: {}", a.status);
    assert!(a.vouched());
    let a = send("PUT", &gw.url("/demo/s"), &[TEXT], b"");
    assert_eq!(a.status, 201, "{}", a.body);
    assert!(a.vouched());
    let a = send("POST", &gw.url("/demo/s"), &[TEXT], b"first|");
    assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);
    assert!(a.vouched());
    assert!(a.header("stream-next-offset").is_some());
    let a = send("GET", &gw.url("/demo/s?offset=-1"), &[], b"");
    assert_eq!((a.status, a.body.as_str()), (200, "first|"));
    assert!(a.vouched());
    let tail = a.header("stream-next-offset").expect("offset").to_owned();
    // The same bytes straight from the node: the gateway changed nothing.
    let direct = send("GET", &node.url("/demo/s?offset=-1"), &[], b"");
    assert_eq!(direct.body, "first|");
    assert!(!direct.vouched(), "nodes never vouch");

    // A long-poll waits at the tail through the gateway and gets the next append.
    let poll_url = gw.url(&format!(
        "/demo/s?offset={tail}&live=long-poll&timeout_ms=10000"
    ));
    let poll = std::thread::spawn(move || send("GET", &poll_url, &[], b""));
    wait_for(10, "the long-poll waiting at the tail", || {
        (live_waiters(node) == 1).then_some(())
    });
    let a = send("POST", &gw.url("/demo/s"), &[TEXT], b"second|");
    assert!(matches!(a.status, 200 | 204));
    let polled = poll.join().expect("long-poll thread");
    assert_eq!((polled.status, polled.body.as_str()), (200, "second|"));
    assert!(polled.vouched());

    // SSE streams through as it happens: the first events arrive, then an append made while
    // the subscription is open arrives on it.
    let mut s = TcpStream::connect(("127.0.0.1", gw.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let req = format!(
        "GET /demo/s?offset=-1&live=sse HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
        gw.port
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut seen = String::new();
    read_until(&mut s, &mut seen, "second|");
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(seen.to_ascii_lowercase().contains("text/event-stream"));
    assert!(seen.to_ascii_lowercase().contains(VOUCH));
    assert!(seen.contains("first|"));
    let a = send("POST", &gw.url("/demo/s"), &[TEXT], b"third|");
    assert!(matches!(a.status, 200 | 204));
    read_until(&mut s, &mut seen, "third|");
    drop(s);

    let a = send("DELETE", &gw.url("/demo/s"), &[], b"");
    assert!(matches!(a.status, 200 | 204), "{}", a.status);
    assert!(a.vouched());
    let a = send("GET", &gw.url("/demo/s?offset=-1"), &[], b"");
    assert_eq!(a.status, 404);
    assert!(a.vouched());
}

#[test]
fn an_upstream_that_is_down_gets_a_marked_503_with_the_vouch() {
    let scratch = Scratch::new("down");
    let dead = format!("http://127.0.0.1:{}", free_port());
    let gw = gateway(&scratch, "gateway", &[dead], &[]);
    let a = send("POST", &gw.url("/demo/s"), &[TEXT], b"x");
    assert_eq!(a.status, 503, "{}", a.body);
    assert_eq!(a.header(MARKER), Some("UpstreamUnreachable"));
    assert_eq!(a.header("retry-after"), Some("1"));
    assert!(a.vouched());
}

#[test]
fn an_oversized_body_gets_a_marked_413_and_is_not_forwarded() {
    let f = fronted("oversized", &["--max-request-body-bytes", "1024"]);
    let (node, gw) = (&f.node, &f.gw);
    assert_eq!(send("PUT", &gw.url("/demo/s"), &[TEXT], b"").status, 201);
    // A declared length over the limit is refused from the head, the body left unsent.
    let mut s = TcpStream::connect(("127.0.0.1", gw.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "POST /demo/s HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: text/plain\r\n\
         Content-Length: 4096\r\n\r\n",
        gw.port
    );
    s.write_all(head.as_bytes()).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 413"), "{text}");
    assert!(
        text.contains(&format!("{MARKER}: requestbodytoolarge")),
        "{text}"
    );
    assert!(text.contains(&format!("{VOUCH}: 1")), "{text}");
    // A body at the limit goes through; the stream holds only it.
    let body = vec![b'a'; 1024];
    let a = send("POST", &gw.url("/demo/s"), &[TEXT], &body);
    assert!(matches!(a.status, 200 | 204), "{}", a.status);
    let a = send("GET", &node.url("/demo/s?offset=-1"), &[], b"");
    assert_eq!(a.body.len(), 1024);
}

/// Three voters from one TOML, each with its own WAL directory.
fn cluster(scratch: &Scratch) -> Vec<Proc> {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let shared = format!(
        "[raft]\ngroup_count = 4\ninit_membership_per_group = true\n{}",
        peer_entries(&ports)
    );
    ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let wal = scratch.path().join(format!("n{}-wal", i + 1));
            let own = scratch.path().join(format!("n{}.toml", i + 1));
            std::fs::write(
                &own,
                format!(
                    "{shared}[runtime]\ncore_count = 1\n[raft.wal]\npath = \"{}\"\n",
                    wal.display()
                ),
            )
            .expect("toml");
            let args = node_args(&own, i, *p);
            Proc::spawn(scratch, &format!("n{}", i + 1), *p, &args)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .enumerate()
        .map(|(i, mut p)| {
            // Ready once every group has a leader: only after all three are up.
            p.wait_for(&format!("n{}", i + 1), "/__ursula/ready");
            p
        })
        .collect()
}

/// Retries `op` through elections: until a 2xx, failing after 30 s. No answer may be a `307`
/// (the gateway follows those itself) or lack the vouch.
fn until_2xx(what: &str, mut op: impl FnMut() -> Answer) -> Answer {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = op();
        assert_ne!(a.status, 307, "{what}: a redirect reached the client");
        assert!(a.vouched(), "{what}: {} without the vouch", a.status);
        if (200..300).contains(&a.status) {
            return a;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {} after 30 s: {}",
            a.status,
            a.body
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_raft_cluster_behind_the_gateway_takes_writes_whichever_node_leads() {
    let scratch = Scratch::new("cluster");
    let nodes = cluster(&scratch);
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    // One gateway per node put first: a new gateway sends its first request to its first
    // upstream, so two of them start at a follower and must follow its redirect.
    let gateways: Vec<Proc> = (0..3)
        .map(|first| {
            let order: Vec<String> = (0..3).map(|k| bases[(first + k) % 3].clone()).collect();
            gateway(&scratch, &format!("gw{first}"), &order, &[])
        })
        .collect();
    until_2xx("create", || {
        send("PUT", &gateways[0].url("/demo/ha"), &[TEXT], b"")
    });
    let mut expected = String::new();
    for (i, gw) in gateways.iter().enumerate() {
        for seq in 0..3u64 {
            let n = i as u64 * 3 + seq;
            let body = format!("r{n}|");
            let producer_seq = n.to_string();
            let headers = [
                TEXT,
                ("producer-id", "gw-test"),
                ("producer-epoch", "0"),
                ("producer-seq", producer_seq.as_str()),
            ];
            until_2xx(&format!("append {n} via gateway {i}"), || {
                send("POST", &gw.url("/demo/ha"), &headers, body.as_bytes())
            });
            expected.push_str(&body);
        }
    }
    let read = until_2xx("read", || {
        send("GET", &gateways[2].url("/demo/ha?offset=-1"), &[], b"")
    });
    assert_eq!(read.body, expected, "every write once, in order");
    // Whichever node leads the stream's group, at least one gateway started at a follower
    // and followed its redirect to the leader.
    let redirects: u64 = gateways
        .iter()
        .map(|g| {
            let m = send("GET", &g.url("/__ursula/gateway/metrics"), &[], b"");
            let v: serde_json::Value = serde_json::from_str(&m.body).expect("metrics json");
            v["leader_redirects"].as_u64().unwrap_or(0)
        })
        .sum();
    assert!(redirects >= 1, "no gateway followed a redirect");
    drop(gateways);
    drop(nodes);
}

/// A single durable Raft node, which serves peer RPCs on its client listener.
fn raft_node(scratch: &Scratch) -> Proc {
    let config = scratch.path().join("raft.toml");
    let wal = scratch.path().join("wal");
    std::fs::write(
        &config,
        format!(
            "[runtime]\ncore_count = 2\n[raft]\ngroup_count = 2\n[raft.wal]\npath = \"{}\"\n",
            wal.display()
        ),
    )
    .expect("config");
    let port = free_port();
    let args = server_args(&config, port);
    Proc::start(scratch, "raft", port, &args, "/__ursula/ready")
}

#[test]
fn the_gateway_forwards_only_the_nodes_read_only_internal_paths() {
    let scratch = Scratch::new("gw-internal");
    let node = raft_node(&scratch);
    let gw = gateway(&scratch, "gw", &[node.url("")], &[]);
    // A single node has no peers: it takes no peer RPC, from the gateway or anyone else.
    let direct = send("POST", &node.url("/__ursula/raft-rpc/0/probe"), &[], b"");
    assert_eq!(direct.status, 421, "{}", direct.body);
    let metrics = send("GET", &gw.url("/__ursula/metrics"), &[], b"");
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    let doc: serde_json::Value = serde_json::from_str(&metrics.body).expect("metrics JSON");
    let incarnation = doc["process_incarnation"].as_str().expect("incarnation");
    assert_eq!(
        send("GET", &gw.url("/__ursula/ready"), &[], b"").status,
        200
    );
    for (method, path) in [
        ("POST", "/__ursula/raft-rpc/0/probe"),
        ("POST", "/__ursula/raft-rpc-batch"),
        ("GET", "/__ursula/raft-protocol"),
        ("POST", "/__ursula/flush-cold/demo/s"),
        ("POST", "/__ursula/raft/0/recovery/accept-unsynced-loss"),
        ("DELETE", "/__ursula/purge/demo"),
        ("POST", "/__ursula/metrics"),
        ("GET", "/__ursula/anything-else"),
    ] {
        let a = send(
            method,
            &gw.url(path),
            &[("x-ursula-process-incarnation", incarnation)],
            b"",
        );
        assert_eq!(a.status, 404, "{method} {path}: {}", a.body);
        // The gateway's own 404 (JSON), not a node's answer passed through.
        assert!(
            a.body.contains("\"NotFound\""),
            "{method} {path}: {}",
            a.body
        );
        assert!(a.vouched());
    }
}

/// An SSE subscription read event by event with the HTML standard's rules: `data:` values (one
/// leading space removed) joined by LF, the last LF dropped.
struct SseReader {
    lines: std::io::BufReader<Box<dyn Read + Send>>,
}

impl SseReader {
    fn open(url: &str) -> SseReader {
        let resp = agent()
            .get(url)
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        assert_eq!(resp.status().as_u16(), 200, "{url}");
        let reader: Box<dyn Read + Send> = Box::new(resp.into_body().into_reader());
        SseReader {
            lines: std::io::BufReader::new(reader),
        }
    }

    /// The next event: its name and its raw lines, then its decoded data.
    fn next(&mut self) -> (String, String, String) {
        use std::io::BufRead;
        let (mut name, mut raw, mut data) = (String::new(), String::new(), Vec::new());
        loop {
            let mut line = String::new();
            let n = self.lines.read_line(&mut line).expect("read an event line");
            assert!(n > 0, "the subscription ended inside an event: {raw:?}");
            raw.push_str(&line);
            let line = line.strip_suffix('\n').unwrap_or(&line);
            if line.is_empty() {
                if name.is_empty() && data.is_empty() {
                    continue;
                }
                return (name, raw, data.join("\n"));
            }
            if let Some(v) = line.strip_prefix("event:") {
                name = v.trim_start().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
            }
        }
    }

    fn next_data(&mut self) -> (String, String) {
        loop {
            let (name, raw, data) = self.next();
            if name == "data" {
                return (raw, data);
            }
        }
    }
}

#[test]
fn json_sse_events_reach_a_standard_parser_through_the_gateway_with_every_line_feed() {
    let f = fronted("json-sse", &[]);
    let (node, gw) = (&f.node, &f.gw);
    const JSON: (&str, &str) = ("content-type", "application/json");
    let a = send("PUT", &gw.url("/demo"), &[], b"");
    assert!(matches!(a.status, 200 | 201 | 204), "bucket: {}", a.status);
    let a = send("PUT", &gw.url("/demo/j"), &[JSON], b"");
    assert_eq!(a.status, 201, "{}", a.body);
    let a = send("POST", &gw.url("/demo/j"), &[JSON], br#"[{"a":1},{"a":2}]"#);
    assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);

    // Catch-up: both records, each ending in its LF, and the same event bytes as the node's.
    let mut through = SseReader::open(&gw.url("/demo/j?offset=-1&live=sse"));
    let mut direct = SseReader::open(&node.url("/demo/j?offset=-1&live=sse"));
    let (raw, data) = through.next_data();
    assert_eq!(data, "{\"a\":1}\n{\"a\":2}\n", "{raw:?}");
    assert_eq!(direct.next_data().0, raw, "the gateway changed the event");

    // Live: an append made while subscribed arrives as one whole record with its LF.
    let a = send("POST", &gw.url("/demo/j"), &[JSON], br#"{"b":3}"#);
    assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);
    let (raw, data) = through.next_data();
    assert_eq!(data, "{\"b\":3}\n", "{raw:?}");
    assert_eq!(direct.next_data().0, raw, "the gateway changed the event");
}
