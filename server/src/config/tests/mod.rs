//! The config's rules, one test per rule.

use super::*;

mod cold;

/// Resolves `text` as the config file, with no flags.
fn resolve_text(text: &str) -> Result<Config, String> {
    let file = parse_file(text).map_err(|e| e.to_string())?;
    resolve_from(Some(&file), &Overrides::default()).map_err(|e| e.to_string())
}

#[test]
fn defaults_listen_on_4437() {
    let c = resolve_text("").expect("empty config is valid");
    assert_eq!(c.listen.to_string(), "127.0.0.1:4437");
    assert_eq!(c.group_count, 16 * c.core_count as u32);
}

#[test]
fn unknown_keys_are_refused_by_name() {
    let err = resolve_text("[server]\nlisen = \"x\"\n").expect_err("typo must fail");
    assert!(err.contains("lisen"), "{err}");
    let err = resolve_text("[raft.wal]\nfsync = \"sometimes\"\n").expect_err("bad value must fail");
    assert!(err.contains("raft.wal.fsync"), "{err}");
    let err = resolve_text("[runtime]\ncore_count = 0\n").expect_err("zero cores");
    assert!(err.contains("runtime.core_count"), "{err}");
    let err = resolve_text("[storage.cold]\nflush_size = \"8 parsecs\"\n").expect_err("bad size");
    assert!(err.contains("flush_size"), "{err}");
}

#[test]
fn documented_examples_parse() {
    let c = resolve_text(
        "[server]\nlisten = \"127.0.0.1:9000\"\n[raft]\nnode_id = 3\ngroup_count = 16\n",
    )
    .expect("valid");
    assert_eq!((c.listen.port(), c.node_id, c.group_count), (9000, 3, 16));
    assert!(parse_file("[storage.cold]\nbackend = \"s3\"\nroot = \"r\"\nflush_interval = \"200ms\"\n[storage.cold.s3]\nbucket = \"b\"\nregion = \"us-east-1\"\n").is_ok());
    assert_eq!(parse_size("64MiB"), Some(64 << 20));
    assert_eq!(
        parse_duration("5m"),
        Some(std::time::Duration::from_secs(300))
    );
    assert_eq!(parse_duration("0"), Some(std::time::Duration::ZERO));
}

#[test]
fn config_imports_no_subsystem_of_the_server() {
    // The module is a leaf: subsystems depend on it, never the other way round.
    let sources = [
        ("mod.rs", include_str!("../mod.rs")),
        ("file.rs", include_str!("../file.rs")),
        ("units.rs", include_str!("../units.rs")),
        ("cold.rs", include_str!("../cold.rs")),
        ("raft.rs", include_str!("../raft.rs")),
        ("ignored.rs", include_str!("../ignored.rs")),
        ("error.rs", include_str!("../error.rs")),
        ("secret.rs", include_str!("../secret.rs")),
    ];
    for (name, text) in sources {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for path in code.split("crate::").skip(1) {
                assert!(
                    path.starts_with("config"),
                    "config/{name}:{} reaches outside config: {line}",
                    n + 1
                );
            }
        }
    }
}

#[test]
fn the_shutdown_deadline_is_20_s_unless_set_and_never_zero() {
    let c = resolve_text("").expect("valid");
    assert_eq!(c.shutdown_deadline, std::time::Duration::from_secs(20));
    assert_eq!(c.shutdown_stall, None);
    let c =
        resolve_text("[server]\nshutdown_deadline = \"3s\"\n[testing]\nshutdown_stall = \"1m\"\n")
            .expect("valid");
    assert_eq!(c.shutdown_deadline, std::time::Duration::from_secs(3));
    assert_eq!(c.shutdown_stall, Some(std::time::Duration::from_secs(60)));
    let err = resolve_text("[server]\nshutdown_deadline = \"0s\"\n").expect_err("zero deadline");
    assert_eq!(err, "server.shutdown_deadline: must be non-zero");
}

