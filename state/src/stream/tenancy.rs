//! Views over a group's per-bucket state ([`super::ledger`]): the usage report of
//! `GET /__ursula/usage`, and the deep check a backup's group state must pass.

use std::collections::BTreeMap;

use super::data::LayoutError;
use super::ledger::BucketReport;
use super::ledger::Tenancy;
use super::ledger::WRITE_UNIT_BYTES;
use super::ledger::bucket_of;
use super::machine::GroupState;

impl GroupState {
    /// Adds this group's view of every bucket it holds or counted to `out`.
    pub fn usage_into(&self, out: &mut BTreeMap<String, BucketReport>, now_ms: u64) {
        for (bucket, u) in &self.tenancy.usage {
            let r = out.entry(bucket.to_string()).or_default();
            r.committed_append_bytes += u.committed_append_bytes;
            r.committed_records += u.committed_records;
            r.committed_write_units += u.committed_write_units;
        }
        for (key, s) in self.streams() {
            if self.get(key, now_ms).is_none() {
                continue;
            }
            let r = out.entry(bucket_of(key).to_owned()).or_default();
            r.retained_bytes += s.tail().saturating_sub(s.retained);
            r.stream_count += 1;
        }
    }

    pub fn tenancy(&self) -> &Tenancy {
        &self.tenancy
    }

    /// Checks what a decoded state claims about itself, as a backup's deep verification does:
    /// every stream's byte layout, its retention floor and snapshot within its bytes, and the
    /// write unit. Answers the stream count.
    pub fn check(&self) -> Result<u64, StateError> {
        if self.tenancy.write_unit_bytes != WRITE_UNIT_BYTES {
            return Err(StateError::WriteUnit(self.tenancy.write_unit_bytes));
        }
        for (key, s) in self.streams() {
            let why = |flaw: StreamFlaw| StateError::Stream {
                key: key.to_owned(),
                flaw,
            };
            if bucket_of(key) == key || key.is_empty() {
                return Err(why(StreamFlaw::NoBucket));
            }
            s.data.check().map_err(|e| why(StreamFlaw::Layout(e)))?;
            if s.retained > s.tail() {
                return Err(why(StreamFlaw::RetainedPastTail {
                    retained: s.retained,
                    tail: s.tail(),
                }));
            }
            if let Some(snap) = &s.snapshot
                && (snap.offset > s.tail() || snap.offset < s.retained)
            {
                return Err(why(StreamFlaw::SnapshotOutside {
                    offset: snap.offset,
                    retained: s.retained,
                    tail: s.tail(),
                }));
            }
            if s.incarnation == 0 || s.incarnation > self.last_incarnation {
                return Err(why(StreamFlaw::Incarnation {
                    incarnation: s.incarnation,
                    last: self.last_incarnation,
                }));
            }
        }
        Ok(self.streams.len() as u64)
    }
}

/// What a decoded group state claims about itself that this build could not have written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("write_unit_bytes {0} (this build counts in {WRITE_UNIT_BYTES})")]
    WriteUnit(u64),
    #[error("stream {key}: {flaw}")]
    Stream { key: String, flaw: StreamFlaw },
}

