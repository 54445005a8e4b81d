//! Leadership handoffs, built from what openraft 0.9 has (it has no transfer call): the leader
//! checks its target, holds the group's client writes ([`crate::raft::replicas::write_holds`]), waits until the
//! target holds its whole log and its own vote is past openraft's leader lease, then asks the
//! target to campaign (the `elect` peer RPC). The target's vote request wins the leader's vote,
//! which makes the leader step down; with it the target has a majority of a 3-voter group. In
//! a larger group the leader first lets the other voters' leases lapse (see [`outlast_leases`]).
//!
//! The spec's rules: the target is a voter that kept its log (gate open), is not drained,
//! acknowledged the leader within the last 1.5 s and holds every committed entry; a handoff
//! whose target has not taken over within 6 s is abandoned, and the old leader campaigns again.
//!
//! Also here: self-election, and shedding every leadership (a drain, a graceful shutdown).

use std::time::Duration;
use std::time::Instant;

use openraft::ServerState;
use ursula_protocol::admin::Elected;
use ursula_protocol::admin::Transferred;

use crate::raft::peer::wire::Declined;
use crate::raft::peer::wire::ElectRequest;
use crate::raft::peer::wire::PeerError;
use crate::raft::replicas::Replicas;
use crate::raft::types::GroupRaft;

/// A target must have acknowledged the leader this recently (the minimum election timeout).
pub const ACK_WINDOW: Duration = Duration::from_millis(1500);
/// A handoff not taken over within this long is abandoned (two maximum election timeouts).
pub const DEADLINE: Duration = Duration::from_secs(6);
/// Why a voter may not take a group from this leader now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unfit {
    #[error("another handoff of the group is running")]
    Busy,
    #[error("the group's membership is changing")]
    MembershipChanging,
    #[error("it last acknowledged the leader {0:?} ago")]
    StaleAck(Duration),
    #[error("it never acknowledged this leader")]
    NeverAcked,
    #[error("it holds entries up to {matched:?}, the group committed {committed:?}")]
    Behind {
        matched: Option<u64>,
        committed: Option<u64>,
    },
    /// The target itself declined to campaign (drained, shedding, recovering).
    #[error("{0}")]
    Declined(#[from] Declined),
    #[error(transparent)]
    Peer(#[from] PeerError),
}

/// How often a handoff looks at the group's state while it waits.
const POLL: Duration = Duration::from_millis(5);

#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("this node hosts no group {0}")]
    NoGroup(u32),
    #[error("group {group}'s Raft is stopped: {why}")]
    Stopped { group: u32, why: String },
    #[error("this node does not lead group {group}; its leader is {}", leader.map_or("unknown".to_owned(), |l| format!("node {l}")))]
    NotLeader { group: u32, leader: Option<u64> },
    #[error("node {target} is not a voter of group {group}")]
    NotVoter { group: u32, target: u64 },
    #[error("node {0} already leads the group: a transfer needs another voter")]
    ToSelf(u64),
    #[error("node {target} cannot take group {group} now: {why}")]
    Ineligible { group: u32, target: u64, why: Unfit },
    #[error("the handoff of group {group} to node {target} was abandoned: {why}")]
    Abandoned {
        group: u32,
        target: u64,
        why: String,
    },
    #[error("this node may not campaign for group {group}: {why}")]
    MayNotCampaign { group: u32, why: String },
}

fn raft_of(node: &Replicas, group: u32) -> Result<&GroupRaft, HandoffError> {
    let raft = node.raft(group).ok_or(HandoffError::NoGroup(group))?;
    if let Err(e) = &raft.metrics().borrow().running_state {
        return Err(HandoffError::Stopped {
            group,
            why: e.to_string(),
        });
    }
    Ok(raft)
}

