//! The request bodies the gateway buffers: their flags ([`UploadArgs`]), the checked
//! [`UploadLimits`], and the node-wide [`Budget`] every body reserves its size from before it
//! is read, so that concurrent or slow uploads cannot exhaust the gateway's memory.
//!
//! The budget counts whole KiB. `--small-body-headroom-bytes` of it is a pool of its own that
//! only bodies of at most `--small-body-max-bytes` draw from (they try it first, then the
//! rest), so SQLite commits do not queue behind snapshot uploads. Larger bodies draw from the
//! rest, which always holds one body at the limit: [`UploadLimits`] refuses a budget below the
//! limit plus the headroom. Waiters queue first come, first served, as tokio's semaphore does:
//! a large body that waits for its whole share takes every share released meanwhile.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use clap::Args;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::Semaphore;

/// `--max-request-body-bytes` when not given: 32 MiB, the nodes' own body limit.
pub const DEFAULT_MAX_REQUEST_BODY_BYTES: u64 = 32 * 1024 * 1024;
/// The budget when `--body-budget-bytes` is unset, unless the limit plus the headroom is more.
pub const DEFAULT_BODY_BUDGET_BYTES: u64 = 256 * 1024 * 1024;
/// `--small-body-max-bytes` when not given: 1 MiB.
pub const DEFAULT_SMALL_BODY_MAX_BYTES: u64 = 1024 * 1024;
/// `--small-body-headroom-bytes` when not given: 32 MiB.
pub const DEFAULT_SMALL_BODY_HEADROOM_BYTES: u64 = 32 * 1024 * 1024;
/// `--body-budget-wait-ms` when not given.
pub const DEFAULT_BODY_BUDGET_WAIT_MS: u64 = 1000;
/// `--body-stall-timeout` when not given: 30 s.
pub const DEFAULT_BODY_STALL_TIMEOUT: &str = "30s";
/// `--body-min-bytes-per-sec` when not given: 1 KiB/s.
pub const DEFAULT_BODY_MIN_BYTES_PER_SEC: u64 = 1024;
/// `--body-read-timeout` when not given: 5 min, which a 32 MiB body meets at about 110 KiB/s.
pub const DEFAULT_BODY_READ_TIMEOUT: &str = "5m";
/// `--untrusted-bodies-per-address` when not given.
pub const DEFAULT_UNTRUSTED_BODIES_PER_ADDRESS: u32 = 4;
/// The SQLite extension's commit timeout: a stall timeout at or below it can cut a commit the
/// extension still waits for, so the gateway warns.
const EXTENSION_COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The body flags of `ursula gateway`.
#[derive(Debug, Clone, Args)]
pub struct UploadArgs {
    /// Request bodies over this many bytes are refused with `413`, marked
    /// `RequestBodyTooLarge`, and never forwarded.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_REQUEST_BODY_BYTES)]
    pub max_request_body_bytes: u64,
    /// The request bodies the gateway buffers at once, across requests [default: 256 MiB, or
    /// the body limit plus the small-body headroom if that is more]. At least the limit plus
    /// the headroom.
    #[arg(long, value_name = "N")]
    pub body_budget_bytes: Option<u64>,
    /// Bodies of at most this many bytes may use the small-body headroom; a body without a
    /// declared length reserves this much at first.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SMALL_BODY_MAX_BYTES)]
    pub small_body_max_bytes: u64,
    /// The part of the budget kept for small bodies.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SMALL_BODY_HEADROOM_BYTES)]
    pub small_body_headroom_bytes: u64,
    /// How long a body waits for its share of a spent budget before the marked `503`
    /// `UploadBudgetExhausted`.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_BODY_BUDGET_WAIT_MS)]
    pub body_budget_wait_ms: u64,
    /// A body that sends no byte for this long is cut with the marked `408`
    /// `RequestBodyTooSlow` (e.g. 30s, 500ms; a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_BODY_STALL_TIMEOUT, value_parser = crate::timeouts::parse_duration)]
    pub body_stall_timeout: Duration,
    /// A body of which less than this arrived over one `--body-stall-timeout` window is cut the
    /// same way. 0 turns the rate check off.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_BODY_MIN_BYTES_PER_SEC)]
    pub body_min_bytes_per_sec: u64,
    /// A body still arriving this long after its reading started is cut the same way,
    /// however fast it arrives (e.g. 5m, 90s; a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_BODY_READ_TIMEOUT, value_parser = crate::timeouts::parse_duration)]
    pub body_read_timeout: Duration,
    /// With access control, the bodies of requests not admitted for a principal (anonymous,
    /// concealed or refused ones) read at once per client address; past it, such a request is
    /// answered without its body being read, and its connection closed.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_UNTRUSTED_BODIES_PER_ADDRESS)]
    pub untrusted_bodies_per_address: u32,
}

