//! Write admission: refusals a node makes before anything of a write is proposed, each marked
//! with `x-ursula-not-applied` (API overview, "Refusals that applied nothing").
//!
//! - `WalDiskPressure`: the WAL filesystem is below `raft.wal.min_available_size`; writes pass
//!   again once it reaches `raft.wal.resume_available_size`.
//! - `RaftLogPressure`: the node's unsnapshotted Raft log is over twice
//!   `raft.snapshot_log_budget`; writes with a body pass again below 1.5 times the budget.
//! - `IngressBodyBytesLimitReached`: write bodies in flight would pass
//!   `server.http_inflight_body_size`.
//! - `RaftUncommittedBackpressure`: a group's proposed but unapplied write bytes would pass
//!   `raft.max_uncommitted_size_per_group` (checked by the Raft engine).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Limits {
    pub inflight_body_bytes: u64,
    pub wal_dir: Option<PathBuf>,
    /// 0 disables the disk guard.
    pub min_available: u64,
    pub resume_available: u64,
    /// `raft.snapshot_log_budget`.
    pub log_budget: u64,
}

#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    inflight: AtomicU64,
    disk_pressure: AtomicBool,
    log_pressure: AtomicBool,
    pub available: AtomicU64,
    pub disk_stat_errors: AtomicU64,
}

/// Why a write was refused at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    WalDiskPressure,
    RaftLogPressure,
    IngressBodyBytesLimitReached,
}

/// Holds a body's bytes in the in-flight budget until dropped.
#[derive(Debug)]
pub struct BodyPermit {
    admission: Arc<Admission>,
    bytes: u64,
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        self.admission
            .inflight
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Admission {
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            inflight: AtomicU64::new(0),
            disk_pressure: AtomicBool::new(false),
            log_pressure: AtomicBool::new(false),
            available: AtomicU64::new(u64::MAX),
            disk_stat_errors: AtomicU64::new(0),
        })
    }

    pub fn disk_pressure(&self) -> bool {
        self.disk_pressure.load(Ordering::Acquire)
    }

    /// Admits a write carrying `body` bytes (0 for a bodiless write); `raft_log` is the
    /// node's unsnapshotted Raft log bytes under the Raft engine.
    pub fn admit(
        self: &Arc<Self>,
        body: u64,
        raft_log: Option<u64>,
    ) -> Result<Option<BodyPermit>, Refused> {
        if self.disk_pressure() {
            return Err(Refused::WalDiskPressure);
        }
        if body == 0 {
            return Ok(None);
        }
        if let Some(log) = raft_log {
            let budget = self.limits.log_budget;
            if log > budget.saturating_mul(2) {
                self.log_pressure.store(true, Ordering::Release);
            } else if log < budget.saturating_mul(3) / 2 {
                self.log_pressure.store(false, Ordering::Release);
            }
            if self.log_pressure.load(Ordering::Acquire) {
                return Err(Refused::RaftLogPressure);
            }
        }
        let before = self.inflight.fetch_add(body, Ordering::AcqRel);
        if before.saturating_add(body) > self.limits.inflight_body_bytes && before > 0 {
            // One body alone always fits, so a body at the route limit can still pass.
            self.inflight.fetch_sub(body, Ordering::AcqRel);
            return Err(Refused::IngressBodyBytesLimitReached);
        }
        Ok(Some(BodyPermit {
            admission: self.clone(),
            bytes: body,
        }))
    }

    /// Samples the WAL filesystem's free space and moves the pressure flag with hysteresis.
    pub fn sample_disk(&self) {
        let Some(dir) = &self.limits.wal_dir else {
            return;
        };
        if self.limits.min_available == 0 {
            return;
        }
        match fs4::available_space(dir) {
            Ok(free) => {
                self.available.store(free, Ordering::Release);
                let pressured = self.disk_pressure();
                if !pressured && free < self.limits.min_available {
                    tracing::warn!(
                        free,
                        min = self.limits.min_available,
                        "WAL disk pressure: refusing writes"
                    );
                    self.disk_pressure.store(true, Ordering::Release);
                } else if pressured && free >= self.limits.resume_available {
                    tracing::info!(free, "WAL disk pressure cleared");
                    self.disk_pressure.store(false, Ordering::Release);
                }
            }
            Err(e) => {
                // A failed check counts as pressure: the node cannot tell it has room.
                self.disk_stat_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "cannot read the WAL filesystem's free space");
                self.disk_pressure.store(true, Ordering::Release);
            }
        }
    }

    /// Samples the disk every second until the process ends.
    pub fn spawn_disk_sampler(self: &Arc<Self>) {
        if self.limits.wal_dir.is_none() {
            return;
        }
        self.sample_disk();
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                me.sample_disk();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(limit: u64, min: u64) -> Arc<Admission> {
        Admission::new(Limits {
            inflight_body_bytes: limit,
            wal_dir: Some(std::env::temp_dir()),
            min_available: min,
            resume_available: min.saturating_mul(2),
            log_budget: 1000,
        })
    }

    #[test]
    fn bodies_in_flight_are_bounded_and_released() {
        let a = admission(100, 0);
        let first = a.admit(80, None).expect("fits");
        assert_eq!(
            a.admit(30, None).err(),
            Some(Refused::IngressBodyBytesLimitReached)
        );
        drop(first);
        assert!(a.admit(30, None).is_ok());
        assert!(a.admit(0, None).expect("bodiless").is_none());
        let big = a.admit(1000, None);
        assert!(big.is_ok(), "one body alone always fits");
    }

    #[test]
    fn disk_below_the_minimum_refuses_writes_until_it_clears() {
        let a = admission(1 << 20, u64::MAX / 4);
        a.sample_disk();
        assert!(a.disk_pressure());
        assert_eq!(a.admit(1, None).err(), Some(Refused::WalDiskPressure));
        let b = admission(1 << 20, 1);
        b.sample_disk();
        assert!(!b.disk_pressure());
    }

    #[test]
    fn a_raft_log_past_twice_its_budget_refuses_bodies_until_below_one_and_a_half() {
        let a = admission(1 << 20, 0);
        assert!(a.admit(10, Some(1999)).is_ok());
        assert_eq!(
            a.admit(10, Some(2001)).err(),
            Some(Refused::RaftLogPressure)
        );
        assert!(
            a.admit(0, Some(2001)).is_ok(),
            "writes without a body still pass"
        );
        assert_eq!(
            a.admit(10, Some(1600)).err(),
            Some(Refused::RaftLogPressure),
            "hysteresis"
        );
        assert!(a.admit(10, Some(1400)).is_ok());
    }
}
