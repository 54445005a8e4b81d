//! Deletion of cold objects no stream references any more (deleted or expired streams,
//! retention advances, flushes whose commit found nothing to move). The state machine lists
//! them with the time they were released; the group's leader deletes each once the grace has
//! passed, so a read that planned before the release still finds its object, then commits
//! `ColdForget` so every replica drops the entry.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::ColdTier;
use crate::engine::GroupEngine;
use crate::runtime::Runtime;
use crate::runtime::now_ms;
use ursula_state::stream::Command;

/// Objects deleted per group per pass, so one pass stays short.
const PER_PASS: usize = 64;

/// One pass over the groups of `core` this node leads.
pub async fn collect_core(rt: &Runtime, engine: &dyn GroupEngine, tier: &ColdTier, core: usize) {
    let grace = tier.settings.gc_grace.as_millis() as u64;
    let groups: Vec<_> = rt.groups_of(core).collect();
    for group in groups {
        if !engine.leads(group) {
            continue;
        }
        let now = now_ms();
        let due: Vec<Arc<str>> = rt
            .with_group_now(group, |g| {
                g.state
                    .cold_garbage()
                    .iter()
                    .filter(|(_, since)| now.saturating_sub(*since) >= grace)
                    .take(PER_PASS)
                    .map(|(o, _)| o.clone())
                    .collect()
            })
            .unwrap_or_default();
        if due.is_empty() {
            continue;
        }
        let mut deleted = Vec::new();
        for object in due {
            match tier.store.delete(&object).await {
                Ok(()) => deleted.push(object),
                Err(e) => {
                    tracing::warn!(group, object = %object, error = %e, "cannot delete a released cold object; retrying later")
                }
            }
        }
        if deleted.is_empty() {
            continue;
        }
        let n = deleted.len() as u64;
        match engine
            .propose(group, Command::ColdForget { objects: deleted })
            .await
        {
            Ok(_) => {
                tier.counters
                    .deleted_objects
                    .fetch_add(n, Ordering::Relaxed);
            }
            // Deleting twice is harmless: the next pass finds the objects gone and retries.
            Err(e) => tracing::debug!(group, error = %e, "cold forget not committed"),
        }
    }
}
