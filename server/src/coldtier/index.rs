//! The cold index as the server runs it (docs/cold-tier.md, "Cold-index pages" and
//! "Compaction"): reading pages (checked whole, cached), turning a read's paged range into
//! object pieces, and the leader's work on each group every flush tick: compaction, sealing
//! pages, and collecting the pages retention or a stream's end let go.
//!
//! Every step uploads first and commits after, like the flush: the state machine checks each
//! command against the state it lands on, so a plan the stream outran changes nothing, and an
//! object no commit names is released (or, at worst, left to the orphan sweep).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use ursula_cold::ColdError;
use ursula_protocol::metrics::ColdIndexMetrics;
use ursula_state::stream::Applied;
use ursula_state::stream::ColdCompact;
use ursula_state::stream::ColdDropPages;
use ursula_state::stream::ColdIndexPage;
use ursula_state::stream::Command;
use ursula_state::stream::data::CompactionLimits;
use ursula_state::stream::data::CompactionRun;
use ursula_state::stream::page::ColdIndex;
use ursula_state::stream::page::ColdPiece;
use ursula_state::stream::page::Page;
use ursula_state::stream::page::PageError;
use ursula_state::stream::page::PageId;
use ursula_state::stream::page::Paged;

use super::ColdTier;
use crate::engine::EngineError;
use crate::engine::GroupEngine;
use crate::runtime::GroupId;
use crate::runtime::Runtime;
use crate::runtime::now_ms;

pub use ursula_state::stream::page::PAGE_BYTES;
/// Work per group per tick, so one tick stays short.
const SEALS_PER_PASS: usize = 32;
const COMPACTIONS_PER_PASS: usize = 4;
const RETIRED_PER_PASS: usize = 2;
/// Pages one collection reads and releases at most.
const PAGES_PER_DROP: u64 = 64;
/// The spec's cold-index cursor: streams visited per group per minute for retention.
const STREAMS_PER_MINUTE: usize = 16;
const MINUTE: Duration = Duration::from_secs(60);

/// A page that could not be used, or the store that could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Store(#[from] ColdError),
    #[error("cold index page {key} is unusable: {source}")]
    Page {
        key: String,
        #[source]
        source: PageError,
    },
}

/// The index work's counters (the metrics' `cold_index_*` and `cold_compaction*` fields).
#[derive(Debug, Default)]
pub struct IndexCounters {
    pub compactions: AtomicU64,
    pub adoptions: AtomicU64,
    pub compacted_bytes: AtomicU64,
    pub pages_sealed: AtomicU64,
    pub pages_dropped: AtomicU64,
    /// Pages refused when read (torn, corrupt, misplaced, newer layout).
    pub page_errors: AtomicU64,
    /// Uploads and reads of the index work that failed (retried next tick).
    pub errors: AtomicU64,
}

impl IndexCounters {
    pub fn metrics(&self, page_bytes: u64) -> ColdIndexMetrics {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ColdIndexMetrics {
            cold_index_page_bytes: page_bytes,
            cold_compactions: load(&self.compactions),
            cold_compaction_adoptions: load(&self.adoptions),
            cold_compacted_bytes: load(&self.compacted_bytes),
            cold_index_pages_sealed: load(&self.pages_sealed),
            cold_index_pages_dropped: load(&self.pages_dropped),
            cold_index_page_errors: load(&self.page_errors),
            cold_index_errors: load(&self.errors),
        }
    }
}

/// `{bucket}/cold-index/g{group}/{incarnation:016x}/`: under its bucket, so a purge of the
/// prefix takes it; one directory per stream incarnation.
pub fn page_prefix(stream_key: &str, group: GroupId, incarnation: u64) -> Arc<str> {
    let bucket = stream_key.split('/').next().unwrap_or_default();
    Arc::from(format!("{bucket}/cold-index/g{group}/{incarnation:016x}/"))
}

