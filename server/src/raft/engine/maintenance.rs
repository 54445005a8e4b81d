//! The maintenance report (`raft_maintenance` in `/__ursula/metrics`): what keeps this node or
//! its replicas from full redundancy, and which of it makes the node unready.
//!
//! [`assess`] is a pure function over facts, so every rule is tested without a cluster;
//! [`gather`] reads those facts off the node's [`Replicas`]. The readiness probe and the
//! metrics use the same report, so they cannot disagree.

use std::collections::BTreeSet;

use ursula_protocol::metrics::GroupIssue;
use ursula_protocol::metrics::RaftMaintenance;

use crate::raft::replicas::Replicas;
use crate::runtime::GroupId;

/// How far the applied index may trail the commit index this replica knows before the group
/// reports `apply_lag`. Applying trails committing by a batch or two on a healthy replica;
/// this many entries behind means it is replaying or catching up, not serving current data.
pub const APPLY_LAG_ENTRIES: u64 = 1024;

/// What one group's replica can be short of, in the order the report lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Issue {
    /// The effective voters differ from the configured set (this node and `[[raft.peers]]`).
    IncompleteVoterSet,
    /// The effective membership has more than one configuration.
    JointMembership,
    /// Some configuration of the effective membership leaves this node out (a learner, a
    /// replica not yet added, or a voter being removed).
    LocalReplicaNotVoter,
    /// The effective membership's entry is past the last applied index.
    MembershipNotApplied,
    /// The replica has applied no entry of the group.
    NotApplied,
    /// The applied index trails the known commit index by more than [`APPLY_LAG_ENTRIES`].
    ApplyLag,
    /// The replica knows no leader of the group.
    LeaderUnknown,
    /// A committed command failed to apply and stopped the group on this replica.
    ApplyStopped,
}

impl Issue {
    pub fn as_str(self) -> &'static str {
        match self {
            Issue::IncompleteVoterSet => "incomplete_voter_set",
            Issue::JointMembership => "joint_membership",
            Issue::LocalReplicaNotVoter => "local_replica_not_voter",
            Issue::MembershipNotApplied => "membership_not_applied",
            Issue::NotApplied => "not_applied",
            Issue::ApplyLag => "apply_lag",
            Issue::LeaderUnknown => "leader_unknown",
            Issue::ApplyStopped => "apply_stopped",
        }
    }

    /// Whether the issue means the local replica is not a healthy voter, so the node is
    /// unready. The other two are lost redundancy, which a healthy survivor of a peer's
    /// rebuild reports while it keeps serving.
    pub fn makes_unready(self) -> bool {
        // A stopped group leaves the node ready: its other groups serve (the spec's recovery
        // page), while `wait-ready` and rollouts refuse on the issue.
        !matches!(
            self,
            Issue::IncompleteVoterSet | Issue::JointMembership | Issue::ApplyStopped
        )
    }

    fn parse(s: &str) -> Option<Issue> {
        ALL.iter().copied().find(|i| i.as_str() == s)
    }
}

const ALL: [Issue; 8] = [
    Issue::IncompleteVoterSet,
    Issue::JointMembership,
    Issue::LocalReplicaNotVoter,
    Issue::MembershipNotApplied,
    Issue::NotApplied,
    Issue::ApplyLag,
    Issue::LeaderUnknown,
    Issue::ApplyStopped,
];

/// Node-wide conditions, in the readiness probe's order.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeFacts {
    pub format_epoch_mismatch: bool,
    pub wal_disk_pressure: bool,
    pub recovery_stalled: bool,
    pub recovery_gate_closed: bool,
}

/// One group as this replica sees it.
#[derive(Debug, Clone, Default)]
pub struct GroupFacts {
    pub group: GroupId,
    pub current_leader: Option<u64>,
    pub last_applied: Option<u64>,
    pub committed: Option<u64>,
    /// Each voter configuration of the effective membership.
    pub configs: Vec<BTreeSet<u64>>,
    pub membership_index: Option<u64>,
    pub apply_stopped: bool,
}

