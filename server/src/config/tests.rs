//! The config's rules, one test per rule.

use super::*;

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
        ("mod.rs", include_str!("mod.rs")),
        ("file.rs", include_str!("file.rs")),
        ("units.rs", include_str!("units.rs")),
        ("cold.rs", include_str!("cold.rs")),
        ("raft.rs", include_str!("raft.rs")),
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
fn the_cold_gc_grace_is_five_minutes_unless_set_and_never_zero() {
    let cold = "[storage.cold]\nbackend = \"memory\"\n";
    let c = resolve_text(cold).expect("valid");
    let grace = c.cold.expect("a cold tier").gc_grace;
    assert_eq!(grace, std::time::Duration::from_secs(300));
    let c = resolve_text(&format!("{cold}gc_grace = \"300ms\"\n")).expect("valid");
    let grace = c.cold.expect("a cold tier").gc_grace;
    assert_eq!(grace, std::time::Duration::from_millis(300));
    let err = resolve_text(&format!("{cold}gc_grace = \"0s\"\n")).expect_err("zero grace");
    assert_eq!(err, "storage.cold.gc_grace: must be non-zero");
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
