//! `backup-create` and `backup-verify`, and what `restore` shares with them: the cluster's
//! `/__ursula/backup/info`, the manifest and the checks of each group object.
//!
//! The format is `ursula-state`'s ([`ursula_state::backup`]): one MessagePack [`GroupObject`]
//! per Raft group at [`object_key`], and [`MANIFEST`] beside them, written last so that a
//! backup without a manifest is visibly unfinished.

use std::collections::BTreeMap;
use std::io::Write;

use ursula_state::backup::BackupInfo;
use ursula_state::backup::FORMAT_VERSION;
use ursula_state::backup::GroupObject;
use ursula_state::backup::MANIFEST;
use ursula_state::backup::Manifest;
use ursula_state::backup::ManifestGroup;
use ursula_state::backup::object_key;

use crate::CtlError;
use crate::Outcome;
use crate::location::Location;
use crate::manifest::NodeEntry;
use crate::session::Session;
use crate::session::refused;

/// `GET` on every node: the backup format it speaks and its group count.
pub const INFO_PATH: &str = "/__ursula/backup/info";

/// The largest group object read from a node. Objects are held in memory whole; this only
/// stops a broken answer from exhausting it.
pub const OBJECT_LIMIT: u64 = 16 * 1024 * 1024 * 1024;

/// Why a backup, or the cluster it is taken from or restored into, was refused.
#[derive(Debug, thiserror::Error)]
pub enum BackupFailure {
    #[error("no {MANIFEST} at {location}: not a finished backup")]
    ManifestMissing { location: String },
    #[error("{location}: {MANIFEST} does not parse: {why}")]
    ManifestJson { location: String, why: String },
    #[error("backup manifest format_version {got}, this build reads format {FORMAT_VERSION}")]
    ManifestFormat { got: u64 },
    #[error("the backup at {location} fails verification: {}", failures.join("; "))]
    Invalid {
        location: String,
        failures: Vec<String>,
    },
    #[error(
        "node {node}: target cluster speaks backup format {got}, this build speaks format {FORMAT_VERSION}"
    )]
    TargetFormat { node: u64, got: u32 },
    #[error("the nodes disagree on raft_group_count: {counts}")]
    GroupCountDisagree { counts: String },
    #[error("no node of the manifest answered {INFO_PATH}: {why}")]
    NoNode { why: String },
    #[error("only {answered} of {total} nodes answered {INFO_PATH}, a majority is needed: {why}")]
    TooFewNodes {
        answered: usize,
        total: usize,
        why: String,
    },
    #[error("no node exported group {group}: {why}")]
    NoExport { group: u32, why: String },
    #[error("node {node}'s export of group {group} is not a valid group object: {why}")]
    BadExport { group: u32, node: u64, why: String },
}

/// What the nodes that answered [`INFO_PATH`] agree on.
#[derive(Debug)]
pub struct ClusterInfo {
    pub raft_group_count: u32,
    /// The nodes that answered, in manifest order.
    pub nodes: Vec<u64>,
    /// `node N: why` of each node that could not be reached.
    pub unreachable: Vec<String>,
}

/// Asks every node for [`INFO_PATH`]. Unreachable nodes are left out (the caller decides how
/// many it needs); a node speaking another backup format, or group counts that differ, refuse
/// the cluster.
pub fn cluster_info(s: &Session) -> Result<ClusterInfo, CtlError> {
    let mut answered = Vec::new();
    let mut unreachable = Vec::new();
    for (id, r) in s.each(|n| s.admin_ok::<BackupInfo>(n, "GET", INFO_PATH)) {
        match r {
            Ok(info) => answered.push((id, info)),
            Err(e) if e.is_unreachable() => unreachable.push(format!("node {id}: {e}")),
            Err(e) => return Err(e),
        }
    }
    for (id, info) in &answered {
        if info.format_version != FORMAT_VERSION {
            return Err(BackupFailure::TargetFormat {
                node: *id,
                got: info.format_version,
            }
            .into());
        }
    }
    let Some((_, first)) = answered.first() else {
        return Err(BackupFailure::NoNode {
            why: unreachable.join("; "),
        }
        .into());
    };
    let raft_group_count = first.raft_group_count;
    if answered
        .iter()
        .any(|(_, i)| i.raft_group_count != raft_group_count)
    {
        let counts = answered
            .iter()
            .map(|(id, i)| format!("node {id} has {}", i.raft_group_count))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(BackupFailure::GroupCountDisagree { counts }.into());
    }
    Ok(ClusterInfo {
        raft_group_count,
        nodes: answered.into_iter().map(|(id, _)| id).collect(),
        unreachable,
    })
}

