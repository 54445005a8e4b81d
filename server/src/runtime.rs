//! Cores and groups: each stream hashes to a group, each group to one core. Every core thread
//! runs its own single-threaded Tokio runtime, serves HTTP connections, and hosts its groups'
//! Raft tasks. A group's state sits behind a lock of its own, taken by whichever thread serves
//! the request: no thread hop per request, and no lock shared by groups (docs/architecture.md
//! says why a lock per group and not per-core mailboxes).

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use tokio::sync::watch;

use ursula_state::stream::Applied;
use ursula_state::stream::Command;
use ursula_state::stream::GroupState;
use ursula_state::stream::Refusal;

pub type GroupId = u32;

/// What live readers of a stream are told after each change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    pub incarnation: u64,
    pub tail: u64,
    pub closed: bool,
    /// The bytes the latest change appended and where they start, so a live reader that was
    /// at the previous tail sends them without reading the group again.
    pub appended: Option<(u64, bytes::Bytes)>,
}

/// Appends larger than this are not copied into the tick; readers fetch them.
const TICK_COPY_MAX: u64 = 1 << 20;

/// One group: its state machine and the live readers waiting on its streams.
#[derive(Debug, Default)]
pub struct Group {
    pub state: GroupState,
    watchers: HashMap<Box<str>, watch::Sender<Tick>>,
    pub appends: u64,
    pub applied_index: u64,
    /// The Raft log index the state reflects (0 without Raft): a backup export names it, so
    /// `backup-create` keeps the freshest replica's answer.
    pub log_index: u64,
}

impl Group {
    /// Applies a command and wakes the stream's live readers in the same turn.
    pub fn apply(&mut self, cmd: Command, now_ms: u64) -> Result<Applied, Refusal> {
        let key = cmd.key().map(str::to_owned);
        let result = self.state.apply(cmd, now_ms);
        self.applied_index += 1;
        match (&result, key) {
            (Ok(Applied::Deleted), Some(key)) => {
                // Dropping the sender ends every live read registered on that incarnation.
                self.watchers.remove(key.as_str());
            }
            (Ok(Applied::Created { fresh: true, .. }), Some(key)) => {
                self.watchers.remove(key.as_str());
            }
            (
                Ok(Applied::Appended {
                    duplicate: false, ..
                }),
                Some(key),
            ) => {
                self.appends += 1;
                self.notify(&key, now_ms);
            }
            (Ok(Applied::Swept { removed }), _) if *removed > 0 => {
                let state = &self.state;
                self.watchers.retain(|k, _| state.get(k, now_ms).is_some());
            }
            _ => {}
        }
        result
    }

    fn notify(&mut self, key: &str, now_ms: u64) {
        let Some(tx) = self.watchers.get(key) else {
            return;
        };
        if tx.receiver_count() == 0 {
            self.watchers.remove(key);
            return;
        }
        if let Some(s) = self.state.get(key, now_ms) {
            let prev = tx.borrow().tail;
            let appended = (prev < s.tail()
                && s.tail() - prev <= TICK_COPY_MAX
                && prev >= s.retained
                && prev >= s.data.hot_start())
            .then(|| (prev, bytes::Bytes::from(s.data.read(prev, s.tail() - prev))));
            tx.send_replace(Tick {
                incarnation: s.incarnation,
                tail: s.tail(),
                closed: s.closed,
                appended,
            });
        }
    }

    /// Replaces the whole state (a Raft snapshot install); live readers re-check their streams.
    pub fn replace_state(&mut self, state: GroupState) {
        self.state = state;
        self.state.recount_hot();
        self.watchers.clear();
    }

    /// Subscribes to changes of a live stream; the receiver sees every change after this call.
    pub fn subscribe(&mut self, key: &str, now_ms: u64) -> Option<watch::Receiver<Tick>> {
        let s = self.state.get(key, now_ms)?;
        let tick = Tick {
            incarnation: s.incarnation,
            tail: s.tail(),
            closed: s.closed,
            appended: None,
        };
        if let Some(tx) = self.watchers.get(key)
            && tx.borrow().incarnation == tick.incarnation
        {
            return Some(tx.subscribe());
        }
        let (tx, rx) = watch::channel(tick);
        self.watchers.insert(key.into(), tx);
        Some(rx)
    }
}

/// A committed command of the group failed to apply (a panic while applying it): its state
/// may be half changed, so nothing reads, flushes or snapshots it again in this process, and
/// no later entry applies. Recorded once; a corrected binary replays the entry at its next
/// start (docs/operations.md, "Apply-failure isolation").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyStop {
    pub term: u64,
    pub index: u64,
    /// `panic`.
    pub kind: &'static str,
    pub message: String,
}

/// Per-core counters readable from any thread.
#[derive(Debug, Default)]
pub struct CoreStats {
    pub live_waiters: AtomicUsize,
    /// SSE responses that started on this core's groups.
    pub sse_streams_opened: AtomicU64,
    /// `event: error` events those responses wrote.
    pub sse_error_events: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    groups: Vec<Mutex<Group>>,
    stopped: Vec<OnceLock<ApplyStop>>,
    /// Set with the first stop: until then no request needs to find its group to ask.
    any_stopped: AtomicBool,
    handles: Vec<tokio::runtime::Handle>,
    stats: Vec<CoreStats>,
    group_count: u32,
    live_waiter_cap: usize,
}