/// Why `target` may not take `group` from this leader now, checked on this side.
fn check_target(node: &Replicas, raft: &GroupRaft, group: u32, target: u64) -> Result<(), Unfit> {
    let m = raft.metrics().borrow().clone();
    if m.membership_config.membership().get_joint_config().len() > 1 {
        return Err(Unfit::MembershipChanging);
    }
    match node.peers.acks.since(target, group) {
        Some(d) if d <= ACK_WINDOW => {}
        Some(d) => return Err(Unfit::StaleAck(d)),
        None => return Err(Unfit::NeverAcked),
    }
    let committed = node.log_view(group).committed.map(|l| l.index);
    let matched = m
        .replication
        .as_ref()
        .and_then(|r| r.get(&target).copied().flatten())
        .map(|l| l.index);
    if matched < committed {
        return Err(Unfit::Behind { matched, committed });
    }
    Ok(())
}

/// The voters other than this node that could take `group` now, best first (most recent ack).
pub async fn candidates(node: &Replicas, group: u32) -> Vec<u64> {
    let Some(raft) = node.raft(group) else {
        return Vec::new();
    };
    let voters: Vec<u64> = raft
        .metrics()
        .borrow()
        .membership_config
        .voter_ids()
        .filter(|v| *v != node.node_id)
        .collect();
    let mut out = Vec::new();
    for v in voters {
        if check_target(node, raft, group, v).is_ok() && asks_ok(node, raft, group, v, true).await {
            out.push(v);
        }
    }
    out.sort_by_key(|v| node.peers.acks.since(*v, group));
    out
}

/// What a voter answered when asked whether it would take a group now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    MayCampaign,
    /// It declined: drained, shedding, recovering.
    MayNot,
    /// No answer within the peer timeout, or a failed exchange.
    Silent,
}

/// Asks every voter of `group` other than this node, at once, whether it would take the group
/// now, each within the peer timeout. Only the voters' own answers: the leader's checks of a
/// target (its acks, its log) are left to [`transfer`].
pub async fn answers(node: &Replicas, group: u32) -> Vec<(u64, Answer)> {
    let Some(raft) = node.raft(group) else {
        return Vec::new();
    };
    let voters: Vec<u64> = raft
        .metrics()
        .borrow()
        .membership_config
        .voter_ids()
        .filter(|v| *v != node.node_id)
        .collect();
    let asks = voters.iter().map(|v| async move {
        let asked =
            tokio::time::timeout(node.peer_timeout, elect_rpc(node, raft, group, *v, true)).await;
        let answer = match asked {
            Ok(Ok(())) => Answer::MayCampaign,
            Ok(Err(Unfit::Declined(_))) => Answer::MayNot,
            Ok(Err(_)) | Err(_) => Answer::Silent,
        };
        (*v, answer)
    });
    futures_util::future::join_all(asks).await
}

async fn asks_ok(
    node: &Replicas,
    raft: &GroupRaft,
    group: u32,
    target: u64,
    dry_run: bool,
) -> bool {
    // A peer that does not answer within the timeout is treated as unable to campaign.
    tokio::time::timeout(
        node.peer_timeout,
        elect_rpc(node, raft, group, target, dry_run),
    )
    .await
    .is_ok_and(|r| r.is_ok())
}

async fn elect_rpc(
    node: &Replicas,
    raft: &GroupRaft,
    group: u32,
    target: u64,
    dry_run: bool,
) -> Result<(), Unfit> {
    let req = ElectRequest {
        leader: node.node_id,
        term: raft.metrics().borrow().current_term,
        dry_run,
    };
    Ok(node.peers.elect(target, group, &req).await??)
}

