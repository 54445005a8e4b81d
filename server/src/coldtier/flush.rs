//! The flush worker. Each tick, on every core, for each group this node leads whose hot bytes
//! reached the threshold (or whose streams hold bytes older than the age limit), it copies the
//! groups' hot ranges under the group's lock, packs them per bucket into objects, uploads them
//! with the lock released, and commits a `ColdFlush` through the group's engine. Only the
//! commit frees hot memory, on every replica alike; an upload whose commit found the ranges
//! moved (another flush, a retention advance, a delete) leaves an unreferenced object that the
//! state machine hands to [`gc`](super::gc).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use bytes::BytesMut;

use super::ColdTier;
use crate::engine::EngineError;
use crate::engine::GroupEngine;
use crate::runtime::GroupId;
use crate::runtime::Runtime;
use crate::runtime::now_ms;
use ursula_state::stream::Applied;
use ursula_state::stream::Command;
use ursula_state::stream::FlushSlice;

/// A slice of this size or more gets an object of its own (the spec's direct-object layout);
/// smaller slices of one bucket are packed together.
const DIRECT_OBJECT_MIN: u64 = 1 << 20;

/// One stream's hot range, copied.
struct Slice {
    key: String,
    incarnation: u64,
    start: u64,
    bytes: Vec<u8>,
}

/// An object to upload and the slices it carries.
struct Pack {
    object: String,
    body: Bytes,
    slices: Vec<FlushSlice>,
}

/// Starts the worker on every core. Only a group's leader flushes and collects it.
pub fn spawn(rt: &Runtime, engine: Arc<dyn GroupEngine>, tier: ColdTier) {
    let uploads = Arc::new(tokio::sync::Semaphore::new(
        tier.settings.flush_max_concurrency,
    ));
    for core in 0..rt.core_count() {
        let Some(handle) = rt.core_handle(core) else {
            continue;
        };
        let (rt, engine, tier, uploads) =
            (rt.clone(), engine.clone(), tier.clone(), uploads.clone());
        handle.spawn(async move {
            let mut cursors = super::index::Cursors::default();
            let mut tick = tokio::time::interval(tier.settings.flush_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let groups: Vec<GroupId> = rt.groups_of(core).collect();
                for group in groups {
                    if !engine.leads(group) {
                        continue;
                    }
                    flush_streams(&rt, engine.as_ref(), &tier, &uploads, group, false, None).await;
                }
                super::gc::collect_core(&rt, engine.as_ref(), &tier, core).await;
                super::index::maintain_core(&rt, engine.as_ref(), &tier, core, &mut cursors).await;
            }
        });
    }
}

/// What flushing one stream did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// Bytes whose move to the cold tier committed.
    pub moved: u64,
    /// Where the stream's hot ring starts now.
    pub hot_start: u64,
}

/// Flushes every hot byte of the stream `key` now, whatever the thresholds; `None` when the
/// stream does not exist. Runs in a task of its own, so an upload whose caller went away is
/// still committed (or left to the collector), never stranded between the two.
pub async fn flush_stream(
    rt: &Runtime,
    engine: Arc<dyn GroupEngine>,
    tier: &ColdTier,
    key: &str,
) -> Option<Flushed> {
    let group = rt.group_of(key);
    let exists = rt
        .with_group_now(group, |g| g.state.get(key, now_ms()).is_some())
        .unwrap_or(false);
    if !exists {
        return None;
    }
    let (rt2, tier2, key2) = (rt.clone(), tier.clone(), key.to_owned());
    let moved = tokio::spawn(async move {
        let uploads = tokio::sync::Semaphore::new(tier2.settings.flush_max_concurrency);
        flush_streams(
            &rt2,
            engine.as_ref(),
            &tier2,
            &uploads,
            group,
            true,
            Some(&key2),
        )
        .await
    })
    .await
    .unwrap_or(0);
    let hot_start = rt
        .with_group_now(group, |g| {
            g.state.get(key, now_ms()).map(|s| s.data.hot_start())
        })
        .flatten()
        .unwrap_or(0);
    Some(Flushed { moved, hot_start })
}

/// Flushes what is due in `group`, or with `force` every hot byte of it; with `only`, of that
/// one stream alone. Returns the bytes whose move to the cold tier committed.
async fn flush_streams(
    rt: &Runtime,
    engine: &dyn GroupEngine,
    tier: &ColdTier,
    uploads: &tokio::sync::Semaphore,
    group: GroupId,
    force: bool,
    only: Option<&str>,
) -> u64 {
    let s = &tier.settings;
    let now = now_ms();
    let age_ms = s.flush_max_hot_age.as_millis() as u64;
    let slices = rt
        .with_group_now(group, |g| {
            let by_size = force || g.state.hot_bytes() >= s.flush_min_hot;
            let mut picked: Vec<Slice> = Vec::new();
            let mut size = 0u64;
            // The streams with the most hot bytes go first, so a pass moves the most memory.
            let mut streams: Vec<_> = g
                .state
                .streams()
                .filter(|(_, st)| st.data.hot_len() > 0)
                .filter(|(key, _)| only.is_none_or(|k| k == *key))
                .filter(|(_, st)| {
                    by_size
                        || (age_ms > 0
                            && st
                                .data
                                .hot_since_ms()
                                .is_some_and(|t| now.saturating_sub(t) >= age_ms))
                })
                .collect();
            streams.sort_by_key(|(_, st)| std::cmp::Reverse(st.data.hot_len()));
            for (key, st) in streams {
                if !force && size >= s.flush_max {
                    break;
                }
                let start = st.data.hot_start();
                let bytes = st.data.read(start, st.data.hot_len());
                size += bytes.len() as u64;
                picked.push(Slice {
                    key: key.to_owned(),
                    incarnation: st.incarnation,
                    start,
                    bytes,
                });
            }
            picked
        })
        .unwrap_or_default();
    if slices.is_empty() {
        return 0;
    }
    let packs = pack(group, slices, s.flush_max);
    let mut moved = 0u64;
    let results = futures_util::future::join_all(
        packs
            .into_iter()
            .map(|p| upload_and_commit(engine, tier, uploads, group, p)),
    )
    .await;
    for r in results {
        moved += r;
    }
    moved
}

