//! `ursula gateway --auth-*` against a real issuer: `oidc-provider` (npm, a certified OAuth 2.0
//! / OpenID Connect server) on a loopback port, run by Node 22 from `scripts/install-node.sh`,
//! issuing RFC 9068 JWT access tokens through the client-credentials grant. The gateway finds
//! its keys by metadata discovery; the tokens it issues open the bucket their subject owns, and
//! nothing else. The npm packages are installed from `interop/oidc/package-lock.json` into
//! `target/oidc-issuer/` on the first run, and reused while the lockfile is unchanged.

use std::io::BufRead;
use std::io::BufReader;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use crate::harness::auth::node_with_buckets;
use crate::harness::auth::policy_gateway;
use crate::harness::auth::policy_owned_by;
use crate::harness::calls::append_as;
use crate::harness::calls::read_as;
use crate::harness::gateway::*;

const AUDIENCE: &str = "https://streams.example";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// Node 22: the path `scripts/install-node.sh` prints (it installs once, then reuses).
fn node22() -> PathBuf {
    let out = Command::new(repo().join("scripts/install-node.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("scripts/install-node.sh");
    assert!(out.status.success(), "scripts/install-node.sh failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// `target/oidc-issuer/` with the issuer script and its npm packages, installed with `npm ci`
/// when the lockfile differs from the one they were installed from.
fn issuer_dir() -> PathBuf {
    let src = repo().join("interop/oidc");
    let dir = repo().join("target/oidc-issuer");
    std::fs::create_dir_all(&dir).expect("target/oidc-issuer");
    for f in ["package.json", "issuer.mjs"] {
        std::fs::copy(src.join(f), dir.join(f)).expect("copy");
    }
    let lock = std::fs::read(src.join("package-lock.json")).expect("package-lock.json");
    let installed = dir.join("node_modules/.installed-from-lock");
    if std::fs::read(&installed).ok().as_deref() != Some(lock.as_slice()) {
        std::fs::write(dir.join("package-lock.json"), &lock).expect("lock");
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .status()
            .expect("npm (needed to install oidc-provider)");
        assert!(status.success(), "npm ci in {}", dir.display());
        std::fs::write(&installed, &lock).expect("install marker");
    }
    dir
}

/// The running issuer, killed on drop.
struct OidcIssuer {
    child: Child,
    url: String,
}

impl OidcIssuer {
    fn start() -> OidcIssuer {
        let node = node22();
        let dir = issuer_dir();
        let port = free_port();
        let mut child = Command::new(node)
            .arg("issuer.mjs")
            .arg(port.to_string())
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the issuer");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("listening ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the issuer did not start listening");
        OidcIssuer { child, url }
    }

    /// An access token for `client` through the client-credentials grant.
    fn token(&self, client: &str) -> String {
        let secret = format!("{client}-secret");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let resp = agent().post(&format!("{}/token", self.url)).send_form([
                ("grant_type", "client_credentials"),
                ("client_id", client),
                ("client_secret", secret.as_str()),
                ("scope", "streams"),
                ("resource", AUDIENCE),
            ]);
            if let Ok(mut r) = resp
                && r.status() == 200
            {
                let body: serde_json::Value =
                    serde_json::from_str(&r.body_mut().read_to_string().expect("body"))
                        .expect("json");
                return body["access_token"]
                    .as_str()
                    .expect("access_token")
                    .to_owned();
            }
            assert!(Instant::now() < deadline, "no token from the issuer");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for OidcIssuer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JOSE header of a compact JWS.
fn jose_header(token: &str) -> serde_json::Value {
    use base64::Engine;
    let part = token.split('.').next().expect("header");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("json")
}

#[test]
fn tokens_of_a_real_oidc_provider_open_the_bucket_their_subject_owns_and_nothing_else() {
    let scratch = Scratch::new("auth-oidc");
    let issuer = OidcIssuer::start();
    let node = node_with_buckets(&scratch, &["private", "public"]);
    let policy = policy_owned_by(&scratch, &issuer.url, "writer");
    let gw = policy_gateway(&scratch, &node.base(), &issuer.url, &policy, &[]);

    let writer = issuer.token("writer");
    assert_eq!(jose_header(&writer)["typ"], "at+jwt");
    let writer = format!("Bearer {writer}");
    let stranger = format!("Bearer {}", issuer.token("stranger"));

    let a = append_as(&gw, "/private/s", &writer, b"a|");
    assert!(
        matches!(a.status, 200 | 204),
        "{}: {} {}",
        a.status,
        a.body,
        gw.log()
    );
    let a = read_as(&gw, "/private/s", &writer);
    assert_eq!((a.status, a.body.as_str()), (200, "a|"));
    let a = append_as(&gw, "/public/s", &writer, b"p|");
    assert!(matches!(a.status, 200 | 204), "{}", a.body);

    // The stranger's token is valid: it gets the missing-stream 404, not a 401.
    let a = read_as(&gw, "/private/s", &stranger);
    assert_eq!((a.status, a.body.as_str()), (404, "stream not found"));
    let a = append_as(&gw, "/public/s", &stranger, b"x|");
    assert_eq!(a.status, 404);
    let a = read_as(&gw, "/public/s", &stranger);
    assert_eq!((a.status, a.body.as_str()), (200, "p|"));
    let a = send("GET", &gw.url("/public/s?offset=-1"), &[], b"");
    assert_eq!((a.status, a.body.as_str()), (200, "p|"));
    assert_eq!(
        send("GET", &node.url("/private/s?offset=-1"), &[], b"").body,
        "a|"
    );
}
