//! The `GroupEngine` seam between the HTTP planes and replication. The in-memory engine applies
//! a command on the group's core at once; the Raft engine proposes it to the group's log and
//! applies it on every replica through the same [`Group::apply`](crate::runtime::Group::apply).

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;

use crate::admission::GroupCharge;
use crate::runtime::GroupId;
use crate::runtime::Runtime;
use crate::runtime::RuntimeError;
use crate::runtime::now_ms;
use crate::stream::Applied;
use crate::stream::Command;
use crate::stream::Refusal;

pub type Proposal =
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

pub trait GroupEngine: Send + Sync + Debug {
    /// Proposes a write and resolves once it was applied (or refused by the state machine).
    /// `charge` holds the write's bytes in its group's uncommitted budget: the engine keeps it
    /// until the write was applied or failed, whether or not anyone still awaits the answer.
    fn submit(&self, group: GroupId, cmd: Command, charge: Option<GroupCharge>) -> Proposal;
    /// A write of the node's own (sweeps, cold-tier commits), outside admission.
    fn propose(&self, group: GroupId, cmd: Command) -> Proposal {
        self.submit(group, cmd, None)
    }
    /// The node's unsnapshotted Raft log bytes, for `RaftLogPressure`; `None` without a log.
    fn log_bytes(&self) -> Option<u64>;
    /// Name shown in metrics.
    fn name(&self) -> &'static str;
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
    fn submit(&self, group: GroupId, cmd: Command, charge: Option<GroupCharge>) -> Proposal {
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

    fn name(&self) -> &'static str {
        "memory"
    }
}
