//! Peer traffic: every group's Raft RPCs travel as MessagePack over one keep-alive HTTP
//! connection pool per node, tagged with the group in the path
//! (`POST /__ursula/raft-rpc/{group}/{append|vote|snapshot}`). Two RPCs of Ursula's own ride
//! the same path: `barrier` (a gated replica asks the leader for a fresh ReadIndex barrier and
//! the leader's vote) and `probe` (the bootstrap asks a voter whether it holds the group and
//! sees a leader).
//!
//! A replica that refuses an RPC (see [`super::floor`]) answers `503`, which the sender maps
//! to openraft's `Unreachable`: the leader backs off and retries, as for a node that is down.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use openraft::BasicNode;
use openraft::error::InstallSnapshotError;
use openraft::error::NetworkError;
use openraft::error::RPCError;
use openraft::error::RaftError;
use openraft::error::Unreachable;
use openraft::network::RPCOption;
use openraft::network::RaftNetwork;
use openraft::network::RaftNetworkFactory;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::raft::InstallSnapshotRequest;
use openraft::raft::InstallSnapshotResponse;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::GroupRaft;
use super::TypeConfig;
use super::floor::Floor;
use super::floor::Refused;
use super::floor::Rpc;
use super::lanes::Answer;
use super::lanes::Item;
use super::lanes::Lane;
use super::lanes::SendFn;
use super::protocol;

/// Shared by every group's network factory.
#[derive(Debug, Clone)]
pub struct Peers {
    client: Client<HttpConnector, Full<Bytes>>,
    /// This node's id, sent with every RPC.
    me: u64,
    /// Set once an RPC met a peer of another Raft protocol, either way.
    pub mismatch: Arc<protocol::Mismatch>,
    /// When each misdirected sender/addressee pair was last logged.
    warned: Arc<std::sync::Mutex<BTreeMap<(String, String), std::time::Instant>>>,
    /// node id -> base URL.
    pub urls: Arc<BTreeMap<u64, String>>,
    /// node id -> the lane its `append` RPCs share ([`super::lanes`]).
    lanes: Arc<BTreeMap<u64, Lane>>,
}

/// Headers naming the sending and the addressed node of a peer RPC: a node refuses an RPC
/// addressed to another node or sent by itself or a node it does not know (`421`), so a
/// `[[raft.peers]]` URL that reaches the wrong process cannot have one node's answer counted
/// as another's.
pub const FROM_HEADER: &str = "x-ursula-raft-from";
pub const TO_HEADER: &str = "x-ursula-raft-to";

/// POSTs `body` from node `me` to node `target` at `url` and returns the answer's body; `503`
/// and `421` read as unreachable.
async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    (me, target): (u64, u64),
    mismatch: &protocol::Mismatch,
    url: String,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Bytes, PeerError> {
    let request = hyper::Request::post(url)
        .header("content-type", "application/msgpack")
        .header(protocol::HEADER, protocol::PROTOCOL)
        .header(FROM_HEADER, me)
        .header(TO_HEADER, target)
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| PeerError::Network(e.to_string()))?;
    let late = || PeerError::Unreachable(format!("node {target} did not answer in time"));
    let resp = tokio::time::timeout(timeout, client.request(request))
        .await
        .map_err(|_| late())?
        .map_err(|e| PeerError::Unreachable(e.to_string()))?;
    let status = resp.status();
    let spoken = resp
        .headers()
        .get(protocol::HEADER)
        .map(|v| v.to_str().unwrap_or("?"));
    if let Err(why) = protocol::check(spoken) {
        let why = format!("node {target}: {why}");
        mismatch.record(&why);
        return Err(PeerError::Network(why));
    }
    let body = tokio::time::timeout(timeout, resp.into_body().collect())
        .await
        .map_err(|_| late())?
        .map_err(|e| PeerError::Network(e.to_string()))?
        .to_bytes();
    if status.is_success() {
        return Ok(body);
    }
    let why = format!(
        "node {target} answered {status}: {}",
        String::from_utf8_lossy(&body)
    );
    // A refusal is temporary, like a node that is down: openraft backs off and retries. So is
    // a misdirected RPC, until the operator mends the peer list.
    Err(
        if status == hyper::StatusCode::SERVICE_UNAVAILABLE
            || status == hyper::StatusCode::MISDIRECTED_REQUEST
        {
            PeerError::Unreachable(why)
        } else {
            PeerError::Network(why)
        },
    )
}