/// The issues of one group's replica on `node_id`.
pub fn group_issues(node_id: u64, configured: &BTreeSet<u64>, g: &GroupFacts) -> Vec<Issue> {
    // A stopped group's Raft facts say nothing more (no leader, nothing applied since): the
    // one issue is that it stopped, which leaves the node ready for its other groups.
    if g.apply_stopped {
        return vec![Issue::ApplyStopped];
    }
    let mut out = Vec::new();
    let voters: BTreeSet<u64> = g.configs.iter().flatten().copied().collect();
    if &voters != configured {
        out.push(Issue::IncompleteVoterSet);
    }
    if g.configs.len() > 1 {
        out.push(Issue::JointMembership);
    }
    if g.configs.is_empty() || g.configs.iter().any(|c| !c.contains(&node_id)) {
        out.push(Issue::LocalReplicaNotVoter);
    }
    // `None < Some(_)`: a membership entry at any index is past an empty applied prefix.
    if g.membership_index.is_some() && g.membership_index > g.last_applied {
        out.push(Issue::MembershipNotApplied);
    }
    match g.last_applied {
        None => out.push(Issue::NotApplied),
        Some(applied) => {
            if g.committed.unwrap_or(0).saturating_sub(applied) > APPLY_LAG_ENTRIES {
                out.push(Issue::ApplyLag);
            }
        }
    }
    if g.current_leader.is_none() {
        out.push(Issue::LeaderUnknown);
    }
    out
}

/// The report: node issues, every group's issues, and the configured voters.
pub fn assess(
    node_id: u64,
    configured: &BTreeSet<u64>,
    node: NodeFacts,
    groups: &[GroupFacts],
) -> RaftMaintenance {
    let node_issues = [
        (node.format_epoch_mismatch, "format_epoch_mismatch"),
        (node.wal_disk_pressure, "wal_disk_pressure"),
        (node.recovery_stalled, "recovery_stalled"),
        (node.recovery_gate_closed, "recovery_gate_closed"),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| name.to_owned())
    .collect();
    let group_issues = groups
        .iter()
        .flat_map(|g| {
            group_issues(node_id, configured, g)
                .into_iter()
                .map(|i| GroupIssue {
                    raft_group_id: g.group,
                    issue: i.as_str().to_owned(),
                })
        })
        .collect();
    RaftMaintenance {
        node_issues,
        group_issues,
        configured_voter_ids: configured.iter().copied().collect(),
    }
}

/// The group issues of a report that make the node unready (`raft_replica_unready`).
pub fn unready(report: &RaftMaintenance) -> Vec<GroupIssue> {
    report
        .group_issues
        .iter()
        .filter(|i| Issue::parse(&i.issue).is_some_and(Issue::makes_unready))
        .cloned()
        .collect()
}

