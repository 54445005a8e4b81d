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
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use rusqlite::Connection;
use ursula_cold::testing::ACCESS_KEY_ID;
use ursula_cold::testing::BUCKET;
use ursula_cold::testing::SECRET_ACCESS_KEY;
use ursula_cold::testing::SeaweedFs;
use ursula_vfs_tests::cluster::Cluster;
use ursula_vfs_tests::cluster::Options;
use ursula_vfs_tests::server::Answer;
use ursula_vfs_tests::server::header;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::integrity_ok;

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

fn cluster(weed: &SeaweedFs, root: &str) -> Cluster {
    let c = Cluster::start_with(Options {
        operable: true,
        fsync_always: false,
        extra_toml: cold_toml(weed, root),
    });
    let (code, out) = ursulactl(
        weed,
        &[
            "wait-ready",
            "--config",
            c.manifest().to_str().expect("utf8"),
            "--expected-groups",
            "4",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    c
}

/// Runs `ursulactl` with the S3 environment of the backup location.
fn ursulactl(weed: &SeaweedFs, args: &[&str]) -> (Option<i32>, String) {
    let bin = ursula_vfs_tests::target_dir().join("ursulactl");
    assert!(bin.exists(), "build ursulactl first: {}", bin.display());
    let out = Command::new(bin)
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

/// The admin plane of `cluster`'s node `i`, with its process incarnation.
fn admin(c: &Cluster, i: usize, method: &str, path: &str) -> Answer {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(c.manifest()).expect("manifest")).expect("json");
    let url = manifest["nodes"][i]["admin_url"]
        .as_str()
        .expect("admin_url")
        .to_owned();
    let (_, _, m) = http("GET", &format!("{url}/__ursula/metrics"), &[], b"");
    let m: serde_json::Value = serde_json::from_slice(&m).expect("metrics");
    let inc = m["process_incarnation"].as_str().expect("incarnation");
    http(
        method,
        &format!("{url}{path}"),
        &[("x-ursula-process-incarnation", inc)],
        b"",
    )
}

/// Flushes `bucket/stream` to the cold tier now, through whichever node leads it.
fn flush(c: &Cluster, bucket: &str, stream: &str) {
    let done = (0..3).any(|i| {
        let (status, _, _) = admin(
            c,
            i,
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

/// A producer appending `n:` lines with Producer-Id `live` until stopped: the acknowledged seqs.
fn producer(url: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let s = seq.to_string();
            let body = format!("{seq}\n");
            let (status, _, _) = http(
                "POST",
                &url,
                &[
                    OCTET,
                    ("producer-id", "live"),
                    ("producer-epoch", "0"),
                    ("producer-seq", &s),
                ],
                body.as_bytes(),
            );
            assert!(
                status == 200 || status == 204,
                "producer append {seq}: {status}"
            );
            seq += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        seq
    })
}

#[tokio::test]
async fn backup_restore_drill_preserves_streams_and_allows_continued_appends() {
    let weed = SeaweedFs::start().await;
    let tag = std::process::id();
    let (src_root, dst_root) = (format!("drill-src-{tag}"), format!("drill-dst-{tag}"));
    let location = format!("s3://{BUCKET}/backups/drill-{tag}");
    let mut source = cluster(&weed, &src_root);
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
    let ctl = control();
    let dir = tempfile::tempdir().expect("tempdir");
    let db_url = format!("{base}/drill/db");
    attach(&ctl, &dir.path().join("owner.db"), &db_url).expect("attach");
    let db = Connection::open(dir.path().join("owner.db")).expect("open");
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)", [])
        .expect("create table");
    let mut rows = Vec::new();
    for i in 0..40 {
        let body = format!("note {i}");
        db.execute("INSERT INTO notes(body) VALUES (?1)", [&body])
            .expect("insert");
        rows.push(body);
    }
    drop(db);

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
    let usage_before = http(
        "GET",
        &format!("{}/__ursula/usage", source.node_base(0)),
        &[],
        b"",
    );
    let usage_before: serde_json::Value = serde_json::from_slice(&usage_before.2).expect("usage");

    // Back up while the producer appends.
    let stop = Arc::new(AtomicBool::new(false));
    let appends = producer(format!("{base}/live/log"), stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let manifest = source.manifest();
    let started = Instant::now();
    let (code, out) = ursulactl(
        &weed,
        &[
            "backup-create",
            "--config",
            manifest.to_str().expect("utf8"),
            "--location",
            &location,
        ],
    );
    assert_eq!(code, Some(0), "backup-create: {out}");
    let backup_took = started.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let acked = appends.join().expect("producer");
    assert!(acked > 10, "the producer kept appending: {acked}");
    let (code, out) = ursulactl(&weed, &["backup-verify", "--location", &location]);
    assert_eq!(code, Some(0), "backup-verify: {out}");

    // Destroy the source cluster; its cold objects stay in the object store.
    for i in 0..3 {
        source.kill(i);
    }
    drop(source);

    // A fresh cluster: the restore refuses, importing nothing, until the cold objects are there.
    let target = cluster(&weed, &dst_root);
    let tm = target.manifest();
    let tm = tm.to_str().expect("utf8");
    let (code, out) = ursulactl(&weed, &["restore", "--config", tm, "--location", &location]);
    assert_eq!(code, Some(1), "restore without the cold objects: {out}");
    assert!(
        out.contains(
            "cold objects this backup references are missing from the target cluster's cold store"
        ),
        "{out}"
    );
    let empty = http(
        "GET",
        &format!("{}/__ursula/usage", target.node_base(0)),
        &[],
        b"",
    );
    let empty: serde_json::Value = serde_json::from_slice(&empty.2).expect("usage");
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
    let usage_after = http(
        "GET",
        &format!("{}/__ursula/usage", target.node_base(1)),
        &[],
        b"",
    );
    let usage_after: serde_json::Value = serde_json::from_slice(&usage_after.2).expect("usage");
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
    let last = (lines.len() - 1).to_string();
    let retry = http(
        "POST",
        &format!("{t}/live/log"),
        &[
            OCTET,
            ("producer-id", "live"),
            ("producer-epoch", "0"),
            ("producer-seq", &last),
        ],
        format!("{last}\n").as_bytes(),
    );
    assert_eq!(retry.0, 204, "a retry after the restore is deduplicated");
    let next = lines.len().to_string();
    let cont = http(
        "POST",
        &format!("{t}/live/log"),
        &[
            OCTET,
            ("producer-id", "live"),
            ("producer-epoch", "0"),
            ("producer-seq", &next),
        ],
        format!("{next}\n").as_bytes(),
    );
    assert_eq!(cont.0, 200, "the producer continues");
    ok(
        http("POST", &format!("{t}/drill/hot"), &[OCTET], b" and more"),
        "appends continue",
    );

    // The database rebuilds from its restored stream, whole.
    let copy = dir.path().join("restored.db");
    attach_read_only(&ctl, &copy, &format!("{t}/drill/db")).expect("rebuild");
    let restored = Connection::open(&copy).expect("open restored");
    assert!(integrity_ok(&restored));
    assert_eq!(bodies(&restored), rows);
    drop(restored);

    // Purge `drill`: its objects leave SeaweedFS, `live`'s stay.
    let live_objects = to.list("live").await.expect("list live");
    assert!(!live_objects.is_empty());
    assert!(!to.list("drill").await.expect("list drill").is_empty());
    let (status, _, body) = admin(&target, 1, "DELETE", "/__ursula/purge/drill");
    let report: serde_json::Value = serde_json::from_slice(&body).expect("report");
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
    let source = Cluster::start_with(Options {
        operable: true,
        fsync_always: false,
        extra_toml: String::new(),
    });
    let manifest = source.manifest();
    let manifest = manifest.to_str().expect("utf8");
    let (code, out) = ursulactl(
        &weed,
        &["wait-ready", "--config", manifest, "--expected-groups", "4"],
    );
    assert_eq!(code, Some(0), "{out}");
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
    let target = Cluster::start_with(Options {
        operable: true,
        fsync_always: false,
        extra_toml: String::new(),
    });
    let tm = target.manifest();
    let tm = tm.to_str().expect("utf8");
    let (code, out) = ursulactl(
        &weed,
        &["wait-ready", "--config", tm, "--expected-groups", "4"],
    );
    assert_eq!(code, Some(0), "{out}");
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