#[test]
fn the_producer_forget_hook_is_unset_unless_set_and_never_zero() {
    assert_eq!(resolve_text("").expect("valid").producer_forget_after, None);
    let c = resolve_text("[testing]\nproducer_forget_after = \"2s\"\n").expect("valid");
    assert_eq!(
        c.producer_forget_after,
        Some(std::time::Duration::from_secs(2))
    );
    let err = resolve_text("[testing]\nproducer_forget_after = \"0s\"\n").expect_err("zero");
    assert!(err.starts_with("testing.producer_forget_after"), "{err}");
}

#[test]
fn the_request_head_timeout_and_connection_cap_have_defaults_and_refuse_zero() {
    let c = resolve_text("").expect("valid");
    assert_eq!(c.request_head_timeout, std::time::Duration::from_secs(120));
    assert_eq!(c.max_connections, 16_384);
    let c = resolve_text("[server]\nrequest_head_timeout = \"2s\"\nmax_connections = 8\n")
        .expect("valid");
    assert_eq!(c.request_head_timeout, std::time::Duration::from_secs(2));
    assert_eq!(c.max_connections, 8);
    let err = resolve_text("[server]\nrequest_head_timeout = \"0s\"\n").expect_err("zero timeout");
    assert_eq!(err, "server.request_head_timeout: must be non-zero");
    let err = resolve_text("[server]\nmax_connections = 0\n").expect_err("no connections");
    assert_eq!(err, "server.max_connections: must be at least 1");
}

/// A config file that sets the dotted `key` (a section when it has no dot).
fn setting(key: &str) -> String {
    match key.rsplit_once('.') {
        Some((section, last)) => format!("[{section}]\n{last} = 1\n"),
        None => format!("[{key}]\n"),
    }
}

#[test]
fn a_removed_key_fails_to_load_naming_the_key_and_the_release_that_removed_it() {
    let err =
        resolve_text("[raft.wal]\npath = \"/d\"\nbackend = \"memory\"\n").expect_err("removed");
    assert_eq!(
        err,
        "raft.wal.backend: removed in Ursula 0.7.0 (the memory WAL is gone; the WAL is always the \
         per-core disk journal)"
    );
    for r in file::REMOVED {
        let err = resolve_text(&setting(r.key)).expect_err(r.key);
        let named = format!("{}: removed in Ursula {} (", r.key, r.release);
        assert!(err.starts_with(&named), "{}: {err}", r.key);
    }
    let releases: Vec<(&str, &str)> = file::REMOVED.iter().map(|r| (r.key, r.release)).collect();
    for (key, release) in [
        ("raft.wal.backend", "0.7.0"),
        ("raft.wal.allow_volatile_multi_peer", "0.7.0"),
        ("raft.memory_bootstrap_marker_dir", "0.7.0"),
        ("raft.rejoin_probe", "0.7.0"),
        ("raft.snapshot_pressure_unpurged_logs", "0.6.0"),
        ("storage.snapshot.drive_flush_concurrency", "0.6.0"),
        ("server.keyed_state_upstream", "0.6.0"),
    ] {
        assert!(releases.contains(&(key, release)), "{key} in {release}");
    }
}

#[test]
fn a_removed_key_in_a_file_is_reported_with_the_file() {
    let path = std::env::temp_dir().join(format!("ursula-removed-{}.toml", std::process::id()));
    std::fs::write(&path, "[raft]\nrejoin_probe = true\n").expect("write");
    let err = load_file(&path).expect_err("removed").to_string();
    let _ = std::fs::remove_file(&path);
    assert!(
        err.starts_with(&format!("config file {}: ", path.display())),
        "{err}"
    );
    assert!(
        err.contains("raft.rejoin_probe: removed in Ursula 0.7.0"),
        "{err}"
    );
}

