//! One schedule, end to end, inside the clients' namespace: start the cluster, create the
//! stream, start the clients, apply the schedule step by step, heal, stop the clients, read
//! the final log from the leader, and check the history.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use serde::Serialize;
use thiserror::Error;
use ursula_cold::testing::SeaweedFs;

use crate::checker;
use crate::client;
use crate::cluster;
use crate::cluster::Cluster;
use crate::cluster::ClusterError;
use crate::converge;
use crate::history::History;
use crate::history::Outcome;
use crate::history::ReadKind;
use crate::nemesis;
use crate::nemesis::Applied;
use crate::nemesis::Schedule;
use crate::net::Cuts;
use crate::sqlite;
use crate::workload;

/// The stream every run works on.
pub const PATH: &str = "/chaos/log";

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Sqlite(#[from] sqlite::SqliteError),
    #[error("{0}")]
    Stuck(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("a client thread panicked")]
    Client,
}

/// What a run is made of.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub seed: u64,
    pub nodes: usize,
    pub fsync: String,
    pub steps: usize,
    pub ursula: PathBuf,
    /// Where this run's configs, logs, history and report go.
    pub dir: PathBuf,
    /// The SQLite client (`chaos-sqlite` of ursula-vfs-tests), if the run has one.
    pub sqlite: Option<PathBuf>,
}

/// What a run found.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub seed: u64,
    pub nodes: usize,
    pub fsync: String,
    pub schedule: Schedule,
    pub applied: Vec<Applied>,
    pub acked: usize,
    pub not_applied: usize,
    pub unknown: usize,
    pub reads: usize,
    /// Reads by path: catch-up, `consistency=leader`, long-poll, SSE.
    pub reads_by_kind: [usize; 4],
    /// Reads refused with `416` (each checked against the final log).
    pub refused_416: usize,
    pub final_records: usize,
    pub anomalies: Vec<String>,
    /// The SQLite client's own report (`sqlite.json`), if the run had one.
    pub sqlite: Option<serde_json::Value>,
    /// Answers that were neither success nor an expected refusal.
    pub odd: Vec<String>,
    /// Seconds from the final read to a settled cluster (`converge`); `None` when it did not
    /// settle within the bound, which is an anomaly.
    pub settled_s: Option<f64>,
    pub seconds: u64,
}

/// A SeaweedFS on the clients' address, which every node reaches over the bridge.
fn start_s3() -> Result<SeaweedFs, RunError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| RunError::Io {
            what: "a runtime for SeaweedFS's start".into(),
            source,
        })?;
    Ok(rt.block_on(SeaweedFs::start_on(crate::net::CLIENT_ADDR)))
}

