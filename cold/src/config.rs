use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use crate::ColdError;

/// Per-attempt deadline of an S3 request when `storage.cold.s3.timeout` is not set.
///
/// The spec leaves the defaults open but says a write gives up within 55 s with them (5 attempts
/// of 10 s, about 3 s of backoff between them, and the flush worker's 1 s pause).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries after the first attempt when `storage.cold.s3.max_retries` is not set.
pub const DEFAULT_MAX_RETRIES: u32 = 4;

/// The region S3-compatible stores get when none is configured: most ignore it but every
/// SigV4 signature names one.
const ENDPOINT_DEFAULT_REGION: &str = "us-east-1";
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// `storage.cold.s3.server_side_encryption`, requested on every PUT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Sse {
    /// SSE-S3: `x-amz-server-side-encryption: AES256`.
    #[default]
    Aes256,
    /// SSE-KMS: `aws:kms`, with `kms_key_id` or else the AWS managed key.
    AwsKms { key_id: Option<String> },
    /// No header, for stores without encryption support (MinIO without KMS).
    None,
}

#[derive(Clone, PartialEq, Eq)]
pub enum BackendConfig {
    Memory,
    /// A local directory, for development: keys become files under `dir`.
    Fs {
        dir: PathBuf,
    },
    S3(S3Config),
}

/// `storage.cold.s3.*`: where the bucket is and how to reach it. `None` takes the default or,
/// for credentials, the environment.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Config {
    pub bucket: String,
    pub region: Option<String>,
    pub endpoint: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub sse: Sse,
    pub timeout: Option<Duration>,
    pub max_retries: Option<u32>,
}

impl S3Config {
    /// The bucket `bucket`, with every other setting left to its default.
    pub fn bucket(bucket: &str) -> S3Config {
        S3Config {
            bucket: bucket.to_owned(),
            ..S3Config::default()
        }
    }
}

// By hand, so that a logged config never shows the secret or the session token.
impl fmt::Debug for BackendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::Fs { dir } => f.debug_struct("Fs").field("dir", dir).finish(),
            Self::S3(s3) => s3.fmt(f),
        }
    }
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &redacted(&self.secret_access_key))
            .field("session_token", &redacted(&self.session_token))
            .field("sse", &self.sse)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdConfig {
    pub backend: BackendConfig,
    /// `storage.cold.root`: prefix of every key, without leading or trailing `/`. May be empty.
    pub root: String,
}

impl BackendConfig {
    /// On S3, the longest the client can take to give up on a write: every attempt
    /// (`max_retries` plus one) running into `timeout`, and the longest backoff before each
    /// retry. `None` for the other backends, whose writes do not retry.
    pub fn write_give_up_after(&self) -> Option<Duration> {
        let BackendConfig::S3(s3) = self else {
            return None;
        };
        let timeout = s3.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let retries = s3.max_retries.unwrap_or(DEFAULT_MAX_RETRIES);
        let b = BackoffConfig::default();
        // object_store's backoff grows by `base` from `init_backoff`, jittered up to its next
        // step and capped at `max_backoff`: the upper bound of each wait is the next step.
        let mut step = b.init_backoff.as_secs_f64();
        let mut waits = 0.0;
        for _ in 0..retries {
            step = (step * b.base).min(b.max_backoff.as_secs_f64());
            waits += step;
        }
        Some(
            timeout
                .saturating_mul(retries.saturating_add(1))
                .saturating_add(Duration::from_secs_f64(waits)),
        )
    }
}

/// A built client and where its keys start.
pub(crate) struct Backend {
    pub store: Arc<dyn ObjectStore>,
    /// Path of the backend's namespace inside `store`: the directory for `fs` (its
    /// LocalFileSystem spans `/`, so that building it needs no I/O), empty otherwise.
    pub base: Path,
    /// `describe()` without the root, e.g. `s3://bucket`.
    pub scheme: String,
    pub bucket: Option<String>,
}

