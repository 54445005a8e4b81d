//! The receiving side of peer traffic: which RPCs a node takes (protocol, sender, addressee),
//! and each RPC answered with this node's replica of the group, a gated or wiped replica
//! refusing what it must ([`crate::raft::recovery`]).

use std::sync::Arc;

use openraft::error::RaftError;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::InstallSnapshotRequest;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use ursula_protocol::admin::ShedState;
use ursula_protocol::headers as h;

use crate::raft::peer::client::BARRIER_TIMEOUT;
use crate::raft::peer::protocol;
use crate::raft::peer::wire::Answer;
use crate::raft::peer::wire::Barrier;
use crate::raft::peer::wire::Confirmed;
use crate::raft::peer::wire::Declined;
use crate::raft::peer::wire::ElectAnswer;
use crate::raft::peer::wire::ElectRequest;
use crate::raft::peer::wire::Item;
use crate::raft::peer::wire::Probe;
use crate::raft::peer::wire::ProposeAnswer;
use crate::raft::peer::wire::RpcKind;
use crate::raft::recovery::floor::Floor;
use crate::raft::recovery::floor::Refused;
use crate::raft::recovery::floor::Rpc;
use crate::raft::replicas::Replicas;
use crate::raft::storage::snapstore::SnapStoreError;
use crate::raft::storage::snapstore::SnapshotRef;
use crate::raft::types::GroupRaft;
use crate::raft::types::TypeConfig;
use ursula_state::stream::Command;

/// Why [`serve`] answers no Raft reply.
/// What the cluster plane calls: a cheap handle on this node's replicas that admits and answers
/// peer RPCs.
#[derive(Clone)]
pub struct PeerService(Arc<Replicas>);

impl PeerService {
    pub fn new(node: Arc<Replicas>) -> PeerService {
        PeerService(node)
    }

    /// Whether this node takes an RPC with these headers ([`admit`]).
    pub fn admit(&self, headers: &hyper::HeaderMap) -> Result<(), (hyper::StatusCode, String)> {
        admit(&self.0, headers)
    }

    /// Answers one RPC ([`serve`]).
    pub async fn serve(
        &self,
        group: u32,
        kind: RpcKind,
        body: &[u8],
        from: Option<u64>,
    ) -> Result<Vec<u8>, ServeError> {
        serve(&self.0, group, kind, body, from).await
    }

    /// Answers a batch of `append` RPCs ([`serve_batch`]).
    pub async fn serve_batch(&self, body: &[u8]) -> Result<Vec<u8>, ServeError> {
        serve_batch(&self.0, body).await
    }

