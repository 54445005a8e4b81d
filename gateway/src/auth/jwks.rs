//! The issuer's signing keys: found by RFC 8414 metadata discovery (or `--auth-jwks-url`),
//! cached by `kid`, fetched again when a token names a `kid` the cache lacks (key rotation)
//! or the cache is older than `--auth-jwks-max-age` ([`DEFAULT_MAX_AGE`]).
//!
//! Fetches run off the request path, in a task of their own, one at a time:
//! - a token whose `kid` is cached is verified with the cached key at once, however old the
//!   cache is; a stale cache only starts a refresh in the background (stale-while-revalidate),
//!   so an issuer that hangs delays no token whose key the gateway already holds;
//! - a token whose `kid` is not cached waits for one fetch: the one running, or else the next
//!   one, which starts once the cool-down after the last fetch is over, and then gets its
//!   answer from what that fetch brought;
//! - the cool-down (`refetch_interval`) counts from the end of a fetch, so a flood of made-up
//!   `kid`s costs one fetch per fetch-plus-cool-down, and slow fetches never follow each other
//!   back to back.
//!
//! Keys already cached keep verifying while the issuer is down; only a token whose key is not
//! cached then gets `AuthenticationUnavailable`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::RwLock;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use http::Uri;
use jsonwebtoken::jwk::AlgorithmParameters;
use jsonwebtoken::jwk::Jwk;
use serde_json::Value;
use tokio::sync::watch;

use crate::reply::error_chain;

/// `--auth-jwks-max-age` when not given. A cache older than this is refreshed in the
/// background on its next lookup, so a key the issuer withdrew stops verifying about this long
/// after, once the issuer answers. A failed refresh keeps the cached keys.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(300);

/// One fetch, discovery included, is abandoned after this; each request to the issuer is also
/// bounded by the HTTP client's own timeout.
pub const FETCH_BOUND: Duration = Duration::from_secs(10);

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
    #[error("fetching the keys of {issuer} took over {after:?}")]
    TimedOut { issuer: String, after: Duration },
    #[error("the fetch of the keys of {0} ended without a result")]
    Abandoned(String),
}

/// A key lookup's result when the keys could be had.
#[derive(Debug, Clone)]
pub enum Lookup {
    Found(Arc<Jwk>),
    /// The issuer's current JWKS has no such `kid`.
    Unknown,
}

/// The key cache of one issuer: cheap to clone, shared by every request and the fetch task.
#[derive(Debug, Clone)]
pub struct Jwks {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    http: reqwest::Client,
    issuer: String,
    /// `--auth-jwks-url`, which skips discovery.
    configured_url: Option<String>,
    refetch_interval: Duration,
    max_age: Duration,
    keys: RwLock<Cache>,
    flight: Mutex<Flight>,
    /// How many fetches have ended: lookups waiting for a fetch watch it.
    ended: watch::Sender<u64>,
    fetches: AtomicU64,
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

/// The single flight: at most one fetch is running or due at a time.
#[derive(Debug, Default)]
struct Flight {
    /// A fetch is running, or waiting for the cool-down to end before it runs.
    pending: bool,
    /// Fetches ended so far; the pending one, if any, is number `ended + 1`.
    ended: u64,
    /// When the last fetch ended: the cool-down counts from here.
    last_end: Option<Instant>,
    /// Why the last fetch failed; `None` after a success.
    last_error: Option<JwksError>,
    /// From discovery, once it succeeded.
    jwks_url: Option<String>,
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
            shared: Arc::new(Shared {
                http,
                issuer,
                configured_url,
                refetch_interval,
                max_age,
                keys: RwLock::new(Cache::default()),
                flight: Mutex::new(Flight::default()),
                ended: watch::Sender::new(0),
                fetches: AtomicU64::new(0),
            }),
        }
    }

    /// How many JWKS fetches were started.
    pub fn fetches(&self) -> u64 {
        self.shared.fetches.load(Ordering::Relaxed)
    }

    /// The key `kid`: from the cache at once when it is there (a stale cache is refreshed in
    /// the background), else from the one fetch this lookup waits for. Needs a Tokio runtime.
    pub async fn key(&self, kid: &str) -> Result<Lookup, JwksError> {
        let s = &self.shared;
        let (cached, fresh) = s.cached(kid);
        if let Some(k) = cached {
            if !fresh {
                s.pending_fetch();
            }
            return Ok(Lookup::Found(k));
        }
        let wanted = s.pending_fetch();
        let mut ended = s.ended.subscribe();
        // The fetch task always ends (its whole run is bounded, and a drop guard reports a
        // task that ended without a result); the bound here is a second line of defence.
        let bound = s.refetch_interval + FETCH_BOUND + Duration::from_secs(1);
        let waited = tokio::time::timeout(bound, ended.wait_for(|&n| n >= wanted)).await;
        if !matches!(waited, Ok(Ok(_))) {
            return Err(JwksError::TimedOut {
                issuer: s.issuer.clone(),
                after: bound,
            });
        }
        if let (Some(k), _) = s.cached(kid) {
            return Ok(Lookup::Found(k));
        }
        match s.flight().last_error.clone() {
            Some(e) => Err(e),
            None => Ok(Lookup::Unknown),
        }
    }
}

