//! The history checker: reads one run's [`History`] and returns every anomaly it shows.
//!
//! The final log is the reference. Appends are checked against it (each acknowledged token
//! exactly once, no refused or unsent record, real-time order kept), and reads against it (each
//! read is a slice of it, a tail's reads follow on, an up-to-date leader read saw everything
//! acknowledged before it began). Positions in the log are byte offsets of a record's start; an
//! append "took effect" at its token's first occurrence, so a duplicate never hides a reorder.
//!
//! Everything here is linear or `n log n` in the history, so a long run stays cheap to check,
//! and nothing panics on odd input (offsets past the end, text that is not records, bytes that
//! are not on a `char` boundary): the point is to report a broken server, not to trip over it.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::Serialize;

use crate::history::{History, Outcome, Read, ReadKind, SEP, records};

/// Everything the checker found, and counts that say how much it had to look at.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub anomalies: Vec<Anomaly>,
    pub stats: Stats,
}

/// What the history held.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub acked: u64,
    pub not_applied: u64,
    pub unknown: u64,
    /// Unknown appends whose token is in the final log: they took effect after all.
    pub unknown_applied: u64,
    pub reads: u64,
    /// Records in the final log, a torn tail included.
    pub log_records: u64,
}

/// One violation of what the server promises.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Anomaly {
    /// An acknowledged append whose token is not (as a whole record) in the final log.
    Lost { token: String },
    /// A token that is in the final log more than once.
    Duplicated { token: String, count: u64 },
    /// An append refused as not applied whose token is in the final log.
    AppliedRefusal { token: String },
    /// A record in the final log that no append sent, or a torn record without its separator
    /// (which no append sent either, even if its text spells a token).
    Phantom {
        token: String,
        offset: u64,
        torn: bool,
    },
    /// `first` completed before `second` was sent, yet `second` is earlier in the log.
    RealTimeOrder {
        first: String,
        first_offset: u64,
        second: String,
        second_offset: u64,
    },
    /// A read whose bytes are not the final log's at its offset, or whose next offset does not
    /// follow them.
    NotAPrefix {
        reader: String,
        kind: ReadKind,
        target: String,
        from: u64,
        detail: String,
    },
    /// A tail read that did not start where the tail's previous read ended.
    TailGap {
        reader: String,
        expected_from: u64,
        got_from: u64,
    },
    /// An up-to-date leader read of the whole stream that lacks an append acknowledged before
    /// the read was sent.
    StaleLeaderRead {
        reader: String,
        target: String,
        token: String,
    },
    /// An up-to-date leader read from a later offset whose next offset is short of the end of an
    /// append acknowledged before the read was sent.
    UpToDateBehind {
        reader: String,
        target: String,
        next: u64,
        token: String,
        needed: u64,
    },
    /// A `416` for an offset inside the final log: a node called bytes that exist (and that
    /// an earlier answer had shown) past the tail.
    RefusedExisting {
        reader: String,
        target: String,
        from: u64,
    },
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Anomaly::*;
        match self {
            Lost { token } => write!(f, "lost: acknowledged {token} is not in the final log"),
            Duplicated { token, count } => {
                write!(f, "duplicated: {token} is in the final log {count} times")
            }
            AppliedRefusal { token } => {
                write!(
                    f,
                    "applied refusal: {token} was refused, yet is in the final log"
                )
            }
            Phantom {
                token,
                offset,
                torn,
            } => {
                let torn = if *torn {
                    "torn record (no separator)"
                } else {
                    "record"
                };
                write!(
                    f,
                    "phantom: {torn} {token:?} at offset {offset} was never sent"
                )
            }
            RealTimeOrder {
                first,
                first_offset: at1,
                second,
                second_offset: at2,
            } => write!(
                f,
                "real-time order: {first} completed before {second} was sent, \
                 yet {second} is at offset {at2}, before {first} at {at1}"
            ),
            NotAPrefix {
                reader,
                kind,
                target,
                from,
                detail,
            } => {
                write!(
                    f,
                    "not a prefix: {reader}'s {kind:?} read from {from} on {target}: {detail}"
                )
            }
            TailGap {
                reader,
                expected_from,
                got_from,
            } => write!(
                f,
                "tail gap: {reader}'s read started at {got_from}, not at {expected_from} \
                 where its previous read ended"
            ),
            StaleLeaderRead {
                reader,
                target,
                token,
            } => write!(
                f,
                "stale leader read: {reader}'s up-to-date read on {target} lacks {token}, \
                 acknowledged before the read was sent"
            ),
            UpToDateBehind {
                reader,
                target,
                next,
                token,
                needed,
            } => write!(
                f,
                "up-to-date behind: {reader}'s up-to-date leader read on {target} ended at \
                 {next}, short of {needed} where {token} (acknowledged before it) ends"
            ),
            RefusedExisting {
                reader,
                target,
                from,
            } => write!(
                f,
                "refused existing: {target} answered {reader}'s read from {from} with 416, \
                 inside the final log"
            ),
        }
    }
}

