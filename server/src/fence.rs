//! The maintenance fence: process-local admission of one maintenance executor (Operations,
//! "Maintenance executor admission"). Not persisted: every process starts `unclaimed`, so a
//! replacement is explicitly uncertified until an executor activates it.
//!
//! States: `unclaimed` | `active(token)` | `retired(token)`. Activation is admitted when
//! unclaimed, for the token already active (idempotent), or for a generation above the
//! current one; retirement needs the active token and keeps its generation, so the same token
//! can never reopen. A lifecycle call marks the fence *uncertain* before it waits for anything
//! and clears the mark only when it completes: a call that fails or whose caller goes away
//! leaves the process refusing mutations until the same call is repeated to completion or a
//! higher generation activates. The locks are RAII guards, so a cancelled call holds none.
//!
//! Ordering: admitted admin mutations hold a read guard of `gate` for their whole handling;
//! a lifecycle call takes the write guard, so it starts only after every mutation admitted
//! before it finished, and mutations behind it re-check the new state once admitted.

use std::sync::Mutex;
use std::sync::PoisonError;

use tokio::sync::RwLock;
use tokio::sync::RwLockReadGuard;
use ursula_protocol::admin::FenceToken;
use ursula_protocol::admin::FenceView;

use crate::engine::ConfirmError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceState {
    Unclaimed,
    Active(FenceToken),
    Retired(FenceToken),
}

impl FenceState {
    fn generation(&self) -> u64 {
        match self {
            FenceState::Unclaimed => 0,
            FenceState::Active(t) | FenceState::Retired(t) => t.generation,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    Activate,
    Retire,
}

impl std::fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Lifecycle::Activate => "activation",
            Lifecycle::Retire => "retirement",
        })
    }
}

/// Why the fence refused a call; the admin plane maps each to its status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// `409`: a lower or equal generation of another token.
    #[error(
        "maintenance fence {token} is not admitted: generation {generation} is current and only a higher one may take over"
    )]
    Stale { token: String, generation: u64 },
    /// `409`: a retired token never reopens.
    #[error("maintenance fence {0} was retired on this process and cannot be reactivated")]
    Reopen(String),
    /// `409`: retirement of a token that is not the active one.
    #[error("maintenance fence {0} is not the active fence of this process: nothing to retire")]
    NotActive(String),
    /// `409`: another lifecycle call is pending; only it (or a higher generation) may proceed.
    #[error(
        "the maintenance fence {op} of {token} is pending on this process: repeat that call, or activate a higher generation"
    )]
    Pending { op: Lifecycle, token: String },
    /// `428`: the fence is active and the request names no token.
    #[error("maintenance fence {0} is active: admin mutations need x-ursula-maintenance-fence")]
    Missing(String),
    /// `412`: the request names another token than the active one.
    #[error(
        "x-ursula-maintenance-fence names {seen}, the active maintenance fence is {active}: nothing changed"
    )]
    Other { seen: String, active: String },
    /// `503`: a lifecycle call is in flight, failed or was cancelled.
    #[error(
        "the maintenance fence is uncertain (a {0} is in flight or did not complete): admin mutations wait for it"
    )]
    Uncertain(Lifecycle),
    /// `503`: a Raft group's API queue could not be confirmed; the fence stays uncertain.
    #[error("the maintenance fence {op} did not complete: {why}; the fence stays uncertain")]
    Queue { op: Lifecycle, why: ConfirmError },
}

#[derive(Debug)]
struct Inner {
    state: FenceState,
    /// The lifecycle call that marked the fence uncertain and has not completed.
    pending: Option<(Lifecycle, FenceToken)>,
}

#[derive(Debug)]
pub struct Fence {
    inner: Mutex<Inner>,
    gate: RwLock<()>,
    /// Lifecycle calls one at a time, so a completing call never overwrites a later one.
    serial: tokio::sync::Mutex<()>,
}

impl Default for Fence {
    fn default() -> Fence {
        Fence {
            inner: Mutex::new(Inner {
                state: FenceState::Unclaimed,
                pending: None,
            }),
            gate: RwLock::new(()),
            serial: tokio::sync::Mutex::new(()),
        }
    }
}

