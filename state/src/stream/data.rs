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
}

/// A piece of a read that must be fetched from the object store: `object`'s bytes `range`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdPiece {
    pub object: Arc<str>,
    pub range: std::ops::Range<u64>,
}

/// What a read of `[from, end)` needs: object ranges first, then hot bytes.
#[derive(Debug, Default, Clone)]
pub struct ReadPlan {
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
    base: u64,
    /// Shared so that cloning the state for a snapshot costs reference counts, not a copy of
    /// the hot window; the growing last segment is copied on write while a clone holds it.
    #[serde(with = "byte_segments")]
    segments: VecDeque<Arc<Vec<u8>>>,
    /// Offset after the last stored byte.
    tail: u64,
    /// Flushed ranges in offset order; the last one ends where the hot ring starts (`base`),
    /// unless retention has moved past them.
    #[serde(default)]
    cold: Vec<ColdChunk>,
    /// When the oldest byte still hot was appended (unix ms, the command's clock).
    #[serde(default)]
    hot_since_ms: Option<u64>,
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
        object: Arc<str>,
        at: u64,
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
        });
        self.drop_hot_below(end);
        self.hot_since_ms = (self.base < self.tail).then_some(now_ms);
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
    /// boundaries, so on a JSON stream such an offset is a message boundary.
    pub fn is_chunk_edge(&self, offset: u64) -> bool {
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
        let mut end = 0u64;
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
        assert!(d.flushed(0, 4, Arc::from("a"), 100, 2));
        assert!(d.flushed(4, 7, Arc::from("b"), 0, 3));
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
        assert!(d.flushed(0, 3, Arc::from("x"), 0, 2));
        assert!(
            !d.flushed(0, 3, Arc::from("y"), 0, 2),
            "planned before the first flush"
        );
        assert!(!d.flushed(3, 9, Arc::from("y"), 0, 2), "past the tail");
        assert_eq!(d.read(3, 10), b"def".to_vec());
        assert_eq!(d.forget_cold_below(3), vec![Arc::<str>::from("x")]);
        assert!(d.cold_chunks().is_empty());
    }
}
