//! One attached database: what the commit path, the snapshot thread and `status` share.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Condvar;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use serde_json::json;
use ursula_protocol::offset::Offset;

use crate::error::Action;
use crate::error::Kind;
use crate::format::Sidecar;
use crate::format::offset_text;
use crate::gate::ReadGate;
use crate::log;

/// Measurements kept between drains, per kind.
pub const STATS_CAP: usize = 8192;

#[derive(Debug, Clone)]
pub struct Poison {
    pub kind: Kind,
    pub reason: String,
    pub fenced: bool,
}

#[derive(Debug, Clone)]
pub struct Refused {
    pub kind: Kind,
    pub reason: String,
}

impl Refused {
    /// Whether the stream (or a layer in front of it) refuses writes: the spec's
    /// `writes_refused`, which holds snapshots back and logs `writes_resumed` when it ends. A
    /// transaction too large for one append, or a setup the extension does not support
    /// (journal mode, page size, `locking_mode=EXCLUSIVE`), says nothing about the stream.
    pub fn stream_refuses(&self) -> bool {
        !matches!(self.kind, Kind::TooLarge | Kind::Unsupported)
    }

    /// A refusal of the setup, not of a write: the spec's `refused_kind` list (payment_required,
    /// unauthorized, forbidden, rate_limited, too_large, not_applied, unreachable) has no
    /// `unsupported`, so status reports it as an error of its own kind with action fix.
    pub fn is_setup(&self) -> bool {
        self.kind == Kind::Unsupported
    }
}

#[derive(Debug, Clone, Copy)]
pub struct CommitStat {
    pub bytes: u64,
    pub raw: u64,
    pub pages: u64,
    pub attempts: u64,
    pub append_us: u64,
    pub vfs_us: u64,
}

#[derive(Debug, Clone)]
pub struct SnapshotStat {
    pub offset: Offset,
    pub bytes: u64,
    pub raw: u64,
    pub copy_us: u64,
    pub total_us: u64,
}

#[derive(Debug, Default)]
pub struct Dropped {
    pub commits: u64,
    pub commit_bytes: u64,
    pub commit_retries: u64,
    pub checkpoints: u64,
    pub snapshots: u64,
}

/// Everything `status` and `stats` report. Held briefly, never across a request. `None` offsets
/// are reported as `"-1"`.
#[derive(Debug)]
pub struct Health {
    pub offset: Option<Offset>,
    pub epoch: u64,
    pub poison: Option<Poison>,
    pub refused: Option<Refused>,
    /// The latest refusal a layer answered was a 402.
    pub payment: Option<String>,
    pub snapshot: Option<Offset>,
    pub retained: Option<Offset>,
    pub local: Option<Offset>,
    pub installed: Option<Offset>,
    pub attach_ms: u64,
    pub commits: u64,
    pub append_retries: u64,
    pub log_bytes: u64,
    pub db_bytes: u64,
    pub snapshot_at: Option<Instant>,
    pub snapshot_failures: u64,
    pub snapshot_error: Option<String>,
    pub snapshot_bytes: Option<u64>,
    pub commit_stats: VecDeque<CommitStat>,
    pub checkpoint_stats: VecDeque<u64>,
    pub snapshot_stats: VecDeque<SnapshotStat>,
    pub dropped: Dropped,
    /// A following replica: the follower thread runs.
    pub following: bool,
    /// A following replica: the stream's tail as the follower last read it.
    pub tail: Option<Offset>,
    /// A following replica: when it last had applied everything the stream held; `None`
    /// before its first read.
    pub caught_up_at: Option<Instant>,
    /// A following replica: it has applied everything it read of the stream.
    pub caught_up: bool,
}

/// Stream bytes between what a replica applied and the tail it last read.
fn lag_bytes(applied: Option<Offset>, tail: Option<Offset>) -> u64 {
    let at = applied.map_or(0, |o| o.0);
    tail.map_or(0, |t| t.0.saturating_sub(at))
}

/// How long a replica has been behind the stream: 0 while it has applied all it read.
fn lag_ms(h: &Health) -> u64 {
    match (h.caught_up, h.caught_up_at) {
        (false, Some(t)) => t.elapsed().as_millis() as u64,
        _ => 0,
    }
}

