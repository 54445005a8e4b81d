//! The cold index driven through commands: sealing pages, compaction's rewrites and
//! adoptions, retention collecting whole pages, and a deleted stream's pages retiring.

use std::sync::Arc;

use bytes::Bytes;
use ursula_protocol::offset::ReadFrom;

use super::command::*;
use super::data::CompactionLimits;
use super::machine::GroupState;

const PB: u64 = 10;
const NOW: u64 = 1_000;

fn stream(g: &mut GroupState, key: &str, body: &[u8]) -> u64 {
    let c = Command::Create(Create {
        body: Some(Body::Raw(Bytes::copy_from_slice(body))),
        ..Create::octet_stream(key)
    });
    match g.apply(c, NOW).expect("create") {
        Applied::Created { meta, .. } => meta.incarnation,
        other => panic!("created? {other:?}"),
    }
}

/// Flushes `[start, end)` of each `(key, incarnation)` into one object.
fn flush(g: &mut GroupState, object: &str, slices: &[(&str, u64, u64, u64)], owned: bool) {
    let mut at = 0;
    let slices = slices
        .iter()
        .map(|(key, incarnation, start, end)| {
            let sl = FlushSlice {
                key: (*key).into(),
                incarnation: *incarnation,
                start: *start,
                end: *end,
                at,
            };
            at += end - start;
            sl
        })
        .collect();
    let cmd = Command::ColdFlush {
        object: object.into(),
        slices,
        owned,
    };
    g.apply(cmd, NOW).expect("flush");
}

fn accepted(a: Result<Applied, Refusal>) -> bool {
    matches!(a, Ok(Applied::ColdIndexed { accepted: true }))
}

fn index_page(g: &mut GroupState, key: &str, inc: u64, page: u64) -> bool {
    let cmd = Command::ColdIndex(ColdIndexPage {
        key: key.into(),
        incarnation: inc,
        page,
        page_bytes: PB,
        prefix: Arc::from("b/cold-index/g0/1/"),
    });
    accepted(g.apply(cmd, NOW))
}

