//! Appending frames: the refusal table of the spec decides, per answer, whether a commit is
//! acknowledged, fails alone (nothing reached the stream), or poisons the file.

use std::time::Duration;

use ursula_protocol::content_type::OCTET_STREAM;
use ursula_protocol::headers as h;
use ursula_protocol::offset::Offset;

use crate::client::Answer;
use crate::client::Attempt;
use crate::client::Client;
use crate::client::Method;
use crate::client::Request;
use crate::db::Db;
use crate::error::Kind;
use crate::format::Sidecar;
use crate::log;
use crate::retry::Retry;

pub const PRODUCER_PREFIX: &str = "sqlite-ursula-vfs/";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Acked {
        next_offset: Offset,
    },
    /// Nothing of it reached the stream; the file stays usable.
    Refused {
        kind: Kind,
        reason: String,
    },
    Poisoned {
        kind: Kind,
        reason: String,
    },
    /// The stream no longer knows this owner's producer (idle past the stream's forget window,
    /// 7 days): nothing of the commit reached the stream, and the owner may claim it back.
    Forgotten,
}

#[derive(Debug)]
pub struct Result {
    pub outcome: Outcome,
    pub attempts: u64,
}

/// `Stream-Seq` of a frame: epoch and producer seq, 20 digits each, so byte order is
/// (epoch, seq) order and every owner's frames sort above its predecessors'.
pub fn stream_seq(epoch: u64, seq: u64) -> String {
    format!("{epoch:020}{seq:020}")
}

/// The headers every frame append carries.
pub fn frame_headers(sidecar: &Sidecar, epoch: u64, seq: u64) -> Vec<(&'static str, String)> {
    vec![
        (h::CONTENT_TYPE, OCTET_STREAM.to_owned()),
        (
            h::PRODUCER_ID,
            format!("{PRODUCER_PREFIX}{}", sidecar.incarnation),
        ),
        (h::PRODUCER_EPOCH, epoch.to_string()),
        (h::PRODUCER_SEQ, seq.to_string()),
        (h::STREAM_SEQ, stream_seq(epoch, seq)),
        (h::STREAM_INCARNATION, sidecar.incarnation.to_string()),
    ]
}

/// A refusal layer's explanation: the body's first 256 bytes (`...` after a longer one), or the
/// marker's value when the body is empty.
pub fn reason_of(a: &Answer) -> String {
    let body = String::from_utf8_lossy(&a.body);
    let body = body.trim();
    if body.is_empty() {
        return a
            .header(h::NOT_APPLIED)
            .map_or_else(|| format!("HTTP {}", a.status), str::to_owned);
    }
    if body.len() > 256 {
        let mut cut = 256;
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}...", &body[..cut])
    } else {
        body.to_owned()
    }
}

fn vouched(a: &Answer) -> bool {
    a.header(h::NOT_APPLIED).is_some() && a.header(h::NOT_APPLIED_CHECKED).is_some()
}

fn retry_after(a: &Answer) -> Duration {
    a.header(h::RETRY_AFTER)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs)
}

/// How one answer to a commit's append reads.
enum Step {
    Done(Outcome),
    /// Try again; `unknown` when this attempt may have been applied.
    Again {
        unknown: bool,
        wait: Duration,
        refusal: Option<(Kind, String)>,
        reason: String,
    },
}

