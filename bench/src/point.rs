//! One measured point of `scripts/bench-speed.sh`: a server, a client (`ursula-bench` or
//! `oha`), a number of streams and connections, closed loop or a fixed offered rate. Points
//! are JSON lines appended to one file; [`crate::speed`] reads them back.
//!
//! Streams are named so that `oha --rand-regex-url` can spread requests over the same set:
//! `n{N}-{i}` with `i` zero-padded to the width of `N - 1` (so `n1000-[0-9]{3}`).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Deserialize;
use serde::Serialize;

use crate::BoxError;
use crate::http::Target;
use crate::load;
use crate::load::Closed;
use crate::load::Outcome;
use crate::openloop;
use crate::openloop::Open;

const PREFIX: &str = "/v1/stream/";
pub const BODY_LEN: usize = 100;
const SETUP_LIMIT: Duration = Duration::from_secs(600);

/// One measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// Which server: `hyper-204`, `ursula-memory`, `ursula-never`, …
    pub target: String,
    /// `ursula-bench` or `oha`.
    pub client: String,
    pub streams: usize,
    pub connections: usize,
    /// The offered rate of an open-loop point; `None` for a closed loop.
    pub offered: Option<f64>,
    pub round: u32,
    /// Successful requests per second.
    pub rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub ok: u64,
    /// Non-2xx answers and requests that failed.
    pub bad: u64,
}

impl Point {
    /// One line for the log: which point, its rate and its latencies.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} {} streams {} conns{}: {:.0}/s p50 {:.3} p99 {:.3} p99.9 {:.3} ms, {} bad",
            self.client,
            self.target,
            self.streams,
            self.connections,
            self.offered
                .map(|r| format!(" at {r:.0}/s"))
                .unwrap_or_default(),
            self.rate,
            self.p50_ms,
            self.p99_ms,
            self.p999_ms,
            self.bad
        )
    }
}

/// The width of a stream index for `streams` streams.
fn width(streams: usize) -> usize {
    streams.saturating_sub(1).max(1).to_string().len()
}

/// The path of stream `i` of a set of `streams`.
pub fn stream_path(streams: usize, i: usize) -> String {
    format!("{PREFIX}n{streams}-{i:0w$}", w = width(streams))
}

/// The regex `oha --rand-regex-url` takes for the set (after the server root).
pub fn stream_regex(streams: usize) -> String {
    if streams == 1 {
        stream_path(1, 0)
    } else {
        format!("{PREFIX}n{streams}-[0-9]{{{}}}", width(streams))
    }
}

/// What oha is given for the set: one URL for one stream, else a `--rand-regex-url` regex.
/// The root's dots are written `[.]`: oha 1.16 takes `.` literally but turns `\.` into any
/// character (a host that is not the server, reached through whatever the network offers),
/// and `[.]` means a dot either way. `scripts/bench-speed.sh` checks oha's `--dump-urls`.
pub fn oha_url(base: &str, streams: usize) -> String {
    let base = base.trim_end_matches('/');
    if streams == 1 {
        format!("{base}{}", stream_path(1, 0))
    } else {
        format!("{}{}", base.replace('.', "[.]"), stream_regex(streams))
    }
}

/// Creates the set's streams (`PUT`, empty); oha's regex covers every index of the width, so
/// the set is created for all of them (10^width ≥ streams; the sets measured are powers of ten).
pub async fn setup(target: &Target, streams: usize, connections: usize) -> Result<f64, BoxError> {
    let count = if streams == 1 {
        1
    } else {
        10usize.pow(u32::try_from(width(streams))?)
    };
    let creates = (0..count)
        .map(|i| target.request("PUT", &stream_path(streams, i), Some(b"")))
        .collect();
    load::run_all(target, creates, connections, SETUP_LIMIT).await
}

/// How one point is driven by `ursula-bench`.
#[derive(Debug, Clone)]
pub struct Plan {
    pub streams: usize,
    pub connections: usize,
    pub rate: Option<f64>,
    pub warmup: Duration,
    pub duration: Duration,
}

