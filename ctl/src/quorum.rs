//! `verify-quorum` and `verify-survivors`: a bounded observation, printed as one JSON proof
//! (schema 3).
//!
//! Both require, of every observed node: a `raft_maintenance` report without node issues or
//! participation issues (anything but `apply_lag`/`not_applied`, which the prefix wait itself
//! measures), the same configured voters everywhere, every one of `--expected-groups` groups
//! hosted with exactly those voters and no learners. Then, for each group, the leader all
//! observed replicas agree on is asked for a fresh ReadIndex round
//! (`GET /__ursula/raft/{g}/quorum`, behind the pinned process incarnation); its confirmed
//! prefix must then be applied by every observed replica under that same leader and term.
//! One absolute deadline (`--timeout-secs`) covers metrics, the rounds and the waits; when it
//! passes the verb aborts (exit 2) naming what was missing.
//!
//! `verify-quorum` observes every configured voter, which must be exactly the manifest's
//! nodes. `verify-survivors --excluded-node-id X` leaves X out, keeps it in the required
//! membership (never shrinking the configuration to fit), requires the other voters all to
//! answer, and reports scope `surviving_quorum` with `full_redundancy_restored: false`.
//!
//! `maintenance_executor_certified` is true only when the manifest carries a
//! `maintenance_fence` and every observed process, in the last observation, reports that token
//! `active`; `maintenance_executor_retired_certified` only when every one reports it `retired`.
//! A mix certifies neither. They certify process-local admission, not the external reservation.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;
use std::time::Instant;

use serde::Serialize;
use ursula_protocol::admin::QuorumProof;

use crate::CtlError;
use crate::Outcome;
use crate::fence;
use crate::findings::configured_voters;
use crate::findings::group_count;
use crate::findings::group_voters;
use crate::findings::report_issues;
use crate::observe::Metrics;
use crate::plan::view;
use crate::session;
use crate::session::Session;

const POLL: Duration = Duration::from_millis(200);
/// Issues the prefix wait measures itself; every other one bars a replica from the proof.
const MEASURED: &[&str] = &["apply_lag", "not_applied"];