/// Whether `op` of `t` may start from `state` with `pending` outstanding.
pub fn admit(
    state: &FenceState,
    pending: Option<&(Lifecycle, FenceToken)>,
    op: Lifecycle,
    t: &FenceToken,
) -> Result<(), FenceError> {
    let pending_generation = pending.map_or(0, |(_, p)| p.generation);
    if op == Lifecycle::Activate && t.generation > state.generation().max(pending_generation) {
        // An externally admitted higher generation supersedes whatever was left uncertain.
        return Ok(());
    }
    if let Some((p_op, p_t)) = pending
        && (*p_op != op || p_t != t)
    {
        return Err(FenceError::Pending {
            op: *p_op,
            token: p_t.to_string(),
        });
    }
    match (op, state) {
        (Lifecycle::Activate, FenceState::Unclaimed) => Ok(()),
        (Lifecycle::Activate, FenceState::Active(a)) if a == t => Ok(()),
        (Lifecycle::Activate, FenceState::Retired(r)) if r == t => {
            Err(FenceError::Reopen(t.to_string()))
        }
        (Lifecycle::Activate, s) => Err(FenceError::Stale {
            token: t.to_string(),
            generation: s.generation(),
        }),
        // Retiring what is already retired is the repeat of a call whose answer was lost.
        (Lifecycle::Retire, FenceState::Active(a) | FenceState::Retired(a)) if a == t => Ok(()),
        (Lifecycle::Retire, _) => Err(FenceError::NotActive(t.to_string())),
    }
}

/// Whether a request carrying `seen` passes `state` (a mutation also needs no pending call).
pub fn check(
    state: &FenceState,
    pending: Option<&(Lifecycle, FenceToken)>,
    seen: Option<&str>,
    mutation: bool,
) -> Result<(), FenceError> {
    if mutation && let Some((op, _)) = pending {
        return Err(FenceError::Uncertain(*op));
    }
    let FenceState::Active(active) = state else {
        return Ok(());
    };
    let Some(seen) = seen else {
        return Err(FenceError::Missing(active.to_string()));
    };
    if seen != active.to_string() {
        return Err(FenceError::Other {
            seen: seen.to_owned(),
            active: active.to_string(),
        });
    }
    Ok(())
}

impl Fence {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is plain data assigned whole: a panic elsewhere leaves it consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The metrics' `maintenance_fence` (`None` while unclaimed) and whether it is uncertain.
    pub fn view(&self) -> (Option<FenceView>, bool) {
        let g = self.inner();
        let view = match &g.state {
            FenceState::Unclaimed => None,
            FenceState::Active(t) => Some(FenceView::of("active", t)),
            FenceState::Retired(t) => Some(FenceView::of("retired", t)),
        };
        (view, g.pending.is_some())
    }

