//! Budgets a request holds come back however the request ends: clients that send a write or
//! open a live read and then close their connection without reading the answer leave no
//! in-flight body bytes, no uncommitted group bytes and no live-reader slot behind.

use std::io::Write;
use std::net::TcpStream;

use crate::harness::cluster::*;
use crate::harness::conn::read_head;

/// Sends `POST path` with a `len`-byte body and closes the connection without reading.
fn append_and_abort(port: u16, path: &str, len: usize) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\n\r\n"
    );
    let body = vec![b'a'; len];
    // The server may refuse from the head and close first: a failed write is fine.
    let _ = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(&body));
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// Opens a live read of `path` (a request line and headers) and closes it at once.
fn open_live_and_abort(port: u16, target: &str) -> Option<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let head = format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    s.write_all(head.as_bytes()).ok()?;
    Some(s)
}

fn admission(base: &str) -> (u64, u64) {
    let m = metrics(base);
    let a = &m["admission"];
    (
        a["inflight_body_bytes"]
            .as_u64()
            .expect("inflight_body_bytes"),
        a["uncommitted_bytes"].as_u64().expect("uncommitted_bytes"),
    )
}

/// Live readers waiting, by the spec's selector (`per_core_live_read_waiters`), checked
/// against the same counts in `cores[].live_waiters` of the same document.
fn live_waiters(base: &str) -> u64 {
    let m = metrics(base);
    let per_core: Vec<u64> = m["per_core_live_read_waiters"]
        .as_array()
        .expect("per_core_live_read_waiters")
        .iter()
        .map(|n| n.as_u64().expect("a count"))
        .collect();
    let cores: Vec<u64> = m["cores"]
        .as_array()
        .expect("cores")
        .iter()
        .map(|c| c["live_waiters"].as_u64().expect("live_waiters"))
        .collect();
    assert_eq!(
        per_core, cores,
        "the two views of the live waiters disagree"
    );
    per_core.iter().sum()
}

/// A single node (`toml`, `wal`) that has created the stream `path`; with its base URL as the
/// one-element list the request helpers take.
fn node_with_stream(name: &str, toml: &str, wal: &str, path: &str) -> (Scratch, Proc, Vec<String>) {
    let (dir, node) = single_node(name, toml, wal);
    let bases = vec![node.base()];
    assert_eq!(
        send(&bases, 0, "PUT", path, &[], b"").map(|r| r.0),
        Some(201)
    );
    (dir, node, bases)
}

#[test]
fn clients_that_abort_mid_append_leave_no_budget_behind_and_the_group_keeps_taking_writes() {
    let toml = "[raft]\ngroup_count = 1\nmax_uncommitted_size_per_group = \"4MiB\"";
    let wal = "fsync = \"always\"";
    let (_dir, node, bases) = node_with_stream("abort-append", toml, wal, "/demo/abort");
    let port = node.port;
    // Several rounds of 40 clients each sending 1 MiB and leaving: with the group's budget at
    // 4 MiB, a leak of a few writes per round would lock the group's writes for good.
    for round in 0..4 {
        let clients: Vec<_> = (0..40)
            .map(|_| std::thread::spawn(move || append_and_abort(port, "/demo/abort", 1 << 20)))
            .collect();
        for c in clients {
            c.join().expect("client");
        }
        let (inflight, uncommitted) = wait_for(30, "the budgets to return to zero", || {
            let a = admission(&node.base());
            (a == (0, 0)).then_some(a)
        });
        assert_eq!((inflight, uncommitted), (0, 0), "round {round}");
        let r = send_octets(&bases, 0, "/demo/abort", &vec![b'b'; 1 << 20])
            .expect("append after the aborted round");
        assert_eq!(
            r.0,
            204,
            "round {round}: {:?}",
            String::from_utf8_lossy(&r.2)
        );
    }
    // The aborted clients' writes did reach the group (some were applied), so the rounds
    // exercised admitted writes whose clients were gone, not only refusals.
    let (_, headers, _) = send(&bases, 0, "HEAD", "/demo/abort", &[], b"").expect("head");
    let tail: u64 = headers
        .get("stream-next-offset")
        .and_then(|v| v.parse().ok())
        .expect("tail");
    assert!(tail > 4 << 20, "only the 4 checked appends landed: {tail}");
}

