//! The node's leadership-shed state: the operator's maintenance drain mark, kept in the WAL
//! root (`leadership-shed.bin`) so it outlives a restart until `DELETE`d, and the mark a
//! graceful shutdown sets on itself, which is not kept. A drained node does not campaign,
//! refuses leader transfers to itself, and hands its leaderships away
//! ([`super::handoff`]).

use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use ursula_protocol::admin::SHED_MAINTENANCE;
use ursula_protocol::admin::ShedState;

use super::recovery::files::FilesError;
use super::recovery::files::Root;

#[derive(Debug)]
pub struct Shed {
    root: Option<Root>,
    /// The operator's bits, as recorded.
    bits: AtomicU64,
    /// Set by a graceful shutdown: the node is on its way out.
    stopping: AtomicBool,
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

    pub fn state(&self) -> ShedState {
        let mut bits = self.bits.load(Ordering::Acquire);
        if self.stopping.load(Ordering::Acquire) {
            bits |= SHED_MAINTENANCE;
        }
        ShedState::of_bits(bits)
    }

    pub fn drained(&self) -> bool {
        self.state().drained()
    }

    /// The operator's mark only (not a shutdown's): what the balancer acts on, since a
    /// shutdown hands its leaderships off itself.
    pub fn operator_drained(&self) -> bool {
        self.bits.load(Ordering::Acquire) & SHED_MAINTENANCE != 0
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
        assert!(!shed.drained());
        assert!(shed.set_maintenance(true).expect("set").drained());
        let again = Shed::load(Some(Root::new(&dir))).expect("reload");
        assert!(again.drained(), "the operator's mark is recorded");
        assert!(!again.set_maintenance(false).expect("clear").drained());
        again.mark_stopping();
        assert!(again.drained());
        let third = Shed::load(Some(Root::new(&dir))).expect("reload");
        assert!(!third.drained(), "a shutdown's own mark is not recorded");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