pub struct QuorumOptions {
    pub expected_groups: u64,
    pub timeout: Duration,
    pub excluded: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct Proof {
    pub schema: u32,
    pub scope: &'static str,
    pub observation_started_at: String,
    pub observation_finished_at: String,
    pub expected_groups: u64,
    pub configured_voter_ids: Vec<u64>,
    pub observed_voter_ids: Vec<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excluded_node_id: Option<u64>,
    /// Node id -> the process incarnation observed (and pinned) for it.
    pub processes: BTreeMap<u64, String>,
    pub groups: Vec<GroupProof>,
    pub full_redundancy_restored: bool,
    pub maintenance_executor_certified: bool,
    pub maintenance_executor_retired_certified: bool,
}

#[derive(Debug, Serialize)]
pub struct GroupProof {
    pub raft_group_id: u32,
    pub leader: u64,
    pub term: u64,
    /// The prefix the leader's ReadIndex round confirmed (`null` for an empty log).
    pub prefix: Option<u64>,
    /// Each observed replica's `last_applied_index` when it was seen holding the prefix.
    pub applied: BTreeMap<u64, u64>,
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Structural findings of one observation, and the configured voters.
pub fn structure(
    expected_groups: u64,
    observed: &BTreeMap<u64, Metrics>,
) -> (Vec<String>, Vec<u64>) {
    let mut findings = Vec::new();
    let mut configured: Option<Vec<u64>> = None;
    for (id, m) in observed {
        let Some(rm) = &m.raft_maintenance else {
            findings.push(format!("node {id}: no raft_maintenance report"));
            continue;
        };
        findings.extend(report_issues(*id, rm, MEASURED));
        let (voters, differs) = configured_voters(*id, rm, &mut configured);
        findings.extend(differs);
        findings.extend(group_count(*id, m, expected_groups));
        for g in 0..u32::try_from(expected_groups).unwrap_or(u32::MAX) {
            match view(m, g) {
                None => findings.push(format!("node {id}: group {g} missing")),
                Some(v) => findings.extend(group_voters(*id, g, v, &voters)),
            }
        }
    }
    (findings, configured.unwrap_or_default())
}

/// The leader every observed replica names for `g`, if they agree on an observed one.
fn agreed_leader(g: u32, observed: &BTreeMap<u64, Metrics>) -> Option<u64> {
    let leaders: BTreeSet<Option<u64>> = observed
        .values()
        .map(|m| view(m, g).and_then(|v| v.current_leader))
        .collect();
    match leaders.into_iter().collect::<Vec<_>>()[..] {
        [Some(l)] if observed.contains_key(&l) => Some(l),
        _ => None,
    }
}

pub fn verify(
    session: &Session,
    o: &QuorumOptions,
    out: &mut dyn Write,
) -> Result<Outcome, CtlError> {
    let started = now_rfc3339();
    let deadline = Instant::now() + o.timeout;
    if let Some(x) = o.excluded {
        session.node(x)?;
    }
    let ids: Vec<u64> = session
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|id| Some(*id) != o.excluded)
        .collect();
    let abort = |why: String| {
        let verb = if o.excluded.is_some() {
            "verify-survivors"
        } else {
            "verify-quorum"
        };
        Ok(Outcome::Abort(format!("{verb}: {why}")))
    };
    let mut last = String::from("nothing observed");
    // The structure, observed until it holds.
    let (mut observed, configured) = loop {
        if Instant::now() >= deadline {
            return abort(format!(
                "not verified within {}s: {last}",
                o.timeout.as_secs()
            ));
        }
        match observe(session, &ids) {
            Ok(obs) => {
                let (mut findings, configured) = structure(o.expected_groups, &obs);
                let want: BTreeSet<u64> = configured.iter().copied().collect();
                match o.excluded {
                    None if want != ids.iter().copied().collect() => findings.push(format!(
                        "configured voters {configured:?}, manifest nodes {ids:?}"
                    )),
                    Some(x) if !want.contains(&x) => {
                        findings.push(format!("excluded node {x} is no configured voter"));
                    }
                    Some(x)
                        if want.len() != ids.len() + 1
                            || want.iter().any(|v| *v != x && !ids.contains(v)) =>
                    {
                        findings.push(format!(
                            "configured voters {configured:?}: observe every one but {x}"
                        ));
                    }
                    _ => {}
                }
                if findings.is_empty() {
                    break (obs, configured);
                }
                last = findings.join("; ");
            }
            Err(e) if e.is_unreachable() => last = e.to_string(),
            Err(e) => return Err(e),
        }
        std::thread::sleep(POLL);
    };
    // A fresh ReadIndex round per group, on the leader the replicas agree on.
    let mut proofs: Vec<QuorumProof> = Vec::new();
    for g in 0..u32::try_from(o.expected_groups).unwrap_or(u32::MAX) {
        let proof = loop {
            if Instant::now() >= deadline {
                return abort(format!(
                    "group {g}: no quorum round within {}s: {last}",
                    o.timeout.as_secs()
                ));
            }
            if let Some(leader) = agreed_leader(g, &observed) {
                let a = session.admin(
                    session.node(leader)?,
                    "GET",
                    &format!("/__ursula/raft/{g}/quorum"),
                )?;
                match a.status {
                    200 => break a.json::<QuorumProof>()?,
                    409 | 503 => last = format!("group {g}: leader {leader} answered {}", a.status),
                    _ => return Err(session::refused("GET", a)),
                }
            } else {
                last =
                    format!("group {g}: the observed replicas do not agree on an observed leader");
            }
            std::thread::sleep(POLL);
            match observe(session, &ids) {
                Ok(obs) => observed = obs,
                Err(e) if e.is_unreachable() => last = e.to_string(),
                Err(e) => return Err(e),
            }
        };
        let mut pv = proof.voter_ids.clone();
        pv.sort_unstable();
        if pv != configured || !proof.learner_ids.is_empty() || proof.raft_group_id != g {
            return abort(format!(
                "group {g}: the quorum round reports voters {pv:?} learners {:?}, configured {configured:?}",
                proof.learner_ids
            ));
        }
        proofs.push(proof);
    }
    // Every observed replica applies each confirmed prefix under the same leader and term.
    let mut applied: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); proofs.len()];
    loop {
        let mut missing = Vec::new();
        for (p, seen) in proofs.iter().zip(applied.iter_mut()) {
            for id in &ids {
                if seen.contains_key(id) {
                    continue;
                }
                let v = observed.get(id).and_then(|m| view(m, p.raft_group_id));
                let at = v.and_then(|v| v.last_applied_index).unwrap_or(0);
                match v {
                    Some(v)
                        if v.current_term == p.term
                            && v.current_leader == Some(p.leader)
                            && at >= p.read_index.unwrap_or(0) =>
                    {
                        seen.insert(*id, at);
                    }
                    Some(v) if v.current_term > p.term => {
                        return abort(format!(
                            "group {}: term moved from {} to {} before node {id} applied the prefix",
                            p.raft_group_id, p.term, v.current_term
                        ));
                    }
                    _ => missing.push(format!(
                        "group {}: node {id} applied {at} of {:?}",
                        p.raft_group_id, p.read_index
                    )),
                }
            }
        }
        if missing.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            return abort(format!(
                "prefixes not applied within {}s: {}",
                o.timeout.as_secs(),
                missing.join("; ")
            ));
        }
        std::thread::sleep(POLL);
        match observe(session, &ids) {
            Ok(obs) => observed = obs,
            Err(e) if e.is_unreachable() => {}
            Err(e) => return Err(e),
        }
    }
    let pins = session.pins();
    let proof = Proof {
        schema: 3,
        scope: if o.excluded.is_some() {
            "surviving_quorum"
        } else {
            "full_quorum"
        },
        observation_started_at: started,
        observation_finished_at: now_rfc3339(),
        expected_groups: o.expected_groups,
        configured_voter_ids: configured,
        observed_voter_ids: ids.clone(),
        excluded_node_id: o.excluded,
        processes: ids
            .iter()
            .filter_map(|id| Some((*id, pins.get(id)?.clone())))
            .collect(),
        groups: proofs
            .iter()
            .zip(applied)
            .map(|(p, applied)| GroupProof {
                raft_group_id: p.raft_group_id,
                leader: p.leader,
                term: p.term,
                prefix: p.read_index,
                applied,
            })
            .collect(),
        full_redundancy_restored: o.excluded.is_none(),
        maintenance_executor_certified: fence::all_report(session, "active", observed.values()),
        maintenance_executor_retired_certified: fence::all_report(
            session,
            "retired",
            observed.values(),
        ),
    };
    let text = serde_json::to_string_pretty(&proof).map_err(|e| CtlError::Unexpected {
        what: "proof",
        why: e.to_string(),
    })?;
    writeln!(out, "{text}")?;
    Ok(Outcome::Done)
}

/// The metrics of `ids` (and no other node: an excluded one is not contacted), all of them
/// or the first error.
fn observe(session: &Session, ids: &[u64]) -> Result<BTreeMap<u64, Metrics>, CtlError> {
    let mut all = BTreeMap::new();
    for id in ids {
        all.insert(*id, session.metrics(session.node(*id)?)?);
    }
    Ok(all)
}
