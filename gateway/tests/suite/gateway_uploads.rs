//! `ursula gateway`'s bounds on what clients and upstreams can hold: the shared body budget
//! (`503 UploadBudgetExhausted`), bodies that stall or crawl (`408 RequestBodyTooSlow`), an
//! upstream that sends no response headers (`504`, no ejection), the startup refusal
//! `LimitAboveSharedBudget`, the drain before a refusal decided from the head, and the
//! listener's request-head timeout and connection cap. Real `ursula` processes on loopback;
//! where a node would get in the way of the measurement, a sink or a silent listener of the
//! test's own stands in for it, as each test says.

use std::io::Read;
use std::io::Write;
use std::net::TcpListener;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use serde_json::Value;

use crate::harness::auth::*;
use crate::harness::conn::*;
use crate::harness::gateway::*;

const MIB: usize = 1024 * 1024;

fn metrics(gw: &Proc) -> Value {
    let a = send("GET", &gw.url("/__ursula/gateway/metrics"), &[], b"");
    assert_eq!(a.status, 200, "{}", a.body);
    serde_json::from_str(&a.body).expect("metrics json")
}

fn counter(gw: &Proc, name: &str) -> u64 {
    metrics(gw)[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

/// Polls `name` until it equals `want`, failing after 15 s.
fn wait_counter(gw: &Proc, name: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let v = counter(gw, name);
        if v == want {
            return;
        }
        assert!(Instant::now() < deadline, "{name} stayed {v}, not {want}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A raw connection that sent a request head (and `content-length` if given).
fn open(port: u16, method: &str, path: &str, length: Option<usize>, extra: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: gw\r\n{extra}");
    if let Some(n) = length {
        head.push_str(&format!(
            "content-type: application/octet-stream\r\ncontent-length: {n}\r\n"
        ));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("head");
    s
}

/// One answer's head and its body (by `content-length`).
struct Raw {
    status: u16,
    head: String,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

fn read_answer(s: &mut TcpStream) -> Raw {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(0) => panic!(
                "closed before an answer: {:?}",
                String::from_utf8_lossy(&head)
            ),
            Ok(_) => head.push(byte[0]),
            Err(e) => panic!("reading an answer: {e}"),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let mut raw = Raw {
        status,
        head,
        body: String::new(),
    };
    let n: usize = raw
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; n];
    s.read_exact(&mut body).expect("answer body");
    raw.body = String::from_utf8_lossy(&body).into_owned();
    raw
}

/// A memory node with the stream `/demo/s`.
fn node_with_stream(scratch: &Scratch) -> Proc {
    let node = memory_node(scratch);
    let a = send("PUT", &node.url("/demo/s"), &[TEXT], b"");
    assert_eq!(a.status, 201, "{}", a.body);
    node
}

/// A [`node_with_stream`] behind a gateway given `extra`, in a scratch directory named after
/// `name`. Bound as `let (scratch, node, gw)`, the processes drop before their directory.
fn fronted_stream(name: &str, extra: &[&str]) -> (Scratch, Proc, Proc) {
    let scratch = Scratch::new(name);
    let node = node_with_stream(&scratch);
    let gw = gateway(&scratch, "gateway", &[node.base()], extra);
    (scratch, node, gw)
}

/// Appends `body` as text to `/demo/s` through `gw`.
fn append(gw: &Proc, body: &[u8]) -> Answer {
    send("POST", &gw.url("/demo/s"), &[TEXT], body)
}

fn assert_marked(raw: &Raw, status: u16, kind: &str) {
    assert_eq!(raw.status, status, "{} {}", raw.head, raw.body);
    assert_eq!(raw.header(MARKER), Some(kind), "{}", raw.head);
    assert_eq!(raw.header(VOUCH), Some("1"), "{}", raw.head);
}

#[test]
fn a_spent_budget_is_a_marked_503_with_retry_after_and_every_share_comes_back() {
    // 4 MiB for large bodies beside 1 MiB of headroom for bodies of at most 64 KiB.
    let (_scratch, _node, gw) = fronted_stream(
        "uploads-budget",
        &[
            "--max-request-body-bytes",
            "4194304",
            "--body-budget-bytes",
            "5242880",
            "--small-body-headroom-bytes",
            "1048576",
            "--small-body-max-bytes",
            "65536",
            "--body-budget-wait-ms",
            "300",
        ],
    );
    assert_eq!(counter(&gw, "upload_budget_bytes"), 5 * MIB as u64);
    // A 4 MiB upload that sent 10 bytes holds the whole share for large bodies.
    let mut holder = open(gw.port, "POST", "/demo/s", Some(4 * MIB), "");
    holder.write_all(b"0123456789").expect("a first piece");
    wait_counter(&gw, "upload_reserved_bytes", 4 * MIB as u64);
    // A large body finds the budget spent: its whole body is read and dropped, then the
    // refusal, and the connection carries the next request.
    let mut big = open(gw.port, "POST", "/demo/s", Some(2 * MIB), "");
    big.write_all(&vec![b'x'; 2 * MIB]).expect("the body");
    let refused = read_answer(&mut big);
    assert_marked(&refused, 503, "UploadBudgetExhausted");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        refused.body.contains("UploadBudgetExhausted"),
        "{}",
        refused.body
    );
    assert_eq!(refused.header("connection"), None, "{}", refused.head);
    big.write_all(b"GET /demo/s?offset=-1 HTTP/1.1\r\nhost: gw\r\n\r\n")
        .expect("the next request");
    assert_eq!(read_answer(&mut big).status, 200);
    // Small bodies still pass, in their headroom.
    for i in 0..5 {
        let a = append(&gw, format!("small {i}|").as_bytes());
        assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);
    }
    let m = metrics(&gw);
    assert_eq!(m["upload_refusals_budget"], 1);
    assert!(
        m["refusal_drain_bytes"].as_u64() >= Some(2 * MIB as u64),
        "{m}"
    );
    // The holder goes away mid-body: its share comes back.
    drop(holder);
    wait_counter(&gw, "upload_reserved_bytes", 0);
    // And a large body goes through again.
    let a = send("POST", &gw.url("/demo/s"), &[TEXT], &vec![b'y'; 3 * MIB]);
    assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);
    wait_counter(&gw, "upload_reserved_bytes", 0);
    assert!(counter(&gw, "body_bytes_buffered") >= 3 * MIB as u64);
}

#[test]
fn a_stalled_body_and_a_crawling_one_get_a_marked_408_and_nothing_is_forwarded() {
    // 1 s windows that want 100 KB each.
    let (_scratch, node, gw) = fronted_stream(
        "uploads-slow",
        &[
            "--body-stall-timeout",
            "1s",
            "--body-min-bytes-per-sec",
            "100000",
        ],
    );
    assert!(
        gw.log().contains("body-stall-timeout"),
        "no warning about a stall timeout at or below 10 s: {}",
        gw.log()
    );
    let mut stalled = open(gw.port, "POST", "/demo/s", Some(1000), "");
    stalled.write_all(b"stalled|").expect("a first piece");
    let started = Instant::now();
    let cut = read_answer(&mut stalled);
    assert_marked(&cut, 408, "RequestBodyTooSlow");
    assert_eq!(cut.header("connection"), Some("close"));
    assert!(started.elapsed() < Duration::from_secs(10));
    // Ten bytes every 50 ms never stall, but come nowhere near 100 KB a second.
    let mut crawling = open(gw.port, "POST", "/demo/s", Some(100_000), "");
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let mut s = crawling.try_clone().expect("clone");
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) && s.write_all(b"crawling||").is_ok() {
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let cut = read_answer(&mut crawling);
    stop.store(true, Ordering::SeqCst);
    let _ = feeder.join();
    assert_marked(&cut, 408, "RequestBodyTooSlow");
    assert_eq!(counter(&gw, "upload_refusals_too_slow"), 2);
    wait_counter(&gw, "upload_reserved_bytes", 0);
    // Nothing of either reached the node.
    let a = send("GET", &node.url("/demo/s?offset=-1"), &[], b"");
    assert_eq!(a.body, "");
}

/// An upstream that accepts connections and never answers: a live node with a wedged group
/// looks the same from the gateway.
fn silent_upstream() -> (String, Arc<AtomicBool>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", l.local_addr().expect("addr"));
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    l.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while !s.load(Ordering::SeqCst) {
            match l.accept() {
                Ok((c, _)) => held.push(c),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    (base, stop)
}

#[test]
fn a_silent_upstream_is_an_unmarked_504_within_the_response_header_timeout_and_not_ejected() {
    let scratch = Scratch::new("uploads-silent");
    let (silent, stop) = silent_upstream();
    let gw = gateway(
        &scratch,
        "gateway",
        std::slice::from_ref(&silent),
        &["--response-header-timeout", "1s"],
    );
    for i in 0..2 {
        let started = Instant::now();
        let a = send("POST", &gw.url("/demo/s"), &[TEXT], b"row");
        assert_eq!(a.status, 504, "{i}: {}", a.body);
        // It went out: it may have been applied, so it carries no marker.
        assert_eq!(a.header(MARKER), None);
        assert!(a.vouched());
        assert!(started.elapsed() < Duration::from_secs(10), "{i}");
    }
    let m = metrics(&gw);
    assert_eq!(m["upstream_ejections"], 0, "{m}");
    assert_eq!(m["upstream_ejected"], 0, "{m}");
    assert_eq!(m["upstream_broken"], 0, "{m}");
    stop.store(true, Ordering::SeqCst);
}

#[test]
fn a_budget_below_the_limit_plus_the_headroom_stops_the_gateway_at_startup() {
    let scratch = Scratch::new("uploads-startup");
    let port = free_port();
    let args: Vec<String> = [
        "gateway",
        "--upstream",
        "http://127.0.0.1:1",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--body-budget-bytes",
        "67108863",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut p = Proc::spawn(&scratch, "gateway", port, &args);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = p.child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "still running: {}", p.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    assert!(p.log().contains("LimitAboveSharedBudget"), "{}", p.log());
}

#[test]
fn connections_that_never_finish_a_request_head_are_closed_while_requests_go_on() {
    let (_scratch, _node, gw) =
        fronted_stream("uploads-half-heads", &["--request-head-timeout", "2s"]);
    // Thousands where the machine allows it; the gateway holds as many descriptors again.
    let count = open_files_limit().saturating_sub(300).clamp(100, 3_000);
    let slow = half_heads(gw.port, "/demo/s", count);
    for i in 0..20 {
        let a = append(&gw, format!("row {i}|").as_bytes());
        assert!(
            matches!(a.status, 200 | 204),
            "append {i} while {count} half heads are open: {}",
            a.status
        );
    }
    // Without the head timeout they stay open for good: the reads below give up, all within
    // one 30 s deadline.
    let deadline = Instant::now() + Duration::from_secs(30);
    let still_open = slow
        .iter()
        .filter(|s| {
            let left = deadline.saturating_duration_since(Instant::now());
            !closed_by_peer(s, left.max(Duration::from_millis(10)))
        })
        .count();
    assert_eq!(
        still_open, 0,
        "{still_open} of {count} half heads still open"
    );
    let a = send("GET", &gw.url("/demo/s?offset=-1"), &[], b"");
    assert_eq!(a.status, 200);
    assert!(a.body.contains("row 19|"), "{}", a.body);
}

#[test]
fn at_the_connection_cap_a_new_connection_waits_for_a_slot_and_is_then_served() {
    let (_scratch, _node, gw) = fronted_stream(
        "uploads-cap",
        &["--request-head-timeout", "2s", "--max-connections", "4"],
    );
    // The readiness probe's connection may still hold a slot for a moment: wait until the
    // metrics request's own connection is the only one open.
    wait_counter(&gw, "connections_open", 1);
    assert_eq!(counter(&gw, "max_connections"), 4);
    let slow = half_heads(gw.port, "/demo/s", 4);
    // This one waits in the backlog until the head timeout frees a slot, then is served.
    let started = Instant::now();
    let a = send("POST", &gw.url("/demo/s"), &[TEXT], b"capped|");
    assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "served at once: the cap did not hold"
    );
    for s in &slow {
        assert!(closed_by_peer(s, Duration::from_secs(30)));
    }
    // Connections cut by the head timeout leave no count behind.
    wait_counter(&gw, "connections_open", 1);
}

/// A stand-in upstream that reads each request's body, drops it and answers `204`: a real
/// node would keep 2 GiB of appended bodies in memory, and the measurement here is the
/// gateway's memory, not the node's.
fn sink_upstream() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", l.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match c.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                    let mut left: usize = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while left > 0 {
                        let n = buf.len().min(left);
                        match c.read(&mut buf[..n]) {
                            Ok(0) | Err(_) => return,
                            Ok(k) => left -= k,
                        }
                    }
                    if c.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").is_err() {
                        return;
                    }
                }
            });
        }
    });
    base
}

