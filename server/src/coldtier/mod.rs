//! The cold tier as the server uses it: settings from `[storage.cold]` (resolved in
//! [`crate::config::cold`]), the store, fetching the cold pieces a read plan names, and the
//! background workers.
//!
//! - [`flush`]: the flush worker that moves hot bytes to objects and commits their references.
//! - [`gc`]: deletion of objects no stream references any more, after the grace.

pub mod flush;
pub mod gc;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use bytes::BytesMut;
use ursula_cold::ColdError;
use ursula_cold::ColdStore;

pub use crate::config::ColdSettings;

use crate::stream::data::ColdPiece;

/// Counters the metrics report.
#[derive(Debug, Default)]
pub struct ColdCounters {
    pub flushes: AtomicU64,
    pub flushed_bytes: AtomicU64,
    pub flush_write_errors: AtomicU64,
    pub backpressure_events: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub read_errors: AtomicU64,
    pub deleted_objects: AtomicU64,
}

/// The node's cold tier.
#[derive(Clone)]
pub struct ColdTier {
    pub store: ColdStore,
    pub settings: Arc<ColdSettings>,
    pub counters: Arc<ColdCounters>,
    /// Per group: cold backpressure refusals.
    pub group_backpressure: Arc<Vec<AtomicU64>>,
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
    pub async fn open(settings: ColdSettings, groups: u32) -> Result<ColdTier, ColdError> {
        let store = ColdStore::new(&settings.store)?;
        store.open_checked().await?;
        tracing::info!(store = %store.describe(), "cold tier ready");
        Ok(ColdTier {
            store,
            settings: Arc::new(settings),
            counters: Arc::new(ColdCounters::default()),
            group_backpressure: Arc::new((0..groups).map(|_| AtomicU64::new(0)).collect()),
        })
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
        let pieces = pieces.to_vec();
        async move {
            let parts: Vec<Result<Bytes, ColdError>> =
                futures_util::stream::iter(pieces.into_iter().map(move |p| {
                    let store = store.clone();
                    async move { store.get_range(&p.object, p.range).await }
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

/// Adds the cold tier's fields to the metrics snapshot (the spec's names, plus flush and read
/// counters): hot bytes are reported with or without a cold backend.
pub fn metrics_into(st: &crate::http::AppState, body: &mut serde_json::Value) {
    let hot: Vec<u64> = (0..st.rt.group_count())
        .map(|g| {
            st.rt
                .with_group_now(g, |g| g.state.hot_bytes())
                .unwrap_or(0)
        })
        .collect();
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    obj.insert("cold_hot_bytes".into(), hot.iter().sum::<u64>().into());
    obj.insert("per_group_cold_hot_bytes".into(), hot.into());
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    match &st.cold {
        Some(t) => {
            let c = &t.counters;
            obj.insert("cold_backend".into(), t.store.describe().into());
            obj.insert(
                "cold_backpressure_events".into(),
                load(&c.backpressure_events).into(),
            );
            obj.insert(
                "per_group_cold_backpressure_events".into(),
                t.group_backpressure
                    .iter()
                    .map(load)
                    .collect::<Vec<_>>()
                    .into(),
            );
            obj.insert(
                "cold_flush_write_errors".into(),
                load(&c.flush_write_errors).into(),
            );
            obj.insert("cold_flushes".into(), load(&c.flushes).into());
            obj.insert("cold_flushed_bytes".into(), load(&c.flushed_bytes).into());
            obj.insert("cold_reads".into(), load(&c.reads).into());
            obj.insert("cold_read_bytes".into(), load(&c.read_bytes).into());
            obj.insert("cold_read_errors".into(), load(&c.read_errors).into());
            obj.insert(
                "cold_deleted_objects".into(),
                load(&c.deleted_objects).into(),
            );
        }
        None => {
            obj.insert("cold_backend".into(), serde_json::Value::Null);
            obj.insert("cold_backpressure_events".into(), 0.into());
            obj.insert("cold_flush_write_errors".into(), 0.into());
        }
    }
}
