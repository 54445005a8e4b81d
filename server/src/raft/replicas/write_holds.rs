//! Write holds: a leader handing a group off stops proposing its clients' writes until the
//! target took over (or the handoff was given up), so the target's log can equal the leader's
//! when it asks for votes. The writes wait in the group's queue ([`crate::raft::engine::group_commit`]) and then
//! meet the new leader's redirect.
//!
//! A hold is an RAII [`Held`], a unit of the group's count of holds: a handoff that fails,
//! times out or whose caller goes away releases it by being dropped, so no group stays paused.
//!
//! A hold alone does not close the log: a batch that passed the hold a moment before it began
//! is still on its way into the leader's log. Each proposal is counted while it runs
//! ([`Proposing`]), counted before it looks at the holds, and the handoff waits for the
//! count to reach zero ([`WriteHolds::settle`]) before it compares the target's log with
//! its own. Without that wait, an entry appended after the comparison left the target a log
//! shorter than the leader's: the voters refused its votes and the group had no leader until
//! the handoff was abandoned, its writes held the whole time.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::Notify;

/// The longest a write waits behind a hold: past a handoff's own deadline, so a hold that was
/// somehow never released costs a pause, not a stuck queue.
const MAX_WAIT: Duration = Duration::from_secs(8);

/// A count that can be waited on until it is zero: the holds of a group, and its batches
/// being proposed. SeqCst throughout: `begin_proposal` and `hold` each raise one count and
/// read the other, so either the proposal sees the hold or the handoff sees the proposal.
struct Count {
    n: AtomicU32,
    zero: Notify,
}

impl Count {
    fn new() -> Count {
        Count {
            n: AtomicU32::new(0),
            zero: Notify::new(),
        }
    }

    fn enter(&self) -> Counted<'_> {
        self.n.fetch_add(1, Ordering::SeqCst);
        Counted { count: Some(self) }
    }

    fn is_zero(&self) -> bool {
        self.n.load(Ordering::SeqCst) == 0
    }

    /// Waits, at most `within`, until the count is zero; `false` if it still is not.
    async fn zero_within(&self, within: Duration) -> bool {
        tokio::time::timeout(within, async {
            loop {
                let zero = self.zero.notified();
                if self.is_zero() {
                    return;
                }
                zero.await;
            }
        })
        .await
        .is_ok()
    }
}

/// One unit of a [`Count`], given back on drop.
#[must_use]
pub struct Counted<'a> {
    /// `None` for a group this node does not run: it counts nothing.
    count: Option<&'a Count>,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.count
            && c.n.fetch_sub(1, Ordering::SeqCst) == 1
        {
            c.zero.notify_waiters();
        }
    }
}

/// A group's writes are held while this lives.
pub type Held<'a> = Counted<'a>;
/// A batch being proposed: counted until dropped.
pub type Proposing<'a> = Counted<'a>;

struct Slot {
    holds: Count,
    /// Set while a handoff of the group runs: two at once (the balancer's and an operator's)
    /// would ask two targets to campaign, split the vote and both be abandoned.
    handing_off: AtomicBool,
    /// The group's batches being proposed now.
    proposing: Count,
}

/// One slot per group.
pub struct WriteHolds(Vec<Slot>);

impl std::fmt::Debug for WriteHolds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteHolds")
            .field("groups", &self.0.len())
            .finish()
    }
}

/// The one handoff of a group that may run now.
#[must_use]
pub struct Handoff<'a> {
    slot: &'a Slot,
}

impl Drop for Handoff<'_> {
    fn drop(&mut self) {
        self.slot.handing_off.store(false, Ordering::Release);
    }
}

impl WriteHolds {
    pub fn new(groups: u32) -> WriteHolds {
        WriteHolds(
            (0..groups)
                .map(|_| Slot {
                    holds: Count::new(),
                    handing_off: AtomicBool::new(false),
                    proposing: Count::new(),
                })
                .collect(),
        )
    }

