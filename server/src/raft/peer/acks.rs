//! When each peer last acknowledged this node's `append` RPCs (heartbeats included), per
//! group: the handoff rule's "acknowledged the leader within the last 1.5 seconds" and the
//! rebuild's quorum check read it. openraft 0.9 reports only a quorum's ack time, so the
//! transport keeps its own, one atomic per peer and group (no lock on the replication path).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

#[derive(Debug)]
pub struct AckClock {
    start: Instant,
    /// peer -> per group: milliseconds since `start` of the last ack, plus one (0: never).
    per: BTreeMap<u64, Box<[AtomicU64]>>,
}

impl AckClock {
    pub fn new(peers: impl Iterator<Item = u64>, groups: u32) -> AckClock {
        AckClock {
            start: Instant::now(),
            per: peers
                .map(|p| (p, (0..groups).map(|_| AtomicU64::new(0)).collect()))
                .collect(),
        }
    }

    fn slot(&self, peer: u64, group: u32) -> Option<&AtomicU64> {
        self.per.get(&peer)?.get(group as usize)
    }

    /// `peer` answered an `append` RPC of `group` with an answer of the same vote.
    pub fn record(&self, peer: u64, group: u32) {
        if let Some(s) = self.slot(peer, group) {
            let ms = self.start.elapsed().as_millis() as u64 + 1;
            s.store(ms, Ordering::Relaxed);
        }
    }

    /// How long ago `peer` last acknowledged `group`; `None` if it never did.
    pub fn since(&self, peer: u64, group: u32) -> Option<Duration> {
        let at = self.slot(peer, group)?.load(Ordering::Relaxed);
        let now = self.start.elapsed().as_millis() as u64 + 1;
        (at > 0).then(|| Duration::from_millis(now.saturating_sub(at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ack_is_kept_per_peer_and_group() {
        let c = AckClock::new([2, 3].into_iter(), 2);
        assert_eq!(c.since(2, 0), None);
        c.record(2, 1);
        assert!(c.since(2, 1).is_some_and(|d| d < Duration::from_secs(1)));
        assert_eq!(c.since(2, 0), None);
        assert_eq!(c.since(3, 1), None);
        c.record(9, 0);
        assert_eq!(c.since(9, 0), None, "an unknown peer is not counted");
    }
}
