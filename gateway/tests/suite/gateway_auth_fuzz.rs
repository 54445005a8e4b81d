//! Fuzzes the `Authorization` header and the parts of the token at a real access-controlled
//! `ursula gateway`: raw header bytes, bearer strings, one-character mutations of a valid token,
//! and tokens whose header and claims are built from odd values. Every request carries some
//! credential that is not a valid token, so none may be forwarded, and none may get a `5xx`.
//! Forwards are counted at the upstream: a listener that counts the connections it accepts.

use std::io::Read;
use std::io::Write;
use std::net::TcpListener;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::Config;
use proptest::test_runner::TestRunner;
use serde_json::Value;
use serde_json::json;

use crate::harness::auth::*;
use crate::harness::gateway::*;

/// The request heads an upstream received, lowercased.
type Heads = Arc<Mutex<Vec<String>>>;

/// An upstream that counts connections (any connection is a forward), keeps each request's
/// head, and answers `200` with nothing.
fn counting_upstream() -> (String, Arc<AtomicUsize>, Heads) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let hits = Arc::new(AtomicUsize::new(0));
    let heads: Heads = Arc::default();
    let (h, hs) = (hits.clone(), heads.clone());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            h.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut c) = conn {
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                hs.lock()
                    .expect("heads")
                    .push(String::from_utf8_lossy(&head).to_ascii_lowercase());
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        }
    });
    (url, hits, heads)
}

/// One request with `auth` as the raw `Authorization` value; the answer's status, 0 if none.
fn status_of(port: u16, method: &str, path: &str, auth: &[u8]) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n").into_bytes();
    req.extend_from_slice(b"authorization: ");
    req.extend_from_slice(auth);
    req.extend_from_slice(b"\r\n");
    if method == "POST" || method == "PUT" {
        req.extend_from_slice(b"content-type: text/plain\r\ncontent-length: 2\r\n\r\nx|");
    } else {
        req.extend_from_slice(b"\r\n");
    }
    s.write_all(&req).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Odd JSON values for a header or claim field.
fn odd_value() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        any::<i64>().prop_map(|n| Some(json!(n))),
        any::<f64>().prop_map(|f| Some(json!(f))),
        "[ -~]{0,40}".prop_map(|s| Some(json!(s))),
        Just(Some(json!([1, "a", null]))),
        Just(Some(json!({ "nested": true }))),
        Just(Some(json!(u64::MAX))),
        Just(Some(json!(-1))),
    ]
}

#[derive(Debug, Clone)]
enum Credential {
    /// Raw header bytes, without CR or LF (which would end the header, not fuzz it).
    Bytes(Vec<u8>),
    /// `Bearer ` and printable text.
    Text(String),
    /// A valid token with one character replaced.
    Mutated(usize, char),
    /// A token built from odd parts; its signature is junk or another issuer's.
    Built {
        alg: String,
        typ: Option<Value>,
        kid: Option<Value>,
        claim: String,
        value: Option<Value>,
        foreign: bool,
    },
}

fn credential() -> impl Strategy<Value = Credential> {
    let claim_names = prop::sample::select(vec![
        "iss",
        "aud",
        "sub",
        "client_id",
        "iat",
        "exp",
        "jti",
        "nbf",
    ]);
    let algs = prop::sample::select(vec![
        "none", "HS256", "RS256", "PS256", "ES256", "ES384", "EdDSA", "", "RSA-OAEP",
    ]);
    prop_oneof![
        prop::collection::vec(
            any::<u8>().prop_filter("no CR/LF", |b| *b != b'\r' && *b != b'\n'),
            0..300
        )
        .prop_map(Credential::Bytes),
        "[ -~]{0,400}".prop_map(Credential::Text),
        (any::<usize>(), prop::char::range('+', 'z')).prop_map(|(i, c)| Credential::Mutated(i, c)),
        (
            algs,
            odd_value(),
            odd_value(),
            claim_names,
            odd_value(),
            any::<bool>()
        )
            .prop_map(|(alg, typ, kid, claim, value, foreign)| Credential::Built {
                alg: alg.to_owned(),
                typ,
                kid,
                claim: claim.to_owned(),
                value,
                foreign,
            }),
    ]
}

