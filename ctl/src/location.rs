//! Where a backup lives (`--location`): a local directory, or `s3://bucket/prefix`. Keys are
//! relative to the location (`manifest.json`, `groups/group-00000.msgpack`).
//!
//! S3 takes its settings the way the AWS tools do: every `AWS_*` variable object_store knows
//! (credentials, web identity, container and instance credentials, `AWS_REGION`), and
//! `AWS_ENDPOINT_URL` for S3-compatible stores, addressed by path. object_store is async and
//! ursulactl is not, so each S3 location owns a current-thread tokio runtime and blocks on it.

use std::path::Component;
use std::path::Path;
use std::path::PathBuf;

use futures_util::TryStreamExt;
use object_store::ObjectStore;
use object_store::ObjectStoreExt;
use object_store::PutPayload;
use object_store::aws::AmazonS3;
use object_store::aws::AmazonS3Builder;
use object_store::aws::AmazonS3ConfigKey;
use object_store::path::Path as StorePath;

/// Why a location could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum LocationError {
    #[error("location {spec:?}: {why}")]
    Invalid { spec: String, why: String },
    #[error("{location}: {op} {key}: {why}")]
    Io {
        location: String,
        op: &'static str,
        key: String,
        why: String,
    },
}

/// A backup location.
pub struct Location {
    /// As given on the command line, for messages.
    spec: String,
    backend: Backend,
}

enum Backend {
    Dir(PathBuf),
    S3 {
        runtime: tokio::runtime::Runtime,
        store: AmazonS3,
        /// The key prefix inside the bucket, without slashes at either end ("" for the root).
        prefix: String,
    },
}

impl Location {
    /// Opens `spec` with the process environment's `AWS_*` settings.
    pub fn open(spec: &str) -> Result<Location, LocationError> {
        Location::open_with(spec, std::env::vars())
    }

    /// Opens `spec`, taking S3 settings from `vars` instead of the process environment (tests
    /// cannot set the environment: the workspace forbids unsafe code).
    pub fn open_with(
        spec: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Location, LocationError> {
        let invalid = |why: &str| LocationError::Invalid {
            spec: spec.to_owned(),
            why: why.to_owned(),
        };
        let trimmed = spec.trim();
        if trimmed.is_empty() {
            return Err(invalid("empty"));
        }
        let Some(rest) = trimmed.strip_prefix("s3://") else {
            return Ok(Location {
                spec: spec.to_owned(),
                backend: Backend::Dir(PathBuf::from(trimmed)),
            });
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(invalid("no bucket: expected s3://bucket/prefix"));
        }
        let (builder, endpoint) = s3_builder(vars);
        let mut builder = builder.with_bucket_name(bucket);
        // A local or in-cluster S3-compatible store without TLS (MinIO, SeaweedFS).
        if endpoint.is_some_and(|ep| ep.starts_with("http://")) {
            builder = builder.with_allow_http(true);
        }
        install_crypto_provider();
        let store = builder.build().map_err(|e| invalid(&format!("S3: {e}")))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| invalid(&format!("cannot start the S3 client's runtime: {e}")))?;
        Ok(Location {
            spec: spec.to_owned(),
            backend: Backend::S3 {
                runtime,
                store,
                prefix: prefix.trim_matches('/').to_owned(),
            },
        })
    }

