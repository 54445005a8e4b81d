//! Request paths by the protocol's rules: `/{bucket}`, `/{bucket}/{stream}[/sub...]`, the
//! Durable Streams compatibility family `/v1/stream/{name}[/sub...]`, and the internal
//! `/__ursula/...` paths. Segments are percent-decoded before the ID rules apply
//! ([`crate::ids`]), so every component that keys requests by stream (the server's router, the
//! gateway's learned leader routes) agrees on which stream a path names.

use crate::ids;
use crate::ids::IdError;

/// The internal bucket behind the compatibility routes `/v1/stream/{name}`. Its `__` prefix is
/// reserved, so no client-created bucket can collide with it.
pub const COMPAT_BUCKET: &str = "__v1";

/// The first segment of every internal path.
pub const INTERNAL: &str = "__ursula";

/// What a request path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target<'a> {
    /// `/__ursula/...`: the raw segments after `__ursula`.
    Internal(Vec<&'a str>),
    /// `/{bucket}`: decoded, not validated (an invalid ID is judged per method).
    Bucket(String),
    /// A stream, keyed `bucket/stream`, and the raw segments after it (its subresource).
    Stream { key: String, rest: Vec<&'a str> },
    /// No shape the protocol knows: no leading `/`, or an empty segment.
    Unknown,
}

/// Parses a raw request path (no query). Invalid stream IDs are errors; unknown shapes are
/// [`Target::Unknown`].
pub fn parse(path: &str) -> Result<Target<'_>, IdError> {
    let Some(rest) = path.strip_prefix('/') else {
        return Ok(Target::Unknown);
    };
    let raw: Vec<&str> = rest.split('/').collect();
    if raw.first() == Some(&INTERNAL) {
        return Ok(Target::Internal(raw[1..].to_vec()));
    }
    if raw.iter().any(|s| s.is_empty()) {
        return Ok(Target::Unknown);
    }
    if let ["v1", "stream", name, sub @ ..] = raw.as_slice() {
        let stream = ids::decode_segment(name)?;
        ids::validate_stream(&stream)?;
        return Ok(Target::Stream {
            key: format!("{COMPAT_BUCKET}/{stream}"),
            rest: sub.to_vec(),
        });
    }
    let bucket = ids::decode_segment(raw[0])?;
    if raw.len() == 1 {
        return Ok(Target::Bucket(bucket));
    }
    let stream = ids::decode_segment(raw[1])?;
    ids::validate_pair(&bucket, &stream)?;
    Ok(Target::Stream {
        key: format!("{bucket}/{stream}"),
        rest: raw[2..].to_vec(),
    })
}

/// The stream a path names, `bucket/stream`, or `None` for anything else (buckets, internal
/// paths, invalid IDs).
pub fn stream_key(path: &str) -> Option<String> {
    match parse(path) {
        Ok(Target::Stream { key, .. }) => Some(key),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_keyed_by_their_decoded_bucket_and_stream() {
        assert_eq!(stream_key("/demo/hello").as_deref(), Some("demo/hello"));
        assert_eq!(
            stream_key("/demo/h%C3%A9llo/snapshot/5").as_deref(),
            Some("demo/héllo")
        );
        assert_eq!(stream_key("/v1/stream/x").as_deref(), Some("__v1/x"));
        assert_eq!(
            parse("/demo/s/bootstrap"),
            Ok(Target::Stream {
                key: "demo/s".into(),
                rest: vec!["bootstrap"]
            })
        );
    }

    #[test]
    fn buckets_internal_paths_and_bad_shapes_name_no_stream() {
        assert_eq!(parse("/demo"), Ok(Target::Bucket("demo".into())));
        assert_eq!(
            parse("/__ursula/metrics"),
            Ok(Target::Internal(vec!["metrics"]))
        );
        assert_eq!(parse("demo/s"), Ok(Target::Unknown));
        assert_eq!(parse("/demo//s"), Ok(Target::Unknown));
        assert_eq!(stream_key("/__ursula/flush-cold/demo/s"), None);
        assert!(parse("/demo/a..b").is_err());
        assert_eq!(stream_key("/demo/a..b"), None);
    }
}
