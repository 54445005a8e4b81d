use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::{Path, PathPart};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::config::{self, ColdConfig};
use crate::error::{self, BoxError, ColdError, Kind};
use crate::{FORMAT_EPOCH, FORMAT_EPOCH_MARKER};

/// One object of a listing: its key (relative to the root), its size, and when the store last
/// wrote it (unix ms, the store's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    pub modified_ms: u64,
}

/// The cold tier's object store: one bucket (or directory, or memory) and a root prefix inside
/// it. Keys are relative to the root. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct ColdStore {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn ObjectStore>,
    /// The backend's namespace inside `store` (see `config::Backend::base`).
    base: Path,
    /// `base` plus the configured root: every key lives under it.
    root: Path,
    location: String,
    scheme: String,
    bucket: Option<String>,
}

impl std::fmt::Debug for ColdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ColdStore")
            .field(&self.inner.location)
            .finish()
    }
}

impl ColdStore {
    /// Builds the client. Sends nothing: a store that is down fails later, in
    /// [`ColdStore::open_checked`] or the first request.
    pub fn new(cfg: &ColdConfig) -> Result<ColdStore, ColdError> {
        let backend = config::build(&cfg.backend)?;
        Self::assemble(
            backend.store,
            backend.base,
            backend.scheme,
            backend.bucket,
            &cfg.root,
        )
    }

    /// The same backend and connection pool under another root (relative to the backend, not to
    /// this store's root). For a second namespace in one bucket, and for tests.
    pub fn with_root(&self, root: &str) -> Result<ColdStore, ColdError> {
        let inner = &self.inner;
        Self::assemble(
            Arc::clone(&inner.store),
            inner.base.clone(),
            inner.scheme.clone(),
            inner.bucket.clone(),
            root,
        )
    }

    fn assemble(
        store: Arc<dyn ObjectStore>,
        base: Path,
        scheme: String,
        bucket: Option<String>,
        root: &str,
    ) -> Result<ColdStore, ColdError> {
        let root = root.trim_matches('/');
        let root_path = if root.is_empty() {
            base.clone()
        } else {
            let rel = parse_key(root).map_err(|reason| {
                ColdError::config(format!(
                    "storage.cold.root {root:?} is not usable: {reason}"
                ))
            })?;
            join(&base, &rel)
        };
        let location = if root.is_empty() {
            scheme.clone()
        } else if scheme.ends_with('/') {
            format!("{scheme}{root}")
        } else {
            format!("{scheme}/{root}")
        };
        Ok(ColdStore {
            inner: Arc::new(Inner {
                store,
                base,
                root: root_path,
                location,
                scheme,
                bucket,
            }),
        })
    }

    /// The startup check of the spec's "Object storage" rule: a root without objects gets the
    /// `URSULA_FORMAT_EPOCH` marker, a root with this epoch's marker is accepted, anything else
    /// is refused before anything is written.
    pub async fn open_checked(&self) -> Result<(), ColdError> {
        let marker = join(&self.inner.root, &Path::from(FORMAT_EPOCH_MARKER));
        match self.inner.store.get(&marker).await {
            Ok(found) => {
                let body = found
                    .bytes()
                    .await
                    .map_err(|e| self.err("GET", FORMAT_EPOCH_MARKER, e))?;
                return self.check_marker(&body);
            }
            Err(e) if error::kind(&e) == Kind::NotFound => {}
            Err(e) => return Err(self.err("GET", FORMAT_EPOCH_MARKER, e)),
        }
        let mut listing = self.inner.store.list(scope(&self.inner.root));
        let mut marker_listed = false;
        while let Some(item) = listing.next().await {
            // A failed listing is a store failure, not evidence of foreign data.
            let item = item.map_err(|e| self.err("LIST", "", e))?;
            if item.location == marker {
                // Another node of the cluster wrote it between our read and our listing.
                marker_listed = true;
                continue;
            }
            tracing::warn!(
                location = %self.inner.location,
                object = %item.location,
                "cold root holds objects but no format-epoch marker"
            );
            return Err(ColdError::FormatEpoch {
                location: self.inner.location.clone(),
                found: None,
            });
        }
        drop(listing);
        if marker_listed {
            let body = self
                .inner
                .store
                .get(&marker)
                .await
                .map_err(|e| self.err("GET", FORMAT_EPOCH_MARKER, e))?
                .bytes()
                .await
                .map_err(|e| self.err("GET", FORMAT_EPOCH_MARKER, e))?;
            return self.check_marker(&body);
        }
        self.inner
            .store
            .put(&marker, PutPayload::from(format!("{FORMAT_EPOCH}\n")))
            .await
            .map_err(|e| self.err("PUT", FORMAT_EPOCH_MARKER, e))?;
        tracing::info!(location = %self.inner.location, epoch = FORMAT_EPOCH, "wrote format-epoch marker");
        Ok(())
    }

