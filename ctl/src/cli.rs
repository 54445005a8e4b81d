//! The command line: every verb of the spec's ursulactl page, with its flags, and `ready`, a
//! one-node readiness probe the spec does not list (the container image's health check, where
//! there is no manifest to give `wait-ready` and no curl). This build runs [`SUPPORTED`]; the
//! verbs in [`NOT_YET`] parse and then answer that this build does not run them (exit 1, since
//! 2 means a safe abort), rather than pretend.

use std::path::PathBuf;

use clap::Args;
use clap::Parser;
use clap::Subcommand;

/// Verbs this build runs.
pub const SUPPORTED: &[&str] = &[
    "status",
    "ready",
    "drain",
    "undrain",
    "wait",
    "pin-incarnations",
    "wait-ready",
    "verify-cluster",
    "verify-quorum",
    "verify-survivors",
    "activate-maintenance-fence",
    "retire-maintenance-fence",
    "backup-create",
    "backup-verify",
    "restore",
];

/// Verbs of the spec this build parses but does not run (exit 1).
pub const NOT_YET: &[&str] = &["reservation-propose", "reservation-acknowledge"];

#[derive(Debug, Parser)]
#[command(
    name = "ursulactl",
    version,
    about = "Operator CLI of an Ursula cluster, over its metrics and admin HTTP endpoints",
    after_help = "Exit codes: 0 done, 2 safe abort (no safe target, timeout, stall), 1 any other error. Not run by this build (exit 1): reservation-propose/-acknowledge."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Verb,
}

/// `--config PATH`: the node manifest (JSON, TOML or YAML; `-` reads stdin).
#[derive(Debug, Clone, Args)]
pub struct ConfigArg {
    /// Node manifest: JSON, TOML or YAML, chosen by extension; `-` reads it from stdin.
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

/// The files a reservation proposal is made of, and its acknowledgement checked against.
#[derive(Debug, Clone, Args)]
pub struct ReservationFiles {
    #[arg(long, value_name = "FILE")]
    pub cell: PathBuf,
    #[arg(long, value_name = "FILE")]
    pub snapshot: PathBuf,
    #[arg(long, value_name = "FILE")]
    pub request: PathBuf,
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
    /// Mark a node draining and transfer away every leadership it holds.
    Drain {
        #[command(flatten)]
        node: NodeArg,
        /// Print the transfer plan only; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Abort (exit 2) when the node still leads a group after this long.
        #[arg(long, value_name = "SECS", default_value_t = 120)]
        timeout_secs: u64,
        /// A target may trail the leader's committed index by this many entries.
        #[arg(long, value_name = "N", default_value_t = 0)]
        lag_tolerance: u64,
    },
    /// Clear a node's drain mark.
    Undrain {
        #[command(flatten)]
        node: NodeArg,
    },
    /// Block until a node is a caught-up voter in every group (progress-gated).
    Wait {
        #[command(flatten)]
        node: NodeArg,
        /// Entries the node may trail its leaders' committed index by (default 0).
        #[arg(long, value_name = "N")]
        lag_tolerance: Option<u64>,
        /// Abort (exit 2) after this long without progress.
        #[arg(long, value_name = "SECS", default_value_t = 90)]
        stall_timeout_secs: u64,
    },
    /// Print the manifest with every node's process identity pinned.
    PinIncarnations {
        #[command(flatten)]
        config: ConfigArg,
        /// Rebind this node's pin to its current (replacement) process.
        #[arg(long, value_name = "N")]
        replace_node: Option<u64>,
    },
    /// Wait for maintenance evidence and serving health on every node.
    WaitReady {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "N")]
        expected_groups: u64,
        /// Abort (exit 2) with the findings after this long.
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        timeout_secs: u64,
    },
    /// Require every voter present and caught up in two consecutive samples.
    VerifyCluster {
        #[command(flatten)]
        config: ConfigArg,
        /// Abort (exit 2) with the findings after this long.
        #[arg(long, value_name = "SECS", default_value_t = 60)]
        timeout_secs: u64,
    },
    /// Confirm every group with a fresh ReadIndex round; print the JSON proof.
    VerifyQuorum {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "N")]
        expected_groups: u64,
        /// One deadline for every request and wait.
        #[arg(long, value_name = "SECS", default_value_t = 120)]
        timeout_secs: u64,
    },
    /// Confirm fresh prefixes on the survivors of one excluded voter; print the JSON proof.
    VerifySurvivors {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "N")]
        excluded_node_id: u64,
        #[arg(long, value_name = "N")]
        expected_groups: u64,
        /// One deadline for every request and wait.
        #[arg(long, value_name = "SECS", default_value_t = 120)]
        timeout_secs: u64,
    },
    /// Export every Raft group (the freshest replica's) and its manifest into a backup.
    BackupCreate {
        #[command(flatten)]
        config: ConfigArg,
        /// A local directory, or s3://bucket/prefix (AWS_* environment, AWS_ENDPOINT_URL).
        #[arg(long, value_name = "DIR|s3://BUCKET/PREFIX")]
        location: String,
        /// The manifest's created_unix_ms instead of now.
        #[arg(long, value_name = "MS")]
        created_unix_ms: Option<u64>,
        /// Per-request HTTP timeout (a whole group object's download included).
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        http_timeout_secs: u64,
    },
    /// Check a backup (manifest, sizes, BLAKE3, deep decode) without contacting a cluster.
    BackupVerify {
        /// A local directory, or s3://bucket/prefix (AWS_* environment, AWS_ENDPOINT_URL).
        #[arg(long, value_name = "DIR|s3://BUCKET/PREFIX")]
        location: String,
    },
    /// Restore a verified backup into an empty cluster of the same format and group count.
    Restore {
        #[command(flatten)]
        config: ConfigArg,
        /// A local directory, or s3://bucket/prefix (AWS_* environment, AWS_ENDPOINT_URL).
        #[arg(long, value_name = "DIR|s3://BUCKET/PREFIX")]
        location: String,
        /// Per-request HTTP timeout (a whole group object's upload included).
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        http_timeout_secs: u64,
    },
    /// Install the manifest's maintenance fence on every node (saved incarnations required).
    ActivateMaintenanceFence {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Retire the manifest's maintenance fence on every node (saved incarnations required).
    RetireMaintenanceFence {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Produce an offline ConfigMap CAS proposal (not supported by this build yet).
    ReservationPropose {
        #[command(flatten)]
        files: ReservationFiles,
    },
    /// Validate a CAS update receipt (not supported by this build yet).
    ReservationAcknowledge {
        #[command(flatten)]
        files: ReservationFiles,
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
            "ursulactl restore --config c.json --location s3://b/p --http-timeout-secs 60",
            "ursulactl activate-maintenance-fence --config c.json",
            "ursulactl retire-maintenance-fence --config c.json",
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
