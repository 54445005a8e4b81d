//! Python's pysqlite3 (a current SQLite, with extension loading) hosts the extension.

use std::path::PathBuf;
use std::process::Command;

use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::sqlite::extension_path;

/// A virtualenv with pysqlite3-binary under target/, made once.
fn python() -> PathBuf {
    let venv = ursula_vfs_tests::target_dir().join("pyvenv");
    let py = venv.join("bin/python");
    if !py.exists() {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "python3 -m venv failed");
    }
    let has = Command::new(&py)
        .args(["-c", "import pysqlite3"])
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        let ok = Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "pysqlite3-binary==0.5.4.post2",
            ])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "pip install pysqlite3-binary failed");
    }
    py
}

#[test]
fn pysqlite3_loads_the_extension_and_replicates_commits() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/pysqlite3_host.py");
    let out = Command::new(python())
        .arg(script)
        .arg(extension_path())
        .arg(format!("{}/demo/python", server.base()))
        .arg(dir.path().join("owner.db"))
        .arg(dir.path().join("copy.db"))
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" ok"), "{stdout}");
}
