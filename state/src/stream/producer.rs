//! Producer state of one stream: epochs, sequence numbers and the receipt window.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

/// Exact receipts kept per stream, besides each producer's newest.
pub const RECEIPT_WINDOW: usize = 1024;
/// Producers a stream holds before a new one must evict an idle one.
pub const MAX_PRODUCERS: usize = 4096;
/// A producer idle this long may be evicted to make room.
pub const EVICTABLE_IDLE_MS: u64 = 60 * 60 * 1000;
/// A producer idle this long is forgotten.
pub const FORGET_AFTER_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// The forget window in force: [`FORGET_AFTER_MS`] unless the `testing.producer_forget_after`
/// hook shortened it at start. Process-wide because every replica must apply the same rule and
/// the state machine has no other per-node settings; a test sets it alike on every node.
static FORGET_AFTER: AtomicU64 = AtomicU64::new(FORGET_AFTER_MS);

/// Sets the forget window (the `testing.producer_forget_after` hook). Call once, at start.
pub fn set_forget_after_ms(ms: u64) {
    FORGET_AFTER.store(ms, Ordering::Relaxed);
}

fn forget_after_ms() -> u64 {
    FORGET_AFTER.load(Ordering::Relaxed)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Receipt {
    pub next_offset: u64,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Producer {
    pub epoch: u64,
    pub last_seq: u64,
    pub last_seen_ms: u64,
    pub newest: Receipt,
}

#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Producers {
    /// Encoded in key order, so equal states encode to equal bytes on every replica.
    #[serde(serialize_with = "super::sorted::map")]
    pub by_id: HashMap<Box<str>, Producer>,
    window: VecDeque<(Box<str>, u64, u64, Receipt)>,
}

/// How a producer tuple relates to the stored state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Already applied; the receipt is known when still held.
    Duplicate {
        epoch: u64,
        last_seq: u64,
        receipt: Option<Receipt>,
    },
    /// Apply it.
    Accept,
    /// `epoch` is older than the stored one.
    StaleEpoch { current: u64 },
    /// A new epoch must start at seq 0.
    NewEpochNotZero,
    /// A sequence number was skipped.
    Gap { expected: u64 },
    /// The stream holds the most producers it may, none idle long enough to evict.
    Full,
}

impl Producers {
    /// The live state of `id`, forgetting it when idle for 7 days.
    fn live(&self, id: &str, now_ms: u64) -> Option<&Producer> {
        self.by_id
            .get(id)
            .filter(|p| now_ms.saturating_sub(p.last_seen_ms) < forget_after_ms())
    }

    pub fn check(&self, id: &str, epoch: u64, seq: u64, now_ms: u64) -> Verdict {
        let Some(p) = self.live(id, now_ms) else {
            if seq != 0 {
                return Verdict::Gap { expected: 0 };
            }
            if !self.by_id.contains_key(id)
                && self.by_id.len() >= MAX_PRODUCERS
                && self.evictable(now_ms).is_none()
            {
                return Verdict::Full;
            }
            return Verdict::Accept;
        };
        if epoch < p.epoch {
            return Verdict::StaleEpoch { current: p.epoch };
        }
        if epoch > p.epoch {
            return if seq == 0 {
                Verdict::Accept
            } else {
                Verdict::NewEpochNotZero
            };
        }
        if seq <= p.last_seq {
            let receipt = if seq == p.last_seq {
                Some(p.newest)
            } else {
                self.window
                    .iter()
                    .find(|(pid, e, s, _)| &**pid == id && *e == epoch && *s == seq)
                    .map(|(_, _, _, r)| *r)
            };
            return Verdict::Duplicate {
                epoch: p.epoch,
                last_seq: p.last_seq,
                receipt,
            };
        }
        if seq == p.last_seq + 1 {
            Verdict::Accept
        } else {
            Verdict::Gap {
                expected: p.last_seq + 1,
            }
        }
    }

    fn evictable(&self, now_ms: u64) -> Option<&str> {
        self.by_id
            .iter()
            .filter(|(_, p)| now_ms.saturating_sub(p.last_seen_ms) >= EVICTABLE_IDLE_MS)
            .min_by_key(|(_, p)| p.last_seen_ms)
            .map(|(id, _)| &**id)
    }

