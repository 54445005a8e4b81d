//! Tests that run part of themselves in a child process: this test binary again, running one
//! test, which does its work only when the parent selected it (`URSULA_CHILD`) and otherwise
//! passes at once.

use std::path::Path;
use std::process::Command;

use rusqlite::Connection;

const CHILD: &str = "URSULA_CHILD";
const DB: &str = "URSULA_CHILD_DB";
const URL: &str = "URSULA_CHILD_URL";

/// This test binary running only `test`, selected, with the extension's log level at its
/// default.
pub fn command(test: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", test, "--nocapture"])
        .env(CHILD, test)
        .env_remove("URSULA_VFS_LOG");
    cmd
}

/// [`command`] for a child that owns the database `path` attached to `url` ([`attached`]).
pub fn owner_command(test: &str, path: &Path, url: &str) -> Command {
    let mut cmd = command(test);
    cmd.env(DB, path).env(URL, url);
    cmd
}

/// Runs `test` as a child with `env`, returning its stderr.
pub fn stderr(test: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = command(test);
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run child");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether this process is the child that runs `test`.
pub fn selected(test: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|t| t == test)
}

/// In the child of [`owner_command`]: the control connection and the database it names,
/// attached as the owner with the `notes` table. `None` in any other process.
pub fn attached(test: &str) -> Option<(Connection, Connection)> {
    if !selected(test) {
        return None;
    }
    let path = std::env::var(DB).expect("URSULA_CHILD_DB");
    let url = std::env::var(URL).expect("URSULA_CHILD_URL");
    let ctl = crate::sqlite::control();
    let db = crate::sqlite::open_owner(&ctl, Path::new(&path), &url);
    Some((ctl, db))
}