#[test]
fn live_readers_that_disconnect_give_their_waiter_slots_back() {
    let dir = tempfile_dir("abort-live");
    let port = free_port();
    let args = vec![
        "server".into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    let node = Proc::start(port, args, dir.join("node.log"));
    let bases = vec![node.base()];
    assert_eq!(
        send(&bases, 0, "PUT", "/demo/live", &[], b"").map(|r| r.0),
        Some(201)
    );
    let tail = "00000000000000000000";
    let mut open = Vec::new();
    for i in 0..60 {
        let target = if i % 2 == 0 {
            format!("/demo/live?offset={tail}&live=long-poll&timeout_ms=60000")
        } else {
            format!("/demo/live?offset={tail}&live=sse")
        };
        open.push(open_live_and_abort(port, &target).expect("connect"));
    }
    wait_for(10, "60 live readers to register", || {
        (live_waiters(&node.base()) == 60).then_some(())
    });
    drop(open);
    wait_for(10, "the waiter slots to come back", || {
        (live_waiters(&node.base()) == 0).then_some(())
    });
    // And the node still serves a live read to its end.
    let (status, _, _) = send(
        &bases,
        0,
        "GET",
        &format!("/demo/live?offset={tail}&live=long-poll&timeout_ms=100"),
        &[],
        b"",
    )
    .expect("long-poll");
    assert_eq!(status, 204);
}

/// Files under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_snapshot_body_staged_for_a_refused_publish_is_deleted_even_when_its_client_left() {
    let dir = tempfile_dir("abort-snapshot");
    let port = free_port();
    let cold = dir.join("cold");
    let args = single_node_args(
        &dir,
        port,
        &format!(
            "[raft]\ngroup_count = 1\n[storage.cold]\nbackend = \"fs\"\nroot = \"{}\"",
            cold.display()
        ),
        "fsync = \"always\"",
    );
    let node = Proc::start(port, args, dir.join("node.log"));
    let bases = vec![node.base()];
    assert_eq!(
        send(&bases, 0, "PUT", "/demo/pub", &[], b"").map(|r| r.0),
        Some(201)
    );
    // Bodies of 1 MiB and more are staged in the cold tier before the publish is proposed.
    // An offset past the tail is refused by the state machine, after the staging.
    let len = 2 << 20;
    for _ in 0..8 {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            continue;
        };
        let head = format!(
            "PUT /demo/pub/snapshot/{:020} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\n\r\n",
            1_000_000
        );
        let _ = s
            .write_all(head.as_bytes())
            .and_then(|()| s.write_all(&vec![b's'; len]));
        drop(s);
    }
    // A refused publish the client stayed for, as a control: its answer says it was refused.
    let (status, _, _) = send(
        &bases,
        0,
        "PUT",
        &format!("/demo/pub/snapshot/{:020}", 1_000_000),
        &[("content-type", "application/octet-stream".to_owned())],
        &vec![b's'; len],
    )
    .expect("publish");
    assert!((400..500).contains(&status), "refused: {status}");
    wait_for(20, "no staged snapshot body left in the cold tier", || {
        let staged: Vec<_> = files_under(&cold)
            .into_iter()
            .filter(|p| p.to_string_lossy().contains("/snap/"))
            .collect();
        staged.is_empty().then_some(())
    });
}

/// Opens `method path` with a chunked body and sends one chunk of `len` bytes, leaving the
/// body unfinished. The server may refuse from what arrived and close before the chunk is all
/// written, so a failed write of the body is not an error here: the answer says what happened.
fn chunked_start(port: u16, method: &str, path: &str, len: usize) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    s.write_all(head.as_bytes()).expect("head");
    let mut chunk = format!("{len:x}\r\n").into_bytes();
    chunk.extend(std::iter::repeat_n(b'c', len));
    chunk.extend_from_slice(b"\r\n");
    let _ = s.write_all(&chunk);
    s
}

