//! Result files (JSON, one per server and run kind) and the markdown report built from them.

use std::fmt::Write as _;

use serde::Deserialize;
use serde::Serialize;

use crate::procfs::DISTURBED_CORES;

/// One measured scenario against one server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scenario {
    /// Stable identifier (`append-1-c32`), used to pair the two servers' rows.
    pub key: String,
    pub title: String,
    pub connections: usize,
    /// Successful requests (or SSE deliveries) per second over the measured window.
    pub rate: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub samples: u64,
    /// Responses that were not 2xx (or had the wrong body length); SSE: undelivered events.
    pub bad: u64,
    pub note: Option<String>,
    /// Set when the scenario could not run to the end; the numbers are then meaningless.
    pub error: Option<String>,
    /// Cores' worth of CPU the server and this client used during the scenario (warm-up
    /// included), from /proc/<pid>/stat.
    pub server_cores: Option<f64>,
    pub client_cores: Option<f64>,
    /// Busy cores of the whole machine (kernel interrupt work included) over the same span.
    #[serde(default)]
    pub machine_cores: Option<f64>,
    /// What the rest of the machine used meanwhile (machine minus server and client): more than a
    /// few hundredths means other processes disturbed the measurement.
    #[serde(default)]
    pub other_cores: Option<f64>,
    /// Throughput of every round, when several rounds were merged into this row.
    #[serde(default)]
    pub rounds: Vec<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadRun {
    pub server: String,
    pub scenarios: Vec<Scenario>,
    /// VmHWM of the server after the load scenarios.
    pub peak_rss_kib: Option<u64>,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub client_threads: usize,
    /// How many runs were merged into this one.
    #[serde(default = "one")]
    pub rounds: usize,
}

fn one() -> usize {
    1
}