impl Default for UploadArgs {
    fn default() -> UploadArgs {
        UploadArgs {
            max_request_body_bytes: DEFAULT_MAX_REQUEST_BODY_BYTES,
            body_budget_bytes: None,
            small_body_max_bytes: DEFAULT_SMALL_BODY_MAX_BYTES,
            small_body_headroom_bytes: DEFAULT_SMALL_BODY_HEADROOM_BYTES,
            body_budget_wait_ms: DEFAULT_BODY_BUDGET_WAIT_MS,
            body_stall_timeout: Duration::from_secs(30),
            body_min_bytes_per_sec: DEFAULT_BODY_MIN_BYTES_PER_SEC,
            body_read_timeout: Duration::from_secs(300),
            untrusted_bodies_per_address: DEFAULT_UNTRUSTED_BODIES_PER_ADDRESS,
        }
    }
}

/// The body limits as asked for, before they are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadLimitsSpec {
    pub max_request_body_bytes: u64,
    /// `None`: 256 MiB, or the limit plus the headroom if that is more.
    pub body_budget_bytes: Option<u64>,
    pub small_body_max_bytes: u64,
    pub small_body_headroom_bytes: u64,
    pub body_budget_wait: Duration,
    pub body_stall_timeout: Duration,
    pub body_min_bytes_per_sec: u64,
    pub body_read_timeout: Duration,
    pub untrusted_bodies_per_address: u32,
}

impl From<&UploadArgs> for UploadLimitsSpec {
    fn from(a: &UploadArgs) -> UploadLimitsSpec {
        UploadLimitsSpec {
            max_request_body_bytes: a.max_request_body_bytes,
            body_budget_bytes: a.body_budget_bytes,
            small_body_max_bytes: a.small_body_max_bytes,
            small_body_headroom_bytes: a.small_body_headroom_bytes,
            body_budget_wait: Duration::from_millis(a.body_budget_wait_ms),
            body_stall_timeout: a.body_stall_timeout,
            body_min_bytes_per_sec: a.body_min_bytes_per_sec,
            body_read_timeout: a.body_read_timeout,
            untrusted_bodies_per_address: a.untrusted_bodies_per_address,
        }
    }
}

/// Why body limits were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UploadLimitsError {
    #[error("--max-request-body-bytes must be at least 1")]
    ZeroBodyLimit,
    #[error("--body-stall-timeout must be more than 0")]
    ZeroStallTimeout,
    #[error("--body-read-timeout must be more than 0")]
    ZeroReadTimeout,
    #[error(
        "LimitAboveSharedBudget: --body-budget-bytes {budget} is below --max-request-body-bytes {limit} plus --small-body-headroom-bytes {headroom}; raise the budget or lower the limit"
    )]
    LimitAboveSharedBudget {
        budget: u64,
        limit: u64,
        headroom: u64,
    },
    #[error("--body-budget-bytes {0} is over the 4 TiB this build can count")]
    BudgetTooLarge(u64),
}

/// Checked body limits: only [`UploadLimits::try_from`] builds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadLimits {
    max_request_body_bytes: u64,
    budget_bytes: u64,
    /// Whether an unset budget grew past 256 MiB to hold the limit plus the headroom.
    grown: bool,
    small_body_max_bytes: u64,
    small_body_headroom_bytes: u64,
    body_budget_wait: Duration,
    body_stall_timeout: Duration,
    body_min_bytes_per_sec: u64,
    body_read_timeout: Duration,
    untrusted_bodies_per_address: u32,
}

