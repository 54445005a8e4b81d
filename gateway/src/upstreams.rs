//! The upstream set: which node a request goes to first, ejection windows for nodes that fail
//! at the transport, the leader routes learned from answers after redirects, and the counters
//! the metrics endpoint reports.
//!
//! - First pick: the stream's learned leader route when that node is not ejected, else the
//!   next node round-robin that is not ejected; when every node is ejected, requests still go
//!   out (learned route first).
//! - Ejection: a refused or timed-out connect, or an exchange that broke after it was sent,
//!   skips the node for 10 s; each failure after a window doubles the next, up to 60 s. When a
//!   window ends, one request probes the node while others keep skipping it; any response puts
//!   it back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use http::Uri;

use crate::config::UpstreamUrl;

const FIRST_EJECTION: Duration = Duration::from_secs(10);
const MAX_EJECTION: Duration = Duration::from_secs(60);
/// Learned routes kept at most; the table starts over when full.
const MAX_ROUTES: usize = 65_536;

#[derive(Debug)]
struct Health {
    ejected_until: Option<Instant>,
    next_window: Duration,
    /// While set and in the future, one request is probing an expired window.
    probe_until: Option<Instant>,
}

#[derive(Debug)]
pub struct Upstream {
    pub url: UpstreamUrl,
    health: Mutex<Health>,
}

impl Upstream {
    fn new(url: UpstreamUrl) -> Upstream {
        Upstream {
            url,
            health: Mutex::new(Health {
                ejected_until: None,
                next_window: FIRST_EJECTION,
                probe_until: None,
            }),
        }
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a request may go here now: `None` if not, else `Some(probe)` where `probe` is
    /// the probe slot of an expired window it took (its end), if it took one.
    fn try_take(&self, now: Instant, probe_span: Duration) -> Option<Option<Instant>> {
        let mut h = self.health();
        match h.ejected_until {
            None => Some(None),
            Some(until) if now < until => None,
            Some(_) => {
                if h.probe_until.is_some_and(|p| now < p) {
                    return None;
                }
                let end = now + probe_span;
                h.probe_until = Some(end);
                Some(Some(end))
            }
        }
    }

    /// Gives back a probe slot whose request ended without an outcome.
    fn release_probe(&self, end: Instant) {
        let mut h = self.health();
        if h.probe_until == Some(end) {
            h.probe_until = None;
        }
    }

    pub fn is_ejected(&self, now: Instant) -> bool {
        let h = self.health();
        match h.ejected_until {
            None => false,
            Some(until) => now < until || h.probe_until.is_some_and(|p| now < p),
        }
    }
}

/// Counters served at `/__ursula/gateway/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    /// Hops that followed a leader redirect.
    pub leader_redirects: AtomicU64,
    /// Requests that met at least one leader redirect.
    pub leader_searches: AtomicU64,
    pub leader_not_found: AtomicU64,
    pub upstream_ejections: AtomicU64,
    pub upstream_unreachable: AtomicU64,
    pub upstream_broken: AtomicU64,
    pub body_too_large: AtomicU64,
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// One request's hold on an upstream. A hold that took the probe slot of an expired ejection
/// window gives it back when dropped, so a request that ends without an outcome (its client
/// went away mid-exchange) does not keep the upstream skipped until the slot times out.
#[derive(Debug)]
pub struct Taken<'a> {
    ups: &'a Upstreams,
    pub i: usize,
    probe: Option<Instant>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let (Some(end), Some(u)) = (self.probe, self.ups.list.get(self.i)) {
            u.release_probe(end);
        }
    }
}

#[derive(Debug)]
pub struct Upstreams {
    pub list: Vec<Upstream>,
    next: AtomicUsize,
    routes: Mutex<HashMap<String, usize>>,
    /// How long one probe of an expired ejection window may hold the slot.
    probe_span: Duration,
    pub counters: Counters,
}

