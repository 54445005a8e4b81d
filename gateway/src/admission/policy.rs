//! The quota policy file (`--quota-policy`): the limits every bucket gets (`[default]`) and
//! the buckets that get others (`[[bucket]]`, each key falling back to `[default]`'s).
//!
//! ```toml
//! [default]
//! requests_per_sec = 200
//! max_live_reads = 64
//!
//! [[bucket]]
//! id = "tenant-a"
//! requests_per_sec = 1000
//! max_request_body_bytes = 4194304
//! max_concurrent_uploads = 2
//! max_upload_bytes = 67108864
//! ```
//!
//! A key set nowhere is no limit. Zero is refused rather than read as "nothing allowed": a
//! bucket that must not be served belongs out of the access policy, not in a quota.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

/// One bucket's limits. `None`: no limit of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantLimits {
    /// Requests admitted per second, with a burst of one second's worth: `429` past it.
    pub requests_per_sec: Option<u32>,
    /// Live reads (`live=long-poll` or `live=sse`) open at once: `429` past it.
    pub max_live_reads: Option<u32>,
    /// Largest request body: `413` past it, below the gateway's `--max-request-body-bytes`.
    pub max_request_body_bytes: Option<u64>,
    /// Bodies over `--small-body-max-bytes` read at once: `429` `TenantUploads` past it.
    pub max_concurrent_uploads: Option<u32>,
    /// Bytes of such bodies declared at once: `429` `TenantUploadBytes` past it.
    pub max_upload_bytes: Option<u64>,
}

impl TenantLimits {
    /// Every key of `self` that is set, the others from `base`.
    fn over(self, base: TenantLimits) -> TenantLimits {
        TenantLimits {
            requests_per_sec: self.requests_per_sec.or(base.requests_per_sec),
            max_live_reads: self.max_live_reads.or(base.max_live_reads),
            max_request_body_bytes: self.max_request_body_bytes.or(base.max_request_body_bytes),
            max_concurrent_uploads: self.max_concurrent_uploads.or(base.max_concurrent_uploads),
            max_upload_bytes: self.max_upload_bytes.or(base.max_upload_bytes),
        }
    }

    fn zero_key(&self) -> Option<&'static str> {
        [
            ("requests_per_sec", self.requests_per_sec.map(u64::from)),
            ("max_live_reads", self.max_live_reads.map(u64::from)),
            ("max_request_body_bytes", self.max_request_body_bytes),
            (
                "max_concurrent_uploads",
                self.max_concurrent_uploads.map(u64::from),
            ),
            ("max_upload_bytes", self.max_upload_bytes),
        ]
        .into_iter()
        .find(|(_, v)| *v == Some(0))
        .map(|(k, _)| k)
    }

    /// Whether any upload limit is set: only then do large bodies count per bucket.
    pub fn limits_uploads(&self) -> bool {
        self.max_concurrent_uploads.is_some() || self.max_upload_bytes.is_some()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BucketEntry {
    id: String,
    // Listed rather than flattened: serde cannot deny unknown keys through a flatten.
    requests_per_sec: Option<u32>,
    max_live_reads: Option<u32>,
    max_request_body_bytes: Option<u64>,
    max_concurrent_uploads: Option<u32>,
    max_upload_bytes: Option<u64>,
}

impl BucketEntry {
    fn limits(&self) -> TenantLimits {
        TenantLimits {
            requests_per_sec: self.requests_per_sec,
            max_live_reads: self.max_live_reads,
            max_request_body_bytes: self.max_request_body_bytes,
            max_concurrent_uploads: self.max_concurrent_uploads,
            max_upload_bytes: self.max_upload_bytes,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaFile {
    #[serde(default)]
    default: TenantLimits,
    #[serde(default)]
    bucket: Vec<BucketEntry>,
}

/// Why a quota policy file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum QuotaPolicyError {
    #[error("--quota-policy {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("--quota-policy {path}: {why}")]
    Invalid { path: String, why: String },
}

/// The loaded policy: the default limits and each listed bucket's, defaults filled in.
#[derive(Debug, Clone, Default)]
pub struct QuotaPolicy {
    default: TenantLimits,
    buckets: HashMap<String, TenantLimits>,
}

impl QuotaPolicy {
    pub fn load(path: &Path) -> Result<QuotaPolicy, QuotaPolicyError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| QuotaPolicyError::Read {
            path: shown.clone(),
            source,
        })?;
        QuotaPolicy::parse(&text).map_err(|why| QuotaPolicyError::Invalid { path: shown, why })
    }

    pub fn parse(text: &str) -> Result<QuotaPolicy, String> {
        let file: QuotaFile = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        if let Some(key) = file.default.zero_key() {
            return Err(format!(
                "[default] {key} = 0: leave the key out for no limit"
            ));
        }
        let mut buckets = HashMap::new();
        for entry in file.bucket {
            if entry.id.is_empty() {
                return Err("a [[bucket]] has an empty id".into());
            }
            if let Some(key) = entry.limits().zero_key() {
                return Err(format!(
                    "bucket {:?}: {key} = 0: leave the key out for no limit",
                    entry.id
                ));
            }
            let limits = entry.limits().over(file.default);
            if buckets.insert(entry.id.clone(), limits).is_some() {
                return Err(format!("bucket {:?} is listed twice", entry.id));
            }
        }
        Ok(QuotaPolicy {
            default: file.default,
            buckets,
        })
    }

    /// The limits of `bucket`: its own entry's, or `[default]`.
    pub fn limits(&self, bucket: &str) -> TenantLimits {
        self.buckets.get(bucket).copied().unwrap_or(self.default)
    }

    /// How many buckets the file lists.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_key_falls_back_to_the_default_and_unset_is_no_limit() {
        let p = QuotaPolicy::parse(
            r#"
            [default]
            requests_per_sec = 10
            max_live_reads = 2

            [[bucket]]
            id = "big"
            requests_per_sec = 1000
            max_upload_bytes = 1024
            "#,
        )
        .expect("valid");
        let big = p.limits("big");
        assert_eq!(big.requests_per_sec, Some(1000));
        assert_eq!(big.max_live_reads, Some(2));
        assert_eq!(big.max_upload_bytes, Some(1024));
        assert_eq!(big.max_request_body_bytes, None);
        assert!(big.limits_uploads());
        let other = p.limits("other");
        assert_eq!(other.requests_per_sec, Some(10));
        assert!(!other.limits_uploads());
        assert_eq!(
            QuotaPolicy::parse("").expect("empty").limits("x"),
            TenantLimits::default()
        );
    }

    #[test]
    fn zeros_unknown_keys_duplicates_and_empty_ids_are_refused() {
        for bad in [
            "[default]\nrequests_per_sec = 0",
            "[[bucket]]\nid = \"a\"\nmax_upload_bytes = 0",
            "[default]\nrequest_per_sec = 5",
            "[[bucket]]\nid = \"a\"\n[[bucket]]\nid = \"a\"",
            "[[bucket]]\nid = \"\"",
            "[[bucket]]\nrequests_per_sec = 5",
            "[default]\nrequests_per_sec = -1",
        ] {
            assert!(QuotaPolicy::parse(bad).is_err(), "accepted: {bad}");
        }
    }
}
