//! Test rig for the SQLite extension: the real `ursula` binary on a loopback port, a
//! fault-injecting HTTP proxy in front of it, and a bundled SQLite that loads the built
//! `libsqlite_ursula_vfs.so`.
//!
//! - [`server`]: start, stop and restart `ursula server`.
//! - [`access`]: `ursula gateway` with access control and quotas, and tokens for it.
//! - [`cluster`]: a 3-voter Raft cluster behind `ursula gateway`.
//! - [`proxy`]: the fault-injecting proxy.
//! - [`sqlite`]: connections with the extension loaded, attach and status helpers.

pub mod access;
pub mod cluster;
pub mod proxy;
pub mod server;
pub mod sqlite;

use std::path::PathBuf;

/// `target/<profile>/`, found from the running binary: a test is `target/<profile>/deps/<test>`,
/// a binary `target/<profile>/<bin>`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("binary path");
    let dir = exe.parent().expect("binary directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("target/<profile>").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

// The server's test binary picks its ports the same way; one copy serves both crates.
#[path = "../../server/tests/suite/harness/ports.rs"]
mod ports;
pub use ports::free_port;
