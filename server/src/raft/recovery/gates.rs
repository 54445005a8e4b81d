//! The recovery gate: a replica that may have lost writes it acknowledged must not help elect
//! a leader that lacks them. A gated replica does not campaign (openraft's `elect` is off) and
//! grants no vote ([`crate::raft::engine::peer_service`]), but still takes appends from a leader. It
//! asks the group's leader for a fresh ReadIndex barrier, applies up to it and opens
//! ([`super::watch`]): from then on it holds every write the group committed, whatever its own
//! journal lost.
//!
//! A replica that also lost its vote (a wiped WAL) takes no append until the barrier gave it
//! a vote floor ([`super::floor`]), and opens only once its own Raft vote holds that floor.
//!
//! A group that finds no leader and applies nothing for [`STALL_AFTER`] is `stalled`: its
//! voters may all be gated, and only an operator can accept that the unsynced tail is gone
//! (`accept-unsynced-loss`). Closed gates, with a lost vote and its floor, are recorded in
//! `raft-log/recovery-gates.bin` before they take effect and removed once open, so a restart
//! keeps a gate closed and a wiped replica wiped.
//!
//! This module is the gates' state, their record and the start's decision ([`decide`]); it
//! runs nothing.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::time::Duration;
use std::time::Instant;

use super::files;
use super::files::GateRecord;
use super::floor::Floor;
use super::floor::Refused;
use super::floor::Rpc;

/// How long a gate waits for a leader's barrier or any applied entry before it reports stalled.
pub const STALL_AFTER: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateStatus {
    Open,
    Gated,
    Stalled,
}

impl GateStatus {
    /// The name `recovery_gates.gated` reports.
    pub fn as_str(self) -> &'static str {
        match self {
            GateStatus::Open => "open",
            GateStatus::Gated => "gated",
            GateStatus::Stalled => "stalled",
        }
    }
}

#[derive(Debug)]
struct Closed {
    stalled: bool,
    /// Last time the replica applied something or obtained a barrier.
    progress_at: Instant,
    applied: Option<u64>,
    /// What is recorded of the gate: whether the replica lost its vote, and its floor.
    record: GateRecord,
}

impl Closed {
    fn new(record: GateRecord) -> Closed {
        Closed {
            stalled: false,
            progress_at: Instant::now(),
            applied: None,
            record,
        }
    }
}

/// The node's closed gates, persisted in the WAL root.
#[derive(Debug)]
pub struct Gates {
    root: files::Root,
    closed: Mutex<BTreeMap<u32, Closed>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn records(closed: &BTreeMap<u32, Closed>) -> BTreeMap<u32, GateRecord> {
    closed.iter().map(|(g, c)| (*g, c.record)).collect()
}

impl Gates {
    /// Gates already recorded in `root` (the caller persisted `closed`).
    pub fn new(root: files::Root, closed: &BTreeMap<u32, GateRecord>) -> Gates {
        Gates {
            root,
            closed: Mutex::new(closed.iter().map(|(g, r)| (*g, Closed::new(*r))).collect()),
        }
    }

    pub fn status(&self, group: u32) -> GateStatus {
        match lock(&self.closed).get(&group) {
            None => GateStatus::Open,
            Some(c) if c.stalled => GateStatus::Stalled,
            Some(_) => GateStatus::Gated,
        }
    }

    pub fn is_closed(&self, group: u32) -> bool {
        lock(&self.closed).contains_key(&group)
    }

    /// Every closed gate and whether it stalled.
    pub fn closed(&self) -> BTreeMap<u32, GateStatus> {
        lock(&self.closed)
            .iter()
            .map(|(g, c)| {
                let s = if c.stalled {
                    GateStatus::Stalled
                } else {
                    GateStatus::Gated
                };
                (*g, s)
            })
            .collect()
    }

    pub fn stalled(&self) -> Vec<u32> {
        lock(&self.closed)
            .iter()
            .filter(|(_, c)| c.stalled)
            .map(|(g, _)| *g)
            .collect()
    }