/// Ends a chunked body and reads the answer's status and `x-ursula-not-applied`.
fn chunked_finish(mut s: TcpStream) -> (u16, Option<String>) {
    // The server may answer and close before the end: a failed write is fine.
    let _ = s.write_all(b"0\r\n\r\n");
    read_answer(s)
}

/// Sends a chunked body of one `len`-byte chunk while reading the answer.
fn chunked_whole(port: u16, path: &str, len: usize) -> (u16, Option<String>) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n{len:x}\r\n"
    );
    let mut body = vec![b'c'; len];
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    raw_exchange(port, head, body)
}

/// Sends `head` and then `body` from another thread while this one reads the answer, which
/// may come (and the connection close) before the body is all sent: a refusal from the head.
fn raw_exchange(port: u16, head: String, body: Vec<u8>) -> (u16, Option<String>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.write_all(head.as_bytes()).expect("head");
    let mut writer = s.try_clone().expect("clone");
    std::thread::spawn(move || {
        let _ = writer.write_all(&body);
    });
    read_answer(s)
}

/// The status and `x-ursula-not-applied` of the answer read from `s`.
fn read_answer(mut s: TcpStream) -> (u16, Option<String>) {
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    // A head cut short still shows in the failure below.
    let answer = read_head(&mut s).unwrap_or_else(|partial| partial);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let marker = text
        .lines()
        .find_map(|l| l.strip_prefix("x-ursula-not-applied: "))
        .map(str::to_owned);
    (status, marker)
}

#[test]
fn chunked_bodies_and_snapshot_bodies_count_against_the_in_flight_budget_as_they_arrive() {
    let toml = "[server]\nhttp_inflight_body_size = \"1MiB\"\n[raft]\ngroup_count = 1";
    let (_dir, node, bases) = node_with_stream("chunked-admission", toml, "", "/demo/c");
    let port = node.port;
    // A chunked append that has sent 800 KiB and stalls holds those bytes.
    let holder = chunked_start(port, "POST", "/demo/c", 800 << 10);
    wait_for(20, "the stalled chunked body's bytes held", || {
        (admission(&node.base()).0 >= 800 << 10).then_some(())
    });
    // A second chunked append past the rest of the budget is refused, marked, as the
    // declared-length one would be; so is a snapshot body.
    let second = chunked_start(port, "POST", "/demo/c", 600 << 10);
    assert_eq!(
        chunked_finish(second),
        (503, Some("IngressBodyBytesLimitReached".to_owned()))
    );
    let snapshot = format!("/demo/c/snapshot/{:020}", 0);
    let body = vec![b's'; 600 << 10];
    let head = format!(
        "PUT {snapshot} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    assert_eq!(
        raw_exchange(port, head, body.clone()),
        (503, Some("IngressBodyBytesLimitReached".to_owned()))
    );
    let ctype = [("content-type", "application/octet-stream".to_owned())];
    // The holder finishes: its append lands, and the budget comes back whole.
    assert_eq!(chunked_finish(holder), (204, None));
    wait_for(20, "the budget released", || {
        (admission(&node.base()).0 == 0).then_some(())
    });
    let (status, _, _) = send(&bases, 0, "PUT", &snapshot, &ctype, &body).expect("put");
    assert!(status < 300, "a snapshot that fits is published: {status}");
    // A chunked body over the route limit gets the same marked 413 as a declared one.
    assert_eq!(
        chunked_whole(port, "/demo/c", (32 << 20) + 1),
        (413, Some("RequestBodyTooLarge".to_owned()))
    );
    let text = read_all(&bases, "/demo/c");
    assert_eq!(text.len(), 800 << 10, "only the holder's append landed");
}
