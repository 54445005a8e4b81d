//! `runtime.cpu_affinity`: which CPU each core thread is pinned to. On Linux, `true` pins,
//! `false` never does, and unset pins only when the cpuset the process may run on has exactly
//! `runtime.core_count` CPUs (a container given that many cores): then each core thread keeps
//! its CPU, its caches and its groups' state together. With more CPUs than core threads the
//! kernel places them, since pinning would leave the other CPUs to everything else.

/// The CPUs the core threads are pinned to, one per core thread in order; `None` for none.
/// `allowed` is the process's cpuset, in CPU order.
pub fn plan(setting: Option<bool>, core_count: usize, allowed: &[usize]) -> Option<Vec<usize>> {
    let pin = match setting {
        Some(p) => p,
        None => allowed.len() == core_count,
    };
    if !pin || allowed.is_empty() {
        return None;
    }
    Some(
        (0..core_count)
            .map(|i| allowed[i % allowed.len()])
            .collect(),
    )
}

/// The CPUs this thread may run on, in order; empty where the platform does not say.
#[cfg(target_os = "linux")]
pub fn allowed() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|c| set.is_set(*c))
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(not(target_os = "linux"))]
pub fn allowed() -> Vec<usize> {
    Vec::new()
}

/// Pins the calling thread to `cpu`.
#[cfg(target_os = "linux")]
pub fn pin_current(cpu: usize) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
}

#[cfg(not(target_os = "linux"))]
pub fn pin_current(_cpu: usize) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "pinning threads is supported on Linux only",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_pins_only_when_the_cpuset_has_one_cpu_per_core_thread() {
        assert_eq!(plan(None, 2, &[0, 1]), Some(vec![0, 1]));
        assert_eq!(plan(None, 2, &[0, 1, 2, 3]), None);
        assert_eq!(plan(None, 2, &[5, 7]), Some(vec![5, 7]));
        assert_eq!(plan(Some(false), 2, &[0, 1]), None);
        // Forced: core threads past the cpuset's size share its CPUs in turn.
        assert_eq!(plan(Some(true), 3, &[2, 3]), Some(vec![2, 3, 2]));
        assert_eq!(plan(Some(true), 2, &[0, 1, 2, 3]), Some(vec![0, 1]));
        assert_eq!(plan(Some(true), 2, &[]), None);
    }

    #[test]
    fn this_thread_may_run_on_some_cpu() {
        assert!(!allowed().is_empty());
    }
}
