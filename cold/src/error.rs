use std::error::Error as StdError;
use std::ops::Range;

use crate::{FORMAT_EPOCH, FORMAT_EPOCH_MARKER};

/// What the object store's client gave up with, kept as a trait object so that object_store's
/// types stay out of this crate's API.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Errors of the cold object store. `location` is [`crate::ColdStore::describe`], so every
/// message names the bucket and root it is about.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ColdError {
    /// The configuration cannot work; nothing was sent to the store.
    #[error("{message}")]
    Config { message: String },

    #[error("cold object {key} not found in object storage {location}")]
    NotFound { key: String, location: String },

    /// The root holds data this release must not touch (spec: Startup failures). `found` is
    /// `None` when objects exist without a marker, else what the marker says.
    #[error("{}", format_epoch_message(location, found.as_deref()))]
    FormatEpoch {
        location: String,
        found: Option<String>,
    },

    #[error("object storage {location}: bucket {bucket:?} does not exist")]
    BucketMissing { bucket: String, location: String },

    /// The store did not answer, timed out, or answered 5xx/429 after the configured retries.
    /// Worth retrying later; the health gate counts these.
    #[error("object storage {location} is unavailable ({op} {key}): {source}")]
    Unavailable {
        op: &'static str,
        key: String,
        location: String,
        #[source]
        source: BoxError,
    },

    #[error(
        "object storage {location} refused {op} {key} (credentials, or IAM: the cold tier needs \
         s3:GetObject, s3:PutObject, s3:ListBucket and s3:DeleteObject): {source}"
    )]
    Denied {
        op: &'static str,
        key: String,
        location: String,
        #[source]
        source: BoxError,
    },

    /// A ranged read that the object cannot satisfy in full. `size` is the object's size when
    /// known.
    #[error("range {}..{} of cold object {key} is not satisfiable{}", range.start, range.end, size_suffix(*size))]
    InvalidRange {
        key: String,
        range: Range<u64>,
        size: Option<u64>,
    },

    #[error("invalid cold object key {key:?}: {reason}")]
    InvalidKey { key: String, reason: String },

    /// Any other failure of the store (a 4xx it should not send, a local I/O error, a malformed
    /// response).
    #[error("object storage {location} failed {op} {key}: {source}")]
    Backend {
        op: &'static str,
        key: String,
        location: String,
        #[source]
        source: BoxError,
    },
}

impl ColdError {
    pub(crate) fn config(message: impl Into<String>) -> Self {
        Self::Config {
            message: message.into(),
        }
    }
}

fn format_epoch_message(location: &str, found: Option<&str>) -> String {
    match found {
        None => format!(
            "object storage {location} is not empty and has no {FORMAT_EPOCH_MARKER} marker; \
             point storage.cold.root at an empty prefix used only by this cluster"
        ),
        Some(found) => format!(
            "object storage {location} is format epoch {found}; this release reads format epoch \
             {FORMAT_EPOCH} only: use a new prefix and never reuse one across epochs"
        ),
    }
}

fn size_suffix(size: Option<u64>) -> String {
    size.map(|size| format!(" (object is {size} bytes)"))
        .unwrap_or_default()
}

/// Where an object_store error came from, as far as the caller's next step goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    NotFound,
    NoSuchBucket,
    Denied,
    RangeNotSatisfiable,
    Unavailable,
    Other,
}

pub(crate) fn kind(err: &object_store::Error) -> Kind {
    let chain = chain_text(err);
    // S3 answers 404 for a missing bucket and a missing key alike; only the body tells them
    // apart.
    if chain.contains("<Code>NoSuchBucket</Code>") {
        return Kind::NoSuchBucket;
    }
    match err {
        object_store::Error::NotFound { .. } => return Kind::NotFound,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => return Kind::Denied,
        _ => {}
    }
    if has_transport_error(err) {
        return Kind::Unavailable;
    }
    match status_in(&chain) {
        Some(416) => Kind::RangeNotSatisfiable,
        Some(status) if status >= 500 || status == 429 || status == 408 => Kind::Unavailable,
        _ => Kind::Other,
    }
}

/// A connect, send or timeout failure: object_store wraps these as `HttpError`.
fn has_transport_error(err: &object_store::Error) -> bool {
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if e.downcast_ref::<object_store::client::HttpError>()
            .is_some()
        {
            return true;
        }
        current = e.source();
    }
    false
}

fn chain_text(err: &object_store::Error) -> String {
    let mut text = err.to_string();
    let mut current = err.source();
    while let Some(e) = current {
        text.push_str(" | ");
        text.push_str(&e.to_string());
        current = e.source();
    }
    text
}

/// The HTTP status of a failed request. object_store keeps it in a private type whose message
/// reads "Server returned non-2xx status code: 503 Service Unavailable: ..."; the unit test
/// below pins that wording against the locked version.
fn status_in(text: &str) -> Option<u16> {
    const MARK: &str = "Server returned non-2xx status code: ";
    let at = text.find(MARK)? + MARK.len();
    text.get(at..at + 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_read_from_object_store_wording() {
        assert_eq!(
            status_in(
                "Error performing PUT http://x in 1ms - Server returned non-2xx status code: 503 Service Unavailable: "
            ),
            Some(503)
        );
        assert_eq!(status_in("no status here"), None);
    }

    #[test]
    fn format_epoch_messages_match_the_spec_troubleshooting_headings() {
        let no_marker = ColdError::FormatEpoch {
            location: "s3://b/r".into(),
            found: None,
        };
        assert!(no_marker.to_string().starts_with(
            "object storage s3://b/r is not empty and has no URSULA_FORMAT_EPOCH marker"
        ));
        let other = ColdError::FormatEpoch {
            location: "s3://b/r".into(),
            found: Some("2".into()),
        };
        assert!(
            other
                .to_string()
                .starts_with("object storage s3://b/r is format epoch 2")
        );
    }
}
