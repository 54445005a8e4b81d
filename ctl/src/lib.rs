//! `ursula-ctl`: the library behind `ursulactl`, the operator CLI of an Ursula cluster. It is a
//! plain HTTP client of the nodes' `/__ursula/*` endpoints and executes nothing on hosts.
//!
//! Module map (each module uses only the ones listed above it):
//! - [`manifest`]: the node manifest (`--config`, JSON, TOML or YAML, `-` for stdin), the URL
//!   each node is read at, and writing it back (`pin-incarnations`).
//! - [`observe`]: one node's `/__ursula/metrics` and `/__ursula/ready` over HTTP.
//! - [`session`]: one invocation's view of the cluster: the process incarnation each node is
//!   pinned to, enforced on every observation and sent on every mutation.
//! - [`fence`]: `activate-maintenance-fence` and `retire-maintenance-fence`.
//! - [`plan`]: drain planning, pure: which voter takes each group a node leads.
//! - [`findings`]: the lines about a node's Raft report that several checks give alike.
//! - [`drain`]: `drain` and `undrain`.
//! - [`wait`]: `wait`, the progress-gated catch-up of one node.
//! - [`gates`]: `wait-ready` and `verify-cluster`, whole-cluster checks.
//! - [`quorum`]: `verify-quorum` and `verify-survivors`, the JSON proofs.
//! - [`status`]: the `status` verb: per-node summary, per-group leadership, the verdict.
//! - [`location`]: where a backup lives: a local directory or `s3://bucket/prefix`.
//! - [`backup`]: `backup-create` and `backup-verify`, over the server's backup format
//!   (`ursula_state::backup`): the cluster's backup info, the manifest, each object's checks.
//! - [`restore`]: `restore`, every refusal checked before the first import.
//! - [`cli`]: every verb of the spec's ursulactl page as clap parses it.
//! - [`run`]: runs a parsed verb.
//!
//! [`Outcome`] and [`CtlError`] (here) are how every verb ends: the exit code comes from them.
//!
//! Exit codes: `0` done; `2` a safe abort (nothing unsafe was done: no safe transfer target,
//! a drain or readiness timeout, a catch-up stall, a check that did not pass in time); `1`
//! anything else (configuration, transport, a changed process, a verb this build does not
//! run), always as one line `ursulactl: ...`.

pub mod backup;
pub mod cli;
pub mod drain;
pub mod fence;
pub mod findings;
pub mod gates;
pub mod location;
pub mod manifest;
pub mod observe;
pub mod plan;
pub mod quorum;
pub mod restore;
pub mod run;
pub mod session;
pub mod status;
pub mod wait;

/// How a verb ended, when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// A safe abort: nothing unsafe was done, and the operator should not move on.
    Abort(String),
    /// A finding the verb already reported on stdout (`status`, `ready`): exit 1.
    Failed,
}

impl Outcome {
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Done => 0,
            Outcome::Abort(_) => 2,
            Outcome::Failed => 1,
        }
    }
}

/// Why a command could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("cannot read the manifest {path}: {source}")]
    ReadManifest {
        path: String,
        source: std::io::Error,
    },
    #[error("manifest {path}: {why}")]
    BadManifest { path: String, why: String },
    #[error("cannot write the manifest: {why}")]
    Render { why: String },
    #[error("node {id} is not in the manifest")]
    UnknownNode { id: u64 },
    #[error("GET {url}: {source}")]
    Transport { url: String, source: ureq::Error },
    #[error("{method} {url}: {source}")]
    Request {
        method: &'static str,
        url: String,
        source: ureq::Error,
    },
    #[error("GET {url}: HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{method} {url}: HTTP {status}: {body}")]
    Refused {
        method: &'static str,
        url: String,
        status: u16,
        body: String,
    },
    #[error("GET {url}: not the expected JSON: {source}")]
    BadJson {
        url: String,
        source: serde_json::Error,
    },
    #[error("node {node}: process changed: pinned incarnation {expected}, the node reports {seen}")]
    ProcessChanged {
        node: u64,
        expected: String,
        seen: String,
    },
    #[error(
        "node {node}: process changed: {method} {url} answered 412 for pinned incarnation {expected}: {body}"
    )]
    ProcessChangedRefused {
        node: u64,
        method: &'static str,
        url: String,
        expected: String,
        body: String,
    },
    #[error(
        "node {node}: {method} {url} answered 412: the manifest's maintenance fence is not the node's active one: {body}"
    )]
    FenceRefused {
        node: u64,
        method: &'static str,
        url: String,
        body: String,
    },
    /// The manifest does not carry what a fence lifecycle call needs; nothing was sent.
    #[error("{0}; nothing was changed")]
    FenceNotAdmitted(String),
    /// Some nodes did not acknowledge a fence lifecycle call; nothing is rolled back.
    #[error("not acknowledged by {}; acknowledged by {acked:?}, which keep it", refused.join("; "))]
    FencePartial {
        acked: Vec<u64>,
        refused: Vec<String>,
    },
    #[error("node {node} reports no process_incarnation; its server lacks the admin protocol")]
    NoIncarnation { node: u64 },
    /// `verb` is named by the one-line message `main` prints around every error.
    #[error("not supported by this build: {why}")]
    Unsupported { verb: &'static str, why: String },
    /// An answer this build cannot act on; `what` is the step that got it.
    #[error("{what}: {why}")]
    Unexpected { what: &'static str, why: String },
    #[error(transparent)]
    Location(#[from] location::LocationError),
    #[error(transparent)]
    Backup(#[from] backup::BackupFailure),
    #[error(transparent)]
    Restore(#[from] restore::RestoreFailure),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl CtlError {
    /// The node could not be reached (or dropped the connection): worth retrying while it
    /// restarts, unlike an answer that refused.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, CtlError::Transport { .. } | CtlError::Request { .. })
    }
}
