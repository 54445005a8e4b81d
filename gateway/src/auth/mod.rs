//! Opt-in access control (`--auth-*`): bearer tokens validated as RFC 9068 JWT access tokens
//! ([`token`]) against the issuer's keys ([`jwks`]), and a per-bucket policy ([`policy`]).
//! Without `--auth-issuer` none of this exists and the gateway is a trusted pass-through.
//!
//! The order of the checks is part of the concealment: the token is judged before the path, so
//! whether a request gets `401`, `503` or `404` never depends on whether a bucket exists.

pub mod jwks;
pub mod policy;
pub mod token;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use clap::Args;
use http::HeaderMap;
use http::Method;
use http::header;
use ursula_protocol::path::Target;

pub use jwks::Jwks;
pub use policy::Access;
pub use policy::Policy;
pub use policy::Principal;
pub use token::TokenError;

/// How soon after one JWKS fetch another may start.
pub const JWKS_REFETCH_INTERVAL: Duration = Duration::from_secs(2);

/// The `--auth-*` flags of `ursula gateway`.
#[derive(Debug, Clone, Default, Args)]
pub struct AuthArgs {
    /// Turns access control on: the issuer (`iss`) whose RFC 9068 access tokens are accepted.
    #[arg(long, value_name = "URL")]
    pub auth_issuer: Option<String>,
    /// This resource server's identifier, which a token's `aud` must name.
    #[arg(long, value_name = "URI")]
    pub auth_audience: Option<String>,
    /// The TOML file of `[[bucket]]` entries: id, public_read, owners.
    #[arg(long, value_name = "FILE")]
    pub auth_policy: Option<PathBuf>,
    /// The issuer's JWKS; without it, found by RFC 8414 (then OpenID Connect) discovery.
    #[arg(long, value_name = "URL")]
    pub auth_jwks_url: Option<String>,
    /// Serve `/__ursula/gateway/metrics` to every caller, token or not.
    #[arg(long, default_value_t = false)]
    pub auth_public_metrics: bool,
    /// How old the cached JWKS may get before it is fetched again [default: 5m] (e.g. 5m,
    /// 30s; a bare number is seconds).
    #[arg(long, value_name = "DURATION", value_parser = crate::timeouts::parse_duration)]
    pub auth_jwks_max_age: Option<Duration>,
    /// Refuse tokens whose lifetime (`exp - iat`) is over this (e.g. 1h, 15m; a bare number
    /// is seconds) [default: no limit].
    #[arg(long, value_name = "DURATION", value_parser = crate::timeouts::parse_duration)]
    pub auth_max_token_lifetime: Option<Duration>,
}

