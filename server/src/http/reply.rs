//! Building responses: the error type every handler returns, and header helpers.

use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::HeaderName;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use ursula_protocol::headers as h;
use ursula_protocol::incarnation::Incarnation;
use ursula_protocol::offset::Offset;
use ursula_protocol::refusal::NotApplied;

use super::names;
use crate::engine::EngineError;
use crate::runtime::RuntimeError;
use ursula_state::stream::Refusal;

/// A refusal on its way to the client: status, the headers the spec gives it, and a body that
/// says what was wrong.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// Boxed so that `Result<_, ApiError>` stays small on every handler's return path.
    pub headers: Box<HeaderMap>,
    pub body: String,
    json: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, body: impl Into<String>) -> ApiError {
        ApiError {
            status,
            headers: Box::default(),
            body: body.into(),
            json: false,
        }
    }

    pub fn bad_request(body: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, body)
    }

    pub fn not_found() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "stream not found")
    }

    pub fn method_not_allowed(allow: &'static str) -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed on this route",
        )
        .header(header::ALLOW, allow)
    }

    /// A marked refusal: nothing of the request was proposed.
    pub fn not_applied(status: StatusCode, token: NotApplied, detail: &str) -> ApiError {
        let mut e = ApiError::new(
            status,
            serde_json::json!({ "error": token.token(), "message": detail }).to_string(),
        )
        .header(h::NOT_APPLIED, token.token());
        e.json = true;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            e = e.header(header::RETRY_AFTER, "1");
        }
        e
    }

    pub fn header(mut self, name: impl Name, value: impl Text) -> ApiError {
        if let (Some(name), Some(value)) = (name.into_name(), value.into_value()) {
            self.headers.insert(name, value);
        }
        self
    }
}

/// A response header's name. A `&'static str` becomes one without a copy: `TryInto` copied
/// every name outside the standard set into a buffer of its own, several per answer.
pub trait Name {
    fn into_name(self) -> Option<HeaderName>;
}

impl Name for HeaderName {
    fn into_name(self) -> Option<HeaderName> {
        Some(self)
    }
}

impl Name for &'static str {
    fn into_name(self) -> Option<HeaderName> {
        // `from_static` panics on what is not a lowercase token; such a name takes the
        // copying path, which refuses it instead.
        let lowercase_token = !self.is_empty()
            && self.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.!#$%&'*+^`|~".contains(&b)
            });
        if lowercase_token {
            Some(HeaderName::from_static(self))
        } else {
            HeaderName::from_bytes(self.as_bytes()).ok()
        }
    }
}

/// A response header's value: an owned `String` is taken as it is instead of copied.
pub trait Text {
    fn into_value(self) -> Option<HeaderValue>;
}

impl Text for &str {
    fn into_value(self) -> Option<HeaderValue> {
        HeaderValue::from_str(self).ok()
    }
}

impl Text for &String {
    fn into_value(self) -> Option<HeaderValue> {
        HeaderValue::from_str(self).ok()
    }
}

/// A token's ASCII digits, copied once into the value.
pub struct Digits<'a>(pub &'a [u8]);

impl Text for Digits<'_> {
    fn into_value(self) -> Option<HeaderValue> {
        HeaderValue::from_bytes(self.0).ok()
    }
}

