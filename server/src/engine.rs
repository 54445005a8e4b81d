//! The `GroupEngine` seam between the node's planes and replication. The in-memory engine
//! applies a command on the group's core at once; the Raft engine ([`crate::raft`]) proposes it
//! to the group's log and applies it on every replica through the same
//! [`Group::apply`](crate::runtime::Group::apply). Everything the rest of the node asks of an
//! engine is on the trait: the HTTP planes, the cold tier and the node hold one
//! `Arc<dyn GroupEngine>` and never name an engine type.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;

use futures_util::future::BoxFuture;
use ursula_protocol::metrics::NodeMetrics;

use crate::admission::GroupCharge;
use crate::runtime::GroupId;
use crate::runtime::Runtime;
use crate::runtime::RuntimeError;
use crate::runtime::now_ms;
use ursula_state::stream::Applied;
use ursula_state::stream::Command;
use ursula_state::stream::Refusal;

/// A write on its way: resolves once it was applied (or refused by the state machine).
pub type Pending =
    Pin<Box<dyn Future<Output = Result<Result<Applied, Refusal>, EngineError>> + Send>>;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// This node does not lead the group; `leader` is the leader's base URL when known.
    /// `single`: the node has no peers, so no other node can take the write.
    #[error("this node does not lead the stream's group")]
    NotLeader {
        leader: Option<String>,
        single: bool,
    },
    #[error("the group cannot take writes now: {0}")]
    Unavailable(String),
}

/// Why a leadership confirmation, a read barrier or the API queues' confirmation did not hold.
/// Each variant is one way the round can fail; the detail is the underlying library's or the
/// leader's own words. The HTTP planes turn it into a `503` in one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfirmError {
    #[error("no group {0}")]
    NoGroup(GroupId),
    #[error("no leader is known for group {0}")]
    NoLeader(GroupId),
    /// The quorum round (ReadIndex) failed: this node no longer leads, no quorum answered, or
    /// the group is shutting down.
    #[error("{0}")]
    Quorum(String),
    /// The leader could not be asked for a read index, or declined to give one.
    #[error("{0}")]
    Leader(String),
    /// Applying up to the confirmed index did not finish within the barrier's wait.
    #[error("{0}")]
    Apply(String),
    /// A group's Raft API queue did not answer (the group is shutting down).
    #[error("group {group}: {detail}")]
    Queue { group: GroupId, detail: String },
}

/// Where a request only a group's leader may answer goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderRoute {
    /// This node leads the group (always, in memory).
    Here,
    /// Another node leads it, at this base URL.
    Elsewhere(String),
    /// No leader is known now.
    Unknown,
}

/// Why the engine says the node is not ready, as `/__ursula/ready` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    /// A peer spoke another Raft protocol (until restart).
    FormatEpochMismatch,
    /// Groups whose recovery gate stalled.
    RecoveryStalled(Vec<GroupId>),
    /// A recovery gate is closed.
    RecoveryGateClosed,
    /// A local replica is not a healthy voter: the groups and issues that say why.
    ReplicaUnready(Vec<ursula_protocol::metrics::GroupIssue>),
}

pub trait GroupEngine: Send + Sync + Debug {
    /// Name shown in metrics.
    fn name(&self) -> &'static str;

    /// Proposes a write and resolves once it was applied (or refused by the state machine).
    /// `charge` holds the write's bytes in its group's uncommitted budget: the engine keeps it
    /// until the write was applied or failed, whether or not anyone still awaits the answer.
    fn submit(&self, group: GroupId, cmd: Command, charge: Option<GroupCharge>) -> Pending;

    /// A write of the node's own (sweeps, cold-tier commits), outside admission.
    fn propose(&self, group: GroupId, cmd: Command) -> Pending {
        self.submit(group, cmd, None)
    }

