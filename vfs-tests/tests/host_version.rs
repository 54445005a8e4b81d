//! Loaded into a SQLite older than the extension supports, it refuses with an error naming
//! both versions and never brings its host down. Debian 12's `sqlite3` CLI (3.40.1) is such a
//! host; `.ci/run` installs it.

use std::process::Command;

use ursula_vfs_tests::sqlite::extension_path;

fn version_number(text: &str) -> Option<u32> {
    let v = text.split_whitespace().next()?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some(parts.next()?? * 1_000_000 + parts.next()?? * 1000 + parts.next().flatten().unwrap_or(0))
}

#[test]
fn an_old_host_sqlite_gets_a_clean_refusal_naming_both_versions() {
    let version = Command::new("sqlite3")
        .arg("--version")
        .output()
        .expect("the sqlite3 CLI (apt-get install sqlite3)");
    let host = String::from_utf8_lossy(&version.stdout).to_string();
    let host_number = version_number(&host).expect("sqlite3 --version");
    let out = Command::new("sqlite3")
        .args([
            ":memory:",
            &format!(".load {}", extension_path().display()),
            "SELECT 42;",
        ])
        .output()
        .expect("run sqlite3");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_some(),
        "the host was killed by a signal: {:?}",
        out.status
    );
    if host_number < 3_045_003 {
        assert!(stderr.contains("needs SQLite 3.45.3 or later"), "{stderr}");
        let short = host.split_whitespace().next().unwrap_or_default();
        assert!(
            stderr.contains(&format!("this host runs SQLite {short}")),
            "{stderr}"
        );
    } else {
        assert!(out.status.success(), "a current host loads it: {stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
    }
}
