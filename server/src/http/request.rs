//! Turning a request line and headers into typed values, refusing malformed ones with 400.

use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::header::AsHeaderName;
use ursula_protocol::content_type;
use ursula_protocol::headers as h;
use ursula_protocol::ids;
use ursula_protocol::lifetime;
use ursula_protocol::offset::Offset;
use ursula_protocol::path::Target;
use ursula_protocol::seq;

use super::names::STREAM_INCARNATION;
use super::reply::ApiError;
use super::reply::parse_incarnation;
use ursula_state::stream::Lifetime;
use ursula_state::stream::ProducerTuple;

/// A route of the client plane. The admin plane's and the cluster plane's routes are routers
/// of their own ([`super::admin`], [`super::cluster`]): here they are `NotFound`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Metrics,
    Ready,
    Usage,
    /// `POST /__ursula/cluster-probe`: a peer's egress heartbeat ([`super::client_plane`]).
    ClusterProbe,
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
            ["cluster-probe"] => Route::ClusterProbe,
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

/// The values a request sent for one header name: the first, and whether more followed.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sent<'a> {
    first: Option<&'a HeaderValue>,
    more: bool,
}

impl<'a> Sent<'a> {
    fn of<N: AsHeaderName>(headers: &'a HeaderMap, name: N) -> Sent<'a> {
        let mut values = headers.get_all(name).iter();
        Sent {
            first: values.next(),
            more: values.next().is_some(),
        }
    }

    fn add(&mut self, value: &'a HeaderValue) {
        match self.first {
            None => self.first = Some(value),
            Some(_) => self.more = true,
        }
    }

    /// The value as UTF-8; several values or bytes outside visible ASCII are refused.
    fn single(self, name: impl std::fmt::Display) -> Result<Option<&'a str>, ApiError> {
        let Some(first) = self.first else {
            return Ok(None);
        };
        if self.more {
            return Err(ApiError::bad_request(format!("{name} must appear once")));
        }
        first
            .to_str()
            .map(|s| Some(s.trim()))
            .map_err(|_| ApiError::bad_request(format!("{name} must be visible ASCII")))
    }
}

/// One header as UTF-8; several values or bytes outside visible ASCII are refused.
pub fn single<N>(headers: &HeaderMap, name: N) -> Result<Option<&str>, ApiError>
where
    N: AsHeaderName + Copy + std::fmt::Display,
{
    Sent::of(headers, name).single(name)
}

/// The headers a write reads, found in one pass over the request's headers. Looked up one
/// by one, each of the eight would hash its name and probe the map, which costs more than the
/// pass does for a usual request's few headers (counted in docs/dev/speed-log.md, "What a write
/// does with its headers, trimmed again").
#[derive(Debug, Default)]
pub struct WriteHeaders<'a> {
    content_type: Sent<'a>,
    closed: Sent<'a>,
    stream_seq: Sent<'a>,
    incarnation: Sent<'a>,
    producer_id: Sent<'a>,
    producer_epoch: Sent<'a>,
    producer_seq: Sent<'a>,
    /// `Stream-Record-Match` was sent (removed in 0.6.0; refused).
    pub record_match: bool,
}