impl Peers {
    pub fn new(urls: BTreeMap<u64, String>, me: u64) -> Peers {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        let mismatch = Arc::new(protocol::Mismatch::default());
        let lanes = urls
            .iter()
            .filter(|(id, _)| **id != me)
            .map(|(id, base)| {
                let (client, url, target) = (
                    client.clone(),
                    format!("{base}/__ursula/raft-rpc-batch"),
                    *id,
                );
                let mismatch = mismatch.clone();
                let send: SendFn = Arc::new(move |body| {
                    let (client, url, mismatch) = (client.clone(), url.clone(), mismatch.clone());
                    Box::pin(async move {
                        post(&client, (me, target), &mismatch, url, body, LANE_TIMEOUT).await
                    })
                });
                (*id, Lane::start(*id, send))
            })
            .collect();
        Peers {
            client,
            me,
            mismatch,
            warned: Arc::default(),
            urls: Arc::new(urls),
            lanes: Arc::new(lanes),
        }
    }

    fn warn_misdirected(&self, from: Option<&str>, to: Option<&str>, why: &str) {
        let key = (from.unwrap_or("").to_owned(), to.unwrap_or("").to_owned());
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        let due = warned
            .get(&key)
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(60));
        if due {
            warned.insert(key, std::time::Instant::now());
            tracing::warn!(from, to, "misdirected Raft RPC refused: {why}");
        }
    }

    /// Sends one RPC and returns the peer's answer bytes.
    async fn exchange(
        &self,
        target: u64,
        group: u32,
        kind: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Bytes, PeerError> {
        if kind == "append"
            && let Some(lane) = self.lanes.get(&target)
        {
            return lane.append(target, group, body, timeout).await;
        }
        let base = self
            .urls
            .get(&target)
            .ok_or_else(|| PeerError::Unreachable(format!("no URL for node {target}")))?;
        let url = format!("{base}/__ursula/raft-rpc/{group}/{kind}");
        post(
            &self.client,
            (self.me, target),
            &self.mismatch,
            url,
            body,
            timeout,
        )
        .await
    }

    /// One of Ursula's own RPCs: MessagePack both ways.
    async fn ask<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        target: u64,
        group: u32,
        kind: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, PeerError> {
        let body = rmp_serde::to_vec(req).map_err(|e| PeerError::Network(e.to_string()))?;
        let bytes = self.exchange(target, group, kind, body, timeout).await?;
        rmp_serde::from_slice(&bytes).map_err(|e| PeerError::Network(e.to_string()))
    }

    async fn call<
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    >(
        &self,
        target: u64,
        group: u32,
        kind: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        let result: Result<Resp, RaftError<u64, E>> = self
            .ask(target, group, kind, req, timeout)
            .await
            .map_err(|e| match e {
                PeerError::Unreachable(m) => {
                    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(m)))
                }
                PeerError::Network(m) => {
                    RPCError::Network(NetworkError::new(&std::io::Error::other(m)))
                }
            })?;
        result.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(target, e)))
    }

    /// Asks `leader` for a fresh ReadIndex barrier of `group`: the index a replica must apply
    /// to hold every write the group committed before the call, and the vote it was confirmed
    /// under.
    pub async fn barrier(&self, leader: u64, group: u32) -> Result<Barrier, PeerError> {
        self.ask(leader, group, "barrier", &(), RPC_TIMEOUT).await
    }

    /// Asks `node` whether it holds anything of `group` and whom it sees leading it.
    pub async fn probe(&self, node: u64, group: u32) -> Result<Probe, PeerError> {
        self.ask(node, group, "probe", &(), RPC_TIMEOUT).await
    }
}