    fn check_marker(&self, body: &[u8]) -> Result<(), ColdError> {
        let found = match std::str::from_utf8(body) {
            Ok(text) => text.trim(),
            Err(_) => "unreadable",
        };
        if found == FORMAT_EPOCH.to_string() {
            return Ok(());
        }
        let found: String = if found.is_empty() {
            "unreadable".to_owned()
        } else {
            found.chars().take(32).collect()
        };
        Err(ColdError::FormatEpoch {
            location: self.inner.location.clone(),
            found: Some(found),
        })
    }

    /// Writes `body` at `key`, replacing what is there, in one request.
    pub async fn put(&self, key: &str, body: Bytes) -> Result<(), ColdError> {
        let path = self.writable_path(key)?;
        self.inner
            .store
            .put(&path, PutPayload::from(body))
            .await
            .map(|_| ())
            .map_err(|e| self.err("PUT", key, e))
    }

    pub async fn get(&self, key: &str) -> Result<Bytes, ColdError> {
        let path = self.path(key)?;
        let found = self
            .inner
            .store
            .get(&path)
            .await
            .map_err(|e| self.err("GET", key, e))?;
        found.bytes().await.map_err(|e| self.err("GET", key, e))
    }

    /// Exactly the bytes `range` of the object. A range that reaches past the end is an error
    /// ([`ColdError::InvalidRange`]) rather than a short read: the cold tier reads ranges it
    /// recorded, so a short object means something is wrong. An empty range reads nothing and
    /// does not check the object exists.
    pub async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, ColdError> {
        let path = self.path(key)?;
        if range.start > range.end {
            return Err(ColdError::InvalidRange {
                key: key.to_owned(),
                range,
                size: None,
            });
        }
        if range.start == range.end {
            return Ok(Bytes::new());
        }
        match self.inner.store.get_range(&path, range.clone()).await {
            Ok(bytes) if bytes.len() as u64 == range.end - range.start => Ok(bytes),
            // Backends clip a range that runs past the end.
            Ok(bytes) => Err(ColdError::InvalidRange {
                key: key.to_owned(),
                range: range.clone(),
                size: Some(range.start + bytes.len() as u64),
            }),
            Err(e) => match error::kind(&e) {
                Kind::RangeNotSatisfiable | Kind::Other => {
                    // Each backend words "starts past the end" its own way; the size decides.
                    match self.inner.store.head(&path).await {
                        Ok(meta) if meta.size < range.end => Err(ColdError::InvalidRange {
                            key: key.to_owned(),
                            range,
                            size: Some(meta.size),
                        }),
                        _ => Err(self.err("GET", key, e)),
                    }
                }
                _ => Err(self.err("GET", key, e)),
            },
        }
    }

    /// Whether `key` is there (one `HEAD`).
    pub async fn exists(&self, key: &str) -> Result<bool, ColdError> {
        let path = self.path(key)?;
        match self.inner.store.head(&path).await {
            Ok(_) => Ok(true),
            Err(e) if error::kind(&e) == Kind::NotFound => Ok(false),
            Err(e) => Err(self.err("HEAD", key, e)),
        }
    }

