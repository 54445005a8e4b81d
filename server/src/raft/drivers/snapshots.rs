//! The snapshot driver: Raft snapshots taken by log bytes against the node-wide
//! `raft.snapshot_log_budget`, as the Configuration page describes it, instead of openraft's
//! entry count, which is left as the `raft.snapshot_backstop_logs` backstop.
//!
//! A snapshot serializes the group's whole state on its core, so its cost grows with the state
//! while an entry-count policy takes them at a fixed rate: a busy group with a large hot window
//! would spend most of its core rebuilding snapshots. Weighing the log since the last snapshot
//! against twice that snapshot's size keeps the work per logged byte bounded, and the pressure
//! pass keeps the node's log under the budget that `RaftLogPressure` enforces.
//!
//! Each pass also releases idle groups that keep a sealed journal segment on disk: a group
//! whose log stopped growing below its threshold is never snapshotted, and its few entries
//! would pin the segment that holds them for the node's life. Every core's first segment holds
//! every group's first entries, so on a node with idle groups it would never be deleted.

use std::collections::BTreeMap;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use crate::raft::replicas::Replicas;

/// A group's own threshold is at most this, however large the budget.
const GROUP_THRESHOLD_CAP: u64 = 16 << 20;
/// How often a pass waiting for a free build slot looks again.
const SLOT_POLL: Duration = Duration::from_millis(50);

/// The driver's settings, from `[raft]` and `[storage.snapshot]`: plain values, so they live in
/// `config`, which depends on no subsystem.
pub use crate::config::SnapshotDriver as Settings;

/// 0 below three quarters of the budget, 1 up to it, 2 past it.
pub fn pressure_level(node_log: u64, budget: u64) -> u64 {
    if node_log.saturating_mul(4) < budget.saturating_mul(3) {
        0
    } else if node_log <= budget {
        1
    } else {
        2
    }
}

/// Builds the node runs at once: one below the budget; past it two, then one more for each
/// even step up to `max` before twice the budget.
pub fn builds_allowed(node_log: u64, budget: u64, max: u32) -> u32 {
    if node_log < budget || max <= 1 {
        return 1;
    }
    let past = u128::from(node_log - budget) * u128::from(max - 1) / u128::from(budget.max(1));
    let steps = u32::try_from(past).unwrap_or(u32::MAX);
    2u32.saturating_add(steps).min(max)
}

/// A group's own trigger: the larger of the budget over twice the group count (at most
/// 16 MiB) and twice its last snapshot's size.
pub fn group_threshold(budget: u64, groups: u32, last_snapshot: u64) -> u64 {
    let share = (budget / (2 * u64::from(groups.max(1)))).min(GROUP_THRESHOLD_CAP);
    share.max(last_snapshot.saturating_mul(2)).max(1)
}

/// One group as a pass sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLog {
    pub group: u32,
    pub log: u64,
    pub last_snapshot: u64,
}

/// The groups a pass snapshots, most log first: those past their own threshold, and above
/// three quarters of the budget, the groups holding the most log until the node would fall to
/// half the budget.
pub fn plan(node_log: u64, groups: &[GroupLog], budget: u64, group_count: u32) -> Vec<u32> {
    let mut by_log: Vec<GroupLog> = groups.iter().copied().filter(|g| g.log > 0).collect();
    by_log.sort_by(|a, b| b.log.cmp(&a.log).then(a.group.cmp(&b.group)));
    let due = |g: &GroupLog| g.log >= group_threshold(budget, group_count, g.last_snapshot);
    let mut chosen: Vec<bool> = by_log.iter().map(due).collect();
    if pressure_level(node_log, budget) >= 1 {
        let target = node_log.saturating_sub(budget / 2);
        let mut freed: u64 = by_log
            .iter()
            .zip(&chosen)
            .filter(|(_, c)| **c)
            .map(|(g, _)| g.log)
            .sum();
        for (g, c) in by_log.iter().zip(chosen.iter_mut()) {
            if freed >= target {
                break;
            }
            if !*c {
                *c = true;
                freed += g.log;
            }
        }
    }
    by_log
        .iter()
        .zip(chosen)
        .filter(|(_, c)| *c)
        .map(|(g, _)| g.group)
        .collect()
}

