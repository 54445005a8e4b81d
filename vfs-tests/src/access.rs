//! `ursula gateway` with access control and quotas in front of a node, for the extension's
//! tests: the workspace harness's issuer (a JWKS of the gateway tests' Ed25519 key, in
//! `gateway/tests/auth_keys`), seeded node and access-controlled gateway
//! (`ursula_testkit::auth`), with a quota policy of the test's own and RFC 9068 access tokens of
//! any lifetime.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use ursula_testkit::auth::Issuer;
use ursula_testkit::auth::Key;
use ursula_testkit::auth::auth_gateway;
use ursula_testkit::auth::claims;
use ursula_testkit::auth::public_jwk;
use ursula_testkit::auth::seeded_node;
use ursula_testkit::auth::sign;
use ursula_testkit::gateway::Proc;
use ursula_testkit::scratch::Scratch;

pub use ursula_testkit::auth::OWNER;
pub use ursula_testkit::auth::STRANGER;

/// The bucket [`OWNER`]'s tokens are admitted to (the harness's policy names it).
pub const BUCKET: &str = "private";

/// A node holding [`BUCKET`] behind a gateway that admits [`OWNER`]'s tokens to it, with
/// `quotas` as its quota policy. Fields drop in order: the processes before their directory.
pub struct AccessGateway {
    gateway: Proc,
    _node: Proc,
    issuer: Issuer,
    _dir: Scratch,
}

impl AccessGateway {
    pub fn start(quotas: &str) -> AccessGateway {
        let dir = Scratch::new("vfs-access");
        let node = seeded_node(&dir);
        let issuer = Issuer::start(vec![public_jwk("ed", "ed1")]);
        let quota_file = dir.file("quotas.toml", quotas);
        let quota_file = quota_file.to_str().expect("utf8 path");
        let gateway = auth_gateway(&dir, &node, &issuer.url, &["--quota-policy", quota_file]);
        AccessGateway {
            gateway,
            _node: node,
            issuer,
            _dir: dir,
        }
    }

    pub fn base(&self) -> String {
        self.gateway.base()
    }

    /// An access token of this gateway's issuer for `subject`, valid for `ttl_secs` (negative:
    /// expired that long ago).
    pub fn token(&self, subject: &str, ttl_secs: i64) -> String {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let mut c = claims(&self.issuer.url, subject);
        let now = ursula_testkit::auth::now();
        let exp = now.saturating_add_signed(ttl_secs);
        c["iat"] = now.min(exp).into();
        c["exp"] = exp.into();
        c["client_id"] = "vfs-tests".into();
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        c["jti"] = format!("{subject}-{now}-{serial}").into();
        sign(Key::Ed, "ed1", Some("at+jwt"), &c)
    }
}
