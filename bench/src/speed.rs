//! The markdown section of `scripts/bench-speed.sh`: ursula beside the machine's ceiling (a
//! hyper server answering `204`), each row taken by two load generators, latency at fixed
//! offered rates, and how throughput and p99 grow with streams and connections.
//!
//! Every cell is the median round of its point (by throughput), so one round's p99 is never
//! paired with another round's rate.

use std::fmt::Write as _;

use crate::idle_sse::IdleSse;
use crate::point::Point;
use crate::report::IdleRun;
use crate::report::Scenario;
use crate::report::fmt_int;

pub const CEILING: &str = "hyper-204";
pub const MEMORY: &str = "ursula-memory";
pub const NEVER: &str = "ursula-never";
pub const CLIENTS: [&str; 2] = ["ursula-bench", "oha"];

/// The speed section's aims, in one place so the text and the check agree.
const CEILING_AIM: f64 = 0.80;
const FIXED_P99_AIM_MS: f64 = 2.0;
const IDLE_STREAM_AIM_BYTES: f64 = 1024.0;
const FANOUT_P99_AIM_MS: f64 = 10.0;

/// What the run was, for the header.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub date: String,
    pub machine: String,
    pub build: String,
    pub command: String,
    pub rounds: u32,
    pub seconds: f64,
}

/// The median round of the points that `keep` selects, by rate.
fn median(points: &[Point], keep: impl Fn(&Point) -> bool) -> Option<&Point> {
    let mut found: Vec<&Point> = points.iter().filter(|p| keep(p)).collect();
    found.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    found.get(found.len().saturating_sub(1) / 2).copied()
}

/// The closed-loop point of a target, client, streams and connections.
fn closed<'a>(
    points: &'a [Point],
    target: &str,
    client: &str,
    streams: usize,
    connections: usize,
) -> Option<&'a Point> {
    median(points, |p| {
        p.target == target
            && p.client == client
            && p.streams == streams
            && p.connections == connections
            && p.offered.is_none()
    })
}

fn ms(x: f64) -> String {
    if !x.is_finite() {
        "n/a".to_owned()
    } else if x < 1.0 {
        format!("{x:.3}")
    } else if x < 100.0 {
        format!("{x:.2}")
    } else {
        fmt_int(x)
    }
}

fn rate_p99(p: Option<&Point>) -> String {
    p.map_or("not measured".to_owned(), |p| {
        format!("{}/s, p99 {}", fmt_int(p.rate), ms(p.p99_ms))
    })
}

fn pct(ours: Option<&Point>, ceiling: Option<&Point>) -> Option<f64> {
    let (o, c) = (ours?, ceiling?);
    (c.rate > 0.0).then(|| o.rate / c.rate)
}

fn fmt_pct(x: Option<f64>) -> String {
    x.map_or("n/a".to_owned(), |x| format!("{:.0}%", 100.0 * x))
}

/// A row of the fixed-rate table: `label` served `p`, offered at `share`% of a maximum.
fn fixed_row(s: &mut String, label: &str, share: u32, p: &Point) {
    let _ = writeln!(
        s,
        "| {label} | {share}% ({}/s) | {} | {} | {} | {} | {} | {} |",
        fmt_int(p.offered.unwrap_or_default()),
        p.client,
        fmt_int(p.rate),
        ms(p.p50_ms),
        ms(p.p99_ms),
        ms(p.p999_ms),
        ms(p.max_ms),
    );
}

/// A fan-out's rate and latencies, as one clause.
fn fanout_figures(f: &Scenario) -> String {
    format!(
        "{} deliveries/s, p50 {} ms, p99 {} ms, max {} ms",
        fmt_int(f.rate),
        ms(f.p50_us / 1000.0),
        ms(f.p99_us / 1000.0),
        ms(f.max_us / 1000.0)
    )
}