    /// Admits an admin mutation carrying `seen`: the guard keeps lifecycle calls waiting until
    /// the mutation's handling ends. The state is read once admitted, so a mutation queued
    /// behind an activation is judged by the fence it activated.
    pub async fn admit_mutation(
        &self,
        seen: Option<&str>,
    ) -> Result<RwLockReadGuard<'_, ()>, FenceError> {
        let guard = self.gate.read().await;
        let g = self.inner();
        check(&g.state, g.pending.as_ref(), seen, true)?;
        Ok(guard)
    }

    /// Checks a read that certifies this process (the quorum proof) against the active token.
    pub fn check_read(&self, seen: Option<&str>) -> Result<(), FenceError> {
        let g = self.inner();
        check(&g.state, g.pending.as_ref(), seen, false)
    }

    /// Runs `op` of `t`: marks the fence uncertain, waits for every admitted mutation, runs
    /// `confirm` (the engine's queues), then installs the new state. When this future is
    /// dropped or `confirm` fails, the fence stays uncertain.
    pub async fn run(
        &self,
        op: Lifecycle,
        t: FenceToken,
        confirm: impl Future<Output = Result<(), ConfirmError>>,
    ) -> Result<FenceView, FenceError> {
        let _serial = self.serial.lock().await;
        {
            let mut g = self.inner();
            admit(&g.state, g.pending.as_ref(), op, &t)?;
            g.pending = Some((op, t.clone()));
        }
        let _all = self.gate.write().await;
        confirm.await.map_err(|why| FenceError::Queue { op, why })?;
        let mut g = self.inner();
        let (state, view) = match op {
            Lifecycle::Activate => (FenceState::Active(t.clone()), FenceView::of("active", &t)),
            Lifecycle::Retire => (FenceState::Retired(t.clone()), FenceView::of("retired", &t)),
        };
        g.state = state;
        g.pending = None;
        Ok(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(generation: u64, executor: char) -> FenceToken {
        FenceToken {
            reservation_id: "0123456789abcdef0123456789abcdef".into(),
            generation,
            executor_id: executor.to_string().repeat(32),
        }
    }

    async fn ok() -> Result<(), ConfirmError> {
        Ok(())
    }

    async fn fail() -> Result<(), ConfirmError> {
        Err(ConfirmError::Queue {
            group: 0,
            detail: "stopped".into(),
        })
    }

    #[tokio::test]
    async fn activation_is_idempotent_and_only_a_higher_generation_takes_over() {
        let f = Fence::default();
        assert_eq!(f.view(), (None, false));
        let a = f.run(Lifecycle::Activate, token(3, 'a'), ok()).await;
        assert_eq!(a.expect("activate").state, "active");
        assert!(
            f.run(Lifecycle::Activate, token(3, 'a'), ok())
                .await
                .is_ok()
        );
        for lower in [token(3, 'b'), token(2, 'a')] {
            assert!(matches!(
                f.run(Lifecycle::Activate, lower, ok()).await,
                Err(FenceError::Stale { generation: 3, .. })
            ));
        }
        assert!(
            f.run(Lifecycle::Activate, token(4, 'b'), ok())
                .await
                .is_ok()
        );
        let (view, uncertain) = f.view();
        assert!(view.is_some_and(|v| v.is("active", &token(4, 'b'))) && !uncertain);
    }

    #[tokio::test]
    async fn retirement_keeps_its_generation_and_the_token_never_reopens() {
        let f = Fence::default();
        assert!(matches!(
            f.run(Lifecycle::Retire, token(1, 'a'), ok()).await,
            Err(FenceError::NotActive(_))
        ));
        f.run(Lifecycle::Activate, token(5, 'a'), ok())
            .await
            .expect("activate");
        assert!(matches!(
            f.run(Lifecycle::Retire, token(5, 'b'), ok()).await,
            Err(FenceError::NotActive(_))
        ));
        let r = f.run(Lifecycle::Retire, token(5, 'a'), ok()).await;
        assert!(r.expect("retire").is("retired", &token(5, 'a')));
        assert!(f.run(Lifecycle::Retire, token(5, 'a'), ok()).await.is_ok());
        assert!(matches!(
            f.run(Lifecycle::Activate, token(5, 'a'), ok()).await,
            Err(FenceError::Reopen(_))
        ));
        assert!(matches!(
            f.run(Lifecycle::Activate, token(4, 'c'), ok()).await,
            Err(FenceError::Stale { generation: 5, .. })
        ));
        // A retired fence asks nothing of mutations.
        assert!(f.admit_mutation(None).await.is_ok());
        assert!(
            f.run(Lifecycle::Activate, token(6, 'c'), ok())
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn an_active_fence_wants_its_own_token_on_every_mutation() {
        let f = Fence::default();
        assert!(f.admit_mutation(None).await.is_ok());
        f.run(Lifecycle::Activate, token(2, 'a'), ok())
            .await
            .expect("activate");
        assert!(matches!(
            f.admit_mutation(None).await,
            Err(FenceError::Missing(_))
        ));
        let other = token(2, 'b').to_string();
        assert!(matches!(
            f.admit_mutation(Some(&other)).await,
            Err(FenceError::Other { .. })
        ));
        assert!(matches!(f.check_read(None), Err(FenceError::Missing(_))));
        let own = token(2, 'a').to_string();
        assert!(f.admit_mutation(Some(&own)).await.is_ok());
        assert!(f.check_read(Some(&own)).is_ok());
    }

    #[tokio::test]
    async fn a_failed_lifecycle_call_stays_uncertain_until_repeated_or_superseded() {
        let f = Fence::default();
        assert!(matches!(
            f.run(Lifecycle::Activate, token(2, 'a'), fail()).await,
            Err(FenceError::Queue { .. })
        ));
        assert_eq!(f.view(), (None, true));
        assert!(matches!(
            f.admit_mutation(None).await,
            Err(FenceError::Uncertain(Lifecycle::Activate))
        ));
        // Another token of the same generation may not clear it; the same call may.
        assert!(matches!(
            f.run(Lifecycle::Activate, token(2, 'b'), ok()).await,
            Err(FenceError::Pending { .. })
        ));
        f.run(Lifecycle::Activate, token(2, 'a'), ok())
            .await
            .expect("repeat");
        assert!(!f.view().1);
        // A failed retirement: only the same retirement or a higher generation clears it.
        assert!(
            f.run(Lifecycle::Retire, token(2, 'a'), fail())
                .await
                .is_err()
        );
        assert!(matches!(
            f.run(Lifecycle::Activate, token(2, 'a'), ok()).await,
            Err(FenceError::Pending { .. })
        ));
        f.run(Lifecycle::Activate, token(3, 'c'), ok())
            .await
            .expect("higher generation");
        assert_eq!(
            f.view(),
            (Some(FenceView::of("active", &token(3, 'c'))), false)
        );
    }

    #[tokio::test]
    async fn a_cancelled_activation_waits_for_admitted_mutations_stays_uncertain_and_holds_no_lock()
    {
        let f = Fence::default();
        let admitted = f.admit_mutation(None).await.expect("admitted");
        // The activation cannot pass the admitted mutation: it times out (is cancelled).
        let run = f.run(Lifecycle::Activate, token(1, 'a'), ok());
        let cancelled = tokio::time::timeout(std::time::Duration::from_millis(50), run).await;
        assert!(cancelled.is_err());
        assert_eq!(f.view(), (None, true));
        drop(admitted);
        assert!(matches!(
            f.admit_mutation(None).await,
            Err(FenceError::Uncertain(_))
        ));
        // No lock was left behind: the same activation completes.
        f.run(Lifecycle::Activate, token(1, 'a'), ok())
            .await
            .expect("repeat");
        assert!(!f.view().1);
    }
}
