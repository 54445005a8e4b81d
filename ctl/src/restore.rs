//! `restore`: a verified backup into an empty cluster of the same backup format and group
//! count. Everything that can refuse the restore is checked before the first import: the
//! backup (as `backup-verify`), the target's format and group count, and the cold objects
//! every group references. Then each group is imported, in order, through one node (any node
//! forwards a group's import to its leader).

use std::io::Write;
use std::time::Duration;

use serde::de::DeserializeOwned;
use ursula_state::backup::ColdCheck;
use ursula_state::backup::Imported;
use ursula_state::backup::MISSING_SHOWN;
use ursula_state::backup::ManifestGroup;

use crate::CtlError;
use crate::Outcome;
use crate::backup;
use crate::location::Location;
use crate::manifest::NodeEntry;
use crate::session::Session;
use crate::session::refused;

/// How often an import answered `503` (no leader known yet) is tried, and the pause between.
const NO_LEADER_TRIES: u32 = 10;
const NO_LEADER_PAUSE: Duration = Duration::from_secs(1);

/// The largest JSON answer of a cold check or an import.
const ANSWER_LIMIT: u64 = 16 * 1024 * 1024;

/// Why a restore stopped.
#[derive(Debug, thiserror::Error)]
pub enum RestoreFailure {
    #[error(
        "the backup has {backup} groups, the target cluster has {target}; nothing was imported"
    )]
    GroupCount { backup: u32, target: u32 },
    #[error(
        "{total} cold objects this backup references are missing from the target cluster's cold store (first: {}); nothing was imported",
        first.join(", ")
    )]
    ColdMissing { total: u64, first: Vec<String> },
    #[error(
        "group {group} already holds data on the target cluster (409: {body}); {imported} groups before it were imported, none after"
    )]
    Conflict {
        group: u32,
        imported: u32,
        body: String,
    },
    #[error(
        "group {group}: no leader known after {NO_LEADER_TRIES} tries (503: {body}); {imported} groups before it were imported, none after"
    )]
    NoLeader {
        group: u32,
        imported: u32,
        body: String,
    },
    #[error("group {group}: the object changed since the backup was verified: {why}")]
    Changed { group: u32, why: String },
}

/// `restore`.
pub fn restore(s: &Session, loc: &Location, out: &mut dyn Write) -> Result<Outcome, CtlError> {
    let verified = backup::verify(loc)?;
    let count = verified.manifest.raft_group_count;
    let info = backup::cluster_info(s)?;
    if info.raft_group_count != count {
        return Err(RestoreFailure::GroupCount {
            backup: count,
            target: info.raft_group_count,
        }
        .into());
    }
    // cluster_info answers at least one node, or fails.
    let target = s.node(info.nodes.first().copied().unwrap_or_default())?;
    let mut groups: Vec<&ManifestGroup> = verified.manifest.groups.iter().collect();
    groups.sort_by_key(|e| e.raft_group_id);

    let mut missing_total = 0u64;
    let mut first_missing = Vec::new();
    for e in &groups {
        let body = reread(loc, e)?;
        let path = format!("/__ursula/backup/group/{}/cold-check", e.raft_group_id);
        let a = s.admin_raw(target, "POST", &path, body, ANSWER_LIMIT)?;
        if a.status != 200 {
            return Err(refused("POST", a.text()));
        }
        let c: ColdCheck = json(a)?;
        missing_total += c.missing_count;
        for key in c.missing {
            if first_missing.len() < MISSING_SHOWN {
                first_missing.push(key);
            }
        }
    }
    if missing_total > 0 {
        return Err(RestoreFailure::ColdMissing {
            total: missing_total,
            first: first_missing,
        }
        .into());
    }

    let mut streams = 0u64;
    for (done, e) in groups.iter().enumerate() {
        let imported = u32::try_from(done).unwrap_or(u32::MAX);
        streams += import(s, target, loc, e, imported)?.streams;
    }
    writeln!(
        out,
        "restore: {count} groups, {} bytes, {streams} streams imported from {} through node {}",
        verified.bytes,
        loc.spec(),
        target.id
    )?;
    Ok(Outcome::Done)
}

/// One group's import; `imported` groups went in before it.
fn import(
    s: &Session,
    target: &NodeEntry,
    loc: &Location,
    e: &ManifestGroup,
    imported: u32,
) -> Result<Imported, CtlError> {
    let group = e.raft_group_id;
    let path = format!("/__ursula/backup/group/{group}/import");
    let body = reread(loc, e)?;
    let mut tries = 0;
    loop {
        tries += 1;
        let a = s.admin_raw(target, "POST", &path, body.clone(), ANSWER_LIMIT)?;
        match a.status {
            200 => return json(a),
            409 => {
                return Err(RestoreFailure::Conflict {
                    group,
                    imported,
                    body: crate::observe::snippet(&a.text().body),
                }
                .into());
            }
            // A group without a known leader (an election in progress) is worth a short wait.
            503 if tries < NO_LEADER_TRIES => std::thread::sleep(NO_LEADER_PAUSE),
            503 => {
                return Err(RestoreFailure::NoLeader {
                    group,
                    imported,
                    body: crate::observe::snippet(&a.text().body),
                }
                .into());
            }
            _ => return Err(refused("POST", a.text())),
        }
    }
}

/// A group's object read again, and checked against the manifest's size and BLAKE3: the
/// location may have changed since it was verified.
fn reread(loc: &Location, e: &ManifestGroup) -> Result<Vec<u8>, CtlError> {
    let group = e.raft_group_id;
    let changed = |why: String| RestoreFailure::Changed { group, why };
    let bytes = loc
        .get(&e.object)?
        .ok_or_else(|| changed(format!("object {} is missing", e.object)))?;
    backup::check_sum(&bytes, e).map_err(changed)?;
    Ok(bytes)
}

fn json<T: DeserializeOwned>(a: crate::session::RawAnswer) -> Result<T, CtlError> {
    a.text().json()
}
