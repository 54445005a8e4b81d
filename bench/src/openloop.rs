//! Open-loop load at a fixed offered rate: `connections` tasks, each sending on its own
//! schedule (`rate / connections` per second, the tasks' schedules interleaved), whatever the
//! server does. A closed loop slows down with the server and so never sees the queue a slow
//! answer builds; this does, without coordinated omission:
//!
//! - a request whose connection was still busy at its scheduled time (the server was behind)
//!   is timed from that scheduled time, so the wait it spent queued behind earlier requests
//!   counts;
//! - a request whose connection was idle is timed from when it was actually written: Tokio's
//!   timer wakes a task up to a millisecond late, and that slack is the client's, not the
//!   server's; a request due within that millisecond goes at once instead of sleeping.
//!
//! `BENCH_SLOW_MS=N` prints every measured request slower than N ms to stderr with its time
//! since the start, to line stalls up with what the server logged.

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use tokio::task::JoinSet;

use crate::BoxError;
use crate::http::Conn;
use crate::http::HttpError;
use crate::http::Target;
use crate::load::Outcome;
use crate::load::REQUEST_LIMIT;
use crate::load::Tally;
use crate::load::collect;

/// An open-loop scenario.
#[derive(Debug, Clone)]
pub struct Open {
    pub connections: usize,
    /// Requests per second offered, over all connections.
    pub rate: f64,
    pub warmup: Duration,
    pub duration: Duration,
    /// Task `i` sends requests `i`, `i + connections`, … (modulo the list).
    pub requests: Arc<Vec<Vec<u8>>>,
}

/// Tokio's timer resolution: how early a request may go rather than sleep.
const EARLY: Duration = Duration::from_millis(1);

pub async fn open_loop(target: &Target, spec: &Open) -> Result<Outcome, BoxError> {
    if spec.requests.is_empty() || spec.connections == 0 || spec.rate.is_nan() || spec.rate <= 0.0 {
        return Err("an open-loop scenario needs requests, connections and a rate".into());
    }
    let mut conns = Vec::with_capacity(spec.connections);
    for _ in 0..spec.connections {
        conns.push(Conn::connect(target).await?);
    }
    let interval = Duration::from_secs_f64(spec.connections as f64 / spec.rate);
    let start = Instant::now() + Duration::from_millis(10);
    let measure_from = start + spec.warmup;
    let end = measure_from + spec.duration;
    let slow = std::env::var("BENCH_SLOW_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis);
    let mut set = JoinSet::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let reqs = Arc::clone(&spec.requests);
        let step = spec.connections;
        // Spread the tasks' first sends over one interval.
        let first = start + interval.mul_f64(i as f64 / step as f64);
        let mut t = Tally::new()?;
        set.spawn(async move {
            let schedule = Schedule {
                first,
                interval,
                measure_from,
                end,
                start,
                slow,
            };
            worker(conn, &reqs, i, step, schedule, &mut t)
                .await
                .map(|()| t)
        });
    }
    collect(set, spec.duration.as_secs_f64()).await
}

#[derive(Debug, Clone, Copy)]
struct Schedule {
    first: Instant,
    interval: Duration,
    measure_from: Instant,
    end: Instant,
    /// For `BENCH_SLOW_MS`: when the run started and the threshold.
    start: Instant,
    slow: Option<Duration>,
}

async fn worker(
    mut conn: Conn,
    reqs: &[Vec<u8>],
    first: usize,
    step: usize,
    s: Schedule,
    t: &mut Tally,
) -> Result<(), HttpError> {
    let mut i = first % reqs.len();
    let mut due = s.first;
    while due < s.end {
        let now = Instant::now();
        // Idle well before the scheduled time: wait for it, then time from the actual write.
        // Within the timer's resolution of it: send now (early, never by more than that, so
        // the offered rate holds on average), timed from the write: a sleep would wake late
        // and the next request would start behind its schedule through the client's fault.
        // Busy past it: send at once and time from the schedule.
        let from = if now + EARLY < due {
            tokio::time::sleep_until(due.into()).await;
            Instant::now()
        } else if now < due {
            now
        } else {
            due
        };
        let Some(req) = reqs.get(i) else {
            return Ok(());
        };
        i = (i + step) % reqs.len();
        let (status, _) = conn.roundtrip_within(req, REQUEST_LIMIT).await?;
        let dt = from.elapsed();
        if due >= s.measure_from {
            if s.slow.is_some_and(|d| dt > d) {
                let wall = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                eprintln!(
                    "slow: at {:.3} s (unix {:.3}), {:.1} ms",
                    from.duration_since(s.start).as_secs_f64(),
                    wall.as_secs_f64(),
                    dt.as_secs_f64() * 1000.0
                );
            }
            if (200..300).contains(&status) {
                t.good(dt);
            } else {
                t.bad(|| format!("status {status}"));
            }
        }
        due += s.interval;
    }
    Ok(())
}