/// Merges rounds of the same server: each scenario becomes its median-throughput round among
/// the undisturbed ones (so its latencies come from one real run), peak RSS the highest of all
/// rounds.
pub fn merge_load(runs: Vec<LoadRun>) -> Option<LoadRun> {
    let rounds = runs.len();
    let peak = runs.iter().filter_map(|r| r.peak_rss_kib).max();
    let mut merged = runs.first()?.clone();
    merged.scenarios = merged
        .scenarios
        .iter()
        .map(|first| {
            let mut all: Vec<Scenario> = runs
                .iter()
                .filter_map(|r| r.scenarios.iter().find(|s| s.key == first.key).cloned())
                .collect();
            let rates: Vec<f64> = all
                .iter()
                .map(|s| if usable(s) { s.rate } else { 0.0 })
                .collect();
            // Rounds other processes disturbed only count when every round was disturbed.
            if all.iter().any(|s| !disturbed(s)) {
                all.retain(|s| !disturbed(s));
            }
            all.sort_by(|a, b| {
                (usable(a), a.rate)
                    .partial_cmp(&(usable(b), b.rate))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            let mut pick = if all.is_empty() {
                first.clone()
            } else {
                all.swap_remove(all.len() / 2)
            };
            pick.rounds = rates;
            pick
        })
        .collect();
    merged.peak_rss_kib = peak;
    merged.rounds = rounds;
    Some(merged)
}

/// The median round by bytes per stream.
pub fn merge_idle(mut runs: Vec<IdleRun>) -> Option<IdleRun> {
    runs.sort_by(|a, b| a.bytes_per_stream.total_cmp(&b.bytes_per_stream));
    let mid = runs.len() / 2;
    (!runs.is_empty()).then(|| runs.swap_remove(mid))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdleRun {
    pub server: String,
    pub streams: usize,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub bytes_per_stream: f64,
    pub creates_per_s: f64,
}

/// Everything the report shows besides the measurements.
#[derive(Debug, Clone)]
pub struct Context {
    pub date: String,
    pub machine: String,
    pub command: String,
    pub servers: String,
}

/// The report's aims (docs/benchmarks.md, "Reading the comparison").
const AIM_RATIO: f64 = 10.0;
const AIM_P99_US: f64 = 5_000.0;
const AIM_IDLE_BYTES: f64 = 2_048.0;

pub fn markdown(
    ctx: &Context,
    ours: &LoadRun,
    reference: &LoadRun,
    our_idle: &IdleRun,
    ref_idle: &IdleRun,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Benchmarks: ursula and the Durable Streams reference server\n"
    );
    let _ = writeln!(
        s,
        "`scripts/bench.sh` builds `ursula` and `ursula-bench` in release mode, then starts each server in turn \
         on a loopback port (never both at once) and drives it with the same load from `ursula-bench`, a Rust \
         load generator with one keep-alive HTTP/1.1 connection per task and hand-written requests. Every \
         request and every SSE delivery is timed into an HDR histogram at nanosecond resolution. Closed-loop \
         scenarios send the next request as soon as the previous response is read; each runs {} s of warm-up, \
         then {} s measured. All bodies are 100 bytes of `application/octet-stream` under `/v1/stream/{{name}}`. \
         The whole run is repeated {} times, each round against freshly started servers, and every row shows \
         the round with the median throughput (the per-round numbers are in the details). A scenario during \
         which other processes used the CPU is run again once the machine is quiet (three attempts at \
         most), and undisturbed rounds take precedence. The client and the server share the machine's two \
         cores, so every number includes the client's CPU cost and the kernel's loopback TCP work; the \
         `cores` columns in the details show how the CPU was split. With one connection, every request \
         waits for a sleeping thread of the other side to wake up, which on a virtual machine costs tens of \
         microseconds and varies between runs; the 1-connection rows measure that more than the servers. \
         Peak RSS \
         is the server's `VmHWM` after the load scenarios; idle-stream memory is measured on a fresh server \
         process as the `VmRSS` growth from creating {} streams with a 10-byte `PUT` each, divided by their \
         count.\n",
        fmt_num(ours.warmup_s),
        fmt_num(ours.duration_s),
        ours.rounds,
        fmt_int(our_idle.streams as f64),
    );
    let _ = writeln!(s, "- Date: {}", ctx.date);
    let _ = writeln!(s, "- Machine: {}", ctx.machine);
    let _ = writeln!(s, "- Servers: {}", ctx.servers);
    let _ = writeln!(
        s,
        "- Client: `ursula-bench`, {} Tokio worker threads",
        ours.client_threads
    );
    let _ = writeln!(s, "- Command: `{}`\n", ctx.command);

    let _ = writeln!(s, "## Throughput and latency\n");
    let _ = writeln!(
        s,
        "| scenario | ursula req/s | p50 | p99 | reference req/s | p50 | p99 | ratio |"
    );
    let _ = writeln!(
        s,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for ours_sc in &ours.scenarios {
        let theirs = reference.scenarios.iter().find(|r| r.key == ours_sc.key);
        let ratio = match theirs {
            Some(t) if usable(t) && usable(ours_sc) && t.rate > 0.0 => {
                format!("{:.1}×", ours_sc.rate / t.rate)
            }
            _ => "–".to_owned(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {ratio} |",
            ours_sc.title,
            cells(Some(ours_sc)) + " | " + &cells(theirs)
        );
    }
    let _ = writeln!(
        s,
        "\nSSE fan-out: \"req/s\" is deliveries per second (appends × subscribers); latency runs from just \
         before the append's `POST` is written to the moment a subscriber has parsed the event. Latencies \
         are in milliseconds.\n"
    );

    let _ = writeln!(s, "## Memory\n");
    let _ = writeln!(s, "| measure | ursula | reference | ursula / reference |");
    let _ = writeln!(s, "| --- | ---: | ---: | ---: |");
    let (a, b) = (ours.peak_rss_kib, reference.peak_rss_kib);
    let _ = writeln!(
        s,
        "| peak RSS during the load scenarios (VmHWM) | {} | {} | {} |",
        a.map_or("–".into(), fmt_kib),
        b.map_or("–".into(), fmt_kib),
        match (a, b) {
            (Some(a), Some(b)) if b > 0 => format!("{:.2}", a as f64 / b as f64),
            _ => "–".into(),
        }
    );
    let _ = writeln!(
        s,
        "| RSS of an empty server → after {} idle streams | {} → {} | {} → {} | |",
        fmt_int(our_idle.streams as f64),
        fmt_kib(our_idle.rss_before_kib),
        fmt_kib(our_idle.rss_after_kib),
        fmt_kib(ref_idle.rss_before_kib),
        fmt_kib(ref_idle.rss_after_kib),
    );
    let _ = writeln!(
        s,
        "| memory per idle stream | {} B | {} B | {:.2} |",
        fmt_int(our_idle.bytes_per_stream),
        fmt_int(ref_idle.bytes_per_stream),
        ratio(our_idle.bytes_per_stream, ref_idle.bytes_per_stream),
    );
    let _ = writeln!(
        s,
        "| stream creation rate (32 connections) | {}/s | {}/s | {:.1}× |\n",
        fmt_int(our_idle.creates_per_s),
        fmt_int(ref_idle.creates_per_s),
        ratio(our_idle.creates_per_s, ref_idle.creates_per_s),
    );

    let _ = writeln!(s, "## Aims (tracker point 8)\n");
    for line in aims(ours, reference, our_idle) {
        let _ = writeln!(s, "- {line}");
    }
    let disturbed: Vec<String> = [ours, reference]
        .iter()
        .flat_map(|run| {
            run.scenarios.iter().filter(|sc| disturbed(sc)).map(|sc| {
                format!(
                    "{} ({}, {:.2} cores)",
                    sc.title,
                    run.server,
                    sc.other_cores.unwrap_or_default()
                )
            })
        })
        .collect();
    if !disturbed.is_empty() {
        let _ = writeln!(
            s,
            "\n**Warning:** other processes used CPU during these measurements, so they understate the \
             servers: {}.",
            disturbed.join("; ")
        );
    }

    let _ = writeln!(s, "\n## Details\n");
    let _ = writeln!(
        s,
        "`cores`: CPU the server process, the client process and the whole machine (all cores minus \
         idle time) used during the scenario, warm-up included, divided by its wall time; 2.00 is a \
         saturated machine. Kernel work (loopback TCP) is mostly charged to the process it ran for. \
         `other cores` is the machine minus server and client, i.e. other processes; it should be near \
         0. `bad`: non-2xx responses or wrong body lengths (SSE: deliveries that never arrived). \
         `rounds`: throughput of each round, in thousands per second.\n"
    );
    let _ = writeln!(
        s,
        "| scenario | server | samples | bad | max ms | rounds (k/s) | server cores | client cores | machine cores \
         | other cores | note |"
    );
    let _ = writeln!(
        s,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    );
    let opt = |c: Option<f64>| c.map_or("–".into(), |c| format!("{c:.2}"));
    for run in [ours, reference] {
        for sc in &run.scenarios {
            let note = match (&sc.error, &sc.note) {
                (Some(e), _) => format!("FAILED: {e}"),
                (None, Some(n)) => n.clone(),
                (None, None) => String::new(),
            };
            let rounds: Vec<String> = sc
                .rounds
                .iter()
                .map(|r| format!("{:.1}", r / 1000.0))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                sc.title,
                run.server,
                fmt_int(sc.samples as f64),
                fmt_int(sc.bad as f64),
                fmt_ms(sc.max_us),
                rounds.join(" / "),
                opt(sc.server_cores),
                opt(sc.client_cores),
                opt(sc.machine_cores),
                opt(sc.other_cores),
                note.replace('|', "/"),
            );
        }
    }
    s
}

fn disturbed(sc: &Scenario) -> bool {
    sc.other_cores.is_some_and(|c| c > DISTURBED_CORES)
}

fn usable(sc: &Scenario) -> bool {
    sc.error.is_none() && sc.samples > 0
}

fn cells(sc: Option<&Scenario>) -> String {
    match sc {
        Some(sc) if usable(sc) => format!(
            "{} | {} | {}",
            fmt_int(sc.rate),
            fmt_ms(sc.p50_us),
            fmt_ms(sc.p99_us)
        ),
        Some(_) => "failed | – | –".to_owned(),
        None => "– | – | –".to_owned(),
    }
}

fn aims(ours: &LoadRun, reference: &LoadRun, idle: &IdleRun) -> Vec<String> {
    let verdict = |ok: bool| if ok { "**met**" } else { "**missed**" };
    let mut out = Vec::new();
    for key in ["append-1-c32", "append-1000-c32"] {
        let a = ours.scenarios.iter().find(|s| s.key == key && usable(s));
        let b = reference
            .scenarios
            .iter()
            .find(|s| s.key == key && usable(s));
        if let (Some(a), Some(b)) = (a, b) {
            let r = ratio(a.rate, b.rate);
            out.push(format!(
                "{}: {:.1}× the reference's throughput (aim ≥ {AIM_RATIO}×) — {}",
                a.title,
                r,
                verdict(r >= AIM_RATIO)
            ));
        }
    }
    let worst = ours
        .scenarios
        .iter()
        .filter(|s| usable(s))
        .max_by(|a, b| a.p99_us.total_cmp(&b.p99_us));
    if let Some(w) = worst {
        out.push(format!(
            "ursula's worst p99 is {} ms ({}) (aim < 5 ms in every scenario) — {}",
            fmt_ms(w.p99_us),
            w.title,
            verdict(w.p99_us < AIM_P99_US)
        ));
    }
    out.push(format!(
        "memory per idle stream: {} B (aim < 2 KiB) — {}",
        fmt_int(idle.bytes_per_stream),
        verdict(idle.bytes_per_stream < AIM_IDLE_BYTES)
    ));
    out
}

/// `ours` over `reference`; 0 when the reference measured nothing.
fn ratio(ours: f64, reference: f64) -> f64 {
    if reference > 0.0 {
        ours / reference
    } else {
        0.0
    }
}

fn fmt_ms(us: f64) -> String {
    let ms = us / 1000.0;
    if ms < 1.0 {
        format!("{ms:.3}")
    } else if ms < 100.0 {
        format!("{ms:.2}")
    } else {
        fmt_int(ms)
    }
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// A rounded number with thousands separators.
pub fn fmt_int(x: f64) -> String {
    let n = x.round();
    let digits = format!("{:.0}", n.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0.0 { format!("-{out}") } else { out }
}

fn fmt_kib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc(key: &str, rate: f64, p99_us: f64) -> Scenario {
        Scenario {
            key: key.into(),
            title: key.into(),
            connections: 1,
            rate,
            p50_us: p99_us / 2.0,
            p99_us,
            max_us: p99_us,
            samples: 10,
            bad: 0,
            note: None,
            error: None,
            server_cores: Some(1.0),
            client_cores: None,
            machine_cores: None,
            other_cores: None,
            rounds: vec![rate],
        }
    }

    #[test]
    fn number_formatting() {
        assert_eq!(fmt_int(1234567.4), "1,234,567");
        assert_eq!(fmt_int(999.0), "999");
        assert_eq!(fmt_int(-1000.0), "-1,000");
        assert_eq!(fmt_ms(42.0), "0.042");
        assert_eq!(fmt_ms(4200.0), "4.20");
        assert_eq!(fmt_ms(420_000.0), "420");
    }

    #[test]
    fn report_has_ratio_and_verdicts() {
        let run = |name: &str, rate| LoadRun {
            server: name.into(),
            scenarios: vec![sc("append-1-c32", rate, 900.0)],
            peak_rss_kib: Some(2048),
            warmup_s: 1.0,
            duration_s: 5.0,
            client_threads: 2,
            rounds: 1,
        };
        let idle = IdleRun {
            server: "x".into(),
            streams: 100_000,
            rss_before_kib: 1000,
            rss_after_kib: 2000,
            bytes_per_stream: 1024.0,
            creates_per_s: 5000.0,
        };
        let ctx = Context {
            date: "d".into(),
            machine: "m".into(),
            command: "c".into(),
            servers: "s".into(),
        };
        let md = markdown(
            &ctx,
            &run("ursula", 40_000.0),
            &run("reference", 4_000.0),
            &idle,
            &idle,
        );
        assert!(
            md.contains(
                "| append-1-c32 | 40,000 | 0.450 | 0.900 | 4,000 | 0.450 | 0.900 | 10.0× |"
            ),
            "{md}"
        );
        assert!(
            md.contains("10.0× the reference's throughput (aim ≥ 10×) — **met**"),
            "{md}"
        );
        assert!(
            md.contains("memory per idle stream: 1,024 B (aim < 2 KiB) — **met**"),
            "{md}"
        );
    }

    #[test]
    fn merge_picks_the_median_undisturbed_round() {
        let run = |rates: [f64; 2]| LoadRun {
            server: "x".into(),
            scenarios: vec![sc("a", rates[0], 100.0), sc("b", rates[1], 200.0)],
            peak_rss_kib: Some(rates[0] as u64),
            warmup_s: 1.0,
            duration_s: 5.0,
            client_threads: 2,
            rounds: 1,
        };
        let mut failed = run([5.0, 5.0]);
        failed.scenarios[1].error = Some("boom".into());
        let m = merge_load(vec![run([1.0, 30.0]), failed, run([9.0, 20.0])]).expect("merged");
        assert_eq!(m.rounds, 3);
        assert_eq!(m.peak_rss_kib, Some(9));
        assert_eq!(m.scenarios[0].rate, 5.0);
        assert_eq!(m.scenarios[0].rounds, vec![1.0, 5.0, 9.0]);
        assert_eq!(m.scenarios[1].rate, 20.0);
        assert_eq!(m.scenarios[1].rounds, vec![30.0, 0.0, 20.0]);

        let mut noisy = run([7.0, 7.0]);
        noisy.scenarios[0].other_cores = Some(1.0);
        let m = merge_load(vec![noisy, run([3.0, 3.0])]).expect("merged");
        assert_eq!(
            m.scenarios[0].rate, 3.0,
            "the disturbed round is passed over"
        );
        assert_eq!(m.scenarios[1].rate, 7.0);
    }
}
