//! The cold tier as the server uses it: settings from `[storage.cold]` (resolved in
//! [`crate::config::cold`]), the store, fetching the cold pieces a read plan names, and the
//! background workers.
//!
//! - [`cache`]: the read cache of cold ranges, bounded by bytes.
//! - [`flush`]: the flush worker that moves hot bytes to objects and commits their references.
//! - [`gc`]: deletion of objects no stream references any more, after the grace.
//! - [`index`]: the cold index: reading pages, compaction, sealing and collecting pages.
//! - [`stage`]: bodies staged as objects before their write is proposed (external payloads).
//! - [`sweep`]: deletion of objects no state ever referenced (orphans), after a day.

pub mod cache;
pub mod flush;
pub mod gc;
pub mod index;
pub mod stage;
pub mod sweep;

use std::collections::HashSet;
use std::sync::Mutex;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use bytes::BytesMut;
use ursula_cold::ColdError;
use ursula_cold::ColdStore;
use ursula_protocol::metrics::ColdSweepMetrics;

use self::cache::CacheStats;
use self::cache::ColdCache;

pub use crate::config::ColdSettings;

use ursula_state::stream::data::ColdPiece;

/// Counters the metrics report.
#[derive(Debug, Default)]
pub struct ColdCounters {
    pub flushes: AtomicU64,
    pub flushed_bytes: AtomicU64,
    pub flush_write_errors: AtomicU64,
    /// Object writes of the flush that succeeded, for the store's health gate.
    pub flush_writes: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub read_errors: AtomicU64,
    pub deleted_objects: AtomicU64,
    pub sweep: SweepCounters,
    pub index: index::IndexCounters,
    pub stage: stage::StageCounters,
}

/// The orphan sweep's progress (the metrics' `cold_orphan_*` fields).
#[derive(Debug, Default)]
pub struct SweepCounters {
    /// Passes completed.
    pub passes: AtomicU64,
    /// When the last pass ended (unix ms); 0 before the first.
    pub last_pass_ms: AtomicU64,
    /// Objects the last pass listed.
    pub listed: AtomicU64,
    /// Objects the last pass found unreferenced and past the minimum age.
    pub unreferenced: AtomicU64,
    /// The age of the oldest unreferenced object the last pass judged, past the minimum age
    /// or not (ms).
    pub oldest_unreferenced_ms: AtomicU64,
    pub deleted: AtomicU64,
    pub deleted_bytes: AtomicU64,
    /// Listings and deletions that failed.
    pub errors: AtomicU64,
}

/// The node's cold tier.
#[derive(Clone)]
pub struct ColdTier {
    pub store: ColdStore,
    pub settings: Arc<ColdSettings>,
    pub counters: Arc<ColdCounters>,
    /// `None` with `storage.cold.cache_size = 0`.
    pub cache: Option<Arc<ColdCache>>,
    /// Objects this node uploaded and has not yet seen committed or refused: never orphans.
    staged: Arc<Mutex<HashSet<Arc<str>>>>,
}

/// An object of [`ColdTier::stage`]'s, in flight until dropped.
pub struct Staged {
    staged: Arc<Mutex<HashSet<Arc<str>>>>,
    object: Arc<str>,
}

impl Drop for Staged {
    fn drop(&mut self) {
        lock(&self.staged).remove(&self.object);
    }
}

fn lock(m: &Mutex<HashSet<Arc<str>>>) -> std::sync::MutexGuard<'_, HashSet<Arc<str>>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl std::fmt::Debug for ColdTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdTier")
            .field("store", &self.store.describe())
            .finish_non_exhaustive()
    }
}

impl ColdTier {
    /// Builds the store and runs its startup check (the format-epoch marker).
    pub async fn open(settings: ColdSettings) -> Result<ColdTier, ColdError> {
        let store = ColdStore::new(&settings.store)?;
        store.open_checked().await?;
        tracing::info!(store = %store.describe(), "cold tier ready");
        Ok(ColdTier {
            store,
            cache: ColdCache::new(settings.cache_size).map(Arc::new),
            settings: Arc::new(settings),
            counters: Arc::new(ColdCounters::default()),
            staged: Arc::default(),
        })
    }

