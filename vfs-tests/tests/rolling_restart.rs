//! The Day-2 acceptance scenario: a 3-voter cluster (disk WAL, `fsync = "always"`) behind
//! `ursula gateway`, a producer appending with `Producer-Id/-Epoch/-Seq` through the gateway at
//! a steady rate and a SQLite database attached through the extension committing meanwhile.
//! Every node is rolled in turn with `ursulactl drain` -> SIGTERM -> restart -> `wait` ->
//! `undrain`, then `verify-cluster`; then one node's WAL is wiped and `wait` returns only once
//! its leaders rebuilt it into a full voter. No write the clients sent fails, each is in the
//! stream once, and the database is whole and equals a fresh rebuild. It prints how long the
//! leader moves paused appends (the table in docs/benchmarks.md).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;
use std::time::Instant;

use rusqlite::Connection;
use ursula_testkit::cluster::local_prefix;
use ursula_testkit::cluster::metrics;
use ursula_testkit::cluster::wait_for;
use ursula_vfs_tests::cluster::Cluster;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::integrity_ok;

static PHASES: std::sync::Mutex<Vec<(String, Instant)>> = std::sync::Mutex::new(Vec::new());

fn ctl_ok(manifest: &str, verb: &str, node: Option<usize>) {
    PHASES
        .lock()
        .expect("phases")
        .push((format!("{verb} {node:?}"), Instant::now()));
    let id = node.map(|i| (i + 1).to_string());
    let mut args = vec![verb, "--config", manifest];
    if let Some(id) = &id {
        args.extend(["--node", id.as_str()]);
    }
    if verb == "wait-ready" {
        args.extend(["--expected-groups", "4"]);
    }
    let started = Instant::now();
    let (code, out, err) = ursula_testkit::ctl::ctl(&args);
    assert_eq!(
        code,
        Some(0),
        "ursulactl {args:?} after {:?}: {out}{err}",
        started.elapsed()
    );
}

/// One append of the producer: its seq, how long it took, and the status it got.
struct Sample {
    seq: u64,
    at: Instant,
    took: Duration,
    status: u16,
    /// A failure's headers and body, to say which refusal it was.
    why: String,
}

