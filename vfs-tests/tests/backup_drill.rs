//! The recovery drill of the spec (`backup_restore_drill_preserves_streams_and_allows_continued_appends`):
//! a 3-voter cluster on the S3 cold tier (SeaweedFS) holds streams flushed to cold and hot,
//! one with a snapshot and retention, a closed one, a JSON one and a SQLite database attached
//! through the extension; `ursulactl backup-create` writes the backup to `s3://` while a
//! producer keeps appending; `backup-verify` checks it; the cluster is destroyed; a fresh
//! cluster refuses the restore until the cold objects are copied (skipping the marker and
//! `snapshots/`), then `restore` brings every stream back, the database rebuilds from its
//! stream, appends continue and a producer's retry is deduplicated. Last, a bucket purge
//! leaves no object of that bucket in SeaweedFS and the other bucket's objects untouched.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;
use std::time::Instant;

use rusqlite::Connection;
use ursula_cold::testing::ACCESS_KEY_ID;
use ursula_cold::testing::BUCKET;
use ursula_cold::testing::SECRET_ACCESS_KEY;
use ursula_cold::testing::SeaweedFs;
use ursula_testkit::cluster::admin;
use ursula_vfs_tests::cluster::Cluster;
use ursula_vfs_tests::cluster::Options;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::server::Answer;
use ursula_vfs_tests::server::header;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::wait_until;

const OCTET: (&str, &str) = ("content-type", "application/octet-stream");

/// Cold tier on `weed` under `root`: nothing flushes by itself during the test, so a stream
/// is cold only when the admin plane's `flush-cold` route flushed it.
fn cold_toml(weed: &SeaweedFs, root: &str) -> String {
    format!(
        "[storage.cold]\nbackend = \"s3\"\nroot = \"{root}\"\nflush_size = \"256MiB\"\nflush_interval = \"1h\"\n\
         flush_max_hot_age = \"1h\"\n\
         [storage.cold.s3]\nbucket = \"{BUCKET}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\
         access_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key = \"{SECRET_ACCESS_KEY}\"\n\
         timeout = \"5s\"\n",
        weed.endpoint()
    )
}

