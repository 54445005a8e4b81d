//! `ursulactl status`: reads every node of the manifest and prints
//!
//! - per node, the spec's line `node N (host): groups=G leaders={node: count, ...}` (or
//!   `metrics unavailable — …`), then whether it is reachable and ready, its engine, its
//!   streams and how many groups it leads itself;
//! - per group, the leader every node reports, flagging groups no node knows a leader for,
//!   nodes that disagree on the leader, and nodes that know none;
//! - groups below the nodes' `group_count` that no node lists, as a warning;
//! - a verdict line. It fails (exit 1) when a node's metrics cannot be read or a group has no
//!   leader; disagreements and not-ready nodes are reported without failing, since they are
//!   normal for a moment around an election or a restart.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::observe::Metrics;
use crate::observe::Observation;
use crate::observe::Readiness;

/// The printed report and whether it found the cluster unhealthy.
#[derive(Debug)]
pub struct Report {
    pub text: String,
    pub failures: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }
}

/// One node's view of one group.
#[derive(Debug, Clone, Copy)]
struct View {
    node: u64,
    leader: Option<u64>,
    term: u64,
}

pub fn report(observations: &[Observation]) -> Report {
    let mut text = String::new();
    let mut failures = Vec::new();
    let mut groups: BTreeMap<u64, Vec<View>> = BTreeMap::new();
    let mut observed = 0usize;
    let mut group_count = 0u64;
    for o in observations {
        let id = o.node.id;
        let host = o.node.display_host();
        let ready = match &o.ready {
            Ok(Readiness::Ready) => "yes".to_owned(),
            Ok(Readiness::NotReady(r)) if r.is_empty() => "no".to_owned(),
            Ok(Readiness::NotReady(r)) => format!("no ({})", r.join(", ")),
            Err(_) => "unknown".to_owned(),
        };
        let m = match &o.metrics {
            Ok(m) => m,
            Err(e) => {
                let reachable = if o.ready.is_ok() { "yes" } else { "no" };
                let _ = writeln!(text, "node {id} ({host}): metrics unavailable — {e}");
                let _ = writeln!(text, "  reachable={reachable} ready={ready} url={}", o.base);
                failures.push(if o.ready.is_ok() {
                    format!(
                        "node {id} ({}) answers but its metrics are unavailable",
                        o.base
                    )
                } else {
                    format!("node {id} ({}) is unreachable", o.base)
                });
                continue;
            }
        };
        observed += 1;
        group_count = group_count.max(m.group_count);
        let mut leaders: BTreeMap<String, usize> = BTreeMap::new();
        for g in &m.groups {
            let key = g
                .leader
                .map_or_else(|| "none".to_owned(), |l| l.to_string());
            *leaders.entry(key).or_default() += 1;
            groups.entry(u64::from(g.group)).or_default().push(View {
                node: node_id(m, id),
                leader: g.leader,
                term: g.term,
            });
        }
        let self_id = node_id(m, id);
        let led = m
            .groups
            .iter()
            .filter(|g| g.leader == Some(self_id))
            .count();
        let dist: Vec<String> = leaders.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(
            text,
            "node {id} ({host}): groups={} leaders={{{}}}",
            m.groups.len(),
            dist.join(", ")
        );
        let _ = writeln!(
            text,
            "  reachable=yes ready={ready} engine={} streams={} leads={led} url={}",
            if m.engine.is_empty() {
                "unknown"
            } else {
                &m.engine
            },
            m.streams,
            o.base
        );
        if let Some(reported) = Some(m.node_id).filter(|n| *n != 0)
            && reported != id
        {
            let _ = writeln!(
                text,
                "  warning: the node reports node_id {reported}, the manifest lists it as {id}"
            );
        }
    }
    let _ = writeln!(
        text,
        "groups: {} (observed on {observed} of {} nodes)",
        groups.len(),
        observations.len()
    );
    let reporters: Vec<u64> = {
        let mut v: Vec<u64> = groups.values().flatten().map(|v| v.node).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    for (group, views) in &groups {
        let line = group_line(views, &reporters);
        if line.no_leader {
            failures.push(format!("group {group} has no leader"));
        }
        let _ = writeln!(text, "  group {group}: {}", line.text);
    }
    let unlisted: Vec<u64> = (0..group_count)
        .filter(|g| !groups.contains_key(g))
        .collect();
    if !unlisted.is_empty() {
        let _ = writeln!(
            text,
            "  warning: no node lists groups {} of group_count {group_count}",
            list(&unlisted)
        );
    }
    if failures.is_empty() {
        let _ = writeln!(
            text,
            "status: ok: {} node(s) reachable, every listed group has a leader",
            observations.len()
        );
    } else {
        let _ = writeln!(text, "status: FAILED: {}", failures.join("; "));
    }
    Report { text, failures }
}

struct GroupLine {
    text: String,
    no_leader: bool,
}

fn group_line(views: &[View], reporters: &[u64]) -> GroupLine {
    let mut by_leader: BTreeMap<u64, (Vec<u64>, u64)> = BTreeMap::new();
    let mut unknown: Vec<u64> = Vec::new();
    for v in views {
        match v.leader {
            Some(l) => {
                let e = by_leader.entry(l).or_default();
                e.0.push(v.node);
                e.1 = e.1.max(v.term);
            }
            None => unknown.push(v.node),
        }
    }
    let missing: Vec<u64> = reporters
        .iter()
        .copied()
        .filter(|r| !views.iter().any(|v| v.node == *r))
        .collect();
    let mut text = match by_leader.len() {
        0 => {
            return GroupLine {
                text: format!("NO LEADER: no node knows one (nodes {})", list(&unknown)),
                no_leader: true,
            };
        }
        1 => by_leader
            .iter()
            .map(|(l, (_, term))| format!("leader {l} (term {term})"))
            .collect::<String>(),
        _ => {
            let claims: Vec<String> = by_leader
                .iter()
                .map(|(l, (nodes, term))| format!("nodes {} say {l} (term {term})", list(nodes)))
                .collect();
            format!("LEADERS DISAGREE: {}", claims.join(", "))
        }
    };
    if !unknown.is_empty() {
        let _ = write!(text, "; no leader known to nodes {}", list(&unknown));
    }
    if !missing.is_empty() {
        let _ = write!(text, "; not reported by nodes {}", list(&missing));
    }
    GroupLine {
        text,
        no_leader: false,
    }
}

fn list(ids: &[u64]) -> String {
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// The node id a node reports, or the manifest's when it reports none (0 is no node's id).
fn node_id(m: &Metrics, manifest_id: u64) -> u64 {
    if m.node_id == 0 {
        manifest_id
    } else {
        m.node_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CtlError;
    use crate::manifest::NodeEntry;
    use crate::observe::Metrics;

    fn node(id: u64) -> NodeEntry {
        NodeEntry {
            id,
            admin_port: None,
            admin_url: None,
            host: Some(format!("10.0.0.{id}")),
            http_url: Some(format!("http://10.0.0.{id}:4437")),
            metrics_url: None,
            expected_process_incarnation: None,
            expected_maintenance_fence: None,
            extra: Default::default(),
        }
    }

    fn seen(id: u64, leaders: &[Option<u64>]) -> Observation {
        let groups: Vec<serde_json::Value> = leaders
            .iter()
            .enumerate()
            .map(|(g, l)| serde_json::json!({"group": g, "leader": l, "term": 2}))
            .collect();
        let m: Metrics = serde_json::from_value(serde_json::json!({
            "node_id": id, "engine": "raft", "streams": 5, "group_count": 2, "groups": groups,
        }))
        .expect("metrics");
        Observation {
            node: node(id),
            base: format!("http://10.0.0.{id}:4437"),
            metrics: Ok(m),
            ready: Ok(Readiness::Ready),
        }
    }

    fn down(id: u64) -> Observation {
        let err = || CtlError::Status {
            url: "x".into(),
            status: 0,
            body: "refused".into(),
        };
        Observation {
            node: node(id),
            base: format!("http://10.0.0.{id}:4437"),
            metrics: Err(err()),
            ready: Err(err()),
        }
    }

    #[test]
    fn a_healthy_cluster_prints_the_spec_line_and_passes() {
        let obs = [seen(1, &[Some(1), Some(2)]), seen(2, &[Some(1), Some(2)])];
        let r = report(&obs);
        assert!(r.ok(), "{}", r.text);
        assert!(
            r.text
                .contains("node 1 (10.0.0.1): groups=2 leaders={1: 1, 2: 1}")
        );
        assert!(r.text.contains("engine=raft streams=5 leads=1"));
        assert!(r.text.contains("group 0: leader 1 (term 2)\n"));
        assert!(r.text.contains("status: ok"));
    }

    #[test]
    fn groups_no_node_lists_are_warned_about() {
        let mut o = seen(1, &[Some(1)]);
        if let Ok(m) = &mut o.metrics {
            m.group_count = 3;
        }
        let r = report(&[o]);
        assert!(r.ok(), "{}", r.text);
        assert!(
            r.text
                .contains("warning: no node lists groups 1,2 of group_count 3")
        );
    }

    #[test]
    fn an_unreachable_node_and_a_leaderless_group_fail() {
        let obs = [
            seen(1, &[Some(1), None]),
            seen(2, &[Some(1), None]),
            down(3),
        ];
        let r = report(&obs);
        assert!(!r.ok());
        assert!(r.text.contains("node 3 (10.0.0.3): metrics unavailable — "));
        assert!(r.text.contains("group 1: NO LEADER"));
        assert!(
            r.text
                .contains("node 3 (http://10.0.0.3:4437) is unreachable")
        );
        assert!(r.text.contains("group 1 has no leader"));
    }

    #[test]
    fn disagreements_and_unknown_leaders_are_flagged_without_failing() {
        let obs = [
            seen(1, &[Some(1), Some(1)]),
            seen(2, &[Some(3), None]),
            seen(3, &[Some(3)]),
        ];
        let r = report(&obs);
        assert!(r.ok(), "{}", r.text);
        assert!(!r.text.contains("warning: no node lists"));
        assert!(
            r.text
                .contains("group 0: LEADERS DISAGREE: nodes 1 say 1 (term 2), nodes 2,3 say 3")
        );
        assert!(r.text.contains(
            "group 1: leader 1 (term 2); no leader known to nodes 2; not reported by nodes 3"
        ));
    }
}
