//! `ursulactl status` against real `ursula server` processes: a single node from the quick
//! start's manifest, a manifest naming a port nobody listens on, a 3-voter cluster, a node
//! read through its admin plane; `ursulactl ready` (the image's health check) against a ready
//! node, a dead port and a node under WAL disk pressure; and the verbs this build does not run
//! answering so with exit code 1.
//!
//! `ursulactl` belongs to another package, so cargo does not build it for these tests: it is
//! looked up beside the test binary (`target/<profile>/ursulactl`), which `cargo build
//! --workspace` (or `-p ursula-ctl`) puts there.

use std::time::Duration;
use std::time::Instant;

use crate::harness::cluster::node_args;
use crate::harness::cluster::peer_entries;
use crate::harness::cluster::server_args;
use crate::harness::ctl::ctl as run;
use crate::harness::gateway::Proc as Node;
use crate::harness::gateway::memory_node;
use crate::harness::gateway::memory_node_with;
use crate::harness::ports::free_port;
use crate::harness::scratch::Scratch;

fn manifest_node(id: u64, port: u16) -> String {
    format!(r#"{{"id": {id}, "http_url": "http://127.0.0.1:{port}", "host": "127.0.0.1"}}"#)
}

#[test]
fn status_against_the_quick_start_manifest_reports_the_node_and_exits_0() {
    let scratch = Scratch::new("single");
    let node = memory_node(&scratch);
    let manifest = scratch.file(
        "local.json",
        &format!(r#"{{"nodes": [{}]}}"#, manifest_node(1, node.port)),
    );
    let (code, out, err) = run(&["status", "--config", &manifest.display().to_string()]);
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert!(out.contains("node 1 (127.0.0.1): groups="), "{out}");
    assert!(
        out.contains("reachable=yes ready=yes engine=memory"),
        "{out}"
    );
    assert!(out.contains("status: ok"), "{out}");
    assert!(!out.contains("NO LEADER"), "{out}");
}

#[test]
fn status_names_a_node_nobody_listens_for_and_exits_non_zero() {
    let scratch = Scratch::new("dead");
    let node = memory_node(&scratch);
    let dead = free_port();
    let manifest = scratch.file(
        "cluster.json",
        &format!(
            r#"{{"nodes": [{}, {}]}}"#,
            manifest_node(1, node.port),
            manifest_node(2, dead)
        ),
    );
    let (code, out, err) = run(&["status", "--config", &manifest.display().to_string()]);
    assert!(
        code.is_some_and(|c| c != 0),
        "exit {code:?}\nstdout: {out}\nstderr: {err}"
    );
    let addr = format!("127.0.0.1:{dead}");
    assert!(
        out.contains("node 2 (127.0.0.1): metrics unavailable — "),
        "{out}"
    );
    assert!(out.contains(&addr), "the report names {addr}: {out}");
    assert!(out.contains("status: FAILED"), "{out}");
    assert!(out.contains("is unreachable"), "{out}");
    // The reachable node is still reported.
    assert!(out.contains("node 1 (127.0.0.1): groups="), "{out}");
}

#[test]
fn status_reports_one_leader_per_group_across_a_raft_cluster() {
    let scratch = Scratch::new("cluster");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let shared = format!(
        "[raft]\ngroup_count = 4\ninit_membership_per_group = true\n{}",
        peer_entries(&ports)
    );
    let mut nodes: Vec<Node> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let wal = scratch.path().join(format!("n{}-wal", i + 1));
            let config = scratch.file(
                &format!("n{}.toml", i + 1),
                &format!(
                    "{shared}[runtime]\ncore_count = 1\n[raft.wal]\npath = \"{}\"\n",
                    wal.display()
                ),
            );
            let args = node_args(&config, i, *p);
            Node::spawn(&scratch, &format!("n{}", i + 1), *p, &args)
        })
        .collect();
    for n in &mut nodes {
        n.wait_for("ursula", "/__ursula/ready");
    }
    let entries: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| manifest_node(i as u64 + 1, *p))
        .collect();
    let manifest = scratch.file(
        "cluster.json",
        &format!(r#"{{"nodes": [{}]}}"#, entries.join(", ")),
    );
    // Ready means every group has a leader on every node; the views agree once the followers
    // heard from their leaders, which can lag an election by a heartbeat.
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let (code, out, err) = run(&["status", "--config", &manifest.display().to_string()]);
        // The nodes list a group in their metrics once their core has touched it, which can
        // come after readiness: wait until some are listed.
        let listed = out.matches("  group ").count();
        if code == Some(0)
            && listed > 0
            && !out.contains("DISAGREE")
            && !out.contains("no leader known")
        {
            break out;
        }
        assert!(
            Instant::now() < deadline,
            "exit {code:?}\nstdout: {out}\nstderr: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for id in 1..=3 {
        assert!(
            out.contains(&format!("node {id} (127.0.0.1): groups=")),
            "{out}"
        );
    }
    assert_eq!(out.matches("engine=raft").count(), 3, "{out}");
    // Every group a node lists has one leader all three agree on.
    let listed = out.matches("  group ").count();
    assert_eq!(out.matches(": leader ").count(), listed, "{out}");
    drop(nodes);
}