/// The start offsets of every whole record (one ending in the separator) in `log`, by token.
/// A torn tail is left out: it is not the record any append sent.
pub fn token_positions(log: &str) -> HashMap<&str, Vec<u64>> {
    let mut out: HashMap<&str, Vec<u64>> = HashMap::new();
    for (offset, token) in whole_records(log) {
        out.entry(token).or_default().push(offset);
    }
    out
}

/// [`records`] without a trailing piece that lacks the separator.
fn whole_records(log: &str) -> Vec<(u64, &str)> {
    let mut all = records(log);
    if !log.is_empty() && !log.ends_with(SEP) {
        all.pop();
    }
    all
}

/// Where one append took effect: its token's first whole record in the final log.
struct Placed<'h> {
    token: &'h str,
    offset: u64,
    /// The offset just past its separator.
    end: u64,
    invoke_ns: u64,
    /// Only an acknowledged append is known to have taken effect by its completion; any other
    /// that is in the log may have taken effect at any time after it was sent, so its
    /// completion is `u64::MAX`, later than any real time.
    complete_ns: u64,
}

pub fn check(h: &History) -> Report {
    let log_records = records(&h.final_log);
    let positions = token_positions(&h.final_log);
    let mut anomalies = Vec::new();
    let mut stats = Stats {
        reads: h.reads.len() as u64,
        log_records: log_records.len() as u64,
        ..Stats::default()
    };

    let mut placed = Vec::new();
    for a in &h.appends {
        let first = positions.get(a.token.as_str()).and_then(|p| p.first());
        match a.outcome {
            Outcome::Acked => stats.acked += 1,
            Outcome::NotApplied => stats.not_applied += 1,
            Outcome::Unknown => stats.unknown += 1,
        }
        match (a.outcome, first) {
            (Outcome::Acked, None) => anomalies.push(Anomaly::Lost {
                token: a.token.clone(),
            }),
            (Outcome::NotApplied, Some(_)) => anomalies.push(Anomaly::AppliedRefusal {
                token: a.token.clone(),
            }),
            (Outcome::Unknown, Some(_)) => stats.unknown_applied += 1,
            _ => {}
        }
        if let Some(&offset) = first {
            placed.push(Placed {
                token: &a.token,
                offset,
                end: offset + a.token.len() as u64 + 1,
                invoke_ns: a.invoke_ns,
                complete_ns: match a.outcome {
                    Outcome::Acked => a.complete_ns,
                    Outcome::NotApplied | Outcome::Unknown => u64::MAX,
                },
            });
        }
    }

    // Duplicates and phantoms in log order, so a report reads top to bottom like the log.
    let sent: HashSet<&str> = h.appends.iter().map(|a| a.token.as_str()).collect();
    // Only the last record can lack its separator.
    let whole = if h.final_log.ends_with(SEP) {
        log_records.len()
    } else {
        log_records.len().saturating_sub(1)
    };
    for (i, &(offset, token)) in log_records.iter().enumerate() {
        let torn = i >= whole;
        if torn || !sent.contains(token) {
            anomalies.push(Anomaly::Phantom {
                token: token.to_owned(),
                offset,
                torn,
            });
        } else if let Some(p) = positions.get(token)
            && p.len() > 1
            && p.first() == Some(&offset)
        {
            anomalies.push(Anomaly::Duplicated {
                token: token.to_owned(),
                count: p.len() as u64,
            });
        }
    }

    for r in &h.refused {
        if r.from <= h.final_log.len() as u64 {
            anomalies.push(Anomaly::RefusedExisting {
                reader: r.reader.clone(),
                target: r.target.clone(),
                from: r.from,
            });
        }
    }

    placed.sort_by_key(|p| p.offset);
    real_time_order(&placed, &mut anomalies);
    check_reads(h, &placed, &mut anomalies);
    Report { anomalies, stats }
}