/// Each round's rate, in order.
fn rounds(f: &Scenario) -> String {
    f.rounds
        .iter()
        .map(|r| fmt_int(*r))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn name(target: &str) -> &str {
    match target {
        CEILING => "hyper, `204` (ceiling)",
        MEMORY => "ursula, in memory",
        NEVER => "ursula, durable, `fsync = \"never\"`",
        other => other,
    }
}

pub fn markdown(
    ctx: &Context,
    points: &[Point],
    idle: Option<&IdleRun>,
    idle_sse: Option<&IdleSse>,
    fanout: Option<&Scenario>,
    fanout_ceiling: Option<&Scenario>,
) -> String {
    let mut s = String::new();
    let mut aims = Vec::new();
    let _ = writeln!(s, "## Speed against the machine's ceiling (issue 19)\n");
    let _ = writeln!(
        s,
        "`{}`, {}, {}; {}. Each server is started fresh in each of {} round(s) and measured alone \
         on loopback; every point runs {} s and every cell is the round with the median \
         throughput. 100-byte `application/octet-stream` appends under `/v1/stream/`. Two load \
         generators take every row: `ursula-bench` (ours; hand-written HTTP/1.1, 2 Tokio threads, \
         1 s warm-up) and `oha` 1.16 (crates.io; hyper client, no warm-up, `--no-tui`). The \
         ceiling is a hyper server on Tokio answering `204` to every request after reading its \
         body (`ursula-bench ceiling`): what any server built on this HTTP stack reaches here \
         while the client shares the two cores. Latencies in ms.\n",
        ctx.command, ctx.date, ctx.machine, ctx.build, ctx.rounds, ctx.seconds,
    );

    // --- the ceiling -------------------------------------------------------------------------
    let _ = writeln!(
        s,
        "### Appends at 32 connections, as a fraction of the ceiling\n"
    );
    let _ = writeln!(
        s,
        "| streams | client | {} | {} | of ceiling | {} | of ceiling |",
        name(CEILING),
        name(MEMORY),
        name(NEVER)
    );
    let _ = writeln!(s, "| ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for streams in [1, 1000] {
        for client in CLIENTS {
            let c = closed(points, CEILING, client, streams, 32);
            let m = closed(points, MEMORY, client, streams, 32);
            let n = closed(points, NEVER, client, streams, 32);
            let _ = writeln!(
                s,
                "| {} | {client} | {} | {} | {} | {} | {} |",
                fmt_int(streams as f64),
                rate_p99(c),
                rate_p99(m),
                fmt_pct(pct(m, c)),
                rate_p99(n),
                fmt_pct(pct(n, c)),
            );
            for (target, ours) in [(MEMORY, m), (NEVER, n)] {
                if let Some(f) = pct(ours, c) {
                    aims.push(aim(
                        format!(
                            "{}, {} stream(s), {client}: {:.0}% of the ceiling (aim ≥ {:.0}%)",
                            name(target),
                            fmt_int(streams as f64),
                            100.0 * f,
                            100.0 * CEILING_AIM
                        ),
                        f >= CEILING_AIM,
                    ));
                }
            }
        }
    }
    s.push('\n');

    // --- fixed offered rates -----------------------------------------------------------------
    let _ = writeln!(
        s,
        "### Latency at fixed offered rates (1 stream, 32 connections)\n\n\
         The offered rate is a share of the same round's closed-loop maximum (`ursula-bench`). \
         `ursula-bench` times a request that had to wait for its connection from its scheduled \
         send time (no coordinated omission) and an on-time one from its write; `oha` runs with \
         `-q RATE --latency-correction`. Below each 50% row, the ceiling server of the same \
         round at the same offered rate: the tail this machine gives any server at that load, \
         with the client on the same two cores.\n"
    );
    let _ = writeln!(
        s,
        "| server | offered | client | achieved/s | p50 | p99 | p99.9 | max |"
    );
    let _ = writeln!(s, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for target in [MEMORY, NEVER] {
        // A round's offered rates are shares of that round's own maximum, so each point is
        // placed by its round's maximum, not by the median one.
        let share = |p: &Point| -> Option<u32> {
            let offered = p.offered?;
            let max = points
                .iter()
                .find(|m| {
                    m.target == target
                        && m.client == "ursula-bench"
                        && m.streams == 1
                        && m.connections == 32
                        && m.round == p.round
                        && m.offered.is_none()
                })?
                .rate;
            (max > 0.0).then(|| (100.0 * offered / max / 5.0).round() as u32 * 5)
        };
        let mut shares: Vec<u32> = points
            .iter()
            .filter(|p| p.target == target && p.streams == 1 && p.connections == 32)
            .filter_map(share)
            .collect();
        shares.sort_unstable();
        shares.dedup();
        for sh in shares {
            for client in CLIENTS {
                let p = median(points, |p| {
                    p.target == target
                        && p.client == client
                        && p.streams == 1
                        && p.connections == 32
                        && share(p) == Some(sh)
                });
                let Some(p) = p else { continue };
                fixed_row(&mut s, name(target), sh, p);
                if sh == 50 {
                    // The ceiling at the same offered rate in the same round, when it was
                    // measured: the tail this machine gives any server at that load.
                    let floor = points.iter().find(|c| {
                        c.target == CEILING
                            && c.client == client
                            && c.streams == 1
                            && c.connections == 32
                            && c.round == p.round
                            && c.offered.is_some()
                            && c.offered == p.offered
                    });
                    if let Some(c) = floor {
                        fixed_row(
                            &mut s,
                            &format!("{}, at the same rate", name(CEILING)),
                            sh,
                            c,
                        );
                    }
                    let beside = floor.map_or(String::new(), |c| {
                        format!("; the ceiling at the same rate: p99 {} ms", ms(c.p99_ms))
                    });
                    aims.push(aim(
                        format!(
                            "{} at 50% of its maximum, {client}: p99 {} ms (aim < {} ms{beside})",
                            name(target),
                            ms(p.p99_ms),
                            FIXED_P99_AIM_MS
                        ),
                        p.p99_ms < FIXED_P99_AIM_MS,
                    ));
                }
            }
        }
    }
    s.push('\n');

    // --- how cost grows ----------------------------------------------------------------------
    let _ = writeln!(
        s,
        "### How cost grows: ursula in memory, closed loop\n\n\
         | streams | connections | ursula-bench | oha |\n| ---: | ---: | ---: | ---: |"
    );
    let mut grid: Vec<(usize, usize)> = points
        .iter()
        .filter(|p| p.target == MEMORY && p.offered.is_none())
        .map(|p| (p.streams, p.connections))
        .collect();
    grid.sort_unstable();
    grid.dedup();
    for (streams, conns) in grid {
        let cell = |client| rate_p99(closed(points, MEMORY, client, streams, conns));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            fmt_int(streams as f64),
            fmt_int(conns as f64),
            cell("ursula-bench"),
            cell("oha")
        );
    }
    s.push('\n');
    if let Some(idle) = idle {
        let _ = writeln!(
            s,
            "Memory per idle stream (a fresh in-memory node, {} streams created with a 10-byte \
             `PUT` each, `VmRSS` growth divided by their count): {} B.\n",
            fmt_int(idle.streams as f64),
            fmt_int(idle.bytes_per_stream)
        );
        aims.push(aim(
            format!(
                "memory per idle stream: {} B (aim < 1 KiB)",
                fmt_int(idle.bytes_per_stream)
            ),
            idle.bytes_per_stream < IDLE_STREAM_AIM_BYTES,
        ));
    }

    if let Some(f) = fanout {
        let p99_ms = f.p99_us / 1000.0;
        let _ = writeln!(
            s,
            "{} (`ursula-bench load --only sse-fanout`, in memory): {} from just before the \
             append's `POST` to the event parsed by a subscriber (median round; rounds {}).\n",
            f.title,
            fanout_figures(f),
            rounds(f)
        );
        let mut beside = String::new();
        if let Some(c) = fanout_ceiling {
            let _ = writeln!(
                s,
                "The same fan-out against the ceiling server (`ursula-bench ceiling`: every \
                 `POST` becomes one event built once and queued to each held `GET`, which hyper \
                 writes as it would ursula's): {} (median round; rounds {}). ursula's p99 is \
                 {:.2}x the ceiling's.\n",
                fanout_figures(c),
                rounds(c),
                f.p99_us / c.p99_us.max(1.0)
            );
            beside = format!("; the ceiling's {} ms", ms(c.p99_us / 1000.0));
        }
        aims.push(aim(
            format!("{}: p99 {} ms{beside} (aim < 10 ms)", f.title, ms(p99_ms)),
            f.error.is_none() && p99_ms < FANOUT_P99_AIM_MS,
        ));
    }
    if let Some(sse) = idle_sse {
        let _ = writeln!(
            s,
            "Idle SSE subscribers (a fresh in-memory node, one `text/plain` stream, \
             `?offset=now&live=sse`): {} held, `VmRSS` {} KiB -> {} KiB, {} B per subscriber; one \
             append afterwards reached {} of them ({:.2} s until the client had read it on all).\n",
            fmt_int(sse.subscribers as f64),
            fmt_int(sse.rss_before_kib as f64),
            fmt_int(sse.rss_after_kib as f64),
            fmt_int(sse.bytes_per_subscriber),
            fmt_int(sse.delivered as f64),
            sse.delivery_s
        );
        aims.push(aim(
            format!(
                "{} idle SSE subscribers held and served: {} of them got the next append",
                fmt_int(sse.subscribers as f64),
                fmt_int(sse.delivered as f64)
            ),
            sse.delivered == sse.subscribers,
        ));
    }

    let bad: u64 = points.iter().map(|p| p.bad).sum();
    let _ = writeln!(
        s,
        "Failed requests over all points: {}.\n\n### Against the aims\n",
        fmt_int(bad as f64)
    );
    for a in aims {
        let _ = writeln!(s, "- {a}");
    }
    s
}

fn aim(text: String, met: bool) -> String {
    format!("{text} — {}", if met { "**met**" } else { "**missed**" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(target: &str, client: &str, streams: usize, offered: Option<f64>, rate: f64) -> Point {
        Point {
            target: target.into(),
            client: client.into(),
            streams,
            connections: 32,
            offered,
            round: 1,
            rate,
            p50_ms: 0.1,
            p99_ms: rate / 10_000.0,
            p999_ms: 1.0,
            max_ms: 2.0,
            ok: 1,
            bad: 0,
        }
    }

    fn fanout(p99_ms: f64) -> Scenario {
        Scenario {
            rate: 20_000.0,
            p50_us: p99_ms * 500.0,
            p99_us: p99_ms * 1000.0,
            max_us: p99_ms * 1200.0,
            samples: 100_000,
            rounds: vec![20_000.0],
            ..crate::scenarios::scenario(
                "sse-fanout",
                "SSE fan-out, 1,000 subscribers, 1 writer at 20/s",
                1000,
            )
        }
    }

    #[test]
    fn the_fan_out_reads_beside_the_ceiling_servers_and_the_aim_stays_absolute() {
        let (ours, ceiling) = (fanout(18.0), fanout(15.0));
        let md = markdown(
            &Context::default(),
            &[],
            None,
            None,
            Some(&ours),
            Some(&ceiling),
        );
        assert!(md.contains("ursula's p99 is 1.20x the ceiling's."), "{md}");
        assert!(
            md.contains("p99 18.00 ms; the ceiling's 15.00 ms (aim < 10 ms) — **missed**"),
            "{md}"
        );
        // Without the ceiling's run there is no comparison; under 10 ms the aim is met.
        let md = markdown(
            &Context::default(),
            &[],
            None,
            None,
            Some(&fanout(9.0)),
            None,
        );
        assert!(!md.contains("ceiling's"), "{md}");
        assert!(md.contains("p99 9.00 ms (aim < 10 ms) — **met**"), "{md}");
    }

    #[test]
    fn median_takes_the_middle_round_by_rate() {
        let points = vec![
            pt(MEMORY, "oha", 1, None, 30.0),
            pt(MEMORY, "oha", 1, None, 10.0),
            pt(MEMORY, "oha", 1, None, 20.0),
        ];
        let m = closed(&points, MEMORY, "oha", 1, 32).expect("a median");
        assert_eq!(m.rate, 20.0);
    }

    #[test]
    fn aims_report_the_fraction_of_the_ceiling_and_say_missed_below_it() {
        let points = vec![
            pt(CEILING, "ursula-bench", 1, None, 100_000.0),
            pt(MEMORY, "ursula-bench", 1, None, 50_000.0),
            pt(NEVER, "ursula-bench", 1, None, 90_000.0),
            pt(MEMORY, "ursula-bench", 1, Some(25_000.0), 25_000.0),
        ];
        let md = markdown(&Context::default(), &points, None, None, None, None);
        assert!(md.contains("ursula, in memory, 1 stream(s), ursula-bench: 50% of the ceiling"));
        assert!(md.contains("50% of the ceiling (aim ≥ 80%) — **missed**"));
        assert!(md.contains("90% of the ceiling (aim ≥ 80%) — **met**"));
        // The open-loop point is 50% of the in-memory maximum, with p99 2.5 ms: over the aim.
        assert!(md.contains("| ursula, in memory | 50% (25,000/s) | ursula-bench |"));
        assert!(md.contains("p99 2.50 ms (aim < 2 ms) — **missed**"));
    }

    #[test]
    fn the_ceiling_at_the_same_rate_and_round_stands_below_the_half_maximum_row() {
        let mut points = Vec::new();
        for round in [1, 2] {
            let max = 100_000.0 * f64::from(round);
            let mut closed = pt(MEMORY, "ursula-bench", 1, None, max);
            closed.round = round;
            let mut half = pt(MEMORY, "ursula-bench", 1, Some(max / 2.0), max / 2.0);
            half.round = round;
            half.p99_ms = 2.5;
            // The ceiling at this round's half-maximum rate; its p99 says which round it is.
            let mut floor = pt(CEILING, "ursula-bench", 1, Some(max / 2.0), max / 2.0);
            floor.round = round;
            floor.p99_ms = 1.0 + f64::from(round) / 10.0;
            points.extend([closed, half, floor]);
        }
        // Two rounds: the median by rate is the lower one, round 1.
        let md = markdown(&Context::default(), &points, None, None, None, None);
        let rows: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with("| hyper, `204` (ceiling), at the same rate"))
            .collect();
        assert_eq!(rows.len(), 1, "{md}");
        assert!(rows[0].contains("| 50% (50,000/s) |"), "{}", rows[0]);
        assert!(
            md.contains("p99 2.50 ms (aim < 2 ms; the ceiling at the same rate: p99 1.10 ms)"),
            "{md}"
        );
        // Without a ceiling point at that rate there is no such row and no comparison.
        points.retain(|p| !(p.target == CEILING && p.offered.is_some()));
        let md = markdown(&Context::default(), &points, None, None, None, None);
        assert!(!md.contains("at the same rate |"), "{md}");
        assert!(md.contains("p99 2.50 ms (aim < 2 ms) — **missed**"), "{md}");
    }

    #[test]
    fn open_loop_points_are_shares_of_their_own_rounds_maximum() {
        // Round 1 peaks at 100k/s and round 2 at 60k/s; each offers 50% of its own.
        let mut points = Vec::new();
        for (round, max) in [(1, 100_000.0), (2, 60_000.0)] {
            let mut closed = pt(NEVER, "ursula-bench", 1, None, max);
            closed.round = round;
            let mut open = pt(NEVER, "ursula-bench", 1, Some(max / 2.0), max / 2.0);
            open.round = round;
            points.extend([closed, open]);
        }
        let md = markdown(&Context::default(), &points, None, None, None, None);
        let rows: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with("| ursula, durable"))
            .collect();
        assert_eq!(rows.len(), 1, "one 50% row, not one per round: {rows:?}");
        assert!(rows[0].contains("| 50% ("), "{}", rows[0]);
    }
}
