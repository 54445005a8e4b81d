//! The issuer's signing keys: found by RFC 8414 metadata discovery (or `--auth-jwks-url`),
//! cached by `kid`, fetched again when a token names a `kid` the cache lacks (key rotation)
//! or the cache is older than `--auth-jwks-max-age` ([`DEFAULT_MAX_AGE`]).
//!
//! No refetch storm: one fetch runs at a time (callers queue on one lock and find the keys it
//! brought), and a fetch starts at most once per `refetch_interval`, so a flood of tokens with
//! made-up `kid`s costs one fetch per interval. Keys already cached keep verifying while the
//! issuer is down; only a token whose key is not cached then gets `AuthenticationUnavailable`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::RwLock;
use std::time::Duration;
use std::time::Instant;

use http::Uri;
use jsonwebtoken::jwk::AlgorithmParameters;
use jsonwebtoken::jwk::Jwk;
use serde_json::Value;

/// `--auth-jwks-max-age` when not given. Cached keys are refreshed on the next lookup after
/// this long, even for a known `kid`, so a key the issuer withdrew stops verifying within
/// this bound. A failed refresh keeps them.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(300);

/// A metadata document or JWKS larger than this is refused.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// Why the keys could not be had: the issuer is down or answers nonsense.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JwksError {
    #[error("GET {url}: {why}")]
    Fetch { url: String, why: String },
    #[error("{url}: {why}")]
    Document { url: String, why: String },
    #[error("no metadata at {tried:?}")]
    NoMetadata { tried: Vec<String> },
    #[error("the last fetch failed less than {0:?} ago: {1}")]
    CoolingDown(Duration, Box<JwksError>),
}

/// A key lookup's result when the keys could be had.
#[derive(Debug, Clone)]
pub enum Lookup {
    Found(Arc<Jwk>),
    /// The issuer's current JWKS has no such `kid`.
    Unknown,
}

