//! Histories with planted anomalies: the checker must find each, and nothing in a clean one.

use super::*;
use crate::history::Append;

fn append(token: &str, invoke_ns: u64, complete_ns: u64, outcome: Outcome) -> Append {
    Append {
        client: token.split('.').next().unwrap_or(token).to_owned(),
        token: token.to_owned(),
        invoke_ns,
        complete_ns,
        outcome,
        producer: None,
        attempts: 1,
    }
}

fn acked(token: &str, invoke_ns: u64, complete_ns: u64) -> Append {
    append(token, invoke_ns, complete_ns, Outcome::Acked)
}

/// An up-to-date read of `data` from `from` on `n1`, its next offset right after the data.
fn read(reader: &str, kind: ReadKind, ns: (u64, u64), from: u64, data: &str) -> Read {
    Read {
        reader: reader.to_owned(),
        kind,
        target: "n1".to_owned(),
        invoke_ns: ns.0,
        complete_ns: ns.1,
        from,
        data: data.to_owned(),
        next: from + data.len() as u64,
        up_to_date: true,
    }
}

/// Three sequential acknowledged appends `a.1; b.1; a.2;` (offsets 0, 4, 8; log 12 bytes).
fn three() -> History {
    let appends = vec![
        acked("a.1", 0, 10),
        acked("b.1", 20, 30),
        acked("a.2", 40, 50),
    ];
    History {
        appends,
        reads: vec![],
        refused: vec![],
        final_log: "a.1;b.1;a.2;".to_owned(),
    }
}

fn anomalies(h: &History) -> Vec<Anomaly> {
    check(h).anomalies
}

fn token(token: &str) -> String {
    token.to_owned()
}

fn order(first: &str, first_offset: u64, second: &str, second_offset: u64) -> Anomaly {
    Anomaly::RealTimeOrder {
        first: token(first),
        first_offset,
        second: token(second),
        second_offset,
    }
}

fn stale(reader: &str, token: &str) -> Anomaly {
    Anomaly::StaleLeaderRead {
        reader: reader.to_owned(),
        target: "n1".to_owned(),
        token: token.to_owned(),
    }
}

#[test]
fn a_clean_history_has_no_anomaly() {
    let mut h = three();
    // Concurrent appends may land in either order, and e.1, sent the instant c.1 completed,
    // is concurrent with it: only a strictly earlier completion orders two appends.
    h.appends.extend([
        acked("c.1", 60, 90),
        acked("d.1", 70, 80),
        acked("e.1", 90, 95),
    ]);
    h.final_log.push_str("d.1;e.1;c.1;");
    h.reads = vec![
        read("r1", ReadKind::Leader, (100, 110), 0, &h.final_log),
        read("r2", ReadKind::Catchup, (5, 6), 4, "b.1;"),
        read("r2", ReadKind::Catchup, (7, 8), 0, ""),
        read("t1", ReadKind::LongPoll, (0, 15), 0, "a.1;"),
        read("t1", ReadKind::LongPoll, (15, 95), 4, "b.1;a.2;d.1;"),
        read("t2", ReadKind::Sse, (0, 5), 8, ""),
        read("t2", ReadKind::Sse, (5, 55), 8, "a.2;"),
    ];
    assert_eq!(anomalies(&h), vec![]);
}

#[test]
fn unknown_appends_absent_from_the_log_with_contiguous_tails_are_clean() {
    let mut h = three();
    h.appends.push(append("u.1", 5, 15, Outcome::Unknown));
    h.appends.push(append("u.2", 45, 46, Outcome::Unknown));
    h.appends.push(append("x.1", 1, 2, Outcome::NotApplied));
    h.reads = vec![
        read("t1", ReadKind::Sse, (0, 12), 0, "a.1;"),
        read("t2", ReadKind::LongPoll, (0, 35), 4, "b.1;"),
        read("t1", ReadKind::Sse, (12, 60), 4, "b.1;a.2;"),
        read("t2", ReadKind::LongPoll, (35, 60), 8, "a.2;"),
        read("t2", ReadKind::LongPoll, (60, 90), 12, ""),
        read("c1", ReadKind::Catchup, (60, 61), 12, ""),
        read("c1", ReadKind::Catchup, (60, 61), 4, "b.1"),
        read("l1", ReadKind::Leader, (60, 61), 8, "a.2;"),
    ];
    let report = check(&h);
    assert_eq!(report.anomalies, vec![]);
    let want = Stats {
        acked: 3,
        not_applied: 1,
        unknown: 2,
        unknown_applied: 0,
        reads: 8,
        log_records: 3,
    };
    assert_eq!(report.stats, want);
}

