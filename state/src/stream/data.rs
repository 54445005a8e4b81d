//! A stream's stored bytes: the hot ring (contiguous in-memory segments addressed by absolute
//! offset) and, below it, the cold chunks: ranges already uploaded to the object store.
//!
//! Small appends are packed into shared segments so a stream of many tiny messages does not
//! pay an allocation per message; large appends get a segment of their own.

use std::collections::VecDeque;
use std::sync::Arc;

/// A range of the stream stored in an object: stream bytes `[start, end)` are the object's
/// bytes `[at, at + end - start)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ColdChunk {
    pub start: u64,
    pub end: u64,
    pub object: Arc<str>,
    pub at: u64,
    /// Whether `object` holds this stream's bytes alone (a direct flush or a compaction's
    /// output), so it can move into an index page. A packed object is shared by the streams
    /// of one flush; chunks of older builds decode as packed. Last and left out while false, so
    /// a state without owned chunks encodes as older builds wrote it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub owned: bool,
}

pub use super::page::ColdPiece;

/// What a read of `[from, end)` needs: object ranges first, then hot bytes.
#[derive(Debug, Default, Clone)]
pub struct ReadPlan {
    /// The part of the cold range that lives in index pages, first.
    pub paged: Option<super::page::Paged>,
    pub cold: Vec<ColdPiece>,
    pub cold_len: u64,
    pub hot: Vec<u8>,
}

impl ReadPlan {
    pub fn len(&self) -> u64 {
        self.cold_len + self.hot.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Appends are packed into one segment until it would pass this size.
const SEGMENT_BYTES: usize = 1 << 20;

#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct StreamData {
    /// Offset of the first byte of `segments[0]`.
    pub(super) base: u64,
    /// Shared so that cloning the state for a snapshot costs reference counts, not a copy of
    /// the hot window; the growing last segment is copied on write while a clone holds it.
    #[serde(with = "byte_segments")]
    pub(super) segments: VecDeque<Arc<Vec<u8>>>,
    /// Offset after the last stored byte.
    pub(super) tail: u64,
    /// Flushed ranges not yet in an index page, in offset order; the last one ends where the
    /// hot ring starts (`base`), unless retention has moved past them.
    #[serde(default)]
    pub(super) cold: Vec<ColdChunk>,
    /// When the oldest byte still hot was appended (unix ms, the command's clock).
    #[serde(default)]
    pub(super) hot_since_ms: Option<u64>,
    /// The cold history below `cold`, in index pages (absent until the first page is sealed;
    /// last and left out while absent, as for every field added after the first format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) index: Option<super::page::ColdIndex>,
}

/// Segments as MessagePack binaries: serde's default writes each byte as its own integer, which
/// makes a snapshot of a large hot window cost its core a long stall (docs/dev/speed-log.md,
/// "Earlier measurements the code relies on"). Reading still accepts the integer arrays older
/// snapshots hold.
mod byte_segments {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use serde::Deserialize;
    use serde::Deserializer;
    use serde::Serializer;

