//! The attach's requests to the stream: the HEAD that reads its state, the PUT that creates it,
//! and the claim's append, each with its own retry rule.

use ursula_protocol::content_type::OCTET_STREAM;
use ursula_protocol::headers as h;
use ursula_protocol::incarnation::Incarnation;
use ursula_protocol::offset::Offset;

use crate::append;
use crate::client::Answer;
use crate::client::Attempt;
use crate::client::Client;
use crate::client::Method;
use crate::client::Request;
use crate::error::Kind;
use crate::error::SQLITE_AUTH;
use crate::error::SQLITE_IOERR_AUTH;
use crate::error::VfsError;
use crate::format::Sidecar;
use crate::retry::Retry;

pub(super) struct Head {
    pub(super) incarnation: Incarnation,
    /// `None` when the server did not say.
    pub(super) tail: Option<Offset>,
    pub(super) snapshot: Option<Offset>,
}

/// The stream's state (`None`: no such stream), read with HEAD. Answers that may clear (no
/// answer, 401, 429, 307, 5xx) and connections never made for a reason other than a refusal
/// (resolving, a connect timeout, TLS) are retried within URSULA_VFS_RETRY_MS; a refused
/// connection fails at once.
pub(super) fn head_answer(url: &str) -> Result<Option<Head>, VfsError> {
    let mut budget = Retry::start();
    loop {
        let req = Request::new(Method::Head, url);
        let (retry, err) = match Client::global().send(&req) {
            Attempt::Answered(a) => match a.status {
                200 => {
                    let inc = a.incarnation()?.ok_or_else(|| {
                        VfsError::new(
                            Kind::StreamState,
                            "HEAD answered without Stream-Incarnation",
                        )
                    })?;
                    return Ok(Some(Head {
                        incarnation: inc,
                        tail: a.offset(h::STREAM_NEXT_OFFSET)?,
                        snapshot: a.offset(h::STREAM_SNAPSHOT_OFFSET)?,
                    }));
                }
                404 => return Ok(None),
                401 => (
                    true,
                    VfsError::new(
                        Kind::Unauthorized,
                        format!("the stream refused the token: {}", append::reason_of(&a)),
                    ),
                ),
                402 => {
                    return Err(VfsError::new(Kind::PaymentRequired, append::reason_of(&a))
                        .with_code(SQLITE_AUTH));
                }
                429 | 503 | 307 => (
                    true,
                    VfsError::new(
                        Kind::Unavailable,
                        format!("the stream answered {}", a.status),
                    ),
                ),
                400 => {
                    return Err(VfsError::new(
                        Kind::InvalidName,
                        format!(
                            "the server refused the stream's name: {}",
                            append::reason_of(&a)
                        ),
                    ));
                }
                s if s >= 500 => (
                    true,
                    VfsError::new(Kind::Unavailable, format!("the stream answered {s}")),
                ),
                s => {
                    return Err(VfsError::new(
                        Kind::StreamState,
                        format!("HEAD answered {s}: {}", append::reason_of(&a)),
                    ));
                }
            },
            // Nothing listens at the address: a wrong port or a stopped server, which waiting
            // out the budget would not fix, so the open fails at once (the spec's rule for
            // reads; docs/sqlite-vfs.md, "Reads and the retry budget").
            Attempt::Refused(r) => (
                false,
                VfsError::new(Kind::Unreachable, format!("cannot reach the stream: {r}")),
            ),
            Attempt::NeverSent(r) => (
                true,
                VfsError::new(Kind::Unreachable, format!("cannot reach the stream: {r}")),
            ),
            Attempt::NoAnswer(r) => (
                true,
                VfsError::new(Kind::Unreachable, format!("the stream did not answer: {r}")),
            ),
        };
        if !retry || budget.spent() {
            return Err(err);
        }
        budget.back_off();
    }
}

