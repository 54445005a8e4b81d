//! The vote hold of a replica that held nothing at start (see [`super::bootstrap`]): until its
//! first probe round decided whether it was wiped, it votes for no candidate past index 0.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// The groups whose replica holds nothing and whose first probe round is not done.
#[derive(Debug, Default)]
pub struct VoteHold(Mutex<BTreeSet<u32>>);

impl VoteHold {
    pub fn new(groups: &BTreeSet<u32>) -> VoteHold {
        VoteHold(Mutex::new(groups.clone()))
    }

    pub fn holds(&self, group: u32) -> bool {
        self.lock().contains(&group)
    }

    pub fn release(&self, group: u32) {
        self.lock().remove(&group);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
