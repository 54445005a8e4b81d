//! A node told to stop drains its HTTP listeners (Operations, "Graceful voter shutdown"): it
//! stops accepting, answers what is in flight and closes each connection after its answer. A
//! write whose body was still arriving when the signal came is answered and survives a restart;
//! a long-poll waiting then is answered `204` up to date; an SSE response ends after its last
//! whole event, with the chunked body's terminator, instead of being cut off.

use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use crate::harness::cluster::*;

const PATH: &str = "/demo/drain";

/// A durable single node with one stream holding `hello`.
fn node_with_stream(name: &str) -> (Scratch, Proc) {
    let dir = tempfile_dir(name);
    let port = free_port();
    let args = single_node_args(&dir, port, "[raft]\ngroup_count = 2", "");
    // The node's own events too: the drain's is one of them.
    let env = vec![(
        "RUST_LOG".to_owned(),
        "warn,ursula::raft=info,ursula::node=info".to_owned(),
    )];
    let node = Proc::start_with_env(port, args, env, dir.join("node.log"));
    create_when_led(&[node.base()], PATH);
    let octet = [("content-type", "application/octet-stream")];
    let (status, _, _) = send_url("POST", &node.url(PATH), &octet, b"hello").expect("append");
    assert!(status == 200 || status == 204, "append answered {status}");
    (dir, node)
}

/// Sends SIGTERM without waiting for the exit.
fn signal(node: &Proc) {
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &node.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
}

/// Waits for the process to exit and returns whether it exited cleanly.
fn exited_cleanly(node: &mut Proc) -> bool {
    let mut child = node.child.take().expect("running");
    wait_for(30, "the node to exit", || {
        child.try_wait().expect("try_wait")
    })
    .success()
}

/// Live readers registered on the node, by the spec's metrics selector.
fn live_waiters(node: &Proc) -> u64 {
    metrics(&node.base())["per_core_live_read_waiters"]
        .as_array()
        .expect("per_core_live_read_waiters")
        .iter()
        .map(|n| n.as_u64().expect("a count"))
        .sum()
}

/// Connecting to the node's client listener is refused: it has stopped accepting.
fn refuses_connections(node: &Proc) -> Option<()> {
    TcpStream::connect(("127.0.0.1", node.port))
        .is_err()
        .then_some(())
}

/// Bytes the node has not yet read from the connection whose client end is `local_port`, from
/// `/proc/net/tcp` (the server's socket: local `server_port`, remote `local_port`).
fn unread_by_server(server_port: u16, local_port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let want_local = format!("0100007F:{server_port:04X}");
    let want_remote = format!("0100007F:{local_port:04X}");
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(1) != Some(&want_local.as_str()) || f.get(2) != Some(&want_remote.as_str()) {
            return None;
        }
        let (_, rx) = f.get(4)?.split_once(':')?;
        u64::from_str_radix(rx, 16).ok()
    })
}

/// Reads an HTTP/1.1 response to the end of the connection: its head, and the rest as sent.
fn read_to_close(conn: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut all = Vec::new();
    conn.read_to_end(&mut all)?;
    let split = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(all.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&all[..split]).to_ascii_lowercase();
    Ok((head, all[split..].to_vec()))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Opens a live read of `PATH` at `query` on a raw connection, waits until the node counts
/// it as a waiter, and then stops the node; returns the connection, to read the answer from.
fn live_read_when_the_node_stops(node: &Proc, query: &str) -> TcpStream {
    let mut conn = TcpStream::connect(("127.0.0.1", node.port)).expect("connect");
    write!(conn, "GET {PATH}?{query} HTTP/1.1\r\nHost: n\r\n\r\n").expect("send the live read");
    wait_for(10, "the live reader to wait", || {
        (live_waiters(node) == 1).then_some(())
    });
    signal(node);
    conn
}

fn read_all(node: &Proc) -> Vec<u8> {
    let (status, _, body) = send_url("GET", &node.url(&format!("{PATH}?offset=-1")), &[], b"")
        .expect("read the stream");
    assert_eq!(status, 200);
    body
}

#[test]
fn a_write_whose_body_is_still_arriving_when_the_node_stops_is_answered_and_survives_a_restart() {
    let (_dir, mut node) = node_with_stream("drain-write");
    let mut conn = TcpStream::connect(("127.0.0.1", node.port)).expect("connect");
    let local_port = conn.local_addr().expect("local addr").port();
    write!(
        conn,
        "POST {PATH} HTTP/1.1\r\nHost: n\r\nContent-Type: application/octet-stream\r\nContent-Length: 10\r\n\r\nworld"
    )
    .expect("send the head and half the body");
    // The node has read the head and the first half: the request is in flight.
    wait_for(10, "the node to read the request head", || {
        (unread_by_server(node.port, local_port) == Some(0)).then_some(())
    });
    signal(&node);
    // It stops accepting (the listener is closed), and then waits for this connection.
    wait_for(10, "the node to stop accepting", || {
        refuses_connections(&node)
    });
    conn.write_all(b", bye")
        .expect("the rest of the body reaches the draining node");
    let (head, _) = read_to_close(&mut conn).expect("the answer, then the close");
    assert!(
        head.starts_with("http/1.1 200") || head.starts_with("http/1.1 204"),
        "the write in flight was answered: {head}"
    );
    assert!(header(&head, "stream-next-offset").is_some(), "{head}");
    assert!(exited_cleanly(&mut node), "{}", node.log_text());
    node.assert_log_says("HTTP listeners drained");
    node.spawn();
    assert_eq!(read_all(&node), b"helloworld, bye");
}

#[test]
fn a_long_poll_waiting_when_the_node_stops_is_answered_up_to_date_at_its_offset() {
    let (_dir, mut node) = node_with_stream("drain-long-poll");
    let (_, hs, _) = send_url("HEAD", &node.url(PATH), &[], b"").expect("head");
    let tail = hs.get("stream-next-offset").expect("tail").clone();
    let query = format!("offset={tail}&live=long-poll&timeout_ms=60000");
    let mut conn = live_read_when_the_node_stops(&node, &query);
    let (head, body) = read_to_close(&mut conn).expect("an answer, not a reset");
    assert!(head.starts_with("http/1.1 204"), "{head}");
    assert_eq!(header(&head, "stream-up-to-date"), Some("true"), "{head}");
    assert_eq!(
        header(&head, "stream-next-offset"),
        Some(tail.to_ascii_lowercase().as_str())
    );
    assert!(body.is_empty());
    assert!(exited_cleanly(&mut node), "{}", node.log_text());
}

#[test]
fn an_sse_response_open_when_the_node_stops_ends_after_its_last_whole_event() {
    let (_dir, mut node) = node_with_stream("drain-sse");
    let mut conn = live_read_when_the_node_stops(&node, "offset=-1&live=sse");
    let (head, body) = read_to_close(&mut conn).expect("the events, then the close");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(header(&head, "transfer-encoding"), Some("chunked"));
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.ends_with("0\r\n\r\n"),
        "the chunked body ends with its terminator: {body:?}"
    );
    assert!(body.contains("event: data"), "{body:?}");
    assert!(body.contains("event: control"), "{body:?}");
    assert!(
        !body.contains("event: error"),
        "a stopping node is not an error of the stream: {body:?}"
    );
    assert!(exited_cleanly(&mut node), "{}", node.log_text());
}
