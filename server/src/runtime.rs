//! Cores and groups: each stream hashes to a group, each group belongs to one core thread, and
//! a group's state is touched only on its core. HTTP connections are served on the core threads
//! too, so a request whose group lives on the core that accepted it runs without a thread hop;
//! any other request sends a job to the owning core. No lock guards stream state.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use tokio::sync::mpsc;
use tokio::sync::oneshot;
use tokio::sync::watch;

use crate::stream::Applied;
use crate::stream::Command;
use crate::stream::GroupState;
use crate::stream::Refusal;

pub type GroupId = u32;
type Job = Box<dyn FnOnce(&mut Core) + Send>;

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
            let appended =
                (prev < s.tail() && s.tail() - prev <= TICK_COPY_MAX && prev >= s.retained)
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

/// The state owned by one core thread.
#[derive(Debug, Default)]
pub struct Core {
    pub index: usize,
    pub groups: HashMap<GroupId, Group>,
}

impl Core {
    pub fn group(&mut self, id: GroupId) -> &mut Group {
        self.groups.entry(id).or_default()
    }
}

thread_local! {
    static LOCAL_CORE: RefCell<Option<Core>> = const { RefCell::new(None) };
}

fn run_local<R>(f: impl FnOnce(&mut Core) -> R) -> Option<R> {
    LOCAL_CORE.with(|cell| {
        cell.try_borrow_mut()
            .ok()
            .and_then(|mut c| c.as_mut().map(f))
    })
}

/// Runs `f` on `group` when the calling thread is a core thread (the group's core, by
/// construction of the Raft engine); `None` elsewhere.
pub fn run_on_local_group<R>(group: GroupId, f: impl FnOnce(&mut Group) -> R) -> Option<R> {
    run_local(|c| f(c.group(group)))
}

/// Per-core counters readable from any thread.
#[derive(Debug, Default)]
pub struct CoreStats {
    pub live_waiters: AtomicUsize,
    pub jobs: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    cores: Vec<mpsc::UnboundedSender<Job>>,
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
    #[error("core {0} is gone")]
    CoreGone(usize),
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
        let core_count = core_count.max(1);
        let mut cores = Vec::with_capacity(core_count);
        let mut handles = Vec::with_capacity(core_count);
        for index in 0..core_count {
            let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(rt.handle().clone());
            std::thread::Builder::new()
                .name(format!("ursula-core-{index}"))
                .spawn(move || {
                    LOCAL_CORE.with(|cell| {
                        *cell.borrow_mut() = Some(Core {
                            index,
                            groups: HashMap::new(),
                        })
                    });
                    rt.block_on(async move {
                        let mut batch = Vec::with_capacity(64);
                        while rx.recv_many(&mut batch, 64).await > 0 {
                            for job in batch.drain(..) {
                                run_local(job);
                            }
                            // Let connection tasks on this core run between batches.
                            tokio::task::yield_now().await;
                        }
                    });
                })?;
            cores.push(tx);
        }
        let stats = (0..core_count).map(|_| CoreStats::default()).collect();
        Ok(Runtime {
            inner: Arc::new(Inner {
                cores,
                handles,
                stats,
                group_count: group_count.max(1),
                live_waiter_cap,
            }),
        })
    }

    pub fn core_count(&self) -> usize {
        self.inner.cores.len()
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

    pub fn group_of(&self, key: &str) -> GroupId {
        // FNV-1a: stable across processes and releases, unlike std's randomized hasher.
        let mut h = Fnv1a::default();
        h.write(key.as_bytes());
        (h.finish() % u64::from(self.inner.group_count)) as GroupId
    }

    pub fn core_of(&self, group: GroupId) -> usize {
        group as usize % self.inner.cores.len()
    }

    /// Runs `f` on the group's core: inline when already there, else as a job on that core.
    pub async fn with_group<R, F>(&self, group: GroupId, f: F) -> Result<R, RuntimeError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Group) -> R + Send + 'static,
    {
        let core = self.core_of(group);
        let local = LOCAL_CORE.with(|cell| {
            cell.try_borrow()
                .ok()
                .and_then(|c| c.as_ref().map(|c| c.index))
                == Some(core)
        });
        if local {
            // Hand `f` in through an Option so it can come back if the core is borrowed.
            let mut f = Some(f);
            if let Some(r) = run_local(|c| f.take().map(|f| f(c.group(group)))).flatten() {
                return Ok(r);
            }
            let f = f.ok_or(RuntimeError::CoreGone(core))?;
            return self.send_job(core, group, f).await;
        }
        self.send_job(core, group, f).await
    }

    async fn send_job<R, F>(&self, core: usize, group: GroupId, f: F) -> Result<R, RuntimeError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Group) -> R + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |c: &mut Core| {
            let _ = tx.send(f(c.group(group)));
        });
        if let Some(stats) = self.inner.stats.get(core) {
            stats.jobs.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.cores[core]
            .send(job)
            .map_err(|_| RuntimeError::CoreGone(core))?;
        rx.await.map_err(|_| RuntimeError::CoreGone(core))
    }

    /// Runs `f` over a whole core (metrics, sweeps).
    pub async fn with_core<R, F>(&self, core: usize, f: F) -> Result<R, RuntimeError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Core) -> R + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |c: &mut Core| {
            let _ = tx.send(f(c));
        });
        let sender = self
            .inner
            .cores
            .get(core)
            .ok_or(RuntimeError::CoreGone(core))?;
        sender.send(job).map_err(|_| RuntimeError::CoreGone(core))?;
        rx.await.map_err(|_| RuntimeError::CoreGone(core))
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