/// Groups slices by bucket: a large slice alone, small ones packed up to `max` bytes.
fn pack(group: GroupId, slices: Vec<Slice>, max: u64) -> Vec<Pack> {
    let mut by_bucket: std::collections::BTreeMap<String, Vec<Slice>> = Default::default();
    for sl in slices {
        let bucket = sl.key.split('/').next().unwrap_or_default().to_owned();
        by_bucket.entry(bucket).or_default().push(sl);
    }
    let mut packs = Vec::new();
    for (bucket, slices) in by_bucket {
        let mut body = BytesMut::new();
        let mut sls: Vec<FlushSlice> = Vec::new();
        let mut seal = |body: &mut BytesMut, sls: &mut Vec<FlushSlice>| {
            if !sls.is_empty() {
                packs.push(Pack {
                    object: object_name(&bucket, group),
                    body: std::mem::take(body).freeze(),
                    slices: std::mem::take(sls),
                });
            }
        };
        for sl in slices {
            let len = sl.bytes.len() as u64;
            let direct = len >= DIRECT_OBJECT_MIN;
            // A large slice gets an object of its own; a small one closes a pack it would overflow.
            if direct || body.len() as u64 + len > max {
                seal(&mut body, &mut sls);
            }
            sls.push(FlushSlice {
                key: sl.key,
                incarnation: sl.incarnation,
                start: sl.start,
                end: sl.start + len,
                at: body.len() as u64,
            });
            body.extend_from_slice(&sl.bytes);
            if direct {
                seal(&mut body, &mut sls);
            }
        }
        seal(&mut body, &mut sls);
    }
    packs
}

/// `{bucket}/g{group}/{ms}-{random}`: under its bucket's prefix, so a bucket purge can drop
/// the prefix; unique without coordination, so a retried flush never overwrites a live object.
pub(super) fn object_name(bucket: &str, group: GroupId) -> String {
    format!(
        "{bucket}/g{group}/{:013}-{:016x}",
        now_ms(),
        rand::random::<u64>()
    )
}

async fn upload_and_commit(
    engine: &dyn GroupEngine,
    tier: &ColdTier,
    uploads: &tokio::sync::Semaphore,
    group: GroupId,
    p: Pack,
) -> u64 {
    let len = p.body.len() as u64;
    let object: Arc<str> = p.object.as_str().into();
    let _staged = tier.stage(object.clone());
    {
        let Ok(_permit) = uploads.acquire().await else {
            return 0;
        };
        if let Err(e) = tier.store.put(&object, p.body).await {
            tier.counters
                .flush_write_errors
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(group, object = %object, error = %e, "cold flush upload failed; retrying next tick");
            return 0;
        }
        tier.counters.flush_writes.fetch_add(1, Ordering::Relaxed);
    }
    if tier.settings.abort_after_upload {
        tracing::error!(group, object = %object, "testing.cold_abort_after_upload: aborting between the upload and its commit");
        std::process::abort();
    }
    let cmd = Command::ColdFlush {
        object: object.clone(),
        slices: p.slices,
        owned: true,
    };
    match engine.propose(group, cmd).await {
        Ok(Ok(Applied::ColdFlushed { accepted, slices })) => {
            tier.counters.flushes.fetch_add(1, Ordering::Relaxed);
            if accepted > 0 {
                tier.counters
                    .flushed_bytes
                    .fetch_add(len, Ordering::Relaxed);
            }
            tracing::debug!(group, object = %object, accepted, slices, bytes = len, "cold flush committed");
            if accepted == slices { len } else { 0 }
        }
        Ok(other) => {
            tracing::warn!(group, object = %object, outcome = ?other, "cold flush answered unexpectedly");
            0
        }
        Err(EngineError::NotLeader { .. }) => {
            // Refused before it was proposed: nothing references the object.
            if let Err(e) = tier.store.delete(&object).await {
                tracing::warn!(group, object = %object, error = %e, "cannot delete an uncommitted cold object");
            }
            0
        }
        Err(e) => {
            // The outcome is unknown: the object may be referenced, so it stays.
            tracing::warn!(group, object = %object, error = %e, "cold flush commit failed");
            0
        }
    }
}
