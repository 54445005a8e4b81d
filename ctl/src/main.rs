//! `ursulactl`: see the `ursula_ctl` library for the verbs and exit codes.

use std::process::ExitCode;

use clap::Parser;
use ursula_ctl::Outcome;
use ursula_ctl::cli::Cli;

fn main() -> ExitCode {
    // clap exits 2 on a usage error, which is the spec's "safe abort": a mistyped command is a
    // configuration error (1), and help or the version print as asked (0).
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let verb = cli.command.name();
    let mut out = std::io::stdout().lock();
    match ursula_ctl::run::run(cli.command, &mut out) {
        Ok(outcome) => {
            if let Outcome::Abort(why) = &outcome {
                eprintln!("ursulactl: abort: {why}");
            }
            ExitCode::from(outcome.exit_code())
        }
        Err(e) => {
            // One line, whatever the cause carried: the spec's machine-greppable error.
            let line = format!("ursulactl: {verb}: {e}").replace(['\n', '\r'], " ");
            eprintln!("{line}");
            ExitCode::from(1)
        }
    }
}
