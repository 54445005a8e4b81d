//! Helpers for the access-control tests: a small issuer on a loopback port that serves RFC 8414
//! metadata and a JWKS it can swap (key rotation) and counts fetches of, and access tokens
//! signed by hand with the test keys in `gateway/tests/auth_keys` (generated once with
//! `openssl genpkey`; their public halves are in `public-jwks.json`). A test that uses it
//! uses `harness::gateway` too: the seeded node and the gateway run through it.

#![allow(dead_code)]

use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use jsonwebtoken::Algorithm;
use jsonwebtoken::EncodingKey;
use jsonwebtoken::Header;
use serde_json::Value;
use serde_json::json;

use crate::gateway::Answer;
use crate::gateway::Proc;
use crate::gateway::Scratch;
use crate::gateway::TEXT;
use crate::gateway::free_port;
use crate::gateway::memory_node;
use crate::gateway::send;

pub const AUDIENCE: &str = "https://streams.example";

fn key_file(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../gateway/tests/auth_keys/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A public JWK from `public-jwks.json` ("ed", "foreign", "ec", "rsa"), with its `kid`.
pub fn public_jwk(name: &str, kid: &str) -> Value {
    let all: Value =
        serde_json::from_slice(&key_file("public-jwks.json")).expect("public-jwks.json");
    let mut k = all[name].clone();
    assert!(k.is_object(), "no key {name}");
    k["kid"] = kid.into();
    k
}

/// The signing keys the tests hold.
#[derive(Clone, Copy, Debug)]
pub enum Key {
    /// The issuer's Ed25519 key.
    Ed,
    /// The issuer's P-256 key.
    Ec,
    /// The issuer's RSA key.
    Rsa,
    /// An Ed25519 key of some other issuer.
    Foreign,
}

impl Key {
    fn encoding(self) -> (Algorithm, EncodingKey) {
        let (algorithm, file) = match self {
            Key::Ed => (Algorithm::EdDSA, "issuer-ed25519.pk8"),
            Key::Foreign => (Algorithm::EdDSA, "foreign-ed25519.pk8"),
            Key::Ec => (Algorithm::ES256, "issuer-p256.pk8"),
            Key::Rsa => (Algorithm::RS256, "issuer-rsa.der"),
        };
        let der = key_file(file);
        let key = match algorithm {
            Algorithm::EdDSA => EncodingKey::from_ed_der(&der),
            Algorithm::ES256 => EncodingKey::from_ec_der(&der),
            _ => EncodingKey::from_rsa_der(&der),
        };
        (algorithm, key)
    }
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// The claims of a valid access token of `issuer` for `subject`.
pub fn claims(issuer: &str, subject: &str) -> Value {
    let now = now();
    json!({
        "iss": issuer,
        "aud": AUDIENCE,
        "sub": subject,
        "client_id": "test-client",
        "iat": now,
        "exp": now + 600,
        "jti": format!("jti-{subject}-{now}"),
    })
}

/// A JWS of `claims` signed with `key`, its header `typ` and `kid` as given.
pub fn sign(key: Key, kid: &str, typ: Option<&str>, claims: &Value) -> String {
    let (alg, enc) = key.encoding();
    let mut header = Header::new(alg);
    header.typ = typ.map(str::to_owned);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &enc).expect("sign")
}

/// An `at+jwt` token of `issuer` for `subject`, signed with the issuer's Ed25519 key `ed1`.
pub fn token(issuer: &str, subject: &str) -> String {
    sign(Key::Ed, "ed1", Some("at+jwt"), &claims(issuer, subject))
}

/// A JWS of `claims` signed with `key` under a JOSE header given whole (its `alg` is set to
/// the key's), for headers the library's `Header` cannot carry, such as `crit`.
pub fn sign_with_header(key: Key, mut header: Value, claims: &Value) -> String {
    let (alg, enc) = key.encoding();
    header["alg"] = serde_json::to_value(alg).expect("alg");
    let input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let sig = jsonwebtoken::crypto::sign(input.as_bytes(), &enc, alg).expect("sign");
    format!("{input}.{sig}")
}

pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A token whose header and payload are as given, with a signature of junk.
pub fn unsigned(header: &Value, claims: &Value) -> String {
    format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes()),
        b64(b"not a signature")
    )
}

