//! Whole-cluster gates: `wait-ready` and `verify-cluster`.
//!
//! `wait-ready --expected-groups N` polls until every node reports N Raft groups with a
//! leader, a `raft_maintenance` report without issues whose configured voters are the same on
//! every node and equal each group's voter set (no learners), no `maintenance_fence_uncertain`,
//! and `/__ursula/ready` 200 read where its metrics are. Unreachable nodes are retried until the timeout; a changed process or
//! an invalid answer stops at once. A timeout aborts (exit 2) with the findings.
//!
//! `verify-cluster` requires every configured voter to be in the manifest and answer, every
//! group to be led, no `raft_maintenance` issue, and every voter caught up, in two consecutive
//! samples a second apart: caught up means each voter applied, in the second sample, at least
//! what the group's leader had committed in the first.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;
use std::time::Instant;

use crate::CtlError;
use crate::Outcome;
use crate::findings::configured_voters;
use crate::findings::group_count;
use crate::findings::group_voters;
use crate::findings::report_issues;
use crate::observe::Metrics;
use crate::observe::Readiness;
use crate::plan::leader_of;
use crate::plan::view;
use crate::session::Session;

const POLL: Duration = Duration::from_millis(500);
const SAMPLE_GAP: Duration = Duration::from_secs(1);

/// One poll of every node: metrics and readiness, or why not.
type Poll = Vec<(u64, Result<(Metrics, Readiness), CtlError>)>;

fn poll(session: &Session, with_ready: bool) -> Result<Poll, CtlError> {
    let all = session.each(|n| {
        let m = session.metrics(n)?;
        let r = if with_ready {
            session.ready(n)?
        } else {
            Readiness::Ready
        };
        Ok((m, r))
    });
    // Only unreachable nodes are worth waiting for; anything else is the answer.
    let mut all = all;
    if let Some(i) = all
        .iter()
        .position(|(_, r)| r.as_ref().is_err_and(|e| !e.is_unreachable()))
        && let (_, Err(e)) = all.swap_remove(i)
    {
        return Err(e);
    }
    Ok(all)
}

/// What keeps the cluster from being ready for maintenance; empty when it is.
pub fn ready_findings(expected_groups: u64, poll: &Poll) -> Vec<String> {
    let mut findings = Vec::new();
    let mut configured: Option<Vec<u64>> = None;
    for (id, r) in poll {
        let (m, ready) = match r {
            Ok(x) => x,
            Err(e) => {
                findings.push(format!("node {id}: {e}"));
                continue;
            }
        };
        if let Readiness::NotReady(why) = ready {
            findings.push(format!("node {id}: not ready ({})", why.join(", ")));
        }
        // A fence lifecycle call in flight or unfinished refuses every admin mutation.
        if m.maintenance_fence_uncertain {
            findings.push(format!("node {id}: maintenance_fence_uncertain"));
        }
        let Some(rm) = &m.raft_maintenance else {
            findings.push(format!("node {id}: no raft_maintenance report"));
            continue;
        };
        findings.extend(report_issues(*id, rm, &[]));
        let (voters, differs) = configured_voters(*id, rm, &mut configured);
        if voters.is_empty() {
            findings.push(format!("node {id}: no configured voters"));
        }
        findings.extend(differs);
        for g in 0..expected_groups {
            let Ok(g) = u32::try_from(g) else { break };
            let Some(v) = view(m, g) else {
                findings.push(format!("node {id}: group {g} not initialized"));
                continue;
            };
            if v.current_leader.is_none() {
                findings.push(format!("node {id}: group {g} has no leader"));
            }
            findings.extend(group_voters(*id, g, v, &voters));
        }
        findings.extend(group_count(*id, m, expected_groups));
    }
    findings
}