/// How long a batch of appends may take on the wire; each RPC keeps its own deadline too.
const LANE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long Ursula's own RPCs wait for a peer; a barrier needs a heartbeat round of the leader.
const RPC_TIMEOUT: Duration = Duration::from_secs(4);
/// The leader gives up on a barrier before the asker gives up on the answer.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    #[error("peer unreachable: {0}")]
    Unreachable(String),
    #[error("peer exchange failed: {0}")]
    Network(String),
}

/// A leader's answer to `barrier`, or why it gave none (not the leader, no quorum, its own
/// gate closed, its vote moved meanwhile).
pub type Barrier = Result<Confirmed, String>;

/// A barrier a quorum confirmed.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Confirmed {
    /// The barrier's log index, `None` for an empty log.
    pub index: Option<u64>,
    /// The leader's vote a quorum of voters acknowledged for the barrier: a wiped replica's
    /// vote floor.
    pub vote: Floor,
}

/// Why [`serve`] answers no Raft reply.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The request is not one this node can read (`400`).
    #[error("{0}")]
    Invalid(String),
    /// This replica refuses the RPC for now (`503`): the sender treats it as unavailable.
    #[error(transparent)]
    Refused(#[from] Refused),
}

/// A voter's answer to `probe`.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    /// It holds a vote, entries or a purge point of the group.
    pub holds: bool,
    pub leader: Option<u64>,
    /// Its last log index (the purge point once every entry is purged). Past `0`, the initial
    /// membership, the group had a leader. Absent from a node of an older build.
    #[serde(default)]
    pub last_log_index: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Factory {
    pub peers: Peers,
    pub group: u32,
}

impl RaftNetworkFactory<TypeConfig> for Factory {
    type Network = Connection;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> Connection {
        Connection {
            peers: self.peers.clone(),
            group: self.group,
            target,
        }
    }
}

#[derive(Debug)]
pub struct Connection {
    peers: Peers,
    group: u32,
    target: u64,
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.peers
            .call(self.target, self.group, "append", &rpc, option.hard_ttl())
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.peers
            .call(self.target, self.group, "snapshot", &rpc, option.hard_ttl())
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.peers
            .call(self.target, self.group, "vote", &rpc, option.hard_ttl())
            .await
    }
}

/// Whether this node takes a peer RPC with these headers, before reading its body: `409` for
/// another Raft protocol (recorded as a mismatch), `421` when it names another node as its
/// addressee, or this node or a node outside `[[raft.peers]]` as its sender (a peer URL that
/// reaches the wrong process; each pair logged at most once a minute). An RPC without the
/// headers (an older build) passes.
pub fn admit(
    engine: &super::RaftEngine,
    headers: &hyper::HeaderMap,
) -> Result<(), (hyper::StatusCode, String)> {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Err(why) = protocol::check(header(protocol::HEADER)) {
        engine.peers.mismatch.record(&why);
        return Err((hyper::StatusCode::CONFLICT, why));
    }
    let (from, to) = (header(FROM_HEADER), header(TO_HEADER));
    let me = engine.node_id;
    let id = |v: Option<&str>| v.map(|s| s.trim().parse::<u64>().map_err(|_| s.to_owned()));
    let why = match (id(from), id(to)) {
        (_, Some(Err(bad))) | (Some(Err(bad)), _) => format!("unreadable node id {bad:?}"),
        (_, Some(Ok(to))) if to != me => format!(
            "this RPC is addressed to node {to}, but this is node {me}: the sender's [[raft.peers]] URL for node {to} reaches node {me}"
        ),
        (Some(Ok(from)), _) if from == me || !engine.peers.urls.contains_key(&from) => format!(
            "this RPC comes from node {from}, which is this node or not one of its [[raft.peers]]: another cluster's node, or a peer list that differs between nodes"
        ),
        _ => return Ok(()),
    };
    engine.peers.warn_misdirected(from, to, &why);
    Err((hyper::StatusCode::MISDIRECTED_REQUEST, why))
}

