//! The background tasks `start` spawns, each holding a `Weak<Replicas>` and ending when the
//! node stops.
//!
//! - [`balancer`]: a drained or WAL-disk-short node hands its leaderships away, one per tick.
//! - [`fair_share`]: the leadership balancer: a node that leads two or more groups above a peer
//!   hands some to the peers that lead the fewest.
//! - [`egress`]: the cluster-egress gate: probes to the peers, shedding every leadership when
//!   they reach no quorum.
//! - [`bootstrap`]: the per-group membership bootstrap of a static cluster, and wiped replicas.
//! - [`gate_watch`]: a closed recovery gate opens on a fresh barrier of the group's leader.
//! - [`snapshot_prune`]: with S3 snapshots, publishing this node's pins and pruning the retired
//!   snapshot objects of the groups it leads.
//! - [`snapshots`]: the snapshot driver: snapshots by log bytes against `raft.snapshot_log_budget`.
//! - [`store_health`]: the snapshot-store health gate: S3 probes and cold-flush writes, shedding.
//! - [`streak`]: the bad and good streaks a health gate sheds and heals by.
//! - [`voter_keeper`]: the leader's keeper of the configured voters, which rebuilds a voter that
//!   lost entries.

pub mod balancer;
pub mod bootstrap;
pub mod egress;
pub mod fair_share;
pub mod gate_watch;
pub mod snapshot_prune;
pub mod snapshots;
pub mod store_health;
pub mod streak;
pub mod voter_keeper;

use std::sync::Arc;
use std::sync::Weak;

use crate::raft::replicas::Replicas;

/// The node a driver works for while it runs: `None` once it was dropped or began to stop,
/// when the driver ends.
fn running(node: &Weak<Replicas>) -> Option<Arc<Replicas>> {
    node.upgrade().filter(|n| !n.stopping())
}
