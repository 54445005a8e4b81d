//! The behaviour tests on the in-memory backend. Stores of one fixture share one backend through
//! `ColdStore::with_root`, since each `BackendConfig::Memory` store is a memory of its own.

mod common;

use ursula_cold::{BackendConfig, ColdConfig, ColdStore};

struct Memory(ColdStore);

impl Memory {
    fn new() -> Self {
        let cfg = ColdConfig {
            backend: BackendConfig::Memory,
            root: String::new(),
        };
        Memory(ColdStore::new(&cfg).expect("memory store"))
    }
}

impl common::Fixture for Memory {
    fn store(&self, root: &str) -> ColdStore {
        self.0.with_root(root).expect("root")
    }
}

behaviour_tests!(Memory::new());

#[tokio::test]
async fn separate_memory_stores_share_nothing() {
    let cfg = ColdConfig {
        backend: BackendConfig::Memory,
        root: "r".into(),
    };
    let a = ColdStore::new(&cfg).expect("a");
    let b = ColdStore::new(&cfg).expect("b");
    a.put("k", bytes::Bytes::from_static(b"x"))
        .await
        .expect("put");
    assert!(b.list("").await.expect("list").is_empty());
    assert_eq!(a.describe(), "memory://r");
}
