//! Subscriptions do not outlive their credential: an SSE response admitted on a token ends at
//! the token's `exp` with a final `event: credential-expired` frame, so a client can tell expiry
//! from the end of the stream, refresh its token and resume from its last offset. A single
//! admission check would otherwise turn a short-lived token into an unbounded read.

use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::task::Poll;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use bytes::Bytes;
use http::Response;
use http::header;
use http_body_util::BodyExt;
use hyper::body::Body;
use hyper::body::Frame;
use hyper::body::SizeHint;
use tokio::time::Sleep;

use crate::reply::BoxError;
use crate::reply::GatewayBody;

/// The frame a subscription ends with when its credential expires.
pub const CREDENTIAL_EXPIRED_FRAME: &str = "event: credential-expired\ndata:\n\n";

/// Whether a response is an SSE stream.
fn is_sse<B>(resp: &Response<B>) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
        })
}

/// Bounds an SSE response by `exp` (seconds since the Unix epoch); other responses pass as
/// they are.
pub fn bound_by_expiry(resp: Response<GatewayBody>, exp: u64) -> Response<GatewayBody> {
    if !is_sse(&resp) {
        return resp;
    }
    let left = UNIX_EPOCH
        .checked_add(Duration::from_secs(exp))
        .and_then(|at| at.duration_since(SystemTime::now()).ok())
        .unwrap_or(Duration::ZERO);
    let (mut parts, body) = resp.into_parts();
    // The body's length changes by the final frame; SSE is chunked anyway.
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = UntilExpiry {
        inner: body,
        deadline: Box::pin(tokio::time::sleep(left)),
        state: State::Streaming,
    };
    Response::from_parts(parts, body.boxed_unsync())
}

enum State {
    Streaming,
    /// The deadline passed: the final frame is next.
    Expired,
    Done,
}

struct UntilExpiry {
    inner: GatewayBody,
    deadline: Pin<Box<Sleep>>,
    state: State,
}

impl Body for UntilExpiry {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            match this.state {
                State::Done => return Poll::Ready(None),
                State::Expired => {
                    this.state = State::Done;
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                        CREDENTIAL_EXPIRED_FRAME.as_bytes(),
                    )))));
                }
                State::Streaming => {
                    if this.deadline.as_mut().poll(cx).is_ready() {
                        // Dropping the upstream body closes the subscription at the node too.
                        this.state = State::Expired;
                        this.inner = crate::reply::body(Bytes::new());
                        continue;
                    }
                    return match Pin::new(&mut this.inner).poll_frame(cx) {
                        Poll::Ready(None) => {
                            this.state = State::Done;
                            Poll::Ready(None)
                        }
                        other => other,
                    };
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
