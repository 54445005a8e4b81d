//! The local file a stream URL names, `<label>-<hash>.db` and `<label>-<hash>-ro<n>.db`: the
//! one implementation the npm and Python packages call (through the addon, the
//! `ursula_file_name` SQL function, or the C symbol `sqlite_ursula_file_name`), so one URL
//! names one file from every language.
//!
//! The URL is read with the WHATWG URL parser (the `url` crate), which is what a browser and
//! Node.js do: scheme and host lower-cased, IDNA applied to the host, a default port dropped,
//! `.` and `..` (also spelled `%2e`) resolved, IPv4 and IPv6 hosts in their one serialization.
//! Then every path segment is percent-decoded and encoded again one fixed way, so each spelling
//! of one stream gives one identity.

use ::url::Url;
use serde::Serialize;
use sha2::Digest;
use sha2::Sha256;

/// Bytes a path segment keeps as they are: RFC 3986's unreserved set.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// A stream URL's normal form and the parts of its file name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamName {
    /// What the hash reads: `scheme://host[:port]/seg/seg`, no userinfo, no trailing `/`.
    pub identity: String,
    /// The identity with the userinfo kept: the spelling the packages attach with.
    pub url: String,
    /// The last two segments, decoded, in `[a-z0-9_-]`, at most 64 characters.
    pub label: String,
    /// The first 32 hex digits of the SHA-256 of the identity.
    pub hash: String,
}

/// Why a text is not a stream URL; the message is the one the packages raise (`invalid_url`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotAStreamUrl(String);

impl StreamName {
    /// `<label>-<hash>.db`, or `<label>-<hash>-ro<n>.db` for reader `n` (1 and up).
    pub fn file_name(&self, read_only_index: u32) -> String {
        if read_only_index > 0 {
            format!("{}-{}-ro{read_only_index}.db", self.label, self.hash)
        } else {
            format!("{}-{}.db", self.label, self.hash)
        }
    }
}

/// What the packages read for reader `n` (0 for the owner) of the stream at `text`:
/// `{"ok": {"identity", "url", "file"}}`, or `{"error": {"message"}}` for a text that is not a
/// stream URL. One answer for the addon and the C symbol, so both read alike.
pub fn file_name_json(text: &str, read_only_index: u32) -> String {
    let answer = match name_stream(text) {
        Ok(n) => serde_json::json!({"ok": {
            "identity": n.identity,
            "url": n.url,
            "file": n.file_name(read_only_index),
        }}),
        Err(e) => serde_json::json!({"error": {"message": e.to_string()}}),
    };
    answer.to_string()
}

/// The text as JSON quotes it, as the messages name the URL.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| format!("{text:?}"))
}

/// Parses a stream URL into its normal form.
pub fn name_stream(text: &str) -> Result<StreamName, NotAStreamUrl> {
    if text.contains('?') || text.contains('#') {
        return Err(NotAStreamUrl(format!(
            "{}: a stream URL must not have a query or a fragment (the extension adds its own query)",
            quoted(text)
        )));
    }
    let parsed =
        Url::parse(text).map_err(|_| NotAStreamUrl(format!("{} is not a URL", quoted(text))))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(NotAStreamUrl(format!(
            "{}: a stream URL must start with http:// or https://",
            quoted(text)
        )));
    }
    let mut segments: Vec<Vec<u8>> = parsed
        .path()
        .split('/')
        .skip(1)
        .map(decode_segment)
        .collect();
    while segments.last().is_some_and(|s| s.is_empty()) {
        segments.pop();
    }
    let path: String = segments
        .iter()
        .map(|s| format!("/{}", encode_segment(s)))
        .collect();
    let host = parsed.host_str().unwrap_or_default();
    let host_port = match parsed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let scheme = parsed.scheme();
    let identity = format!("{scheme}://{host_port}{path}");
    let userinfo = match (parsed.username(), parsed.password()) {
        ("", None | Some("")) => String::new(),
        (user, None | Some("")) => format!("{user}@"),
        (user, Some(password)) => format!("{user}:{password}@"),
    };
    let url = format!("{scheme}://{userinfo}{host_port}{path}");
    let hash = Sha256::digest(identity.as_bytes())
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(StreamName {
        label: label_of(&segments),
        identity,
        url,
        hash,
    })
}

/// Percent-decodes a segment to bytes; a `%` not followed by two hex digits stays as it is.
fn decode_segment(segment: &str) -> Vec<u8> {
    percent_encoding::percent_decode_str(segment).collect()
}

/// The one fixed encoding: every byte outside the unreserved set as upper-case `%XX`.
fn encode_segment(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The last two segments, decoded (invalid UTF-8 as U+FFFD), joined by `-`, lower-cased in
/// ASCII only (Unicode case tables change between versions), every run of other characters
/// as `_`, a leading `-` as `_`, cut to 64; `stream` when there is no segment.
fn label_of(segments: &[Vec<u8>]) -> String {
    if segments.is_empty() {
        return "stream".to_owned();
    }
    let text = segments[segments.len().saturating_sub(2)..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect::<Vec<_>>()
        .join("-");
    let mut label = String::with_capacity(text.len());
    let mut in_run = false;
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
            label.push(c);
            in_run = false;
        } else if !in_run {
            label.push('_');
            in_run = true;
        }
    }
    if label.starts_with('-') {
        label.replace_range(..1, "_");
    }
    label.truncate(64);
    label
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_example_is_demo_notes_and_the_hash_of_the_normal_url() {
        let n = name_stream("http://127.0.0.1:4437/demo/notes").expect("a stream URL");
        let hash: String = Sha256::digest(b"http://127.0.0.1:4437/demo/notes")
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(n.file_name(0), format!("demo-notes-{hash}.db"));
        assert_eq!(n.file_name(2), format!("demo-notes-{hash}-ro2.db"));
    }

    #[test]
    fn a_label_keeps_the_last_two_segments_in_its_alphabet() {
        let label =
            |s: &[&str]| label_of(&s.iter().map(|x| x.as_bytes().to_vec()).collect::<Vec<_>>());
        assert_eq!(label(&["x", "y", "Z"]), "y-z");
        assert_eq!(label(&["é", "Ä"]), "_-_");
        assert_eq!(label(&["-abc", "n"]), "_abc-n");
        assert_eq!(label(&[]), "stream");
        assert_eq!(label(&["b", &"s".repeat(100)]).len(), 64);
    }

    #[test]
    fn a_query_a_fragment_or_another_scheme_is_refused_with_the_url_quoted() {
        let e = name_stream("http://h/a/b?x=1").expect_err("not a stream URL");
        assert!(
            e.to_string()
                .starts_with("\"http://h/a/b?x=1\": a stream URL must not"),
            "{e}"
        );
        let e = name_stream("ftp://h/a/b").expect_err("not a stream URL");
        assert!(
            e.to_string()
                .ends_with("must start with http:// or https://"),
            "{e}"
        );
        assert_eq!(
            name_stream("not a url")
                .expect_err("not a stream URL")
                .to_string(),
            "\"not a url\" is not a URL"
        );
    }
}