    pub fn serialize<S: Serializer>(
        segs: &VecDeque<Arc<Vec<u8>>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(segs.iter().map(|b| serde_bytes::Bytes::new(b)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<VecDeque<Arc<Vec<u8>>>, D::Error> {
        let bufs = Vec::<serde_bytes::ByteBuf>::deserialize(d)?;
        Ok(bufs.into_iter().map(|b| Arc::new(b.into_vec())).collect())
    }
}

impl StreamData {
    pub fn tail(&self) -> u64 {
        self.tail
    }

    /// First offset held in memory; below it, bytes are cold (or trimmed).
    pub fn hot_start(&self) -> u64 {
        self.base
    }

    /// Payload bytes not yet flushed to the cold tier.
    pub fn hot_len(&self) -> u64 {
        self.tail - self.base
    }

    pub fn hot_since_ms(&self) -> Option<u64> {
        self.hot_since_ms
    }

    pub fn cold_chunks(&self) -> &[ColdChunk] {
        &self.cold
    }

    /// Appends at `now_ms` (the command's clock, so every replica ages its hot bytes alike).
    pub fn append_at(&mut self, bytes: &[u8], now_ms: u64) {
        if !bytes.is_empty() && self.base == self.tail {
            self.hot_since_ms = Some(now_ms);
        }
        self.append(bytes);
    }

    pub fn append(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let fits = self
            .segments
            .back()
            .is_some_and(|last| last.len() + bytes.len() <= SEGMENT_BYTES);
        match self.segments.back_mut() {
            Some(last) if fits => Arc::make_mut(last).extend_from_slice(bytes),
            _ => self.segments.push_back(Arc::new(bytes.to_vec())),
        }
        self.tail += bytes.len() as u64;
    }

    /// Plans a read of `[from, min(from + max, tail))`: the object ranges of its cold part
    /// and a copy of its hot part. `from` must not be below the retained offset.
    pub fn plan(&self, from: u64, max: u64) -> ReadPlan {
        let end = self.tail.min(from.saturating_add(max));
        let mut plan = ReadPlan::default();
        if from < self.base {
            let cold_end = end.min(self.base);
            if let Some(ix) = self.index.as_ref().filter(|ix| from < ix.end()) {
                let paged_end = cold_end.min(ix.end());
                plan.paged = Some(super::page::Paged {
                    prefix: ix.prefix.clone(),
                    id_incarnation: ix.incarnation,
                    page_bytes: ix.page_bytes,
                    range: from..paged_end,
                });
                plan.cold_len += paged_end - from;
            }
            for c in &self.cold {
                if c.end <= from || c.start >= cold_end {
                    continue;
                }
                let lo = from.max(c.start);
                let hi = cold_end.min(c.end);
                plan.cold.push(ColdPiece {
                    object: c.object.clone(),
                    range: c.at + (lo - c.start)..c.at + (hi - c.start),
                });
                plan.cold_len += hi - lo;
            }
        }
        if end > self.base {
            plan.hot = self.read(from.max(self.base), end - from.max(self.base));
        }
        plan
    }

    /// Records that `[start, end)` now lives in `object` at `at`, and frees those hot bytes.
    /// Refused (false) unless the range starts exactly where the hot ring does: a flush
    /// planned before another flush or a retention advance no longer fits.
    pub fn flushed(
        &mut self,
        start: u64,
        end: u64,
        (object, at, owned): (Arc<str>, u64, bool),
        now_ms: u64,
    ) -> bool {
        if start != self.base || end <= start || end > self.tail {
            return false;
        }
        self.cold.push(ColdChunk {
            start,
            end,
            object,
            at,
            owned,
        });
        self.drop_hot_below(end);
        self.hot_since_ms = (self.base < self.tail).then_some(now_ms);
        true
    }

    /// Places an append staged in the cold tier: its object holds the hot ring as the leader
    /// read it and then the appended bytes, so it becomes one owned chunk up to the new tail
    /// and nothing stays hot. Refused (false), changing nothing, unless the hot ring is still
    /// exactly `[hot_from, hot_from + hot_len)`: within one incarnation bytes never change, so
    /// equal bounds mean equal bytes.
    pub fn place_external(&mut self, x: &super::command::ExternalBody) -> bool {
        if x.len == 0 || self.base != x.hot_from || self.tail != x.hot_from + x.hot_len {
            return false;
        }
        let end = self.tail + x.len;
        self.cold.push(ColdChunk {
            start: x.hot_from,
            end,
            object: x.object.clone(),
            at: 0,
            owned: true,
        });
        self.segments.clear();
        self.base = end;
        self.tail = end;
        self.hot_since_ms = None;
        true
    }

    /// Frees hot bytes below `offset`, splitting a segment when needed.
    fn drop_hot_below(&mut self, offset: u64) {
        self.trim_below(offset);
        if let Some(first) = self.segments.front_mut()
            && self.base < offset
        {
            let cut = (offset - self.base) as usize;
            let first = Arc::make_mut(first);
            first.drain(..cut.min(first.len()));
            first.shrink_to_fit();
            self.base = offset;
        }
    }

    /// Forgets cold chunks wholly below `offset` (retention) and returns their objects.
    pub fn forget_cold_below(&mut self, offset: u64) -> Vec<Arc<str>> {
        let keep = self
            .cold
            .iter()
            .position(|c| c.end > offset)
            .unwrap_or(self.cold.len());
        self.cold.drain(..keep).map(|c| c.object).collect()
    }

    /// The objects this stream's cold chunks live in.
    pub fn objects(&self) -> impl Iterator<Item = &Arc<str>> {
        self.cold.iter().map(|c| &c.object)
    }

    /// Copies `[from, min(from + max, tail))` of the hot ring. `from` must be within
    /// `[base, tail]`; below `base` the bytes are cold and [`plan`](Self::plan) finds them.
    pub fn read(&self, from: u64, max: u64) -> Vec<u8> {
        let end = self.tail.min(from.saturating_add(max));
        let mut out = Vec::with_capacity(end.saturating_sub(from) as usize);
        let mut seg_start = self.base;
        for seg in &self.segments {
            let seg_end = seg_start + seg.len() as u64;
            if seg_end > from && seg_start < end {
                let lo = (from.max(seg_start) - seg_start) as usize;
                let hi = (end.min(seg_end) - seg_start) as usize;
                out.extend_from_slice(&seg[lo..hi]);
            }
            if seg_end >= end {
                break;
            }
            seg_start = seg_end;
        }
        out
    }

    /// The byte just before `offset`, if it is still in memory.
    pub fn byte_before(&self, offset: u64) -> Option<u8> {
        if offset == 0 || offset <= self.base || offset > self.tail {
            return None;
        }
        self.read(offset - 1, 1).first().copied()
    }

    /// Frees whole segments that lie entirely below `offset`.
    pub fn trim_below(&mut self, offset: u64) {
        while let Some(first) = self.segments.front() {
            let end = self.base + first.len() as u64;
            if end > offset {
                break;
            }
            self.base = end;
            self.segments.pop_front();
        }
    }

    /// Whether `offset` is where a cold chunk starts or ends: flushes cut at append
    /// boundaries, so on a JSON stream such an offset is a message boundary. A page's edge
    /// that split a chunk is not one; edges inside the pages are not known here.
    pub fn is_chunk_edge(&self, offset: u64) -> bool {
        if let Some(ix) = &self.index
            && offset <= ix.end()
        {
            return offset == ix.end() && !ix.split && offset > 0;
        }
        self.cold
            .iter()
            .any(|c| c.start == offset || c.end == offset)
    }

    /// Bytes held in memory, for metrics.
    pub fn held_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len() as u64).sum()
    }

    /// Whether the stored layout is one this build could have written: the hot segments
    /// cover exactly `[base, tail)`, and the cold chunks are non-empty, ordered, disjoint and
    /// below the hot ring. A backup's deep check runs it on every stream it holds.
    pub fn check(&self) -> Result<(), LayoutError> {
        if self.base > self.tail {
            return Err(LayoutError::HotPastTail {
                base: self.base,
                tail: self.tail,
            });
        }
        if self.held_bytes() != self.tail - self.base {
            return Err(LayoutError::HotSize {
                held: self.held_bytes(),
                base: self.base,
                tail: self.tail,
            });
        }
        let mut end = self.index.as_ref().map_or(0, |ix| ix.end());
        if let Some(ix) = &self.index
            && (ix.first > ix.sealed || ix.page_bytes == 0 || ix.end() > self.base)
        {
            return Err(LayoutError::Index {
                first: ix.first,
                sealed: ix.sealed,
                page_bytes: ix.page_bytes,
                base: self.base,
            });
        }
        for c in &self.cold {
            if c.start >= c.end || c.start < end || c.end > self.base {
                return Err(LayoutError::ColdChunk {
                    start: c.start,
                    end: c.end,
                    object: c.object.clone(),
                    base: self.base,
                });
            }
            end = c.end;
        }
        Ok(())
    }
}

/// A run of a stream's unindexed chunks that compaction rewrites into one owned object:
/// stream bytes `[start, end)`, read from `pieces` in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionRun {
    /// The page span the run was chosen by (the stream's own once it has an index).
    pub page_bytes: u64,
    pub start: u64,
    pub end: u64,
    pub pieces: Vec<ColdPiece>,
    /// A single packed chunk: the object may be adopted as it is when nothing else names it.
    pub single: Option<(Arc<str>, u64)>,
}

/// When compaction rewrites a stream's chunks (docs/cold-tier.md, "Compaction").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionLimits {
    /// Packed slices a stream may hold before they are rewritten.
    pub packed_slices: usize,
    /// Unindexed chunks one page may hold before its small ones merge.
    pub page_chunks: usize,
}

