//! The recorded history of one run: every append and read a client made, with the times it was
//! sent and answered (nanoseconds since the run began) and what came back. The checker reads
//! only this and the final log; nothing in it depends on the cluster being up.
//!
//! Every append's body is one record, `TOKEN;`, where the token is unique in the run (`p3.17`:
//! client `p3`, its 17th operation). A producer's retries of one sequence number resend the
//! same token, so the final log shows whether a retry was applied twice.

use serde::Deserialize;
use serde::Serialize;

/// The separator after every record in the stream.
pub const SEP: char = ';';

/// What an append's client learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A `2xx`: the append is acknowledged and must be in the log exactly once.
    Acked,
    /// The last answer was a refusal marked `x-ursula-not-applied`: it must not be in the log.
    NotApplied,
    /// Anything else (a reset, a timeout, an unmarked `5xx`): it may be in the log at most once.
    Unknown,
}

/// A producer's identity on one append (`Producer-Id`, `-Epoch`, `-Seq`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerSeq {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// One append operation (a producer's sequence number with all its retries counts as one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Append {
    pub client: String,
    pub token: String,
    /// When the first attempt was sent.
    pub invoke_ns: u64,
    /// When the last answer came (for `Unknown`, when the client gave up).
    pub complete_ns: u64,
    pub outcome: Outcome,
    pub producer: Option<ProducerSeq>,
    /// How many requests it took.
    pub attempts: u32,
}

/// Which read path a read took.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadKind {
    /// A plain catch-up `GET` sent to one node (a follower may serve it).
    Catchup,
    /// A catch-up `GET` with `consistency=leader`.
    Leader,
    /// One answer of a `live=long-poll` tail.
    LongPoll,
    /// One data event and the control event after it on a `live=sse` tail.
    Sse,
}

/// One answered read: the bytes from `from` and the `Stream-Next-Offset` after them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// The reading client; a tail's reads are listed in the order it made them.
    pub reader: String,
    pub kind: ReadKind,
    /// The node (or gateway) it was sent to.
    pub target: String,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    /// The byte offset the read asked for.
    pub from: u64,
    pub data: String,
    /// `Stream-Next-Offset`.
    pub next: u64,
    /// Whether the answer said `Stream-Up-To-Date: true`.
    pub up_to_date: bool,
}

/// A read refused with `416`: the node said the offset is past the stream's tail. A client
/// asks only for offsets an earlier answer showed to exist, so one inside the final log is an
/// anomaly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub reader: String,
    pub target: String,
    pub invoke_ns: u64,
    pub from: u64,
}

/// A whole run's history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub appends: Vec<Append>,
    pub reads: Vec<Read>,
    #[serde(default)]
    pub refused: Vec<Refused>,
    /// The stream as read from the leader once every fault healed.
    pub final_log: String,
}

/// Splits a log into its records with each one's byte offset; a trailing piece without a
/// separator (which no whole append leaves) is returned as a record too, so it is reported.
pub fn records(log: &str) -> Vec<(u64, &str)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for piece in log.split_inclusive(SEP) {
        out.push((at as u64, piece.strip_suffix(SEP).unwrap_or(piece)));
        at += piece.len();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_their_offsets_and_a_torn_tail_is_kept() {
        assert_eq!(
            records("a.1;b.22;c"),
            vec![(0, "a.1"), (4, "b.22"), (9, "c")]
        );
        assert!(records("").is_empty());
    }
}
