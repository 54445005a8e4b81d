//! Drain planning, pure: for every group a node leads, which voter should take it. Kept free
//! of I/O so the choices (and the refusals) are unit-tested on metrics documents.
//!
//! A target must be, for that group: a voter in the draining leader's view (not a learner),
//! reachable, not drained itself (`leadership_shed`), a voter in its own view, not behind its
//! recovery gate (`recovery_gates.gated`/`wiped`), free of `raft_maintenance` issues for the
//! group, and caught up: its `last_applied_index` within the tolerance of the leader's
//! `committed_index`. Among those the one leading the fewest groups (counting the ones this
//! plan already gives it) wins, then the most applied, then the lowest id; a target that
//! answered `409` for the group earlier in this drain goes last.
//!
//! No target splits two ways: [`Choice::Abort`] when no voter could ever take the group
//! without an operator (every other voter unreachable or drained), [`Choice::Wait`] when one
//! could once it catches up or its gate opens.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use crate::observe::Metrics;
use ursula_protocol::metrics::RaftGroupView;

/// What the plan does with one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    Target(u64),
    /// A voter could take it soon (behind, gated); the reasons, one per voter.
    Wait(String),
    /// No voter can take it: abort rather than corner the group.
    Abort(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub group: u32,
    pub choice: Choice,
}

/// This node's view of `group`.
pub fn view(m: &Metrics, group: u32) -> Option<&RaftGroupView> {
    m.raft_groups.iter().find(|g| g.raft_group_id == group)
}

/// The leader of `group` by its own account among `nodes`, and its view of the group.
pub fn leader_of<'a>(
    group: u32,
    nodes: impl IntoIterator<Item = (u64, &'a Metrics)>,
) -> Option<(u64, &'a RaftGroupView)> {
    nodes.into_iter().find_map(|(id, m)| {
        view(m, group)
            .filter(|v| v.current_leader == Some(id))
            .map(|v| (id, v))
    })
}

/// The groups `node` leads by its own account.
pub fn led_by(node: u64, m: &Metrics) -> Vec<u32> {
    m.raft_groups
        .iter()
        .filter(|g| g.current_leader == Some(node))
        .map(|g| g.raft_group_id)
        .collect()
}

/// How many groups each node leads, by its own account.
fn lead_counts(cluster: &BTreeMap<u64, Metrics>) -> BTreeMap<u64, usize> {
    cluster
        .iter()
        .map(|(id, m)| (*id, led_by(*id, m).len()))
        .collect()
}

/// Plans moving every group `node` leads. `cluster` holds the metrics of every node that
/// answered (`node`'s included); `avoid` the (group, target) pairs refused with `409`.
pub fn plan(
    node: u64,
    cluster: &BTreeMap<u64, Metrics>,
    lag_tolerance: u64,
    avoid: &BTreeSet<(u32, u64)>,
) -> Vec<Move> {
    let Some(me) = cluster.get(&node) else {
        return Vec::new();
    };
    let mut load = lead_counts(cluster);
    led_by(node, me)
        .into_iter()
        .map(|group| {
            let choice = choose(node, group, me, cluster, lag_tolerance, avoid, &load);
            if let Choice::Target(t) = choice {
                *load.entry(t).or_default() += 1;
            }
            Move { group, choice }
        })
        .collect()
}

