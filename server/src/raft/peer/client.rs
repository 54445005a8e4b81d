//! The sending side of peer traffic: every group's Raft RPCs travel as MessagePack over one
//! keep-alive HTTP connection pool per node, tagged with the group in the path
//! (`POST /__ursula/raft-rpc/{group}/{kind}`, [`super::wire::RpcKind`]); `append` RPCs share
//! a lane per peer ([`super::lanes`]). openraft's network traits are implemented here.
//!
//! A replica that refuses an RPC (see [`crate::raft::recovery::floor`]) answers `503`, which
//! the sender maps to openraft's `Unreachable`: the leader backs off and retries, as for a node
//! that is down.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
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

use ursula_protocol::headers as h;

use super::acks::AckClock;
use super::lanes::Lane;
use super::lanes::SendFn;
use super::protocol;
use super::wire::BATCH_PATH;
use super::wire::Barrier;
use super::wire::ElectAnswer;
use super::wire::ElectRequest;
use super::wire::PeerError;
use super::wire::Probe;
use super::wire::ProposeAnswer;
use super::wire::RPC_PREFIX;
use super::wire::RpcKind;
use crate::config::PeerSecret;
use crate::raft::types::TypeConfig;

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
    /// When each peer last acknowledged each group's appends.
    pub acks: Arc<AckClock>,
    /// The secret every RPC carries and every peer RPC received must carry.
    pub secret: Option<PeerSecret>,
    /// The largest RPC body this node sent a peer: an append batch, or a lone RPC such as a
    /// vote or a snapshot chunk (`raft_grpc_append_stream_frame_bytes_max`).
    pub sent_max: Arc<AtomicU64>,
}