pub(crate) fn build(cfg: &BackendConfig) -> Result<Backend, ColdError> {
    match cfg {
        BackendConfig::Memory => Ok(Backend {
            store: Arc::new(InMemory::new()),
            base: Path::default(),
            scheme: "memory://".to_owned(),
            bucket: None,
        }),
        BackendConfig::Fs { dir } => {
            let dir = std::path::absolute(dir).map_err(|e| {
                ColdError::config(format!(
                    "storage.cold.root directory {}: {e}",
                    dir.display()
                ))
            })?;
            let base = Path::from_absolute_path(&dir).map_err(|e| {
                ColdError::config(format!(
                    "storage.cold.root directory {} is not usable: {e}",
                    dir.display()
                ))
            })?;
            Ok(Backend {
                // No automatic cleanup of emptied directories: without a prefix it climbs past
                // `dir` towards `/`. Empty directories do not show in listings anyway.
                store: Arc::new(LocalFileSystem::new()),
                scheme: format!("file:///{base}"),
                base,
                bucket: None,
            })
        }
        BackendConfig::S3(s3) => {
            let store = build_s3(s3)?;
            Ok(Backend {
                store: Arc::new(store),
                base: Path::default(),
                scheme: format!("s3://{}", s3.bucket),
                bucket: Some(s3.bucket.clone()),
            })
        }
    }
}

fn build_s3(s: &S3Config) -> Result<object_store::aws::AmazonS3, ColdError> {
    if s.bucket.trim().is_empty() {
        return Err(ColdError::config(
            "storage.cold.s3.bucket is required when cold backend is 's3'",
        ));
    }
    let timeout = s.timeout.unwrap_or(DEFAULT_TIMEOUT);
    if timeout.is_zero() {
        return Err(ColdError::config(
            "storage.cold.s3.timeout must be non-zero",
        ));
    }
    let max_retries = s.max_retries.unwrap_or(DEFAULT_MAX_RETRIES);

    let mut builder = AmazonS3Builder::new().with_bucket_name(&s.bucket);
    builder = match (s.access_key_id.as_deref(), s.secret_access_key.as_deref()) {
        (Some(key_id), Some(secret)) => {
            let builder = builder
                .with_access_key_id(key_id)
                .with_secret_access_key(secret);
            match s.session_token.as_deref() {
                Some(token) => builder.with_token(token),
                None => builder,
            }
        }
        (None, None) => {
            if s.session_token.is_some() {
                return Err(ColdError::config(
                    "storage.cold.s3.session_token needs access_key_id and secret_access_key",
                ));
            }
            credentials_from_env(builder)
        }
        _ => {
            return Err(ColdError::config(
                "storage.cold.s3.access_key_id and storage.cold.s3.secret_access_key must be set \
                 together",
            ));
        }
    };

    let mut client = ClientOptions::new()
        .with_timeout(timeout)
        .with_connect_timeout(timeout.min(MAX_CONNECT_TIMEOUT));
    match s.endpoint.as_deref() {
        Some(endpoint) => {
            let endpoint = endpoint.trim_end_matches('/');
            if endpoint.starts_with("http://") {
                client = client.with_allow_http(true);
            } else if !endpoint.starts_with("https://") {
                return Err(ColdError::config(format!(
                    "storage.cold.s3.endpoint {endpoint:?} must start with http:// or https://"
                )));
            }
            // S3-compatible stores (MinIO, SeaweedFS, R2) address buckets by path.
            builder = builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false)
                .with_region(s.region.as_deref().unwrap_or(ENDPOINT_DEFAULT_REGION));
        }
        None => {
            builder = builder.with_virtual_hosted_style_request(true);
            let region = s.region.clone().or_else(region_from_env);
            if let Some(region) = region {
                builder = builder.with_region(region);
            }
        }
    }

    // object_store does not export the key's enum, only its name.
    let sse_key: AmazonS3ConfigKey = "aws_server_side_encryption"
        .parse()
        .map_err(|e| ColdError::config(format!("storage.cold.s3.server_side_encryption: {e}")))?;
    builder = match &s.sse {
        Sse::Aes256 => builder.with_config(sse_key, "AES256"),
        Sse::AwsKms {
            key_id: Some(key_id),
        } if !key_id.is_empty() => builder.with_sse_kms_encryption(key_id),
        Sse::AwsKms { .. } => builder.with_config(sse_key, "aws:kms"),
        Sse::None => builder,
    };

    let backoff = BackoffConfig::default();
    // object_store also stops retrying after `retry_timeout`; make it long enough that
    // `max_retries` is the bound that applies.
    let attempts = max_retries.saturating_add(1);
    let retry_timeout = timeout
        .saturating_mul(attempts)
        .saturating_add(backoff.max_backoff.saturating_mul(max_retries));
    let retry = RetryConfig {
        backoff,
        max_retries: max_retries as usize,
        retry_timeout,
    };

    install_crypto_provider();
    builder
        .with_client_options(client)
        .with_retry(retry)
        .build()
        .map_err(|e| ColdError::config(format!("storage.cold.s3: {e}")))
}

