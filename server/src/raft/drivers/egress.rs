//! The cluster-egress gate (`governance.cluster_probe`, Configuration, "Cold storage"): a node
//! that cannot reach a quorum of its peers cannot replicate, so it should lead nothing.
//!
//! Every [`INTERVAL`] the node POSTs a heartbeat-sized body to each peer's
//! `/__ursula/cluster-probe`, over the connections its Raft RPCs use, each within [`INTERVAL`].
//! A tick is bad when the peers that answered and the node itself make no quorum of the
//! configured voters. After [`UNHEALTHY_TICKS`] bad ticks with no good one between them the
//! node sheds (`cluster-egress-unhealthy`): it campaigns for no group, refuses transfers, and
//! hands every leadership off at once, planning again every tick for those still led; after
//! [`HEAL_TICKS`] good ticks in a row it may lead again. The gate judges only once the node
//! reached a quorum after it started: a cluster that is coming up, one node after another, is
//! not an egress fault, and a node that never reached a quorum could not win an election
//! anyway. The spec names no keys of this gate, so these settings are fixed
//! (docs/operations.md).
//!
//! Its questions to the peers travel the path it judges impaired, so a peer that does not
//! answer may still take a leadership's first handoff in a shed (the Raft handoff check
//! decides); a handoff that did not move the leadership goes only to a peer that answered that
//! it may campaign. On a tick when a peer answered that it may not campaign, the peers that did
//! not answer are passed over too: the shed may be cluster-wide. See [`targets`].

use std::collections::HashSet;
use std::sync::Weak;
use std::time::Duration;

use futures_util::future::join_all;

use super::streak::Change;
use super::streak::Streak;
use crate::raft::ops::handoff;
use crate::raft::ops::handoff::Answer;
use crate::raft::replicas::Replicas;

/// How often the gate probes its peers, and each probe's deadline.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Bad ticks, with no good tick between them, before the node sheds.
pub const UNHEALTHY_TICKS: u32 = 3;
/// Good ticks in a row before a node that shed may lead again.
pub const HEAL_TICKS: u32 = 2;

/// Whether `reached` answering peers and the node itself make a quorum of `voters`.
pub fn quorum(reached: usize, voters: usize) -> bool {
    reached + 1 > voters / 2
}

/// The peers a leadership goes to this tick, in order: those that answered that they may
/// campaign (best first, as `answers` lists them), then, on the leadership's first handoff of
/// this shed and unless a peer answered that it may not campaign this tick (`refused`), those
/// that did not answer.
pub fn targets(answers: &[(u64, Answer)], first: bool, refused: bool) -> Vec<u64> {
    let of = |kind: Answer| {
        answers
            .iter()
            .filter(move |(_, a)| *a == kind)
            .map(|(v, _)| *v)
    };
    let mut out: Vec<u64> = of(Answer::MayCampaign).collect();
    if first && !refused {
        out.extend(of(Answer::Silent));
    }
    out
}

/// Runs the gate until the node stops; started only on a node with peers.
pub async fn run(node: Weak<Replicas>) {
    let mut streak = Streak::new(UNHEALTHY_TICKS, HEAL_TICKS);
    // The leaderships handed off at least once in this shed.
    let mut tried: HashSet<u32> = HashSet::new();
    let mut armed = false;
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(node) = super::running(&node) else {
            return;
        };
        let peers: Vec<u64> = node
            .peers
            .urls
            .keys()
            .copied()
            .filter(|p| *p != node.node_id)
            .collect();
        let probes = peers.iter().map(|p| node.peers.egress_probe(*p, INTERVAL));
        let results = join_all(probes).await;
        let reached = results.iter().filter(|r| r.is_ok()).count();
        let good = quorum(reached, peers.len() + 1);
        armed |= good;
        if !armed {
            continue;
        }
        let change = if good {
            streak.good_tick()
        } else {
            let why: Vec<String> = results
                .iter()
                .filter_map(|r| r.as_ref().err().map(ToString::to_string))
                .collect();
            // Once per streak at warn: a cut would otherwise log every tick.
            if streak.bad() == 0 {
                tracing::warn!(reached, peers = peers.len(), failures = ?why, "cluster egress tick is bad: this node reaches no quorum of its peers");
            } else {
                tracing::debug!(reached, streak = streak.bad() + 1, failures = ?why, "cluster egress tick is bad");
            }
            streak.bad_tick()
        };
        match change {
            Change::Shed => {
                tracing::warn!(
                    ticks = UNHEALTHY_TICKS,
                    "cluster egress unhealthy: this node hands every leadership to its peers and campaigns for none until it reaches a quorum again"
                );
                tried.clear();
                shed_for_egress(&node, true);
            }
            Change::Healed => {
                tracing::info!(
                    ticks = HEAL_TICKS,
                    "cluster egress healthy again: this node may lead"
                );
                shed_for_egress(&node, false);
            }
            Change::None => {}
        }
        if streak.shed() {
            hand_off_all(&node, &mut tried).await;
        }
    }
}

/// Follows the gate into the shed state, as the store gate does.
fn shed_for_egress(node: &Replicas, unhealthy: bool) {
    if !node.shed.set_egress(unhealthy) {
        return;
    }
    if unhealthy {
        for r in node.rafts() {
            r.runtime_config().elect(false);
        }
    } else {
        for group in 0..node.group_count() {
            node.resume_elections(group);
        }
    }
}

/// Hands every group this node leads off at once, by the rules of [`targets`].
async fn hand_off_all(node: &Replicas, tried: &mut HashSet<u32>) {
    let led: Vec<u32> = (0..node.group_count())
        .filter(|g| node.is_leader(*g))
        .collect();
    if led.is_empty() {
        return;
    }
    let asked = join_all(led.iter().map(|g| async move {
        let answers = handoff::answers(node, *g).await;
        (*g, answers)
    }))
    .await;
    let refused = asked
        .iter()
        .any(|(_, a)| a.iter().any(|(_, x)| *x == Answer::MayNot));
    let plans: Vec<(u32, Vec<u64>)> = asked
        .into_iter()
        .map(|(g, answers)| {
            let first = tried.insert(g);
            (g, targets(&answers, first, refused))
        })
        .collect();
    join_all(plans.into_iter().map(|(group, targets)| async move {
        for target in targets {
            match handoff::transfer(node, group, target).await {
                Ok(_) => {
                    tracing::info!(group, target, "egress gate: handed the group off");
                    return;
                }
                Err(e) => {
                    tracing::info!(group, target, error = %e, "egress gate handoff failed; trying the next voter");
                }
            }
        }
    }))
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_is_good_when_the_answering_peers_and_the_node_make_a_quorum() {
        assert!(quorum(1, 3) && quorum(2, 3) && !quorum(0, 3));
        assert!(quorum(2, 5) && !quorum(1, 5));
        assert!(quorum(2, 4) && !quorum(1, 4), "four voters need three");
        assert!(quorum(0, 1));
    }

    #[test]
    fn a_silent_peer_takes_only_a_first_handoff_and_none_on_a_tick_with_a_refusal() {
        use Answer::*;
        let answers = [(2, Silent), (3, MayCampaign), (4, MayNot), (5, Silent)];
        assert_eq!(targets(&answers, true, false), [3, 2, 5]);
        assert_eq!(
            targets(&answers, false, false),
            [3],
            "a handoff that did not move goes only to a peer that may campaign"
        );
        assert_eq!(
            targets(&answers, true, true),
            [3],
            "a refusal this tick passes over the silent peers too"
        );
        assert!(targets(&[(2, MayNot)], true, false).is_empty());
    }
}