#[test]
fn a_key_that_only_resembles_a_removed_one_is_an_unknown_key() {
    // `backend` is removed under `raft.wal`, not under `storage.snapshot`, where it is valid.
    assert!(resolve_text("[storage.snapshot]\nbackend = \"inline\"\n").is_ok());
    let err = resolve_text("[raft]\nrejoin = 1\n").expect_err("unknown");
    assert!(err.contains("unknown field `rejoin`"), "{err}");
}

#[test]
fn zero_values_the_spec_forbids_fail_naming_the_key() {
    let s3 = "[storage.cold]\nbackend = \"s3\"\n[storage.cold.s3]\nbucket = \"b\"\n";
    for (text, key) in [
        (
            format!("{s3}probe_timeout = \"0s\"\n"),
            "storage.cold.s3.probe_timeout",
        ),
        (
            format!("{s3}unhealthy_ticks = 0\n"),
            "storage.cold.s3.unhealthy_ticks",
        ),
        (
            format!("{s3}heal_ticks = 0\n"),
            "storage.cold.s3.heal_ticks",
        ),
        (
            "[governance.leadership_balance]\npeer_timeout = \"0ms\"\n".to_owned(),
            "governance.leadership_balance.peer_timeout",
        ),
        ("[raft]\nnode_id = 0\n".to_owned(), "raft.node_id"),
    ] {
        let err = resolve_text(&text).expect_err(key);
        assert_eq!(err, format!("{key}: must be non-zero"));
    }
    assert!(resolve_text(&format!("{s3}probe_timeout = \"5s\"\n")).is_ok());
    let err = resolve_text("[raft]\nsnapshot_build_max_concurrency = 17\n").expect_err("17");
    assert_eq!(
        err,
        "raft.snapshot_build_max_concurrency: (17) must be between 1 and 16"
    );
}

#[test]
fn node_id_zero_fails_from_the_command_line_too() {
    let file = parse_file("").expect("empty");
    let flags = Overrides {
        node_id: Some(0),
        ..Overrides::default()
    };
    let err = resolve_from(Some(&file), &flags).expect_err("node 0");
    assert_eq!(err.to_string(), "raft.node_id: must be non-zero");
}

#[test]
fn a_static_cluster_needs_its_node_id_and_peers_with_non_zero_ids() {
    let peers = "[raft.wal]\npath = \"/d\"\n\
                 [[raft.peers]]\nnode_id = 1\nurl = \"http://a:1\"\n\
                 [[raft.peers]]\nnode_id = 2\nurl = \"http://b:1\"\n";
    let err = resolve_text(peers).expect_err("no node id");
    assert!(
        err.starts_with("raft.node_id: is required when raft.peers is set"),
        "{err}"
    );
    let c = resolve_text(&format!("[raft]\nnode_id = 2\n{peers}")).expect("valid");
    assert_eq!(c.node_id, 2);
    let zero = "[raft.wal]\npath = \"/d\"\n[[raft.peers]]\nnode_id = 0\nurl = \"http://a:1\"\n";
    let err = resolve_text(&format!("[raft]\nnode_id = 1\n{zero}")).expect_err("peer 0");
    assert_eq!(err, "raft.peers: node_id must be non-zero");
    assert_eq!(resolve_text("").expect("single node").node_id, 1);
}

#[test]
fn governance_has_a_schema_and_refuses_keys_the_spec_does_not_name() {
    let ok = "[governance.leadership_balance]\npeer_timeout = \"500ms\"\nmax_per_tick = 2\n\
              [governance.cold_health]\n[governance.cluster_probe]\n";
    assert!(resolve_text(ok).is_ok());
    let err = resolve_text("[governance]\nanything = 1\n").expect_err("unknown");
    assert!(err.contains("unknown field `anything`"), "{err}");
    let err =
        resolve_text("[governance.leadership_balance]\npeer_timout = \"1s\"\n").expect_err("typo");
    assert!(err.contains("peer_timout"), "{err}");
    let err = resolve_text("[governance.leadership_balance]\npeer_timeout = 5\n")
        .expect_err("not a duration");
    assert!(err.contains("peer_timeout"), "{err}");
}

