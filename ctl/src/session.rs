//! One invocation's view of the cluster. The first process incarnation seen of each node (or
//! the one the manifest pins with `expected_process_incarnation`) is kept for the whole
//! invocation: a later observation naming another process fails with
//! [`CtlError::ProcessChanged`], and every mutation carries the pinned identity in
//! `x-ursula-process-incarnation`, so a plan made against one process is never applied to its
//! replacement (the server answers `412`, reported as [`CtlError::ProcessChangedRefused`]).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::de::DeserializeOwned;
use ursula_protocol::headers::MAINTENANCE_FENCE;
use ursula_protocol::headers::PROCESS_INCARNATION;

use crate::CtlError;
use crate::manifest::Manifest;
use crate::manifest::NodeEntry;
use crate::observe;
use crate::observe::Metrics;
use crate::observe::Readiness;

pub struct Session {
    agent: ureq::Agent,
    pub nodes: Vec<NodeEntry>,
    pins: Mutex<BTreeMap<u64, String>>,
    fence: Option<String>,
}

/// What a mutation or an admin read answered, when it was not refused outright.
#[derive(Debug)]
pub struct Answer {
    pub url: String,
    pub status: u16,
    pub body: String,
}

/// What a binary admin request answered (the backup routes).
#[derive(Debug)]
pub struct RawAnswer {
    pub url: String,
    pub status: u16,
    pub body: Vec<u8>,
}

impl RawAnswer {
    /// As a text answer, for the JSON routes and for error messages.
    pub fn text(self) -> Answer {
        Answer {
            url: self.url,
            status: self.status,
            body: String::from_utf8_lossy(&self.body).into_owned(),
        }
    }
}

/// The largest JSON answer an admin request reads.
const ADMIN_BODY_LIMIT: u64 = 16 * 1024 * 1024;

impl Answer {
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, CtlError> {
        serde_json::from_str(&self.body).map_err(|source| CtlError::BadJson {
            url: self.url.clone(),
            source,
        })
    }
}

impl Session {
    /// A session pinned to the manifest's saved incarnations, except `forget`'s (the node
    /// `pin-incarnations --replace-node` rebinds).
    pub fn new(manifest: &Manifest, timeout: Duration, forget: Option<u64>) -> Session {
        let pins = manifest
            .nodes
            .iter()
            .filter(|n| Some(n.id) != forget)
            .filter_map(|n| Some((n.id, n.expected_process_incarnation.clone()?)))
            .collect();
        Session {
            agent: observe::agent(timeout),
            nodes: manifest.nodes.clone(),
            pins: Mutex::new(pins),
            fence: manifest
                .maintenance_fence
                .as_ref()
                .map(|f| format!("{}:{}:{}", f.reservation_id, f.generation, f.executor_id)),
        }
    }

    /// The manifest's maintenance fence token, sent on every admin request (a server whose
    /// fence is active requires it on mutations and on the quorum proof).
    pub fn fence(&self) -> Option<&str> {
        self.fence.as_deref()
    }