pub(super) fn create_stream(url: &str) -> Result<(), VfsError> {
    let req = Request {
        headers: vec![(h::CONTENT_TYPE, OCTET_STREAM.to_owned())],
        ..Request::new(Method::Put, url)
    };
    match Client::global().send(&req) {
        Attempt::Answered(a) if a.status == 201 || a.status == 200 => Ok(()),
        Attempt::Answered(a) if a.status == 400 => Err(VfsError::new(
            Kind::InvalidName,
            format!(
                "the server refused the stream's name: {}",
                append::reason_of(&a)
            ),
        )),
        Attempt::Answered(a) => Err(VfsError::new(
            Kind::StreamState,
            format!("creating the stream answered {}", a.status),
        )),
        Attempt::NeverSent(r) | Attempt::Refused(r) => Err(VfsError::new(
            Kind::Unreachable,
            format!("cannot reach the stream: {r}"),
        )),
        Attempt::NoAnswer(r) => Err(VfsError::new(
            Kind::Unreachable,
            format!("the stream did not answer: {r}"),
        )),
    }
}

/// The answer of a claim attempt.
pub(super) enum Claimed {
    /// The claim is in the stream, which ends at this offset after it.
    Ours(Offset),
    Lost,
    NewerEpoch(u64),
}

pub(super) fn send_claim(
    url: &str,
    sidecar: &Sidecar,
    epoch: u64,
    frame: &[u8],
) -> Result<Claimed, VfsError> {
    let mut retry = Retry::start();
    let mut unknown = false;
    let headers = append::frame_headers(sidecar, epoch, 0);
    loop {
        let req = Request {
            headers: headers.clone(),
            body: frame,
            ..Request::new(Method::Post, url)
        };
        let refusal = |a: &Answer, kind: Kind| {
            let code = if a.status == 402 {
                SQLITE_AUTH
            } else {
                SQLITE_IOERR_AUTH
            };
            VfsError::new(
                kind,
                format!("the claim was refused: {}", append::reason_of(a)),
            )
            .with_code(code)
        };
        let why = match Client::global().send(&req) {
            Attempt::Answered(a) => match a.status {
                200 => {
                    return Ok(a
                        .offset(h::STREAM_NEXT_OFFSET)?
                        .map_or(Claimed::Lost, Claimed::Ours));
                }
                // Same epoch, same seq: ours from an earlier attempt, or another attacher's.
                204 => return Ok(Claimed::Lost),
                403 if a.header(h::PRODUCER_EPOCH).is_some() => {
                    let e = a
                        .header(h::PRODUCER_EPOCH)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(epoch);
                    return Ok(Claimed::NewerEpoch(e));
                }
                409 => return Ok(Claimed::Lost),
                402 if !unknown => return Err(refusal(&a, Kind::PaymentRequired)),
                401 | 429 if !unknown => return Err(refusal(&a, Kind::Refused)),
                s if (400..600).contains(&s)
                    && a.header(h::NOT_APPLIED_CHECKED).is_some()
                    && a.header(h::NOT_APPLIED).is_some()
                    && !unknown =>
                {
                    return Err(refusal(&a, Kind::Refused));
                }
                412 => {
                    return Err(VfsError::new(
                        Kind::StreamState,
                        "the stream was recreated during attach",
                    ));
                }
                s if s >= 500 || s == 307 => {
                    unknown = true;
                    format!("HTTP {s}")
                }
                s => {
                    return Err(VfsError::new(
                        Kind::StreamState,
                        format!("the claim answered {s}: {}", append::reason_of(&a)),
                    ));
                }
            },
            // The claim is a write: a refused connection is retried like the commits' own.
            Attempt::NeverSent(r) | Attempt::Refused(r) if !unknown => {
                if retry.spent() {
                    return Err(VfsError::new(
                        Kind::Unreachable,
                        format!("cannot reach the stream: {r}"),
                    )
                    .with_code(SQLITE_IOERR_AUTH));
                }
                r
            }
            Attempt::NeverSent(r) | Attempt::Refused(r) | Attempt::NoAnswer(r) => {
                unknown = true;
                r
            }
        };
        if retry.spent() {
            return Err(VfsError::new(
                Kind::OutcomeUnknown,
                format!("the claim's outcome is unknown: {why}"),
            ));
        }
        retry.back_off();
    }
}