#[test]
fn the_spec_keys_init_membership_and_s3_prefix_load() {
    for text in [
        "[raft]\ninit_membership = true\n",
        "[raft]\ninit_membership = true\ninit_membership_per_group = true\n",
        "[storage.snapshot]\ns3_prefix = \"snapshots\"\n",
    ] {
        assert!(resolve_text(text).is_ok(), "{text}");
    }
    let err = resolve_text("[raft]\ninit_membership = true\ninit_membership_per_group = false\n")
        .expect_err("two spellings, two values");
    assert!(
        err.starts_with("raft.init_membership: is another spelling"),
        "{err}"
    );
}

/// Every key of the Configuration page (and the troubleshooting page's other spelling), each set
/// to a value that asks for something: what a config written for the spec may hold.
const EVERY_SPEC_KEY: &str = r#"
[server]
listen = "127.0.0.1:4437"
cluster_listen = "127.0.0.1:4439"
http_inflight_body_size = "256MiB"

[runtime]
cpu_affinity = true
core_count = 2
live_read_max_waiters_per_core = 0
external_payload_min_size = "2MiB"
node_memory_abort_cap_size = "8GiB"

[observability]
tokio_console = true

[raft]
node_id = 1
append_transport_budget_bytes = 134217728
group_count = 4
init_membership_per_group = false
init_membership = false
max_uncommitted_size_per_group = "64MiB"
snapshot_log_budget = "1GiB"
snapshot_build_max_concurrency = 2
snapshot_pressure_max_groups_per_tick = 16

[raft.wal]
path = "/var/lib/ursula"
fsync = "always"
segment_size = "64MiB"
cache_size = "256MiB"
min_available_size = "512MiB"
resume_available_size = "1GiB"

[storage.cold]
backend = "s3"
root = "ursula-prod-20260518"
flush_interval = "1s"
flush_size = "8MiB"
flush_max_concurrency = 4
max_hot_size_per_group = "64MiB"
flush_max_hot_age = "5m"
compaction_enabled = true

[storage.cold.s3]
bucket = "my-ursula-bucket"
region = "us-east-1"
server_side_encryption = "aws-kms"
kms_key_id = "arn:aws:kms:key"
probe_timeout = "5s"
unhealthy_ticks = 3
heal_ticks = 2

[storage.snapshot]
backend = "s3"
drive_interval = "5s"
s3_prefix = "snapshots"

[governance.leadership_balance]
peer_timeout = "500ms"
max_per_tick = 4

[governance.cold_health]

[governance.cluster_probe]
"#;

#[test]
fn every_key_this_build_does_not_act_on_is_listed_in_a_stable_order() {
    let c = resolve_text(EVERY_SPEC_KEY).expect("a spec config loads");
    assert_eq!(
        c.ignored_keys,
        [
            "governance.cluster_probe",
            "governance.cold_health",
            "observability.tokio_console",
            "raft.append_transport_budget_bytes",
            "raft.init_membership",
            "raft.init_membership_per_group",
        ]
    );
}

#[test]
fn the_cluster_egress_gate_is_acted_on_by_a_node_with_peers_and_listed_by_one_without() {
    let peers = "[raft]\nnode_id = 1\n[raft.wal]\npath = \"/d\"\n\
                 [[raft.peers]]\nnode_id = 1\nurl = \"http://a:1\"\n\
                 [[raft.peers]]\nnode_id = 2\nurl = \"http://b:1\"\n\
                 [governance.cluster_probe]\n";
    let c = resolve_text(peers).expect("valid");
    assert!(
        !c.ignored_keys
            .iter()
            .any(|k| k == "governance.cluster_probe"),
        "{:?}",
        c.ignored_keys
    );
    let alone = resolve_text("[governance.cluster_probe]\n").expect("valid");
    assert!(
        alone
            .ignored_keys
            .iter()
            .any(|k| k == "governance.cluster_probe")
    );
}