pub fn run_one(cfg: &RunConfig) -> Result<RunReport, RunError> {
    let began = Instant::now();
    let schedule = Schedule::generate(cfg.seed, cfg.nodes, cfg.steps);
    std::fs::create_dir_all(&cfg.dir).map_err(|source| RunError::Io {
        what: format!("create {}", cfg.dir.display()),
        source,
    })?;
    // Kept until the run ends: the nodes' cold tier, when a step cuts one off from it.
    let weed = if schedule.uses_s3() {
        Some(start_s3()?)
    } else {
        None
    };
    let shape = cluster::Shape {
        nodes: cfg.nodes,
        fsync: cfg.fsync.clone(),
        small_disks: schedule.fills_disks(),
        s3: weed.as_ref().map(|w| cluster::S3 {
            endpoint: w.endpoint(),
            port: w.s3_port(),
        }),
    };
    let mut cluster = Cluster::start(&cfg.ursula, &cfg.dir, &shape)?;
    let cuts = Cuts { nodes: cfg.nodes };
    let bases = cluster.bases();
    create_stream(&bases)?;

    let setup = workload::Setup {
        nodes: bases.clone(),
        gateway: cluster::gateway_base(),
        path: PATH.to_owned(),
        start: Instant::now(),
        stop: Arc::new(AtomicBool::new(false)),
        seed: cfg.seed,
        seen: Arc::new(AtomicU64::new(0)),
    };
    let sqlite = match &cfg.sqlite {
        Some(bin) => Some(sqlite::Client::start(bin, &cfg.dir)?),
        None => None,
    };
    let handles = workload::spawn_all(&setup);
    let mut applied = Vec::new();
    let mut note = |what: String| {
        tracing::info!(seed = cfg.seed, "{what}");
        applied.push(Applied {
            at_ms: setup.start.elapsed().as_millis() as u64,
            what,
        });
    };
    std::thread::sleep(Duration::from_secs(2));
    let mut failure = None;
    for step in &schedule.steps {
        match nemesis::apply(&mut cluster, cuts, PATH, step) {
            Ok(done) => done.into_iter().for_each(&mut note),
            Err(e) => failure = Some(e),
        }
        std::thread::sleep(step.hold);
        match nemesis::heal(&mut cluster, cuts) {
            Ok(done) => {
                note("heal".into());
                done.into_iter().for_each(&mut note);
            }
            Err(e) => failure = Some(e),
        }
        if failure.is_some() {
            break;
        }
        std::thread::sleep(step.recover);
    }
    setup.stop.store(true, Ordering::SeqCst);
    let mut history = History::default();
    let mut odd = Vec::new();
    for h in handles {
        let rec = h.join().map_err(|_| RunError::Client)?;
        history.appends.extend(rec.appends);
        history.reads.extend(rec.reads);
        history.refused.extend(rec.refused);
        odd.extend(rec.odd);
    }
    if let Some(e) = failure {
        return Err(e.into());
    }
    history.final_log = final_log(&bases)?;
    let settled = converge::wait(&bases);
    let sqlite = match sqlite {
        Some(c) => Some(c.finish()?),
        None => None,
    };
    let path = cfg.dir.join("history.json");
    if let Ok(text) = serde_json::to_vec(&history) {
        let _ = std::fs::write(&path, text);
    }
    let checked = checker::check(&history);
    let count = |o: Outcome| history.appends.iter().filter(|a| a.outcome == o).count();
    let report = RunReport {
        seed: cfg.seed,
        nodes: cfg.nodes,
        fsync: cfg.fsync.clone(),
        schedule,
        applied,
        acked: count(Outcome::Acked),
        not_applied: count(Outcome::NotApplied),
        unknown: count(Outcome::Unknown),
        reads: history.reads.len(),
        reads_by_kind: [
            ReadKind::Catchup,
            ReadKind::Leader,
            ReadKind::LongPoll,
            ReadKind::Sse,
        ]
        .map(|k| history.reads.iter().filter(|r| r.kind == k).count()),
        refused_416: history.refused.len(),
        final_records: crate::history::records(&history.final_log).len(),
        anomalies: checked
            .anomalies
            .iter()
            .map(ToString::to_string)
            .chain(
                sqlite
                    .iter()
                    .flat_map(|s| s.anomalies.iter().map(|a| format!("sqlite: {a}"))),
            )
            .chain(settled.as_ref().err().cloned())
            .collect(),
        sqlite: sqlite.map(|s| s.report),
        odd,
        settled_s: settled.ok(),
        seconds: began.elapsed().as_secs(),
    };
    if let Ok(text) = serde_json::to_vec_pretty(&report) {
        let _ = std::fs::write(cfg.dir.join("report.json"), text);
    }
    drop(cluster);
    if report.anomalies.is_empty() {
        remove_bulk(&cfg.dir, cfg.nodes);
    }
    Ok(report)
}

/// Removes a clean run's WAL directories and history (its logs and report stay).
fn remove_bulk(dir: &Path, nodes: usize) {
    for i in 1..=nodes {
        let _ = std::fs::remove_dir_all(dir.join(format!("n{i}")).join("wal"));
    }
    let _ = std::fs::remove_file(dir.join("history.json"));
}

fn create_stream(bases: &[String]) -> Result<(), RunError> {
    let agent = client::agent(Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    while Instant::now() < deadline {
        let url = format!("{}{PATH}", bases[i % bases.len()]);
        let headers = [("content-type", workload::CONTENT_TYPE)];
        if client::send(&agent, "PUT", &url, &headers, b"")
            .is_some_and(|a| a.status == 200 || a.status == 201)
        {
            return Ok(());
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(RunError::Stuck(
        "no leader took the create within 60 s".into(),
    ))
}

/// The whole stream, read with `consistency=leader` until an answer says it is up to date.
fn final_log(bases: &[String]) -> Result<String, RunError> {
    let agent = client::agent(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut out = Vec::new();
    let mut cursor = 0u64;
    let mut i = 0;
    while Instant::now() < deadline {
        let url = format!(
            "{}{PATH}?consistency=leader&offset={}",
            bases[i % bases.len()],
            client::offset(cursor)
        );
        match client::send(&agent, "GET", &url, &[], b"") {
            Some(a) if a.status == 200 => {
                let Some(next) = a.next_offset() else {
                    return Err(RunError::Stuck("a final read without an offset".into()));
                };
                out.extend_from_slice(&a.body);
                cursor = next;
                if a.up_to_date() {
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
            }
            _ => {
                i += 1;
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    }
    Err(RunError::Stuck(
        "the final log was not read up to date within 90 s of the last heal".into(),
    ))
}
