//! `ursula gateway --auth-*` in front of a real `ursula server`, with hand-signed RFC 9068
//! access tokens from a small loopback issuer: owners write, strangers and anonymous callers
//! get the very 404 a missing stream gets, public buckets serve reads only, refused tokens are
//! `401` and never reach the node, an unreachable issuer is a marked `503`, and key rotation
//! costs a fetch per refetch cool-down however many unknown `kid`s arrive.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use crate::harness::auth::*;
use crate::harness::calls::*;
use crate::harness::cluster::wait_for;
use crate::harness::gateway::*;
use crate::harness::seeded::seeded;
use crate::harness::startup::refused_gateway;

#[test]
fn owners_write_and_read_and_the_node_keeps_what_refused_writes_never_sent() {
    let g = guarded("auth-owner", &[]);
    let (issuer, node, gw) = (&g.issuer, &g.node, &g.gw);
    let (owner, stranger) = owner_and_stranger(&issuer.url);

    let a = append_as(gw, "/private/s", &owner, b"mine|");
    assert!(matches!(a.status, 200 | 204), "{}: {}", a.status, a.body);
    assert!(a.vouched());
    let a = read_as(gw, "/private/s", &owner);
    assert_eq!((a.status, a.body.as_str()), (200, "hello|mine|"));
    let a = create_as(gw, "/private/t", &owner);
    assert_eq!(a.status, 201, "{}", a.body);

    for who in [Some(stranger.as_str()), None] {
        let auth: Vec<(&str, &str)> = who.map(|w| ("authorization", w)).into_iter().collect();
        let mut with_text = auth.clone();
        with_text.push(TEXT);
        let a = send("POST", &gw.url("/private/s"), &with_text, b"theirs|");
        assert_eq!(a.status, 404, "{who:?}: {}", a.body);
        assert_eq!(a.header(MARKER), Some("NotFound"));
        assert!(a.vouched());
        for (method, path, headers) in [
            ("GET", "/private/s?offset=-1", &auth),
            ("DELETE", "/private/s", &auth),
            ("PUT", "/private/u", &with_text),
            ("PUT", "/newbucket", &auth),
        ] {
            let status = send(method, &gw.url(path), headers, b"").status;
            assert_eq!(status, 404, "{method} {path} as {who:?}");
        }
    }
    assert_eq!(contents(node, "/private/s"), "hello|mine|");
    assert_eq!(send("HEAD", &node.url("/private/u"), &[], b"").status, 404);
}

#[test]
fn concealed_404s_are_byte_for_byte_the_404_of_a_missing_stream() {
    let g = guarded("auth-conceal", &[]);
    let (issuer, node, gw) = (&g.issuer, &g.node, &g.gw);
    let (owner, stranger) = owner_and_stranger(&issuer.url);

    for (method, body) in [
        ("GET", &b""[..]),
        ("HEAD", b""),
        ("POST", b"x|"),
        ("DELETE", b""),
    ] {
        // The reference: the owner asks for a stream that really does not exist.
        let missing = raw(gw.port, method, "/private/nope", Some(&owner), body);
        assert!(missing.starts_with("HTTP/1.1 404 "), "{missing}");
        assert!(
            missing.contains("x-ursula-not-applied: NotFound"),
            "{missing}"
        );
        let probes = [
            ("/private/s", Some(stranger.as_str())),
            ("/private/s", None),
            ("/unknown/s", Some(owner.as_str())),
            ("/unknown/s", None),
        ];
        for (path, who) in probes {
            let got = raw(gw.port, method, path, who, body);
            assert_eq!(got, missing, "{method} {path} as {who:?}");
        }
        if method != "GET" && method != "HEAD" {
            // A write without ownership on a bucket anyone may read.
            let got = raw(gw.port, method, "/public/s", Some(&stranger), body);
            assert_eq!(got, missing, "{method} /public/s as a stranger");
        }
    }
    assert_eq!(contents(node, "/private/s"), "hello|");
    assert_eq!(contents(node, "/public/s"), "hello|");
}