    /// The groups whose replica lost its vote, each with the vote floor obtained so far.
    pub fn wiped(&self) -> BTreeMap<u32, Option<Floor>> {
        lock(&self.closed)
            .iter()
            .filter(|(_, c)| c.record.wiped)
            .map(|(g, c)| (*g, c.record.floor))
            .collect()
    }

    /// `Some(floor)` when `group`'s replica lost its vote, `None` when it did not.
    pub fn lost_vote(&self, group: u32) -> Option<Option<Floor>> {
        lock(&self.closed)
            .get(&group)
            .filter(|c| c.record.wiped)
            .map(|c| c.record.floor)
    }

    /// Closes `group`'s gate and records it. Returns whether it was open. The gate holds for
    /// this run even when the record fails: closed is the safe side.
    pub fn close(&self, group: u32) -> Result<bool, files::FilesError> {
        let mut closed = lock(&self.closed);
        if closed.contains_key(&group) {
            return Ok(false);
        }
        closed.insert(group, Closed::new(GateRecord::default()));
        self.root.write_gates(&records(&closed))?;
        Ok(true)
    }

    /// Closes `group`'s gate, if open, and marks that its replica lost its vote. Returns
    /// whether anything changed. Like [`Gates::close`] it holds for this run even when the
    /// record fails.
    pub fn close_wiped(&self, group: u32) -> Result<bool, files::FilesError> {
        let mut closed = lock(&self.closed);
        let c = closed
            .entry(group)
            .or_insert_with(|| Closed::new(GateRecord::default()));
        if c.record.wiped {
            return Ok(false);
        }
        c.record.wiped = true;
        self.root.write_gates(&records(&closed))?;
        Ok(true)
    }

    /// Records `floor` as the vote floor of `group`'s wiped replica, before it lets any
    /// replication through. Returns whether it was recorded: only a wiped replica without a
    /// floor takes one.
    pub fn set_floor(&self, group: u32, floor: Floor) -> Result<bool, files::FilesError> {
        let mut closed = lock(&self.closed);
        let Some(c) = closed.get(&group) else {
            return Ok(false);
        };
        if !c.record.wiped || c.record.floor.is_some() {
            return Ok(false);
        }
        let mut next = records(&closed);
        next.insert(
            group,
            GateRecord {
                wiped: true,
                floor: Some(floor),
            },
        );
        self.root.write_gates(&next)?;
        if let Some(c) = closed.get_mut(&group) {
            c.record.floor = Some(floor);
        }
        Ok(true)
    }

    /// Opens `group`'s gate, recorded before it counts. Returns whether it was closed. The
    /// record of a lost vote goes with it: by then the replica's own Raft vote holds the floor.
    pub fn open(&self, group: u32) -> Result<bool, files::FilesError> {
        let mut closed = lock(&self.closed);
        if !closed.contains_key(&group) {
            return Ok(false);
        }
        let mut next = records(&closed);
        next.remove(&group);
        self.root.write_gates(&next)?;
        closed.remove(&group);
        Ok(true)
    }

    /// Whether `group`'s replica refuses `rpc`, and why.
    pub fn refusal(&self, group: u32, rpc: Rpc<'_>) -> Option<Refused> {
        let closed = lock(&self.closed);
        let record = closed.get(&group).map(|c| c.record)?;
        if !record.wiped {
            return None;
        }
        let Some(floor) = record.floor else {
            return Some(Refused::NoFloor { group });
        };
        match rpc {
            Rpc::Replicate(vote) if !floor.admits(vote) => Some(Refused::BelowFloor {
                group,
                vote: Floor::of(vote),
                floor,
            }),
            // A vote is refused by the closed gate itself, with the replica's own vote.
            Rpc::Replicate(_) | Rpc::Vote => None,
        }
    }