impl CompactionLimits {
    pub const SPEC: CompactionLimits = CompactionLimits {
        packed_slices: 64,
        page_chunks: 64,
    };
}

/// The cold index: sealing pages, compacting chunks, collecting pages.
impl StreamData {
    pub fn index(&self) -> Option<&super::page::ColdIndex> {
        self.index.as_ref()
    }

    fn page_bytes_or(&self, page_bytes: u64) -> u64 {
        self.index
            .as_ref()
            .map_or(page_bytes, |ix| ix.page_bytes)
            .max(1)
    }

    /// The next page that can be sealed, built from the unindexed chunks: the page of the
    /// first chunk, once the chunks reach its end and every chunk starting in it is owned.
    pub fn sealable(&self, incarnation: u64, page_bytes: u64) -> Option<super::page::Page> {
        let pb = self.page_bytes_or(page_bytes);
        let first = self.cold.first()?;
        let page = first.start / pb;
        let hi = (page + 1) * pb;
        if let Some(ix) = &self.index
            && page > ix.sealed
            && ix.first < ix.sealed
        {
            // Retention passed pages still kept: they go first, so `[first, sealed)` stays
            // a run of pages that exist.
            return None;
        }
        if self.cold.last()?.end < hi {
            return None;
        }
        let mut entries = Vec::new();
        let mut last_continues = false;
        for c in self.cold.iter().take_while(|c| c.start < hi) {
            if !c.owned {
                return None;
            }
            entries.push(super::page::PageEntry {
                start: c.start,
                end: c.end.min(hi),
                object: c.object.clone(),
                at: c.at,
            });
            last_continues = c.end > hi;
        }
        let first_continues = self
            .index
            .as_ref()
            .is_some_and(|ix| ix.split && first.start == ix.end());
        Some(super::page::Page {
            incarnation,
            page,
            page_bytes: pb,
            first_continues,
            last_continues,
            entries,
        })
    }

