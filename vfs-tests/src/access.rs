//! `ursula gateway` with access control and quotas in front of a node, for the extension's
//! tests: a JWKS served on a loopback port, the issuer's Ed25519 key (the gateway tests' key in
//! `gateway/tests/auth_keys`) to sign RFC 9068 access tokens with, and a policy and quota file.

use std::io::Read;
use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use jsonwebtoken::Algorithm;
use jsonwebtoken::EncodingKey;
use jsonwebtoken::Header;

pub const AUDIENCE: &str = "https://streams.example";
pub const OWNER: &str = "owner-1";
pub const STRANGER: &str = "stranger-1";

fn key_file(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../gateway/tests/auth_keys/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A gateway that admits [`OWNER`]'s tokens to `bucket`, with `quotas` as its quota policy.
pub struct AccessGateway {
    pub port: u16,
    pub issuer: String,
    child: Child,
}

impl AccessGateway {
    pub fn start(upstream: &str, bucket: &str, quotas: &str, dir: &Path) -> AccessGateway {
        let issuer = serve_jwks();
        let policy = dir.join("policy.toml");
        std::fs::write(
            &policy,
            format!(
                "[[bucket]]\nid = \"{bucket}\"\nowners = [{{ issuer = \"{issuer}\", subject = \"{OWNER}\" }}]\n"
            ),
        )
        .expect("policy");
        let quota_file = dir.join("quotas.toml");
        std::fs::write(&quota_file, quotas).expect("quotas");
        let port = crate::free_port();
        let child = Command::new(crate::target_dir().join("ursula"))
            .args(["gateway", "--upstream", upstream])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--auth-issuer", &issuer, "--auth-audience", AUDIENCE])
            .args(["--auth-jwks-url", &format!("{issuer}/jwks")])
            .arg("--auth-policy")
            .arg(&policy)
            .arg("--quota-policy")
            .arg(&quota_file)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn ursula gateway");
        let gw = AccessGateway {
            port,
            issuer,
            child,
        };
        // Ready once it answers: anything under access control answers 404 without a token.
        let deadline = Instant::now() + Duration::from_secs(20);
        while crate::server::try_http("GET", &format!("{}/", gw.base()), &[], b"").is_none() {
            assert!(Instant::now() < deadline, "the gateway did not start");
            std::thread::sleep(Duration::from_millis(25));
        }
        gw
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An access token of this gateway's issuer for `subject`, valid for `ttl_secs` (negative:
    /// expired that long ago).
    pub fn token(&self, subject: &str, ttl_secs: i64) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let exp = now.saturating_add_signed(ttl_secs);
        let claims = serde_json::json!({
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": subject,
            "client_id": "vfs-tests",
            "iat": now.min(exp),
            "exp": exp,
            "jti": format!("{subject}-{now}-{}", crate::free_port()),
        });
        let mut header = Header::new(Algorithm::EdDSA);
        header.typ = Some("at+jwt".into());
        header.kid = Some("ed1".into());
        let key = EncodingKey::from_ed_der(&key_file("issuer-ed25519.pk8"));
        jsonwebtoken::encode(&header, &claims, &key).expect("sign")
    }
}

impl Drop for AccessGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves the issuer's public key as a JWKS at `/jwks` on a loopback port, for the life of the
/// test process. Returns the issuer URL (the JWKS's origin).
fn serve_jwks() -> String {
    let all: serde_json::Value =
        serde_json::from_slice(&key_file("public-jwks.json")).expect("public-jwks.json");
    let mut key = all["ed"].clone();
    key["kid"] = "ed1".into();
    let body = serde_json::json!({ "keys": [key] }).to_string();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(answer.as_bytes());
        }
    });
    url
}
