//! The snapshot-store health gate (Configuration, "Cold storage"). Every
//! `storage.snapshot.drive_interval` it probes the S3 store and reads the cold flush's object
//! writes since its last tick. A tick is bad when the probe fails or misses
//! `storage.cold.s3.probe_timeout`, or when a write failed within the flush window and none has
//! succeeded since; a tick in which writes both failed and succeeded counts for nothing. After
//! `unhealthy_ticks` bad ticks with no good one between them a cluster node stops campaigning
//! and hands up to four leaderships per tick to peers that may campaign, the groups with the
//! most unflushed bytes first; after `heal_ticks` good ticks in a row it may lead again.
//!
//! The store it watches is the cold tier's bucket, which also holds the S3 snapshot namespace.
//! With S3 snapshots, a bad tick holds the snapshot driver's routine builds back until a good
//! one (a log-pressure pass still runs); inline snapshots never touch the store, so they are
//! not held (docs/operations.md).

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::Weak;
use std::time::Duration;
use std::time::Instant;

use futures_util::future::BoxFuture;
use ursula_cold::ColdError;

use super::streak::Change;
use super::streak::Streak;
use crate::raft::ops::handoff;
use crate::raft::replicas::Replicas;

pub use crate::config::cold::StoreGate as Settings;

/// Leaderships a shed node hands off per gate tick (the spec's "at most four").
const HANDOFFS_PER_TICK: usize = 4;

/// What the gate reads of the store, given once the cold tier is open.
pub struct Store {
    /// One request the store must answer; the gate bounds it.
    pub probe: Box<dyn Fn() -> BoxFuture<'static, Result<(), ColdError>> + Send + Sync>,
    /// The cold flush's object writes so far: (failed, succeeded).
    pub writes: Box<dyn Fn() -> (u64, u64) + Send + Sync>,
}

/// Where the node's wiring hands the gate its store: the Raft engine starts before the cold
/// tier opens, and the gate skips its ticks until then.
#[derive(Clone, Default)]
pub struct StoreHealth(Arc<OnceLock<Store>>);

impl StoreHealth {
    pub fn attach(&self, store: Store) {
        let _ = self.0.set(store);
    }
}

impl std::fmt::Debug for StoreHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHealth")
            .field("attached", &self.0.get().is_some())
            .finish()
    }
}

/// How one tick was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    Good,
    Bad,
    /// Writes both failed and succeeded: neither ends a bad streak nor adds to it.
    Mixed,
}

/// The gate's judgement, tick by tick: plain state, so the rules are tested without a store.
#[derive(Debug)]
pub struct Judge {
    settings: Settings,
    streak: Streak,
    last_failure: Option<Instant>,
    succeeded_since: bool,
    seen: (u64, u64),
}

impl Judge {
    pub fn new(settings: Settings) -> Judge {
        Judge {
            streak: Streak::new(settings.unhealthy_ticks, settings.heal_ticks),
            settings,
            last_failure: None,
            succeeded_since: false,
            seen: (0, 0),
        }
    }

    pub fn shed(&self) -> bool {
        self.streak.shed()
    }

    /// Bad ticks since the last good one.
    pub fn bad_streak(&self) -> u32 {
        self.streak.bad()
    }

    /// Judges a tick at `now`: the probe's outcome and the write counters' totals.
    pub fn tick(&mut self, now: Instant, probe_ok: bool, writes: (u64, u64)) -> (Tick, Change) {
        let failed = writes.0.saturating_sub(self.seen.0);
        let succeeded = writes.1.saturating_sub(self.seen.1);
        self.seen = writes;
        if failed > 0 {
            self.last_failure = Some(now);
            // In a mixed tick a write succeeded too: the failure weighs on its own tick only.
            self.succeeded_since = succeeded > 0;
        } else if succeeded > 0 {
            self.succeeded_since = true;
        }
        let tick = if failed > 0 && succeeded > 0 {
            Tick::Mixed
        } else if !probe_ok || self.failure_weighs(now) {
            Tick::Bad
        } else {
            Tick::Good
        };
        let change = match tick {
            Tick::Mixed => Change::None,
            Tick::Bad => self.streak.bad_tick(),
            Tick::Good => self.streak.good_tick(),
        };
        (tick, change)
    }