    /// Seals `page` under `prefix`: its chunks leave the state, a chunk crossing its end is
    /// split there. Refused (false) unless it is what [`sealable`](Self::sealable) offers.
    pub(super) fn seal(
        &mut self,
        incarnation: u64,
        page: u64,
        page_bytes: u64,
        prefix: Arc<str>,
    ) -> bool {
        if self
            .index
            .as_ref()
            .is_some_and(|ix| ix.page_bytes != page_bytes || ix.prefix != prefix)
        {
            return false;
        }
        let Some(p) = self.sealable(incarnation, page_bytes) else {
            return false;
        };
        if p.page != page {
            return false;
        }
        let hi = (page + 1) * page_bytes;
        let keep = self
            .cold
            .iter()
            .position(|c| c.end > hi)
            .unwrap_or(self.cold.len());
        self.cold.drain(..keep);
        let mut split = false;
        if let Some(c) = self.cold.first_mut()
            && c.start < hi
        {
            c.at += hi - c.start;
            c.start = hi;
            split = true;
        }
        let first = match &self.index {
            Some(ix) if ix.first < ix.sealed => ix.first,
            _ => page,
        };
        self.index = Some(super::page::ColdIndex {
            prefix,
            incarnation,
            page_bytes,
            first,
            sealed: page + 1,
            split,
        });
        true
    }

    /// The run compaction should rewrite next, if any: in the first page (by chunk start) that
    /// is complete and still holds packed slices, that holds too many chunks, or once the
    /// stream holds too many packed slices.
    pub fn compaction_run(
        &self,
        page_bytes: u64,
        limits: CompactionLimits,
    ) -> Option<CompactionRun> {
        let pb = self.page_bytes_or(page_bytes);
        let packed = self.cold.iter().filter(|c| !c.owned).count();
        let last_end = self.cold.last()?.end;
        let small = (pb / 8).max(1);
        // The remainder of a chunk split by the last seal shares its object with that page:
        // it is never rewritten (its object must outlive the page).
        let mut i = usize::from(self.split_remainder());
        while i < self.cold.len() {
            let page = self.cold[i].start / pb;
            let n = self.cold[i..]
                .iter()
                .take_while(|c| c.start / pb == page)
                .count();
            let group = &self.cold[i..i + n];
            let complete = last_end >= (page + 1) * pb;
            let has_packed = group.iter().any(|c| !c.owned);
            let due = (has_packed && (complete || packed >= limits.packed_slices))
                || n > limits.page_chunks;
            if due && let Some(run) = pick_run(group, small, complete) {
                return Some(CompactionRun {
                    page_bytes: pb,
                    ..run
                });
            }
            i += n;
        }
        None
    }

