//! `ursula-ctl`: the library behind `ursulactl`, the operator CLI of an Ursula cluster. It is a
//! plain HTTP client of the nodes' `/__ursula/*` endpoints and executes nothing on hosts.
//!
//! Module map:
//! - [`cli`]: every verb of the spec's ursulactl page as clap parses it; which ones this build
//!   runs ([`cli::SUPPORTED`]) and which it only names ([`cli::NOT_YET`]).
//! - [`manifest`]: the node manifest (`--config`, JSON or TOML, `-` for stdin) and the URL
//!   each node is read at.
//! - [`observe`]: one node's `/__ursula/metrics` and `/__ursula/ready` over HTTP.
//! - [`status`]: the `status` verb: per-node summary, per-group leadership, the verdict.
//!
//! Exit codes: `0` success; `1` a finding (`status`: a node unreachable or a group without a
//! leader; `ready`: the node not ready or unreachable) or a configuration error, with a
//! one-line message; `2` a verb this build does not run yet.

pub mod cli;
pub mod manifest;
pub mod observe;
pub mod status;

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
    #[error("manifest {path}: YAML manifests are not supported by this build; use JSON or TOML")]
    YamlManifest { path: String },
    #[error("GET {url}: {source}")]
    Transport { url: String, source: ureq::Error },
    #[error("GET {url}: HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("GET {url}: not the expected JSON: {source}")]
    BadJson {
        url: String,
        source: serde_json::Error,
    },
}
