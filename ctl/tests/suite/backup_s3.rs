//! Backup locations on a real S3 server (SeaweedFS `weed mini`, `scripts/install-s3.sh`): the
//! `s3://bucket/prefix` location round-trips objects, and `ursulactl backup-verify` checks a
//! backup stored there, with its settings from the `AWS_*` environment.

use crate::harness::backup::*;
use ursula_cold::testing::ACCESS_KEY_ID;
use ursula_cold::testing::BUCKET;
use ursula_cold::testing::SECRET_ACCESS_KEY;
use ursula_cold::testing::SeaweedFs;
use ursula_ctl::location::Location;
use ursula_state::backup::object_key;

fn start() -> (tokio::runtime::Runtime, SeaweedFs) {
    // weed is started on a runtime of the test's own; the location drives its own one, and
    // must not be called from inside this one.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let weed = rt.block_on(SeaweedFs::start());
    (rt, weed)
}

fn env(weed: &SeaweedFs) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", weed.endpoint()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_owned()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[test]
fn an_s3_location_puts_gets_and_lists_keys_under_its_prefix() {
    let (_rt, weed) = start();
    let vars = env(&weed);
    let loc = Location::open_with(&format!("s3://{BUCKET}/backups/one/"), vars.clone())
        .expect("location");
    let other =
        Location::open_with(&format!("s3://{BUCKET}/backups/other"), vars).expect("location");
    assert_eq!(loc.list().expect("list"), Vec::<String>::new());
    loc.put("groups/group-00000.msgpack", b"zero".to_vec())
        .expect("put");
    loc.put("manifest.json", b"{}".to_vec()).expect("put");
    other.put("manifest.json", b"other".to_vec()).expect("put");
    assert_eq!(
        loc.get("groups/group-00000.msgpack").expect("get"),
        Some(b"zero".to_vec())
    );
    assert_eq!(loc.get("manifest.json").expect("get"), Some(b"{}".to_vec()));
    assert_eq!(loc.get("groups/nope").expect("get"), None);
    // Only this prefix's keys, relative to it.
    assert_eq!(
        loc.list().expect("list"),
        vec!["groups/group-00000.msgpack", "manifest.json"]
    );
    assert_eq!(
        other.get("manifest.json").expect("get"),
        Some(b"other".to_vec())
    );
}

#[test]
fn backup_verify_checks_a_backup_in_s3_from_the_aws_environment() {
    let (_rt, weed) = start();
    let vars = env(&weed);
    let spec = format!("s3://{BUCKET}/nightly/2026-12-01");
    let loc = Location::open_with(&spec, vars.clone()).expect("location");
    let m = write_backup(&loc, 3);

    let (code, out, err) = ctl(&["backup-verify", "--location", &spec], &vars);
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    let bytes: u64 = m.groups.iter().map(|g| g.size).sum();
    assert_eq!(
        out.trim(),
        format!("backup-verify: ok: 3 groups, {bytes} bytes, 6 streams at {spec}")
    );

    let mut obj = loc.get(&object_key(2)).expect("get").expect("object");
    obj[10] ^= 0xff;
    loc.put(&object_key(2), obj).expect("put");
    let err = verify_fails(&spec, &vars);
    assert!(err.contains("group 2: blake3"), "{err}");
}
