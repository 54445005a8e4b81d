//! The node's leadership-shed state: the operator's maintenance drain mark, kept in the WAL
//! root (`leadership-shed.bin`) so it outlives a restart until `DELETE`d, the mark a graceful
//! shutdown sets on itself, an unhealthy snapshot store ([`crate::raft::drivers::store_health`]),
//! impaired egress to the peers ([`crate::raft::drivers::egress`]) and WAL disk pressure, none
//! of which is kept. A shedding node does not campaign, refuses leader transfers to itself, and
//! hands its leaderships away ([`crate::raft::ops::handoff`]).

use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use ursula_protocol::admin::SHED_CLUSTER_EGRESS;
use ursula_protocol::admin::SHED_MAINTENANCE;
use ursula_protocol::admin::SHED_SNAPSHOT_STORE;
use ursula_protocol::admin::SHED_WAL_DISK;
use ursula_protocol::admin::ShedState;

use crate::raft::recovery::files::FilesError;
use crate::raft::recovery::files::Root;

#[derive(Debug)]
pub struct Shed {
    root: Option<Root>,
    /// The operator's bits, as recorded.
    bits: AtomicU64,
    /// Set by a graceful shutdown: the node is on its way out.
    stopping: AtomicBool,
    /// Set while the WAL disk is under pressure ([`crate::raft::drivers::balancer::shed_for_wal_disk`]).
    wal_disk: AtomicBool,
    /// Set while the store gate judges the snapshot store unhealthy.
    store: AtomicBool,
    /// Set while the cluster-egress gate finds that this node reaches no quorum of its peers.
    egress: AtomicBool,
}

impl Shed {
    /// The state `root` recorded (none for a node without a WAL root).
    pub fn load(root: Option<Root>) -> Result<Shed, FilesError> {
        let bits = match &root {
            Some(r) => r.read_shed()?,
            None => 0,
        };
        Ok(Shed {
            root,
            bits: AtomicU64::new(bits),
            stopping: AtomicBool::new(false),
            wal_disk: AtomicBool::new(false),
            store: AtomicBool::new(false),
            egress: AtomicBool::new(false),
        })
    }

    /// Sets or clears the operator's drain mark, recorded before it takes effect.
    pub fn set_maintenance(&self, on: bool) -> Result<ShedState, FilesError> {
        let old = self.bits.load(Ordering::Acquire);
        let bits = if on {
            old | SHED_MAINTENANCE
        } else {
            old & !SHED_MAINTENANCE
        };
        if let Some(root) = &self.root {
            root.write_shed(bits)?;
        }
        self.bits.store(bits, Ordering::Release);
        Ok(self.state())
    }

    /// Marks the node drained for its shutdown, without recording it.
    pub fn mark_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Sets or clears the WAL disk's bit; `true` when that changed it.
    pub fn set_wal_disk(&self, on: bool) -> bool {
        self.wal_disk.swap(on, Ordering::AcqRel) != on
    }

    /// Sets or clears the snapshot store's bit; `true` when that changed it.
    pub fn set_store(&self, on: bool) -> bool {
        self.store.swap(on, Ordering::AcqRel) != on
    }

    /// Sets or clears the cluster egress's bit; `true` when that changed it.
    pub fn set_egress(&self, on: bool) -> bool {
        self.egress.swap(on, Ordering::AcqRel) != on
    }

    pub fn state(&self) -> ShedState {
        let mut bits = self.bits.load(Ordering::Acquire);
        if self.stopping.load(Ordering::Acquire) {
            bits |= SHED_MAINTENANCE;
        }
        if self.wal_disk.load(Ordering::Acquire) {
            bits |= SHED_WAL_DISK;
        }
        if self.store.load(Ordering::Acquire) {
            bits |= SHED_SNAPSHOT_STORE;
        }
        if self.egress.load(Ordering::Acquire) {
            bits |= SHED_CLUSTER_EGRESS;
        }
        ShedState::of_bits(bits)
    }

    /// Leads nothing now: drained, stopping, its snapshot store unhealthy, its egress to its
    /// peers impaired or short of WAL disk.
    pub fn sheds(&self) -> bool {
        self.state().sheds()
    }

    /// What the balancer hands leaderships away for: the operator's mark or the WAL disk (not
    /// a shutdown, which hands its leaderships off itself, nor the store and egress gates,
    /// which hand them off at their own pace).
    pub fn balancer_sheds(&self) -> bool {
        self.bits.load(Ordering::Acquire) & SHED_MAINTENANCE != 0
            || self.wal_disk.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_mark_outlives_a_restart_and_the_shutdown_mark_does_not() {
        let dir = std::env::temp_dir().join(format!("ursula-shed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let shed = Shed::load(Some(Root::new(&dir))).expect("load");
        assert!(!shed.sheds());
        assert!(shed.set_maintenance(true).expect("set").drained());
        let again = Shed::load(Some(Root::new(&dir))).expect("reload");
        assert!(again.sheds(), "the operator's mark is recorded");
        assert!(!again.set_maintenance(false).expect("clear").drained());
        assert!(again.set_wal_disk(true) && !again.set_wal_disk(true));
        assert!(again.sheds() && again.balancer_sheds() && !again.state().drained());
        assert!(again.set_wal_disk(false) && !again.sheds());
        assert!(again.set_store(true) && !again.set_store(true));
        assert!(again.sheds() && !again.balancer_sheds());
        assert_eq!(again.state().state, "snapshot-store-unhealthy");
        assert!(again.set_store(false) && !again.sheds());
        assert!(again.set_egress(true) && !again.set_egress(true));
        assert!(again.sheds() && !again.balancer_sheds());
        assert_eq!(again.state().state, "cluster-egress-unhealthy");
        assert!(again.set_egress(false) && !again.sheds());
        again.set_wal_disk(true);
        again.mark_stopping();
        assert!(again.state().drained());
        let third = Shed::load(Some(Root::new(&dir))).expect("reload");
        assert!(
            !third.sheds(),
            "neither a shutdown's mark nor the disk's is recorded"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