#[test]
fn the_leadership_balancer_moves_two_a_tick_every_two_seconds_by_default() {
    let c = resolve_text("").expect("valid");
    assert_eq!(
        c.leadership_balance,
        LeadershipBalance {
            max_per_tick: 2,
            peer_timeout: Duration::from_millis(500),
            interval: Duration::from_secs(2),
        }
    );
    let text = "[governance.leadership_balance]\nmax_per_tick = 3\npeer_timeout = \"250ms\"\n\
                [testing]\nleadership_balance_interval = \"100ms\"\n";
    let c = resolve_text(text).expect("valid");
    assert_eq!(c.leadership_balance.max_per_tick, 3);
    assert_eq!(
        c.leadership_balance.peer_timeout,
        Duration::from_millis(250)
    );
    assert_eq!(c.leadership_balance.interval, Duration::from_millis(100));
    assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
    let err = resolve_text("[testing]\nleadership_balance_interval = \"0s\"\n").expect_err("zero");
    assert!(err.contains("testing.leadership_balance_interval"), "{err}");
}

#[test]
fn a_value_that_asks_for_what_the_build_does_anyway_is_not_listed() {
    let text = "[runtime]\ncpu_affinity = false\nexternal_payload_min_size = \"1MiB\"\n\
                [observability]\ntokio_console = false\n\
                [raft]\ninit_membership_per_group = true\ninit_membership = true\n\
                [storage.snapshot]\nbackend = \"inline\"\n";
    let c = resolve_text(text).expect("valid");
    assert_eq!(c.ignored_keys, Vec::<String>::new());
    // `auto` means S3 snapshots with an S3 cold tier, and inline ones otherwise: both built.
    let auto = "[storage.snapshot]\nbackend = \"auto\"\n";
    assert!(resolve_text(auto).expect("valid").ignored_keys.is_empty());
    let s3 = "[storage.cold]\nbackend = \"s3\"\n[storage.cold.s3]\nbucket = \"b\"\n";
    let c = resolve_text(&format!("{auto}{s3}")).expect("valid");
    assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
    // A prefix for S3 snapshots that are inline anyway changes nothing, and says so.
    let inline = "[storage.snapshot]\nbackend = \"inline\"\ns3_prefix = \"snaps\"\n";
    let c = resolve_text(&format!("{inline}{s3}")).expect("valid");
    assert_eq!(c.ignored_keys, ["storage.snapshot.s3_prefix"]);
}

#[test]
fn the_in_memory_node_lists_the_keys_only_raft_reads_and_refuses_peers() {
    let text = "[raft]\nnode_id = 3\ngroup_count = 8\nsnapshot_log_budget = \"1GiB\"\n\
                [raft.wal]\npath = \"/d\"\nfsync = \"always\"\n\
                [storage.snapshot]\ndrive_interval = \"1s\"\n[testing]\nshutdown_stall = \"1s\"\n";
    let file = parse_file(text).expect("parses");
    let memory = Overrides {
        preset: Some("default".into()),
        ..Overrides::default()
    };
    let c = resolve_from(Some(&file), &memory).expect("valid");
    assert_eq!(c.engine, EngineChoice::Memory);
    assert_eq!((c.node_id, c.group_count), (3, 8));
    assert_eq!(
        c.ignored_keys,
        [
            "raft.snapshot_log_budget",
            "raft.wal.fsync",
            "raft.wal.path",
            "storage.snapshot.drive_interval",
            "testing.shutdown_stall",
        ]
    );
    let c = resolve_from(Some(&file), &Overrides::default()).expect("valid");
    assert!(matches!(c.engine, EngineChoice::Raft { .. }));
    assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
    let peers = parse_file(&format!(
        "{text}[[raft.peers]]\nnode_id = 3\nurl = \"http://a:1\"\n"
    ))
    .expect("parses");
    let err = resolve_from(Some(&peers), &memory).expect_err("peers in memory");
    assert_eq!(
        err.to_string(),
        "raft.peers: needs the Raft engine, but --preset default runs the in-memory node"
    );
}

