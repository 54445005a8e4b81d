//! `AppState`: what every handler of every plane reads (runtime, engine, admission, cold tier,
//! incarnation, fence) and whether the node is stopping.

use std::sync::Arc;

use super::serve;
use crate::engine::GroupEngine;
use crate::runtime::Runtime;

#[derive(Debug, Clone)]
pub struct AppState {
    pub rt: Runtime,
    /// The one engine handle: nothing here names an engine type.
    pub engine: Arc<dyn GroupEngine>,
    pub admission: Arc<crate::admission::Admission>,
    pub node_id: u64,
    /// Long-poll wait when the request names no `timeout_ms`.
    pub long_poll_default_ms: u64,
    /// The cold tier, when `storage.cold.backend` names one.
    pub cold: Option<crate::coldtier::ColdTier>,
    /// `process_incarnation` in the metrics, required on admin mutations.
    pub process_incarnation: String,
    /// Config keys this build parses but does not act on, named in the metrics.
    pub ignored_keys: Arc<[String]>,
    /// The maintenance fence, required on admin mutations once active.
    pub fence: Arc<crate::fence::Fence>,
    /// Flips to `true` when the node starts to stop: live reads answer or end then, so their
    /// connections can close within the listeners' drain.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

impl AppState {
    /// Waits until the node starts to stop (never, for a state no node runs).
    pub async fn stopping(&self) {
        serve::until_stopping(self.stopping.clone()).await;
    }
}