fn choose(
    node: u64,
    group: u32,
    me: &Metrics,
    cluster: &BTreeMap<u64, Metrics>,
    lag_tolerance: u64,
    avoid: &BTreeSet<(u32, u64)>,
    load: &BTreeMap<u64, usize>,
) -> Choice {
    let Some(mine) = view(me, group) else {
        return Choice::Abort(format!("node {node} has no view of group {group}"));
    };
    let committed = mine.committed_index.unwrap_or(0);
    let mut eligible = Vec::new();
    let mut waits = Vec::new();
    let mut never = Vec::new();
    for &c in mine.voter_ids.iter().filter(|c| **c != node) {
        if mine.learner_ids.contains(&c) {
            never.push(format!("{c} is a learner"));
            continue;
        }
        let Some(m) = cluster.get(&c) else {
            never.push(format!("{c} unreachable"));
            continue;
        };
        if m.leadership_shed.sheds() {
            never.push(format!("{c} {}", m.leadership_shed.why()));
            continue;
        }
        let key = group.to_string();
        if m.recovery_gates.gated.contains_key(&key) || m.recovery_gates.wiped.contains_key(&key) {
            waits.push(format!("{c} behind its recovery gate"));
            continue;
        }
        if let Some(issue) = m
            .raft_maintenance
            .as_ref()
            .and_then(|r| r.group_issues.iter().find(|i| i.raft_group_id == group))
        {
            waits.push(format!("{c} reports {}", issue.issue));
            continue;
        }
        let Some(theirs) = view(m, group) else {
            waits.push(format!("{c} does not host the group"));
            continue;
        };
        if !theirs.voter_ids.contains(&c) || theirs.learner_ids.contains(&c) {
            waits.push(format!("{c} is no voter in its own view"));
            continue;
        }
        let applied = theirs.last_applied_index.unwrap_or(0);
        if applied.saturating_add(lag_tolerance) < committed {
            waits.push(format!("{c} applied {applied} of {committed}"));
            continue;
        }
        let refused = avoid.contains(&(group, c));
        let led = load.get(&c).copied().unwrap_or(0);
        eligible.push((refused, led, std::cmp::Reverse(applied), c));
    }
    if let Some(best) = eligible.into_iter().min() {
        return Choice::Target(best.3);
    }
    let mut why = never;
    why.extend(waits.iter().cloned());
    if why.is_empty() {
        why.push("no other voter".into());
    }
    if waits.is_empty() {
        Choice::Abort(why.join(", "))
    } else {
        Choice::Wait(why.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use ursula_protocol::admin::SHED_MAINTENANCE;
    use ursula_protocol::admin::ShedState;

    use super::*;

    /// A node of a 3-voter cluster with `groups` groups, where `leads` are the groups it
    /// leads and every replica applied `applied`.
    fn node(id: u64, leads: &[u32], groups: u32, applied: u64) -> Metrics {
        Metrics {
            node_id: id,
            process_incarnation: format!("p{id}"),
            raft_groups: (0..groups)
                .map(|g| RaftGroupView {
                    raft_group_id: g,
                    node_id: id,
                    current_leader: leads.contains(&g).then_some(id),
                    committed_index: Some(applied),
                    last_applied_index: Some(applied),
                    voter_ids: vec![1, 2, 3],
                    ..RaftGroupView::default()
                })
                .collect(),
            ..Metrics::default()
        }
    }

    fn cluster(nodes: Vec<Metrics>) -> BTreeMap<u64, Metrics> {
        nodes.into_iter().map(|m| (m.node_id, m)).collect()
    }

    #[test]
    fn targets_spread_over_the_least_loaded_voters() {
        let c = cluster(vec![
            node(1, &[0, 1, 2], 4, 10),
            node(2, &[3], 4, 10),
            node(3, &[], 4, 10),
        ]);
        let moves = plan(1, &c, 0, &BTreeSet::new());
        let targets: Vec<_> = moves.iter().map(|m| m.choice.clone()).collect();
        // 3 leads nothing, so it gets the first; then 2 and 3 lead one each: lowest id.
        assert_eq!(
            targets,
            vec![Choice::Target(3), Choice::Target(2), Choice::Target(3)]
        );
    }

    #[test]
    fn drained_behind_gated_and_learner_voters_are_not_targets() {
        let mut two = node(2, &[], 2, 10);
        two.leadership_shed = ShedState::of_bits(SHED_MAINTENANCE);
        let mut three = node(3, &[], 2, 10);
        three.raft_groups[0].last_applied_index = Some(4);
        three
            .recovery_gates
            .gated
            .insert("1".into(), "recovering".into());
        let c = cluster(vec![node(1, &[0, 1], 2, 10), two, three]);
        let moves = plan(1, &c, 0, &BTreeSet::new());
        assert!(
            matches!(&moves[0].choice, Choice::Wait(w) if w.contains("2 drained") && w.contains("3 applied 4 of 10")),
            "{moves:?}"
        );
        assert!(
            matches!(&moves[1].choice, Choice::Wait(w) if w.contains("recovery gate")),
            "{moves:?}"
        );
        // Within the lag tolerance the lagging voter is taken.
        let moves = plan(1, &c, 6, &BTreeSet::new());
        assert_eq!(moves[0].choice, Choice::Target(3));

        let mut learner = node(1, &[0], 1, 10);
        learner.raft_groups[0].learner_ids = vec![2];
        let c = cluster(vec![learner, node(2, &[], 1, 10), node(3, &[], 1, 10)]);
        assert_eq!(
            plan(1, &c, 0, &BTreeSet::new())[0].choice,
            Choice::Target(3)
        );
    }

    #[test]
    fn no_target_aborts_when_every_other_voter_is_drained_or_unreachable() {
        let mut two = node(2, &[], 1, 10);
        two.leadership_shed = ShedState::of_bits(SHED_MAINTENANCE);
        // Node 3 did not answer.
        let c = cluster(vec![node(1, &[0], 1, 10), two]);
        let moves = plan(1, &c, 0, &BTreeSet::new());
        assert_eq!(
            moves,
            vec![Move {
                group: 0,
                choice: Choice::Abort("2 drained, 3 unreachable".into())
            }]
        );
    }

    #[test]
    fn a_target_that_answered_409_goes_last_on_the_re_plan() {
        let c = cluster(vec![
            node(1, &[0], 1, 10),
            node(2, &[], 1, 10),
            node(3, &[], 1, 10),
        ]);
        let mut avoid = BTreeSet::new();
        assert_eq!(plan(1, &c, 0, &avoid)[0].choice, Choice::Target(2));
        avoid.insert((0, 2));
        assert_eq!(plan(1, &c, 0, &avoid)[0].choice, Choice::Target(3));
        // Refused by both: still try one rather than give up while they are eligible.
        avoid.insert((0, 3));
        assert_eq!(plan(1, &c, 0, &avoid)[0].choice, Choice::Target(2));
    }

    #[test]
    fn a_node_that_leads_nothing_needs_no_move() {
        let c = cluster(vec![node(1, &[], 2, 1), node(2, &[0, 1], 2, 1)]);
        assert!(plan(1, &c, 0, &BTreeSet::new()).is_empty());
    }
}
