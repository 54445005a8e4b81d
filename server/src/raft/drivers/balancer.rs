//! The drain balancer: one handoff per tick while the node sheds, and the WAL disk pressure it
//! follows into the shed state.

use std::time::Duration;

use crate::raft::ops::handoff::candidates;
use crate::raft::ops::handoff::transfer;
use crate::raft::replicas::Replicas;

/// A drained node's balancer: one handoff per tick, while the mark is set and it leads a
/// group (the spec's "the background leadership balancer migrates its current leaderships").
pub async fn balance(node: std::sync::Weak<Replicas>, wal_disk: Option<DiskPressure>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let Some(node) = super::running(&node) else {
            return;
        };
        if let Some(pressured) = &wal_disk {
            shed_for_wal_disk(&node, pressured.now());
        }
        if !node.shed.balancer_sheds() {
            continue;
        }
        // The operator's mark moves one leadership a tick (the spec's balancer); a node short
        // of WAL disk refuses every write it leads, so it moves them at the other gates' pace.
        let per_tick = if node.shed.state().drained() {
            1
        } else {
            WAL_DISK_HANDOFFS_PER_TICK
        };
        let led: Vec<u32> = (0..node.group_count())
            .filter(|g| node.is_leader(*g))
            .take(per_tick)
            .collect();
        for group in led {
            for target in candidates(&node, group).await {
                if transfer(&node, group, target).await.is_ok() {
                    break;
                }
            }
        }
    }
}

/// Whether the WAL disk is under pressure now (the admission's free-space sampler).
#[derive(Clone)]
pub struct DiskPressure(std::sync::Arc<dyn Fn() -> bool + Send + Sync>);

impl DiskPressure {
    pub fn new(now: impl Fn() -> bool + Send + Sync + 'static) -> DiskPressure {
        DiskPressure(std::sync::Arc::new(now))
    }

    pub fn now(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for DiskPressure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DiskPressure").field(&self.now()).finish()
    }
}

/// Leaderships a node short of WAL disk hands off per balancer tick.
const WAL_DISK_HANDOFFS_PER_TICK: usize = 4;

/// Follows the WAL disk's pressure into the shed state: while it lasts the node campaigns for
/// no group, refuses transfers to itself (peers read it in the shed state and in the `elect`
/// answer) and the balancer hands its leaderships away; once the disk has room it may lead
/// again wherever nothing else holds it back.
pub fn shed_for_wal_disk(node: &Replicas, pressured: bool) {
    if !node.shed.set_wal_disk(pressured) {
        return;
    }
    if pressured {
        tracing::warn!(
            "WAL disk pressure: this node hands its leaderships to peers and campaigns for none until the disk has room"
        );
        for r in node.rafts() {
            r.runtime_config().elect(false);
        }
    } else {
        tracing::info!("the WAL disk has room again: this node may lead");
        for group in 0..node.group_count() {
            node.resume_elections(group);
        }
    }
}