impl TryFrom<UploadLimitsSpec> for UploadLimits {
    type Error = UploadLimitsError;

    fn try_from(s: UploadLimitsSpec) -> Result<UploadLimits, UploadLimitsError> {
        if s.max_request_body_bytes == 0 {
            return Err(UploadLimitsError::ZeroBodyLimit);
        }
        if s.body_stall_timeout.is_zero() {
            return Err(UploadLimitsError::ZeroStallTimeout);
        }
        if s.body_read_timeout.is_zero() {
            return Err(UploadLimitsError::ZeroReadTimeout);
        }
        let needed = s
            .max_request_body_bytes
            .saturating_add(s.small_body_headroom_bytes);
        let (budget_bytes, grown) = match s.body_budget_bytes {
            Some(b) if b < needed => {
                return Err(UploadLimitsError::LimitAboveSharedBudget {
                    budget: b,
                    limit: s.max_request_body_bytes,
                    headroom: s.small_body_headroom_bytes,
                });
            }
            Some(b) => (b, false),
            None if needed > DEFAULT_BODY_BUDGET_BYTES => (needed, true),
            None => (DEFAULT_BODY_BUDGET_BYTES, false),
        };
        // One acquire takes a u32 count of KiB.
        if budget_bytes.div_ceil(1024) > u64::from(u32::MAX) {
            return Err(UploadLimitsError::BudgetTooLarge(budget_bytes));
        }
        Ok(UploadLimits {
            max_request_body_bytes: s.max_request_body_bytes,
            budget_bytes,
            grown,
            small_body_max_bytes: s.small_body_max_bytes,
            small_body_headroom_bytes: s.small_body_headroom_bytes,
            body_budget_wait: s.body_budget_wait,
            body_stall_timeout: s.body_stall_timeout,
            body_min_bytes_per_sec: s.body_min_bytes_per_sec,
            body_read_timeout: s.body_read_timeout,
            untrusted_bodies_per_address: s.untrusted_bodies_per_address,
        })
    }
}

impl UploadLimits {
    pub fn max_request_body_bytes(&self) -> u64 {
        self.max_request_body_bytes
    }
    pub fn budget_bytes(&self) -> u64 {
        self.budget_bytes
    }
    pub fn small_body_max_bytes(&self) -> u64 {
        self.small_body_max_bytes
    }
    pub fn small_body_headroom_bytes(&self) -> u64 {
        self.small_body_headroom_bytes
    }
    pub fn body_budget_wait(&self) -> Duration {
        self.body_budget_wait
    }
    pub fn body_stall_timeout(&self) -> Duration {
        self.body_stall_timeout
    }
    pub fn body_min_bytes_per_sec(&self) -> u64 {
        self.body_min_bytes_per_sec
    }
    pub fn body_read_timeout(&self) -> Duration {
        self.body_read_timeout
    }
    pub fn untrusted_bodies_per_address(&self) -> u32 {
        self.untrusted_bodies_per_address
    }

    /// Logs what an operator should know at startup: a grown budget, a budget over half the
    /// cgroup's memory, a stall timeout the extension's commits can meet.
    pub fn warn_at_startup(&self) {
        if self.grown {
            tracing::warn!(
                budget = self.budget_bytes,
                limit = self.max_request_body_bytes,
                headroom = self.small_body_headroom_bytes,
                "--body-budget-bytes is unset and grew to the body limit plus the small-body headroom; \
                 the gateway may buffer that much at once: give it about twice that in memory"
            );
        }
        if let Some(memory) = cgroup_memory_limit()
            && self.budget_bytes > memory / 2
        {
            tracing::warn!(
                budget = self.budget_bytes,
                cgroup_memory_limit = memory,
                "the body budget is over half of the gateway's cgroup memory limit"
            );
        }
        if self.body_stall_timeout <= EXTENSION_COMMIT_TIMEOUT {
            tracing::warn!(
                stall = ?self.body_stall_timeout,
                "--body-stall-timeout is at or below the SQLite extension's 10 s commit timeout: \
                 a commit still being sent can be cut on every attempt"
            );
        }
    }
}