/// The AWS credential chain as object_store has it: the environment's static keys, web identity
/// (EKS/IRSA), the ECS and EKS Pod Identity container endpoints, and the EC2 instance profile.
/// Only credential settings are taken from the environment: bucket, endpoint and encryption come
/// from the config alone.
fn credentials_from_env(mut builder: AmazonS3Builder) -> AmazonS3Builder {
    for (name, value) in std::env::vars() {
        if !name.starts_with("AWS_") {
            continue;
        }
        let Ok(key) = name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() else {
            continue;
        };
        let is_credential = matches!(
            key,
            AmazonS3ConfigKey::AccessKeyId
                | AmazonS3ConfigKey::SecretAccessKey
                | AmazonS3ConfigKey::Token
                | AmazonS3ConfigKey::WebIdentityTokenFile
                | AmazonS3ConfigKey::RoleArn
                | AmazonS3ConfigKey::RoleSessionName
                | AmazonS3ConfigKey::StsEndpoint
                | AmazonS3ConfigKey::ContainerCredentialsRelativeUri
                | AmazonS3ConfigKey::ContainerCredentialsFullUri
                | AmazonS3ConfigKey::ContainerAuthorizationTokenFile
                | AmazonS3ConfigKey::MetadataEndpoint
                | AmazonS3ConfigKey::ImdsV1Fallback
        );
        if is_credential {
            builder = builder.with_config(key, value);
        }
    }
    builder
}

fn region_from_env() -> Option<String> {
    ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
}

/// reqwest is built without a rustls provider (see the workspace Cargo.toml) and panics when it
/// builds a client without one, so install ring's. Losing the race to another provider is fine:
/// any provider will do.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(bucket: &str) -> BackendConfig {
        BackendConfig::S3(S3Config {
            endpoint: Some("http://127.0.0.1:1".into()),
            access_key_id: Some("id".into()),
            secret_access_key: Some("very-secret".into()),
            session_token: Some("token-secret".into()),
            ..S3Config::bucket(bucket)
        })
    }

    #[test]
    fn a_write_gives_up_within_every_attempts_timeout_and_the_backoff_before_each_retry() {
        // The defaults: 5 attempts of 10 s, waits of at most 0.2, 0.4, 0.8 and 1.6 s.
        assert_eq!(s3("b").write_give_up_after(), Some(Duration::from_secs(53)));
        let short = BackendConfig::S3(S3Config {
            sse: Sse::None,
            timeout: Some(Duration::from_millis(500)),
            max_retries: Some(1),
            ..S3Config::bucket("b")
        });
        assert_eq!(
            short.write_give_up_after(),
            Some(Duration::from_millis(1200))
        );
        assert_eq!(BackendConfig::Memory.write_give_up_after(), None);
    }

    #[test]
    fn debug_output_redacts_secrets() {
        let text = format!("{:?}", s3("b"));
        assert!(
            !text.contains("very-secret") && !text.contains("token-secret"),
            "{text}"
        );
        assert!(text.contains("<redacted>"));
    }

    #[test]
    fn an_empty_bucket_is_refused_with_the_spec_message() {
        let Err(err) = build(&s3("")) else {
            panic!("built without a bucket")
        };
        assert_eq!(
            err.to_string(),
            "storage.cold.s3.bucket is required when cold backend is 's3'"
        );
    }

    #[test]
    fn half_static_credentials_are_refused() {
        let cfg = BackendConfig::S3(S3Config {
            access_key_id: Some("id".into()),
            sse: Sse::None,
            ..S3Config::bucket("b")
        });
        assert!(matches!(build(&cfg), Err(ColdError::Config { .. })));
    }

    #[test]
    fn an_endpoint_without_scheme_is_refused() {
        let cfg = BackendConfig::S3(S3Config {
            endpoint: Some("127.0.0.1:9000".into()),
            sse: Sse::None,
            timeout: Some(Duration::from_secs(1)),
            max_retries: Some(0),
            ..S3Config::bucket("b")
        });
        assert!(matches!(build(&cfg), Err(ColdError::Config { .. })));
    }

    #[test]
    fn an_https_client_builds_with_the_ring_provider() {
        let cfg = BackendConfig::S3(S3Config {
            region: Some("eu-west-1".into()),
            access_key_id: Some("id".into()),
            secret_access_key: Some("secret".into()),
            sse: Sse::AwsKms {
                key_id: Some("arn:aws:kms:eu-west-1:1:key/k".into()),
            },
            ..S3Config::bucket("b")
        });
        let backend = build(&cfg).expect("https client");
        assert_eq!(backend.scheme, "s3://b");
    }
}