#[test]
fn an_unknown_append_found_in_the_log_is_counted_as_applied() {
    let mut h = three();
    h.appends.push(append("u.1", 60, 70, Outcome::Unknown));
    h.final_log.push_str("u.1;");
    let report = check(&h);
    assert_eq!(report.anomalies, vec![]);
    assert_eq!(
        (report.stats.unknown_applied, report.stats.log_records),
        (1, 4)
    );
}

#[test]
fn an_acknowledged_append_missing_from_the_log_is_lost() {
    let mut h = three();
    h.final_log = "a.1;a.2;".to_owned();
    let found = anomalies(&h);
    assert_eq!(
        found,
        vec![Anomaly::Lost {
            token: token("b.1")
        }]
    );
    assert!(found[0].to_string().contains("b.1"));
}

#[test]
fn a_token_applied_twice_is_duplicated_once() {
    let mut h = three();
    h.appends.push(append("p.1", 60, 70, Outcome::Unknown));
    h.final_log.push_str("p.1;b.1;p.1;");
    let dup = |t| Anomaly::Duplicated {
        token: token(t),
        count: 2,
    };
    assert_eq!(anomalies(&h), vec![dup("b.1"), dup("p.1")]);
}

#[test]
fn a_refused_append_found_in_the_log_is_an_applied_refusal() {
    let mut h = three();
    h.appends.push(append("x.1", 60, 70, Outcome::NotApplied));
    h.final_log.push_str("x.1;");
    assert_eq!(
        anomalies(&h),
        vec![Anomaly::AppliedRefusal {
            token: token("x.1")
        }]
    );
}

#[test]
fn a_record_no_append_sent_is_a_phantom() {
    let mut h = three();
    h.final_log = "a.1;zz.9;b.1;a.2;".to_owned();
    let found = anomalies(&h);
    let want = Anomaly::Phantom {
        token: token("zz.9"),
        offset: 4,
        torn: false,
    };
    assert_eq!(found, vec![want]);
    assert!(found[0].to_string().contains("offset 4"));
}

#[test]
fn a_torn_record_is_a_phantom_even_when_it_spells_a_sent_token() {
    let mut h = three();
    h.appends.push(append("u.1", 60, 70, Outcome::Unknown));
    h.final_log.push_str("u.1");
    let report = check(&h);
    let want = Anomaly::Phantom {
        token: token("u.1"),
        offset: 12,
        torn: true,
    };
    assert_eq!(report.anomalies, vec![want]);
    assert_eq!(report.stats.unknown_applied, 0);
}

#[test]
fn an_append_logged_before_one_that_completed_before_it_was_sent_breaks_real_time_order() {
    let mut h = three();
    // a.2 was sent at 40, after b.1 completed at 30, yet it is logged before b.1.
    h.final_log = "a.1;a.2;b.1;".to_owned();
    let found = anomalies(&h);
    assert_eq!(found, vec![order("b.1", 8, "a.2", 4)]);
    assert!(found[0].to_string().contains("b.1 completed before a.2"));
}

#[test]
fn each_record_logged_too_early_is_paired_with_the_earliest_completed_append_after_it() {
    let mut h = three();
    h.final_log = "b.1;a.2;a.1;".to_owned();
    let want = vec![order("a.1", 8, "b.1", 0), order("a.1", 8, "a.2", 4)];
    assert_eq!(anomalies(&h), want);
}

#[test]
fn an_unknown_append_may_take_effect_after_its_client_gave_up() {
    let mut h = three();
    h.appends.push(append("u.1", 1, 2, Outcome::Unknown));
    h.final_log.push_str("u.1;");
    assert_eq!(anomalies(&h), vec![]);
}

