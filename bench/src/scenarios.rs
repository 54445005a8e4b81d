//! The benchmark's scenarios, their setup, and the idle-stream memory measurement.

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::BoxError;
use crate::http::Target;
use crate::load;
use crate::load::Closed;
use crate::procfs;
use crate::report::IdleRun;
use crate::report::Scenario;
use crate::sse;

const PREFIX: &str = "/v1/stream/";
const BODY_LEN: usize = 100;
const MANY_STREAMS: usize = 1_000;
const READ_FILL: usize = 100;
const SETUP_LIMIT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub warmup: Duration,
    pub duration: Duration,
    pub sse_subscribers: usize,
    pub sse_rate: f64,
    /// Only the scenarios whose keys are listed (all when empty).
    pub only: Vec<String>,
}

/// One closed-loop scenario to run.
struct Plan {
    key: &'static str,
    title: &'static str,
    connections: usize,
    requests: Arc<Vec<Vec<u8>>>,
    expect_len: Option<usize>,
}

fn path(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// CPU seconds of the server and of this process, and the machine's idle seconds, for the
/// `cores` columns.
#[derive(Debug, Clone, Copy)]
struct CpuMark {
    at: Instant,
    server: Option<f64>,
    client: Option<f64>,
    /// Idle seconds of the whole machine.
    machine: Option<f64>,
}

#[derive(Debug, Clone, Copy)]
struct Cores {
    server: Option<f64>,
    client: Option<f64>,
    machine: Option<f64>,
    other: Option<f64>,
}

impl CpuMark {
    fn now(pid: Option<u32>) -> CpuMark {
        CpuMark {
            at: Instant::now(),
            server: pid.and_then(|p| procfs::cpu_seconds(Some(p))),
            client: procfs::cpu_seconds(None),
            machine: procfs::machine_idle().map(|(idle, _)| idle),
        }
    }

    /// Cores' worth of CPU used since `self`.
    fn since(&self, pid: Option<u32>) -> Cores {
        let later = CpuMark::now(pid);
        let wall = later.at.duration_since(self.at).as_secs_f64().max(1e-9);
        let cores = |a: Option<f64>, b: Option<f64>| Some((b? - a?) / wall);
        let (server, client) = (
            cores(self.server, later.server),
            cores(self.client, later.client),
        );
        let ncpu = procfs::machine_idle().map(|(_, n)| n as f64);
        let machine = (|| Some(ncpu? - cores(self.machine, later.machine)?))();
        // Whatever is left was other processes on the machine: a disturbed measurement.
        let other = (|| Some((machine? - server? - client?).max(0.0)))();
        Cores {
            server,
            client,
            machine,
            other,
        }
    }
}

impl Cores {
    fn fill(self, sc: &mut Scenario) {
        sc.server_cores = self.server;
        sc.client_cores = self.client;
        sc.machine_cores = self.machine;
        sc.other_cores = self.other;
    }
}

/// A scenario that has measured nothing yet.
pub(crate) fn scenario(key: &str, title: &str, connections: usize) -> Scenario {
    Scenario {
        key: key.to_owned(),
        title: title.to_owned(),
        connections,
        rate: 0.0,
        p50_us: 0.0,
        p99_us: 0.0,
        max_us: 0.0,
        samples: 0,
        bad: 0,
        note: None,
        error: None,
        server_cores: None,
        client_cores: None,
        machine_cores: None,
        other_cores: None,
        rounds: Vec::new(),
    }
}

fn fill_latencies(sc: &mut Scenario, hist: &Histogram<u64>) {
    let us = |ns: u64| ns as f64 / 1000.0;
    sc.samples = hist.len();
    if !hist.is_empty() {
        sc.p50_us = us(hist.value_at_quantile(0.5));
        sc.p99_us = us(hist.value_at_quantile(0.99));
        sc.max_us = us(hist.max());
    }
}

/// Creates and fills the scenarios' streams, then runs every selected scenario in turn.
pub async fn run_load(
    target: &Target,
    pid: Option<u32>,
    cfg: &LoadConfig,
) -> Result<Vec<Scenario>, BoxError> {
    let body = vec![b'x'; BODY_LEN];
    let many: Vec<String> = (0..MANY_STREAMS)
        .map(|i| path(&format!("bench-many-{i:04}")))
        .collect();
    let mut creates: Vec<Vec<u8>> = ["bench-one-c1", "bench-one-c32", "bench-read", "bench-sse"]
        .iter()
        .map(|n| target.request("PUT", &path(n), Some(b"")))
        .collect();
    creates.extend(many.iter().map(|p| target.request("PUT", p, Some(b""))));
    load::run_all(target, creates, 8, SETUP_LIMIT).await?;
    let fill = vec![target.request("POST", &path("bench-read"), Some(&body)); READ_FILL];
    load::run_all(target, fill, 1, SETUP_LIMIT).await?;
    eprintln!("ursula-bench: streams created and filled");

    let one = |name: &str| Arc::new(vec![target.request("POST", &path(name), Some(&body))]);
    let spread = Arc::new(
        many.iter()
            .map(|p| target.request("POST", p, Some(&body)))
            .collect::<Vec<_>>(),
    );
    let read = Arc::new(vec![target.request(
        "GET",
        &format!("{}?offset=-1", path("bench-read")),
        None,
    )]);
    let read_len = Some(BODY_LEN * READ_FILL);
    let plan = |key, title, connections, requests, expect_len| Plan {
        key,
        title,
        connections,
        requests,
        expect_len,
    };
    let closed = [
        plan(
            "append-1-c1",
            "append 100 B, 1 stream, 1 conn",
            1,
            one("bench-one-c1"),
            None,
        ),
        plan(
            "append-1-c32",
            "append 100 B, 1 stream, 32 conns",
            32,
            one("bench-one-c32"),
            None,
        ),
        plan(
            "append-1000-c1",
            "append 100 B, 1,000 streams, 1 conn",
            1,
            Arc::clone(&spread),
            None,
        ),
        plan(
            "append-1000-c32",
            "append 100 B, 1,000 streams, 32 conns",
            32,
            spread,
            None,
        ),
        plan(
            "catchup-c1",
            "catch-up read 10 KB, 1 conn",
            1,
            Arc::clone(&read),
            read_len,
        ),
        plan(
            "catchup-c32",
            "catch-up read 10 KB, 32 conns",
            32,
            read,
            read_len,
        ),
    ];
    let selected = |key: &str| cfg.only.is_empty() || cfg.only.iter().any(|k| k == key);
    let mut out = Vec::new();
    for plan in closed.iter().filter(|p| selected(p.key)) {
        let sc = undisturbed(|| run_closed(target, pid, plan, cfg)).await;
        eprintln!(
            "ursula-bench: {}: {:.0} req/s, p99 {:.0} µs{}",
            plan.key,
            sc.rate,
            sc.p99_us,
            err_suffix(&sc)
        );
        out.push(sc);
        // Let the server settle (connections close, timers fire) before the next scenario.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    if selected("sse-fanout") {
        let sc = undisturbed(|| run_fan_out(target, pid, cfg)).await;
        eprintln!(
            "ursula-bench: sse-fanout: p50 {:.0} µs, p99 {:.0} µs{}",
            sc.p50_us,
            sc.p99_us,
            err_suffix(&sc)
        );
        out.push(sc);
    }
    Ok(out)
}

/// A disturbed scenario is run again (after waiting for the machine to go quiet) this many
/// times at most; the least disturbed attempt is kept.
const ATTEMPTS: usize = 3;

/// Runs a scenario until no other process used the CPU meanwhile, keeping the least disturbed
/// attempt.
async fn undisturbed<F, Fut>(mut run: F) -> Scenario
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Scenario>,
{
    let mut best: Option<Scenario> = None;
    for attempt in 1..=ATTEMPTS {
        let mut sc = run().await;
        let other = sc.other_cores.unwrap_or(0.0);
        let done = sc.error.is_some() || other <= procfs::DISTURBED_CORES;
        if attempt > 1 {
            let note = format!("attempt {attempt}: other processes disturbed the earlier ones");
            sc.note = Some(sc.note.map_or(note.clone(), |n| format!("{n}; {note}")));
        }
        if best
            .as_ref()
            .is_none_or(|b| other < b.other_cores.unwrap_or(0.0))
        {
            best = Some(sc);
        }
        if done {
            break;
        }
        if attempt < ATTEMPTS {
            eprintln!(
                "ursula-bench: other processes used {other:.2} cores; waiting for quiet, then again"
            );
            let wait = tokio::task::spawn_blocking(|| {
                procfs::wait_quiet(procfs::DISTURBED_CORES, Duration::from_secs(60));
            });
            let _ = wait.await;
        }
    }
    best.unwrap_or_else(|| scenario("none", "none", 0))
}

async fn run_closed(target: &Target, pid: Option<u32>, plan: &Plan, cfg: &LoadConfig) -> Scenario {
    let mut sc = scenario(plan.key, plan.title, plan.connections);
    let spec = Closed {
        connections: plan.connections,
        warmup: cfg.warmup,
        duration: cfg.duration,
        requests: Arc::clone(&plan.requests),
        expect_len: plan.expect_len,
    };
    let mark = CpuMark::now(pid);
    match load::closed_loop(target, &spec).await {
        Ok(o) => {
            mark.since(pid).fill(&mut sc);
            sc.rate = o.ok as f64 / o.seconds;
            sc.bad = o.bad;
            sc.note = o.first_bad.map(|b| format!("first bad response: {b}"));
            fill_latencies(&mut sc, &o.hist);
        }
        Err(e) => sc.error = Some(e.to_string()),
    }
    sc
}

async fn run_fan_out(target: &Target, pid: Option<u32>, cfg: &LoadConfig) -> Scenario {
    let title = format!(
        "SSE fan-out, {} subscribers, 1 writer at {}/s",
        crate::report::fmt_int(cfg.sse_subscribers as f64),
        cfg.sse_rate
    );
    let mut sc = scenario("sse-fanout", &title, cfg.sse_subscribers);
    let spec = sse::FanOut {
        path: path("bench-sse"),
        subscribers: cfg.sse_subscribers,
        rate_per_s: cfg.sse_rate,
        duration: cfg.duration,
        grace: Duration::from_secs(2),
    };
    let mark = CpuMark::now(pid);
    match sse::fan_out(target, &spec).await {
        Ok(o) => {
            mark.since(pid).fill(&mut sc);
            let expected = o.sent * cfg.sse_subscribers as u64;
            sc.rate = o.delivered as f64 / o.seconds;
            sc.bad = expected.saturating_sub(o.delivered);
            let mut note = format!(
                "{} appends sent, {} of {expected} deliveries",
                o.sent, o.delivered
            );
            if o.failed_subscribers > 0 {
                note += &format!(
                    "; {} subscribers failed (first: {})",
                    o.failed_subscribers,
                    o.first_failure.unwrap_or_default()
                );
            }
            sc.note = Some(note);
            fill_latencies(&mut sc, &o.hist);
        }
        Err(e) => sc.error = Some(e.to_string()),
    }
    sc
}

fn err_suffix(sc: &Scenario) -> String {
    match (&sc.error, sc.bad) {
        (Some(e), _) => format!(" — FAILED: {e}"),
        (None, 0) => String::new(),
        (None, n) => format!(" — {n} bad"),
    }
}

/// Creates `streams` streams with a 10-byte body each and reports the server's RSS growth.
pub async fn run_idle(
    target: &Target,
    pid: u32,
    server: &str,
    streams: usize,
    connections: usize,
    settle: Duration,
) -> Result<IdleRun, BoxError> {
    let rss = || {
        procfs::status_kib(pid, "VmRSS")
            .ok_or_else(|| BoxError::from(format!("cannot read VmRSS of {pid}")))
    };
    tokio::time::sleep(settle).await;
    let before = rss()?;
    let reqs: Vec<Vec<u8>> = (0..streams)
        .map(|i| target.request("PUT", &path(&format!("idle-{i:06}")), Some(b"0123456789")))
        .collect();
    let seconds = load::run_all(target, reqs, connections, SETUP_LIMIT).await?;
    // Connections are closed now; give the server a moment to release their buffers.
    tokio::time::sleep(settle).await;
    let after = rss()?;
    let bytes_per_stream = (after.saturating_sub(before) * 1024) as f64 / streams.max(1) as f64;
    eprintln!(
        "ursula-bench: {streams} idle streams: RSS {before} KiB -> {after} KiB, {bytes_per_stream:.0} B per stream"
    );
    Ok(IdleRun {
        server: server.to_owned(),
        streams,
        rss_before_kib: before,
        rss_after_kib: after,
        bytes_per_stream,
        creates_per_s: streams as f64 / seconds.max(1e-9),
    })
}