pub async fn measure(target: &Target, plan: &Plan) -> Result<Outcome, BoxError> {
    let body = vec![b'x'; BODY_LEN];
    let requests = Arc::new(
        (0..plan.streams)
            .map(|i| target.request("POST", &stream_path(plan.streams, i), Some(&body)))
            .collect::<Vec<_>>(),
    );
    match plan.rate {
        None => {
            let spec = Closed {
                connections: plan.connections,
                warmup: plan.warmup,
                duration: plan.duration,
                requests,
                expect_len: None,
            };
            load::closed_loop(target, &spec).await
        }
        Some(rate) => {
            let spec = Open {
                connections: plan.connections,
                rate,
                warmup: plan.warmup,
                duration: plan.duration,
                requests,
            };
            openloop::open_loop(target, &spec).await
        }
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The point of an `ursula-bench` run.
pub fn from_outcome(
    target: &str,
    plan: &Plan,
    round: u32,
    out: &Outcome,
) -> Result<Point, BoxError> {
    if out.ok == 0 {
        return Err(format!(
            "no successful request ({} failed; first: {})",
            out.bad,
            out.first_bad.as_deref().unwrap_or("none")
        )
        .into());
    }
    let h: &Histogram<u64> = &out.hist;
    Ok(Point {
        target: target.to_owned(),
        client: "ursula-bench".to_owned(),
        streams: plan.streams,
        connections: plan.connections,
        offered: plan.rate,
        round,
        rate: out.ok as f64 / out.seconds,
        p50_ms: ms(h.value_at_quantile(0.5)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
        ok: out.ok,
        bad: out.bad,
    })
}

/// The parts of oha's `--output-format json` this reads (oha 1.16; times in seconds).
#[derive(Debug, Deserialize)]
struct OhaReport {
    summary: OhaSummary,
    #[serde(rename = "latencyPercentiles")]
    latency: OhaPercentiles,
    #[serde(rename = "statusCodeDistribution", default)]
    statuses: std::collections::BTreeMap<String, u64>,
    #[serde(rename = "errorDistribution", default)]
    errors: std::collections::BTreeMap<String, u64>,
}

#[derive(Debug, Deserialize)]
struct OhaSummary {
    /// Wall seconds of the run.
    total: f64,
    slowest: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct OhaPercentiles {
    p50: Option<f64>,
    p99: Option<f64>,
    #[serde(rename = "p99.9")]
    p999: Option<f64>,
}

/// What an oha point is: oha reports its own numbers, the rest comes from the command line.
#[derive(Debug, Clone)]
pub struct OhaMeta {
    pub target: String,
    pub streams: usize,
    pub connections: usize,
    pub rate: Option<f64>,
    pub round: u32,
}

/// Converts oha's JSON report. Requests cut off by oha's deadline (`-z`) are neither successes
/// nor failures of the server and are left out; any other error counts as bad.
pub fn from_oha(json: &str, meta: &OhaMeta) -> Result<Point, BoxError> {
    let r: OhaReport = serde_json::from_str(json)?;
    let mut ok = 0;
    let mut bad = 0;
    for (code, n) in &r.statuses {
        if code.starts_with('2') {
            ok += n;
        } else {
            bad += n;
        }
    }
    for (what, n) in &r.errors {
        if !what.contains("deadline") {
            bad += n;
        }
    }
    if ok == 0 || r.summary.total.is_nan() || r.summary.total <= 0.0 {
        return Err(format!(
            "oha reported no successful request (errors: {:?})",
            r.errors
        )
        .into());
    }
    let s_to_ms = |s: Option<f64>| s.map_or(f64::NAN, |v| v * 1e3);
    Ok(Point {
        target: meta.target.clone(),
        client: "oha".to_owned(),
        streams: meta.streams,
        connections: meta.connections,
        offered: meta.rate,
        round: meta.round,
        rate: ok as f64 / r.summary.total,
        p50_ms: s_to_ms(r.latency.p50),
        p99_ms: s_to_ms(r.latency.p99),
        p999_ms: s_to_ms(r.latency.p999),
        max_ms: s_to_ms(r.summary.slowest),
        ok,
        bad,
    })
}

/// Appends one point as a JSON line.
pub fn append(path: &Path, point: &Point) -> Result<(), BoxError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    writeln!(f, "{}", serde_json::to_string(point)?)?;
    Ok(())
}

/// Reads every point of a file.
pub fn read_all(path: &Path) -> Result<Vec<Point>, BoxError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names_match_the_regex_oha_is_given() {
        assert_eq!(stream_path(1, 0), "/v1/stream/n1-0");
        assert_eq!(stream_regex(1), "/v1/stream/n1-0");
        assert_eq!(stream_path(1000, 7), "/v1/stream/n1000-007");
        assert_eq!(stream_regex(1000), "/v1/stream/n1000-[0-9]{3}");
        assert_eq!(stream_path(100_000, 99_999), "/v1/stream/n100000-99999");
        assert_eq!(stream_regex(100_000), "/v1/stream/n100000-[0-9]{5}");
        assert_eq!(
            oha_url("http://127.0.0.1:9/", 1000),
            "http://127[.]0[.]0[.]1:9/v1/stream/n1000-[0-9]{3}"
        );
        assert_eq!(
            oha_url("http://127.0.0.1:9", 1),
            "http://127.0.0.1:9/v1/stream/n1-0"
        );
    }

    #[test]
    fn oha_json_counts_2xx_as_ok_and_leaves_out_deadline_cutoffs() {
        let json = r#"{"summary":{"successRate":1.0,"total":2.0,"slowest":0.01,"fastest":0.0001,
            "average":0.001,"requestsPerSec":100.0},
            "latencyPercentiles":{"p50":0.001,"p99":0.004,"p99.9":0.008},
            "statusCodeDistribution":{"204":180,"404":2},
            "errorDistribution":{"aborted due to deadline":32,"connection reset":1}}"#;
        let meta = OhaMeta {
            target: "t".into(),
            streams: 1,
            connections: 32,
            rate: None,
            round: 1,
        };
        let p = from_oha(json, &meta).expect("parses");
        assert_eq!(p.ok, 180);
        assert_eq!(p.bad, 3);
        assert!((p.rate - 90.0).abs() < 1e-9);
        assert!((p.p99_ms - 4.0).abs() < 1e-9);
        assert!((p.p999_ms - 8.0).abs() < 1e-9);
    }

    #[test]
    fn oha_json_without_a_success_is_an_error() {
        let json = r#"{"summary":{"total":2.0},"latencyPercentiles":{},
            "statusCodeDistribution":{"500":10}}"#;
        let meta = OhaMeta {
            target: "t".into(),
            streams: 1,
            connections: 1,
            rate: None,
            round: 1,
        };
        assert!(from_oha(json, &meta).is_err());
    }
}