    /// The location as given.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Writes `bytes` as `key`, replacing what was there.
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), LocationError> {
        let key = self.checked(key, "PUT")?;
        match &self.backend {
            Backend::Dir(dir) => {
                let path = dir.join(key);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| self.io("PUT", key, e))?;
                }
                // Write beside and rename, so a crash never leaves a half object under `key`.
                let tmp = path.with_extension("partial");
                std::fs::write(&tmp, bytes).map_err(|e| self.io("PUT", key, e))?;
                std::fs::rename(&tmp, &path).map_err(|e| self.io("PUT", key, e))
            }
            Backend::S3 {
                runtime,
                store,
                prefix,
            } => runtime
                .block_on(store.put(&store_path(prefix, key), PutPayload::from(bytes)))
                .map(|_| ())
                .map_err(|e| self.io("PUT", key, e)),
        }
    }

    /// `key`'s bytes, or `None` when there is no such object.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, LocationError> {
        let key = self.checked(key, "GET")?;
        match &self.backend {
            Backend::Dir(dir) => match std::fs::read(dir.join(key)) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(self.io("GET", key, e)),
            },
            Backend::S3 {
                runtime,
                store,
                prefix,
            } => runtime.block_on(async {
                match store.get(&store_path(prefix, key)).await {
                    Ok(found) => found
                        .bytes()
                        .await
                        .map(|b| Some(b.to_vec()))
                        .map_err(|e| self.io("GET", key, e)),
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(self.io("GET", key, e)),
                }
            }),
        }
    }

    /// Every key under the location, sorted.
    pub fn list(&self) -> Result<Vec<String>, LocationError> {
        let mut keys = match &self.backend {
            Backend::Dir(dir) => {
                let mut keys = Vec::new();
                if dir.is_dir() {
                    walk(dir, dir, &mut keys).map_err(|e| self.io("LIST", "", e))?;
                }
                keys
            }
            Backend::S3 {
                runtime,
                store,
                prefix,
            } => {
                let scope = (!prefix.is_empty()).then(|| StorePath::from(prefix.as_str()));
                let metas: Vec<_> = runtime
                    .block_on(store.list(scope.as_ref()).try_collect())
                    .map_err(|e| self.io("LIST", "", e))?;
                let strip = if prefix.is_empty() {
                    String::new()
                } else {
                    format!("{prefix}/")
                };
                metas
                    .into_iter()
                    .filter_map(|m| {
                        let full = m.location.to_string();
                        full.strip_prefix(&strip).map(str::to_owned)
                    })
                    .collect()
            }
        };
        keys.sort();
        Ok(keys)
    }

    /// Refuses a key that would leave the location (a manifest names its objects' keys, and a
    /// tampered one must not read or write elsewhere).
    fn checked<'k>(&self, key: &'k str, op: &'static str) -> Result<&'k str, LocationError> {
        let escapes = key.is_empty()
            || key.starts_with('/')
            || Path::new(key)
                .components()
                .any(|c| !matches!(c, Component::Normal(_)));
        if escapes {
            return Err(LocationError::Io {
                location: self.spec.clone(),
                op,
                key: key.to_owned(),
                why: "not a key relative to the location".into(),
            });
        }
        Ok(key)
    }

    fn io(&self, op: &'static str, key: &str, e: impl std::fmt::Display) -> LocationError {
        LocationError::Io {
            location: self.spec.clone(),
            op,
            key: key.to_owned(),
            why: e.to_string(),
        }
    }
}

/// object_store's `AmazonS3Builder::from_env`, over `vars` instead of the process
/// environment; also answers the endpoint, which decides whether plain HTTP is allowed.
fn s3_builder(
    vars: impl IntoIterator<Item = (String, String)>,
) -> (AmazonS3Builder, Option<String>) {
    let mut builder = AmazonS3Builder::new();
    let mut endpoint = None;
    for (name, value) in vars {
        if !name.starts_with("AWS_") {
            continue;
        }
        let Ok(key) = name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() else {
            continue;
        };
        if key == AmazonS3ConfigKey::Endpoint {
            endpoint = Some(value.clone());
        }
        builder = builder.with_config(key, value);
    }
    (builder, endpoint)
}

fn store_path(prefix: &str, key: &str) -> StorePath {
    if prefix.is_empty() {
        StorePath::from(key)
    } else {
        StorePath::from(format!("{prefix}/{key}"))
    }
}

/// Files under `dir`, as `/`-separated keys relative to `root`. A `.partial` file is a write
/// that did not finish, not an object.
fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            walk(root, &path, out)?;
        } else if path.extension().is_none_or(|e| e != "partial") {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push(parts.join("/"));
        }
    }
    Ok(())
}

/// reqwest is built without a rustls provider (see the workspace Cargo.toml) and panics when it
/// builds a client without one, so install ring's. Losing the race to another provider is fine.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_location_round_trips_keys_and_lists_them_sorted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loc = Location::open(&dir.path().join("b").display().to_string()).expect("open");
        assert_eq!(
            loc.list().expect("list of a missing dir"),
            Vec::<String>::new()
        );
        loc.put("groups/group-00001.msgpack", b"one".to_vec())
            .expect("put");
        loc.put("manifest.json", b"{}".to_vec()).expect("put");
        assert_eq!(
            loc.get("groups/group-00001.msgpack").expect("get"),
            Some(b"one".to_vec())
        );
        assert_eq!(loc.get("groups/nope").expect("get"), None);
        assert_eq!(
            loc.list().expect("list"),
            vec!["groups/group-00001.msgpack", "manifest.json"]
        );
    }

    #[test]
    fn a_key_that_leaves_the_location_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loc = Location::open(&dir.path().display().to_string()).expect("open");
        for key in ["../x", "/etc/passwd", "a/../../b", ""] {
            assert!(loc.get(key).is_err(), "{key}");
            assert!(loc.put(key, Vec::new()).is_err(), "{key}");
        }
    }

    #[test]
    fn an_s3_location_needs_a_bucket() {
        let err = Location::open_with("s3:///p", Vec::new())
            .err()
            .expect("refused");
        assert!(err.to_string().contains("no bucket"), "{err}");
    }
}
