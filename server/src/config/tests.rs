//! The config's rules, one test per rule.

use super::*;

/// Resolves `text` as the config file, with no flags.
fn resolve_text(text: &str) -> Result<Config, String> {
    let file = parse_file(text)?;
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