fn render(c: &Credential, valid: &str, issuer: &str) -> Option<Vec<u8>> {
    match c {
        Credential::Bytes(b) => Some(b.clone()),
        Credential::Text(t) => Some(format!("Bearer {t}").into_bytes()),
        Credential::Mutated(i, ch) => {
            let mut chars: Vec<char> = valid.chars().collect();
            let at = i % chars.len();
            if chars[at] == *ch {
                return None;
            }
            chars[at] = *ch;
            Some(format!("Bearer {}", chars.into_iter().collect::<String>()).into_bytes())
        }
        Credential::Built {
            alg,
            typ,
            kid,
            claim,
            value,
            foreign,
        } => {
            let mut claims = claims(issuer, "user-1");
            match value {
                Some(v) => claims[claim.as_str()] = v.clone(),
                None => {
                    claims.as_object_mut().map(|m| m.remove(claim.as_str()));
                }
            }
            let token = if *foreign {
                // Well-formed and signed, by a key the issuer never published under that kid.
                sign(Key::Foreign, "ed1", Some("at+jwt"), &claims)
            } else {
                let mut header = json!({ "alg": alg });
                if let Some(t) = typ {
                    header["typ"] = t.clone();
                }
                if let Some(k) = kid {
                    header["kid"] = k.clone();
                }
                unsigned(&header, &claims)
            };
            Some(format!("Bearer {token}").into_bytes())
        }
    }
}

#[test]
fn fuzzed_credentials_never_get_a_5xx_and_are_never_forwarded() {
    let scratch = Scratch::new("auth-fuzz");
    let issuer = Issuer::start(vec![public_jwk("ed", "ed1")]);
    let (upstream, hits, heads) = counting_upstream();
    let policy = scratch.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[[bucket]]\nid = \"private\"\nowners = [{{ issuer = \"{}\", subject = \"user-1\" }}]\n\n\
             [[bucket]]\nid = \"public\"\npublic_read = true\n",
            issuer.url
        ),
    )
    .expect("policy");
    let policy = policy.display().to_string();
    let gw = policy_gateway(&scratch, &upstream, &issuer.url, &policy, &[]);
    let port = gw.port;
    let valid = token(&issuer.url, "user-1");
    // The fixture works: the valid token is forwarded, so a count of 0 below means something.
    assert_eq!(
        status_of(
            port,
            "GET",
            "/private/s",
            format!("Bearer {valid}").as_bytes()
        ),
        200
    );
    let baseline = hits.load(Ordering::SeqCst);
    assert_eq!(baseline, 1);
    // Credential termination: the upstream never sees the token.
    let forwarded = heads.lock().expect("heads").join("\n");
    assert!(forwarded.starts_with("get /private/s "), "{forwarded}");
    assert!(!forwarded.contains("authorization"), "{forwarded}");
    assert!(
        !forwarded.contains(&valid.to_ascii_lowercase()),
        "{forwarded}"
    );

    let methods = prop::sample::select(vec!["GET", "HEAD", "POST", "PUT", "DELETE"]);
    let paths = prop::sample::select(vec![
        "/private/s",
        "/public/s?offset=-1",
        "/public/s?offset=-1&live=sse",
        "/unknown/s",
        "/public",
        "/__ursula/metrics",
        "/v1/stream/x",
        "/",
    ]);
    let mut runner = TestRunner::new(Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    });
    let seen = std::sync::Mutex::new(std::collections::BTreeMap::<u16, usize>::new());
    let result = runner.run(&(credential(), methods, paths), |(c, method, path)| {
        let Some(auth) = render(&c, &valid, &issuer.url) else {
            return Ok(());
        };
        let status = status_of(port, method, path, &auth);
        *seen.lock().expect("seen").entry(status).or_default() += 1;
        prop_assert!(
            (400..500).contains(&status),
            "{method} {path} with {:?}: status {status}",
            String::from_utf8_lossy(&auth)
        );
        prop_assert_eq!(hits.load(Ordering::SeqCst), baseline, "forwarded: {:?}", c);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}\n{}", gw.log());
    }
    // The cases ran and reached the token checks: most are refused tokens, not bad requests.
    let seen = seen.into_inner().expect("seen");
    eprintln!("statuses: {seen:?}");
    assert!(seen.get(&401).copied().unwrap_or(0) > 150, "{seen:?}");
}