    /// A write failed within the flush window and none succeeded since.
    fn failure_weighs(&self, now: Instant) -> bool {
        !self.succeeded_since
            && self
                .last_failure
                .is_some_and(|at| now.saturating_duration_since(at) < self.settings.write_window)
    }
}

/// Whether routine snapshot builds are held back after a tick of `kind`, `held` before it. Only
/// S3 snapshots are held (inline ones never touch the store). A mixed tick neither ends a bad
/// streak nor adds to it, so it leaves the hold as it was.
fn holds_snapshots(held: bool, kind: Tick, s3_snapshots: bool) -> bool {
    s3_snapshots
        && match kind {
            Tick::Bad => true,
            Tick::Good => false,
            Tick::Mixed => held,
        }
}

/// Why a tick is bad.
#[derive(Debug, thiserror::Error)]
enum BadTick {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{first}; retried: {again}")]
    Failed { first: ColdError, again: ColdError },
    #[error("{first}; the retry got no answer within the {deadline:?} deadline")]
    RetryTimeout {
        first: ColdError,
        deadline: Duration,
    },
    #[error("a cold-flush write failed and none succeeded since")]
    FlushWrites,
}

/// Probes the store within `deadline`: a first attempt that fails before it still has the
/// time left for one retry.
async fn probe(store: &Store, deadline: Duration) -> Result<(), BadTick> {
    let started = Instant::now();
    let first = match tokio::time::timeout(deadline, (store.probe)()).await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(e)) => e,
        Err(_) => return Err(BadTick::Timeout(deadline)),
    };
    let left = deadline.saturating_sub(started.elapsed());
    match tokio::time::timeout(left, (store.probe)()).await {
        Ok(r) => r.map_err(|again| BadTick::Failed { first, again }),
        Err(_) => Err(BadTick::RetryTimeout { first, deadline }),
    }
}

/// Runs the gate every `interval` until the node stops. `clustered`: whether there are peers
/// to hand leaderships to; a single node only judges and logs.
pub async fn run(
    node: Weak<Replicas>,
    health: StoreHealth,
    settings: Settings,
    interval: Duration,
    clustered: bool,
) {
    let mut judge = Judge::new(settings);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if node.strong_count() == 0 {
            return;
        }
        let Some(store) = health.0.get() else {
            continue;
        };
        let probed = probe(store, settings.probe_timeout).await;
        let (kind, change) = judge.tick(Instant::now(), probed.is_ok(), (store.writes)());
        let Some(node) = node.upgrade() else {
            return;
        };
        if node.stopping() {
            return;
        }
        let held = node
            .snapshot_store_bad
            .load(std::sync::atomic::Ordering::Relaxed);
        node.snapshot_store_bad.store(
            holds_snapshots(held, kind, node.snaps.is_some()),
            std::sync::atomic::Ordering::Relaxed,
        );
        if kind == Tick::Bad {
            let why = probed.err().unwrap_or(BadTick::FlushWrites);
            // Once per streak at warn: an outage would otherwise log every tick.
            if judge.bad_streak() == 1 {
                tracing::warn!(reason = %why, "snapshot store health tick is bad");
            } else {
                tracing::debug!(reason = %why, streak = judge.bad_streak(), "snapshot store health tick is bad");
            }
        }
        match change {
            Change::Shed => {
                tracing::warn!(
                    ticks = settings.unhealthy_ticks,
                    "snapshot store unhealthy: this node hands its leaderships to peers and campaigns for none until the store is healthy again"
                );
                if clustered {
                    shed_for_store(&node, true);
                }
            }
            Change::Healed => {
                tracing::info!(
                    ticks = settings.heal_ticks,
                    "snapshot store healthy again: this node may lead"
                );
                if clustered {
                    shed_for_store(&node, false);
                }
            }
            Change::None => {}
        }
        if clustered && judge.shed() {
            hand_off(&node).await;
        }
    }
}