impl Upstreams {
    pub fn new(urls: Vec<UpstreamUrl>, probe_span: Duration) -> Upstreams {
        Upstreams {
            list: urls.into_iter().map(Upstream::new).collect(),
            next: AtomicUsize::new(0),
            routes: Mutex::new(HashMap::new()),
            probe_span,
            counters: Counters::default(),
        }
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes upstream `i` for one request if it may go there now.
    pub fn try_take(&self, i: usize, now: Instant) -> Option<Taken<'_>> {
        let probe = self.list.get(i)?.try_take(now, self.probe_span)?;
        Some(Taken {
            ups: self,
            i,
            probe,
        })
    }

    /// The upstream a request starts at.
    pub fn first(&self, route: Option<&str>, now: Instant) -> Taken<'_> {
        let n = self.list.len().max(1);
        let learned = route.and_then(|r| self.routes().get(r).copied());
        if let Some(t) = learned.and_then(|i| self.try_take(i, now)) {
            return t;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            if let Some(t) = self.try_take((start + k) % n, now) {
                return t;
            }
        }
        // Every upstream is skipped: the request still goes out, along its learned route first.
        Taken {
            ups: self,
            i: learned.unwrap_or(start % n),
            probe: None,
        }
    }

    /// The upstream a redirect's `Location` names, if it is one of them.
    pub fn named_by(&self, location: &Uri) -> Option<usize> {
        self.list.iter().position(|u| u.url.names(location))
    }

    /// The next upstream in configured order after `from` that this request has not tried
    /// and that is not ejected.
    pub fn next_untried(&self, from: usize, tried: &[bool], now: Instant) -> Option<Taken<'_>> {
        let n = self.list.len();
        (1..=n)
            .map(|k| (from + k) % n)
            .filter(|&i| !tried.get(i).copied().unwrap_or(true))
            .find_map(|i| self.try_take(i, now))
    }

    /// Any response from the node: it is healthy again.
    pub fn answered(&self, i: usize) {
        if let Some(u) = self.list.get(i) {
            let mut h = u.health();
            h.ejected_until = None;
            h.probe_until = None;
            h.next_window = FIRST_EJECTION;
        }
    }

    /// A transport failure: eject the node and forget the routes that led to it.
    pub fn failed(&self, i: usize, now: Instant) {
        let Some(u) = self.list.get(i) else { return };
        {
            let mut h = u.health();
            h.ejected_until = Some(now + h.next_window);
            h.next_window = (h.next_window * 2).min(MAX_EJECTION);
            h.probe_until = None;
        }
        Counters::bump(&self.counters.upstream_ejections);
        self.routes().retain(|_, v| *v != i);
    }

    /// A `2xx` after redirects: the stream's group is led by upstream `i`.
    pub fn learn(&self, route: &str, i: usize) {
        let mut routes = self.routes();
        if routes.len() >= MAX_ROUTES && !routes.contains_key(route) {
            routes.clear();
        }
        routes.insert(route.to_owned(), i);
    }

    pub fn ejected_count(&self, now: Instant) -> usize {
        self.list.iter().filter(|u| u.is_ejected(now)).count()
    }
}

