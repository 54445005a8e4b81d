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
//! Modules: [`http`] (the HTTP/1.1 client), [`load`] (closed-loop load), [`sse`] (fan-out),
//! [`scenarios`] (what is measured), [`report`] (result files and markdown), [`procfs`] (RSS
//! and CPU time).

mod http;
mod load;
mod procfs;
mod report;
mod scenarios;
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
    /// Where to write the markdown (also printed to stdout).
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
                std::fs::write(out, &md)
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
