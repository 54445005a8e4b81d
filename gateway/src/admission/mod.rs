//! Per-tenant admission limits (`--quota-policy`): a bucket's request rate, its live reads
//! open at once, its largest body, and its large bodies under way. Limits are local to this
//! gateway process: `N` gateways admit `N` times as much.
//!
//! Every limit is held by an RAII value ([`LiveRead`], [`UploadGuard`]) that gives its share
//! back when dropped, so a client that goes away mid-request leaves nothing counted.
//!
//! - [`policy`]: the file, `[default]` and `[[bucket]]` limits.

pub mod policy;

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use governor::DefaultDirectRateLimiter;
use governor::Quota;
use governor::RateLimiter;
use governor::clock::Clock;
use governor::clock::DefaultClock;

pub use policy::QuotaPolicy;
pub use policy::QuotaPolicyError;
pub use policy::TenantLimits;

/// Above this many tracked buckets, idle ones are forgotten (their rate windows restart).
/// Without access control a client can name any bucket, and each named one costs an entry.
const TRACKED_BUCKETS_SWEEP: usize = 4096;

/// Why a tenant's request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionRejection {
    #[error("tenant request rate limit exceeded")]
    RateLimited {
        /// When the next request of the bucket would be admitted.
        retry_after: Duration,
    },
    #[error("tenant live read limit exceeded")]
    LiveReadsExhausted,
    #[error("the request body is over the bucket's {limit}-byte limit")]
    BodyTooLarge { limit: u64 },
    #[error("tenant concurrent upload limit exceeded")]
    UploadsExhausted,
    #[error("tenant upload bytes limit exceeded")]
    UploadBytesExhausted,
}

/// Refusals by kind, shown on the gateway's metrics.
#[derive(Debug, Default)]
pub struct AdmissionCounters {
    pub rate_limited: AtomicU64,
    pub live_reads_refused: AtomicU64,
    pub body_too_large: AtomicU64,
    pub uploads_refused: AtomicU64,
    pub upload_bytes_refused: AtomicU64,
}

/// One bucket's state: its rate window and what it holds now.
#[derive(Debug)]
struct Tenant {
    limits: TenantLimits,
    rate: Option<DefaultDirectRateLimiter>,
    live_reads: AtomicU32,
    uploads: AtomicU32,
    upload_bytes: AtomicU64,
}

/// The admission limits of one gateway, shared by every request.
#[derive(Debug)]
pub struct Admission {
    policy: QuotaPolicy,
    /// Bodies of at most this many bytes never count as uploads (`--small-body-max-bytes`).
    small_body_max: u64,
    /// By bucket, and for anonymous callers by bucket and client address.
    tenants: Mutex<HashMap<TenantKey, Arc<Tenant>>>,
    pub counters: AdmissionCounters,
}

/// Whose share a request takes: the bucket's, or, for an anonymous caller whose address is
/// known, that address's own share of the bucket's limits.
type TenantKey = (String, Option<IpAddr>);

/// What admitting one request holds: the live-read share when it is a live read. Keep it
/// until the response has been streamed.
#[derive(Debug)]
pub struct Pass {
    pub limits: TenantLimits,
    pub live: Option<LiveRead>,
}

/// A live read counted against its bucket until dropped.
#[derive(Debug)]
pub struct LiveRead(Arc<Tenant>);

