//! The maintenance drain mark: set, this node campaigns for no group and its balancer hands its
//! leaderships away; cleared, every group may elect it again where nothing else holds it back.

use ursula_protocol::admin::ShedState;

use crate::raft::recovery::files::FilesError;
use crate::raft::replicas::Replicas;

/// Sets (`on`) or clears the drain mark, durably, and turns elections off or back on.
pub fn set_drain(node: &Replicas, on: bool) -> Result<ShedState, FilesError> {
    let state = node.shed.set_maintenance(on)?;
    for group in 0..node.group_count() {
        if on {
            if let Some(raft) = node.raft(group) {
                raft.runtime_config().elect(false);
            }
        } else {
            node.resume_elections(group);
        }
    }
    tracing::info!(
        drained = on,
        "maintenance drain mark {}",
        if on { "set" } else { "cleared" }
    );
    Ok(state)
}