    /// The leadership-shed state peers read before they hand this node a group.
    pub fn shed_state(&self) -> ShedState {
        self.0.shed.state()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The request is not one this node can read (`400`).
    #[error("{0}")]
    Invalid(String),
    /// This replica refuses the RPC for now (`503`): the sender treats it as unavailable.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// This node never takes the RPC as sent (`403`): an operator command from a cluster
    /// without a peer secret.
    #[error("{0}")]
    Forbidden(String),
    /// A store this RPC needs does not answer, or answered what cannot be taken (`503`): a
    /// snapshot object an `InstallSnapshot` names. The leader sends it again later.
    #[error("{0}")]
    Unavailable(String),
}

/// Whether this node takes a peer RPC with these headers, before reading its body:
///
/// - `401` when the cluster has a peer secret and the RPC does not carry it: checked first, so
///   nobody else can make this node record a protocol mismatch or log a misdirected sender;
/// - `409` for another Raft protocol (recorded as a mismatch);
/// - `421` when it names another node as its addressee, or names no sender, this node or a
///   node outside `[[raft.peers]]` as its sender (a peer URL that reaches the wrong process;
///   each pair logged at most once a minute). A single node has no peers and takes no RPC.
pub fn admit(
    node: &Replicas,
    headers: &hyper::HeaderMap,
) -> Result<(), (hyper::StatusCode, String)> {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(secret) = &node.peers.secret {
        let presented = headers.get(h::RAFT_SECRET).map(|v| v.as_bytes());
        if !presented.is_some_and(|p| secret.matches(p)) {
            let why = "this RPC does not carry the cluster's peer secret";
            node.peers
                .warn_misdirected(header(h::RAFT_FROM), Some("secret"), why);
            return Err((hyper::StatusCode::UNAUTHORIZED, why.to_owned()));
        }
    }
    if let Err(why) = protocol::check(header(h::RAFT_PROTOCOL)) {
        let why = why.to_string();
        node.peers.mismatch.record(&why);
        return Err((hyper::StatusCode::CONFLICT, why));
    }
    let (from, to) = (header(h::RAFT_FROM), header(h::RAFT_TO));
    let me = node.node_id;
    let id = |v: Option<&str>| v.map(|s| s.trim().parse::<u64>().map_err(|_| s.to_owned()));
    let why = match (id(from), id(to)) {
        (_, Some(Err(bad))) | (Some(Err(bad)), _) => format!("unreadable node id {bad:?}"),
        (_, Some(Ok(to))) if to != me => format!(
            "this RPC is addressed to node {to}, but this is node {me}: the sender's [[raft.peers]] URL for node {to} reaches node {me}"
        ),
        (None, _) => {
            "this RPC names no sender: only this node's [[raft.peers]] send peer RPCs".to_owned()
        }
        (Some(Ok(from)), _) if from == me || !node.peers.urls.contains_key(&from) => format!(
            "this RPC comes from node {from}, which is this node or not one of its [[raft.peers]]: another cluster's node, or a peer list that differs between nodes"
        ),
        _ => return Ok(()),
    };
    node.peers.warn_misdirected(from, to, &why);
    Err((hyper::StatusCode::MISDIRECTED_REQUEST, why))
}

/// The sender a peer RPC names, if it names one.
pub fn sender(headers: &hyper::HeaderMap) -> Option<u64> {
    headers
        .get(h::RAFT_FROM)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse().ok())
}

