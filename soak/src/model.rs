//! What each stream must hold. Every body is generated from a seed, so the soak remembers a
//! few words per write, never the bytes: a read-back regenerates them.

use rand::RngCore;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// One acknowledged append (or snapshot body): `len` bytes from `seed`, at stream offset `start`.
#[derive(Debug, Clone, Copy)]
pub struct Piece {
    pub start: u64,
    pub seed: u64,
    pub len: u64,
}

impl Piece {
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len as usize];
        StdRng::seed_from_u64(self.seed).fill_bytes(&mut out);
        out
    }

    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// One stream slot: its current path, and what the stream holds from its retained offset on.
#[derive(Debug, Clone)]
pub struct StreamModel {
    pub bucket: String,
    pub name: String,
    /// The pieces at or above `retained` (those wholly below it are forgotten).
    pub pieces: Vec<Piece>,
    pub tail: u64,
    pub retained: u64,
    /// The last snapshot acknowledged: its offset and body.
    pub snapshot: Option<(u64, Piece)>,
    /// The next producer sequence number of this incarnation's producer.
    pub next_seq: u64,
    /// Incarnations so far (a delete and create makes a new one, with a new producer).
    pub incarnation: u32,
}

impl StreamModel {
    pub fn new(bucket: String, name: String) -> StreamModel {
        StreamModel {
            bucket,
            name,
            pieces: Vec::new(),
            tail: 0,
            retained: 0,
            snapshot: None,
            next_seq: 0,
            incarnation: 0,
        }
    }

    pub fn path(&self) -> String {
        format!("/{}/{}", self.bucket, self.name)
    }

    pub fn producer(&self) -> String {
        format!("soak-{}", self.incarnation)
    }

    /// Records an acknowledged append of `len` bytes from `seed`.
    pub fn appended(&mut self, seed: u64, len: u64) {
        self.pieces.push(Piece {
            start: self.tail,
            seed,
            len,
        });
        self.tail += len;
        self.next_seq += 1;
    }

    /// Records an acknowledged retention advance to `offset`.
    pub fn retained_to(&mut self, offset: u64) {
        self.retained = self.retained.max(offset);
        self.pieces.retain(|p| p.end() > self.retained);
    }

    /// Starts over after a delete: a new incarnation, empty.
    pub fn recreated(&mut self) {
        self.pieces.clear();
        self.tail = 0;
        self.retained = 0;
        self.snapshot = None;
        self.next_seq = 0;
        self.incarnation += 1;
    }

    /// Bytes a reader can still get: the retained range and the snapshot body.
    pub fn live_bytes(&self) -> u64 {
        self.tail - self.retained + self.snapshot.map_or(0, |(_, p)| p.len)
    }

    /// The expected bytes of `[from, from + len)`, generated piece by piece.
    pub fn expected(&self, from: u64, len: u64) -> Vec<u8> {
        let to = from + len;
        let mut out = Vec::with_capacity(len as usize);
        for p in self
            .pieces
            .iter()
            .filter(|p| p.end() > from && p.start < to)
        {
            let bytes = p.bytes();
            let lo = (from.max(p.start) - p.start) as usize;
            let hi = (to.min(p.end()) - p.start) as usize;
            out.extend_from_slice(&bytes[lo..hi]);
        }
        out
    }

    /// A retention target picked by `pick`: a piece boundary above the retained offset and at
    /// most the snapshot's offset (the server keeps retention at or below the latest
    /// snapshot), or the snapshot's offset itself. `None` without a snapshot above retention.
    pub fn boundary(&self, pick: u64) -> Option<u64> {
        let cap = self
            .snapshot
            .map(|(o, _)| o)
            .filter(|o| *o > self.retained)?;
        let mut starts: Vec<u64> = self
            .pieces
            .iter()
            .map(|p| p.start)
            .filter(|s| *s > self.retained && *s < cap)
            .collect();
        starts.push(cap);
        Some(starts[(pick % starts.len() as u64) as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_bytes_follow_the_pieces_across_any_split_and_retention_forgets_below() {
        let mut m = StreamModel::new("soak-b00".into(), "s0".into());
        m.appended(7, 10);
        m.appended(8, 5);
        m.appended(9, 20);
        let whole = m.expected(0, 35);
        assert_eq!(whole.len(), 35);
        assert_eq!(
            &whole[..10],
            &Piece {
                start: 0,
                seed: 7,
                len: 10
            }
            .bytes()[..]
        );
        assert_eq!(m.expected(8, 9), whole[8..17].to_vec());
        assert_eq!(m.boundary(0), None, "no snapshot: retention cannot move");
        m.snapshot = Some((
            15,
            Piece {
                start: 0,
                seed: 1,
                len: 3,
            },
        ));
        assert_eq!(m.boundary(0), Some(10));
        assert_eq!(m.boundary(1), Some(15));
        m.retained_to(15);
        assert_eq!(m.pieces.len(), 1);
        assert_eq!(m.expected(15, 20), whole[15..].to_vec());
        assert_eq!(m.live_bytes(), 23);
        assert_eq!(m.boundary(3), None, "retention is at the snapshot");
    }
}