pub fn wait_ready(
    session: &Session,
    expected_groups: u64,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<Outcome, CtlError> {
    let deadline = Instant::now() + timeout;
    loop {
        let p = poll(session, true)?;
        let findings = ready_findings(expected_groups, &p);
        if findings.is_empty() {
            writeln!(
                out,
                "ready: {} nodes, {expected_groups} groups, complete voter sets",
                p.len()
            )?;
            return Ok(Outcome::Done);
        }
        if Instant::now() >= deadline {
            return Ok(Outcome::Abort(format!(
                "wait-ready: not ready after {}s: {}",
                timeout.as_secs(),
                findings.join("; ")
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// One sample's structural findings and each group's leader-committed index.
pub fn cluster_findings(
    manifest_ids: &BTreeSet<u64>,
    poll: &Poll,
    earlier_committed: Option<&BTreeMap<u32, u64>>,
) -> (Vec<String>, BTreeMap<u32, u64>) {
    let mut findings = Vec::new();
    let mut ok: BTreeMap<u64, &Metrics> = BTreeMap::new();
    for (id, r) in poll {
        match r {
            Ok((m, _)) => {
                ok.insert(*id, m);
            }
            Err(e) => findings.push(format!("node {id}: {e}")),
        }
    }
    let mut configured = BTreeSet::new();
    for (id, m) in &ok {
        match &m.raft_maintenance {
            None => findings.push(format!("node {id}: no raft_maintenance report")),
            Some(rm) => {
                configured.extend(rm.configured_voter_ids.iter().copied());
                findings.extend(report_issues(*id, rm, &[]));
            }
        }
    }
    for v in &configured {
        if !manifest_ids.contains(v) {
            findings.push(format!("configured voter {v} is not in the manifest"));
        } else if !ok.contains_key(v) {
            findings.push(format!("configured voter {v} is not present"));
        }
    }
    let groups: BTreeSet<u32> = ok
        .values()
        .flat_map(|m| m.raft_groups.iter().map(|g| g.raft_group_id))
        .collect();
    let mut committed = BTreeMap::new();
    for g in groups {
        let leader = leader_of(g, ok.iter().map(|(id, m)| (*id, *m)));
        let Some((leader, lv)) = leader else {
            findings.push(format!("group {g}: no leader"));
            continue;
        };
        committed.insert(g, lv.committed_index.unwrap_or(0));
        let Some(target) = earlier_committed.and_then(|c| c.get(&g)) else {
            continue;
        };
        for voter in &lv.voter_ids {
            let applied = ok
                .get(voter)
                .and_then(|m| view(m, g))
                .and_then(|v| v.last_applied_index)
                .unwrap_or(0);
            if applied < *target {
                findings.push(format!(
                    "group {g}: voter {voter} applied {applied} of {target} (leader {leader})"
                ));
            }
        }
    }
    (findings, committed)
}

pub fn verify_cluster(
    session: &Session,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<Outcome, CtlError> {
    let ids: BTreeSet<u64> = session.nodes.iter().map(|n| n.id).collect();
    let deadline = Instant::now() + timeout;
    loop {
        let (first, committed) = cluster_findings(&ids, &poll(session, false)?, None);
        if first.is_empty() {
            std::thread::sleep(SAMPLE_GAP);
            let (second, _) = cluster_findings(&ids, &poll(session, false)?, Some(&committed));
            if second.is_empty() {
                writeln!(
                    out,
                    "verified: {} voters present and caught up in {} groups, two samples",
                    ids.len(),
                    committed.len()
                )?;
                return Ok(Outcome::Done);
            }
            if Instant::now() >= deadline {
                return Ok(abort_cluster(timeout, &second));
            }
        } else if Instant::now() >= deadline {
            return Ok(abort_cluster(timeout, &first));
        }
        std::thread::sleep(POLL);
    }
}

fn abort_cluster(timeout: Duration, findings: &[String]) -> Outcome {
    Outcome::Abort(format!(
        "verify-cluster: not verified within {}s: {}",
        timeout.as_secs(),
        findings.join("; ")
    ))
}