    /// Counts a barrier from the leader as progress.
    pub fn progressed(&self, group: u32) {
        if let Some(c) = lock(&self.closed).get_mut(&group) {
            c.progress_at = Instant::now();
            c.stalled = false;
        }
    }

    /// Notes what the replica applied; returns `true` when the gate just stalled.
    pub fn observe(&self, group: u32, applied: Option<u64>) -> bool {
        let mut closed = lock(&self.closed);
        let Some(c) = closed.get_mut(&group) else {
            return false;
        };
        if applied != c.applied {
            c.applied = applied;
            c.progress_at = Instant::now();
            c.stalled = false;
            return false;
        }
        let stalls = !c.stalled && c.progress_at.elapsed() >= STALL_AFTER;
        c.stalled |= stalls;
        stalls
    }
}

/// Why a start closes a group's gate, from what the WAL root and the journals showed.
#[derive(Debug)]
pub struct Evidence<'a> {
    pub previous: &'a files::PreviousRun,
    /// This host's boot id now.
    pub boot_id: Option<&'a str>,
    /// Groups that hold anything in their journal.
    pub held: &'a BTreeSet<u32>,
    /// Groups of cores whose newest segment held a complete frame that failed verification.
    pub damaged: &'a BTreeSet<u32>,
    /// Gates recorded closed; `None` when their record is corrupt.
    pub recorded: Option<&'a BTreeSet<u32>>,
}

