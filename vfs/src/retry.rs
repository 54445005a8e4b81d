//! The retry budget of a request to the stream (`URSULA_VFS_RETRY_MS`; docs/sqlite-vfs.md,
//! "Reads and the retry budget"): pauses from 50 ms, each twice the last up to 2 s, for as
//! long as the next pause ends within the budget.

use std::time::Duration;
use std::time::Instant;

use crate::settings;

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

pub struct Retry {
    budget: Duration,
    start: Instant,
    backoff: Duration,
}

impl Retry {
    /// A budget of `URSULA_VFS_RETRY_MS` from now.
    pub fn start() -> Retry {
        Retry {
            budget: Duration::from_millis(settings::get().retry_ms),
            start: Instant::now(),
            backoff: FIRST_BACKOFF,
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// The pause before the next attempt: the backoff, or `wait` when that is longer.
    pub fn pause(&self, wait: Duration) -> Duration {
        wait.max(self.backoff)
    }

    /// Whether `pause`, begun `elapsed` into the budget, would end past it.
    pub fn over(&self, elapsed: Duration, pause: Duration) -> bool {
        elapsed + pause > self.budget
    }

    /// Whether the next backoff would end past the budget: time to give up.
    pub fn spent(&self) -> bool {
        self.over(self.elapsed(), self.backoff)
    }

    /// Sleeps `pause`; the next backoff is twice the last.
    pub fn sleep(&mut self, pause: Duration) {
        std::thread::sleep(pause);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Sleeps the backoff; the next is twice as long.
    pub fn back_off(&mut self) {
        self.sleep(self.backoff);
    }
}
