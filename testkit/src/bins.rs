//! The binaries the tests run, found in the build that runs them.
//!
//! A test binary is `target/<profile>/deps/<test>-<hash>`; cargo puts the workspace's binaries
//! in `target/<profile>/`. A test of the server's package gets `ursula` built with it; a test of
//! another package finds whatever the last build of that profile left there, so
//! `cargo nextest run --workspace` (or `cargo build -p ursula -p ursula-ctl` first) keeps them
//! current.

use std::path::PathBuf;

/// `target/<profile>/`, from the running executable.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().expect("the executable's directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("target/<profile>").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

fn built(name: &str, package: &str) -> PathBuf {
    let bin = target_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{name} is not built at {}: build it with `cargo build -p {package}` in the same profile",
        bin.display()
    );
    bin
}

/// The `ursula` binary the tests run: this build's, or `URSULA_TEST_BIN`'s, to run a test
/// against another build (an older one, to show a regression test fails there).
pub fn ursula() -> PathBuf {
    std::env::var_os("URSULA_TEST_BIN").map_or_else(|| built("ursula", "ursula"), PathBuf::from)
}

/// This build's `ursulactl`.
pub fn ursulactl() -> PathBuf {
    built("ursulactl", "ursula-ctl")
}
