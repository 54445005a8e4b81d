//! The node's snapshot builds in flight, which the snapshot driver ([`crate::raft::drivers::snapshots`]) and an
//! operator's `POST /__ursula/raft/{group}/snapshot` ([`crate::raft::ops::log_actions`]) share: one count
//! against `raft.snapshot_build_max_concurrency`, the groups whose triggered build has not
//! shown yet, and the groups sitting out because their last trigger went unclaimed.
//!
//! openraft builds a snapshot on its own and drops a trigger while a build of the group runs,
//! so a build is "in flight" from its trigger until the group's snapshot moves, or until
//! [`CLAIM_TIMEOUT`] says the trigger was never claimed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use std::time::Instant;

use crate::raft::storage::log_counters::SnapStats;
use crate::raft::types::GroupRaft;

/// A trigger whose build has not shown up by then was not claimed (a build already ran).
pub const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);
/// First hold-out of a group whose trigger went unclaimed; doubles up to `HOLD_OUT_MAX`.
const HOLD_OUT_FIRST: Duration = Duration::from_millis(500);
const HOLD_OUT_MAX: Duration = Duration::from_secs(16);
/// How often a wait for a permit looks again.
const PERMIT_POLL: Duration = Duration::from_millis(50);

/// A build that was triggered and is waited for.
struct Pending {
    since: Instant,
    /// The group's snapshot before the trigger.
    before: Option<u64>,
}

#[derive(Default)]
struct Inner {
    pending: BTreeMap<u32, Pending>,
    /// Groups whose trigger went unclaimed: until when they sit out, and the next hold-out.
    held: BTreeMap<u32, (Instant, Duration)>,
}

/// Why an operator's build could not start.
#[derive(Debug, PartialEq, Eq)]
pub enum NoPermit {
    /// A build of the group ran, or every permit was held, for the whole wait.
    Busy,
}

/// The builds in flight on this node.
pub struct Builds {
    max: u32,
    claim_timeout: Duration,
    inner: Mutex<Inner>,
    stats: Arc<SnapStats>,
}

