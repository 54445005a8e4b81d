//! Append batching between two nodes: every group's `append` RPCs (heartbeats included) to one
//! peer share a lane, and the RPCs that queue while the lane's requests are in flight travel
//! together as one `POST /__ursula/raft-rpc-batch`. With many groups each holding one write,
//! a request per group per round would cost the cluster most of its CPU in HTTP handling; the
//! batch carries them for the price of one. An idle lane sends at once, so a lone RPC waits for
//! nothing.
//!
//! Each RPC keeps its own answer: the receiver runs them concurrently and answers each with the
//! status a lone RPC would have had (`200`, `503` refused, `400` unreadable).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Semaphore;
use tokio::sync::mpsc;
use tokio::sync::oneshot;

use super::wire::Answer;
use super::wire::Item;
use super::wire::PeerError;

/// Requests a lane keeps in flight at once; RPCs queue behind them and go out together.
const IN_FLIGHT: usize = 2;
/// At most this many RPCs or bytes in one batch.
const MAX_RPCS: usize = 256;
const MAX_BYTES: usize = 4 << 20;
/// How long a batch may take; each RPC also waits only as long as its own deadline.
const BATCH_TIMEOUT: Duration = Duration::from_secs(10);

struct Queued {
    item: Item,
    reply: oneshot::Sender<Result<Bytes, PeerError>>,
}

/// The sending side of one peer's lane.
#[derive(Debug, Clone)]
pub struct Lane {
    tx: mpsc::UnboundedSender<Queued>,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued")
            .field("group", &self.item.group)
            .finish()
    }
}

/// Sends one batch body to the peer and returns its response body.
pub type SendFn = Arc<
    dyn Fn(Vec<u8>) -> futures_util::future::BoxFuture<'static, Result<Bytes, PeerError>>
        + Send
        + Sync,
>;

impl Lane {
    /// Starts the lane's sender on the current runtime.
    pub fn start(target: u64, send: SendFn) -> Lane {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(target, rx, send));
        Lane { tx }
    }

    /// Queues an `append` RPC of `group` and waits for its answer, at most `timeout`.
    pub async fn append(
        &self,
        target: u64,
        group: u32,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Bytes, PeerError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Queued {
                item: Item { group, body },
                reply,
            })
            .map_err(|_| PeerError::Unreachable(format!("the lane to node {target} stopped")))?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(PeerError::Unreachable(format!(
                "the lane to node {target} dropped the RPC"
            ))),
            Err(_) => Err(PeerError::Unreachable(format!(
                "node {target} did not answer in time"
            ))),
        }
    }
}

async fn run(target: u64, mut rx: mpsc::UnboundedReceiver<Queued>, send: SendFn) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        // A slot first: while every slot is busy, RPCs pile up in the channel for the next batch.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = rx.recv().await else {
            return;
        };
        let mut bytes = first.item.body.len();
        let mut batch = vec![first];
        while batch.len() < MAX_RPCS && bytes < MAX_BYTES {
            match rx.try_recv() {
                Ok(q) => {
                    bytes += q.item.body.len();
                    batch.push(q);
                }
                Err(_) => break,
            }
        }
        let send = send.clone();
        tokio::spawn(async move {
            deliver(target, batch, &send).await;
            drop(permit);
        });
    }
}

async fn deliver(target: u64, batch: Vec<Queued>, send: &SendFn) {
    let (items, replies): (Vec<Item>, Vec<_>) =
        batch.into_iter().map(|q| (q.item, q.reply)).unzip();
    let body = match rmp_serde::to_vec(&items) {
        Ok(b) => b,
        Err(e) => {
            for r in replies {
                let _ = r.send(Err(PeerError::Network(e.to_string())));
            }
            return;
        }
    };
    let answers = match tokio::time::timeout(BATCH_TIMEOUT, send(body)).await {
        Err(_) => Err(PeerError::Unreachable(format!(
            "node {target} did not answer in time"
        ))),
        Ok(Err(e)) => Err(e),
        Ok(Ok(bytes)) => rmp_serde::from_slice::<Vec<Answer>>(&bytes)
            .map_err(|e| PeerError::Network(format!("node {target} answered a bad batch: {e}"))),
    };
    match answers {
        Ok(answers) if answers.len() == replies.len() => {
            for (a, r) in answers.into_iter().zip(replies) {
                let _ = r.send(answer_result(target, a));
            }
        }
        Ok(answers) => {
            let why = format!(
                "node {target} answered {} of {} RPCs",
                answers.len(),
                replies.len()
            );
            for r in replies {
                let _ = r.send(Err(PeerError::Network(why.clone())));
            }
        }
        Err(e) => {
            for r in replies {
                let _ = r.send(Err(e.clone()));
            }
        }
    }
}

/// An answer as a lone RPC's exchange would have returned it.
fn answer_result(target: u64, a: Answer) -> Result<Bytes, PeerError> {
    if a.status == 200 {
        return Ok(Bytes::from(a.body));
    }
    let why = format!(
        "node {target} answered {}: {}",
        a.status,
        String::from_utf8_lossy(&a.body)
    );
    // A refusal is temporary, like a node that is down: openraft backs off and retries.
    Err(if a.status == 503 {
        PeerError::Unreachable(why)
    } else {
        PeerError::Network(why)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_answer_reads_as_unreachable_and_a_bad_one_as_a_network_error() {
        let ok = answer_result(
            2,
            Answer {
                status: 200,
                body: b"x".to_vec(),
            },
        );
        assert_eq!(ok.expect("ok").as_ref(), b"x");
        let refused = answer_result(
            2,
            Answer {
                status: 503,
                body: b"no floor".to_vec(),
            },
        );
        assert!(matches!(refused, Err(PeerError::Unreachable(m)) if m.contains("no floor")));
        let bad = answer_result(
            2,
            Answer {
                status: 400,
                body: Vec::new(),
            },
        );
        assert!(matches!(bad, Err(PeerError::Network(_))));
    }

    #[tokio::test]
    async fn rpcs_queued_behind_busy_slots_travel_together_and_each_gets_its_answer() {
        let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let send: SendFn = Arc::new(move |body: Vec<u8>| {
            let seen = seen.clone();
            Box::pin(async move {
                let items: Vec<Item> = rmp_serde::from_slice(&body).expect("batch");
                seen.lock().expect("lock").push(items.len());
                tokio::time::sleep(Duration::from_millis(20)).await;
                let answers: Vec<Answer> = items
                    .iter()
                    .map(|i| Answer {
                        status: 200,
                        body: i.group.to_be_bytes().to_vec(),
                    })
                    .collect();
                Ok(Bytes::from(rmp_serde::to_vec(&answers).expect("encode")))
            })
        });
        let lane = Lane::start(2, send);
        let calls = (0..40u32).map(|g| {
            let lane = lane.clone();
            async move {
                lane.append(2, g, vec![0; 10], Duration::from_secs(5))
                    .await
                    .map(|b| (g, b))
            }
        });
        for r in futures_util::future::join_all(calls).await {
            let (g, b) = r.expect("answer");
            assert_eq!(b.as_ref(), g.to_be_bytes(), "each RPC got its own answer");
        }
        let sizes = sizes.lock().expect("lock").clone();
        assert_eq!(sizes.iter().sum::<usize>(), 40);
        assert!(
            sizes.len() < 40,
            "RPCs queued behind busy slots were batched: {sizes:?}"
        );
    }
}