/// Why the `--auth-*` flags cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    #[error("{0} requires --auth-issuer")]
    NeedsIssuer(&'static str),
    #[error("--auth-issuer requires {0}")]
    Missing(&'static str),
    #[error("{flag} {url}: {why}")]
    BadUrl {
        flag: &'static str,
        url: String,
        why: &'static str,
    },
    #[error("--auth-policy {path}: {source}")]
    PolicyRead {
        path: String,
        source: std::io::Error,
    },
    #[error("--auth-policy {path}: {why}")]
    PolicyInvalid { path: String, why: String },
    #[error("cannot build the HTTP client for the issuer: {0}")]
    Client(String),
    #[error("{0} must be more than 0")]
    Zero(&'static str),
}

/// The checked `--auth-*` flags.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    pub issuer: String,
    pub audience: String,
    pub jwks_url: Option<String>,
    pub policy: Policy,
    pub public_metrics: bool,
    /// Cached keys older than this are fetched again (`--auth-jwks-max-age`, 5 min).
    pub jwks_max_age: Duration,
    /// Tokens living longer than this (`exp - iat`) are refused; `None`: no limit.
    pub max_token_lifetime: Option<Duration>,
}

impl AuthConfig {
    /// `None` when access control is off (no `--auth-*` flag at all).
    pub fn from_args(a: &AuthArgs) -> Result<Option<AuthConfig>, AuthConfigError> {
        let Some(issuer) = a.auth_issuer.clone() else {
            let stray = [
                (a.auth_audience.is_some(), "--auth-audience"),
                (a.auth_policy.is_some(), "--auth-policy"),
                (a.auth_jwks_url.is_some(), "--auth-jwks-url"),
                (a.auth_public_metrics, "--auth-public-metrics"),
                (a.auth_jwks_max_age.is_some(), "--auth-jwks-max-age"),
                (
                    a.auth_max_token_lifetime.is_some(),
                    "--auth-max-token-lifetime",
                ),
            ];
            return match stray.into_iter().find(|(set, _)| *set) {
                Some((_, flag)) => Err(AuthConfigError::NeedsIssuer(flag)),
                None => Ok(None),
            };
        };
        check_url("--auth-issuer", &issuer)?;
        if let Some(u) = &a.auth_jwks_url {
            check_url("--auth-jwks-url", u)?;
        }
        let audience = a
            .auth_audience
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or(AuthConfigError::Missing("--auth-audience"))?;
        let path = a
            .auth_policy
            .as_ref()
            .ok_or(AuthConfigError::Missing("--auth-policy"))?;
        let jwks_max_age = a.auth_jwks_max_age.unwrap_or(jwks::DEFAULT_MAX_AGE);
        if jwks_max_age.is_zero() {
            return Err(AuthConfigError::Zero("--auth-jwks-max-age"));
        }
        if a.auth_max_token_lifetime.is_some_and(|d| d.is_zero()) {
            return Err(AuthConfigError::Zero("--auth-max-token-lifetime"));
        }
        Ok(Some(AuthConfig {
            issuer,
            audience,
            jwks_url: a.auth_jwks_url.clone(),
            policy: Policy::load(path)?,
            public_metrics: a.auth_public_metrics,
            jwks_max_age,
            max_token_lifetime: a.auth_max_token_lifetime,
        }))
    }
}

fn check_url(flag: &'static str, url: &str) -> Result<(), AuthConfigError> {
    let bad = |why| AuthConfigError::BadUrl {
        flag,
        url: url.to_owned(),
        why,
    };
    let uri: http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
    match uri.scheme_str() {
        Some("https" | "http") if uri.host().is_some_and(|h| !h.is_empty()) => Ok(()),
        _ => Err(bad("an http(s):// URL with a host is required")),
    }
}

/// The request a decision is made on: nothing of its body.
pub struct Ask<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
}

/// Who was let through, for what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    pub bucket: String,
    pub access: Access,
    /// `None`: an anonymous read of a `public_read` bucket.
    pub principal: Option<Principal>,
    /// The token's `exp` (seconds since the Unix epoch): a subscription ends there.
    pub expires_at: Option<u64>,
}

/// What the gateway does with a request.
#[derive(Debug)]
pub enum Decision {
    Forward(Admitted),
    /// The `404` a missing stream gets: unknown bucket, stranger, or no ownership.
    Conceal,
    /// `401`: the presented credential is not a valid access token.
    InvalidToken(TokenError),
    /// `503` `AuthenticationUnavailable`: the token's key could not be had from the issuer.
    Unavailable(String),
}

/// The bucket a request path is under, as the nodes decode it; `None` for a path that names
/// no bucket (the root, internal paths, a malformed name).
pub fn bucket_of(path: &str) -> Option<String> {
    match ursula_protocol::path::parse(path) {
        Ok(Target::Bucket(b)) => Some(b),
        Ok(Target::Stream { key, .. }) => key.split_once('/').map(|(b, _)| b.to_owned()),
        _ => None,
    }
}

/// The access control of one gateway: shared by every request.
#[derive(Debug)]
pub struct Auth {
    config: AuthConfig,
    rules: token::Rules,
    jwks: Jwks,
}