/// The WAL position the local files reflect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WalClaim {
    pub salt1: u32,
    pub salt2: u32,
    /// 1-based index of the last commit frame; 0 when the WAL holds nothing.
    pub frame: u32,
}

impl WalClaim {
    pub fn encode(&self) -> String {
        if self.frame == 0 {
            ":0".to_owned()
        } else {
            format!("{}:{}:{}", self.salt1, self.salt2, self.frame)
        }
    }

    pub fn decode(s: &str) -> Option<WalClaim> {
        if s == ":0" {
            return Some(WalClaim::default());
        }
        let mut it = s.split(':');
        let claim = WalClaim {
            salt1: it.next()?.parse().ok()?,
            salt2: it.next()?.parse().ok()?,
            frame: it.next()?.parse().ok()?,
        };
        it.next().is_none().then_some(claim)
    }
}

/// The commit path's state: held for a whole commit, and by the snapshot copy.
#[derive(Debug, Default)]
pub struct CommitState {
    /// WAL writes of the open write transaction, by file offset, not yet on disk.
    pub overlay: BTreeMap<u64, Vec<u8>>,
    /// After the append was acknowledged, the rest of the transaction's WAL writes go to disk.
    pub passthrough: bool,
    /// Some connection holds SQLite's WAL write lock.
    pub writer_active: bool,
    /// Last producer seq the stream acknowledged for this owner's epoch (the claim is 0).
    pub seq: u64,
    /// A commit at this seq was refused as never applied; the seq stays free.
    pub refused_seq: Option<u64>,
    pub wal: WalClaim,
    /// Committed WAL frames of the current generation: page number -> offsets of its images.
    /// Checkpoint writes to the database file are checked against them.
    pub wal_pages: std::collections::HashMap<u32, Vec<u64>>,
    /// Database sizes (pages) committed in the current generation: legal checkpoint truncations.
    pub wal_sizes: std::collections::HashSet<u32>,
    /// A read handle on the `-wal` for those checks, opened once per WAL file; dropped when the
    /// file is truncated or deleted.
    pub wal_reader: Option<std::fs::File>,
    /// What the sidecar says; rewritten after each commit.
    pub sidecar: Sidecar,
}

#[derive(Debug)]
pub struct Db {
    pub path: PathBuf,
    pub url: String,
    pub read_only: bool,
    pub commit: Mutex<CommitState>,
    pub health: Mutex<Health>,
    /// Main-database handles open through the VFS.
    pub open_files: AtomicUsize,
    /// Set when the snapshot thread should look at the log.
    pub snapshot_wake: (Mutex<bool>, Condvar),
    pub closed: AtomicBool,
    /// A following replica (`Mode::Follow`): commits keep arriving from the stream.
    pub follows: bool,
    /// Keeps read transactions and the follower's writes apart (only a follower uses it).
    pub gate: ReadGate,
    /// The offset a point-in-time attach asked for (`Some(None)`: `at:-1`); unset for every
    /// other mode. Set once, after the attach built the file.
    pub at: OnceLock<Option<Offset>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the data usable for status; keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Db {
    pub fn new(path: PathBuf, url: String, read_only: bool, sidecar: Sidecar) -> Db {
        Db {
            path,
            url,
            read_only,
            commit: Mutex::new(CommitState {
                sidecar,
                ..CommitState::default()
            }),
            health: Mutex::new(Health {
                offset: None,
                epoch: 0,
                poison: None,
                refused: None,
                payment: None,
                snapshot: None,
                retained: None,
                local: None,
                installed: None,
                attach_ms: 0,
                commits: 0,
                append_retries: 0,
                log_bytes: 0,
                db_bytes: 0,
                snapshot_at: None,
                snapshot_failures: 0,
                snapshot_error: None,
                snapshot_bytes: None,
                commit_stats: VecDeque::new(),
                checkpoint_stats: VecDeque::new(),
                snapshot_stats: VecDeque::new(),
                dropped: Dropped::default(),
                following: false,
                tail: None,
                caught_up_at: None,
                caught_up: false,
            }),
            open_files: AtomicUsize::new(0),
            snapshot_wake: (Mutex::new(false), Condvar::new()),
            closed: AtomicBool::new(false),
            follows: false,
            gate: ReadGate::default(),
            at: OnceLock::new(),
        }
    }

    /// The same database as a following replica.
    pub fn following(mut self) -> Db {
        self.follows = true;
        self
    }

    /// Whether new read transactions fail: a fenced owner no longer holds what the stream
    /// does, and a replica that stopped following holds a stream that is gone or changed.
    pub fn refuses_reads(&self) -> bool {
        let h = self.health();
        h.poison
            .as_ref()
            .is_some_and(|p| p.fenced || (self.follows && !h.following))
    }

    pub fn commit_state(&self) -> MutexGuard<'_, CommitState> {
        lock(&self.commit)
    }

