//! An operator's whole-group commands: a bucket purge, and a backup import's staged parts and
//! its commit. Each is checked against the state it lands on and applies the same on every
//! replica.

use bytes::Bytes;

use super::command::*;
use super::ledger::Staging;
use super::ledger::bucket_of;
use super::machine::GroupState;

/// An operator's whole-group commands: a bucket purge and a backup import's parts and commit.
impl GroupState {
    /// Erases `bucket` from this group: its streams go, their cold objects are released, and
    /// the bucket is fenced for good. The usage counters stay. Idempotent.
    pub(super) fn purge(&mut self, bucket: &str, forget_cold: bool, now_ms: u64) -> Applied {
        let mut keys: Vec<Box<str>> = self
            .streams
            .keys()
            .filter(|k| bucket_of(k) == bucket)
            .cloned()
            .collect();
        keys.sort_unstable();
        for k in &keys {
            if let Some(gone) = self.streams.remove(k) {
                self.hot -= gone.data.hot_len();
                self.release_stream(gone, now_ms);
            }
        }
        self.tenancy.erased.insert(bucket.into());
        let prefix = format!("{bucket}/");
        let before = self.cold_garbage.len();
        if forget_cold {
            self.cold_garbage.retain(|(o, _)| !o.starts_with(&prefix));
            self.cold_retired
                .retain(|ix| !ix.prefix.starts_with(&prefix));
        }
        let reclaimed = before - self.cold_garbage.len();
        let pending = self
            .cold_garbage
            .iter()
            .filter(|(o, _)| o.starts_with(&prefix))
            .count();
        Applied::Purged {
            removed_streams: keys.len() as u64,
            pending_cold: pending as u64,
            reclaimed_cold: reclaimed as u64,
        }
    }

    /// Stages part `index` of import `import`. Part 0 starts a new staging (dropping an
    /// abandoned one); any other part must follow the last staged part of the same import.
    pub(super) fn stage_import(
        &mut self,
        import: u64,
        index: u32,
        bytes: Bytes,
    ) -> Result<Applied, Refusal> {
        if !self.streams.is_empty() {
            self.staging = None;
            return Err(Refusal::ImportIntoNonEmpty {
                streams: self.streams.len() as u64,
            });
        }
        if index == 0 {
            self.staging = Some(Staging {
                import,
                parts: Vec::new(),
            });
        }
        let Some(st) = self.staging.as_mut().filter(|s| s.import == import) else {
            return Err(Refusal::ImportOutOfOrder(format!(
                "part {index} of import {import:x}, which is not being staged (another restore ran meanwhile?)"
            )));
        };
        if st.parts.len() != index as usize {
            return Err(Refusal::ImportOutOfOrder(format!(
                "part {index} of import {import:x} after {} parts",
                st.parts.len()
            )));
        }
        st.parts.push(bytes);
        Ok(Applied::ImportStaged { parts: index + 1 })
    }

    /// Makes import `import`'s `parts` staged parts this group's state, at once. The staging
    /// goes either way.
    pub(super) fn commit_import(&mut self, import: u64, parts: u32) -> Result<Applied, Refusal> {
        let staged = self.staging.take();
        let Some(st) = staged.filter(|s| s.import == import && s.parts.len() == parts as usize)
        else {
            return Err(Refusal::ImportOutOfOrder(format!(
                "commit of import {import:x} with {parts} parts, which are not all staged"
            )));
        };
        let mut whole = Vec::with_capacity(st.parts.iter().map(Bytes::len).sum());
        for p in &st.parts {
            whole.extend_from_slice(p);
        }
        drop(st);
        let from: GroupState =
            rmp_serde::from_slice(&whole).map_err(|e| Refusal::ImportUndecodable(e.to_string()))?;
        self.import(from)
    }

    /// Takes a backup's group state as this group's: only into a group holding no stream, and
    /// only a state counted in this build's write unit. Streams keep their incarnations,
    /// producers, snapshots and retention; the usage ledger adds up and erasure fences join.
    fn import(&mut self, from: GroupState) -> Result<Applied, Refusal> {
        if !self.streams.is_empty() {
            return Err(Refusal::ImportIntoNonEmpty {
                streams: self.streams.len() as u64,
            });
        }
        if from.tenancy.write_unit_bytes != self.tenancy.write_unit_bytes {
            return Err(Refusal::WriteUnitMismatch {
                got: from.tenancy.write_unit_bytes,
                want: self.tenancy.write_unit_bytes,
            });
        }
        let streams = from.streams.len() as u64;
        self.streams = from.streams;
        self.last_incarnation = self.last_incarnation.max(from.last_incarnation);
        for g in from.cold_garbage {
            if !self.cold_garbage.iter().any(|(o, _)| *o == g.0) {
                self.cold_garbage.push(g);
            }
        }
        self.cold_retired.extend(from.cold_retired);
        for (bucket, u) in from.tenancy.usage {
            self.tenancy.usage.entry(bucket).or_default().add(&u);
        }
        self.tenancy.erased.extend(from.tenancy.erased);
        self.recount_hot();
        Ok(Applied::Imported { streams })
    }
}