/// Runs passes every `settings.interval` until the engine stops.
pub async fn run(engine: Weak<Replicas>, settings: Settings) {
    let mut idle = Idle::default();
    let mut tick = tokio::time::interval(settings.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(e) = super::running(&engine) else {
            return;
        };
        let started = Instant::now();
        settle(&e);
        e.note_snapshots();
        let node_log = e.log_bytes.bytes();
        let level = pressure_level(node_log, settings.budget);
        let allowed = builds_allowed(node_log, settings.budget, settings.max_concurrency);
        e.snap_stats.pressure_level.store(level, Ordering::Relaxed);
        e.snap_stats
            .pressure_builds
            .store(u64::from(allowed), Ordering::Relaxed);
        if level == 0 && e.snapshot_store_bad.load(Ordering::Relaxed) {
            // The snapshot store failed its last health tick: routine builds wait for it.
            continue;
        }
        // Left out of this pass: a build of theirs is triggered and not yet seen, or their
        // last trigger went unclaimed and they sit out.
        let busy = e.builds.in_flight();
        let unclaimed = (0..e.group_count())
            .filter(|g| !e.builds.building(*g) && e.builds.held_out(*g))
            .count();
        // A group whose apply stopped holds state nothing may snapshot; its log stays.
        let groups: Vec<GroupLog> = (0..e.group_count())
            .filter(|g| !e.builds.building(*g) && !e.builds.held_out(*g))
            .filter(|g| e.apply_stop(*g).is_none())
            .map(|g| GroupLog {
                group: g,
                log: e.log_bytes_of(g),
                last_snapshot: e.snap_stats.snap_size(g),
            })
            .collect();
        let per_tick = if node_log >= settings.budget {
            settings.max_groups_per_tick.saturating_mul(allowed)
        } else {
            settings.max_groups_per_tick
        };
        let chosen: Vec<u32> = plan(node_log, &groups, settings.budget, e.group_count())
            .into_iter()
            .take(per_tick as usize)
            .collect();
        let unchosen: Vec<GroupLog> = groups
            .iter()
            .filter(|g| !chosen.contains(&g.group))
            .copied()
            .collect();
        let idle_pins = idle.pass(&unchosen, |g| e.pins_sealed_segment(g));
        drop(e);
        let releases = idle_pins
            .into_iter()
            .take(settings.max_groups_per_tick as usize);
        release(&engine, releases, allowed).await;
        if chosen.is_empty() {
            continue;
        }
        let planned = chosen.len();
        let mut started_builds = 0u64;
        for group in chosen {
            // Wait for a free slot, seeing builds end meanwhile.
            loop {
                let Some(e) = super::running(&engine) else {
                    return;
                };
                settle(&e);
                if e.builds.in_flight() < allowed {
                    break;
                }
                drop(e);
                tokio::time::sleep(SLOT_POLL).await;
            }
            let Some(e) = engine.upgrade() else {
                return;
            };
            let Some(raft) = e.raft(group).cloned() else {
                continue;
            };
            let before = raft.metrics().borrow().snapshot.map(|l| l.index);
            if e.builds.start(&raft, group, before).await {
                started_builds += 1;
            }
        }
        if level >= 1
            && let Some(e) = engine.upgrade()
        {
            let s = &e.snap_stats;
            s.pressure_passes.fetch_add(1, Ordering::Relaxed);
            s.pressure_groups
                .fetch_add(started_builds, Ordering::Relaxed);
            let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            s.pressure_pass_ns.fetch_add(ns, Ordering::Relaxed);
            // The spec's event for each pass `raft_snapshot_pressure_passes` counts.
            tracing::info!(
                level,
                raft_log_bytes = node_log,
                builds = allowed,
                planned,
                started = started_builds,
                not_started = planned as u64 - started_builds.min(planned as u64),
                busy,
                unclaimed,
                elapsed = ?started.elapsed(),
                "raft snapshot pressure pass completed"
            );
        }
    }
}

