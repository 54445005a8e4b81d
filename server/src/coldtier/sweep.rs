//! The orphan sweep: deletes objects under the cold root that nothing references and that are
//! older than `storage.cold.orphan_min_age` (a day unless set). They are what a crash or a lost
//! proposal leaves between an upload and its commit; the cold GC never sees them, because no
//! state ever named them.
//!
//! Each pass lists the store once, then asks every group this node leads to confirm its
//! leadership (which also brings its applied state level with every commit), and only then
//! reads the groups' references: an object listed before the read and committed after it
//! would have to have waited longer than the minimum age between its upload and its commit.
//! A key says its group (`{bucket}/g{group}/…`, `{bucket}/snap/g{group}/…`,
//! `{bucket}/cold-index/g{group}/…`): only that group's leader may delete it. The objects a
//! group's index pages list are among its references: the pass reads the pages. A key that names no group (a snapshot body written before the
//! group was part of its name) is judged only on a node that leads every group. Keys of any
//! other shape are not the tier's and are never touched; neither is an object this node is
//! uploading or committing right now.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ursula_cold::Listed;

use super::ColdTier;
use crate::engine::GroupEngine;
use crate::runtime::GroupId;
use crate::runtime::Runtime;
use crate::runtime::now_ms;

/// Objects deleted per pass at the most, so a pass stays short however much leaked.
const PER_PASS: usize = 1000;

/// Starts the sweep on the first core's runtime.
pub fn spawn(rt: &Runtime, engine: Arc<dyn GroupEngine>, tier: ColdTier) {
    let Some(handle) = rt.core_handle(0) else {
        return;
    };
    let rt = rt.clone();
    handle.spawn(async move {
        let mut tick = tokio::time::interval(tier.settings.orphan_sweep_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            sweep(&rt, engine.as_ref(), &tier).await;
        }
    });
}

/// Who owns a key of the tier's layouts (flushed objects, snapshot bodies, staged append
/// bodies, index pages): `Some(Some(g))` for group `g`'s objects,
/// `Some(None)` for a snapshot body without a group in its name, `None` for a key of no layout
/// of ours.
fn owner(key: &str) -> Option<Option<GroupId>> {
    let parts: Vec<&str> = key.split('/').collect();
    let group = |s: &str| s.strip_prefix('g').and_then(|n| n.parse::<GroupId>().ok());
    match parts.as_slice() {
        [_, "snap", _] => Some(None),
        [_, "snap" | "ext", g, _] | [_, "cold-index", g, _, _] | [_, g, _] => group(g).map(Some),
        _ => None,
    }
}

