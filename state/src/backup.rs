//! The backup format (format version 3): what `GET /__ursula/backup/group/{g}` answers, what
//! `cold-check` and `import` take, what `ursulactl backup-create` writes beside it
//! (`manifest.json`), and the deep check `backup-verify` and an import run on a group object.
//! The byte layout is documented in `docs/backup.md`.
//!
//! A group object is MessagePack (named fields) of [`GroupObject`]; its `state` is the
//! group's [`GroupState`] as MessagePack, the same encoding a Raft snapshot carries inside its
//! record. Nothing of the source cluster's Raft identity (membership, votes, log ids) is in
//! it: a restore replays the state as one write under the target's own identity.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::stream::GroupState;

/// The backup format, which is the format epoch: in the manifest, in `/__ursula/backup/info`
/// and in every group object.
pub const FORMAT_VERSION: u32 = 3;

/// The manifest's file name at the root of a backup location.
pub const MANIFEST: &str = "manifest.json";

/// One group's export.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupObject {
    pub format_epoch: u32,
    pub raft_group_id: u32,
    pub raft_group_count: u32,
    /// The Raft log index the state reflects on the exporting replica (0 without Raft).
    pub commit_index: u64,
    pub source_node_id: u64,
    pub captured_unix_ms: u64,
    /// MessagePack of the group's state.
    #[serde(with = "serde_bytes")]
    pub state: Vec<u8>,
}

/// `GET /__ursula/backup/info`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BackupInfo {
    pub format_version: u32,
    pub raft_group_count: u32,
    pub node_id: u64,
}

/// The answer of `POST /__ursula/backup/group/{g}/cold-check`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ColdCheck {
    pub raft_group_id: u32,
    /// Distinct objects the group references.
    pub checked: u64,
    pub missing_count: u64,
    /// The first missing keys, sorted, at most [`MISSING_SHOWN`].
    pub missing: Vec<String>,
}

/// How many missing keys a cold check names.
pub const MISSING_SHOWN: usize = 10;

/// The answer of `POST /__ursula/backup/group/{g}/import`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Imported {
    pub raft_group_id: u32,
    pub streams: u64,
}

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    pub created_unix_ms: u64,
    pub raft_group_count: u32,
    pub groups: Vec<ManifestGroup>,
}

/// One group's entry in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ManifestGroup {
    pub raft_group_id: u32,
    /// The object's key relative to the backup location.
    pub object: String,
    pub size: u64,
    /// BLAKE3 of the object's bytes, lowercase hex.
    pub blake3: String,
    pub commit_index: u64,
    pub source_node_id: u64,
    pub stream_count: u64,
}

/// The key of group `g`'s object in a backup.
pub fn object_key(g: u32) -> String {
    format!("groups/group-{g:05}.msgpack")
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("the group object does not decode: {0}")]
    Decode(String),
    #[error("backup format_epoch {got} in the group object, this build reads {FORMAT_VERSION}")]
    FormatEpoch { got: u32 },
    #[error("the group object is group {got}, expected group {want}")]
    GroupId { got: u32, want: u32 },
    #[error("the group object comes from a cluster of {got} groups, this one has {want}")]
    GroupCount { got: u32, want: u32 },
    #[error("group {group}'s state does not decode: {why}")]
    State { group: u32, why: String },
    #[error("group {group}'s state is not consistent: {why}")]
    Invalid {
        group: u32,
        why: crate::stream::tenancy::StateError,
    },
    #[error("cannot encode the group object: {0}")]
    Encode(String),
}

impl GroupObject {
    /// Exports `state` of group `group`, captured at `captured_unix_ms` (the caller's clock:
    /// this crate keeps none).
    pub fn capture(
        group: u32,
        group_count: u32,
        commit_index: u64,
        node_id: u64,
        captured_unix_ms: u64,
        state: &GroupState,
    ) -> Result<GroupObject, BackupError> {
        Ok(GroupObject {
            format_epoch: FORMAT_VERSION,
            raft_group_id: group,
            raft_group_count: group_count,
            commit_index,
            source_node_id: node_id,
            captured_unix_ms,
            state: rmp_serde::to_vec(state).map_err(|e| BackupError::Encode(e.to_string()))?,
        })
    }

    pub fn encode(&self) -> Result<Vec<u8>, BackupError> {
        rmp_serde::to_vec_named(self).map_err(|e| BackupError::Encode(e.to_string()))
    }

    /// Decodes an object and checks its format epoch before anything else.
    pub fn decode(bytes: &[u8]) -> Result<GroupObject, BackupError> {
        #[derive(serde::Deserialize)]
        struct Epoch {
            format_epoch: u32,
        }
        let epoch: Epoch =
            rmp_serde::from_slice(bytes).map_err(|e| BackupError::Decode(e.to_string()))?;
        if epoch.format_epoch != FORMAT_VERSION {
            return Err(BackupError::FormatEpoch {
                got: epoch.format_epoch,
            });
        }
        rmp_serde::from_slice(bytes).map_err(|e| BackupError::Decode(e.to_string()))
    }

