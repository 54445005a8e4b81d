//! The command line: every verb of the spec's ursulactl page, with its flags, and `ready`, a
//! one-node readiness probe the spec does not list (the container image's health check, where
//! there is no manifest to give `wait-ready` and no curl). This build runs
//! [`SUPPORTED`]; the verbs in [`NOT_YET`] parse and then answer that they are not supported
//! by this build yet (exit 2), rather than pretend.

use std::path::PathBuf;

use clap::Args;
use clap::Parser;
use clap::Subcommand;

/// Verbs this build runs.
pub const SUPPORTED: &[&str] = &["status", "ready"];

/// Verbs of the spec this build parses but does not run yet.
pub const NOT_YET: &[&str] = &[
    "drain",
    "undrain",
    "wait",
    "pin-incarnations",
    "wait-ready",
    "verify-cluster",
    "verify-quorum",
    "verify-survivors",
    "backup-create",
    "backup-verify",
    "restore",
    "activate-maintenance-fence",
    "retire-maintenance-fence",
    "reservation-propose",
    "reservation-acknowledge",
];

#[derive(Debug, Parser)]
#[command(
    name = "ursulactl",
    version,
    about = "Operator CLI of an Ursula cluster, over its metrics and admin HTTP endpoints",
    after_help = "This build runs: status, ready. The other verbs parse but are not supported by this build yet (exit 2)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Verb,
}

/// `--config PATH`: the node manifest (JSON or TOML; `-` reads stdin).
#[derive(Debug, Clone, Args)]
pub struct ConfigArg {
    /// Node manifest: JSON or TOML, chosen by extension; `-` reads it from stdin.
    #[arg(long, value_name = "PATH")]
    pub config: String,
}

#[derive(Debug, Clone, Args)]
pub struct NodeArg {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The node's id in the manifest.
    #[arg(long, value_name = "N")]
    pub node: u64,
}