    pub fn health(&self) -> MutexGuard<'_, Health> {
        lock(&self.health)
    }

    pub fn file(&self) -> String {
        self.path.display().to_string()
    }

    pub fn is_poisoned(&self) -> bool {
        self.health().poison.is_some()
    }

    /// Writes an event about this database: its `file` and `stream`, then `fields`.
    pub fn event(&self, level: log::Level, name: &str, fields: &[(&str, &str)]) {
        log::file_event(level, name, &self.file(), &self.url, fields);
    }

    /// Poisons the file; the first reason stays.
    pub fn poison(&self, kind: Kind, reason: &str) {
        let mut h = self.health();
        if h.poison.is_some() {
            return;
        }
        let fenced = kind == Kind::Fenced;
        h.poison = Some(Poison {
            kind,
            reason: reason.to_owned(),
            fenced,
        });
        h.refused = None;
        h.payment = None;
        drop(h);
        self.event(
            log::Level::Warn,
            "poisoned",
            &[
                ("fenced", if fenced { "true" } else { "false" }),
                ("reason", reason),
            ],
        );
    }

    /// Records a commit refused before it reached the stream. `Kind::Unsupported` is a setup
    /// the extension refuses (see [`Refused::is_setup`]): logged as `journal_refused`, the
    /// spec's event for a write that would bypass the WAL the stream replicates.
    pub fn refuse(&self, kind: Kind, reason: &str) {
        let mut h = self.health();
        let starting = h.refused.as_ref().is_none_or(|r| r.kind != kind);
        if kind == Kind::Unsupported {
            if starting {
                self.event(log::Level::Warn, "journal_refused", &[("reason", reason)]);
            }
        } else if kind == Kind::PaymentRequired {
            let first = h.payment.is_none();
            h.payment = Some(reason.to_owned());
            if first {
                self.event(
                    log::Level::Warn,
                    "payment_required",
                    &[("what", "commit"), ("explanation", reason)],
                );
            }
        } else if kind != Kind::TooLarge {
            h.payment = None;
            if starting {
                self.event(
                    log::Level::Warn,
                    "writes_refused",
                    &[
                        ("what", "commit"),
                        ("kind", kind.as_str()),
                        ("reason", reason),
                    ],
                );
            }
        }
        h.refused = Some(Refused {
            kind,
            reason: reason.to_owned(),
        });
    }

    pub fn record_commit(&self, offset: Offset, frame_bytes: u64, stat: CommitStat, retries: u64) {
        let mut h = self.health();
        let resumed =
            h.refused.as_ref().is_some_and(Refused::stream_refuses) || h.payment.is_some();
        h.offset = Some(offset);
        h.refused = None;
        h.payment = None;
        h.commits += 1;
        h.append_retries += retries;
        h.log_bytes += frame_bytes;
        if h.commit_stats.len() >= STATS_CAP
            && let Some(old) = h.commit_stats.pop_front()
        {
            h.dropped.commits += 1;
            h.dropped.commit_bytes += old.bytes;
            h.dropped.commit_retries += old.attempts.saturating_sub(1);
        }
        h.commit_stats.push_back(stat);
        drop(h);
        if resumed {
            self.event(log::Level::Info, "writes_resumed", &[]);
        }
    }

    pub fn record_checkpoint(&self, us: u64) {
        let mut h = self.health();
        if h.checkpoint_stats.len() >= STATS_CAP {
            h.checkpoint_stats.pop_front();
            h.dropped.checkpoints += 1;
        }
        h.checkpoint_stats.push_back(us);
    }

    /// `ursula_status`: every field the spec lists. Offsets are the server's strings, `"-1"`
    /// for none.
    pub fn status_json(&self, snapshot_min_bytes: u64) -> crate::ordered::Ordered {
        let h = self.health();
        let poisoned = h.poison.is_some();
        // writes_refused and refused_kind report only the spec's kinds of refused writes.
        let write_refusal = h.refused.as_ref().filter(|r| !poisoned && !r.is_setup());
        let error = if let Some(p) = &h.poison {
            // A replica that stopped following is rebuilt by attaching it again.
            let action = if self.follows {
                Action::Reattach
            } else {
                p.kind.poison_action()
            };
            json!({ "kind": p.kind.as_str(), "action": action, "message": p.reason })
        } else if let Some(r) = h.refused.as_ref().filter(|r| r.is_setup()) {
            json!({ "kind": r.kind.as_str(), "action": Action::Fix, "message": r.reason })
        } else if let Some(r) = write_refusal {
            let action = if r.kind == Kind::TooLarge {
                Action::Fix
            } else {
                Action::Retry
            };
            json!({ "kind": "refused", "action": action, "message": r.reason, "refused_kind": r.kind.as_str() })
        } else {
            serde_json::Value::Null
        };
        // The spec's order (offset, epoch, poisoned, fenced, reason, ...), not the alphabet's.
        crate::ordered! {
            "offset": offset_text::to_text(h.offset),
            "epoch": h.epoch,
            "poisoned": poisoned,
            "fenced": h.poison.as_ref().is_some_and(|p| p.fenced),
            "reason": h.poison.as_ref().map(|p| p.reason.clone()),
            "read_only": self.read_only,
            "at": self.at.get().map(|at| offset_text::to_text(*at)),
            "writes_refused": write_refusal.is_some(),
            "refused_kind": write_refusal.map(|r| r.kind.as_str()),
            "refused_reason": write_refusal.map(|r| r.reason.clone()),
            "payment_required": !poisoned && h.payment.is_some(),
            "payment_reason": if poisoned { None } else { h.payment.clone() },
            "snapshot": offset_text::to_text(h.snapshot),
            "retained": offset_text::to_text(h.retained),
            "local": offset_text::to_text(h.local),
            "installed": offset_text::to_text(h.installed),
            "attach_ms": h.attach_ms,
            "commits": h.commits,
            "append_retries": h.append_retries,
            "log_bytes": h.log_bytes,
            "snapshot_due_bytes": h.db_bytes.max(snapshot_min_bytes),
            "snapshot_age_ms": h.snapshot_at.map(|t| t.elapsed().as_millis() as u64),
            "snapshot_failures": h.snapshot_failures,
            "snapshot_error": h.snapshot_error,
            "snapshot_bytes": h.snapshot_bytes,
            "error": error,
            "following": h.following,
            "tail": self.follows.then(|| offset_text::to_text(h.tail)),
            "lag_bytes": self.follows.then(|| lag_bytes(h.offset, h.tail)),
            "lag_ms": self.follows.then(|| lag_ms(&h)),
        }
    }

    /// `ursula_stats`: drains the measurements kept since the last drain.
    pub fn drain_stats_json(&self) -> serde_json::Value {
        let mut h = self.health();
        let commits: Vec<_> = h
            .commit_stats
            .drain(..)
            .map(|c| json!({"bytes": c.bytes, "raw": c.raw, "pages": c.pages, "attempts": c.attempts, "append_us": c.append_us, "vfs_us": c.vfs_us}))
            .collect();
        let checkpoints: Vec<_> = h.checkpoint_stats.drain(..).collect();
        let snapshots: Vec<_> = h
            .snapshot_stats
            .drain(..)
            .map(|s| json!({"offset": s.offset.to_string(), "bytes": s.bytes, "raw": s.raw, "copy_us": s.copy_us, "total_us": s.total_us}))
            .collect();
        let d = std::mem::take(&mut h.dropped);
        json!({
            "commits": commits,
            "checkpoints_us": checkpoints,
            "snapshots": snapshots,
            "dropped": {
                "commits": d.commits, "commit_bytes": d.commit_bytes, "commit_retries": d.commit_retries,
                "checkpoints": d.checkpoints, "snapshots": d.snapshots,
            },
        })
    }

    pub fn wake_snapshot(&self) {
        let (m, c) = &self.snapshot_wake;
        *lock(m) = true;
        c.notify_one();
    }
}
