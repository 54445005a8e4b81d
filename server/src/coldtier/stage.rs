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
use ursula_state::stream::Create;
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

/// What staging did with a write.
#[derive(Debug)]
pub enum Staged {
    /// Proposed with its body staged: the engine's answer (a failed upload is `Unavailable`).
    Done(Answer),
    /// Not staged: the caller proposes this command, body and all, under the write's budget.
    Inline(Command),
}

/// Where a staged body would land, read on the leader just before its upload.
struct Landing {
    incarnation: u64,
    hot_from: u64,
    /// The hot bytes the object takes in front of the body.
    hot: Vec<u8>,
}

/// The stored bytes of a body that staging can carry: present, non-empty, valid.
fn stored_bytes(body: Option<&Body>) -> Option<Bytes> {
    match body {
        Some(Body::Raw(b) | Body::Json(Ok(b))) if !b.is_empty() => Some(b.clone()),
        _ => None,
    }
}

/// An append lands on its stream's hot ring; a create on a stream that does not exist yet.
/// `None`: not here as staging needs (the write through Raft gets the state machine's answer).
fn where_it_lands(rt: &Runtime, group: GroupId, cmd: &Command) -> Option<Landing> {
    match cmd {
        Command::Append(a) => {
            let key = a.key.clone();
            rt.with_group_now(group, move |g| {
                g.state.get(&key, now_ms()).map(|s| {
                    let from = s.data.hot_start();
                    Landing {
                        incarnation: s.incarnation,
                        hot_from: from,
                        hot: s.data.read(from, s.data.hot_len()),
                    }
                })
            })
            .flatten()
        }
        Command::Create(c) => {
            let key = c.key.clone();
            let absent = rt.with_group_now(group, move |g| g.state.get(&key, now_ms()).is_none());
            (absent == Some(true)).then_some(Landing {
                incarnation: 0,
                hot_from: 0,
                hot: Vec::new(),
            })
        }
        _ => None,
    }
}

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
        // A create of a stream that exists keeps the stream as it is, body and all.
        Ok(Ok(Applied::Created { fresh, .. })) => !*fresh,
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

    /// Proposes a create or an append with its stored bytes staged as an object first, so no
    /// payload passes through Raft. For an append the object holds the stream's hot ring as
    /// this leader reads it and then the body, and applying it turns both into one owned cold
    /// chunk; when the stream moved before it applied, it is staged again. A create's object
    /// holds its initial body alone. [`Staged::Inline`] hands the write back to be proposed
    /// with its body: a body that is empty or not valid, an append to a stream not found
    /// here, a create of a stream that exists, or [`STAGE_ATTEMPTS`] moved stagings.
    /// The command's body is the stored form (raw, or checked JSON).
    pub async fn stage_write(
        &self,
        rt: Runtime,
        engine: Arc<dyn GroupEngine>,
        group: GroupId,
        cmd: Command,
    ) -> Staged {
        let tier = self.clone();
        let task = tokio::spawn(async move { tier.stage_task(rt, engine, group, cmd).await });
        task.await.unwrap_or_else(|e| {
            Staged::Done(Err(EngineError::Unavailable(format!(
                "the staging task failed: {e}"
            ))))
        })
    }

    async fn stage_task(
        self,
        rt: Runtime,
        engine: Arc<dyn GroupEngine>,
        group: GroupId,
        cmd: Command,
    ) -> Staged {
        let (key, stored) = match &cmd {
            Command::Append(a) => (a.key.clone(), stored_bytes(Some(&a.body))),
            Command::Create(c) => (c.key.clone(), stored_bytes(c.body.as_ref())),
            _ => (String::new(), None),
        };
        let Some(stored) = stored else {
            return Staged::Inline(cmd);
        };
        let bucket = bucket_of(&key).to_owned();
        for _ in 0..STAGE_ATTEMPTS {
            let Some(at) = where_it_lands(&rt, group, &cmd) else {
                return Staged::Inline(cmd);
            };
            let object = Self::staging_key(&bucket, "ext", group);
            let _staged = self.stage(object.clone());
            let mut bytes = BytesMut::with_capacity(at.hot.len() + stored.len());
            bytes.extend_from_slice(&at.hot);
            bytes.extend_from_slice(&stored);
            if let Err(e) = self.store.put(&object, bytes.freeze()).await {
                bump(&self.counters.stage.errors, 1);
                // A failed upload may have left a part behind: nothing will reference it.
                let _ = self.store.delete(&object).await;
                return Staged::Done(Err(EngineError::Unavailable(format!(
                    "cannot stage the body in the cold tier: {e}"
                ))));
            }
            bump(&self.counters.stage.staged, 1);
            bump(&self.counters.stage.staged_bytes, stored.len() as u64);
            let locator = Body::External(ExternalBody {
                object: object.clone(),
                incarnation: at.incarnation,
                hot_from: at.hot_from,
                hot_len: at.hot.len() as u64,
                len: stored.len() as u64,
            });
            let staged_cmd = match &cmd {
                Command::Append(a) => Command::Append(Append {
                    body: locator,
                    ..a.clone()
                }),
                Command::Create(c) => Command::Create(Create {
                    body: Some(locator),
                    ..c.clone()
                }),
                _ => return Staged::Inline(cmd),
            };
            let result = engine.propose(group, staged_cmd).await;
            if applied_nothing(&result) {
                self.unstage(&object).await;
            }
            match result {
                Ok(Err(Refusal::ExternalMoved)) => bump(&self.counters.stage.restaged, 1),
                other => return Staged::Done(other),
            }
        }
        bump(&self.counters.stage.inline, 1);
        Staged::Inline(cmd)
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
