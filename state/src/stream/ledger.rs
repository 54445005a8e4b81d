//! What a group keeps per bucket (tenant) beside its streams: the usage ledger's counters, the
//! erasure fences a bucket purge installs, and a backup import's staged parts. Plain data; the
//! commands that change it are applied in [`super::machine`], the views over it are in
//! [`super::tenancy`].
//!
//! The ledger's counters are monotonic: a delete, a purge or a snapshot never lowers them, and
//! they travel in snapshots and backups with the unit they were counted in
//! ([`WRITE_UNIT_BYTES`]); a state counted in another unit is refused rather than mixed.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use bytes::Bytes;

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
    pub fn add(&mut self, other: &BucketUsage) {
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

/// A backup import's parts, staged in the replicated state until its commit (so a leader
/// change or a snapshot in between keeps them).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Staging {
    pub import: u64,
    pub parts: Vec<Bytes>,
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
    // A byte search: `split_once('/')` goes through the `char` searcher, which compares each
    // candidate with a `memcmp` call, a visible share of an in-memory append's CPU
    // (docs/dev/speed-log.md, "Per-request work above hyper, trimmed again"). `/` is ASCII, so its
    // index is a char boundary.
    match key.bytes().position(|b| b == b'/') {
        Some(i) => &key[..i],
        None => key,
    }
}

impl Tenancy {
    /// Counts one committed, non-deduplicated create or append of `bytes` payload bytes.
    pub fn count(&mut self, key: &str, bytes: u64) {
        let units = bytes.div_ceil(self.write_unit_bytes).max(1);
        let bucket = bucket_of(key);
        // Looked up by `&str` first: `entry` takes an owned key, an allocation per append for
        // a bucket that is almost always there already.
        let u = match self.usage.get_mut(bucket) {
            Some(u) => u,
            None => self.usage.entry(bucket.into()).or_default(),
        };
        u.committed_append_bytes += bytes;
        u.committed_records += 1;
        u.committed_write_units += units;
    }

    pub fn is_erased(&self, key: &str) -> bool {
        self.erased.contains(bucket_of(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_is_the_key_up_to_its_first_slash_or_the_whole_key() {
        assert_eq!(bucket_of("__default/orders"), "__default");
        assert_eq!(bucket_of("b/s/with/more"), "b");
        assert_eq!(bucket_of("ünï/çödé"), "ünï");
        assert_eq!(bucket_of("/leading"), "");
        assert_eq!(bucket_of("no-slash"), "no-slash");
        assert_eq!(bucket_of(""), "");
    }
}
