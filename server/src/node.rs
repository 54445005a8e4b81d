//! Starting and stopping a node.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::admission::Admission;
use crate::config::Config;
use crate::config::EngineChoice;
use crate::engine::GroupEngine;
use crate::engine::MemoryEngine;
use crate::http::AppState;
use crate::raft::RaftEngine;
use crate::raft::RaftOptions;
use crate::runtime::Runtime;
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
    #[error("cannot start the Raft engine: {0}")]
    Raft(#[from] crate::raft::StartError),
    #[error("cannot create the WAL directory: {0}")]
    WalDir(std::io::Error),
    #[error("this config needs the Raft engine; use start_state")]
    NeedsRaft,
    #[error("cold tier: {0}")]
    Cold(#[from] ursula_cold::ColdError),
}

/// Opens the cold tier `config` names (refusing a store of another format epoch) and starts
/// its flush and collection workers.
pub async fn attach_cold(state: &mut AppState, config: &Config) -> Result<(), NodeError> {
    let Some(settings) = &config.cold else {
        return Ok(());
    };
    let tier = crate::coldtier::ColdTier::open(settings.clone(), state.rt.group_count()).await?;
    crate::coldtier::flush::spawn(
        &state.rt,
        state.engine.clone(),
        state.raft.clone(),
        tier.clone(),
    );
    state.cold = Some(tier);
    Ok(())
}

fn runtime(config: &Config) -> Result<Runtime, NodeError> {
    Ok(Runtime::start(
        config.core_count,
        config.group_count,
        config.live_read_max_waiters_per_core,
    )?)
}

fn limits(config: &Config, wal_dir: Option<PathBuf>) -> crate::admission::Limits {
    crate::admission::Limits {
        inflight_body_bytes: config.http_inflight_body_size,
        wal_dir,
        min_available: config.wal_min_available,
        resume_available: config.wal_resume_available,
        log_budget: config.snapshot_log_budget,
    }
}

/// The application state of an in-memory node, with its cores started.
pub fn build_state(config: &Config) -> Result<AppState, NodeError> {
    if config.engine != EngineChoice::Memory {
        return Err(NodeError::NeedsRaft);
    }
    let rt = runtime(config)?;
    let engine: Arc<dyn GroupEngine> = Arc::new(MemoryEngine::new(rt.clone()));
    let admission = Admission::new(limits(config, None));
    Ok(AppState {
        rt,
        engine,
        raft: None,
        admission,
        node_id: config.node_id,
        long_poll_default_ms: 1000,
        cold: None,
        process_incarnation: process_incarnation(),
    })
}

/// A fresh value per process start, so an admin mutation planned against one process is
/// refused by the next (`x-ursula-process-incarnation`). Text: JSON tools read big integers
/// as doubles and would change it.
fn process_incarnation() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// A WAL directory the node removes on a clean shutdown.
#[derive(Debug)]
pub struct TempWal(pub PathBuf);

/// The application state for any engine; the Raft engine recovers its journals here.
pub async fn start_state(config: &Config) -> Result<(AppState, Option<TempWal>), NodeError> {
    let EngineChoice::Raft {
        wal_dir,
        fsync_always,
        segment_size,
        peers,
    } = &config.engine
    else {
        return Ok((build_state(config)?, None));
    };
    let (dir, temp) = match wal_dir {
        Some(d) => (d.clone(), None),
        None => {
            let d = std::env::temp_dir().join(format!(
                "ursula-wal-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ));
            std::fs::create_dir_all(&d).map_err(NodeError::WalDir)?;
            tracing::info!(path = %d.display(), "single node without raft.wal.path: the WAL lives in a temporary directory, removed on clean shutdown");
            (d.clone(), Some(TempWal(d)))
        }
    };
    let rt = runtime(config)?;
    let opts = RaftOptions {
        node_id: config.node_id,
        dir,
        fsync_always: *fsync_always,
        segment_size: *segment_size,
        peers: peers.clone(),
        max_uncommitted: config.max_uncommitted_per_group,
        snapshot: config.snapshot_driver,
        shutdown_stall: config.shutdown_stall,
    };
    std::fs::create_dir_all(&opts.dir).map_err(NodeError::WalDir)?;
    let admission = Admission::new(limits(config, Some(opts.dir.clone())));
    admission.spawn_disk_sampler();
    let raft = RaftEngine::start(&rt, opts).await?;
    let engine: Arc<dyn GroupEngine> = raft.clone();
    Ok((
        AppState {
            rt,
            engine,
            raft: Some(raft),
            admission,
            node_id: config.node_id,
            long_poll_default_ms: 1000,
            cold: None,
            process_incarnation: process_incarnation(),
        },
        temp,
    ))
}

/// Runs the node until `shutdown` flips to `true`.
pub async fn run(config: Config, mut shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
    if !config.ignored_keys.is_empty() {
        tracing::warn!(
            "config keys this build does not act on, which change nothing (docs/configuration.md): {}",
            config.ignored_keys.join(", ")
        );
    }
    if let Some(stall) = config.shutdown_stall {
        tracing::warn!(
            ?stall,
            "testing.shutdown_stall is set: a test hook; this node's shutdown stalls on purpose"
        );
    }
    let (mut state, temp) = start_state(&config).await?;
    attach_cold(&mut state, &config).await?;
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
    if let Some(raft) = &state.raft {
        raft.shutdown().await;
    }
    if let Some(TempWal(dir)) = temp {
        let _ = std::fs::remove_dir_all(&dir);
    }
    tracing::info!("ursula node stopped");
    Ok(())
}

/// Proposes a sweep to every group: expiry is decided inside the state machine, at the time
/// the proposal carries, so every replica drops the same streams.
async fn sweep_expired(state: &AppState) {
    for group in 0..state.rt.group_count() {
        if state.raft.as_ref().is_some_and(|r| !r.is_leader(group)) {
            continue;
        }
        let _ = state.engine.propose(group, Command::Sweep).await;
    }
}
