//! `activate-maintenance-fence` and `retire-maintenance-fence`: install or retire the
//! manifest's root `maintenance_fence` on every node (`POST /__ursula/maintenance-fence`,
//! `POST /__ursula/maintenance-fence/retire`, the token in `x-ursula-maintenance-fence`).
//!
//! Both refuse, before sending anything, a manifest without the fence or without a saved
//! `expected_process_incarnation` for every node: the token must bind the processes the
//! external reservation admitted, never whatever answers now. Every node is called; the verb
//! succeeds only when all acknowledged. A partial acknowledgement is reported and kept (the
//! executor resumes the same identities), never rolled back: a rollback would be a second
//! lifecycle call that can itself stop halfway.

use std::io::Write;

use ursula_protocol::admin::FenceView;

use crate::CtlError;
use crate::Outcome;
use crate::manifest::Manifest;
use crate::session::Session;

/// Which lifecycle call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Activate,
    Retire,
}

impl Call {
    fn path(self) -> &'static str {
        match self {
            Call::Activate => "/__ursula/maintenance-fence",
            Call::Retire => "/__ursula/maintenance-fence/retire",
        }
    }

    /// The state a node reports after acknowledging.
    fn state(self) -> &'static str {
        match self {
            Call::Activate => "active",
            Call::Retire => "retired",
        }
    }
}

/// What the manifest must carry before any node is called.
pub fn admitted(m: &Manifest) -> Result<(), CtlError> {
    if m.maintenance_fence.is_none() {
        return Err(CtlError::FenceNotAdmitted(
            "the manifest has no root maintenance_fence".into(),
        ));
    }
    let unpinned: Vec<u64> = m
        .nodes
        .iter()
        .filter(|n| n.expected_process_incarnation.is_none())
        .map(|n| n.id)
        .collect();
    if !unpinned.is_empty() {
        return Err(CtlError::FenceNotAdmitted(format!(
            "nodes {unpinned:?} have no saved expected_process_incarnation (run pin-incarnations)"
        )));
    }
    Ok(())
}

pub fn run(
    m: &Manifest,
    s: &Session,
    call: Call,
    out: &mut dyn Write,
) -> Result<Outcome, CtlError> {
    admitted(m)?;
    let token = s.fence().unwrap_or_default().to_owned();
    let answers = s.each(|n| {
        let view: FenceView = s.admin_ok(n, "POST", call.path())?;
        if view.state != call.state() {
            return Err(CtlError::Unexpected {
                what: "fence",
                why: format!("node {} reports the fence {}", n.id, view.state),
            });
        }
        Ok(view)
    });
    let mut acked = Vec::new();
    let mut refused = Vec::new();
    for (id, r) in answers {
        match r {
            Ok(_) => acked.push(id),
            Err(e) => refused.push(format!("node {id} ({e})")),
        }
    }
    if !refused.is_empty() {
        return Err(CtlError::FencePartial { acked, refused });
    }
    writeln!(
        out,
        "maintenance fence {token} {} on nodes {acked:?}",
        call.state()
    )?;
    Ok(Outcome::Done)
}

/// Whether every node of `observed` reports `state` of exactly the session's token.
pub fn all_report<'a>(
    s: &Session,
    state: &str,
    observed: impl IntoIterator<Item = &'a crate::observe::Metrics>,
) -> bool {
    let Some(token) = s
        .fence()
        .and_then(|t| ursula_protocol::admin::FenceToken::parse(t).ok())
    else {
        return false;
    };
    let mut any = false;
    for m in observed {
        any = true;
        if !m
            .maintenance_fence
            .as_ref()
            .is_some_and(|v| v.is(state, &token))
        {
            return false;
        }
    }
    any
}
