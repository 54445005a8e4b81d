//! The cold read cache: ranges of cold objects this node read, kept in memory up to
//! `storage.cold.cache_size` bytes (docs/cold-tier.md, "Read cache").
//!
//! Cold objects never change once written (each flush writes a new, uniquely named object),
//! so a cached range is never stale: the replicated state decides which objects a read
//! uses, and the cache only saves the fetch. A bucket purge drops the bucket's entries, so
//! erased bytes do not stay in memory.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use quick_cache::Weighter;
use quick_cache::sync::Cache;

/// A cached piece: an object's key (shared with the read plan, so a lookup copies no string)
/// and the byte range read from it.
type Key = (Arc<str>, u64, u64);

/// Weighs an entry by its bytes.
#[derive(Clone)]
struct ByLength;

impl Weighter<Key, Bytes> for ByLength {
    fn weight(&self, key: &Key, value: &Bytes) -> u64 {
        // The key's own bytes count too, and no entry weighs nothing (a zero-weight entry is
        // never evicted).
        (value.len() + key.0.len()).max(1) as u64
    }
}

/// The cache and its hit and miss counters.
pub struct ColdCache {
    entries: Cache<Key, Bytes, ByLength>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// What the metrics report of the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub capacity: u64,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

/// The size of an average cached piece, for the cache's initial table.
const TYPICAL_PIECE: u64 = 256 << 10;

impl ColdCache {
    /// A cache of at most `capacity` bytes; `None` for 0 (the cache is off).
    pub fn new(capacity: u64) -> Option<ColdCache> {
        (capacity > 0).then(|| ColdCache {
            entries: Cache::with_weighter(
                usize::try_from((capacity / TYPICAL_PIECE).max(16)).unwrap_or(16),
                capacity,
                ByLength,
            ),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// The cached bytes of `range` of `object`, counting a hit or a miss.
    pub fn get(&self, object: &Arc<str>, range: &Range<u64>) -> Option<Bytes> {
        let found = self
            .entries
            .get(&(Arc::clone(object), range.start, range.end));
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps `bytes`, read from `range` of `object`.
    pub fn insert(&self, object: &Arc<str>, range: &Range<u64>, bytes: Bytes) {
        self.entries
            .insert((Arc::clone(object), range.start, range.end), bytes);
    }

    /// Drops every entry of an object under `prefix` (a purged bucket's `{bucket}/`).
    pub fn forget_prefix(&self, prefix: &str) {
        self.entries
            .retain(|(object, _, _), _| !object.starts_with(prefix));
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            capacity: self.entries.capacity(),
            bytes: self.entries.weight(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(object: &str) -> Arc<str> {
        Arc::from(object)
    }

    #[test]
    fn a_cached_range_is_served_again_and_counted_as_a_hit() {
        let cache = ColdCache::new(1 << 20).expect("on");
        assert_eq!(cache.get(&key("b/g0/1"), &(0..3)), None);
        cache.insert(&key("b/g0/1"), &(0..3), Bytes::from_static(b"abc"));
        assert_eq!(
            cache.get(&key("b/g0/1"), &(0..3)).as_deref(),
            Some(&b"abc"[..])
        );
        // Another range of the same object is another entry.
        assert_eq!(cache.get(&key("b/g0/1"), &(1..3)), None);
        let s = cache.stats();
        assert_eq!((s.hits, s.misses), (1, 2));
        assert_eq!(s.bytes, 3 + "b/g0/1".len() as u64);
    }

    #[test]
    fn the_cache_holds_no_more_than_its_capacity() {
        let capacity = 64 << 10;
        let cache = ColdCache::new(capacity).expect("on");
        for i in 0..200u64 {
            cache.insert(
                &key(&format!("b/g0/{i}")),
                &(0..4096),
                Bytes::from(vec![0u8; 4096]),
            );
        }
        let s = cache.stats();
        assert!(s.bytes <= capacity, "{s:?}");
        assert!(s.bytes > 0, "{s:?}");
    }

    #[test]
    fn a_purged_buckets_entries_are_dropped_and_others_stay() {
        let cache = ColdCache::new(1 << 20).expect("on");
        cache.insert(&key("gone/g0/1"), &(0..1), Bytes::from_static(b"x"));
        cache.insert(&key("kept/g0/1"), &(0..1), Bytes::from_static(b"y"));
        cache.forget_prefix("gone/");
        assert_eq!(cache.get(&key("gone/g0/1"), &(0..1)), None);
        assert_eq!(
            cache.get(&key("kept/g0/1"), &(0..1)).as_deref(),
            Some(&b"y"[..])
        );
    }

    #[test]
    fn a_zero_capacity_turns_the_cache_off() {
        assert!(ColdCache::new(0).is_none());
    }
}