/// The learned-route key of a request path: the stream it names (`bucket/stream`, decoded as
/// the nodes decode it), `None` for anything else (bucket creates, `/__ursula/*`).
pub fn route_key(path: &str) -> Option<String> {
    ursula_protocol::path::stream_key(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(n: usize) -> Upstreams {
        let urls = (0..n)
            .map(|i| UpstreamUrl::parse(&format!("http://127.0.0.1:{}", 1000 + i)).expect("url"))
            .collect();
        Upstreams::new(urls, Duration::from_secs(10))
    }

    #[test]
    fn first_picks_rotate_and_skip_ejected_nodes() {
        let u = set(3);
        let now = Instant::now();
        let picks: Vec<usize> = (0..3).map(|_| u.first(None, now).i).collect();
        assert_eq!(picks, vec![0, 1, 2]);
        u.failed(1, now);
        let picks: Vec<usize> = (0..4).map(|_| u.first(None, now).i).collect();
        assert!(!picks.contains(&1), "{picks:?}");
    }

    #[test]
    fn every_node_ejected_still_sends() {
        let u = set(2);
        let now = Instant::now();
        u.failed(0, now);
        u.failed(1, now);
        let i = u.first(None, now).i;
        assert!(i < 2);
    }

    #[test]
    fn an_expired_window_lets_one_probe_through_and_doubles_on_failure() {
        let u = set(1);
        let t0 = Instant::now();
        u.failed(0, t0);
        assert!(u.try_take(0, t0 + Duration::from_secs(9)).is_none());
        let t1 = t0 + Duration::from_secs(11);
        let probe = u.try_take(0, t1);
        assert!(probe.is_some(), "the probe");
        assert!(u.try_take(0, t1).is_none(), "others keep skipping it");
        u.failed(0, t1);
        drop(probe);
        assert!(
            u.try_take(0, t1 + Duration::from_secs(19)).is_none(),
            "20 s window"
        );
        let probe = u.try_take(0, t1 + Duration::from_secs(21));
        assert!(probe.is_some());
        u.answered(0);
        drop(probe);
        assert!(u.try_take(0, t1 + Duration::from_secs(21)).is_some());
        assert_eq!(u.counters.upstream_ejections.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn untried_upstreams_go_in_configured_order_after_the_redirecting_one() {
        let u = set(4);
        let now = Instant::now();
        let tried = [false, true, false, true];
        let next = |from, tried: &[bool]| u.next_untried(from, tried, now).map(|t| t.i);
        assert_eq!(next(1, &tried), Some(2));
        assert_eq!(next(3, &tried), Some(0));
        u.failed(0, now);
        assert_eq!(next(3, &tried), Some(2));
        assert_eq!(next(3, &[true, true, true, true]), None);
    }

    #[test]
    fn learned_routes_go_first_and_are_forgotten_on_failure() {
        let u = set(3);
        let now = Instant::now();
        u.learn("demo/s", 2);
        assert_eq!(u.first(Some("demo/s"), now).i, 2);
        assert_eq!(u.first(Some("demo/s"), now).i, 2);
        u.failed(2, now);
        assert_ne!(u.first(Some("demo/s"), now).i, 2);
    }

    #[test]
    fn route_keys_name_streams_only() {
        assert_eq!(route_key("/demo/s").as_deref(), Some("demo/s"));
        assert_eq!(route_key("/demo/s/snapshot/1").as_deref(), Some("demo/s"));
        assert_eq!(route_key("/demo"), None);
        assert_eq!(route_key("/__ursula/metrics"), None);
        assert_eq!(
            route_key("/v1/stream/x").as_deref(),
            Some("__v1/x"),
            "the compatibility family is keyed as the nodes key it"
        );
        assert_eq!(
            route_key("/demo/a%2Fb"),
            None,
            "an invalid stream ID names none"
        );
    }

    #[test]
    fn a_probe_whose_request_ended_without_an_outcome_gives_its_slot_back() {
        let u = set(1);
        let t0 = Instant::now();
        u.failed(0, t0);
        let t1 = t0 + Duration::from_secs(11);
        let probe = u.try_take(0, t1).expect("the probe");
        assert!(u.try_take(0, t1).is_none());
        // The client went away mid-exchange: neither answered nor failed was recorded.
        drop(probe);
        assert!(
            u.try_take(0, t1).is_some(),
            "the next request probes at once instead of waiting out the slot"
        );
    }

    #[test]
    fn dropping_a_hold_does_not_release_another_requests_probe() {
        let u = set(1);
        let normal = u.try_take(0, Instant::now()).expect("healthy");
        let t0 = Instant::now();
        u.failed(0, t0);
        let t1 = t0 + Duration::from_secs(11);
        let probe = u.try_take(0, t1).expect("the probe");
        drop(normal);
        assert!(u.try_take(0, t1).is_none(), "the probe is still held");
        drop(probe);
    }
}
