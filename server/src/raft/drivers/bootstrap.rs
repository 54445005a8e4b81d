//! The per-group membership bootstrap of a static cluster. A group is initialized once, by its
//! lowest configured voter, and only when every other voter answers that it holds nothing of
//! the group and sees no leader: one voter holding anything means the group exists, and a node
//! that initialized it again would start a second history. A quorum is not enough, since the
//! missing voter may be the one that holds the group. So a fresh install with a voter that
//! never comes up stays uninitialized.
//!
//! A replica that holds nothing while another voter follows a leader of the group, or holds
//! entries past the initial membership (index 0, so the group had a leader), lost its log (a
//! wiped or replaced WAL directory): it also lost its vote, so it goes behind the recovery gate
//! and refuses replication until it obtains a vote floor (see [`super::floor`]). Entries count
//! without a leader in sight: a wiped replica restarting during an election must not hand its
//! empty log's vote to a candidate missing writes it had acknowledged. Until its first probe
//! round decided, a replica holding nothing grants no vote to a candidate past index 0 (the
//! initializer's first election, at index 0, is never held up).
//!
//! A replica that once saw every voter answer empty is part of a fresh install, not wiped:
//! every vote it cast since is in its own journal, and before it the group existed nowhere. It
//! is never gated for the group, however late the initializer's leader reaches it. The probe
//! does not hold replication while it runs: under load a hold would make fresh replicas refuse
//! the initializer's first election and then find a leader before they held anything, so they
//! would be taken for wiped ones, and a leader lost right after the bootstrap would leave the
//! group without a quorum.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Weak;
use std::time::Duration;

use openraft::BasicNode;

use super::gate_watch;
use crate::raft::peer::wire::Probe;
use crate::raft::replicas::Replicas;

/// How often the groups still empty everywhere are probed again.
const RETRY: Duration = Duration::from_secs(1);

/// Probes the other voters about `pending` (the groups this replica held nothing of at start)
/// until each is initialized, found to exist elsewhere, or replicated here.
pub async fn run(engine: Weak<Replicas>, mut pending: BTreeSet<u32>) {
    let mut told_waiting = BTreeSet::new();
    // Groups another voter holds: never initialized here, whatever later answers say.
    let mut exists = BTreeSet::new();
    // Groups this replica saw empty on every voter: a fresh install, never gated as lost.
    let mut seen_empty = BTreeSet::new();
    loop {
        let Some(e) = super::running(&engine) else {
            return;
        };
        pending.retain(|g| {
            let holds = e.log_view(*g).holds();
            if holds {
                e.vote_hold.release(*g);
            }
            !holds
        });
        if pending.is_empty() {
            return;
        }
        let others: Vec<u64> = e
            .peers
            .urls
            .keys()
            .copied()
            .filter(|id| *id != e.node_id)
            .collect();
        let lowest = e.peers.urls.keys().next() == Some(&e.node_id);
        let asks = pending.iter().flat_map(|g| {
            let e = &e;
            others.iter().map(move |node| async move {
                let answer = e.peers.probe(*node, *g).await.ok();
                (*g, answer)
            })
        });
        // Every pending group is decided this round, even with nobody to ask (one voter).
        let mut answers: BTreeMap<u32, Vec<Option<Probe>>> =
            pending.iter().map(|g| (*g, Vec::new())).collect();
        for (g, a) in futures_util::future::join_all(asks).await {
            answers.entry(g).or_default().push(a);
        }
        for (g, answers) in answers {
            // Decided below, whatever the answers: gated, fresh, or waiting for its first entry.
            e.vote_hold.release(g);
            if e.log_view(g).holds() {
                pending.remove(&g);
                continue;
            }
            let everyone_empty = answers
                .iter()
                .all(|a| a.is_some_and(|p| !p.holds && p.leader.is_none()));
            if everyone_empty {
                seen_empty.insert(g);
            }
            // A holder of the initial membership alone does not gate: during a fresh install
            // the initializer holds it before anyone leads, and it needs the others' votes.
            if answers
                .iter()
                .flatten()
                .any(|p| p.leader.is_some() || past_bootstrap(p))
            {
                if seen_empty.contains(&g) {
                    // Fresh: it waits for the leader's first append, probed again meanwhile.
                    continue;
                }
                pending.remove(&g);
                gate_lost_replica(&e, &engine, g);
                continue;
            }
            if answers.iter().flatten().any(|p| p.holds) {
                exists.insert(g);
            }
            if exists.contains(&g) {
                continue;
            }
            let everyone = answers.iter().all(Option::is_some);
            if !lowest || e.leader_of(g).is_some() {
                continue;
            }
            if !everyone {
                if told_waiting.insert(g) {
                    tracing::info!(
                        group = g,
                        "waits for every voter before initializing: a voter did not answer"
                    );
                }
                continue;
            }
            let members: BTreeMap<u64, BasicNode> = e
                .peers
                .urls
                .iter()
                .map(|(id, url)| (*id, BasicNode::new(url)))
                .collect();
            if let Some(raft) = e.raft(g) {
                match raft.initialize(members).await {
                    Ok(()) => tracing::info!(group = g, "initialized: every voter was empty"),
                    Err(err) => {
                        tracing::debug!(group = g, error = %err, "group already initialized")
                    }
                }
            }
            pending.remove(&g);
        }
        drop(e);
        tokio::time::sleep(RETRY).await;
    }
}

/// Whether a voter's log shows that the group had a leader: entries past the initial
/// membership at index 0.
fn past_bootstrap(p: &Probe) -> bool {
    p.last_log_index.is_some_and(|i| i >= 1)
}

/// Closes the gate of a group this replica lost while another voter holds it, and marks that
/// the replica lost its vote with it.
fn gate_lost_replica(e: &Replicas, engine: &Weak<Replicas>, group: u32) {
    let Some(raft) = e.raft(group) else {
        return;
    };
    raft.runtime_config().elect(false);
    let was_closed = e.gates.is_closed(group);
    match e.gates.close_wiped(group) {
        Ok(false) => return,
        Ok(true) => tracing::warn!(
            group,
            "recovery gate closed: this replica holds nothing of a group another voter holds (a wiped WAL); it lost its vote and refuses replication until the leader confirms a fresh barrier with a quorum of the other voters"
        ),
        // Not recorded: the gate still holds for this run, and the next start probes again.
        Err(err) => tracing::error!(group, error = %err, "cannot record a closed recovery gate"),
    }
    if !was_closed {
        e.spawn_on_core(group, gate_watch::watch(engine.clone(), group));
    }
}
