//! The fair-share leadership balancer (`[governance.leadership_balance]`): every tick a cluster
//! node that leads at least two groups more than some peer hands up to `max_per_tick` of them
//! to the peers that lead the fewest, so after an undrain, a restart or a new voter the
//! leaderships even out until every node that may lead is within one of the others, which is
//! within one of the fair share. Each node moves only its own leaderships and counts every
//! node's from the leaders its own replicas see, so no node coordinates with another. Only a
//! node above the fair share's floor gives, and only across a gap of two or more, so no move is
//! wasted and two nodes acting on the same picture cannot undo each other's moves. A target
//! passes the handoff rules (a voter that may campaign, answered within `peer_timeout`, caught
//! up with the leader's log); a group that no target took is left alone for [`BACKOFF`].

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Weak;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use crate::config::LeadershipBalance;
use crate::raft::ops::handoff::candidates;
use crate::raft::ops::handoff::transfer;
use crate::raft::replicas::Replicas;

/// The balancer's counters (the metrics' `leadership_balance_*`).
#[derive(Debug, Default)]
pub struct BalanceCounters {
    pub moves: AtomicU64,
    pub skips: AtomicU64,
}

/// Each voter's leaderships as this node sees them: every voter of any group counts, with
/// zero when it leads nothing.
pub fn leader_counts(groups: &[(Option<u64>, Vec<u64>)]) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for (leader, voters) in groups {
        for v in voters {
            counts.entry(*v).or_insert(0);
        }
        if let Some(l) = leader {
            *counts.entry(*l).or_insert(0) += 1;
        }
    }
    counts
}

/// Whether a node leading `from` hands one leadership to a node leading `to`: only above the
/// fair share's floor (`floor`), so a node short of it never gives and no move is wasted, and
/// only across a gap of two or more, so counts within one of each other stay.
pub fn should_move(from: usize, to: usize, floor: usize) -> bool {
    from > floor && from >= to + 2
}

/// How long a group whose handoff found no taker is left alone: a move that failed once
/// fails again while its cause (a peer down, a partition, leases held by a live leader) lasts,
/// and retrying it every tick would only hold the group's writes and churn its elections.
pub const BACKOFF: Duration = Duration::from_secs(30);

/// Groups not to move before their time.
#[derive(Debug, Default)]
struct Backoff(HashMap<u32, Instant>);

impl Backoff {
    fn waits(&mut self, group: u32, now: Instant) -> bool {
        self.0.retain(|_, until| *until > now);
        self.0.contains_key(&group)
    }

    fn failed(&mut self, group: u32, now: Instant) {
        self.0.insert(group, now + BACKOFF);
    }
}