impl Drop for LiveRead {
    fn drop(&mut self) {
        self.0.live_reads.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A large body counted against its bucket's upload limits until dropped.
#[derive(Debug)]
pub struct UploadGuard {
    tenant: Arc<Tenant>,
    bytes: u64,
}

impl Drop for UploadGuard {
    fn drop(&mut self) {
        self.tenant.uploads.fetch_sub(1, Ordering::AcqRel);
        self.tenant
            .upload_bytes
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Admission {
    pub fn new(policy: QuotaPolicy, small_body_max: u64) -> Admission {
        Admission {
            policy,
            small_body_max,
            tenants: Mutex::new(HashMap::new()),
            counters: AdmissionCounters::default(),
        }
    }

    pub fn policy(&self) -> &QuotaPolicy {
        &self.policy
    }

    /// Admits one request of `bucket` from its head: the rate first (every request takes its
    /// share of it, refused ones included), then a declared body over the bucket's limit,
    /// then a live read past the bucket's count. `anonymous_from`: the address of an
    /// anonymous caller, which then has the bucket's limits to itself, apart from the owners'
    /// share, so that callers without a principal cannot spend what the bucket's owners need.
    pub fn admit(
        &self,
        bucket: &str,
        live: bool,
        declared: Option<u64>,
        anonymous_from: Option<IpAddr>,
    ) -> Result<Pass, AdmissionRejection> {
        let tenant = self.tenant(bucket, anonymous_from);
        let refused = |c: &AtomicU64, r: AdmissionRejection| {
            c.fetch_add(1, Ordering::Relaxed);
            Err(r)
        };
        if let Some(rate) = &tenant.rate
            && let Err(not_until) = rate.check()
        {
            let retry_after = not_until.wait_time_from(DefaultClock::default().now());
            return refused(
                &self.counters.rate_limited,
                AdmissionRejection::RateLimited { retry_after },
            );
        }
        if let (Some(limit), Some(n)) = (tenant.limits.max_request_body_bytes, declared)
            && n > limit
        {
            return refused(
                &self.counters.body_too_large,
                AdmissionRejection::BodyTooLarge { limit },
            );
        }
        let live = if live {
            if !take_one(&tenant.live_reads, tenant.limits.max_live_reads) {
                return refused(
                    &self.counters.live_reads_refused,
                    AdmissionRejection::LiveReadsExhausted,
                );
            }
            Some(LiveRead(tenant.clone()))
        } else {
            None
        };
        Ok(Pass {
            limits: tenant.limits,
            live,
        })
    }

    /// Counts a body of `bytes` against its bucket's upload limits while it is read. Bodies
    /// of at most `--small-body-max-bytes`, and buckets without an upload limit, count for
    /// nothing (`Ok(None)`).
    pub fn admit_upload(
        &self,
        bucket: &str,
        bytes: u64,
    ) -> Result<Option<UploadGuard>, AdmissionRejection> {
        if bytes <= self.small_body_max || !self.policy.limits(bucket).limits_uploads() {
            return Ok(None);
        }
        let tenant = self.tenant(bucket, None);
        // A body that could never fit is refused for good (413), not told to come back (429).
        if let Some(cap) = tenant.limits.max_upload_bytes
            && bytes > cap
        {
            self.counters.body_too_large.fetch_add(1, Ordering::Relaxed);
            return Err(AdmissionRejection::BodyTooLarge { limit: cap });
        }
        if !take_one(&tenant.uploads, tenant.limits.max_concurrent_uploads) {
            self.counters
                .uploads_refused
                .fetch_add(1, Ordering::Relaxed);
            return Err(AdmissionRejection::UploadsExhausted);
        }
        let cap = tenant.limits.max_upload_bytes.unwrap_or(u64::MAX);
        let took = tenant
            .upload_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|&n| n <= cap)
            });
        if took.is_err() {
            // Nothing awaits between the two takes, so the count goes back right here.
            tenant.uploads.fetch_sub(1, Ordering::AcqRel);
            self.counters
                .upload_bytes_refused
                .fetch_add(1, Ordering::Relaxed);
            return Err(AdmissionRejection::UploadBytesExhausted);
        }
        Ok(Some(UploadGuard { tenant, bytes }))
    }

    /// Buckets with a large body under way under an upload limit now (`upload_tenants`).
    pub fn upload_tenants(&self) -> usize {
        self.lock()
            .values()
            .filter(|t| t.uploads.load(Ordering::Acquire) > 0)
            .count()
    }

    /// Live reads open now, over every bucket.
    pub fn live_reads(&self) -> u64 {
        self.lock()
            .values()
            .map(|t| u64::from(t.live_reads.load(Ordering::Acquire)))
            .sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TenantKey, Arc<Tenant>>> {
        // The map holds counters only: a panic elsewhere leaves it consistent.
        self.tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn tenant(&self, bucket: &str, anonymous_from: Option<IpAddr>) -> Arc<Tenant> {
        let key = (bucket.to_owned(), anonymous_from);
        let mut map = self.lock();
        if let Some(t) = map.get(&key) {
            return t.clone();
        }
        if map.len() >= TRACKED_BUCKETS_SWEEP {
            // Only entries no request holds: a held count must outlive its request.
            map.retain(|_, t| Arc::strong_count(t) > 1);
        }
        let limits = self.policy.limits(bucket);
        let rate = limits
            .requests_per_sec
            .and_then(NonZeroU32::new)
            .map(|n| RateLimiter::direct(Quota::per_second(n)));
        let t = Arc::new(Tenant {
            limits,
            rate,
            live_reads: AtomicU32::new(0),
            uploads: AtomicU32::new(0),
            upload_bytes: AtomicU64::new(0),
        });
        map.insert(key, t.clone());
        t
    }
}

/// Takes one of `cap` (no cap: always), or nothing when all are taken.
fn take_one(count: &AtomicU32, cap: Option<u32>) -> bool {
    let cap = cap.unwrap_or(u32::MAX);
    count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < cap).then_some(n + 1)
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(text: &str) -> Admission {
        Admission::new(QuotaPolicy::parse(text).expect("policy"), 1024)
    }

    #[test]
    fn the_rate_refuses_past_one_seconds_burst_and_says_when_to_come_back() {
        let a = admission("[[bucket]]\nid = \"t\"\nrequests_per_sec = 3");
        for _ in 0..3 {
            assert!(a.admit("t", false, None, None).is_ok());
        }
        match a.admit("t", false, None, None) {
            Err(AdmissionRejection::RateLimited { retry_after }) => {
                assert!(retry_after <= Duration::from_secs(1), "{retry_after:?}");
            }
            other => panic!("expected a rate refusal, got {other:?}"),
        }
        // Another bucket has its own window, and no limit here.
        for _ in 0..10 {
            assert!(a.admit("u", false, None, None).is_ok());
        }
        assert_eq!(a.counters.rate_limited.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn live_reads_are_counted_while_held_and_given_back_on_drop() {
        let a = admission("[default]\nmax_live_reads = 2");
        let one = a.admit("t", true, None, None).expect("first");
        let two = a.admit("t", true, None, None).expect("second");
        assert!(matches!(
            a.admit("t", true, None, None),
            Err(AdmissionRejection::LiveReadsExhausted)
        ));
        // A plain read is not a live one.
        assert!(
            a.admit("t", false, None, None)
                .expect("plain")
                .live
                .is_none()
        );
        assert_eq!(a.live_reads(), 2);
        drop(one);
        let three = a.admit("t", true, None, None).expect("a share came back");
        drop((two, three));
        assert_eq!(a.live_reads(), 0);
    }

    #[test]
    fn a_declared_body_over_the_buckets_limit_is_refused() {
        let a = admission("[[bucket]]\nid = \"t\"\nmax_request_body_bytes = 100");
        assert!(a.admit("t", false, Some(100), None).is_ok());
        assert_eq!(
            a.admit("t", false, Some(101), None).map(|_| ()),
            Err(AdmissionRejection::BodyTooLarge { limit: 100 })
        );
        assert!(a.admit("other", false, Some(1 << 30), None).is_ok());
    }

    #[test]
    fn uploads_count_only_large_bodies_and_each_limit_refuses_by_its_own_kind() {
        let a = admission(
            "[[bucket]]\nid = \"t\"\nmax_concurrent_uploads = 2\nmax_upload_bytes = 5000",
        );
        assert!(a.admit_upload("t", 1024).expect("small").is_none());
        assert!(a.admit_upload("free", 1 << 20).expect("no limit").is_none());
        let one = a.admit_upload("t", 3000).expect("first").expect("counted");
        assert_eq!(a.upload_tenants(), 1);
        assert_eq!(
            a.admit_upload("t", 3000).map(|_| ()),
            Err(AdmissionRejection::UploadBytesExhausted)
        );
        let two = a.admit_upload("t", 2000).expect("fits").expect("counted");
        assert_eq!(
            a.admit_upload("t", 1025).map(|_| ()),
            Err(AdmissionRejection::UploadsExhausted)
        );
        drop((one, two));
        assert_eq!(a.upload_tenants(), 0);
        // More than the whole allowance can never fit: a 413, not a 429 to retry.
        assert_eq!(
            a.admit_upload("t", 5001).map(|_| ()),
            Err(AdmissionRejection::BodyTooLarge { limit: 5000 })
        );
        // Everything came back, the refused byte attempt included.
        let again = a
            .admit_upload("t", 5000)
            .expect("whole budget")
            .expect("counted");
        drop(again);
    }

    #[test]
    fn anonymous_addresses_have_the_buckets_limits_apart_from_the_owners_share() {
        let a = admission("[[bucket]]\nid = \"t\"\nrequests_per_sec = 2\nmax_live_reads = 1");
        let one: IpAddr = "192.0.2.1".parse().expect("ip");
        let two: IpAddr = "192.0.2.2".parse().expect("ip");
        for _ in 0..2 {
            assert!(a.admit("t", false, None, Some(one)).is_ok());
        }
        assert!(matches!(
            a.admit("t", false, None, Some(one)),
            Err(AdmissionRejection::RateLimited { .. })
        ));
        // Another address, and the bucket's owners, still have their own share.
        let live = a
            .admit("t", true, None, Some(two))
            .expect("another address");
        assert!(a.admit("t", true, None, None).is_ok());
        assert!(matches!(
            a.admit("t", true, None, Some(two)),
            Err(AdmissionRejection::LiveReadsExhausted)
        ));
        drop(live);
    }

    #[test]
    fn idle_buckets_are_forgotten_past_the_sweep_size_but_held_ones_stay() {
        let a = admission("[default]\nmax_live_reads = 1");
        let held = a.admit("keep", true, None, None).expect("live");
        for i in 0..TRACKED_BUCKETS_SWEEP + 10 {
            let _ = a.admit(&format!("b{i}"), false, None, None);
        }
        assert!(a.lock().len() < TRACKED_BUCKETS_SWEEP + 10);
        assert!(matches!(
            a.admit("keep", true, None, None),
            Err(AdmissionRejection::LiveReadsExhausted)
        ));
        drop(held);
    }
}