#[test]
fn an_unknown_append_sent_after_an_acknowledged_one_completed_cannot_precede_it() {
    let mut h = three();
    h.appends.push(append("u.1", 60, 70, Outcome::Unknown));
    h.final_log = "u.1;a.1;b.1;a.2;".to_owned();
    assert_eq!(anomalies(&h), vec![order("a.1", 4, "u.1", 0)]);
}

#[test]
fn a_read_that_differs_from_the_final_log_is_not_a_prefix() {
    let mut h = three();
    h.reads = vec![read("c1", ReadKind::Catchup, (60, 61), 4, "b.1;a.3;")];
    let found = anomalies(&h);
    let want = Anomaly::NotAPrefix {
        reader: token("c1"),
        kind: ReadKind::Catchup,
        target: token("n1"),
        from: 4,
        detail: token("differs from the final log at offset 10"),
    };
    assert_eq!(found, vec![want]);
    assert!(found[0].to_string().contains("c1's Catchup read from 4"));
}

#[test]
fn a_read_past_the_end_of_the_final_log_is_not_a_prefix() {
    let mut h = three();
    h.reads = vec![
        read("c1", ReadKind::Catchup, (60, 61), 8, "a.2;b.2;"),
        read("c1", ReadKind::Catchup, (60, 61), 13, ""),
    ];
    let found = anomalies(&h);
    assert_eq!(found.len(), 2);
    for a in &found {
        assert!(matches!(a, Anomaly::NotAPrefix { detail, .. } if detail.contains("past")));
    }
}

#[test]
fn a_read_whose_next_offset_does_not_follow_its_data_is_not_a_prefix() {
    let mut h = three();
    let mut r = read("c1", ReadKind::Catchup, (60, 61), 4, "b.1;");
    r.next = 12;
    h.reads = vec![r];
    assert!(matches!(
        anomalies(&h).as_slice(),
        [Anomaly::NotAPrefix { detail, .. }] if detail.contains("next offset is 12, not 4 + 4")
    ));
}

#[test]
fn odd_reads_are_reported_without_panicking() {
    let mut h = three();
    h.final_log = "a.1;b.1;a.2;é;".to_owned();
    let mut huge = read("c1", ReadKind::Catchup, (60, 61), 0, "x");
    (huge.from, huge.next) = (u64::MAX, 0);
    h.reads = vec![
        huge,
        // Starts inside the two-byte `é` and carries non-record text.
        read("c2", ReadKind::Catchup, (60, 61), 13, "ü"),
        read("c3", ReadKind::Leader, (60, 61), 0, "no records at all"),
    ];
    let found = anomalies(&h);
    // The phantom `é`, three reads that are not prefixes, and c3 lacks every acked token.
    assert_eq!(found.len(), 5, "{found:#?}");
    assert!(found.contains(&stale("c3", "a.1")));
}

#[test]
fn a_tail_read_that_skips_or_repeats_bytes_leaves_a_gap() {
    let mut h = three();
    h.reads = vec![
        read("t1", ReadKind::LongPoll, (0, 15), 0, "a.1;"),
        // Another reader's reads between them do not count.
        read("t2", ReadKind::Sse, (0, 15), 0, "a.1;b.1;"),
        read("t1", ReadKind::LongPoll, (15, 55), 8, "a.2;"),
        read("t2", ReadKind::Sse, (15, 55), 4, "b.1;a.2;"),
    ];
    let found = anomalies(&h);
    let gap = |reader, expected_from, got_from| Anomaly::TailGap {
        reader: token(reader),
        expected_from,
        got_from,
    };
    assert_eq!(found, vec![gap("t1", 4, 8), gap("t2", 8, 4)]);
    assert!(found[0].to_string().contains("started at 8, not at 4"));
}

#[test]
fn catch_up_and_leader_reads_are_not_chained_like_a_tail() {
    let mut h = three();
    h.reads = vec![
        read("c1", ReadKind::Catchup, (0, 15), 0, "a.1;"),
        read("c1", ReadKind::Catchup, (15, 55), 8, "a.2;"),
        read("c1", ReadKind::Leader, (55, 56), 4, "b.1;a.2;"),
        read("c1", ReadKind::Leader, (55, 56), 0, "a.1;b.1;a.2;"),
    ];
    assert_eq!(anomalies(&h), vec![]);
}