/// Runs the balancer every `settings.interval` until the node stops.
pub async fn run(node: Weak<Replicas>, settings: LeadershipBalance) {
    let mut tick = tokio::time::interval(settings.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut backoff = Backoff::default();
    loop {
        tick.tick().await;
        let Some(node) = super::running(&node) else {
            return;
        };
        // A node that may not lead hands its leaderships off by its own drivers.
        if node.shed.sheds() {
            continue;
        }
        balance_once(&node, settings.max_per_tick as usize, &mut backoff).await;
    }
}

/// One tick: up to `max` of this node's leaderships handed to the peers that lead the fewest.
async fn balance_once(node: &Replicas, max: usize, backoff: &mut Backoff) {
    let views: Vec<(u32, Option<u64>, Vec<u64>)> = (0..node.group_count())
        .filter_map(|g| {
            let v = node.group_view(g)?;
            Some((g, v.current_leader, v.voter_ids))
        })
        .collect();
    let pictured: Vec<(Option<u64>, Vec<u64>)> =
        views.iter().map(|(_, l, v)| (*l, v.clone())).collect();
    let mut counts = leader_counts(&pictured);
    let led_total: usize = counts.values().sum();
    let floor = led_total / counts.len().max(1);
    let mine = |c: &BTreeMap<u64, usize>| c.get(&node.node_id).copied().unwrap_or(0);
    let fewest = |c: &BTreeMap<u64, usize>| c.values().copied().min().unwrap_or(0);
    if !should_move(mine(&counts), fewest(&counts), floor) {
        return;
    }
    let now = Instant::now();
    let led: Vec<u32> = views
        .iter()
        .filter(|(g, l, _)| *l == Some(node.node_id) && node.is_leader(*g))
        .map(|(g, _, _)| *g)
        .filter(|g| !backoff.waits(*g, now))
        .collect();
    let mut moved = 0;
    // At most `max` groups are tried a tick, so a peer that keeps declining costs few RPCs.
    for group in led.into_iter().take(max) {
        if moved >= max || !should_move(mine(&counts), fewest(&counts), floor) {
            break;
        }
        let mut targets: Vec<u64> = candidates(node, group)
            .await
            .into_iter()
            .filter(|t| should_move(mine(&counts), counts.get(t).copied().unwrap_or(0), floor))
            .collect();
        targets.sort_by_key(|t| counts.get(t).copied().unwrap_or(0));
        // Only a handoff that was tried and failed backs the group off: one costs the group's
        // writes seconds, while a tick with no voter that may take it costs a few questions,
        // and a voter that sheds now (a healing gate) may take it on the next tick.
        let tried = !targets.is_empty();
        let mut done = false;
        for target in targets {
            match transfer(node, group, target).await {
                Ok(_) => {
                    tracing::info!(
                        group,
                        target,
                        "leadership balancer: handed the group to a voter that led fewer"
                    );
                    if let Some(c) = counts.get_mut(&node.node_id) {
                        *c = c.saturating_sub(1);
                    }
                    *counts.entry(target).or_insert(0) += 1;
                    node.balance.moves.fetch_add(1, Ordering::Relaxed);
                    moved += 1;
                    done = true;
                    break;
                }
                Err(e) => {
                    tracing::debug!(group, target, error = %e, "leadership balancer: handoff failed");
                }
            }
        }
        if !done {
            node.balance.skips.fetch_add(1, Ordering::Relaxed);
            if tried {
                backoff.failed(group, Instant::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_voter_counts_and_only_a_gap_of_two_moves() {
        let groups = vec![
            (Some(1), vec![1, 2, 3]),
            (Some(1), vec![1, 2, 3]),
            (Some(1), vec![1, 2, 3]),
            (Some(2), vec![1, 2, 3]),
            (None, vec![1, 2, 3]),
        ];
        let c = leader_counts(&groups);
        assert_eq!(c, BTreeMap::from([(1, 3), (2, 1), (3, 0)]));
        // 4 led groups over 3 voters: the floor is 1.
        assert!(should_move(3, 0, 1) && should_move(3, 1, 1) && should_move(2, 0, 1));
        assert!(!should_move(2, 1, 1) && !should_move(1, 1, 1) && !should_move(0, 2, 1));
        // At or below the floor a node never gives, whatever the gap.
        assert!(!should_move(20, 4, 21));
    }

    #[test]
    fn a_group_whose_move_failed_waits_out_the_backoff_alone() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        assert!(!b.waits(3, t0));
        b.failed(3, t0);
        assert!(b.waits(3, t0 + BACKOFF / 2));
        assert!(!b.waits(4, t0 + BACKOFF / 2), "other groups still move");
        assert!(
            !b.waits(3, t0 + BACKOFF),
            "tried again once the backoff is over"
        );
        assert!(b.0.is_empty(), "an expired entry is dropped");
    }

    #[test]
    fn moves_that_each_narrow_a_gap_end_within_one_of_the_fair_share() {
        // 64 groups after a restart: two nodes lead everything, the third nothing.
        for start in [[32usize, 32, 0], [64, 0, 0], [40, 20, 4], [22, 21, 21]] {
            let mut c = start;
            let mut moves = 0;
            loop {
                // Each node in turn, as its own balancer would, moves to the one with fewest.
                let mut any = false;
                for from in 0..3 {
                    let to = (0..3).min_by_key(|i| c[*i]).expect("three");
                    if should_move(c[from], c[to], 64 / 3) {
                        c[from] -= 1;
                        c[to] += 1;
                        moves += 1;
                        any = true;
                    }
                }
                if !any {
                    break;
                }
            }
            let (lo, hi) = (*c.iter().min().expect("min"), *c.iter().max().expect("max"));
            assert!(hi - lo <= 1, "{start:?} ended at {c:?}");
            assert!(lo >= 64 / 3 && hi <= 64_usize.div_ceil(3), "{c:?}");
            // No move is wasted: each takes a surplus above the floor to a node below it.
            let surplus: usize = start.iter().map(|n| n.saturating_sub(64 / 3)).sum();
            assert!(moves <= surplus, "{start:?}: {moves} moves");
        }
    }
}