#[derive(Debug)]
pub struct Jwks {
    http: reqwest::Client,
    issuer: String,
    /// `--auth-jwks-url`, which skips discovery.
    configured_url: Option<String>,
    refetch_interval: Duration,
    max_age: Duration,
    keys: RwLock<Cache>,
    /// Held for the whole of a fetch: the single flight.
    state: tokio::sync::Mutex<State>,
    fetches: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct Cache {
    keys: HashMap<String, Arc<Jwk>>,
    /// When the keys were fetched; `None` before the first success.
    fetched: Option<Instant>,
}

impl Cache {
    fn fresh(&self, max_age: Duration) -> bool {
        self.fetched.is_some_and(|t| t.elapsed() < max_age)
    }
}

#[derive(Debug, Default)]
struct State {
    /// From discovery, once it succeeded.
    jwks_url: Option<String>,
    last_attempt: Option<Instant>,
    last_error: Option<JwksError>,
}

impl Jwks {
    pub fn new(
        http: reqwest::Client,
        issuer: String,
        configured_url: Option<String>,
        refetch_interval: Duration,
        max_age: Duration,
    ) -> Jwks {
        Jwks {
            http,
            issuer,
            configured_url,
            refetch_interval,
            max_age,
            keys: RwLock::new(Cache::default()),
            state: tokio::sync::Mutex::new(State::default()),
            fetches: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many JWKS fetches were started.
    pub fn fetches(&self) -> u64 {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The cached key `kid`, and whether the cache is fresh.
    fn cached(&self, kid: &str) -> (Option<Arc<Jwk>>, bool) {
        let cache = match self.keys.read() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        (cache.keys.get(kid).cloned(), cache.fresh(self.max_age))
    }

    /// The key `kid`, from the cache or, when it is missing or stale, from the issuer.
    pub async fn key(&self, kid: &str) -> Result<Lookup, JwksError> {
        if let (Some(k), true) = self.cached(kid) {
            return Ok(Lookup::Found(k));
        }
        let mut state = self.state.lock().await;
        // Whoever held the lock before may have fetched the keys this caller wants.
        let (cached, fresh) = self.cached(kid);
        if let (Some(k), true) = (&cached, fresh) {
            return Ok(Lookup::Found(k.clone()));
        }
        if let Some(at) = state.last_attempt
            && at.elapsed() < self.refetch_interval
        {
            return match (cached, &state.last_error) {
                (Some(k), _) => Ok(Lookup::Found(k)),
                (None, Some(e)) => Err(JwksError::CoolingDown(
                    self.refetch_interval,
                    Box::new(e.clone()),
                )),
                (None, None) => Ok(Lookup::Unknown),
            };
        }
        state.last_attempt = Some(Instant::now());
        match self.fetch(&mut state).await {
            Ok(keys) => {
                tracing::debug!(keys = keys.len(), "fetched the issuer's JWKS");
                state.last_error = None;
                let found = keys.get(kid).cloned();
                let fetched = Cache {
                    keys,
                    fetched: Some(Instant::now()),
                };
                match self.keys.write() {
                    Ok(mut c) => *c = fetched,
                    Err(poisoned) => *poisoned.into_inner() = fetched,
                }
                Ok(found.map_or(Lookup::Unknown, Lookup::Found))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot fetch the issuer's JWKS");
                state.last_error = Some(e.clone());
                // Stale keys beat no keys while the issuer is down.
                match cached {
                    Some(k) => Ok(Lookup::Found(k)),
                    None => Err(e),
                }
            }
        }
    }

    async fn fetch(&self, state: &mut State) -> Result<HashMap<String, Arc<Jwk>>, JwksError> {
        self.fetches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let url = match (&self.configured_url, &state.jwks_url) {
            (Some(u), _) | (None, Some(u)) => u.clone(),
            (None, None) => {
                let u = self.discover().await?;
                state.jwks_url = Some(u.clone());
                u
            }
        };
        let doc = self.get_json(&url).await?;
        parse_jwks(&doc).map_err(|why| JwksError::Document { url, why })
    }

    /// The `jwks_uri` of the issuer's metadata: RFC 8414 first, then OpenID Connect Discovery,
    /// which many issuers serve alone. The document must name the configured issuer exactly
    /// (RFC 8414 §3.3), or a mix-up could make the gateway trust another issuer's keys.
    async fn discover(&self) -> Result<String, JwksError> {
        let mut tried = Vec::new();
        let mut unreachable = None;
        for url in metadata_urls(&self.issuer) {
            tried.push(url.clone());
            let doc = match self.get_json(&url).await {
                Ok(d) => d,
                Err(e @ JwksError::Fetch { .. }) => {
                    unreachable.get_or_insert(e);
                    continue;
                }
                Err(_) => continue,
            };
            let issuer = doc.get("issuer").and_then(Value::as_str);
            if issuer != Some(self.issuer.as_str()) {
                return Err(JwksError::Document {
                    url,
                    why: format!(
                        "the metadata names issuer {issuer:?}, not {:?}",
                        self.issuer
                    ),
                });
            }
            return match doc.get("jwks_uri").and_then(Value::as_str) {
                Some(u) => Ok(u.to_owned()),
                None => Err(JwksError::Document {
                    url,
                    why: "the metadata has no jwks_uri".into(),
                }),
            };
        }
        Err(unreachable.unwrap_or(JwksError::NoMetadata { tried }))
    }

    /// GETs a JSON document. A transport failure or a `5xx` is [`JwksError::Fetch`] (the issuer
    /// is unavailable); anything else wrong with the answer is [`JwksError::Document`].
    async fn get_json(&self, url: &str) -> Result<Value, JwksError> {
        let fetch = |why: String| JwksError::Fetch {
            url: url.to_owned(),
            why,
        };
        let doc = |why: String| JwksError::Document {
            url: url.to_owned(),
            why,
        };
        let mut resp = self
            .http
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| fetch(error_chain(&e)))?;
        let status = resp.status();
        if status.is_server_error() {
            return Err(fetch(format!("status {status}")));
        }
        if !status.is_success() {
            return Err(doc(format!("status {status}")));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| fetch(error_chain(&e)))? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(doc(format!("over {MAX_DOCUMENT_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|e| doc(format!("not JSON: {e}")))
    }
}

/// The signing keys of a JWKS document, by `kid`. Keys this build cannot use (symmetric,
/// encryption-only, unknown types, no `kid`) are skipped rather than failing the whole set,
/// since issuers publish such keys beside their signing keys.
pub fn parse_jwks(doc: &Value) -> Result<HashMap<String, Arc<Jwk>>, String> {
    let keys = doc
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("no \"keys\" array")?;
    let mut out = HashMap::new();
    for raw in keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(raw.clone()) else {
            tracing::debug!(key = %raw, "skipping a JWK this build does not read");
            continue;
        };
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
            continue;
        }
        let Some(kid) = jwk.common.key_id.clone().filter(|k| !k.is_empty()) else {
            continue;
        };
        out.insert(kid, Arc::new(jwk));
    }
    Ok(out)
}

/// Where an issuer's metadata may be: RFC 8414 §3.1 puts the well-known segment between the
/// host and the issuer's path; OpenID Connect Discovery appends it to the issuer.
pub fn metadata_urls(issuer: &str) -> Vec<String> {
    let trimmed = issuer.trim_end_matches('/');
    let oidc = format!("{trimmed}/.well-known/openid-configuration");
    let rfc8414 = match issuer.parse::<Uri>() {
        Ok(u) if u.scheme().is_some() && u.authority().is_some() => {
            let path = u.path().trim_end_matches('/');
            format!(
                "{}://{}/.well-known/oauth-authorization-server{path}",
                u.scheme_str().unwrap_or("https"),
                u.authority().map(|a| a.as_str()).unwrap_or_default()
            )
        }
        _ => format!("{trimmed}/.well-known/oauth-authorization-server"),
    };
    vec![rfc8414, oidc]
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_looked_for_where_rfc_8414_and_oidc_put_it() {
        assert_eq!(
            metadata_urls("https://issuer.example"),
            vec![
                "https://issuer.example/.well-known/oauth-authorization-server",
                "https://issuer.example/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("https://issuer.example/tenant/1/"),
            vec![
                "https://issuer.example/.well-known/oauth-authorization-server/tenant/1",
                "https://issuer.example/tenant/1/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn symmetric_unknown_and_kid_less_keys_are_skipped() {
        let doc = serde_json::json!({ "keys": [
            { "kty": "oct", "kid": "h", "k": "c2VjcmV0" },
            { "kty": "OKP", "crv": "Ed25519", "kid": "e", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" },
            { "kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" },
            { "kty": "weird", "kid": "w" },
        ]});
        let keys = parse_jwks(&doc).expect("a set");
        assert_eq!(keys.keys().collect::<Vec<_>>(), vec!["e"]);
        assert!(parse_jwks(&serde_json::json!({})).is_err());
    }
}