impl ColdTier {
    /// Reads and checks one page; the raw bytes stay in the read cache.
    pub async fn page(&self, key: &str, id: PageId) -> Result<Page, IndexError> {
        let object: Arc<str> = Arc::from(key);
        let whole = 0..u64::MAX;
        let cached = self.cache.as_ref().and_then(|c| c.get(&object, &whole));
        let fetched = cached.is_none();
        let bytes = match cached {
            Some(b) => b,
            None => self.store.get(key).await?,
        };
        let page = Page::decode(&bytes, id).map_err(|source| {
            self.counters
                .index
                .page_errors
                .fetch_add(1, Ordering::Relaxed);
            IndexError::Page {
                key: key.to_owned(),
                source,
            }
        })?;
        // Only a page that checks out is kept: a damaged one is read again once repaired.
        if let (true, Some(c)) = (fetched, &self.cache) {
            c.insert(&object, &whole, bytes);
        }
        Ok(page)
    }

    /// The object pieces of a read's paged range, in order.
    pub async fn resolve(&self, paged: &Paged) -> Result<Vec<ColdPiece>, IndexError> {
        let pb = paged.page_bytes.max(1);
        let r = paged.range.clone();
        let mut out = Vec::new();
        if r.is_empty() {
            return Ok(out);
        }
        for p in r.start / pb..=(r.end - 1) / pb {
            let key = paged.key(p);
            let page = self.page(&key, paged.id(p)).await?;
            let lo = r.start.max(p * pb);
            let hi = r.end.min((p + 1) * pb);
            if page.covered().start > lo {
                return Err(IndexError::Page {
                    key,
                    source: PageError::Tiling(format!(
                        "it starts at {}, a read needs {lo}",
                        page.covered().start
                    )),
                });
            }
            out.extend(page.pieces(lo..hi));
        }
        Ok(out)
    }

    /// Pages `range` of `ix`. With `missing_ok`, a page the store does not hold lists nothing
    /// (it was collected, or retention passed it before it was sealed); without, it is an
    /// error (the orphan sweep cannot judge what such a page listed).
    pub async fn read_pages(
        &self,
        ix: &ColdIndex,
        range: std::ops::Range<u64>,
        missing_ok: bool,
    ) -> Result<Vec<Page>, IndexError> {
        let mut pages = Vec::new();
        for p in range {
            match self.page(&ix.key(p), ix.id(p)).await {
                Ok(page) => pages.push(page),
                Err(IndexError::Store(ColdError::NotFound { .. })) if missing_ok => {}
                Err(e) => return Err(e),
            }
        }
        Ok(pages)
    }
}

/// Where each group's retention cursor stands.
#[derive(Debug, Default)]
pub struct Cursors {
    by_group: HashMap<GroupId, Cursor>,
}

#[derive(Debug)]
struct Cursor {
    window: Instant,
    visited: usize,
    after: Option<String>,
}

/// What one tick does for a group, planned under its lock.
#[derive(Default)]
struct Plan {
    compactions: Vec<(String, u64, CompactionRun)>,
    seals: Vec<(String, u64, Page)>,
    drops: Vec<(String, ColdIndex, std::ops::Range<u64>)>,
    retired: Vec<ColdIndex>,
}

/// One pass over the groups of `core` this node leads.
pub async fn maintain_core(
    rt: &Runtime,
    engine: &dyn GroupEngine,
    tier: &ColdTier,
    core: usize,
    cursors: &mut Cursors,
) {
    let groups: Vec<GroupId> = rt.groups_of(core).collect();
    for group in groups {
        if !engine.leads(group) {
            continue;
        }
        let cursor = cursors.by_group.entry(group).or_insert_with(|| Cursor {
            window: Instant::now(),
            visited: 0,
            after: None,
        });
        if cursor.window.elapsed() >= MINUTE {
            cursor.window = Instant::now();
            cursor.visited = 0;
        }
        let Some(plan) = plan(rt, tier, group, cursor) else {
            continue;
        };
        for (key, incarnation, run) in plan.compactions {
            compact(engine, tier, group, key, incarnation, run).await;
        }
        // A stream with several full pages seals them one after another in the same pass.
        let mut budget = SEALS_PER_PASS;
        for (key, incarnation, page) in plan.seals {
            let mut next = Some(page);
            while let Some(page) = next.take() {
                if budget == 0 || !seal(engine, tier, group, &key, incarnation, page).await {
                    break;
                }
                budget -= 1;
                next = rt
                    .with_group_now(group, |g| {
                        let s = g.state.get(&key, now_ms())?;
                        (s.incarnation == incarnation)
                            .then(|| s.data.sealable(incarnation, tier.settings.index_page_bytes))
                            .flatten()
                    })
                    .flatten();
            }
        }
        for (key, ix, range) in plan.drops {
            drop_pages(engine, tier, group, &key, &ix, range).await;
        }
        for ix in plan.retired {
            let below = ix.sealed.min(ix.first + PAGES_PER_DROP);
            drop_pages(engine, tier, group, "", &ix, ix.first..below).await;
        }
    }
}

