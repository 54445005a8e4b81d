//! Findings about one node's Raft metrics that more than one check reports (`wait-ready`,
//! `verify-cluster`, `verify-quorum`): one line each, naming the node.

use ursula_protocol::metrics::RaftGroupView;
use ursula_protocol::metrics::RaftMaintenance;

use crate::observe::Metrics;

/// The issues of node `id`'s `raft_maintenance` report: every node-wide one, then the group
/// ones except those in `measured`, which the caller measures itself.
pub fn report_issues(id: u64, rm: &RaftMaintenance, measured: &[&str]) -> Vec<String> {
    let node = rm.node_issues.iter().map(|i| format!("node {id}: {i}"));
    let groups = rm
        .group_issues
        .iter()
        .filter(|gi| !measured.contains(&gi.issue.as_str()))
        .map(|gi| format!("node {id}: group {}: {}", gi.raft_group_id, gi.issue));
    node.chain(groups).collect()
}

/// Node `id`'s configured voters, sorted, and how they differ from `configured`, the ones the
/// nodes before it report (the first node's become them).
pub fn configured_voters(
    id: u64,
    rm: &RaftMaintenance,
    configured: &mut Option<Vec<u64>>,
) -> (Vec<u64>, Option<String>) {
    let mut voters = rm.configured_voter_ids.clone();
    voters.sort_unstable();
    let differs = match configured {
        Some(c) if *c != voters => Some(format!(
            "node {id}: configured voters {voters:?}, others {c:?}"
        )),
        Some(_) => None,
        None => {
            *configured = Some(voters.clone());
            None
        }
    };
    (voters, differs)
}

/// Group `g` in node `id`'s view when its voters are not `voters` (sorted) or it has learners.
pub fn group_voters(id: u64, g: u32, v: &RaftGroupView, voters: &[u64]) -> Option<String> {
    let mut gv = v.voter_ids.clone();
    gv.sort_unstable();
    (gv != voters || !v.learner_ids.is_empty()).then(|| {
        format!(
            "node {id}: group {g} voters {gv:?} learners {:?}, configured {voters:?}",
            v.learner_ids
        )
    })
}

/// Node `id` when it hosts another number of groups than `expected_groups`.
pub fn group_count(id: u64, m: &Metrics, expected_groups: u64) -> Option<String> {
    (m.raft_groups.len() as u64 != expected_groups).then(|| {
        format!(
            "node {id}: {} groups, expected {expected_groups}",
            m.raft_groups.len()
        )
    })
}
