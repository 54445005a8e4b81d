//! `ursula gateway --quota-policy` and `--usage-log` in front of a real `ursula server`: a
//! bucket past its request rate or its live reads gets a `429` with `Retry-After` and the
//! spec's reason text while other buckets pass; large bodies count against a bucket's upload
//! limits while they are read, refused by their own marked kind; a bucket's own body limit is
//! a marked `413`; and the usage log's sums match what was sent, through a sink that fails
//! for a while and a shutdown.

use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;
use std::time::Instant;

use serde_json::Value;

use crate::harness::auth::*;
use crate::harness::gateway::*;
use crate::harness::seeded::seeded;

fn write_file(scratch: &Scratch, name: &str, text: &str) -> String {
    let path = scratch.path().join(name);
    std::fs::write(&path, text).expect("write");
    path.display().to_string()
}

/// A raw request whose body may be sent in part; the head goes out whole. Returns the
/// connection, still open, for the caller to read an answer from or hold.
fn raw_request(port: u16, method: &str, path: &str, declared: usize, send: usize) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: text/plain\r\ncontent-length: {declared}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).expect("head");
    // The gateway may answer before taking the whole body: a refused write is not an error.
    let _ = s.write_all(&vec![b'x'; send]);
    s
}

/// Reads one answer's head and as much body as arrives before the connection closes or 2 s
/// of quiet: enough to see a refusal's status, headers and short text.
fn read_answer(s: &mut TcpStream) -> (u16, String) {
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(_) if !seen.is_empty() => break,
            Err(_) => assert!(Instant::now() < deadline, "no answer"),
        }
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (status, text.to_ascii_lowercase())
}

#[test]
fn a_bucket_past_its_request_rate_gets_429_with_retry_after_and_the_reason_while_others_pass() {
    let scratch = Scratch::new("tenant-rate");
    let node = node_with_buckets(&scratch, &["slow", "fast"]);
    let quotas = write_file(
        &scratch,
        "quotas.toml",
        "[[bucket]]\nid = \"slow\"\nrequests_per_sec = 3\n",
    );
    let gw = gateway(
        &scratch,
        "gateway",
        &[node.base()],
        &["--quota-policy", &quotas],
    );
    let started = Instant::now();
    let mut admitted = 0u64;
    let mut refused = 0u64;
    for _ in 0..12 {
        let a = send("GET", &gw.url("/slow/s?offset=-1"), &[], b"");
        match a.status {
            200 => admitted += 1,
            429 => {
                refused += 1;
                assert_eq!(a.body, "tenant request rate limit exceeded");
                let wait: u64 = a
                    .header("retry-after")
                    .and_then(|v| v.parse().ok())
                    .expect("Retry-After");
                assert!((1..=2).contains(&wait), "Retry-After {wait}");
                assert!(a.vouched());
                assert_eq!(a.header(MARKER), None, "a rate refusal carries no marker");
            }
            other => panic!("unexpected {other}: {}", a.body),
        }
    }
    // A burst of one second's worth, then what the elapsed time earned.
    let earned = 3 + 3 * started.elapsed().as_secs() + 3;
    assert!(refused >= 1, "no request was refused");
    assert!(
        admitted <= earned,
        "{admitted} admitted in {:?}",
        started.elapsed()
    );
    for _ in 0..12 {
        let a = send("GET", &gw.url("/fast/s?offset=-1"), &[], b"");
        assert_eq!(a.status, 200, "another bucket is not limited: {}", a.body);
    }
}