    pub fn node(&self, id: u64) -> Result<&NodeEntry, CtlError> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or(CtlError::UnknownNode { id })
    }

    /// The incarnation `node` is pinned to, if one was seen or saved.
    pub fn pin(&self, node: u64) -> Option<String> {
        self.pins
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&node)
            .cloned()
    }

    /// Every pin, by node.
    pub fn pins(&self) -> BTreeMap<u64, String> {
        self.pins
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Pins a first sighting, or checks a later one against the pin.
    fn check(&self, node: u64, seen: &str) -> Result<(), CtlError> {
        if seen.is_empty() {
            return Err(CtlError::NoIncarnation { node });
        }
        let mut pins = self
            .pins
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match pins.get(&node) {
            Some(expected) if expected != seen => Err(CtlError::ProcessChanged {
                node,
                expected: expected.clone(),
                seen: seen.to_owned(),
            }),
            Some(_) => Ok(()),
            None => {
                pins.insert(node, seen.to_owned());
                Ok(())
            }
        }
    }

    /// `node`'s metrics, its process checked against (or pinned as) the invocation's.
    pub fn metrics(&self, node: &NodeEntry) -> Result<Metrics, CtlError> {
        let m = self.metrics_unchecked(node)?;
        self.check(node.id, &m.process_incarnation)?;
        Ok(m)
    }

    /// `node`'s metrics without looking at its process (`pin-incarnations` compares itself).
    pub fn metrics_unchecked(&self, node: &NodeEntry) -> Result<Metrics, CtlError> {
        let base = node.metrics_base();
        let (url, status, body) = observe::get(&self.agent, &format!("{base}/__ursula/metrics"))?;
        if status != 200 {
            return Err(CtlError::Status {
                url,
                status,
                body: observe::snippet(&body),
            });
        }
        serde_json::from_str::<Metrics>(&body).map_err(|source| CtlError::BadJson { url, source })
    }

    /// Every node's metrics (checked), read in parallel, in manifest order.
    pub fn metrics_all(&self) -> Vec<(u64, Result<Metrics, CtlError>)> {
        self.each(|n| self.metrics(n))
    }

    /// `f` on every node of the manifest, one thread each, in manifest order.
    pub fn each<T: Send>(
        &self,
        f: impl Fn(&NodeEntry) -> Result<T, CtlError> + Sync,
    ) -> Vec<(u64, Result<T, CtlError>)> {
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .nodes
                .iter()
                .map(|n| (n.id, s.spawn(|| f(n))))
                .collect();
            handles
                .into_iter()
                .map(|(id, h)| {
                    let r = h.join().unwrap_or_else(|_| {
                        Err(CtlError::Unexpected {
                            what: "observe",
                            why: format!("the thread observing node {id} panicked"),
                        })
                    });
                    (id, r)
                })
                .collect()
        })
    }

    /// `node`'s `/__ursula/ready`, read where its metrics are.
    pub fn ready(&self, node: &NodeEntry) -> Result<Readiness, CtlError> {
        observe::readiness(&self.agent, &node.metrics_base())
    }

    /// A request to `node`'s admin plane carrying its pinned incarnation (pinned now from its
    /// metrics when nothing was seen of it yet). A `412` is the process having changed; `428`
    /// and any other status are returned for the caller to judge.
    pub fn admin(
        &self,
        node: &NodeEntry,
        method: &'static str,
        path: &str,
    ) -> Result<Answer, CtlError> {
        Ok(self
            .admin_raw(node, method, path, Vec::new(), ADMIN_BODY_LIMIT)?
            .text())
    }

    /// [`Session::admin`] with a binary request body (sent as `application/octet-stream` when
    /// not empty) and a binary answer of at most `limit` bytes: the backup routes.
    pub fn admin_raw(
        &self,
        node: &NodeEntry,
        method: &'static str,
        path: &str,
        body: Vec<u8>,
        limit: u64,
    ) -> Result<RawAnswer, CtlError> {
        let expected = match self.pin(node.id) {
            Some(p) => p,
            None => {
                self.metrics(node)?;
                self.pin(node.id)
                    .ok_or(CtlError::NoIncarnation { node: node.id })?
            }
        };
        let url = format!("{}{path}", node.admin_url());
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header(PROCESS_INCARNATION, &expected);
        if let Some(f) = &self.fence {
            req = req.header(MAINTENANCE_FENCE, f);
        }
        if !body.is_empty() {
            req = req.header("content-type", "application/octet-stream");
        }
        let req = req.body(body).map_err(|e| CtlError::Unexpected {
            what: "request",
            why: format!("{method} {url}: {e}"),
        })?;
        let transport = |source| CtlError::Request {
            method,
            url: url.clone(),
            source,
        };
        let mut resp = self.agent.run(req).map_err(transport)?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(transport)?;
        // A fence refusal names the fence header; any other 412 is the incarnation's.
        if status == 412 {
            let text = String::from_utf8_lossy(&body);
            if text.contains(MAINTENANCE_FENCE) {
                return Err(CtlError::FenceRefused {
                    node: node.id,
                    method,
                    url,
                    body: observe::snippet(&text),
                });
            }
            return Err(CtlError::ProcessChangedRefused {
                node: node.id,
                method,
                url,
                expected,
                body: observe::snippet(&text),
            });
        }
        Ok(RawAnswer { url, status, body })
    }

    /// [`Session::admin`] expecting `200` with a JSON `T`; anything else is
    /// [`CtlError::Refused`].
    pub fn admin_ok<T: DeserializeOwned>(
        &self,
        node: &NodeEntry,
        method: &'static str,
        path: &str,
    ) -> Result<T, CtlError> {
        let a = self.admin(node, method, path)?;
        if a.status != 200 {
            return Err(refused(method, a));
        }
        a.json()
    }
}

/// An answer that was not the one wanted, as an error.
pub fn refused(method: &'static str, a: Answer) -> CtlError {
    CtlError::Refused {
        method,
        url: a.url,
        status: a.status,
        body: observe::snippet(&a.body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest;

    fn session(forget: Option<u64>) -> Session {
        let m = manifest::parse(
            "c.json",
            r#"{"nodes": [{"id": 1, "expected_process_incarnation": "saved-1"}, {"id": 2}]}"#,
        )
        .expect("manifest");
        Session::new(&m, Duration::from_secs(1), forget)
    }

    #[test]
    fn the_first_process_seen_is_pinned_and_another_one_refused() {
        let s = session(None);
        // The manifest's pin holds from the start.
        assert!(matches!(
            s.check(1, "other"),
            Err(CtlError::ProcessChanged { node: 1, .. })
        ));
        assert!(s.check(1, "saved-1").is_ok());
        // Node 2 is pinned by its first sighting.
        assert_eq!(s.pin(2), None);
        assert!(s.check(2, "first").is_ok());
        assert_eq!(s.pin(2).as_deref(), Some("first"));
        assert!(matches!(
            s.check(2, "second"),
            Err(CtlError::ProcessChanged { node: 2, .. })
        ));
        assert!(matches!(
            s.check(2, ""),
            Err(CtlError::NoIncarnation { node: 2 })
        ));
    }

    #[test]
    fn a_replaced_node_forgets_its_saved_pin_and_binds_the_new_process() {
        let s = session(Some(1));
        assert!(s.check(1, "replacement").is_ok());
        assert_eq!(s.pins().get(&1).map(String::as_str), Some("replacement"));
    }
}
