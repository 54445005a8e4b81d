//! Starting and stopping a node.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::Config;
use crate::config::EngineChoice;
use crate::engine::GroupEngine;
use crate::engine::MemoryEngine;
use crate::http::AppState;
use crate::runtime::Runtime;
use crate::runtime::now_ms;
use crate::stream::Command;

/// How often each group drops streams whose lifetime ended.
const SWEEP_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error("cannot start serving: {0}")]
    Serve(std::io::Error),
}

/// The application state for a config, with its cores started.
pub fn build_state(config: &Config) -> Result<AppState, NodeError> {
    let rt = Runtime::start(
        config.core_count,
        config.group_count,
        config.live_read_max_waiters_per_core,
    )?;
    let engine: Arc<dyn GroupEngine> = match config.engine {
        EngineChoice::Memory => Arc::new(MemoryEngine::new(rt.clone())),
    };
    Ok(AppState {
        rt,
        engine,
        node_id: config.node_id,
        long_poll_default_ms: 1000,
    })
}

/// Runs the node until `shutdown` flips to `true`.
pub async fn run(config: Config, mut shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
    let state = build_state(&config)?;
    let listener =
        std::net::TcpListener::bind(config.listen).map_err(|source| NodeError::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(NodeError::Serve)?;
    let app = crate::http::router(state.clone());
    crate::http::serve::spawn_accept_loops(&state.rt, &listener, app, shutdown.clone())
        .map_err(NodeError::Serve)?;
    tracing::info!(
        %addr, engine = state.engine.name(), cores = state.rt.core_count(), groups = state.rt.group_count(),
        preset = %config.preset, "ursula node listening"
    );
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        tokio::select! {
            _ = sweep.tick() => sweep_expired(&state).await,
            _ = shutdown.changed() => break,
        }
    }
    tracing::info!("ursula node stopped");
    Ok(())
}

async fn sweep_expired(state: &AppState) {
    for core in 0..state.rt.core_count() {
        let _ = state
            .rt
            .with_core(core, |c| {
                let now = now_ms();
                for g in c.groups.values_mut() {
                    let _ = g.apply(Command::Sweep, now);
                }
            })
            .await;
    }
}