#[test]
fn a_bucket_holds_at_most_its_live_reads_and_a_gone_client_gives_its_share_back() {
    let scratch = Scratch::new("tenant-live");
    let node = node_with_buckets(&scratch, &["live"]);
    let quotas = write_file(&scratch, "quotas.toml", "[default]\nmax_live_reads = 1\n");
    let gw = gateway(
        &scratch,
        "gateway",
        &[node.base()],
        &["--quota-policy", &quotas],
    );
    let mut first = raw_request(gw.port, "GET", "/live/s?offset=-1&live=sse", 0, 0);
    let mut seen = String::new();
    read_until(&mut first, &mut seen, "\r\n\r\n");
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    let second = send("GET", &gw.url("/live/s?offset=-1&live=long-poll"), &[], b"");
    assert_eq!(second.status, 429, "{}", second.body);
    assert_eq!(second.body, "tenant live read limit exceeded");
    assert_eq!(second.header("retry-after"), Some("1"));
    // A plain read is no live read.
    assert_eq!(
        send("GET", &gw.url("/live/s?offset=-1"), &[], b"").status,
        200
    );
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = raw_request(gw.port, "GET", "/live/s?offset=-1&live=sse", 0, 0);
        let mut seen = String::new();
        read_until(&mut s, &mut seen, "\r\n");
        if seen.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed live read still counts: {seen}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts an upload to `path` through `gw` that declares `declared` bytes and sends `sent` of
/// them, and waits until the gateway counts it under way; returns its open connection.
fn hold_upload(gw: &Proc, path: &str, declared: usize, sent: usize) -> TcpStream {
    let held = raw_request(gw.port, "POST", path, declared, sent);
    wait_upload_tenants(gw, 1, &format!("the upload to {path} under way"));
    held
}

/// Sends a whole `len`-byte text body to `path` through `gw`, which must refuse it with
/// `status`, marked `kind`; returns the answer, head and body.
fn refused_upload(gw: &Proc, path: &str, len: usize, status: u16, kind: &str) -> String {
    let mut s = raw_request(gw.port, "POST", path, len, len);
    let (got, text) = read_answer(&mut s);
    assert_eq!(got, status, "{text}");
    let marker = format!("x-ursula-not-applied: {kind}");
    assert!(text.contains(&marker), "no {marker:?} in {text}");
    text
}

/// Waits until the gateway counts `want` buckets with a large body under way
/// (`upload_tenants`), failing after 10 s.
fn wait_upload_tenants(gw: &Proc, want: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = send("GET", &gw.url("/__ursula/gateway/metrics"), &[], b"");
        let m: Value = serde_json::from_str(&a.body).expect("metrics JSON");
        if m["upload_tenants"].as_u64() == Some(want) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {m}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn large_bodies_count_against_the_buckets_upload_limits_while_they_are_read() {
    let scratch = Scratch::new("tenant-uploads");
    let node = node_with_buckets(&scratch, &["conc", "bytes", "small"]);
    let quotas = write_file(
        &scratch,
        "quotas.toml",
        "[[bucket]]\nid = \"conc\"\nmax_concurrent_uploads = 1\n\n\
         [[bucket]]\nid = \"bytes\"\nmax_upload_bytes = 3145728\n\n\
         [[bucket]]\nid = \"small\"\nmax_request_body_bytes = 1000\n",
    );
    let gw = gateway(
        &scratch,
        "gateway",
        &[node.base()],
        &["--quota-policy", &quotas],
    );
    let mib = 1 << 20;

    // One 2 MiB upload under way holds the only upload of `conc`.
    let held = hold_upload(&gw, "/conc/s", 2 * mib, mib);
    let text = refused_upload(&gw, "/conc/s", 2 * mib, 429, "tenantuploads");
    assert!(
        text.contains("tenant concurrent upload limit exceeded"),
        "{text}"
    );
    assert!(text.contains("retry-after: 1"), "{text}");
    // Bodies of at most --small-body-max-bytes (1 MiB) never count.
    let a = send("POST", &gw.url("/conc/s"), &[TEXT], &vec![b'y'; 1000]);
    assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);
    drop(held);
    wait_upload_tenants(&gw, 0, "conc's upload given back once its client left");

    // 2 MiB under way of a 3 MiB allowance: another 2 MiB is over it.
    let held = hold_upload(&gw, "/bytes/s", 2 * mib, mib);
    let text = refused_upload(&gw, "/bytes/s", 2 * mib, 429, "tenantuploadbytes");
    assert!(
        text.contains("tenant upload bytes limit exceeded"),
        "{text}"
    );
    drop(held);
    // One body over the whole allowance can never fit: the final 413, not a 429 to retry.
    refused_upload(&gw, "/bytes/s", 4 * mib, 413, "requestbodytoolarge");
    // Given back once the holder went: the same upload now passes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = send("POST", &gw.url("/bytes/s"), &[TEXT], &vec![b'z'; 2 * mib]);
        if matches!(a.status, 200 | 204) {
            break;
        }
        assert_eq!(a.status, 429, "{}", a.body);
        assert!(Instant::now() < deadline, "the dropped upload still counts");
        std::thread::sleep(Duration::from_millis(100));
    }

    // The bucket's own body limit.
    refused_upload(&gw, "/small/s", 2000, 413, "requestbodytoolarge");
    let a = send("POST", &gw.url("/small/s"), &[TEXT], &vec![b'w'; 1000]);
    assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);
}

