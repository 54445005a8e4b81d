//! Replicas that told this node they lost entries: a gated replica asks the group's leader for
//! a barrier ([`super::peer::server`]), and the leader notes it here. The leader's membership
//! keeper ([`crate::raft::drivers::voter_keeper`]) takes the notes and rebuilds those voters.

use std::collections::BTreeSet;
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct LostReports(Mutex<BTreeSet<(u32, u64)>>);

impl LostReports {
    /// `node` reported that its replica of `group` may lack entries it acknowledged.
    pub fn report(&self, group: u32, node: u64) {
        self.lock().insert((group, node));
    }

    /// Every report so far, emptied.
    pub fn take(&self) -> BTreeSet<(u32, u64)> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<(u32, u64)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