/// One pass. Errors end the pass; the next one starts over.
pub async fn sweep(rt: &Runtime, engine: &dyn GroupEngine, tier: &ColdTier) {
    let groups = rt.group_count();
    let led: Vec<GroupId> = (0..groups).filter(|g| engine.leads(*g)).collect();
    if led.is_empty() {
        return;
    }
    let started = now_ms();
    let listed = match tier.store.list_objects("").await {
        Ok(l) => l,
        Err(e) => {
            tier.counters.sweep.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "the orphan sweep cannot list the cold store; trying again next pass");
            return;
        }
    };
    // Before the references: an upload of this node that was staged when listed and has
    // resolved since is committed by then, or was never referenced.
    let staged = tier.staged_now();
    let mut confirmed: HashSet<GroupId> = HashSet::new();
    let mut referenced: HashSet<Arc<str>> = HashSet::new();
    // Page keys are the stream's own, written again by a later seal: their store time can be
    // an older upload's. Nothing under the prefix of an index a state names is judged.
    let mut index_prefixes: Vec<Arc<str>> = Vec::new();
    for group in led {
        if engine.confirm_leadership(group).await.is_err() {
            continue;
        }
        let refs = rt.with_group_now(group, |g| {
            let refs = g.state.cold_references().collect::<Vec<_>>();
            (refs, g.state.cold_indexes().cloned().collect::<Vec<_>>())
        });
        let Some((refs, indexes)) = refs else {
            continue;
        };
        referenced.extend(refs);
        index_prefixes.extend(indexes.iter().map(|ix| ix.prefix.clone()));
        let mut listed_all = true;
        for ix in indexes {
            match tier.read_pages(&ix, ix.first..ix.sealed, false).await {
                Ok(pages) => referenced.extend(pages.iter().flat_map(|p| p.objects())),
                Err(e) => {
                    // Without every page, the group's objects cannot be judged this pass.
                    tier.counters.sweep.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(group, error = %e, "the orphan sweep cannot read an index page; skipping the group this pass");
                    listed_all = false;
                    break;
                }
            }
        }
        if listed_all {
            confirmed.insert(group);
        }
    }
    let every_group = confirmed.len() as u32 == groups;
    let min_age = tier.settings.orphan_min_age.as_millis() as u64;
    // Raft snapshot objects are pruned by the cluster's pins, never swept.
    let snapshots = tier.settings.snapshot_prefix.as_deref();
    let mut orphans: Vec<Listed> = Vec::new();
    let mut oldest = 0u64;
    for o in listed.iter() {
        let judged = match owner(&o.key) {
            Some(Some(g)) => confirmed.contains(&g),
            Some(None) => every_group,
            None => false,
        };
        if !judged
            || referenced.contains(o.key.as_str())
            || staged.contains(o.key.as_str())
            || index_prefixes.iter().any(|p| o.key.starts_with(&**p))
            || snapshots.is_some_and(|p| o.key.starts_with(p))
        {
            continue;
        }
        let age = started.saturating_sub(o.modified_ms);
        oldest = oldest.max(age);
        if age >= min_age {
            orphans.push(o.clone());
        }
    }
    let s = &tier.counters.sweep;
    s.listed.store(listed.len() as u64, Ordering::Relaxed);
    s.unreferenced
        .store(orphans.len() as u64, Ordering::Relaxed);
    s.oldest_unreferenced_ms.store(oldest, Ordering::Relaxed);
    for o in orphans.into_iter().take(PER_PASS) {
        match tier.store.delete(&o.key).await {
            Ok(()) => {
                s.deleted.fetch_add(1, Ordering::Relaxed);
                s.deleted_bytes.fetch_add(o.size, Ordering::Relaxed);
                tracing::info!(object = %o.key, bytes = o.size, age_ms = started.saturating_sub(o.modified_ms), "orphan sweep deleted an unreferenced cold object");
            }
            Err(e) => {
                s.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(object = %o.key, error = %e, "the orphan sweep cannot delete an object; trying again next pass");
                break;
            }
        }
    }
    s.passes.fetch_add(1, Ordering::Relaxed);
    s.last_pass_ms.store(now_ms(), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_says_which_group_owns_it_and_keys_of_no_layout_of_ours_belong_to_none() {
        let cases = [
            ("demo/g3/0000000000001-00000000000000ab", Some(Some(3))),
            ("demo/snap/g7/0000000000001-00000000000000ab", Some(Some(7))),
            ("demo/snap/0000000000001-00000000000000ab", Some(None)),
            ("demo/g3", None),
            ("demo/gx/obj", None),
            ("demo/other/obj", None),
            ("demo/g3/a/b", None),
            (
                "demo/cold-index/g5/0000000000000007/0000000003",
                Some(Some(5)),
            ),
            ("demo/cold-index/g5/0000000000000007", None),
            ("demo/cold-index/gx/1/2", None),
            ("snapshots/raft/g1/x", None),
            ("demo/snap/gx/obj", None),
            ("demo/ext/g2/0000000000001-00000000000000ab", Some(Some(2))),
            ("demo/ext/0000000000001-00000000000000ab", None),
        ];
        for (key, want) in cases {
            assert_eq!(owner(key), want, "{key}");
        }
    }
}
