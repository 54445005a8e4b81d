//! The group-level rules of the cold index (docs/cold-tier.md, "Cold-index pages" and
//! "Compaction"): compaction's rewrites, sealing pages, collecting pages, and what a stream
//! that goes leaves behind. Each command is checked against the state it lands on, so a
//! leader's plan that the stream outran changes nothing.

use std::sync::Arc;

use super::command::Applied;
use super::command::ColdCompact;
use super::command::ColdDropPages;
use super::command::ColdIndexPage;
use super::machine::GroupState;
use super::machine::Stream;
use super::page::ColdIndex;

impl GroupState {
    /// Releases what a stream that goes held: its unindexed chunks' objects and its cold
    /// snapshot body now, its index pages (and what they list) through `cold_retired`.
    pub(super) fn release_stream(&mut self, mut gone: Stream, now_ms: u64) {
        let (chunks, index) = gone.data.take_cold();
        let mut objects: Vec<Arc<str>> = chunks.into_iter().map(|c| c.object).collect();
        if let Some(o) = gone.snapshot.as_ref().and_then(|s| s.cold.clone()) {
            objects.push(o);
        }
        self.release(objects, now_ms);
        if let Some(ix) = index.filter(|ix| ix.first < ix.sealed)
            && !self.cold_retired.iter().any(|r| r.prefix == ix.prefix)
        {
            self.cold_retired.push(ix);
        }
    }

    /// Indexes of streams that are gone, whose pages are still to be collected.
    pub fn cold_retired(&self) -> &[ColdIndex] {
        &self.cold_retired
    }

    /// Every index whose pages the state names: the live streams' and the retired ones.
    pub fn cold_indexes(&self) -> impl Iterator<Item = &ColdIndex> + '_ {
        self.streams
            .values()
            .filter_map(|s| s.data.index())
            .chain(self.cold_retired.iter())
    }

    /// Whether a chunk of any stream other than `key`'s run names `object`.
    fn named_elsewhere(&self, key: &str, start: u64, object: &Arc<str>) -> bool {
        self.streams.iter().any(|(k, s)| {
            s.data
                .cold_chunks()
                .iter()
                .any(|c| c.object == *object && !(**k == *key && c.start == start))
        })
    }

    /// A refusal never releases anything: an adoption's object is the stream's own chunk, and
    /// a rewrite's fresh object is left to the orphan sweep (which reads the pages), since
    /// the state alone cannot tell a stale duplicate of an applied rewrite, whose object a
    /// page may list by now, from a rewrite that never applied.
    pub(super) fn cold_compact(&mut self, c: ColdCompact, now_ms: u64) -> Applied {
        let rejected = Applied::ColdIndexed { accepted: false };
        let Some(s) = self
            .streams
            .get(c.key.as_str())
            .filter(|s| s.incarnation == c.incarnation)
        else {
            return rejected;
        };
        let exact = s.data.cold_chunks().iter().any(|k| {
            !k.owned && k.start == c.start && k.end == c.end && k.object == c.object && k.at == c.at
        });
        let allowed = if c.adopt {
            // Only the lone packed chunk itself, whose object no other chunk names.
            exact && !self.named_elsewhere(&c.key, c.start, &c.object)
        } else {
            // A fresh object: named by no chunk and not released.
            !self.named_elsewhere("", u64::MAX, &c.object)
                && !self.cold_garbage.iter().any(|(g, _)| *g == c.object)
        };
        if !allowed {
            return rejected;
        }
        let Some(replaced) = self.streams.get_mut(c.key.as_str()).and_then(|s| {
            s.data
                .compact(c.page_bytes, c.start, c.end, c.object.clone(), c.at)
        }) else {
            return rejected;
        };
        let old: Vec<Arc<str>> = replaced
            .into_iter()
            .map(|k| k.object)
            .filter(|o| *o != c.object)
            .collect();
        self.release(old, now_ms);
        Applied::ColdIndexed { accepted: true }
    }

    pub(super) fn cold_index(&mut self, c: ColdIndexPage) -> Applied {
        let accepted = match self.streams.get_mut(c.key.as_str()) {
            Some(s) if s.incarnation == c.incarnation => {
                s.data
                    .seal(c.incarnation, c.page, c.page_bytes, c.prefix.clone())
            }
            _ => false,
        };
        // A refused page stays in the store under its key until the orphan sweep: the key is
        // the page's own, so a later seal of the same page writes the same bytes there.
        Applied::ColdIndexed { accepted }
    }

    pub(super) fn cold_drop_pages(&mut self, c: ColdDropPages, now_ms: u64) -> Applied {
        let live = match self.streams.get_mut(c.key.as_str()) {
            Some(s) if s.data.index().is_some_and(|ix| ix.prefix == c.prefix) => {
                let retained = s.retained;
                let first = s.data.index().map_or(0, |ix| ix.first);
                s.data
                    .drop_pages(&c.prefix, c.below, retained)
                    .then_some(first)
            }
            _ => None,
        };
        let first = live.or_else(|| {
            let r = self
                .cold_retired
                .iter_mut()
                .find(|r| r.prefix == c.prefix)?;
            if c.below <= r.first || c.below > r.sealed {
                return None;
            }
            let first = r.first;
            r.first = c.below;
            Some(first)
        });
        let Some(first) = first else {
            return Applied::ColdIndexed { accepted: false };
        };
        self.cold_retired.retain(|r| r.first < r.sealed);
        let pages = (first..c.below).map(|p| Arc::from(format!("{}{p:010}", c.prefix)));
        let objects: Vec<Arc<str>> = c.objects.into_iter().chain(pages).collect();
        self.release_owned(&c.key, objects, now_ms);
        Applied::ColdIndexed { accepted: true }
    }

    /// Queues objects pages listed: owned by `key`'s stream, so only its own unindexed chunks
    /// (the rest of a chunk a page split) can still name one.
    fn release_owned(&mut self, key: &str, objects: Vec<Arc<str>>, now_ms: u64) {
        for o in objects {
            let named = self
                .streams
                .get(key)
                .is_some_and(|s| s.data.cold_chunks().iter().any(|c| c.object == o));
            if !named && !self.cold_garbage.iter().any(|(g, _)| *g == o) {
                self.cold_garbage.push((o, now_ms));
            }
        }
    }
}