/// The gateway's peak resident memory, `VmHWM` from `/proc/PID/status`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}

#[test]
fn sixty_four_concurrent_32_mib_uploads_stay_within_the_budget_and_every_refusal_is_marked() {
    let scratch = Scratch::new("uploads-flood");
    let sink = sink_upstream();
    // The defaults: a 32 MiB limit and a 256 MiB budget.
    let gw = gateway(&scratch, "gateway", &[sink], &[]);
    assert_eq!(counter(&gw, "upload_budget_bytes"), 256 * MIB as u64);
    let chunk = Arc::new(vec![b'z'; MIB]);
    let port = gw.port;
    let uploads: Vec<_> = (0..64)
        .map(|i| {
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let mut s = open(port, "POST", &format!("/flood/s{i}"), Some(32 * MIB), "");
                for _ in 0..32 {
                    if let Err(e) = s.write_all(&chunk) {
                        return Err(format!("upload {i}: writing the body: {e}"));
                    }
                }
                let a = read_answer(&mut s);
                Ok((a.status, a.header(MARKER).map(str::to_owned)))
            })
        })
        .collect();
    let mut ok = 0;
    let mut refused = 0;
    for u in uploads {
        let (status, marker) = u.join().expect("upload thread").expect("an answer");
        if (200..300).contains(&status) {
            ok += 1;
        } else {
            assert_eq!(
                (status, marker.as_deref()),
                (503, Some("UploadBudgetExhausted")),
                "every refusal is the marked 503"
            );
            refused += 1;
        }
    }
    let peak = peak_rss(gw.child.id());
    eprintln!(
        "64 x 32 MiB: {ok} forwarded, {refused} refused; gateway peak RSS {} MiB",
        peak / MIB as u64
    );
    assert!(ok > 0, "nothing went through");
    let m = metrics(&gw);
    assert_eq!(m["upload_refusals_budget"], refused, "{m}");
    assert_eq!(m["upload_reserved_bytes"], 0, "{m}");
    assert_eq!(m["refusal_drains_cut"], 0, "{m}");
    // About twice the budget, as the docs tell operators to give the gateway, plus a margin
    // for the runtime; unbounded, 64 bodies would be 2 GiB.
    let bound = 2 * 256 * MIB as u64 + 64 * MIB as u64;
    assert!(
        peak < bound,
        "peak RSS {} MiB over {} MiB",
        peak / MIB as u64,
        bound / MIB as u64
    );
}