    /// Marks `object` as this node's upload in flight: the orphan sweep leaves it alone until
    /// the returned guard is dropped, once its commit resolved.
    pub fn stage(&self, object: Arc<str>) -> Staged {
        lock(&self.staged).insert(object.clone());
        Staged {
            staged: self.staged.clone(),
            object,
        }
    }

    /// The objects staged now.
    pub fn staged_now(&self) -> HashSet<Arc<str>> {
        lock(&self.staged).clone()
    }

    /// Fetches `pieces` in order, several at once, and joins them. Runs on the caller's task,
    /// never under a group's lock: a slow object store delays only this read. The future owns
    /// everything it uses, so it can live inside a response stream.
    pub fn fetch(
        &self,
        pieces: &[ColdPiece],
    ) -> impl std::future::Future<Output = Result<Bytes, ColdError>> + Send + 'static {
        use futures_util::StreamExt;
        let store = self.store.clone();
        let counters = self.counters.clone();
        let cache = self.cache.clone();
        let pieces = pieces.to_vec();
        async move {
            let parts: Vec<Result<Bytes, ColdError>> =
                futures_util::stream::iter(pieces.into_iter().map(move |p| {
                    let store = store.clone();
                    let cache = cache.clone();
                    async move {
                        if let Some(hit) = cache.as_ref().and_then(|c| c.get(&p.object, &p.range)) {
                            return Ok(hit);
                        }
                        let bytes = store.get_range(&p.object, p.range.clone()).await?;
                        if let Some(c) = &cache {
                            c.insert(&p.object, &p.range, bytes.clone());
                        }
                        Ok(bytes)
                    }
                }))
                .buffered(8)
                .collect()
                .await;
            let mut out = BytesMut::new();
            for p in parts {
                match p {
                    Ok(b) => out.extend_from_slice(&b),
                    Err(e) => {
                        counters.read_errors.fetch_add(1, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
            counters.reads.fetch_add(1, Ordering::Relaxed);
            counters
                .read_bytes
                .fetch_add(out.len() as u64, Ordering::Relaxed);
            Ok(out.freeze())
        }
    }
}

impl ColdTier {
    /// The tier's counters, for the metrics.
    pub fn stats(&self) -> ColdStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let c = &self.counters;
        ColdStats {
            backend: self.store.describe(),
            flushes: load(&c.flushes),
            flushed_bytes: load(&c.flushed_bytes),
            flush_write_errors: load(&c.flush_write_errors),
            reads: load(&c.reads),
            read_bytes: load(&c.read_bytes),
            read_errors: load(&c.read_errors),
            deleted_objects: load(&c.deleted_objects),
            cache: self.cache.as_ref().map(|c| c.stats()).unwrap_or_default(),
            sweep: self.sweep_stats(),
            index: self.counters.index.metrics(self.settings.index_page_bytes),
            external: self.counters.stage.metrics(),
        }
    }

    fn sweep_stats(&self) -> ColdSweepMetrics {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let s = &self.counters.sweep;
        ColdSweepMetrics {
            cold_orphan_min_age_ms: self.settings.orphan_min_age.as_millis() as u64,
            cold_orphan_sweep_passes: load(&s.passes),
            cold_orphan_sweep_last_pass_ms: load(&s.last_pass_ms),
            cold_orphan_sweep_listed_objects: load(&s.listed),
            cold_orphans_found: load(&s.unreferenced),
            cold_orphan_oldest_age_ms: load(&s.oldest_unreferenced_ms),
            cold_orphans_deleted: load(&s.deleted),
            cold_orphan_deleted_bytes: load(&s.deleted_bytes),
            cold_orphan_sweep_errors: load(&s.errors),
        }
    }
}

/// The cold tier's counters (the metrics' `cold_*` fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColdStats {
    /// The store, e.g. `s3://bucket/root`.
    pub backend: String,
    pub flushes: u64,
    pub flushed_bytes: u64,
    pub flush_write_errors: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub read_errors: u64,
    pub deleted_objects: u64,
    /// The read cache's size, fill and counters; all zero with the cache off.
    pub cache: CacheStats,
    pub sweep: ColdSweepMetrics,
    pub index: ursula_protocol::metrics::ColdIndexMetrics,
    pub external: ursula_protocol::metrics::ColdExternalMetrics,
}