fn garbage(g: &GroupState) -> Vec<String> {
    let mut v: Vec<String> = g
        .cold_garbage()
        .iter()
        .map(|(o, _)| o.to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn a_complete_page_of_owned_chunks_seals_and_reads_plan_through_it() {
    let mut g = GroupState::default();
    let inc = stream(&mut g, "b/s", b"0123456789abcdefghijklmno");
    flush(&mut g, "b/g0/x", &[("b/s", inc, 0, 7)], true);
    // Not complete yet: the chunks end before the page does.
    let s = g.get("b/s", NOW).expect("stream");
    assert!(s.data.sealable(inc, PB).is_none());
    flush(&mut g, "b/g0/y", &[("b/s", inc, 7, 14)], true);
    let s = g.get("b/s", NOW).expect("stream");
    let page = s.data.sealable(inc, PB).expect("sealable");
    assert_eq!((page.page, page.entries.len()), (0, 2));
    assert!(page.last_continues && !page.first_continues);
    assert_eq!(page.entries[1].end, 10, "clipped at the page's end");
    assert!(!index_page(&mut g, "b/s", inc, 1), "not the next page");
    assert!(index_page(&mut g, "b/s", inc, 0));
    assert!(!index_page(&mut g, "b/s", inc, 0), "sealed once");
    let s = g.get("b/s", NOW).expect("stream");
    let ix = s.data.index().expect("index");
    assert_eq!((ix.first, ix.sealed, ix.split), (0, 1, true));
    let rest = &s.data.cold_chunks()[0];
    assert_eq!(
        (rest.start, rest.end, rest.at),
        (10, 14, 3),
        "the split remainder"
    );
    assert!(
        !s.data.is_chunk_edge(10),
        "a split is not an append boundary"
    );
    let v = g
        .read("b/s", ReadFrom::Start, 100, None, NOW)
        .expect("read");
    let paged = v.paged.expect("paged part");
    assert_eq!(paged.range, 0..10);
    assert_eq!(v.cold.len(), 1);
    assert_eq!(v.cold[0].range, 3..7);
    assert_eq!(v.next, 25);
    assert_eq!(
        g.cold_references()
            .filter(|o| o.contains("cold-index"))
            .count(),
        1,
        "the page is named"
    );
}

#[test]
fn packed_slices_block_a_page_until_compaction_rewrites_or_adopts_them() {
    let mut g = GroupState::default();
    let a = stream(&mut g, "b/a", b"aaaaaaaaaaaa");
    let b = stream(&mut g, "b/b", b"bbbb");
    // One packed object for both streams, then a lone object of an older build for `a`.
    flush(
        &mut g,
        "b/g0/p",
        &[("b/a", a, 0, 6), ("b/b", b, 0, 4)],
        true,
    );
    flush(&mut g, "b/g0/q", &[("b/a", a, 6, 12)], false);
    let limits = CompactionLimits::SPEC;
    let s = g.get("b/a", NOW).expect("a");
    assert!(s.data.sealable(a, PB).is_none(), "packed slices");
    let run = s.data.compaction_run(PB, limits).expect("a run");
    assert_eq!(
        (run.start, run.end, run.pieces.len(), run.single),
        (0, 12, 2, None)
    );
    let compact = |key: &str, incarnation, start, end, object: &str| {
        Command::ColdCompact(ColdCompact {
            // Naming a chunk's own object is an adoption.
            adopt: ["b/g0/p", "b/g0/s"].contains(&object),
            key: key.into(),
            incarnation,
            page_bytes: PB,
            start,
            end,
            object: object.into(),
            at: 0,
        })
    };
    // `b` still reads the packed object: `a` cannot adopt it.
    assert!(!accepted(g.apply(compact("b/a", a, 0, 6, "b/g0/p"), NOW)));
    assert!(accepted(g.apply(compact("b/a", a, 0, 12, "b/g0/r"), NOW)));
    assert_eq!(garbage(&g), ["b/g0/q"], "`b` still names the packed object");
    assert!(
        !accepted(g.apply(compact("b/a", a, 0, 12, "b/g0/r"), NOW)),
        "applied twice"
    );
    let s = g.get("b/a", NOW).expect("a");
    assert!(s.data.compaction_run(PB, limits).is_none());
    assert!(s.data.sealable(a, PB).is_some());
    // A stale rewrite of a sealable page is refused; its object is left to the orphan sweep.
    assert!(!accepted(
        g.apply(compact("b/a", a, 0, 12, "b/g0/stale"), NOW)
    ));
    assert_eq!(garbage(&g), ["b/g0/q"]);
    // A stale adoption, after the chunk it names was rewritten, changes and releases nothing.
    assert!(!accepted(g.apply(compact("b/a", a, 0, 6, "b/g0/p"), NOW)));
    assert_eq!(garbage(&g), ["b/g0/q"]);
    // A lone packed object nothing else names is adopted as it is.
    let c = stream(&mut g, "b/c", b"cccccccccccc");
    flush(&mut g, "b/g0/s", &[("b/c", c, 0, 12)], false);
    let s = g.get("b/c", NOW).expect("c");
    let run = s.data.compaction_run(PB, limits).expect("c's run");
    assert_eq!(run.single, Some((Arc::from("b/g0/s"), 0)));
    assert!(accepted(g.apply(compact("b/c", c, 0, 12, "b/g0/s"), NOW)));
    let s = g.get("b/c", NOW).expect("c");
    assert!(s.data.sealable(c, PB).is_some());
    assert_eq!(garbage(&g).len(), 1, "an adoption releases nothing");
    // The same adoption again (a stale leader's) finds the chunk owned: refused, nothing freed.
    assert!(!accepted(g.apply(compact("b/c", c, 0, 12, "b/g0/s"), NOW)));
    assert_eq!(garbage(&g).len(), 1);
}

#[test]
fn retention_lets_whole_pages_go_and_keeps_an_object_the_next_page_still_reads() {
    let mut g = GroupState::default();
    let inc = stream(&mut g, "b/s", &[b'x'; 35]);
    flush(&mut g, "b/g0/a", &[("b/s", inc, 0, 12)], true);
    flush(&mut g, "b/g0/b", &[("b/s", inc, 12, 25)], true);
    flush(&mut g, "b/g0/c", &[("b/s", inc, 25, 35)], true);
    for page in 0..3 {
        assert!(index_page(&mut g, "b/s", inc, page), "page {page}");
    }
    let publish = PublishSnapshot {
        key: "b/s".into(),
        offset: 25,
        content_type: "application/octet-stream".into(),
        body: Bytes::new(),
        incarnation: None,
        cold: None,
        boundary: None,
    };
    g.apply(Command::PublishSnapshot(publish), NOW)
        .expect("snapshot");
    let retain = Command::Retain {
        key: "b/s".into(),
        offset: 25,
        incarnation: None,
        boundary: None,
    };
    g.apply(retain, NOW).expect("retain");
    let s = g.get("b/s", NOW).expect("stream");
    assert_eq!(s.data.droppable_pages(s.retained), Some(0..2));
    let drop = |below, objects: &[&str]| {
        Command::ColdDropPages(ColdDropPages {
            key: "b/s".into(),
            prefix: Arc::from("b/cold-index/g0/1/"),
            below,
            objects: objects.iter().map(|o| Arc::from(*o)).collect(),
        })
    };
    assert!(
        !accepted(g.apply(drop(3, &[]), NOW)),
        "page 2 is not below retention"
    );
    // Page 1 lists b/g0/a's tail and b/g0/b's head; b/g0/b goes on into page 2: the leader
    // leaves it out.
    assert!(accepted(g.apply(drop(2, &["b/g0/a"]), NOW)));
    assert_eq!(
        garbage(&g),
        [
            "b/cold-index/g0/1/0000000000",
            "b/cold-index/g0/1/0000000001",
            "b/g0/a"
        ]
    );
    let ix = g.get("b/s", NOW).and_then(|s| s.data.index().cloned());
    assert_eq!(ix.map(|ix| (ix.first, ix.sealed)), Some((2, 3)));
}

#[test]
fn a_deleted_streams_pages_retire_and_are_collected_by_the_same_command() {
    let mut g = GroupState::default();
    let inc = stream(&mut g, "b/s", &[b'x'; 25]);
    flush(&mut g, "b/g0/a", &[("b/s", inc, 0, 25)], true);
    assert!(index_page(&mut g, "b/s", inc, 0));
    assert!(index_page(&mut g, "b/s", inc, 1));
    let delete = Command::Delete {
        key: "b/s".into(),
        incarnation: None,
    };
    g.apply(delete, NOW).expect("delete");
    assert_eq!(g.cold_retired().len(), 1);
    assert_eq!(garbage(&g), ["b/g0/a"], "the remainder's object, at once");
    let refs: Vec<String> = g.cold_references().map(|o| o.to_string()).collect();
    assert!(refs.contains(&"b/cold-index/g0/1/0000000001".to_string()));
    let drop = Command::ColdDropPages(ColdDropPages {
        key: "b/s".into(),
        prefix: Arc::from("b/cold-index/g0/1/"),
        below: 2,
        objects: vec!["b/g0/a".into()],
    });
    assert!(accepted(g.apply(drop, NOW)));
    assert!(g.cold_retired().is_empty());
    assert_eq!(garbage(&g).len(), 3, "both pages and the object, once");
}

#[test]
fn an_open_page_is_compacted_at_64_packed_slices_or_past_64_chunks_and_not_before() {
    let mut g = GroupState::default();
    let a = stream(&mut g, "b/a", &[b'a'; 200]);
    let b = stream(&mut g, "b/b", &[b'b'; 200]);
    let pb = 1_000;
    let limits = CompactionLimits::SPEC;
    // 63 one-byte slices of `a` packed with `b`'s: the page (1000 bytes) is not complete.
    for i in 0..63 {
        let object = format!("b/g0/p{i}");
        flush(
            &mut g,
            &object,
            &[("b/a", a, i, i + 1), ("b/b", b, i, i + 1)],
            true,
        );
    }
    let s = g.get("b/a", NOW).expect("a");
    assert!(
        s.data.compaction_run(pb, limits).is_none(),
        "63 packed slices"
    );
    flush(
        &mut g,
        "b/g0/p63",
        &[("b/a", a, 63, 64), ("b/b", b, 63, 64)],
        true,
    );
    let run = g
        .get("b/a", NOW)
        .and_then(|s| s.data.compaction_run(pb, limits))
        .expect("64 packed slices");
    assert_eq!((run.start, run.end, run.pieces.len()), (0, 64, 64));
    // Owned chunks: past 64 in one page, the small ones merge.
    let c = stream(&mut g, "b/c", &[b'c'; 200]);
    for i in 0..65 {
        flush(&mut g, &format!("b/g0/c{i}"), &[("b/c", c, i, i + 1)], true);
    }
    let run = g
        .get("b/c", NOW)
        .and_then(|s| s.data.compaction_run(pb, limits))
        .expect("65 chunks in one page");
    assert_eq!((run.start, run.end, run.single), (0, 65, None));
    let merged = ColdCompact {
        adopt: false,
        key: "b/c".into(),
        incarnation: c,
        page_bytes: pb,
        start: 0,
        end: 65,
        object: "b/g0/merged".into(),
        at: 0,
    };
    assert!(accepted(g.apply(Command::ColdCompact(merged), NOW)));
    let s = g.get("b/c", NOW).expect("c");
    assert_eq!(s.data.cold_chunks().len(), 1);
    assert!(s.data.compaction_run(pb, limits).is_none());
    assert_eq!(
        garbage(&g).len(),
        65,
        "the replaced objects wait out the grace"
    );
}
