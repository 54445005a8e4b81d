//! `ursula-chaos`: runs seeded fault schedules against a real cluster and checks each history.
//!
//! `ursula-chaos run` (as root, in the root namespace) makes the hosts, then runs itself again
//! inside the clients' namespace (`inner`), which starts the cluster and does the runs; the
//! hosts are removed when it ends, however it ends. Exit code 0: every history clean; 1: an
//! anomaly (named in the table and in the run's `report.json`); 2: the harness failed.

use std::path::PathBuf;
use std::process::Command;
use std::process::ExitCode;

use clap::Args;
use clap::Parser;
use clap::Subcommand;

use ursula_chaos::net;
use ursula_chaos::run;

#[derive(Parser)]
#[command(
    name = "ursula-chaos",
    about = "Fault schedules against an ursula cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Make the hosts and run the schedules (needs root).
    Run(Opts),
    /// The runs themselves, inside the clients' namespace (started by `run`).
    #[command(hide = true)]
    Inner(Opts),
    /// Make the hosts and run the egress drill (needs root).
    EgressDrill(DrillOpts),
    /// The drill itself, inside the clients' namespace (started by `egress-drill`).
    #[command(hide = true)]
    InnerEgressDrill(DrillOpts),
}

#[derive(Args, Clone)]
struct DrillOpts {
    /// The `ursula` binary.
    #[arg(long)]
    ursula: PathBuf,
    /// Where the nodes' logs go.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args, Clone)]
struct Opts {
    /// The `ursula` binary.
    #[arg(long)]
    ursula: PathBuf,
    /// Voters in the cluster (3 or 5).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// `raft.wal.fsync` of every node: `always` or `never`.
    #[arg(long, default_value = "always")]
    fsync: String,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many schedules, seeds `seed`, `seed + 1`, ...
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Fault steps per schedule.
    #[arg(long, default_value_t = 3)]
    steps: usize,
    /// Where each run's logs, history and report go (`DIR/seed-N`).
    #[arg(long)]
    out: PathBuf,
    /// `chaos-sqlite` (built with ursula-vfs-tests): adds a SQLite owner and live follower.
    #[arg(long)]
    sqlite: Option<PathBuf>,
}

impl Opts {
    fn to_args(&self) -> Vec<String> {
        vec![
            "--ursula".into(),
            self.ursula.display().to_string(),
            "--nodes".into(),
            self.nodes.to_string(),
            "--fsync".into(),
            self.fsync.clone(),
            "--seed".into(),
            self.seed.to_string(),
            "--count".into(),
            self.count.to_string(),
            "--steps".into(),
            self.steps.to_string(),
            "--out".into(),
            self.out.display().to_string(),
        ]
        .into_iter()
        .chain(
            self.sqlite
                .iter()
                .flat_map(|s| ["--sqlite".to_owned(), s.display().to_string()]),
        )
        .collect()
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Cmd::Run(o) => outer(&o),
        Cmd::Inner(o) => inner(&o),
        Cmd::EgressDrill(o) => in_hosts(
            3,
            "inner-egress-drill",
            &[
                "--ursula".into(),
                o.ursula.display().to_string(),
                "--out".into(),
                o.out.display().to_string(),
            ],
        ),
        Cmd::InnerEgressDrill(o) => egress_drill(&o),
    }
}

fn egress_drill(o: &DrillOpts) -> ExitCode {
    match ursula_chaos::drill::egress(&o.ursula, &o.out, net::Cuts { nodes: 3 }) {
        Ok(r) => {
            println!("| drill | shed (s) | evacuated (s) | healed (s) | settled (s) |");
            println!("|---|---|---|---|---|");
            println!(
                "| egress cut of n3 | {:.1} | {:.1} | {:.1} | {:.1} |",
                r.shed_s, r.evacuated_s, r.healed_s, r.settled_s
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("egress drill failed: {e}");
            ExitCode::from(1)
        }
    }
}

fn outer(o: &Opts) -> ExitCode {
    if !(3..=5).contains(&o.nodes) {
        eprintln!("--nodes must be 3, 4 or 5");
        return ExitCode::from(2);
    }
    in_hosts(o.nodes, "inner", &o.to_args())
}

/// Makes the hosts of `nodes` nodes and runs this binary's `sub` with `args` in the clients'
/// namespace; its exit code.
fn in_hosts(nodes: usize, sub: &str, args: &[String]) -> ExitCode {
    let _net = match net::Net::setup(nodes) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("could not make the hosts: {e}");
            return ExitCode::from(2);
        }
    };
    let Ok(me) = std::env::current_exe() else {
        eprintln!("cannot find this binary");
        return ExitCode::from(2);
    };
    let status = Command::new("ip")
        .args(["netns", "exec", net::CLIENTS])
        .arg(me)
        .arg(sub)
        .args(args)
        .status();
    // `_net` drops here: every namespace, link and rule goes, with any process left in them.
    match status.map(|s| s.code()) {
        Ok(Some(c)) => ExitCode::from(c as u8),
        _ => ExitCode::from(2),
    }
}

fn inner(o: &Opts) -> ExitCode {
    let mut anomalies = 0usize;
    println!(
        "| seed | nodes | fsync | faults applied | acked | unknown | not applied | reads (catch-up/leader/long-poll/SSE; 416s) | records | SQLite commits acked/failed | anomalies | settled (s) | s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for seed in o.seed..o.seed + o.count {
        let cfg = run::RunConfig {
            seed,
            nodes: o.nodes,
            fsync: o.fsync.clone(),
            steps: o.steps,
            ursula: o.ursula.clone(),
            dir: o.out.join(format!("seed-{seed}")),
            sqlite: o.sqlite.clone(),
        };
        match run::run_one(&cfg) {
            Ok(r) => {
                let faults: Vec<&str> = r
                    .applied
                    .iter()
                    .map(|a| a.what.as_str())
                    .filter(|w| *w != "heal")
                    .collect();
                let sqlite = r.sqlite.as_ref().map_or("-".to_owned(), |s| {
                    format!("{}/{}", s["acked"], s["unknown"])
                });
                let [c, l, lp, sse] = r.reads_by_kind;
                let reads = format!("{} ({c}/{l}/{lp}/{sse}; {})", r.reads, r.refused_416);
                let settled = r.settled_s.map_or("-".to_owned(), |s| format!("{s:.1}"));
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.seed,
                    r.nodes,
                    r.fsync,
                    faults.join("; "),
                    r.acked,
                    r.unknown,
                    r.not_applied,
                    reads,
                    r.final_records,
                    sqlite,
                    r.anomalies.len(),
                    settled,
                    r.seconds
                );
                for a in &r.anomalies {
                    println!("  anomaly (seed {seed}): {a}");
                }
                anomalies += r.anomalies.len();
            }
            Err(e) => {
                eprintln!("seed {seed}: the run failed: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if anomalies == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
