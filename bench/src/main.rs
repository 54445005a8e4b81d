//! `ursula-bench`: drives a Durable Streams server on loopback and reports throughput, latency
//! and memory; `scripts/bench.sh` runs it against ursula and the reference server and writes
//! `docs/benchmarks.md`.
//!
//! - `ursula-bench load --base URL --server NAME --pid PID --out FILE`: the load scenarios.
//! - `ursula-bench idle --base URL --server NAME --pid PID --out FILE`: memory per idle stream
//!   (run it against a freshly started server).
//! - `ursula-bench report --ursula-load F --ursula-idle F --reference-load F --reference-idle F
//!   --out docs/benchmarks.md`: the markdown report (each flag repeats once per round).
//!
//! - `scripts/bench-speed.sh` uses `ceiling` (a hyper server answering `204`),
//!   `setup`, `point`, `oha` (converts an oha JSON report), `max`, `idle-sse` and
//!   `speed-report`.
//!
//! Modules: [`http`] (the HTTP/1.1 client), [`load`] (closed-loop load), [`openloop`]
//! (fixed offered rate), [`sse`] (fan-out), [`idle_sse`] (memory per held subscriber), [`scenarios`] (what `load` measures), [`point`]
//! (one measured point of the speed run), [`ceiling`] (the hyper `204` server), [`report`] and
//! [`speed`] (markdown), [`doc`] (their sections put into `docs/benchmarks.md`), [`procfs`]
//! (RSS and CPU time).

mod ceiling;
mod doc;
mod http;
mod idle_sse;
mod load;
mod openloop;
mod point;
mod procfs;
mod report;
mod scenarios;
mod speed;
mod sse;

use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use clap::Parser;
use clap::Subcommand;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Parser)]
#[command(
    name = "ursula-bench",
    about = "Load generator for Durable Streams servers on loopback"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the load scenarios against one server and write their results as JSON.
    Load(LoadArgs),
    /// Create many small streams on a fresh server and measure its RSS growth.
    Idle(IdleArgs),
    /// Build the markdown report from the four result files.
    Report(ReportArgs),
    /// Wait until the machine is idle (other processes would distort a measurement).
    WaitQuiet(QuietArgs),
    /// Serve `204 No Content` to every request with hyper: the machine's ceiling.
    Ceiling(CeilingArgs),
    /// Create a set of streams for `point` and oha (`n{N}-{i}`); prints oha's URL or regex.
    Setup(SetupArgs),
    /// Measure one point (closed loop, or a fixed rate with `--rate`) and append it as a JSON line.
    Point(PointArgs),
    /// Convert oha's JSON report into a point and append it.
    Oha(OhaArgs),
    /// Print the rate of a closed-loop point of one round (to derive fixed rates from).
    Max(MaxArgs),
    /// Hold many idle SSE subscribers on a fresh server and measure its RSS growth.
    IdleSse(IdleSseArgs),
    /// Write the speed section of docs/benchmarks.md from the points.
    SpeedReport(SpeedReportArgs),
}

#[derive(Debug, Args)]
struct IdleSseArgs {
    #[arg(long)]
    base: String,
    /// Server process id (the measurement is its RSS).
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 10_000)]
    subscribers: usize,
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 1000)]
    settle_ms: u64,
}