/// `backup-create`: every group from every answering node, the freshest kept, then the
/// manifest.
pub fn create(
    s: &Session,
    loc: &Location,
    created_unix_ms: Option<u64>,
    out: &mut dyn Write,
) -> Result<Outcome, CtlError> {
    let info = cluster_info(s)?;
    // A minority may be down: the freshest answer of a majority holds every committed write
    // of the moment it was read, as far as any replica applied it.
    if info.nodes.len() * 2 <= s.nodes.len() {
        return Err(BackupFailure::TooFewNodes {
            answered: info.nodes.len(),
            total: s.nodes.len(),
            why: info.unreachable.join("; "),
        }
        .into());
    }
    let count = info.raft_group_count;
    let mut groups = Vec::with_capacity(count as usize);
    let (mut bytes, mut streams) = (0u64, 0u64);
    for g in 0..count {
        let (node, raw, obj) = freshest(s, &info.nodes, g)?;
        let state = obj.open(g, count).map_err(|e| BackupFailure::BadExport {
            group: g,
            node,
            why: e.to_string(),
        })?;
        let key = object_key(g);
        let entry = ManifestGroup {
            raft_group_id: g,
            object: key.clone(),
            size: raw.len() as u64,
            blake3: blake3::hash(&raw).to_hex().to_string(),
            commit_index: obj.commit_index,
            source_node_id: obj.source_node_id,
            stream_count: state.len() as u64,
        };
        // The node's bytes verbatim: the checksum is of exactly what it exported.
        loc.put(&key, raw)?;
        bytes += entry.size;
        streams += entry.stream_count;
        groups.push(entry);
    }
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        created_unix_ms: created_unix_ms.unwrap_or_else(now_ms),
        raft_group_count: count,
        groups,
    };
    let text = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| CtlError::Render { why: e.to_string() })?;
    loc.put(MANIFEST, text)?;
    let skipped = if info.unreachable.is_empty() {
        String::new()
    } else {
        format!(" (not reached: {})", info.unreachable.join("; "))
    };
    writeln!(
        out,
        "backup-create: {count} groups, {bytes} bytes, {streams} streams written to {}{skipped}",
        loc.spec()
    )?;
    Ok(Outcome::Done)
}

/// Group `g` from every node in `nodes`; the answer with the highest commit index (the first
/// in manifest order on a tie), with the node that gave it and its bytes.
fn freshest(s: &Session, nodes: &[u64], g: u32) -> Result<(u64, Vec<u8>, GroupObject), CtlError> {
    let path = format!("/__ursula/backup/group/{g}");
    let fetch = |n: &NodeEntry| -> Result<Option<(Vec<u8>, GroupObject)>, CtlError> {
        if !nodes.contains(&n.id) {
            return Ok(None);
        }
        let a = s.admin_raw(n, "GET", &path, Vec::new(), OBJECT_LIMIT)?;
        if a.status != 200 {
            return Err(refused("GET", a.text()));
        }
        let obj = GroupObject::decode(&a.body).map_err(|e| BackupFailure::BadExport {
            group: g,
            node: n.id,
            why: e.to_string(),
        })?;
        Ok(Some((a.body, obj)))
    };
    let mut best: Option<(u64, Vec<u8>, GroupObject)> = None;
    let mut unreachable = Vec::new();
    for (id, r) in s.each(fetch) {
        match r {
            Ok(Some((raw, obj))) => {
                if best
                    .as_ref()
                    .is_none_or(|(_, _, b)| obj.commit_index > b.commit_index)
                {
                    best = Some((id, raw, obj));
                }
            }
            Ok(None) => {}
            // A node lost since it answered the info: the others still export the group.
            Err(e) if e.is_unreachable() => unreachable.push(format!("node {id}: {e}")),
            Err(e) => return Err(e),
        }
    }
    best.ok_or_else(|| {
        BackupFailure::NoExport {
            group: g,
            why: unreachable.join("; "),
        }
        .into()
    })
}

/// A backup that passed every check.
#[derive(Debug)]
pub struct Verified {
    pub manifest: Manifest,
    pub bytes: u64,
    pub streams: u64,
}

/// `backup-verify`: reads the backup only.
pub fn verify_verb(loc: &Location, out: &mut dyn Write) -> Result<Outcome, CtlError> {
    let v = verify(loc)?;
    writeln!(
        out,
        "backup-verify: ok: {} groups, {} bytes, {} streams at {}",
        v.manifest.raft_group_count,
        v.bytes,
        v.streams,
        loc.spec()
    )?;
    Ok(Outcome::Done)
}