fn metrics(gw: &Proc) -> Value {
    let a = send("GET", &gw.url("/__ursula/gateway/metrics"), &[], b"");
    assert_eq!(a.status, 200, "{}", a.body);
    serde_json::from_str(&a.body).expect("metrics json")
}

fn batches(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Sums a counter over every batch for one action class.
fn total(batches: &[Value], class: &str, counter: &str) -> u64 {
    batches
        .iter()
        .flat_map(|b| b["records"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["class"] == class && r["bucket"] == "private")
        .map(|r| r[counter].as_u64().expect("counter"))
        .sum()
}

#[test]
fn usage_sums_match_what_was_sent_through_a_failing_sink_and_a_shutdown() {
    // `private`, owned by user-1 (the shared access-control fixture).
    let (scratch, issuer, node) = seeded("tenant-usage");
    // The log's directory does not exist yet: every write fails until the test makes it.
    let log_dir = scratch.path().join("usage");
    let log = log_dir.join("usage.jsonl");
    let log_arg = log.display().to_string();
    let mut gw = auth_gateway(
        &scratch,
        &node,
        &issuer.url,
        &[
            "--auth-public-metrics",
            "--usage-log",
            &log_arg,
            "--usage-flush-secs",
            "1",
            "--usage-chunk-bytes",
            "10240",
        ],
    );
    let owner = bearer(&token(&issuer.url, OWNER));
    let auth = ("authorization", owner.as_str());

    let kib = 1024;
    let mut ingress = 0u64;
    let mut egress = 0u64;
    // The spec's example: 5 KiB + 25 KiB owe four 10 KiB units, 10 KiB + 20 KiB three.
    for size in [5 * kib, 25 * kib, 10 * kib, 20 * kib] {
        let a = send(
            "POST",
            &gw.url("/private/s"),
            &[TEXT, auth],
            &vec![b'a'; size],
        );
        assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);
        ingress += size as u64;
    }
    let a = send("GET", &gw.url("/private/s?offset=-1"), &[auth], b"");
    assert_eq!(a.status, 200);
    egress += a.body.len() as u64;
    let deadline = Instant::now() + Duration::from_secs(15);
    while metrics(&gw)["tenants"]["usage_sink_failures"]
        .as_u64()
        .unwrap_or(0)
        < 2
    {
        assert!(Instant::now() < deadline, "the sink never failed");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Counted while the sink is down, merged into the queued batch.
    let a = send("POST", &gw.url("/private/s"), &[TEXT, auth], b"b");
    assert!(matches!(a.status, 200 | 204));
    ingress += 1;
    std::fs::create_dir_all(&log_dir).expect("log dir");
    let deadline = Instant::now() + Duration::from_secs(15);
    while batches(&log).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no batch after the sink recovered"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // One more read, reported only by the batch written at shutdown.
    let a = send("GET", &gw.url("/private/s?offset=-1"), &[auth], b"");
    egress += a.body.len() as u64;
    let pid = gw.child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    while gw.child.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "the gateway did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let got = batches(&log);
    let seqs: Vec<u64> = got
        .iter()
        .map(|b| b["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "numbered in order from 1"
    );
    assert!(got.iter().all(|b| b["v"] == 1));
    assert_eq!(total(&got, "append", "requests"), 5);
    assert_eq!(total(&got, "append", "ingress_bytes"), ingress);
    assert_eq!(total(&got, "append", "chunks"), 4 + 3 + 1);
    assert_eq!(total(&got, "read", "requests"), 2);
    assert_eq!(total(&got, "read", "egress_bytes"), egress);
    assert!(
        egress > 60 * kib as u64,
        "the reads returned the appended bytes"
    );
    let principal = &got[0]["records"][0]["principal"];
    assert_eq!(principal["issuer"], issuer.url.as_str());
    assert_eq!(principal["subject"], OWNER);
}