/// A violation is a pair `i < j` in log order whose later record completed before the earlier
/// one was sent. Walking the log backwards with the earliest completion seen so far finds, for
/// each record, the append after it most likely to violate: one pair per offending record.
fn real_time_order(placed: &[Placed<'_>], anomalies: &mut Vec<Anomaly>) {
    let mut found = Vec::new();
    let mut earliest: Option<&Placed<'_>> = None;
    for p in placed.iter().rev() {
        if let Some(e) = earliest
            && e.complete_ns < p.invoke_ns
        {
            found.push(Anomaly::RealTimeOrder {
                first: e.token.to_owned(),
                first_offset: e.offset,
                second: p.token.to_owned(),
                second_offset: p.offset,
            });
        }
        if earliest.is_none_or(|e| p.complete_ns < e.complete_ns) {
            earliest = Some(p);
        }
    }
    found.reverse();
    anomalies.extend(found);
}

fn check_reads(h: &History, placed: &[Placed<'_>], anomalies: &mut Vec<Anomaly>) {
    let log = h.final_log.as_bytes();

    // Acknowledged appends by completion time, with the furthest-ending one among each prefix:
    // an up-to-date leader read sent at `t` must reach the furthest end of those done before
    // `t`, found by one binary search instead of a scan of every append per read.
    let mut acked: Vec<&Placed<'_>> = placed.iter().filter(|p| p.complete_ns < u64::MAX).collect();
    acked.sort_by_key(|p| p.complete_ns);
    let mut furthest: Vec<&Placed<'_>> = Vec::with_capacity(acked.len());
    for &p in &acked {
        match furthest.last() {
            Some(&f) if f.end >= p.end => furthest.push(f),
            _ => furthest.push(p),
        }
    }
    let must_reach = |invoke_ns: u64| -> Option<&Placed<'_>> {
        let done = acked.partition_point(|p| p.complete_ns < invoke_ns);
        done.checked_sub(1).and_then(|i| furthest.get(i).copied())
    };

    let mut tails: HashMap<&str, u64> = HashMap::new();
    for r in &h.reads {
        let prefix_problem = prefix_problem(log, r);
        if let Some(detail) = &prefix_problem {
            anomalies.push(Anomaly::NotAPrefix {
                reader: r.reader.clone(),
                kind: r.kind,
                target: r.target.clone(),
                from: r.from,
                detail: detail.clone(),
            });
        }

        if matches!(r.kind, ReadKind::LongPoll | ReadKind::Sse)
            && let Some(expected) = tails.insert(&r.reader, r.next)
            && expected != r.from
        {
            anomalies.push(Anomaly::TailGap {
                reader: r.reader.clone(),
                expected_from: expected,
                got_from: r.from,
            });
        }

        if r.kind != ReadKind::Leader || !r.up_to_date {
            continue;
        }
        let Some(need) = must_reach(r.invoke_ns) else {
            continue;
        };
        if r.from == 0 {
            let missing = if prefix_problem.is_none() {
                // A true prefix holds a token iff it reaches the end of its first record.
                (need.end > r.data.len() as u64).then_some(need.token)
            } else {
                // The bytes are not the log's, so offsets say nothing: look at its records.
                missing_from(&r.data, &acked, r.invoke_ns)
            };
            if let Some(token) = missing {
                anomalies.push(Anomaly::StaleLeaderRead {
                    reader: r.reader.clone(),
                    target: r.target.clone(),
                    token: token.to_owned(),
                });
            }
        } else if r.next < need.end {
            anomalies.push(Anomaly::UpToDateBehind {
                reader: r.reader.clone(),
                target: r.target.clone(),
                next: r.next,
                token: need.token.to_owned(),
                needed: need.end,
            });
        }
    }
}

/// Why `r` is not the final log's bytes from its offset followed by its next offset, if so.
fn prefix_problem(log: &[u8], r: &Read) -> Option<String> {
    let data = r.data.as_bytes();
    let mut problems = Vec::new();
    let end = r.from.checked_add(data.len() as u64);
    let window = usize::try_from(r.from)
        .ok()
        .and_then(|from| Some(from..from.checked_add(data.len())?))
        .and_then(|range| log.get(range));
    match window {
        None => problems.push(format!(
            "{} bytes from {} run past the final log's {} bytes",
            data.len(),
            r.from,
            log.len()
        )),
        Some(want) => {
            if let Some(at) = want.iter().zip(data).position(|(w, d)| w != d) {
                problems.push(format!(
                    "differs from the final log at offset {}",
                    r.from + at as u64
                ));
            }
        }
    }
    if end != Some(r.next) {
        problems.push(format!(
            "next offset is {}, not {} + {} bytes read",
            r.next,
            r.from,
            data.len()
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// The first acknowledged append (by completion) done before `invoke_ns` whose token is not a
/// whole record in `data`.
fn missing_from<'h>(data: &str, acked: &[&Placed<'h>], invoke_ns: u64) -> Option<&'h str> {
    let have = token_positions(data);
    acked
        .iter()
        .take_while(|p| p.complete_ns < invoke_ns)
        .find(|p| !have.contains_key(p.token))
        .map(|p| p.token)
}

#[cfg(test)]
mod tests;
