//! The behaviour tests against a real S3 server (SeaweedFS `weed mini`, one per test), and what
//! only S3 has: missing buckets, credentials, SSE headers, a store that dies or hangs.
//! Needs `scripts/install-s3.sh` (or `URSULA_WEED`).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ursula_cold::testing::{self, SeaweedFs};
use ursula_cold::{BackendConfig, ColdConfig, ColdError, ColdStore, S3Config, Sse};

struct Weed(SeaweedFs);

impl Weed {
    async fn start() -> Self {
        let weed = SeaweedFs::start().await;
        eprintln!("weed mini ready in {:?}", weed.startup_time());
        Weed(weed)
    }
}

impl common::Fixture for Weed {
    fn store(&self, root: &str) -> ColdStore {
        self.0.store(root)
    }
}

behaviour_tests!(Weed::start().await);

fn store_with(backend: BackendConfig, root: &str) -> ColdStore {
    ColdStore::new(&ColdConfig {
        backend,
        root: root.to_owned(),
    })
    .expect("store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_names_bucket_and_root() {
    let weed = SeaweedFs::start().await;
    assert_eq!(
        weed.store("ursula-test-20261129").describe(),
        "s3://ursula-test/ursula-test-20261129"
    );
    assert_eq!(weed.store("").describe(), "s3://ursula-test");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_is_named_by_open_probe_and_put() {
    let weed = SeaweedFs::start().await;
    let mut backend = weed.backend();
    match &mut backend {
        BackendConfig::S3(s3) => s3.bucket = "no-such-bucket".into(),
        other => panic!("not s3: {other:?}"),
    }
    let store = store_with(backend, "root");
    for result in [
        store.open_checked().await,
        store.probe().await,
        store.put("k", Bytes::from_static(b"x")).await,
    ] {
        match result {
            Err(err @ ColdError::BucketMissing { .. }) => {
                assert!(err.to_string().contains("\"no-such-bucket\""), "{err}");
            }
            other => panic!("expected BucketMissing, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_denied() {
    let weed = SeaweedFs::start().await;
    let backend = BackendConfig::S3(S3Config {
        endpoint: Some(weed.endpoint()),
        access_key_id: Some(testing::ACCESS_KEY_ID.into()),
        secret_access_key: Some("not-the-secret".into()),
        sse: Sse::None,
        ..S3Config::bucket(testing::BUCKET)
    });
    let store = store_with(backend, "");
    match store.put("k", Bytes::from_static(b"x")).await {
        Err(err @ ColdError::Denied { .. }) => {
            assert!(err.to_string().contains("s3:PutObject"), "{err}");
        }
        other => panic!("expected Denied, got {other:?}"),
    }
    assert!(matches!(store.probe().await, Err(ColdError::Denied { .. })));
}

/// GET of the filer's record of an object (weed keeps the SSE request header with it).
fn filer_metadata(weed: &SeaweedFs, path: &str) -> String {
    let addr = weed.filer_url().trim_start_matches("http://").to_owned();
    let mut conn = TcpStream::connect(&addr).expect("connect filer");
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        conn,
        "GET /buckets/{}/{path}?metadata=true HTTP/1.0\r\nHost: {addr}\r\n\r\n",
        testing::BUCKET
    )
    .expect("send");
    let mut text = String::new();
    conn.read_to_string(&mut text).expect("read");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_put_carries_the_configured_sse_header() {
    let weed = SeaweedFs::start().await;
    let aes = store_with(weed.backend_with(Sse::Aes256, None, None), "sse");
    let none = store_with(weed.backend_with(Sse::None, None, None), "sse");
    aes.put("aes", Bytes::from_static(b"secret"))
        .await
        .expect("put aes");
    aes.put("aes-big", common::pattern(5 * 1024 * 1024, 3))
        .await
        .expect("put big aes");
    none.put("plain", Bytes::from_static(b"plain"))
        .await
        .expect("put none");
    // The filer keeps request headers base64-encoded: "QUVTMjU2" is "AES256".
    const SSE_S3: &str = "\"X-Amz-Server-Side-Encryption\":\"QUVTMjU2\"";
    for key in ["aes", "aes-big"] {
        let meta = filer_metadata(&weed, &format!("sse/{key}"));
        assert!(meta.contains(SSE_S3), "{key} not SSE-S3: {meta}");
    }
    let meta = filer_metadata(&weed, "sse/plain");
    assert!(
        meta.contains("\"FullPath\":\"/buckets/ursula-test/sse/plain\""),
        "{meta}"
    );
    assert!(
        !meta.contains("X-Amz-Server-Side-Encryption"),
        "plain object has SSE: {meta}"
    );
    assert_eq!(aes.get("aes").await.expect("get"), "secret");
    assert_eq!(none.get("aes").await.expect("get via none"), "secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_store_is_unavailable_within_the_timeout_and_recovers_after_restart() {
    let mut weed = SeaweedFs::start().await;
    let timeout = Duration::from_secs(2);
    let store = store_with(weed.backend_with(Sse::Aes256, Some(timeout), Some(1)), "r");
    let body = common::pattern(100_000, 5);
    store.put("before", body.clone()).await.expect("put before");

    weed.kill();
    // Two attempts of at most `timeout` each, plus backoff; a refused connection fails at once.
    let bound = timeout * 2 + Duration::from_secs(2);
    for op in ["PUT", "GET", "LIST", "PROBE"] {
        let started = Instant::now();
        let result = match op {
            "PUT" => store.put("during", Bytes::from_static(b"x")).await,
            "GET" => store.get("before").await.map(|_| ()),
            "LIST" => store.list("").await.map(|_| ()),
            _ => store.probe().await,
        };
        let took = started.elapsed();
        eprintln!("{op} against a killed store failed after {took:?}");
        assert!(
            matches!(result, Err(ColdError::Unavailable { .. })),
            "{op}: {result:?}"
        );
        assert!(took < bound, "{op} took {took:?}");
    }

    weed.restart().await;
    eprintln!("weed mini restarted in {:?}", weed.startup_time());
    assert_eq!(
        store.get("before").await.expect("data kept across restart"),
        body
    );
    store
        .put("after", Bytes::from_static(b"y"))
        .await
        .expect("put after restart");
    assert_eq!(store.list("").await.expect("list"), ["after", "before"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_store_times_out_as_unavailable() {
    let weed = SeaweedFs::start().await;
    let timeout = Duration::from_secs(1);
    let store = store_with(weed.backend_with(Sse::Aes256, Some(timeout), Some(1)), "r");
    store.put("k", Bytes::from_static(b"x")).await.expect("put");

    weed.freeze();
    for op in ["PUT", "GET"] {
        let started = Instant::now();
        let result = match op {
            "PUT" => store.put("k2", Bytes::from_static(b"y")).await,
            _ => store.get("k").await.map(|_| ()),
        };
        let took = started.elapsed();
        eprintln!("{op} against a hung store failed after {took:?}");
        assert!(
            matches!(result, Err(ColdError::Unavailable { .. })),
            "{op}: {result:?}"
        );
        // At least one full attempt timed out; no more than two attempts plus backoff.
        assert!(took >= timeout, "{op} gave up after {took:?}");
        assert!(
            took < timeout * 2 + Duration::from_secs(2),
            "{op} took {took:?}"
        );
    }
    weed.thaw();
    store
        .put("k3", Bytes::from_static(b"z"))
        .await
        .expect("put after thaw");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_run_side_by_side() {
    let (a, b) = tokio::join!(SeaweedFs::start(), SeaweedFs::start());
    eprintln!(
        "two weed mini in parallel ready in {:?} and {:?}",
        a.startup_time(),
        b.startup_time()
    );
    assert_ne!(a.endpoint(), b.endpoint());
    let (sa, sb) = (a.store(""), b.store(""));
    sa.put("only-a", Bytes::from_static(b"a"))
        .await
        .expect("put a");
    sb.put("only-b", Bytes::from_static(b"b"))
        .await
        .expect("put b");
    assert_eq!(sa.list("").await.expect("list a"), ["only-a"]);
    assert_eq!(sb.list("").await.expect("list b"), ["only-b"]);
}

/// SeaweedFS without a KMS answers an SSE-KMS PUT with 500 InternalError. Besides recording that
/// (use `aes256` or `none` with it), this pins how a 5xx left after the retries is classified:
/// object_store keeps the status in a private type and only its message shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_left_after_the_retries_is_unavailable() {
    let weed = SeaweedFs::start().await;
    let kms = Sse::AwsKms { key_id: None };
    let store = store_with(weed.backend_with(kms, None, Some(0)), "kms");
    match store.put("k", Bytes::from_static(b"x")).await {
        Err(ColdError::Unavailable {
            op: "PUT", source, ..
        }) => {
            assert!(source.to_string().contains("500"), "{source}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}
