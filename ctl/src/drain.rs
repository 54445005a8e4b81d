//! `drain` and `undrain`.
//!
//! `drain` sets the maintenance mark first, so the node stops campaigning and accepting
//! leaderships while its groups move, then transfers each group it leads to the target
//! [`crate::plan`] picks, on the node itself (`POST /__ursula/raft/{g}/leader/transfer/{t}`).
//! A `409` (the leader changed, or the target may not take it now) re-observes and re-plans;
//! any other refusal stops. It ends when the node leads nothing, by its own metrics. It aborts
//! (exit 2) when a group has no voter that could ever take it, or when the drain timeout passes;
//! the mark stays set either way, so the node does not pull leaderships back (`undrain` lifts
//! it). `--dry-run` observes and prints the plan, and changes nothing.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;
use std::time::Instant;

use ursula_protocol::admin::ShedState;
use ursula_protocol::admin::Transferred;

use crate::CtlError;
use crate::Outcome;
use crate::observe::Metrics;
use crate::plan;
use crate::plan::Choice;
use crate::session;
use crate::session::Session;

pub const MARK: &str = "/__ursula/leadership-shed/maintenance";

/// How long to wait between observations while a transfer settles or a target catches up.
const POLL: Duration = Duration::from_millis(300);

pub struct DrainOptions {
    pub node: u64,
    pub dry_run: bool,
    pub timeout: Duration,
    pub lag_tolerance: u64,
}

/// Observes the draining node first, then its peers: a peer's applied index read after the
/// leader's committed index is compared against a committed index no newer than itself.
fn observe(session: &Session, node: u64) -> Result<BTreeMap<u64, Metrics>, CtlError> {
    let me = session.metrics(session.node(node)?)?;
    let mut cluster = BTreeMap::new();
    for (id, m) in session.metrics_all() {
        match m {
            Ok(m) if id != node => {
                cluster.insert(id, m);
            }
            // A peer that changed process is not a target this invocation planned with.
            Err(e @ CtlError::ProcessChanged { .. }) => return Err(e),
            _ => {}
        }
    }
    cluster.insert(node, me);
    Ok(cluster)
}

pub fn drain(
    session: &Session,
    o: &DrainOptions,
    out: &mut dyn Write,
) -> Result<Outcome, CtlError> {
    let target = session.node(o.node)?;
    if o.dry_run {
        return dry_run(session, o, out);
    }
    let shed: ShedState = session.admin_ok(target, "POST", MARK)?;
    writeln!(
        out,
        "node {}: maintenance mark set ({})",
        o.node, shed.state
    )?;
    if !shed.drained() {
        return Err(CtlError::Unexpected {
            what: "maintenance mark",
            why: format!(
                "node {} answered the mark with state {:?}",
                o.node, shed.state
            ),
        });
    }
    let deadline = Instant::now() + o.timeout;
    let mut avoid = BTreeSet::new();
    let mut last_wait = String::new();
    loop {
        let cluster = match observe(session, o.node) {
            Ok(c) => c,
            Err(e) if e.is_unreachable() && Instant::now() < deadline => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => return Err(e),
        };
        let moves = plan::plan(o.node, &cluster, o.lag_tolerance, &avoid);
        if moves.is_empty() {
            writeln!(out, "node {} leads no group", o.node)?;
            return Ok(Outcome::Done);
        }
        if let Some((group, why)) = moves.iter().find_map(|m| match &m.choice {
            Choice::Abort(w) => Some((m.group, w.clone())),
            _ => None,
        }) {
            return Ok(Outcome::Abort(format!(
                "drain node {}: no safe transfer target for group {group}: {why}",
                o.node
            )));
        }
        if Instant::now() >= deadline {
            let led: Vec<String> = moves.iter().map(|m| m.group.to_string()).collect();
            return Ok(Outcome::Abort(format!(
                "drain node {}: timed out after {}s still leading groups [{}]{}",
                o.node,
                o.timeout.as_secs(),
                led.join(","),
                if last_wait.is_empty() {
                    String::new()
                } else {
                    format!(": {last_wait}")
                }
            )));
        }
        for m in &moves {
            match &m.choice {
                Choice::Target(t) => {
                    let path = format!("/__ursula/raft/{}/leader/transfer/{t}", m.group);
                    let a = session.admin(target, "POST", &path)?;
                    match a.status {
                        200 => {
                            let done: Transferred = a.json()?;
                            writeln!(
                                out,
                                "group {}: leadership {} -> {} (term {}, {} ms)",
                                m.group, done.from, done.to, done.term, done.elapsed_ms
                            )?;
                        }
                        409 => {
                            // The leader moved or the target cannot take it now: observe again.
                            writeln!(
                                out,
                                "group {}: transfer to {t} refused (409: {}); re-planning",
                                m.group,
                                crate::observe::snippet(&a.body)
                            )?;
                            avoid.insert((m.group, *t));
                            break;
                        }
                        _ => return Err(session::refused("POST", a)),
                    }
                }
                Choice::Wait(why) => last_wait = format!("group {}: {why}", m.group),
                Choice::Abort(_) => {}
            }
        }
        std::thread::sleep(POLL);
    }
}

fn dry_run(session: &Session, o: &DrainOptions, out: &mut dyn Write) -> Result<Outcome, CtlError> {
    let cluster = observe(session, o.node)?;
    let drained = cluster
        .get(&o.node)
        .is_some_and(|m| m.leadership_shed.drained());
    writeln!(
        out,
        "dry run: node {}: {}",
        o.node,
        if drained {
            "maintenance mark already set"
        } else {
            "would set the maintenance mark"
        }
    )?;
    let moves = plan::plan(o.node, &cluster, o.lag_tolerance, &BTreeSet::new());
    if moves.is_empty() {
        writeln!(
            out,
            "dry run: node {} leads no group; nothing to transfer",
            o.node
        )?;
    }
    let mut abort = None;
    for m in &moves {
        match &m.choice {
            Choice::Target(t) => writeln!(out, "group {}: transfer {} -> {t}", m.group, o.node)?,
            Choice::Wait(why) => {
                writeln!(out, "group {}: no target yet, would wait: {why}", m.group)?
            }
            Choice::Abort(why) => {
                writeln!(out, "group {}: no safe transfer target: {why}", m.group)?;
                abort.get_or_insert(format!(
                    "drain node {} (dry run): no safe transfer target for group {}: {why}",
                    o.node, m.group
                ));
            }
        }
    }
    Ok(abort.map_or(Outcome::Done, Outcome::Abort))
}

/// `undrain`: lifts the mark and prints the state the node answered.
pub fn undrain(session: &Session, node: u64, out: &mut dyn Write) -> Result<Outcome, CtlError> {
    let shed: ShedState = session.admin_ok(session.node(node)?, "DELETE", MARK)?;
    writeln!(
        out,
        "node {node}: maintenance mark cleared ({})",
        shed.state
    )?;
    if shed.drained() {
        return Err(CtlError::Unexpected {
            what: "maintenance mark",
            why: format!("node {node} still reports the maintenance mark after DELETE"),
        });
    }
    Ok(Outcome::Done)
}