/// A minimal issuer on a loopback port: `/.well-known/oauth-authorization-server` naming
/// `/jwks`, and the JWKS, which a test may replace. Stops on drop.
pub struct Issuer {
    pub url: String,
    /// Where the metadata is served, and the `issuer` it names.
    metadata: Arc<Mutex<(String, String)>>,
    jwks: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
    /// While set, JWKS requests are held unanswered: an issuer that hangs.
    hang: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Issuer {
    /// Serves its metadata where RFC 8414 puts it, naming itself.
    pub fn start(keys: Vec<Value>) -> Issuer {
        let i = Issuer::bare(keys);
        i.serve_metadata("/.well-known/oauth-authorization-server", None);
        i
    }

    /// Serves the metadata at `path` only, naming `issuer` (itself when `None`).
    pub fn serve_metadata(&self, path: &str, issuer: Option<&str>) {
        *self.metadata.lock().expect("metadata") =
            (path.to_owned(), issuer.unwrap_or(&self.url).to_owned());
    }

    fn bare(keys: Vec<Value>) -> Issuer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let jwks = Arc::new(Mutex::new(json!({ "keys": keys })));
        let fetches = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let hang = Arc::new(AtomicBool::new(false));
        let metadata = Arc::new(Mutex::new((String::new(), url.clone())));
        let (j, f, s, u, m, h) = (
            jwks.clone(),
            fetches.clone(),
            stop.clone(),
            url.clone(),
            metadata.clone(),
            hang.clone(),
        );
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (j, f, u, m, h) =
                            (j.clone(), f.clone(), u.clone(), m.clone(), h.clone());
                        std::thread::spawn(move || answer(conn, &u, &m, &j, &f, &h));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Issuer {
            url,
            metadata,
            jwks,
            fetches,
            hang,
            stop,
        }
    }

    /// From now on, JWKS requests get no answer until [`Issuer::hang`] is called with
    /// `false` (or a minute passed): the connection is accepted and then stalls.
    pub fn hang(&self, on: bool) {
        self.hang.store(on, Ordering::SeqCst);
    }

    pub fn set_keys(&self, keys: Vec<Value>) {
        *self.jwks.lock().expect("jwks") = json!({ "keys": keys });
    }

