//! Attacks on `ursula gateway --auth-*` found by a penetration test, each replayed against the
//! real binary in front of a real node: anonymous uploads that trickle to hold the body budget,
//! a body that keeps arriving just fast enough, anonymous readers spending a bucket's rate, an
//! issuer whose JWKS endpoint hangs, a key rotated within the refetch cool-down, tokens with a
//! `crit` header or a lifetime over the limit, and an HTML stream served as a page.

use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use serde_json::Value;
use serde_json::json;

use crate::harness::auth::*;
use crate::harness::calls::*;
use crate::harness::gateway::*;
use crate::harness::seeded::seeded;

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

fn metrics(gw: &Proc) -> Value {
    let a = send("GET", &gw.url("/__ursula/gateway/metrics"), &[], b"");
    assert_eq!(a.status, 200, "{}", a.body);
    serde_json::from_str(&a.body).expect("metrics json")
}

/// A client that declares `length` bytes and sends 2 KiB a second until `stop` is set or the
/// gateway closes the connection, as the penetration test's slow uploaders did.
fn trickle(
    port: u16,
    path: &str,
    auth: Option<String>,
    length: usize,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let path = path.to_owned();
    std::thread::spawn(move || {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            return;
        };
        let auth = auth.map_or_else(String::new, |a| format!("authorization: {a}\r\n"));
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: gw\r\n{auth}content-type: text/plain\r\ncontent-length: {length}\r\n\r\n"
        );
        if s.write_all(head.as_bytes()).is_err() {
            return;
        }
        let mut sent = 0;
        while sent < length && !stop.load(Ordering::SeqCst) {
            let n = (2 * KIB).min(length - sent);
            if s.write_all(&vec![b'x'; n]).is_err() {
                return;
            }
            sent += n;
            std::thread::sleep(Duration::from_secs(1));
        }
    })
}

#[test]
fn an_owners_append_succeeds_while_forty_anonymous_uploads_trickle() {
    let (scratch, issuer, node) = seeded("sec-budget");
    // The default 256 MiB budget: 7 bodies of 32 MiB and 33 of 1 MiB would spend all of it.
    let gw = auth_gateway(&scratch, &node, &issuer.url, &["--auth-public-metrics"]);
    let owner = bearer(&token(&issuer.url, OWNER));
    let stop = Arc::new(AtomicBool::new(false));
    let mut slow = Vec::new();
    for i in 0..40 {
        let (path, length) = match i {
            0..7 => ("/private/s", 32 * MIB),
            7..20 => ("/public/s", MIB),
            _ => ("/nobucket/s", MIB),
        };
        slow.push(trickle(gw.port, path, None, length, stop.clone()));
    }
    // The trickles run a while before the owner's appends: the load under which they must pass.
    std::thread::sleep(Duration::from_millis(1500));

    for size in [4 * KIB, 2 * MIB] {
        let body = vec![b'o'; size];
        let a = append_as(&gw, "/private/s", &owner, &body);
        assert!(
            matches!(a.status, 200 | 204),
            "an owner's {size}-byte append while anonymous uploads trickle: {} {:?} {}",
            a.status,
            a.header(MARKER),
            a.body
        );
    }
    let m = metrics(&gw);
    assert_eq!(
        m["upload_reserved_bytes"], 0,
        "anonymous bodies reserve none of the budget: {m}"
    );
    stop.store(true, Ordering::SeqCst);
    for t in slow {
        t.join().expect("trickler");
    }
    assert_eq!(metrics(&gw)["upload_reserved_bytes"], 0);
    assert!(contents(&node, "/private/s").starts_with("hello|oooo"));
}

