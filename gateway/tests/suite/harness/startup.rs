//! A gateway that its flags stop at startup.

use std::process::Command;

use ursula_testkit::bins::ursula;

/// Runs `ursula gateway` in front of a dead upstream with `extra`, which must stop it at
/// startup, and returns what it wrote to stderr.
pub fn refused_gateway(extra: &[&str]) -> String {
    let out = Command::new(ursula())
        .args(["gateway", "--upstream", "http://127.0.0.1:1"])
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .output()
        .expect("run");
    assert!(!out.status.success(), "{extra:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
