//! Closed-loop request load: `connections` tasks, one keep-alive connection each, every task
//! sending its next request as soon as the previous response is read. Latency is recorded per
//! request in nanoseconds into an HDR histogram.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::task::JoinSet;

use crate::BoxError;
use crate::http::Conn;
use crate::http::HttpError;
use crate::http::Target;

/// One request slower than this fails the scenario instead of hanging it.
pub const REQUEST_LIMIT: Duration = Duration::from_secs(10);

/// A new histogram for latencies from 1 ns to 100 s, three significant digits.
pub fn histogram() -> Result<Histogram<u64>, BoxError> {
    Ok(Histogram::new_with_bounds(1, 100_000_000_000, 3)?)
}

pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// A closed-loop scenario.
#[derive(Debug, Clone)]
pub struct Closed {
    pub connections: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Task `i` sends requests `i`, `i + connections`, … (modulo the list), so the list is
    /// covered round robin.
    pub requests: Arc<Vec<Vec<u8>>>,
    /// The body length every response must have (a sanity check for reads).
    pub expect_len: Option<usize>,
}

#[derive(Debug)]
pub struct Outcome {
    pub hist: Histogram<u64>,
    pub ok: u64,
    pub bad: u64,
    pub first_bad: Option<String>,
    pub seconds: f64,
}

/// One task's counts; the scenario sums its tasks' with [`collect`].
pub(crate) struct Tally {
    hist: Histogram<u64>,
    ok: u64,
    bad: u64,
    first_bad: Option<String>,
}

impl Tally {
    pub(crate) fn new() -> Result<Tally, BoxError> {
        Ok(Tally {
            hist: histogram()?,
            ok: 0,
            bad: 0,
            first_bad: None,
        })
    }

    /// A good answer that took `dt`.
    pub(crate) fn good(&mut self, dt: Duration) {
        self.hist.saturating_record(nanos(dt));
        self.ok += 1;
    }

    /// A bad answer; the first one's description is kept.
    pub(crate) fn bad(&mut self, why: impl FnOnce() -> String) {
        self.bad += 1;
        if self.first_bad.is_none() {
            self.first_bad = Some(why());
        }
    }
}

/// Waits for every task and sums their tallies over `seconds` measured.
pub(crate) async fn collect(
    mut set: JoinSet<Result<Tally, HttpError>>,
    seconds: f64,
) -> Result<Outcome, BoxError> {
    let mut total = Tally::new()?;
    while let Some(joined) = set.join_next().await {
        let t = joined??;
        total.hist.add(&t.hist)?;
        total.ok += t.ok;
        total.bad += t.bad;
        total.first_bad = total.first_bad.or(t.first_bad);
    }
    Ok(Outcome {
        hist: total.hist,
        ok: total.ok,
        bad: total.bad,
        first_bad: total.first_bad,
        seconds,
    })
}

pub async fn closed_loop(target: &Target, spec: &Closed) -> Result<Outcome, BoxError> {
    if spec.requests.is_empty() || spec.connections == 0 {
        return Err("a scenario needs requests and connections".into());
    }
    // Connect everyone first so connection setup is not part of the measurement.
    let mut conns = Vec::with_capacity(spec.connections);
    for _ in 0..spec.connections {
        conns.push(Conn::connect(target).await?);
    }
    let start = Instant::now();
    let measure_from = start + spec.warmup;
    let end = measure_from + spec.duration;
    let mut set = JoinSet::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let reqs = Arc::clone(&spec.requests);
        let (step, expect) = (spec.connections, spec.expect_len);
        let mut t = Tally::new()?;
        set.spawn(async move {
            worker(conn, &reqs, i, step, measure_from, end, expect, &mut t)
                .await
                .map(|()| t)
        });
    }
    collect(set, spec.duration.as_secs_f64()).await
}

#[allow(
    clippy::too_many_arguments,
    reason = "a task's whole configuration, used once"
)]
async fn worker(
    mut conn: Conn,
    reqs: &[Vec<u8>],
    first: usize,
    step: usize,
    measure_from: Instant,
    end: Instant,
    expect_len: Option<usize>,
    t: &mut Tally,
) -> Result<(), HttpError> {
    let mut i = first % reqs.len();
    loop {
        let t0 = Instant::now();
        if t0 >= end {
            return Ok(());
        }
        let Some(req) = reqs.get(i) else {
            return Ok(());
        };
        i = (i + step) % reqs.len();
        let (status, len) = conn.roundtrip_within(req, REQUEST_LIMIT).await?;
        let dt = t0.elapsed();
        if t0 < measure_from {
            continue;
        }
        let good = (200..300).contains(&status) && expect_len.is_none_or(|n| n == len);
        if good {
            t.good(dt);
        } else {
            t.bad(|| format!("status {status}, body {len} bytes"));
        }
    }
}

/// Sends every request once over `connections` connections, requiring 2xx for each; for setup
/// (creating and filling streams). Returns the elapsed seconds.
pub async fn run_all(
    target: &Target,
    requests: Vec<Vec<u8>>,
    connections: usize,
    limit: Duration,
) -> Result<f64, BoxError> {
    let start = Instant::now();
    let deadline = start + limit;
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = JoinSet::new();
    for _ in 0..connections.clamp(1, requests.len().max(1)) {
        let (requests, next, target) = (Arc::clone(&requests), Arc::clone(&next), target.clone());
        set.spawn(async move {
            let mut conn = Conn::connect(&target).await?;
            loop {
                let Some(req) = requests.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return Ok(());
                };
                if Instant::now() >= deadline {
                    return Err(BoxError::from(format!(
                        "setup did not finish within {limit:?}"
                    )));
                }
                let (status, _) = conn.roundtrip_within(req, REQUEST_LIMIT).await?;
                if !(200..300).contains(&status) {
                    let line = String::from_utf8_lossy(
                        req.split(|b| *b == b'\r').next().unwrap_or_default(),
                    );
                    return Err(BoxError::from(format!(
                        "setup request {line:?} answered {status}"
                    )));
                }
            }
        });
    }
    while let Some(joined) = set.join_next().await {
        joined??;
    }
    Ok(start.elapsed().as_secs_f64())
}