/// An operable cluster with `extra_toml` in each node's config, ready by `ursulactl
/// wait-ready`, and its manifest.
fn cluster(weed: &SeaweedFs, extra_toml: String) -> (Cluster, String) {
    let c = Cluster::start_with(Options {
        fsync_always: false,
        extra_toml,
    });
    let manifest = c.manifest();
    let (code, out) = ursulactl(
        weed,
        &[
            "wait-ready",
            "--config",
            &manifest,
            "--expected-groups",
            "4",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    (c, manifest)
}

/// Runs `ursulactl` with the S3 environment of the backup location.
fn ursulactl(weed: &SeaweedFs, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(ursula_testkit::bins::ursulactl())
        .args(args)
        .env("AWS_ENDPOINT_URL", weed.endpoint())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
        .output()
        .expect("run ursulactl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn ok(a: Answer, what: &str) -> Answer {
    assert!(
        (200..300).contains(&a.0),
        "{what}: {} {}",
        a.0,
        String::from_utf8_lossy(&a.2)
    );
    a
}

fn offset(n: u64) -> String {
    format!("{n:020}")
}

/// What a stream looks like from outside: HEAD's headers that must survive, and its bytes.
fn observe(base: &str, path: &str) -> (Vec<Option<String>>, Vec<u8>) {
    let (status, hs, _) = http("HEAD", &format!("{base}{path}"), &[], b"");
    assert_eq!(status, 200, "HEAD {path}");
    let keep = [
        "stream-next-offset",
        "stream-incarnation",
        "stream-closed",
        "stream-snapshot-offset",
        "content-type",
    ]
    .iter()
    .map(|k| header(&hs, k).map(str::to_owned))
    .collect();
    let retained = header(&hs, "stream-retained-offset")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let (status, _, bytes) = http(
        "GET",
        &format!("{base}{path}?offset={}", offset(retained)),
        &[],
        b"",
    );
    assert_eq!(status, 200, "GET {path}");
    (keep, bytes)
}

/// Flushes `bucket/stream` to the cold tier now, through whichever node leads it.
fn flush(c: &Cluster, bucket: &str, stream: &str) {
    let done = (0..3).any(|i| {
        let (status, _) = admin(
            c.node(i),
            "POST",
            &format!("/__ursula/flush-cold/{bucket}/{stream}"),
        );
        status == 200 || status == 204
    });
    assert!(done, "no node flushed {bucket}/{stream}");
    let base = c.node_base(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, hs, _) = http("HEAD", &format!("{}/{bucket}/{stream}", c.base()), &[], b"");
        let num = |k: &str| header(&hs, k).and_then(|v| v.parse::<u64>().ok());
        if num("stream-cold-hot-start-offset").is_some()
            && num("stream-cold-hot-start-offset") == num("stream-next-offset")
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{bucket}/{stream} never went cold ({base})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Appends the line of `seq` as producer `live`; the status.
fn produce(url: &str, seq: u64) -> u16 {
    let s = seq.to_string();
    let headers = [
        OCTET,
        ("producer-id", "live"),
        ("producer-epoch", "0"),
        ("producer-seq", &s),
    ];
    http("POST", url, &headers, format!("{seq}\n").as_bytes()).0
}

/// A producer appending `n:` lines with Producer-Id `live` until stopped, counting the
/// appends acknowledged in `acked`.
fn producer(url: String, stop: Arc<AtomicBool>, acked: Arc<AtomicU64>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let status = produce(&url, seq);
            assert!(
                status == 200 || status == 204,
                "producer append {seq}: {status}"
            );
            seq += 1;
            acked.store(seq, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

/// Node `i`'s usage document (`/__ursula/usage`).
fn usage(c: &Cluster, i: usize) -> serde_json::Value {
    let (status, _, body) = http(
        "GET",
        &format!("{}/__ursula/usage", c.node_base(i)),
        &[],
        b"",
    );
    assert_eq!(status, 200, "usage");
    serde_json::from_slice(&body).expect("usage")
}

#[tokio::test]
async fn backup_restore_drill_preserves_streams_and_allows_continued_appends() {
    let weed = SeaweedFs::start().await;
    let tag = std::process::id();
    let (src_root, dst_root) = (format!("drill-src-{tag}"), format!("drill-dst-{tag}"));
    let location = format!("s3://{BUCKET}/backups/drill-{tag}");
    let (mut source, manifest) = cluster(&weed, cold_toml(&weed, &src_root));
    let base = source.base();

    // The data set: bucket `drill` holds every kind of stream, bucket `live` the producer.
    ok(
        http("PUT", &format!("{base}/drill/cold"), &[OCTET], b""),
        "create cold",
    );
    for i in 0..50u8 {
        ok(
            http(
                "POST",
                &format!("{base}/drill/cold"),
                &[OCTET],
                &vec![b'a' + i % 26; 1000 + usize::from(i)],
            ),
            "append cold",
        );
    }
    flush(&source, "drill", "cold");
    ok(
        http("PUT", &format!("{base}/drill/hot"), &[OCTET], b"hot bytes "),
        "create hot",
    );
    ok(
        http(
            "POST",
            &format!("{base}/drill/hot"),
            &[OCTET],
            b"stay in memory",
        ),
        "append hot",
    );
    ok(
        http(
            "PUT",
            &format!("{base}/drill/snap"),
            &[OCTET],
            b"0123456789abcdef",
        ),
        "create snap",
    );
    ok(
        http(
            "PUT",
            &format!("{base}/drill/snap/snapshot/{}", offset(10)),
            &[OCTET],
            b"state at 10",
        ),
        "publish snapshot",
    );
    ok(
        http(
            "PUT",
            &format!("{base}/drill/snap/retention/{}", offset(10)),
            &[],
            b"",
        ),
        "retain",
    );
    ok(
        http(
            "PUT",
            &format!("{base}/drill/closed"),
            &[OCTET, ("stream-closed", "true")],
            b"final",
        ),
        "create closed",
    );
    let json = ("content-type", "application/json");
    ok(
        http(
            "PUT",
            &format!("{base}/drill/events"),
            &[json],
            br#"[{"n":1},{"n":2}]"#,
        ),
        "create json",
    );
    ok(
        http(
            "POST",
            &format!("{base}/drill/events"),
            &[json],
            br#"{"n":3}"#,
        ),
        "append json",
    );

    // A SQLite database replicated through the extension.
    let o = Owner::attach(&format!("{base}/drill/db"));
    let mut rows = Vec::new();
    for i in 0..40 {
        let body = format!("note {i}");
        o.insert(&body).expect("insert");
        rows.push(body);
    }
    drop(o.db);

    ok(
        http("PUT", &format!("{base}/live/log"), &[OCTET], b""),
        "create live",
    );
    ok(
        http("PUT", &format!("{base}/live/cold"), &[OCTET], b""),
        "create live cold",
    );
    for i in 0..20u8 {
        ok(
            http("POST", &format!("{base}/live/cold"), &[OCTET], &[i; 700]),
            "append live cold",
        );
    }
    flush(&source, "live", "cold");

    let drill_streams = [
        "/drill/cold",
        "/drill/hot",
        "/drill/snap",
        "/drill/closed",
        "/drill/events",
        "/drill/db",
    ];
    let before: Vec<_> = drill_streams.iter().map(|p| observe(&base, p)).collect();
    let usage_before = usage(&source, 0);

    // Back up while the producer appends.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let appends = producer(format!("{base}/live/log"), stop.clone(), acked.clone());
    let acked_now = || acked.load(Ordering::Relaxed);
    wait_until("the producer's first appends", || acked_now() > 0);
    let started = Instant::now();
    let (code, out) = ursulactl(
        &weed,
        &[
            "backup-create",
            "--config",
            &manifest,
            "--location",
            &location,
        ],
    );
    assert_eq!(code, Some(0), "backup-create: {out}");
    let backup_took = started.elapsed();
    // The producer keeps appending after the backup.
    let at_backup = acked_now();
    wait_until("10 appends after the backup", || {
        acked_now() >= at_backup + 10
    });
    stop.store(true, Ordering::Relaxed);
    appends.join().expect("producer");
    let acked = acked_now();
    assert!(acked > 10, "the producer kept appending: {acked}");
    let (code, out) = ursulactl(&weed, &["backup-verify", "--location", &location]);
    assert_eq!(code, Some(0), "backup-verify: {out}");

    // Destroy the source cluster; its cold objects stay in the object store.
    for i in 0..3 {
        source.kill(i);
    }
    drop(source);

    // A fresh cluster: the restore refuses, importing nothing, until the cold objects are there.
    let (target, tm) = cluster(&weed, cold_toml(&weed, &dst_root));
    let tm = tm.as_str();
    let (code, out) = ursulactl(&weed, &["restore", "--config", tm, "--location", &location]);
    assert_eq!(code, Some(1), "restore without the cold objects: {out}");
    assert!(
        out.contains(
            "cold objects this backup references are missing from the target cluster's cold store"
        ),
        "{out}"
    );
    let empty = usage(&target, 0);
    assert_eq!(
        empty["buckets"],
        serde_json::json!({}),
        "a refused restore imported nothing"
    );

    // Copy the source's cold objects, skipping its marker (not listed) and `snapshots/`.
    let (from, to) = (weed.store(&src_root), weed.store(&dst_root));
    let mut copied = 0;
    for key in from.list("").await.expect("list source") {
        if key.starts_with("snapshots/") {
            continue;
        }
        let bytes = from.get(&key).await.expect("get");
        to.put(&key, bytes).await.expect("put");
        copied += 1;
    }
    assert!(copied >= 2, "cold objects of both buckets: {copied}");
    let started = Instant::now();
    let (code, out) = ursulactl(&weed, &["restore", "--config", tm, "--location", &location]);
    assert_eq!(code, Some(0), "restore: {out}");
    let restore_took = started.elapsed();
    eprintln!("drill: backup-create {backup_took:?}, restore {restore_took:?}");

    // Every stream as it was: bytes, offsets, incarnation, closed, snapshot, retention.
    let t = target.base();
    for (path, was) in drill_streams.iter().zip(&before) {
        assert_eq!(&observe(&t, path), was, "{path} after the restore");
    }
    let (status, _, _) = http(
        "GET",
        &format!("{t}/drill/snap?offset={}", offset(0)),
        &[],
        b"",
    );
    assert_eq!(status, 410, "below the retention floor");
    let (status, _, snap) = http(
        "GET",
        &format!("{t}/drill/snap/snapshot/{}", offset(10)),
        &[],
        b"",
    );
    assert_eq!((status, snap.as_slice()), (200, &b"state at 10"[..]));
    let usage_after = usage(&target, 1);
    assert_eq!(
        usage_after["buckets"]["drill"], usage_before["buckets"]["drill"],
        "usage"
    );

    // The producer's stream holds a prefix of what was acknowledged, each line once and in
    // order; its retry of the last restored seq is a duplicate and the next seq continues.
    let (_, log) = observe(&t, "/live/log");
    let lines: Vec<u64> = String::from_utf8(log)
        .expect("utf8")
        .lines()
        .map(|l| l.parse().expect("seq"))
        .collect();
    assert!(!lines.is_empty(), "the backup holds some producer appends");
    assert_eq!(
        lines,
        (0..lines.len() as u64).collect::<Vec<_>>(),
        "a gapless prefix"
    );
    assert!((lines.len() as u64) <= acked);
    let log_url = format!("{t}/live/log");
    let last = lines.len() as u64 - 1;
    assert_eq!(
        produce(&log_url, last),
        204,
        "a retry after the restore is deduplicated"
    );
    assert_eq!(produce(&log_url, last + 1), 200, "the producer continues");
    ok(
        http("POST", &format!("{t}/drill/hot"), &[OCTET], b" and more"),
        "appends continue",
    );

    // The database rebuilds from its restored stream, whole.
    let copy = o.dir.path().join("restored.db");
    attach_read_only(&o.ctl, &copy, &format!("{t}/drill/db")).expect("rebuild");
    let restored = Connection::open(&copy).expect("open restored");
    assert!(integrity_ok(&restored));
    assert_eq!(bodies(&restored), rows);
    drop(restored);

    // Purge `drill`: its objects leave SeaweedFS, `live`'s stay.
    let live_objects = to.list("live").await.expect("list live");
    assert!(!live_objects.is_empty());
    assert!(!to.list("drill").await.expect("list drill").is_empty());
    let (status, body) = admin(target.node(1), "DELETE", "/__ursula/purge/drill");
    let report: serde_json::Value = serde_json::from_str(&body).expect("report");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["removed_streams"], drill_streams.len(), "{report}");
    assert_eq!(report["cold_gc_complete"], true, "{report}");
    assert!(to.list("drill").await.expect("list drill").is_empty());
    assert_eq!(to.list("live").await.expect("list live"), live_objects);
    let (status, _, _) = http("PUT", &format!("{t}/drill/again"), &[OCTET], b"");
    assert_eq!(status, 404, "the purged bucket is fenced");
}

/// Writes `total` bytes through the gateway in 1 MiB appends over 64 streams of bucket `bulk`,
/// from 4 threads.
fn fill(base: &str, total: usize) {
    let chunk = 1 << 20;
    let per_thread = total / chunk / 4;
    for s in 0..64 {
        ok(
            http("PUT", &format!("{base}/bulk/s{s:02}"), &[OCTET], b""),
            "create bulk",
        );
    }
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let base = base.to_owned();
            std::thread::spawn(move || {
                let body = vec![b'a' + t as u8; chunk];
                for i in 0..per_thread {
                    let s = (t * per_thread + i) % 64;
                    ok(
                        http("POST", &format!("{base}/bulk/s{s:02}"), &[OCTET], &body),
                        "append bulk",
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer");
    }
}

fn mb_per_s(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / took.as_secs_f64()
}

/// The throughput table of docs/benchmarks.md: backup and restore of a cluster holding 1 GiB
/// in memory (no cold tier: every byte is in the group objects). Run it with
/// `cargo test --profile ci -p ursula-vfs-tests --test backup_drill -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a benchmark: writes 1 GiB into a 3-voter cluster; run by hand"]
async fn backup_and_restore_throughput_of_a_gibibyte() {
    let weed = SeaweedFs::start().await;
    let (source, manifest) = cluster(&weed, String::new());
    let manifest = manifest.as_str();
    let total = 1usize << 30;
    let started = Instant::now();
    fill(&source.base(), total);
    let fill_took = started.elapsed();
    let dir = tempfile::tempdir().expect("tempdir");
    let local = dir.path().join("backup");
    let local = local.to_str().expect("utf8");
    let s3 = format!("s3://{BUCKET}/bench/gib-{}", std::process::id());
    let time = |args: &[&str]| {
        let started = Instant::now();
        let (code, out) = ursulactl(&weed, args);
        assert_eq!(code, Some(0), "{args:?}: {out}");
        started.elapsed()
    };
    let to_dir = time(&[
        "backup-create",
        "--config",
        manifest,
        "--location",
        local,
        "--http-timeout-secs",
        "600",
    ]);
    let size: u64 = std::fs::read_dir(std::path::Path::new(local).join("groups"))
        .expect("groups")
        .map(|e| e.expect("entry").metadata().expect("meta").len())
        .sum();
    let to_s3 = time(&[
        "backup-create",
        "--config",
        manifest,
        "--location",
        &s3,
        "--http-timeout-secs",
        "600",
    ]);
    let verify_dir = time(&["backup-verify", "--location", local]);
    let verify_s3 = time(&["backup-verify", "--location", &s3]);
    drop(source);
    let (target, tm) = cluster(&weed, String::new());
    let tm = tm.as_str();
    let restore = time(&[
        "restore",
        "--config",
        tm,
        "--location",
        local,
        "--http-timeout-secs",
        "600",
    ]);
    let (_, hs, _) = http("HEAD", &format!("{}/bulk/s00", target.base()), &[], b"");
    assert!(header(&hs, "stream-next-offset").is_some());
    println!(
        "| step | time | MB/s (of {} MiB of group objects) |",
        size >> 20
    );
    println!("| --- | ---: | ---: |");
    println!(
        "| write 1 GiB through the gateway | {:.1} s | {:.0} |",
        fill_took.as_secs_f64(),
        mb_per_s(total as u64, fill_took)
    );
    for (step, took) in [
        ("backup-create to a local directory", to_dir),
        ("backup-create to s3:// (SeaweedFS)", to_s3),
        ("backup-verify of the local directory", verify_dir),
        ("backup-verify of s3://", verify_s3),
        ("restore from the local directory", restore),
    ] {
        println!(
            "| {step} | {:.1} s | {:.0} |",
            took.as_secs_f64(),
            mb_per_s(size, took)
        );
    }
}
