//! One node observed over HTTP: its `/__ursula/metrics` JSON and its `/__ursula/ready` answer.

use std::time::Duration;

use crate::CtlError;
use crate::manifest::NodeEntry;

/// `/__ursula/metrics`, as the server writes it: the protocol crate's type, so the verbs read
/// exactly the document the server serializes. Missing fields read as their defaults.
pub type Metrics = ursula_protocol::metrics::NodeMetrics;

/// `/__ursula/ready`: `200` ready, `503` not ready with reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    NotReady(Vec<String>),
}

/// What one node answered.
#[derive(Debug)]
pub struct Observation {
    pub node: NodeEntry,
    /// The base URL metrics and readiness were read at.
    pub base: String,
    pub metrics: Result<Metrics, CtlError>,
    pub ready: Result<Readiness, CtlError>,
}

/// A plain-HTTP client that reports statuses instead of failing on them and never follows
/// redirects.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// Reads every node's metrics and readiness, one thread per node.
pub fn observe_all(nodes: &[NodeEntry], timeout: Duration) -> Vec<Observation> {
    let agent = agent(timeout);
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|n| {
                let agent = agent.clone();
                s.spawn(move || observe(&agent, n))
            })
            .collect();
        handles
            .into_iter()
            .zip(nodes)
            .map(|(h, n)| {
                h.join().unwrap_or_else(|_| Observation {
                    node: n.clone(),
                    base: n.metrics_base(),
                    metrics: Err(CtlError::Status {
                        url: n.metrics_base(),
                        status: 0,
                        body: "the observer thread panicked".into(),
                    }),
                    ready: Err(CtlError::Status {
                        url: n.metrics_base(),
                        status: 0,
                        body: "the observer thread panicked".into(),
                    }),
                })
            })
            .collect()
    })
}

pub fn observe(agent: &ureq::Agent, node: &NodeEntry) -> Observation {
    let base = node.metrics_base();
    let metrics =
        get(agent, &format!("{base}/__ursula/metrics")).and_then(|(url, status, body)| {
            if status != 200 {
                return Err(CtlError::Status {
                    url,
                    status,
                    body: snippet(&body),
                });
            }
            serde_json::from_str::<Metrics>(&body)
                .map_err(|source| CtlError::BadJson { url, source })
        });
    let ready = readiness(agent, &base);
    Observation {
        node: node.clone(),
        base,
        metrics,
        ready,
    }
}

/// One node's `/__ursula/ready` at `base` (its client, admin or metrics URL).
pub fn readiness(agent: &ureq::Agent, base: &str) -> Result<Readiness, CtlError> {
    let base = base.trim().trim_end_matches('/');
    get(agent, &format!("{base}/__ursula/ready")).and_then(|(url, status, body)| match status {
        200 => Ok(Readiness::Ready),
        503 => Ok(Readiness::NotReady(reasons(&body))),
        _ => Err(CtlError::Status {
            url,
            status,
            body: snippet(&body),
        }),
    })
}

pub(crate) fn get(agent: &ureq::Agent, url: &str) -> Result<(String, u16, String), CtlError> {
    let transport = |source| CtlError::Transport {
        url: url.to_owned(),
        source,
    };
    let mut resp = agent.get(url).call().map_err(transport)?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(64 * 1024 * 1024)
        .read_to_string()
        .map_err(transport)?;
    Ok((url.to_owned(), status, body))
}

/// Why a node is not ready: its `reasons` list and `reason`, or its body when it has neither.
fn reasons(body: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        if let Some(list) = v.get("reasons").and_then(|r| r.as_array()) {
            found.extend(
                list.iter()
                    .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned)),
            );
        }
        if let Some(r) = v.get("reason").and_then(|r| r.as_str()) {
            found.push(r.to_owned());
        }
    }
    if found.is_empty() && !body.trim().is_empty() {
        found.push(snippet(body));
    }
    found
}

/// The first line of a body, cut to 200 characters.
pub(crate) fn snippet(body: &str) -> String {
    let line = body.lines().next().unwrap_or_default().trim();
    match line.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_metrics_shape_parses() {
        let m: Metrics = serde_json::from_str(
            r#"{"node_id":1,"engine":"memory","core_count":2,"group_count":2,"streams":3,
                "cores":[{"core":0}],
                "groups":[{"group":0,"core":0,"streams":1,"leader":1,"term":0,"applied_index":4},
                          {"group":1,"core":1,"streams":2,"leader":null,"term":3,"applied_index":0}],
                "a_field_of_a_later_release":{"x":1}}"#,
        )
        .expect("metrics");
        assert_eq!(m.groups.len(), 2);
        assert_eq!(m.groups[0].leader, Some(1));
        assert_eq!(m.groups[1].leader, None);
    }

    #[test]
    fn not_ready_reasons_are_read() {
        assert_eq!(
            reasons(r#"{"ready":false,"reasons":["wal_disk_pressure"]}"#),
            vec!["wal_disk_pressure".to_owned()]
        );
        assert_eq!(
            reasons(r#"{"ready":false,"reason":"raft_replica_unready"}"#),
            vec!["raft_replica_unready".to_owned()]
        );
        assert_eq!(reasons("draining\n"), vec!["draining".to_owned()]);
        assert!(reasons("").is_empty());
    }
}
