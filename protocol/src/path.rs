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
///
/// Every request passes here, so it walks the segments once and allocates only the key (and a
/// segment that had percent escapes).
pub fn parse(path: &str) -> Result<Target<'_>, IdError> {
    let Some(rest) = path.strip_prefix('/') else {
        return Ok(Target::Unknown);
    };
    let mut segments = rest.split('/');
    let first = segments.next().unwrap_or_default();
    if first == INTERNAL {
        return Ok(Target::Internal(segments.collect()));
    }
    // Any empty segment makes the shape unknown: `rest` is empty, starts or ends with `/`,
    // or holds `//`.
    if rest.is_empty() || rest.starts_with('/') || rest.ends_with('/') || rest.contains("//") {
        return Ok(Target::Unknown);
    }
    let Some(second) = segments.next() else {
        return Ok(Target::Bucket(ids::decode_segment(first)?.into_owned()));
    };
    // `/v1/stream` alone is the bucket `v1`'s stream `stream`: `next` finds no name and
    // leaves nothing behind for the plain case below.
    if first == "v1"
        && second == "stream"
        && let Some(name) = segments.next()
    {
        let stream = ids::decode_segment(name)?;
        ids::validate_stream(&stream)?;
        return Ok(Target::Stream {
            key: [COMPAT_BUCKET, &stream].join("/"),
            rest: segments.collect(),
        });
    }
    let bucket = ids::decode_segment(first)?;
    let stream = ids::decode_segment(second)?;
    ids::validate_pair(&bucket, &stream)?;
    Ok(Target::Stream {
        key: [&*bucket, &*stream].join("/"),
        rest: segments.collect(),
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

    #[test]
    fn every_shape_of_path_parses_as_the_segment_rules_say() {
        let stream = |key: &str, rest: Vec<&'static str>| {
            Ok(Target::Stream {
                key: key.to_owned(),
                rest,
            })
        };
        assert_eq!(parse(""), Ok(Target::Unknown));
        assert_eq!(parse("/"), Ok(Target::Unknown));
        assert_eq!(parse("//demo"), Ok(Target::Unknown));
        assert_eq!(parse("/demo/"), Ok(Target::Unknown));
        assert_eq!(parse("/demo/s/"), Ok(Target::Unknown));
        assert_eq!(parse("/__ursula"), Ok(Target::Internal(vec![])));
        assert_eq!(parse("/__ursula/"), Ok(Target::Internal(vec![""])));
        assert_eq!(
            parse("/__ursula/flush-cold/demo/s"),
            Ok(Target::Internal(vec!["flush-cold", "demo", "s"]))
        );
        assert_eq!(parse("/d%65mo"), Ok(Target::Bucket("demo".into())));
        assert_eq!(parse("/%ff"), Err(IdError::NotUtf8));
        assert_eq!(parse("/demo/s"), stream("demo/s", vec![]));
        assert_eq!(parse("/demo/%73x"), stream("demo/sx", vec![]));
        assert_eq!(parse("/demo/s%2Fx"), Err(IdError::StreamForbiddenBytes));
        assert_eq!(
            parse("/demo/s/snapshot/%30"),
            stream("demo/s", vec!["snapshot", "%30"])
        );
        assert_eq!(parse("/v1/stream/x"), stream("__v1/x", vec![]));
        assert_eq!(parse("/v1/stream/a%20b/x"), stream("__v1/a b", vec!["x"]));
        // Two segments only: an ordinary bucket and stream, which `v1` is too short to be.
        assert_eq!(parse("/v1/stream"), Err(IdError::BucketSyntax));
        assert_eq!(parse("/v1/other/x"), Err(IdError::BucketSyntax));
    }
}