/// The memory limit of the cgroup (v2) this process runs in, the lowest along its path.
fn cgroup_memory_limit() -> Option<u64> {
    let line = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = line.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let mut dir = std::path::PathBuf::from("/sys/fs/cgroup");
    dir.push(path.trim_start_matches('/'));
    let mut lowest: Option<u64> = None;
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("memory.max"))
            && let Ok(n) = text.trim().parse::<u64>()
        {
            lowest = Some(lowest.map_or(n, |l| l.min(n)));
        }
        if dir == std::path::Path::new("/sys/fs/cgroup") || !dir.pop() {
            return lowest;
        }
    }
}

/// Upload counters, shown on the gateway's metrics.
#[derive(Debug, Default)]
pub struct UploadCounters {
    /// `503 UploadBudgetExhausted`.
    pub refusals_budget: AtomicU64,
    /// `429 TenantUploads`: bumped by the quota step once it bounds uploads.
    pub refusals_tenant_uploads: AtomicU64,
    /// `429 TenantUploadBytes`: likewise.
    pub refusals_tenant_bytes: AtomicU64,
    /// `408 RequestBodyTooSlow`.
    pub refusals_too_slow: AtomicU64,
    /// Bytes of bodies read to forward them.
    pub body_bytes_buffered: AtomicU64,
    /// Refused requests with a body.
    pub refusal_drains: AtomicU64,
    /// Of those, the ones whose body was not read to its end.
    pub refusal_drains_cut: AtomicU64,
    /// Bytes of refused bodies read and dropped.
    pub refusal_drain_bytes: AtomicU64,
    /// Untrusted requests answered without their body being read: their client address
    /// already had `--untrusted-bodies-per-address` bodies being read.
    pub untrusted_bodies_unread: AtomicU64,
}

/// The budget stayed spent for `--body-budget-wait-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

/// The node-wide body budget, in KiB permits.
#[derive(Debug)]
pub struct Budget {
    /// Everything but the headroom: any body may draw from it.
    general: Arc<Semaphore>,
    /// The headroom: bodies of at most `small_max` bytes only.
    headroom: Arc<Semaphore>,
    general_kib: u64,
    headroom_kib: u64,
    small_max: u64,
    wait: Duration,
}

/// A body's share of the budget, given back when dropped, however the request ended.
#[derive(Debug, Default)]
pub struct Reservation {
    general: Option<OwnedSemaphorePermit>,
    headroom: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    /// The bytes this share covers.
    pub fn bytes(&self) -> u64 {
        let n = |p: &Option<OwnedSemaphorePermit>| p.as_ref().map_or(0, |p| p.num_permits());
        (n(&self.general) + n(&self.headroom)) as u64 * 1024
    }
}

fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

impl Budget {
    pub fn new(limits: &UploadLimits) -> Budget {
        // Rounded up, and the headroom down, so that the rest holds a body at the limit.
        let total = limits.budget_bytes.div_ceil(1024);
        let headroom_kib = (limits.small_body_headroom_bytes / 1024).min(total);
        let general_kib = total - headroom_kib;
        let permits = |k: u64| usize::try_from(k).unwrap_or(Semaphore::MAX_PERMITS);
        Budget {
            general: Arc::new(Semaphore::new(permits(general_kib))),
            headroom: Arc::new(Semaphore::new(permits(headroom_kib))),
            general_kib,
            headroom_kib,
            small_max: limits.small_body_max_bytes,
            wait: limits.body_budget_wait,
        }
    }

    /// Bytes reserved now, in whole KiB, shares still being gathered by waiters included.
    pub fn reserved_bytes(&self) -> u64 {
        let used = |total: u64, s: &Semaphore| total.saturating_sub(s.available_permits() as u64);
        (used(self.general_kib, &self.general) + used(self.headroom_kib, &self.headroom)) * 1024
    }

    /// Reserves `bytes` for a body, waiting up to `--body-budget-wait-ms`.
    pub async fn reserve(&self, bytes: u64) -> Result<Reservation, Exhausted> {
        let want = kib(bytes);
        if want == 0 {
            return Ok(Reservation::default());
        }
        let small = bytes <= self.small_max;
        tokio::time::timeout(self.wait, self.acquire(want, small))
            .await
            .map_err(|_| Exhausted)?
    }

