//! The state machine driven directly with fake clocks: TTL renewal arithmetic (TTL-3, AP-16),
//! expiry and recreation, incarnations, and producer rules that need days or hours to pass.

use bytes::Bytes;
use ursula_protocol::offset::ReadFrom;

use super::command::*;
use super::machine::GroupState;
use super::producer::EVICTABLE_IDLE_MS;
use super::producer::FORGET_AFTER_MS;
use super::producer::MAX_PRODUCERS;

const KEY: &str = "demo/s";
const SEC: u64 = 1000;

fn create(lifetime: Option<Lifetime>) -> Command {
    create_key(KEY, lifetime)
}

fn create_key(key: &str, lifetime: Option<Lifetime>) -> Command {
    Command::Create(Create {
        lifetime,
        ..Create::octet_stream(key)
    })
}

fn append(body: &'static [u8]) -> Append {
    Append::octet_stream(KEY, Bytes::from_static(body))
}

fn with_producer(mut a: Append, id: &str, epoch: u64, seq: u64) -> Append {
    a.producer = Some(ProducerTuple {
        id: id.into(),
        epoch,
        seq,
    });
    a
}

fn close_only() -> Append {
    Append {
        close: true,
        content_type: None,
        ..append(b"")
    }
}

/// A group holding `demo/s` with a sliding TTL of `ttl_secs`, created at `t = 0`.
fn ttl_stream(ttl_secs: u64) -> GroupState {
    let mut g = GroupState::default();
    g.apply(create(Some(Lifetime::Ttl(ttl_secs))), 0)
        .expect("create");
    g
}

fn expires(g: &GroupState, now: u64) -> Option<u64> {
    g.expires_ms(KEY, now)
}

fn incarnation_of(applied: Applied) -> u64 {
    match applied {
        Applied::Created { meta, .. } => meta.incarnation,
        other => panic!("expected Created, got {other:?}"),
    }
}

#[test]
fn every_accepted_append_and_close_renews_the_ttl() {
    let mut g = ttl_stream(10);
    assert_eq!(expires(&g, 0), Some(10 * SEC));
    g.apply(Command::Append(append(b"a")), 4 * SEC)
        .expect("append");
    assert_eq!(expires(&g, 4 * SEC), Some(14 * SEC));
    g.apply(Command::Append(close_only()), 9 * SEC)
        .expect("close");
    assert_eq!(expires(&g, 9 * SEC), Some(19 * SEC));
    assert!(g.get(KEY, 19 * SEC - 1).is_some());
    assert!(
        g.get(KEY, 19 * SEC).is_none(),
        "the stream expires exactly at its deadline"
    );
}

#[test]
fn a_deduplicated_retry_does_not_renew_the_ttl() {
    let mut g = ttl_stream(10);
    g.apply(Command::Append(with_producer(append(b"a"), "p", 0, 0)), SEC)
        .expect("append");
    assert_eq!(expires(&g, SEC), Some(11 * SEC));
    let dup = g
        .apply(
            Command::Append(with_producer(append(b"a"), "p", 0, 0)),
            8 * SEC,
        )
        .expect("duplicate");
    assert!(matches!(
        dup,
        Applied::Appended {
            duplicate: true,
            ..
        }
    ));
    assert_eq!(expires(&g, 8 * SEC), Some(11 * SEC));
}

#[test]
fn a_repeated_close_does_not_renew_the_ttl() {
    let mut g = ttl_stream(10);
    g.apply(Command::Append(close_only()), SEC).expect("close");
    assert_eq!(expires(&g, SEC), Some(11 * SEC));
    g.apply(Command::Append(close_only()), 8 * SEC)
        .expect("close again");
    assert_eq!(expires(&g, 8 * SEC), Some(11 * SEC));
    // The closing producer's retry is a duplicate too.
    let mut g = ttl_stream(10);
    let closing = || {
        Command::Append(Append {
            close: true,
            ..with_producer(append(b"z"), "p", 0, 0)
        })
    };
    g.apply(closing(), SEC).expect("append and close");
    g.apply(closing(), 8 * SEC).expect("retry");
    assert_eq!(expires(&g, 8 * SEC), Some(11 * SEC));
}

