//! Starting and stopping a node: its engine, its state, and its planes on their listeners
//! (client on `server.listen`, admin on `server.admin_listen`, cluster on
//! `server.cluster_listen` or with the client plane).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use tokio::sync::watch;

use crate::admission::Admission;
use crate::config::Config;
use crate::config::EngineChoice;
use crate::engine::GroupEngine;
use crate::engine::MemoryEngine;
use crate::http::AppState;
use crate::raft::RaftOptions;
use crate::raft::drivers::store_health::Store;
use crate::raft::drivers::store_health::StoreHealth;
use crate::raft::storage::snapstore::SnapStore;
use crate::runtime::Runtime;
use ursula_state::stream::Command;

/// How often each group drops streams whose lifetime ended.
const SWEEP_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot listen on {addr} ({key}): {source}")]
    Listen {
        key: &'static str,
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

/// A node's state and the routes its engine serves itself.
pub struct NodeState {
    pub state: AppState,
    /// The engine's peer routes (the cluster plane); `None` without peers to talk to.
    pub peer_routes: Option<Router>,
    /// The engine's admin mutations, for the admin plane.
    pub admin_routes: Option<Router>,
    /// A WAL directory the node removes on a clean shutdown.
    pub temp_wal: Option<TempWal>,
    /// Where the Raft engine's store gate waits for the cold tier's store.
    pub store_health: Option<StoreHealth>,
}

/// Opens the cold tier `config` names (refusing a store of another format epoch) and starts
/// its flush and collection workers.
pub async fn attach_cold(state: &mut AppState, config: &Config) -> Result<(), NodeError> {
    let Some(settings) = &config.cold else {
        return Ok(());
    };
    let tier = crate::coldtier::ColdTier::open(settings.clone()).await?;
    if settings.abort_after_upload {
        tracing::warn!(
            "testing.cold_abort_after_upload is set: a test hook; the first cold flush aborts this process between its upload and its commit"
        );
    }
    if settings.index_page_bytes != crate::coldtier::index::PAGE_BYTES {
        tracing::warn!(
            page_bytes = settings.index_page_bytes,
            "testing.cold_index_page_bytes is set: a test hook; streams indexed from now on use pages of this span"
        );
    }
    crate::coldtier::flush::spawn(&state.rt, state.engine.clone(), tier.clone());
    crate::coldtier::sweep::spawn(&state.rt, state.engine.clone(), tier.clone());
    state.cold = Some(tier);
    Ok(())
}

/// What the store gate reads of the cold tier: a probe of its bucket, and the flush's writes.
fn store_of(tier: &crate::coldtier::ColdTier) -> Store {
    let store = tier.store.clone();
    let counters = tier.counters.clone();
    Store {
        probe: Box::new(move || {
            let store = store.clone();
            Box::pin(async move { store.probe().await })
        }),
        writes: Box::new(move || {
            let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
            (
                load(&counters.flush_write_errors),
                load(&counters.flush_writes),
            )
        }),
    }
}

/// What the Raft engine gets of S3 snapshots: the store, its pruning period, and the probe the
/// health gate runs when the snapshots' store is not the cold tier's.
struct SnapshotsOnS3 {
    store: Arc<SnapStore>,
    prune_every: Duration,
    own_store: Option<ursula_cold::ColdStore>,
}

/// With S3 snapshots: the snapshot namespace, checked before the engine writes anything (the
/// cold root's format-epoch marker, and the namespace's own when it lies outside the root, or
/// when only snapshots use S3).
async fn snapshot_store(config: &Config) -> Result<Option<SnapshotsOnS3>, NodeError> {
    let Some(s) = &config.snapshot_store else {
        return Ok(None);
    };
    let (ns, own_store) = match (&s.client, &config.cold) {
        (Some(client), _) => {
            let ns = ursula_cold::ColdStore::new(client)?.with_root(&s.namespace)?;
            ns.open_checked().await?;
            (ns.clone(), Some(ns))
        }
        (None, Some(cold)) => {
            let base = ursula_cold::ColdStore::new(&cold.store)?;
            base.open_checked().await?;
            let ns = base.with_root(&s.namespace)?;
            if !s.inside_cold_root {
                ns.open_checked().await?;
            }
            (ns, None)
        }
        (None, None) => return Ok(None),
    };
    tracing::info!(namespace = %ns.describe(), "Raft snapshots live on S3 (storage.snapshot.backend)");
    let store = SnapStore::new(
        ns,
        config.node_id,
        tokio::runtime::Handle::current(),
        s.grace,
    );
    Ok(Some(SnapshotsOnS3 {
        store: Arc::new(store),
        prune_every: s.prune_interval,
        own_store,
    }))
}

/// The health gate's view of a snapshot store of its own: its probe; no cold flush writes there.
fn probe_only(store: ursula_cold::ColdStore) -> Store {
    Store {
        probe: Box::new(move || {
            let store = store.clone();
            Box::pin(async move { store.probe().await })
        }),
        writes: Box::new(|| (0, 0)),
    }
}

fn runtime(config: &Config) -> Result<Runtime, NodeError> {
    let allowed = crate::affinity::allowed();
    let pins = crate::affinity::plan(config.cpu_affinity, config.core_count, &allowed);
    match &pins {
        Some(cpus) => tracing::info!(
            ?cpus,
            "core threads pinned, one CPU each (runtime.cpu_affinity)"
        ),
        None if config.cpu_affinity == Some(true) => tracing::warn!(
            "runtime.cpu_affinity = true, but this platform does not report the CPUs the process may use: not pinned"
        ),
        None => {}
    }
    Ok(Runtime::start_pinned(
        config.core_count,
        config.group_count,
        config.live_read_max_waiters_per_core,
        pins,
    )?)
}

/// Admission's limits; `wal_dir` is the Raft engine's, whose writes queue behind its log.
fn limits(config: &Config, wal_dir: Option<PathBuf>) -> crate::admission::Limits {
    crate::admission::Limits {
        inflight_body_bytes: config.http_inflight_body_size,
        max_uncommitted_per_group: wal_dir.as_ref().map(|_| config.max_uncommitted_per_group),
        wal_dir,
        min_available: config.wal_min_available,
        resume_available: config.wal_resume_available,
        log_budget: config.snapshot_log_budget,
        max_hot_per_group: config.cold.as_ref().map(|c| c.max_hot_per_group),
        group_count: config.group_count,
    }
}

fn app_state(
    config: &Config,
    rt: Runtime,
    engine: Arc<dyn GroupEngine>,
    admission: Arc<Admission>,
) -> AppState {
    AppState {
        rt,
        engine,
        admission,
        node_id: config.node_id,
        long_poll_default_ms: 1000,
        cold: None,
        process_incarnation: process_incarnation(),
        ignored_keys: Arc::from(Vec::<String>::new()),
        fence: Arc::default(),
        // The node's own signal replaces it in `run`; a state no node runs never stops.
        stopping: watch::channel(false).1,
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
    Ok(app_state(config, rt, engine, admission))
}

/// A fresh value per process start, so an admin mutation planned against one process is
/// refused by the next (`x-ursula-process-incarnation`).
fn process_incarnation() -> String {
    ursula_protocol::incarnation::Incarnation(rand::random::<u64>()).to_string()
}

/// A WAL directory the node removes on a clean shutdown.
#[derive(Debug)]
pub struct TempWal(pub PathBuf);

/// The node's state for any engine; the Raft engine recovers its journals here.
pub async fn start_state(config: &Config) -> Result<NodeState, NodeError> {
    let EngineChoice::Raft {
        wal_dir,
        fsync_always,
        segment_size,
        cache_size,
        peers,
        peer_secret,
    } = &config.engine
    else {
        return Ok(NodeState {
            state: build_state(config)?,
            peer_routes: None,
            admin_routes: None,
            temp_wal: None,
            store_health: None,
        });
    };
    let (dir, temp_wal) = match wal_dir {
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
    let snapshots = snapshot_store(config).await?;
    // The gate watches the cold tier's store on S3, else a snapshot store of its own.
    let store_gate = config
        .cold
        .as_ref()
        .and_then(|c| c.gate)
        .or_else(|| config.snapshot_store.as_ref().and_then(|s| s.gate))
        .map(|settings| (StoreHealth::default(), settings));
    if let (Some((health, _)), Some(own)) = (
        &store_gate,
        snapshots.as_ref().and_then(|s| s.own_store.clone()),
    ) {
        health.attach(probe_only(own));
    }
    let admission = Admission::new(limits(config, Some(dir.clone())));
    let sampler = admission.clone();
    let opts = RaftOptions {
        node_id: config.node_id,
        dir,
        fsync_always: *fsync_always,
        segment_size: *segment_size,
        cache_size: *cache_size,
        peers: peers.clone(),
        peer_secret: peer_secret.clone(),
        snapshot: config.snapshot_driver,
        shutdown_stall: config.shutdown_stall,
        apply_panic_on: config.apply_panic_on.as_deref().map(std::sync::Arc::from),
        wal_disk_pressure: Some(crate::raft::drivers::balancer::DiskPressure::new(
            move || sampler.disk_pressure(),
        )),
        store_gate: store_gate.clone(),
        snapshot_store: snapshots.map(|s| (s.store, s.prune_every)),
        balance: config.leadership_balance,
    };
    std::fs::create_dir_all(&opts.dir).map_err(NodeError::WalDir)?;
    admission.spawn_disk_sampler();
    let started = crate::raft::start(&rt, opts).await?;
    Ok(NodeState {
        state: app_state(config, rt, started.engine, admission),
        peer_routes: Some(crate::http::cluster::router(started.peers)),
        admin_routes: Some(crate::http::admin_raft::routes(started.operator)),
        temp_wal,
        store_health: store_gate.map(|(health, _)| health),
    })
}

/// Warns when a cluster node serves its peer routes without a peer secret on an address other
/// hosts reach: anyone there can send it Raft RPCs (docs/security.md).
fn warn_unauthenticated_peers(config: &Config) {
    if let Some((key, addr)) = config.unauthenticated_peer_listener() {
        tracing::warn!(
            %addr, listener = key,
            "peer routes are served on a non-loopback address without a peer secret: anyone who reaches {addr} can send this node Raft RPCs; set raft.peer_secret_file (or URSULA_PEER_SECRET) on every node (docs/security.md)"
        );
    }
}

/// Binds `addr` for the plane `key` names, or says which one could not listen.
fn bind(key: &'static str, addr: std::net::SocketAddr) -> Result<std::net::TcpListener, NodeError> {
    std::net::TcpListener::bind(addr).map_err(|source| NodeError::Listen { key, addr, source })
}

/// How long a graceful stop waits for its leaderships to move (the spec's five seconds).
const HANDOFF_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a stopping node waits for its connections to close (the spec's ten seconds).
const DRAIN_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs the node until `signal` flips to `true`.
pub async fn run(config: Config, mut signal: watch::Receiver<bool>) -> Result<(), NodeError> {
    if !config.ignored_keys.is_empty() {
        tracing::warn!(
            "config keys this build does not act on, which change nothing (docs/configuration.md): {}",
            config.ignored_keys.join(", ")
        );
    }
    if let Some(cap) = config.node_memory_abort_cap {
        crate::memcap::spawn(cap);
    }
    warn_unauthenticated_peers(&config);
    if let Some(addr) = config.admin_listen.filter(|a| !a.ip().is_loopback()) {
        tracing::warn!(
            %addr,
            "the admin plane listens on a non-loopback address: anyone who reaches {addr} can run admin mutations (purge, restore, membership); keep it on loopback and reach it over a tunnel (docs/security.md)"
        );
    }
    if let Some(stall) = config.shutdown_stall {
        tracing::warn!(
            ?stall,
            "testing.shutdown_stall is set: a test hook; this node's shutdown stalls on purpose"
        );
    }
    if config.apply_panic_on.is_some() {
        tracing::warn!(
            "testing.apply_panic_on is set: a test hook; committed appends holding its bytes fail to apply and stop their group"
        );
    }
    if let Some(after) = config.producer_forget_after {
        tracing::warn!(
            ?after,
            "testing.producer_forget_after is set: a test hook; idle producers are forgotten this soon instead of after 7 days"
        );
        ursula_state::stream::producer::set_forget_after_ms(after.as_millis() as u64);
    }
    let NodeState {
        mut state,
        peer_routes,
        admin_routes,
        temp_wal,
        store_health,
    } = start_state(&config).await?;
    // The listeners stop on this one, after the leaderships were handed off over them.
    let (stop_listeners, shutdown) = watch::channel(false);
    state.ignored_keys = Arc::from(config.ignored_keys.clone());
    attach_cold(&mut state, &config).await?;
    let cold_gated = config.cold.as_ref().is_some_and(|c| c.gate.is_some());
    if let (Some(health), Some(tier), true) = (&store_health, &state.cold, cold_gated) {
        health.attach(store_of(tier));
    }
    // Every listener is bound before any serves, so a taken port refuses the start whole.
    let client = bind("server.listen", config.listen)?;
    let admin = config
        .admin_listen
        .map(|a| bind("server.admin_listen", a))
        .transpose()?;
    let cluster = config
        .cluster_listen
        .map(|a| bind("server.cluster_listen", a))
        .transpose()?;
    let addr = client.local_addr().map_err(NodeError::Serve)?;
    // Live reads end when the listeners stop, so their connections can drain.
    state.stopping = shutdown.clone();
    let client_plane = crate::http::client_router(state.clone());
    let peers = peer_routes.unwrap_or_default();
    // With a cluster listener, peer RPCs are served there only. It serves the client plane
    // too: peers' URLs double as the leader redirects clients follow.
    let (client_app, cluster_app) = match &cluster {
        Some(_) => (client_plane.clone(), Some(client_plane.merge(peers))),
        None => (client_plane.merge(peers), None),
    };
    let limits = crate::http::serve::ConnectionLimits {
        head_timeout: config.request_head_timeout,
        max_connections: config.max_connections,
    };
    // The client and cluster listeners take stream requests straight to the dispatcher; the
    // admin plane is a router of its own.
    let plane_state = Arc::new(state.clone());
    let start = |listener: &std::net::TcpListener, app: Router| {
        crate::http::serve::spawn_accept_loops(
            &state.rt,
            listener,
            crate::http::ClientPlane::new(plane_state.clone(), app),
            shutdown.clone(),
            limits,
        )
        .map_err(NodeError::Serve)
    };
    let mut drains = vec![start(&client, client_app)?];
    if let (Some(l), Some(app)) = (&cluster, cluster_app) {
        drains.push(start(l, app)?);
    }
    if let Some(l) = &admin {
        let admin_app =
            crate::http::admin::router(state.clone(), admin_routes, config.admin_hosts.clone());
        let drain = crate::http::serve::spawn_accept_loops(
            &state.rt,
            l,
            hyper_util::service::TowerToHyperService::new(admin_app),
            shutdown.clone(),
            limits,
        )
        .map_err(NodeError::Serve)?;
        drains.push(drain);
    }
    let local = |l: &Option<std::net::TcpListener>| {
        l.as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.to_string())
    };
    tracing::info!(
        %addr, admin = local(&admin).as_deref(), cluster = local(&cluster).as_deref(),
        engine = state.engine.name(), cores = state.rt.core_count(), groups = state.rt.group_count(),
        preset = %config.preset, "ursula node listening"
    );
    // The accept loops hold their own handles: once they stop, the sockets close, and a
    // client or peer that connects then is refused at once instead of waiting in a backlog.
    drop((client, admin, cluster));
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        tokio::select! {
            _ = sweep.tick() => sweep_expired(&state).await,
            _ = signal.changed() => break,
        }
    }
    state.engine.hand_off(HANDOFF_WITHIN).await;
    let _ = stop_listeners.send(true);
    drain_listeners(&drains).await;
    state.engine.shutdown().await;
    if let Some(TempWal(dir)) = temp_wal {
        let _ = std::fs::remove_dir_all(&dir);
    }
    tracing::info!("ursula node stopped");
    Ok(())
}

/// Waits, up to the spec's ten seconds, for every listener's connections to close once their
/// answers in flight are written: a write that was in flight when the node began to stop is
/// answered with its outcome, not cut off. What is still open then is abandoned.
async fn drain_listeners(drains: &[crate::http::serve::Drain]) {
    let started = tokio::time::Instant::now();
    let open: usize = drains.iter().map(|d| d.open()).sum();
    let all = futures_util::future::join_all(drains.iter().map(|d| d.wait(DRAIN_WITHIN))).await;
    if all.iter().all(|done| *done) {
        tracing::info!(connections = open, elapsed = ?started.elapsed(), "HTTP listeners drained");
    } else {
        let left: usize = drains.iter().map(|d| d.open()).sum();
        tracing::warn!(
            connections = left,
            "HTTP connections still open {DRAIN_WITHIN:?} after the listeners stopped: abandoned"
        );
    }
}

/// Proposes a sweep to every group it leads that holds an expired stream: expiry is decided
/// inside the state machine, at the time the proposal carries, so every replica drops the same
/// streams. A group with nothing to drop gets no proposal, and so no log entry.
async fn sweep_expired(state: &AppState) {
    for group in 0..state.rt.group_count() {
        if !state.engine.leads(group) {
            continue;
        }
        let now = crate::runtime::now_ms();
        let due = state
            .rt
            .with_group_now(group, |g| g.state.any_expired(now))
            .unwrap_or(false);
        if due {
            let _ = state.engine.propose(group, Command::Sweep).await;
        }
    }
}
