//! Group commit for client writes. Each openraft entry costs a trip through the group's Raft
//! core, the journal thread and the state machine whatever its size, so writes that arrive
//! while a group's entry is in flight wait in the group's queue and go out together as the
//! next entry. One write alone still goes out at once: batching adds no latency, it only
//! stops concurrent writers from paying the per-entry cost one by one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::Weak;

use openraft::BasicNode;
use openraft::error::ClientWriteError;
use openraft::error::Fatal;
use openraft::error::RaftError;
use tokio::sync::Notify;
use tokio::sync::oneshot;

use crate::admission::GroupCharge;
use crate::engine::EngineError;
use crate::raft::replicas::write_holds::WriteHolds;
use crate::raft::types::GroupRaft;
use crate::raft::types::Writes;
use crate::runtime::GroupId;
use crate::runtime::Runtime;
use crate::runtime::now_ms;
use ursula_state::stream::Applied;
use ursula_state::stream::Command;
use ursula_state::stream::Refusal;

type Answer = Result<Result<Applied, Refusal>, EngineError>;

/// Entries a group keeps in flight at once: one being replicated while the next fills
/// hides most of the queueing without letting one group flood its journal.
const MAX_IN_FLIGHT: usize = 2;
/// Commands per entry: bounds an entry's size on the wire and the state machine's turn.
const MAX_BATCH: usize = 256;
/// Body bytes per entry, for the same reason.
const MAX_BATCH_BYTES: u64 = 4 << 20;

/// A write waiting for its entry: its command, body bytes, its charge in the group's
/// uncommitted budget (released once the entry applied or failed), and where its answer goes.
struct Waiting {
    cmd: Command,
    bytes: u64,
    charge: Option<GroupCharge>,
    answer: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// Drivers started for the group: at most [`MAX_IN_FLIGHT`], each living as long as the
    /// batcher does.
    drivers: usize,
}

/// One group's queue, and how its idle drivers learn that a write arrived.
#[derive(Default)]
struct Lane {
    queue: Mutex<Queue>,
    work: Notify,
}

/// The write queues of every group this node runs.
pub struct Batcher {
    lanes: Vec<Arc<Lane>>,
    /// node id -> base URL, to name the leader in a redirect.
    urls: Arc<BTreeMap<u64, String>>,
    /// A group being handed off proposes nothing until the handoff ends.
    holds: Arc<WriteHolds>,
    /// Each group's drivers run on the core its Raft runs on.
    rt: Runtime,
}

fn lock(q: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // A panic while holding the queue leaves it consistent (plain pushes and drains).
    q.lock().unwrap_or_else(|p| p.into_inner())
}

impl Batcher {
    pub fn new(
        groups: usize,
        urls: Arc<BTreeMap<u64, String>>,
        holds: Arc<WriteHolds>,
        rt: Runtime,
    ) -> Arc<Batcher> {
        Arc::new(Batcher {
            lanes: (0..groups).map(|_| Arc::default()).collect(),
            urls,
            holds,
            rt,
        })
    }

    /// Queues `cmd` for `group` and resolves with what applying it answered. `bytes` is the
    /// command's body size, used to bound an entry. The queue owns `charge` from here on: a
    /// caller that stops awaiting leaves the write, and its charge, to the driver.
    pub async fn submit(
        self: &Arc<Self>,
        raft: GroupRaft,
        group: GroupId,
        cmd: Command,
        bytes: u64,
        charge: Option<GroupCharge>,
    ) -> Answer {
        let Some(lane) = self.lanes.get(group as usize) else {
            return Err(EngineError::Unavailable(format!("no group {group}")));
        };
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut q = lock(&lane.queue);
            q.waiting.push(Waiting {
                cmd,
                bytes,
                charge,
                answer: tx,
            });
            let start = q.drivers < MAX_IN_FLIGHT;
            if start {
                q.drivers += 1;
            }
            start
        };
        if start {
            // Tasks of their own, so a client that goes away cannot strand the writes of the
            // others they carry; started once and then woken, since spawning a task (its
            // future moved into place several times) cost more than the rest of the queueing.
            let task = drive(Arc::downgrade(self), lane.clone(), raft, group);
            match self.rt.core_handle(self.rt.core_of(group)) {
                Some(core) => drop(core.spawn(task)),
                None => drop(tokio::spawn(task)),
            }
        } else {
            lane.work.notify_one();
        }
        rx.await.unwrap_or_else(|_| {
            Err(EngineError::Unavailable(
                "the write's batch was dropped".into(),
            ))
        })
    }

    /// For a group this node no longer leads (by its Raft's latest metrics): the leader's
    /// URL, if another node is known to lead it.
    fn not_leading(&self, raft: &GroupRaft) -> Option<Option<String>> {
        let m = raft.metrics();
        let m = m.borrow();
        if m.current_leader == Some(m.id) && m.running_state.is_ok() {
            return None;
        }
        Some(
            m.current_leader
                .filter(|l| *l != m.id)
                .and_then(|id| self.urls.get(&id).cloned()),
        )
    }

    /// Proposes what `lane` holds as one entry and answers its writes; nothing when another
    /// driver took it first.
    async fn propose(&self, lane: &Lane, raft: &GroupRaft, group: GroupId) {
        // Held writes stay queued, so none overtakes the hold. The batch is counted as
        // proposing before it looks at the hold, so a handoff that holds the group sees it and
        // waits for it (`WriteHolds::settle`).
        let mut waited = false;
        let proposing = loop {
            waited |= self.holds.is_held(group);
            let open = self.holds.wait_open(group).await;
            match self.holds.begin_proposal(group, !open) {
                Some(p) => break p,
                None => waited = true,
            }
        };
        let batch = {
            let mut q = lock(&lane.queue);
            if q.waiting.is_empty() {
                return;
            }
            let mut n = 0;
            let mut size = 0u64;
            while n < q.waiting.len().min(MAX_BATCH) {
                size += q.waiting[n].bytes;
                n += 1;
                if size >= MAX_BATCH_BYTES {
                    break;
                }
            }
            q.waiting.drain(..n).collect::<Vec<_>>()
        };
        let mut cmds = Vec::with_capacity(batch.len());
        let mut senders = Vec::with_capacity(batch.len());
        // Held until the entry applied or failed: those bytes are in the log until then.
        let mut charges = Vec::with_capacity(batch.len());
        for w in batch {
            cmds.push(w.cmd);
            senders.push(w.answer);
            charges.push(w.charge);
        }
        // Writes that waited out a handoff go to whoever leads now, unproposed: here they
        // could only meet a Raft that stepped down, or one stopping with its node.
        if waited && let Some(leader) = self.not_leading(raft) {
            drop(proposing);
            drop(charges);
            for tx in senders {
                let _ = tx.send(Err(EngineError::NotLeader {
                    leader: leader.clone(),
                    single: self.urls.is_empty(),
                }));
            }
            return;
        }
        let result = raft
            .client_write(Writes {
                now_ms: now_ms(),
                cmds,
            })
            .await;
        drop(proposing);
        // Applied or failed: the bytes left the group's queue. Released before the answers
        // go out, so a writer that sends again at once finds its budget free.
        drop(charges);
        match result {
            Ok(resp) => {
                let mut answers = resp.data.0.into_iter();
                for tx in senders {
                    let a = answers.next().map(Ok).unwrap_or_else(|| {
                        Err(EngineError::Unavailable(
                            "the state machine answered fewer writes than proposed".into(),
                        ))
                    });
                    let _ = tx.send(a);
                }
            }
            Err(e) => {
                for tx in senders {
                    let _ = tx.send(Err(refused(&e, &self.urls)));
                }
            }
        }
    }
}