/// The groups that kept a sealed journal segment at the last pass, with their log bytes then.
#[derive(Default)]
struct Idle(BTreeMap<u32, u64>);

impl Idle {
    /// Of `groups`, those that `pins` a sealed segment now and did at the last pass with the
    /// same log: idle, so no threshold will ever take them.
    fn pass(&mut self, groups: &[GroupLog], pins: impl Fn(u32) -> bool) -> Vec<u32> {
        let mut now = BTreeMap::new();
        let mut idle = Vec::new();
        for g in groups.iter().filter(|g| pins(g.group)) {
            if self.0.get(&g.group) == Some(&g.log) {
                idle.push(g.group);
            }
            now.insert(g.group, g.log);
        }
        self.0 = now;
        idle
    }
}

/// What frees an idle group's hold on a sealed segment.
#[derive(Debug, PartialEq, Eq)]
enum Release {
    /// A snapshot covers entries the log still holds: purge up to it. openraft keeps a few
    /// hundred entries past a snapshot for a follower a little behind; an idle group's
    /// followers have them all.
    Purge(u64),
    /// The log holds entries past the last snapshot (or there is none): build one first.
    Snapshot,
    /// Nothing to do: the journal's view is from its last rotation and may be stale.
    Nothing,
}

fn release_step(
    snapshot: Option<u64>,
    purged: Option<u64>,
    last_log_index: Option<u64>,
) -> Release {
    match snapshot {
        Some(s) if purged < Some(s) => Release::Purge(s),
        _ if last_log_index > snapshot => Release::Snapshot,
        _ => Release::Nothing,
    }
}

/// Releases each of `groups`: a purge now, or a snapshot when a build slot is free (its purge
/// follows at a later pass).
async fn release(engine: &Weak<Replicas>, groups: impl Iterator<Item = u32>, allowed: u32) {
    for group in groups {
        let Some(e) = super::running(engine) else {
            return;
        };
        let Some(raft) = e.raft(group).cloned() else {
            continue;
        };
        let (snapshot, purged, last) = {
            let m = raft.metrics();
            let m = m.borrow();
            (
                m.snapshot.map(|l| l.index),
                m.purged.map(|l| l.index),
                m.last_log_index,
            )
        };
        match release_step(snapshot, purged, last) {
            Release::Purge(upto) => {
                if raft.trigger().purge_log(upto).await.is_ok() {
                    tracing::debug!(
                        group,
                        upto,
                        "purged an idle group's log off a sealed segment"
                    );
                }
            }
            Release::Snapshot if e.builds.in_flight() < allowed => {
                if e.builds.start(&raft, group, snapshot).await {
                    tracing::debug!(
                        group,
                        "snapshot of an idle group that pins a sealed segment"
                    );
                }
            }
            Release::Snapshot | Release::Nothing => {}
        }
    }
}

