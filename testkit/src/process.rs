//! Waiting on a child process: for its exit within a deadline, and for it to answer HTTP.

use std::process::Child;
use std::process::ExitStatus;
use std::time::Duration;
use std::time::Instant;

/// How `child` exited within `within`; `None` when it was still running then, and it is killed
/// and reaped.
pub fn exit_within(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `GET url` until its status passes `ready`; panics, naming `name` and showing `log()`,
/// when `child` exits first or nothing passed within `within`.
pub fn wait_answering(
    child: &mut Child,
    name: &str,
    url: &str,
    within: Duration,
    ready: impl Fn(u16) -> bool,
    log: impl Fn() -> String,
) {
    let deadline = Instant::now() + within;
    let quick = crate::http::agent(Duration::from_millis(500));
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{name} exited early with {status}: {}", log());
        }
        if crate::http::request(&quick, "GET", url, &[], b"").is_ok_and(|(s, _, _)| ready(s)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not ready within {within:?}: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}