/// POSTs `body` from node `me` to node `target` at `url` and returns the answer's body; `503`
/// and `421` read as unreachable.
async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    (me, target): (u64, u64),
    (mismatch, secret): (&protocol::Mismatch, Option<&PeerSecret>),
    url: String,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Bytes, PeerError> {
    let mut request = hyper::Request::post(url);
    if let Some(secret) = secret {
        let mut value = hyper::header::HeaderValue::from_str(secret.expose())
            .map_err(|e| PeerError::Network(e.to_string()))?;
        value.set_sensitive(true);
        request = request.header(h::RAFT_SECRET, value);
    }
    let request = request
        .header("content-type", "application/msgpack")
        .header(h::RAFT_PROTOCOL, protocol::PROTOCOL)
        // The sender and the addressee: a node refuses an RPC addressed to another node or
        // sent by itself or a node it does not know (`421`), so a `[[raft.peers]]` URL that
        // reaches the wrong process cannot have one node's answer counted as another's.
        .header(h::RAFT_FROM, me)
        .header(h::RAFT_TO, target)
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
        .get(h::RAFT_PROTOCOL)
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
    pub fn new(
        urls: BTreeMap<u64, String>,
        me: u64,
        groups: u32,
        secret: Option<PeerSecret>,
    ) -> Peers {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        let mismatch = Arc::new(protocol::Mismatch::default());
        let sent_max = Arc::new(AtomicU64::new(0));
        let lanes = urls
            .iter()
            .filter(|(id, _)| **id != me)
            .map(|(id, base)| {
                let (client, url, target) = (client.clone(), format!("{base}{BATCH_PATH}"), *id);
                let (mismatch, secret) = (mismatch.clone(), secret.clone());
                let sent_max = sent_max.clone();
                let send: SendFn = Arc::new(move |body: Vec<u8>| {
                    sent_max.fetch_max(body.len() as u64, Ordering::Relaxed);
                    let (client, url) = (client.clone(), url.clone());
                    let (mismatch, secret) = (mismatch.clone(), secret.clone());
                    Box::pin(async move {
                        let hdr = (&*mismatch, secret.as_ref());
                        post(&client, (me, target), hdr, url, body, LANE_TIMEOUT).await
                    })
                });
                (*id, Lane::start(*id, send))
            })
            .collect();
        let acks = Arc::new(AckClock::new(
            urls.keys().copied().filter(|id| *id != me),
            groups,
        ));
        Peers {
            client,
            me,
            mismatch,
            warned: Arc::default(),
            urls: Arc::new(urls),
            lanes: Arc::new(lanes),
            acks,
            secret,
            sent_max,
        }
    }

    /// Logs a misdirected RPC, each sender/addressee pair at most once a minute.
    pub fn warn_misdirected(&self, from: Option<&str>, to: Option<&str>, why: &str) {
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
        kind: RpcKind,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Bytes, PeerError> {
        if kind == RpcKind::Append
            && let Some(lane) = self.lanes.get(&target)
        {
            return lane.append(target, group, body, timeout).await;
        }
        let base = self
            .urls
            .get(&target)
            .ok_or_else(|| PeerError::Unreachable(format!("no URL for node {target}")))?;
        let url = format!("{base}{RPC_PREFIX}/{group}/{}", kind.as_str());
        self.sent_max
            .fetch_max(body.len() as u64, Ordering::Relaxed);
        post(
            &self.client,
            (self.me, target),
            (&self.mismatch, self.secret.as_ref()),
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
        kind: RpcKind,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, PeerError> {
        let body = rmp_serde::to_vec(req).map_err(|e| PeerError::Network(e.to_string()))?;
        let bytes = self.exchange(target, group, kind, body, timeout).await?;
        rmp_serde::from_slice(&bytes).map_err(|e| PeerError::Network(e.to_string()))
    }

    /// Asks `leader` for a fresh ReadIndex barrier of `group`: the index a replica must apply
    /// to hold every write the group committed before the call, and the vote it was confirmed
    /// under.
    pub async fn barrier(&self, leader: u64, group: u32) -> Result<Barrier, PeerError> {
        self.ask(leader, group, RpcKind::Barrier, &(), RPC_TIMEOUT)
            .await
    }

    /// Asks `leader` for a quorum-confirmed read index of `group`, for a read this node
    /// answers from its own state once it applied that index.
    pub async fn read_index(&self, leader: u64, group: u32) -> Result<Barrier, PeerError> {
        self.ask(leader, group, RpcKind::ReadIndex, &(), RPC_TIMEOUT)
            .await
    }

    /// Asks `target` to campaign for `group` now (a leader handing it off), or with
    /// `dry_run` only whether it would.
    pub async fn elect(
        &self,
        target: u64,
        group: u32,
        req: &ElectRequest,
    ) -> Result<ElectAnswer, PeerError> {
        self.ask(target, group, RpcKind::Elect, req, RPC_TIMEOUT)
            .await
    }

    /// Hands an operator's whole-group command to `leader`, which proposes it. An import
    /// carries a whole group state, so the answer may take as long as its replication.
    pub async fn propose(
        &self,
        leader: u64,
        group: u32,
        cmd: &ursula_state::stream::Command,
    ) -> Result<ProposeAnswer, PeerError> {
        // A peer takes an operator's command only from a node that proves it is a peer.
        if self.secret.is_none() {
            return Err(PeerError::NoSecret);
        }
        self.ask(leader, group, RpcKind::Propose, cmd, PROPOSE_TIMEOUT)
            .await
    }

    /// POSTs a heartbeat-sized body to `target`'s `/__ursula/cluster-probe` over the same
    /// connections as the Raft RPCs: `Ok` once it answered `2xx` within `timeout`.
    pub async fn egress_probe(&self, target: u64, timeout: Duration) -> Result<(), PeerError> {
        let base = self
            .urls
            .get(&target)
            .ok_or_else(|| PeerError::Unreachable(format!("no URL for node {target}")))?;
        let request = hyper::Request::post(format!("{base}{CLUSTER_PROBE_PATH}"))
            .header(h::RAFT_FROM, self.me)
            .body(Full::new(Bytes::from_static(&[0u8; PROBE_BODY_BYTES])))
            .map_err(|e| PeerError::Network(e.to_string()))?;
        let exchange = async {
            let resp = self
                .client
                .request(request)
                .await
                .map_err(|e| PeerError::Unreachable(e.to_string()))?;
            let status = resp.status();
            // Read to the end, so the connection goes back to the pool.
            resp.into_body()
                .collect()
                .await
                .map_err(|e| PeerError::Network(e.to_string()))?;
            if status.is_success() {
                Ok(())
            } else {
                Err(PeerError::Network(format!(
                    "node {target} answered {status}"
                )))
            }
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| PeerError::Unreachable(format!("node {target} did not answer in time")))?
    }

    /// Asks `node` whether it holds anything of `group` and whom it sees leading it.
    pub async fn probe(&self, node: u64, group: u32) -> Result<Probe, PeerError> {
        self.ask(node, group, RpcKind::Probe, &(), RPC_TIMEOUT)
            .await
    }
}

/// The route of the cluster-egress gate's probes, on every plane that serves clients.
pub const CLUSTER_PROBE_PATH: &str = "/__ursula/cluster-probe";
/// A probe's body: about a Raft heartbeat's size.
const PROBE_BODY_BYTES: usize = 64;

/// How long a batch of appends may take on the wire; each RPC keeps its own deadline too.
const LANE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long Ursula's own RPCs wait for a peer; a barrier needs a heartbeat round of the leader.
const RPC_TIMEOUT: Duration = Duration::from_secs(4);
/// How long a forwarded operator command may take: an import is one large entry.
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(300);
/// The leader gives up on a barrier before the asker gives up on the answer.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(3);

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

impl Connection {
    /// One of openraft's RPCs to this connection's peer, its failures in openraft's terms.
    async fn call<Req, Resp, E>(
        &self,
        kind: RpcKind,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let target = self.target;
        let result: Result<Resp, RaftError<u64, E>> = self
            .peers
            .ask(target, self.group, kind, req, timeout)
            .await
            .map_err(|e| match e {
                PeerError::Unreachable(m) => {
                    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(m)))
                }
                e @ (PeerError::Network(_) | PeerError::NoSecret) => {
                    RPCError::Network(NetworkError::new(&std::io::Error::other(e.to_string())))
                }
            })?;
        result.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let answer = self.call(RpcKind::Append, &rpc, option.hard_ttl()).await;
        // Any answer but a higher vote acknowledges this leader (a conflict only says where
        // the logs part).
        if let Ok(a) = &answer
            && !matches!(a, AppendEntriesResponse::HigherVote(_))
        {
            self.peers.acks.record(self.target, self.group);
        }
        answer
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.call(RpcKind::Snapshot, &rpc, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(RpcKind::Vote, &rpc, option.hard_ttl()).await
    }
}
