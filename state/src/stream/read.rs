//! Read views over a group's state. Reads change nothing; a read that is due to renew a sliding
//! TTL says so, and the caller applies a `Renew` command.

use bytes::Bytes;
use ursula_protocol::offset::ReadFrom;

use super::command::Lifetime;
use super::command::Refusal;
use super::data::ColdPiece;
use super::data::ReadPlan;
use super::machine::GroupState;
use super::machine::Stream;
use super::machine::check_incarnation;
use super::page::Paged;

/// What a catch-up read saw.
#[derive(Debug, Clone)]
pub struct ReadView {
    pub incarnation: u64,
    pub content_type: String,
    pub json: bool,
    /// The resolved starting offset.
    pub start: u64,
    /// Object ranges to fetch for the cold part, which comes before `data`; empty once
    /// fetched (the HTTP layer fills `data` before using the view).
    pub cold: Vec<ColdPiece>,
    /// The part of the cold range, before `cold`, that the stream's index pages locate.
    pub paged: Option<Paged>,
    pub data: Bytes,
    /// Offset after `data`.
    pub next: u64,
    pub tail: u64,
    pub closed: bool,
    pub renew_due: bool,
}

impl ReadView {
    pub fn up_to_date(&self) -> bool {
        self.next == self.tail
    }
}

#[derive(Debug, Clone)]
pub struct HeadView {
    pub incarnation: u64,
    pub content_type: String,
    pub tail: u64,
    pub closed: bool,
    pub retained: u64,
    /// First offset still in memory.
    pub hot_start: u64,
    pub snapshot: Option<(u64, String)>,
    pub lifetime: Option<Lifetime>,
}

#[derive(Debug, Clone)]
pub struct SnapshotView {
    pub incarnation: u64,
    pub offset: u64,
    pub content_type: String,
    pub digest: String,
    pub body: Bytes,
    /// The body's object when it lives in the cold tier (then `body` is empty).
    pub cold: Option<std::sync::Arc<str>>,
    pub tail: u64,
    pub renew_due: bool,
}

#[derive(Debug, Clone)]
pub struct BootstrapView {
    pub incarnation: u64,
    pub content_type: String,
    pub json: bool,
    /// Offset, content type and body of the latest snapshot.
    pub snapshot: Option<(u64, String, Bytes)>,
    /// The snapshot body's object when it lives in the cold tier (then its body is empty).
    pub snapshot_cold: Option<std::sync::Arc<str>>,
    /// Where updates start: the snapshot offset, else the retained offset.
    pub start: u64,
    /// Object ranges to fetch before `updates`, as in [`ReadView::cold`]. When set, `updates`
    /// is not yet cut at a JSON message boundary: the HTTP layer cuts after fetching.
    pub cold: Vec<ColdPiece>,
    /// The paged part of the cold window, before `cold`, as in [`ReadView::paged`].
    pub paged: Option<Paged>,
    /// The cap on update bytes the cut applies.
    pub max: u64,
    pub updates: Bytes,
    pub tail: u64,
    pub closed: bool,
    pub renew_due: bool,
}

fn renew_due(s: &Stream, now_ms: u64) -> bool {
    match s.lifetime {
        // At most once per quarter of the TTL.
        Some(Lifetime::Ttl(secs)) => {
            now_ms.saturating_sub(s.renewed_ms) >= secs.saturating_mul(250)
        }
        _ => false,
    }
}

impl GroupState {
    fn live(&self, key: &str, now_ms: u64) -> Result<&Stream, Refusal> {
        self.get(key, now_ms).ok_or(Refusal::NotFound)
    }

    /// Resolves `from` to a concrete offset, refusing trimmed and future offsets. Checked
    /// before the incarnation precondition: a 410 or 416 stays one with the header.
    pub fn resolve(&self, key: &str, from: ReadFrom, now_ms: u64) -> Result<u64, Refusal> {
        let s = self.live(key, now_ms)?;
        let at = match from {
            ReadFrom::Start => 0,
            ReadFrom::Now => s.tail(),
            ReadFrom::At(o) => o.0,
        };
        if at < s.retained {
            return Err(Refusal::Gone {
                retained: s.retained,
            });
        }
        if at > s.tail() {
            return Err(Refusal::BeyondTail { tail: s.tail() });
        }
        Ok(at)
    }

