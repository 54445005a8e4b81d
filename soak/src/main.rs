//! `ursula-soak [--preset short|month] [--seed N] [--keep]`: runs the soak and prints its
//! report in Markdown (docs/cold-tier.md, "The month-in-an-hour soak"). Exits 1 when a byte
//! read back differs, a purged stream still answers, or a stream's replicated state passes
//! 32 KiB.

use clap::Parser;
use ursula_soak::cluster::SoakCluster;
use ursula_soak::run;
use ursula_soak::spec::Spec;

#[derive(Parser)]
struct Args {
    /// `short` (about a minute) or `month` (about an hour on two cores).
    #[arg(long, default_value = "short")]
    preset: String,
    #[arg(long)]
    seed: Option<u64>,
}

/// The spec's bound on one stream's replicated state, beyond its unflushed bytes.
const STATE_BOUND: u64 = 32 << 10;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let Some(mut spec) = Spec::preset(&args.preset) else {
        eprintln!("unknown preset {:?}: short or month", args.preset);
        return std::process::ExitCode::from(2);
    };
    if let Some(seed) = args.seed {
        spec.seed = seed;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start a runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let dir = ursula_testkit::scratch::Scratch::new("soak");
    let mut cluster = rt.block_on(SoakCluster::start(dir, spec.log_budget));
    println!("{}", run::header_rows());
    let report = match run::run(&spec, &mut cluster, &rt) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("the soak stopped: {e}");
            cluster.dir.keep();
            return std::process::ExitCode::FAILURE;
        }
    };
    for r in &report.rounds {
        println!("{}", run::row(r));
    }
    let state_max = report.state_max();
    println!(
        "\n{} streams; {:.1} MiB read back and compared; {} purged streams checked gone; {} retention moves refused; {} requests sent again; largest stream state {state_max} B; mismatches: {}",
        report.streams,
        report.verified_bytes as f64 / (1 << 20) as f64,
        report.purged_checked,
        report.refused_retention,
        report.resent,
        report.mismatches.len()
    );
    for m in report.mismatches.iter().take(20) {
        println!("- {m}");
    }
    if !report.mismatches.is_empty() || state_max > STATE_BOUND {
        cluster.dir.keep();
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
