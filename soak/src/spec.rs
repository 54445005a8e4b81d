//! The soak's shape. `month` is the documented run (about an hour on two cores); `short` is the
//! one the README's test command runs (about a minute).

/// How much of each kind of work one soak does.
#[derive(Debug, Clone)]
pub struct Spec {
    pub streams: usize,
    /// The first `busy` streams take half the small appends and every snapshot and retention
    /// move: their histories grow long.
    pub busy: usize,
    pub buckets: usize,
    pub rounds: usize,
    /// Concurrent writers; each owns a disjoint set of streams, so a stream's writes are ordered.
    pub writers: usize,
    /// Per round, across all streams.
    pub small_appends: usize,
    pub small_max: usize,
    pub large_appends: usize,
    /// Large appends and snapshot bodies are `1 MiB ..= max`.
    pub large_max: usize,
    pub snapshots: usize,
    pub snapshot_max: usize,
    pub retention_moves: usize,
    pub deletes: usize,
    /// Every this many rounds: a bucket purged, a voter stopped and restarted (its leaderships
    /// move), a voter SIGKILLed and restarted. 0 never.
    pub purge_every: usize,
    pub restart_every: usize,
    pub kill_every: usize,
    pub seed: u64,
    /// `raft.snapshot_log_budget`: small, so the snapshot driver builds (and uploads) Raft
    /// snapshots as often as a busy month would. It must stay above what the groups keep after
    /// a snapshot (256 entries each), or writes are refused for good.
    pub log_budget: &'static str,
}

const MIB: usize = 1 << 20;

impl Spec {
    pub fn short() -> Spec {
        Spec {
            streams: 60,
            busy: 3,
            buckets: 3,
            rounds: 6,
            writers: 4,
            small_appends: 1000,
            small_max: 400,
            large_appends: 3,
            large_max: 2 * MIB,
            snapshots: 4,
            snapshot_max: 2 * MIB,
            retention_moves: 10,
            deletes: 2,
            purge_every: 4,
            restart_every: 3,
            kill_every: 2,
            seed: 1,
            log_budget: "1MiB",
        }
    }

    pub fn month() -> Spec {
        Spec {
            streams: 3000,
            busy: 30,
            buckets: 12,
            rounds: 150,
            writers: 8,
            small_appends: 6000,
            small_max: 2000,
            large_appends: 16,
            large_max: 8 * MIB,
            snapshots: 4,
            snapshot_max: 64 * MIB,
            retention_moves: 40,
            deletes: 30,
            purge_every: 30,
            restart_every: 10,
            kill_every: 7,
            seed: 1,
            log_budget: "32MiB",
        }
    }

    pub fn preset(name: &str) -> Option<Spec> {
        match name {
            "short" => Some(Spec::short()),
            "month" => Some(Spec::month()),
            _ => None,
        }
    }
}