/// The groups to gate, each with the reason to log.
pub fn decide(ev: &Evidence<'_>) -> BTreeMap<u32, &'static str> {
    use files::PreviousRun;
    let mut out = BTreeMap::new();
    let mut add = |groups: &BTreeSet<u32>, why: &'static str| {
        for g in groups {
            out.entry(*g).or_insert(why);
        }
    };
    match ev.recorded {
        Some(r) => add(r, "the gate was closed when the node last stopped"),
        None => add(ev.held, "the record of closed gates is corrupt"),
    }
    add(
        ev.damaged,
        "a complete frame in the newest journal segment failed verification",
    );
    let journals_hold_records = !ev.held.is_empty();
    match ev.previous {
        PreviousRun::Missing if journals_hold_records => add(
            ev.held,
            "run-state.bin is missing while the journals hold records",
        ),
        PreviousRun::Corrupt if journals_hold_records => add(ev.held, "run-state.bin is corrupt"),
        PreviousRun::IoError => add(ev.held, "the previous run stopped on a journal I/O error"),
        // Under `never` a process crash loses nothing (the page cache outlives the process);
        // only a host crash, seen as another boot id, can have dropped the unsynced tail.
        PreviousRun::Unclean {
            boot_id,
            fsync_always: false,
        } if boot_id.is_none() || boot_id.as_deref() != ev.boot_id => add(
            ev.held,
            "the host restarted after a run under fsync = never that did not shut down cleanly",
        ),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use files::PreviousRun;

    fn gated(previous: PreviousRun, boot: Option<&str>, held: &[u32]) -> Vec<u32> {
        let held: BTreeSet<u32> = held.iter().copied().collect();
        let none = BTreeSet::new();
        decide(&Evidence {
            previous: &previous,
            boot_id: boot,
            held: &held,
            damaged: &none,
            recorded: Some(&none),
        })
        .into_keys()
        .collect()
    }

    #[test]
    fn only_a_host_crash_under_never_or_a_lost_run_state_gates_the_groups_held() {
        let unclean = |boot: &str, always| PreviousRun::Unclean {
            boot_id: Some(boot.into()),
            fsync_always: always,
        };
        assert_eq!(
            gated(PreviousRun::Clean, Some("a"), &[0, 1]),
            Vec::<u32>::new()
        );
        assert_eq!(
            gated(unclean("a", false), Some("a"), &[0, 1]),
            Vec::<u32>::new()
        );
        assert_eq!(gated(unclean("a", false), Some("b"), &[0, 1]), vec![0, 1]);
        assert_eq!(
            gated(unclean("a", true), Some("b"), &[0, 1]),
            Vec::<u32>::new()
        );
        assert_eq!(gated(PreviousRun::Missing, Some("a"), &[2]), vec![2]);
        // A failed journal write may have lost what the page cache held, on the same boot too.
        assert_eq!(gated(PreviousRun::IoError, Some("a"), &[1, 2]), vec![1, 2]);
        assert_eq!(
            gated(PreviousRun::Missing, Some("a"), &[]),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn a_gate_stalls_without_progress_and_unstalls_when_something_applies() {
        let dir = std::env::temp_dir().join(format!("ursula-gate-{}", std::process::id()));
        let root = files::Root::new(&dir);
        std::fs::create_dir_all(&root.log_dir).expect("dir");
        let gates = Gates::new(root.clone(), &BTreeMap::from([(4, GateRecord::default())]));
        assert_eq!(gates.status(4), GateStatus::Gated);
        if let Some(c) = lock(&gates.closed).get_mut(&4) {
            c.progress_at = Instant::now()
                .checked_sub(STALL_AFTER)
                .expect("uptime past 30s");
        }
        assert!(gates.observe(4, None));
        assert_eq!(gates.stalled(), vec![4]);
        assert!(!gates.observe(4, Some(9)));
        assert_eq!(gates.status(4), GateStatus::Gated);
        assert!(gates.open(4).expect("open"));
        assert_eq!(root.read_gates().expect("read"), Ok(BTreeMap::new()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_wiped_replica_refuses_everything_until_its_recorded_floor_then_refuses_only_lower_leaders()
    {
        use openraft::Vote;
        let dir = std::env::temp_dir().join(format!("ursula-floor-{}", std::process::id()));
        let root = files::Root::new(&dir);
        std::fs::create_dir_all(&root.log_dir).expect("dir");
        let gates = Gates::new(root.clone(), &BTreeMap::new());
        let leader = Vote::new_committed(3, 1);
        assert_eq!(gates.refusal(2, Rpc::Replicate(&leader)), None);

        assert!(gates.close_wiped(2).expect("close"));
        assert!(!gates.close_wiped(2).expect("again"));
        for rpc in [Rpc::Vote, Rpc::Replicate(&leader)] {
            assert_eq!(gates.refusal(2, rpc), Some(Refused::NoFloor { group: 2 }));
        }
        assert_eq!(gates.lost_vote(2), Some(None));
        // A restart before the floor: still wiped, still refusing.
        let reread = root.read_gates().expect("read").expect("valid");
        let again = Gates::new(root.clone(), &reread);
        assert_eq!(
            again.refusal(2, Rpc::Replicate(&leader)),
            Some(Refused::NoFloor { group: 2 })
        );

        let floor = Floor { term: 3, leader: 1 };
        assert!(gates.set_floor(2, floor).expect("floor"));
        assert!(
            !gates
                .set_floor(2, Floor { term: 1, leader: 1 })
                .expect("kept"),
            "a floor is never replaced"
        );
        assert_eq!(gates.refusal(2, Rpc::Replicate(&leader)), None);
        assert_eq!(
            gates.refusal(2, Rpc::Replicate(&Vote::new_committed(2, 3))),
            Some(Refused::BelowFloor {
                group: 2,
                vote: Floor { term: 2, leader: 3 },
                floor
            })
        );
        assert_eq!(
            gates.refusal(2, Rpc::Vote),
            None,
            "the closed gate refuses it"
        );
        let reread = root.read_gates().expect("read").expect("valid");
        assert_eq!(
            reread.get(&2),
            Some(&GateRecord {
                wiped: true,
                floor: Some(floor)
            })
        );
        assert_eq!(
            Gates::new(root.clone(), &reread).wiped(),
            BTreeMap::from([(2, Some(floor))])
        );

        assert!(gates.open(2).expect("open"));
        assert_eq!(gates.lost_vote(2), None);
        assert_eq!(
            gates.refusal(2, Rpc::Replicate(&Vote::new_committed(1, 1))),
            None
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