    /// How many times the JWKS was fetched.
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn answer(
    mut conn: std::net::TcpStream,
    url: &str,
    metadata: &Mutex<(String, String)>,
    jwks: &Mutex<Value>,
    fetches: &AtomicUsize,
    hang: &AtomicBool,
) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let Ok(head) = crate::conn::read_head(&mut conn) else {
        return;
    };
    let text = String::from_utf8_lossy(&head);
    let path = text.split(' ').nth(1).unwrap_or_default().to_owned();
    let (meta_path, named) = metadata.lock().expect("metadata").clone();
    let (status, body) = match path.as_str() {
        p if p == meta_path => (
            "200 OK",
            json!({ "issuer": named, "jwks_uri": format!("{url}/jwks") }).to_string(),
        ),
        "/jwks" => {
            fetches.fetch_add(1, Ordering::SeqCst);
            let until = std::time::Instant::now() + Duration::from_secs(60);
            while hang.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            ("200 OK", jwks.lock().expect("jwks").to_string())
        }
        _ => ("404 Not Found", "{}".to_owned()),
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

// The gateway with access control in front of a seeded node, shared by the tests that run
// one.

pub const OWNER: &str = "user-1";
pub const STRANGER: &str = "user-2";

/// A policy: `private` owned by user-1, `public` readable by anyone and owned by user-1.
pub fn policy(scratch: &Scratch, issuer: &str) -> String {
    policy_owned_by(scratch, issuer, OWNER)
}

/// The [`policy`] with both buckets owned by `subject` of `issuer`; returns the file's path.
pub fn policy_owned_by(scratch: &Scratch, issuer: &str, subject: &str) -> String {
    let path = scratch.path().join("policy.toml");
    let owners = format!("owners = [{{ issuer = \"{issuer}\", subject = \"{subject}\" }}]");
    let text = format!(
        "[[bucket]]\nid = \"private\"\n{owners}\n\n\
         [[bucket]]\nid = \"public\"\npublic_read = true\n{owners}\n"
    );
    std::fs::write(&path, text).expect("policy");
    path.display().to_string()
}

/// A gateway in front of `node` checking `issuer`'s tokens against [`policy`].
pub fn auth_gateway(scratch: &Scratch, node: &Proc, issuer: &str, extra: &[&str]) -> Proc {
    let policy = policy(scratch, issuer);
    policy_gateway(scratch, &node.base(), issuer, &policy, extra)
}

/// A gateway in front of `upstream` checking `issuer`'s tokens against the policy file at
/// `policy`; `extra` goes to its arguments.
pub fn policy_gateway(
    scratch: &Scratch,
    upstream: &str,
    issuer: &str,
    policy: &str,
    extra: &[&str],
) -> Proc {
    let port = free_port();
    let mut args: Vec<String> = [
        "gateway",
        "--upstream",
        upstream,
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--auth-issuer",
        issuer,
        "--auth-audience",
        AUDIENCE,
        "--auth-policy",
        policy,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let mut p = Proc::spawn(scratch, "gateway", port, &args);
    p.wait_answering("gateway", "/");
    p
}

pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `GET /private/s?offset=-1` through `gw` with `token` as the bearer.
pub fn read_private(gw: &Proc, token: &str) -> Answer {
    let auth = bearer(token);
    send(
        "GET",
        &gw.url("/private/s?offset=-1"),
        &[("authorization", &auth)],
        b"",
    )
}

/// A seeded node behind a gateway that checks the tokens of an issuer holding one Ed25519 key
/// (`ed1`). Fields drop in order: the processes before their scratch directory.
pub struct Guarded {
    pub gw: Proc,
    pub node: Proc,
    pub issuer: Issuer,
    pub scratch: Scratch,
}

/// Starts a [`Guarded`] stack in a scratch directory named after `name`; `extra` goes to the
/// gateway's arguments.
pub fn guarded(name: &str, extra: &[&str]) -> Guarded {
    let scratch = Scratch::new(name);
    let issuer = Issuer::start(vec![public_jwk("ed", "ed1")]);
    let node = seeded_node(&scratch);
    let gw = auth_gateway(&scratch, &node, &issuer.url, extra);
    Guarded {
        gw,
        node,
        issuer,
        scratch,
    }
}

/// A node with `private/s` and `public/s` holding "hello|", created straight on the node.
pub fn seeded_node(scratch: &Scratch) -> Proc {
    let node = node_with_buckets(scratch, &["private", "public"]);
    for b in ["private", "public"] {
        let a = send("POST", &node.url(&format!("/{b}/s")), &[TEXT], b"hello|");
        assert!(matches!(a.status, 200 | 204), "{}", a.body);
    }
    node
}

/// An in-memory node holding an empty text stream `s` in each of `buckets`.
pub fn node_with_buckets(scratch: &Scratch, buckets: &[&str]) -> Proc {
    let node = memory_node(scratch);
    for b in buckets {
        let a = send("PUT", &node.url(&format!("/{b}")), &[], b"");
        assert!(
            matches!(a.status, 200 | 201 | 204),
            "bucket {b}: {}",
            a.status
        );
        let a = send("PUT", &node.url(&format!("/{b}/s")), &[TEXT], b"");
        assert_eq!(a.status, 201, "{}", a.body);
    }
    node
}

/// The stream's bytes, read straight from the node.
pub fn contents(node: &Proc, path: &str) -> String {
    send("GET", &node.url(&format!("{path}?offset=-1")), &[], b"").body
}