/// Sees the builds that ended or went unclaimed since the last look.
fn settle(e: &Replicas) {
    e.builds.settle(|g| {
        e.raft(g)
            .and_then(|r| r.metrics().borrow().snapshot.map(|l| l.index))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn log(group: u32, log: u64) -> GroupLog {
        GroupLog {
            group,
            log,
            last_snapshot: 0,
        }
    }

    #[test]
    fn a_group_is_idle_once_it_pins_a_segment_with_the_same_log_at_two_passes() {
        let mut idle = Idle::default();
        let pins = |g: u32| g != 3;
        assert!(
            idle.pass(&[log(1, 10), log(2, 20), log(3, 5)], pins)
                .is_empty()
        );
        // Group 2 grew: still busy. Group 3 does not pin anything.
        assert_eq!(
            idle.pass(&[log(1, 10), log(2, 25), log(3, 5)], pins),
            vec![1]
        );
        assert_eq!(
            idle.pass(&[log(1, 10), log(2, 25), log(3, 5)], pins),
            vec![1, 2]
        );
        // A group that stops pinning is forgotten; pinning again starts over.
        assert!(idle.pass(&[log(1, 10)], |_| false).is_empty());
        assert!(idle.pass(&[log(1, 10)], |_| true).is_empty());
        assert_eq!(idle.pass(&[log(1, 10)], |_| true), vec![1]);
    }

    #[test]
    fn an_idle_group_is_purged_to_its_snapshot_or_snapshotted_first() {
        // A fresh group's first entries and no snapshot: build one.
        assert_eq!(release_step(None, None, Some(2)), Release::Snapshot);
        // A snapshot past the purge point: purge to it (openraft kept entries past it).
        assert_eq!(
            release_step(Some(300), Some(40), Some(300)),
            Release::Purge(300)
        );
        assert_eq!(release_step(Some(2), None, Some(2)), Release::Purge(2));
        // Purged to the snapshot, entries after it: a new snapshot first.
        assert_eq!(
            release_step(Some(300), Some(300), Some(310)),
            Release::Snapshot
        );
        // Purged to the end: the journal's view was stale; nothing to do.
        assert_eq!(
            release_step(Some(300), Some(300), Some(300)),
            Release::Nothing
        );
        assert_eq!(release_step(None, None, None), Release::Nothing);
    }

    #[test]
    fn builds_step_up_past_the_budget_as_the_configuration_page_counts_them() {
        let b = 1000;
        assert_eq!(builds_allowed(999, b, 2), 1);
        assert_eq!(builds_allowed(1000, b, 2), 2);
        assert_eq!(builds_allowed(1999, b, 2), 2);
        assert_eq!(builds_allowed(1000, b, 4), 2);
        assert_eq!(builds_allowed(1334, b, 4), 3);
        assert_eq!(builds_allowed(1667, b, 4), 4);
        assert_eq!(builds_allowed(5000, b, 4), 4);
        assert_eq!(builds_allowed(5000, b, 1), 1);
    }

    #[test]
    fn pressure_levels_split_at_three_quarters_and_at_the_budget() {
        assert_eq!(pressure_level(749, 1000), 0);
        assert_eq!(pressure_level(750, 1000), 1);
        assert_eq!(pressure_level(1000, 1000), 1);
        assert_eq!(pressure_level(1001, 1000), 2);
    }

    #[test]
    fn a_group_threshold_is_its_budget_share_capped_at_16_mib_or_twice_its_snapshot() {
        assert_eq!(group_threshold(1 << 30, 64, 0), 8 * MIB);
        assert_eq!(group_threshold(1 << 30, 2, 0), 16 * MIB);
        assert_eq!(group_threshold(1 << 30, 2, 20 * MIB), 40 * MIB);
        assert_eq!(group_threshold(1000, 1, 0), 500);
    }

    #[test]
    fn a_pass_takes_groups_past_their_threshold_then_the_largest_logs_under_pressure() {
        let g = |group, log, last_snapshot| GroupLog {
            group,
            log,
            last_snapshot,
        };
        // Budget 1000 over 4 groups: each group's share is 125 bytes.
        let groups = [g(0, 130, 0), g(1, 100, 0), g(2, 300, 200), g(3, 10, 0)];
        assert_eq!(plan(540, &groups, 1000, 4), vec![0]);
        // 800 is past three quarters: free down to 500 by taking the largest first.
        let groups = [g(0, 130, 0), g(1, 100, 0), g(2, 560, 400), g(3, 10, 0)];
        assert_eq!(plan(800, &groups, 1000, 4), vec![2, 0]);
        let none: [GroupLog; 0] = [];
        assert!(plan(0, &none, 1000, 4).is_empty());
    }
}