#[test]
fn the_engine_rule_is_the_configuration_pages() {
    assert!(!runs_raft(false, None), "no file: in memory");
    assert!(runs_raft(true, None), "a file: Raft");
    assert!(!runs_raft(true, Some("default")));
    assert!(!runs_raft(true, Some("dev")));
    assert!(runs_raft(false, Some("tiny")));
    assert!(runs_raft(true, Some("large")));
    let c = resolve_from(None, &Overrides::default()).expect("no file");
    assert_eq!(c.engine, EngineChoice::Memory);
    let file = parse_file("").expect("empty");
    let c = resolve_from(Some(&file), &Overrides::default()).expect("empty file");
    assert!(matches!(c.engine, EngineChoice::Raft { wal_dir: None, .. }));
}

#[test]
fn the_configuration_pages_complete_examples_load() {
    let single = "[server]\nlisten = \"127.0.0.1:4437\"\n\n[raft]\nnode_id = 1\ngroup_count = 16\n\n\
                  [raft.wal]\npath = \"./data\"\n";
    let c = resolve_text(single).expect("the single-node example");
    assert_eq!(
        c.engine,
        EngineChoice::Raft {
            wal_dir: Some("./data".into()),
            fsync_always: false,
            segment_size: 64 << 20,
            cache_size: 256 << 20,
            peers: Default::default(),
            peer_secret: None,
        }
    );
    let cluster = r#"
[server]
listen = "0.0.0.0:4437"

[runtime]
core_count = 16

[raft]
node_id = 1
group_count = 256
init_membership_per_group = true

[raft.wal]
path = "/var/lib/ursula"

[storage.cold]
backend = "s3"
root = "ursula-prod-20260518"

[storage.cold.s3]
bucket = "my-ursula-bucket"
region = "us-east-1"

[[raft.peers]]
node_id = 1
url = "http://10.0.0.1:4437"

[[raft.peers]]
node_id = 2
url = "http://10.0.0.2:4437"

[[raft.peers]]
node_id = 3
url = "http://10.0.0.3:4437"
"#;
    let c = resolve_text(cluster).expect("the three-node example");
    assert_eq!((c.core_count, c.group_count, c.node_id), (16, 256, 1));
    let EngineChoice::Raft { peers, .. } = &c.engine else {
        panic!("the example runs Raft");
    };
    assert_eq!(peers.len(), 3);
    assert_eq!(
        c.cold.expect("cold tier").store.root,
        "ursula-prod-20260518"
    );
    assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
}

#[test]
fn the_admin_plane_listens_on_loopback_4438_unless_moved_or_off() {
    let c = resolve_text("").expect("valid");
    assert_eq!(
        c.admin_listen,
        Some("127.0.0.1:4438".parse().expect("addr"))
    );
    assert_eq!(c.cluster_listen, None);
    let c = resolve_text("[server]\nadmin_listen = \"127.0.0.1:9438\"\n").expect("valid");
    assert_eq!(
        c.admin_listen,
        Some("127.0.0.1:9438".parse().expect("addr"))
    );
    let c = resolve_text("[server]\nadmin_listen = \"off\"\n").expect("valid");
    assert_eq!(c.admin_listen, None);
    let err = resolve_text("[server]\nadmin_listen = \"\"\n").expect_err("empty");
    assert!(
        err.starts_with("server.admin_listen: \"\" is not an address"),
        "{err}"
    );
    let err = resolve_text("[server]\nadmin_listen = \"loopback\"\n").expect_err("bad");
    assert!(
        err.starts_with("server.admin_listen: \"loopback\""),
        "{err}"
    );
}

