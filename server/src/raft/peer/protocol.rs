//! Raft protocol 3 between peers (the format epoch, [`ursula_protocol::format`]): the
//! startup probe that refuses a peer speaking another protocol before this node writes its WAL
//! markers, the header every peer RPC and its answer carry, and the mismatch that makes the
//! node unready (`format_epoch_mismatch`) until it restarts.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use ursula_protocol::headers as h;

/// The Raft protocol this build speaks: the format epoch.
pub const PROTOCOL: u32 = ursula_protocol::format::RAFT_PROTOCOL;
/// `GET` answers `{"raft_protocol": 3}`: what the startup probe asks.
pub const PATH: &str = "/__ursula/raft-protocol";

/// The spec's budget for the startup probe: 2 s to connect, 2 s for the answer.
const CONNECT: Duration = Duration::from_secs(2);
const ANSWER: Duration = Duration::from_secs(2);

/// Whether this node exchanged a Raft RPC with a peer of another protocol since it started.
#[derive(Debug, Default)]
pub struct Mismatch(AtomicBool);

impl Mismatch {
    pub fn record(&self, why: &str) {
        self.0.store(true, Ordering::Relaxed);
        tracing::error!(
            "Raft protocol mismatch: {why}; this node stays unready (format_epoch_mismatch) until it restarts"
        );
    }

    pub fn seen(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A peer that speaks another Raft protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Its header names another protocol.
    #[error("the peer speaks Raft protocol {0:?}, this node speaks {PROTOCOL}", PROTOCOL = PROTOCOL)]
    Speaks(String),
    /// It answered the start-up probe with something else.
    #[error("peer {id} ({url}) refused Raft protocol {PROTOCOL}: {what}", PROTOCOL = PROTOCOL)]
    Refused { id: u64, url: String, what: String },
}

/// Checks a peer's protocol header: `Err` names what it speaks. An absent header passes.
pub fn check(value: Option<&str>) -> Result<(), ProtocolError> {
    match value {
        None => Ok(()),
        Some(v) if v.trim().parse::<u32>().ok() == Some(PROTOCOL) => Ok(()),
        Some(v) => Err(ProtocolError::Speaks(v.to_owned())),
    }
}

/// Asks every peer but `me`, in parallel, whether it speaks protocol 3. A peer that answers
/// anything else refuses it and ends startup; one that cannot be reached in time is skipped,
/// since a fresh cluster starts its nodes in parallel.
pub async fn probe_peers(me: u64, peers: &BTreeMap<u64, String>) -> Result<(), ProtocolError> {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(CONNECT));
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let asks = peers.iter().filter(|(id, _)| **id != me).map(|(id, url)| {
        let client = client.clone();
        async move { (*id, url, ask(&client, url).await) }
    });
    for (id, url, answer) in futures_util::future::join_all(asks).await {
        match answer {
            Answer::Speaks => {}
            Answer::Unreachable(why) => {
                tracing::info!(peer = id, %url, "Raft protocol probe skipped an unreachable peer: {why}");
            }
            Answer::Refused(what) => {
                return Err(ProtocolError::Refused {
                    id,
                    url: url.clone(),
                    what,
                });
            }
        }
    }
    Ok(())
}

enum Answer {
    Speaks,
    Unreachable(String),
    Refused(String),
}

async fn ask(client: &Client<HttpConnector, Empty<Bytes>>, base: &str) -> Answer {
    let request = match hyper::Request::get(format!("{base}{PATH}"))
        .header(h::RAFT_PROTOCOL, PROTOCOL)
        .body(Empty::new())
    {
        Ok(r) => r,
        Err(e) => return Answer::Refused(format!("unusable URL: {e}")),
    };
    let exchange = async {
        let resp = client.request(request).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok::<_, String>((status, body))
    };
    // The connect timeout bounds the connection; the rest of the exchange gets its own 2 s.
    let (status, body) = match tokio::time::timeout(CONNECT + ANSWER, exchange).await {
        Err(_) => return Answer::Unreachable("no answer in time".into()),
        Ok(Err(e)) => return Answer::Unreachable(e),
        Ok(Ok(answer)) => answer,
    };
    let spoken = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("raft_protocol").and_then(serde_json::Value::as_u64));
    match (status.is_success(), spoken) {
        (true, Some(p)) if p == u64::from(PROTOCOL) => Answer::Speaks,
        (_, Some(p)) => Answer::Refused(format!("it speaks protocol {p}")),
        _ => Answer::Refused(format!(
            "it answered {status} without a Raft protocol: {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(200)
                .collect::<String>()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_header_of_another_protocol_is_a_mismatch_and_a_missing_one_passes() {
        assert!(check(Some("3")).is_ok());
        assert!(check(None).is_ok());
        let err = check(Some("2")).expect_err("protocol 2");
        assert_eq!(err, ProtocolError::Speaks("2".into()));
        assert!(
            err.to_string().contains("speaks Raft protocol \"2\""),
            "{err}"
        );
        assert!(check(Some("three")).is_err());
    }
}