    /// Replaces the chunks `[start, end)` by one owned chunk in `object` at `at`; returns the
    /// replaced chunks. `None` when the run is not one [`compaction_run`](Self::compaction_run)
    /// could have offered (moved, indexed, or a sealable page without packed slices).
    pub(super) fn compact(
        &mut self,
        page_bytes: u64,
        start: u64,
        end: u64,
        object: Arc<str>,
        at: u64,
    ) -> Option<Vec<ColdChunk>> {
        if self
            .index
            .as_ref()
            .is_some_and(|ix| ix.page_bytes != page_bytes)
            || page_bytes == 0
        {
            return None;
        }
        let i = self.cold.iter().position(|c| c.start == start)?;
        let j = self.cold.iter().position(|c| c.end == end)?;
        if j < i || (i == 0 && self.split_remainder()) {
            return None;
        }
        let page = start / page_bytes;
        let run = &self.cold[i..=j];
        if run.iter().any(|c| c.start / page_bytes != page) {
            return None;
        }
        let complete = self.cold.last().map_or(0, |c| c.end) >= (page + 1) * page_bytes;
        if complete && run.iter().all(|c| c.owned) {
            return None;
        }
        let merged = ColdChunk {
            start,
            end,
            object,
            at,
            owned: true,
        };
        Some(self.cold.splice(i..=j, [merged]).collect())
    }

    /// Whether the first unindexed chunk is what a seal left of a chunk it split.
    fn split_remainder(&self) -> bool {
        match (&self.index, self.cold.first()) {
            (Some(ix), Some(c)) => ix.split && c.start == ix.end(),
            _ => false,
        }
    }

    /// Pages `[first, below)` that retention at `retained` lets go, if any.
    pub fn droppable_pages(&self, retained: u64) -> Option<std::ops::Range<u64>> {
        let ix = self.index.as_ref()?;
        let below = ix.sealed.min(retained / ix.page_bytes);
        (below > ix.first).then_some(ix.first..below)
    }

    /// Forgets pages below `below`; false when they are not all droppable.
    pub(super) fn drop_pages(&mut self, prefix: &str, below: u64, retained: u64) -> bool {
        let ok = self
            .droppable_pages(retained)
            .is_some_and(|r| below <= r.end)
            && self
                .index
                .as_ref()
                .is_some_and(|ix| &*ix.prefix == prefix && below > ix.first);
        if let (true, Some(ix)) = (ok, self.index.as_mut()) {
            ix.first = below;
        }
        ok
    }

    /// Takes the cold history out of a stream that goes: its unindexed chunks' objects and
    /// its index, if any.
    pub(super) fn take_cold(&mut self) -> (Vec<ColdChunk>, Option<super::page::ColdIndex>) {
        (std::mem::take(&mut self.cold), self.index.take())
    }
}

/// The first run in `group` (chunks starting in one page) worth rewriting: consecutive chunks
/// each packed or smaller than `small`; in a complete page it must hold a packed slice.
fn pick_run(group: &[ColdChunk], small: u64, complete: bool) -> Option<CompactionRun> {
    let mut i = 0;
    while i < group.len() {
        let n = group[i..]
            .iter()
            .take_while(|c| !c.owned || c.end - c.start < small)
            .count();
        if n == 0 {
            i += 1;
            continue;
        }
        let run = &group[i..i + n];
        let has_packed = run.iter().any(|c| !c.owned);
        if (n >= 2 && (!complete || has_packed)) || (n == 1 && has_packed) {
            let single = (n == 1).then(|| (run[0].object.clone(), run[0].at));
            return Some(CompactionRun {
                page_bytes: 0,
                start: run[0].start,
                end: run[n - 1].end,
                pieces: run
                    .iter()
                    .map(|c| ColdPiece {
                        object: c.object.clone(),
                        range: c.at..c.at + (c.end - c.start),
                    })
                    .collect(),
                single,
            });
        }
        i += n;
    }
    None
}

