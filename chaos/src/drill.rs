//! Drills: one fault, held, with what the cluster must do about it checked step by step
//! (where a schedule only checks the history and that the cluster settles afterwards).
//!
//! The egress drill: node 3 of a 3-voter cluster loses its egress to its peers (the
//! connections it opens to them are dropped; theirs to it and its clients' still pass). Its
//! cluster-egress gate must find that it reaches no quorum, report `cluster-egress-unhealthy`,
//! and lead nothing for as long as the cut lasts, while the cluster takes writes through the
//! other two and node 3 still answers its clients. Once the cut heals it must report `none`
//! again, and the cluster must settle by itself with node 3 leading its share.

use std::path::Path;
use std::time::Duration;
use std::time::Instant;

use crate::client;
use crate::cluster::Cluster;
use crate::cluster::PORT;
use crate::cluster::Shape;
use crate::converge;
use crate::net::Cuts;

/// How long each step of the drill may take.
const STEP: Duration = Duration::from_secs(60);
/// How long node 3 is watched leading nothing while the cut holds.
const HOLD: Duration = Duration::from_secs(10);

/// What the drill measured, in seconds from the cut (the last from the heal).
#[derive(Debug)]
pub struct EgressReport {
    pub shed_s: f64,
    pub evacuated_s: f64,
    pub healed_s: f64,
    pub settled_s: f64,
}

fn metrics(agent: &ureq::Agent, base: &str) -> Option<serde_json::Value> {
    let a = client::send(agent, "GET", &format!("{base}/__ursula/metrics"), &[], b"")?;
    (a.status == 200)
        .then(|| serde_json::from_slice(&a.body).ok())
        .flatten()
}

fn shed_state(agent: &ureq::Agent, base: &str) -> Option<String> {
    Some(
        metrics(agent, base)?["leadership_shed"]["state"]
            .as_str()?
            .to_owned(),
    )
}

/// The groups node `id` leads, as node `base` sees them.
fn led_by(agent: &ureq::Agent, base: &str, id: u64) -> Option<usize> {
    let m = metrics(agent, base)?;
    let groups = m["raft_groups"].as_array()?;
    let all_led = groups
        .iter()
        .all(|g| g["current_leader"].as_u64().is_some());
    all_led.then(|| {
        groups
            .iter()
            .filter(|g| g["current_leader"].as_u64() == Some(id))
            .count()
    })
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> Result<T, String> {
    let began = Instant::now();
    while began.elapsed() < STEP {
        if let Some(v) = f() {
            return Ok(v);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("{what} did not happen within {} s", STEP.as_secs()))
}

/// Appends one record through `base` (following the redirect to the leader); `true` on `204`.
fn appends(agent: &ureq::Agent, base: &str, path: &str, body: &[u8]) -> bool {
    let ct = [("content-type", crate::workload::CONTENT_TYPE)];
    client::send(agent, "PUT", &format!("{base}{path}"), &ct, b"")
        .is_some_and(|a| a.status == 200 || a.status == 201)
        && client::send(agent, "POST", &format!("{base}{path}"), &ct, body)
            .is_some_and(|a| a.status == 204)
}

/// Runs the egress drill on a 3-voter cluster in `dir`; the timings, or what went wrong.
pub fn egress(ursula: &Path, dir: &Path, cuts: Cuts) -> Result<EgressReport, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let shape = Shape {
        nodes: 3,
        fsync: "never".into(),
        small_disks: false,
        s3: None,
    };
    let cluster = Cluster::start(ursula, dir, &shape).map_err(|e| e.to_string())?;
    let bases = cluster.bases();
    let agent = client::agent(Duration::from_secs(3));
    converge::wait(&bases)?;
    let (n1, n3) = (&bases[0], &bases[2]);
    if led_by(&agent, n1, 3).unwrap_or(0) == 0 {
        return Err("node 3 leads nothing before the cut: the drill would prove nothing".into());
    }
    if shed_state(&agent, n3).as_deref() != Some("none") {
        return Err("node 3 sheds before the cut".into());
    }

    cuts.cut_egress(3, PORT).map_err(|e| e.to_string())?;
    let cut = Instant::now();
    wait_for("node 3 reporting cluster-egress-unhealthy", || {
        (shed_state(&agent, n3)? == "cluster-egress-unhealthy").then_some(())
    })?;
    let shed_s = cut.elapsed().as_secs_f64();
    wait_for("every group led by node 1 or 2", || {
        (led_by(&agent, n1, 3)? == 0).then_some(())
    })?;
    let evacuated_s = cut.elapsed().as_secs_f64();
    // The cut holds: node 3 takes no leadership back, the others take writes, and node 3
    // still answers its clients.
    let held = Instant::now();
    let mut n = 0;
    while held.elapsed() < HOLD {
        match led_by(&agent, n1, 3) {
            Some(0) | None => {}
            Some(k) => {
                return Err(format!(
                    "node 3 leads {k} groups again while its egress is cut"
                ));
            }
        }
        if shed_state(&agent, n3).as_deref() != Some("cluster-egress-unhealthy") {
            return Err(
                "node 3 stopped reporting its egress as unhealthy while the cut held".into(),
            );
        }
        n += 1;
        let body = format!("[{{\"n\":{n}}}]");
        if !appends(
            &agent,
            n1,
            &format!("/drill/egress-{}", n % 4),
            body.as_bytes(),
        ) {
            return Err(format!(
                "an append through node 1 failed while node 3's egress was cut (#{n})"
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    cuts.heal().map_err(|e| e.to_string())?;
    let healed = Instant::now();
    wait_for("node 3 reporting none again", || {
        (shed_state(&agent, n3)? == "none").then_some(())
    })?;
    let healed_s = healed.elapsed().as_secs_f64();
    converge::wait(&bases)?;
    let settled_s = healed.elapsed().as_secs_f64();
    if led_by(&agent, n1, 3).unwrap_or(0) == 0 {
        return Err("node 3 leads nothing after the heal".into());
    }
    let log = std::fs::read_to_string(dir.join("n3.log")).unwrap_or_default();
    for line in [
        "cluster egress tick is bad",
        "cluster egress unhealthy",
        "cluster egress healthy again",
    ] {
        if !log.contains(line) {
            return Err(format!("node 3's log lacks {line:?}"));
        }
    }
    drop(cluster);
    Ok(EgressReport {
        shed_s,
        evacuated_s,
        healed_s,
        settled_s,
    })
}
