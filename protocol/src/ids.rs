//! Bucket and stream identifiers.
//!
//! Path segments arrive percent-encoded; they are decoded first and the rules apply to the
//! decoded bytes, so `%2F` cannot smuggle a `/` into a stream ID.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

/// The longest `{bucket}/{stream}` pair, slash included.
pub const MAX_PAIR_BYTES: usize = 122;
pub const MAX_STREAM_BYTES: usize = 122;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("bucket ID must be 4-64 bytes of a-z, 0-9, '_' or '-'")]
    BucketSyntax,
    #[error("bucket ID {0:?} is reserved")]
    BucketReserved(String),
    #[error("stream ID must not be empty")]
    StreamEmpty,
    #[error("stream ID is {0} bytes; the limit is 122")]
    StreamTooLong(usize),
    #[error("bucket/stream is {0} bytes; the limit is 122")]
    PairTooLong(usize),
    #[error("stream ID must not contain '/', NUL or '..'")]
    StreamForbiddenBytes,
    #[error("stream ID {0:?} is reserved")]
    StreamReserved(String),
    #[error("stream ID must not start with '$'")]
    StreamDollar,
    #[error("path segment is not valid UTF-8 after percent-decoding")]
    NotUtf8,
}

/// Percent-decodes one path segment into UTF-8; borrowed when it has no escapes (most do).
pub fn decode_segment(raw: &str) -> Result<Cow<'_, str>, IdError> {
    percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| IdError::NotUtf8)
}

pub fn validate_bucket(bucket: &str) -> Result<(), IdError> {
    let len_ok = (4..=64).contains(&bucket.len());
    let chars_ok = bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !len_ok || !chars_ok {
        return Err(IdError::BucketSyntax);
    }
    if bucket == "snapshots" || bucket.starts_with("__") {
        return Err(IdError::BucketReserved(bucket.to_owned()));
    }
    Ok(())
}

/// Stream rules alone, without the pair length (used for the internal compatibility bucket).
pub fn validate_stream(stream: &str) -> Result<(), IdError> {
    if stream.is_empty() {
        return Err(IdError::StreamEmpty);
    }
    if stream.len() > MAX_STREAM_BYTES {
        return Err(IdError::StreamTooLong(stream.len()));
    }
    if stream.contains('/') || stream.contains('\0') || stream.contains("..") {
        return Err(IdError::StreamForbiddenBytes);
    }
    if stream == "streams" {
        return Err(IdError::StreamReserved(stream.to_owned()));
    }
    if stream.starts_with('$') {
        return Err(IdError::StreamDollar);
    }
    Ok(())
}

pub fn validate_pair(bucket: &str, stream: &str) -> Result<(), IdError> {
    validate_bucket(bucket)?;
    validate_stream(stream)?;
    let pair = bucket.len() + 1 + stream.len();
    if pair > MAX_PAIR_BYTES {
        return Err(IdError::PairTooLong(pair));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_rules() {
        assert!(validate_bucket("demo").is_ok());
        assert!(validate_bucket("a_b-c9").is_ok());
        for bad in ["abc", "Demo", "de.mo", "de/mo", &"a".repeat(65)] {
            assert_eq!(validate_bucket(bad), Err(IdError::BucketSyntax), "{bad}");
        }
        assert!(matches!(
            validate_bucket("snapshots"),
            Err(IdError::BucketReserved(_))
        ));
        assert!(matches!(
            validate_bucket("__internal"),
            Err(IdError::BucketReserved(_))
        ));
    }

    #[test]
    fn stream_rules() {
        assert!(validate_pair("demo", "hello").is_ok());
        assert!(
            validate_pair("demo", "snapshot").is_ok(),
            "subresource names stay valid streams"
        );
        assert!(validate_pair("demo", "Any UTF-8 é").is_ok());
        assert_eq!(validate_pair("demo", ""), Err(IdError::StreamEmpty));
        assert_eq!(
            validate_pair("demo", "a..b"),
            Err(IdError::StreamForbiddenBytes)
        );
        assert_eq!(
            validate_pair("demo", "a\0b"),
            Err(IdError::StreamForbiddenBytes)
        );
        assert!(matches!(
            validate_pair("demo", "streams"),
            Err(IdError::StreamReserved(_))
        ));
        assert_eq!(validate_pair("demo", "$x"), Err(IdError::StreamDollar));
        let bucket = "b".repeat(64);
        assert!(validate_pair(&bucket, &"s".repeat(57)).is_ok());
        assert_eq!(
            validate_pair(&bucket, &"s".repeat(58)),
            Err(IdError::PairTooLong(123))
        );
    }

    #[test]
    fn decoding_exposes_encoded_slashes_and_rejects_bad_utf8() {
        assert_eq!(decode_segment("a%2Fb").as_deref(), Ok("a/b"));
        assert_eq!(decode_segment("%ff"), Err(IdError::NotUtf8));
    }
}