fn classify_commit(a: &Answer, had_unknown: bool, seq: u64, refused_seq: Option<u64>) -> Step {
    let status = a.status;
    let next = a.offset(h::STREAM_NEXT_OFFSET);
    let poison = |kind, reason: String| Step::Done(Outcome::Poisoned { kind, reason });
    let refuse = |kind, reason: String| {
        if had_unknown {
            // An earlier attempt may be in the stream; a refusal of a later one proves nothing.
            Step::Again {
                unknown: false,
                wait: Duration::ZERO,
                refusal: None,
                reason,
            }
        } else {
            Step::Done(Outcome::Refused { kind, reason })
        }
    };
    match status {
        200 => match next {
            Ok(Some(n)) => Step::Done(Outcome::Acked { next_offset: n }),
            Ok(None) => poison(
                Kind::StreamState,
                "the append answer carried no Stream-Next-Offset".into(),
            ),
            Err(e) => poison(Kind::StreamState, e.to_string()),
        },
        204 => {
            let refused_here = refused_seq == Some(seq);
            match (next, had_unknown) {
                // The commit is in the stream, but where it ends is not known.
                (Err(e), true) => poison(Kind::StreamState, e.to_string()),
                (Ok(Some(n)), true) => {
                    if refused_here {
                        log::event(log::Level::Warn, "refused_commit_unchecked", &[("seq", &seq.to_string())]);
                    }
                    Step::Done(Outcome::Acked { next_offset: n })
                }
                _ if refused_here => poison(
                    Kind::OutcomeUnknown,
                    "a commit refused as never applied may have been applied after all: the stream answered a later commit as its duplicate".into(),
                ),
                _ => poison(Kind::Fenced, "the stream answered a new commit as a duplicate".into()),
            }
        }
        402 => refuse(Kind::PaymentRequired, reason_of(a)),
        401 => Step::Again {
            unknown: false,
            wait: Duration::ZERO,
            refusal: Some((Kind::Unauthorized, reason_of(a))),
            reason: "401".into(),
        },
        429 => Step::Again {
            unknown: false,
            wait: retry_after(a),
            refusal: Some((Kind::RateLimited, reason_of(a))),
            reason: "429".into(),
        },
        403 if a.header(h::PRODUCER_EPOCH).is_some() => poison(
            Kind::Fenced,
            "another owner claimed the stream with a newer producer epoch".into(),
        ),
        400..=499 if vouched(a) => {
            let kind = match status {
                403 => Kind::Forbidden,
                413 => Kind::TooLarge,
                _ => Kind::NotApplied,
            };
            let reason = if kind == Kind::NotApplied {
                a.header(h::NOT_APPLIED).unwrap_or_default().to_owned()
            } else {
                reason_of(a)
            };
            refuse(kind, reason)
        }
        500..=599 if vouched(a) => Step::Again {
            unknown: false,
            wait: retry_after(a),
            refusal: Some((
                Kind::NotApplied,
                a.header(h::NOT_APPLIED).unwrap_or_default().to_owned(),
            )),
            reason: format!("{status} {}", a.header(h::NOT_APPLIED).unwrap_or_default()),
        },
        403 => poison(
            Kind::OutcomeUnknown,
            format!("403 without a not-applied mark: {}", reason_of(a)),
        ),
        // A gap back to 0 for a seq above 0: the stream keeps no state of this producer.
        409 if seq > 0 && a.header(h::PRODUCER_EXPECTED_SEQ) == Some("0") => {
            Step::Done(Outcome::Forgotten)
        }
        409 if a.header(h::PRODUCER_EXPECTED_SEQ).is_some() => poison(
            Kind::Fenced,
            "the stream expects another producer sequence: another owner took over".into(),
        ),
        409 if a.header(h::STREAM_CLOSED).is_some() => {
            poison(Kind::StreamState, "the stream is closed".into())
        }
        409 => poison(
            Kind::Fenced,
            "another writer appended with a higher Stream-Seq".into(),
        ),
        412 => poison(Kind::Fenced, "the stream was deleted and recreated".into()),
        404 => poison(Kind::StreamState, "the stream is gone".into()),
        307 => Step::Again {
            unknown: true,
            wait: Duration::ZERO,
            refusal: None,
            reason: "307".into(),
        },
        300..=399 => poison(
            Kind::InvalidUrl,
            format!(
                "the stream answered {status} to {}: use that address",
                a.header(h::LOCATION).unwrap_or("?")
            ),
        ),
        500..=599 => Step::Again {
            unknown: true,
            wait: retry_after(a),
            refusal: None,
            reason: format!("{status}"),
        },
        _ => poison(Kind::StreamState, format!("{status}: {}", reason_of(a))),
    }
}

