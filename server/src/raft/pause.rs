//! Write holds: a leader handing a group off stops proposing its clients' writes until the
//! target took over (or the handoff was given up), so the target's log can equal the leader's
//! when it asks for votes. The writes wait in the group's queue ([`super::batch`]) and then
//! meet the new leader's redirect.
//!
//! A hold is an RAII [`Held`]: a handoff that fails, times out or whose caller goes away
//! releases it by being dropped, so no group stays paused.
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

struct Slot {
    holds: AtomicU32,
    released: Notify,
    /// Set while a handoff of the group runs: two at once (the balancer's and an operator's)
    /// would ask two targets to campaign, split the vote and both be abandoned.
    handing_off: AtomicBool,
    /// The group's batches being proposed now.
    proposing: AtomicU32,
    settled: Notify,
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

/// A group's writes are held while this lives.
#[must_use]
pub struct Held<'a> {
    slot: &'a Slot,
}

/// A batch being proposed: counted until dropped.
#[must_use]
pub struct Proposing<'a> {
    slot: Option<&'a Slot>,
}

impl Drop for Proposing<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot
            && slot.proposing.fetch_sub(1, Ordering::SeqCst) == 1
        {
            slot.settled.notify_waiters();
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.slot.holds.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.slot.released.notify_waiters();
        }
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
                    holds: AtomicU32::new(0),
                    released: Notify::new(),
                    handing_off: AtomicBool::new(false),
                    proposing: AtomicU32::new(0),
                    settled: Notify::new(),
                })
                .collect(),
        )
    }

    /// Holds `group`'s writes until the answer is dropped.
    pub fn hold(&self, group: u32) -> Option<Held<'_>> {
        let slot = self.0.get(group as usize)?;
        // SeqCst with `begin_proposal`: either the proposal sees this hold, or `settle` sees
        // the proposal.
        slot.holds.fetch_add(1, Ordering::SeqCst);
        Some(Held { slot })
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
            .is_some_and(|s| s.holds.load(Ordering::Acquire) > 0)
    }

    /// Waits while `group`'s writes are held, at most [`MAX_WAIT`]. `false`: it waited that
    /// long and the hold is still there.
    pub async fn wait_open(&self, group: u32) -> bool {
        let Some(slot) = self.0.get(group as usize) else {
            return true;
        };
        tokio::time::timeout(MAX_WAIT, async {
            loop {
                let released = slot.released.notified();
                if slot.holds.load(Ordering::Acquire) == 0 {
                    return;
                }
                released.await;
            }
        })
        .await
        .is_ok()
    }

    /// Counts a batch of `group` as being proposed, unless the group is held: then `None`,
    /// and the caller waits for the hold again. `past_hold` proposes anyway (the caller
    /// waited [`MAX_WAIT`] already). A group this node does not run counts nothing.
    pub fn begin_proposal(&self, group: u32, past_hold: bool) -> Option<Proposing<'_>> {
        let Some(slot) = self.0.get(group as usize) else {
            return Some(Proposing { slot: None });
        };
        slot.proposing.fetch_add(1, Ordering::SeqCst);
        let p = Proposing { slot: Some(slot) };
        if !past_hold && slot.holds.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Some(p)
    }

    /// Waits, at most `within`, until no batch of `group` is being proposed; `false` if one
    /// still is. Called under a hold, so no new one starts meanwhile.
    pub async fn settle(&self, group: u32, within: Duration) -> bool {
        let Some(slot) = self.0.get(group as usize) else {
            return true;
        };
        tokio::time::timeout(within, async {
            loop {
                let settled = slot.settled.notified();
                if slot.proposing.load(Ordering::SeqCst) == 0 {
                    return;
                }
                settled.await;
            }
        })
        .await
        .is_ok()
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