impl Builds {
    /// `max` is `raft.snapshot_build_max_concurrency`, the node's build permits.
    pub fn new(max: u32, stats: Arc<SnapStats>) -> Builds {
        Builds {
            max: max.max(1),
            claim_timeout: CLAIM_TIMEOUT,
            inner: Mutex::new(Inner::default()),
            stats,
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere cannot leave the maps half-written: every change is one insert or
        // one retain, so a poisoned lock's data is whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the triggered builds that finished (`snapshot_of` the group moved) or that were
    /// never claimed (the group then sits out 0.5 s, doubling to 16 s).
    pub fn settle(&self, snapshot_of: impl Fn(u32) -> Option<u64>) {
        let mut inner = self.inner();
        let claim_timeout = self.claim_timeout;
        let Inner { pending, held } = &mut *inner;
        pending.retain(|group, p| {
            if snapshot_of(*group) != p.before {
                held.remove(group);
                return false;
            }
            if p.since.elapsed() >= claim_timeout {
                let next = held.get(group).map_or(HOLD_OUT_FIRST, |(_, d)| *d);
                held.insert(
                    *group,
                    (Instant::now() + next, (next * 2).min(HOLD_OUT_MAX)),
                );
                return false;
            }
            true
        });
        self.stats
            .in_flight
            .store(pending.len() as u64, Ordering::Relaxed);
    }

    /// Builds in flight.
    pub fn in_flight(&self) -> u32 {
        u32::try_from(self.inner().pending.len()).unwrap_or(u32::MAX)
    }

    /// Whether a triggered build of `group` has not shown yet.
    pub fn building(&self, group: u32) -> bool {
        self.inner().pending.contains_key(&group)
    }

    /// Whether `group` sits out because its last trigger went unclaimed.
    pub fn held_out(&self, group: u32) -> bool {
        self.inner()
            .held
            .get(&group)
            .is_some_and(|(until, _)| Instant::now() < *until)
    }

    /// Records a build of `group` that was triggered while its snapshot was `before`.
    pub fn record(&self, group: u32, before: Option<u64>) {
        let mut inner = self.inner();
        inner.pending.insert(
            group,
            Pending {
                since: Instant::now(),
                before,
            },
        );
        let n = inner.pending.len() as u64;
        self.stats.in_flight.store(n, Ordering::Relaxed);
        self.stats.in_flight_max.fetch_max(n, Ordering::Relaxed);
    }

    /// Triggers a build of `group` and records it; false when openraft refused the trigger
    /// (the group is stopping).
    pub async fn start(&self, raft: &GroupRaft, group: u32, before: Option<u64>) -> bool {
        if raft.trigger().snapshot().await.is_err() {
            return false;
        }
        self.record(group, before);
        true
    }

    /// Waits, up to `within`, until `group` may start a build: none of it in flight and a
    /// permit free, or `covered` says a snapshot already answers the caller (`Ok(false)`).
    /// `Ok(true)`: start one now.
    pub async fn permit(
        &self,
        group: u32,
        within: Duration,
        snapshot_of: impl Fn(u32) -> Option<u64>,
        covered: impl Fn() -> bool,
    ) -> Result<bool, NoPermit> {
        let deadline = Instant::now() + within;
        loop {
            self.settle(&snapshot_of);
            if covered() {
                return Ok(false);
            }
            if !self.building(group) && self.in_flight() < self.max {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Err(NoPermit::Busy);
            }
            tokio::time::sleep(PERMIT_POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Short waits, so the tests run in real time.
    const WAIT: Duration = Duration::from_millis(300);

    fn builds(max: u32) -> Builds {
        Builds::new(max, Arc::new(SnapStats::new(4)))
    }

    #[test]
    fn a_build_is_in_flight_until_its_groups_snapshot_moves() {
        let b = builds(2);
        b.record(1, Some(10));
        b.settle(|_| Some(10));
        assert!(b.building(1));
        assert_eq!(b.stats.in_flight.load(Ordering::Relaxed), 1);
        b.settle(|_| Some(20));
        assert!(!b.building(1));
        assert_eq!(b.in_flight(), 0);
        assert_eq!(b.stats.in_flight.load(Ordering::Relaxed), 0);
        assert_eq!(b.stats.in_flight_max.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_unclaimed_trigger_frees_its_permit_and_sits_its_group_out_doubling() {
        let mut b = builds(1);
        b.claim_timeout = Duration::ZERO;
        b.record(3, None);
        b.settle(|_| None);
        assert_eq!(b.in_flight(), 0);
        assert!(b.held_out(3));
        std::thread::sleep(HOLD_OUT_FIRST);
        assert!(!b.held_out(3));
        b.record(3, None);
        b.settle(|_| None);
        std::thread::sleep(HOLD_OUT_FIRST);
        assert!(b.held_out(3), "the second hold-out is twice the first");
        // A claimed build ends the hold-outs.
        b.record(3, None);
        b.settle(|_| Some(1));
        assert!(!b.held_out(3));
    }

    #[tokio::test]
    async fn an_operators_build_waits_for_a_permit_and_is_refused_when_none_frees_in_time() {
        let b = builds(1);
        // Another group's build holds the node's only permit and never ends.
        b.record(0, Some(5));
        let started = Instant::now();
        let got = b.permit(1, WAIT, |_| Some(5), || false).await;
        assert_eq!(got, Err(NoPermit::Busy));
        assert!(started.elapsed() >= WAIT);
        // A build of the group itself holds it out too, with permits to spare.
        let b = builds(4);
        b.record(1, Some(5));
        let got = b.permit(1, WAIT, |_| Some(5), || false).await;
        assert_eq!(got, Err(NoPermit::Busy));
    }

    #[tokio::test]
    async fn a_permit_comes_when_the_build_holding_it_ends_and_a_covering_snapshot_needs_none() {
        let b = builds(1);
        b.record(0, Some(5));
        // Group 0's snapshot moves a little later: its build ended and the permit is free.
        let moved_at = Instant::now() + WAIT / 3;
        let snapshot_of = |_| Some(if Instant::now() >= moved_at { 6 } else { 5 });
        assert_eq!(b.permit(1, WAIT, snapshot_of, || false).await, Ok(true));
        // A snapshot that already covers the request: nothing to start, whatever runs.
        b.record(1, Some(5));
        assert_eq!(b.permit(1, WAIT, |_| Some(5), || true).await, Ok(false));
    }
}