impl Auth {
    pub fn new(config: AuthConfig) -> Result<Arc<Auth>, AuthConfigError> {
        install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| AuthConfigError::Client(e.to_string()))?;
        let jwks = Jwks::new(
            http,
            config.issuer.clone(),
            config.jwks_url.clone(),
            JWKS_REFETCH_INTERVAL,
            config.jwks_max_age,
        );
        let rules = token::Rules {
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            // Claims are whole seconds: a fraction of a second allows the next whole one.
            max_lifetime_secs: config
                .max_token_lifetime
                .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0)),
        };
        Ok(Arc::new(Auth {
            config,
            rules,
            jwks,
        }))
    }

    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    pub fn jwks(&self) -> &Jwks {
        &self.jwks
    }

    /// Judges a request for a bucket or stream path (not `/__ursula/*`, which the caller
    /// conceals or serves itself).
    pub async fn decide(&self, ask: &Ask<'_>) -> Decision {
        let principal = match self.authenticate(ask.headers).await {
            Ok(p) => p,
            Err(d) => return d,
        };
        let Some(bucket) = bucket_of(ask.path) else {
            return Decision::Conceal;
        };
        let access = if *ask.method == Method::GET || *ask.method == Method::HEAD {
            Access::Read
        } else {
            Access::Write
        };
        let who = principal.as_ref().map(|v| &v.principal);
        if !self.config.policy.allows(&bucket, access, who) {
            return Decision::Conceal;
        }
        Decision::Forward(Admitted {
            bucket,
            access,
            principal: principal.as_ref().map(|v| v.principal.clone()),
            expires_at: principal.map(|v| v.exp),
        })
    }

    /// The token's holder, `None` without an `Authorization` header.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Option<token::Verified>, Decision> {
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(Decision::InvalidToken(TokenError::NotBearer));
        }
        let invalid = Decision::InvalidToken;
        let raw = token::bearer(value.as_bytes()).map_err(invalid)?;
        let peeked = token::peek(raw).map_err(invalid)?;
        let jwk = match self.jwks.key(&peeked.kid).await {
            Ok(jwks::Lookup::Found(k)) => k,
            Ok(jwks::Lookup::Unknown) => {
                return Err(Decision::InvalidToken(TokenError::UnknownKey(peeked.kid)));
            }
            Err(e) => return Err(Decision::Unavailable(e.to_string())),
        };
        token::verify(raw, &peeked, &jwk, &self.rules, unix_now())
            .map(Some)
            .map_err(invalid)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// reqwest is built without a rustls provider (see the workspace Cargo.toml) and panics when it
/// builds a client without one, so install ring's. Losing the race to another provider is fine.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_flags_need_the_issuer_and_the_issuer_needs_audience_and_policy() {
        assert!(matches!(
            AuthConfig::from_args(&AuthArgs::default()),
            Ok(None)
        ));
        let metrics_only = AuthArgs {
            auth_public_metrics: true,
            ..AuthArgs::default()
        };
        assert!(matches!(
            AuthConfig::from_args(&metrics_only),
            Err(AuthConfigError::NeedsIssuer("--auth-public-metrics"))
        ));
        let issuer_only = AuthArgs {
            auth_issuer: Some("https://issuer.example".into()),
            ..AuthArgs::default()
        };
        assert!(matches!(
            AuthConfig::from_args(&issuer_only),
            Err(AuthConfigError::Missing("--auth-audience"))
        ));
        let no_policy = AuthArgs {
            auth_audience: Some("https://streams.example".into()),
            ..issuer_only.clone()
        };
        assert!(matches!(
            AuthConfig::from_args(&no_policy),
            Err(AuthConfigError::Missing("--auth-policy"))
        ));
        let bad = AuthArgs {
            auth_issuer: Some("issuer.example".into()),
            ..no_policy
        };
        assert!(matches!(
            AuthConfig::from_args(&bad),
            Err(AuthConfigError::BadUrl { .. })
        ));
    }
}
