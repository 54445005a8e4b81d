//! `ursulactl`: see the `ursula_ctl` library for the verbs and exit codes.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use ursula_ctl::cli::Cli;
use ursula_ctl::cli::Verb;
use ursula_ctl::manifest;
use ursula_ctl::observe;
use ursula_ctl::status;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Verb::Status {
            config,
            http_timeout_secs,
        } => {
            let manifest = match manifest::load(&config.config) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("ursulactl: {e}");
                    return ExitCode::from(1);
                }
            };
            let timeout = Duration::from_secs(http_timeout_secs.max(1));
            let observations = observe::observe_all(&manifest.nodes, timeout);
            let report = status::report(&observations);
            print!("{}", report.text);
            if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Verb::Ready {
            url,
            http_timeout_secs,
        } => {
            let agent = observe::agent(Duration::from_secs(http_timeout_secs.max(1)));
            match observe::readiness(&agent, &url) {
                Ok(observe::Readiness::Ready) => {
                    println!("ready");
                    ExitCode::SUCCESS
                }
                Ok(observe::Readiness::NotReady(reasons)) if reasons.is_empty() => {
                    println!("not ready (503 without a reason)");
                    ExitCode::from(1)
                }
                Ok(observe::Readiness::NotReady(reasons)) => {
                    println!("not ready: {}", reasons.join(", "));
                    ExitCode::from(1)
                }
                Err(e) => {
                    eprintln!("ursulactl: {e}");
                    ExitCode::from(1)
                }
            }
        }
        other => {
            eprintln!("{}", ursula_ctl::cli::not_yet_message(other.name()));
            ExitCode::from(2)
        }
    }
}
