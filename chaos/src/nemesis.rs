//! The nemesis: seeded fault schedules and their application. A schedule is a list of steps;
//! each step applies one or two faults, holds them, heals everything and lets the cluster
//! recover before the next. The same seed gives the same schedule, so a run can be repeated.

use std::time::Duration;

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::Serialize;

use crate::client;
use crate::cluster::Cluster;
use crate::cluster::ClusterError;
use crate::net::Cuts;

/// One fault. Node numbers are 1-based; `Leader` faults pick the stream's leader when applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Fault {
    /// Cut the stream's leader off from every other node.
    IsolateLeader,
    /// Cut `minority` off from the other nodes.
    Split { minority: Vec<usize> },
    /// `hub` sees everyone; the nodes of `left` and `right` do not see each other.
    Bridge {
        hub: usize,
        left: Vec<usize>,
        right: Vec<usize>,
    },
    /// SIGSTOP the node, SIGCONT it on heal.
    Pause { node: usize },
    /// SIGSTOP the stream's leader.
    PauseLeader,
    /// SIGKILL the node, start it again on heal.
    Kill { node: usize },
    /// SIGKILL the stream's leader.
    KillLeader,
    /// Drop the connections the node opens to its peers (theirs to it, and its clients',
    /// still pass): its egress to the cluster is cut while clients still reach it.
    EgressCut { node: usize },
    /// Drop the connections the node opens to the S3 store (the run then keeps its cold tier
    /// and snapshots there): an outage of the store on that node's path only.
    S3Outage { node: usize },
    /// Fill the node's WAL disk until `leave_mib` MiB are left (0: to the last byte), free it
    /// on heal. Leaving some exercises the free-space guard; leaving none, the WAL's own error.
    FillDisk { node: usize, leave_mib: u64 },
}

/// One step: faults applied together, held, then healed.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub faults: Vec<Fault>,
    pub hold: Duration,
    pub recover: Duration,
}

/// A schedule made from a seed.
#[derive(Clone, Debug, Serialize)]
pub struct Schedule {
    pub seed: u64,
    pub steps: Vec<Step>,
}

impl Schedule {
    /// `steps` steps over `nodes` nodes; about one step in four combines two faults.
    pub fn generate(seed: u64, nodes: usize, steps: usize) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut out = Vec::new();
        for _ in 0..steps {
            let mut faults = vec![one_fault(&mut rng, nodes)];
            if rng.random_range(0..4) == 0 {
                let second = one_fault(&mut rng, nodes);
                if !faults.contains(&second) {
                    faults.push(second);
                }
            }
            out.push(Step {
                faults,
                hold: Duration::from_millis(rng.random_range(3000..8000)),
                recover: Duration::from_millis(rng.random_range(3000..6000)),
            });
        }
        Schedule { seed, steps: out }
    }

    /// Whether any step cuts a node off from S3 (the run then keeps its cold tier there).
    pub fn uses_s3(&self) -> bool {
        self.steps
            .iter()
            .flat_map(|s| &s.faults)
            .any(|f| matches!(f, Fault::S3Outage { .. }))
    }

    /// Whether any step fills a disk (the nodes then get small disks).
    pub fn fills_disks(&self) -> bool {
        self.steps
            .iter()
            .flat_map(|s| &s.faults)
            .any(|f| matches!(f, Fault::FillDisk { .. }))
    }
}

fn one_fault(rng: &mut StdRng, nodes: usize) -> Fault {
    let mut all: Vec<usize> = (1..=nodes).collect();
    all.shuffle(rng);
    match rng.random_range(0..10) {
        0 => Fault::IsolateLeader,
        1 => Fault::Split {
            minority: all[..(nodes - 1) / 2].to_vec(),
        },
        2 => {
            let rest = &all[1..];
            let half = rest.len() / 2;
            Fault::Bridge {
                hub: all[0],
                left: rest[..half].to_vec(),
                right: rest[half..].to_vec(),
            }
        }
        3 => Fault::Pause { node: all[0] },
        4 => Fault::PauseLeader,
        5 => Fault::Kill { node: all[0] },
        6 => Fault::KillLeader,
        7 => Fault::EgressCut { node: all[0] },
        8 => Fault::S3Outage { node: all[0] },
        _ => Fault::FillDisk {
            node: all[0],
            leave_mib: if rng.random_range(0..2) == 0 { 0 } else { 8 },
        },
    }
}

