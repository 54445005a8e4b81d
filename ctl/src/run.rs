//! Runs a parsed verb: loads the manifest, opens a [`Session`], calls the verb's module, and
//! turns how it ended into the spec's exit code (0 done, 2 safe abort, 1 anything else, with
//! one line on stderr).

use std::io::Write;
use std::time::Duration;

use crate::CtlError;
use crate::Outcome;
use crate::backup;
use crate::cli::Verb;
use crate::drain;
use crate::fence;
use crate::gates;
use crate::location::Location;
use crate::manifest;
use crate::observe;
use crate::quorum;
use crate::restore;
use crate::session::Session;
use crate::status;
use crate::wait;

/// HTTP timeout of one request of the operational verbs.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `verb`, writing its report to `out`.
pub fn run(verb: Verb, out: &mut dyn Write) -> Result<Outcome, CtlError> {
    match verb {
        Verb::Status {
            config,
            http_timeout_secs,
        } => {
            let m = manifest::load(&config.config)?;
            let observations = observe::observe_all(&m.nodes, http_timeout(http_timeout_secs));
            let report = status::report(&observations);
            write!(out, "{}", report.text)?;
            Ok(if report.ok() {
                Outcome::Done
            } else {
                Outcome::Failed
            })
        }
        Verb::Ready {
            url,
            http_timeout_secs,
        } => {
            let agent = observe::agent(http_timeout(http_timeout_secs));
            match observe::readiness(&agent, &url)? {
                observe::Readiness::Ready => {
                    writeln!(out, "ready")?;
                    Ok(Outcome::Done)
                }
                observe::Readiness::NotReady(r) if r.is_empty() => {
                    writeln!(out, "not ready (503 without a reason)")?;
                    Ok(Outcome::Failed)
                }
                observe::Readiness::NotReady(r) => {
                    writeln!(out, "not ready: {}", r.join(", "))?;
                    Ok(Outcome::Failed)
                }
            }
        }
        Verb::Drain {
            node,
            dry_run,
            timeout_secs,
            lag_tolerance,
        } => {
            let (_, s) = session(&node.config.config, None)?;
            let o = drain::DrainOptions {
                node: node.node,
                dry_run,
                timeout: Duration::from_secs(timeout_secs),
                lag_tolerance,
            };
            drain::drain(&s, &o, out)
        }
        Verb::Undrain { node } => {
            let (_, s) = session(&node.config.config, None)?;
            drain::undrain(&s, node.node, out)
        }
        Verb::Wait {
            node,
            lag_tolerance,
            stall_timeout_secs,
        } => {
            let (_, s) = session(&node.config.config, None)?;
            let o = wait::WaitOptions {
                node: node.node,
                lag_tolerance: lag_tolerance.unwrap_or(0),
                stall_timeout: Duration::from_secs(stall_timeout_secs),
            };
            wait::wait(&s, &o, out)
        }
        Verb::WaitReady {
            config,
            expected_groups,
            timeout_secs,
        } => {
            let (_, s) = session(&config.config, None)?;
            gates::wait_ready(&s, expected_groups, Duration::from_secs(timeout_secs), out)
        }
        Verb::VerifyCluster {
            config,
            timeout_secs,
        } => {
            let (_, s) = session(&config.config, None)?;
            gates::verify_cluster(&s, Duration::from_secs(timeout_secs), out)
        }
        Verb::VerifyQuorum {
            config,
            expected_groups,
            timeout_secs,
        } => verify_quorum(&config.config, expected_groups, timeout_secs, None, out),
        Verb::VerifySurvivors {
            config,
            excluded_node_id,
            expected_groups,
            timeout_secs,
        } => verify_quorum(
            &config.config,
            expected_groups,
            timeout_secs,
            Some(excluded_node_id),
            out,
        ),
        Verb::PinIncarnations {
            config,
            replace_node,
        } => {
            let (mut m, s) = session(&config.config, replace_node)?;
            pin(&mut m, &s, replace_node)?;
            write!(out, "{}", manifest::render(&m)?)?;
            Ok(Outcome::Done)
        }
        Verb::ActivateMaintenanceFence { config } => {
            let (m, s) = session(&config.config, None)?;
            fence::run(&m, &s, fence::Call::Activate, out)
        }
        Verb::RetireMaintenanceFence { config } => {
            let (m, s) = session(&config.config, None)?;
            fence::run(&m, &s, fence::Call::Retire, out)
        }
        Verb::BackupCreate {
            config,
            location,
            created_unix_ms,
            http_timeout_secs,
        } => {
            let (s, loc) = with_location(&config.config, http_timeout_secs, &location)?;
            backup::create(&s, &loc, created_unix_ms, out)
        }
        Verb::BackupVerify { location } => backup::verify_verb(&Location::open(&location)?, out),
        Verb::Restore {
            config,
            location,
            http_timeout_secs,
        } => {
            let (s, loc) = with_location(&config.config, http_timeout_secs, &location)?;
            restore::restore(&s, &loc, out)
        }
        other => Err(CtlError::Unsupported {
            verb: other.name(),
            why: "this verb is parsed but not run by this build; nothing was changed".into(),
        }),
    }
}

/// The manifest at `config` and a session over its nodes, forgetting `forget`'s saved process.
fn session(config: &str, forget: Option<u64>) -> Result<(manifest::Manifest, Session), CtlError> {
    let m = manifest::load(config)?;
    let s = Session::new(&m, HTTP_TIMEOUT, forget);
    Ok((m, s))
}

/// A `--http-timeout-secs` flag's timeout: one second at the least.
fn http_timeout(secs: u64) -> Duration {
    Duration::from_secs(secs.max(1))
}

/// `backup-create` and `restore`: a session with their own HTTP timeout, and the location.
fn with_location(
    config: &str,
    http_timeout_secs: u64,
    location: &str,
) -> Result<(Session, Location), CtlError> {
    let m = manifest::load(config)?;
    let s = Session::new(&m, http_timeout(http_timeout_secs), None);
    Ok((s, Location::open(location)?))
}

/// `verify-quorum`, or with `excluded` `verify-survivors`.
fn verify_quorum(
    config: &str,
    expected_groups: u64,
    timeout_secs: u64,
    excluded: Option<u64>,
    out: &mut dyn Write,
) -> Result<Outcome, CtlError> {
    let (_, s) = session(config, None)?;
    let o = quorum::QuorumOptions {
        expected_groups,
        timeout: Duration::from_secs(timeout_secs),
        excluded,
    };
    quorum::verify(&s, &o, out)
}

/// `pin-incarnations`: every node's current process into `expected_process_incarnation`.
/// A node already pinned must still be that process, except `replace`, which is rebound.
fn pin(m: &mut manifest::Manifest, s: &Session, replace: Option<u64>) -> Result<(), CtlError> {
    if let Some(r) = replace {
        s.node(r)?;
    }
    // Session::metrics pins first sightings and refuses a process other than the saved one.
    for (id, r) in s.metrics_all() {
        r?;
        let seen = s.pin(id).ok_or(CtlError::NoIncarnation { node: id })?;
        if let Some(n) = m.nodes.iter_mut().find(|n| n.id == id) {
            n.expected_process_incarnation = Some(seen);
        }
    }
    Ok(())
}