/// Answers a peer's RPC for `group` with this node's Raft; `from` is the sender
/// [`admit`] let in.
pub async fn serve(
    node: &Replicas,
    group: u32,
    kind: RpcKind,
    body: &[u8],
    from: Option<u64>,
) -> Result<Vec<u8>, ServeError> {
    let raft = node
        .raft(group)
        .ok_or_else(|| ServeError::Invalid(format!("no group {group}")))?;
    let invalid = |e: rmp_serde::decode::Error| ServeError::Invalid(e.to_string());
    let refuse = |rpc: Rpc<'_>| match node.gates.refusal(group, rpc) {
        Some(why) => {
            tracing::debug!(group, kind = kind.as_str(), %why, "Raft RPC refused");
            Err(ServeError::Refused(why))
        }
        None => Ok(()),
    };
    let out = match kind {
        RpcKind::Append => {
            let req: AppendEntriesRequest<TypeConfig> =
                rmp_serde::from_slice(body).map_err(invalid)?;
            refuse(Rpc::Replicate(&req.vote))?;
            rmp_serde::to_vec(&raft.append_entries(req).await)
        }
        RpcKind::Vote => {
            let req: VoteRequest<u64> = rmp_serde::from_slice(body).map_err(invalid)?;
            refuse(Rpc::Vote)?;
            // A candidate past the initial membership (index 0) is no fresh install's first
            // election: a replica holding nothing waits for its first probe round to tell
            // whether it was wiped before it votes for one.
            let held = node.vote_hold.holds(group) && req.last_log_id.is_some_and(|l| l.index >= 1);
            if node.gates.is_closed(group) || held {
                // A gated replica may have lost the entries that make a candidate's log look
                // up to date: its vote could elect a leader without them.
                let view = node.log_view(group);
                let refused: Result<VoteResponse<u64>, RaftError<u64>> = Ok(VoteResponse {
                    vote: view.vote.unwrap_or_default(),
                    vote_granted: false,
                    last_log_id: view.last,
                });
                tracing::debug!(group, candidate = %req.vote, "vote refused: recovery gate closed or first probe round pending");
                rmp_serde::to_vec(&refused)
            } else {
                rmp_serde::to_vec(&raft.vote(req).await)
            }
        }
        RpcKind::Barrier | RpcKind::ReadIndex => {
            let answer: Barrier = if node.gates.is_closed(group) {
                Err(Declined(format!(
                    "node {}'s own recovery gate is closed",
                    node.node_id
                )))
            } else {
                confirm_barrier(node.node_id, raft, node.read_floor(group)).await
            };
            // Only a gated replica asks for a recovery barrier: it may lack entries it
            // acknowledged, and the leader rebuilds it ([`crate::raft::drivers::voter_keeper`]). A read
            // index is a follower's read, which reports nothing lost.
            if let (RpcKind::Barrier, Ok(_), Some(from)) = (kind, &answer, from) {
                node.lost.report(group, from);
            }
            rmp_serde::to_vec(&answer)
        }
        RpcKind::Elect => {
            let req: ElectRequest = rmp_serde::from_slice(body).map_err(invalid)?;
            let shed = node.shed.state();
            let answer: ElectAnswer = if shed.sheds() {
                Err(Declined(format!("node {} is {}", node.node_id, shed.why())))
            } else if node.gates.is_closed(group) || node.vote_hold.holds(group) {
                Err(Declined(format!(
                    "node {}'s replica of group {group} is recovering",
                    node.node_id
                )))
            } else if node.apply_stop(group).is_some() {
                Err(Declined(format!(
                    "node {}'s replica of group {group} stopped: a committed entry failed to apply",
                    node.node_id
                )))
            } else if req.dry_run {
                Ok(())
            } else {
                tracing::info!(
                    group,
                    leader = req.leader,
                    term = req.term,
                    "campaigning at the leader's handoff"
                );
                raft.trigger()
                    .elect()
                    .await
                    .map_err(|e| Declined(e.to_string()))
            };
            rmp_serde::to_vec(&answer)
        }
        RpcKind::Propose => {
            // Without a peer secret anyone who reaches this route could send it: an operator
            // command is taken only from a sender [`admit`] checked the secret of.
            if node.peers.secret.is_none() {
                return Err(ServeError::Forbidden(
                    "this node takes operator commands from peers only with the cluster's peer secret (raft.peer_secret_file); send the command to its admin plane".into(),
                ));
            }
            let cmd: Command = rmp_serde::from_slice(body).map_err(invalid)?;
            rmp_serde::to_vec(&propose(node, raft, group, cmd).await)
        }
        RpcKind::Probe => {
            let view = node.log_view(group);
            rmp_serde::to_vec(&Probe {
                holds: view.holds(),
                leader: node.leader_of(group),
                last_log_index: view.last.map(|l| l.index),
            })
        }
        RpcKind::Snapshot => {
            let req: InstallSnapshotRequest<TypeConfig> =
                rmp_serde::from_slice(body).map_err(invalid)?;
            refuse(Rpc::Replicate(&req.vote))?;
            prefetch(node, group, &req).await?;
            rmp_serde::to_vec(&raft.install_snapshot(req).await)
        }
    };
    out.map_err(|e| ServeError::Invalid(e.to_string()))
}

/// With S3 snapshots, a snapshot whose data is a reference is fetched and checked before the
/// group sees it: a store that is down, or an object that is torn or damaged, refuses the RPC
/// (the leader sends it again later) and never reaches the group's state machine, for which
/// any error is fatal.
async fn prefetch(
    node: &Replicas,
    group: u32,
    req: &InstallSnapshotRequest<TypeConfig>,
) -> Result<(), ServeError> {
    if req.offset != 0 || !req.done {
        return Ok(());
    }
    let refused = |e: SnapStoreError| {
        tracing::warn!(group, error = %e, "refusing an InstallSnapshot whose snapshot object cannot be taken; the leader sends it again");
        ServeError::Unavailable(format!("group {group}: {e}"))
    };
    match &node.snaps {
        Some(s) => s.prefetch(group, &req.data).await.map_err(refused),
        None if SnapshotRef::read(&req.data).is_some() => Err(refused(SnapStoreError::NoStore)),
        None => Ok(()),
    }
}

