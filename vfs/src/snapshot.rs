//! The snapshot thread of an attached database: when the log since the latest snapshot
//! outgrows the database, it copies a page-exact image at a frame boundary, publishes it,
//! reads it back, and moves retention to the snapshot before it.

use std::io::Read;
use std::io::Seek;
use std::io::SeekFrom;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use ursula_protocol::content_type::OCTET_STREAM;
use ursula_protocol::headers as h;
use ursula_protocol::offset::Offset;

use crate::client::Attempt;
use crate::client::Client;
use crate::client::Method;
use crate::client::Request;
use crate::db::Db;
use crate::db::SnapshotStat;
use crate::format;
use crate::format::PAGE_SIZE;
use crate::log;
use crate::registry::sibling;
use crate::settings;
use crate::sqlite_wal;
use crate::sqlite_wal::FrameHeader;

const SMALL_BODY: usize = 1 << 20;

pub fn start(db: Arc<Db>) {
    if db.read_only {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("ursula-snapshot".into())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&db)));
            if let Err(p) = result {
                db.event(
                    log::Level::Error,
                    "snapshot_thread_panicked",
                    &[("message", &log::panic_message(p.as_ref()))],
                );
            }
        });
    if let Err(e) = spawned {
        log::event(
            log::Level::Error,
            "snapshot_thread_not_resumed",
            &[("reason", &e.to_string())],
        );
    }
}

fn due(db: &Db) -> bool {
    let min = settings::get().snapshot_min_bytes;
    let h = db.health();
    let refused = h
        .refused
        .as_ref()
        .is_some_and(crate::db::Refused::stream_refuses)
        || h.payment.is_some();
    h.poison.is_none() && !refused && h.log_bytes > h.db_bytes.max(min)
}

