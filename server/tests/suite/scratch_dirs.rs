//! The tests' scratch directories: gone once a test passes, kept when it panics, so a run
//! leaves nothing in the temp dir but the files of its failures.

use std::path::Path;

use crate::harness::scratch::Scratch;

#[test]
fn a_scratch_directory_and_its_files_are_removed_when_the_guard_drops() {
    let scratch = Scratch::new("guard-drops");
    let file = scratch.file("node.log", "hello");
    std::fs::create_dir_all(scratch.join("wal/raft-log")).expect("a nested directory");
    let dir = scratch.to_path_buf();
    assert!(file.is_file() && dir.is_dir());
    assert!(
        dir.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("ursula-test-guard-drops-")),
        "named after the test: {}",
        dir.display()
    );
    drop(scratch);
    assert!(!dir.exists(), "{} is still there", dir.display());
}

#[test]
fn a_panicking_tests_scratch_directory_is_kept_with_its_files() {
    let (tx, rx) = std::sync::mpsc::channel();
    let joined = std::thread::spawn(move || {
        let scratch = Scratch::new("guard-panics");
        scratch.file("node.log", "what the failure left");
        tx.send(scratch.to_path_buf()).expect("send the path");
        panic!("the test fails");
    })
    .join();
    assert!(joined.is_err(), "the thread panicked");
    let dir = rx.recv().expect("the path");
    let kept = std::fs::read_to_string(dir.join("node.log"));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(kept.expect("the log is kept"), "what the failure left");
}

#[test]
fn an_isolated_command_runs_in_the_scratch_directory_with_its_home_config_and_temp_dir_there() {
    let scratch = Scratch::new("isolate");
    let mut cmd = std::process::Command::new("sh");
    cmd.args([
        "-c",
        "pwd -P; echo \"$HOME\"; echo \"$XDG_CONFIG_HOME\"; echo \"$TMPDIR\"",
    ]);
    let out = scratch.isolate(&mut cmd).output().expect("run sh");
    assert!(out.status.success());
    let dir = scratch.canonicalize().expect("canonical scratch path");
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(Path::new(&lines[0]), dir, "working directory");
    for (line, what) in lines[1..].iter().zip(["HOME", "XDG_CONFIG_HOME", "TMPDIR"]) {
        let got = Path::new(line).canonicalize().expect(what);
        assert_eq!(got, dir, "{what}");
    }
}