#[test]
fn admin_listen_on_the_command_line_overrides_the_file_and_can_turn_it_off() {
    let file = parse_file("[server]\nadmin_listen = \"127.0.0.1:9438\"\n").expect("parses");
    let flag = |v: &str| Overrides {
        admin_listen: Some(v.to_owned()),
        ..Overrides::default()
    };
    let c = resolve_from(Some(&file), &flag("off")).expect("valid");
    assert_eq!(c.admin_listen, None);
    let c = resolve_from(Some(&file), &flag("127.0.0.1:0")).expect("valid");
    assert_eq!(c.admin_listen, Some("127.0.0.1:0".parse().expect("addr")));
    let err = resolve_from(Some(&file), &flag("4438")).expect_err("not an address");
    assert!(err.to_string().starts_with("server.admin_listen:"), "{err}");
}

#[test]
fn cluster_listen_is_an_address_and_no_two_listeners_share_a_port() {
    let c = resolve_text("[server]\ncluster_listen = \"0.0.0.0:4439\"\n").expect("valid");
    assert_eq!(
        c.cluster_listen,
        Some("0.0.0.0:4439".parse().expect("addr"))
    );
    let err = resolve_text("[server]\ncluster_listen = \"here\"\n").expect_err("bad");
    assert!(err.starts_with("server.cluster_listen: \"here\""), "{err}");
    for (text, key) in [
        ("admin_listen = \"127.0.0.1:4437\"", "server.admin_listen"),
        ("cluster_listen = \"0.0.0.0:4437\"", "server.cluster_listen"),
        (
            "cluster_listen = \"127.0.0.1:4438\"",
            "server.cluster_listen",
        ),
    ] {
        let err = resolve_text(&format!("[server]\n{text}\n")).expect_err(text);
        assert!(err.starts_with(&format!("{key}: ")), "{err}");
        assert!(err.ends_with("each listener needs its own"), "{err}");
    }
    // Port 0 asks the kernel for a free port: two of them never collide.
    let zeros = "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n";
    assert!(resolve_text(zeros).is_ok());
    let c = resolve_text(EVERY_SPEC_KEY).expect("valid");
    assert!(!c.ignored_keys.iter().any(|k| k.contains("listen")));
}

#[test]
fn each_preset_sets_the_preset_tables_groups_cold_flushes_caps_body_budget_and_cold_cache() {
    // Groups, cold flush size, cold writes, hot/admission cap, in-flight body budget, cold
    // cache (MiB).
    let table = [
        ("tiny", 64, 4, 2, 8, 64, 64),
        ("small", 128, 4, 2, 16, 64, 64),
        ("standard", 256, 8, 4, 64, 256, 256),
        ("large", 512, 16, 8, 128, 512, 512),
    ];
    let cold = parse_file("[storage.cold]\nbackend = \"memory\"\n").expect("parses");
    for (name, groups, flush, writes, cap, body, cache) in table {
        let o = Overrides {
            preset: Some(name.into()),
            ..Overrides::default()
        };
        let c = resolve_from(Some(&cold), &o).expect("valid");
        let settings = c.cold.as_ref().expect("a cold tier");
        let got = (
            c.group_count,
            settings.flush_min_hot >> 20,
            settings.flush_max >> 20,
            settings.flush_max_concurrency,
            settings.max_hot_per_group >> 20,
            c.max_uncommitted_per_group >> 20,
            c.http_inflight_body_size >> 20,
            settings.cache_size >> 20,
        );
        assert_eq!(
            got,
            (groups, flush, flush, writes, cap, cap, body, cache),
            "{name}"
        );
    }
    // The config file's own values win over the preset's.
    let file = parse_file(
        "[raft]\nmax_uncommitted_size_per_group = \"32MiB\"\n\
         [storage.cold]\nbackend = \"memory\"\nflush_size = \"1MiB\"\nflush_max_concurrency = 3\n\
         max_hot_size_per_group = \"0\"\ncache_size = \"0\"\n",
    )
    .expect("parses");
    let o = Overrides {
        preset: Some("large".into()),
        ..Overrides::default()
    };
    let c = resolve_from(Some(&file), &o).expect("valid");
    let settings = c.cold.as_ref().expect("a cold tier");
    assert_eq!(
        (
            settings.flush_min_hot,
            settings.flush_max_concurrency,
            settings.max_hot_per_group,
            c.max_uncommitted_per_group,
            settings.cache_size
        ),
        (1 << 20, 3, 0, 32 << 20, 0)
    );
    // No preset with a file: the keys' own defaults, which are standard's.
    let c = resolve_from(Some(&cold), &Overrides::default()).expect("valid");
    let settings = c.cold.as_ref().expect("a cold tier");
    assert_eq!(
        (
            settings.flush_min_hot >> 20,
            settings.flush_max_concurrency,
            settings.max_hot_per_group >> 20,
            c.max_uncommitted_per_group >> 20,
            settings.cache_size >> 20
        ),
        (8, 4, 64, 64, 256)
    );
}