    pub fn read(
        &self,
        key: &str,
        from: ReadFrom,
        max: u64,
        incarnation: Option<u64>,
        now_ms: u64,
    ) -> Result<ReadView, Refusal> {
        let start = self.resolve(key, from, now_ms)?;
        let s = self.live(key, now_ms)?;
        check_incarnation(s, incarnation)?;
        let plan = if start < s.tail() {
            s.data.plan(start, max)
        } else {
            ReadPlan::default()
        };
        let next = start + plan.len();
        Ok(ReadView {
            incarnation: s.incarnation,
            content_type: s.content_type.to_string(),
            json: s.json,
            start,
            cold: plan.cold,
            paged: plan.paged,
            data: Bytes::from(plan.hot),
            next,
            tail: s.tail(),
            closed: s.closed,
            renew_due: renew_due(s, now_ms),
        })
    }

    pub fn head(
        &self,
        key: &str,
        incarnation: Option<u64>,
        now_ms: u64,
    ) -> Result<HeadView, Refusal> {
        let s = self.live(key, now_ms)?;
        check_incarnation(s, incarnation)?;
        Ok(HeadView {
            incarnation: s.incarnation,
            content_type: s.content_type.to_string(),
            tail: s.tail(),
            closed: s.closed,
            retained: s.retained,
            hot_start: s.data.hot_start(),
            snapshot: s
                .snapshot
                .as_ref()
                .map(|snap| (snap.offset, snap.digest.clone())),
            lifetime: s.lifetime,
        })
    }

    pub fn expires_ms(&self, key: &str, now_ms: u64) -> Option<u64> {
        self.get(key, now_ms).and_then(|s| s.expires_ms)
    }

    pub fn read_snapshot(
        &self,
        key: &str,
        offset: u64,
        incarnation: Option<u64>,
        now_ms: u64,
    ) -> Result<SnapshotView, Refusal> {
        let s = self.live(key, now_ms)?;
        let snap = s
            .snapshot
            .as_ref()
            .filter(|snap| snap.offset == offset)
            .ok_or(Refusal::NotFound)?;
        check_incarnation(s, incarnation)?;
        Ok(SnapshotView {
            incarnation: s.incarnation,
            offset: snap.offset,
            content_type: snap.content_type.clone(),
            digest: snap.digest.clone(),
            body: snap.body.clone(),
            cold: snap.cold.clone(),
            tail: s.tail(),
            renew_due: renew_due(s, now_ms),
        })
    }

    /// The snapshot plus updates after it, at most `max` update bytes, cut by the bootstrap rules.
    pub fn bootstrap(
        &self,
        key: &str,
        max: u64,
        incarnation: Option<u64>,
        now_ms: u64,
    ) -> Result<BootstrapView, Refusal> {
        let s = self.live(key, now_ms)?;
        check_incarnation(s, incarnation)?;
        let start = s
            .snapshot
            .as_ref()
            .map_or(s.retained, |snap| snap.offset.max(s.retained));
        let available = s.tail() - start;
        let (cold, paged, updates) = if start < s.data.hot_start() && available > 0 {
            // Part of the updates is cold: fetch the window (to the end of the first chunk
            // at least, which ends on an append boundary) and let the caller cut it. In the
            // paged history chunk ends are not in the state: the caller reads on until a
            // message ends.
            let paged_history = s.data.index().is_some_and(|ix| start < ix.end());
            let first_end = s
                .data
                .cold_chunks()
                .iter()
                .find(|c| c.end > start)
                .map_or(s.tail(), |c| c.end);
            let window = if paged_history {
                max.min(available)
            } else {
                max.max(first_end - start).min(available)
            };
            let plan = s.data.plan(start, window);
            (plan.cold, plan.paged, plan.hot)
        } else {
            let updates = if available == 0 {
                Vec::new()
            } else if available <= max {
                s.data.read(start, available)
            } else if s.json {
                // Stop at the last message boundary within the cap, but always send one message.
                let window = s.data.read(start, max);
                match window.iter().rposition(|b| *b == b'\n') {
                    Some(last_lf) => window[..=last_lf].to_vec(),
                    None => {
                        let rest = s.data.read(start, available);
                        let end = rest
                            .iter()
                            .position(|b| *b == b'\n')
                            .map_or(rest.len(), |p| p + 1);
                        rest[..end].to_vec()
                    }
                }
            } else {
                Vec::new()
            };
            (Vec::new(), None, updates)
        };
        Ok(BootstrapView {
            incarnation: s.incarnation,
            content_type: s.content_type.to_string(),
            json: s.json,
            snapshot: s
                .snapshot
                .as_ref()
                .map(|snap| (snap.offset, snap.content_type.clone(), snap.body.clone())),
            snapshot_cold: s.snapshot.as_ref().and_then(|snap| snap.cold.clone()),
            start,
            cold,
            paged,
            max,
            updates: Bytes::from(updates),
            tail: s.tail(),
            closed: s.closed,
            renew_due: renew_due(s, now_ms),
        })
    }
}
