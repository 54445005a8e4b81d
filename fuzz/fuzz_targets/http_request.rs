//! The node's request head: the route of a path, the read query, and the headers a write and a
//! create read (`server/src/http/request.rs`, `read.rs`).
//!
//! Input: a request target (`/bucket/stream?query`) on the first line, then one header per
//! line, `name:value`. Beyond "no panic", each accepted value re-parses to itself, and the
//! write path's one-pass header scan answers what the lookups by name answer.

#![no_main]

use axum::http::HeaderMap;
use axum::http::HeaderName;
use axum::http::HeaderValue;
use axum::http::Uri;
use libfuzzer_sys::fuzz_target;
use ursula::http::read::Live;
use ursula::http::read::parse_read_query;
use ursula::http::reply::ApiError;
use ursula::http::request;
use ursula::http::request::Route;
use ursula::http::request::WriteHeaders;
use ursula_protocol::content_type;
use ursula_protocol::lifetime;
use ursula_protocol::offset::ReadFrom;
use ursula_protocol::path::COMPAT_BUCKET;

const DEFAULT_TIMEOUT_MS: u64 = 30_000;

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let target = lines.next().unwrap_or_default();
    // What hyper hands the router: a parsed URI. Bytes no URI holds still reach the parsers
    // as text, as a gateway or a test could pass them.
    match Uri::try_from(target) {
        Ok(uri) => target_parts(uri.path(), uri.query()),
        Err(_) => {
            if let Ok(text) = std::str::from_utf8(target) {
                match text.split_once('?') {
                    Some((path, query)) => target_parts(path, Some(query)),
                    None => target_parts(text, None),
                }
            }
        }
    }
    let mut headers = HeaderMap::new();
    for line in lines {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(&line[colon + 1..]),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    check_headers(&headers);
});

fn target_parts(path: &str, query: Option<&str>) {
    if let Ok(route) = request::route(path) {
        check_route(&route);
    }
    if let Ok(q) = parse_read_query(query, DEFAULT_TIMEOUT_MS) {
        assert!((1..=ursula_protocol::MAX_READ_BYTES).contains(&q.max_bytes));
        assert!(q.timeout_ms == DEFAULT_TIMEOUT_MS || (1..=60_000).contains(&q.timeout_ms));
        assert!(
            !(q.leader && q.live != Live::No),
            "leader reads are never live"
        );
        if let ReadFrom::At(o) = q.from {
            // The one token that names this offset.
            let token = o.to_string();
            assert_eq!(ReadFrom::parse(&token), Some(ReadFrom::At(o)));
        }
    }
    // Decoding never grows a query by more than its lossy UTF-8 replacements (3 bytes for
    // each byte of the query at worst): no query allocates out of proportion to its size.
    let decoded: usize = request::query_pairs(query)
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    assert!(decoded <= query.map_or(0, str::len) * 3);
    if let Ok(o) = request::path_offset(path.trim_start_matches('/')) {
        assert_eq!(
            request::path_offset(&ursula_protocol::offset::Offset(o).to_string()).ok(),
            Some(o)
        );
    }
}

/// A stream route names a `bucket/stream` key that routes back to itself once its two
/// parts are percent-encoded again.
fn check_route(route: &Route) {
    let key = match route {
        Route::Stream(sp)
        | Route::Bootstrap(sp)
        | Route::SnapshotBare(sp)
        | Route::Snapshot(sp, _)
        | Route::Retention(sp, _) => &sp.key,
        _ => return,
    };
    let (bucket, stream) = key.split_once('/').expect("a stream key has a bucket");
    assert!(!stream.contains('/'), "one '/' in a key: {key:?}");
    let path = if bucket == COMPAT_BUCKET {
        format!("/v1/stream/{}", encoded(stream))
    } else {
        format!("/{}/{}", encoded(bucket), encoded(stream))
    };
    match request::route(&path) {
        Ok(Route::Stream(again)) => assert_eq!(&again.key, key, "{path}"),
        other => panic!("{path} of key {key:?} routes to {other:?}"),
    }
}

fn encoded(segment: &str) -> String {
    percent_encoding::utf8_percent_encode(segment, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn shown<T: std::fmt::Debug>(r: Result<T, ApiError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("{} {}", e.status, e.body),
    }
}

fn check_headers(headers: &HeaderMap) {
    let sent = WriteHeaders::scan(headers);
    // The write path's one pass over the headers reads what the lookups by name read.
    assert_eq!(
        shown(sent.content_type()),
        shown(request::content_type(headers))
    );
    assert_eq!(
        shown(sent.incarnation()),
        shown(request::incarnation(headers))
    );
    assert_eq!(
        sent.record_match,
        headers.contains_key("stream-record-match")
    );
    if let Ok(Some(normal)) = sent.content_type() {
        // A normalized type is a fixed point: stored once, compared as it is.
        assert_eq!(content_type::normalize(&normal).as_deref(), Some(&*normal));
    }
    if let Ok(Some(p)) = sent.producer() {
        assert!(!p.id.is_empty() && p.id.len() <= ursula_protocol::seq::MAX_PRODUCER_ID_BYTES);
        assert!(p.epoch < 1 << 53 && p.seq < 1 << 53);
    }
    let _ = sent.closed();
    if let Ok(Some(seq)) = sent.stream_seq() {
        // What is stored and compared: bounded, printable ASCII (an empty value counts too).
        assert!(seq.len() <= ursula_protocol::seq::MAX_SEQ_BYTES);
        assert!(seq.iter().all(|b| (0x20..=0x7e).contains(b)));
    }
    match request::lifetime(headers) {
        Ok(Some(ursula_state::stream::Lifetime::Ttl(secs))) => {
            assert_eq!(lifetime::parse_ttl(&secs.to_string()), Some(secs));
        }
        Ok(Some(ursula_state::stream::Lifetime::ExpiresAt(ms))) => {
            let text = lifetime::format_expires_at(ms);
            // Years past 9999 have no RFC 3339 form; the formatter falls back to digits.
            if let Some(back) = lifetime::parse_expires_at(&text) {
                assert_eq!(back, ms, "{text}");
            }
        }
        _ => {}
    }
}
