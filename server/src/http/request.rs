//! Turning a request line and headers into typed values, refusing malformed ones with 400.

use axum::http::HeaderMap;
use axum::http::header::AsHeaderName;
use ursula_protocol::content_type;
use ursula_protocol::headers as h;
use ursula_protocol::ids;
use ursula_protocol::lifetime;
use ursula_protocol::offset::Offset;
use ursula_protocol::path::Target;
use ursula_protocol::seq;

use super::reply::ApiError;
use super::reply::parse_incarnation;
use crate::stream::Lifetime;
use crate::stream::ProducerTuple;

// The request headers every write reads, as names built at compile time: a `&str` name is
// parsed and classified again at each lookup, several per append.
use super::names::PRODUCER_EPOCH;
use super::names::PRODUCER_ID;
use super::names::PRODUCER_SEQ;
use super::names::STREAM_CLOSED;
use super::names::STREAM_INCARNATION;
pub use super::names::STREAM_RECORD_MATCH;
use super::names::STREAM_SEQ;

/// A route of the client plane. The admin plane's and the cluster plane's routes are routers
/// of their own ([`super::admin`], `raft::routes`): here they are `NotFound`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Metrics,
    Ready,
    Usage,
    Bucket(String),
    Stream(StreamPath),
    Bootstrap(StreamPath),
    Snapshot(StreamPath, String),
    /// `/snapshot` with no offset: a removed route.
    SnapshotBare(StreamPath),
    Retention(StreamPath, String),
    NotFound,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPath {
    /// `bucket/stream`, the key the state machine knows the stream by.
    pub key: String,
}

/// Routes a raw path. ID rule violations are 400s, unknown shapes 404.
pub fn route(path: &str) -> Result<Route, ApiError> {
    match ursula_protocol::path::parse(path).map_err(bad_id)? {
        Target::Internal(rest) => Ok(match rest.as_slice() {
            ["metrics"] => Route::Metrics,
            ["ready"] => Route::Ready,
            ["usage"] => Route::Usage,
            _ => Route::NotFound,
        }),
        Target::Bucket(b) => Ok(Route::Bucket(b)),
        Target::Stream { key, rest } => subresource(StreamPath { key }, &rest),
        Target::Unknown => Ok(Route::NotFound),
    }
}

fn subresource(sp: StreamPath, sub: &[&str]) -> Result<Route, ApiError> {
    Ok(match sub {
        [] => Route::Stream(sp),
        ["bootstrap"] => Route::Bootstrap(sp),
        ["snapshot"] => Route::SnapshotBare(sp),
        ["snapshot", off] => Route::Snapshot(sp, decoded(off)?),
        ["retention", off] => Route::Retention(sp, decoded(off)?),
        _ => Route::NotFound,
    })
}

fn decoded(segment: &str) -> Result<String, ApiError> {
    Ok(ids::decode_segment(segment).map_err(bad_id)?.into_owned())
}

fn bad_id(e: ids::IdError) -> ApiError {
    ApiError::bad_request(e.to_string())
}

/// One header as UTF-8; several values or bytes outside visible ASCII are refused.
pub fn single<N>(headers: &HeaderMap, name: N) -> Result<Option<&str>, ApiError>
where
    N: AsHeaderName + Copy + std::fmt::Display,
{
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::bad_request(format!("{name} must appear once")));
    }
    first
        .to_str()
        .map(|s| Some(s.trim()))
        .map_err(|_| ApiError::bad_request(format!("{name} must be visible ASCII")))
}

pub fn incarnation(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match single(headers, &STREAM_INCARNATION)? {
        None => Ok(None),
        Some(raw) => parse_incarnation(raw).map(Some).ok_or_else(|| {
            ApiError::bad_request("Stream-Incarnation is not a token this server issues")
        }),
    }
}

