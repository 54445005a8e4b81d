//! The protocol's header names as `HeaderName`s, built when the binary is compiled.
//!
//! A `&'static str` name is checked byte by byte and classified against the standard set every
//! time it becomes a `HeaderName`: several times per request on the append and read paths.
//! These constants are evaluated once, by the compiler; `from_static` refuses a name that is not
//! a lowercase token there, so a misspelt one fails the build instead of a request.

use axum::http::HeaderName;
use ursula_protocol::headers as h;

pub const STREAM_NEXT_OFFSET: HeaderName = HeaderName::from_static(h::STREAM_NEXT_OFFSET);
pub const STREAM_UP_TO_DATE: HeaderName = HeaderName::from_static(h::STREAM_UP_TO_DATE);
pub const STREAM_CLOSED: HeaderName = HeaderName::from_static(h::STREAM_CLOSED);
pub const STREAM_CURSOR: HeaderName = HeaderName::from_static(h::STREAM_CURSOR);
pub const STREAM_TTL: HeaderName = HeaderName::from_static(h::STREAM_TTL);
pub const STREAM_EXPIRES_AT: HeaderName = HeaderName::from_static(h::STREAM_EXPIRES_AT);
pub const STREAM_SEQ: HeaderName = HeaderName::from_static(h::STREAM_SEQ);
pub const STREAM_INCARNATION: HeaderName = HeaderName::from_static(h::STREAM_INCARNATION);
pub const STREAM_RETAINED_OFFSET: HeaderName = HeaderName::from_static(h::STREAM_RETAINED_OFFSET);
pub const STREAM_COLD_HOT_START_OFFSET: HeaderName =
    HeaderName::from_static(h::STREAM_COLD_HOT_START_OFFSET);
pub const STREAM_SNAPSHOT_OFFSET: HeaderName = HeaderName::from_static(h::STREAM_SNAPSHOT_OFFSET);
pub const STREAM_SNAPSHOT_DIGEST: HeaderName = HeaderName::from_static(h::STREAM_SNAPSHOT_DIGEST);
pub const PRODUCER_ID: HeaderName = HeaderName::from_static(h::PRODUCER_ID);
pub const PRODUCER_EPOCH: HeaderName = HeaderName::from_static(h::PRODUCER_EPOCH);
pub const PRODUCER_SEQ: HeaderName = HeaderName::from_static(h::PRODUCER_SEQ);
pub const CROSS_ORIGIN_RESOURCE_POLICY: HeaderName =
    HeaderName::from_static("cross-origin-resource-policy");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_constant_is_the_protocol_name_it_stands_for() {
        let pairs = [
            (STREAM_NEXT_OFFSET, h::STREAM_NEXT_OFFSET),
            (STREAM_UP_TO_DATE, h::STREAM_UP_TO_DATE),
            (STREAM_CLOSED, h::STREAM_CLOSED),
            (STREAM_CURSOR, h::STREAM_CURSOR),
            (STREAM_TTL, h::STREAM_TTL),
            (STREAM_EXPIRES_AT, h::STREAM_EXPIRES_AT),
            (STREAM_SEQ, h::STREAM_SEQ),
            (STREAM_INCARNATION, h::STREAM_INCARNATION),
            (STREAM_RETAINED_OFFSET, h::STREAM_RETAINED_OFFSET),
            (
                STREAM_COLD_HOT_START_OFFSET,
                h::STREAM_COLD_HOT_START_OFFSET,
            ),
            (STREAM_SNAPSHOT_OFFSET, h::STREAM_SNAPSHOT_OFFSET),
            (STREAM_SNAPSHOT_DIGEST, h::STREAM_SNAPSHOT_DIGEST),
            (PRODUCER_ID, h::PRODUCER_ID),
            (PRODUCER_EPOCH, h::PRODUCER_EPOCH),
            (PRODUCER_SEQ, h::PRODUCER_SEQ),
        ];
        for (name, text) in pairs {
            assert_eq!(name.as_str(), text);
            // The same name a request's parser makes from the wire, so lookups find it.
            let parsed = HeaderName::from_bytes(text.to_uppercase().as_bytes());
            assert_eq!(parsed.ok(), Some(name));
        }
    }
}
