//! `wait --node N`: blocks until N is a voter (not a learner) of every group as the group's
//! leader reports it, and N's `last_applied_index` of each group is within `--lag-tolerance`
//! of the leader's `committed_index`.
//!
//! Progress-gated rather than timed: every poll that sees N apply more, or become a voter or
//! caught up in one more group, restarts the stall clock, so a rebuild that keeps advancing is
//! never cut off; only `--stall-timeout-secs` without progress aborts (exit 2). Connection
//! errors (the node restarting) are retried on the same clock. The leaders are read before N,
//! so N's applied index is compared with a committed index no newer than itself and steady
//! writes do not hold the wait back.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;
use std::time::Instant;

use crate::CtlError;
use crate::Outcome;
use crate::observe::Metrics;
use crate::plan::leader_of;
use crate::plan::view;
use crate::session::Session;

const POLL: Duration = Duration::from_millis(250);

pub struct WaitOptions {
    pub node: u64,
    pub lag_tolerance: u64,
    pub stall_timeout: Duration,
}

/// How far N is: what it still waits for, and a measure that grows with every step forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub pending: Vec<String>,
    pub key: (u64, usize, usize),
    pub groups: usize,
}

/// Judges N from its own metrics and its peers'. `None` for N means it did not answer.
pub fn judge(
    node: u64,
    mine: Option<&Metrics>,
    peers: &BTreeMap<u64, Metrics>,
    lag_tolerance: u64,
) -> Progress {
    let mut pending = Vec::new();
    let Some(mine) = mine else {
        return Progress {
            pending: vec![format!("node {node} does not answer")],
            key: (0, 0, 0),
            groups: 0,
        };
    };
    let mut all = peers.clone();
    all.insert(node, mine.clone());
    let groups: BTreeSet<u32> = all
        .values()
        .flat_map(|m| m.raft_groups.iter().map(|g| g.raft_group_id))
        .collect();
    let applied_sum: u64 = mine
        .raft_groups
        .iter()
        .map(|g| g.last_applied_index.unwrap_or(0))
        .sum();
    let (mut voter, mut caught_up) = (0, 0);
    for &g in &groups {
        // The leader by its own account: only it knows the committed index and membership.
        let leader = leader_of(g, all.iter().map(|(id, m)| (*id, m)));
        let Some((leader, lv)) = leader else {
            pending.push(format!("group {g}: no leader"));
            continue;
        };
        if !lv.voter_ids.contains(&node) || lv.learner_ids.contains(&node) {
            let what = if lv.learner_ids.contains(&node) {
                "a learner"
            } else {
                "no member"
            };
            pending.push(format!(
                "group {g}: node {node} is {what} (leader {leader})"
            ));
            continue;
        }
        voter += 1;
        let committed = lv.committed_index.unwrap_or(0);
        let applied = view(mine, g)
            .and_then(|v| v.last_applied_index)
            .unwrap_or(0);
        if applied.saturating_add(lag_tolerance) < committed {
            pending.push(format!("group {g}: applied {applied} of {committed}"));
            continue;
        }
        caught_up += 1;
    }
    if groups.is_empty() {
        pending.push("no node reports a Raft group".into());
    }
    Progress {
        pending,
        key: (applied_sum, voter, caught_up),
        groups: groups.len(),
    }
}

pub fn wait(session: &Session, o: &WaitOptions, out: &mut dyn Write) -> Result<Outcome, CtlError> {
    let entry = session.node(o.node)?;
    let mut last_progress = Instant::now();
    let mut best: Option<(u64, usize, usize)> = None;
    let mut shown = String::new();
    loop {
        let mut peers = BTreeMap::new();
        for (id, m) in session.metrics_all() {
            match m {
                Ok(m) if id != o.node => {
                    peers.insert(id, m);
                }
                Err(e) if !e.is_unreachable() && id != o.node => return Err(e),
                _ => {}
            }
        }
        let mine = match session.metrics(entry) {
            Ok(m) => Some(m),
            Err(e) if e.is_unreachable() => None,
            Err(e) => return Err(e),
        };
        let p = judge(o.node, mine.as_ref(), &peers, o.lag_tolerance);
        if p.pending.is_empty() {
            writeln!(
                out,
                "node {}: a caught-up voter of all {} groups",
                o.node, p.groups
            )?;
            return Ok(Outcome::Done);
        }
        // Progress: N applied more, or one more group counts it a voter or caught up.
        if best.is_none_or(|b| p.key.0 > b.0 || p.key.1 > b.1 || p.key.2 > b.2) {
            last_progress = Instant::now();
            best = Some(best.map_or(p.key, |b| {
                (b.0.max(p.key.0), b.1.max(p.key.1), b.2.max(p.key.2))
            }));
        }
        let summary = format!(
            "node {}: waiting: {} of {} groups pending; first: {}",
            o.node,
            p.pending.len(),
            p.groups,
            p.pending[0]
        );
        if summary != shown {
            writeln!(out, "{summary}")?;
            shown = summary;
        }
        if last_progress.elapsed() >= o.stall_timeout {
            return Ok(Outcome::Abort(format!(
                "wait node {}: no progress for {}s: {}",
                o.node,
                o.stall_timeout.as_secs(),
                p.pending.join("; ")
            )));
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use ursula_protocol::metrics::RaftGroupView;

    use super::*;

    fn node(id: u64, leader: u64, committed: u64, applied: u64, learners: Vec<u64>) -> Metrics {
        Metrics {
            node_id: id,
            raft_groups: vec![RaftGroupView {
                raft_group_id: 0,
                current_leader: Some(leader),
                committed_index: Some(committed),
                last_applied_index: Some(applied),
                voter_ids: vec![1, 2, 3],
                learner_ids: learners,
                ..RaftGroupView::default()
            }],
            ..Metrics::default()
        }
    }

    #[test]
    fn a_learner_or_a_lagging_replica_is_pending_and_a_caught_up_voter_is_done() {
        let peers: BTreeMap<u64, Metrics> = [
            (1, node(1, 1, 20, 20, vec![3])),
            (2, node(2, 1, 20, 20, vec![])),
        ]
        .into();
        let me = node(3, 1, 20, 5, vec![]);
        let p = judge(3, Some(&me), &peers, 0);
        assert!(p.pending[0].contains("a learner"), "{p:?}");

        let peers: BTreeMap<u64, Metrics> = [(1, node(1, 1, 20, 20, vec![]))].into();
        let p = judge(3, Some(&me), &peers, 0);
        assert_eq!(p.pending, vec!["group 0: applied 5 of 20".to_owned()]);
        assert_eq!(p.key, (5, 1, 0));
        assert!(judge(3, Some(&me), &peers, 15).pending.is_empty());
        assert!(
            judge(3, Some(&node(3, 1, 20, 20, vec![])), &peers, 0)
                .pending
                .is_empty()
        );
        assert!(!judge(3, None, &peers, 0).pending.is_empty());
    }
}
