//! A stream's stored bytes: contiguous segments addressed by absolute offset.
//!
//! Small appends are packed into shared segments so a stream of many tiny messages does not
//! pay an allocation per message; large appends get a segment of their own.

use std::collections::VecDeque;

/// Appends are packed into one segment until it would pass this size.
const SEGMENT_BYTES: usize = 1 << 20;

#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct StreamData {
    /// Offset of the first byte of `segments[0]`.
    base: u64,
    segments: VecDeque<Vec<u8>>,
    /// Offset after the last stored byte.
    tail: u64,
}

impl StreamData {
    pub fn tail(&self) -> u64 {
        self.tail
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
            Some(last) if fits => last.extend_from_slice(bytes),
            _ => self.segments.push_back(bytes.to_vec()),
        }
        self.tail += bytes.len() as u64;
    }

    /// Copies `[from, min(from + max, tail))`. `from` must be within `[base, tail]`.
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

    /// The byte just before `offset`, if it is still stored.
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

    /// Bytes held in memory, for metrics.
    pub fn held_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
