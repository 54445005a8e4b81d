//! The tests' scratch directories: gone once a test passes, kept when it panics, so a run
//! leaves nothing in the temp dir but the files of its failures.

mod scratch;
use scratch::Scratch;

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
