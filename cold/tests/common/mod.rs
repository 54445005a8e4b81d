//! Behaviour every backend must show. Each test file supplies a [`Fixture`] and instantiates
//! these with `behaviour_tests!`.

use bytes::Bytes;
use ursula_cold::{ColdError, ColdStore, FORMAT_EPOCH_MARKER};

/// Stores on one backend under different roots. Two stores from one fixture see the same
/// objects, whatever their roots.
pub trait Fixture {
    fn store(&self, root: &str) -> ColdStore;
}

/// Deterministic, incompressible-looking bytes, so that a shifted or truncated read shows.
pub fn pattern(len: usize, seed: u64) -> Bytes {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    Bytes::from(out)
}

/// Puts `body` at `key` in `store`, which must take it.
async fn put(store: &ColdStore, key: &str, body: &'static [u8]) {
    let put = store.put(key, Bytes::from_static(body)).await;
    put.unwrap_or_else(|e| panic!("put {key}: {e}"));
}

/// `got` must be the answer for a key with no object.
fn assert_not_found<T: std::fmt::Debug>(got: Result<T, ColdError>) {
    assert!(matches!(got, Err(ColdError::NotFound { .. })), "{got:?}");
}

pub async fn put_get_round_trip_is_byte_identical(f: &impl Fixture) {
    let store = f.store("rt");
    // 5 MiB + 3: above S3's multipart threshold and weed's 4 MiB chunking, not a round size.
    let cases = [
        ("empty", Bytes::new()),
        ("small", Bytes::from_static(b"hello cold tier")),
        ("big/object.bin", pattern(5 * 1024 * 1024 + 3, 7)),
    ];
    for (key, body) in &cases {
        store.put(key, body.clone()).await.expect("put");
    }
    for (key, body) in &cases {
        let got = store.get(key).await.expect("get");
        assert_eq!(got.len(), body.len(), "{key}: length");
        assert!(got == *body, "{key}: bytes differ");
    }
    // A second put replaces the object.
    put(&store, "small", b"v2").await;
    assert_eq!(store.get("small").await.expect("get v2"), "v2");
}

pub async fn get_range_returns_exactly_the_requested_bytes(f: &impl Fixture) {
    let store = f.store("range");
    let len: u64 = 5 * 1024 * 1024 + 3;
    let body = pattern(len as usize, 11);
    store.put("obj", body.clone()).await.expect("put");
    let four_mib = 4 * 1024 * 1024;
    let ranges = [
        0..1,
        0..100,
        1000..2000,
        // Across weed's 4 MiB chunk boundary.
        four_mib - 10..four_mib + 10,
        len - 1..len,
        len - 100..len,
        0..len,
    ];
    for range in ranges {
        let got = store
            .get_range("obj", range.clone())
            .await
            .unwrap_or_else(|e| panic!("range {range:?}: {e}"));
        let want = body.slice(range.start as usize..range.end as usize);
        assert!(got == want, "range {range:?}: bytes differ");
    }
    assert!(
        store
            .get_range("obj", 5..5)
            .await
            .expect("empty range")
            .is_empty()
    );
}

pub async fn get_range_past_the_end_is_an_invalid_range(f: &impl Fixture) {
    let store = f.store("range-end");
    put(&store, "obj", b"0123456789").await;
    for range in [5..11, 9..20, 10..11, 50..60] {
        match store.get_range("obj", range.clone()).await {
            Err(ColdError::InvalidRange { key, size, .. }) => {
                assert_eq!(key, "obj");
                assert_eq!(size, Some(10), "range {range:?}");
            }
            other => panic!("range {range:?}: expected InvalidRange, got {other:?}"),
        }
    }
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = 7..3;
    assert!(matches!(
        store.get_range("obj", inverted).await,
        Err(ColdError::InvalidRange { size: None, .. })
    ));
    assert_not_found(store.get_range("missing", 0..1).await);
}

