//! Memory and CPU time of a process, from `/proc/<pid>/status` and `/proc/<pid>/stat`.

use std::time::Duration;
use std::time::Instant;

/// Linux reports CPU times in /proc in USER_HZ, which is 100 on every mainstream architecture.
const USER_HZ: f64 = 100.0;

/// Other processes using more than this many cores during a measurement disturb it.
pub const DISTURBED_CORES: f64 = 0.15;

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status_kib(&text, field)
}

fn parse_status_kib(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// User plus system CPU seconds a process has used so far (`self` for this process).
pub fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    parse_stat_cpu(&std::fs::read_to_string(path).ok()?)
}

fn parse_stat_cpu(text: &str) -> Option<f64> {
    // The command name (field 2) may contain spaces; fields after its closing paren are plain.
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// Idle CPU seconds of the whole machine so far (idle, iowait and steal of every core) and the
/// number of cores, from `/proc/stat`. Idle time is measured exactly on tickless kernels, while
/// the busy columns are sampled per tick and miss short bursts, so busy time is best derived
/// as `cores × wall time − idle`.
pub fn machine_idle() -> Option<(f64, usize)> {
    parse_machine_idle(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn parse_machine_idle(text: &str) -> Option<(f64, usize)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map_while(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …
    let idle = v.get(3..5)?.iter().sum::<f64>() + v.get(7)?;
    let cores = text
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    Some((idle / USER_HZ, cores))
}

/// Returns once the machine was below `threshold` busy cores for three seconds in a row, or
/// after `max_wait` with a warning.
pub fn wait_quiet(threshold: f64, max_wait: Duration) {
    let start = Instant::now();
    let mut quiet_secs = 0;
    let mut last = machine_idle();
    let mut busy = 0.0;
    while quiet_secs < 3 {
        if start.elapsed() >= max_wait {
            eprintln!(
                "ursula-bench: warning: the machine is still busy ({busy:.2} cores) after {max_wait:?}; measuring anyway"
            );
            return;
        }
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_secs(1));
        let now = machine_idle();
        busy = match (last, now) {
            (Some((a, _)), Some((b, cores))) => cores as f64 - (b - a) / t0.elapsed().as_secs_f64(),
            _ => return,
        };
        last = now;
        quiet_secs = if busy < threshold { quiet_secs + 1 } else { 0 };
    }
    if start.elapsed() > Duration::from_secs(5) {
        eprintln!(
            "ursula-bench: waited {:.0} s for other processes to finish",
            start.elapsed().as_secs_f64()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_fields() {
        let text = "Name:\tursula\nVmHWM:\t   12345 kB\nVmRSS:\t    678 kB\n";
        assert_eq!(parse_status_kib(text, "VmHWM"), Some(12345));
        assert_eq!(parse_status_kib(text, "VmRSS"), Some(678));
        assert_eq!(parse_status_kib(text, "VmSwap"), None);
    }

    #[test]
    fn parses_stat_cpu() {
        let text = "42 (a b) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1 2 3";
        assert_eq!(parse_stat_cpu(text), Some(3.0));
    }

    #[test]
    fn parses_machine_idle() {
        let text = "cpu  100 10 50 9000 5 3 7 20 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu1 1 2 3 4 5 6 7 8 0 0\nintr 5\n";
        assert_eq!(parse_machine_idle(text), Some((90.25, 2)));
    }

    #[test]
    fn reads_own_process() {
        assert!(cpu_seconds(None).is_some());
        assert!(machine_idle().is_some_and(|(_, cores)| cores > 0));
        assert!(status_kib(std::process::id(), "VmRSS").is_some_and(|k| k > 0));
    }
}