impl Text for String {
    fn into_value(self) -> Option<HeaderValue> {
        HeaderValue::from_maybe_shared(bytes::Bytes::from(self)).ok()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let ctype = if self.json {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        let mut extra = *self.headers;
        // The refusal's own headers, then the type and caching every answer of ours carries.
        extra.remove(header::CONTENT_TYPE);
        extra.remove(header::CACHE_CONTROL);
        let mut resp = uncached(self.status, self.body, ctype);
        resp.headers_mut().extend(extra);
        resp
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        match e {
            // The dispatcher completes `Location` with the request's path and query.
            EngineError::NotLeader {
                leader: Some(url), ..
            } => ApiError::not_applied(
                StatusCode::TEMPORARY_REDIRECT,
                NotApplied::NotLeader,
                "not the leader",
            )
            .header(header::LOCATION, url),
            EngineError::NotLeader {
                leader: None,
                single: true,
            } => ApiError::not_applied(
                StatusCode::INTERNAL_SERVER_ERROR,
                NotApplied::NotLeader,
                "the stream's group has no leader yet",
            )
            .header(header::RETRY_AFTER, "1"),
            EngineError::NotLeader {
                leader: None,
                single: false,
            } => ApiError::not_applied(
                StatusCode::SERVICE_UNAVAILABLE,
                NotApplied::NotLeader,
                "no leader is known for the stream's group",
            ),
            EngineError::Unavailable(m) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m).header(header::RETRY_AFTER, "1")
            }
            EngineError::Runtime(e @ RuntimeError::ApplyStopped(_)) => ApiError::not_applied(
                StatusCode::SERVICE_UNAVAILABLE,
                NotApplied::ApplyStopped,
                &e.to_string(),
            ),
            EngineError::Runtime(e) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
                    .header(header::RETRY_AFTER, "1")
            }
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        let msg = r.to_string();
        match r {
            Refusal::NotFound => ApiError::not_found(),
            Refusal::IncarnationMismatch { current } => {
                let e = ApiError::new(StatusCode::PRECONDITION_FAILED, msg);
                match current {
                    Some(inc) => e.header(h::STREAM_INCARNATION, incarnation_token(inc)),
                    None => e,
                }
            }
            Refusal::ConfigConflict(_) | Refusal::CreateSeqNotZero => {
                ApiError::new(StatusCode::CONFLICT, msg)
            }
            Refusal::Closed { tail } => ApiError::new(StatusCode::CONFLICT, msg)
                .header(h::STREAM_CLOSED, "true")
                .header(h::STREAM_NEXT_OFFSET, Offset(tail).to_string()),
            Refusal::ContentTypeMismatch { tail, .. } | Refusal::StreamSeqConflict { tail } => {
                ApiError::new(StatusCode::CONFLICT, msg)
                    .header(h::STREAM_NEXT_OFFSET, Offset(tail).to_string())
            }
            Refusal::StaleEpoch { current, .. } => ApiError::new(StatusCode::FORBIDDEN, msg)
                .header(h::PRODUCER_EPOCH, current.to_string()),
            Refusal::NewEpochNotZero
            | Refusal::InvalidJson(_)
            | Refusal::EmptyAppend
            | Refusal::NotMessageBoundary
            | Refusal::RetentionBackward
            | Refusal::RetentionBeyondSnapshot
            | Refusal::RetentionBeyondTail => ApiError::bad_request(msg),
            Refusal::SeqGap { expected, received } => ApiError::new(StatusCode::CONFLICT, msg)
                .header(h::PRODUCER_EXPECTED_SEQ, expected.to_string())
                .header(h::PRODUCER_RECEIVED_SEQ, received.to_string()),
            Refusal::ProducerLimit => ApiError::new(StatusCode::TOO_MANY_REQUESTS, msg),
            Refusal::SnapshotBeyondTail | Refusal::SnapshotStale | Refusal::SnapshotDiffers => {
                ApiError::new(StatusCode::CONFLICT, msg)
            }
            Refusal::Gone { retained } => ApiError::new(StatusCode::GONE, msg)
                .header(h::STREAM_NEXT_OFFSET, Offset(retained).to_string()),
            Refusal::BeyondTail { tail } => ApiError::new(StatusCode::RANGE_NOT_SATISFIABLE, msg)
                .header(h::STREAM_NEXT_OFFSET, Offset(tail).to_string()),
            Refusal::ImportIntoNonEmpty { .. } | Refusal::ImportOutOfOrder(_) => {
                ApiError::new(StatusCode::CONFLICT, msg)
            }
            Refusal::WriteUnitMismatch { .. } | Refusal::ImportUndecodable(_) => {
                ApiError::bad_request(msg)
            }
            Refusal::BoundaryUnknown | Refusal::ExternalMoved => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, msg)
                    .header(axum::http::header::RETRY_AFTER, "1")
            }
        }
    }
}