#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Per-node group counts and leadership distribution, and each group's leader.
    Status {
        #[command(flatten)]
        config: ConfigArg,
        /// Per-request HTTP timeout.
        #[arg(long, value_name = "SECS", default_value_t = 5)]
        http_timeout_secs: u64,
    },
    /// Exit 0 when one node's /__ursula/ready answers 200, 1 with its reasons otherwise: the
    /// container image's health check, which has neither a manifest nor curl.
    Ready {
        /// The node's base URL (client or admin plane).
        #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:4437")]
        url: String,
        /// HTTP timeout.
        #[arg(long, value_name = "SECS", default_value_t = 5)]
        http_timeout_secs: u64,
    },
    /// Transfer away every leadership of a node and mark it draining (not supported by this build yet).
    Drain {
        #[command(flatten)]
        node: NodeArg,
        /// Print the transfer plan only.
        #[arg(long)]
        dry_run: bool,
    },
    /// Clear a node's drain mark (not supported by this build yet).
    Undrain {
        #[command(flatten)]
        node: NodeArg,
    },
    /// Block until a node is a caught-up voter in every group (not supported by this build yet).
    Wait {
        #[command(flatten)]
        node: NodeArg,
        #[arg(long, value_name = "N")]
        lag_tolerance: Option<u64>,
        #[arg(long, value_name = "SECS", default_value_t = 90)]
        stall_timeout_secs: u64,
    },
    /// Save required process identities in a manifest (not supported by this build yet).
    PinIncarnations {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "N")]
        replace_node: Option<u64>,
    },
    /// Wait for maintenance evidence and serving health on every node (not supported by this build yet).
    WaitReady {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "N")]
        expected_groups: u64,
        #[arg(long, value_name = "SECS")]
        timeout_secs: Option<u64>,
    },
    /// Require every voter present and caught up in two samples (not supported by this build yet).
    VerifyCluster {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Confirm every group with a fresh ReadIndex round (not supported by this build yet).
    VerifyQuorum {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "N")]
        expected_groups: u64,
        #[arg(long, value_name = "SECS")]
        timeout_secs: Option<u64>,
    },
    /// Confirm fresh prefixes on two survivors (not supported by this build yet).
    VerifySurvivors {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "N")]
        excluded_node_id: u64,
        #[arg(long, value_name = "N")]
        expected_groups: u64,
        #[arg(long, value_name = "SECS")]
        timeout_secs: Option<u64>,
    },
    /// Export every Raft group into a backup (not supported by this build yet).
    BackupCreate {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "DIR|s3://BUCKET/PREFIX")]
        location: String,
        #[arg(long, value_name = "MS")]
        created_unix_ms: Option<u64>,
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        http_timeout_secs: u64,
    },
    /// Check a backup without contacting a cluster (not supported by this build yet).
    BackupVerify {
        #[arg(long, value_name = "DIR|s3://BUCKET/PREFIX")]
        location: String,
    },
    /// Restore a verified backup into an empty cluster (not supported by this build yet).
    Restore {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "DIR|s3://BUCKET/PREFIX")]
        location: String,
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        http_timeout_secs: u64,
    },
    /// Install the manifest's maintenance fence (not supported by this build yet).
    ActivateMaintenanceFence {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Retire the manifest's maintenance fence (not supported by this build yet).
    RetireMaintenanceFence {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Produce an offline ConfigMap CAS proposal (not supported by this build yet).
    ReservationPropose {
        #[arg(long, value_name = "FILE")]
        cell: PathBuf,
        #[arg(long, value_name = "FILE")]
        snapshot: PathBuf,
        #[arg(long, value_name = "FILE")]
        request: PathBuf,
    },
    /// Validate a CAS update receipt (not supported by this build yet).
    ReservationAcknowledge {
        #[arg(long, value_name = "FILE")]
        cell: PathBuf,
        #[arg(long, value_name = "FILE")]
        snapshot: PathBuf,
        #[arg(long, value_name = "FILE")]
        request: PathBuf,
        #[arg(long, value_name = "FILE")]
        response: PathBuf,
    },
}

impl Verb {
    /// The verb's name on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Verb::Status { .. } => "status",
            Verb::Ready { .. } => "ready",
            Verb::Drain { .. } => "drain",
            Verb::Undrain { .. } => "undrain",
            Verb::Wait { .. } => "wait",
            Verb::PinIncarnations { .. } => "pin-incarnations",
            Verb::WaitReady { .. } => "wait-ready",
            Verb::VerifyCluster { .. } => "verify-cluster",
            Verb::VerifyQuorum { .. } => "verify-quorum",
            Verb::VerifySurvivors { .. } => "verify-survivors",
            Verb::BackupCreate { .. } => "backup-create",
            Verb::BackupVerify { .. } => "backup-verify",
            Verb::Restore { .. } => "restore",
            Verb::ActivateMaintenanceFence { .. } => "activate-maintenance-fence",
            Verb::RetireMaintenanceFence { .. } => "retire-maintenance-fence",
            Verb::ReservationPropose { .. } => "reservation-propose",
            Verb::ReservationAcknowledge { .. } => "reservation-acknowledge",
        }
    }
}

/// The answer to a verb this build does not run.
pub fn not_yet_message(verb: &str) -> String {
    format!(
        "ursulactl {verb}: not supported by this build yet; this build runs: {}; not yet: {}",
        SUPPORTED.join(", "),
        NOT_YET.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_cli_is_well_formed_and_lists_every_verb() {
        Cli::command().debug_assert();
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        for v in SUPPORTED.iter().chain(NOT_YET) {
            assert!(names.iter().any(|n| n == v), "{v}");
        }
        assert_eq!(names.len(), SUPPORTED.len() + NOT_YET.len());
    }

    #[test]
    fn spec_invocations_parse() {
        for argv in [
            "ursulactl status --config m.json",
            "ursulactl ready --url http://127.0.0.1:4437",
            "ursulactl drain --config m.json --node 3 --dry-run",
            "ursulactl wait --config m.json --node 3",
            "ursulactl verify-quorum --config c.json --expected-groups 256 --timeout-secs 120",
            "ursulactl verify-survivors --config c.json --excluded-node-id 3 --expected-groups 256 --timeout-secs 120",
            "ursulactl backup-create --config c.json --location s3://b/p",
            "ursulactl backup-verify --location /tmp/b",
            "ursulactl reservation-propose --cell a --snapshot b --request c",
        ] {
            let cli = Cli::try_parse_from(argv.split(' ')).expect(argv);
            assert_eq!(
                cli.command.name(),
                argv.split(' ').nth(1).unwrap_or_default()
            );
        }
    }
}