/// `Stream-Closed` counts only as `true`, any case; other values are as if absent.
pub fn closed(headers: &HeaderMap) -> bool {
    headers
        .get(&STREAM_CLOSED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The normalized `Content-Type`, if sent.
pub fn content_type(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match single(headers, &axum::http::header::CONTENT_TYPE)? {
        None => Ok(None),
        Some(raw) => content_type::normalize(raw).map(Some).ok_or_else(|| {
            ApiError::bad_request(format!("Content-Type {raw:?} is not a media type"))
        }),
    }
}

pub fn lifetime(headers: &HeaderMap) -> Result<Option<Lifetime>, ApiError> {
    let ttl = single(headers, h::STREAM_TTL)?;
    let at = single(headers, h::STREAM_EXPIRES_AT)?;
    match (ttl, at) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "Stream-TTL and Stream-Expires-At exclude each other",
        )),
        (Some(t), None) => lifetime::parse_ttl(t)
            .map(|s| Some(Lifetime::Ttl(s)))
            .ok_or_else(|| {
                ApiError::bad_request("Stream-TTL must be a non-negative integer of seconds")
            }),
        (None, Some(a)) => lifetime::parse_expires_at(a)
            .map(|ms| Some(Lifetime::ExpiresAt(ms)))
            .ok_or_else(|| {
                ApiError::bad_request("Stream-Expires-At must be an RFC 3339 timestamp")
            }),
        (None, None) => Ok(None),
    }
}

/// A printable `Stream-Seq` to check and store; `None` when absent or ignored.
pub fn stream_seq(headers: &HeaderMap) -> Result<Option<Vec<u8>>, ApiError> {
    let mut values = headers.get_all(&STREAM_SEQ).iter();
    let Some(v) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::bad_request("Stream-Seq must appear once"));
    }
    match seq::parse_stream_seq(v.as_bytes()).map_err(ApiError::bad_request)? {
        seq::StreamSeq::Checked(s) => Ok(Some(s)),
        seq::StreamSeq::Ignored => Ok(None),
    }
}

pub fn producer(headers: &HeaderMap) -> Result<Option<ProducerTuple>, ApiError> {
    let id = single(headers, &PRODUCER_ID)?;
    let epoch = single(headers, &PRODUCER_EPOCH)?;
    let seq_raw = single(headers, &PRODUCER_SEQ)?;
    match (id, epoch, seq_raw) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(s)) => {
            if id.is_empty() {
                return Err(ApiError::bad_request("Producer-Id must not be empty"));
            }
            if id.len() > seq::MAX_PRODUCER_ID_BYTES {
                return Err(ApiError::bad_request(
                    "Producer-Id is longer than 256 bytes",
                ));
            }
            let epoch = seq::parse_producer_number(epoch).ok_or_else(|| {
                ApiError::bad_request("Producer-Epoch must be an integer from 0 to 2^53-1")
            })?;
            let seq = seq::parse_producer_number(s).ok_or_else(|| {
                ApiError::bad_request("Producer-Seq must be an integer from 0 to 2^53-1")
            })?;
            Ok(Some(ProducerTuple {
                id: id.to_owned(),
                epoch,
                seq,
            }))
        }
        _ => Err(ApiError::bad_request(
            "Producer-Id, Producer-Epoch and Producer-Seq must be sent together",
        )),
    }
}

/// An offset in a path segment: exactly a 20-character token.
pub fn path_offset(raw: &str) -> Result<u64, ApiError> {
    Offset::parse(raw)
        .map(|o| o.0)
        .ok_or_else(|| ApiError::bad_request(format!("{raw:?} is not an offset")))
}

/// Query parameters, percent-decoded, in order.
pub fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let sp = |k: &str| StreamPath { key: k.to_owned() };
        assert_eq!(route("/demo").ok(), Some(Route::Bucket("demo".into())));
        assert_eq!(
            route("/demo/hello").ok(),
            Some(Route::Stream(sp("demo/hello")))
        );
        assert_eq!(
            route("/demo/he%20llo/bootstrap").ok(),
            Some(Route::Bootstrap(sp("demo/he llo")))
        );
        assert_eq!(
            route("/v1/stream/abc").ok(),
            Some(Route::Stream(sp("__v1/abc")))
        );
        assert_eq!(route("/demo/a/b/c").ok(), Some(Route::NotFound));
        assert_eq!(route("/demo/hello/").ok(), Some(Route::NotFound));
        assert!(route("/demo/a%2Fb").is_err());
        assert!(route("/Demo/x").is_err());
        assert!(route("/demo/%ff").is_err());
        assert_eq!(route("/__ursula/metrics").ok(), Some(Route::Metrics));
    }
}