#[test]
fn a_refused_append_does_not_renew_the_ttl() {
    let mut g = ttl_stream(10);
    let mut wrong_type = append(b"x");
    wrong_type.content_type = Some("text/plain".into());
    assert!(matches!(
        g.apply(Command::Append(wrong_type), 5 * SEC),
        Err(Refusal::ContentTypeMismatch { .. })
    ));
    let gap = with_producer(append(b"x"), "p", 0, 3);
    assert!(matches!(
        g.apply(Command::Append(gap), 6 * SEC),
        Err(Refusal::SeqGap { .. })
    ));
    assert_eq!(expires(&g, 6 * SEC), Some(10 * SEC));
}

#[test]
fn reads_ask_for_renewal_at_most_once_per_quarter_of_the_ttl() {
    let mut g = ttl_stream(100);
    let due = |g: &GroupState, now: u64| {
        g.read(KEY, ReadFrom::Start, 1, None, now)
            .expect("read")
            .renew_due
    };
    assert!(!due(&g, 0));
    assert!(!due(&g, 25 * SEC - 1));
    assert!(due(&g, 25 * SEC));
    g.apply(Command::Renew { key: KEY.into() }, 25 * SEC)
        .expect("renew");
    assert_eq!(expires(&g, 25 * SEC), Some(125 * SEC));
    assert!(
        !due(&g, 50 * SEC - 1),
        "the quarter restarts at the renewal"
    );
    assert!(due(&g, 50 * SEC));
    // An append renews too, and restarts the quarter.
    g.apply(Command::Append(append(b"a")), 40 * SEC)
        .expect("append");
    assert!(!due(&g, 64 * SEC));
    // Snapshot reads and bootstrap follow the same rule.
    g.apply(
        Command::PublishSnapshot(PublishSnapshot {
            key: KEY.into(),
            offset: 1,
            content_type: "application/octet-stream".into(),
            body: Bytes::from_static(b"s"),
            incarnation: None,
            cold: None,
            boundary: None,
        }),
        40 * SEC,
    )
    .expect("publish");
    assert!(
        !g.read_snapshot(KEY, 1, None, 64 * SEC)
            .expect("snapshot")
            .renew_due
    );
    assert!(
        g.read_snapshot(KEY, 1, None, 65 * SEC)
            .expect("snapshot")
            .renew_due
    );
    assert!(
        !g.bootstrap(KEY, 10, None, 64 * SEC)
            .expect("bootstrap")
            .renew_due
    );
    assert!(
        g.bootstrap(KEY, 10, None, 65 * SEC)
            .expect("bootstrap")
            .renew_due
    );
}

#[test]
fn head_never_changes_the_expiry() {
    let g = ttl_stream(10);
    for now in [3 * SEC, 6 * SEC, 9 * SEC] {
        g.head(KEY, None, now).expect("head");
    }
    assert_eq!(expires(&g, 9 * SEC), Some(10 * SEC));
    assert!(
        g.head(KEY, None, 10 * SEC).is_err(),
        "HEAD of an expired stream is a 404"
    );
}

#[test]
fn renewal_never_moves_expiry_earlier() {
    let mut g = ttl_stream(10);
    g.apply(Command::Append(append(b"a")), 9 * SEC)
        .expect("append");
    assert_eq!(expires(&g, 0), Some(19 * SEC));
    // Renewals stamped by a slower clock keep the later expiry.
    g.apply(Command::Renew { key: KEY.into() }, 5 * SEC)
        .expect("renew");
    assert_eq!(expires(&g, 0), Some(19 * SEC));
    g.apply(Command::Append(append(b"b")), 6 * SEC)
        .expect("append");
    assert_eq!(expires(&g, 0), Some(19 * SEC));
}

