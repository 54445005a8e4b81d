//! Peer traffic: every group's Raft RPCs travel as MessagePack over one keep-alive HTTP
//! connection pool per node, tagged with the group in the path
//! (`POST /__ursula/raft-rpc/{group}/{append|vote|snapshot}`).

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

use super::TypeConfig;

/// Shared by every group's network factory.
#[derive(Debug, Clone)]
pub struct Peers {
    client: Client<HttpConnector, Full<Bytes>>,
    /// node id -> base URL.
    pub urls: Arc<BTreeMap<u64, String>>,
}

impl Peers {
    pub fn new(urls: BTreeMap<u64, String>) -> Peers {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Peers {
            client,
            urls: Arc::new(urls),
        }
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
        let unreachable =
            |m: String| RPCError::Unreachable(Unreachable::new(&std::io::Error::other(m)));
        let base = self
            .urls
            .get(&target)
            .ok_or_else(|| unreachable(format!("no URL for node {target}")))?;
        let body = rmp_serde::to_vec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let request = hyper::Request::post(format!("{base}/__ursula/raft-rpc/{group}/{kind}"))
            .header("content-type", "application/msgpack")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let resp = tokio::time::timeout(timeout, self.client.request(request))
            .await
            .map_err(|_| unreachable(format!("node {target} did not answer in time")))?
            .map_err(|e| unreachable(e.to_string()))?;
        let bytes = tokio::time::timeout(timeout, resp.into_body().collect())
            .await
            .map_err(|_| unreachable(format!("node {target} did not answer in time")))?
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?
            .to_bytes();
        let result: Result<Resp, RaftError<u64, E>> =
            rmp_serde::from_slice(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(target, e)))
    }
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

/// Answers a peer's RPC for `group` with this node's Raft.
pub async fn serve(
    engine: &super::RaftEngine,
    group: u32,
    kind: &str,
    body: &[u8],
) -> Result<Vec<u8>, String> {
    let raft = engine
        .raft(group)
        .ok_or_else(|| format!("no group {group}"))?;
    let out = match kind {
        "append" => {
            let req: AppendEntriesRequest<TypeConfig> =
                rmp_serde::from_slice(body).map_err(|e| e.to_string())?;
            rmp_serde::to_vec(&raft.append_entries(req).await)
        }
        "vote" => {
            let req: VoteRequest<u64> = rmp_serde::from_slice(body).map_err(|e| e.to_string())?;
            rmp_serde::to_vec(&raft.vote(req).await)
        }
        "snapshot" => {
            let req: InstallSnapshotRequest<TypeConfig> =
                rmp_serde::from_slice(body).map_err(|e| e.to_string())?;
            rmp_serde::to_vec(&raft.install_snapshot(req).await)
        }
        other => return Err(format!("unknown Raft RPC {other:?}")),
    };
    out.map_err(|e| e.to_string())
}