    /// The deep check: the object is group `group` of a `count`-group cluster, and its state
    /// decodes and is consistent. Answers the state.
    pub fn open(&self, group: u32, count: u32) -> Result<GroupState, BackupError> {
        if self.raft_group_id != group {
            return Err(BackupError::GroupId {
                got: self.raft_group_id,
                want: group,
            });
        }
        if self.raft_group_count != count {
            return Err(BackupError::GroupCount {
                got: self.raft_group_count,
                want: count,
            });
        }
        let state: GroupState =
            rmp_serde::from_slice(&self.state).map_err(|e| BackupError::State {
                group,
                why: e.to_string(),
            })?;
        state
            .check()
            .map_err(|why| BackupError::Invalid { group, why })?;
        Ok(state)
    }
}

/// Every cold object `state` names (unindexed chunks, index pages, cold snapshot bodies), each
/// once, sorted. The objects the pages list are not in the state: a reader of the pages
/// (restore's cold-check) finds them there.
pub fn cold_references(state: &GroupState) -> Vec<Arc<str>> {
    let mut out = BTreeSet::new();
    for (_, s) in state.streams() {
        for c in s.data.cold_chunks() {
            out.insert(c.object.clone());
        }
        if let Some(ix) = s.data.index() {
            out.extend(ix.keys().map(Arc::from));
        }
        if let Some(o) = s.snapshot.as_ref().and_then(|s| s.cold.clone()) {
            out.insert(o);
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Append;
    use crate::stream::Body;
    use crate::stream::Command;
    use crate::stream::Create;

    fn state() -> GroupState {
        let mut st = GroupState::default();
        st.apply(
            Command::Create(Create {
                body: Some(Body::Raw(bytes::Bytes::from_static(b"hello"))),
                ..Create::octet_stream("demo/a")
            }),
            1_000,
        )
        .expect("create");
        st.apply(
            Command::Append(Append::octet_stream(
                "demo/a",
                bytes::Bytes::from(vec![7u8; 20_000]),
            )),
            2_000,
        )
        .expect("append");
        st
    }

    #[test]
    fn a_group_object_round_trips_and_opens_to_the_same_state() {
        let st = state();
        let obj = GroupObject::capture(3, 8, 42, 1, 1_700_000_000_000, &st).expect("capture");
        let back = GroupObject::decode(&obj.encode().expect("encode")).expect("decode");
        assert_eq!(back, obj);
        let opened = back.open(3, 8).expect("open");
        assert_eq!(opened.len(), 1);
        let s = opened.get("demo/a", 3_000).expect("stream");
        assert_eq!(s.tail(), 20_005);
        assert_eq!(s.data.read(0, 5), b"hello");
    }

    #[test]
    fn another_format_epoch_group_or_count_is_refused_naming_the_check() {
        let st = state();
        let mut obj = GroupObject::capture(3, 8, 42, 1, 1_700_000_000_000, &st).expect("capture");
        assert!(matches!(obj.open(4, 8), Err(BackupError::GroupId { .. })));
        assert!(matches!(
            obj.open(3, 16),
            Err(BackupError::GroupCount { .. })
        ));
        obj.format_epoch = 2;
        match GroupObject::decode(&obj.encode().expect("encode")) {
            Err(err) => assert!(err.to_string().contains("format_epoch 2"), "{err}"),
            Ok(o) => panic!("another format epoch decoded: {o:?}"),
        }
    }

    #[test]
    fn a_state_that_does_not_decode_or_is_inconsistent_fails_the_deep_check() {
        let st = state();
        let mut obj = GroupObject::capture(0, 1, 1, 1, 1_700_000_000_000, &st).expect("capture");
        obj.state.truncate(obj.state.len() / 2);
        assert!(matches!(obj.open(0, 1), Err(BackupError::State { .. })));
    }

    #[test]
    fn usage_counts_units_per_write_and_ignores_duplicates() {
        let st = state();
        let mut out = std::collections::BTreeMap::new();
        st.usage_into(&mut out, 3_000);
        let r = out["demo"];
        assert_eq!(r.committed_append_bytes, 20_005);
        assert_eq!(r.committed_records, 2);
        // 5 bytes -> 1 unit; 20,000 bytes -> 2 units of 10,240.
        assert_eq!(r.committed_write_units, 3);
        assert_eq!(r.retained_bytes, 20_005);
        assert_eq!(r.stream_count, 1);
    }
}
