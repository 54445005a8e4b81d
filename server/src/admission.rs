//! Write admission: every refusal a node makes before anything of a write is proposed, each
//! marked with `x-ursula-not-applied` (API overview, "Refusals that applied nothing"), and the
//! budgets an admitted write holds, in one place. The checks run in this order:
//!
//! 1. From the request head ([`Admission::admit`]):
//!    - `WalDiskPressure`: the WAL filesystem is below `raft.wal.min_available_size`; writes
//!      pass again once it reaches `raft.wal.resume_available_size`.
//!    - `RaftLogPressure`: the node's unsnapshotted Raft log is over twice
//!      `raft.snapshot_log_budget`; writes with a body pass again below 1.5 times the budget.
//!    - `IngressBodyBytesLimitReached`: write bodies in flight would pass
//!      `server.http_inflight_body_size`.
//! 2. Once the body is read and its group known ([`WritePermit::charge`]):
//!    - `ColdBackpressure`: with a cold tier, the group holds more unflushed bytes than
//!      `storage.cold.max_hot_size_per_group`.
//!    - `RaftUncommittedBackpressure`: the group's proposed but unapplied write bytes would
//!      pass `raft.max_uncommitted_size_per_group` (under Raft).
//!
//! Every budget is held by an RAII value, so it comes back when the request ends however it
//! ends: answered, refused, or dropped mid-await because the client went away (hyper drops the
//! handler's future then). The body bytes are held by the [`WritePermit`] for as long as the
//! handler runs; the group's uncommitted bytes by a [`GroupCharge`] that travels with the
//! proposal and is released when the write was applied or failed, not when the client left:
//! the bytes stay in the group's queue and log until then.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::runtime::GroupId;

#[derive(Debug, Clone)]
pub struct Limits {
    pub inflight_body_bytes: u64,
    pub wal_dir: Option<PathBuf>,
    /// 0 disables the disk guard.
    pub min_available: u64,
    pub resume_available: u64,
    /// `raft.snapshot_log_budget`.
    pub log_budget: u64,
    /// `raft.max_uncommitted_size_per_group`; `None` when no engine queues writes (in memory).
    pub max_uncommitted_per_group: Option<u64>,
    /// `storage.cold.max_hot_size_per_group` with a cold tier; `None` or 0 turns it off.
    pub max_hot_per_group: Option<u64>,
    pub group_count: u32,
}

#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    inflight: AtomicU64,
    /// Per group: proposed but not yet applied write bytes.
    uncommitted: Vec<AtomicU64>,
    disk_pressure: AtomicBool,
    log_pressure: AtomicBool,
    pub available: AtomicU64,
    pub disk_stat_errors: AtomicU64,
    /// `ColdBackpressure` refusals, in all and per group.
    cold_refusals: AtomicU64,
    cold_group_refusals: Vec<AtomicU64>,
}

/// Why a write was refused at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    WalDiskPressure,
    RaftLogPressure,
    IngressBodyBytesLimitReached,
    ColdBackpressure,
    RaftUncommittedBackpressure,
}

/// An admitted write: holds its body's bytes in the in-flight budget until dropped, and the
/// group charge until it is handed to the engine.
#[derive(Debug)]
pub struct WritePermit {
    admission: Arc<Admission>,
    body: u64,
    charge: Option<GroupCharge>,
}

/// A write's bytes in its group's uncommitted budget, released on drop.
#[derive(Debug)]
pub struct GroupCharge {
    admission: Arc<Admission>,
    group: GroupId,
    bytes: u64,
}

impl Drop for WritePermit {
    fn drop(&mut self) {
        if self.body > 0 {
            self.admission
                .inflight
                .fetch_sub(self.body, Ordering::AcqRel);
        }
    }
}