fn plan(rt: &Runtime, tier: &ColdTier, group: GroupId, cursor: &mut Cursor) -> Option<Plan> {
    let pb = tier.settings.index_page_bytes;
    let compaction = tier.settings.compaction;
    rt.with_group_now(group, |g| {
        let mut plan = Plan::default();
        let mut droppable: Vec<(String, ColdIndex, std::ops::Range<u64>)> = Vec::new();
        for (key, s) in g.state.streams() {
            if compaction
                && plan.compactions.len() < COMPACTIONS_PER_PASS
                && let Some(run) = s.data.compaction_run(pb, CompactionLimits::SPEC)
            {
                plan.compactions.push((key.to_owned(), s.incarnation, run));
            }
            if plan.seals.len() < SEALS_PER_PASS
                && let Some(page) = s.data.sealable(s.incarnation, pb)
            {
                plan.seals.push((key.to_owned(), s.incarnation, page));
            }
            if let (Some(ix), Some(range)) = (s.data.index(), s.data.droppable_pages(s.retained)) {
                let range = range.start..range.end.min(range.start + PAGES_PER_DROP);
                droppable.push((key.to_owned(), ix.clone(), range));
            }
        }
        droppable.sort_by(|a, b| a.0.cmp(&b.0));
        let budget = STREAMS_PER_MINUTE.saturating_sub(cursor.visited);
        let start = cursor
            .after
            .as_ref()
            .map_or(0, |after| droppable.partition_point(|d| d.0 <= *after));
        let picked: Vec<_> = droppable[start..]
            .iter()
            .chain(droppable[..start].iter())
            .take(budget)
            .cloned()
            .collect();
        cursor.visited += picked.len();
        if let Some(last) = picked.last() {
            cursor.after = Some(last.0.clone());
        }
        plan.drops = picked;
        plan.retired = g
            .state
            .cold_retired()
            .iter()
            .take(RETIRED_PER_PASS)
            .cloned()
            .collect();
        plan
    })
}