#[derive(Debug, Args)]
struct CeilingArgs {
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Tokio worker threads (the runtime's default is one per core).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Debug, Args)]
struct SetupArgs {
    #[arg(long)]
    base: String,
    #[arg(long)]
    streams: usize,
    #[arg(long, default_value_t = 32)]
    connections: usize,
}

/// Where a point was taken.
#[derive(Debug, Args)]
struct PointWhere {
    /// Name of the server in the results (hyper-204, ursula-memory, ursula-never).
    #[arg(long)]
    target: String,
    #[arg(long)]
    streams: usize,
    #[arg(long)]
    connections: usize,
    /// Offered requests per second (open loop); closed loop without it.
    #[arg(long)]
    rate: Option<f64>,
    #[arg(long, default_value_t = 1)]
    round: u32,
    /// The JSON-lines file the point is appended to.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct PointArgs {
    #[arg(long)]
    base: String,
    #[command(flatten)]
    at: PointWhere,
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

#[derive(Debug, Args)]
struct OhaArgs {
    /// oha's `--output-format json` report.
    #[arg(long)]
    file: PathBuf,
    #[command(flatten)]
    at: PointWhere,
}

#[derive(Debug, Args)]
struct MaxArgs {
    #[arg(long)]
    points: PathBuf,
    #[arg(long)]
    target: String,
    #[arg(long)]
    round: u32,
    #[arg(long, default_value = "ursula-bench")]
    client: String,
    #[arg(long, default_value_t = 1)]
    streams: usize,
    #[arg(long, default_value_t = 32)]
    connections: usize,
}

#[derive(Debug, Args)]
struct SpeedReportArgs {
    #[arg(long)]
    points: PathBuf,
    /// An `idle` result (memory per idle stream), if measured.
    #[arg(long)]
    idle: Option<PathBuf>,
    /// An `idle-sse` result (memory per held SSE subscriber), if measured.
    #[arg(long)]
    idle_sse: Option<PathBuf>,
    /// `load --only sse-fanout` results, one per round.
    #[arg(long)]
    fanout: Vec<PathBuf>,
    /// The same fan-out against `ursula-bench ceiling`, one per round.
    #[arg(long)]
    fanout_ceiling: Vec<PathBuf>,
    #[arg(long, default_value = "")]
    date: String,
    #[arg(long, default_value = "")]
    machine: String,
    #[arg(long, default_value = "")]
    build: String,
    #[arg(long, default_value = "scripts/bench-speed.sh")]
    command: String,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    #[arg(long, default_value_t = 6.0)]
    seconds: f64,
    /// The markdown file whose speed section is replaced (also printed to stdout).
    #[arg(long)]
    doc: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct QuietArgs {
    /// Busy cores below which the machine counts as quiet.
    #[arg(long, default_value_t = procfs::DISTURBED_CORES)]
    threshold: f64,
    /// Give up (with a warning, exit status 0) after this many seconds.
    #[arg(long, default_value_t = 120)]
    max_wait: u64,
}

#[derive(Debug, Args)]
struct Common {
    /// Server root, e.g. http://127.0.0.1:4437 (loopback only).
    #[arg(long)]
    base: String,
    /// Name of the server in the results (ursula, reference).
    #[arg(long)]
    server: String,
    /// Where to write the JSON results.
    #[arg(long)]
    out: PathBuf,
    /// Tokio worker threads of the client.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

#[derive(Debug, Args)]
struct LoadArgs {
    #[command(flatten)]
    common: Common,
    /// Server process id, for peak RSS (VmHWM) and CPU time.
    #[arg(long)]
    pid: Option<u32>,
    /// Measured seconds per scenario.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Warm-up seconds before each closed-loop scenario.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    #[arg(long, default_value_t = 1000)]
    sse_subscribers: usize,
    /// Appends per second during the SSE fan-out.
    #[arg(long, default_value_t = 20.0)]
    sse_rate: f64,
    /// Comma-separated scenario keys to run (append-1-c1, append-1-c32, append-1000-c1,
    /// append-1000-c32, catchup-c1, catchup-c32, sse-fanout); default all.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

#[derive(Debug, Args)]
struct IdleArgs {
    #[command(flatten)]
    common: Common,
    /// Server process id (required: the measurement is its RSS).
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 100_000)]
    streams: usize,
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Pause before each RSS reading, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    settle_ms: u64,
}

/// Each result flag may repeat, once per round; every scenario shows its median round.
#[derive(Debug, Args)]
struct ReportArgs {
    #[arg(long, required = true)]
    ursula_load: Vec<PathBuf>,
    #[arg(long, required = true)]
    ursula_idle: Vec<PathBuf>,
    #[arg(long, required = true)]
    reference_load: Vec<PathBuf>,
    #[arg(long, required = true)]
    reference_idle: Vec<PathBuf>,
    #[arg(long, default_value = "")]
    date: String,
    #[arg(long, default_value = "")]
    machine: String,
    #[arg(long, default_value = "scripts/bench.sh")]
    command: String,
    /// Which builds and versions were measured.
    #[arg(long, default_value = "")]
    servers: String,
    /// The markdown file to write the report into (also printed to stdout): its own sections
    /// are replaced, every other section of the file is kept.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ursula-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime, BoxError> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?)
}

/// The median round of `load --only sse-fanout` results; `None` when there are none.
fn median_fanout(files: &[PathBuf]) -> Result<Option<report::Scenario>, BoxError> {
    if files.is_empty() {
        return Ok(None);
    }
    let runs = files
        .iter()
        .map(|f| read_json(f))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(report::merge_load(runs)
        .and_then(|r| r.scenarios.into_iter().find(|s| s.key == "sse-fanout")))
}

fn secs(s: f64) -> Result<Duration, BoxError> {
    Duration::try_from_secs_f64(s).map_err(|e| format!("bad duration {s}: {e}").into())
}

fn run(command: Command) -> Result<(), BoxError> {
    match command {
        Command::Load(a) => {
            let target = http::Target::parse(&a.common.base)?;
            let cfg = scenarios::LoadConfig {
                warmup: secs(a.warmup)?,
                duration: secs(a.duration)?,
                sse_subscribers: a.sse_subscribers,
                sse_rate: a.sse_rate,
                only: a.only,
            };
            let pid = a.pid;
            let scenarios =
                runtime(a.common.threads)?.block_on(scenarios::run_load(&target, pid, &cfg))?;
            let result = report::LoadRun {
                server: a.common.server,
                scenarios,
                peak_rss_kib: pid.and_then(|p| procfs::status_kib(p, "VmHWM")),
                warmup_s: a.warmup,
                duration_s: a.duration,
                client_threads: a.common.threads,
                rounds: 1,
            };
            write_json(&a.common.out, &result)
        }
        Command::Idle(a) => {
            let target = http::Target::parse(&a.common.base)?;
            let settle = Duration::from_millis(a.settle_ms);
            let result = runtime(a.common.threads)?.block_on(scenarios::run_idle(
                &target,
                a.pid,
                &a.common.server,
                a.streams,
                a.connections,
                settle,
            ))?;
            write_json(&a.common.out, &result)
        }
        Command::WaitQuiet(a) => {
            procfs::wait_quiet(a.threshold, Duration::from_secs(a.max_wait));
            Ok(())
        }
        Command::Ceiling(a) => {
            let rt = match a.threads {
                Some(n) => runtime(n)?,
                None => tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()?,
            };
            rt.block_on(ceiling::serve(a.listen))
        }
        Command::Setup(a) => {
            let target = http::Target::parse(&a.base)?;
            let secs = runtime(2)?.block_on(point::setup(&target, a.streams, a.connections))?;
            eprintln!("ursula-bench: {} streams set up in {secs:.1} s", a.streams);
            // What oha is pointed at, for the script.
            println!("{}", point::oha_url(&a.base, a.streams));
            Ok(())
        }
        Command::Point(a) => {
            let target = http::Target::parse(&a.base)?;
            let plan = point::Plan {
                streams: a.at.streams,
                connections: a.at.connections,
                rate: a.at.rate,
                warmup: secs(a.warmup)?,
                duration: secs(a.duration)?,
            };
            let outcome = runtime(a.threads)?.block_on(point::measure(&target, &plan))?;
            let p = point::from_outcome(&a.at.target, &plan, a.at.round, &outcome)?;
            eprintln!("{}", p.summary());
            point::append(&a.at.out, &p)
        }
        Command::Oha(a) => {
            let json = std::fs::read_to_string(&a.file)
                .map_err(|e| format!("cannot read {}: {e}", a.file.display()))?;
            let meta = point::OhaMeta {
                target: a.at.target.clone(),
                streams: a.at.streams,
                connections: a.at.connections,
                rate: a.at.rate,
                round: a.at.round,
            };
            let p = point::from_oha(&json, &meta)?;
            eprintln!("{}", p.summary());
            point::append(&a.at.out, &p)
        }
        Command::Max(a) => {
            let points = point::read_all(&a.points)?;
            let p = points
                .iter()
                .find(|p| {
                    p.target == a.target
                        && p.round == a.round
                        && p.client == a.client
                        && p.streams == a.streams
                        && p.connections == a.connections
                        && p.offered.is_none()
                })
                .ok_or("no such closed-loop point")?;
            println!("{:.0}", p.rate);
            Ok(())
        }
        Command::IdleSse(a) => {
            let target = http::Target::parse(&a.base)?;
            let settle = Duration::from_millis(a.settle_ms);
            let result =
                runtime(2)?.block_on(idle_sse::run(&target, a.pid, a.subscribers, settle))?;
            write_json(&a.out, &result)
        }
        Command::SpeedReport(a) => {
            let points = point::read_all(&a.points)?;
            let idle: Option<report::IdleRun> = match &a.idle {
                Some(f) => Some(read_json(f)?),
                None => None,
            };
            let idle_sse: Option<idle_sse::IdleSse> = match &a.idle_sse {
                Some(f) => Some(read_json(f)?),
                None => None,
            };
            let fanout = median_fanout(&a.fanout)?;
            let fanout_ceiling = median_fanout(&a.fanout_ceiling)?;
            let ctx = speed::Context {
                date: a.date,
                machine: a.machine,
                build: a.build,
                command: a.command,
                rounds: a.rounds,
                seconds: a.seconds,
            };
            let md = speed::markdown(
                &ctx,
                &points,
                idle.as_ref(),
                idle_sse.as_ref(),
                fanout.as_ref(),
                fanout_ceiling.as_ref(),
            );
            if let Some(doc) = &a.doc {
                let old = std::fs::read_to_string(doc).unwrap_or_default();
                std::fs::write(doc, doc::splice(&old, &md))
                    .map_err(|e| format!("cannot write {}: {e}", doc.display()))?;
            }
            print!("{md}");
            Ok(())
        }
        Command::Report(a) => {
            let ctx = report::Context {
                date: a.date,
                machine: a.machine,
                command: a.command,
                servers: a.servers,
            };
            let load = |files: &[PathBuf]| -> Result<report::LoadRun, BoxError> {
                let runs = files
                    .iter()
                    .map(|f| read_json(f))
                    .collect::<Result<Vec<_>, _>>()?;
                report::merge_load(runs).ok_or_else(|| "no load results".into())
            };
            let idle = |files: &[PathBuf]| -> Result<report::IdleRun, BoxError> {
                let runs = files
                    .iter()
                    .map(|f| read_json(f))
                    .collect::<Result<Vec<_>, _>>()?;
                report::merge_idle(runs).ok_or_else(|| "no idle results".into())
            };
            let md = report::markdown(
                &ctx,
                &load(&a.ursula_load)?,
                &load(&a.reference_load)?,
                &idle(&a.ursula_idle)?,
                &idle(&a.reference_idle)?,
            );
            if let Some(out) = &a.out {
                // Sections other scripts write, and hand-written ones, stay as they are.
                let old = std::fs::read_to_string(out).ok();
                std::fs::write(out, doc::rewrite(old.as_deref(), &md))
                    .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
            }
            print!("{md}");
            Ok(())
        }
    }
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), BoxError> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()).into())
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, BoxError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?)
}