impl Drop for GroupCharge {
    fn drop(&mut self) {
        if let Some(c) = self.admission.uncommitted.get(self.group as usize) {
            c.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

/// Budgets held now, for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    pub inflight_body_bytes: u64,
    pub per_group_uncommitted_bytes: Vec<u64>,
}

impl Admission {
    pub fn new(limits: Limits) -> Arc<Admission> {
        let groups = limits.group_count as usize;
        Arc::new(Admission {
            limits,
            inflight: AtomicU64::new(0),
            uncommitted: (0..groups).map(|_| AtomicU64::new(0)).collect(),
            disk_pressure: AtomicBool::new(false),
            log_pressure: AtomicBool::new(false),
            available: AtomicU64::new(u64::MAX),
            disk_stat_errors: AtomicU64::new(0),
            cold_refusals: AtomicU64::new(0),
            cold_group_refusals: (0..groups).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    pub fn disk_pressure(&self) -> bool {
        self.disk_pressure.load(Ordering::Acquire)
    }

    /// Admits a write from its head: `body` is its declared length (0 for a bodiless write),
    /// `raft_log` the node's unsnapshotted Raft log bytes under the Raft engine.
    pub fn admit(
        self: &Arc<Self>,
        body: u64,
        raft_log: Option<u64>,
    ) -> Result<WritePermit, Refused> {
        if self.disk_pressure() {
            return Err(Refused::WalDiskPressure);
        }
        let mut permit = WritePermit {
            admission: self.clone(),
            body: 0,
            charge: None,
        };
        if body == 0 {
            return Ok(permit);
        }
        self.log_pressure(raft_log)?;
        permit.grow(body)?;
        Ok(permit)
    }

    /// Admits a write whose head declares no length (a chunked body): checked as a write with
    /// a body, holding nothing until [`WritePermit::grow`] counts its bytes as they arrive.
    pub fn admit_streamed(self: &Arc<Self>, raft_log: Option<u64>) -> Result<WritePermit, Refused> {
        if self.disk_pressure() {
            return Err(Refused::WalDiskPressure);
        }
        self.log_pressure(raft_log)?;
        Ok(WritePermit {
            admission: self.clone(),
            body: 0,
            charge: None,
        })
    }

    /// `RaftLogPressure`, with its hysteresis.
    fn log_pressure(&self, raft_log: Option<u64>) -> Result<(), Refused> {
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
        Ok(())
    }

    /// Budgets held now.
    pub fn held(&self) -> Held {
        Held {
            inflight_body_bytes: self.inflight.load(Ordering::Acquire),
            per_group_uncommitted_bytes: self
                .uncommitted
                .iter()
                .map(|c| c.load(Ordering::Acquire))
                .collect(),
        }
    }

    /// `ColdBackpressure` refusals: in all, and per group.
    pub fn cold_refusals(&self) -> (u64, Vec<u64>) {
        (
            self.cold_refusals.load(Ordering::Relaxed),
            self.cold_group_refusals
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
        )
    }

    /// Samples the WAL filesystem's free space and moves the pressure flag with hysteresis.
    /// With the guard off (a minimum of 0) the free space is still read, for the metrics, but
    /// nothing is refused.
    pub fn sample_disk(&self) {
        let Some(dir) = &self.limits.wal_dir else {
            return;
        };
        let guard = self.limits.min_available > 0;
        match fs4::available_space(dir) {
            Ok(free) => {
                self.available.store(free, Ordering::Release);
                if !guard {
                    return;
                }
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
                self.disk_stat_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "cannot read the WAL filesystem's free space");
                // A failed check counts as pressure: the node cannot tell it has room.
                if guard {
                    self.disk_pressure.store(true, Ordering::Release);
                }
            }
        }
    }

    /// The `wal_*` free-space metrics; `None` on a node without a WAL directory.
    pub fn wal_disk(&self) -> Option<ursula_protocol::metrics::WalDiskMetrics> {
        self.limits.wal_dir.as_ref()?;
        // `u64::MAX` is the value before the first successful check.
        let available = self.available.load(Ordering::Acquire);
        Some(ursula_protocol::metrics::WalDiskMetrics {
            wal_available_bytes: (available != u64::MAX).then_some(available),
            wal_min_available_bytes: self.limits.min_available,
            wal_resume_available_bytes: self.limits.resume_available,
            wal_disk_pressure: self.disk_pressure(),
            wal_disk_stat_errors: self.disk_stat_errors.load(Ordering::Relaxed),
        })
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

impl WritePermit {
    /// Admits the write into its group: `body` is its body's length once read, `hot` the
    /// group's unflushed bytes now. On success the permit holds the group charge, to be handed
    /// to the engine with the proposal ([`WritePermit::take_charge`]).
    pub fn charge(
        &mut self,
        group: GroupId,
        body: u64,
        hot: impl FnOnce() -> u64,
    ) -> Result<(), Refused> {
        if body == 0 {
            return Ok(());
        }
        let a = &self.admission;
        if let Some(cap) = a.limits.max_hot_per_group.filter(|c| *c > 0)
            && hot().saturating_add(body) > cap
        {
            a.cold_refusals.fetch_add(1, Ordering::Relaxed);
            if let Some(c) = a.cold_group_refusals.get(group as usize) {
                c.fetch_add(1, Ordering::Relaxed);
            }
            return Err(Refused::ColdBackpressure);
        }
        let (Some(max), Some(budget)) = (
            a.limits.max_uncommitted_per_group,
            a.uncommitted.get(group as usize),
        ) else {
            return Ok(());
        };
        let before = budget.fetch_add(body, Ordering::AcqRel);
        // One write alone always fits, as with the in-flight budget.
        if before > 0 && before.saturating_add(body) > max {
            budget.fetch_sub(body, Ordering::AcqRel);
            return Err(Refused::RaftUncommittedBackpressure);
        }
        self.charge = Some(GroupCharge {
            admission: a.clone(),
            group,
            bytes: body,
        });
        Ok(())
    }

    /// The group charge, for the engine to hold until the write applied or failed.
    pub fn take_charge(&mut self) -> Option<GroupCharge> {
        self.charge.take()
    }

    /// Holds `total` body bytes in the in-flight budget, or refuses
    /// (`IngressBodyBytesLimitReached`) when the bytes beyond what it holds do not fit. One
    /// body alone always fits, so a body at the route limit can still pass; a refused permit
    /// keeps what it held until it is dropped.
    pub fn grow(&mut self, total: u64) -> Result<(), Refused> {
        let Some(more) = total.checked_sub(self.body).filter(|m| *m > 0) else {
            return Ok(());
        };
        let inflight = &self.admission.inflight;
        let before = inflight.fetch_add(more, Ordering::AcqRel);
        let others = before.saturating_sub(self.body);
        if before.saturating_add(more) > self.admission.limits.inflight_body_bytes && others > 0 {
            inflight.fetch_sub(more, Ordering::AcqRel);
            return Err(Refused::IngressBodyBytesLimitReached);
        }
        self.body = total;
        Ok(())
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
            max_uncommitted_per_group: Some(100),
            max_hot_per_group: Some(1000),
            group_count: 2,
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
        assert_eq!(a.held().inflight_body_bytes, 0);
        assert!(a.admit(0, None).is_ok());
        let big = a.admit(1000, None);
        assert!(big.is_ok(), "one body alone always fits");
    }

    #[test]
    fn a_streamed_body_holds_its_bytes_as_they_arrive_and_is_refused_past_the_budget() {
        let a = admission(100, 0);
        let mut first = a.admit_streamed(None).expect("admitted");
        assert_eq!(a.held().inflight_body_bytes, 0);
        first.grow(60).expect("fits");
        first.grow(40).expect("a smaller total holds what it has");
        assert_eq!(a.held().inflight_body_bytes, 60);
        let mut second = a.admit_streamed(None).expect("admitted");
        second.grow(30).expect("fits beside the first");
        assert_eq!(
            second.grow(50).err(),
            Some(Refused::IngressBodyBytesLimitReached)
        );
        assert_eq!(
            a.held().inflight_body_bytes,
            90,
            "the refused growth is undone"
        );
        first.grow(500).expect_err("not alone");
        drop((first, second));
        assert_eq!(a.held().inflight_body_bytes, 0);
        let mut alone = a.admit_streamed(None).expect("admitted");
        alone.grow(1000).expect("one body alone always fits");
        assert_eq!(
            a.admit_streamed(Some(5000)).err(),
            Some(Refused::RaftLogPressure),
            "a streamed body is a body"
        );
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

    #[test]
    fn a_groups_uncommitted_budget_is_held_by_the_charge_and_released_however_it_ends() {
        let a = admission(1 << 20, 0);
        let mut p = a.admit(60, None).expect("admitted");
        p.charge(0, 60, || 0).expect("charged");
        let charge = p.take_charge().expect("a charge");
        drop(p);
        assert_eq!(
            a.held().inflight_body_bytes,
            0,
            "the body budget left with the request"
        );
        assert_eq!(a.held().per_group_uncommitted_bytes, vec![60, 0]);
        let mut q = a.admit(60, None).expect("admitted");
        assert_eq!(
            q.charge(0, 60, || 0).err(),
            Some(Refused::RaftUncommittedBackpressure)
        );
        assert!(
            q.charge(1, 60, || 0).is_ok(),
            "another group has its own budget"
        );
        drop(q);
        drop(charge);
        assert_eq!(a.held().per_group_uncommitted_bytes, vec![0, 0]);
    }

    #[test]
    fn a_group_over_its_hot_cap_is_refused_and_counted() {
        let a = admission(1 << 20, 0);
        let mut p = a.admit(10, None).expect("admitted");
        assert_eq!(
            p.charge(1, 10, || 995).err(),
            Some(Refused::ColdBackpressure)
        );
        assert_eq!(a.cold_refusals(), (1, vec![0, 1]));
        assert_eq!(a.held().per_group_uncommitted_bytes, vec![0, 0]);
        assert!(p.charge(1, 10, || 990).is_ok());
    }
}