#[test]
fn a_body_refused_from_its_head_is_read_first_and_the_connection_stays_usable() {
    let scratch = Scratch::new("uploads-drain");
    let issuer = Issuer::start(vec![public_jwk("ed", "ed1")]);
    let node = node_with_stream(&scratch);
    let owners = format!(
        "owners = [{{ issuer = \"{}\", subject = \"user-1\" }}]",
        issuer.url
    );
    let policy = scratch.file(
        "policy.toml",
        &format!("[[bucket]]\nid = \"demo\"\n{owners}\n"),
    );
    let policy = policy.display().to_string();
    let gw = gateway(
        &scratch,
        "gateway",
        &[node.base()],
        &[
            "--auth-issuer",
            &issuer.url,
            "--auth-audience",
            AUDIENCE,
            "--auth-policy",
            &policy,
            "--auth-public-metrics",
        ],
    );
    // A 1 MiB body with a token that is no token: the 401 is decided from the head.
    let mut s = open(
        gw.port,
        "POST",
        "/demo/s",
        Some(MIB),
        "authorization: Bearer not-a-token\r\n",
    );
    s.write_all(&vec![b'q'; MIB]).expect("the whole body first");
    let refused = read_answer(&mut s);
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert_eq!(refused.header("connection"), None, "{}", refused.head);
    // The same connection carries the next request: the body was read to its end.
    s.write_all(b"GET /demo/s?offset=-1 HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer x\r\n\r\n")
        .expect("the next request");
    assert_eq!(read_answer(&mut s).status, 401);
    let m = metrics(&gw);
    assert_eq!(m["refusal_drains"], 1, "{m}");
    assert_eq!(m["refusal_drains_cut"], 0, "{m}");
    assert_eq!(m["refusal_drain_bytes"], MIB as u64, "{m}");
    // A body declared over the limit is refused with its body unread, and the connection
    // closes.
    let mut over = open(
        gw.port,
        "POST",
        "/demo/s",
        Some(33 * MIB),
        "authorization: Bearer not-a-token\r\n",
    );
    let refused = read_answer(&mut over);
    assert_eq!(refused.status, 401);
    assert_eq!(refused.header("connection"), Some("close"));
    let m = metrics(&gw);
    assert_eq!(m["refusal_drains"], 2, "{m}");
    assert_eq!(m["refusal_drains_cut"], 1, "{m}");
    // Nothing reached the node.
    let a = send("GET", &node.url("/demo/s?offset=-1"), &[], b"");
    assert_eq!(a.body, "");
}

