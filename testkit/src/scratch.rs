//! Scratch directories for the server's test binary: one per test, `ursula-test-{name}-…`
//! in the temp dir, removed when its guard drops.
//!
//! A suite of several hundred tests that start real nodes left as many directories of WAL
//! segments, logs and configs behind on every run when each test made its own and forgot it.
//! A test that panics keeps its directory, named on stderr, for the logs and WAL in it; so does
//! every test when `URSULA_TEST_KEEP_DIRS` is set. Whatever writes into the directory (a node
//! process) must be gone before the guard drops: declare the guard first, so it drops last, or
//! put it after the processes in a struct, whose fields drop in order.

#![allow(dead_code)]

use std::path::Path;
use std::path::PathBuf;
use std::process::Command;

pub struct Scratch(tempfile::TempDir);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ursula-test-{name}-"))
            .tempdir()
            .expect("a scratch directory");
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Keeps the directory when the guard drops, for a run that failed without a panic.
    pub fn keep(&mut self) {
        self.0.disable_cleanup(true);
        eprintln!("scratch directory kept: {}", self.0.path().display());
    }

    /// Runs `cmd` inside the directory: its working directory, `HOME` and `XDG_CONFIG_HOME`
    /// (so no config file of this machine's user reaches a test's node) and `TMPDIR` (a node
    /// without `raft.wal.path` keeps its WAL in the temp dir and removes it only on a clean
    /// stop; the tests kill nodes, so that WAL belongs here).
    pub fn isolate<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        let dir = self.path();
        cmd.current_dir(dir)
            .env("HOME", dir)
            .env("XDG_CONFIG_HOME", dir)
            .env("TMPDIR", dir)
    }

    /// Writes `text` to the file `name` in the directory and returns its path.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.join(name);
        std::fs::write(&p, text).expect("write scratch file");
        p
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("URSULA_TEST_KEEP_DIRS").is_some() {
            self.0.disable_cleanup(true);
            eprintln!("scratch directory kept: {}", self.0.path().display());
        }
    }
}