impl<'a> WriteHeaders<'a> {
    pub fn scan(headers: &'a HeaderMap) -> WriteHeaders<'a> {
        let mut w = WriteHeaders::default();
        // Every value of every name, repeated names included.
        for (name, value) in headers {
            let sent = match name.as_str() {
                h::CONTENT_TYPE => &mut w.content_type,
                h::STREAM_CLOSED => &mut w.closed,
                h::STREAM_SEQ => &mut w.stream_seq,
                h::STREAM_INCARNATION => &mut w.incarnation,
                h::PRODUCER_ID => &mut w.producer_id,
                h::PRODUCER_EPOCH => &mut w.producer_epoch,
                h::PRODUCER_SEQ => &mut w.producer_seq,
                h::STREAM_RECORD_MATCH => {
                    w.record_match = true;
                    continue;
                }
                _ => continue,
            };
            sent.add(value);
        }
        w
    }

    pub fn content_type(&self) -> Result<Option<String>, ApiError> {
        content_type_of(self.content_type)
    }

    pub fn closed(&self) -> bool {
        closed_of(self.closed)
    }

    pub fn stream_seq(&self) -> Result<Option<Vec<u8>>, ApiError> {
        stream_seq_of(self.stream_seq)
    }

    pub fn producer(&self) -> Result<Option<ProducerTuple>, ApiError> {
        producer_of(self.producer_id, self.producer_epoch, self.producer_seq)
    }

    pub fn incarnation(&self) -> Result<Option<u64>, ApiError> {
        incarnation_of(self.incarnation)
    }
}

pub fn incarnation(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    incarnation_of(Sent::of(headers, &STREAM_INCARNATION))
}

fn incarnation_of(sent: Sent<'_>) -> Result<Option<u64>, ApiError> {
    match sent.single(h::STREAM_INCARNATION)? {
        None => Ok(None),
        Some(raw) => parse_incarnation(raw).map(Some).ok_or_else(|| {
            ApiError::bad_request("Stream-Incarnation is not a token this server issues")
        }),
    }
}

/// `Stream-Closed` counts only as `true`, any case; other values are as if absent. Only the
/// first value counts, as `HeaderMap::get` has it.
fn closed_of(sent: Sent<'_>) -> bool {
    sent.first
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The normalized `Content-Type`, if sent.
pub fn content_type(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    content_type_of(Sent::of(headers, &axum::http::header::CONTENT_TYPE))
}

fn content_type_of(sent: Sent<'_>) -> Result<Option<String>, ApiError> {
    match sent.single(h::CONTENT_TYPE)? {
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
fn stream_seq_of(sent: Sent<'_>) -> Result<Option<Vec<u8>>, ApiError> {
    let Some(v) = sent.first else {
        return Ok(None);
    };
    if sent.more {
        return Err(ApiError::bad_request("Stream-Seq must appear once"));
    }
    match seq::parse_stream_seq(v.as_bytes()).map_err(ApiError::bad_request)? {
        seq::StreamSeq::Checked(s) => Ok(Some(s)),
        seq::StreamSeq::Ignored => Ok(None),
    }
}

fn producer_of(
    id: Sent<'_>,
    epoch: Sent<'_>,
    seq_raw: Sent<'_>,
) -> Result<Option<ProducerTuple>, ApiError> {
    let id = id.single(h::PRODUCER_ID)?;
    let epoch = epoch.single(h::PRODUCER_EPOCH)?;
    let seq_raw = seq_raw.single(h::PRODUCER_SEQ)?;
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
    use super::super::names::PRODUCER_EPOCH;
    use super::super::names::PRODUCER_ID;
    use super::super::names::PRODUCER_SEQ;
    use super::super::names::STREAM_CLOSED;
    use super::super::names::STREAM_SEQ;
    use super::*;

    // The lookups by name that only writes would make: the reference the one-pass scan is
    // tested against.
    fn closed(headers: &HeaderMap) -> bool {
        closed_of(Sent::of(headers, &STREAM_CLOSED))
    }

    fn stream_seq(headers: &HeaderMap) -> Result<Option<Vec<u8>>, ApiError> {
        stream_seq_of(Sent::of(headers, &STREAM_SEQ))
    }

    fn producer(headers: &HeaderMap) -> Result<Option<ProducerTuple>, ApiError> {
        producer_of(
            Sent::of(headers, &PRODUCER_ID),
            Sent::of(headers, &PRODUCER_EPOCH),
            Sent::of(headers, &PRODUCER_SEQ),
        )
    }

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
        assert_eq!(
            route("/__ursula/cluster-probe").ok(),
            Some(Route::ClusterProbe)
        );
    }

    /// Requests whose headers exercise every rule: absent, once, repeated, malformed, mixed.
    fn header_sets() -> Vec<HeaderMap> {
        let sets: [&[(&str, &[u8])]; 12] = [
            &[],
            &[("content-type", b"application/octet-stream")],
            &[("content-type", b" Text/Plain ;Charset=UTF-8 ")],
            &[("content-type", b"nonsense"), ("stream-closed", b"TRUE")],
            &[("content-type", b"a/b"), ("content-type", b"a/b")],
            &[("stream-closed", b"false"), ("stream-closed", b"true")],
            &[
                ("stream-seq", b"0001"),
                ("stream-incarnation", b"00000000000000ff"),
            ],
            &[("stream-seq", b"1"), ("stream-seq", b"2")],
            &[
                ("producer-id", b"p"),
                ("producer-epoch", b"0"),
                ("producer-seq", b"7"),
            ],
            &[("producer-id", b"p"), ("producer-seq", b"7")],
            &[
                ("producer-id", b"p"),
                ("producer-id", b"q"),
                ("producer-epoch", b"0"),
            ],
            &[
                ("stream-record-match", b"x"),
                ("stream-incarnation", b"\xff"),
                ("host", b"h"),
                ("producer-epoch", b"9007199254740992"),
            ],
        ];
        sets.iter()
            .map(|set| {
                let mut m = HeaderMap::new();
                for (name, value) in *set {
                    let name = axum::http::HeaderName::from_static(name);
                    m.append(name, HeaderValue::from_bytes(value).expect("test value"));
                }
                m
            })
            .collect()
    }

    fn shown<T: std::fmt::Debug>(r: Result<T, ApiError>) -> String {
        match r {
            Ok(v) => format!("ok {v:?}"),
            Err(e) => format!("{} {}", e.status, e.body),
        }
    }

    #[test]
    fn one_pass_over_the_headers_reads_what_the_lookups_by_name_read() {
        for headers in header_sets() {
            let sent = WriteHeaders::scan(&headers);
            assert_eq!(
                shown(sent.content_type()),
                shown(content_type(&headers)),
                "{headers:?}"
            );
            assert_eq!(sent.closed(), closed(&headers), "{headers:?}");
            assert_eq!(
                shown(sent.stream_seq()),
                shown(stream_seq(&headers)),
                "{headers:?}"
            );
            assert_eq!(
                shown(sent.producer()),
                shown(producer(&headers)),
                "{headers:?}"
            );
            assert_eq!(
                shown(sent.incarnation()),
                shown(incarnation(&headers)),
                "{headers:?}"
            );
            assert_eq!(
                sent.record_match,
                headers.contains_key(h::STREAM_RECORD_MATCH),
                "{headers:?}"
            );
        }
    }

    #[test]
    fn a_repeated_or_unreadable_write_header_is_refused_by_name() {
        let sets = header_sets();
        let twice = WriteHeaders::scan(&sets[4]);
        assert_eq!(
            shown(twice.content_type()),
            "400 Bad Request content-type must appear once"
        );
        let closed_twice = WriteHeaders::scan(&sets[5]);
        assert!(
            !closed_twice.closed(),
            "the first Stream-Closed value counts"
        );
        let odd = WriteHeaders::scan(&sets[11]);
        assert!(odd.record_match);
        assert_eq!(
            shown(odd.incarnation()),
            "400 Bad Request stream-incarnation must be visible ASCII"
        );
        let partial = WriteHeaders::scan(&sets[9]);
        assert!(shown(partial.producer()).contains("must be sent together"));
        let producer = WriteHeaders::scan(&sets[8]);
        assert_eq!(
            shown(
                producer
                    .producer()
                    .map(|p| p.map(|p| (p.id, p.epoch, p.seq)))
            ),
            "ok Some((\"p\", 0, 7))"
        );
    }
}
