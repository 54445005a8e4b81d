//! Bodies staged in the cold tier before their write is proposed (docs/cold-tier.md,
//! "External payloads"): an append's stored bytes and a snapshot body of at least
//! `runtime.external_payload_min_size`. The Raft entry carries only where they are. After a
//! marked refusal (the state machine's, or a redirect the engine gives before it proposes)
//! the object is deleted at once; after an answer that cannot tell whether the write applied
//! it stays, referenced if the write committed, and otherwise left to the orphan sweep.
//!
//! Each staging runs as a task of its own from the upload on, so a client that goes away
//! mid-upload or mid-proposal leaves no staged object behind.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use bytes::BytesMut;
use ursula_cold::ColdError;
use ursula_protocol::metrics::ColdExternalMetrics;
use ursula_state::stream::Append;
use ursula_state::stream::Applied;
use ursula_state::stream::Body;
use ursula_state::stream::ColdBody;
use ursula_state::stream::Command;
use ursula_state::stream::ExternalBody;
use ursula_state::stream::Refusal;
use ursula_state::stream::ledger::bucket_of;

use super::ColdTier;
use crate::engine::EngineError;
use crate::engine::GroupEngine;
use crate::runtime::GroupId;
use crate::runtime::Runtime;
use crate::runtime::now_ms;

/// An append is staged at most this many times while its stream's other writes keep moving
/// the hot ring under it; then it goes through Raft with its body.
const STAGE_ATTEMPTS: usize = 3;

type Answer = Result<Result<Applied, Refusal>, EngineError>;

/// The staging counters (the metrics' `cold_external_*` fields).
#[derive(Debug, Default)]
pub struct StageCounters {
    staged: AtomicU64,
    staged_bytes: AtomicU64,
    restaged: AtomicU64,
    inline: AtomicU64,
    errors: AtomicU64,
    deleted: AtomicU64,
}

impl StageCounters {
    pub fn metrics(&self) -> ColdExternalMetrics {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ColdExternalMetrics {
            cold_external_payloads_staged: load(&self.staged),
            cold_external_payload_bytes: load(&self.staged_bytes),
            cold_external_payload_restaged: load(&self.restaged),
            cold_external_payload_inline: load(&self.inline),
            cold_external_payload_errors: load(&self.errors),
            cold_external_payloads_deleted: load(&self.deleted),
        }
    }
}

fn bump(c: &AtomicU64, by: u64) {
    c.fetch_add(by, Ordering::Relaxed);
}

/// Whether `result` proves the write applied nothing, so its staged object can go: a refusal
/// or a duplicate from the state machine, or a redirect given before proposing.
fn applied_nothing(result: &Answer) -> bool {
    match result {
        Ok(Ok(Applied::Appended { duplicate, .. })) => *duplicate,
        Ok(Ok(_)) => false,
        Ok(Err(_)) | Err(EngineError::NotLeader { .. }) => true,
        Err(_) => false,
    }
}

impl ColdTier {
    /// A new object key for a body of `bucket`'s staged in `group`, under the bucket so a
    /// purge's listing finds it.
    fn staging_key(bucket: &str, kind: &str, group: GroupId) -> Arc<str> {
        format!(
            "{bucket}/{kind}/g{group}/{:013}-{:016x}",
            now_ms(),
            rand::random::<u64>()
        )
        .into()
    }

    /// Deletes a staged object the write did not reference.
    async fn unstage(&self, object: &str) {
        match self.store.delete(object).await {
            Ok(()) => bump(&self.counters.stage.deleted, 1),
            Err(e) => {
                bump(&self.counters.stage.errors, 1);
                tracing::warn!(object, error = %e, "cannot delete a staged body its write did not keep");
            }
        }
    }

    /// Appends with the stored bytes staged as an object first: the object holds the stream's
    /// hot ring as this leader reads it and then the body, so applying the append turns both
    /// into one owned cold chunk and no payload passes through Raft. When the stream moved
    /// before the append applied, it is staged again, and after [`STAGE_ATTEMPTS`] it goes
    /// through Raft with its body. `append.body` is the stored form (raw, or checked JSON).
    pub async fn stage_append(
        &self,
        rt: Runtime,
        engine: Arc<dyn GroupEngine>,
        group: GroupId,
        append: Append,
    ) -> Answer {
        let tier = self.clone();
        let task =
            tokio::spawn(async move { tier.stage_append_task(rt, engine, group, append).await });
        task.await.unwrap_or_else(|e| {
            Err(EngineError::Unavailable(format!(
                "the staging task failed: {e}"
            )))
        })
    }