/// Proposes a forwarded operator command as this group's leader. Only the whole-group
/// commands an operator sends to any node travel this way; a client's writes go to the
/// leader themselves.
async fn propose(node: &Replicas, raft: &GroupRaft, group: u32, cmd: Command) -> ProposeAnswer {
    if !matches!(
        cmd,
        Command::Purge { .. } | Command::ImportPart { .. } | Command::ImportCommit { .. }
    ) {
        return Err("only a purge or an import is forwarded to the leader".into());
    }
    if !node.is_leader(group) {
        return Err(Declined(format!(
            "node {} does not lead group {group}",
            node.node_id
        )));
    }
    let writes = crate::raft::types::Writes {
        now_ms: crate::runtime::now_ms(),
        cmds: vec![cmd],
    };
    match raft.client_write(writes).await {
        Ok(resp) => resp
            .data
            .0
            .into_iter()
            .next()
            .ok_or_else(|| "the entry answered nothing".into()),
        Err(e) => Err(Declined(e.to_string())),
    }
}

/// Answers a batch of `append` RPCs ([`super::lanes`]), run concurrently, each answered with
/// the status it would have had alone.
pub async fn serve_batch(node: &Replicas, body: &[u8]) -> Result<Vec<u8>, ServeError> {
    let items: Vec<Item> =
        rmp_serde::from_slice(body).map_err(|e| ServeError::Invalid(e.to_string()))?;
    let runs = items
        .iter()
        .map(|i| serve(node, i.group, RpcKind::Append, &i.body, None));
    let answers: Vec<Answer> = futures_util::future::join_all(runs)
        .await
        .into_iter()
        .map(|r| match r {
            Ok(body) => Answer { status: 200, body },
            Err(e) => Answer {
                status: match e {
                    ServeError::Invalid(_) => 400,
                    ServeError::Refused(_) | ServeError::Unavailable(_) => 503,
                    ServeError::Forbidden(_) => 403,
                },
                body: e.to_string().into_bytes(),
            },
        })
        .collect();
    rmp_serde::to_vec(&answers).map_err(|e| ServeError::Invalid(e.to_string()))
}

/// Confirms a fresh ReadIndex barrier as the leader and names the vote it was confirmed
/// under. openraft's `get_read_log_id` sends a heartbeat round and answers once a quorum
/// acknowledged it (a replica that refuses the heartbeat does not count), but does not say
/// under which vote. The core handles requests in order and its vote only grows, so the same
/// committed vote of this node read before and after the round is the vote the quorum
/// acknowledged.
/// Confirms this node's leadership and gives its read index, never below `floor`
/// ([`Replicas::read_floor`]).
async fn confirm_barrier(node: u64, raft: &GroupRaft, floor: Option<u64>) -> Barrier {
    let vote = || raft.with_raft_state(|st| *st.vote_ref());
    let before = vote().await.map_err(|e| Declined(e.to_string()))?;
    if !before.is_committed() || before.leader_id.node_id != node {
        return Err(Declined(format!("node {node} does not lead the group")));
    }
    let index = match tokio::time::timeout(BARRIER_TIMEOUT, raft.get_read_log_id()).await {
        Ok(Ok((read, _))) => read.map(|l| l.index).max(floor),
        Ok(Err(e)) => return Err(Declined(e.to_string())),
        Err(_) => return Err("no quorum confirmed the leadership in time".into()),
    };
    let after = vote().await.map_err(|e| Declined(e.to_string()))?;
    if after != before {
        return Err(Declined(format!(
            "node {node}'s vote moved from {before} to {after} during the barrier"
        )));
    }
    Ok(Confirmed {
        index,
        vote: Floor::of(&before),
    })
}
