//! `runtime.node_memory_abort_cap_size`: an emergency stop, not admission control. Once the
//! process's resident memory passes the cap it logs why and calls `abort()`, as an OOM kill
//! would end it but with the reason in the log: no leadership handoff, no `503`, and the next
//! start treats the run as a crash. Write admission and backpressure are what keep a node
//! below it; the cap is for a leak or a bug that gets past them, before the container's own
//! limit kills the process with no word.

use std::time::Duration;

/// How often the resident size is read.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// The process's resident memory in bytes, from `/proc/self/statm` (Linux); `None` elsewhere
/// or when it cannot be read.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages.saturating_mul(page_size()))
}

#[cfg(target_os = "linux")]
fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

#[cfg(not(target_os = "linux"))]
fn page_size() -> u64 {
    4096
}

/// Whether `resident` is past `cap`.
pub fn over(resident: u64, cap: u64) -> bool {
    resident > cap
}

/// Samples the resident size on a thread of its own (a stuck runtime must not hide a leak)
/// and aborts the process once it passes `cap`.
pub fn spawn(cap: u64) {
    if resident_bytes().is_none() {
        tracing::warn!(
            "runtime.node_memory_abort_cap_size is set, but this platform does not report the process's resident memory: no cap"
        );
        return;
    }
    let started = std::thread::Builder::new()
        .name("ursula-memcap".into())
        .spawn(move || {
            loop {
                if let Some(resident) = resident_bytes()
                    && over(resident, cap)
                {
                    tracing::error!(
                        resident,
                        cap,
                        "resident memory is past runtime.node_memory_abort_cap_size: aborting the process (no leadership handoff; the next start treats this run as a crash)"
                    );
                    std::process::abort();
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
    if let Err(e) = started {
        tracing::error!(error = %e, "cannot start the memory cap's sampler: no cap");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_size_is_read_and_only_more_than_the_cap_is_over_it() {
        let r = resident_bytes().expect("Linux reports it");
        assert!(r > 1 << 20, "{r}");
        assert!(!over(r, r));
        assert!(over(r + 1, r));
    }
}