#[test]
fn the_binary_invoked_as_ursulagw_is_the_gateway_and_listens_on_4437_by_default() {
    let scratch = Scratch::new("uploads-ursulagw");
    let node = node_with_stream(&scratch);
    let link = scratch.path().join("ursulagw");
    std::os::unix::fs::symlink(crate::harness::bins::ursula(), &link).expect("link");
    let help = std::process::Command::new(&link)
        .arg("--help")
        .output()
        .expect("ursulagw --help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(help.contains("--upstream"), "{help}");
    assert!(help.contains("[default: 0.0.0.0:4437]"), "{help}");
    assert!(help.contains("--body-budget-bytes"), "{help}");
    let port = free_port();
    let log = scratch.path().join("ursulagw.log");
    let child = std::process::Command::new(&link)
        .args(["--upstream", &node.base(), "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn ursulagw");
    let mut gw = Proc { child, port, log };
    gw.wait_for("ursulagw", "/__ursula/gateway/metrics");
    let a = send("POST", &gw.url("/demo/s"), &[TEXT], b"through ursulagw|");
    assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);
    assert!(a.vouched());
}

#[test]
fn a_body_that_breaks_its_framing_is_a_marked_400_and_nothing_is_forwarded() {
    let (_scratch, node, gw) = fronted_stream("uploads-unreadable", &[]);
    let mut s = open(
        gw.port,
        "POST",
        "/demo/s",
        None,
        "content-type: text/plain\r\ntransfer-encoding: chunked\r\n",
    );
    // A first chunk, then a chunk size that is no hex number.
    s.write_all(b"5\r\nhello\r\nzz\r\n").expect("a broken body");
    let refused = read_answer(&mut s);
    assert_marked(&refused, 400, "RequestBodyUnreadable");
    assert_eq!(refused.header("connection"), Some("close"));
    wait_counter(&gw, "upload_reserved_bytes", 0);
    let a = send("GET", &node.url("/demo/s?offset=-1"), &[], b"");
    assert_eq!(a.body, "");
}