/// Posts a 1 MiB body to `/private/s` (as `auth` when given) at 2 KiB a second and returns
/// the answer the gateway gives before it closes the connection; fails after `within`.
fn trickled_answer(port: u16, auth: Option<&str>, within: Duration) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let auth = auth.map_or_else(String::new, |a| format!("authorization: {a}\r\n"));
    let head = format!(
        "POST /private/s HTTP/1.1\r\nhost: gw\r\n{auth}content-type: text/plain\r\ncontent-length: {MIB}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).expect("head");
    let mut writer = s.try_clone().expect("clone");
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let feeder = std::thread::spawn(move || {
        while !st.load(Ordering::SeqCst) {
            if writer.write_all(&[b'x'; 2 * KIB]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let got = answer_until_close(&mut s, within);
    stop.store(true, Ordering::SeqCst);
    feeder.join().expect("feeder");
    got
}

/// Reads until the peer closes, returning what came; fails after `within`.
fn answer_until_close(s: &mut TcpStream, within: Duration) -> String {
    let deadline = Instant::now() + within;
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("read timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        assert!(
            Instant::now() < deadline,
            "no answer and close within {within:?}; got {:?}",
            String::from_utf8_lossy(&got)
        );
        match s.read(&mut buf) {
            Ok(0) => return String::from_utf8_lossy(&got).into_owned(),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return String::from_utf8_lossy(&got).into_owned(),
        }
    }
}

#[test]
fn an_anonymous_body_that_keeps_trickling_is_answered_and_closed_within_the_drain_deadline() {
    let g = guarded("sec-drain-deadline", &[]);
    let (node, gw) = (&g.node, &g.gw);
    // 2 KiB a second is above the 1 KiB/s minimum rate, so only an overall deadline ends it.
    let got = trickled_answer(gw.port, None, Duration::from_secs(45));
    assert!(got.starts_with("HTTP/1.1 404"), "{got}");
    assert!(
        got.to_ascii_lowercase().contains("connection: close"),
        "{got}"
    );
    assert_eq!(contents(node, "/private/s"), "hello|");
}

#[test]
fn an_owners_body_that_keeps_trickling_is_cut_at_the_body_read_timeout() {
    let g = guarded("sec-read-timeout", &["--body-read-timeout", "3s"]);
    let (issuer, node, gw) = (&g.issuer, &g.node, &g.gw);
    let owner = bearer(&token(&issuer.url, OWNER));
    let got = trickled_answer(gw.port, Some(&owner), Duration::from_secs(20));
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("RequestBodyTooSlow"), "{got}");
    assert_eq!(contents(node, "/private/s"), "hello|");
}

#[test]
fn anonymous_readers_of_a_public_bucket_cannot_spend_the_owners_request_rate() {
    let (scratch, issuer, node) = seeded("sec-anon-rate");
    let quotas = "[[bucket]]\nid = \"public\"\nrequests_per_sec = 5\n";
    let q = scratch.file("quotas.toml", quotas).display().to_string();
    let gw = auth_gateway(&scratch, &node, &issuer.url, &["--quota-policy", &q]);
    let mut refused = 0;
    for _ in 0..20 {
        let a = send("GET", &gw.url("/public/s?offset=-1"), &[], b"");
        if a.status == 429 {
            refused += 1;
        }
    }
    assert!(refused > 0, "the anonymous address is limited too");
    let owner = bearer(&token(&issuer.url, OWNER));
    let a = read_as(&gw, "/public/s", &owner);
    assert_eq!(
        (a.status, a.body.as_str()),
        (200, "hello|"),
        "the owner's read"
    );
}

fn timed_read(gw: &Proc, auth: &str) -> (u16, Duration) {
    let start = Instant::now();
    let a = read_as(gw, "/private/s", auth);
    (a.status, start.elapsed())
}

#[test]
fn a_hung_issuer_does_not_delay_tokens_whose_cached_key_verifies() {
    let g = guarded("sec-jwks-hang", &["--auth-jwks-max-age", "1s"]);
    let (issuer, gw) = (&g.issuer, &g.gw);
    let owner = bearer(&token(&issuer.url, OWNER));
    assert_eq!(timed_read(gw, &owner).0, 200);
    issuer.hang(true);
    // The cached keys are now older than their maximum age and the 2 s refetch cool-down
    // is over: a refresh is due, and hangs.
    std::thread::sleep(Duration::from_millis(2500));
    // The issuer's fetch timeout is 10 s: a request that waited for the refresh takes that.
    for i in 0..3 {
        let (status, took) = timed_read(gw, &owner);
        assert_eq!(status, 200, "read {i}");
        assert!(
            took < Duration::from_secs(5),
            "read {i} took {took:?} while the issuer hangs"
        );
    }
    let concurrent: Vec<_> = (0..8)
        .map(|_| {
            let (url, owner) = (gw.url("/private/s?offset=-1"), owner.clone());
            std::thread::spawn(move || {
                let start = Instant::now();
                let a = send("GET", &url, &[("authorization", &owner)], b"");
                (a.status, start.elapsed())
            })
        })
        .collect();
    for c in concurrent {
        let (status, took) = c.join().expect("reader");
        assert_eq!(status, 200);
        assert!(
            took < Duration::from_secs(5),
            "a concurrent read took {took:?}"
        );
    }
    assert!(issuer.fetches() <= 2, "{} fetches", issuer.fetches());
    issuer.hang(false);
}

#[test]
fn a_rotated_kid_arriving_within_the_cool_down_waits_for_the_next_fetch() {
    let g = guarded("sec-jwks-cooldown", &[]);
    let (issuer, gw) = (&g.issuer, &g.gw);
    assert_eq!(timed_read(gw, &bearer(&token(&issuer.url, OWNER))).0, 200);
    assert_eq!(issuer.fetches(), 1);
    // The issuer adds a key right after the gateway fetched the set.
    issuer.set_keys(vec![public_jwk("ed", "ed1"), public_jwk("ec", "ec2")]);
    let rotated = sign(Key::Ec, "ec2", Some("at+jwt"), &claims(&issuer.url, OWNER));
    let (status, took) = timed_read(gw, &bearer(&rotated));
    assert_eq!(
        status, 200,
        "the new kid, within the cool-down, after {took:?}"
    );
    assert_eq!(issuer.fetches(), 2);
}

#[test]
fn a_token_with_a_crit_header_is_refused_as_an_invalid_token() {
    let g = guarded("sec-crit", &[]);
    let (issuer, gw) = (&g.issuer, &g.gw);
    let c = claims(&issuer.url, OWNER);
    let plain = sign_with_header(Key::Ed, json!({ "typ": "at+jwt", "kid": "ed1" }), &c);
    assert_eq!(
        timed_read(gw, &bearer(&plain)).0,
        200,
        "the same token without crit"
    );
    for crit in [
        json!({ "typ": "at+jwt", "kid": "ed1", "crit": ["urn:example:ext"], "urn:example:ext": 1 }),
        json!({ "typ": "at+jwt", "kid": "ed1", "crit": ["exp"] }),
        json!({ "typ": "at+jwt", "kid": "ed1", "crit": [] }),
    ] {
        let t = sign_with_header(Key::Ed, crit.clone(), &c);
        let a = read_as(gw, "/private/s", &bearer(&t));
        assert_eq!(a.status, 401, "{crit}: {}", a.body);
        assert_eq!(
            a.header("www-authenticate"),
            Some("Bearer error=\"invalid_token\"")
        );
        assert!(a.vouched());
    }
}

#[test]
fn tokens_living_longer_than_the_maximum_lifetime_are_refused() {
    let g = guarded("sec-lifetime", &["--auth-max-token-lifetime", "1h"]);
    let (issuer, gw) = (&g.issuer, &g.gw);
    let with_life = |secs: u64| {
        let mut c = claims(&issuer.url, OWNER);
        let iat = now() - 5;
        c["iat"] = iat.into();
        c["exp"] = (iat + secs).into();
        bearer(&sign(Key::Ed, "ed1", Some("at+jwt"), &c))
    };
    assert_eq!(timed_read(gw, &with_life(3600)).0, 200, "an hour exactly");
    let a = read_as(gw, "/private/s", &with_life(86_400));
    assert_eq!(a.status, 401, "a day-long token: {}", a.body);
    assert_eq!(
        a.header("www-authenticate"),
        Some("Bearer error=\"invalid_token\"")
    );
}

#[test]
fn a_public_html_stream_is_served_with_nosniff_and_a_sandboxing_csp() {
    let (scratch, issuer, node) = seeded("sec-html");
    let a = send(
        "PUT",
        &node.url("/public/page"),
        &[("content-type", "text/html")],
        b"<script>alert(document.domain)</script>",
    );
    assert_eq!(a.status, 201, "{}", a.body);
    let gw = auth_gateway(&scratch, &node, &issuer.url, &[]);
    for (method, path) in [
        ("GET", "/public/page?offset=-1"),
        ("HEAD", "/public/page"),
        ("GET", "/public/s?offset=-1"),
    ] {
        let a = send(method, &gw.url(path), &[], b"");
        assert_eq!(a.status, 200, "{method} {path}");
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
        let csp = a.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("sandbox") && csp.contains("default-src 'none'"),
            "{method} {path}: content-security-policy {csp:?}"
        );
    }
}