/// Hands `group`'s leadership to `target`.
pub async fn transfer(
    node: &Replicas,
    group: u32,
    target: u64,
) -> Result<Transferred, HandoffError> {
    let started = Instant::now();
    let raft = raft_of(node, group)?;
    let m = raft.metrics().borrow().clone();
    if m.current_leader != Some(node.node_id) || m.state != ServerState::Leader {
        return Err(HandoffError::NotLeader {
            group,
            leader: m.current_leader,
        });
    }
    if target == node.node_id {
        return Err(HandoffError::ToSelf(target));
    }
    if !m.membership_config.voter_ids().any(|v| v == target) {
        return Err(HandoffError::NotVoter { group, target });
    }
    let ineligible = |why| HandoffError::Ineligible { group, target, why };
    let Some(_turn) = node.holds.begin_handoff(group) else {
        return Err(ineligible(Unfit::Busy));
    };
    check_target(node, raft, group, target).map_err(ineligible)?;
    elect_rpc(node, raft, group, target, true)
        .await
        .map_err(ineligible)?;
    // openraft's voters refuse a candidate while the vote they granted is younger than the
    // lease; this leader's own vote must be past it, or its own vote goes to nobody.
    let lease = Duration::from_millis(raft.config().election_timeout_max);
    if let Ok(Some(at)) = raft.with_raft_state(|st| st.vote_last_modified()).await {
        tokio::time::sleep_until(at + lease).await;
    }
    let held = node.holds.hold(group);
    let abandoned = |why: String| HandoffError::Abandoned { group, target, why };
    // A batch that passed the hold just before it began is still on its way into the log;
    // once it is in, the log below is the whole log this leader will have.
    if !node
        .holds
        .settle(group, DEADLINE.saturating_sub(started.elapsed()))
        .await
    {
        return Err(abandoned(
            "a batch proposed before the hold did not finish".into(),
        ));
    }
    // Every entry proposed before the hold must reach the target, or the leader's own
    // log check refuses its vote request.
    loop {
        let m = raft.metrics().borrow().clone();
        if m.current_leader != Some(node.node_id) {
            return Err(HandoffError::NotLeader {
                group,
                leader: m.current_leader,
            });
        }
        let matched = m
            .replication
            .as_ref()
            .and_then(|r| r.get(&target).copied().flatten())
            .map(|l| l.index);
        if matched.is_some() && matched >= m.last_log_index {
            break;
        }
        if started.elapsed() >= DEADLINE {
            return Err(abandoned(format!(
                "it reached {matched:?} of the leader's {:?}",
                m.last_log_index
            )));
        }
        tokio::time::sleep(POLL).await;
    }
    // Kept until the handoff ends: a heartbeat sent before the target's vote request reaches
    // the other voters would renew the lease that makes them refuse it.
    let _quiet = outlast_leases(node, raft, group, target, started).await?;
    elect_rpc(node, raft, group, target, false)
        .await
        .map_err(ineligible)?;
    loop {
        let m = raft.metrics().borrow().clone();
        if m.current_leader == Some(target) {
            drop(held);
            let t = Transferred {
                raft_group_id: group,
                from: node.node_id,
                to: target,
                term: m.current_term,
                elapsed_ms: started.elapsed().as_millis() as u64,
            };
            tracing::info!(
                group,
                to = target,
                term = t.term,
                elapsed_ms = t.elapsed_ms,
                "leadership handed off"
            );
            return Ok(t);
        }
        if started.elapsed() >= DEADLINE {
            drop(held);
            // The spec's rule: step down and campaign again. A leader that never lost its
            // leadership still holds it; one left without a leader campaigns.
            if m.current_leader.is_none() && !node.shed.sheds() {
                let _ = raft.trigger().elect().await;
            }
            return Err(abandoned(format!(
                "it did not take over within {DEADLINE:?}"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Heartbeats of a group's Raft turned off until this drops.
struct HeartbeatsOff<'a>(&'a GroupRaft);

impl Drop for HeartbeatsOff<'_> {
    fn drop(&mut self) {
        self.0.runtime_config().heartbeat(true);
    }
}

/// How long past a voter's last acknowledgement its lease is surely over: the lease (the
/// maximum election timeout from the leader's last append) plus a margin for the vote
/// request's own trip.
fn lease_over(raft: &GroupRaft) -> Duration {
    Duration::from_millis(raft.config().election_timeout_max) + Duration::from_millis(100)
}

/// In a group where the leader's and the target's votes are not a majority (four voters or
/// more), the target also needs votes from voters whose lease from this leader is still live,
/// and openraft 0.9's voters refuse any candidate then (it has no transfer flag that would let
/// them grant). With the group's writes held, this leader stops heartbeating the group and
/// waits until enough of the other live voters last heard from it over a lease ago. Their own
/// election timers start only a lease plus an election timeout after that, so the target's
/// vote request finds them granting and not yet campaigning. `None` in a group of three.
async fn outlast_leases<'a>(
    node: &Replicas,
    raft: &'a GroupRaft,
    group: u32,
    target: u64,
    started: Instant,
) -> Result<Option<HeartbeatsOff<'a>>, HandoffError> {
    let voters: Vec<u64> = raft
        .metrics()
        .borrow()
        .membership_config
        .voter_ids()
        .collect();
    let need = (voters.len() / 2 + 1).saturating_sub(2);
    if need == 0 {
        return Ok(None);
    }
    // Only voters heard from lately can vote; one long silent may be down.
    let live: Vec<u64> = voters
        .into_iter()
        .filter(|v| *v != node.node_id && *v != target)
        .filter(|v| {
            node.peers
                .acks
                .since(*v, group)
                .is_some_and(|d| d <= ACK_WINDOW)
        })
        .collect();
    let abandoned = |why: String| HandoffError::Abandoned { group, target, why };
    if live.len() < need {
        return Err(abandoned(format!(
            "the target needs {need} more votes and only {} other voters answer",
            live.len()
        )));
    }
    raft.runtime_config().heartbeat(false);
    let quiet = HeartbeatsOff(raft);
    let over = lease_over(raft);
    loop {
        let m = raft.metrics().borrow().clone();
        if m.current_leader != Some(node.node_id) {
            return Err(HandoffError::NotLeader {
                group,
                leader: m.current_leader,
            });
        }
        let expired = live
            .iter()
            .filter(|v| node.peers.acks.since(**v, group).is_some_and(|d| d >= over))
            .count();
        if expired >= need {
            return Ok(Some(quiet));
        }
        if started.elapsed() + POLL >= DEADLINE {
            return Err(abandoned(format!(
                "{expired} of the {need} other voters it needs let this leader's lease lapse in time"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Campaigns for `group` now.
pub async fn self_elect(node: &Replicas, group: u32) -> Result<Elected, HandoffError> {
    let raft = raft_of(node, group)?;
    let m = raft.metrics().borrow().clone();
    if m.current_leader == Some(node.node_id) {
        return Err(HandoffError::MayNotCampaign {
            group,
            why: "it leads the group already".into(),
        });
    }
    let shed = node.shed.state();
    let why = if shed.sheds() {
        Some(format!("the node is {}", shed.why()))
    } else if node.gates.is_closed(group) {
        Some("its recovery gate is closed".to_owned())
    } else if node.apply_stop(group).is_some() {
        Some("its apply stopped: a committed entry failed to apply".to_owned())
    } else if !m.membership_config.voter_ids().any(|v| v == node.node_id) {
        Some("it is not a voter of the group".to_owned())
    } else {
        None
    };
    if let Some(why) = why {
        return Err(HandoffError::MayNotCampaign { group, why });
    }
    raft.trigger()
        .elect()
        .await
        .map_err(|e| HandoffError::Stopped {
            group,
            why: e.to_string(),
        })?;
    let started = Instant::now();
    loop {
        let m = raft.metrics().borrow().clone();
        if m.current_leader == Some(node.node_id) {
            return Ok(Elected {
                raft_group_id: group,
                leader: node.node_id,
                term: m.current_term,
            });
        }
        if started.elapsed() >= DEADLINE {
            return Err(HandoffError::MayNotCampaign {
                group,
                why: format!(
                    "it did not win within {DEADLINE:?} (the voters granted their vote to a live leader's lease, or to another candidate)"
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Hands every group this node leads to the best eligible voter, all at once, within
/// `within`. Returns the groups still led at the end.
pub async fn shed_all(node: &Replicas, within: Duration) -> Vec<u32> {
    let led: Vec<u32> = (0..node.group_count())
        .filter(|g| node.is_leader(*g))
        .collect();
    let runs = led.iter().map(|g| async move {
        for target in candidates(node, *g).await {
            match transfer(node, *g, target).await {
                Ok(_) => return,
                Err(e) => tracing::info!(group = *g, target, error = %e, "handoff failed; trying the next voter"),
            }
        }
    });
    let _ = tokio::time::timeout(within, futures_util::future::join_all(runs)).await;
    (0..node.group_count())
        .filter(|g| node.is_leader(*g))
        .collect()
}