/// A stored byte layout this build could not have written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("hot ring starts at {base} past the tail {tail}")]
    HotPastTail { base: u64, tail: u64 },
    #[error("hot segments hold {held} bytes for the range [{base}, {tail})")]
    HotSize { held: u64, base: u64, tail: u64 },
    #[error(
        "cold chunk [{start}, {end}) in {object} overlaps, is empty or reaches the hot ring at {base}"
    )]
    ColdChunk {
        start: u64,
        end: u64,
        object: Arc<str>,
        base: u64,
    },
    #[error(
        "cold index pages [{first}, {sealed}) of {page_bytes} bytes are out of order or reach the hot ring at {base}"
    )]
    Index {
        first: u64,
        sealed: u64,
        page_bytes: u64,
        base: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_encode_as_binaries_and_old_integer_arrays_still_decode() {
        let mut d = StreamData::default();
        d.append(&[200u8; 1000]);
        let now = rmp_serde::to_vec(&d).expect("encode");
        assert!(
            now.len() < 1100,
            "one binary, not 1000 integers: {}",
            now.len()
        );
        let back: StreamData = rmp_serde::from_slice(&now).expect("decode");
        assert_eq!(back.read(0, 2000), vec![200u8; 1000]);
        // What serde's default wrote before: each byte its own integer.
        #[derive(serde::Serialize)]
        struct Old {
            base: u64,
            segments: VecDeque<Vec<u8>>,
            tail: u64,
        }
        let old = Old {
            base: 0,
            segments: VecDeque::from([vec![200u8; 3]]),
            tail: 3,
        };
        let bytes = rmp_serde::to_vec(&old).expect("encode old");
        let back: StreamData = rmp_serde::from_slice(&bytes).expect("decode old");
        assert_eq!(back.read(0, 10), vec![200u8; 3]);
    }

    #[test]
    fn reads_span_segments_at_any_split() {
        let mut d = StreamData::default();
        let big = vec![7u8; SEGMENT_BYTES - 3];
        d.append(&big);
        d.append(b"abcdef");
        d.append(b"gh");
        assert_eq!(d.tail(), (SEGMENT_BYTES + 5) as u64);
        let at = (SEGMENT_BYTES - 4) as u64;
        assert_eq!(d.read(at, 5), vec![7, b'a', b'b', b'c', b'd']);
        assert_eq!(d.read(at + 1, 100), b"abcdefgh".to_vec());
        assert_eq!(d.byte_before(d.tail()), Some(b'h'));
        d.trim_below(at + 2);
        assert_eq!(d.read(at + 2, 3), b"bcd".to_vec());
    }

    #[test]
    fn a_read_plan_spans_cold_chunks_and_the_hot_ring_at_any_split() {
        let mut d = StreamData::default();
        d.append_at(b"0123456789", 1);
        assert!(d.flushed(0, 4, (Arc::from("a"), 100, false), 2));
        assert!(d.flushed(4, 7, (Arc::from("b"), 0, false), 3));
        d.append_at(b"ab", 4);
        assert_eq!((d.hot_start(), d.hot_len(), d.tail()), (7, 5, 12));
        let p = d.plan(2, 100);
        assert_eq!(
            p.cold,
            vec![
                ColdPiece {
                    object: Arc::from("a"),
                    range: 102..104
                },
                ColdPiece {
                    object: Arc::from("b"),
                    range: 0..3
                },
            ]
        );
        assert_eq!(p.hot, b"789ab".to_vec());
        assert_eq!(p.len(), 10);
        // Capped inside the cold part: no hot bytes.
        let p = d.plan(5, 1);
        assert_eq!(p.cold.len(), 1);
        assert_eq!(p.cold[0].range, 1..2);
        assert!(p.hot.is_empty());
        assert!(d.is_chunk_edge(4) && d.is_chunk_edge(7) && !d.is_chunk_edge(5));
    }

    #[test]
    fn a_flush_that_no_longer_starts_at_the_hot_ring_is_refused() {
        let mut d = StreamData::default();
        d.append_at(b"abcdef", 1);
        assert!(d.flushed(0, 3, (Arc::from("x"), 0, false), 2));
        assert!(
            !d.flushed(0, 3, (Arc::from("y"), 0, false), 2),
            "planned before the first flush"
        );
        assert!(
            !d.flushed(3, 9, (Arc::from("y"), 0, false), 2),
            "past the tail"
        );
        assert_eq!(d.read(3, 10), b"def".to_vec());
        assert_eq!(d.forget_cold_below(3), vec![Arc::<str>::from("x")]);
        assert!(d.cold_chunks().is_empty());
    }
}