    /// An operator's whole-group command (a bucket purge, a backup import), which any node
    /// accepts: proposed here when this node leads `group`, handed to the leader otherwise.
    /// `NotLeader { leader: None }` when no leader is known (the caller answers `503`).
    fn forward(&self, group: GroupId, cmd: Command) -> Pending {
        self.propose(group, cmd)
    }

    /// The node's unsnapshotted Raft log bytes, for `RaftLogPressure`; `None` without a log.
    fn log_bytes(&self) -> Option<u64>;

    /// Whether this node leads `group`: only the leader flushes, collects and sweeps it.
    fn leads(&self, group: GroupId) -> bool;

    /// Where a request only `group`'s leader may answer goes (HEAD, live reads, tails of open
    /// streams, `consistency=leader`).
    fn leader_route(&self, group: GroupId) -> LeaderRoute;

    /// Confirms with a quorum that this node still leads `group` (a ReadIndex round) and has
    /// applied what was committed before, for a linearizable read.
    fn confirm_leadership(&self, group: GroupId) -> BoxFuture<'static, Result<(), ConfirmError>>;

    /// Brings this node's state of `group` level with every write committed before the call,
    /// whether it leads or follows: the leader confirms its leadership (a ReadIndex round); a
    /// follower asks the leader for a quorum-confirmed read index and waits, a bounded time,
    /// until it applied it. Then a read of the local state (a `416` for a cursor past the
    /// tail) holds for the whole group.
    fn read_barrier(&self, group: GroupId) -> BoxFuture<'static, Result<(), ConfirmError>>;

    /// Every reason the engine keeps the node unready, in the Troubleshooting page's order.
    fn not_ready(&self) -> Vec<NotReady>;

    /// Fills the engine's part of the metrics document: each group's leader, term and applied
    /// index, the Raft groups, the recovery gates and the Raft log.
    fn report(&self, out: &mut NodeMetrics);

    /// Resolves once every group's Raft API queue processed what was sent to it before the
    /// call (the maintenance fence's activation confirms admitted mutations were submitted).
    /// Nothing to confirm without Raft.
    fn confirm_api_queues(&self) -> BoxFuture<'_, Result<(), ConfirmError>> {
        Box::pin(async { Ok(()) })
    }

    /// The first step of a graceful stop, while the listeners still serve: the node marks
    /// itself drained and hands off the leaderships it holds, within `within`.
    fn hand_off(&self, within: std::time::Duration) -> BoxFuture<'_, ()> {
        let _ = within;
        Box::pin(async {})
    }

    /// Stops the engine: for Raft, its groups stop, its journals sync and a clean run is
    /// recorded.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// Single node, nothing kept across restarts.
#[derive(Debug, Clone)]
pub struct MemoryEngine {
    rt: Runtime,
}

impl MemoryEngine {
    pub fn new(rt: Runtime) -> MemoryEngine {
        MemoryEngine { rt }
    }
}

impl GroupEngine for MemoryEngine {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn submit(&self, group: GroupId, cmd: Command, charge: Option<GroupCharge>) -> Pending {
        let rt = self.rt.clone();
        Box::pin(async move {
            let result = rt
                .with_group(group, move |g| g.apply(cmd, now_ms()))
                .await?;
            drop(charge);
            Ok(result)
        })
    }

    fn log_bytes(&self) -> Option<u64> {
        None
    }

    fn leads(&self, _group: GroupId) -> bool {
        true
    }

    fn leader_route(&self, _group: GroupId) -> LeaderRoute {
        LeaderRoute::Here
    }

    fn confirm_leadership(&self, _group: GroupId) -> BoxFuture<'static, Result<(), ConfirmError>> {
        Box::pin(async { Ok(()) })
    }

    fn read_barrier(&self, _group: GroupId) -> BoxFuture<'static, Result<(), ConfirmError>> {
        Box::pin(async { Ok(()) })
    }

    fn not_ready(&self) -> Vec<NotReady> {
        Vec::new()
    }

    fn report(&self, _out: &mut NodeMetrics) {}

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
