//! The maintenance fence against a real 3-voter Raft cluster of `ursula` processes, driven by
//! the real `ursulactl`: activation on a pinned manifest, what an active fence asks of admin
//! mutations (the token, `428` without it, `412` for another), `verify-quorum`'s
//! certification, retirement, what is refused (`409`: a lower generation, a retired token),
//! that a new process starts unclaimed, and a partial acknowledgement.
//!
//! `ursulactl` is looked up beside the test binary (`target/<profile>/ursulactl`), which
//! `cargo build -p ursula-ctl` puts there.

use crate::harness::cluster::*;
use crate::harness::ctl::*;

const RESERVATION: &str = "0123456789abcdef0123456789abcdef";
const EXECUTOR: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const OTHER_EXECUTOR: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

fn token(generation: u64, executor: &str) -> String {
    format!("{RESERVATION}:{generation}:{executor}")
}

/// What these tests do with the harness's cluster beyond what it offers.
trait FenceCluster {
    /// A raw admin request to node `id` carrying its current incarnation and `fence`.
    fn admin(&self, id: u64, method: &str, path: &str, fence: Option<&str>) -> u16;
    /// `pinned` with the root fence and every node's `expected_maintenance_fence` set.
    fn fenced(&self, pinned: &serde_json::Value, name: &str, generation: u64) -> String;
}

impl FenceCluster for Cluster {
    fn admin(&self, id: u64, method: &str, path: &str, fence: Option<&str>) -> u16 {
        let n = &self.nodes[(id - 1) as usize];
        let inc = self.metrics(id)["process_incarnation"]
            .as_str()
            .expect("process_incarnation")
            .to_owned();
        let mut headers = vec![("x-ursula-process-incarnation", inc.as_str())];
        if let Some(f) = fence {
            headers.push(("x-ursula-maintenance-fence", f));
        }
        send_url(method, &n.admin_url(path), &headers, b"")
            .expect("admin answer")
            .0
    }

    fn fenced(&self, pinned: &serde_json::Value, name: &str, generation: u64) -> String {
        let fence = serde_json::json!({
            "reservation_id": RESERVATION,
            "generation": generation,
            "executor_id": EXECUTOR,
        });
        let mut m = pinned.clone();
        m["maintenance_fence"] = fence.clone();
        for n in m["nodes"].as_array_mut().expect("nodes") {
            n["expected_maintenance_fence"] = fence.clone();
        }
        write(&self.dir, name, &m.to_string())
    }
}

fn fence_of(m: &serde_json::Value) -> (serde_json::Value, bool) {
    (
        m["maintenance_fence"].clone(),
        m["maintenance_fence_uncertain"] == true,
    )
}

fn proof(manifest: &str) -> serde_json::Value {
    let out = ctl_expect(
        0,
        &[
            "verify-quorum",
            "--config",
            manifest,
            "--expected-groups",
            "4",
            "--timeout-secs",
            "60",
        ],
    );
    serde_json::from_str(&out).expect("proof JSON")
}