/// Sends a commit frame until an answer settles it or the retry budget runs out.
pub fn commit(
    db: &Db,
    sidecar: &Sidecar,
    seq: u64,
    refused_seq: Option<u64>,
    frame: &[u8],
) -> Result {
    let headers = frame_headers(sidecar, sidecar.epoch, seq);
    send(db, headers, frame, |a, had_unknown| {
        classify_commit(a, had_unknown, seq, refused_seq)
    })
}

/// Sends a claim frame of `epoch` (producer seq 0) for an owner that already holds the stream,
/// as [`commit`] sends a commit. `Acked` says where the stream's copy of the claim ends: ours,
/// or another owner's claim of the same epoch answered as its duplicate, which only reading
/// the stream tells apart.
pub fn claim(db: &Db, sidecar: &Sidecar, epoch: u64, frame: &[u8]) -> Result {
    let headers = frame_headers(sidecar, epoch, 0);
    send(db, headers, frame, |a, had_unknown| match a.status {
        200 | 204 => match a.offset(h::STREAM_NEXT_OFFSET) {
            Ok(Some(n)) => Step::Done(Outcome::Acked { next_offset: n }),
            Ok(None) => Step::Done(Outcome::Poisoned {
                kind: Kind::StreamState,
                reason: "the claim's answer carried no Stream-Next-Offset".into(),
            }),
            Err(e) => Step::Done(Outcome::Poisoned {
                kind: Kind::StreamState,
                reason: e.to_string(),
            }),
        },
        _ => classify_commit(a, had_unknown, 0, None),
    })
}

fn send(
    db: &Db,
    headers: Vec<(&'static str, String)>,
    frame: &[u8],
    classify: impl Fn(&Answer, bool) -> Step,
) -> Result {
    let mut retry = Retry::start();
    let mut attempts = 0u64;
    let mut had_unknown = false;
    loop {
        attempts += 1;
        let req = Request {
            headers: headers.clone(),
            body: frame,
            ..Request::new(Method::Post, &db.url)
        };
        let step = match Client::global().send(&req) {
            Attempt::Answered(a) => classify(&a, had_unknown),
            // A refused connection is retried like any attempt that never went out.
            Attempt::NeverSent(r) | Attempt::Refused(r) => Step::Again {
                unknown: false,
                wait: Duration::ZERO,
                refusal: Some((Kind::Unreachable, r.clone())),
                reason: r,
            },
            Attempt::NoAnswer(r) => Step::Again {
                unknown: true,
                wait: Duration::ZERO,
                refusal: None,
                reason: r,
            },
        };
        match step {
            Step::Done(outcome) => return Result { outcome, attempts },
            Step::Again {
                unknown,
                wait,
                refusal,
                reason,
            } => {
                had_unknown |= unknown;
                let elapsed = retry.elapsed();
                let pause = retry.pause(wait);
                let event = |level, name| {
                    log::event(
                        level,
                        name,
                        &[
                            ("file", &db.file()),
                            ("attempt", &attempts.to_string()),
                            ("elapsed_ms", &elapsed.as_millis().to_string()),
                            ("reason", &reason),
                        ],
                    );
                };
                if retry.over(elapsed, pause) {
                    event(log::Level::Warn, "append_gave_up");
                    let outcome = match (had_unknown, refusal) {
                        (false, Some((kind, reason))) => Outcome::Refused { kind, reason },
                        _ => Outcome::Poisoned {
                            kind: Kind::OutcomeUnknown,
                            reason: format!(
                                "the commit's outcome is unknown after {attempts} attempts: {reason}"
                            ),
                        },
                    };
                    return Result { outcome, attempts };
                }
                event(log::Level::Info, "append_retry");
                retry.sleep(pause);
            }
        }
    }
}