/// Rewrites a run into one object of the stream's own, or adopts a lone packed object that
/// nothing else names.
async fn compact(
    engine: &dyn GroupEngine,
    tier: &ColdTier,
    group: GroupId,
    key: String,
    incarnation: u64,
    run: CompactionRun,
) {
    let c = &tier.counters.index;
    let page_bytes = run.page_bytes;
    let cmd = |object: Arc<str>, at: u64, adopt: bool| {
        Command::ColdCompact(ColdCompact {
            adopt,
            key: key.clone(),
            incarnation,
            page_bytes,
            start: run.start,
            end: run.end,
            object,
            at,
        })
    };
    if let Some((object, at)) = &run.single
        && let Ok(Ok(Applied::ColdIndexed { accepted: true })) =
            engine.propose(group, cmd(object.clone(), *at, true)).await
    {
        c.adoptions.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let body = match tier.fetch(&run.pieces).await {
        Ok(b) => b,
        Err(e) => {
            c.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(group, key, error = %e, "compaction cannot read its run; retrying next tick");
            return;
        }
    };
    let bucket = key.split('/').next().unwrap_or_default();
    let object: Arc<str> = Arc::from(super::flush::object_name(bucket, group));
    let len = body.len() as u64;
    let _staged = tier.stage(object.clone());
    if let Err(e) = tier.store.put(&object, body).await {
        c.errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(group, key, error = %e, "compaction upload failed; retrying next tick");
        return;
    }
    match engine.propose(group, cmd(object.clone(), 0, false)).await {
        Ok(Ok(Applied::ColdIndexed { accepted: true })) => {
            c.compactions.fetch_add(1, Ordering::Relaxed);
            c.compacted_bytes.fetch_add(len, Ordering::Relaxed);
            tracing::debug!(group, key, object = %object, bytes = len, "compaction committed");
        }
        // Refused: nothing names the object; the orphan sweep deletes it.
        Ok(_) => {}
        Err(EngineError::NotLeader { .. }) => delete_uncommitted(tier, &object).await,
        Err(e) => tracing::warn!(group, key, error = %e, "compaction commit failed"),
    }
}

async fn delete_uncommitted(tier: &ColdTier, object: &str) {
    if let Err(e) = tier.store.delete(object).await {
        tracing::warn!(object, error = %e, "cannot delete an uncommitted cold object");
    }
}

/// Uploads a page under its own key, then commits it; whether it was sealed.
async fn seal(
    engine: &dyn GroupEngine,
    tier: &ColdTier,
    group: GroupId,
    key: &str,
    incarnation: u64,
    page: Page,
) -> bool {
    let c = &tier.counters.index;
    let prefix = page_prefix(key, group, incarnation);
    let object: Arc<str> = Arc::from(format!("{prefix}{:010}", page.page));
    let _staged = tier.stage(object.clone());
    if let Err(e) = tier.store.put(&object, page.encode().into()).await {
        c.errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(group, key, page = page.page, error = %e, "index page upload failed; retrying next tick");
        return false;
    }
    let cmd = Command::ColdIndex(ColdIndexPage {
        key: key.to_owned(),
        incarnation,
        page: page.page,
        page_bytes: page.page_bytes,
        prefix,
    });
    match engine.propose(group, cmd).await {
        Ok(Ok(Applied::ColdIndexed { accepted: true })) => {
            c.pages_sealed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(group, key, page = page.page, "index page sealed");
            true
        }
        other => {
            tracing::debug!(group, key, page = page.page, outcome = ?other, "index page not sealed");
            false
        }
    }
}

/// Reads pages `range` of `ix`, then commits their collection: the pages and every object
/// they list are released, but for a live stream (`key` not empty) the object the last page
/// carries on past it, which a later page or the state's own chunk still reads.
async fn drop_pages(
    engine: &dyn GroupEngine,
    tier: &ColdTier,
    group: GroupId,
    key: &str,
    ix: &ColdIndex,
    range: std::ops::Range<u64>,
) {
    let c = &tier.counters.index;
    let pages = match tier.read_pages(ix, range.clone(), true).await {
        Ok(p) => p,
        Err(e) => {
            c.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(group, key, error = %e, "cannot read index pages to collect; nothing released");
            return;
        }
    };
    let mut objects: Vec<Arc<str>> = Vec::new();
    let last = pages.last().filter(|p| p.page + 1 == range.end);
    let carried = last
        .filter(|p| p.last_continues)
        .and_then(|p| p.entries.last().map(|e| e.object.clone()));
    for o in pages.iter().flat_map(|p| p.objects()) {
        let kept = !key.is_empty() && carried.as_ref() == Some(&o);
        if !kept && !objects.contains(&o) {
            objects.push(o);
        }
    }
    let cmd = Command::ColdDropPages(ColdDropPages {
        key: key.to_owned(),
        prefix: ix.prefix.clone(),
        below: range.end,
        objects,
    });
    if let Ok(Ok(Applied::ColdIndexed { accepted: true })) = engine.propose(group, cmd).await {
        c.pages_dropped
            .fetch_add(range.end - range.start, Ordering::Relaxed);
        tracing::debug!(group, key, prefix = %ix.prefix, below = range.end, "index pages collected");
    }
}
