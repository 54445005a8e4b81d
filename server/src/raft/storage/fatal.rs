//! How the journal stops the process when the disk fails it. A failed write or sync may have
//! lost pages the kernel will not report again, so nothing may go on as if the journal held
//! them: the hook records why (the run state that gates the groups at the next start), then
//! the process aborts. The write path and the flush-ahead thread both end here.

use std::sync::Arc;

/// Called once before the process stops on a journal I/O error.
pub type OnFatal = Arc<dyn Fn() + Send + Sync>;

/// Runs `on_fatal`, if any, and aborts.
pub fn stop(on_fatal: Option<&OnFatal>) -> ! {
    if let Some(f) = on_fatal {
        f();
    }
    std::process::abort();
}