/// The node (1-based) that leads the stream `path`, asked of each node in turn: the leader
/// takes the idempotent create, a follower redirects to it.
pub fn leader_of(cluster: &Cluster, path: &str) -> Option<usize> {
    let agent = client::agent(Duration::from_secs(2));
    let bases = cluster.bases();
    for base in &bases {
        let req = ureq::http::Request::builder()
            .method("PUT")
            .uri(format!("{base}{path}"))
            .header("content-type", crate::workload::CONTENT_TYPE)
            .body(Vec::new())
            .ok()?;
        let Ok(r) = agent.run(req) else { continue };
        match r.status().as_u16() {
            200 | 201 => return bases.iter().position(|b| b == base).map(|i| i + 1),
            307 => {
                let loc = r.headers().get("location")?.to_str().ok()?;
                if let Some(i) = bases.iter().position(|b| loc.starts_with(b.as_str())) {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// What the nemesis did, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct Applied {
    pub at_ms: u64,
    pub what: String,
}

/// Applies one step's faults; returns what was done, with the leader resolved.
pub fn apply(
    cluster: &mut Cluster,
    cuts: Cuts,
    path: &str,
    step: &Step,
) -> Result<Vec<String>, ClusterError> {
    let mut done = Vec::new();
    let all: Vec<usize> = (1..=cuts.nodes).collect();
    for f in &step.faults {
        let leader = || leader_of(cluster, path);
        match f {
            Fault::IsolateLeader => {
                if let Some(l) = leader() {
                    for &o in all.iter().filter(|&&o| o != l) {
                        cuts.cut(l, o)?;
                    }
                    done.push(format!("isolate leader n{l}"));
                }
            }
            Fault::Split { minority } => {
                for &m in minority {
                    for &o in all.iter().filter(|o| !minority.contains(o)) {
                        cuts.cut(m, o)?;
                    }
                }
                done.push(format!("split {minority:?} from the rest"));
            }
            Fault::Bridge { hub, left, right } => {
                for &l in left {
                    for &r in right {
                        cuts.cut(l, r)?;
                    }
                }
                done.push(format!("bridge through n{hub}: {left:?} | {right:?}"));
            }
            Fault::Pause { node } => {
                cluster.node(*node).pause();
                done.push(format!("pause n{node}"));
            }
            Fault::PauseLeader => {
                if let Some(l) = leader() {
                    cluster.node(l).pause();
                    done.push(format!("pause leader n{l}"));
                }
            }
            Fault::Kill { node } => {
                cluster.node(*node).kill9();
                done.push(format!("kill n{node}"));
            }
            Fault::KillLeader => {
                if let Some(l) = leader() {
                    cluster.node(l).kill9();
                    done.push(format!("kill leader n{l}"));
                }
            }
            Fault::EgressCut { node } => {
                cuts.cut_egress(*node, crate::cluster::PORT)?;
                done.push(format!("cut the egress of n{node}"));
            }
            Fault::S3Outage { node } => match cluster.s3_port {
                Some(port) => {
                    cuts.cut_s3(*node, port)?;
                    done.push(format!("cut n{node} off from S3"));
                }
                None => done.push(format!("no S3 to cut n{node} off from")),
            },
            Fault::FillDisk { node, leave_mib } => {
                cluster.fill_disk(*node, *leave_mib)?;
                done.push(format!("fill the disk of n{node} to {leave_mib} MiB free"));
            }
        }
    }
    Ok(done)
}

/// Heals everything: no cut, every node running and resumed, every disk freed.
pub fn heal(cluster: &mut Cluster, cuts: Cuts) -> Result<Vec<String>, ClusterError> {
    let mut done = Vec::new();
    cuts.heal()?;
    for i in 1..=cuts.nodes {
        cluster.free_disk(i);
        if let Some(crash) = cluster.node(i).exited_by_itself() {
            done.push(crash);
        }
        if cluster.node(i).paused {
            cluster.node(i).resume();
        }
        if !cluster.node(i).running() {
            cluster.restart(i)?;
            done.push(format!("start n{i}"));
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_schedule_and_another_seed_another() {
        let a = serde_json::to_string(&Schedule::generate(7, 3, 6).steps).ok();
        let b = serde_json::to_string(&Schedule::generate(7, 3, 6).steps).ok();
        let c = serde_json::to_string(&Schedule::generate(8, 3, 6).steps).ok();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn splits_leave_a_majority_and_bridges_split_the_rest() {
        for seed in 0..200 {
            for nodes in [3, 5] {
                for step in Schedule::generate(seed, nodes, 4).steps {
                    for f in step.faults {
                        match f {
                            Fault::Split { minority } => {
                                assert!(!minority.is_empty() && minority.len() * 2 < nodes)
                            }
                            Fault::Bridge { hub, left, right } => {
                                assert!(!left.is_empty() && !right.is_empty());
                                assert_eq!(left.len() + right.len() + 1, nodes);
                                assert!(!left.contains(&hub) && !right.contains(&hub));
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}