/// Follows the gate into the shed state: while set the node campaigns for no group and refuses
/// transfers to itself (peers read it in the shed state and in the `elect` answer).
fn shed_for_store(node: &Replicas, unhealthy: bool) {
    if !node.shed.set_store(unhealthy) {
        return;
    }
    if unhealthy {
        for r in node.rafts() {
            r.runtime_config().elect(false);
        }
    } else {
        for group in 0..node.group_count() {
            node.resume_elections(group);
        }
    }
}

/// Hands up to [`HANDOFFS_PER_TICK`] of the groups this node leads to peers that may campaign,
/// those with the most unflushed bytes first. A group still led is tried again next tick.
async fn hand_off(node: &Replicas) {
    let mut led: Vec<(u64, u32)> = (0..node.group_count())
        .filter(|g| node.is_leader(*g))
        .map(|g| (node.hot_bytes(g), g))
        .collect();
    led.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, group) in led.into_iter().take(HANDOFFS_PER_TICK) {
        for target in handoff::candidates(node, group).await {
            match handoff::transfer(node, group, target).await {
                Ok(_) => break,
                Err(e) => {
                    tracing::info!(group, target, error = %e, "store gate handoff failed; trying the next voter");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_mixed_tick_keeps_the_snapshot_hold_as_it_was_and_inline_snapshots_are_never_held() {
        use super::Tick;
        use super::holds_snapshots;
        assert!(holds_snapshots(false, Tick::Bad, true));
        assert!(
            holds_snapshots(true, Tick::Mixed, true),
            "a bad streak's hold stays"
        );
        assert!(!holds_snapshots(false, Tick::Mixed, true));
        assert!(!holds_snapshots(true, Tick::Good, true));
        for kind in [Tick::Bad, Tick::Mixed, Tick::Good] {
            assert!(!holds_snapshots(true, kind, false), "inline: {kind:?}");
        }
    }

    use super::*;

    fn settings() -> Settings {
        Settings {
            probe_timeout: Duration::from_secs(5),
            unhealthy_ticks: 3,
            heal_ticks: 2,
            write_window: Duration::from_secs(54),
        }
    }

    const S: Duration = Duration::from_secs(5);

    #[test]
    fn failed_probes_shed_after_three_bad_ticks_and_two_good_ones_heal() {
        let mut j = Judge::new(settings());
        let t0 = Instant::now();
        assert_eq!(j.tick(t0, false, (0, 0)), (Tick::Bad, Change::None));
        assert_eq!(j.tick(t0 + S, false, (0, 0)), (Tick::Bad, Change::None));
        assert_eq!(j.tick(t0 + 2 * S, false, (0, 0)), (Tick::Bad, Change::Shed));
        assert!(j.shed());
        assert_eq!(j.tick(t0 + 3 * S, false, (0, 0)), (Tick::Bad, Change::None));
        assert_eq!(j.tick(t0 + 4 * S, true, (0, 0)), (Tick::Good, Change::None));
        assert_eq!(
            j.tick(t0 + 5 * S, true, (0, 0)),
            (Tick::Good, Change::Healed)
        );
        assert!(!j.shed());
    }

    #[test]
    fn one_good_tick_between_bad_ones_starts_the_streak_again() {
        let mut j = Judge::new(settings());
        let t0 = Instant::now();
        j.tick(t0, false, (0, 0));
        j.tick(t0 + S, false, (0, 0));
        assert_eq!(j.tick(t0 + 2 * S, true, (0, 0)).0, Tick::Good);
        j.tick(t0 + 3 * S, false, (0, 0));
        assert_eq!(j.tick(t0 + 4 * S, false, (0, 0)).1, Change::None);
        assert_eq!(j.tick(t0 + 5 * S, false, (0, 0)).1, Change::Shed);
    }

    #[test]
    fn a_failed_write_weighs_until_one_succeeds_or_it_leaves_the_window() {
        let mut j = Judge::new(settings());
        let t0 = Instant::now();
        // The probe answers, but a write failed: bad for as long as nothing succeeds.
        assert_eq!(j.tick(t0, true, (1, 0)).0, Tick::Bad);
        assert_eq!(j.tick(t0 + S, true, (1, 0)).0, Tick::Bad);
        assert_eq!(j.tick(t0 + 2 * S, true, (1, 0)), (Tick::Bad, Change::Shed));
        // A node that handed everything off flushes nothing: good once the failure is old.
        assert_eq!(
            j.tick(t0 + Duration::from_secs(53), true, (1, 0)).0,
            Tick::Bad
        );
        assert_eq!(
            j.tick(t0 + Duration::from_secs(54), true, (1, 0)).0,
            Tick::Good
        );
        assert_eq!(
            j.tick(t0 + Duration::from_secs(59), true, (1, 0)),
            (Tick::Good, Change::Healed)
        );
        // A later success ends the failure's weight at once.
        let t1 = t0 + Duration::from_secs(100);
        assert_eq!(j.tick(t1, true, (2, 0)).0, Tick::Bad);
        assert_eq!(j.tick(t1 + S, true, (2, 1)).0, Tick::Good);
    }

    #[test]
    fn a_tick_with_failed_and_successful_writes_neither_ends_nor_extends_a_streak() {
        let mut j = Judge::new(settings());
        let t0 = Instant::now();
        j.tick(t0, false, (0, 0));
        j.tick(t0 + S, false, (0, 0));
        assert_eq!(
            j.tick(t0 + 2 * S, false, (1, 1)),
            (Tick::Mixed, Change::None)
        );
        assert_eq!(j.tick(t0 + 3 * S, false, (1, 1)), (Tick::Bad, Change::Shed));
        // The same while shed: a mixed tick does not count towards healing either.
        assert_eq!(j.tick(t0 + 4 * S, true, (1, 2)).0, Tick::Good);
        assert_eq!(j.tick(t0 + 5 * S, true, (2, 3)).0, Tick::Mixed);
        assert_eq!(
            j.tick(t0 + 6 * S, true, (2, 3)),
            (Tick::Good, Change::Healed)
        );
    }

    fn refused(message: &str) -> ColdError {
        ColdError::Config {
            message: message.into(),
        }
    }

    #[tokio::test]
    async fn a_probe_that_fails_fast_is_retried_once_within_its_deadline() {
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let c = calls.clone();
        let flaky = Store {
            probe: Box::new(move || {
                let n = c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Box::pin(async move {
                    if n == 0 {
                        Err(refused("reset"))
                    } else {
                        Ok(())
                    }
                })
            }),
            writes: Box::new(|| (0, 0)),
        };
        assert!(probe(&flaky, Duration::from_secs(1)).await.is_ok());
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
        let hangs = Store {
            probe: Box::new(|| Box::pin(std::future::pending())),
            writes: Box::new(|| (0, 0)),
        };
        let e = probe(&hangs, Duration::from_millis(50))
            .await
            .expect_err("hangs");
        assert!(matches!(e, BadTick::Timeout(_)), "{e}");
        let down = Store {
            probe: Box::new(|| Box::pin(async { Err(refused("refused")) })),
            writes: Box::new(|| (0, 0)),
        };
        let e = probe(&down, Duration::from_secs(1))
            .await
            .expect_err("down");
        assert_eq!(e.to_string(), "refused; retried: refused");
    }
}