#[test]
fn the_fence_verbs_refuse_a_manifest_without_the_fence_or_without_saved_incarnations() {
    let c = Cluster::start("fence-refuse");
    let (code, _, err) = ctl(&["activate-maintenance-fence", "--config", &c.manifest]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no root maintenance_fence"), "{err}");
    // The fence without the pins: still refused, and nothing was sent.
    let unpinned: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&c.manifest).expect("read")).expect("json");
    let fenced = c.fenced(&unpinned, "unpinned-fenced.json", 1);
    for verb in ["activate-maintenance-fence", "retire-maintenance-fence"] {
        let (code, _, err) = ctl(&[verb, "--config", &fenced]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("expected_process_incarnation"), "{err}");
        assert!(err.contains("nothing was changed"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    for id in 1..=3 {
        assert_eq!(fence_of(&c.metrics(id)), (serde_json::Value::Null, false));
    }
}

#[test]
fn an_activated_fence_admits_only_its_token_until_retired_and_a_new_process_starts_unclaimed() {
    let mut c = Cluster::start("fence-lifecycle");
    let pinned: serde_json::Value = serde_json::from_str(&ctl_expect(
        0,
        &["pin-incarnations", "--config", &c.manifest],
    ))
    .expect("pinned JSON");
    let fenced = c.fenced(&pinned, "fenced.json", 5);
    let own = token(5, EXECUTOR);

    let out = ctl_expect(0, &["activate-maintenance-fence", "--config", &fenced]);
    assert!(out.contains("active on nodes [1, 2, 3]"), "{out}");
    for id in 1..=3 {
        let (f, uncertain) = fence_of(&c.metrics(id));
        assert_eq!(
            f,
            serde_json::json!({"state": "active", "reservation_id": RESERVATION,
                "generation": 5, "executor_id": EXECUTOR}),
            "node {id}"
        );
        assert!(!uncertain);
    }
    // Activating the same token again is acknowledged (a resumed executor repeats it).
    ctl_expect(0, &["activate-maintenance-fence", "--config", &fenced]);

    // The fenced manifest's drain and undrain carry the token and pass.
    ctl_expect(
        0,
        &[
            "drain",
            "--config",
            &fenced,
            "--node",
            "2",
            "--timeout-secs",
            "60",
        ],
    );
    assert_eq!(
        c.metrics(2)["leadership_shed"]["state"],
        "maintenance-drain"
    );
    ctl_expect(0, &["undrain", "--config", &fenced, "--node", "2"]);
    assert_eq!(c.metrics(2)["leadership_shed"]["state"], "none");

    // Without the token, or with another executor's, the same mutation changes nothing.
    let mark = "/__ursula/leadership-shed/maintenance";
    assert_eq!(c.admin(2, "POST", mark, None), 428);
    assert_eq!(
        c.admin(2, "POST", mark, Some(&token(5, OTHER_EXECUTOR))),
        412
    );
    assert_eq!(c.metrics(2)["leadership_shed"]["state"], "none");
    // The pinned manifest without the fence is refused by the 428 too.
    let (code, _, err) = ctl(&[
        "undrain",
        "--config",
        &write(&c.dir, "pinned.json", &pinned.to_string()),
        "--node",
        "2",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("428"), "{err}");

    // A lower generation, or the same generation of another executor, is not admitted.
    let activate = "/__ursula/maintenance-fence";
    assert_eq!(
        c.admin(1, "POST", activate, Some(&token(4, OTHER_EXECUTOR))),
        409
    );
    assert_eq!(
        c.admin(1, "POST", activate, Some(&token(5, OTHER_EXECUTOR))),
        409
    );
    assert_eq!(fence_of(&c.metrics(1)).0["generation"], 5);

    let p = proof(&fenced);
    assert_eq!(p["maintenance_executor_certified"], true, "{p}");
    assert_eq!(p["maintenance_executor_retired_certified"], false, "{p}");

    let out = ctl_expect(0, &["retire-maintenance-fence", "--config", &fenced]);
    assert!(out.contains("retired on nodes [1, 2, 3]"), "{out}");
    for id in 1..=3 {
        let (f, uncertain) = fence_of(&c.metrics(id));
        assert_eq!(f["state"], "retired", "node {id}");
        assert_eq!(f["generation"], 5, "node {id}");
        assert!(!uncertain);
    }
    let p = proof(&fenced);
    assert_eq!(p["maintenance_executor_certified"], false, "{p}");
    assert_eq!(p["maintenance_executor_retired_certified"], true, "{p}");

    // A retired token never reopens: every node refuses it, and the verb names them.
    let (code, _, err) = ctl(&["activate-maintenance-fence", "--config", &fenced]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not acknowledged by node 1"), "{err}");
    assert!(err.contains("409"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(c.admin(3, "POST", activate, Some(&own)), 409);

    // A restarted node is a new process: unclaimed, whatever its predecessor held.
    let n = &mut c.nodes[2];
    n.sigterm();
    n.spawn();
    let m = c.metrics(3);
    assert_eq!(fence_of(&m), (serde_json::Value::Null, false), "{m}");

    // A higher generation with the old pins: nodes 1 and 2 acknowledge and keep it, node 3
    // (another process now) refuses with 412; the verb reports exactly that, in one line.
    let next = c.fenced(&pinned, "fenced-6.json", 6);
    let (code, _, err) = ctl(&["activate-maintenance-fence", "--config", &next]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not acknowledged by node 3"), "{err}");
    assert!(err.contains("acknowledged by [1, 2]"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for id in 1..=2 {
        let (f, _) = fence_of(&c.metrics(id));
        assert_eq!(
            (&f["state"], &f["generation"]),
            (&"active".into(), &6.into())
        );
    }
    assert_eq!(fence_of(&c.metrics(3)).0, serde_json::Value::Null);
}
