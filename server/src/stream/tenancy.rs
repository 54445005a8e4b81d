//! What a group keeps per bucket (tenant) beside its streams: the usage ledger, the erasure
//! fence a bucket purge installs, and the two whole-group commands of an operator, a bucket
//! purge and a backup import.
//!
//! The ledger's counters are monotonic: a delete, a purge or a snapshot never lowers them, and
//! they travel in snapshots and backups with the unit they were counted in
//! ([`WRITE_UNIT_BYTES`]); a state counted in another unit is refused rather than mixed.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use super::command::Applied;
use super::command::Refusal;
use super::machine::GroupState;

/// The write unit of `committed_write_units`: every committed create or append counts at least
/// one, and its payload rounds up by this many bytes.
pub const WRITE_UNIT_BYTES: u64 = 10240;

fn default_unit() -> u64 {
    WRITE_UNIT_BYTES
}

/// One bucket's committed counters in one group.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BucketUsage {
    pub committed_append_bytes: u64,
    pub committed_records: u64,
    pub committed_write_units: u64,
}

impl BucketUsage {
    fn add(&mut self, other: &BucketUsage) {
        self.committed_append_bytes += other.committed_append_bytes;
        self.committed_records += other.committed_records;
        self.committed_write_units += other.committed_write_units;
    }
}

/// A bucket's usage as `GET /__ursula/usage` reports it: the counters and the gauges.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BucketReport {
    pub committed_append_bytes: u64,
    pub committed_records: u64,
    pub committed_write_units: u64,
    /// Bytes from each stream's retention floor to its tail.
    pub retained_bytes: u64,
    pub stream_count: u64,
}

/// The per-bucket part of a group's replicated state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tenancy {
    #[serde(default = "default_unit")]
    pub write_unit_bytes: u64,
    #[serde(default)]
    pub usage: BTreeMap<Box<str>, BucketUsage>,
    /// Purged buckets: nothing can be created in them again.
    #[serde(default)]
    pub erased: BTreeSet<Box<str>>,
}

impl Default for Tenancy {
    fn default() -> Tenancy {
        Tenancy {
            write_unit_bytes: WRITE_UNIT_BYTES,
            usage: BTreeMap::new(),
            erased: BTreeSet::new(),
        }
    }
}

/// The bucket of a stream key (`{bucket}/{stream}`).
pub fn bucket_of(key: &str) -> &str {
    key.split_once('/').map_or(key, |(b, _)| b)
}

impl Tenancy {
    /// Counts one committed, non-deduplicated create or append of `bytes` payload bytes.
    pub fn count(&mut self, key: &str, bytes: u64) {
        let units = bytes.div_ceil(self.write_unit_bytes).max(1);
        let u = self.usage.entry(bucket_of(key).into()).or_default();
        u.committed_append_bytes += bytes;
        u.committed_records += 1;
        u.committed_write_units += units;
    }

    pub fn is_erased(&self, key: &str) -> bool {
        self.erased.contains(bucket_of(key))
    }
}

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

    /// Erases `bucket` from this group: its streams go, their cold objects are released, and
    /// the bucket is fenced for good. The usage counters stay. Idempotent.
    pub(super) fn purge(&mut self, bucket: &str, forget_cold: bool, now_ms: u64) -> Applied {
        let keys: Vec<Box<str>> = self
            .streams
            .keys()
            .filter(|k| bucket_of(k) == bucket)
            .cloned()
            .collect();
        for k in &keys {
            if let Some(gone) = self.streams.remove(k) {
                self.hot -= gone.data.hot_len();
                let objects = gone.objects();
                self.release(objects, now_ms);
            }
        }
        self.tenancy.erased.insert(bucket.into());
        let prefix = format!("{bucket}/");
        let before = self.cold_garbage.len();
        if forget_cold {
            self.cold_garbage.retain(|(o, _)| !o.starts_with(&prefix));
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

    /// Takes a backup's group state as this group's: only into a group holding no stream, and
    /// only a state counted in this build's write unit. Streams keep their incarnations,
    /// producers, snapshots and retention; the usage ledger adds up and erasure fences join.
    pub(super) fn import(&mut self, from: GroupState) -> Result<Applied, Refusal> {
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
        for (bucket, u) in from.tenancy.usage {
            self.tenancy.usage.entry(bucket).or_default().add(&u);
        }
        self.tenancy.erased.extend(from.tenancy.erased);
        self.recount_hot();
        Ok(Applied::Imported { streams })
    }

    /// Checks what a decoded state claims about itself, as a backup's deep verification does:
    /// every stream's byte layout, its retention floor and snapshot within its bytes, and the
    /// write unit. Answers the stream count.
    pub fn check(&self) -> Result<u64, String> {
        if self.tenancy.write_unit_bytes != WRITE_UNIT_BYTES {
            return Err(format!(
                "write_unit_bytes {} (this build counts in {WRITE_UNIT_BYTES})",
                self.tenancy.write_unit_bytes
            ));
        }
        for (key, s) in self.streams() {
            let why = |m: String| format!("stream {key}: {m}");
            if bucket_of(key) == key || key.is_empty() {
                return Err(why("the key names no bucket".into()));
            }
            s.data.check().map_err(why)?;
            if s.retained > s.tail() {
                return Err(why(format!(
                    "retained offset {} past the tail {}",
                    s.retained,
                    s.tail()
                )));
            }
            if let Some(snap) = &s.snapshot
                && (snap.offset > s.tail() || snap.offset < s.retained)
            {
                return Err(why(format!(
                    "snapshot at {} outside [{}, {}]",
                    snap.offset,
                    s.retained,
                    s.tail()
                )));
            }
            if s.incarnation == 0 || s.incarnation > self.last_incarnation {
                return Err(why(format!(
                    "incarnation {} beyond the group's last {}",
                    s.incarnation, self.last_incarnation
                )));
            }
        }
        Ok(self.streams.len() as u64)
    }
}
