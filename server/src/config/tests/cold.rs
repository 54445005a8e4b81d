//! `[storage.cold]`, `[storage.snapshot]` and the external-payload threshold.

use super::*;

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
fn compaction_is_on_unless_turned_off_and_pages_span_64_mib_unless_the_test_hook_says() {
    let cold = "[storage.cold]\nbackend = \"memory\"\n";
    let c = resolve_text(cold).expect("valid");
    let s = c.cold.expect("a cold tier");
    assert!(s.compaction);
    assert_eq!(s.index_page_bytes, 64 << 20);
    let text =
        format!("{cold}compaction_enabled = false\n[testing]\ncold_index_page_bytes = 4096\n");
    let c = resolve_text(&text).expect("valid");
    assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
    let s = c.cold.expect("a cold tier");
    assert!(!s.compaction);
    assert_eq!(s.index_page_bytes, 4096);
}

#[test]
fn the_orphan_sweep_waits_a_day_every_hour_unless_set_and_refuses_what_races_commits() {
    use std::time::Duration;
    let cold = "[storage.cold]\nbackend = \"memory\"\n";
    let set = format!(
        "{cold}orphan_min_age = \"1s\"\norphan_sweep_interval = \"200ms\"\n\
         [testing]\ncold_abort_after_upload = true\n"
    );
    let cases = [
        (
            cold.to_owned(),
            Duration::from_secs(86_400),
            Duration::from_secs(3600),
            false,
        ),
        (
            set,
            Duration::from_secs(1),
            Duration::from_millis(200),
            true,
        ),
    ];
    for (text, min_age, interval, abort) in cases {
        let c = resolve_text(&text)
            .expect("valid")
            .cold
            .expect("a cold tier");
        assert_eq!(
            (
                c.orphan_min_age,
                c.orphan_sweep_interval,
                c.abort_after_upload
            ),
            (min_age, interval, abort),
            "{text}"
        );
    }
    let refusals = [
        (
            "orphan_min_age = \"999ms\"",
            "storage.cold.orphan_min_age: must be at least 1s",
        ),
        (
            "orphan_sweep_interval = \"0s\"",
            "storage.cold.orphan_sweep_interval: must be non-zero",
        ),
    ];
    for (line, want) in refusals {
        let err = resolve_text(&format!("{cold}{line}\n")).expect_err(line);
        assert_eq!(err, want);
    }
}

#[test]
fn the_store_gate_takes_the_s3_health_keys_and_a_flush_window_from_the_client_settings() {
    let c = resolve_text(EVERY_SPEC_KEY).expect("a spec config loads");
    let gate = c
        .cold
        .and_then(|c| c.gate)
        .expect("an S3 cold tier has a store gate");
    assert_eq!(gate.probe_timeout, Duration::from_secs(5));
    assert_eq!((gate.unhealthy_ticks, gate.heal_ticks), (3, 2));
    // Five attempts of 10 s, backoff before each retry of at most 0.2 + 0.4 + 0.8 + 1.6 s,
    // and the flush worker's 1 s pause.
    assert_eq!(gate.write_window, Duration::from_secs(54));
    let s3 = "[storage.cold]\nbackend = \"s3\"\nflush_interval = \"2s\"\n\
              [storage.cold.s3]\nbucket = \"b\"\ntimeout = \"1s\"\nmax_retries = 0\n\
              probe_timeout = \"700ms\"\nunhealthy_ticks = 1\nheal_ticks = 4\n";
    let gate = resolve_text(s3)
        .expect("valid")
        .cold
        .and_then(|c| c.gate)
        .expect("gate");
    assert_eq!(gate.probe_timeout, Duration::from_millis(700));
    assert_eq!((gate.unhealthy_ticks, gate.heal_ticks), (1, 4));
    assert_eq!(gate.write_window, Duration::from_secs(3));
    let memory = "[storage.cold]\nbackend = \"memory\"\n";
    assert_eq!(
        resolve_text(memory)
            .expect("valid")
            .cold
            .expect("cold")
            .gate,
        None
    );
}

