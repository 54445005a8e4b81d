//! Host lookups with a memory: a host is looked up at most every 30 s, one lookup at a time, and
//! when a lookup fails the addresses of the last successful one serve requests for up to 10 min
//! (logged as `dns_stale`), so a flaky resolver does not fail commits to a server that is up.
//!
//! Plugs into ureq as its `Resolver`; the connector reports failed connections through
//! `DnsCache::connect_failed`, since a server that moved is found by looking it up again.

use std::collections::HashMap;
use std::fmt::Display;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

use crate::log;

#[derive(Debug, Clone, Copy)]
pub struct DnsPolicy {
    /// Addresses younger than this are used without a lookup.
    pub refresh: Duration,
    /// How long after the last successful lookup its addresses still serve when lookups fail.
    pub stale_for: Duration,
    /// After a failed lookup (or a failed connection), the next lookup waits this long.
    pub retry_after_failure: Duration,
    /// `dns_stale` is logged at most this often per host.
    pub log_every: Duration,
}

impl Default for DnsPolicy {
    fn default() -> Self {
        DnsPolicy {
            refresh: Duration::from_secs(30),
            stale_for: Duration::from_secs(600),
            retry_after_failure: Duration::from_secs(5),
            log_every: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, Default)]
struct Entry {
    addrs: Vec<SocketAddr>,
    last_success: Option<Instant>,
    last_lookup: Option<Instant>,
    /// No lookup before this while addresses can serve.
    next_due: Option<Instant>,
    /// Lookups running now; while one runs, others use the last addresses.
    running: u32,
    last_stale_log: Option<Instant>,
}

impl Entry {
    fn servable(&self, now: Instant, policy: &DnsPolicy) -> bool {
        !self.addrs.is_empty()
            && self
                .last_success
                .is_some_and(|t| now.duration_since(t) < policy.stale_for)
    }
}

/// What a request does about a host: use these addresses, or look it up.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Serve(Vec<SocketAddr>),
    Lookup,
}

/// The per-host memory, keyed by `host:port`.
#[derive(Debug, Default)]
pub struct DnsCache {
    policy: DnsPolicy,
    entries: Mutex<HashMap<String, Entry>>,
}

