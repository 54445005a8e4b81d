//! The frame and snapshot fixtures in `browser/test/fixtures/`, which the browser replica's
//! decoder reads too (`browser/test/format.test.mjs`): this encoder wrote them, and this test
//! fails when it would write something else, or when this decoder reads them differently.
//! `URSULA_WRITE_FIXTURES=1` writes them again after a deliberate format change.

use std::path::PathBuf;

use crate::format::PAGE_SIZE;
use crate::format::Record;
use crate::format::SnapshotHeader;
use crate::format::encode_snapshot;
use crate::format::read_snapshot_header;
use ursula_protocol::offset::Offset;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../browser/test/fixtures")
}

fn page(seed: u8) -> Vec<u8> {
    (0..PAGE_SIZE)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Each fixture's file name and the bytes this build encodes for it.
fn fixtures() -> Vec<(&'static str, Vec<u8>)> {
    let claim = Record::Claim {
        epoch: 7,
        nonce: *b"0123456789abcdef",
    };
    let commit = Record::Commit {
        db_pages: 3,
        pages: vec![(1, page(1)), (3, page(3))],
    };
    let image: Vec<u8> = [page(10), page(11)].concat();
    let header = SnapshotHeader {
        epoch: 5,
        pages: 2,
        crc: crc32fast::hash(&image),
        offset: Offset(4242),
    };
    let compressed = zstd::bulk::compress(&image, 3).expect("zstd");
    vec![
        ("claim.usq1", claim.to_frame().expect("frame")),
        ("commit.usq1", commit.to_frame().expect("frame")),
        ("snapshot.uss1", encode_snapshot(&header, &compressed)),
    ]
}

#[test]
fn the_fixtures_the_browser_decoder_reads_are_what_this_encoder_writes() {
    let write = std::env::var_os("URSULA_WRITE_FIXTURES").is_some();
    for (name, bytes) in fixtures() {
        let path = dir().join(name);
        if write {
            std::fs::create_dir_all(dir()).expect("fixtures dir");
            std::fs::write(&path, &bytes).expect("write fixture");
        }
        let stored = std::fs::read(&path).expect("fixture");
        assert_eq!(
            stored, bytes,
            "{name} differs from what this encoder writes"
        );
    }
}

#[test]
fn this_decoder_reads_the_fixtures_as_the_browser_test_expects() {
    let mut reader = crate::format::FrameReader::default();
    reader.push(&std::fs::read(dir().join("claim.usq1")).expect("claim"));
    reader.push(&std::fs::read(dir().join("commit.usq1")).expect("commit"));
    let (claim, _) = reader.next("0").expect("decode").expect("a frame");
    assert_eq!(
        claim,
        Record::Claim {
            epoch: 7,
            nonce: *b"0123456789abcdef"
        }
    );
    let (commit, _) = reader.next("0").expect("decode").expect("a frame");
    let Record::Commit { db_pages, pages } = commit else {
        panic!("not a commit");
    };
    assert_eq!(db_pages, 3);
    assert_eq!(
        pages
            .iter()
            .map(|(n, p)| (*n, p[0], p[1]))
            .collect::<Vec<_>>(),
        vec![(1, 1, 32), (3, 3, 34)]
    );
    let body = std::fs::read(dir().join("snapshot.uss1")).expect("snapshot");
    let mut r = body.as_slice();
    let h = read_snapshot_header(&mut r).expect("header");
    assert_eq!((h.epoch, h.pages, h.offset), (5, 2, Offset(4242)));
    let image = zstd::stream::decode_all(r).expect("image");
    assert_eq!(image.len(), 2 * PAGE_SIZE);
    assert_eq!(crc32fast::hash(&image), h.crc);
}