/// Handle to every core; cheap to clone.
#[derive(Debug, Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no group {0}")]
    NoGroup(GroupId),
    #[error("group {0} stopped: a committed command failed to apply on this replica")]
    ApplyStopped(GroupId),
    #[error("could not start core thread: {0}")]
    Spawn(#[from] std::io::Error),
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Runtime {
    /// Starts `core_count` core threads, each with its own single-threaded Tokio runtime.
    pub fn start(
        core_count: usize,
        group_count: u32,
        live_waiter_cap: usize,
    ) -> Result<Runtime, RuntimeError> {
        Runtime::start_pinned(core_count, group_count, live_waiter_cap, None)
    }

    /// [`Runtime::start`], each core thread pinned to the CPU `pins` names for it.
    pub fn start_pinned(
        core_count: usize,
        group_count: u32,
        live_waiter_cap: usize,
        pins: Option<Vec<usize>>,
    ) -> Result<Runtime, RuntimeError> {
        let core_count = core_count.max(1);
        let group_count = group_count.max(1);
        let mut handles = Vec::with_capacity(core_count);
        for index in 0..core_count {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(rt.handle().clone());
            let pin = pins.as_ref().and_then(|p| p.get(index).copied());
            std::thread::Builder::new()
                .name(format!("ursula-core-{index}"))
                .spawn(move || {
                    if let Some(cpu) = pin
                        && let Err(e) = crate::affinity::pin_current(cpu)
                    {
                        tracing::warn!(core = index, cpu, error = %e, "cannot pin the core thread");
                    }
                    // The runtime serves whatever is spawned on it (connections, Raft tasks).
                    rt.block_on(std::future::pending::<()>());
                })?;
        }
        let stats = (0..core_count).map(|_| CoreStats::default()).collect();
        let groups = (0..group_count)
            .map(|_| Mutex::new(Group::default()))
            .collect();
        Ok(Runtime {
            inner: Arc::new(Inner {
                groups,
                stopped: (0..group_count).map(|_| OnceLock::new()).collect(),
                any_stopped: AtomicBool::new(false),
                handles,
                stats,
                group_count,
                live_waiter_cap,
            }),
        })
    }

    pub fn core_count(&self) -> usize {
        self.inner.handles.len()
    }

    pub fn group_count(&self) -> u32 {
        self.inner.group_count
    }

    /// The Tokio handle of a core, to serve connections on it.
    pub fn core_handle(&self, core: usize) -> Option<&tokio::runtime::Handle> {
        self.inner.handles.get(core)
    }

    pub fn stats(&self, core: usize) -> Option<&CoreStats> {
        self.inner.stats.get(core)
    }

    /// The counters of the core `group` runs on.
    pub fn group_stats(&self, group: GroupId) -> Option<&CoreStats> {
        self.stats(self.core_of(group))
    }

    pub fn group_of(&self, key: &str) -> GroupId {
        // FNV-1a: stable across processes and releases, unlike std's randomized hasher.
        let mut h = Fnv1a::default();
        h.write(key.as_bytes());
        (h.finish() % u64::from(self.inner.group_count)) as GroupId
    }

    pub fn core_of(&self, group: GroupId) -> usize {
        group as usize % self.inner.handles.len()
    }

    /// Runs `f` on the group's state under its lock. Async so the engines' callers need not
    /// know how groups are guarded.
    pub async fn with_group<R, F>(&self, group: GroupId, f: F) -> Result<R, RuntimeError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Group) -> R + Send + 'static,
    {
        if self.apply_stop(group).is_some() {
            return Err(RuntimeError::ApplyStopped(group));
        }
        self.with_group_now(group, f)
            .ok_or(RuntimeError::NoGroup(group))
    }

    /// The same, from synchronous code (the Raft state machine); `None` for a group that
    /// does not exist or whose apply stopped.
    pub fn with_group_now<R>(&self, group: GroupId, f: impl FnOnce(&mut Group) -> R) -> Option<R> {
        if self.apply_stop(group).is_some() {
            return None;
        }
        let m = self.inner.groups.get(group as usize)?;
        // A panic inside a group's turn leaves its state as it was between commands.
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        Some(f(&mut g))
    }

    /// Why `group`'s state may no longer be touched, if a committed command failed to apply.
    pub fn apply_stop(&self, group: GroupId) -> Option<&ApplyStop> {
        self.inner.stopped.get(group as usize)?.get()
    }

    /// Stops `group` for good in this process; the first stop is the one kept.
    pub fn stop_applying(&self, group: GroupId, stop: ApplyStop) {
        if let Some(s) = self.inner.stopped.get(group as usize) {
            let _ = s.set(stop);
            self.inner.any_stopped.store(true, Ordering::Release);
        }
    }

    /// Whether any group stopped applying in this process.
    pub fn any_apply_stop(&self) -> bool {
        self.inner.any_stopped.load(Ordering::Acquire)
    }

    /// The groups of `core`, in order.
    pub fn groups_of(&self, core: usize) -> impl Iterator<Item = GroupId> + '_ {
        (0..self.inner.group_count).filter(move |g| self.core_of(*g) == core)
    }

    /// Reserves a live-reader slot on the core of `group`; `None` when the core is full.
    pub fn reserve_waiter(&self, group: GroupId) -> Option<WaiterSlot> {
        let core = self.core_of(group);
        let stats = self.inner.stats.get(core)?;
        let now = stats.live_waiters.fetch_add(1, Ordering::Relaxed) + 1;
        if self.inner.live_waiter_cap != 0 && now > self.inner.live_waiter_cap {
            stats.live_waiters.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(WaiterSlot {
            rt: self.clone(),
            core,
        })
    }
}

/// A live reader's place on its core; released on drop.
#[derive(Debug)]
pub struct WaiterSlot {
    rt: Runtime,
    core: usize,
}

impl Drop for WaiterSlot {
    fn drop(&mut self) {
        if let Some(stats) = self.rt.inner.stats.get(self.core) {
            stats.live_waiters.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[derive(Debug)]
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