impl DnsCache {
    pub fn new(policy: DnsPolicy) -> DnsCache {
        DnsCache {
            policy,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Every update leaves an entry usable, so a poisoned lock is still fine to use.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn plan(&self, key: &str, now: Instant) -> Plan {
        let mut entries = self.lock();
        let e = entries.entry(key.to_owned()).or_default();
        if e.servable(now, &self.policy)
            && (e.running > 0 || e.next_due.is_some_and(|due| now < due))
        {
            return Plan::Serve(e.addrs.clone());
        }
        e.running += 1;
        e.last_lookup = Some(now);
        Plan::Lookup
    }

    /// Records a lookup's outcome and says what the request uses: its addresses, the last good
    /// ones when it failed and they may still serve, else its error.
    fn finish<E: Display>(
        &self,
        key: &str,
        now: Instant,
        result: Result<Vec<SocketAddr>, E>,
    ) -> Result<Vec<SocketAddr>, E> {
        let mut entries = self.lock();
        let e = entries.entry(key.to_owned()).or_default();
        e.running = e.running.saturating_sub(1);
        match result {
            Ok(addrs) if !addrs.is_empty() => {
                e.addrs = addrs.clone();
                e.last_success = Some(now);
                e.next_due = Some(now + self.policy.refresh);
                Ok(addrs)
            }
            Ok(addrs) => Ok(addrs),
            Err(err) => {
                e.next_due = Some(now + self.policy.retry_after_failure);
                if !e.servable(now, &self.policy) {
                    return Err(err);
                }
                let due_log = e
                    .last_stale_log
                    .is_none_or(|t| now.duration_since(t) >= self.policy.log_every);
                if due_log {
                    e.last_stale_log = Some(now);
                    let age = e
                        .last_success
                        .map_or(0, |t| now.duration_since(t).as_millis());
                    log::event(
                        log::Level::Warn,
                        "dns_stale",
                        &[
                            ("host", key),
                            ("age_ms", &age.to_string()),
                            ("reason", &err.to_string()),
                        ],
                    );
                }
                Ok(e.addrs.clone())
            }
        }
    }

    /// A connection to the host failed: look it up again soon, since it may have moved, but no
    /// sooner than `retry_after_failure` after the last lookup.
    pub fn connect_failed(&self, key: &str) {
        self.connect_failed_at(key, Instant::now())
    }

    fn connect_failed_at(&self, key: &str, now: Instant) {
        let mut entries = self.lock();
        if let Some(e) = entries.get_mut(key) {
            let earliest = e
                .last_lookup
                .map_or(now, |t| t + self.policy.retry_after_failure);
            if e.next_due.is_none_or(|due| earliest < due) {
                e.next_due = Some(earliest);
            }
        }
    }
}

/// The cache key of a URL's host: `host:port`, `None` for an IP literal, which needs no lookup.
pub fn host_key(uri: &Uri) -> Option<String> {
    let host = uri.host()?;
    if host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .is_ok()
    {
        return None;
    }
    let port = uri.port_u16().or(match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    })?;
    Some(format!("{}:{port}", host.to_ascii_lowercase()))
}

/// ureq's resolver with the cache in front.
#[derive(Debug)]
pub struct CachingResolver {
    cache: Arc<DnsCache>,
    inner: DefaultResolver,
}

impl CachingResolver {
    pub fn new(cache: Arc<DnsCache>) -> CachingResolver {
        CachingResolver {
            cache,
            inner: DefaultResolver::default(),
        }
    }
}

impl Resolver for CachingResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let Some(key) = host_key(uri) else {
            return self.inner.resolve(uri, config, timeout);
        };
        let addrs = match self.cache.plan(&key, Instant::now()) {
            Plan::Serve(addrs) => addrs,
            Plan::Lookup => {
                let looked_up = self
                    .inner
                    .resolve(uri, config, timeout)
                    .map(|a| a.iter().copied().collect());
                self.cache.finish(&key, Instant::now(), looked_up)?
            }
        };
        let mut out = self.empty();
        for a in addrs {
            out.push(a);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Vec<SocketAddr> {
        vec![s.parse().expect("socket address")]
    }

    /// A cache whose first lookup of `h:80`, at `t0`, found 10.0.0.1.
    fn looked_up_at(t0: Instant) -> DnsCache {
        let c = DnsCache::new(DnsPolicy::default());
        assert_eq!(c.plan("h:80", t0), Plan::Lookup);
        assert_eq!(
            c.finish::<String>("h:80", t0, Ok(addr("10.0.0.1:80")))
                .expect("looked up"),
            addr("10.0.0.1:80")
        );
        c
    }

    #[test]
    fn looks_up_at_most_every_refresh() {
        let t0 = Instant::now();
        let c = looked_up_at(t0);
        assert_eq!(
            c.plan("h:80", t0 + Duration::from_secs(29)),
            Plan::Serve(addr("10.0.0.1:80"))
        );
        assert_eq!(c.plan("h:80", t0 + Duration::from_secs(31)), Plan::Lookup);
        // One lookup at a time: others use the last addresses meanwhile.
        assert_eq!(
            c.plan("h:80", t0 + Duration::from_secs(32)),
            Plan::Serve(addr("10.0.0.1:80"))
        );
    }

    #[test]
    fn failed_lookup_serves_last_addresses_for_ten_minutes() {
        let t0 = Instant::now();
        let c = looked_up_at(t0);
        let t1 = t0 + Duration::from_secs(40);
        assert_eq!(c.plan("h:80", t1), Plan::Lookup);
        assert_eq!(
            c.finish("h:80", t1, Err("timeout: resolve"))
                .expect("stale addresses serve"),
            addr("10.0.0.1:80")
        );
        // The next lookup waits 5 s after the failure.
        assert_eq!(
            c.plan("h:80", t1 + Duration::from_secs(4)),
            Plan::Serve(addr("10.0.0.1:80"))
        );
        let t2 = t0 + Duration::from_secs(601);
        assert_eq!(c.plan("h:80", t2), Plan::Lookup);
        assert_eq!(
            c.finish("h:80", t2, Err("host not found")),
            Err("host not found")
        );
    }

    #[test]
    fn no_addresses_fail() {
        let c = DnsCache::new(DnsPolicy::default());
        let t0 = Instant::now();
        assert_eq!(c.plan("h:80", t0), Plan::Lookup);
        assert_eq!(
            c.finish("h:80", t0, Err("host not found")),
            Err("host not found")
        );
        assert_eq!(c.plan("h:80", t0), Plan::Lookup);
    }

    #[test]
    fn failed_connection_makes_lookup_due() {
        let t0 = Instant::now();
        let c = looked_up_at(t0);
        c.connect_failed_at("h:80", t0 + Duration::from_secs(1));
        assert_eq!(
            c.plan("h:80", t0 + Duration::from_secs(4)),
            Plan::Serve(addr("10.0.0.1:80"))
        );
        assert_eq!(c.plan("h:80", t0 + Duration::from_secs(6)), Plan::Lookup);
    }

    #[test]
    fn ip_literals_skip_the_cache() {
        assert_eq!(
            host_key(&"http://127.0.0.1:8080/s".parse().expect("uri")),
            None
        );
        assert_eq!(host_key(&"http://[::1]:8080/s".parse().expect("uri")), None);
        assert_eq!(
            host_key(&"https://Example.com/s".parse().expect("uri")).as_deref(),
            Some("example.com:443")
        );
    }

    #[test]
    fn resolver_resolves_localhost() {
        let r = CachingResolver::new(Arc::new(DnsCache::default()));
        let config = Config::default();
        let uri: Uri = "http://localhost:9/".parse().expect("uri");
        let a = r
            .resolve(&uri, &config, NextTimeout::default())
            .expect("localhost resolves");
        assert!(a.iter().all(|a| a.ip().is_loopback() && a.port() == 9));
        // Served from the cache the second time.
        let b = r
            .resolve(&uri, &config, NextTimeout::default())
            .expect("localhost resolves");
        assert_eq!(a.len(), b.len());
    }
}
