//! Starting the Raft engine, in steps with typed results, every refusal before the first write:
//!
//! 1. [`inspect`]: the WAL root's checks (format epoch, topology, locks), the previous run,
//!    the recorded gates and every core's journal, read without changing anything, and the
//!    gate decision ([`gates::decide`]).
//! 2. The peers' Raft protocol ([`protocol::probe_peers`]): a node that would join a cluster of
//!    another release writes nothing.
//! 3. [`commit`]: the markers, the gate record, the cut journal tails and `running`.
//! 4. [`open_journals`]: each core's journal, a new segment restating every group's state.
//! 5. [`spawn_groups`]: each group's Raft on its core; a single node initializes empty groups.
//! 6. The engine and its background tasks: gate watchers, the snapshot driver, the bootstrap.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::BasicNode;
use openraft::Config;
use openraft::Raft;

use super::drivers::balancer;
use super::drivers::bootstrap;
use super::drivers::egress;
use super::drivers::fair_share;
use super::drivers::gate_watch;
use super::drivers::snapshot_prune;
use super::drivers::snapshots;
use super::drivers::store_health;
use super::drivers::voter_keeper;
use super::engine::EngineParts;
use super::engine::RaftEngine;
use super::engine::group_commit::Batcher;
use super::engine::peer_service::PeerService;
use super::engine::wal_metrics;
use super::ops::Operator;
use super::peer::client::Factory;
use super::peer::client::Peers;
use super::peer::protocol;
use super::recovery::files;
use super::recovery::files::GateRecord;
use super::recovery::files::Root;
use super::recovery::gates;
use super::recovery::gates::Gates;
use super::recovery::vote_hold::VoteHold;
use super::replicas::Parts;
use super::replicas::Replicas;
use super::replicas::leadership_shed::Shed;
use super::replicas::snapshot_builds::Builds;
use super::replicas::write_holds::WriteHolds;
use super::storage::counters::ScanWork;
use super::storage::log_counters::NodeLog;
use super::storage::log_counters::SnapStats;
use super::storage::log_store::LogData;
use super::storage::log_store::LogStore;
use super::storage::snapstore::SnapStore;
use super::storage::state_machine::StateMachine;
use super::storage::wal;
use super::types::GroupRaft;
use crate::engine::GroupEngine;
use crate::runtime::Runtime;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Wal(#[from] wal::WalError),
    #[error(transparent)]
    Files(#[from] files::FilesError),
    #[error("journal of core {core}: {message}")]
    Recover { core: usize, message: String },
    #[error("group {group}: {message}")]
    Group { group: u32, message: String },
    /// A peer answered the startup probe with another Raft protocol.
    #[error(transparent)]
    Protocol(#[from] super::peer::protocol::ProtocolError),
}

/// How the engine is configured.
#[derive(Debug, Clone)]
pub struct RaftOptions {
    pub node_id: u64,
    pub dir: PathBuf,
    pub fsync_always: bool,
    pub segment_size: u64,
    /// `raft.wal.cache_size`: the journal bytes of recent entries the node's groups hold in
    /// memory, split evenly between them.
    pub cache_size: u64,
    /// node id -> URL, this node included; empty for a single node.
    pub peers: BTreeMap<u64, String>,
    /// The secret peer RPCs carry, both ways ([`crate::config::secret`]).
    pub peer_secret: Option<crate::config::PeerSecret>,
    pub snapshot: snapshots::Settings,
    /// A test hook: a shutdown that stalls this long before it syncs its journals.
    pub shutdown_stall: Option<std::time::Duration>,
    /// A test hook: a committed append whose body holds these bytes panics as it applies.
    pub apply_panic_on: Option<std::sync::Arc<[u8]>>,
    /// The WAL disk's pressure, which a cluster node sheds its leaderships for.
    pub wal_disk_pressure: Option<balancer::DiskPressure>,
    /// The snapshot-store health gate, with a cold tier on S3: where its store will be given,
    /// and its settings. It ticks with the snapshot driver.
    pub store_gate: Option<(store_health::StoreHealth, store_health::Settings)>,
    /// With S3 snapshots: the snapshot namespace, and how often the node prunes the groups it
    /// leads.
    pub snapshot_store: Option<(Arc<SnapStore>, std::time::Duration)>,
    /// `[governance.leadership_balance]`.
    pub balance: crate::config::LeadershipBalance,
}

/// A started engine and the typed faces the node's planes call.
pub struct Started {
    pub engine: Arc<dyn GroupEngine>,
    /// What the cluster plane serves: peer RPCs and the leadership-shed state.
    pub peers: PeerService,
    /// What the admin plane's Raft routes call.
    pub operator: Operator,
}

fn raft_config(enable_elect: bool, backstop_logs: u64) -> Result<Arc<Config>, StartError> {
    let c = Config {
        enable_elect,
        heartbeat_interval: 250,
        election_timeout_min: 1500,
        election_timeout_max: 3000,
        // The driver (`snapdrive`) snapshots by log bytes; the entry count is only a backstop.
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(backstop_logs),
        // Entries kept past a snapshot let a follower a little behind catch up from the log;
        // they still count against the budget, so a few hundred, not thousands of large ones.
        max_in_snapshot_log_to_keep: 256,
        ..Config::default()
    };
    c.validate().map(Arc::new).map_err(|e| StartError::Group {
        group: 0,
        message: e.to_string(),
    })
}

/// What the WAL root and the journals held at start, read without changing anything.
struct Inspected {
    has_epoch: bool,
    has_topology: bool,
    locks: Vec<std::fs::File>,
    recorded: Result<BTreeMap<u32, GateRecord>, ()>,
    logs: Vec<LogData>,
    scans: Vec<wal::Recovered>,
    /// The groups to gate, with the reason to log.
    gated: BTreeMap<u32, &'static str>,
    /// How the WAL opened, for the metrics.
    opening: wal_metrics::Opening,
}

/// Step 1: the root's checks, the journals read, the gate decision.
fn inspect(rt: &Runtime, root: &Root) -> Result<Inspected, StartError> {
    let (cores, groups) = (rt.core_count() as u32, rt.group_count());
    let holds_data = root.holds_data()?;
    let has_epoch = root.check_epoch(holds_data)?;
    let has_topology = root.check_topology(holds_data || has_epoch, cores, groups)?;
    let locks = root.lock_cores(rt.core_count())?;
    let previous = root.previous_run()?;
    let recorded = root.read_gates()?;
    let mut logs: Vec<LogData> = (0..groups).map(|_| LogData::default()).collect();
    let mut scans = Vec::new();
    let mut damaged = BTreeSet::new();
    let mut work = Vec::new();
    for core in 0..rt.core_count() {
        let started = std::time::Instant::now();
        let mut r = wal::scan(&root.core_dir(core))?;
        let mut w = ScanWork {
            records: r.records.len() as u64,
            bytes: r.bytes,
            ..ScanWork::default()
        };
        let mut by_group = wal::by_group(std::mem::take(&mut r.records));
        for group in (0..groups).filter(|g| rt.core_of(*g) == core) {
            let records = by_group.remove(&group).unwrap_or_default();
            let data = LogData::recover(&records).map_err(|e| StartError::Recover {
                core,
                message: e.to_string(),
            })?;
            w.live_entries += data.entries.len() as u64;
            logs[group as usize] = data;
            if r.damaged_tail {
                damaged.insert(group);
            }
        }
        w.ns = started.elapsed().as_nanos() as u64;
        work.push(w);
        scans.push(r);
    }
    let held: BTreeSet<u32> = (0..groups).filter(|g| logs[*g as usize].holds()).collect();
    let recorded_groups = recorded
        .as_ref()
        .ok()
        .map(|r| r.keys().copied().collect::<BTreeSet<u32>>());
    let boot_id = files::boot_id();
    let gated = gates::decide(&gates::Evidence {
        previous: &previous,
        boot_id: boot_id.as_deref(),
        held: &held,
        damaged: &damaged,
        recorded: recorded_groups.as_ref(),
    });
    let recovery = ursula_protocol::metrics::WalRecovery {
        previous_run: wal_metrics::previous_run(&previous, boot_id.as_deref(), !held.is_empty())
            .to_owned(),
        recovering: !gated.is_empty(),
        gated_groups: gated.keys().copied().collect(),
        damaged_tail_cores: (0..scans.len() as u64)
            .filter(|c| scans[*c as usize].damaged_tail)
            .collect(),
        cut_bytes: scans.iter().map(|r| r.torn_bytes).sum(),
    };
    Ok(Inspected {
        has_epoch,
        has_topology,
        locks,
        recorded,
        logs,
        scans,
        gated,
        opening: wal_metrics::Opening {
            recovery,
            scans: work,
        },
    })
}

/// What the start committed to disk.
struct Committed {
    logs: Vec<LogData>,
    gate_records: BTreeMap<u32, GateRecord>,
    opening: wal_metrics::Opening,
}

/// Step 3: every check passed, so the node writes: markers, the gate record, cut tails, and
/// the run marked `running`.
fn commit(
    rt: &Runtime,
    root: &Root,
    opts: &RaftOptions,
    i: Inspected,
) -> Result<(Committed, Vec<std::fs::File>), StartError> {
    let (cores, groups) = (rt.core_count() as u32, rt.group_count());
    root.write_markers(cores, groups, i.has_topology, i.has_epoch)?;
    std::fs::create_dir_all(&root.snap_dir).map_err(|e| {
        StartError::Wal(wal::WalError::Io {
            path: root.snap_dir.clone(),
            source: e,
        })
    })?;
    // A gate recorded closed keeps what it knew of a lost vote and its floor.
    let gate_records: BTreeMap<u32, GateRecord> = i
        .gated
        .keys()
        .map(|g| {
            let r = i.recorded.as_ref().ok().and_then(|r| r.get(g)).copied();
            (*g, r.unwrap_or_default())
        })
        .collect();
    if i.recorded.as_ref().ok() != Some(&gate_records) {
        root.write_gates(&gate_records)?;
    }
    for (group, why) in &i.gated {
        let r = gate_records.get(group).copied().unwrap_or_default();
        let floor = r.floor.map(|f| f.to_string());
        tracing::warn!(
            group,
            reason = why,
            lost_vote = r.wiped,
            vote_floor = floor.as_deref(),
            "recovery gate closed"
        );
    }
    // The damage was recorded as closed gates: now the frames after it can go.
    for (core, r) in i.scans.iter().enumerate() {
        if r.damaged_tail {
            tracing::warn!(
                core,
                cut_bytes = r.torn_bytes,
                "journal tail failed verification and was cut"
            );
        } else if r.torn_bytes > 0 {
            tracing::info!(
                core,
                cut_bytes = r.torn_bytes,
                "an incomplete final journal frame was cut"
            );
        }
        r.cut_tail()?;
    }
    root.record_running(opts.fsync_always)?;
    let mut logs = i.logs;
    for g in gate_records.keys() {
        // A replica that led the group must not resume as its leader on start: its log may
        // lack what it acknowledged. An uncommitted vote keeps the term but makes it campaign
        // like anyone else, once the gate opens. The new segment restates it.
        if let Some(v) = logs[*g as usize].vote.as_mut()
            && v.leader_id.voted_for() == Some(opts.node_id)
        {
            v.committed = false;
        }
    }
    let committed = Committed {
        logs,
        gate_records,
        opening: i.opening,
    };
    Ok((committed, i.locks))
}

/// Step 4: each core's journal, opening a new segment that restates its groups' state.
fn open_journals(
    rt: &Runtime,
    root: &Root,
    opts: &RaftOptions,
    logs: &mut [LogData],
) -> Result<Vec<wal::Journal>, StartError> {
    let mut journals = Vec::new();
    for core in 0..rt.core_count() {
        let mut restate = Vec::new();
        let mut recovered_max = HashMap::new();
        let mut frames = HashMap::new();
        for group in (0..rt.group_count()).filter(|g| rt.core_of(*g) == core) {
            let data = &mut logs[group as usize];
            frames.insert(group, std::mem::take(&mut data.frames));
            restate.extend(data.restate(group).map_err(|e| StartError::Recover {
                core,
                message: e.to_string(),
            })?);
            if let Some(last) = data.last_index() {
                recovered_max.insert(group, last);
            }
        }
        let fatal_root = root.clone();
        let fsync_always = opts.fsync_always;
        let wal_opts = wal::Options {
            fsync_always: opts.fsync_always,
            segment_size: opts.segment_size,
            on_fatal: Some(Arc::new(move || {
                if let Err(e) = fatal_root.record_io_error(fsync_always) {
                    tracing::error!(error = %e, "cannot record the journal I/O error in run-state.bin");
                }
            })),
        };
        let journal = wal::Journal::start(
            root.core_dir(core),
            wal_opts,
            restate,
            recovered_max,
            frames,
        )?;
        // The core's groups write this journal from its thread: its flusher runs there too.
        if let Some(handle) = rt.core_handle(core) {
            journal.hold_commit_points(handle);
        }
        journals.push(journal);
    }
    Ok(journals)
}

/// The groups started on their cores.
struct Groups {
    rafts: Vec<GroupRaft>,
    stores: Vec<LogStore>,
    /// Groups this replica held nothing of.
    fresh: BTreeSet<u32>,
}

/// What every group's Raft is built with.
struct GroupParts<'a> {
    journals: &'a [wal::Journal],
    gated: &'a BTreeSet<u32>,
    peers: &'a Peers,
    log_bytes: &'a Arc<NodeLog>,
    snap_stats: &'a Arc<SnapStats>,
}

/// Step 5: each group's Raft, created on its core so its tasks (and its state machine's
/// calls) run there, next to the group's streams.
async fn spawn_groups(
    rt: &Runtime,
    root: &Root,
    opts: &RaftOptions,
    mut logs: Vec<LogData>,
    parts: GroupParts<'_>,
) -> Result<Groups, StartError> {
    let GroupParts {
        journals,
        gated,
        peers,
        log_bytes,
        snap_stats,
    } = parts;
    let groups = rt.group_count();
    let backstop = opts.snapshot.backstop_logs;
    let config = raft_config(true, backstop)?;
    let gated_config = raft_config(false, backstop)?;
    let mut out = Groups {
        rafts: Vec::with_capacity(groups as usize),
        stores: Vec::with_capacity(groups as usize),
        fresh: BTreeSet::new(),
    };
    for group in 0..groups {
        let core = rt.core_of(group);
        let data = std::mem::take(&mut logs[group as usize]);
        if !data.holds() {
            out.fresh.insert(group);
        }
        let log = LogStore::new(
            group,
            journals[core].clone(),
            data,
            log_bytes.clone(),
            opts.cache_size / u64::from(groups.max(1)),
        );
        out.stores.push(log.clone());
        let config = if gated.contains(&group) {
            gated_config.clone()
        } else {
            config.clone()
        };
        let handle = rt
            .core_handle(core)
            .ok_or(StartError::Group {
                group,
                message: "no core".into(),
            })?
            .clone();
        let open = |log: LogStore, config: Arc<Config>| {
            let (snap_dir, node_id, rt2) = (root.snap_dir.clone(), opts.node_id, rt.clone());
            let snap_stats = snap_stats.clone();
            let snaps = opts.snapshot_store.as_ref().map(|(s, _)| s.clone());
            let panic_on = opts.apply_panic_on.clone();
            let net = Factory {
                peers: peers.clone(),
                group,
            };
            let task = handle.spawn(async move {
                let sm = StateMachine::open(rt2, group, snap_dir, snap_stats, snaps)
                    .await
                    .map_err(|e| e.to_string())?
                    .with_apply_panic_on(panic_on);
                Raft::new(node_id, config, net, log, sm)
                    .await
                    .map_err(|e| e.to_string())
            });
            async move {
                task.await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r)
                    .map_err(|message| StartError::Group { group, message })
            }
        };
        let raft = match open(log.clone(), config).await {
            Ok(raft) => raft,
            // A committed entry failed to apply as the log was replayed: the group stays
            // stopped and the node starts its other groups. Its Raft starts without replaying
            // (so it does not fail the same way here) and without campaigning; it stops at
            // the same entry once it learns the commit index, and holds its log meanwhile.
            Err(e) if rt.apply_stop(group).is_some() => {
                tracing::error!(group, error = %e, "the group stopped at start: a committed entry failed to apply as the log was replayed");
                log.forget_committed();
                open(log, gated_config.clone()).await?
            }
            Err(e) => return Err(e),
        };
        // A single node has nobody to ask: an empty group is new.
        if opts.peers.is_empty() && out.fresh.contains(&group) {
            let members = BTreeMap::from([(opts.node_id, BasicNode::default())]);
            if let Err(e) = raft.initialize(members).await {
                tracing::debug!(group, error = %e, "group already initialized");
            }
        }
        out.rafts.push(raft);
    }
    Ok(out)
}