/// Appends `r{seq}|` every 10 ms through the gateway until stopped. A write that fails is
/// counted and sent again with the same seq (as a client would), so the stream's content
/// stays checkable either way.
fn producer(url: String, stop: Arc<AtomicBool>) -> JoinHandle<Vec<Sample>> {
    std::thread::spawn(move || {
        let agent = ursula_testkit::http::agent(Duration::from_secs(30));
        let mut samples = Vec::new();
        let mut seq = 0u64;
        while !stop.load(Ordering::Acquire) {
            let started = Instant::now();
            let s = seq.to_string();
            let headers = [
                ("content-type", "application/octet-stream"),
                ("producer-id", "roll"),
                ("producer-epoch", "0"),
                ("producer-seq", s.as_str()),
            ];
            let body = format!("r{seq:06}|");
            let answer =
                ursula_testkit::http::request(&agent, "POST", &url, &headers, body.as_bytes());
            let (status, why) = match answer {
                Ok((status, hs, body)) if status >= 300 => {
                    let marker = hs
                        .iter()
                        .find(|(k, _)| k == "x-ursula-not-applied")
                        .map(|(_, v)| v);
                    let body = String::from_utf8_lossy(&body);
                    (status, format!("{marker:?} {body}"))
                }
                Ok((status, _, _)) => (status, String::new()),
                Err(e) => (0, e.to_string()),
            };
            samples.push(Sample {
                seq,
                at: started,
                took: started.elapsed(),
                status,
                why,
            });
            if status == 200 || status == 204 {
                seq += 1;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        samples
    })
}

/// Commits one row every 30 ms until stopped; answers the rows acknowledged and the failures.
fn committer(
    db: Connection,
    stop: Arc<AtomicBool>,
) -> JoinHandle<(Connection, Vec<String>, Vec<String>)> {
    std::thread::spawn(move || {
        let (mut acked, mut failed) = (Vec::new(), Vec::new());
        let mut i = 0;
        while !stop.load(Ordering::Acquire) {
            let body = format!("c{i}");
            match db.execute("INSERT INTO notes(body) VALUES (?1)", [&body]) {
                Ok(_) => acked.push(body),
                Err(e) => failed.push(format!("{body}: {e}")),
            }
            i += 1;
            std::thread::sleep(Duration::from_millis(30));
        }
        (db, acked, failed)
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[test]
fn a_rolling_restart_and_a_wiped_node_lose_no_write_of_a_producer_or_a_sqlite_owner() {
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", "20000") };
    let mut cluster = Cluster::start_operable();
    let manifest = cluster.manifest();
    ctl_ok(&manifest, "wait-ready", None);

    let stream = "/demo/roll-log";
    let (status, _, _) = http(
        "PUT",
        &format!("{}{stream}", cluster.base()),
        &[("content-type", "application/octet-stream")],
        b"",
    );
    assert!(status == 201 || status == 200, "{status}");
    let o = Owner::attach(&format!("{}/demo/roll-db", cluster.base()));

    let stop = Arc::new(AtomicBool::new(false));
    let appends = producer(format!("{}{stream}", cluster.base()), stop.clone());
    let commits = committer(o.db, stop.clone());
    // The steady state the appends during the roll are measured against.
    std::thread::sleep(Duration::from_secs(2));

    let roll_started = Instant::now();
    for i in 0..3 {
        ctl_ok(&manifest, "drain", Some(i));
        assert!(cluster.sigterm(i), "node {} stopped cleanly", i + 1);
        cluster.restart(i);
        ctl_ok(&manifest, "wait", Some(i));
        ctl_ok(&manifest, "undrain", Some(i));
    }
    ctl_ok(&manifest, "verify-cluster", None);
    let roll_took = roll_started.elapsed();

    // A node whose WAL is gone: drained, stopped, wiped, started. `wait` returns once every
    // group promoted it again.
    let wiped = 1;
    ctl_ok(&manifest, "drain", Some(wiped));
    assert!(cluster.sigterm(wiped));
    std::fs::remove_dir_all(cluster.wal_dir(wiped)).expect("wipe");
    cluster.restart(wiped);
    ctl_ok(&manifest, "wait", Some(wiped));
    for i in (0..3).filter(|i| *i != wiped) {
        for g in metrics(&cluster.node_base(i))["raft_groups"]
            .as_array()
            .expect("groups")
        {
            assert_eq!(
                g["voter_ids"],
                serde_json::json!([1, 2, 3]),
                "node {}: {g}",
                i + 1
            );
            assert_eq!(
                g["learner_ids"],
                serde_json::json!([]),
                "node {}: {g}",
                i + 1
            );
        }
    }
    let rebuilt = (0..3)
        .filter(|i| *i != wiped)
        .map(|i| std::fs::read_to_string(cluster.log_path(i)).unwrap_or_default())
        .any(|log| log.contains("rebuilding a voter that lost entries"));
    assert!(
        rebuilt,
        "the wiped voter was removed and promoted again by its leaders"
    );
    ctl_ok(&manifest, "undrain", Some(wiped));
    ctl_ok(&manifest, "verify-cluster", None);

    // The clients go on against the whole cluster a while before they stop.
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Release);
    let samples = appends.join().expect("producer");
    let (db, acked, failed) = commits.join().expect("committer");

    // No client-visible failure: every append and every commit was acknowledged first time.
    let t0 = roll_started;
    let failures: Vec<String> = samples
        .iter()
        .filter(|s| s.status != 200 && s.status != 204)
        .map(|s| {
            format!(
                "seq {} {} at {:?} after {:?}: {}",
                s.seq,
                s.status,
                s.at.saturating_duration_since(t0),
                s.took,
                s.why
            )
        })
        .collect();
    let failures: Vec<&String> = failures.iter().take(4).collect();
    let phases: Vec<(String, String)> = PHASES
        .lock()
        .expect("phases")
        .iter()
        .map(|(p, at)| (p.clone(), format!("{:?}", at.saturating_duration_since(t0))))
        .collect();
    assert!(
        failures.is_empty(),
        "appends that failed (seq, status, since the roll began): {failures:?}; phases: {phases:?}"
    );
    assert!(failed.is_empty(), "commits that failed: {failed:?}");
    let sent = samples.len() as u64;
    assert!(
        sent > 100 && acked.len() > 50,
        "{sent} appends, {} commits",
        acked.len()
    );

    // Each append once, in order, in the stream; every node holds the same bytes.
    let want: String = (0..sent).map(|s| format!("r{s:06}|")).collect();
    let (status, _, body) = http(
        "GET",
        &format!("{}{stream}?offset=-1", cluster.base()),
        &[],
        b"",
    );
    assert_eq!(status, 200);
    assert_eq!(
        String::from_utf8(body).expect("utf8"),
        want,
        "every append exactly once"
    );
    let short = &want[..want.len() - 1];
    for i in 0..3 {
        let base = cluster.node_base(i);
        wait_for(30, &format!("node {} to hold the stream", i + 1), || {
            (local_prefix(&base, stream, short.len()).as_deref() == Some(short)).then_some(())
        });
    }

    // The database: whole, every acknowledged commit once, and equal to a fresh rebuild.
    assert!(integrity_ok(&db));
    assert_eq!(bodies(&db), acked);
    // (The owner's connection moved to the committer: its fields are used one by one.)
    let copy = o.dir.path().join("copy.db");
    attach_read_only(&o.ctl, &copy, &o.url).expect("rebuild");
    let c = Connection::open(&copy).expect("open copy");
    assert!(integrity_ok(&c));
    assert_eq!(bodies(&c), acked, "a fresh rebuild equals the owner");

    // Appends sent while the nodes were rolled (9 leader moves per node, 4 groups), against
    // the steady state before it.
    let latencies = |f: &dyn Fn(&Sample) -> bool| {
        let mut l: Vec<Duration> = samples.iter().filter(|s| f(s)).map(|s| s.took).collect();
        l.sort();
        l
    };
    let roll_end = roll_started + roll_took;
    let during = latencies(&|s| s.at >= roll_started && s.at < roll_end);
    let before = latencies(&|s| s.at < roll_started);
    for (name, l) in [("steady", &before), ("during the roll", &during)] {
        println!(
            "rolling restart, appends {name}: n={} p50={:?} p99={:?} max={:?}",
            l.len(),
            percentile(l, 0.5),
            percentile(l, 0.99),
            l.last().copied().unwrap_or_default()
        );
    }
    println!(
        "rolling restart: {sent} appends, {} commits; the roll of 3 nodes took {roll_took:?}",
        acked.len()
    );
}