#[test]
fn the_memory_abort_cap_is_acted_on_and_zero_is_refused() {
    let c = resolve_text("[runtime]\nnode_memory_abort_cap_size = \"8GiB\"\n").expect("valid");
    assert_eq!(c.node_memory_abort_cap, Some(8 << 30));
    assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
    assert_eq!(resolve_text("").expect("valid").node_memory_abort_cap, None);
    let err = resolve_text("[runtime]\nnode_memory_abort_cap_size = 0\n").expect_err("zero");
    assert!(err.contains("runtime.node_memory_abort_cap_size"), "{err}");
}

#[test]
fn peer_routes_open_to_other_hosts_without_a_secret_are_named_for_the_start_warning() {
    let peers = "[[raft.peers]]\nnode_id = 1\nurl = \"http://10.0.0.1:4437\"\n\
                 [[raft.peers]]\nnode_id = 2\nurl = \"http://10.0.0.2:4437\"\n";
    let cluster = |server: &str, raft: &str| {
        resolve_text(&format!(
            "[server]\n{server}\n[raft]\nnode_id = 1\n{raft}\n{peers}[raft.wal]\npath = \"./w\"\n"
        ))
        .expect("config")
    };
    let open = cluster("listen = \"0.0.0.0:4437\"", "");
    assert_eq!(
        open.unauthenticated_peer_listener()
            .map(|(k, a)| (k, a.to_string())),
        Some(("server.listen", "0.0.0.0:4437".into()))
    );
    let split = cluster(
        "listen = \"127.0.0.1:4437\"\ncluster_listen = \"0.0.0.0:4439\"",
        "",
    );
    assert_eq!(
        split.unauthenticated_peer_listener().map(|(k, _)| k),
        Some("server.cluster_listen")
    );
    let looped = cluster(
        "listen = \"0.0.0.0:4437\"\ncluster_listen = \"127.0.0.1:4439\"",
        "",
    );
    assert_eq!(looped.unauthenticated_peer_listener(), None);
    let dir = tempfile::tempdir().expect("dir");
    let secret = dir.path().join("s");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").expect("secret");
    let line = format!("peer_secret_file = \"{}\"", secret.display());
    let secured = cluster("listen = \"0.0.0.0:4437\"", &line);
    assert_eq!(secured.unauthenticated_peer_listener(), None);
    let single = resolve_text("[server]\nlisten = \"0.0.0.0:4437\"\n[raft]\n").expect("single");
    assert_eq!(single.unauthenticated_peer_listener(), None);
}

#[test]
fn a_peer_secret_file_that_is_short_or_missing_stops_the_start() {
    let dir = tempfile::tempdir().expect("dir");
    let short = dir.path().join("short");
    std::fs::write(&short, "tooshort\n").expect("secret");
    for path in [short, dir.path().join("missing")] {
        let text = format!(
            "[raft]\npeer_secret_file = \"{}\"\n[raft.wal]\npath = \"./w\"\n",
            path.display()
        );
        let e = resolve_text(&text).expect_err("refused");
        assert!(e.starts_with("raft.peer_secret_file:"), "{e}");
    }
}