impl Drop for Batcher {
    fn drop(&mut self) {
        // Idle drivers wait for writes that can no longer come: wake them to end.
        for lane in &self.lanes {
            lane.work.notify_waiters();
        }
    }
}

/// A group's driver: proposes what its lane holds, entry after entry, and waits while it is
/// empty. It ends with the batcher, which it holds only while proposing.
async fn drive(batcher: Weak<Batcher>, lane: Arc<Lane>, raft: GroupRaft, group: GroupId) {
    loop {
        loop {
            // Registered before looking, so neither a write nor the batcher's end that comes
            // between the look and the wait is missed.
            let notified = lane.work.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if batcher.strong_count() == 0 {
                return;
            }
            if !lock(&lane.queue).waiting.is_empty() {
                break;
            }
            notified.await;
        }
        let Some(me) = batcher.upgrade() else {
            return;
        };
        me.propose(&lane, &raft, group).await;
    }
}

/// What a write whose proposal failed is answered. Only a redirect is marked not applied: a
/// Raft that stopped (its node is shutting down) or failed may have put the entry in its log
/// already, and another leader may still commit it, so the outcome is unknown.
fn refused(
    e: &RaftError<u64, ClientWriteError<u64, BasicNode>>,
    urls: &BTreeMap<u64, String>,
) -> EngineError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => EngineError::NotLeader {
            leader: f.leader_id.and_then(|id| urls.get(&id).cloned()),
            single: urls.is_empty(),
        },
        RaftError::Fatal(Fatal::Stopped) => EngineError::Unavailable(
            "this node is shutting down; the write may or may not have been applied".into(),
        ),
        other => EngineError::Unavailable(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use openraft::error::ForwardToLeader;

    use super::*;

    #[test]
    fn a_write_met_by_a_stopping_raft_is_told_the_node_is_shutting_down_not_raft_stopped() {
        let urls = BTreeMap::from([(2, "http://n2".to_owned())]);
        let EngineError::Unavailable(m) = refused(&RaftError::Fatal(Fatal::Stopped), &urls) else {
            panic!("a stopped Raft is an unavailable group");
        };
        assert!(m.contains("shutting down"), "{m}");
        assert!(m.contains("may or may not have been applied"), "{m}");
        assert!(!m.contains("raft stopped"), "{m}");
    }

    #[test]
    fn a_forward_to_a_known_leader_names_its_url_and_an_unknown_one_none() {
        let urls = BTreeMap::from([(2, "http://n2".to_owned())]);
        let forward = |leader_id| {
            RaftError::APIError(ClientWriteError::ForwardToLeader(ForwardToLeader {
                leader_id,
                leader_node: None,
            }))
        };
        assert!(matches!(
            refused(&forward(Some(2)), &urls),
            EngineError::NotLeader { leader: Some(u), single: false } if u == "http://n2"
        ));
        assert!(matches!(
            refused(&forward(None), &urls),
            EngineError::NotLeader {
                leader: None,
                single: false
            }
        ));
        assert!(matches!(
            refused(&forward(None), &BTreeMap::new()),
            EngineError::NotLeader {
                leader: None,
                single: true
            }
        ));
    }
}