#[test]
fn public_read_serves_read_head_and_tail_to_anonymous_callers_and_nothing_else() {
    let g = guarded("auth-public", &[]);
    let (node, gw) = (&g.node, &g.gw);

    let a = send("GET", &gw.url("/public/s?offset=-1"), &[], b"");
    assert_eq!((a.status, a.body.as_str()), (200, "hello|"));
    let tail = a.header("stream-next-offset").expect("offset").to_owned();
    assert_eq!(send("HEAD", &gw.url("/public/s"), &[], b"").status, 200);
    let a = send(
        "GET",
        &gw.url(&format!(
            "/public/s?offset={tail}&live=long-poll&timeout_ms=200"
        )),
        &[],
        b"",
    );
    assert!(matches!(a.status, 200 | 204), "long-poll: {}", a.status);
    let mut s = TcpStream::connect(("127.0.0.1", gw.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    s.write_all(b"GET /public/s?offset=-1&live=sse HTTP/1.1\r\nhost: gw\r\n\r\n")
        .expect("write");
    let mut seen = String::new();
    read_until(&mut s, &mut seen, "hello|");
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");

    assert_eq!(
        send("POST", &gw.url("/public/s"), &[TEXT], b"anon|").status,
        404
    );
    assert_eq!(send("PUT", &gw.url("/public/t"), &[TEXT], b"").status, 404);
    assert_eq!(send("DELETE", &gw.url("/public/s"), &[], b"").status, 404);
    assert_eq!(send("PUT", &gw.url("/public"), &[], b"").status, 404);
    assert_eq!(contents(node, "/public/s"), "hello|");
}

#[test]
fn refused_tokens_get_401_and_nothing_reaches_the_node() {
    let scratch = Scratch::new("auth-refused");
    let issuer = Issuer::start(vec![
        public_jwk("ed", "ed1"),
        public_jwk("ec", "ec1"),
        public_jwk("rsa", "rsa1"),
    ]);
    let node = seeded_node(&scratch);
    let gw = auth_gateway(&scratch, &node, &issuer.url, &[]);
    let iss = issuer.url.as_str();
    let good = claims(iss, OWNER);
    let with = |name: &str, v: serde_json::Value| {
        let mut c = good.clone();
        c[name] = v;
        c
    };
    let without = |name: &str| {
        let mut c = good.clone();
        c.as_object_mut().expect("claims").remove(name);
        c
    };
    // Every accepted algorithm works, so the refusals below are about what they say.
    for (key, kid) in [(Key::Ed, "ed1"), (Key::Ec, "ec1"), (Key::Rsa, "rsa1")] {
        let t = bearer(&sign(key, kid, Some("at+jwt"), &good));
        let a = read_as(&gw, "/private/s", &t);
        assert_eq!(a.status, 200, "{kid}: {}", a.body);
    }
    let public_ed = public_jwk("ed", "ed1");
    let hmac_with_public_key = {
        let secret = public_ed["x"].as_str().expect("x").as_bytes().to_vec();
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        h.typ = Some("at+jwt".into());
        h.kid = Some("ed1".into());
        jsonwebtoken::encode(&h, &good, &jsonwebtoken::EncodingKey::from_secret(&secret))
            .expect("hs256")
    };
    let cases: Vec<(&str, String)> = vec![
        ("typ JWT", sign(Key::Ed, "ed1", Some("JWT"), &good)),
        ("no typ", sign(Key::Ed, "ed1", None, &good)),
        (
            "an OIDC ID token",
            sign(Key::Ed, "ed1", Some("JWT"), &with("nonce", json!("n"))),
        ),
        (
            "wrong aud",
            sign(
                Key::Ed,
                "ed1",
                Some("at+jwt"),
                &with("aud", json!("https://else")),
            ),
        ),
        (
            "wrong iss",
            sign(
                Key::Ed,
                "ed1",
                Some("at+jwt"),
                &with("iss", json!("https://else")),
            ),
        ),
        (
            "expired",
            sign(
                Key::Ed,
                "ed1",
                Some("at+jwt"),
                &with("exp", json!(now() - 3600)),
            ),
        ),
        (
            "missing jti",
            sign(Key::Ed, "ed1", Some("at+jwt"), &without("jti")),
        ),
        (
            "missing client_id",
            sign(Key::Ed, "ed1", Some("at+jwt"), &without("client_id")),
        ),
        (
            "missing sub",
            sign(Key::Ed, "ed1", Some("at+jwt"), &without("sub")),
        ),
        (
            "missing iat",
            sign(Key::Ed, "ed1", Some("at+jwt"), &without("iat")),
        ),
        ("unknown kid", sign(Key::Ed, "nope", Some("at+jwt"), &good)),
        (
            "another issuer's key",
            sign(Key::Foreign, "ed1", Some("at+jwt"), &good),
        ),
        (
            "a key of another family",
            sign(Key::Ec, "ed1", Some("at+jwt"), &good),
        ),
        (
            "alg none",
            unsigned(
                &json!({ "alg": "none", "typ": "at+jwt", "kid": "ed1" }),
                &good,
            ),
        ),
        ("HS256 keyed with the public key", hmac_with_public_key),
        ("garbage", "a.b.c".to_owned()),
    ];
    for (what, t) in &cases {
        for (method, path, body) in [
            ("POST", "/private/s", &b"bad|"[..]),
            ("GET", "/public/s?offset=-1", b""),
        ] {
            let auth = bearer(t);
            let a = send(
                method,
                &gw.url(path),
                &[TEXT, ("authorization", &auth)],
                body,
            );
            assert_eq!(a.status, 401, "{what}: {method} {path}: {}", a.body);
            assert!(
                a.header("www-authenticate")
                    .is_some_and(|v| v.contains("invalid_token"))
            );
            assert!(a.vouched());
        }
    }
    for header in ["Basic dXNlcjpwdw==", "Bearer", "Bearer a b"] {
        let a = read_as(&gw, "/public/s", header);
        assert_eq!(a.status, 401, "{header}");
    }
    assert_eq!(contents(&node, "/private/s"), "hello|");
}

#[test]
fn internal_paths_answer_404_and_public_metrics_serve_only_the_gateway_counters() {
    let (scratch, issuer, node) = seeded("auth-internal");
    let owner = bearer(&token(&issuer.url, OWNER));
    {
        let gw = auth_gateway(&scratch, &node, &issuer.url, &[]);
        let missing = raw(gw.port, "GET", "/private/nope", Some(&owner), b"");
        for path in [
            "/__ursula/gateway/metrics",
            "/__ursula/metrics",
            "/__ursula/ready",
            "/__ursula/usage",
            "/__ursula/raft/1/leader",
        ] {
            for who in [None, Some(owner.as_str())] {
                assert_eq!(
                    raw(gw.port, "GET", path, who, b""),
                    missing,
                    "{path} {who:?}"
                );
            }
        }
    }
    let gw = auth_gateway(&scratch, &node, &issuer.url, &["--auth-public-metrics"]);
    for who in [None, Some("Bearer not-a-token"), Some(owner.as_str())] {
        let auth: Vec<(&str, &str)> = who.map(|w| ("authorization", w)).into_iter().collect();
        let a = send("GET", &gw.url("/__ursula/gateway/metrics"), &auth, b"");
        assert_eq!(a.status, 200, "{who:?}");
        let m: serde_json::Value = serde_json::from_str(&a.body).expect("json");
        assert!(m["auth"]["jwks_fetches"].is_u64(), "{m}");
        assert_eq!(
            send("GET", &gw.url("/__ursula/metrics"), &auth, b"").status,
            404
        );
    }
}

#[test]
fn an_unreachable_issuer_is_a_marked_503_while_anonymous_public_reads_go_on() {
    let scratch = Scratch::new("auth-down");
    let node = seeded_node(&scratch);
    // Nothing listens there: the issuer is down from the start.
    let issuer = format!("http://127.0.0.1:{}", free_port());
    let gw = auth_gateway(&scratch, &node, &issuer, &[]);
    let t = bearer(&token(&issuer, OWNER));
    for (method, path, body) in [
        ("POST", "/private/s", &b"x|"[..]),
        ("GET", "/private/s?offset=-1", b""),
        ("GET", "/unknown/s", b""),
    ] {
        let a = send(method, &gw.url(path), &[TEXT, ("authorization", &t)], body);
        assert_eq!(a.status, 503, "{method} {path}: {}", a.body);
        assert_eq!(a.header(MARKER), Some("AuthenticationUnavailable"));
        assert_eq!(a.header("retry-after"), Some("1"));
        assert!(a.vouched());
    }
    let a = send("GET", &gw.url("/public/s?offset=-1"), &[], b"");
    assert_eq!((a.status, a.body.as_str()), (200, "hello|"));
    assert_eq!(contents(&node, "/private/s"), "hello|");
}

#[test]
fn a_rotated_key_is_fetched_and_a_flood_of_unknown_kids_costs_at_most_two_fetches() {
    let g = guarded("auth-rotate", &[]);
    let (issuer, gw) = (&g.issuer, &g.gw);
    let read = |t: &str| read_private(gw, t).status;
    assert_eq!(read(&token(&issuer.url, OWNER)), 200);
    assert_eq!(issuer.fetches(), 1);
    // The issuer rotates to a new key; the old one is withdrawn.
    issuer.set_keys(vec![public_jwk("ec", "ec2")]);
    // Past the 2 s refetch cool-down: the timer under test.
    std::thread::sleep(Duration::from_millis(2100));
    let rotated = sign(Key::Ec, "ec2", Some("at+jwt"), &claims(&issuer.url, OWNER));
    assert_eq!(read(&rotated), 200);
    assert_eq!(issuer.fetches(), 2);
    assert_eq!(read(&token(&issuer.url, OWNER)), 401, "the withdrawn key");

    // Past the refetch interval, so the first unknown kid starts a fetch at once; the others
    // wait for it, or, arriving after it ended, for the one due when its cool-down is over.
    std::thread::sleep(Duration::from_millis(2100));
    let before = issuer.fetches();
    let flood: Vec<_> = (0..40)
        .map(|i| {
            let t = sign(
                Key::Ec,
                &format!("made-up-{i}"),
                Some("at+jwt"),
                &claims(&issuer.url, OWNER),
            );
            let url = gw.url("/private/s?offset=-1");
            std::thread::spawn(move || {
                let auth = bearer(&t);
                send("GET", &url, &[("authorization", &auth)], b"").status
            })
        })
        .collect();
    for f in flood {
        assert_eq!(f.join().expect("thread"), 401);
    }
    assert!(
        issuer.fetches() - before <= 2,
        "{} fetches for 40 unknown kids",
        issuer.fetches() - before
    );
}

#[test]
fn auth_flags_without_an_issuer_stop_the_gateway_at_startup() {
    let err = refused_gateway(&["--auth-public-metrics"]);
    assert!(err.contains("requires --auth-issuer"), "{err}");
}

#[test]
fn an_sse_subscription_ends_at_the_tokens_exp_with_a_credential_expired_frame() {
    let g = guarded("auth-sse-exp", &[]);
    let (issuer, gw) = (&g.issuer, &g.gw);
    let mut c = claims(&issuer.url, OWNER);
    let exp = now() + 3;
    c["exp"] = exp.into();
    let t = sign(Key::Ed, "ed1", Some("at+jwt"), &c);

    let mut s = TcpStream::connect(("127.0.0.1", gw.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let req = format!(
        "GET /private/s?offset=-1&live=sse HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {t}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut seen = String::new();
    read_until(&mut s, &mut seen, "hello|");
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(!seen.contains("credential-expired"), "{seen}");
    // The node keeps the subscription open; the gateway ends it at exp, saying why.
    read_until(&mut s, &mut seen, "event: credential-expired");
    assert!(now() >= exp, "ended {} s before exp", exp - now());
    read_until(&mut s, &mut seen, "\r\n0\r\n\r\n");
    let tail = seen
        .split("event: credential-expired")
        .nth(1)
        .unwrap_or_default();
    assert!(
        !tail.contains("event:"),
        "a frame after credential-expired: {tail}"
    );
}

#[test]
fn keys_are_found_through_oidc_discovery_or_the_jwks_url_flag() {
    let scratch = Scratch::new("auth-discovery");
    let node = seeded_node(&scratch);
    let read = |gw: &Proc, t: &str| read_private(gw, t).status;
    // An issuer that serves only OpenID Connect discovery metadata.
    let oidc_only = Issuer::start(vec![public_jwk("ed", "ed1")]);
    oidc_only.serve_metadata("/.well-known/openid-configuration", None);
    let gw = auth_gateway(&scratch, &node, &oidc_only.url, &[]);
    assert_eq!(read(&gw, &token(&oidc_only.url, OWNER)), 200);
    drop(gw);

    // --auth-jwks-url: the issuer named in tokens serves nothing at all.
    let keys = Issuer::start(vec![public_jwk("ed", "ed1")]);
    let elsewhere = format!("http://127.0.0.1:{}", free_port());
    let jwks_url = format!("{}/jwks", keys.url);
    let gw = auth_gateway(&scratch, &node, &elsewhere, &["--auth-jwks-url", &jwks_url]);
    assert_eq!(read(&gw, &token(&elsewhere, OWNER)), 200);
    assert_eq!(keys.fetches(), 1);
}

#[test]
fn metadata_naming_another_issuer_is_not_trusted() {
    let scratch = Scratch::new("auth-mixup");
    let node = seeded_node(&scratch);
    let issuer = Issuer::start(vec![public_jwk("ed", "ed1")]);
    issuer.serve_metadata(
        "/.well-known/oauth-authorization-server",
        Some("https://someone.else"),
    );
    let gw = auth_gateway(&scratch, &node, &issuer.url, &[]);
    let a = read_private(&gw, &token(&issuer.url, OWNER));
    assert_eq!(a.status, 503, "{}", a.body);
    assert_eq!(a.header(MARKER), Some("AuthenticationUnavailable"));
    assert_eq!(
        issuer.fetches(),
        0,
        "the JWKS of a mixed-up issuer was fetched"
    );
}

#[test]
fn cached_keys_keep_verifying_while_the_issuer_is_down_and_new_kids_get_a_marked_503() {
    let scratch = Scratch::new("auth-cached");
    let node = seeded_node(&scratch);
    let issuer = Issuer::start(vec![public_jwk("ed", "ed1"), public_jwk("ec", "ec1")]);
    let url = issuer.url.clone();
    let gw = auth_gateway(&scratch, &node, &url, &[]);
    let read = |t: &str| read_private(&gw, t);
    assert_eq!(read(&token(&url, OWNER)).status, 200);
    drop(issuer);
    // Gone for good: nothing accepts at its address any more.
    let addr = url.trim_start_matches("http://").to_owned();
    wait_for(5, "the issuer to stop listening", || {
        TcpStream::connect(&addr).is_err().then_some(())
    });
    assert_eq!(read(&token(&url, OWNER)).status, 200, "a cached key");
    // Past the refetch interval, a kid the cache lacks needs the issuer, which is gone.
    std::thread::sleep(Duration::from_millis(2100));
    let a = read(&sign(
        Key::Ec,
        "ec-new",
        Some("at+jwt"),
        &claims(&url, OWNER),
    ));
    assert_eq!(a.status, 503, "{}", a.body);
    assert_eq!(a.header(MARKER), Some("AuthenticationUnavailable"));
    assert_eq!(
        read(&token(&url, OWNER)).status,
        200,
        "still the cached key"
    );
}