    /// Records an accepted append. Call only after `check` answered `Accept`.
    pub fn record(&mut self, id: &str, epoch: u64, seq: u64, now_ms: u64, receipt: Receipt) {
        let known = self.live(id, now_ms).is_some();
        if !known
            && self.by_id.len() >= MAX_PRODUCERS
            && !self.by_id.contains_key(id)
            && let Some(victim) = self.evictable(now_ms).map(Box::<str>::from)
        {
            self.by_id.remove(&victim);
        }
        let new_epoch = self
            .by_id
            .get(id)
            .is_none_or(|p| p.epoch != epoch || !known);
        if new_epoch {
            // Receipts of an older epoch can never be answered again.
            self.window.retain(|(pid, _, _, _)| &**pid != id);
        }
        self.by_id.insert(
            id.into(),
            Producer {
                epoch,
                last_seq: seq,
                last_seen_ms: now_ms,
                newest: receipt,
            },
        );
        if self.window.len() >= RECEIPT_WINDOW {
            self.window.pop_front();
        }
        self.window.push_back((id.into(), epoch, seq, receipt));
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(n: u64) -> Receipt {
        Receipt { next_offset: n }
    }

    #[test]
    fn validation_table() {
        let mut p = Producers::default();
        assert_eq!(p.check("a", 0, 1, 0), Verdict::Gap { expected: 0 });
        assert_eq!(p.check("a", 3, 0, 0), Verdict::Accept);
        p.record("a", 3, 0, 0, r(10));
        assert_eq!(p.check("a", 3, 1, 0), Verdict::Accept);
        p.record("a", 3, 1, 0, r(20));
        let duplicate_of = |next_offset| Verdict::Duplicate {
            epoch: 3,
            last_seq: 1,
            receipt: Some(r(next_offset)),
        };
        assert_eq!(p.check("a", 3, 0, 0), duplicate_of(10));
        assert_eq!(p.check("a", 3, 1, 0), duplicate_of(20));
        assert_eq!(p.check("a", 3, 3, 0), Verdict::Gap { expected: 2 });
        assert_eq!(p.check("a", 2, 2, 0), Verdict::StaleEpoch { current: 3 });
        assert_eq!(p.check("a", 4, 1, 0), Verdict::NewEpochNotZero);
        assert_eq!(p.check("a", 4, 0, 0), Verdict::Accept);
    }

    #[test]
    fn receipts_leave_the_window_but_dedup_stays() {
        let mut p = Producers::default();
        for seq in 0..(RECEIPT_WINDOW as u64 + 10) {
            p.record("a", 0, seq, 0, r(seq + 1));
        }
        assert_eq!(
            p.check("a", 0, 0, 0),
            Verdict::Duplicate {
                epoch: 0,
                last_seq: 1033,
                receipt: None
            }
        );
        assert!(matches!(
            p.check("a", 0, 500, 0),
            Verdict::Duplicate {
                receipt: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn idle_producers_are_forgotten_after_seven_days() {
        let mut p = Producers::default();
        p.record("a", 5, 9, 0, r(1));
        assert_eq!(
            p.check("a", 5, 10, FORGET_AFTER_MS),
            Verdict::Gap { expected: 0 }
        );
        assert_eq!(p.check("a", 0, 0, FORGET_AFTER_MS), Verdict::Accept);
    }

    #[test]
    fn the_cap_evicts_only_producers_idle_an_hour() {
        let mut p = Producers::default();
        for i in 0..MAX_PRODUCERS {
            p.record(&format!("p{i}"), 0, 0, i as u64, r(1));
        }
        assert_eq!(p.check("new", 0, 0, 10_000), Verdict::Full);
        let later = EVICTABLE_IDLE_MS + 1;
        assert_eq!(p.check("new", 0, 0, later), Verdict::Accept);
        p.record("new", 0, 0, later, r(2));
        assert_eq!(p.len(), MAX_PRODUCERS);
        assert!(
            !p.by_id.contains_key("p0"),
            "the least recently seen went first"
        );
    }
}