/// Answers a peer's RPC for `group` with this node's Raft.
pub async fn serve(
    engine: &super::RaftEngine,
    group: u32,
    kind: &str,
    body: &[u8],
) -> Result<Vec<u8>, ServeError> {
    let raft = engine
        .raft(group)
        .ok_or_else(|| ServeError::Invalid(format!("no group {group}")))?;
    let invalid = |e: rmp_serde::decode::Error| ServeError::Invalid(e.to_string());
    let refuse = |rpc: Rpc<'_>| match engine.gates.refusal(group, rpc) {
        Some(why) => {
            tracing::debug!(group, kind, %why, "Raft RPC refused");
            Err(ServeError::Refused(why))
        }
        None => Ok(()),
    };
    let out = match kind {
        "append" => {
            let req: AppendEntriesRequest<TypeConfig> =
                rmp_serde::from_slice(body).map_err(invalid)?;
            refuse(Rpc::Replicate(&req.vote))?;
            rmp_serde::to_vec(&raft.append_entries(req).await)
        }
        "vote" => {
            let req: VoteRequest<u64> = rmp_serde::from_slice(body).map_err(invalid)?;
            refuse(Rpc::Vote)?;
            // A candidate past the initial membership (index 0) is no fresh install's first
            // election: a replica holding nothing waits for its first probe round to tell
            // whether it was wiped before it votes for one.
            let held =
                engine.vote_hold.holds(group) && req.last_log_id.is_some_and(|l| l.index >= 1);
            if engine.gates.is_closed(group) || held {
                // A gated replica may have lost the entries that make a candidate's log look
                // up to date: its vote could elect a leader without them.
                let view = engine.log_view(group);
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
        "barrier" => {
            let answer: Barrier = if engine.gates.is_closed(group) {
                Err(format!(
                    "node {}'s own recovery gate is closed",
                    engine.node_id
                ))
            } else {
                confirm_barrier(engine.node_id, raft).await
            };
            rmp_serde::to_vec(&answer)
        }
        "probe" => {
            let view = engine.log_view(group);
            rmp_serde::to_vec(&Probe {
                holds: view.holds(),
                leader: engine.leader_of(group),
                last_log_index: view.last.map(|l| l.index),
            })
        }
        "snapshot" => {
            let req: InstallSnapshotRequest<TypeConfig> =
                rmp_serde::from_slice(body).map_err(invalid)?;
            refuse(Rpc::Replicate(&req.vote))?;
            rmp_serde::to_vec(&raft.install_snapshot(req).await)
        }
        other => return Err(ServeError::Invalid(format!("unknown Raft RPC {other:?}"))),
    };
    out.map_err(|e| ServeError::Invalid(e.to_string()))
}

/// Answers a batch of `append` RPCs ([`super::lanes`]), run concurrently, each answered with
/// the status it would have had alone.
pub async fn serve_batch(engine: &super::RaftEngine, body: &[u8]) -> Result<Vec<u8>, ServeError> {
    let items: Vec<Item> =
        rmp_serde::from_slice(body).map_err(|e| ServeError::Invalid(e.to_string()))?;
    let runs = items
        .iter()
        .map(|i| serve(engine, i.group, "append", &i.body));
    let answers: Vec<Answer> = futures_util::future::join_all(runs)
        .await
        .into_iter()
        .map(|r| match r {
            Ok(body) => Answer { status: 200, body },
            Err(e) => Answer {
                status: match e {
                    ServeError::Invalid(_) => 400,
                    ServeError::Refused(_) => 503,
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
async fn confirm_barrier(node: u64, raft: &GroupRaft) -> Barrier {
    let vote = || raft.with_raft_state(|st| *st.vote_ref());
    let before = vote().await.map_err(|e| e.to_string())?;
    if !before.is_committed() || before.leader_id.node_id != node {
        return Err(format!("node {node} does not lead the group"));
    }
    let index = match tokio::time::timeout(BARRIER_TIMEOUT, raft.get_read_log_id()).await {
        Ok(Ok((read, _))) => read.map(|l| l.index),
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("no quorum confirmed the leadership in time".into()),
    };
    let after = vote().await.map_err(|e| e.to_string())?;
    if after != before {
        return Err(format!(
            "node {node}'s vote moved from {before} to {after} during the barrier"
        ));
    }
    Ok(Confirmed {
        index,
        vote: Floor::of(&before),
    })
}