#[test]
fn verbs_this_build_does_not_run_say_so_in_one_line_with_exit_code_1() {
    // Exit 2 is the spec's safe abort; a verb that does not run is an error like any other.
    let reservation = ["--cell", "a", "--snapshot", "b", "--request", "c"];
    for argv in [
        [
            &["reservation-acknowledge"][..],
            &reservation,
            &["--response", "d"],
        ]
        .concat(),
        [&["reservation-propose"][..], &reservation].concat(),
    ] {
        let (code, out, err) = run(&argv);
        assert_eq!(code, Some(1), "{argv:?} stdout: {out}\nstderr: {err}");
        let refusal = format!("ursulactl: {}: not supported by this build", argv[0]);
        assert!(err.starts_with(&refusal), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

#[test]
fn status_reads_a_node_through_its_admin_plane_when_the_manifest_names_only_that() {
    let scratch = Scratch::new("admin-plane");
    let admin = free_port();
    let _node = memory_node_with(
        &scratch,
        &["--admin-listen".into(), format!("127.0.0.1:{admin}")],
    );
    // `admin_port` (with the host) and `admin_url`: the two ways the manifest names the plane.
    for entry in [
        format!(r#"{{"id": 1, "host": "127.0.0.1", "admin_port": {admin}}}"#),
        format!(r#"{{"id": 1, "admin_url": "http://127.0.0.1:{admin}"}}"#),
    ] {
        let manifest = scratch.file("admin.json", &format!(r#"{{"nodes": [{entry}]}}"#));
        let (code, out, err) = run(&["status", "--config", &manifest.display().to_string()]);
        assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
        assert!(
            out.contains("reachable=yes ready=yes engine=memory"),
            "{out}"
        );
        assert!(
            out.contains(&format!("url=http://127.0.0.1:{admin}")),
            "read at the admin plane: {out}"
        );
    }
    // A manifest that names an admin plane nobody serves fails, naming the node.
    let manifest = scratch.file(
        "wrong.json",
        &format!(
            r#"{{"nodes": [{{"id": 1, "host": "127.0.0.1", "admin_port": {port_off}}}]}}"#,
            port_off = free_port()
        ),
    );
    let (code, out, _) = run(&["status", "--config", &manifest.display().to_string()]);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("node 1"), "{out}");
}

#[test]
fn ready_exits_0_for_a_ready_node_and_1_with_the_reason_otherwise() {
    let scratch = Scratch::new("ready");
    let node = memory_node(&scratch);
    let (code, out, err) = run(&[
        "ready",
        "--url",
        &format!("http://127.0.0.1:{}/", node.port),
    ]);
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert_eq!(out, "ready\n");

    let dead = free_port();
    let (code, out, err) = run(&["ready", "--url", &format!("http://127.0.0.1:{dead}")]);
    assert_eq!(code, Some(1), "stdout: {out}\nstderr: {err}");
    assert!(
        err.starts_with(&format!(
            "ursulactl: ready: GET http://127.0.0.1:{dead}/__ursula/ready: "
        )),
        "{err}"
    );
    let (code, _, err) = run(&["ready", "--url", "not a url"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("ursulactl: ready: GET not a url/__ursula/ready: "),
        "{err}"
    );

    // A Raft node whose WAL file system has less free space than it requires answers 503
    // (wal_disk_pressure) once its disk sampler has looked.
    let wal = scratch.path().join("pressured-wal");
    let config = scratch.file(
        "pressured.toml",
        &format!(
            "[runtime]\ncore_count = 1\n[raft.wal]\npath = \"{}\"\nmin_available_size = \"1000TiB\"\nresume_available_size = \"2000TiB\"\n",
            wal.display()
        ),
    );
    let port = free_port();
    let pressured = Node::spawn(&scratch, "pressured", port, &server_args(&config, port));
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, out, err) = run(&["ready", "--url", &url]);
        if out == "not ready: wal_disk_pressure\n" {
            assert_eq!(code, Some(1), "{out}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "exit {code:?}\nstdout: {out}\nstderr: {err}\nlog: {}",
            pressured.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_mistyped_command_exits_1_not_the_safe_abort_2_and_help_exits_0() {
    let (code, _, err) = run(&["wait-ready", "--config", "x.json"]);
    assert_eq!(code, Some(1), "a missing --expected-groups: {err}");
    assert!(err.contains("--expected-groups"), "{err}");
    let (code, _, err) = run(&["drian", "--node", "1"]);
    assert_eq!(code, Some(1), "{err}");
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("drain"), "{out}");
}
