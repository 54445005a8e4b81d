//! The checks an attach makes on its arguments before any request: the stream URL's shape and
//! IDs, and the local path. Apart from [`crate::attach`] so each stays one responsibility.

use std::path::PathBuf;

use ursula_protocol::path;

use crate::error::Kind;
use crate::error::VfsError;
use crate::registry;

/// The shapes of a path that names a stream, as the server routes them.
const SHAPE_RULE: &str =
    "a stream URL's path is /{bucket}/{stream}, or /v1/stream/{name} for the compatibility routes";

/// Checks a stream URL before any request: http(s), a host, no query or fragment, a path that
/// names a stream (`/{bucket}/{stream}` or `/v1/stream/{name}`), and IDs by the protocol's
/// rules. Returns the URL without a trailing `/`.
///
/// The server reads `/{bucket}` as a bucket and `/{bucket}/{stream}/{more}` as a subresource
/// of the stream, so such a URL would reach it and fail with an answer that names neither
/// mistake (a 405, or a 404 when the stream is created): the shape is refused here, as
/// `invalid_url`. A bad ID is `invalid_name`, the kind the server's `400` for it gets too.
pub fn check_url(url: &str) -> Result<String, VfsError> {
    let bad = |m: &str| VfsError::new(Kind::InvalidUrl, format!("{url:?}: {m}"));
    if url.contains('?') || url.contains('#') {
        return Err(bad("a stream URL must not have a query or a fragment"));
    }
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| bad("a stream URL must start with http:// or https://"))?;
    let (host, path) = rest
        .split_once('/')
        .ok_or_else(|| bad("a stream URL needs a /bucket/stream path"))?;
    let path = path.trim_end_matches('/');
    if host.is_empty() || path.is_empty() {
        return Err(bad("a stream URL needs a host and a /bucket/stream path"));
    }
    let segments: Vec<&str> = path.split('/').collect();
    match segments.as_slice() {
        _ if segments.iter().any(|s| s.is_empty()) => {
            return Err(bad(&format!("{SHAPE_RULE}; /{path} has an empty segment")));
        }
        [bucket] => {
            return Err(bad(&format!(
                "{SHAPE_RULE}; /{path} names only the bucket {bucket:?}: add the stream, as in /{bucket}/notes"
            )));
        }
        [_, _] | ["v1", "stream", _] => {}
        [bucket, stream, more @ ..] => {
            return Err(bad(&format!(
                "{SHAPE_RULE}; /{path} has {} segments, which the server reads as the stream {bucket}/{stream} and its subresource {}",
                segments.len(),
                more.join("/")
            )));
        }
        [] => return Err(bad("a stream URL needs a /bucket/stream path")),
    }
    path::parse(&format!("/{path}")).map_err(|e| {
        VfsError::new(
            Kind::InvalidName,
            format!("{url:?}: the stream's name breaks the protocol's rules: {e}"),
        )
    })?;
    Ok(url.trim_end_matches('/').to_owned())
}

pub fn check_path(path: &str) -> Result<PathBuf, VfsError> {
    if path.is_empty() || path == ":memory:" || path.starts_with("file:") {
        return Err(VfsError::new(
            Kind::InvalidArgument,
            format!("{path:?} is not a plain file path: SQLite would not open the attached file"),
        ));
    }
    Ok(registry::canonical(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_urls_are_checked_before_any_request() {
        assert_eq!(
            check_url("http://h:1/demo/x/").map_err(|e| e.kind),
            Ok("http://h:1/demo/x".to_owned())
        );
        for ok in ["https://h/v1/stream/x", "http://h/demo/h%C3%A9llo"] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for (bad, kind) in [
            ("http://h/demo/x?a=1", Kind::InvalidUrl),
            ("ftp://h/demo/x", Kind::InvalidUrl),
            ("http://h/", Kind::InvalidUrl),
            ("http://h/ab/x", Kind::InvalidName),
            ("http://h/demo/a..b", Kind::InvalidName),
            ("http://h/demo/a%2Fb", Kind::InvalidName),
            ("http://h/v1/stream/$x", Kind::InvalidName),
        ] {
            assert_eq!(check_url(bad).map_err(|e| e.kind), Err(kind), "{bad}");
        }
        let e = check_url("http://h/demo/streams").expect_err("reserved");
        assert!(
            e.message.contains("stream ID \"streams\" is reserved"),
            "{e}"
        );
    }

    /// Asserts `check_url` refuses `url` as `kind` with a message naming `rule`.
    #[track_caller]
    fn refused(url: &str, kind: Kind, rule: &str) -> VfsError {
        let e = check_url(url).expect_err(url);
        assert_eq!(e.kind, kind, "{url}");
        assert!(e.message.contains(rule), "{e}");
        e
    }

    #[test]
    fn a_url_that_names_no_stream_is_invalid_url_naming_the_rule() {
        for (bad, says) in [
            ("http://h/demo", "names only the bucket \"demo\""),
            ("http://h/demo/", "names only the bucket \"demo\""),
            (
                "http://h/demo/a/b",
                "has 3 segments, which the server reads as the stream demo/a and its subresource b",
            ),
            ("http://h/prefix/demo/x", "has 3 segments"),
            ("http://h/v1/stream/x/y", "has 4 segments"),
            ("http://h/demo//x", "has an empty segment"),
        ] {
            let e = refused(
                bad,
                Kind::InvalidUrl,
                "a stream URL's path is /{bucket}/{stream}",
            );
            assert!(e.message.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_bad_bucket_id_is_invalid_name_naming_the_rule() {
        for bad in ["http://h/De/notes", "http://h/ab/notes"] {
            refused(
                bad,
                Kind::InvalidName,
                "bucket ID must be 4-64 bytes of a-z, 0-9, '_' or '-'",
            );
        }
    }
}
