//! After a schedule healed, the cluster must settle by itself, with no operator: every group
//! led, every node agreeing on its leader, and the leaderships of the nodes that may lead
//! within one of each other (the fair-share balancer's end state, docs/operations.md). The run
//! measures how long that took and reports a cluster that did not settle within the bound as
//! an anomaly.

use std::collections::BTreeMap;
use std::time::Duration;
use std::time::Instant;

use crate::client;

/// How long a healed cluster may take to settle (docs/reliability.md).
pub const WITHIN: Duration = Duration::from_secs(90);

/// One node's view: each group's leader, and whether the node may lead now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub leaders: Vec<Option<u64>>,
    pub may_lead: bool,
}

/// Why `views` (node id -> its view) is not settled, or `None` when it is.
pub fn unsettled(views: &BTreeMap<u64, View>) -> Option<String> {
    let first = views.values().next()?;
    if let Some((n, _)) = views.iter().find(|(_, v)| v.leaders != first.leaders) {
        return Some(format!(
            "node {n} sees other leaders than node {}",
            views.keys().next()?
        ));
    }
    if let Some(g) = first.leaders.iter().position(Option::is_none) {
        return Some(format!("group {g} has no leader"));
    }
    let mut counts: BTreeMap<u64, usize> = views
        .iter()
        .filter(|(_, v)| v.may_lead)
        .map(|(n, _)| (*n, 0))
        .collect();
    for l in first.leaders.iter().flatten() {
        match counts.get_mut(l) {
            Some(c) => *c += 1,
            None => return Some(format!("node {l}, which may not lead, leads a group")),
        }
    }
    let (lo, hi) = (counts.values().min()?, counts.values().max()?);
    (hi - lo > 1).then(|| format!("leaderships are not within one: {counts:?}"))
}

fn view(agent: &ureq::Agent, base: &str) -> Option<(u64, View)> {
    let a = client::send(agent, "GET", &format!("{base}/__ursula/metrics"), &[], b"")?;
    if a.status != 200 {
        return None;
    }
    let m: serde_json::Value = serde_json::from_slice(&a.body).ok()?;
    let leaders = m["raft_groups"]
        .as_array()?
        .iter()
        .map(|g| g["current_leader"].as_u64())
        .collect();
    let node = m["raft_groups"].as_array()?.first()?["node_id"].as_u64()?;
    let may_lead = m["leadership_shed"]["should_campaign"].as_bool()?;
    Some((node, View { leaders, may_lead }))
}

/// Waits until the nodes at `bases` are settled; the seconds it took, or why they were not
/// within [`WITHIN`].
pub fn wait(bases: &[String]) -> Result<f64, String> {
    let agent = client::agent(Duration::from_secs(5));
    let began = Instant::now();
    let mut why = String::from("no node answered its metrics");
    while began.elapsed() < WITHIN {
        let views: Option<BTreeMap<u64, View>> = bases.iter().map(|b| view(&agent, b)).collect();
        match views {
            Some(v) => match unsettled(&v) {
                None => return Ok(began.elapsed().as_secs_f64()),
                Some(w) => why = w,
            },
            None => why = "a node did not answer its metrics".into(),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(format!(
        "the cluster did not settle by itself within {} s of the last heal: {why}",
        WITHIN.as_secs()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(leaders: &[Option<u64>], may_lead: bool) -> View {
        View {
            leaders: leaders.to_vec(),
            may_lead,
        }
    }

    #[test]
    fn settled_means_agreed_all_led_and_within_one_among_those_that_may_lead() {
        let even = [Some(1), Some(2), Some(3), Some(1)];
        let views = BTreeMap::from([
            (1, v(&even, true)),
            (2, v(&even, true)),
            (3, v(&even, true)),
        ]);
        assert_eq!(unsettled(&views), None);
        let piled = [Some(1), Some(1), Some(1), Some(2)];
        let views = BTreeMap::from([
            (1, v(&piled, true)),
            (2, v(&piled, true)),
            (3, v(&piled, true)),
        ]);
        assert!(unsettled(&views).is_some_and(|w| w.contains("within one")));
        // Node 3 may not lead (its disk is full): 2 and 2 between the others is settled.
        let two = [Some(1), Some(2), Some(1), Some(2)];
        let views = BTreeMap::from([(1, v(&two, true)), (2, v(&two, true)), (3, v(&two, false))]);
        assert_eq!(unsettled(&views), None);
        let leaderless = [Some(1), None, Some(2), Some(3)];
        let views = BTreeMap::from([(1, v(&leaderless, true)), (2, v(&leaderless, true))]);
        assert!(unsettled(&views).is_some_and(|w| w.contains("no leader")));
        let views = BTreeMap::from([(1, v(&even, true)), (2, v(&two, true))]);
        assert!(unsettled(&views).is_some_and(|w| w.contains("other leaders")));
    }
}
