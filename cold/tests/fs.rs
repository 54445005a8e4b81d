//! The behaviour tests on the local-directory backend (`storage.cold.backend = "fs"`).

mod common;

use std::path::PathBuf;

use tempfile::TempDir;
use ursula_cold::{BackendConfig, ColdConfig, ColdStore};

struct Dir(TempDir);

impl Dir {
    fn new() -> Self {
        Dir(tempfile::tempdir().expect("temp dir"))
    }

    fn config(dir: PathBuf, root: &str) -> ColdConfig {
        ColdConfig {
            backend: BackendConfig::Fs { dir },
            root: root.to_owned(),
        }
    }
}

impl common::Fixture for Dir {
    fn store(&self, root: &str) -> ColdStore {
        ColdStore::new(&Dir::config(self.0.path().to_path_buf(), root)).expect("fs store")
    }
}

behaviour_tests!(Dir::new());

#[tokio::test]
async fn objects_are_files_under_dir_and_root() {
    let tmp = Dir::new();
    let store = common::Fixture::store(&tmp, "cold/root");
    store
        .put("b/s/c1", bytes::Bytes::from_static(b"payload"))
        .await
        .expect("put");
    let file = tmp.0.path().join("cold/root/b/s/c1");
    assert_eq!(std::fs::read(&file).expect("file"), b"payload");
    assert_eq!(
        store.describe(),
        format!("file://{}/cold/root", tmp.0.path().display())
    );
}

#[tokio::test]
async fn a_missing_directory_is_created_on_first_open() {
    let tmp = Dir::new();
    let dir = tmp.0.path().join("not/yet");
    // Building the store does no I/O, so the directory may not exist yet.
    let store = ColdStore::new(&Dir::config(dir.clone(), "")).expect("store");
    store.probe().await.expect("probe");
    assert!(store.list("").await.expect("list").is_empty());
    store.open_checked().await.expect("open");
    assert!(dir.join("URSULA_FORMAT_EPOCH").is_file());
}

#[tokio::test]
async fn deleting_the_last_object_keeps_the_directory() {
    let tmp = Dir::new();
    let dir = tmp.0.path().join("cold");
    let store = ColdStore::new(&Dir::config(dir.clone(), "root")).expect("store");
    store
        .put("a/b/c", bytes::Bytes::from_static(b"x"))
        .await
        .expect("put");
    store.delete("a/b/c").await.expect("delete");
    assert!(dir.is_dir(), "the configured directory must survive");
    assert!(store.list("").await.expect("list").is_empty());
}