/// Checks the WAL root, recovers every core's journal, decides the recovery gates and starts
/// every group on its core. Every refusal comes before the first write.
pub async fn start(rt: &Runtime, opts: RaftOptions) -> Result<Started, StartError> {
    let root = Root::new(&opts.dir);
    let inspected = inspect(rt, &root)?;
    if !opts.peers.is_empty() {
        protocol::probe_peers(opts.node_id, &opts.peers)
            .await
            .map_err(StartError::Protocol)?;
    }
    let (mut committed, locks) = commit(rt, &root, &opts, inspected)?;
    let journals = open_journals(rt, &root, &opts, &mut committed.logs)?;
    let gated: BTreeSet<u32> = committed.gate_records.keys().copied().collect();
    let peers = Peers::new(
        opts.peers.clone(),
        opts.node_id,
        rt.group_count(),
        opts.peer_secret.clone(),
    );
    let shed = Shed::load(Some(root.clone())).map_err(StartError::Files)?;
    let log_bytes = Arc::new(NodeLog::default());
    let snap_stats = Arc::new(SnapStats::new(rt.group_count()));
    let parts = GroupParts {
        journals: &journals,
        gated: &gated,
        peers: &peers,
        log_bytes: &log_bytes,
        snap_stats: &snap_stats,
    };
    let groups = spawn_groups(rt, &root, &opts, committed.logs, parts).await?;
    let holds = Arc::new(WriteHolds::new(rt.group_count()));
    let batcher = Batcher::new(
        groups.rafts.len(),
        peers.urls.clone(),
        holds.clone(),
        rt.clone(),
    );
    let node = Arc::new(Replicas::new(Parts {
        node_id: opts.node_id,
        rafts: groups.rafts,
        logs: groups.stores,
        peers,
        gates: Gates::new(root.clone(), &committed.gate_records),
        vote_hold: if opts.peers.is_empty() {
            VoteHold::default()
        } else {
            VoteHold::new(&groups.fresh)
        },
        log_bytes,
        builds: Builds::new(opts.snapshot.max_concurrency, snap_stats.clone()),
        snap_stats,
        snaps: opts.snapshot_store.as_ref().map(|(s, _)| s.clone()),
        shed,
        holds,
        peer_timeout: opts.balance.peer_timeout,
        rt: rt.clone(),
    }));
    for group in &gated {
        node.spawn_on_core(*group, gate_watch::watch(Arc::downgrade(&node), *group));
    }
    if node.shed.sheds() {
        tracing::warn!(
            "this node is drained (the maintenance mark is recorded): it takes no leadership until DELETE /__ursula/leadership-shed/maintenance"
        );
        for r in node.rafts() {
            r.runtime_config().elect(false);
        }
    }
    if !opts.peers.is_empty() {
        tokio::spawn(voter_keeper::keep(Arc::downgrade(&node)));
        tokio::spawn(egress::run(Arc::downgrade(&node)));
        tokio::spawn(balancer::balance(
            Arc::downgrade(&node),
            opts.wal_disk_pressure.clone(),
        ));
        if opts.balance.max_per_tick > 0 {
            tokio::spawn(fair_share::run(Arc::downgrade(&node), opts.balance));
        }
    }
    if !opts.snapshot.interval.is_zero() {
        tokio::spawn(snapshots::run(Arc::downgrade(&node), opts.snapshot));
        if let Some((health, settings)) = opts.store_gate.clone() {
            tokio::spawn(store_health::run(
                Arc::downgrade(&node),
                health,
                settings,
                opts.snapshot.interval,
                !opts.peers.is_empty(),
            ));
        }
    }
    if let Some((snaps, every)) = &opts.snapshot_store {
        tokio::spawn(snapshot_prune::run(
            Arc::downgrade(&node),
            snaps.clone(),
            *every,
        ));
    }
    if !opts.peers.is_empty() && !groups.fresh.is_empty() {
        tokio::spawn(bootstrap::run(Arc::downgrade(&node), groups.fresh));
    }
    let engine = RaftEngine::new(EngineParts {
        node: node.clone(),
        batcher,
        journals,
        root,
        fsync_always: opts.fsync_always,
        shutdown_stall: opts.shutdown_stall,
        locks,
        opening: committed.opening,
    });
    Ok(Started {
        engine: Arc::new(engine),
        peers: PeerService::new(node.clone()),
        operator: Operator::new(node),
    })
}
