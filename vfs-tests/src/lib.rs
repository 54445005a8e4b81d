//! Test rig for the SQLite extension: the real `ursula` binary on a loopback port, a
//! fault-injecting HTTP proxy in front of it, and a bundled SQLite that loads the built
//! `libsqlite_ursula_vfs.so`. The processes are the workspace harness's (`ursula_testkit`).
//!
//! - [`server`]: start, stop and restart `ursula server`.
//! - [`access`]: `ursula gateway` with access control and quotas, and tokens for it.
//! - [`cluster`]: a 3-voter Raft cluster behind `ursula gateway`.
//! - [`proxy`]: the fault-injecting proxy.
//! - [`sqlite`]: connections with the extension loaded, attach and status helpers.
//! - [`owner`]: a database attached as a stream's owner, the setup most tests start from.
//! - [`child`]: a test that runs part of itself in a child process.

pub mod access;
pub mod child;
pub mod cluster;
pub mod owner;
pub mod proxy;
pub mod server;
pub mod sqlite;

// The workspace's test harness: the same port picks and build directory as the server's tests.
pub use ursula_testkit::bins::target_dir;
pub use ursula_testkit::ports::free_port;

/// Polls `ready` every 50 ms until it holds, failing with `what` after 20 s.
pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    ursula_testkit::cluster::wait_for(20, what, || ready().then_some(()));
}