impl Shared {
    fn flight(&self) -> std::sync::MutexGuard<'_, Flight> {
        // Plain fields, each written whole: a panic elsewhere leaves them consistent.
        self.flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached key `kid`, and whether the cache is fresh.
    fn cached(&self, kid: &str) -> (Option<Arc<Jwk>>, bool) {
        let cache = self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (cache.keys.get(kid).cloned(), cache.fresh(self.max_age))
    }

    /// Makes sure a fetch is running or due, and returns the number it ends as: the running
    /// one's, or a new one's, which starts once the cool-down after the last fetch is over.
    fn pending_fetch(self: &Arc<Shared>) -> u64 {
        let mut f = self.flight();
        let number = f.ended + 1;
        if f.pending {
            return number;
        }
        f.pending = true;
        let due = f.last_end.map(|t| t + self.refetch_interval);
        drop(f);
        let shared = self.clone();
        tokio::spawn(async move {
            let mut run = Run {
                shared,
                result: None,
            };
            if let Some(at) = due {
                tokio::time::sleep_until(at.into()).await;
            }
            let fetched = tokio::time::timeout(FETCH_BOUND, run.shared.fetch()).await;
            run.result = Some(fetched.unwrap_or_else(|_| {
                Err(JwksError::TimedOut {
                    issuer: run.shared.issuer.clone(),
                    after: FETCH_BOUND,
                })
            }));
        });
        number
    }

    /// Records the end of the pending fetch and wakes the lookups waiting for it.
    fn end_fetch(&self, result: Result<HashMap<String, Arc<Jwk>>, JwksError>) {
        let error = match result {
            Ok(keys) => {
                tracing::debug!(keys = keys.len(), "fetched the issuer's JWKS");
                let fetched = Cache {
                    keys,
                    fetched: Some(Instant::now()),
                };
                *self
                    .keys
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = fetched;
                None
            }
            Err(e) => {
                // Stale keys beat no keys while the issuer is down: the cache is kept.
                tracing::warn!(error = %e, "cannot fetch the issuer's JWKS");
                Some(e)
            }
        };
        let mut f = self.flight();
        f.last_error = error;
        f.pending = false;
        f.last_end = Some(Instant::now());
        f.ended += 1;
        let ended = f.ended;
        drop(f);
        self.ended.send_replace(ended);
    }

    async fn fetch(&self) -> Result<HashMap<String, Arc<Jwk>>, JwksError> {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let known = self.flight().jwks_url.clone();
        let url = match (&self.configured_url, known) {
            (Some(u), _) => u.clone(),
            (None, Some(u)) => u,
            (None, None) => {
                let u = self.discover().await?;
                self.flight().jwks_url = Some(u.clone());
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

/// One fetch task's run: however the task ends, its drop reports the fetch as ended, so a
/// lookup never waits for a fetch that is gone and the next fetch can start.
struct Run {
    shared: Arc<Shared>,
    result: Option<Result<HashMap<String, Arc<Jwk>>, JwksError>>,
}

impl Drop for Run {
    fn drop(&mut self) {
        let result = self
            .result
            .take()
            .unwrap_or_else(|| Err(JwksError::Abandoned(self.shared.issuer.clone())));
        self.shared.end_fetch(result);
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