pub async fn delete_then_get_is_not_found(f: &impl Fixture) {
    let store = f.store("del");
    put(&store, "a/b", b"x").await;
    store.delete("a/b").await.expect("delete");
    match store.get("a/b").await {
        Err(ColdError::NotFound { key, .. }) => assert_eq!(key, "a/b"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    store.delete("a/b").await.expect("deleting again is ok");
    store
        .delete("never-written")
        .await
        .expect("deleting a missing key is ok");
    assert_not_found(store.get("never-written").await);
    assert!(store.list("").await.expect("list").is_empty());
}

pub async fn list_by_prefix_returns_relative_keys(f: &impl Fixture) {
    let store = f.store("ls");
    for key in ["b1/s1/c1", "b1/s1/c2", "b1/s2/c1", "b10/s1/c1", "top"] {
        put(&store, key, b"x").await;
    }
    assert_eq!(
        store.list("").await.expect("list all"),
        ["b1/s1/c1", "b1/s1/c2", "b1/s2/c1", "b10/s1/c1", "top"]
    );
    // Whole segments: "b1" does not take in "b10".
    assert_eq!(
        store.list("b1").await.expect("list b1"),
        ["b1/s1/c1", "b1/s1/c2", "b1/s2/c1"]
    );
    assert_eq!(
        store.list("b1/s1/").await.expect("list b1/s1/"),
        ["b1/s1/c1", "b1/s1/c2"]
    );
    assert!(store.list("nothing").await.expect("list none").is_empty());
}

pub async fn the_root_prefix_is_applied(f: &impl Fixture) {
    let one = f.store("tenant-one/cold");
    let two = f.store("tenant-two");
    let whole = f.store("");
    put(&one, "k", b"one").await;
    assert_eq!(
        whole
            .get("tenant-one/cold/k")
            .await
            .expect("visible under root/"),
        "one"
    );
    assert!(
        whole
            .list("tenant-one")
            .await
            .expect("list")
            .contains(&"tenant-one/cold/k".to_owned())
    );
    assert_not_found(two.get("k").await);
    assert!(two.list("").await.expect("list two").is_empty());
    assert_eq!(one.list("").await.expect("list one"), ["k"]);
    assert!(
        one.describe().ends_with("/tenant-one/cold"),
        "{}",
        one.describe()
    );
}

pub async fn first_open_writes_the_marker_and_second_open_accepts_it(f: &impl Fixture) {
    let store = f.store("epoch-fresh");
    store.open_checked().await.expect("empty root");
    let marker = store
        .get(FORMAT_EPOCH_MARKER)
        .await
        .expect("marker written");
    assert_eq!(marker.as_ref(), b"3\n");
    store.open_checked().await.expect("second open");
    f.store("epoch-fresh")
        .open_checked()
        .await
        .expect("open by another store");
    // The marker is the layer's own: not listed, not writable through put/delete.
    put(&store, "data", b"x").await;
    assert_eq!(store.list("").await.expect("list"), ["data"]);
    store
        .open_checked()
        .await
        .expect("open with data and marker");
    assert!(matches!(
        store
            .put(FORMAT_EPOCH_MARKER, Bytes::from_static(b"4"))
            .await,
        Err(ColdError::InvalidKey { .. })
    ));
    assert!(matches!(
        store.delete(FORMAT_EPOCH_MARKER).await,
        Err(ColdError::InvalidKey { .. })
    ));
}

/// The nodes of a fresh cluster open one empty root at once: each either writes the marker or
/// finds another's, and none mistakes another's fresh marker for foreign data.
pub async fn nodes_opening_one_empty_root_at_once_all_accept_it(f: &impl Fixture) {
    for round in 0..5 {
        let root = format!("epoch-race-{round}");
        let opens: Vec<_> = (0..6)
            .map(|_| {
                let store = f.store(&root);
                tokio::spawn(async move { store.open_checked().await })
            })
            .collect();
        for (i, o) in opens.into_iter().enumerate() {
            let opened = o.await.expect("task");
            assert!(opened.is_ok(), "round {round}, node {i}: {opened:?}");
        }
    }
}

pub async fn a_root_with_objects_and_no_marker_is_refused(f: &impl Fixture) {
    let store = f.store("epoch-foreign");
    put(&store, "old/chunk", b"from 0.6").await;
    match store.open_checked().await {
        Err(err @ ColdError::FormatEpoch { found: None, .. }) => {
            let text = err.to_string();
            assert!(
                text.contains("is not empty and has no URSULA_FORMAT_EPOCH marker"),
                "{text}"
            );
            assert!(text.contains(&store.describe()), "{text}");
        }
        other => panic!("expected FormatEpoch without marker, got {other:?}"),
    }
    // Refused before writing anything.
    assert_not_found(store.get(FORMAT_EPOCH_MARKER).await);
    // The same with the whole bucket (an empty root) as the namespace.
    let whole = f.store("");
    assert!(matches!(
        whole.open_checked().await,
        Err(ColdError::FormatEpoch { found: None, .. })
    ));
    assert_not_found(whole.get(FORMAT_EPOCH_MARKER).await);
}

pub async fn a_marker_of_another_epoch_is_refused(f: &impl Fixture) {
    let parent = f.store("");
    put(&parent, "epoch-two/URSULA_FORMAT_EPOCH", b"2\n").await;
    let store = f.store("epoch-two");
    match store.open_checked().await {
        Err(err @ ColdError::FormatEpoch { .. }) => {
            let text = err.to_string();
            assert!(text.contains("is format epoch 2"), "{text}");
        }
        other => panic!("expected FormatEpoch 2, got {other:?}"),
    }
    assert_eq!(
        store.get(FORMAT_EPOCH_MARKER).await.expect("marker kept"),
        "2\n"
    );
}

pub async fn probe_answers_for_a_reachable_store(f: &impl Fixture) {
    let store = f.store("probe");
    store.probe().await.expect("probe before the marker exists");
    store.open_checked().await.expect("open");
    store.probe().await.expect("probe with the marker");
}

pub async fn malformed_keys_are_refused_before_any_request(f: &impl Fixture) {
    let store = f.store("keys");
    for key in ["", "/a", "a/", "a//b", "a/../b", "a/./b"] {
        assert!(
            matches!(
                store.put(key, Bytes::new()).await,
                Err(ColdError::InvalidKey { .. })
            ),
            "{key:?}"
        );
    }
}

/// One `#[tokio::test]` per behaviour above, with the fixture from `$fixture` (an async
/// expression).
#[macro_export]
macro_rules! behaviour_tests {
    ($fixture:expr) => {
        $crate::behaviour_tests!(@each $fixture;
            put_get_round_trip_is_byte_identical,
            get_range_returns_exactly_the_requested_bytes,
            get_range_past_the_end_is_an_invalid_range,
            delete_then_get_is_not_found,
            list_by_prefix_returns_relative_keys,
            the_root_prefix_is_applied,
            first_open_writes_the_marker_and_second_open_accepts_it,
            nodes_opening_one_empty_root_at_once_all_accept_it,
            a_root_with_objects_and_no_marker_is_refused,
            a_marker_of_another_epoch_is_refused,
            probe_answers_for_a_reachable_store,
            malformed_keys_are_refused_before_any_request,
        );
    };
    (@each $fixture:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let fixture = $fixture;
                common::$name(&fixture).await;
            }
        )*
    };
}
