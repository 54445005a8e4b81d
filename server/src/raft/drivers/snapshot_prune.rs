//! With S3 snapshots: every interval, the node publishes its pins again (a publish that failed
//! since is retried well within the grace that keeps a fresh object) and prunes the retired
//! snapshot objects of the groups it leads (docs/durability.md, "Raft snapshots on S3"). Each
//! pass reads the group's members as the leader sees them, so a voter removed for good stops
//! pinning its last snapshot.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Weak;
use std::time::Duration;

use super::running;
use crate::raft::replicas::Replicas;
use crate::raft::storage::snapstore::SnapStore;

pub async fn run(node: Weak<Replicas>, snaps: Arc<SnapStore>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let members: BTreeMap<u32, BTreeSet<u64>> = {
            let Some(n) = running(&node) else {
                return;
            };
            (0..n.group_count())
                .filter(|g| n.is_leader(*g))
                .filter_map(|g| {
                    let v = n.group_view(g)?;
                    Some((g, v.voter_ids.into_iter().chain(v.learner_ids).collect()))
                })
                .collect()
        };
        if let Err(e) = snaps.publish().await {
            tracing::warn!(error = %e, "cannot publish this node's snapshot pins; no pruning this pass");
            continue;
        }
        match snaps.prune(&members).await {
            Ok(0) => {}
            Ok(pruned) => tracing::info!(pruned, "pruned retired Raft snapshot objects"),
            Err(e) => tracing::warn!(error = %e, "failed to prune retired OpenRaft snapshots"),
        }
    }
}