#[test]
fn an_up_to_date_leader_read_lacking_an_earlier_acknowledged_append_is_stale() {
    let mut h = three();
    h.reads = vec![read("l1", ReadKind::Leader, (35, 36), 0, "a.1;")];
    let found = anomalies(&h);
    assert_eq!(found, vec![stale("l1", "b.1")]);
    assert!(found[0].to_string().contains("lacks b.1"));
}

#[test]
fn a_leader_read_need_not_hold_appends_unfinished_when_it_was_sent() {
    let mut h = three();
    // b.1 completed at 30, after this read was sent at 25.
    let mut concurrent = read("l1", ReadKind::Leader, (25, 36), 0, "a.1;");
    h.reads.push(concurrent.clone());
    // A read not marked up to date may lag.
    (concurrent.invoke_ns, concurrent.up_to_date) = (60, false);
    h.reads.push(concurrent);
    // A follower's catch-up read may lag even when it says it is up to date.
    h.reads
        .push(read("c1", ReadKind::Catchup, (60, 61), 0, "a.1;"));
    assert_eq!(anomalies(&h), vec![]);
}

#[test]
fn a_leader_read_that_is_not_a_prefix_is_checked_record_by_record() {
    let mut h = three();
    // Right length and records, wrong order: a.2 is there even if not at its offset.
    h.reads = vec![read("l1", ReadKind::Leader, (60, 61), 0, "a.1;a.2;b.1;")];
    let found = anomalies(&h);
    assert!(
        matches!(found.as_slice(), [Anomaly::NotAPrefix { .. }]),
        "{found:#?}"
    );
    // A torn `b.` is not the record b.1.
    h.reads = vec![read("l1", ReadKind::Leader, (60, 61), 0, "a.1;a.2;b.")];
    let found = anomalies(&h);
    assert!(
        matches!(found.as_slice(), [Anomaly::NotAPrefix { .. }, s] if *s == stale("l1", "b.1"))
    );
}

#[test]
fn an_up_to_date_leader_read_ending_before_an_acknowledged_append_is_behind() {
    let mut h = three();
    // One byte short of a.2's separator is not enough.
    h.reads = vec![read("l1", ReadKind::Leader, (60, 61), 4, "b.1;a.2")];
    let found = anomalies(&h);
    let want = Anomaly::UpToDateBehind {
        reader: token("l1"),
        target: token("n1"),
        next: 11,
        token: token("a.2"),
        needed: 12,
    };
    assert_eq!(found, vec![want]);
    assert!(found[0].to_string().contains("ended at 11, short of 12"));
}

#[test]
fn a_report_serializes_to_json() {
    let mut h = three();
    h.final_log = "a.1;a.2;".to_owned();
    let json = serde_json::to_string(&check(&h)).expect("a report is plain data");
    assert!(json.contains(r#"{"Lost":{"token":"b.1"}}"#), "{json}");
    assert!(json.contains(r#""acked":3"#), "{json}");
}

#[test]
fn token_positions_list_every_whole_record_by_token() {
    let positions = token_positions("a.1;b.1;a.1;b");
    assert_eq!(positions.get("a.1"), Some(&vec![0, 8]));
    assert_eq!(positions.get("b.1"), Some(&vec![4]));
    assert_eq!(positions.get("b"), None);
}

#[test]
fn a_416_for_an_offset_inside_the_final_log_refused_existing_bytes() {
    let mut h = History {
        appends: vec![acked("a.1", 0, 10), acked("a.2", 20, 30)],
        final_log: "a.1;a.2;".into(),
        ..History::default()
    };
    h.refused.push(crate::history::Refused {
        reader: "r2".into(),
        target: "http://n2".into(),
        invoke_ns: 40,
        from: 4,
    });
    h.refused.push(crate::history::Refused {
        reader: "r2".into(),
        target: "http://n2".into(),
        invoke_ns: 50,
        from: 9,
    });
    let report = check(&h);
    assert_eq!(
        report.anomalies,
        vec![Anomaly::RefusedExisting {
            reader: "r2".into(),
            target: "http://n2".into(),
            from: 4,
        }]
    );
}