    /// Holds `group`'s writes until the answer is dropped.
    pub fn hold(&self, group: u32) -> Option<Held<'_>> {
        Some(self.0.get(group as usize)?.holds.enter())
    }

    /// The right to hand `group` off, if no other handoff of it runs; given back on drop.
    pub fn begin_handoff(&self, group: u32) -> Option<Handoff<'_>> {
        let slot = self.0.get(group as usize)?;
        slot.handing_off
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(Handoff { slot })
    }

    pub fn is_held(&self, group: u32) -> bool {
        self.0
            .get(group as usize)
            .is_some_and(|s| !s.holds.is_zero())
    }

    /// Waits while `group`'s writes are held, at most [`MAX_WAIT`]. `false`: it waited that
    /// long and the hold is still there.
    pub async fn wait_open(&self, group: u32) -> bool {
        match self.0.get(group as usize) {
            Some(slot) => slot.holds.zero_within(MAX_WAIT).await,
            None => true,
        }
    }

    /// Counts a batch of `group` as being proposed, unless the group is held: then `None`,
    /// and the caller waits for the hold again. `past_hold` proposes anyway (the caller
    /// waited [`MAX_WAIT`] already). A group this node does not run counts nothing.
    pub fn begin_proposal(&self, group: u32, past_hold: bool) -> Option<Proposing<'_>> {
        let Some(slot) = self.0.get(group as usize) else {
            return Some(Counted { count: None });
        };
        let p = slot.proposing.enter();
        (past_hold || slot.holds.is_zero()).then_some(p)
    }

    /// Waits, at most `within`, until no batch of `group` is being proposed; `false` if one
    /// still is. Called under a hold, so no new one starts meanwhile.
    pub async fn settle(&self, group: u32, within: Duration) -> bool {
        match self.0.get(group as usize) {
            Some(slot) => slot.proposing.zero_within(within).await,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_held_group_waits_until_the_hold_is_dropped_and_others_do_not() {
        let holds = std::sync::Arc::new(WriteHolds::new(2));
        let held = holds.hold(0).expect("group 0");
        assert!(holds.is_held(0) && !holds.is_held(1));
        tokio::time::timeout(Duration::from_millis(100), holds.wait_open(1))
            .await
            .expect("group 1 is not held");
        let h2 = holds.clone();
        let waiter = tokio::spawn(async move { h2.wait_open(0).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a held group's writes wait");
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("released")
            .expect("join");
        assert!(!holds.is_held(0));
    }

    #[tokio::test]
    async fn a_handoff_settles_only_once_the_batches_that_passed_before_its_hold_are_done() {
        let holds = std::sync::Arc::new(WriteHolds::new(2));
        let before = holds.begin_proposal(0, false).expect("not held yet");
        let held = holds.hold(0).expect("group 0");
        assert!(
            holds.begin_proposal(0, false).is_none(),
            "a batch that comes after the hold waits for it"
        );
        assert!(
            holds.begin_proposal(0, true).is_some(),
            "one that waited out MAX_WAIT goes anyway"
        );
        assert!(
            !holds.settle(0, Duration::from_millis(50)).await,
            "the batch from before the hold is still being proposed"
        );
        assert!(holds.settle(1, Duration::from_millis(50)).await);
        let h2 = holds.clone();
        let settling = tokio::spawn(async move { h2.settle(0, Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!settling.is_finished());
        drop(before);
        assert!(settling.await.expect("join"), "settled once it finished");
        drop(held);
        assert!(holds.begin_proposal(0, false).is_some());
    }

    #[test]
    fn one_handoff_of_a_group_runs_at_a_time() {
        let holds = WriteHolds::new(2);
        let first = holds.begin_handoff(0).expect("free");
        assert!(
            holds.begin_handoff(0).is_none(),
            "a second handoff of group 0 waits its turn"
        );
        assert!(holds.begin_handoff(1).is_some(), "other groups are free");
        drop(first);
        assert!(holds.begin_handoff(0).is_some());
    }
}