    /// Grows `r` to cover `bytes`, from the general pool: a body this large is no small one.
    pub async fn grow(&self, r: &mut Reservation, bytes: u64) -> Result<(), Exhausted> {
        let have = r.bytes() / 1024;
        let Some(extra) = u64::from(kib(bytes)).checked_sub(have).filter(|&e| e > 0) else {
            return Ok(());
        };
        let extra = u32::try_from(extra).map_err(|_| Exhausted)?;
        let permit =
            tokio::time::timeout(self.wait, self.general.clone().acquire_many_owned(extra))
                .await
                .map_err(|_| Exhausted)?
                .map_err(|_| Exhausted)?;
        match &mut r.general {
            Some(p) => p.merge(permit),
            None => r.general = Some(permit),
        }
        Ok(())
    }

    async fn acquire(&self, want: u32, small: bool) -> Result<Reservation, Exhausted> {
        if !small {
            let p = self.general.clone().acquire_many_owned(want).await;
            return p
                .map(|p| Reservation {
                    general: Some(p),
                    headroom: None,
                })
                .map_err(|_| Exhausted);
        }
        // The headroom first, keeping the rest for large bodies; then whichever frees first.
        if let Ok(p) = self.headroom.clone().try_acquire_many_owned(want) {
            return Ok(Reservation {
                general: None,
                headroom: Some(p),
            });
        }
        if let Ok(p) = self.general.clone().try_acquire_many_owned(want) {
            return Ok(Reservation {
                general: Some(p),
                headroom: None,
            });
        }
        // Dropping the acquire that lost gives back whatever it had gathered.
        tokio::select! {
            p = self.headroom.clone().acquire_many_owned(want) => p.map(|p| Reservation {
                general: None,
                headroom: Some(p),
            }),
            p = self.general.clone().acquire_many_owned(want) => p.map(|p| Reservation {
                general: Some(p),
                headroom: None,
            }),
        }
        .map_err(|_| Exhausted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn spec() -> UploadLimitsSpec {
        UploadLimitsSpec::from(&UploadArgs::default())
    }

    fn limits(budget: u64, limit: u64, headroom: u64, small: u64, wait_ms: u64) -> UploadLimits {
        UploadLimits::try_from(UploadLimitsSpec {
            max_request_body_bytes: limit,
            body_budget_bytes: Some(budget),
            small_body_max_bytes: small,
            small_body_headroom_bytes: headroom,
            body_budget_wait: Duration::from_millis(wait_ms),
            ..spec()
        })
        .expect("limits")
    }

    #[test]
    fn the_defaults_are_a_256_mib_budget_with_32_mib_of_headroom() {
        let l = UploadLimits::try_from(spec()).expect("defaults");
        assert_eq!(l.budget_bytes(), 256 * MIB);
        assert!(!l.grown);
        assert_eq!(l.small_body_max_bytes(), MIB);
        assert_eq!(l.small_body_headroom_bytes(), 32 * MIB);
        assert_eq!(l.body_budget_wait(), Duration::from_secs(1));
        assert_eq!(l.body_stall_timeout(), Duration::from_secs(30));
        assert_eq!(l.body_min_bytes_per_sec(), 1024);
        assert_eq!(l.body_read_timeout(), Duration::from_secs(300));
        assert_eq!(l.untrusted_bodies_per_address(), 4);
    }

    #[test]
    fn an_unset_budget_grows_to_the_limit_plus_the_headroom() {
        let l = UploadLimits::try_from(UploadLimitsSpec {
            max_request_body_bytes: 1024 * MIB,
            ..spec()
        })
        .expect("grown");
        assert_eq!(l.budget_bytes(), 1056 * MIB);
        assert!(l.grown);
    }

    #[test]
    fn an_explicit_budget_below_the_limit_plus_the_headroom_is_limit_above_shared_budget() {
        let err = UploadLimits::try_from(UploadLimitsSpec {
            body_budget_bytes: Some(64 * MIB - 1),
            ..spec()
        })
        .expect_err("too small");
        assert_eq!(
            err,
            UploadLimitsError::LimitAboveSharedBudget {
                budget: 64 * MIB - 1,
                limit: 32 * MIB,
                headroom: 32 * MIB
            }
        );
        assert!(err.to_string().starts_with("LimitAboveSharedBudget"));
        assert!(
            UploadLimits::try_from(UploadLimitsSpec {
                body_budget_bytes: Some(64 * MIB),
                ..spec()
            })
            .is_ok()
        );
        let zero = UploadLimitsSpec {
            max_request_body_bytes: 0,
            ..spec()
        };
        assert_eq!(
            UploadLimits::try_from(zero),
            Err(UploadLimitsError::ZeroBodyLimit)
        );
    }

    #[test]
    fn a_budget_at_the_limit_plus_an_unaligned_headroom_still_holds_a_body_at_the_limit() {
        let l = limits(3 * 1024 + 1, 1025, 2048, 100, 10);
        let b = Budget::new(&l);
        assert!(b.general_kib >= 1025_u64.div_ceil(1024));
    }

    #[tokio::test]
    async fn shares_are_whole_kib_and_come_back_when_dropped() {
        let b = Budget::new(&limits(64 * MIB, 32 * MIB, 32 * MIB, MIB, 10));
        let r = b.reserve(1).await.expect("one byte");
        assert_eq!(r.bytes(), 1024);
        assert_eq!(b.reserved_bytes(), 1024);
        let empty = b.reserve(0).await.expect("nothing");
        assert_eq!(empty.bytes(), 0);
        drop(r);
        assert_eq!(b.reserved_bytes(), 0);
    }

    #[tokio::test]
    async fn a_spent_budget_refuses_after_the_wait_and_a_freed_one_serves_a_waiter() {
        let b = Arc::new(Budget::new(&limits(64 * MIB, 32 * MIB, 32 * MIB, MIB, 50)));
        let big = b.reserve(32 * MIB).await.expect("first large body");
        assert_eq!(b.reserve(32 * MIB).await.err(), Some(Exhausted));
        // A waiter that gave up left nothing behind.
        assert_eq!(b.reserved_bytes(), 32 * MIB);
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move { b.reserve(32 * MIB).await.map(|r| r.bytes()) })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(big);
        assert_eq!(waiter.await.expect("join"), Ok(32 * MIB));
        assert_eq!(b.reserved_bytes(), 0);
    }

    #[tokio::test]
    async fn small_bodies_use_the_headroom_while_large_ones_hold_the_rest() {
        let b = Budget::new(&limits(64 * MIB, 32 * MIB, 32 * MIB, MIB, 10));
        let large = b.reserve(32 * MIB).await.expect("large");
        assert_eq!(b.reserve(2 * MIB).await.err(), Some(Exhausted));
        let mut smalls = Vec::new();
        for _ in 0..32 {
            smalls.push(b.reserve(MIB).await.expect("a small body in the headroom"));
        }
        assert_eq!(b.reserved_bytes(), 64 * MIB);
        assert_eq!(b.reserve(1).await.err(), Some(Exhausted));
        drop(smalls);
        // Freed headroom serves small bodies again.
        let more_small = b.reserve(MIB).await.expect("headroom free again");
        assert_eq!(more_small.bytes(), MIB);
        drop(large);
        drop(more_small);
        assert_eq!(b.reserved_bytes(), 0);
    }

    #[tokio::test]
    async fn a_growing_body_takes_more_from_the_rest_and_gives_all_back() {
        let b = Budget::new(&limits(64 * MIB, 32 * MIB, 32 * MIB, MIB, 10));
        let mut r = b.reserve(MIB).await.expect("first share");
        b.grow(&mut r, 8 * MIB).await.expect("grown");
        assert_eq!(r.bytes(), 8 * MIB);
        b.grow(&mut r, 4 * MIB).await.expect("no shrink");
        assert_eq!(r.bytes(), 8 * MIB);
        assert_eq!(b.grow(&mut r, 64 * MIB).await, Err(Exhausted));
        assert_eq!(r.bytes(), 8 * MIB);
        drop(r);
        assert_eq!(b.reserved_bytes(), 0);
    }
}