    async fn stage_append_task(
        self,
        rt: Runtime,
        engine: Arc<dyn GroupEngine>,
        group: GroupId,
        append: Append,
    ) -> Answer {
        let stored = match &append.body {
            Body::Raw(b) | Body::Json(Ok(b)) if !b.is_empty() => b.clone(),
            _ => return engine.propose(group, Command::Append(append)).await,
        };
        let bucket = bucket_of(&append.key).to_owned();
        for _ in 0..STAGE_ATTEMPTS {
            let key = append.key.clone();
            let hot = rt.with_group_now(group, move |g| {
                g.state.get(&key, now_ms()).map(|s| {
                    let from = s.data.hot_start();
                    (s.incarnation, from, s.data.read(from, s.data.hot_len()))
                })
            });
            // No such stream here: the append through Raft gets the state machine's answer.
            let Some(Some((incarnation, hot_from, hot))) = hot else {
                break;
            };
            let object = Self::staging_key(&bucket, "ext", group);
            let _staged = self.stage(object.clone());
            let mut bytes = BytesMut::with_capacity(hot.len() + stored.len());
            bytes.extend_from_slice(&hot);
            bytes.extend_from_slice(&stored);
            if let Err(e) = self.store.put(&object, bytes.freeze()).await {
                bump(&self.counters.stage.errors, 1);
                // A failed upload may have left a part behind: nothing will reference it.
                let _ = self.store.delete(&object).await;
                return Err(EngineError::Unavailable(format!(
                    "cannot stage the body in the cold tier: {e}"
                )));
            }
            bump(&self.counters.stage.staged, 1);
            bump(&self.counters.stage.staged_bytes, stored.len() as u64);
            let cmd = Command::Append(Append {
                body: Body::External(ExternalBody {
                    object: object.clone(),
                    incarnation,
                    hot_from,
                    hot_len: hot.len() as u64,
                    len: stored.len() as u64,
                }),
                ..append.clone()
            });
            let result = engine.propose(group, cmd).await;
            if applied_nothing(&result) {
                self.unstage(&object).await;
            }
            match result {
                Ok(Err(Refusal::ExternalMoved)) => bump(&self.counters.stage.restaged, 1),
                other => return other,
            }
        }
        bump(&self.counters.stage.inline, 1);
        engine.propose(group, Command::Append(append)).await
    }
    /// Publishes a snapshot whose body is staged as an object of `bucket` first, so the
    /// replicated state keeps only the reference ([`ColdBody`]): `publish` builds the command
    /// around it. A task of its own from the upload on: the object is deleted once the
    /// publish is known not to have applied, even when the caller (a client that went away)
    /// is dropped mid-upload or mid-proposal. `Err` is the upload's failure; nothing was
    /// proposed then.
    pub async fn stage_and_publish(
        &self,
        engine: Arc<dyn GroupEngine>,
        group: GroupId,
        bucket: &str,
        content_type: &str,
        body: Bytes,
        publish: impl FnOnce(ColdBody) -> Command + Send + 'static,
    ) -> Result<Result<Result<Applied, Refusal>, EngineError>, ColdError> {
        let object = Self::staging_key(bucket, "snap", group);
        let staged = self.stage(object.clone());
        let digest = ursula_state::stream::machine::snapshot_digest(content_type, &body);
        let len = body.len() as u64;
        let tier = self.clone();
        let task = tokio::spawn(async move {
            let _staged = staged;
            if let Err(e) = tier.store.put(&object, body).await {
                bump(&tier.counters.stage.errors, 1);
                // A failed upload may have left a part behind: nothing will reference it.
                let _ = tier.store.delete(&object).await;
                return Err(e);
            }
            let cmd = publish(ColdBody {
                object: object.clone(),
                len,
                digest,
            });
            let result = engine.propose(group, cmd).await;
            // Nothing references a staged body the publish did not apply: delete it now.
            if applied_nothing(&result) {
                tier.unstage(&object).await;
            }
            Ok(result)
        });
        task.await.unwrap_or_else(|e| {
            Ok(Err(EngineError::Unavailable(format!(
                "the publish task failed: {e}"
            ))))
        })
    }
}