/// One stream's flaw in a decoded state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamFlaw {
    #[error("the key names no bucket")]
    NoBucket,
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("retained offset {retained} past the tail {tail}")]
    RetainedPastTail { retained: u64, tail: u64 },
    #[error("snapshot at {offset} outside [{retained}, {tail}]")]
    SnapshotOutside {
        offset: u64,
        retained: u64,
        tail: u64,
    },
    #[error("incarnation {incarnation} beyond the group's last {last}")]
    Incarnation { incarnation: u64, last: u64 },
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::stream::Append;
    use crate::stream::Applied;
    use crate::stream::Body;
    use crate::stream::Command;
    use crate::stream::Create;
    use crate::stream::Refusal;

    fn create(st: &mut GroupState, key: &str, body: &[u8]) {
        st.apply(
            Command::Create(Create {
                body: Some(Body::Raw(Bytes::copy_from_slice(body))),
                ..Create::octet_stream(key)
            }),
            1_000,
        )
        .expect("create");
    }

    fn append(st: &mut GroupState, key: &str, body: &[u8]) -> Result<Applied, Refusal> {
        st.apply(
            Command::Append(Append::octet_stream(key, Bytes::copy_from_slice(body))),
            2_000,
        )
    }

    fn usage(st: &GroupState) -> BTreeMap<String, BucketReport> {
        let mut out = BTreeMap::new();
        st.usage_into(&mut out, 3_000);
        out
    }

    #[test]
    fn a_purge_removes_only_its_bucket_fences_it_and_keeps_its_counters() {
        let mut st = GroupState::default();
        create(&mut st, "tenant-a/x", b"12345");
        create(&mut st, "tenant-a/y", b"");
        create(&mut st, "tenant-b/z", b"zz");
        let purge = |forget_cold| Command::Purge {
            bucket: "tenant-a".into(),
            forget_cold,
        };
        let first = st.apply(purge(false), 2_000).expect("purge");
        assert!(
            matches!(
                first,
                Applied::Purged {
                    removed_streams: 2,
                    ..
                }
            ),
            "{first:?}"
        );
        assert!(st.get("tenant-b/z", 3_000).is_some());
        // Idempotent, and the bucket stays fenced.
        let again = st.apply(purge(true), 2_500).expect("purge again");
        assert!(
            matches!(
                again,
                Applied::Purged {
                    removed_streams: 0,
                    ..
                }
            ),
            "{again:?}"
        );
        let recreate = st.apply(Command::Create(Create::octet_stream("tenant-a/x")), 3_000);
        assert_eq!(recreate, Err(Refusal::NotFound));
        assert_eq!(
            append(&mut st, "tenant-a/x", b"more"),
            Err(Refusal::NotFound)
        );
        let u = usage(&st);
        assert_eq!(u["tenant-a"].committed_records, 2);
        assert_eq!(u["tenant-a"].committed_append_bytes, 5);
        assert_eq!(u["tenant-a"].stream_count, 0);
        assert_eq!(u["tenant-b"].stream_count, 1);
    }

    /// Stages `state` in parts of 7 bytes as import `id`, then commits it.
    fn import(st: &mut GroupState, id: u64, state: &[u8]) -> Result<Applied, Refusal> {
        let chunks: Vec<&[u8]> = state.chunks(7).collect();
        for (i, c) in chunks.iter().enumerate() {
            st.apply(
                Command::ImportPart {
                    import: id,
                    index: i as u32,
                    bytes: Bytes::copy_from_slice(c),
                },
                9_000,
            )?;
        }
        st.apply(
            Command::ImportCommit {
                import: id,
                parts: chunks.len() as u32,
            },
            9_000,
        )
    }

    #[test]
    fn an_import_takes_a_state_only_into_an_empty_group_in_the_same_unit() {
        let mut from = GroupState::default();
        create(&mut from, "demo/a", b"hello");
        append(&mut from, "demo/a", b" world").expect("append");
        let bytes = rmp_serde::to_vec(&from).expect("encode");

        let mut target = GroupState::default();
        assert_eq!(
            import(&mut target, 1, &bytes),
            Ok(Applied::Imported { streams: 1 })
        );
        assert_eq!(target.staging, None, "the staging goes with the commit");
        let s = target.get("demo/a", 9_000).expect("stream");
        assert_eq!(s.data.read(0, 100), b"hello world");
        assert_eq!(usage(&target)["demo"].committed_records, 2);
        // A second import finds streams.
        assert_eq!(
            import(&mut target, 2, &bytes),
            Err(Refusal::ImportIntoNonEmpty { streams: 1 })
        );
        // A state counted in another unit is refused.
        let mut other = GroupState::default();
        other.tenancy.write_unit_bytes = 4096;
        let other = rmp_serde::to_vec(&other).expect("encode");
        assert!(matches!(
            import(&mut GroupState::default(), 3, &other),
            Err(Refusal::WriteUnitMismatch { got: 4096, .. })
        ));
    }

    #[test]
    fn import_parts_out_of_order_or_of_another_import_are_refused_and_commit_nothing() {
        let mut from = GroupState::default();
        create(&mut from, "demo/a", b"hello");
        let bytes = Bytes::from(rmp_serde::to_vec(&from).expect("encode"));
        let mut st = GroupState::default();
        let part = |import, index, bytes: Bytes| Command::ImportPart {
            import,
            index,
            bytes,
        };
        st.apply(part(1, 0, bytes.slice(..4)), 1).expect("part 0");
        assert!(matches!(
            st.apply(part(1, 2, bytes.slice(4..)), 1),
            Err(Refusal::ImportOutOfOrder(_))
        ));
        // Another restore starting over replaces the abandoned staging.
        st.apply(part(2, 0, bytes.slice(..4)), 1)
            .expect("part 0 of 2");
        assert!(matches!(
            st.apply(part(1, 1, bytes.slice(4..)), 1),
            Err(Refusal::ImportOutOfOrder(_))
        ));
        assert!(matches!(
            st.apply(
                Command::ImportCommit {
                    import: 2,
                    parts: 2
                },
                1
            ),
            Err(Refusal::ImportOutOfOrder(_))
        ));
        assert!(st.is_empty(), "nothing was imported");
        assert_eq!(st.staging, None);
    }

    #[test]
    fn the_ledger_survives_an_encoded_snapshot_and_older_states_decode_with_an_empty_one() {
        let mut st = GroupState::default();
        create(&mut st, "demo/a", &[1; 30_000]);
        let back: GroupState =
            rmp_serde::from_slice(&rmp_serde::to_vec(&st).expect("encode")).expect("decode");
        assert_eq!(back.tenancy(), st.tenancy());
        assert_eq!(usage(&back)["demo"].committed_write_units, 3);
        // A state of a build before the ledger: the same fields without the last one.
        #[derive(serde::Serialize)]
        struct Old {
            streams: BTreeMap<String, ()>,
            last_incarnation: u64,
            cold_garbage: Vec<(String, u64)>,
        }
        let old = rmp_serde::to_vec(&Old {
            streams: BTreeMap::new(),
            last_incarnation: 7,
            cold_garbage: Vec::new(),
        })
        .expect("encode old");
        let decoded: GroupState = rmp_serde::from_slice(&old).expect("decode old");
        assert_eq!(decoded.tenancy(), &Tenancy::default());
    }
}