fn run(db: &Db) {
    let mut failures: u32 = 0;
    let mut wait = Duration::ZERO;
    let mut previous: Option<Offset> = None;
    loop {
        {
            let (m, c) = &db.snapshot_wake;
            let mut woken = m.lock().unwrap_or_else(|e| e.into_inner());
            let deadline = Instant::now() + wait.max(Duration::from_millis(1));
            while !*woken && !db.closed.load(Ordering::SeqCst) {
                let now = Instant::now();
                if now >= deadline && wait.is_zero() {
                    break;
                }
                let timeout = if wait.is_zero() {
                    Duration::from_secs(1)
                } else {
                    deadline.saturating_duration_since(now)
                };
                if timeout.is_zero() {
                    break;
                }
                woken = c
                    .wait_timeout(woken, timeout)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            *woken = false;
        }
        if db.closed.load(Ordering::SeqCst) {
            return;
        }
        if !due(db) {
            continue;
        }
        match publish(db) {
            Ok(offset) => {
                failures = 0;
                wait = Duration::ZERO;
                if let Some(prev) = previous.replace(offset) {
                    retain(db, prev);
                }
            }
            Err((kind, reason, too_large)) => {
                failures += 1;
                let cap = if too_large {
                    Duration::from_secs(3600)
                } else {
                    Duration::from_secs(300)
                };
                let base = Duration::from_millis(100)
                    .saturating_mul(1u32 << failures.min(20).saturating_sub(1));
                let jitter = 0.8 + rand::random::<f64>() * 0.4;
                wait = base.min(cap).mul_f64(jitter);
                let mut h = db.health();
                h.snapshot_failures += 1;
                h.snapshot_error = Some(reason.clone());
                drop(h);
                db.event(
                    log::Level::Warn,
                    "snapshot_failed",
                    &[
                        ("failures", &failures.to_string()),
                        ("retry_ms", &wait.as_millis().to_string()),
                        ("kind", kind),
                        ("reason", &reason),
                    ],
                );
            }
        }
    }
}

/// A page-exact image of the database at the last acknowledged commit, with its offset,
/// epoch and the log bytes it covers.
fn copy_image(db: &Db) -> std::io::Result<(Vec<u8>, Option<Offset>, u64, u64)> {
    let cs = db.commit_state();
    let mut image = std::fs::read(&db.path)?;
    if cs.wal.frame > 0 {
        let mut wal = std::fs::File::open(sibling(&db.path, "-wal"))?;
        let mut frame = vec![0u8; sqlite_wal::FRAME as usize];
        let mut db_pages = (image.len() / PAGE_SIZE) as u32;
        for index in 1..=cs.wal.frame {
            wal.seek(SeekFrom::Start(sqlite_wal::frame_offset(index)))?;
            wal.read_exact(&mut frame)?;
            let (head, page) = frame.split_at(sqlite_wal::FRAME_HEADER as usize);
            let Some(h) = FrameHeader::parse(head)
                .filter(|h| h.has_salts(cs.wal.salt1, cs.wal.salt2) && h.pgno != 0)
            else {
                continue;
            };
            let end = h.pgno as usize * PAGE_SIZE;
            if image.len() < end {
                image.resize(end, 0);
            }
            image[end - PAGE_SIZE..end].copy_from_slice(page);
            if h.is_commit() {
                db_pages = h.commit_size;
            }
        }
        image.truncate(db_pages as usize * PAGE_SIZE);
    }
    Ok((
        image,
        cs.sidecar.offset,
        cs.sidecar.epoch,
        cs.sidecar.log_bytes,
    ))
}

type Failure = (&'static str, String, bool);

fn publish(db: &Db) -> Result<Offset, Failure> {
    let started = Instant::now();
    let (image, offset, epoch, log_at) =
        copy_image(db).map_err(|e| ("other", format!("copying the image: {e}"), false))?;
    let Some(offset) = offset else {
        // Not reached in practice: the log bytes that make a snapshot due come with an offset.
        return Err((
            "other",
            "the file reflects no frame of the stream yet".into(),
            false,
        ));
    };
    let copy_us = started.elapsed().as_micros() as u64;
    let crc = crc32fast::hash(&image);
    let compressed = zstd::bulk::compress(&image, format::SNAPSHOT_LEVEL)
        .map_err(|e| ("other", e.to_string(), false))?;
    let header = format::SnapshotHeader {
        epoch,
        pages: (image.len() / PAGE_SIZE) as u32,
        crc,
        offset,
    };
    let body = format::encode_snapshot(&header, &compressed);
    db.health().snapshot_bytes = Some(body.len() as u64);
    let incarnation = db.commit_state().sidecar.incarnation.to_string();
    let url = format!("{}/snapshot/{offset}", db.url);
    let big = body.len() > SMALL_BODY;
    let headers = vec![
        (h::CONTENT_TYPE, OCTET_STREAM.to_owned()),
        (h::STREAM_INCARNATION, incarnation.clone()),
    ];
    let put = Request {
        headers,
        body: &body,
        long: true,
        ..Request::new(Method::Put, &url)
    };
    match Client::global().send(&put) {
        Attempt::Answered(a) if a.status == 204 || a.status == 200 => {}
        Attempt::Answered(a) if a.status == 409 || a.status == 410 => {
            // A newer snapshot is published already; this one is moot.
            return Ok(offset);
        }
        Attempt::Answered(a) => {
            let too_large = big || a.status == 413;
            let kind = if too_large {
                "size"
            } else if a.status >= 500 {
                "outage"
            } else {
                "other"
            };
            return Err((
                kind,
                format!(
                    "publishing a {}-byte snapshot answered {}: {}",
                    body.len(),
                    a.status,
                    crate::append::reason_of(&a)
                ),
                too_large,
            ));
        }
        Attempt::NeverSent(r) | Attempt::Refused(r) | Attempt::NoAnswer(r) => {
            return Err(("outage", r, false));
        }
    }
    let get = Request {
        headers: vec![(h::STREAM_INCARNATION, incarnation)],
        long: true,
        ..Request::new(Method::Get, &url)
    };
    match Client::global().send(&get) {
        Attempt::Answered(a) if a.status == 200 && a.body == body => {}
        Attempt::Answered(a) => {
            return Err((
                "other",
                format!(
                    "reading the snapshot back answered {} with other bytes",
                    a.status
                ),
                false,
            ));
        }
        Attempt::NeverSent(r) | Attempt::Refused(r) | Attempt::NoAnswer(r) => {
            return Err(("outage", r, false));
        }
    }
    let mut h = db.health();
    h.snapshot = Some(offset);
    h.snapshot_at = Some(Instant::now());
    h.snapshot_failures = 0;
    h.snapshot_error = None;
    h.log_bytes = h.log_bytes.saturating_sub(log_at);
    if h.snapshot_stats.len() >= crate::db::STATS_CAP {
        h.snapshot_stats.pop_front();
        h.dropped.snapshots += 1;
    }
    h.snapshot_stats.push_back(SnapshotStat {
        offset,
        bytes: body.len() as u64,
        raw: image.len() as u64,
        copy_us,
        total_us: started.elapsed().as_micros() as u64,
    });
    drop(h);
    let mut cs = db.commit_state();
    cs.sidecar.log_bytes = cs.sidecar.log_bytes.saturating_sub(log_at);
    Ok(offset)
}

fn retain(db: &Db, offset: Offset) {
    let incarnation = db.commit_state().sidecar.incarnation.to_string();
    let url = format!("{}/retention/{offset}", db.url);
    let req = Request {
        headers: vec![(h::STREAM_INCARNATION, incarnation)],
        ..Request::new(Method::Put, &url)
    };
    match Client::global().send(&req) {
        Attempt::Answered(a) if a.status == 204 || a.status == 200 => {
            db.health().retained = Some(offset)
        }
        other => {
            let reason = match other {
                Attempt::Answered(a) => format!("HTTP {}", a.status),
                Attempt::NeverSent(r) | Attempt::Refused(r) | Attempt::NoAnswer(r) => r,
            };
            db.event(
                log::Level::Warn,
                "retention_failed",
                &[("offset", &offset.to_string()), ("reason", &reason)],
            );
        }
    }
}