#[test]
fn an_absolute_expiry_is_never_renewed() {
    let mut g = GroupState::default();
    g.apply(create(Some(Lifetime::ExpiresAt(10 * SEC))), 0)
        .expect("create");
    g.apply(Command::Append(append(b"a")), 9 * SEC)
        .expect("append");
    g.apply(Command::Renew { key: KEY.into() }, 9 * SEC)
        .expect("renew");
    assert!(
        !g.read(KEY, ReadFrom::Start, 1, None, 9 * SEC)
            .expect("read")
            .renew_due
    );
    assert_eq!(expires(&g, 9 * SEC), Some(10 * SEC));
    assert!(g.get(KEY, 10 * SEC).is_none());
}

#[test]
fn an_expired_stream_refuses_everything_with_404_and_a_create_makes_a_new_incarnation() {
    let mut g = GroupState::default();
    let first = incarnation_of(g.apply(create(Some(Lifetime::Ttl(10))), 0).expect("create"));
    let at = 10 * SEC;
    assert_eq!(
        g.apply(Command::Append(append(b"a")), at),
        Err(Refusal::NotFound)
    );
    assert_eq!(
        g.read(KEY, ReadFrom::Start, 1, None, at).map(|_| ()),
        Err(Refusal::NotFound)
    );
    assert_eq!(
        g.apply(
            Command::Delete {
                key: KEY.into(),
                incarnation: None
            },
            at
        ),
        Err(Refusal::NotFound)
    );
    assert_eq!(
        g.apply(
            Command::Retain {
                key: KEY.into(),
                offset: 0,
                incarnation: None,
                boundary: None,
            },
            at
        ),
        Err(Refusal::NotFound)
    );
    match g
        .apply(create(Some(Lifetime::Ttl(10))), at)
        .expect("recreate")
    {
        Applied::Created { meta, fresh } => {
            assert!(fresh, "an expired stream is replaced, not matched");
            assert!(meta.incarnation > first);
            assert_eq!(meta.tail, 0);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_sweep_drops_only_expired_streams() {
    let mut g = GroupState::default();
    g.apply(create(Some(Lifetime::Ttl(10))), 0).expect("create");
    g.apply(create_key("demo/t", None), 0).expect("create");
    assert!(!g.any_expired(9 * SEC), "nothing to sweep yet");
    assert_eq!(
        g.apply(Command::Sweep, 9 * SEC),
        Ok(Applied::Swept { removed: 0 })
    );
    assert!(g.any_expired(10 * SEC));
    assert_eq!(
        g.apply(Command::Sweep, 10 * SEC),
        Ok(Applied::Swept { removed: 1 })
    );
    assert_eq!(g.len(), 1);
    assert!(!g.any_expired(u64::MAX), "the stream left has no expiry");
    assert!(g.get("demo/t", 10 * SEC).is_some());
}

#[test]
fn incarnations_strictly_increase_even_when_the_clock_stands_still_or_goes_back() {
    let mut g = GroupState::default();
    let mut last = 0;
    for now in [5000, 5000, 5000, 4000, 1, 6000] {
        let inc = incarnation_of(g.apply(create(None), now).expect("create"));
        assert!(inc > last, "incarnation {inc} after {last} at t={now}");
        last = inc;
        g.apply(
            Command::Delete {
                key: KEY.into(),
                incarnation: Some(inc),
            },
            now,
        )
        .expect("delete");
    }
}

#[test]
fn a_producer_idle_for_seven_days_is_forgotten_and_must_restart_at_seq_zero() {
    let mut g = ttl_stream(30 * 24 * 3600);
    g.apply(Command::Append(with_producer(append(b"a"), "p", 2, 0)), 0)
        .expect("append");
    g.apply(Command::Append(with_producer(append(b"b"), "p", 2, 1)), SEC)
        .expect("append");
    let later = SEC + FORGET_AFTER_MS;
    assert_eq!(
        g.apply(
            Command::Append(with_producer(append(b"c"), "p", 2, 2)),
            later
        ),
        Err(Refusal::SeqGap {
            expected: 0,
            received: 2
        })
    );
    // Forgotten means no epoch fence either: an older epoch at seq 0 starts over.
    assert!(
        g.apply(
            Command::Append(with_producer(append(b"c"), "p", 1, 0)),
            later
        )
        .is_ok()
    );
    // Just under seven days it is still known.
    let mut g = ttl_stream(30 * 24 * 3600);
    g.apply(Command::Append(with_producer(append(b"a"), "p", 2, 0)), 0)
        .expect("append");
    let r = g
        .apply(
            Command::Append(with_producer(append(b"b"), "p", 2, 1)),
            FORGET_AFTER_MS - 1,
        )
        .expect("append");
    assert!(matches!(
        r,
        Applied::Appended {
            duplicate: false,
            producer_ack: Some((2, 1)),
            ..
        }
    ));
}

#[test]
fn the_producer_cap_evicts_the_least_recently_seen_producer_idle_an_hour() {
    let mut g = GroupState::default();
    g.apply(create(None), 0).expect("create");
    for i in 0..MAX_PRODUCERS as u64 {
        g.apply(
            Command::Append(with_producer(append(b"x"), &format!("p{i}"), 0, 0)),
            i,
        )
        .expect("append");
    }
    let tail = g.get(KEY, 0).expect("stream").tail();
    // p0 is seen again, so p1 becomes the least recently seen.
    g.apply(
        Command::Append(with_producer(append(b"x"), "p0", 0, 1)),
        EVICTABLE_IDLE_MS / 2,
    )
    .expect("append");
    let new = || Command::Append(with_producer(append(b"y"), "new", 0, 0));
    assert_eq!(
        g.apply(new(), EVICTABLE_IDLE_MS),
        Err(Refusal::ProducerLimit)
    );
    assert_eq!(
        g.get(KEY, 0).expect("stream").tail(),
        tail + 1,
        "the refused append stored nothing"
    );
    g.apply(new(), EVICTABLE_IDLE_MS + 1)
        .expect("p1 has been idle an hour");
    // p1 was evicted: it is unknown now and must start again at seq 0.
    assert_eq!(
        g.apply(
            Command::Append(with_producer(append(b"z"), "p1", 0, 1)),
            EVICTABLE_IDLE_MS + 2
        ),
        Err(Refusal::SeqGap {
            expected: 0,
            received: 1
        })
    );
    assert!(matches!(
        g.apply(
            Command::Append(with_producer(append(b"z"), "p0", 0, 1)),
            EVICTABLE_IDLE_MS + 2
        ),
        Ok(Applied::Appended {
            duplicate: true,
            ..
        })
    ));
}

#[test]
fn stream_seq_is_compared_bytewise_against_the_last_accepted_value() {
    let mut g = GroupState::default();
    g.apply(create(None), 0).expect("create");
    let with_seq = |v: &[u8]| {
        Command::Append(Append {
            stream_seq: Some(v.to_vec()),
            ..append(b"x")
        })
    };
    g.apply(with_seq(b"9"), 0).expect("first");
    assert_eq!(
        g.apply(with_seq(b"10"), 0),
        Err(Refusal::StreamSeqConflict { tail: 1 })
    );
    assert_eq!(
        g.apply(with_seq(b"9"), 0),
        Err(Refusal::StreamSeqConflict { tail: 1 })
    );
    g.apply(with_seq(b"9\x00"), 0)
        .expect("a longer value with the same prefix is greater");
    g.apply(Command::Append(append(b"y")), 0)
        .expect("no Stream-Seq: unchecked");
    assert!(
        g.apply(with_seq(b"9\x00"), 0).is_err(),
        "the stored value did not change"
    );
}

#[test]
fn cold_references_name_chunks_cold_snapshot_bodies_and_released_objects() {
    let mut g = GroupState::default();
    for (key, object) in [("demo/a", "demo/g0/a"), ("demo/b", "demo/g0/b")] {
        let incarnation = incarnation_of(g.apply(create_key(key, None), SEC).expect("create"));
        let body = Bytes::from_static(b"abc");
        g.apply(Command::Append(Append::octet_stream(key, body)), SEC)
            .expect("append");
        let slice = FlushSlice {
            key: key.into(),
            incarnation,
            start: 0,
            end: 3,
            at: 0,
        };
        let flush = Command::ColdFlush {
            object: object.into(),
            slices: vec![slice],
            owned: false,
        };
        g.apply(flush, SEC).expect("flush");
    }
    let publish = PublishSnapshot {
        key: "demo/a".into(),
        offset: 3,
        content_type: "application/octet-stream".into(),
        body: Bytes::new(),
        incarnation: None,
        cold: Some(ColdBody {
            object: "demo/snap/g0/s".into(),
            len: 5,
            digest: "d".into(),
        }),
        boundary: None,
    };
    g.apply(Command::PublishSnapshot(publish), SEC)
        .expect("publish");
    let delete = Command::Delete {
        key: "demo/b".into(),
        incarnation: None,
    };
    g.apply(delete, 2 * SEC).expect("delete");
    let refs = |g: &GroupState| {
        let mut r: Vec<String> = g.cold_references().map(|o| o.to_string()).collect();
        r.sort();
        r
    };
    // The deleted stream's object is released, not yet deleted: still named.
    assert_eq!(refs(&g), ["demo/g0/a", "demo/g0/b", "demo/snap/g0/s"]);
    let forget = Command::ColdForget {
        objects: vec!["demo/g0/b".into()],
    };
    g.apply(forget, 3 * SEC).expect("forget");
    assert_eq!(refs(&g), ["demo/g0/a", "demo/snap/g0/s"]);
}

fn staged(g: &GroupState, object: &str, len: u64) -> Append {
    let s = g.get(KEY, 0).expect("stream");
    Append {
        body: Body::External(ExternalBody {
            object: object.into(),
            incarnation: s.incarnation,
            hot_from: s.data.hot_start(),
            hot_len: s.data.hot_len(),
            len,
        }),
        ..append(b"")
    }
}

#[test]
fn a_staged_append_takes_the_hot_ring_into_one_owned_chunk_and_leaves_nothing_hot() {
    let mut g = GroupState::default();
    g.apply(create(None), 0).expect("create");
    g.apply(Command::Append(append(b"hello ")), 1)
        .expect("small append");
    assert_eq!(g.hot_bytes(), 6);
    let a = staged(&g, "demo/ext/one", 1000);
    let applied = g.apply(Command::Append(a), 2).expect("staged append");
    assert!(matches!(
        applied,
        Applied::Appended {
            next_offset: Some(1006),
            duplicate: false,
            ..
        }
    ));
    let s = g.get(KEY, 2).expect("stream");
    assert_eq!(
        (s.data.hot_start(), s.data.hot_len(), s.tail()),
        (1006, 0, 1006)
    );
    let c = &s.data.cold_chunks()[0];
    assert_eq!(
        (c.start, c.end, &*c.object, c.at, c.owned),
        (0, 1006, "demo/ext/one", 0, true)
    );
    assert_eq!(g.hot_bytes(), 0, "the hot bytes moved into the object");
    let plan = s.data.plan(3, 10);
    assert_eq!(plan.cold[0].range, 3..13);
    assert!(g.cold_references().any(|o| &*o == "demo/ext/one"));
    // Small appends after it are hot again, above the chunk.
    g.apply(Command::Append(append(b"tail")), 3)
        .expect("append after");
    let s = g.get(KEY, 3).expect("stream");
    assert_eq!(s.data.read(1006, 10), b"tail".to_vec());
    s.data.check().expect("layout");
}

#[test]
fn a_staged_append_planned_before_the_stream_moved_is_refused_and_changes_nothing() {
    let mut g = GroupState::default();
    g.apply(create(None), 0).expect("create");
    g.apply(Command::Append(append(b"abc")), 1).expect("append");
    let stale = staged(&g, "demo/ext/stale", 100);
    g.apply(Command::Append(append(b"d")), 2)
        .expect("append between");
    let r = g.apply(Command::Append(stale.clone()), 3);
    assert!(matches!(r, Err(Refusal::ExternalMoved)), "{r:?}");
    let s = g.get(KEY, 3).expect("stream");
    assert_eq!((s.tail(), s.data.hot_len()), (4, 4));
    assert!(s.data.cold_chunks().is_empty());
    // A new incarnation with the same bounds is refused too.
    g.apply(
        Command::Delete {
            key: KEY.into(),
            incarnation: None,
        },
        4,
    )
    .expect("delete");
    g.apply(create(None), 5).expect("recreate");
    g.apply(Command::Append(append(b"abc")), 6).expect("append");
    let r = g.apply(Command::Append(stale), 7);
    assert!(matches!(r, Err(Refusal::ExternalMoved)), "{r:?}");
    assert!(!g.cold_references().any(|o| &*o == "demo/ext/stale"));
}

#[test]
fn a_staged_duplicate_is_answered_as_a_duplicate_and_references_nothing() {
    let mut g = GroupState::default();
    g.apply(create(None), 0).expect("create");
    let first = with_producer(staged(&g, "demo/ext/a", 10), "p", 0, 0);
    g.apply(Command::Append(first), 1).expect("first");
    let again = with_producer(staged(&g, "demo/ext/b", 10), "p", 0, 0);
    let r = g.apply(Command::Append(again), 2).expect("retry");
    assert!(
        matches!(
            r,
            Applied::Appended {
                duplicate: true,
                ..
            }
        ),
        "{r:?}"
    );
    assert!(g.cold_references().any(|o| &*o == "demo/ext/a"));
    assert!(!g.cold_references().any(|o| &*o == "demo/ext/b"));
    assert_eq!(g.get(KEY, 2).expect("stream").tail(), 10);
}

fn staged_create(object: &str, hot_len: u64, len: u64) -> Command {
    Command::Create(Create {
        body: Some(Body::External(ExternalBody {
            object: object.into(),
            incarnation: 0,
            hot_from: 0,
            hot_len,
            len,
        })),
        ..Create::octet_stream(KEY)
    })
}

#[test]
fn a_staged_create_starts_the_stream_with_one_owned_chunk_and_a_repeat_references_nothing() {
    let mut g = GroupState::default();
    let applied = g
        .apply(staged_create("demo/ext/first", 0, 2000), 1)
        .expect("create");
    assert!(
        matches!(applied, Applied::Created { fresh: true, ref meta } if meta.tail == 2000),
        "{applied:?}"
    );
    let s = g.get(KEY, 1).expect("stream");
    assert_eq!((s.tail(), s.data.hot_len()), (2000, 0));
    let c = &s.data.cold_chunks()[0];
    assert_eq!(
        (c.start, c.end, &*c.object, c.owned),
        (0, 2000, "demo/ext/first", true)
    );
    s.data.check().expect("layout");
    assert_eq!(g.hot_bytes(), 0);
    // The same create again is answered as existing; its object is referenced by nothing.
    let again = g
        .apply(staged_create("demo/ext/again", 0, 2000), 2)
        .expect("idempotent create");
    assert!(
        matches!(again, Applied::Created { fresh: false, .. }),
        "{again:?}"
    );
    assert!(g.cold_references().any(|o| &*o == "demo/ext/first"));
    assert!(!g.cold_references().any(|o| &*o == "demo/ext/again"));
    // A locator that names hot bytes cannot start a stream.
    let mut fresh = GroupState::default();
    let r = fresh.apply(staged_create("demo/ext/bad", 5, 10), 3);
    assert!(matches!(r, Err(Refusal::ExternalMoved)), "{r:?}");
    assert!(fresh.get(KEY, 3).is_none(), "nothing created");
}