#[test]
fn snapshots_go_to_s3_by_default_with_an_s3_cold_tier_under_its_root_or_a_prefix_of_their_own() {
    let s3 = "[storage.cold]\nbackend = \"s3\"\nroot = \"/prod/cold/\"\n[storage.cold.s3]\nbucket = \"b\"\n";
    let c = resolve_text(s3).expect("valid");
    let store = c
        .snapshot_store
        .expect("auto means S3 with an S3 cold tier");
    assert_eq!(store.namespace, "prod/cold/snapshots");
    assert!(store.inside_cold_root);
    assert_eq!(store.grace, Duration::from_secs(3600));
    assert_eq!(store.prune_interval, Duration::from_secs(600));
    assert_eq!(
        c.cold.and_then(|c| c.snapshot_prefix).as_deref(),
        Some("snapshots/"),
        "the orphan sweep knows the namespace's keys"
    );
    let own = format!(
        "{s3}[storage.snapshot]\ns3_prefix = \"/raft-snaps/\"\n[testing]\nsnapshot_prune_grace = \"2s\"\n"
    );
    let c = resolve_text(&own).expect("valid");
    let store = c.snapshot_store.expect("S3");
    assert_eq!(store.namespace, "raft-snaps");
    assert!(
        !store.inside_cold_root,
        "a namespace outside the root has a marker of its own"
    );
    assert_eq!(store.grace, Duration::from_secs(2));
    assert_eq!(c.cold.and_then(|c| c.snapshot_prefix), None);
    // Inline, or a cold tier elsewhere, or the in-memory node: no S3 snapshots.
    let inline = format!("{s3}[storage.snapshot]\nbackend = \"inline\"\n");
    assert_eq!(resolve_text(&inline).expect("valid").snapshot_store, None);
    let fs = "[storage.cold]\nbackend = \"fs\"\n";
    assert_eq!(resolve_text(fs).expect("valid").snapshot_store, None);
    let file = parse_file(s3).expect("parses");
    let memory = Overrides {
        preset: Some("default".into()),
        ..Overrides::default()
    };
    assert_eq!(
        resolve_from(Some(&file), &memory)
            .expect("valid")
            .snapshot_store,
        None
    );
    // What cannot work is refused by name.
    for (text, key) in [
        (
            format!("{fs}[storage.snapshot]\nbackend = \"s3\"\n"),
            "storage.cold.s3.bucket",
        ),
        (
            format!("{s3}[storage.snapshot]\ns3_prefix = \"/\"\n"),
            "storage.snapshot.s3_prefix",
        ),
        (
            format!("{s3}[storage.snapshot]\ns3_prefix = \"prod/cold\"\n"),
            "storage.snapshot.s3_prefix",
        ),
        (
            format!("{s3}[testing]\nsnapshot_prune_grace = \"0s\"\n"),
            "testing.snapshot_prune_grace",
        ),
    ] {
        let err = resolve_text(&text).expect_err(&text);
        assert!(err.contains(key), "{err}");
    }
}

#[test]
fn s3_snapshots_without_an_s3_cold_tier_get_a_client_and_gate_of_their_own() {
    let s3 = "[storage.cold.s3]\nbucket = \"b\"\nendpoint = \"http://127.0.0.1:1\"\n\
              probe_timeout = \"2s\"\nunhealthy_ticks = 4\n";
    for cold in [
        "",
        "[storage.cold]\nbackend = \"memory\"\n",
        "[storage.cold]\nbackend = \"fs\"\n",
    ] {
        let text = format!("{cold}{s3}[storage.snapshot]\nbackend = \"s3\"\n");
        let c = resolve_text(&text).expect("valid");
        let store = c.snapshot_store.expect("S3 snapshots");
        assert_eq!(store.namespace, "snapshots", "the spec's default namespace");
        assert!(!store.inside_cold_root, "a marker of its own");
        let client = store.client.expect("a client of its own");
        assert_eq!(client.root, "");
        assert!(
            matches!(&client.backend, ursula_cold::BackendConfig::S3(s) if s.bucket == "b"),
            "{cold}"
        );
        let gate = store.gate.expect("the health gate watches it");
        assert_eq!(gate.probe_timeout, Duration::from_secs(2));
        assert_eq!(gate.unhealthy_ticks, 4);
        // The gate's keys are acted on now; nothing of the snapshot section is ignored.
        assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
    }
    let prefixed =
        format!("{s3}[storage.snapshot]\nbackend = \"s3\"\ns3_prefix = \"/c1/snaps/\"\n");
    let store = resolve_text(&prefixed)
        .expect("valid")
        .snapshot_store
        .expect("S3");
    assert_eq!(store.namespace, "c1/snaps");
    // `auto` without an S3 cold tier stays inline, and the gate's keys then do nothing.
    let auto = resolve_text(s3).expect("valid");
    assert_eq!(auto.snapshot_store, None);
    assert_eq!(
        auto.ignored_keys,
        [
            "storage.cold.s3.probe_timeout",
            "storage.cold.s3.unhealthy_ticks"
        ]
    );
    // A bad S3 section is refused by its own key, as with an S3 cold tier.
    let bad = "[storage.cold.s3]\nbucket = \"b\"\nserver_side_encryption = \"rot13\"\n\
               [storage.snapshot]\nbackend = \"s3\"\n";
    let err = resolve_text(bad).expect_err("refused");
    assert!(
        err.contains("storage.cold.s3.server_side_encryption"),
        "{err}"
    );
}

#[test]
fn the_external_payload_threshold_is_read_with_a_cold_tier_and_zero_is_refused() {
    let cold = "[storage.cold]\nbackend = \"s3\"\n[storage.cold.s3]\nbucket = \"b\"\n";
    let c = resolve_text(cold).expect("valid");
    assert_eq!(c.cold.expect("cold").external_min, 1 << 20);
    let lowered = format!("[runtime]\nexternal_payload_min_size = \"64KiB\"\n{cold}");
    let c = resolve_text(&lowered).expect("valid");
    assert_eq!(c.cold.expect("cold").external_min, 64 << 10);
    assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
    let zero = format!("[runtime]\nexternal_payload_min_size = 0\n{cold}");
    let err = resolve_text(&zero).expect_err("zero is refused");
    assert!(err.contains("runtime.external_payload_min_size"), "{err}");
}