/// The wire form of a stream incarnation ([`Incarnation`]): 16 lowercase hex digits.
pub fn incarnation_token(inc: u64) -> String {
    Incarnation(inc).to_string()
}

pub fn parse_incarnation(raw: &str) -> Option<u64> {
    Incarnation::parse(raw).map(|i| i.0)
}

/// Incremental response builder for successes.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

impl Reply {
    pub fn new(status: StatusCode) -> Reply {
        Reply {
            status,
            // Room for an answer's own headers and the four the dispatcher adds to every one
            // (a read's answer has twelve): an empty map allocates at the first insert and
            // again, rehashing, at the seventh.
            headers: HeaderMap::with_capacity(12),
            body: Body::empty(),
        }
    }

    pub fn header(mut self, name: impl Name, value: impl Text) -> Reply {
        if let (Some(name), Some(value)) = (name.into_name(), value.into_value()) {
            self.headers.insert(name, value);
        }
        self
    }

    pub fn header_if(self, cond: bool, name: impl Name, value: &str) -> Reply {
        if cond { self.header(name, value) } else { self }
    }

    pub fn offset(self, name: HeaderName, offset: u64) -> Reply {
        self.header(name, Digits(&Offset(offset).digits()))
    }

    /// The producer state an append or create echoes: `Producer-Epoch` and `Producer-Seq`.
    pub fn producer(self, echo: Option<(u64, u64)>) -> Reply {
        match echo {
            Some((epoch, seq)) => self
                .header(names::PRODUCER_EPOCH, epoch.to_string())
                .header(names::PRODUCER_SEQ, seq.to_string()),
            None => self,
        }
    }

    pub fn incarnation(self, inc: u64) -> Reply {
        self.header(
            names::STREAM_INCARNATION,
            Digits(&Incarnation(inc).digits()),
        )
    }

    pub fn body(mut self, body: impl Into<Body>) -> Reply {
        self.body = body.into();
        self
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let mut resp = Response::new(self.body);
        *resp.status_mut() = self.status;
        *resp.headers_mut() = self.headers;
        resp
    }
}

/// An answer that is never cached: `body` as `content_type`, with `Cache-Control: no-store`.
pub fn uncached(status: StatusCode, body: String, content_type: &'static str) -> Response {
    let mut resp = (status, body).into_response();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// A plain-text answer that is never cached, as the node's refusals are written.
pub fn plain_text(status: StatusCode, body: impl Into<String>) -> Response {
    uncached(status, body.into(), "text/plain; charset=utf-8")
}

/// A JSON answer that is never cached.
pub fn json_reply(status: StatusCode, body: String) -> Reply {
    Reply::new(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_names_are_taken_without_a_panic_whatever_their_spelling() {
        let reply = Reply::new(StatusCode::NO_CONTENT)
            .header(h::STREAM_NEXT_OFFSET, "00000000000000000010")
            .header("content-type", "text/plain")
            .header("X-Upper-Case", "kept, lowercased")
            .header("bad name", "refused")
            .header("", "refused")
            .header(header::ETAG, String::from("\"e\""));
        let names: Vec<&str> = reply.headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(
            names,
            ["stream-next-offset", "content-type", "x-upper-case", "etag"]
        );
        assert_eq!(reply.headers["x-upper-case"], "kept, lowercased");
        assert_eq!(reply.headers[header::ETAG], "\"e\"");
    }

    #[test]
    fn a_value_with_a_line_break_is_left_out_whether_borrowed_or_owned() {
        let owned = String::from("a\r\nInjected: yes");
        let reply = Reply::new(StatusCode::OK)
            .header(h::STREAM_CURSOR, "a\nb")
            .header(h::STREAM_SEQ, &owned)
            .header(h::STREAM_TTL, owned.clone())
            .header(h::STREAM_CLOSED, "true");
        assert_eq!(reply.headers.len(), 1);
        assert_eq!(reply.headers[h::STREAM_CLOSED], "true");
        let err = ApiError::bad_request("x").header(h::NOT_APPLIED, owned);
        assert!(err.headers.get(h::NOT_APPLIED).is_none());
    }
}