/// The facts of this node and its replicas now; `wal_disk_pressure` comes from admission,
/// which the engine does not own.
pub fn gather(node: &Replicas, wal_disk_pressure: bool) -> RaftMaintenance {
    let facts = NodeFacts {
        format_epoch_mismatch: node.peers.mismatch.seen(),
        wal_disk_pressure,
        recovery_stalled: !node.gates.stalled().is_empty(),
        recovery_gate_closed: !node.gates.closed().is_empty(),
    };
    let groups: Vec<GroupFacts> = (0..node.group_count())
        .filter_map(|group| {
            let v = node.group_view(group)?;
            Some(GroupFacts {
                group,
                current_leader: v.current_leader,
                last_applied: v.last_applied_index,
                committed: v.committed_index,
                configs: v.configs,
                membership_index: v.membership_index,
                apply_stopped: node.apply_stop(group).is_some(),
            })
        })
        .collect();
    assess(node.node_id, &node.configured_voters(), facts, &groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    /// A healthy voter of a complete 3-voter group: applied through its membership, a leader.
    fn healthy() -> GroupFacts {
        GroupFacts {
            group: 2,
            current_leader: Some(1),
            last_applied: Some(40),
            committed: Some(41),
            configs: vec![set(&[1, 2, 3])],
            membership_index: Some(1),
            apply_stopped: false,
        }
    }

    #[test]
    fn a_stopped_group_is_an_issue_that_leaves_the_node_ready() {
        let g = GroupFacts {
            apply_stopped: true,
            current_leader: None,
            ..healthy()
        };
        assert_eq!(issues(2, &g), ["apply_stopped"]);
        let report = assess(2, &set(&[1, 2, 3]), NodeFacts::default(), &[g]);
        assert!(unready(&report).is_empty(), "the node stays ready");
        assert_eq!(report.group_issues.len(), 1, "wait-ready sees it");
    }

    fn issues(node: u64, g: &GroupFacts) -> Vec<&'static str> {
        group_issues(node, &set(&[1, 2, 3]), g)
            .into_iter()
            .map(Issue::as_str)
            .collect()
    }

    #[test]
    fn a_healthy_voter_of_the_configured_set_has_no_issue() {
        assert!(issues(2, &healthy()).is_empty());
    }

    #[test]
    fn lost_redundancy_is_reported_but_keeps_a_healthy_voter_ready() {
        let mut g = healthy();
        g.configs = vec![set(&[1, 2])];
        assert_eq!(issues(2, &g), ["incomplete_voter_set"]);
        g.configs = vec![set(&[1, 2, 3]), set(&[1, 2])];
        assert_eq!(issues(2, &g), ["joint_membership"]);
        let report = assess(2, &set(&[1, 2, 3]), NodeFacts::default(), &[g]);
        assert!(unready(&report).is_empty(), "{report:?}");
    }

    #[test]
    fn a_learner_or_a_voter_that_one_joint_config_excludes_is_not_a_voter() {
        let mut g = healthy();
        g.configs = vec![set(&[1, 2])];
        assert_eq!(
            issues(3, &g),
            ["incomplete_voter_set", "local_replica_not_voter"]
        );
        g.configs = vec![set(&[1, 2, 3]), set(&[1, 2])];
        assert_eq!(
            issues(3, &g),
            ["joint_membership", "local_replica_not_voter"]
        );
        let report = assess(3, &set(&[1, 2, 3]), NodeFacts::default(), &[g]);
        let unready: Vec<_> = unready(&report).into_iter().map(|i| i.issue).collect();
        assert_eq!(unready, ["local_replica_not_voter"]);
    }

    #[test]
    fn applying_behind_the_membership_or_the_commit_index_is_unready() {
        let mut g = healthy();
        g.membership_index = Some(41);
        assert_eq!(issues(2, &g), ["membership_not_applied"]);
        let mut g = healthy();
        g.committed = Some(40 + APPLY_LAG_ENTRIES);
        assert!(issues(2, &g).is_empty(), "at the bound is not a lag");
        g.committed = Some(41 + APPLY_LAG_ENTRIES);
        assert_eq!(issues(2, &g), ["apply_lag"]);
    }

    #[test]
    fn an_empty_replica_reports_every_issue_it_has() {
        let g = GroupFacts {
            group: 0,
            ..GroupFacts::default()
        };
        assert_eq!(
            issues(1, &g),
            [
                "incomplete_voter_set",
                "local_replica_not_voter",
                "not_applied",
                "leader_unknown"
            ]
        );
        let mut g = healthy();
        g.current_leader = None;
        assert_eq!(issues(2, &g), ["leader_unknown"]);
    }

    #[test]
    fn node_issues_keep_the_readiness_order() {
        let node = NodeFacts {
            format_epoch_mismatch: true,
            wal_disk_pressure: true,
            recovery_stalled: true,
            recovery_gate_closed: true,
        };
        let report = assess(1, &set(&[1]), node, &[]);
        assert_eq!(
            report.node_issues,
            [
                "format_epoch_mismatch",
                "wal_disk_pressure",
                "recovery_stalled",
                "recovery_gate_closed"
            ]
        );
        assert_eq!(report.configured_voter_ids, [1]);
    }
}