/// Every check of a backup: the manifest's format and group list, then each object's size,
/// BLAKE3 and deep decode. Every failure is collected and named, not only the first.
pub fn verify(loc: &Location) -> Result<Verified, CtlError> {
    let manifest = read_manifest(loc)?;
    let count = manifest.raft_group_count;
    let mut failures = Vec::new();
    if count == 0 {
        failures.push("raft_group_count 0".to_owned());
    }
    let mut listed: BTreeMap<u32, usize> = BTreeMap::new();
    for e in &manifest.groups {
        *listed.entry(e.raft_group_id).or_default() += 1;
    }
    for (&id, &times) in &listed {
        if id >= count {
            failures.push(format!("group {id} is outside 0..{count}"));
        } else if times == 2 {
            failures.push(format!("group {id} listed twice"));
        } else if times > 2 {
            failures.push(format!("group {id} listed {times} times"));
        }
    }
    for g in 0..count {
        if !listed.contains_key(&g) {
            failures.push(format!("missing group {g}"));
        }
    }
    let (mut bytes, mut streams) = (0u64, 0u64);
    let mut checked = std::collections::BTreeSet::new();
    for e in &manifest.groups {
        // Each listed group once: a duplicate is already a failure of its own.
        if e.raft_group_id >= count || !checked.insert(e.raft_group_id) {
            continue;
        }
        let found = loc
            .get(&e.object)
            .map_err(|x| x.to_string())
            .and_then(|b| b.ok_or_else(|| format!("object {} is missing", e.object)))
            .and_then(|b| check_object(&b, e, count).map(|n| (b.len() as u64, n)));
        match found {
            Ok((size, n)) => {
                bytes += size;
                streams += n;
            }
            Err(why) => failures.push(format!("group {}: {why}", e.raft_group_id)),
        }
    }
    if !failures.is_empty() {
        return Err(BackupFailure::Invalid {
            location: loc.spec().to_owned(),
            failures,
        }
        .into());
    }
    Ok(Verified {
        manifest,
        bytes,
        streams,
    })
}

/// The manifest, its format version checked before its shape (another format may not parse
/// as this one).
pub fn read_manifest(loc: &Location) -> Result<Manifest, CtlError> {
    let location = loc.spec().to_owned();
    let text = loc
        .get(MANIFEST)?
        .ok_or_else(|| BackupFailure::ManifestMissing {
            location: location.clone(),
        })?;
    let bad = |why: String| BackupFailure::ManifestJson {
        location: location.clone(),
        why,
    };
    let value: serde_json::Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    let version = value
        .get("format_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| bad("no numeric format_version".into()))?;
    if version != u64::from(FORMAT_VERSION) {
        return Err(BackupFailure::ManifestFormat { got: version }.into());
    }
    Ok(serde_json::from_value(value).map_err(|e| bad(e.to_string()))?)
}

/// Size, then BLAKE3, then the deep check of one object against its manifest entry; answers
/// the stream count. The error names the check that failed.
pub fn check_object(bytes: &[u8], e: &ManifestGroup, count: u32) -> Result<u64, String> {
    check_sum(bytes, e)?;
    let obj = GroupObject::decode(bytes).map_err(|x| format!("deep check: {x}"))?;
    let state = obj
        .open(e.raft_group_id, count)
        .map_err(|x| format!("deep check: {x}"))?;
    if obj.commit_index != e.commit_index {
        return Err(format!(
            "commit_index: the manifest says {}, the object says {}",
            e.commit_index, obj.commit_index
        ));
    }
    let n = state.len() as u64;
    if n != e.stream_count {
        return Err(format!(
            "stream_count: the manifest says {}, the state holds {n}",
            e.stream_count
        ));
    }
    Ok(n)
}

/// Size and BLAKE3 of one object against its manifest entry.
pub fn check_sum(bytes: &[u8], e: &ManifestGroup) -> Result<(), String> {
    let size = bytes.len() as u64;
    if size != e.size {
        return Err(format!(
            "size: the manifest says {} bytes, {} has {size}",
            e.size, e.object
        ));
    }
    let hash = blake3::hash(bytes).to_hex();
    if hash.as_str() != e.blake3 {
        return Err(format!(
            "blake3: the manifest says {}, {} hashes to {hash}",
            e.blake3, e.object
        ));
    }
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