    /// Deletes `key`; a key that is not there is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), ColdError> {
        let path = self.writable_path(key)?;
        match self.inner.store.delete(&path).await {
            Ok(()) => Ok(()),
            Err(e) if error::kind(&e) == Kind::NotFound => Ok(()),
            Err(e) => Err(self.err("DELETE", key, e)),
        }
    }

    /// Keys under `prefix`, relative to the root, sorted. Prefixes match whole path segments:
    /// `list("a/b")` finds `a/b/c` but not `a/bc`; `list("")` finds every key. The format-epoch
    /// marker is not listed.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, ColdError> {
        let listed = self.list_objects(prefix).await?;
        Ok(listed.into_iter().map(|o| o.key).collect())
    }

    /// The objects under `prefix` as [`list`](Self::list) finds them, with their size and
    /// when the store last wrote them.
    pub async fn list_objects(&self, prefix: &str) -> Result<Vec<Listed>, ColdError> {
        let prefix = prefix.trim_matches('/');
        let under = if prefix.is_empty() {
            self.inner.root.clone()
        } else {
            let rel = parse_key(prefix).map_err(|reason| ColdError::InvalidKey {
                key: prefix.to_owned(),
                reason,
            })?;
            join(&self.inner.root, &rel)
        };
        let mut listing = self.inner.store.list(scope(&under));
        let mut out = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| self.err("LIST", prefix, e))?;
            let Some(parts) = meta.location.prefix_match(&self.inner.root) else {
                continue;
            };
            let key = parts
                .map(|part| part.as_ref().to_owned())
                .collect::<Vec<_>>()
                .join("/");
            if key != FORMAT_EPOCH_MARKER {
                let modified_ms = u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0);
                out.push(Listed {
                    key,
                    size: meta.size,
                    modified_ms,
                });
            }
        }
        out.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// One cheap request that needs the bucket and the credentials to work: a read of the
    /// marker, which is a few bytes or missing. The caller bounds it with its own deadline
    /// (`storage.cold.s3.probe_timeout`).
    pub async fn probe(&self) -> Result<(), ColdError> {
        let marker = join(&self.inner.root, &Path::from(FORMAT_EPOCH_MARKER));
        match self.inner.store.get(&marker).await {
            Ok(found) => found
                .bytes()
                .await
                .map(|_| ())
                .map_err(|e| self.err("GET", FORMAT_EPOCH_MARKER, e)),
            Err(e) if error::kind(&e) == Kind::NotFound => Ok(()),
            Err(e) => Err(self.err("GET", FORMAT_EPOCH_MARKER, e)),
        }
    }

    /// Where the store points, for logs and messages: `s3://bucket/root`, `file:///dir/root` or
    /// `memory://root`.
    pub fn describe(&self) -> String {
        self.inner.location.clone()
    }

    fn path(&self, key: &str) -> Result<Path, ColdError> {
        let rel = parse_key(key).map_err(|reason| ColdError::InvalidKey {
            key: key.to_owned(),
            reason,
        })?;
        Ok(join(&self.inner.root, &rel))
    }

    /// The marker is written by `open_checked` alone.
    fn writable_path(&self, key: &str) -> Result<Path, ColdError> {
        if key == FORMAT_EPOCH_MARKER {
            return Err(ColdError::InvalidKey {
                key: key.to_owned(),
                reason: "reserved for the format-epoch marker".to_owned(),
            });
        }
        self.path(key)
    }

    fn err(&self, op: &'static str, key: &str, e: object_store::Error) -> ColdError {
        let key = key.to_owned();
        let location = self.inner.location.clone();
        match error::kind(&e) {
            Kind::NotFound => ColdError::NotFound { key, location },
            Kind::NoSuchBucket => ColdError::BucketMissing {
                bucket: self.inner.bucket.clone().unwrap_or_default(),
                location,
            },
            Kind::Denied => ColdError::Denied {
                op,
                key,
                location,
                source: boxed(e),
            },
            Kind::Unavailable => ColdError::Unavailable {
                op,
                key,
                location,
                source: boxed(e),
            },
            Kind::RangeNotSatisfiable | Kind::Other => ColdError::Backend {
                op,
                key,
                location,
                source: boxed(e),
            },
        }
    }
}

fn boxed(e: object_store::Error) -> BoxError {
    Box::new(e)
}

/// A relative key: `/`-separated segments, none empty, `.` or `..`, no control characters.
fn parse_key(key: &str) -> Result<Path, String> {
    if key.is_empty() {
        return Err("empty".to_owned());
    }
    if key.starts_with('/') || key.ends_with('/') {
        return Err("starts or ends with '/'".to_owned());
    }
    Path::parse(key).map_err(|e| e.to_string())
}

/// `list`'s argument for everything under `path`: the empty path means the whole store.
fn scope(path: &Path) -> Option<&Path> {
    (!path.as_ref().is_empty()).then_some(path)
}

fn join(base: &Path, rel: &Path) -> Path {
    base.parts()
        .chain(rel.parts())
        .collect::<Vec<PathPart<'_>>>()
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        assert!(parse_key("a/b/c").is_ok());
        assert!(parse_key("").is_err());
        assert!(parse_key("/a").is_err());
        assert!(parse_key("a/").is_err());
        assert!(parse_key("a//b").is_err());
        assert!(parse_key("a/../b").is_err());
    }

    #[test]
    fn join_keeps_segments() {
        let joined = join(&Path::from("tmp/x"), &Path::from("r/k"));
        assert_eq!(joined.as_ref(), "tmp/x/r/k");
        assert_eq!(join(&Path::default(), &Path::from("k")).as_ref(), "k");
    }
}
